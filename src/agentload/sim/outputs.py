"""Where a request's tokens go as the engine emits them: a stream of server-sent events written
to the socket (`StreamOut`) or a full reply built when the last token leaves (`CollectOut`).

Both render through `frames.py`. A chat stream's middle tokens only look bytes up (built at
admission); the general path (the first and last tokens, completions, usage, faults) renders
each token as it goes, inline, since a completions stream takes it for every token.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

import orjson

from agentload.sim import frames
from agentload.sim.frames import DONE, END, FILLER_DELTA, NULL_DELTA_SUFFIX, TEXT_SUFFIX, Item
from agentload.sim.front import reset_connection
from agentload.sim.plan import fault_index

if TYPE_CHECKING:
    from agentload.sim.engine import Engine, Seq
    from agentload.sim.settings import SimConfig

CARRY_MAX = 64 << 10
"""The most bytes of a stream's events carried from one burst to the next (`Bursts.end`)."""

# The faults that strike a stream after `fault_after_tokens` tokens.
_MID_STREAM_FAULTS = ("reset", "truncate", "malformed", "stall", "error_event")


class OutputHost(Protocol):
    """What an output needs from the simulator that serves it (`app.SimApp`)."""

    config: SimConfig
    engine: Engine
    bursts: Bursts

    def loop(self) -> asyncio.AbstractEventLoop: ...


class Bursts:
    """The streams' writes of one engine burst (the tokens of the steps due at once), gathered
    per stream: one HTTP chunk per stream and burst instead of one per token."""

    __slots__ = ("carried", "gathered")

    def __init__(self) -> None:
        # While not None, streams append their events here instead of writing at once.
        self.gathered: dict[StreamOut, list[bytes]] | None = None
        # Events of unfinished streams kept from one burst to the next (see `end`).
        self.carried: dict[StreamOut, list[bytes]] = {}

    def begin(self) -> None:
        self.gathered, self.carried = self.carried, {}

    def end(self) -> None:
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
            out.send(framed + END if out.ended else framed)


class _Out:
    """Common state of one request's output."""

    def __init__(
        self, sim: OutputHost, rid: str, items: list[Item], tool_ids: list[str], fault: str | None
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


class StreamOut(_Out):
    """Server-sent events written straight to the transport as the engine emits tokens."""

    def __init__(
        self,
        sim: OutputHost,
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
        self.bursts = sim.bursts
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
        self.head = frames.event_head(rid, chat, created, sim.config.model)
        self.prefix = frames.choice_prefix(self.head, chat)
        self.held: list[bytes] | None = None
        self.fault_at = -1
        if fault in _MID_STREAM_FAULTS:
            self.fault_at = fault_index(items, sim.config.fault_after_tokens)
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
                if (d := frames.chat_delta(item, tool_ids)) is None
                else frames.frame(prefix + d + NULL_DELTA_SUFFIX)
                for item in items
            ]
            self.filler = frames.frame(prefix + FILLER_DELTA + NULL_DELTA_SUFFIX)

    def _resolve(self, value: str) -> None:
        if self.auto_end and not self.ended and value in ("done", "truncate"):
            self.ended = True
            gathered = self.bursts.gathered
            if (gathered is None or self not in gathered) and not self.transport.is_closing():
                self.send(END)
            # else the burst's write of this stream appends it (Bursts.end)
        super()._resolve(value)

    # -- writing ---------------------------------------------------------------------------
    def _write_framed(self, framed: bytes, seq: Seq) -> None:
        """_write for an event already framed as an HTTP chunk (the emission fast path)."""
        t = self.transport
        if self.held is None and self.bursts.gathered is None and not t.is_closing():
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
        gathered = self.bursts.gathered
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

    # -- tokens ----------------------------------------------------------------------------
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
        # The general path: the first and last tokens, completions, usage, faults. Inline,
        # not in steps: a completions stream takes it for every token.
        parts: list[bytes] = []
        chat = self.chat
        if index == 0 and chat:
            parts.append(frames.role_event(self.prefix))
        items = self.items
        if index < len(items):
            delta = (
                frames.chat_delta(items[index], self.tool_ids)
                if chat
                else orjson.dumps(items[index][1])
            )
        elif seq.ignore_eos and index >= seq.plan_len:
            delta = FILLER_DELTA if chat else b'" the"'
        else:
            delta = None  # the end-of-sequence token
        fault_now = self.fault_at >= 0 and (
            index == self.fault_at or (finish is not None and index < self.fault_at)
        )
        cut = fault_now and self.fault in ("reset", "truncate", "error_event")
        if finish is not None and not cut:
            self._finish_parts(parts, seq, delta, finish)
        elif delta is not None:
            parts.append(self.prefix + delta + (NULL_DELTA_SUFFIX if chat else TEXT_SUFFIX))
        if self.continuous_usage and parts:
            parts = frames.with_usage(parts, seq)
        if fault_now:
            self._fault(seq, parts, now)
            return
        if parts:
            self._write(b"".join(parts), seq)
        if finish is not None and self.held is None:
            self._resolve("done")

    def _finish_parts(self, parts: list[bytes], seq: Seq, delta: bytes | None, finish: str) -> None:
        """The last token's events: its delta with the finish reason, usage, [DONE]."""
        name = frames.finish_name(finish, self.has_tools)
        parts += frames.finish_events(
            self.prefix, delta, name, chat=self.chat, has_tools=self.has_tools
        )
        if self.include_usage:
            parts.append(frames.usage_event(self.head, seq))
        parts.append(DONE)

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
            self._write(frames.malformed_opening(self.head), seq)
        if parts:
            self._write(b"".join(parts), seq)
        if fault == "malformed":
            if seq.finished:
                self._resolve("done")
            return
        if fault == "error_event":
            self._write(frames.ERROR_EVENT, seq)
        self.sim.engine.abort(seq)
        if fault == "reset":
            reset_connection(self.transport)
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
        sim: OutputHost,
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
        name = frames.finish_name(finish, self.has_tools)
        model = self.sim.config.model
        self.body = frames.reply_body(
            self.rid, self.created, model, self.items, self.tool_ids, seq, name, chat=self.chat
        )
        self._resolve("done")
