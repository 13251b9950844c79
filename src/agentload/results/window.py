"""The measurement window from the monotonic clock; wall-clock times are only displayed.

Every record carries both clocks: `started_at` (unix s, for display and alignment across
processes) and `*_ns` from `perf_counter_ns` (monotonic). A wall-clock step (NTP, a manual
change, a VM resume) moves `started_at` but not the `*_ns` fields, so durations, the window and
every rate are computed from the `*_ns` fields. Monotonic values of different processes are
not comparable, so records are grouped by resume attempt (`attempt` of the session lines; all
records form one group when absent): within a group the window is monotonic, and the groups
are placed one after the other by their wall-clock start (the gap between attempts, downtime,
is the only figure that needs the wall clock).
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentload.results.records import SessionRecord, Window

log = logging.getLogger("agentload.results")

# A disagreement between the clocks larger than this is reported as a wall-clock step.
CLOCK_STEP_WARN_S = 1.0


EMPTY_WINDOW: dict[str, Any] = {
    "start": None,
    "end": None,
    "duration_s": None,
    "running_s": None,
    "active_s": None,
    "source": None,
}


def rate_seconds(window: Mapping[str, Any]) -> float | None:
    """The seconds every rate of a run divides by (`Window.rate_seconds`)."""
    return Window(**window).rate_seconds()


@dataclass
class Interval:
    start_ns: int | None
    end_ns: int | None
    started_at: float | None  # wall clock, display only
    dur_s: float | None  # when the ns fields are missing


def _num(v: Any) -> float | None:
    if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _union_ns(pairs: list[tuple[int, int]]) -> int:
    total = 0
    cur: tuple[int, int] | None = None  # the run of overlapping intervals so far
    for s, e in sorted(pairs):
        if cur is None or s > cur[1]:
            if cur is not None:
                total += cur[1] - cur[0]
            cur = (s, e)
        else:
            cur = (cur[0], max(cur[1], e))
    if cur is not None:
        total += cur[1] - cur[0]
    return total


def _group_window(items: list[Interval]) -> tuple[float, float, float, float] | None:
    """(wall anchor, span s, active s, clock disagreement s) of one attempt."""
    mono = [
        (i.start_ns, i.end_ns, i.started_at)
        for i in items
        if i.start_ns is not None and i.end_ns is not None
    ]
    if mono:
        t0 = min(start for start, _, _ in mono)
        t1 = max(end for _, end, _ in mono)
        anchor = min(mono, key=lambda m: m[0])[2]  # the first record's wall clock
        step = 0.0
        if anchor is not None:
            for start, _, wall in mono:
                if wall is not None:
                    expect = anchor + (start - t0) / 1e9
                    step = max(step, abs(wall - expect))
        else:
            walls = [wall for _, _, wall in mono if wall is not None]
            anchor = min(walls) if walls else 0.0
        pairs = [(start, end) for start, end, _ in mono]
        return anchor, (t1 - t0) / 1e9, _union_ns(pairs) / 1e9, step
    spans = [(i.started_at, i.started_at + (i.dur_s or 0.0)) for i in items if i.started_at]
    if not spans:
        return None
    s = min(w[0] for w in spans)
    e = max(w[1] for w in spans)
    pairs_w = [(int(a * 1e9), int(b * 1e9)) for a, b in spans]
    return s, e - s, _union_ns(pairs_w) / 1e9, 0.0


def window_from(groups: Mapping[Any, list[Interval]], source: str) -> dict[str, Any]:
    parts = [w for items in groups.values() if (w := _group_window(items)) is not None]
    if not parts:
        return EMPTY_WINDOW.copy()
    parts.sort(key=lambda p: p[0])
    duration = parts[0][1]
    end_wall = parts[0][0] + parts[0][1]
    for anchor, span, _, _ in parts[1:]:
        duration += max(0.0, anchor - end_wall) + span  # downtime between attempts, then work
        end_wall = max(end_wall, anchor) + span
    step = max(p[3] for p in parts)
    out = {
        "start": parts[0][0],
        "end": parts[0][0] + duration,
        "duration_s": max(0.0, duration),
        # The attempts' own spans: the downtime between a run and its resume is not time
        # the load ran, and every rate divides by this.
        "running_s": sum(p[1] for p in parts),
        "active_s": sum(p[2] for p in parts),
        "source": source,
        "clock": "monotonic",
        "wall_clock_step_s": step if step > CLOCK_STEP_WARN_S else 0.0,
    }
    if step > CLOCK_STEP_WARN_S:
        log.warning(
            "the wall clock moved by %.1f s during the run; durations and rates use the "
            "monotonic clock",
            step,
        )
    return out


def session_window(sessions: Sequence[SessionRecord]) -> dict[str, Any]:
    groups: dict[Any, list[Interval]] = defaultdict(list)
    for s in sessions:
        groups[s.attempt].append(
            Interval(
                _int(s.start_ns), _int(s.end_ns), _num(s.started_at), _num(s.duration("total_s"))
            )
        )
    return window_from(groups, "sessions")


def call_window(started_at: np.ndarray, end_ns: np.ndarray, total_s: np.ndarray) -> dict[str, Any]:
    items: list[Interval] = []
    for wall, end, total in zip(
        started_at.tolist(), end_ns.tolist(), total_s.tolist(), strict=True
    ):
        ok_ns = math.isfinite(end) and math.isfinite(total)
        items.append(
            Interval(
                int(end - total * 1e9) if ok_ns else None,
                int(end) if ok_ns else None,
                wall if math.isfinite(wall) else None,
                total if math.isfinite(total) else None,
            )
        )
    return window_from({None: items}, "calls")
