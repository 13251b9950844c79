"""The streaming chat-completions client: one call in, one measured CallResult out."""

from __future__ import annotations

import asyncio
import itertools
import operator
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

import aiohttp
import orjson

from agentload.client import itlhist
from agentload.client.endpoint import EndpointConfig, RetryPolicy
from agentload.client.errors import SHAPE_ERRORS, CallError, classify_http_error, why
from agentload.client.http1 import Http1Error, Http1Pool, Reply
from agentload.client.record import CallRecord, ItlSummary
from agentload.client.safety import (
    RETRY_AFTER_MAX_S,
    parse_retry_after,
    redact,
    split_userinfo,
)
from agentload.client.stream import Attempt, StreamReader, assemble, parse_full
from agentload.client.tokens import (
    HeuristicCounter,
    TokenCounter,
    count_prompt_tokens,
)
from agentload.client.watchdog import Ticker, Watchdog
from agentload.http_sessions import open_session
from agentload.redact import endpoint_secrets
from agentload.stats import percentile_sorted
from agentload.wire import SESSION_HEADER

__all__ = [
    "CallError",
    "CallResult",
    "ChatClient",
    "classify_http_error",
    "finish_call",
    "itl_summary",
]

_now_ns = time.perf_counter_ns
_call_ids = itertools.count(1)
_pid = os.getpid()


class CallResult:
    """What a call produced (text, reasoning, tool calls) and how it was measured."""

    __slots__ = ("content", "reasoning", "record", "tool_calls", "usage")

    def __init__(self, record: CallRecord) -> None:
        self.record = record
        self.content: str = ""
        self.reasoning: str = ""
        self.tool_calls: list[dict[str, Any]] = []
        self.usage: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.record.status == "ok"

    def message(self, keep_reasoning: bool = False) -> dict[str, Any]:
        """The assistant message to append to the conversation history."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if self.tool_calls:
            msg["tool_calls"] = [
                {"id": tc["id"], "type": tc["type"], "function": dict(tc["function"])}
                for tc in self.tool_calls
            ]
        if keep_reasoning and self.reasoning:
            msg["reasoning_content"] = self.reasoning
        return msg

    def to_dict(self) -> dict[str, Any]:
        return {
            "record": self.record.to_dict(),
            "content": self.content,
            "reasoning": self.reasoning,
            "tool_calls": self.tool_calls,
        }


def itl_summary(times_ns: Sequence[int]) -> tuple[ItlSummary, list[float]]:
    summary, gaps, _ = _itl(times_ns)
    return summary, gaps


def _itl(times_ns: Sequence[int]) -> tuple[ItlSummary, list[float], list[float]]:
    """Summary, gaps in arrival order, and the same gaps sorted (shared with the histogram).

    The gaps go through C maps instead of a comprehension's frame: this runs once per call."""
    n = len(times_ns) - 1
    if n < 1:
        return ItlSummary(), [], []
    gaps = list(map(_div, map(_sub, times_ns[1:], times_ns), _NS_PER_S))
    s = sorted(gaps)
    q = percentile_sorted
    return ItlSummary(n, sum(s) / n, q(s, 0.5), q(s, 0.9), q(s, 0.99), s[-1]), gaps, s


_sub = operator.sub
_div = operator.truediv
_NS_PER_S = itertools.repeat(1e9)  # endless: map() stops at the shorter input


class _Request:
    """One call's request: body, headers, secrets to redact, and the HTTP/1.1 bytes."""

    __slots__ = ("headers", "payload", "secrets", "wire")

    def __init__(
        self, payload: bytes, headers: dict[str, str], secrets: tuple[str, ...], wire: bytes
    ) -> None:
        self.payload = payload
        self.headers = headers
        self.secrets = secrets
        self.wire = wire


_SESSION_NAME = SESSION_HEADER.encode()

# Set by the HTTP layer itself; a caller's value would make the reply unreadable.
_OWN_HEADERS = frozenset(("content-length", "transfer-encoding", "connection"))


def _encode_request(head: bytes, hdrs: dict[str, str], payload: bytes) -> bytes:
    """The request as it goes on the wire: request line and Host (`head`), headers, body."""
    lines = [f"{k}: {v}\r\n" for k, v in hdrs.items() if k.lower() not in _OWN_HEADERS]
    text = "".join(lines)
    # One CR and one LF per line, no NUL: nothing in a name or value can split the request.
    if text.count("\n") != len(lines) or text.count("\r") != len(lines) or "\0" in text:
        raise ValueError("a request header contains a line break or NUL")
    if "host" in (k.lower() for k in hdrs):
        head = head[: head.index(b"\r\n") + 2]  # the caller's Host header replaces ours
    return b"%b%bContent-Length: %d\r\n\r\n%b" % (head, text.encode(), len(payload), payload)


class RecordHook(Protocol):
    """A callback that wraps a client's `on_record` (ChatClient.record_hook)."""

    def __init__(self, inner: Callable[[CallRecord], None] | None) -> None: ...

    def __call__(self, rec: CallRecord) -> None: ...


H = TypeVar("H", bound=RecordHook)


class ChatClient:
    """Sends chat completions to one endpoint and measures them.

    Use as an async context manager (or call :meth:`close`). Safe to share between many
    concurrent tasks. Plain-HTTP endpoints go through agentload's lean HTTP/1.1 pool
    (client.http1); HTTPS, or a caller's own aiohttp session, through aiohttp.
    """

    def __init__(
        self,
        endpoint: EndpointConfig,
        *,
        session: aiohttp.ClientSession | None = None,
        token_counter: TokenCounter | None = None,
        on_record: Callable[[CallRecord], None] | None = None,
    ) -> None:
        self.endpoint = endpoint
        self._session = session
        self._own_session = session is None
        self._counter: TokenCounter = token_counter or HeuristicCounter()
        self.on_record = on_record
        # Credentials in the URL (http://user:pass@host/v1) go out as a Basic header instead,
        # and only when no API key is configured; the URL itself is sent without them.
        self._url, self._url_auth = split_userinfo(endpoint.chat_url)
        # Values a server may echo back in an error: redacted from every message (with the
        # API key, added per call).
        self._url_secrets = tuple(endpoint_secrets(endpoint))
        self._base_headers = {"Content-Type": "application/json", **endpoint.headers}
        self._pool: Http1Pool | None = None
        self._ticker: Ticker | None = None
        self._head = b""
        # (key, encoded request head, headers, secrets) for calls without their own headers.
        self._fixed: tuple[str | None, bytes, dict[str, str], tuple[str, ...]] | None = None
        url = urlsplit(self._url)
        if session is None and url.scheme == "http" and url.hostname:
            path = (url.path or "/") + (f"?{url.query}" if url.query else "")
            self._head = f"POST {path} HTTP/1.1\r\nHost: {url.netloc}\r\n".encode()
            self._host_port = (url.hostname, url.port or 80)

    async def __aenter__(self) -> ChatClient:
        if not self._head:
            self._ensure_session()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def record_hook(self, kind: type[H]) -> H:
        """The hook of type `kind` that stands between this client and its `on_record`
        (it is given the callback it wraps), installed on first use: one per client, shared
        by every session that calls through it."""
        hook = self.on_record
        if isinstance(hook, kind):
            return hook
        made = kind(hook)
        self.on_record = made
        return made

    def _ensure_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = open_session(
                total_s=None,
                connect_s=self.endpoint.timeouts.connect,
                limit=self.endpoint.max_connections,
                dns_cache_s=300,
                cleanup_closed=True,
                read_bufsize=1 << 18,
                skip_headers=("User-Agent",),
            )
        return self._session

    def _ensure_pool(self) -> Http1Pool:
        if self._pool is None:
            host, port = self._host_port
            ep = self.endpoint
            self._pool = Http1Pool(host, port, ep.max_connections, ep.timeouts.connect)
        return self._pool

    async def close(self) -> None:
        # Calls still in flight keep their deadline checks: the old ticker stops by itself
        # once they end.
        self._ticker = None
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._session is not None and self._own_session:
            await self._session.close()
        self._session = None

    def build_body(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: Any = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        seed: int | None = None,
        extra_body: Mapping[str, Any] | None = None,
        stream: bool | None = None,
    ) -> dict[str, Any]:
        ep = self.endpoint
        stream = ep.stream if stream is None else stream
        body: dict[str, Any] = {"model": ep.model, "messages": messages}
        if tools:
            body["tools"] = tools
            if tool_choice is not None:
                body["tool_choice"] = tool_choice
        mt = max_tokens if max_tokens is not None else ep.max_tokens
        if mt is not None:
            body["max_tokens"] = mt
        temp = temperature if temperature is not None else ep.temperature
        if temp is not None:
            body["temperature"] = temp
        if seed is not None:
            body["seed"] = seed
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        if ep.extra_body:
            body.update(ep.extra_body)
        if extra_body:
            body.update(extra_body)
        return body

    async def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: Any = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        seed: int | None = None,
        extra_body: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        stream: bool | None = None,
        session_id: str | None = None,
        role: str | None = None,
        turn: int | None = None,
        call_id: str | None = None,
        keep_itl: bool = False,
    ) -> CallResult:
        """Send one chat completion; never raises for server or network failures.

        Failures come back as a record with `status="error"` and an `error_kind`. Only task
        cancellation propagates (after the record, kind `cancelled`, is handed to
        `on_record`).
        """
        ep = self.endpoint
        body = self.build_body(
            messages,
            tools=tools,
            tool_choice=tool_choice,
            max_tokens=max_tokens,
            temperature=temperature,
            seed=seed,
            extra_body=extra_body,
            stream=stream,
        )
        is_stream = bool(body.get("stream"))
        rec = CallRecord(
            call_id=call_id or f"c{_pid}-{next(_call_ids)}",
            session_id=session_id,
            role=role,
            endpoint=ep.name,
            model=ep.model,
            turn=turn,
            stream=is_stream,
            started_at=time.time(),
        )
        result = CallResult(rec)
        payload = orjson.dumps(body)
        try:
            request = self._request(payload, headers, session_id)
        except (KeyError, ValueError) as e:
            # An unset api_key_env, or a header value that would split the request.
            msg = str(e.args[0]) if isinstance(e, KeyError) else str(e)
            rec.status, rec.error_kind, rec.error_message = "error", "config_error", msg
            rec.start_ns = rec.end_ns = _now_ns()
            self._emit(rec)
            return result
        acc, err, cancelled = await self._attempts(rec, request, is_stream)
        try:
            finish_call(rec, result, acc, err, messages, tools, self._counter, keep_itl)
        except Exception as e:  # never lose the record, even to a bug in the accounting
            rec.status, rec.error_kind = "error", "client_error"
            rec.error_message = f"{type(e).__name__}: {e}"
        if rec.error_message and request.secrets:
            rec.error_message = redact(rec.error_message, request.secrets)
        self._emit(rec)
        if cancelled:
            raise asyncio.CancelledError
        return result

    def _request(
        self, payload: bytes, headers: Mapping[str, str] | None, session_id: str | None
    ) -> _Request:
        """The call's bytes and headers, built once for all its attempts."""
        # Read per call (a rotated key is picked up); only what is built from it is cached.
        key = self.endpoint.api_key()
        if headers or not self._head:
            return self._request_uncached(payload, headers, session_id, key)
        cached = self._fixed
        if cached is None or cached[0] != key:
            hdrs, secrets = self._headers(None, None, key)
            # Request line, Host and the fixed headers, checked and encoded once per client.
            block = _encode_request(self._head, hdrs, b"")[: -len(b"Content-Length: 0\r\n\r\n")]
            cached = self._fixed = (key, block, hdrs, secrets)
        _, block, hdrs, secrets = cached
        if session_id is None or SESSION_HEADER in hdrs:
            wire = b"%bContent-Length: %d\r\n\r\n%b" % (block, len(payload), payload)
        else:
            if "\r" in session_id or "\n" in session_id or "\0" in session_id:
                raise ValueError("a request header contains a line break or NUL")
            wire = b"%b%b: %b\r\nContent-Length: %d\r\n\r\n%b" % (
                block,
                _SESSION_NAME,
                session_id.encode(),
                len(payload),
                payload,
            )
        return _Request(payload, hdrs, secrets, wire)

    def _headers(
        self, headers: Mapping[str, str] | None, session_id: str | None, key: str | None
    ) -> tuple[dict[str, str], tuple[str, ...]]:
        hdrs = dict(self._base_headers)
        if headers:
            hdrs.update(headers)
        if session_id is not None:
            hdrs.setdefault(SESSION_HEADER, session_id)
        secrets = self._url_secrets
        if key:
            hdrs["Authorization"] = f"Bearer {key}"
            secrets = (key, *secrets)
        elif self._url_auth is not None and not any(k.lower() == "authorization" for k in hdrs):
            hdrs["Authorization"] = self._url_auth  # an explicit header wins over the URL
        return hdrs, secrets

    def _request_uncached(
        self,
        payload: bytes,
        headers: Mapping[str, str] | None,
        session_id: str | None,
        key: str | None,
    ) -> _Request:
        hdrs, secrets = self._headers(headers, session_id, key)
        wire = _encode_request(self._head, hdrs, payload) if self._head else b""
        return _Request(payload, hdrs, secrets, wire)

    async def _attempts(
        self, rec: CallRecord, request: _Request, is_stream: bool
    ) -> tuple[Attempt, CallError | None, bool]:
        """Attempts with backoff until one succeeds, fails for good, or the caller cancels."""
        policy = self.endpoint.retry
        t_first = _now_ns()
        attempt = 0
        err: CallError | None = None
        cancelled = False
        wire = request.wire
        while True:
            attempt += 1
            acc = Attempt(request.secrets)
            dog = self._watchdog(is_stream, _now_ns())
            rec.start_ns = dog.t0
            try:
                if wire:
                    # The HTTP/1.1 attempt inline (no coroutine of its own: one per call less).
                    reader = StreamReader(acc, dog) if is_stream else None
                    try:
                        reply = await self._ensure_pool().request(wire, acc, reader)
                    finally:
                        dog.stop()
                    _http1_reply(reply, reader, acc)
                else:
                    await self._attempt(request.payload, request.headers, is_stream, acc, dog)
                err = None
            except CallError as e:
                err = e
            except Http1Error as e:
                err = CallError(e.kind, e.message)
            except asyncio.CancelledError:
                if dog.kind is not None:
                    # Our own deadline: swallow this cancellation and report the timeout.
                    dog.uncancel()
                    err = CallError(dog.kind, f"{dog.kind.replace('_', ' ')} exceeded")
                else:
                    err = CallError("cancelled", "cancelled by the caller")
                    cancelled = True
            except Exception as e:  # a bug of ours must still leave its record
                err = CallError("client_error", f"{type(e).__name__}: {e}")
            rec.end_ns = _now_ns()
            if err is None or cancelled or attempt >= policy.max_attempts:
                break
            if err.kind not in policy.retry_on:
                break
            delay = _backoff(rec, err, attempt, policy)
            try:
                await asyncio.sleep(delay)
            except asyncio.CancelledError:
                cancelled = True
                err = CallError("cancelled", "cancelled by the caller")
                break
        rec.attempts = attempt
        rec.total_s = (rec.end_ns - t_first) / 1e9
        return acc, err, cancelled

    def _emit(self, rec: CallRecord) -> None:
        if self.on_record is not None:
            self.on_record(rec)

    def _watchdog(self, is_stream: bool, t0: int) -> Watchdog:
        t = self.endpoint.timeouts
        first, idle, total = t.first_token, t.idle if is_stream else None, t.total
        ticker = self._ticker
        # The ticker finds no task of its own loop when the client moved to another loop.
        dog = None if ticker is None else ticker.watch(t0, first, idle, total)
        if dog is None:
            if ticker is not None:
                self._left_loop()
            # One periodic check per client and loop (client.watchdog explains the precision).
            set_s = [d for d in (t.first_token, t.idle, t.total) if d is not None]
            ticker = self._ticker = Ticker(asyncio.get_running_loop(), min(set_s, default=1.0))
            dog = ticker.watch(t0, first, idle, total)
            assert dog is not None
        return dog

    def _left_loop(self) -> None:
        """The client is now used on another event loop (a sync caller running asyncio.run
        per call): connections of the old loop cannot serve this one, so start afresh."""
        self._pool = None  # its sockets went with the old loop
        if self._own_session and self._session is not None:
            self._session.detach()  # bound to the old loop; a new one is made on demand
            self._session = None

    async def _attempt(
        self, payload: bytes, hdrs: dict[str, str], is_stream: bool, acc: Attempt, dog: Watchdog
    ) -> None:
        """One attempt through aiohttp (HTTPS, or a caller's own session); `dog` is stopped
        here, and a cancellation it made reaches _attempts, which reports the timeout."""
        session = self._ensure_session()
        got_headers = False
        try:
            async with session.post(self._url, data=payload, headers=hdrs) as resp:
                acc.headers_ns = _now_ns()
                got_headers = True
                if resp.status != 200:
                    body = await resp.read()
                    raise _status_error(
                        resp.status, body, resp.headers.get("Retry-After"), acc.secrets
                    )
                if is_stream:
                    await self._read_stream(resp, acc, dog)
                else:
                    parse_full(await resp.read(), acc)
        except CallError:
            raise
        except aiohttp.ConnectionTimeoutError as e:
            raise CallError("timeout_connect", str(e) or "connect timed out") from None
        except aiohttp.ClientConnectorError as e:
            raise CallError("connect_error", str(e)) from None
        except (
            aiohttp.ClientPayloadError,
            aiohttp.ServerDisconnectedError,
            aiohttp.ClientOSError,
        ) as e:
            if got_headers:
                raise CallError("malformed_stream", f"connection lost mid-stream: {e}") from None
            raise CallError("connect_error", str(e) or type(e).__name__) from None
        except aiohttp.ClientError as e:
            kind = "malformed_stream" if got_headers else "connect_error"
            raise CallError(kind, f"{type(e).__name__}: {e}") from None
        finally:
            dog.stop()

    async def _read_stream(self, resp: aiohttp.ClientResponse, acc: Attempt, dog: Watchdog) -> None:
        """A streamed aiohttp response into `acc`, read by read."""
        reader = StreamReader(acc, dog)
        feed = reader.http_body
        closed = _close_watch(resp)
        async for raw in resp.content.iter_any():
            feed(raw, _now_ns())
        try:
            reader.end()
        except CallError:
            # aiohttp ends a body delimited by the connection's close quietly on a reset too.
            reset = _reset_error(closed)
            if reset is None:
                raise
            raise CallError("malformed_stream", f"connection lost mid-stream: {reset}") from None


def _backoff(rec: CallRecord, err: CallError, attempt: int, policy: RetryPolicy) -> float:
    """Seconds to wait before the next attempt (counted in `rec`)."""
    if err.retry_after is not None:
        # The server said when to come back (429 / 503 Retry-After): wait that long,
        # within a bound, instead of the jittered backoff.
        delay = min(err.retry_after, RETRY_AFTER_MAX_S)
        rec.retry_after_s = delay
    else:
        ceiling = min(policy.backoff_max, policy.backoff_base * (2 ** (attempt - 1)))
        delay = random.uniform(0, ceiling)
    rec.retry_wait_s += delay
    return delay


def _status_error(
    status: int, body: bytes, retry_after: str | None, secrets: Sequence[str]
) -> CallError:
    """The error a non-200 reply stands for; 429 and 503 keep the server's Retry-After."""
    err = classify_http_error(status, body, secrets)
    if status in (429, 503):
        err.retry_after = parse_retry_after(retry_after)
    return err


def _close_watch(resp: aiohttp.ClientResponse) -> asyncio.Future[None] | None:
    """For a body delimited by the connection's close: a future set (or failed) when the
    connection closes (aiohttp's `ResponseHandler.closed`, where this aiohttp has it)."""
    if resp.content_length is not None or "chunked" in resp.headers.get("Transfer-Encoding", ""):
        return None
    conn = resp.connection
    closed = getattr(conn.protocol, "closed", None) if conn is not None else None
    if not isinstance(closed, asyncio.Future):
        return None
    # Retrieved whatever happens, so a failure seen by nobody is not logged as unretrieved.
    closed.add_done_callback(lambda f: f.cancelled() or f.exception())
    return closed


def _reset_error(closed: asyncio.Future[None] | None) -> str | None:
    if closed is None or not closed.done() or closed.cancelled():
        return None
    exc = closed.exception()
    return None if exc is None else str(exc.__cause__ or exc)


def _http1_reply(reply: Reply, reader: StreamReader | None, acc: Attempt) -> None:
    """An HTTP/1.1 reply into `acc`: an error status raises, a body is parsed or checked."""
    if reply.status != 200:
        raise _status_error(reply.status, reply.body, reply.header("Retry-After"), acc.secrets)
    try:
        if reader is not None:
            reader.end()
        else:
            parse_full(reply.body, acc)
    except CallError as e:
        if reply.reset is None or e.kind != "malformed_stream":
            raise
        # A reply with no length cut by a reset: the server or the network failed, not the
        # reply's shape (outage detection counts it).
        raise CallError("malformed_stream", f"connection lost mid-stream: {reply.reset}") from None


def finish_call(
    rec: CallRecord,
    result: CallResult,
    acc: Attempt,
    err: CallError | None,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    counter: TokenCounter,
    keep_itl: bool = False,
) -> None:
    """Complete `rec` and `result` from one attempt's accumulators and its error, if any.

    Shared by the client and the proxy's meter, so both measure and score a reply alike.
    """
    rec.headers_ns = acc.headers_ns
    rec.first_token_ns = acc.first_token_ns
    rec.e2e_s = (rec.end_ns - rec.start_ns) / 1e9
    if acc.first_token_ns is not None:
        rec.ttft_s = (acc.first_token_ns - rec.start_ns) / 1e9
    rec.token_chunks = len(acc.token_times)
    summary, gaps, ordered = _itl(acc.token_times)
    rec.itl = summary
    if gaps:
        rec.itl_hist = itlhist.encode_sorted(ordered)
    if keep_itl:
        rec.itl_s = gaps
    try:
        _collect(rec, result, acc)
    except SHAPE_ERRORS as e:
        # Pieces of the wrong type (content 123, a usage string): the reply is malformed,
        # unless the attempt already failed for a reason of its own, which stays.
        result.content, result.reasoning, result.tool_calls = "", "", []
        rec.num_tool_calls, rec.finish_reason = 0, None
        rec.prompt_tokens = rec.completion_tokens = None
        rec.cached_tokens = rec.reasoning_tokens = None
        acc.usage = result.usage = None
        if err is None:
            err = CallError("malformed_stream", f"reply of the wrong shape: {why(e)}")
    if acc.usage is None and (err is None or acc.token_times):
        # No usage from the server: estimate, and say so.
        c = counter
        rec.tokens_estimated = True
        rec.prompt_tokens = count_prompt_tokens(c, messages, list(tools) if tools else None)
        out_text = result.content + "".join(
            tc["function"]["name"] + tc["function"]["arguments"] for tc in result.tool_calls
        )
        rec.reasoning_tokens = c.count(result.reasoning) if result.reasoning else None
        rec.completion_tokens = max(
            len(acc.token_times), c.count(out_text) + (rec.reasoning_tokens or 0)
        )
    if rec.completion_tokens and rec.completion_tokens > 1 and rec.ttft_s is not None:
        rec.tpot_s = (rec.e2e_s - rec.ttft_s) / (rec.completion_tokens - 1)
    if err is not None:
        rec.status = "error"
        rec.error_kind = err.kind
        rec.error_message = err.message or None
        rec.http_status = err.http_status
    else:
        rec.http_status = 200


def _collect(rec: CallRecord, result: CallResult, acc: Attempt) -> None:
    """Assemble text, tool calls, finish reason and usage; raises on pieces of the wrong type."""
    result.content, result.reasoning, result.tool_calls = assemble(acc, rec.call_id)
    rec.num_tool_calls = len(result.tool_calls)
    rec.finish_reason = acc.finish_reason
    if acc.usage:
        rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens, rec.reasoning_tokens = (
            acc.counts
        )
    else:
        acc.usage = None  # `usage: {}` says nothing: estimate as if absent
    result.usage = acc.usage
