"""The proxy server: forwards every request to the upstream and records chat completions.

Each upstream chunk is written to the caller as it arrives, unchanged (less the usage-only
event when the proxy asked for usage itself); on the way the proxy only notes the chunk and its
arrival time. Parsing and the CallRecord (`agentload.proxy.meter`, with the client's metric
definitions) happen once the caller has the whole reply, so they never delay it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

import aiohttp
import orjson
from aiohttp import web
from multidict import CIMultiDict

from agentload.client.record import CallRecord
from agentload.client.safety import redact
from agentload.proxy.meter import (
    Answer,
    Failure,
    finish_record,
    http_failure,
    parse_body,
    parse_stream,
)
from agentload.proxy.sessions import ProxySession, bearer_key, session_for, split_session_path
from agentload.proxy.upstream import Pool, Reply, UpstreamError
from agentload.results.recorder import Recorder
from agentload.stats import percentile_sorted
from agentload.wire import ROLE_HEADER

log = logging.getLogger("agentload.proxy")
_now_ns = time.perf_counter_ns

# Hop-by-hop headers (RFC 9110 7.6.1) and those aiohttp sets itself: never copied across.
_HOP = frozenset(
    h.lower()
    for h in (
        "Connection",
        "Keep-Alive",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "TE",
        "Trailer",
        "Transfer-Encoding",
        "Upgrade",
        "Host",
        "Content-Length",
    )
)
_DONE_TAIL = b"data: [DONE]\n\n"
# One SSE event and the blank line that ends it.
_EVENT = re.compile(rb"(.*?)(\r\n\r\n|\n\n|\r\r)", re.S)


class CallSink(Protocol):
    """Where proxied calls go instead of the proxy's own results folder (the `external`
    workload hands them to its run's recorder)."""

    def record_call(self, rec: CallRecord) -> None: ...

    def add_secrets(self, secrets: Any) -> None: ...


@dataclass
class ProxyConfig:
    upstream: str
    """Root URL of the server to forward to (`http://host:8000`; a trailing `/v1` is fine)."""
    out: Path
    host: str = "127.0.0.1"
    port: int = 0
    endpoint: str = "upstream"
    overwrite: bool = False
    max_connections: int = 1000


def _upstream_root(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"--upstream {url!r}: expected http(s)://host[:port][/path]")
    path = parts.path.rstrip("/")
    # Callers send /v1/...; an upstream given as .../v1 must not become /v1/v1/...
    if path.endswith("/v1"):
        path = path[:-3]
    return f"{parts.scheme}://{parts.netloc}{path}"


def _forward_headers(headers: Any, *, identity: bool) -> CIMultiDict[str]:
    out: CIMultiDict[str] = CIMultiDict()
    for k, v in headers.items():
        lk = k.lower()
        if lk in _HOP or (identity and lk == "accept-encoding"):
            continue
        out.add(k, v)
    return out


def _usage_only(event: bytes) -> bool:
    """Whether one SSE event is the usage-only chunk a stream ends with (`choices: []`)."""
    data = b"\n".join(
        line[5:].lstrip(b" ") for line in event.splitlines() if line.startswith(b"data:")
    )
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return isinstance(obj, dict) and obj.get("choices") == [] and obj.get("usage") is not None


class UsageFilter:
    """Passes an SSE stream on, whole events only, without its usage-only events."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, raw: bytes) -> bytes:
        # Only whole events are passed on, so the usage event can be recognised and dropped;
        # servers send event-aligned chunks, so this holds nothing back in practice.
        buf = self._pending + raw if self._pending else raw
        if b"\r" in buf:
            end = 0
            for sep in (b"\n\n", b"\r\n\r\n", b"\r\r"):
                i = buf.rfind(sep)
                if i >= 0:
                    end = max(end, i + len(sep))
        else:
            end = buf.rfind(b"\n\n") + 2
            if end < 2:
                end = 0
        head, self._pending = buf[:end], buf[end:]
        if b'"usage"' not in head:
            return head
        return _drop_usage_events(head)

    def flush(self) -> bytes:
        """What is left when the stream ends (an unterminated event), unchanged."""
        rest, self._pending = self._pending, b""
        return rest


def _drop_usage_events(head: bytes) -> bytes:
    """`head` (whole SSE events) without its usage-only events."""
    if b"\r" in head:  # rare line endings: the general path
        return b"".join(
            m.group(0)
            for m in _EVENT.finditer(head)
            if not (b'"usage"' in m.group(1) and _usage_only(m.group(1)))
        )
    # Usually one event mentions usage, the last but one: look only around each mention.
    parts: list[bytes] = []
    done = 0
    pos = head.find(b'"usage"')
    while pos >= 0:
        start = head.rfind(b"\n\n", done, pos)
        start = done if start < 0 else start + 2
        stop = head.find(b"\n\n", pos)
        stop = len(head) if stop < 0 else stop + 2
        if _usage_only(head[start:stop]):
            parts.append(head[done:start])
            done = stop
        pos = head.find(b'"usage"', stop)
    parts.append(head[done:])
    return b"".join(parts)


def _quantiles(values_s: list[float]) -> dict[str, Any]:
    s = sorted(values_s)
    if not s:
        return {"count": 0, "mean": None, "p50": None, "p99": None, "max": None}
    return {
        "count": len(s),
        "mean": sum(s) / len(s),
        "p50": percentile_sorted(s, 0.5),
        "p99": percentile_sorted(s, 0.99),
        "max": s[-1],
    }


class ProxyServer:
    """`async with ProxyServer(cfg) as proxy:` serves on `proxy.url` until the block ends, then
    writes the session records, trajectories, summary.json and the report into `cfg.out`."""

    def __init__(self, config: ProxyConfig, sink: CallSink | None = None) -> None:
        """With a `sink`, calls go to it as they end and `config.out` is not written."""
        self.config = config
        self._sink = sink
        self.root = _upstream_root(config.upstream)
        self.run_id = f"proxy-{uuid.uuid4().hex[:8]}"
        self.port = config.port
        self.sessions: dict[str, ProxySession] = {}
        self.overhead_s: list[float] = []
        self.forward_s: list[float] = []
        self.chunk_s: list[float] = []
        self.calls = 0
        self._ids = itertools.count(1)
        self._prefix = urlsplit(self.root).path  # the upstream's path before /v1/...
        self._pool: Pool | None = None
        self._recorder: CallSink | None = None
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.ServerRunner | None = None
        self._started_at = 0.0

    @property
    def url(self) -> str:
        return f"http://{self.config.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    async def start(self) -> ProxyServer:
        cfg = self.config
        if self._sink is not None:
            self._recorder = self._sink
        else:
            own = self._recorder = Recorder(cfg.out, overwrite=cfg.overwrite)
            own.write_config({"proxy": {"upstream": self.root, "host": cfg.host, "port": cfg.port}})
        self._started_at = time.time()
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=cfg.max_connections, ttl_dns_cache=300),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
            auto_decompress=False,  # other paths pass through byte for byte
            skip_auto_headers=("User-Agent", "Accept-Encoding"),
            read_bufsize=1 << 18,
        )
        # Chat completions, the hot path, go through the proxy's own pool (proxy.upstream).
        self._pool = Pool(self.root, limit=cfg.max_connections)
        # aiohttp's low-level server: one handler for every path, without the application's
        # router, middlewares and signals, which a pass-through does not use.
        server = _Server(self._handle, access_log=None)
        self._runner = web.ServerRunner(server, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, cfg.host, cfg.port)
        await site.start()
        listener = site._server
        if listener is not None and self.port == 0:
            sockets = getattr(listener, "sockets", None) or []
            self.port = sockets[0].getsockname()[1]
        return self

    async def stop(self) -> dict[str, Any]:
        """Stop serving and write the session records and the summary; returns the summary."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        return self._finish_results()

    async def __aenter__(self) -> ProxyServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def overhead(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "overhead_s": _quantiles(self.overhead_s),
            "forward_s": _quantiles(self.forward_s),
            "chunk_s": _quantiles(self.chunk_s),
        }

    def _finish_results(self) -> dict[str, Any]:
        rec = self._recorder
        self._recorder = None
        if not isinstance(rec, Recorder):  # none, or a sink that keeps its own records
            return {}
        from agentload.report.build import write_report
        from agentload.results.summary import summarize, write_summary

        try:
            for s in self.sessions.values():
                rec.record_episode(*s.records(self.run_id))
            proxy = {"upstream": self.root, "sessions": len(self.sessions), **self.overhead()}
            rec.write_meta(
                {
                    "run_id": self.run_id,
                    "kind": "proxy",
                    "started_at": self._started_at,
                    "ended_at": time.time(),
                    "proxy": proxy,
                }
            )
        finally:
            rec.close()
        summary = summarize(self.config.out)
        summary["proxy"] = proxy
        write_summary(self.config.out, summary)
        write_report(self.config.out, summary)
        return summary

    # -- requests -----------------------------------------------------------------------

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        t_in = _now_ns()
        path_session, path = split_session_path(request.path)
        query = request.query_string
        path_qs = f"{path}?{query}" if query else path
        if request.method == "POST" and path.endswith("/chat/completions"):
            body = await request.read()
            try:
                obj = orjson.loads(body)
            except orjson.JSONDecodeError:
                obj = None
            if isinstance(obj, dict):
                return await self._chat(
                    request, self._prefix + path_qs, obj, body, path_session, t_in
                )
            return await self._forward(request, self.root + path_qs, body)
        return await self._forward(
            request, self.root + path_qs, await request.read() if request.can_read_body else None
        )

    async def _forward(
        self, request: web.BaseRequest, url: str, body: bytes | None
    ) -> web.StreamResponse:
        """Any other request: status, headers and body passed through as they come."""
        assert self._session is not None
        hdrs = _forward_headers(request.headers, identity=False)
        try:
            async with self._session.request(
                request.method, url, data=body, headers=hdrs, allow_redirects=False
            ) as up:
                out = web.StreamResponse(status=up.status, reason=up.reason)
                out.headers.extend(_forward_headers(up.headers, identity=False))
                if up.content_length is not None:
                    out.content_length = up.content_length
                await out.prepare(request)
                async for chunk in up.content.iter_any():
                    await out.write(chunk)
                await out.write_eof()
                return out
        except aiohttp.ClientConnectorError as e:
            return _bad_gateway(f"upstream unreachable: {e}")

    async def _chat(
        self,
        request: web.BaseRequest,
        target: str,
        obj: dict[str, Any],
        body: bytes,
        path_session: str | None,
        t_in: int,
    ) -> web.StreamResponse:
        assert self._recorder is not None
        sid = session_for(request.headers, path_session)
        key = bearer_key(request.headers)
        if key:
            self._recorder.add_secrets(key)
        secrets = (key,) if key else ()
        stream = obj.get("stream") is True
        body, inject = _with_usage(obj, body) if stream else (body, False)
        model = obj.get("model")
        rec = CallRecord(
            call_id=f"p-{next(self._ids)}",
            session_id=sid,
            role=request.headers.get(ROLE_HEADER) or "agent",
            endpoint=self.config.endpoint,
            model=model if isinstance(model, str) else "",
            stream=stream,
            started_at=time.time(),
        )
        pass_ = _Pass(request, inject)
        rec.start_ns = _now_ns()
        forward_ns = rec.start_ns - t_in
        err: Failure | None = None
        cancelled = False
        try:
            await self._exchange(target, body, pass_)
        except asyncio.CancelledError:
            cancelled = True
            err = Failure("cancelled", "the caller closed the connection")
        except Failure as e:
            err = e
        rec.end_ns = _now_ns()
        rec.headers_ns = pass_.headers_ns
        # Everything below runs after the caller has the whole reply.
        self._account(rec, pass_, err, obj, secrets, sid)
        self.forward_s.append(forward_ns / 1e9)
        self.chunk_s.append(pass_.max_delay_ns / 1e9)
        self.overhead_s.append((forward_ns + pass_.max_delay_ns) / 1e9)
        if cancelled:
            raise asyncio.CancelledError
        if pass_.out is None:
            return _bad_gateway(err.message if err else "no reply from the upstream")
        return pass_.out

    async def _exchange(self, target: str, body: bytes, p: _Pass) -> None:
        """Send the request upstream and pass the reply back; raises Failure."""
        assert self._pool is not None
        hdrs = _forward_headers(p.request.headers, identity=True)
        try:
            up = await self._pool.request("POST", target, hdrs.items(), body)
        except UpstreamError as e:
            raise Failure(e.kind, e.message) from None
        try:
            p.headers_ns = _now_ns()
            p.status = up.status
            p.sse = up.content_type == "text/event-stream"
            out = p.out = web.StreamResponse(status=up.status, reason=up.reason)
            out.headers.extend(up.headers)
            if up.status != 200 or not p.sse:
                raw = await up.read()
                arrived = _now_ns()
                p.add(raw, arrived)
                out.content_length = len(raw)
                await out.prepare(p.request)
                await p.write(raw, arrived, last=True)
            else:
                await out.prepare(p.request)
                await self._stream(up, p)
        except (UpstreamError, ConnectionError) as e:
            if p.out is not None and p.out.prepared and p.request.transport is not None:
                # The upstream broke mid-reply: break the caller's connection too, so it sees
                # the failure instead of a reply that merely looks short.
                p.request.transport.abort()
            raise Failure("malformed_stream", str(e) or type(e).__name__) from None
        finally:
            up.release()  # pooled when read to its end; closed otherwise (caller gone)

    async def _stream(self, up: Reply, p: _Pass) -> None:
        """Each upstream chunk to the caller as it arrives. The chunk that ends with `[DONE]`
        (the last event of a stream) goes out with the end of the reply: one socket write
        instead of two, and the whole reply in one when it arrives in one read."""
        filt = UsageFilter() if p.inject else None
        held, held_at = b"", 0
        async for raw in up.chunks():
            arrived = _now_ns()
            p.add(raw, arrived)
            data = raw if filt is None else filt.feed(raw)
            if held:  # more came after [DONE]: pass on what was held first
                await p.write(held, held_at)
                held = b""
            if raw.endswith(_DONE_TAIL):
                held, held_at = data, arrived
            else:
                await p.write(data, arrived)
        if filt is not None:
            held += filt.flush()
        await p.write(held, held_at or _now_ns(), last=True)

    def _account(
        self,
        rec: CallRecord,
        p: _Pass,
        err: Failure | None,
        obj: dict[str, Any],
        secrets: tuple[str, ...],
        sid: str,
    ) -> None:
        """Parse what passed through, complete the record and the session; never raises."""
        assert self._recorder is not None
        raw_messages, raw_tools = obj.get("messages"), obj.get("tools")
        messages: list[Any] = raw_messages if isinstance(raw_messages, list) else []
        tools: list[Any] = raw_tools if isinstance(raw_tools, list) else []
        session = self.sessions.get(sid)
        if session is None:
            session = self.sessions[sid] = ProxySession(sid)
        rec.turn = session.calls
        ans = Answer()
        try:
            if err is None and p.status is not None and p.status != 200:
                err = http_failure(p.status, b"".join(p.chunks), secrets)
            elif err is None and p.sse:
                ans, err = parse_stream(p.chunks, p.times, secrets)
            elif err is None:
                ans, err = parse_body(b"".join(p.chunks), p.times[-1] if p.times else 0, secrets)
            elif p.sse and p.chunks:
                ans, _ = parse_stream(p.chunks, p.times, secrets)  # tokens before the failure
            finish_record(rec, ans, err, messages, tools or None)
        except Exception as e:  # never lose the record, even to a bug in the accounting
            rec.status, rec.error_kind = "error", "client_error"
            rec.error_message = f"{type(e).__name__}: {e}"
        if rec.error_message and secrets:
            rec.error_message = redact(rec.error_message, secrets)
        self.calls += 1
        self._recorder.record_call(rec)
        session.add(rec, messages, tools, ans.message(rec.call_id) if rec.ok else None)


class _Pass:
    """One reply on its way back: the caller's response, and each upstream chunk with its
    arrival time (kept for parsing after the reply is written, never parsed on the way)."""

    __slots__ = (
        "chunks",
        "headers_ns",
        "inject",
        "max_delay_ns",
        "out",
        "request",
        "sse",
        "status",
        "times",
    )

    def __init__(self, request: web.BaseRequest, inject: bool) -> None:
        self.request = request
        self.inject = inject
        self.out: web.StreamResponse | None = None
        self.status: int | None = None
        self.sse = False
        self.headers_ns: int | None = None
        self.chunks: list[bytes] = []
        self.times: list[int] = []
        self.max_delay_ns = 0

    def add(self, raw: bytes, arrived: int) -> None:
        self.chunks.append(raw)
        self.times.append(arrived)

    async def write(self, data: bytes, arrived: int, *, last: bool = False) -> None:
        """Pass `data` (which arrived at `arrived`) on; `last` ends the reply with it."""
        assert self.out is not None
        if data or last:
            try:
                await (self.out.write_eof(data) if last else self.out.write(data))
            except (ConnectionError, aiohttp.ClientConnectionResetError):
                # The caller went away: stop reading upstream (closes that connection too).
                raise Failure("cancelled", "the caller closed the connection") from None
        delay = _now_ns() - arrived
        if delay > self.max_delay_ns:
            self.max_delay_ns = delay


def _with_usage(obj: dict[str, Any], body: bytes) -> tuple[bytes, bool]:
    """The request body asking for usage in the stream, and whether the proxy added it."""
    opts = obj.get("stream_options")
    if isinstance(opts, dict) and opts.get("include_usage"):
        return body, False
    if "stream_options" not in obj:
        # The object was parsed from `body`, so it starts with "{" and has a key ("stream"):
        # splice the option in rather than serialising the whole request again.
        head = body.lstrip()
        return b'{"stream_options":{"include_usage":true},' + head[1:], True
    new = dict(obj)
    new["stream_options"] = {**(opts if isinstance(opts, dict) else {}), "include_usage": True}
    return orjson.dumps(new), True


class _Server(web.Server):
    """The low-level server with a request body limit fit for long agent contexts (1 GiB)."""

    def _make_request(
        self, message: Any, payload: Any, protocol: Any, writer: Any, task: Any
    ) -> web.BaseRequest:
        return web.BaseRequest(
            message, payload, protocol, writer, task, self._loop, client_max_size=1 << 30
        )


def _bad_gateway(message: str) -> web.Response:
    body = {"error": {"message": message, "type": "bad_gateway", "code": 502}}
    return web.json_response(body, status=502)


async def serve(config: ProxyConfig, duration_s: float | None = None) -> dict[str, Any]:
    """Run until `duration_s` passes or the task is cancelled (Ctrl-C); returns the summary."""
    proxy = ProxyServer(config)
    await proxy.start()
    print(f"agentload proxy: {proxy.base_url} -> {proxy.root}", flush=True)
    try:
        if duration_s is None:
            await asyncio.Event().wait()
        else:
            await asyncio.sleep(duration_s)
    except asyncio.CancelledError:
        pass
    finally:
        with contextlib.suppress(asyncio.CancelledError):
            summary = await asyncio.shield(proxy.stop())
    return summary
