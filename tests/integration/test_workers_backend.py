"""The process backend always reports a worker's end (`Exited`), so the driver never waits
for a worker for good: one whose message cannot be read, one that closes its connection and
does not exit."""

from __future__ import annotations

import asyncio
import time

import pytest
import workers_harness

import agentload.distributed.process as process
from agentload.config import build_config
from agentload.distributed.process import ProcessBackend
from agentload.distributed.protocol import Exited, WorkerSpec


def _spec() -> WorkerSpec:
    cfg = build_config(data={"out": "unused", "workload": {"tasks": ["airline/000"]}})
    return WorkerSpec(index=0, cfg=cfg, endpoints={}, run_id="r", attempt=0, slots=1)


async def _exited(monkeypatch: pytest.MonkeyPatch, main: object) -> tuple[Exited, float]:
    monkeypatch.setattr(process, "_process_main", main)
    monkeypatch.setattr(ProcessBackend, "exit_wait_s", 0.5, raising=False)
    be = ProcessBackend()
    try:
        await be.start(_spec())
        t0 = time.monotonic()
        msg = await asyncio.wait_for(be.receive(), 20)
        return msg, time.monotonic() - t0  # type: ignore[return-value]
    finally:
        await be.close()


async def test_an_unreadable_message_ends_that_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    msg, _ = await _exited(monkeypatch, workers_harness.unreadable_main)
    assert isinstance(msg, Exited) and msg.worker == 0
    assert msg.reason == "unreadable message: UnpicklingError"


async def test_a_worker_that_does_not_exit_is_killed(monkeypatch: pytest.MonkeyPatch) -> None:
    msg, waited = await _exited(monkeypatch, workers_harness.lingering_main)
    assert isinstance(msg, Exited)
    assert msg.reason == "did not exit after its connection closed; killed"
    assert waited < 8
