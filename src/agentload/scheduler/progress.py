"""Live progress: a rich display on a terminal, plain periodic lines otherwise.

The tracker is fed from the hot path (one call per finished LLM call and per episode), so it
only bumps counters and keeps a bounded reservoir of TTFTs; everything else is computed when
the display refreshes.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol, TextIO

from rich.console import Console
from rich.live import Live
from rich.table import Table

from agentload.fmt import eta, secs
from agentload.stats import percentile_sorted


def secs_c(v: float | None) -> str:
    return secs(v, compact=True)


_RESERVOIR = 20_000


class CallFigures(Protocol):
    """What progress reads of a call (a CallRecord, or a worker's brief of one)."""

    @property
    def status(self) -> str: ...

    @property
    def completion_tokens(self) -> int | None: ...

    @property
    def ttft_s(self) -> float | None: ...

    @property
    def role(self) -> str | None: ...


class ProgressTracker:
    """Running totals of a run, cheap to update."""

    def __init__(
        self,
        total: int | None = None,
        duration_s: float | None = None,
        *,
        noun: str = "episodes",
        graded: bool = True,
    ) -> None:
        self.noun = noun  # what the user calls a session: episodes, conversations
        self.graded = graded  # sessions carry a reward (no success figure otherwise)
        self.total = total
        self.duration_s = duration_s
        self.t0 = time.perf_counter()
        self.calls = 0
        self.call_errors = 0
        self.tokens = 0
        self.episodes = 0
        self.warmup_episodes = 0
        self.successes = 0
        self.graded_episodes = 0  # the success rate's denominator, as in the summary
        self.failed_episodes = 0
        self._ttft: list[float] = []
        self._ttft_seen = 0
        self._rng = random.Random(0)
        self._window: deque[tuple[float, int, int]] = deque(maxlen=64)
        self.active: Callable[[], int] = lambda: 0
        self.lag_p99: Callable[[], float | None] = lambda: None
        self.outage: Callable[[], str | None] = lambda: None

    def on_call(self, rec: CallFigures) -> None:
        self.calls += 1
        if rec.status != "ok":
            self.call_errors += 1
        self.tokens += rec.completion_tokens or 0
        ttft = rec.ttft_s
        # The agent's TTFT, as the final table's first row (a user simulator's shorter
        # prompts would pull it down); every call's when calls carry no role.
        role = rec.role
        if role is not None and role != "agent":
            return
        if ttft is not None and rec.status == "ok":
            self._ttft_seen += 1
            if len(self._ttft) < _RESERVOIR:
                self._ttft.append(ttft)
            else:  # reservoir sampling keeps percentiles honest on long runs
                j = self._rng.randrange(self._ttft_seen)
                if j < _RESERVOIR:
                    self._ttft[j] = ttft

    def on_episode(self, session: dict[str, Any]) -> None:
        if session.get("warmup"):
            self.warmup_episodes += 1
            return
        self.episodes += 1
        if session.get("termination") in ("infra_error", "protocol_error"):
            self.failed_episodes += 1
        # As the summary: an episode ended by the infrastructure, or graded only in part,
        # says nothing about the agent's task.
        if session.get("termination") == "infra_error" or session.get("reward_partial"):
            return
        self.graded_episodes += 1
        if (session.get("reward") or 0.0) >= 1.0:
            self.successes += 1

    def settle_eta(self, eta: float | None) -> tuple[float | None, bool]:
        """(ETA, draining): once nothing more is issued and sessions in flight finish (up to
        --drain-timeout), 'draining', not an ETA of 0 s that stands still for as long as
        they take; 0 s when none is left."""
        if eta is None or eta > 0:
            return eta, False
        draining = self.active() > 0
        return (None if draining else 0.0), draining

    def snapshot(self) -> dict[str, Any]:
        now = time.perf_counter()
        elapsed = now - self.t0
        self._window.append((now, self.calls, self.tokens))
        # Rates over the last ~10 s of refreshes (whole run until then).
        t_old, c_old, k_old = self._window[0]
        for t, c, k in self._window:
            if now - t <= 10.0:
                t_old, c_old, k_old = t, c, k
                break
        span = now - t_old
        if span < 0.5:
            t_old, c_old, k_old, span = self.t0, 0, 0, elapsed
        calls_s = (self.calls - c_old) / span if span > 0 else 0.0
        tok_s = (self.tokens - k_old) / span if span > 0 else 0.0
        ttft = sorted(self._ttft)
        eta = None
        if self.total:
            left = self.total - self.episodes
            if self.episodes and left >= 0:
                eta = elapsed / self.episodes * left
        if self.duration_s is not None:
            d_left = self.duration_s - elapsed
            eta = d_left if eta is None else min(eta, d_left)
        eta, draining = self.settle_eta(eta)
        return {
            "elapsed_s": elapsed,
            "episodes": self.episodes,
            "noun": self.noun,
            "graded": self.graded,
            "warmup_episodes": self.warmup_episodes,
            "total": self.total,
            "eta_s": eta,
            "draining": draining,
            "active": self.active(),
            "calls": self.calls,
            "calls_per_s": calls_s,
            "tokens_per_s": tok_s,
            "error_rate": self.call_errors / self.calls if self.calls else 0.0,
            "ttft_p50": percentile_sorted(ttft, 0.5),
            "ttft_p90": percentile_sorted(ttft, 0.9),
            "success_rate": (
                self.successes / self.graded_episodes if self.graded_episodes else None
            ),
            "lag_p99": self.lag_p99(),
            "outage": self.outage(),
        }


def eta_text(s: dict[str, Any]) -> str:
    return "draining" if s.get("draining") else eta(s["eta_s"])


def progress_line(s: dict[str, Any], width: int | None = None) -> str:
    """One plain line; at most `width` characters (a terminal's), dropping the least
    important figures first."""
    total = s["total"]
    done = f"{s['episodes']}/{total}" if total else f"{s['episodes']}"
    pct = f" ({100 * s['episodes'] / total:.0f}%)" if total else ""
    warm = f" +{s['warmup_episodes']} warmup" if s["warmup_episodes"] else ""
    succ = "-" if s["success_rate"] is None else f"{100 * s['success_rate']:.0f}%"
    # In the order they go when the line is too long: the last first.
    parts = [
        f"{s.get('noun', 'episodes')} {done}{pct}{warm} ETA {eta_text(s)}",
        f"active {s['active']}",
        f"agent TTFT p50 {secs_c(s['ttft_p50'])} p90 {secs_c(s['ttft_p90'])}",
        *([f"success {succ}"] if s.get("graded", True) else []),
        f"errors {100 * s['error_rate']:.1f}%",
        f"calls/s {s['calls_per_s']:.1f}",
        f"tok/s {s['tokens_per_s']:.0f}",
        f"loop lag p99 {secs_c(s['lag_p99'])}",
    ]
    if s.get("outage"):
        parts.insert(0, str(s["outage"]))
    line = " | ".join(parts)
    while width is not None and len(line) > width and len(parts) > 1:
        parts.pop()
        line = " | ".join(parts)
    return line


def progress_table(s: dict[str, Any], title: str = "") -> Table:
    t = Table(title=title or None, show_header=False, box=None, pad_edge=False)
    t.add_column(style="dim")
    t.add_column()
    total = s["total"]
    done = f"{s['episodes']} / {total}" if total else str(s["episodes"])
    if total:
        width = 30
        fill = int(width * min(1.0, s["episodes"] / total))
        done = f"[green]{'━' * fill}[/][dim]{'━' * (width - fill)}[/] {done}"
    t.add_row(
        s.get("noun", "episodes"), f"{done}   ETA {eta_text(s)}   elapsed {eta(s['elapsed_s'])}"
    )
    if s["warmup_episodes"]:
        t.add_row("warmup", f"{s['warmup_episodes']} episodes (not in statistics)")
    t.add_row("active", str(s["active"]))
    t.add_row("throughput", f"{s['calls_per_s']:.1f} calls/s   {s['tokens_per_s']:.0f} tokens/s")
    t.add_row("errors", f"{100 * s['error_rate']:.1f}% of {s['calls']} calls")
    t.add_row("agent TTFT", f"p50 {secs_c(s['ttft_p50'])}   p90 {secs_c(s['ttft_p90'])}")
    if s.get("graded", True):
        succ = "-" if s["success_rate"] is None else f"{100 * s['success_rate']:.1f}%"
        t.add_row("success", succ)
    t.add_row("loop lag p99", secs_c(s["lag_p99"]))
    if s.get("outage"):
        t.add_row("outage", f"[bold red]{s['outage']}[/]")
    return t


class ProgressDisplay:
    """Refreshes a live table on a terminal, or logs a line every `interval_s` otherwise."""

    def __init__(
        self,
        tracker: ProgressTracker,
        *,
        mode: str = "auto",  # auto | live | plain | off
        stream: TextIO | None = None,
        interval_s: float = 10.0,
        title: str = "",
    ) -> None:
        self.tracker = tracker
        self.stream = stream or sys.stderr
        self.console = Console(file=self.stream, stderr=stream is None)
        if mode == "auto":
            mode = "live" if self.console.is_terminal else "plain"
        self.mode = mode
        self.interval_s = interval_s
        self.title = title
        self._task: asyncio.Task[None] | None = None
        self._live: Live | None = None

    async def __aenter__(self) -> ProgressDisplay:
        if self.mode == "live":
            self._live = Live(
                progress_table(self.tracker.snapshot(), self.title),
                console=self.console,
                refresh_per_second=4,
                transient=False,
            )
            self._live.start()
            self._task = asyncio.get_running_loop().create_task(self._loop(0.5))
        elif self.mode == "plain":
            self._task = asyncio.get_running_loop().create_task(self._loop(self.interval_s))
        return self

    async def _loop(self, period: float) -> None:
        while True:
            await asyncio.sleep(period)
            self.refresh()

    def refresh(self) -> None:
        snap = self.tracker.snapshot()
        if self._live is not None:
            self._live.update(progress_table(snap, self.title))
        elif self.mode == "plain":
            # On a terminal, one line that does not wrap; in a log file, every figure.
            width = self.console.width - len("[agentload] ") if self.console.is_terminal else None
            print(f"[agentload] {progress_line(snap, width)}", file=self.stream, flush=True)

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._live is not None:
            self._live.update(progress_table(self.tracker.snapshot(), self.title))
            self._live.stop()
        elif self.mode == "plain":
            self.refresh()
