"""The proxy server: forwards every request to the upstream and records chat completions.

Each read of the upstream's reply is written to the caller as it arrives, in one socket write
and unchanged (less the usage-only event when the proxy asked for usage itself); on the way the
proxy only notes the bytes and their arrival time. Parsing and the CallRecord
(`agentload.proxy.meter`, with the client's metric definitions) happen once the caller has
the whole reply, so they never delay it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import re
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

import aiohttp
import orjson
from multidict import CIMultiDict

from agentload.client.errors import classify_http_error
from agentload.client.record import CallRecord
from agentload.client.safety import redact, split_userinfo
from agentload.http_limits import (
    DEFAULT_MAX_BODY,
    ConnectionCap,
    ServiceLimits,
    connection_budget,
)
from agentload.http_sessions import open_session
from agentload.proxy.caller import (
    Caller,
    ProxyRequest,
    chunk,
    close_callers,
    reply_head,
    serve_callers,
)
from agentload.proxy.meter import (
    Answer,
    Failure,
    finish_record,
    parse_body,
    parse_stream,
)
from agentload.proxy.sessions import ProxySession, bearer_key, session_for, split_session_path
from agentload.proxy.upstream import REPLY_SKIP, REQUEST_SKIP, Http1Error, RelayPool, UpstreamConn
from agentload.redact import redact_url, url_secrets
from agentload.report.build import write_report
from agentload.results.recorder import Recorder
from agentload.results.records import ProxyBlock, Summary
from agentload.results.summary import summarize, write_summary
from agentload.stats import percentile_sorted
from agentload.wire import ROLE_HEADER

log = logging.getLogger("agentload.proxy")
_now_ns = time.perf_counter_ns

_LAST_CHUNK = b"0\r\n\r\n"
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
    """Upstream connections at most (calls in flight)."""
    max_body_bytes: int = DEFAULT_MAX_BODY
    """Largest request body taken (413 beyond it, before it is read); long agent contexts
    fit."""
    max_callers: int = 4096
    """Open caller connections at most (lowered to fit the file descriptors; see
    `agentload.http_limits`)."""
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keepalive_timeout_s: float = 75.0


def upstream_root(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"--upstream {redact_url(url)!r}: expected http(s)://host[:port][/path]")
    path = parts.path.rstrip("/")
    # Callers send /v1/...; an upstream given as .../v1 must not become /v1/v1/...
    if path.endswith("/v1"):
        path = path[:-3]
    return f"{parts.scheme}://{parts.netloc}{path}"


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
        self.root = upstream_root(config.upstream)
        self.run_id = f"proxy-{uuid.uuid4().hex[:8]}"
        self.port = config.port
        self.sessions: dict[str, ProxySession] = {}
        self.overhead_s: list[float] = []
        self.forward_s: list[float] = []
        self.chunk_s: list[float] = []
        self.calls = 0
        self._ids = itertools.count(1)
        self._prefix = urlsplit(self.root).path  # the upstream's path before /v1/...
        self._pool: RelayPool | None = None
        self._recorder: CallSink | None = None
        self._session: aiohttp.ClientSession | None = None
        self._listener: asyncio.Server | None = None
        self._callers: set[Caller] = set()
        self._started_at = 0.0
        self.cap: ConnectionCap | None = None

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
            own.add_secrets(url_secrets(self.root))
        self._started_at = time.time()
        # Other paths (models, metrics, health...) go upstream through aiohttp's client.
        self._session = open_session(
            total_s=None,
            connect_s=30,
            limit=cfg.max_connections,
            dns_cache_s=300,
            decompress=False,  # other paths pass through byte for byte
            skip_headers=("User-Agent", "Accept-Encoding"),
            read_bufsize=1 << 18,
        )
        # Chat completions, the hot path, on the client's HTTP/1.1 connections (proxy.upstream).
        self._pool = RelayPool(self.root, limit=cfg.max_connections)
        limits = ServiceLimits(
            header_timeout_s=cfg.header_timeout_s,
            body_timeout_s=cfg.body_timeout_s,
            keepalive_timeout_s=cfg.keepalive_timeout_s,
            max_body_bytes=cfg.max_body_bytes,
        )
        # A proxied call holds two descriptors: the caller's connection and the upstream's.
        self.cap = ConnectionCap(connection_budget(cfg.max_callers, 2))
        self._listener = await serve_callers(
            self._handle, cfg.host, cfg.port, cfg.max_body_bytes, self._callers, limits, self.cap
        )
        if self.port == 0:
            self.port = self._listener.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> Summary | None:
        """Stop serving and write the session records and the summary; returns the summary
        (None when the records go to a sink of the caller's)."""
        if self._listener is not None:
            listener, self._listener = self._listener, None
            await close_callers(listener, self._callers, grace_s=5.0)
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

    def _finish_results(self) -> Summary | None:
        rec = self._recorder
        self._recorder = None
        if not isinstance(rec, Recorder):  # none, or a sink that keeps its own records
            return None

        try:
            for s in self.sessions.values():
                rec.record_episode(*s.records(self.run_id))
            proxy = {
                "upstream": redact_url(self.root),
                "sessions": len(self.sessions),
                **self.overhead(),
            }
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
        summary = summarize(self.config.out).model_copy(update={"proxy": ProxyBlock(**proxy)})
        write_summary(self.config.out, summary)
        write_report(self.config.out, summary)
        return summary

    # -- requests -----------------------------------------------------------------------

    def _prepare(self, req: ProxyRequest, path_session: str | None) -> None:
        """A hook to change a request before it goes anywhere (headers of an episode)."""

    async def _handle(self, req: ProxyRequest, caller: Caller) -> None:
        t_in = req.arrived_ns
        path, _, query = req.target.partition("?")
        path_session, path = split_session_path(path)
        self._prepare(req, path_session)
        path_qs = f"{path}?{query}" if query else path
        if req.method == "POST" and path.endswith("/chat/completions"):
            try:
                obj = orjson.loads(req.body)
            except orjson.JSONDecodeError:
                obj = None
            if isinstance(obj, dict):
                await self._chat(req, caller, self._prefix + path_qs, obj, path_session, t_in)
                return
        await self._forward(req, caller, self.root + path_qs)

    async def _forward(self, req: ProxyRequest, caller: Caller, url: str) -> None:
        """Any other request: status, headers and body passed through as they come."""
        assert self._session is not None
        hdrs: CIMultiDict[str] = CIMultiDict()
        for k, v in req.headers:
            if k.lower() not in REQUEST_SKIP:
                hdrs.add(k.decode("latin-1"), v.decode("latin-1"))
        # aiohttp refuses URL credentials next to an Authorization header: the upstream's
        # `user:pass@` goes as a Basic header, unless the caller sent its own.
        url, basic = split_userinfo(url)
        if basic is not None and "Authorization" not in hdrs:
            hdrs["Authorization"] = basic
        started = False
        try:
            async with self._session.request(
                req.method, url, data=req.body or None, headers=hdrs, allow_redirects=False
            ) as up:
                raw = [(k, v) for k, v in up.raw_headers if k.lower() not in REPLY_SKIP]
                length = up.content_length
                close = not req.keep_alive
                if req.method == "HEAD" or up.status in (204, 304) or up.status < 200:
                    # No body; a HEAD reply still says the length its GET would have.
                    framing = b"Content-Length: %d\r\n" % length if length is not None else b""
                    caller.write(reply_head(up.status, raw, framing, close=close, reason=up.reason))
                    return
                chunked = length is None and req.http11
                if chunked:
                    framing = b"Transfer-Encoding: chunked\r\n"
                elif length is not None:
                    framing = b"Content-Length: %d\r\n" % length
                else:  # an HTTP/1.0 caller: the body ends with the connection
                    framing, close = b"", True
                caller.write(reply_head(up.status, raw, framing, close=close, reason=up.reason))
                started = True
                async for data in up.content.iter_any():
                    caller.write(chunk(data) if chunked else data)
                    await caller.drain()
                if chunked:
                    caller.write(_LAST_CHUNK)
                if close:
                    caller.close()
        except aiohttp.ClientConnectorError as e:
            _bad_gateway(caller, f"upstream unreachable: {e}", close=not req.keep_alive)
        except (aiohttp.ClientError, ConnectionError) as e:
            if started:  # the reply broke midway: so does the caller's connection
                caller.abort()
            else:
                _bad_gateway(caller, f"upstream failed: {e}", close=not req.keep_alive)

    async def _chat(
        self,
        req: ProxyRequest,
        caller: Caller,
        target: str,
        obj: dict[str, Any],
        path_session: str | None,
        t_in: int,
    ) -> None:
        assert self._recorder is not None and self._pool is not None
        headers = req.view()
        sid = session_for(headers, path_session)
        key = bearer_key(headers)
        if key:
            self._recorder.add_secrets(key)
        secrets = (key,) if key else ()
        stream = obj.get("stream") is True
        body, inject = _with_usage(obj, req.body) if stream else (req.body, False)
        model = obj.get("model")
        rec = CallRecord(
            call_id=f"p-{next(self._ids)}",
            session_id=sid,
            role=headers.get(ROLE_HEADER) or "agent",
            endpoint=self.config.endpoint,
            model=model if isinstance(model, str) else "",
            stream=stream,
            started_at=time.time(),
        )
        # The meter parses the reply, so it must come back uncompressed.
        fwd = [
            (k, v)
            for k, v in req.headers
            if (low := k.lower()) not in REQUEST_SKIP and low != b"accept-encoding"
        ]
        wire = self._pool.encode("POST", target, fwd, body)
        relay = _Pass(caller, inject, close=not req.keep_alive, http11=req.http11)
        rec.start_ns = _now_ns()
        forward_ns = rec.start_ns - t_in
        err, cancelled = await self._exchange(wire, relay)
        rec.end_ns = _now_ns()
        rec.headers_ns = relay.headers_ns
        # Everything below runs after the caller has the whole reply.
        self._account(rec, relay, err, obj, secrets, sid)
        self.forward_s.append(forward_ns / 1e9)
        self.chunk_s.append(relay.max_delay_ns / 1e9)
        self.overhead_s.append((forward_ns + relay.max_delay_ns) / 1e9)
        if cancelled:
            raise asyncio.CancelledError
        if not relay.started:
            _bad_gateway(caller, err.message if err else "no reply", close=not req.keep_alive)
        elif relay.must_close:
            caller.close()

    async def _exchange(self, wire: bytes, relay: _Pass) -> tuple[Failure | None, bool]:
        """Send the request upstream; the reply reaches the caller through `relay`.
        Returns the failure, if any, and whether the caller cancelled the call."""
        assert self._pool is not None
        try:
            await self._pool.send(wire, relay)
            relay.finish()
        except asyncio.CancelledError:
            return Failure("cancelled", "the caller closed the connection"), True
        except Http1Error as e:
            if relay.started:
                # The upstream broke mid-reply: break the caller's connection too, so it sees
                # the failure instead of a reply that merely looks short.
                relay.caller.abort()
            return Failure(e.kind, e.message), False
        except ConnectionError:  # raised by the relay: the caller went away mid-reply
            return Failure("cancelled", "the caller closed the connection"), False
        finally:
            relay.caller.feeding = None
        return None, False

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
                err = classify_http_error(p.status, b"".join(p.chunks), secrets)
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
    """One reply on its way back. Each upstream read is written to the caller at once, in one
    write, from inside the upstream connection's `data_received`; the bytes and their arrival
    time are kept for parsing after the reply is written, never parsed on the way."""

    __slots__ = (
        "caller",
        "chunked",
        "chunks",
        "close",
        "ended",
        "filt",
        "headers_ns",
        "http11",
        "inject",
        "max_delay_ns",
        "must_close",
        "sse",
        "started",
        "status",
        "times",
    )

    def __init__(self, caller: Caller, inject: bool, *, close: bool, http11: bool) -> None:
        self.caller = caller
        self.inject = inject
        self.close = close  # the caller asked for the connection to end with this reply
        self.http11 = http11
        self.filt: UsageFilter | None = None
        self.status: int | None = None
        self.sse = False
        self.started = False  # the reply's head went to the caller
        self.ended = False  # and its end
        self.chunked = False
        self.must_close = False
        self.headers_ns: int | None = None
        self.chunks: list[bytes] = []
        self.times: list[int] = []
        self.max_delay_ns = 0

    def relay(self, conn: UpstreamConn, body: bytes, now: int) -> None:
        if body:
            self.chunks.append(body)
            self.times.append(now)
        if not self.started:
            out = self._head(conn, body)
        else:
            data = self._filter(body, conn.complete)
            if self.chunked:
                out = chunk(data) + _LAST_CHUNK if conn.complete else chunk(data)
            else:
                out = data
        if out:
            self.caller.write(out)
        if conn.complete:
            self.ended = True
            # The upstream connection goes back to the pool: never leave it paused.
            if self.caller.paused and conn.transport is not None:
                conn.transport.resume_reading()
        delay = _now_ns() - now
        if delay > self.max_delay_ns:
            self.max_delay_ns = delay

    def _head(self, conn: UpstreamConn, body: bytes) -> bytes:
        """The reply's head and what came with it, framed for the caller."""
        self.started = True
        self.status = status = conn.status
        hdrs = []
        for k, v in conn.headers:
            low = k.lower()
            if low not in REPLY_SKIP:
                hdrs.append((k, v))
                if low == b"content-type":
                    self.sse = v.partition(b";")[0].strip().lower() == b"text/event-stream"
        if self.inject and self.sse and status == 200:
            self.filt = UsageFilter()
        data = self._filter(body, conn.complete)
        close = self.close
        if conn.complete:  # the whole reply is here: its length is known
            framing = b"Content-Length: %d\r\n" % len(data)
        elif self.http11:
            self.chunked = True
            framing = b"Transfer-Encoding: chunked\r\n"
            data = chunk(data)
        else:  # an HTTP/1.0 caller: the body ends with the connection
            framing, close = b"", True
            self.must_close = True
        self.caller.feeding = conn.transport  # paused while the caller's buffer is full
        return reply_head(status, hdrs, framing, close=close) + data

    def finish(self) -> None:
        """End a reply the upstream ended by closing its connection (no length, not chunked)."""
        if not self.started or self.ended:
            return
        self.ended = True
        data = self._filter(b"", True)
        out = chunk(data) + _LAST_CHUNK if self.chunked else data
        if out:
            self.caller.write(out)

    def _filter(self, body: bytes, complete: bool) -> bytes:
        filt = self.filt
        if filt is None:
            return body
        data = filt.feed(body) if body else b""
        return data + filt.flush() if complete else data


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


def _bad_gateway(caller: Caller, message: str, *, close: bool) -> None:
    """Answer 502 with an OpenAI-style error body (nothing if the caller has gone)."""
    body = orjson.dumps({"error": {"message": message, "type": "bad_gateway", "code": 502}})
    hdrs = [(b"Content-Type", b"application/json")]
    framing = b"Content-Length: %d\r\n" % len(body)
    with contextlib.suppress(ConnectionError):
        caller.write(reply_head(502, hdrs, framing, close=close) + body)


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
"""Signals that end the proxy as Ctrl-C does: replies under way finish, then the sessions,
trajectories, summary and report are written. SIGTERM is how docker, Kubernetes and systemd
stop a service; SIGHUP comes from a closed terminal or SSH session (a service manager never
stops with it), and the proxy has no configuration to reload, so it ends the run cleanly
rather than killing it with run.json left `running`."""


async def serve(config: ProxyConfig, duration_s: float | None = None) -> Summary | None:
    """Run until `duration_s` passes, SIGTERM or SIGHUP arrives, or the task is cancelled
    (Ctrl-C); returns the summary."""
    proxy = ProxyServer(config)
    await proxy.start()
    print(f"agentload proxy: {proxy.base_url} -> {redact_url(proxy.root)}", flush=True)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    installed = []
    for sig in STOP_SIGNALS:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # not main
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), duration_s)
    except asyncio.CancelledError:
        pass
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        with contextlib.suppress(asyncio.CancelledError):
            summary = await asyncio.shield(proxy.stop())
    return summary
