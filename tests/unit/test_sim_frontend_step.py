"""The front end's cost to the engine's steps (`frontend_step_s`) and the probe's reading of it."""

from __future__ import annotations

import pytest

from agentload.sim.calibration.probe import frontend_gaps
from agentload.sim.calibration.stream import Call
from agentload.sim.engine import Engine, Seq
from agentload.sim.metrics import SimMetrics
from agentload.sim.profiles import BUILTIN_PROFILES, Profile


class _Sink:
    def token(self, seq: Seq, index: int, finish: str | None, now: float) -> None:
        return None

    def aborted(self, seq: Seq | None) -> None:
        return None


def _step(engine: Engine) -> float:
    scheduled, dt = engine.schedule()
    engine.complete(scheduled, 0.0)
    return dt


def test_a_step_that_starts_while_a_request_is_in_the_front_end_costs_more() -> None:
    profile = Profile(step_overhead_s=0.001, frontend_step_s=0.003, block_size=16, kv_blocks=64)
    engine = Engine(profile, SimMetrics("m", block_size=16, kv_blocks=64, prefix_caching=True))
    engine.add(Seq("a", 32, [], 8, 8, _Sink(), ignore_eos=True))
    assert _step(engine) == pytest.approx(0.001)
    engine.in_frontend = 2  # two requests tokenising: the step pays once
    assert _step(engine) == pytest.approx(0.004)
    engine.in_frontend = 0
    assert _step(engine) == pytest.approx(0.001)


def test_only_measured_profiles_have_the_term() -> None:
    for name, profile in BUILTIN_PROFILES.items():
        if name != "vllm-cpu-tiny":
            assert profile.frontend_step_s == 0, name


def _call(start: float, times: list[float], counts: list[int]) -> Call:
    return Call(start=start, times=times, counts=counts)


def test_frontend_gaps_are_the_steps_between_an_arrival_and_its_prefill() -> None:
    # a stream's tokens every 2 ms, then 5 ms while an arrival (sent at 10.5 ms) is in the
    # front end, then the 9 ms step that prefilled it beside the stream, then 2 ms again
    times = [0.000, 0.002, 0.004, 0.006, 0.008, 0.010, 0.012, 0.017, 0.022, 0.031, 0.033]
    dec = _call(0.0, times, list(range(1, len(times) + 1)))
    arrival = _call(0.0105, [0.0312], [1])
    got = frontend_gaps(dec, [arrival])
    # the step in progress when it was sent (10 -> 12 ms) and the mixed one are left out
    assert got == pytest.approx([0.005, 0.005])
    # a chunk that carried two tokens hides a step: left out too
    counts = list(range(1, len(times) + 1))
    counts[7:] = [c + 1 for c in counts[7:]]
    assert frontend_gaps(_call(0.0, times, counts), [arrival]) == pytest.approx([0.005])
    # an arrival that never got a token, or came after the stream, gives nothing
    assert frontend_gaps(dec, [_call(0.0105, [], [])]) == []
    assert frontend_gaps(dec, [_call(0.04, [0.05], [1])]) == []
