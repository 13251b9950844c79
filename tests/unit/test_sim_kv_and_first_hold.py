"""The decode cost of distinct KV blocks, the first-token hold of the output coalescing, and
how calibration estimates both."""

from __future__ import annotations

import random

import pytest

from agentload.calibration.fit import PARAMS, decode_features, fit_first_hold
from agentload.calibration.probe import window_features
from agentload.calibration.stream import Call
from agentload.sim.coalesce import van_der_corput
from agentload.sim.engine import Engine, Seq
from agentload.sim.metrics import SimMetrics
from agentload.sim.profiles import BUILTIN_PROFILES, Profile
from null_output import NullOutput

KV_S = 1e-6
BS = 16


def _engine() -> Engine:
    profile = Profile(decode_kv_token_s=KV_S, block_size=BS, kv_blocks=256)
    metrics = SimMetrics("m", block_size=BS, kv_blocks=256, prefix_caching=True)
    return Engine(profile, metrics)


def _seq(rid: str, hashes: list[int]) -> Seq:
    return Seq(rid, 160, hashes, 50, 50, NullOutput(), ignore_eos=True)


def _step(engine: Engine) -> float:
    scheduled, dt = engine.schedule()
    engine.complete(scheduled, 0.0)
    return dt


def test_distinct_contexts_cost_every_kv_token() -> None:
    engine = _engine()
    engine.add(_seq("a", list(range(100, 110))))
    engine.add(_seq("b", list(range(200, 210))))
    assert _step(engine) == 0.0  # the prefill step reads no decode KV
    # both decode over 161 tokens of their own context
    assert _step(engine) == pytest.approx(KV_S * 2 * 161)


def test_a_shared_prefix_is_read_once() -> None:
    engine = _engine()
    prefix = list(range(100, 110))
    engine.add(_seq("a", prefix))
    _step(engine)
    engine.add(_seq("b", prefix))  # hits the 9 full blocks "a" cached
    _step(engine)  # "a" decodes beside "b"'s last 16 prompt tokens
    # "a": 162 tokens in 11 blocks; "b": 161 tokens, 9 of its 11 blocks shared with "a"
    assert _step(engine) == pytest.approx(KV_S * (11 + 2) * BS)


def test_the_term_is_zero_where_a_profile_has_not_measured_it() -> None:
    for name, profile in BUILTIN_PROFILES.items():
        if name != "vllm-cpu-tiny":
            assert profile.decode_kv_token_s == 0, name
            assert profile.coalesce_first_p == 0, name
    assert "decode_kv_token_s" in PARAMS


def test_window_features_count_a_shared_prefix_once() -> None:
    def call(prompt: int, cached: int) -> Call:
        return Call(start=0.0, times=[0.0], counts=[1], prompt_tokens=prompt, cached_tokens=cached)

    shared = window_features([(call(160, 144), 4, 8), (call(160, 144), 4, 8)], BS)
    distinct = window_features([(call(160, 0), 4, 8), (call(160, 0), 4, 8)], BS)
    ctx = 160 + (4 + 8 - 1) / 2
    assert distinct == decode_features(2, 2 * ctx, ctx)
    # 9 shared blocks, then 2 blocks of each stream's own (164..167 tokens: 11 blocks each)
    kv = PARAMS.index("decode_kv_token_s")
    assert shared[kv] == (9 + 2 + 2) * BS
    assert shared[:kv] + shared[kv + 1 :] == distinct[:kv] + distinct[kv + 1 :]


def test_any_run_of_2k_points_is_stratified() -> None:
    for start in (1, 5, 37, 1000):
        points = sorted(van_der_corput(start + i) for i in range(16))
        assert [int(p * 16) for p in points] == list(range(16))


def _streams(p: float, r: float, n: int, length: int, seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        k = 1
        if van_der_corput(i + 1) < p:
            k = 2
            while k < length and rng.random() < r:
                k += 1
        out.append((k, length))
    return out


@pytest.mark.parametrize(("p", "r"), [(0.3, 0.8), (0.5, 0.5), (0.1, 0.95)])
def test_fit_first_hold_recovers_the_share_and_the_run(p: float, r: float) -> None:
    got_p, got_r = fit_first_hold(_streams(p, r, 400, 64, seed=1))
    assert got_p == pytest.approx(p, abs=0.01)
    assert got_r == pytest.approx(r, rel=0.05)


def test_fit_first_hold_without_holds_and_with_short_streams() -> None:
    assert fit_first_hold([(1, 32)] * 10) == (0.0, 0.0)
    assert fit_first_hold([(1, 1)] * 10) == (0.0, 0.0)  # one-token streams say nothing
    # streams held to their end: every extension taken, none refused
    assert fit_first_hold([(32, 32), (1, 32)]) == (0.5, 0.99)
