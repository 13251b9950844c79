"""The calibration fit: features of the timing model, non-negative least squares, coalescing."""

from __future__ import annotations

import random

import numpy as np
import pytest

from agentload.calibration.fit import (
    PARAMS,
    Obs,
    decode_features,
    fit,
    fit_coalescing,
    mixed_features,
    nnls,
    pairs,
    ttft_features,
)
from agentload.calibration.probe import ProbeResult
from agentload.sim.profiles import BUILTIN_PROFILES

TRUE = {
    "request_overhead_s": 0.012,
    "frontend_token_s": 2.0e-6,
    "step_overhead_s": 0.003,
    "prefill_token_s": 4.0e-5,
    "decode_seq_s": 0.0008,
    "prefill_attention_s": 3.0e-8,
    "decode_context_token_s": 9.0e-8,
    "decode_max_context_s": 6.0e-7,
    "decode_kv_token_s": 2.5e-7,
    "frontend_step_s": 0.004,
}


def _y(x: list[float]) -> float:
    return sum(c * TRUE[p] for c, p in zip(x, PARAMS, strict=True))


def _probe_like(budget: int = 2048) -> list[Obs]:
    obs = []
    for p in (128, 512, 2048, 4096, 8192):
        for cached in (0, (p - 1) // 128 * 128):
            x = ttft_features(p, cached, budget)
            obs.append(Obs("ttft", f"{p}/{cached}", _y(x), x))
    for b in (1, 2, 4, 8):
        for ctx in (256, 4096):
            # a shared context: each stream's own 32 tokens beside it
            x = decode_features(b, b * ctx, ctx, ctx + 32 * (b - 1))
            obs.append(Obs("decode", f"{b}/{ctx}", _y(x), x))
    for b in (3, 6):
        x = decode_features(b, b * 2048, 2048)  # distinct contexts
        obs.append(Obs("decode", f"{b}/distinct", _y(x), x))
    x = mixed_features(1024, 0, 1, 300, 300)
    obs.append(Obs("interference", "1024", _y(x), x))
    for ctx in (1100, 1200):
        x = decode_features(1, ctx, ctx, frontend=1.0)
        obs.append(Obs("frontend", f"{ctx}", _y(x), x))
    return obs


def test_pairs_of_chunks_add_up_to_the_whole_prompt() -> None:
    # two chunks of a 3000-token prefill after 500 cached tokens attend as many pairs as one
    assert pairs(2048, 500) + pairs(952, 2548) == pairs(3000, 500)
    assert pairs(4, 0) == 10


def test_ttft_features_count_chunked_prefill_steps() -> None:
    x = ttft_features(5000, 0, 2048)
    assert x[PARAMS.index("step_overhead_s")] == 3
    assert x[PARAMS.index("prefill_token_s")] == 5000
    cached = ttft_features(5000, 4992, 2048)
    assert cached[PARAMS.index("prefill_token_s")] == 8
    assert cached[PARAMS.index("frontend_token_s")] == 5000


def test_fit_recovers_exact_parameters() -> None:
    f = fit(_probe_like())
    for name, value in TRUE.items():
        assert f.params[name] == pytest.approx(value, rel=1e-6), name
    assert f.quality()["all"]["max_abs_error"] < 1e-6


def test_fit_with_noise_stays_close_on_what_matters() -> None:
    rng = np.random.default_rng(1)
    obs = _probe_like()
    for o in obs:
        o.y *= 1 + rng.normal(0, 0.02)
    f = fit(obs)
    # the terms that carry most of the latency come back within a few percent
    for name in ("step_overhead_s", "prefill_attention_s", "decode_seq_s", "request_overhead_s"):
        assert f.params[name] == pytest.approx(TRUE[name], rel=0.15), name
    assert f.quality()["all"]["median_abs_error"] < 0.03


def test_fit_never_returns_negative_parameters() -> None:
    obs = [
        Obs("decode", str(b), 0.004 - 0.0001 * b, decode_features(b, 100 * b, 100))
        for b in (1, 2, 4)
    ]
    obs += [Obs("ttft", str(p), 0.01 + 1e-5 * p, ttft_features(p, 0, 8192)) for p in (100, 1000)]
    f = fit(obs)
    assert all(v >= 0 for v in f.params.values())


def test_fit_holds_fixed_parameters() -> None:
    f = fit(_probe_like(), fixed={"frontend_token_s": 0.0})
    assert f.params["frontend_token_s"] == 0.0


def test_fit_needs_observations() -> None:
    with pytest.raises(ValueError, match="too few"):
        fit([Obs("ttft", "a", 0.1, ttft_features(100, 0, 8192))])


def test_nnls_matches_unconstrained_solution_when_positive() -> None:
    a = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    b = np.array([1.0, 2.0, 3.0])
    assert np.allclose(nnls(a, b), [1.0, 2.0])
    assert (nnls(a, -b) >= 0).all()


def test_coalescing_fit_is_linear_in_the_batch() -> None:
    p0, p1 = 0.2, 0.05
    pts = [(b, p0 + p1 * (b - 1)) for b in (1, 2, 4, 8)]
    assert fit_coalescing(pts) == pytest.approx((p0, p1), abs=1e-3)
    assert fit_coalescing([(1, 0.0), (4, 0.0)]) == (0.0, 0.0)
    assert fit_coalescing([]) == (0.0, 0.0)


def _chunked(p: float, tokens: int, rng: random.Random) -> list[int]:
    """A stream's chunks (after the first) when each token is held with probability p and
    leaves with the next one; the last token flushes."""
    chunks, run = [], 1
    for i in range(tokens):
        if i < tokens - 1 and rng.random() < p:
            run += 1
        else:
            chunks.append(run)
            run = 1
    return chunks


@pytest.mark.parametrize("p", [0.0, 0.1, 0.3, 0.6])
def test_the_probe_reads_the_hold_chance_of_geometric_chunks(p: float) -> None:
    rng = random.Random(11)
    r = ProbeResult()
    r.chunks = {1: [c for _ in range(40) for c in _chunked(p, 95, rng)]}
    r.summarise()
    assert r.held[1] == pytest.approx(p, abs=0.03)
    assert r.chunking[1] == pytest.approx(1 / (1 - p), rel=0.08)
    assert fit_coalescing(list(r.held.items()))[0] == pytest.approx(p, abs=0.03)


def test_a_rare_stall_is_one_hold_not_a_stream_of_them() -> None:
    # vLLM's CPU server on 2 cores, single streams: a few chunks of 20-40 tokens (the front
    # end not running for a while) among a thousand single tokens. Read as tokens per chunk
    # they would hold 7 % of every stream's tokens; counted per chunk, 0.3 %.
    r = ProbeResult()
    r.chunks = {1: [1] * 1000 + [30, 24, 38]}
    r.summarise()
    assert r.chunking[1] == pytest.approx(1092 / 1003)
    assert r.held[1] == pytest.approx(3 / 1003)
    assert fit_coalescing(list(r.held.items())) == pytest.approx((0.003, 0.0), abs=1e-4)


def test_builtin_profiles_say_whether_they_are_calibrated() -> None:
    assert not BUILTIN_PROFILES["llama-8b-h100"].calibrated


def test_one_spoiled_observation_does_not_drag_the_fit() -> None:
    obs = _probe_like()
    obs[3].y *= 3  # a cached TTFT measured during a load spike
    f = fit(obs)
    for name in ("step_overhead_s", "prefill_attention_s", "decode_seq_s", "prefill_token_s"):
        assert f.params[name] == pytest.approx(TRUE[name], rel=0.05), name
    errs = sorted(abs(e) for e in f.errors())
    assert errs[-2] < 0.05  # every other observation still fits
