"""Clock offsets between the driver and a worker on another machine, and the correction of the
worker's records onto the driver's clocks.

Records carry two clocks (agentload.results.window): `*_ns` from `perf_counter_ns`
(monotonic, the one every duration and the measurement window come from) and `started_at`
(wall clock, for display and alignment). Two processes on one Linux machine share
CLOCK_MONOTONIC; processes on two machines do not, and their wall clocks differ by whatever
NTP leaves. So the driver measures each worker's offset the way NTP does: it reads its own
clocks (t0), asks the worker for its clocks (r), reads its clocks again (t1). The worker's
reading was taken somewhere between t0 and t1, so

    offset = (t0 + t1) / 2 - r,   |error| <= (t1 - t0) / 2   (the bound)

and of several exchanges the one with the shortest round trip gives the tightest bound. The
worker is told its offset when it starts and shifts every `*_ns` field and `started_at` of
its call and session records by it before it encodes them (`shift_call`, `shift_record`), so
the driver writes the lines as they arrive and the results folder holds one clock; the
offsets and their bounds go into summary.json (`client.clock_offsets`). Measured again when
the worker finishes, the difference is the clocks' drift over the run, reported beside the
bound.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentload.client.record import CallRecord

ClockReading = tuple[int, int]
"""(perf_counter_ns, time_ns) read in one process."""


def boot_id() -> str | None:
    """This machine's boot id (Linux): two processes that read the same one share
    CLOCK_MONOTONIC, which `perf_counter_ns` reads, so their records need no correction."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() or None
    except OSError:
        return None


def read_clocks() -> ClockReading:
    """This process's two clocks, read back to back."""
    return time.perf_counter_ns(), time.time_ns()


@dataclass(frozen=True, slots=True)
class Exchange:
    """One round trip: the driver's clocks before and after, the worker's in between."""

    before: ClockReading
    remote: ClockReading
    after: ClockReading

    @property
    def rtt_ns(self) -> int:
        return self.after[0] - self.before[0]


@dataclass(frozen=True, slots=True)
class ClockOffset:
    """Add `mono_ns` to a worker's `perf_counter_ns` (and `wall_ns` to its `time_ns`) to get
    the driver's; each is right within `bound_ns`."""

    mono_ns: int
    wall_ns: int
    bound_ns: int
    samples: int

    @classmethod
    def zero(cls) -> ClockOffset:
        return cls(0, 0, 0, 0)

    @property
    def is_zero(self) -> bool:
        return self.mono_ns == 0 and self.wall_ns == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "offset_s": self.mono_ns / 1e9,
            "wall_offset_s": self.wall_ns / 1e9,
            "bound_s": self.bound_ns / 1e9,
            "samples": self.samples,
        }


def estimate(exchanges: Sequence[Exchange]) -> ClockOffset:
    """The offset from the exchange with the shortest round trip."""
    if not exchanges:
        raise ValueError("no clock exchange to estimate an offset from")
    best = min(exchanges, key=lambda e: e.rtt_ns)
    mono = (best.before[0] + best.after[0]) // 2 - best.remote[0]
    wall = (best.before[1] + best.after[1]) // 2 - best.remote[1]
    return ClockOffset(mono, wall, (best.rtt_ns + 1) // 2, len(exchanges))


async def measure(ask: Callable[[], Awaitable[ClockReading]], samples: int = 8) -> ClockOffset:
    """Exchange clocks `samples` times through `ask` (which returns the worker's reading)."""
    exchanges = []
    for _ in range(samples):
        before = read_clocks()
        remote = await ask()
        exchanges.append(Exchange(before, tuple(remote), read_clocks()))  # type: ignore[arg-type]
    return estimate(exchanges)


def _shift_ns_fields(d: dict[str, Any], mono_ns: int) -> None:
    for k, v in d.items():
        if k.endswith("_ns") and isinstance(v, int) and not isinstance(v, bool):
            d[k] = v + mono_ns
        elif isinstance(v, dict):
            _shift_ns_fields(v, mono_ns)


def shift_record(record: dict[str, Any], off: ClockOffset) -> dict[str, Any]:
    """A call or session line moved onto the driver's clocks: every `*_ns` field, nested
    ones too (a replayed call's `replay.intended_send_ns`), and `started_at`. Durations
    (`*_s`) are differences on one clock and stay as they are. A copy: the line as written
    is never edited (the record itself when the offset is zero)."""
    if off.is_zero:
        return record
    moved = copy.deepcopy(record)
    _shift_ns_fields(moved, off.mono_ns)
    started = moved.get("started_at")
    if isinstance(started, int | float) and not isinstance(started, bool):
        moved["started_at"] = started + off.wall_ns / 1e9
    return moved


def shift_call(rec: CallRecord, off: ClockOffset) -> CallRecord:
    """A copy of a call record moved onto the driver's clocks, as `shift_record` moves its
    JSON form. A copy: the worker's own code may still read the record on its own clocks."""
    if off.is_zero:
        return rec
    changes: dict[str, Any] = {"started_at": rec.started_at + off.wall_ns / 1e9}
    for name in _call_fields():
        v = getattr(rec, name)
        if name.endswith("_ns") and isinstance(v, int) and not isinstance(v, bool):
            changes[name] = v + off.mono_ns
        elif isinstance(v, dict):  # a replayed call's `replay.intended_send_ns`
            v = copy.deepcopy(v)
            _shift_ns_fields(v, off.mono_ns)
            changes[name] = v
    return dataclasses.replace(rec, **changes)


@functools.cache
def _call_fields() -> tuple[str, ...]:

    return tuple(f.name for f in dataclasses.fields(CallRecord))
