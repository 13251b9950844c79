"""Clock offsets between the driver and a worker on another machine: the NTP-style estimate
is right within its bound, and records are moved onto the driver's clocks field by field."""

from __future__ import annotations

import asyncio
import copy

import orjson
import pytest

from agentload.client import CallRecord
from agentload.distributed.clock import (
    ClockOffset,
    Exchange,
    estimate,
    measure,
    read_clocks,
    shift_call,
    shift_record,
)

SKEW_NS = 7_345_678_901  # the worker's monotonic clock is 7.3 s behind the driver's
WALL_SKEW_NS = -250_000_000  # its wall clock 0.25 s ahead


def test_estimate_takes_the_shortest_round_trip() -> None:
    slow = Exchange((1_000, 10_000), (500, 9_900), (3_000, 12_000))  # rtt 2000
    fast = Exchange((10_000, 20_000), (9_900, 19_800), (10_200, 20_200))  # rtt 200
    off = estimate([slow, fast])
    assert off.mono_ns == 10_100 - 9_900
    assert off.wall_ns == 20_100 - 19_800
    assert off.bound_ns == 100
    assert off.samples == 2
    with pytest.raises(ValueError):
        estimate([])


async def test_measure_recovers_a_known_skew_within_its_bound() -> None:
    async def remote() -> tuple[int, int]:
        await asyncio.sleep(0.001)  # a round trip's way out
        mono, wall = read_clocks()
        await asyncio.sleep(0.001)
        return mono - SKEW_NS, wall - WALL_SKEW_NS

    off = await measure(remote, samples=5)
    assert off.samples == 5
    assert 0 < off.bound_ns < 1_000_000_000
    assert abs(off.mono_ns - SKEW_NS) <= off.bound_ns
    # The wall clocks are read a few µs after the monotonic ones on each side.
    assert abs(off.wall_ns - WALL_SKEW_NS) <= off.bound_ns + 1_000_000


def _shifted(rec: CallRecord, off: ClockOffset) -> CallRecord:
    before = rec.to_json()
    got = shift_call(rec, off)
    assert rec.to_json() == before  # a copy: the worker may still read its own record
    return CallRecord.from_dict(orjson.loads(got.to_json()))


def test_shift_call_moves_every_timestamp_and_leaves_durations() -> None:
    rec = CallRecord(
        call_id="c",
        started_at=1_700_000_000.5,
        start_ns=100,
        headers_ns=150,
        first_token_ns=200,
        end_ns=900,
        ttft_s=1e-7,
        total_s=8e-7,
    )
    rec.replay = {"intended_send_ns": 90, "send_lag_s": 1e-8}
    got = _shifted(rec, ClockOffset(SKEW_NS, WALL_SKEW_NS, 1000, 8))
    assert (got.start_ns, got.headers_ns, got.first_token_ns, got.end_ns) == (
        100 + SKEW_NS,
        150 + SKEW_NS,
        200 + SKEW_NS,
        900 + SKEW_NS,
    )
    assert got.started_at == pytest.approx(1_700_000_000.25)
    assert got.replay == {"intended_send_ns": 90 + SKEW_NS, "send_lag_s": 1e-8}
    assert got.ttft_s == 1e-7 and got.total_s == 8e-7
    assert got.call_id == "c"


def test_shift_call_keeps_missing_timestamps_missing() -> None:
    rec = CallRecord(call_id="c", start_ns=100, end_ns=200, first_token_ns=None)
    got = _shifted(rec, ClockOffset(5, 0, 1, 1))
    assert got.first_token_ns is None and got.headers_ns is None
    assert (got.start_ns, got.end_ns) == (105, 205)


def test_shift_record_moves_a_session_line() -> None:
    session = {
        "session_id": "s",
        "started_at": 1_700_000_000.0,
        "start_ns": 1_000,
        "end_ns": 5_000,
        "intended_start_ns": 900,
        "durations": {"total_s": 4e-6},
        "counts": {"agent_calls": 3},
        "warmup": False,
    }
    written = copy.deepcopy(session)
    moved = shift_record(session, ClockOffset(SKEW_NS, WALL_SKEW_NS, 1, 1))
    assert moved["start_ns"] == 1_000 + SKEW_NS
    assert moved["end_ns"] == 5_000 + SKEW_NS
    assert moved["intended_start_ns"] == 900 + SKEW_NS
    assert moved["started_at"] == pytest.approx(1_699_999_999.75)
    assert moved["durations"] == {"total_s": 4e-6}
    assert moved["counts"] == {"agent_calls": 3} and moved["warmup"] is False
    assert session == written  # the line as written is left alone


def test_a_zero_offset_changes_nothing() -> None:
    rec = CallRecord(call_id="c", start_ns=1, end_ns=2, started_at=3.0)
    session = {"start_ns": 1, "started_at": 3.0}
    assert shift_call(rec, ClockOffset.zero()) is rec
    assert shift_record(session, ClockOffset.zero()) is session
    assert session == {"start_ns": 1, "started_at": 3.0}
