"""A worker told its clock offset (a Ray actor on another machine) sends its call and session
records already on the driver's clocks, so the driver writes the lines as they arrive."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from agentload.client import CallRecord
from agentload.config import build_config
from agentload.distributed.protocol import Assignment, Batch, SessionDone, WorkerSpec
from agentload.distributed.worker import FeedPlan, Outbox
from agentload.scheduler import WorkItem

SKEW_NS = 7_345_678_901
WALL_SKEW_NS = -250_000_000


class _Channel:
    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send(self, msg: Any) -> None:
        self.sent.append(msg)

    async def recv(self) -> Any:  # pragma: no cover - not used here
        raise AssertionError


def _outbox(offset: tuple[int, int]) -> tuple[Outbox, _Channel]:
    spec = WorkerSpec(
        index=0,
        cfg=build_config(data={}),
        endpoints={},
        run_id="r",
        attempt=0,
        slots=1,
        clock_offset_ns=offset,
    )
    channel = _Channel()
    return Outbox(spec, channel, FeedPlan()), channel


def _records() -> tuple[CallRecord, dict[str, Any]]:
    rec = CallRecord(
        call_id="s:a0",
        session_id="s",
        started_at=1_700_000_000.5,
        start_ns=100,
        first_token_ns=200,
        end_ns=900,
        ttft_s=1e-7,
        replay={"intended_send_ns": 90},
    )
    session = {"session_id": "s", "started_at": 1_700_000_000.0, "start_ns": 50, "end_ns": 950}
    return rec, session


async def _send(out: Outbox, rec: CallRecord, session: dict[str, Any]) -> Batch:
    out.call(rec)
    out.session(SessionDone(Assignment(WorkItem("t", 0, False, 0)), session, None))
    out.flush()
    return out.channel.sent[-1]  # type: ignore[attr-defined, no-any-return]


async def test_records_leave_the_worker_on_the_driver_clocks() -> None:
    out, _ = _outbox((SKEW_NS, WALL_SKEW_NS))
    rec, session = _records()
    batch = await _send(out, rec, session)
    (line,) = batch.calls
    got = orjson.loads(line)
    assert (got["start_ns"], got["first_token_ns"], got["end_ns"]) == (
        100 + SKEW_NS,
        200 + SKEW_NS,
        900 + SKEW_NS,
    )
    assert got["headers_ns"] is None and got["ttft_s"] == 1e-7
    assert got["replay"] == {"intended_send_ns": 90 + SKEW_NS}
    assert got["started_at"] == pytest.approx(1_700_000_000.25)
    # The worker's own record object is left on its own clocks.
    assert (rec.start_ns, rec.started_at, rec.replay) == (
        100,
        1_700_000_000.5,
        {"intended_send_ns": 90},
    )
    (done,) = batch.sessions
    assert (done.session["start_ns"], done.session["end_ns"]) == (50 + SKEW_NS, 950 + SKEW_NS)
    assert done.session["started_at"] == pytest.approx(1_699_999_999.75)


async def test_a_worker_on_the_driver_machine_sends_records_as_they_are() -> None:
    out, _ = _outbox((0, 0))
    rec, session = _records()
    batch = await _send(out, rec, session)
    assert batch.calls == [rec.to_json()]
    assert batch.sessions[0].session == _records()[1]
