"""The per-client deadline ticker: which deadline fires, when, and that it idles with no calls."""

from __future__ import annotations

import asyncio
import time

import pytest

from agentload.client.watchdog import PERIOD_MAX_S, Ticker


def test_period_is_a_twentieth_of_the_shortest_deadline_capped() -> None:
    loop = asyncio.new_event_loop()
    try:
        assert Ticker(loop, 0.2).period == pytest.approx(0.01)
        assert Ticker(loop, 300.0).period == PERIOD_MAX_S
    finally:
        loop.close()


async def _hang(
    ticker: Ticker, first: float | None, idle: float | None, total: float | None
) -> tuple[str | None, float]:
    t0 = time.perf_counter_ns()
    dog = ticker.watch(t0, first, idle, total)
    assert dog is not None
    try:
        await asyncio.sleep(5)
    except asyncio.CancelledError:
        dog.uncancel()
    finally:
        dog.stop()
    return dog.kind, (time.perf_counter_ns() - t0) / 1e9


async def test_first_token_and_total_fire_within_one_period() -> None:
    ticker = Ticker(asyncio.get_running_loop(), 0.2)
    (k1, s1), (k2, s2) = await asyncio.gather(
        _hang(ticker, 0.2, None, None), _hang(ticker, 5.0, None, 0.3)
    )
    assert k1 == "timeout_first_token" and 0.2 <= s1 < 0.2 + ticker.period + 0.05
    assert k2 == "timeout_total" and 0.3 <= s2 < 0.3 + ticker.period + 0.05
    assert not ticker.active
    await asyncio.sleep(2 * ticker.period)
    assert ticker._handle is None  # no calls in flight: no timer


async def test_idle_counts_from_the_last_token() -> None:
    ticker = Ticker(asyncio.get_running_loop(), 0.15)
    t0 = time.perf_counter_ns()
    dog = ticker.watch(t0, 0.15, 0.15, None)
    assert dog is not None
    task = asyncio.current_task()
    assert task is not None
    try:
        for _ in range(4):  # a token every 0.1 s keeps the call alive past both deadlines
            await asyncio.sleep(0.1)
            dog.first_token(time.perf_counter_ns())
        assert dog.kind is None
        await asyncio.sleep(1)
    except asyncio.CancelledError:
        dog.uncancel()
    finally:
        dog.stop()
    assert dog.kind == "timeout_idle"
    assert (time.perf_counter_ns() - t0) / 1e9 < 0.4 + 0.15 + ticker.period + 0.1


async def test_no_deadlines_no_timer() -> None:
    ticker = Ticker(asyncio.get_running_loop(), 1.0)
    dog = ticker.watch(time.perf_counter_ns(), None, None, None)
    assert dog is not None
    assert not ticker.active and ticker._handle is None
    dog.stop()


def test_a_ticker_of_another_loop_watches_nothing() -> None:
    old = asyncio.new_event_loop()
    ticker = Ticker(old, 1.0)
    old.close()

    async def watch() -> object:
        return ticker.watch(time.perf_counter_ns(), 1.0, None, None)

    assert asyncio.run(watch()) is None  # the client then makes a ticker for this loop
    assert not ticker.active
