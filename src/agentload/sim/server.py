"""The simulator's HTTP server: vLLM's OpenAI-compatible wire format over the engine model."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import random
import socket
import statistics
import struct
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, Protocol

import orjson
from aiohttp import web

from agentload import __version__
from agentload.sim.behaviour import BehaviourSet, RequestView, ResponsePlan
from agentload.sim.coalesce import coalescing, van_der_corput
from agentload.sim.config import SimConfig
from agentload.sim.engine import Engine, FrontEndSlot, Seq
from agentload.sim.faults import FAULT_HEADER, HTTP_FAULT_BODIES, HTTP_FAULTS, choose_fault
from agentload.sim.guard import guard_middleware
from agentload.sim.metrics import SimMetrics
from agentload.sim.modeltime import MODEL_TIMES_HEADER, ModelTimes
from agentload.sim.profiles import Profile
from agentload.sim.tokenizer import make_tokenizer, render_chat_parts, split_pieces
from agentload.wire import EPISODE_HEADER, ROLE_HEADER, SESSION_HEADER

log = logging.getLogger("agentload.sim")

FINGERPRINT = f"agentload-sim-{__version__}"

_ID_RNG = random.Random()
"""Response ids are unique, not reproducible (tool-call ids follow the seeded output)."""

# token item kinds
HIDDEN, CONTENT, REASONING, TOOL_HEADER, TOOL_ARGS = range(5)
Item = tuple[int, str, int]

_NULL_DELTA_SUFFIX = b',"logprobs":null,"finish_reason":null,"token_ids":null}]}\n\n'
_DONE = b"data: [DONE]\n\n"
_END = b"0\r\n\r\n"
CARRY_MAX = 64 << 10
# Prompts shorter than this (about 1,000 tokens, under a millisecond to tokenise) are
# tokenised inline: the hop to a worker thread and back costs more than it saves.
OFF_LOOP_CHARS = 4096
TOKENIZE_THREADS = 2
MAX_BODY = 64 << 20
"""The largest request body accepted (aiohttp's application answers 413 above it)."""


def _frame(data: bytes) -> bytes:
    """One HTTP/1.1 chunk."""
    return b"%x\r\n%b\r\n" % (len(data), data)


def _finish_suffix(reason: str) -> bytes:
    return (
        b',"logprobs":null,"finish_reason":"'
        + reason.encode()
        + b'","stop_reason":null,"token_ids":null}]}\n\n'
    )


def _take_headers(writer: Any) -> bytes | None:
    """The status line and headers aiohttp buffered but has not sent, taken over by the
    caller (None where this aiohttp keeps no such buffer: then it sends them itself)."""
    buf = getattr(writer, "_headers_buf", None)
    if not buf or getattr(writer, "_headers_written", True):
        return None
    writer._headers_buf = None
    writer._headers_written = True
    return bytes(buf)


def error_body(
    message: str, status: int, etype: str = "BadRequestError", param: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": etype, "param": param, "code": status}}


class RequestError(Exception):
    def __init__(
        self, status: int, message: str, etype: str = "BadRequestError", param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = error_body(message, status, etype, param)


def json_response(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


class Front(Protocol):
    """What a generation request needs from the HTTP server that received it: aiohttp's
    application (every path) or the simulator's own fast path (`sim/fasthttp.py`)."""

    path: str
    headers: Mapping[str, str]
    transport: asyncio.Transport | None
    auto_end: bool
    """Whether the stream writes its last chunk itself, with its last events."""

    async def body(self) -> bytes:
        """The request body (RequestError 408 when it does not arrive in time)."""
        ...

    def reply(
        self, status: int, body: bytes, headers: dict[str, str] | None = None, close: bool = False
    ) -> None:
        """A complete JSON reply."""
        ...

    async def open_stream(self, hold: bool) -> bytes | None:
        """Start an SSE reply; with `hold`, return its status line and headers unsent (None
        where they went out). ConnectionError when the client is gone."""
        ...

    async def end_stream(self) -> None:
        """End the SSE reply (its last chunk)."""
        ...


class AiohttpFront:
    """A request that came through aiohttp's application; `response` is what to return."""

    auto_end = False  # aiohttp's writer ends the chunked body

    def __init__(self, request: web.Request, body_timeout_s: float) -> None:
        self.request = request
        self.path = request.path
        self.headers: Mapping[str, str] = request.headers
        self.transport = request.transport
        self.body_timeout_s = body_timeout_s
        self.response: web.StreamResponse | None = None

    async def body(self) -> bytes:
        try:
            async with asyncio.timeout(self.body_timeout_s):
                return await self.request.read()
        except TimeoutError:
            raise RequestError(
                408, f"The request body did not arrive within {self.body_timeout_s:g} s."
            ) from None

    def reply(
        self, status: int, body: bytes, headers: dict[str, str] | None = None, close: bool = False
    ) -> None:
        resp = web.Response(
            body=body, status=status, content_type="application/json", headers=headers
        )
        if close:
            resp.force_close()
        self.response = resp

    async def open_stream(self, hold: bool) -> bytes | None:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        resp.enable_chunked_encoding()
        self.response = resp
        if hold:
            resp._send_headers_immediately = False
        writer = await resp.prepare(self.request)
        head = _take_headers(writer) if hold else None
        send_headers = getattr(writer, "send_headers", None)
        if head is None and send_headers is not None:
            send_headers()
        return head

    async def end_stream(self) -> None:
        if self.response is not None:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self.response.write_eof()


def plan_items(
    plan: ResponsePlan, thinking: bool, rng: random.Random
) -> tuple[list[Item], list[str]]:
    """The token sequence of a plan: what each generated token shows on the wire."""
    items: list[Item] = []
    ids: list[str] = []
    if plan.reasoning:
        items.extend((REASONING, piece, 0) for piece in split_pieces(plan.reasoning))
    if thinking:
        items.append((HIDDEN, "</think>", 0))
        items.append((HIDDEN, "\n\n", 0))
    if plan.content:
        items.extend((CONTENT, piece, 0) for piece in split_pieces(plan.content))
    for i, call in enumerate(plan.tool_calls):
        opening = split_pieces(f'<tool_call>\n{{"name": "{call.name}", "arguments": ')
        items.extend((HIDDEN, "", i) for _ in range(max(0, len(opening) - 1)))
        items.append((TOOL_HEADER, call.name, i))
        items.extend((TOOL_ARGS, piece, i) for piece in split_pieces(call.arguments))
        items.extend((HIDDEN, "", i) for _ in split_pieces("}\n</tool_call>"))
        ids.append(f"chatcmpl-tool-{rng.getrandbits(64):016x}")
    return items, ids


def _fault_index(items: list[Item], after: int) -> int:
    """Index of the token at which a mid-stream fault strikes: after `after` tokens that show
    on the wire. Hidden tokens (a tool-call parser's `<tool_call>` opening, `</think>`) do not
    count, so a client always sees `after` tokens first, tool-call answers included."""
    if after <= 0:
        return 0
    seen = 0
    for i, (kind, _, _) in enumerate(items):
        if kind != HIDDEN:
            seen += 1
            if seen == after:
                return i + 1
    return len(items)


class _Out:
    """Common state of one request's output."""

    def __init__(
        self, sim: SimApp, rid: str, items: list[Item], tool_ids: list[str], fault: str | None
    ) -> None:
        self.sim = sim
        self.rid = rid
        self.items = items
        self.tool_ids = tool_ids
        self.has_tools = bool(tool_ids)
        self.fault = fault
        # The engine's loop: asyncio.get_running_loop() per request would cost a getpid()
        # system call each time (CPython 3.11 checks the pid).
        self.future: asyncio.Future[str] = sim.loop().create_future()

    def _resolve(self, value: str) -> None:
        if not self.future.done():
            self.future.set_result(value)

    def aborted(self, seq: Seq | None) -> None:
        self._resolve("aborted")

    def usage(self, seq: Seq) -> dict[str, Any]:
        return {
            "prompt_tokens": seq.prompt_len,
            "total_tokens": seq.prompt_len + seq.num_output,
            "completion_tokens": seq.num_output,
            "prompt_tokens_details": {
                "cached_tokens": seq.cached_tokens,
                "created_cache_tokens": seq.created_cache_tokens,
            },
        }

    def finish_name(self, finish: str) -> str:
        return "tool_calls" if finish == "stop" and self.has_tools else finish


class StreamOut(_Out):
    """Server-sent events written straight to the transport as the engine emits tokens."""

    def __init__(
        self,
        sim: SimApp,
        rid: str,
        items: list[Item],
        tool_ids: list[str],
        fault: str | None,
        transport: asyncio.Transport,
        *,
        chat: bool,
        include_usage: bool,
        created: int,
        continuous_usage: bool = False,
        head: bytes | None = None,
        auto_end: bool = False,
    ) -> None:
        super().__init__(sim, rid, items, tool_ids, fault)
        self.continuous_usage = continuous_usage
        # Write the chunked body's last chunk as soon as the stream is over (with the last
        # events where they are gathered): `ended` tells the front end it is out.
        self.auto_end = auto_end
        self.ended = False
        self.transport = transport
        # The response's status line and headers when they go out with the first events
        # (instant profile), not on their own.
        self.pending_head = head
        self.chat = chat
        self.include_usage = include_usage
        obj = b"chat.completion.chunk" if chat else b"text_completion"
        self.head = (
            b'data: {"id":"'
            + rid.encode()
            + b'","object":"'
            + obj
            + b'","created":'
            + str(created).encode()
            + b',"model":'
            + orjson.dumps(sim.config.model)
        )
        self.prefix = self.head + (
            b',"choices":[{"index":0,"delta":' if chat else b',"choices":[{"index":0,"text":'
        )
        self.held: list[bytes] | None = None
        self.fault_at = -1
        if fault in ("reset", "truncate", "malformed", "stall", "error_event"):
            self.fault_at = _fault_index(items, sim.config.fault_after_tokens)
        elif fault == "stall_first_token":
            self.fault_at = 0
        # The event of every middle token, built now, at admission, so that a step's
        # emission loop only looks bytes up (each µs per token here is 0.25 ms per step of a
        # 256-sequence batch, and moves tokens away from their assigned time).
        self.ready: list[bytes | None] | None = None
        if chat and not continuous_usage:
            prefix = self.prefix
            # Stored with their HTTP chunk framing, ready for the transport.
            self.ready = [
                None
                if (d := self._delta(item)) is None
                else _frame(prefix + d + _NULL_DELTA_SUFFIX)
                for item in items
            ]
            self.filler = _frame(prefix + orjson.dumps({"content": " the"}) + _NULL_DELTA_SUFFIX)

    def _resolve(self, value: str) -> None:
        if self.auto_end and not self.ended and value in ("done", "truncate"):
            self.ended = True
            gathered = self.sim.gathered
            if (gathered is None or self not in gathered) and not self.transport.is_closing():
                self.send(_END)
            # else the burst's write of this stream appends it (SimApp._gather_end)
        super()._resolve(value)

    # -- bytes -----------------------------------------------------------------------------
    def _delta(self, item: Item) -> bytes | None:
        kind, text, idx = item
        if kind == CONTENT:
            return orjson.dumps({"content": text})
        if kind == REASONING:
            return orjson.dumps({"reasoning_content": text})
        if kind == TOOL_HEADER:
            return orjson.dumps(
                {
                    "content": None,
                    "tool_calls": [
                        {
                            "id": self.tool_ids[idx],
                            "type": "function",
                            "index": idx,
                            "function": {"name": text},
                        }
                    ],
                }
            )
        if kind == TOOL_ARGS:
            return orjson.dumps(
                {"content": None, "tool_calls": [{"index": idx, "function": {"arguments": text}}]}
            )
        return None

    def _write_framed(self, framed: bytes, seq: Seq) -> None:
        """_write for an event already framed as an HTTP chunk (the emission fast path)."""
        t = self.transport
        if self.held is None and self.sim.gathered is None and not t.is_closing():
            self.send(framed)
        else:
            self._write(framed[framed.index(b"\r\n") + 2 : -2], seq)

    def _write(self, data: bytes, seq: Seq) -> None:
        if self.held is not None:
            self.held.append(data)
            return
        t = self.transport
        if t.is_closing():
            self.sim.engine.abort(seq)
            self._resolve("gone")
            return
        gathered = self.sim.gathered
        if gathered is None:
            self.send(b"%x\r\n%b\r\n" % (len(data), data))
        elif self in gathered:
            gathered[self].append(data)
        else:
            gathered[self] = [data]

    def send(self, framed: bytes) -> None:
        """Write HTTP chunks to the socket (after the held headers, if any)."""
        head = self.pending_head
        if head is not None:
            self.pending_head = None
            framed = head + framed
        self.transport.write(framed)

    def _finish_parts(self, parts: list[bytes], seq: Seq, delta: bytes | None, finish: str) -> None:
        """The last token's events: its delta with the finish reason, usage, [DONE]."""
        name = self.finish_name(finish)
        if not self.chat:
            parts.append(
                self.prefix + (delta or b'""') + b',"logprobs":null,'
                b'"finish_reason":"' + name.encode() + b'","stop_reason":null}]}\n\n'
            )
        elif delta is not None and not self.has_tools:
            parts.append(self.prefix + delta + _finish_suffix(name))
        else:
            if delta is not None:
                parts.append(self.prefix + delta + _NULL_DELTA_SUFFIX)
            empty = b'{"content":""}' if name == "stop" else b"{}"
            parts.append(self.prefix + empty + _finish_suffix(name))
        if self.include_usage:
            parts.append(
                self.head
                + b',"choices":[],"usage":'
                + orjson.dumps(self.usage(seq))
                + b',"system_fingerprint":"'
                + FINGERPRINT.encode()
                + b'"}\n\n'
            )
        parts.append(_DONE)

    def token(self, seq: Seq, index: int, finish: str | None, now: float) -> None:
        ready = self.ready
        if ready is not None and finish is None and index > 0 and index != self.fault_at:
            if index < len(ready):
                data = ready[index]
                if data is not None:
                    self._write_framed(data, seq)
                return
            if seq.ignore_eos and index >= seq.plan_len:
                self._write_framed(self.filler, seq)
                return
        parts: list[bytes] = []
        if index == 0 and self.chat:
            parts.append(
                self.prefix + b'{"role":"assistant","content":""},"logprobs":null,'
                b'"finish_reason":null}],"prompt_token_ids":null,"prompt_text":null}\n\n'
            )
        items = self.items
        if index < len(items):
            delta = self._delta(items[index]) if self.chat else orjson.dumps(items[index][1])
        elif seq.ignore_eos and index >= seq.plan_len:
            delta = orjson.dumps({"content": " the"}) if self.chat else b'" the"'
        else:
            delta = None  # the end-of-sequence token
        fault_now = self.fault_at >= 0 and (
            index == self.fault_at or (finish is not None and index < self.fault_at)
        )
        cut = fault_now and self.fault in ("reset", "truncate", "error_event")
        if finish is not None and not cut:
            self._finish_parts(parts, seq, delta, finish)
        elif delta is not None:
            if self.chat:
                parts.append(self.prefix + delta + _NULL_DELTA_SUFFIX)
            else:
                parts.append(
                    self.prefix + delta + b',"logprobs":null,"finish_reason":null,'
                    b'"stop_reason":null}]}\n\n'
                )
        if self.continuous_usage and parts:
            usage = orjson.dumps(
                {
                    "prompt_tokens": seq.prompt_len,
                    "total_tokens": seq.prompt_len + seq.num_output,
                    "completion_tokens": seq.num_output,
                }
            )
            parts = [
                p[:-3] + b',"usage":' + usage + b"}\n\n" if p.endswith(b"}]}\n\n") else p
                for p in parts
            ]
        if fault_now:
            self._fault(seq, parts, now)
            return
        if parts:
            self._write(b"".join(parts), seq)
        if finish is not None and self.held is None:
            self._resolve("done")

    # -- faults ----------------------------------------------------------------------------
    def _fault(self, seq: Seq, parts: list[bytes], now: float) -> None:
        fault = self.fault
        self.fault_at = -2
        if fault in ("stall", "stall_first_token"):
            self.held = []
            if parts:
                self.held.append(b"".join(parts))
            asyncio.get_running_loop().call_later(self.sim.config.fault_stall_s, self._release, seq)
            return
        if fault == "malformed":
            self._write(self.head + b',"choices":[{"index":0,"delta":{"content":"\n\n', seq)
        if parts:
            self._write(b"".join(parts), seq)
        if fault == "malformed":
            if seq.finished:
                self._resolve("done")
            return
        if fault == "error_event":
            self._write(
                b'data: {"error":{"object":"error","message":"Internal server error '
                b'(injected by agentload sim)","type":"InternalServerError","param":null,'
                b'"code":500}}\n\n' + _DONE,
                seq,
            )
        self.sim.engine.abort(seq)
        if fault == "reset":
            sock = self.transport.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.transport.abort()
            self._resolve("reset")
        else:
            self._resolve("truncate")

    def release_held(self, seq: Seq) -> None:
        """Write the events held back (a stall, coalesced tokens) as one chunk."""
        self._release(seq)

    def _release(self, seq: Seq) -> None:
        held, self.held = self.held or [], None
        data = b"".join(held)
        if data:
            self._write(data, seq)
        if seq.finished:
            self._resolve("done")


class CollectOut(_Out):
    """A non-streamed response, built when the last token leaves."""

    def __init__(
        self,
        sim: SimApp,
        rid: str,
        items: list[Item],
        tool_ids: list[str],
        fault: str | None,
        *,
        chat: bool,
        created: int,
    ) -> None:
        super().__init__(sim, rid, items, tool_ids, fault)
        self.chat = chat
        self.created = created
        self.body: bytes = b""

    def token(self, seq: Seq, index: int, finish: str | None, now: float) -> None:
        if finish is None:
            return
        n = seq.num_output
        items = self.items[:n]
        content = "".join(t for k, t, _ in items if k == CONTENT)
        if seq.ignore_eos and n > seq.plan_len:
            content += " the" * (n - seq.plan_len)
        reasoning = "".join(t for k, t, _ in items if k == REASONING)
        name = self.finish_name(finish)
        if not self.chat:
            body: dict[str, Any] = {
                "id": self.rid,
                "object": "text_completion",
                "created": self.created,
                "model": self.sim.config.model,
                "choices": [
                    {
                        "index": 0,
                        "text": content,
                        "logprobs": None,
                        "finish_reason": name,
                        "stop_reason": None,
                        "prompt_logprobs": None,
                    }
                ],
                "usage": self.usage(seq),
                "kv_transfer_params": None,
            }
        else:
            calls: list[dict[str, Any]] = []
            for k, text, idx in items:
                if k == TOOL_HEADER:
                    calls.append(
                        {
                            "id": self.tool_ids[idx],
                            "type": "function",
                            "function": {"name": text, "arguments": ""},
                        }
                    )
                elif k == TOOL_ARGS and calls:
                    calls[-1]["function"]["arguments"] += text
            message = {
                "role": "assistant",
                "content": content or (None if calls else ""),
                "refusal": None,
                "annotations": None,
                "audio": None,
                "function_call": None,
                "tool_calls": calls,
                "reasoning_content": reasoning or None,
            }
            body = {
                "id": self.rid,
                "object": "chat.completion",
                "created": self.created,
                "model": self.sim.config.model,
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "logprobs": None,
                        "finish_reason": name,
                        "stop_reason": None,
                        "token_ids": None,
                    }
                ],
                "service_tier": None,
                "system_fingerprint": FINGERPRINT,
                "usage": self.usage(seq),
                "prompt_logprobs": None,
                "prompt_token_ids": None,
                "kv_transfer_params": None,
            }
        self.body = orjson.dumps(body)
        self._resolve("done")


class _Admitted(NamedTuple):
    """A request that passed validation: what the later phases of _generate need."""

    body: dict[str, Any]
    parts: list[str]
    prompt_len: int
    hashes: list[int]
    tools: list[dict[str, Any]]
    tool_choice: Any
    thinking: bool
    max_tokens: int
    counter: int
    fault: str | None


def _stable_digest(*parts: str) -> int:
    h = hashlib.blake2b(digest_size=8)
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return int.from_bytes(h.digest(), "big")


_NORMAL = statistics.NormalDist()


def request_overhead(p: Profile, n: int) -> float:
    """The fixed part of the n-th request's front end (n >= 0): lognormal, with median
    `request_overhead_s` and sigma `request_overhead_sigma`. Its quantile is the n-th point of
    the base-3 van der Corput sequence, so a run is reproducible, any 3^k consecutive requests
    cover the distribution evenly, and the draw is independent of the base-2 one that holds a
    stream's first token (coalesce.py)."""
    if p.request_overhead_sigma <= 0:
        return p.request_overhead_s
    z = _NORMAL.inv_cdf(van_der_corput(n + 1, 3))
    return p.request_overhead_s * math.exp(p.request_overhead_sigma * z)


class SimApp:
    """One simulator: engine, metrics, behaviours and the aiohttp application."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self._loop: asyncio.AbstractEventLoop | None = None
        self.profile = config.resolved_profile()
        # A profile without model time (instant): every timing coefficient zero.
        self.zero_time = not any(
            v for k, v in self.profile.model_dump().items() if k.endswith("_s") and v
        )
        self.tokenizer = make_tokenizer(config.tokenizer)
        self._tokenize_pool = (
            ThreadPoolExecutor(TOKENIZE_THREADS, thread_name_prefix="sim-tokenize")
            if self.tokenizer.releases_gil
            else None
        )
        self.metrics = SimMetrics(
            config.model,
            block_size=self.profile.block_size,
            kv_blocks=self.profile.kv_blocks,
            prefix_caching=config.prefix_caching,
        )
        self.engine = Engine(
            self.profile,
            self.metrics,
            speedup=config.speedup,
            prefix_caching=config.prefix_caching,
            log_interval_s=config.log_interval_s,
        )
        self.behaviours = BehaviourSet(config)
        self.counter = 0
        self.created = int(time.time())
        self.app = web.Application(
            middlewares=[guard_middleware, self._auth_middleware], client_max_size=MAX_BODY
        )
        self.app.router.add_post("/v1/chat/completions", self.chat_completions)
        self.app.router.add_post("/v1/completions", self.completions)
        self.app.router.add_get("/v1/models", self.models)
        self.app.router.add_get("/health", self.health)
        self.app.router.add_get("/version", self.version)
        self.app.router.add_get("/metrics", self.metrics_handler)
        self.app.router.add_get("/sim/stats", self.stats_handler)
        self.model_times = ModelTimes()
        self.app.router.add_get("/sim/model-times/{rid}", self.model_times.handler)
        self._engine_task: asyncio.Task[None] | None = None
        self.active: set[_Out] = set()
        # While not None, streams append their chunks here instead of writing at once.
        self.gathered: dict[StreamOut, list[bytes]] | None = None
        # Events of unfinished streams kept from one burst to the next (see _gather_end).
        self.carried: dict[StreamOut, list[bytes]] = {}
        self.engine.write_gather_begin = self._gather_begin
        self.engine.write_gather_end = self._gather_end

    def _gather_begin(self) -> None:
        self.gathered, self.carried = self.carried, {}

    def _gather_end(self) -> None:
        gathered, self.gathered = self.gathered, None
        carried = self.carried
        # One HTTP chunk per stream and burst: the events are the same, and the client's
        # HTTP parser does per-chunk work. A stream that is not over yet keeps its events for
        # the next burst (up to CARRY_MAX bytes): with no model time there is no token time
        # to keep, and one write per answer instead of one per burst halves the CPU the
        # simulator spends on a short answer. Not for streams with a fault, whose cut must
        # come after the tokens it follows.
        for out, parts in (gathered or {}).items():
            if out.transport.is_closing():
                continue
            data = b"".join(parts) if len(parts) > 1 else parts[0]
            if not out.future.done() and out.fault is None and len(data) < CARRY_MAX:
                carried[out] = [data]
                continue
            framed = b"%x\r\n%b\r\n" % (len(data), data)
            out.send(framed + _END if out.ended else framed)

    # -- lifecycle -------------------------------------------------------------------------
    def start_engine(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._engine_task = self._loop.create_task(self.engine.run())

    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop the engine runs on (the running one before the engine starts)."""
        return self._loop or asyncio.get_running_loop()

    async def stop_engine(self) -> None:
        self.engine.shutdown()
        if self._tokenize_pool is not None:
            self._tokenize_pool.shutdown(wait=False, cancel_futures=True)
        for out in list(self.active):
            out.aborted(None)
        if self._engine_task is not None:
            self._engine_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._engine_task
            self._engine_task = None

    # -- middleware ------------------------------------------------------------------------
    @web.middleware
    async def _auth_middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path.startswith("/v1") and self.unauthorized(request.path, request.headers):
            return json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    def unauthorized(self, path: str, headers: Mapping[str, str]) -> bool:
        """A request to `path` without the configured API key (counted as a 401)."""
        key = self.config.api_key
        if key and headers.get("Authorization", "") != f"Bearer {key}":
            self.metrics.count_http(path, 401)
            return True
        return False

    # -- simple endpoints ------------------------------------------------------------------
    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        # vLLM answers {"version": ...}; `server` tells preflight this is the simulator.
        from agentload import __version__

        return json_response({"version": __version__, "server": "agentload-sim"})

    async def models(self, request: web.Request) -> web.Response:
        m = self.config.model
        return json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": m,
                        "object": "model",
                        "created": self.created,
                        "owned_by": "vllm",
                        "root": m,
                        "parent": None,
                        "max_model_len": self.profile.max_model_len,
                        "permission": [
                            {
                                "id": f"modelperm-{m}",
                                "object": "model_permission",
                                "created": self.created,
                                "allow_create_engine": False,
                                "allow_sampling": True,
                                "allow_logprobs": True,
                                "allow_search_indices": False,
                                "allow_view": True,
                                "allow_fine_tuning": False,
                                "organization": "*",
                                "group": None,
                                "is_blocking": False,
                            }
                        ],
                    }
                ],
            }
        )

    async def metrics_handler(self, request: web.Request) -> web.Response:
        return web.Response(
            body=self.metrics.render(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )

    async def stats_handler(self, request: web.Request) -> web.Response:
        """The simulator's own figures as JSON; ``?reset=1`` restarts the lag window."""
        m = self.metrics
        body = {
            "running": len(self.engine.running),
            "waiting": len(self.engine.waiting),
            "steps": self.engine.steps,
            "generation_tokens": m.generation_tokens,
            "emitted_tokens_total": m.fine_lag.n,
            "late_steps": m.step_overrun,
            "preemptions": m.preemptions,
            "kv_cache_usage": self.engine.pool.usage(),
            "monotonic_s": time.monotonic(),
            "process_cpu_s": time.process_time(),
        }
        window = m.fine_lag.window()
        body.update(
            {
                "emitted_tokens": window["tokens"],
                "emission_lag_p50_s": window["p50"],
                "emission_lag_p99_s": window["p99"],
                "emission_lag_p999_s": window["p999"],
                "emission_lag_max_s": window["max"],
            }
        )
        if request.query.get("reset"):
            m.fine_lag.mark()
            m.step_overrun = 0
        return json_response(body)

    # -- generation ------------------------------------------------------------------------
    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve_aiohttp(request, chat=True)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve_aiohttp(request, chat=False)

    async def _serve_aiohttp(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        front = AiohttpFront(request, self.config.body_timeout_s)
        await self.generate(front, chat=chat)
        return front.response or web.Response(status=200)

    @staticmethod
    def _parse(raw: bytes) -> dict[str, Any]:
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise RequestError(400, f"Invalid JSON body: {exc}") from exc
        if not isinstance(body, dict):
            raise RequestError(400, "The request body must be a JSON object.")
        return body

    def _validate_common(self, body: dict[str, Any]) -> None:
        model = body.get("model")
        if model is not None and model != self.config.model:
            raise RequestError(
                404, f"The model `{model}` does not exist.", "NotFoundError", "model"
            )
        n = body.get("n", 1)
        if n is not None and n != 1:
            raise RequestError(
                400,
                f"n={n} is not supported: the agentload simulator "
                "generates one choice per request (n must be 1).",
                param="n",
            )
        if body.get("use_beam_search") or (body.get("best_of") or 1) > 1:
            raise RequestError(
                400,
                "best_of and beam search are not supported by the agentload simulator.",
                param="best_of",
            )

    def _max_tokens(self, body: dict[str, Any], prompt_len: int) -> int:
        max_len = self.profile.max_model_len
        if prompt_len >= max_len:
            raise RequestError(
                400,
                f"This model's maximum context length is {max_len} tokens. However, your "
                f"request has {prompt_len} input tokens. Please reduce the length of the input "
                "messages.",
            )
        requested = body.get("max_completion_tokens")
        if requested is None:
            requested = body.get("max_tokens")
        if requested is None:
            return max_len - prompt_len
        if not isinstance(requested, int) or requested < 1:
            raise RequestError(
                400, f"max_tokens must be at least 1, got {requested}.", param="max_tokens"
            )
        if requested > max_len - prompt_len:
            raise RequestError(
                400,
                f"'max_tokens' or 'max_completion_tokens' is too large: {requested}. This "
                f"model's maximum context length is {max_len} tokens and your request has "
                f"{prompt_len} input tokens ({requested} > {max_len} - {prompt_len}). "
                f"(parameter=max_tokens, value={requested})",
                param="max_tokens",
            )
        return requested

    async def generate(self, front: Front, *, chat: bool) -> None:
        """One generation request, in phases: admit, inject an HTTP fault, plan the answer,
        open the output, run it through the engine, and (non-streamed) reply."""
        arrival = time.monotonic()
        # in the front end from now until the queue: the engine's steps pay frontend_step_s
        slot = FrontEndSlot(self.engine)
        try:
            await self._generate(front, chat, arrival, slot)
        finally:
            slot.leave()

    async def _generate(self, front: Front, chat: bool, arrival: float, slot: FrontEndSlot) -> None:
        handler = front.path
        admitted = await self._admit(front, chat)
        if admitted is None:
            return
        fault = admitted.fault
        if fault is not None:
            self.metrics.faults[fault] = self.metrics.faults.get(fault, 0) + 1
        if fault in HTTP_FAULTS:
            self._http_fault(front, handler, HTTP_FAULTS[fault])
            return
        planned = self._plan(front, admitted, chat)
        if planned is None:
            return
        items, tool_ids = planned
        m = self.metrics
        m.request_max_tokens.observe(admitted.max_tokens)
        m.request_params_n.observe(1)
        out = await self._open_output(front, admitted, items, tool_ids, chat)
        if out is None:
            return
        record = front.headers.get(MODEL_TIMES_HEADER) == "1"
        outcome = await self._run_engine(admitted, items, out, arrival, slot, record=record)
        m.count_http(handler, 200)
        if isinstance(out, StreamOut):
            if outcome in ("done", "truncate", "aborted") and not out.ended:
                await front.end_stream()
            return
        await self._full_reply(front, out, fault, outcome)

    async def _admit(self, front: Front, chat: bool) -> _Admitted | None:
        """Parse and validate the request, size it, and pick its fault; or None once the
        error reply is out."""
        handler = front.path
        try:
            body = self._parse(await front.body())
            self._validate_common(body)
            parts, tools, tool_choice, thinking = self._render(body, chat)
        except RequestError as exc:
            self.metrics.count_http(handler, exc.status)
            # 408: the request body never came, do not wait for another on the connection
            front.reply(exc.status, orjson.dumps(exc.body), close=exc.status == 408)
            return None
        prompt_len, hashes = await self._encode(parts)
        try:
            max_tokens = self._max_tokens(body, prompt_len)
            if prompt_len + max_tokens > self.engine.capacity_tokens():
                raise RequestError(
                    400,
                    f"The request needs {prompt_len + max_tokens} tokens of "
                    f"KV cache but the simulated engine holds only "
                    f"{self.engine.capacity_tokens()}.",
                )
            counter = self.counter
            self.counter += 1
            fault = choose_fault(
                self.config.seed,
                counter,
                self.config.fault_rate,
                self.config.fault_kinds,
                front.headers.get(FAULT_HEADER),
            )
        except (RequestError, ValueError) as exc:
            err = exc if isinstance(exc, RequestError) else RequestError(400, str(exc))
            self.metrics.count_http(handler, err.status)
            front.reply(err.status, orjson.dumps(err.body))
            return None
        return _Admitted(
            body,
            parts,
            prompt_len,
            hashes,
            tools,
            tool_choice,
            thinking,
            max_tokens,
            counter,
            fault,
        )

    def _http_fault(self, front: Front, handler: str, status: int) -> None:
        self.metrics.count_http(handler, status)
        headers = {"Retry-After": "1"} if status in (429, 503) else None
        front.reply(status, orjson.dumps(HTTP_FAULT_BODIES[status]), headers)

    def _plan(
        self, front: Front, adm: _Admitted, chat: bool
    ) -> tuple[list[Item], list[str]] | None:
        """What the answer says, token by token (from the behaviour for the caller's role)."""
        body = adm.body
        temperature = body.get("temperature")
        if body.get("seed") is not None or temperature == 0:
            rng = random.Random(
                _stable_digest(str(self.config.seed), str(body.get("seed")), *adm.parts)
            )
        elif key := front.headers.get(EPISODE_HEADER) or front.headers.get(SESSION_HEADER):
            # Keyed by the call's place in its episode, not by arrival order: concurrent
            # episodes interleave differently in every run, and a seeded run repeats.
            rng = random.Random(
                _stable_digest(
                    str(self.config.seed),
                    key,
                    front.headers.get(ROLE_HEADER) or "",
                    str(len(body.get("messages") or ())),
                )
            )
        else:
            rng = random.Random(_stable_digest(str(self.config.seed), str(adm.counter)))
        view = RequestView(
            body=body,
            messages=list(body.get("messages") or []),
            tools=adm.tools,
            tool_choice=adm.tool_choice,
            max_tokens=adm.max_tokens,
            rng=rng,
            headers=front.headers,
            settings=self.config,
            thinking=adm.thinking,
            prompt_tokens=adm.prompt_len,
            endpoint="chat" if chat else "completions",
            parallel_tool_calls=body.get("parallel_tool_calls", True) is not False,
        )
        role = front.headers.get(ROLE_HEADER)
        try:
            plan = self.behaviours.for_role(role).respond(view)
        except Exception as exc:
            log.exception("behaviour for role %r failed", role)
            self.metrics.count_http(front.path, 500)
            message = (
                f"The simulator's behaviour for role {role!r} failed: {type(exc).__name__}: {exc}"
            )
            front.reply(500, orjson.dumps(error_body(message, 500, "InternalServerError")))
            return None
        if not chat:
            plan = ResponsePlan(content=(plan.content or ""))
        return plan_items(plan, adm.thinking, rng)

    async def _open_output(
        self,
        front: Front,
        adm: _Admitted,
        items: list[Item],
        tool_ids: list[str],
        chat: bool,
    ) -> StreamOut | CollectOut | None:
        """The sink of the tokens: an SSE stream (headers sent now) or a collector; None
        when the client left before the stream could start."""
        rid = (
            f"chatcmpl-{_ID_RNG.getrandbits(64):016x}"
            if chat
            else f"cmpl-{_ID_RNG.getrandbits(64):016x}"
        )
        created = int(time.time())
        if not adm.body.get("stream"):
            return CollectOut(self, rid, items, tool_ids, adm.fault, chat=chat, created=created)
        # With no model time the first events follow at once: hold the headers and send them
        # in the same write (one send() per call instead of two, on both sides). Not for
        # requests with a fault, whose timing of headers and cuts the fault tests rely on.
        hold = self.zero_time and adm.fault is None
        try:
            head = await front.open_stream(hold)
        except ConnectionError:
            return None  # the client left before the headers went out
        transport = front.transport
        if transport is None or transport.is_closing():
            return None
        opts = adm.body.get("stream_options") or {}
        return StreamOut(
            self,
            rid,
            items,
            tool_ids,
            adm.fault,
            transport,
            chat=chat,
            include_usage=bool(opts.get("include_usage")),
            created=created,
            continuous_usage=bool(opts.get("include_usage") and opts.get("continuous_usage_stats")),
            head=head,
            auto_end=front.auto_end,
        )

    async def _run_engine(
        self,
        adm: _Admitted,
        items: list[Item],
        out: StreamOut | CollectOut,
        arrival: float,
        slot: FrontEndSlot,
        *,
        record: bool = False,
    ) -> str:
        """Queue the sequence after the front end's delay; the outcome once it is over."""
        p = self.profile
        seq = Seq(
            out.rid,
            adm.prompt_len,
            adm.hashes,
            adm.max_tokens,
            len(items),
            coalescing(out, self.engine, p, adm.counter),
            ignore_eos=bool(adm.body.get("ignore_eos")),
            arrival_t=arrival,
        )
        if record:
            seq.model_times = []
        frontend = request_overhead(p, adm.counter) + p.frontend_token_s * adm.prompt_len
        # The model's front end began when the request came: the simulator's own parsing,
        # tokenising and planning since then are part of it, not added to it. The engine
        # counts it from here (in model time) and queues the request when it is over.
        slot.leave()
        self.active.add(out)
        try:
            self.engine.submit(seq, arrival, frontend)
            return await out.future
        finally:
            self.active.discard(out)
            if record:
                self.model_times.add(out.rid, seq, frontend)

    async def _full_reply(
        self, front: Front, out: CollectOut, fault: str | None, outcome: str
    ) -> None:
        """The JSON body of a non-streamed request, with its fault applied."""
        if fault == "reset":
            transport = front.transport
            if transport is not None:
                sock = transport.get_extra_info("socket")
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.setsockopt(
                            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                        )
                transport.abort()
            front.reply(200, b"")
            return
        body_bytes = out.body
        if fault in ("stall", "stall_first_token"):
            await asyncio.sleep(self.config.fault_stall_s)
        elif fault in ("truncate", "malformed"):
            body_bytes = body_bytes[: len(body_bytes) // 2]
        elif fault == "error_event":
            front.reply(500, orjson.dumps(HTTP_FAULT_BODIES[500]))
            return
        if outcome == "aborted":
            error = error_body("The request was aborted.", 500, "InternalServerError")
            front.reply(500, orjson.dumps(error))
            return
        front.reply(200, body_bytes)

    async def _encode(self, parts: list[str]) -> tuple[int, list[int]]:
        """The prompt's token count and block hashes. A long prompt with a tokenizer that
        lets go of the GIL is tokenised on a worker thread, as vLLM's API server does (its
        renderer's thread pool): inline, 10,000 tokens would stop every stream's output for
        about 9 ms. The request's model front end began at arrival, so this time is inside
        it, not added to it."""
        bs = self.profile.block_size
        if self._tokenize_pool is None or sum(map(len, parts)) < OFF_LOOP_CHARS:
            return self.tokenizer.encode_parts(parts, bs)
        return await self.loop().run_in_executor(
            self._tokenize_pool, self.tokenizer.encode_parts, parts, bs
        )

    def _render(
        self, body: dict[str, Any], chat: bool
    ) -> tuple[list[str], list[dict[str, Any]], Any, bool]:
        """The prompt's parts as the chat template renders them, with the request's tools,
        tool choice and thinking switch (a RequestError for a malformed request)."""
        if chat:
            messages = body.get("messages")
            if (
                not isinstance(messages, list)
                or not messages
                or not all(isinstance(m, dict) for m in messages)
            ):
                raise RequestError(
                    400, "messages must be a non-empty list of message objects.", param="messages"
                )
            tools = body.get("tools") or []
            if not isinstance(tools, list):
                raise RequestError(400, "tools must be a list.", param="tools")
            tool_choice = body.get("tool_choice")
            if tool_choice is None:
                tool_choice = "auto" if tools else "none"
            if tool_choice not in ("none", "auto", "required") and not isinstance(
                tool_choice, dict
            ):
                raise RequestError(
                    400, f"Invalid tool_choice {tool_choice!r}.", param="tool_choice"
                )
            if tool_choice != "none" and tool_choice != "auto" and not tools:
                raise RequestError(
                    400, "When using `tool_choice`, `tools` must be set.", param="tool_choice"
                )
            if isinstance(tool_choice, dict):
                wanted = (tool_choice.get("function") or {}).get("name")
                names = [
                    (t.get("function") or {}).get("name") for t in tools if isinstance(t, dict)
                ]
                if wanted not in names:
                    raise RequestError(
                        400, f"Tool '{wanted}' has not been passed in `tools`.", param="tool_choice"
                    )
            kwargs = body.get("chat_template_kwargs") or {}
            thinking = bool(kwargs.get("enable_thinking") or kwargs.get("thinking"))
            parts = render_chat_parts(messages, tools, thinking=thinking)
        else:
            prompt = body.get("prompt")
            if isinstance(prompt, list):
                if prompt and all(isinstance(x, int) for x in prompt):
                    prompt = " ".join(str(x) for x in prompt)
                else:
                    prompt = "".join(str(x) for x in prompt)
            if not isinstance(prompt, str) or not prompt:
                raise RequestError(400, "prompt must be a non-empty string.", param="prompt")
            tools, tool_choice, thinking = [], "none", False
            parts = [prompt]
        return parts, tools, tool_choice, thinking
