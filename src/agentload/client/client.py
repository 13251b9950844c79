"""The streaming chat-completions client: one call in, one measured CallResult out."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import aiohttp
import orjson

from agentload.client import itlhist
from agentload.client.config import EndpointConfig
from agentload.client.record import CallRecord, ItlSummary
from agentload.client.safety import (
    RETRY_AFTER_MAX_S,
    BadShape,
    header_secrets,
    parse_retry_after,
    redact,
    split_userinfo,
    usage_counts,
)
from agentload.client.sse import SSEParser
from agentload.client.tokens import (
    HeuristicCounter,
    TokenCounter,
    count_prompt_tokens,
)
from agentload.stats import percentile_sorted
from agentload.wire import SESSION_HEADER

_now_ns = time.perf_counter_ns
_loads = orjson.loads
_DONE = b"[DONE]"

# How servers word a prompt that does not fit: vLLM ("This model's maximum context length is
# N tokens", "longer than the maximum model length"), SGLang ("exceeds the maximum allowed
# length", "maximum context length"), OpenAI (code context_length_exceeded), llama.cpp's
# server ("exceeds the available context size").
_OVERFLOW_RE = re.compile(
    r"maximum context length|context length|context_length_exceeded|maximum model length"
    r"|max_model_len|maximum allowed length|context window|context size|prompt is too long",
    re.IGNORECASE,
)
_EXCERPT = 300
# What a chunk or body of the wrong shape raises when the per-chunk code meets it: caught once
# around the whole chunk instead of type checks on every field of every chunk.
_SHAPE_ERRORS = (TypeError, AttributeError, KeyError, IndexError, ValueError, BadShape)
_call_ids = itertools.count(1)
_pid = os.getpid()


class CallError(Exception):
    """Raised inside an attempt; carries the error kind of the taxonomy."""

    def __init__(
        self,
        kind: str,
        message: str = "",
        http_status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message or kind)
        self.kind = kind
        self.message = message
        self.http_status = http_status
        self.retry_after = retry_after  # seconds, from a 429/503's Retry-After header


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


class _Attempt:
    """Accumulators of one HTTP attempt (reset between retries)."""

    __slots__ = (
        "content",
        "counts",
        "finish_reason",
        "first_token_ns",
        "headers_ns",
        "reasoning",
        "saw_done",
        "secrets",
        "token_times",
        "tool_slots",
        "usage",
    )

    def __init__(self, secrets: tuple[str, ...] = ()) -> None:
        self.secrets = secrets  # redacted from every message built from the reply
        self.headers_ns: int | None = None
        self.first_token_ns: int | None = None
        self.token_times: list[int] = []
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.tool_slots: dict[int, list[Any]] = {}  # index -> [id, type, name, [arg pieces]]
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.counts: tuple[int | None, ...] = (None, None, None, None)  # checked usage
        self.saw_done = False


class _Watchdog:
    """One timer per attempt enforcing the first-token, idle and total deadlines.

    The stream loop only stores the time of the last chunk (an attribute write); the timer
    wakes at the earliest deadline that could be due and re-arms itself, so the hot path never
    touches the event loop's timer heap. On expiry it cancels the task and remembers why.
    """

    __slots__ = ("_handle", "_loop", "_task", "first", "idle", "kind", "last_ns", "t0", "total")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        task: asyncio.Task[Any],
        t0: int,
        first_token: float | None,
        idle: float | None,
        total: float | None,
    ) -> None:
        self._loop = loop
        self._task = task
        self.t0 = t0
        self.first = None if first_token is None else int(first_token * 1e9)
        self.idle = None if idle is None else int(idle * 1e9)
        self.total = None if total is None else int(total * 1e9)
        self.last_ns: int | None = None  # None until the first token
        self.kind: str | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._arm(_now_ns())

    def _next_deadline(self) -> int | None:
        deadlines = []
        if self.total is not None:
            deadlines.append(self.t0 + self.total)
        if self.last_ns is None:
            if self.first is not None:
                deadlines.append(self.t0 + self.first)
        elif self.idle is not None:
            deadlines.append(self.last_ns + self.idle)
        return min(deadlines) if deadlines else None

    def _arm(self, now: int) -> None:
        deadline = self._next_deadline()
        if deadline is not None:
            self._handle = self._loop.call_later(max(0, deadline - now) / 1e9, self._check)

    def _check(self) -> None:
        now = _now_ns()
        if self.total is not None and now >= self.t0 + self.total:
            self._fire("timeout_total")
        elif self.last_ns is None and self.first is not None and now >= self.t0 + self.first:
            self._fire("timeout_first_token")
        elif self.last_ns is not None and self.idle is not None and now >= self.last_ns + self.idle:
            self._fire("timeout_idle")
        else:
            self._arm(now)

    def _fire(self, kind: str) -> None:
        self.kind = kind
        self._task.cancel()

    def first_token(self, now: int) -> None:
        # The idle deadline replaces the (usually much later) first-token one: re-arm once.
        self.last_ns = now
        if self._handle is not None:
            self._handle.cancel()
        self._arm(now)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()


def _q(sorted_vals: list[float], q: float) -> float:
    return percentile_sorted(sorted_vals, q) or 0.0


def itl_summary(times_ns: Sequence[int]) -> tuple[ItlSummary, list[float]]:
    gaps = [(b - a) / 1e9 for a, b in itertools.pairwise(times_ns)]
    if not gaps:
        return ItlSummary(), gaps
    s = sorted(gaps)
    return (
        ItlSummary(
            count=len(s),
            mean=sum(s) / len(s),
            p50=_q(s, 0.5),
            p90=_q(s, 0.9),
            p99=_q(s, 0.99),
            max=s[-1],
        ),
        gaps,
    )


def _excerpt(message: str, secrets: Sequence[str], limit: int = _EXCERPT) -> str:
    # Redact before cutting, so a key cut in half by the limit cannot leak its first part.
    return " ".join(redact(message, secrets).split())[:limit]


def _raw_excerpt(data: bytes, secrets: Sequence[str]) -> str:
    """A short, redacted, printable excerpt of raw reply bytes for an error message."""
    text = redact(data[:4096].decode("utf-8", "replace"), secrets)
    return repr(text[:120])


def _error_text(err: Any) -> str:
    """The message of an OpenAI-style `error` value, whatever its shape."""
    if isinstance(err, dict):
        msg = err.get("message") or err.get("detail") or err
        return msg if isinstance(msg, str) else str(msg)
    return err if isinstance(err, str) else str(err)


def classify_http_error(status: int, body: bytes, secrets: Sequence[str] = ()) -> CallError:
    text = body[:4096].decode("utf-8", "replace")
    message = text
    with contextlib.suppress(Exception):
        obj = _loads(body)
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        if isinstance(err, dict):
            message = _error_text(err) if (err.get("message") or err.get("detail")) else text
        elif isinstance(err, str):
            message = err
    excerpt = _excerpt(message, secrets)
    if status in (400, 413, 422) and _OVERFLOW_RE.search(text):
        return CallError("context_overflow", excerpt, status)
    return CallError(f"http_{status}", excerpt, status)


class ChatClient:
    """Sends chat completions to one endpoint and measures them.

    Use as an async context manager (or call :meth:`close`). Safe to share between many
    concurrent tasks: it holds one pooled aiohttp session.
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
        self._url, self._url_auth, url_secrets = split_userinfo(endpoint.chat_url)
        # Values a server may echo back in an error: redacted from every message (with the
        # API key, added per call).
        self._url_secrets = url_secrets + header_secrets(endpoint.headers)
        self._base_headers = {"Content-Type": "application/json", **endpoint.headers}

    async def __aenter__(self) -> ChatClient:
        self._ensure_session()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _ensure_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            t = self.endpoint.timeouts
            connector = aiohttp.TCPConnector(
                limit=self.endpoint.max_connections, ttl_dns_cache=300, enable_cleanup_closed=True
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=t.connect),
                read_bufsize=1 << 18,
                skip_auto_headers=("User-Agent",),
            )
        return self._session

    async def close(self) -> None:
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
        payload = orjson.dumps(body)
        hdrs = dict(self._base_headers)
        if headers:
            hdrs.update(headers)
        if session_id is not None:
            hdrs.setdefault(SESSION_HEADER, session_id)
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
        try:
            key = ep.api_key()
        except KeyError as e:
            rec.status, rec.error_kind, rec.error_message = "error", "config_error", str(e.args[0])
            rec.start_ns = rec.end_ns = _now_ns()
            self._emit(rec)
            return result
        secrets = self._url_secrets
        if key:
            hdrs["Authorization"] = f"Bearer {key}"
            secrets = (key, *secrets)
        elif self._url_auth is not None and not any(k.lower() == "authorization" for k in hdrs):
            hdrs["Authorization"] = self._url_auth  # an explicit header wins over the URL

        policy = ep.retry
        t_first = _now_ns()
        attempt = 0
        acc = _Attempt(secrets)
        err: CallError | None = None
        cancelled = False
        while True:
            attempt += 1
            acc = _Attempt(secrets)
            t0 = _now_ns()
            rec.start_ns = t0
            try:
                await self._attempt(payload, hdrs, is_stream, acc, t0)
                err = None
            except CallError as e:
                err = e
            except asyncio.CancelledError:
                err = CallError("cancelled", "cancelled by the caller")
                cancelled = True
            except Exception as e:  # a bug of ours must still leave its record
                err = CallError("client_error", f"{type(e).__name__}: {e}")
            rec.end_ns = _now_ns()
            if err is None or cancelled or attempt >= policy.max_attempts:
                break
            if err.kind not in policy.retry_on:
                break
            if err.retry_after is not None:
                # The server said when to come back (429 / 503 Retry-After): wait that long,
                # within a bound, instead of the jittered backoff.
                delay = min(err.retry_after, RETRY_AFTER_MAX_S)
                rec.retry_after_s = delay
            else:
                ceiling = min(policy.backoff_max, policy.backoff_base * (2 ** (attempt - 1)))
                delay = random.uniform(0, ceiling)
            rec.retry_wait_s += delay
            try:
                await asyncio.sleep(delay)
            except asyncio.CancelledError:
                cancelled = True
                err = CallError("cancelled", "cancelled by the caller")
                break

        rec.attempts = attempt
        rec.total_s = (rec.end_ns - t_first) / 1e9
        try:
            self._finish(rec, result, acc, err, messages, tools, keep_itl)
        except Exception as e:  # never lose the record, even to a bug in the accounting
            rec.status, rec.error_kind = "error", "client_error"
            rec.error_message = f"{type(e).__name__}: {e}"
        if rec.error_message and secrets:
            rec.error_message = redact(rec.error_message, secrets)
        self._emit(rec)
        if cancelled:
            raise asyncio.CancelledError
        return result

    def _emit(self, rec: CallRecord) -> None:
        if self.on_record is not None:
            self.on_record(rec)

    async def _attempt(
        self, payload: bytes, hdrs: dict[str, str], is_stream: bool, acc: _Attempt, t0: int
    ) -> None:
        session = self._ensure_session()
        t = self.endpoint.timeouts
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        dog = _Watchdog(loop, task, t0, t.first_token, t.idle if is_stream else None, t.total)
        got_headers = False
        try:
            async with session.post(self._url, data=payload, headers=hdrs) as resp:
                acc.headers_ns = _now_ns()
                got_headers = True
                if resp.status != 200:
                    err = classify_http_error(resp.status, await resp.read(), acc.secrets)
                    if resp.status in (429, 503):
                        err.retry_after = parse_retry_after(resp.headers.get("Retry-After"))
                    raise err
                if is_stream:
                    await self._read_stream(resp, acc, dog)
                else:
                    self._parse_full(await resp.read(), acc)
        except asyncio.CancelledError:
            if dog.kind is None:
                raise
            # Our own deadline: swallow this cancellation and report the timeout instead.
            task.uncancel()
            raise CallError(dog.kind, f"{dog.kind.replace('_', ' ')} exceeded") from None
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

    async def _read_stream(
        self, resp: aiohttp.ClientResponse, acc: _Attempt, dog: _Watchdog
    ) -> None:
        parser = SSEParser()
        feed = parser.feed
        times = acc.token_times
        content = acc.content
        reasoning = acc.reasoning
        slots = acc.tool_slots
        async for raw in resp.content.iter_any():
            now = _now_ns()
            if dog.last_ns is not None:
                dog.last_ns = now
            for data in feed(raw):
                if data == _DONE:
                    acc.saw_done = True
                    continue
                try:
                    obj = _loads(data)
                except orjson.JSONDecodeError:
                    raise CallError(
                        "malformed_stream", f"bad JSON in stream: {_raw_excerpt(data, acc.secrets)}"
                    ) from None
                # Any chunk of the wrong shape (a number for a string, null for an object, a
                # list for a dict) fails inside this block with one of _SHAPE_ERRORS; content
                # and reasoning pieces of the wrong type are caught when joined (_collect).
                try:
                    choices = obj.get("choices")
                    if choices:
                        ch = choices[0]
                        delta = ch.get("delta")
                        if delta:
                            c = delta.get("content")
                            if c:
                                content.append(c)
                            tok = bool(c)
                            # Most events carry only "content": skip the other look-ups then.
                            if len(delta) > 1 or not c:
                                if c is not None and c.__class__ is not str:
                                    raise BadShape("delta.content is not a string")
                                r = delta.get("reasoning_content") or delta.get("reasoning")
                                if r:
                                    reasoning.append(r)
                                    tok = True
                                tcs = delta.get("tool_calls")
                                if tcs:
                                    _merge_tool_calls(slots, tcs)
                                    tok = True
                                elif tcs is not None and tcs.__class__ is not list:
                                    raise BadShape("delta.tool_calls is not a list")
                            if tok:
                                times.append(now)
                                if acc.first_token_ns is None:
                                    acc.first_token_ns = now
                                    dog.first_token(now)
                        elif delta is None:
                            # Choices without a delta occur (content-filter notes); a full
                            # `message` where the delta belongs would lose the answer.
                            if "message" in ch:
                                raise BadShape("a non-streamed message inside a stream")
                        elif delta.__class__ is not dict:
                            raise BadShape("delta is not an object")
                        fr = ch.get("finish_reason")
                        if fr:
                            if fr.__class__ is not str:
                                raise BadShape("finish_reason is not a string")
                            acc.finish_reason = fr
                    elif choices is not None and choices.__class__ is not list:
                        raise BadShape("choices is not a list")
                    elif "error" in obj:
                        _raise_error_event(obj["error"], acc.secrets)
                    u = obj.get("usage")
                    if u is not None:
                        # Checked on arrival: a later good chunk must not hide a bad one.
                        acc.counts = usage_counts(u)
                        acc.usage = u
                except _SHAPE_ERRORS as e:
                    raise CallError(
                        "malformed_stream",
                        f"chunk of the wrong shape ({_why(e)}): {_raw_excerpt(data, acc.secrets)}",
                    ) from None
        for data in parser.flush():
            if data == _DONE:
                acc.saw_done = True
        if not acc.saw_done:
            raise CallError("malformed_stream", "stream ended without [DONE]")

    def _parse_full(self, raw: bytes, acc: _Attempt) -> None:
        try:
            obj = _loads(raw)
        except orjson.JSONDecodeError:
            raise CallError(
                "malformed_stream", f"bad JSON response: {_raw_excerpt(raw, acc.secrets)}"
            ) from None
        if isinstance(obj, dict) and not obj.get("choices") and "error" in obj:
            _raise_error_event(obj["error"], acc.secrets)
        try:
            choices = obj["choices"]
            if choices.__class__ is not list or not choices:
                raise BadShape("no choices")
            ch = choices[0]
            msg = ch["message"]
            if msg.__class__ is not dict:
                raise BadShape("message is not an object")
            c = msg.get("content")
            if c:
                acc.content.append(c)
            elif c is not None and c.__class__ is not str:
                raise BadShape("message.content is not a string")
            r = msg.get("reasoning_content") or msg.get("reasoning")
            if r:
                acc.reasoning.append(r)
            tcs = msg.get("tool_calls")
            if tcs:
                _merge_tool_calls(acc.tool_slots, tcs)
            elif tcs is not None and tcs.__class__ is not list:
                raise BadShape("message.tool_calls is not a list")
            fr = ch.get("finish_reason")
            if fr is not None and fr.__class__ is not str:
                raise BadShape("finish_reason is not a string")
            acc.finish_reason = fr
            u = obj.get("usage")
            if u is not None:
                acc.counts = usage_counts(u)
                acc.usage = u
        except _SHAPE_ERRORS as e:
            raise CallError(
                "malformed_stream",
                f"response of the wrong shape ({_why(e)}): {_raw_excerpt(raw, acc.secrets)}",
            ) from None
        acc.saw_done = True

    def _finish(
        self,
        rec: CallRecord,
        result: CallResult,
        acc: _Attempt,
        err: CallError | None,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        keep_itl: bool,
    ) -> None:
        rec.headers_ns = acc.headers_ns
        rec.first_token_ns = acc.first_token_ns
        rec.e2e_s = (rec.end_ns - rec.start_ns) / 1e9
        if acc.first_token_ns is not None:
            rec.ttft_s = (acc.first_token_ns - rec.start_ns) / 1e9
        rec.token_chunks = len(acc.token_times)
        summary, gaps = itl_summary(acc.token_times)
        rec.itl = summary
        if gaps:
            rec.itl_hist = itlhist.encode(gaps)
        if keep_itl:
            rec.itl_s = gaps
        try:
            _collect(rec, result, acc)
        except _SHAPE_ERRORS as e:
            # Pieces of the wrong type (content 123, a usage string): the reply is malformed,
            # unless the attempt already failed for a reason of its own, which stays.
            result.content, result.reasoning, result.tool_calls = "", "", []
            rec.num_tool_calls, rec.finish_reason = 0, None
            rec.prompt_tokens = rec.completion_tokens = None
            rec.cached_tokens = rec.reasoning_tokens = None
            acc.usage = result.usage = None
            if err is None:
                err = CallError("malformed_stream", f"reply of the wrong shape: {_why(e)}")
        if acc.usage is None and (err is None or acc.token_times):
            # No usage from the server: estimate, and say so.
            c = self._counter
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


def _collect(rec: CallRecord, result: CallResult, acc: _Attempt) -> None:
    """Assemble text, tool calls, finish reason and usage; raises on pieces of the wrong type."""
    result.content = "".join(acc.content)
    result.reasoning = "".join(acc.reasoning)
    result.tool_calls = [
        {
            "id": s[0] or f"call_{rec.call_id}_{i}",
            "type": s[1] or "function",
            "function": {"name": s[2], "arguments": "".join(s[3])},
        }
        for i, s in sorted(acc.tool_slots.items())
    ]
    rec.num_tool_calls = len(result.tool_calls)
    rec.finish_reason = acc.finish_reason
    if acc.usage:
        rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens, rec.reasoning_tokens = (
            acc.counts
        )
    else:
        acc.usage = None  # `usage: {}` says nothing: estimate as if absent
    result.usage = acc.usage


def _why(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, BadShape) else f"{type(exc).__name__}: {exc}"[:120]


def _raise_error_event(err: Any, secrets: Sequence[str]) -> None:
    """Raise the CallError of an `{"error": ...}` object sent instead of a reply."""
    msg = _error_text(err)
    code = err.get("code") if isinstance(err, dict) else None
    kind = "context_overflow" if _OVERFLOW_RE.search(msg) else "stream_error"
    raise CallError(
        kind, _excerpt(msg, secrets), code if code.__class__ is int and 100 <= code < 600 else None
    )


def _merge_tool_calls(slots: dict[int, list[Any]], fragments: list[dict[str, Any]]) -> None:
    # Called only for events that carry tool calls, so these type checks cost nothing on the
    # content path; a wrong type here would otherwise surface later, in the caller's code.
    for tc in fragments:
        idx = tc.get("index")
        tc_id = tc.get("id")
        if tc_id is not None and tc_id.__class__ is not str:
            raise BadShape("tool_calls[].id is not a string")
        if idx is None:
            # Servers that omit the index: a new id starts a new call, otherwise continue.
            last = max(slots) if slots else -1
            idx = last + 1 if last < 0 or (tc_id and tc_id != slots[last][0]) else last
        elif idx.__class__ is not int or not 0 <= idx < 1 << 16:
            raise BadShape(f"tool_calls[].index is not a small integer: {str(idx)[:40]!r}")
        slot = slots.get(idx)
        if slot is None:
            slot = slots[idx] = [None, None, "", []]
        if tc_id and not slot[0]:
            slot[0] = tc_id
        typ = tc.get("type")
        if typ is not None and typ.__class__ is not str:
            raise BadShape("tool_calls[].type is not a string")
        if typ and not slot[1]:
            slot[1] = typ
        fn = tc.get("function")
        if fn:
            name = fn.get("name")
            if name is not None and name.__class__ is not str:
                raise BadShape("tool_calls[].function.name is not a string")
            if name and not slot[2]:
                slot[2] = name
            args = fn.get("arguments")
            if args:
                slot[3].append(args if isinstance(args, str) else orjson.dumps(args).decode())
        elif fn is not None and fn.__class__ is not dict:
            raise BadShape("tool_calls[].function is not an object")
