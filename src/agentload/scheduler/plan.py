"""Which (task, trial) pairs a run issues, in what order, and which ones are warmup.

Measured episodes go round by round: round r runs every selected task once with trial index
r (the task order shuffled per round when asked, with a seed). `num_episodes` larger than
tasks × trials simply continues the rounds with trial indices counting on, so every pair is
unique and pass^k stays well defined. Without `num_episodes` a run issues tasks × trials
episodes, or, when only `duration` bounds it, keeps cycling until the time is up.

Warmup episodes take the tasks in round-0 order with negative trial indices (-1, -2, …): they
are real, recorded episodes with their own (task, trial) keys, flagged `warmup` and excluded
from statistics, and they never displace a measured pair. Keys already finished (a resumed
run) are skipped, so a resume has neither duplicates nor gaps.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_RANGE_RE = re.compile(r"^(?P<dom>[A-Za-z0-9_\-]+)/(?P<a>\d+)(?:-(?P<b>\d+))?$")


class PlanError(ValueError):
    """A task selector that names nothing, or names it wrongly."""


@dataclass(frozen=True, slots=True)
class WorkItem:
    task_id: str
    trial: int
    warmup: bool
    index: int
    """Position in the measured sequence, or the warmup ordinal."""

    @property
    def key(self) -> tuple[str, int]:
        return (self.task_id, self.trial)


def select_tasks(
    selectors: Sequence[str], domains: Sequence[str], available: dict[str, list[str]]
) -> list[str]:
    """Task ids picked by `selectors` (or every task of `domains`), in selector order.

    `available` maps a domain to its task ids. Selectors: `airline` (whole domain),
    `airline/*`, `airline/007`, `airline/000-019` (inclusive, by number).
    """
    for d in domains:
        if d not in available:
            raise PlanError(f"unknown domain {d!r}; known: {', '.join(sorted(available))}")
    if not selectors:
        names = list(domains) or sorted(available)
        out = [t for d in names for t in available[d]]
        if not out:
            raise PlanError("the selected domains have no tasks")
        return out
    chosen: list[str] = []
    seen: set[str] = set()
    for sel in selectors:
        picked = _expand(sel.strip(), available)
        if domains:
            picked = [t for t in picked if t.partition("/")[0] in domains]
        if not picked:
            raise PlanError(f"task selector {sel!r} matches no task")
        for t in picked:
            if t not in seen:
                seen.add(t)
                chosen.append(t)
    return chosen


def _num(task_id: str) -> int | None:
    tail = task_id.partition("/")[2]
    return int(tail) if tail.isdigit() else None


def _expand(sel: str, available: dict[str, list[str]]) -> list[str]:
    dom, _, rest = sel.partition("/")
    if dom not in available:
        raise PlanError(
            f"task selector {sel!r}: unknown domain {dom!r}; known: {', '.join(sorted(available))}"
        )
    ids = available[dom]
    if rest in ("", "*"):
        return list(ids)
    if sel in ids:
        return [sel]
    m = _RANGE_RE.match(sel)
    if not m:
        raise PlanError(f"task selector {sel!r}: expected domain, domain/NNN or domain/NNN-MMM")
    a = int(m.group("a"))
    b = int(m.group("b")) if m.group("b") is not None else a
    if b < a:
        raise PlanError(f"task selector {sel!r}: range end before its start")
    return [t for t in ids if (n := _num(t)) is not None and a <= n <= b]


class EpisodePlan:
    """Hands out work items; deterministic for a given configuration."""

    def __init__(
        self,
        tasks: Sequence[str],
        *,
        trials: int = 1,
        num_episodes: int | None = None,
        unbounded: bool = False,
        shuffle: bool = False,
        seed: int = 0,
        warmup_episodes: int = 0,
        warmup_seconds: float = 0.0,
        finished: Iterable[tuple[str, int]] = (),
    ) -> None:
        if not tasks:
            raise PlanError("no tasks selected")
        self.tasks = list(tasks)
        self.shuffle = shuffle
        self.seed = seed
        self.total: int | None = (
            num_episodes
            if num_episodes is not None
            else (None if unbounded else len(self.tasks) * trials)
        )
        self.warmup_episodes = warmup_episodes
        self.warmup_seconds = warmup_seconds
        self.finished = set(finished)
        self._rounds: dict[int, list[str]] = {}
        self._next_measured = 0
        self._next_warmup = 0
        self._warmup_given = 0
        self.skipped = 0  # pairs skipped because already finished
        self._given_measured = 0
        # Measured pairs a resumed run already has (they are skipped, not re-run).
        self.resume_done = 0
        if self.finished and self.total is not None:
            self.resume_done = sum(
                1 for n in range(self.total) if self.measured_item(n).key in self.finished
            )

    def round_order(self, r: int) -> list[str]:
        order = self._rounds.get(r)
        if order is None:
            order = list(self.tasks)
            if self.shuffle:
                random.Random(f"{self.seed}:round:{r}").shuffle(order)
            self._rounds[r] = order
            if len(self._rounds) > 4:  # only the current rounds matter
                self._rounds.pop(min(self._rounds))
        return order

    def measured_item(self, n: int) -> WorkItem:
        t = len(self.tasks)
        return WorkItem(self.round_order(n // t)[n % t], n // t, False, n)

    @property
    def to_issue(self) -> int | None:
        """Measured episodes this process issues in all (None when unbounded)."""
        return None if self.total is None else self.total - self.resume_done

    @property
    def given_measured(self) -> int:
        return self._given_measured

    def next_measured(self) -> WorkItem | None:
        while self.total is None or self._next_measured < self.total:
            item = self.measured_item(self._next_measured)
            self._next_measured += 1
            if item.key in self.finished:
                self.skipped += 1
                continue
            self._given_measured += 1
            return item
        return None

    def next_warmup(self) -> WorkItem:
        t = len(self.tasks)
        order = self.round_order(0)
        while True:
            i = self._next_warmup
            self._next_warmup += 1
            item = WorkItem(order[i % t], -1 - i // t, True, i)
            if item.key not in self.finished:
                return item

    def warmup_pending(self, elapsed_s: float) -> bool:
        if self.warmup_episodes:
            return self._warmup_given < self._warmup_target()
        return elapsed_s < self.warmup_seconds

    def _warmup_target(self) -> int:
        # On resume, count-based warmup episodes already finished count as done.
        done = sum(1 for _, r in self.finished if r < 0)
        return max(0, self.warmup_episodes - done)

    def next(self, elapsed_s: float) -> WorkItem | None:
        """The next item to start `elapsed_s` after the run began, or None when done."""
        if self.warmup_pending(elapsed_s):
            self._warmup_given += 1
            return self.next_warmup()
        return self.next_measured()
