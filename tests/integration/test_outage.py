"""The outage gate: when failures spread it closes, probes with backoff, and reopens."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from agentload.scheduler.outage import (
    OutageGate,
    OutagePolicy,
    http_probe,
    infra_share_exceeded,
    is_infra_failure,
)

FAST = OutagePolicy(
    threshold=3, min_sessions=2, window_s=5.0, probe_base_s=0.02, probe_max_s=0.1, give_up_s=2.0
)


def test_infra_failure_kinds() -> None:
    assert is_infra_failure("connect_error")
    assert is_infra_failure("timeout_connect")
    assert is_infra_failure("http_503") and is_infra_failure("http_500")
    assert is_infra_failure("malformed_stream", "connection lost mid-stream: reset")
    assert not is_infra_failure("malformed_stream", "bad JSON in chunk")
    assert not is_infra_failure("http_429") and not is_infra_failure("http_400")
    assert not is_infra_failure("context_overflow") and not is_infra_failure(None)
    assert not is_infra_failure("http_5xx")


def test_infra_share() -> None:
    assert not infra_share_exceeded(1, 10, 0.1)
    assert infra_share_exceeded(2, 10, 0.1)
    assert not infra_share_exceeded(0, 0, 0.1)
    assert infra_share_exceeded(1, 100, 0.0)


async def test_failures_of_one_session_do_not_trip() -> None:
    probes = 0

    async def probe() -> bool:
        nonlocal probes
        probes += 1
        return True

    gate = OutageGate(probe, FAST, say=lambda m: None)
    for _ in range(10):
        gate.on_call("connect_error", None, "s1")
    assert not gate.paused and probes == 0
    # Task-level errors never count, whatever their spread.
    for i in range(10):
        gate.on_call("context_overflow", None, f"s{i}")
    assert not gate.paused
    await gate.close()


async def test_a_success_in_between_resets_the_count() -> None:
    async def probe() -> bool:
        return True

    gate = OutageGate(probe, FAST, say=lambda m: None)
    gate.on_call("connect_error", None, "s1")
    gate.on_call("http_503", None, "s2")
    gate.on_call(None, None, "s3")
    gate.on_call("connect_error", None, "s4")
    assert not gate.paused
    gate.on_call("connect_error", None, "s5")
    assert not gate.paused  # 2 since the success
    gate.on_call("connect_error", None, "s6")
    assert gate.paused  # 3 failures from 3 sessions since the last success
    assert await gate.wait_open()
    await gate.close()


async def test_pause_probe_with_backoff_and_resume() -> None:
    up_at = time.monotonic() + 0.4
    probe_times: list[float] = []
    said: list[str] = []

    async def probe() -> bool:
        probe_times.append(time.monotonic())
        return time.monotonic() >= up_at

    gate = OutageGate(probe, FAST, say=said.append)
    gate.on_call(None, None, "s0")
    for s in ("s1", "s2", "s1"):
        gate.on_call("connect_error", None, s)
    assert gate.paused
    assert gate.status() is not None and gate.status().startswith("PAUSED")  # type: ignore[union-attr]
    # Calls failing during the pause are counted on the outage, not a second one.
    gate.on_call("connect_error", None, "s3")
    t0 = time.monotonic()
    assert await gate.wait_open()
    waited = time.monotonic() - t0
    assert 0.3 < waited < 1.5
    assert not gate.paused and gate.status() is None
    gaps = [b - a for a, b in itertools.pairwise(probe_times)]
    assert gaps[-1] > gaps[0]  # the backoff grows
    assert max(gaps) <= FAST.probe_max_s + 0.1
    gate.note_retry()
    s = gate.summary()
    assert s["count"] == 1 and s["episodes_retried"] == 1 and s["gave_up"] is None
    assert 0.3 < s["paused_s"] < 1.5
    assert s["events"][0]["failures"] == 4 and s["events"][0]["probes"] == len(probe_times)
    assert any("outage" in m for m in said) and any("resuming" in m for m in said)
    await gate.close()


async def test_gives_up_when_the_endpoint_stays_down() -> None:
    async def probe() -> bool:
        return False

    policy = OutagePolicy(
        threshold=2, min_sessions=2, probe_base_s=0.02, probe_max_s=0.05, give_up_s=0.3
    )
    gate = OutageGate(probe, policy, say=lambda m: None)
    gate.on_call(None, None, "s0")  # it answered once: the long limit applies
    gate.on_call("connect_error", None, "a")
    gate.on_call("connect_error", None, "b")
    t0 = time.monotonic()
    assert not await gate.wait_open()
    assert 0.25 < time.monotonic() - t0 < 1.5
    assert gate.failed is not None and "0.3s" in gate.failed
    assert gate.summary()["gave_up"] == gate.failed
    await gate.close()


async def test_gone_endpoint_gives_up_at_once() -> None:
    async def probe() -> bool:
        return False

    gate = OutageGate(probe, FAST, say=lambda m: None, gone=lambda: "the simulator exited (-9)")
    for s in ("a", "b", "c"):
        gate.on_call("connect_error", None, s)
    t0 = time.monotonic()
    assert not await gate.wait_open()
    assert time.monotonic() - t0 < 0.2
    assert gate.failed == "the simulator exited (-9)"
    await gate.close()


async def test_http_probe_against_a_real_server() -> None:
    from aiohttp import web

    state = {"status": 503}

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": []}, status=state["status"])

    app = web.Application()
    app.router.add_get("/v1/models", models)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        probe = http_probe([f"http://127.0.0.1:{port}/v1/models"], timeout_s=1.0)
        assert not await probe()
        state["status"] = 200
        assert await probe()
        state["status"] = 401  # an endpoint that answers at all is up
        assert await probe()
    finally:
        await runner.cleanup()
    assert not await probe()  # nothing listens any more


@pytest.mark.parametrize("n", [0, 1])
async def test_wait_open_without_outage_is_immediate(n: int) -> None:
    async def probe() -> bool:
        return True

    gate = OutageGate(probe, FAST, say=lambda m: None)
    for _ in range(n):
        gate.on_call(None, None, "x")
    assert await asyncio.wait_for(gate.wait_open(), 0.1)
    await gate.close()


async def test_confirm_tells_a_lone_failure_from_an_outage() -> None:
    up = {"v": True}

    async def probe() -> bool:
        return up["v"]

    gate = OutageGate(probe, FAST, say=lambda m: None)
    t0 = time.monotonic()
    assert not await gate.confirm(t0)  # the endpoint answers: a measured failure
    assert not gate.paused
    up["v"] = False
    assert await gate.confirm(t0)  # it does not: an outage starts now
    assert gate.paused and gate.summary()["count"] == 1
    up["v"] = True
    assert await gate.wait_open()
    # The outage covered an episode that started before it ended.
    assert await gate.confirm(t0)
    assert not await gate.confirm(time.monotonic() + 1)
    await gate.close()
