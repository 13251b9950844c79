"""The proxy server: forwards every request to the upstream and records chat completions.

Stream parsing and the CallRecord accounting are the client's own (`ChatClient._read_stream`,
`_parse_full`, `_finish`), fed with the bytes the proxy passes through, so a proxied call is
measured exactly like a call agentload makes itself. Each upstream chunk is written to the
caller before it is parsed: parsing never delays the caller.
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

from agentload.client.client import (
    CallError,
    CallResult,
    ChatClient,
    _Attempt,
    _Watchdog,
    classify_http_error,
)
from agentload.client.config import EndpointConfig
from agentload.client.record import CallRecord
from agentload.proxy.sessions import ProxySession, bearer_key, session_for, split_session_path
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


class _Tee:
    """The upstream stream as the client's parser reads it (`resp.content.iter_any()`), writing
    each chunk to the caller first; drops the usage-only event when the proxy asked for it."""

    __slots__ = ("_filter", "_it", "_out", "max_delay_ns", "write_error")

    def __init__(self, up: aiohttp.ClientResponse, out: web.StreamResponse, drop_usage: bool):
        self._it = up.content.iter_any().__aiter__()
        self._out = out
        self._filter = UsageFilter() if drop_usage else None
        self.max_delay_ns = 0
        self.write_error: BaseException | None = None

    @property
    def content(self) -> _Tee:
        return self

    def iter_any(self) -> _Tee:
        return self

    def __aiter__(self) -> _Tee:
        return self

    async def __anext__(self) -> bytes:
        try:
            raw = await self._it.__anext__()
        except StopAsyncIteration:
            if self._filter is not None:
                await self._write(_now_ns(), self._filter.flush())
            raise
        arrived = _now_ns()
        await self._write(arrived, raw if self._filter is None else self._filter.feed(raw))
        return raw

    async def _write(self, arrived: int, data: bytes) -> None:
        if data and self.write_error is None:
            try:
                await self._out.write(data)
            except (ConnectionError, aiohttp.ClientConnectionResetError) as e:
                # The caller went away: stop reading upstream (closes that connection too).
                self.write_error = e
                raise CallError("cancelled", "the caller closed the connection") from None
        delay = _now_ns() - arrived
        if delay > self.max_delay_ns:
            self.max_delay_ns = delay


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
        # The client's parser and accounting; it never sends anything itself.
        self._meter = ChatClient(EndpointConfig(name=config.endpoint, base_url=self.root, model=""))
        self._recorder: CallSink | None = None
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
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
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, cfg.host, cfg.port)
        await site.start()
        server = site._server
        if server is not None and self.port == 0:
            sockets = getattr(server, "sockets", None) or []
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

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        t_in = _now_ns()
        path_session, path = split_session_path(request.path)
        url = self.root + path + (f"?{request.query_string}" if request.query_string else "")
        if request.method == "POST" and path.endswith("/chat/completions"):
            body = await request.read()
            try:
                obj = orjson.loads(body)
            except orjson.JSONDecodeError:
                obj = None
            if isinstance(obj, dict):
                return await self._chat(request, url, obj, body, path_session, t_in)
            return await self._forward(request, url, body)
        return await self._forward(
            request, url, await request.read() if request.can_read_body else None
        )

    async def _forward(
        self, request: web.Request, url: str, body: bytes | None
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
        request: web.Request,
        url: str,
        obj: dict[str, Any],
        body: bytes,
        path_session: str | None,
        t_in: int,
    ) -> web.StreamResponse:
        assert self._session is not None and self._recorder is not None
        sid = session_for(request.headers, path_session)
        key = bearer_key(request.headers)
        if key:
            self._recorder.add_secrets(key)
        stream = obj.get("stream") is True
        opts = obj.get("stream_options")
        asked_usage = isinstance(opts, dict) and bool(opts.get("include_usage"))
        inject = stream and not asked_usage
        if inject:
            obj = dict(obj)
            obj["stream_options"] = {
                **(opts if isinstance(opts, dict) else {}),
                "include_usage": True,
            }
            body = orjson.dumps(obj)
        raw_messages, raw_tools = obj.get("messages"), obj.get("tools")
        messages: list[Any] = raw_messages if isinstance(raw_messages, list) else []
        tools: list[Any] = raw_tools if isinstance(raw_tools, list) else []
        session = self.sessions.get(sid)
        if session is None:
            session = self.sessions[sid] = ProxySession(sid)
        model = obj.get("model")
        rec = CallRecord(
            call_id=f"p-{next(self._ids)}",
            session_id=sid,
            role=request.headers.get(ROLE_HEADER) or "agent",
            endpoint=self.config.endpoint,
            model=model if isinstance(model, str) else "",
            turn=session.calls,
            stream=stream,
            started_at=time.time(),
        )
        result = CallResult(rec)
        acc = _Attempt((key,) if key else ())
        err: CallError | None = None
        hdrs = _forward_headers(request.headers, identity=True)
        out: web.StreamResponse | None = None
        tee: _Tee | None = None
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        t_send = _now_ns()
        forward_ns = t_send - t_in
        rec.start_ns = t_send
        cancelled = False
        try:
            async with self._session.post(url, data=body, headers=hdrs) as up:
                acc.headers_ns = _now_ns()
                out = web.StreamResponse(status=up.status, reason=up.reason)
                out.headers.extend(_forward_headers(up.headers, identity=False))
                if up.status != 200 or not stream:
                    raw = await up.read()
                    arrived = _now_ns()
                    out.content_length = len(raw)
                    await out.prepare(request)
                    await out.write(raw)
                    await out.write_eof()
                    tee_delay = _now_ns() - arrived
                    if up.status != 200:
                        err = classify_http_error(up.status, raw, acc.secrets)
                    else:
                        try:
                            self._meter._parse_full(raw, acc)
                        except CallError as e:
                            err = e
                else:
                    await out.prepare(request)
                    tee = _Tee(up, out, drop_usage=inject)
                    dog = _Watchdog(loop, task, t_send, None, None, None)
                    try:
                        await self._meter._read_stream(tee, acc, dog)  # type: ignore[arg-type]
                    except CallError as e:
                        err = e
                        if tee.write_error is None:
                            # Malformed for our parser, but the caller still gets every byte.
                            async for _ in tee:
                                pass
                    if tee.write_error is None:
                        await out.write_eof()
                    tee_delay = tee.max_delay_ns
        except asyncio.CancelledError:
            cancelled = True
            err = CallError("cancelled", "the caller closed the connection")
            tee_delay = 0
        except aiohttp.ClientConnectorError as e:
            err = CallError("connect_error", str(e))
            tee_delay = 0
        except (aiohttp.ClientError, ConnectionError) as e:
            got = acc.headers_ns is not None
            if out is not None and out.prepared and request.transport is not None:
                # The upstream broke mid-reply: break the caller's connection too, so it sees
                # the failure instead of a reply that merely looks short.
                request.transport.abort()
            err = CallError(
                "malformed_stream" if got else "connect_error", f"{type(e).__name__}: {e}"
            )
            tee_delay = 0
        except CallError as e:
            err = e
            tee_delay = 0
        rec.end_ns = _now_ns()
        rec.total_s = (rec.end_ns - rec.start_ns) / 1e9
        try:
            self._meter._finish(rec, result, acc, err, messages, tools or None, False)
        except Exception as e:  # never lose the record, even to a bug in the accounting
            rec.status, rec.error_kind = "error", "client_error"
            rec.error_message = f"{type(e).__name__}: {e}"
        self.calls += 1
        self.forward_s.append(forward_ns / 1e9)
        self.chunk_s.append(tee_delay / 1e9)
        self.overhead_s.append((forward_ns + tee_delay) / 1e9)
        self._recorder.record_call(rec)
        session.add(rec, messages, tools, result.message() if rec.status == "ok" else None)
        if cancelled:
            raise asyncio.CancelledError
        if out is None:
            return _bad_gateway(err.message if err else "no reply from the upstream")
        return out


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
