"""The `replay` workload kind: recorded conversations issued turn by turn.

A unit is a conversation id, a trial is the repeat index. Each client turn (user message or
tool results) is one call; the recorded assistant answer follows it in the history
(`dataset` history), or the server's own answer does (`live` history, with later tool results'
ids remapped to the ids the server produced, by position). See docs/replay.md.

Per turn the intended send time (the previous answer's end plus the scaled recorded delay)
and the actual send time are kept, so client lag cannot hide as server latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from agentload.client import CallRecord, CallResult, ChatClient, EndpointConfig
from agentload.config import ConfigError, RunConfig
from agentload.results.records import ReplaySessionLine, ReplayTrajectoryLine
from agentload.results.replay_resume import sent_turns
from agentload.scheduler import WorkItem
from agentload.scheduler.progress import ProgressTracker
from agentload.wire import SESSION_HEADER
from agentload.workloads.base import SessionOutcome, Workload
from agentload.workloads.dataset import (
    ClientTurn,
    Conversation,
    Dataset,
    DatasetError,
    index_dataset,
)
from agentload.workloads.traces import TokenizerError

log = logging.getLogger("agentload.replay")

TERMINATIONS = ("completed", "failed", "turn_timeout", "diverged", "internal_error")

_now_ns = time.perf_counter_ns


def salt(key: str | int) -> str:
    """MLCommons' salt: 4 hex digits, the 2-byte blake2b digest of the key's text."""
    return hashlib.blake2b(str(key).encode("utf-8"), digest_size=2).hexdigest()


def salted_system(system: str | None, repeat: int, cid: str) -> str:
    """MLCommons' scheme, byte for byte (the agentic strategy of mlcommons/endpoints): the
    pass's salt (passes numbered from 1) before the system prompt, the conversation's after
    it, so the prefix cache is reused within a conversation and within one pass over the
    dataset, never across passes. A conversation without a system prompt (which MLCommons
    refuses) gets one of the two salts alone."""
    head, tail = f"[salt: {salt(repeat + 1)}]", f"[salt: {salt(cid)}]"
    return f"{head}\n\n{tail}" if system is None else f"{head}\n\n{system}\n\n{tail}"


def tool_names(msg: Mapping[str, Any] | None) -> list[str]:
    if not msg:
        return []
    return [str((tc.get("function") or {}).get("name")) for tc in msg.get("tool_calls") or ()]


class _Hold:
    """Holds the records of replayed calls until the call's replay fields are known (the
    divergence is only known once the answer is parsed), then hands them on to the
    client's original callback (the recorder)."""

    __slots__ = ("held", "inner")

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.held: dict[str, CallRecord | None] = {}

    def __call__(self, rec: CallRecord) -> None:
        if rec.call_id in self.held:
            self.held[rec.call_id] = rec
        elif self.inner is not None:
            self.inner(rec)

    def release(self, call_id: str) -> CallRecord | None:
        rec = self.held.pop(call_id, None)
        if rec is not None and self.inner is not None:
            self.inner(rec)
        return rec


class TurnProgress(ProgressTracker):
    """Progress of a replay run whose ETA comes from the client turns left (one call each)
    at the rate turns have been answered, not from conversations."""

    def __init__(self, turns_left: int | None, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.turns_left = turns_left

    def snapshot(self) -> dict[str, Any]:
        s = super().snapshot()
        if self.turns_left is None or not self.total or not self.calls:
            return s
        if self.episodes >= self.total:
            eta = 0.0
        else:
            eta = s["elapsed_s"] / self.calls * max(0, self.turns_left - self.calls)
        if self.duration_s is not None:
            eta = min(eta, self.duration_s - s["elapsed_s"])
        s["eta_s"], s["draining"] = self.settle_eta(eta)
        return s


class ReplayWorkload(Workload):
    """Conversations of a recorded dataset, `repeat` passes."""

    kind = "replay"
    noun = "conversations"
    graded = False
    roles = ("agent",)

    def __init__(self, cfg: RunConfig) -> None:
        super().__init__(cfg)
        self.rc = cfg.replay
        self._dataset: Dataset | None = None
        self._units: list[str] | None = None
        self.ignore_eos = bool(self.rc.ignore_eos) if self.rc.ignore_eos is not None else None
        self.text_answers = False
        self._sent_before: dict[tuple[str, int], set[int]] | None = None
        self._clock0: int | None = None  # when the first measured conversation was issued
        self._arrivals: tuple[float, float] | None = None  # a trace's first time and period

    @property
    def dataset(self) -> Dataset:
        if self._dataset is None:
            if not self.rc.dataset:
                raise ConfigError("invalid configuration: field 'replay.dataset': required")
            fmt = None if self.rc.format == "auto" else self.rc.format
            tok = self.rc.trace_tokenizer
            if tok is not None and not Path(tok).is_file():
                raise ConfigError(f"invalid configuration: --trace-tokenizer: no such file: {tok}")
            try:
                self._dataset = index_dataset(
                    Path(self.rc.dataset),
                    fmt,
                    block_tokens=self.rc.trace_block_tokens,
                    tokenizer=self.rc.trace_tokenizer,
                )
            except TokenizerError as e:
                raise ConfigError(f"invalid configuration: --trace-tokenizer {e}") from None
            except DatasetError as e:
                raise ConfigError(f"dataset {e}") from None
        return self._dataset

    def max_tokens_by_role(self) -> dict[str, Any] | None:
        fallback = self.rc.default_max_tokens
        return {
            "agent": "each turn's recorded answer length"
            + (f" (else {fallback})" if fallback else "")
        }

    def context_block(self) -> dict[str, Any]:
        rc = self.rc
        return {
            "kind": self.kind,
            "dataset": rc.dataset,
            "format": rc.format,
            "history": rc.history,
            "conversations": rc.num_conversations,
            "passes": rc.repeat,
            "salt": rc.salt,
            "delay_scale": rc.delay_scale,
        }

    def tool_roles(self) -> tuple[str, ...]:
        return ("agent",) if any(self.dataset.span(u).has_tools for u in self.units()) else ()

    def units(self) -> list[str]:
        if self._units is None:
            spans = self.dataset.spans
            if self.rc.num_conversations is not None:
                spans = spans[: self.rc.num_conversations]
            if any(s.arrival_s is not None for s in spans):
                # A trace is sent in the order of its timestamps (stable: ties in file order).
                spans = sorted(spans, key=lambda s: s.arrival_s or 0.0)
            self._units = [s.id for s in spans]
        return self._units

    def arrival_ns(self, item: WorkItem) -> int | None:
        """When a trace's conversation is due (monotonic ns): its recorded time since the
        trace's first, scaled by --delay-scale, on a clock that starts when the first
        measured one is issued; repeat k follows k trace periods (the span plus one mean
        gap) later. None: send at once."""
        if item.warmup or self.rc.delay_scale == 0 or self.cfg.load.rate is not None:
            return None
        ds = self.dataset
        t = ds.span(item.task_id).arrival_s
        if t is None:
            return None
        if self._arrivals is None:
            times = sorted(ds.span(u).arrival_s or 0.0 for u in self.units())
            span = times[-1] - times[0]
            self._arrivals = (times[0], span + (span / (len(times) - 1) if len(times) > 1 else 0))
        first, period = self._arrivals
        offset = round((t - first + item.trial * period) * self.rc.delay_scale * 1e9)
        if self._clock0 is None:
            # The first item issued is the earliest left: a resumed run goes on from it
            # rather than waiting through the part of the trace already sent.
            self._clock0 = _now_ns() - offset
        return self._clock0 + offset

    def trials(self) -> int:
        return self.rc.repeat

    def metadata(self) -> dict[str, Any]:
        ds = self.dataset
        return {
            "dataset": {
                "path": ds.path.name,
                "format": ds.format,
                "conversations": len(self.units()),
                "client_turns": sum(ds.span(u).turns for u in self.units()),
                "size_bytes": ds.path.stat().st_size,
            },
            "replay": {
                "history": self.rc.history,
                "repeat": self.rc.repeat,
                "salt": self.rc.salt,
                "delay_scale": self.rc.delay_scale,
                "on_divergence": self.rc.on_divergence,
                "ignore_eos": self.ignore_eos,
            },
            **self._trace_metadata(ds),
        }

    def _trace_metadata(self, ds: Dataset) -> dict[str, Any]:
        """How a public trace file was read: what was skipped, how prompts were built."""
        if ds.format == "sharegpt":
            return {"trace": {"skipped": ds.skipped}}
        if ds.format != "mooncake":
            return {}
        timed = self.rc.delay_scale > 0 and self.cfg.load.rate is None
        tok = self.rc.trace_tokenizer
        return {
            "trace": {
                "block_tokens": self.rc.trace_block_tokens,
                "prompt_tokens": "exact" if tok else "estimated",
                "tokenizer": Path(tok).name if tok else None,
                "timestamps": f"x{self.rc.delay_scale:g}" if timed else "not used",
            }
        }

    async def prepare(self, endpoints: Mapping[str, EndpointConfig], *, embedded: bool) -> None:
        if self.ignore_eos is None:
            # On the simulator the recorded output lengths are the load; a real engine
            # answers until its own end of sequence unless asked.
            self.ignore_eos = embedded
        # The simulator's generic answers pick tool calls at random; a tool call cut short
        # by a small max_tokens streams only hidden tokens (as vLLM's would), leaving the
        # call without a first token. Text answers of the recorded length keep the load.
        self.text_answers = embedded
        _ = self.sent_before  # read before the first conversation adds calls of its own

    @property
    def sent_before(self) -> dict[tuple[str, int], set[int]]:
        """(conversation, repeat) -> turns answered before a resume (dataset history only),
        read from the results folder once, before any call of this run is recorded."""
        if self._sent_before is None:
            self._sent_before = {}
            if self.rc.history == "dataset":
                self._sent_before = sent_turns(Path(self.cfg.out))
        return self._sent_before

    def progress_tracker(self, plan: Any) -> Callable[..., ProgressTracker]:
        """The run's progress, with the ETA counted in client turns: conversations differ
        in length by far, so those finished say little of the time the others need."""
        total = plan.total
        items = [plan.measured_item(n) for n in range(total)] if total is not None else []
        left = self.turns_left(i for i in items if i.key not in plan.finished)
        return functools.partial(TurnProgress, left if total is not None else None)

    def turns_left(self, items: Any) -> int:
        """Client turns still to send for the given work items (their conversations, less
        the turns a resumed run already had answered): what the ETA is counted in."""
        ds, left = self.dataset, 0
        for item in items:
            done = self.sent_before.get((item.task_id, item.trial), set())
            left += max(0, ds.span(item.task_id).turns - len(done))
        return left

    async def run_session(
        self, item: WorkItem, session_id: str, clients: Mapping[str, ChatClient]
    ) -> SessionOutcome:
        conv = self.dataset.load(item.task_id)
        run = _Replay(self, conv, item.trial, session_id, clients["agent"])
        run.arrival_ns = self.arrival_ns(item)
        if not item.warmup:
            run.answered = self.sent_before.get((item.task_id, item.trial), set())
        return await run.run()


class _Replay:
    """One conversation, one repeat."""

    def __init__(
        self,
        w: ReplayWorkload,
        conv: Conversation,
        repeat: int,
        session_id: str,
        client: ChatClient,
    ) -> None:
        self.w = w
        self.rc = w.rc
        self.conv = conv
        self.repeat = repeat
        self.session_id = session_id
        self.client = client
        self.hold = client.record_hook(_Hold)
        self.headers = {SESSION_HEADER: conv.id}
        self.live = self.rc.history == "live"
        self.id_map: dict[str, str] = {}
        self.history: list[dict[str, Any]] = []
        self.divergences: list[dict[str, Any]] = []
        self.sent = 0
        self.failed = 0
        self.llm_s = 0.0
        self.delay_s = 0.0
        self.lag_s: list[float] = []
        self.tool_calls = 0
        self.answered: set[int] = set()  # turns answered before a resume: not sent again
        self.resumed = 0
        self.arrival_ns: int | None = None  # a trace's recorded send time (monotonic ns)

    def timeout(self) -> contextlib.AbstractAsyncContextManager[Any]:
        t = self.rc.turn_timeout_s
        return asyncio.timeout(t) if t is not None else contextlib.nullcontext()

    def _max_tokens(self, t: ClientTurn) -> int | None:
        if self.w.ignore_eos and t.answer_tokens is not None:
            return t.answer_tokens
        if t.max_tokens is not None:
            return t.max_tokens
        if t.answer_tokens is not None:
            return t.answer_tokens
        return self.rc.default_max_tokens

    def _client_messages(self, t: ClientTurn) -> list[dict[str, Any]]:
        if not self.id_map:
            return t.messages
        out = []
        for m in t.messages:
            tid = m.get("tool_call_id")
            if tid is not None and tid in self.id_map:
                m = {**m, "tool_call_id": self.id_map[tid]}
            out.append(m)
        return out

    async def run(self) -> SessionOutcome:
        conv, rc = self.conv, self.rc
        if self.arrival_ns is not None:
            wait = (self.arrival_ns - _now_ns()) / 1e9
            if wait > 0:
                await asyncio.sleep(wait)
        started_at = time.time()
        start_ns = _now_ns()
        if rc.salt:
            system: str | None = salted_system(conv.system, self.repeat, conv.id)
        else:
            system = conv.system
        if system is not None:
            self.history.append({"role": "system", "content": system})
        termination, error = "completed", None
        aborted: list[int] = []
        # A trace's first call is due at its recorded time: a late send shows as send lag.
        prev_end = self.arrival_ns if self.arrival_ns is not None else start_ns
        turns = conv.turns
        # A resumed conversation (dataset history): the turns answered before the stop are
        # rebuilt from the dataset, not sent; it goes on at its first unsent turn.
        while self.resumed < len(turns) and turns[self.resumed].index in self.answered:
            t = turns[self.resumed]
            self.history.extend(t.messages)
            if t.answer is not None:
                self.history.append(t.answer)
            self.resumed += 1
        for i, t in enumerate(turns):
            if i < self.resumed:
                continue
            try:
                outcome = await self._turn(t, prev_end)
            except Exception as e:  # a bug must not take the other conversations down
                log.exception("replay of %s failed at turn %d", conv.id, t.index)
                termination, error = "internal_error", f"{type(e).__name__}: {e}"
                aborted = [x.index for x in turns[i:]]
                break
            _, prev_end, stop = outcome
            if stop is not None:
                termination, error = stop
                aborted = [x.index for x in turns[i + 1 :]]
                break
        end_ns = _now_ns()
        return self._outcome(termination, error, aborted, started_at, start_ns, end_ns)

    async def _turn(
        self, t: ClientTurn, prev_end: int
    ) -> tuple[CallResult | None, int, tuple[str, str] | None]:
        rc = self.rc
        delay_ns = int(t.delay_s * rc.delay_scale * 1e9)
        intended = prev_end + delay_ns
        if delay_ns > 0:
            wait = (intended - _now_ns()) / 1e9
            if wait > 0:
                await asyncio.sleep(wait)
            self.delay_s += delay_ns / 1e9
        self.history.extend(self._client_messages(t))
        call_id = f"{self.session_id}:{t.index}"
        self.hold.held[call_id] = None
        stop: tuple[str, str] | None = None
        res: CallResult | None = None
        try:
            try:
                async with self.timeout():
                    res = await self.client.chat(
                        self.history,
                        tools=self.conv.tools,
                        tool_choice="none" if self.w.text_answers and self.conv.tools else None,
                        max_tokens=self._max_tokens(t),
                        extra_body={"ignore_eos": True} if self.w.ignore_eos else None,
                        headers=self.headers,
                        stream=t.stream,
                        session_id=self.session_id,
                        role="agent",
                        turn=t.index,
                        call_id=call_id,
                    )
            except TimeoutError:
                stop = ("turn_timeout", f"turn {t.index}: no answer within {rc.turn_timeout_s:g} s")
        finally:
            rec = self.hold.held.get(call_id)
            diverged = None
            if res is not None and rec is not None and rec.ok:
                diverged = self._answer(t, res)
                if diverged and self.live and rc.on_divergence == "stop":
                    stop = ("diverged", f"turn {t.index}: the live answer's tool calls differ")
            if rec is not None:
                if stop is not None and stop[0] == "turn_timeout":
                    rec.status, rec.error_kind = "error", "timeout_turn"
                    rec.error_message = stop[1]
                rec.replay = {
                    "conversation_id": self.conv.id,
                    "repeat": self.repeat,
                    "row": t.row,
                    "recorded_output_tokens": t.answer_tokens,
                    "output_tokens": rec.completion_tokens,
                    "intended_send_ns": intended,
                    "send_lag_s": max(0, rec.start_ns - intended) / 1e9,
                    "diverged": diverged,
                }
                self.lag_s.append(rec.replay["send_lag_s"])
                self.llm_s += rec.total_s
                self.sent += 1
            self.hold.release(call_id)
        end = rec.end_ns if rec is not None else _now_ns()
        if rec is not None and not rec.ok and stop is None:
            self.failed += 1
            detail = f": {rec.error_message}" if rec.error_message else ""
            stop = ("failed", f"turn {t.index}: {rec.error_kind}{detail}")
        elif stop is not None and stop[0] == "turn_timeout":
            self.failed += 1
        return res, end, stop

    def _answer(self, t: ClientTurn, res: CallResult) -> bool:
        """Append the answer the next turn builds on; True when the live tool calls differ
        from the recorded ones (count or names)."""
        recorded = t.answer
        live_names = [str(tc["function"]["name"]) for tc in res.tool_calls]
        rec_names = tool_names(recorded)
        self.tool_calls += len(live_names)
        diverged = recorded is not None and live_names != rec_names
        if diverged:
            self.divergences.append(
                {"turn": t.index, "row": t.row, "recorded": rec_names, "live": live_names}
            )
        if not self.live or (diverged and recorded is not None):
            # dataset history, or a divergence: go on with the recorded answer (its ids
            # match the recorded tool results that follow).
            if recorded is not None:
                self.history.append(recorded)
            return diverged
        msg = res.message(keep_reasoning=True)
        if recorded is not None:
            for old, new in zip(recorded.get("tool_calls") or (), res.tool_calls, strict=False):
                self.id_map[str(old["id"])] = str(new["id"])
        self.history.append(msg)
        return diverged

    def _outcome(
        self,
        termination: str,
        error: str | None,
        aborted: list[int],
        started_at: float,
        start_ns: int,
        end_ns: int,
    ) -> SessionOutcome:
        conv = self.conv
        total = (end_ns - start_ns) / 1e9
        lags = self.lag_s
        session = ReplaySessionLine(
            kind="replay",
            session_id=self.session_id,
            task_id=conv.id,
            conversation_id=conv.id,
            trial=self.repeat,
            history=self.rc.history,
            termination=termination,
            error=error,
            counts={
                "agent_calls": self.sent,
                "failed_calls": self.failed,
                "turns": len(conv.turns),
                "turns_sent": self.sent,
                "turns_aborted": len(aborted),
                # Answered before a resume, in calls.jsonl under this session id.
                "turns_resumed": self.resumed,
                "divergences": len(self.divergences),
                "tool_calls": self.tool_calls,
            },
            durations={"total_s": total, "llm_s": self.llm_s, "delay_s": self.delay_s},
            started_at=started_at,
            start_ns=start_ns,
            end_ns=end_ns,
            replay={
                "aborted_turns": aborted,
                "divergences": self.divergences,
                "send_lag_s": {
                    "mean": sum(lags) / len(lags) if lags else None,
                    "max": max(lags) if lags else None,
                },
            },
        )
        trajectory = ReplayTrajectoryLine(
            kind="replay",
            session_id=self.session_id,
            task_id=conv.id,
            conversation_id=conv.id,
            trial=self.repeat,
            messages=self.history,
            tools=conv.tools or [],
            termination=termination,
        )
        return SessionOutcome(session, trajectory)
