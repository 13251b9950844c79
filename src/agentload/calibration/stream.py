"""One streamed completion as a calibration sees it: when each chunk came, with how many tokens.

Requests go to ``/v1/completions`` with a plain prompt (no chat template, so the real server and
the simulator count the same tokens), ``ignore_eos`` and ``continuous_usage_stats`` (every
event carries the running ``completion_tokens``, so a chunk that holds several tokens shows it).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from agentload.client.safety import redact, split_userinfo
from agentload.client.sse import SSEParser
from agentload.redact import url_secrets
from agentload.sim.modeltime import MODEL_TIMES_HEADER


class ProbeError(Exception):
    """The server refused or broke a probe request (one line, shown to the user)."""


@dataclass
class Call:
    """One request: its start and its chunks, on one clock (wall or the simulator's model)."""

    start: float
    times: list[float] = field(default_factory=list)
    """Arrival of each chunk (events read together count as one chunk)."""
    counts: list[int] = field(default_factory=list)
    """Completion tokens received so far, at each chunk."""
    prompt_tokens: int = 0
    cached_tokens: int | None = None
    rid: str = ""
    chunk_tokens: list[int] = field(default_factory=list)
    """Tokens per chunk on the wire (after the first chunk), whatever clock the times use."""

    @property
    def ttft(self) -> float:
        return self.times[0] - self.start

    @property
    def tokens(self) -> int:
        return self.counts[-1] if self.counts else 0

    def tpot(self) -> float | None:
        """Mean time per output token after the first."""
        if len(self.times) < 2 or self.counts[-1] <= self.counts[0]:
            return None
        return (self.times[-1] - self.times[0]) / (self.counts[-1] - self.counts[0])

    def gaps(self) -> list[float]:
        return [b - a for a, b in zip(self.times, self.times[1:], strict=False)]


@dataclass
class Target:
    """The server under calibration."""

    base_url: str
    model: str
    api_key: str | None = None
    model_times: bool = False
    """Ask the simulator for model-clock timings (only an agentload simulator has them)."""
    timeout_s: float = 300.0
    _basic: str | None = field(default=None, init=False, repr=False)
    _secrets: tuple[str, ...] = field(default=(), init=False, repr=False)

    def __post_init__(self) -> None:
        # `http://user:pass@host` leaves the URL (so no message or saved file shows it, and
        # aiohttp does not refuse it next to a key) and goes out as a Basic header when no
        # key is given, as `agentload run` sends it; with a key, the key is what is sent.
        secrets = url_secrets(self.base_url)
        self.base_url, self._basic = split_userinfo(self.base_url)
        if self.api_key:
            secrets.add(self.api_key)
        self._secrets = tuple(secrets)

    def redact(self, text: str) -> str:
        """`text` (a server's reply) without the key or the URL's credentials."""
        return redact(text, self._secrets)

    def headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        elif self._basic:
            h["Authorization"] = self._basic
        if self.model_times:
            h[MODEL_TIMES_HEADER] = "1"
        return h

    @property
    def root(self) -> str:
        return self.base_url.rstrip("/").removesuffix("/v1")


def _apply(call: Call, event: dict[str, Any]) -> int | None:
    """Record an event's ids and usage; the running completion-token count if it has one."""
    if "error" in event:
        raise ProbeError(f"the server sent an error event: {str(event['error'])[:200]}")
    call.rid = call.rid or str(event.get("id", ""))
    usage = event.get("usage") or {}
    if usage:
        call.prompt_tokens = int(usage.get("prompt_tokens") or call.prompt_tokens)
        details = usage.get("prompt_tokens_details") or {}
        if details.get("cached_tokens") is not None:
            call.cached_tokens = int(details["cached_tokens"])
    if not event.get("choices"):
        return None
    n = usage.get("completion_tokens")
    return int(n) if n is not None else None


def _payloads(sse: SSEParser, data: bytes) -> list[bytes]:
    """The JSON payloads of the events `data` completes (the client's SSE splitter); an
    `event: error` is the server refusing the probe."""
    out = [d for raw in sse.feed(data) if (d := raw.strip()) and d != b"[DONE]"]
    if sse.errors:
        text = sse.errors[0][:200].decode(errors="replace")
        raise ProbeError(f"the server sent an error event: {text}")
    return out


async def _framed(content: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """The body as the server framed it, one HTTP chunk at a time."""
    buf = b""
    async for data, end_of_chunk in content.iter_chunks():
        buf += data
        if end_of_chunk:
            yield buf
            buf = b""
    if buf:
        yield buf


async def stream_call(
    http: aiohttp.ClientSession,
    target: Target,
    prompt: str,
    max_tokens: int,
    call: Call | None = None,
) -> Call:
    """Send one completion and read its stream to the end (filling `call` as chunks come,
    so a caller can watch its progress). A pooled connection the server closed while idle is
    retried once on a new one."""
    for attempt in (1, 2):
        try:
            return await _stream_once(http, target, prompt, max_tokens, call)
        except aiohttp.ServerDisconnectedError:
            if attempt == 2 or (call is not None and call.times):
                raise ProbeError(f"{target.base_url}: the server closed the connection") from None
    raise AssertionError("unreachable")


async def _stream_once(
    http: aiohttp.ClientSession,
    target: Target,
    prompt: str,
    max_tokens: int,
    call: Call | None,
) -> Call:
    body = {
        "model": target.model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    clock = time.perf_counter
    if call is None:
        call = Call(start=clock())
    else:
        call.start = clock()
    try:
        async with http.post(
            f"{target.base_url.rstrip('/')}/completions",
            data=orjson.dumps(body),
            headers=target.headers(),
            timeout=aiohttp.ClientTimeout(total=target.timeout_s),
        ) as r:
            if r.status != 200:
                text = target.redact((await r.text())[:300].replace("\n", " "))
                raise ProbeError(f"HTTP {r.status} from {target.base_url}: {text}")
            sse = SSEParser()
            last = 0
            # The simulator's own chunks by their HTTP framing: on a busy test host reads
            # merge chunks the server wrote apart, which is not the output coalescing it models.
            source = _framed(r.content) if target.model_times else r.content.iter_any()
            async for data in source:
                now = clock()
                seen = last
                for raw in _payloads(sse, data):
                    n = _apply(call, orjson.loads(raw))
                    if n is not None:
                        seen = max(seen, n)
                if seen > last:
                    call.times.append(now)
                    call.counts.append(seen)
                    if call.counts[:-1]:
                        call.chunk_tokens.append(seen - last)
                    last = seen
    except aiohttp.ServerDisconnectedError:
        if call.times:
            raise ProbeError(f"{target.base_url}: the server closed the stream") from None
        raise
    except (TimeoutError, aiohttp.ClientError) as exc:
        raise ProbeError(
            f"request to {target.base_url} failed: {type(exc).__name__}: {target.redact(str(exc))}"
        ) from None
    if not call.times:
        raise ProbeError(f"{target.base_url}: a stream ended without tokens")
    return call


async def model_clock(http: aiohttp.ClientSession, target: Target, call: Call) -> Call:
    """The same call on the simulator's model clock (per token, no chunking)."""
    url = f"{target.root}/sim/model-times/{call.rid}"
    async with http.get(url, headers=target.headers()) as r:
        if r.status != 200:
            raise ProbeError(f"{url}: HTTP {r.status}")
        item = orjson.loads(await r.read())
    times = [float(t) for t in item["token_s"]]
    return Call(
        start=float(item["arrival_s"]),
        times=times,
        counts=list(range(1, len(times) + 1)),
        prompt_tokens=int(item["prompt_tokens"]),
        cached_tokens=int(item["cached_tokens"]),
        rid=call.rid,
        chunk_tokens=call.chunk_tokens,
    )


async def get_json(http: aiohttp.ClientSession, url: str, target: Target) -> Any:
    """A JSON document, or None when the server has no such endpoint."""
    try:
        async with http.get(url, headers=target.headers(), timeout=aiohttp.ClientTimeout(10)) as r:
            if r.status != 200:
                return None
            return orjson.loads(await r.read())
    except (TimeoutError, aiohttp.ClientError, orjson.JSONDecodeError):
        return None


async def get_text(http: aiohttp.ClientSession, url: str, target: Target) -> str | None:
    try:
        async with http.get(url, headers=target.headers(), timeout=aiohttp.ClientTimeout(10)) as r:
            return await r.text() if r.status == 200 else None
    except (TimeoutError, aiohttp.ClientError):
        return None
