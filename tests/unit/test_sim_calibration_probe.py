"""The probe's interference pattern (which gap of the decoding stream is the mixed step) and
its warm-up rounds."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from agentload.calibration.probe import Probe, ProbePlan
from agentload.calibration.stream import Call


def _decode(step_s: float, steps: int, long_at: int | None = None, long_s: float = 0.0) -> Call:
    times, t = [0.1], 0.1
    for i in range(steps):
        t += long_s if i == long_at else step_s
        times.append(t)
    return Call(start=0.0, times=times, counts=list(range(1, steps + 2)), prompt_tokens=256)


def _prefill(start: float, first: float) -> Call:
    return Call(start=start, times=[first], counts=[1], prompt_tokens=1024, cached_tokens=0)


def test_the_mixed_step_is_the_gap_that_ends_at_the_prefills_first_token() -> None:
    dec = _decode(0.005, 40, long_at=20, long_s=0.06)
    end = dec.times[21]
    found = Probe._mixed_gap(None, dec, _prefill(dec.times[18], end))  # type: ignore[arg-type]
    assert found is not None
    gap, feats = found
    assert gap == dec.times[21] - dec.times[20]
    assert feats[3] == 1024  # the prefill's tokens are in that step


def test_no_sample_when_the_stream_ended_before_the_prefill_ran() -> None:
    # The prefill's first token comes after the stream's last: every gap after the
    # prefill's start is a plain decode step, which must not be fitted as the mixed one.
    dec = _decode(0.005, 40)
    late = _prefill(dec.times[30], dec.times[-1] + 0.08)
    assert Probe._mixed_gap(None, dec, late) is None  # type: ignore[arg-type]


Steps = list[tuple[str, float, Callable[[], Awaitable[None]]]]


def _counting_probe(warmup_s: float, repeats: int) -> tuple[Probe, Steps, list[str]]:
    """A probe whose patterns take 20 ms each and record a TTFT of 10 ms on their first run
    and 1 ms after (a server slow while fresh), without any server."""
    plan = ProbePlan(repeats=repeats, warmup_s=warmup_s)
    probe = Probe(None, None, plan, None)  # type: ignore[arg-type]
    ran: list[str] = []

    def pattern(name: str) -> Callable[[], Awaitable[None]]:
        async def fn() -> None:
            await asyncio.sleep(0.02)
            probe._sample("ttft", name, 0.010 if name not in ran else 0.001, [1.0])
            ran.append(name)

        return fn

    names = ("prefill 128", "prefill 512", "idle start", "first chunk")
    steps: Steps = [(n, 1.0, pattern(n)) for n in names]
    return probe, steps, ran


@pytest.mark.parametrize(("warmup_s", "expect_ms"), [(0.1, 1.0), (0.0, 10.0)])
def test_the_warmup_loads_first_and_records_nothing(warmup_s: float, expect_ms: float) -> None:
    probe, steps, ran = _counting_probe(warmup_s, repeats=2)
    phases: list[tuple[str, float]] = []
    probe.progress = lambda phase, _el, _done, total: phases.append((phase, total))
    asyncio.run(probe.run(steps))
    warm = [p for p, _ in phases if p.startswith("warm-up")]
    # 0.1 s of 20-ms loading patterns, taken in turn; never the idle or first-chunk pattern
    assert (len(warm) >= 4) if warmup_s else not warm
    assert all(p in ("warm-up: prefill 128", "warm-up: prefill 512") for p in warm)
    assert ran.count("idle start") == ran.count("first chunk") == 2
    assert phases[len(warm)][0] == "round 1/2: prefill 128"
    assert phases[0][1] == pytest.approx(2 * 4.0 + warmup_s)  # the estimate counts the warm-up
    # each pattern's observation is the median of its two measured runs: the fresh
    # server's slow first run is left out only after a warm-up
    by_label = {o.label: o for o in probe.result.obs}
    assert by_label["prefill 128"].n == 2 and by_label["idle start"].n == 2
    assert by_label["prefill 128"].y * 1000 == pytest.approx(expect_ms)
    assert by_label["idle start"].y * 1000 == pytest.approx(10.0)  # its first run was measured
