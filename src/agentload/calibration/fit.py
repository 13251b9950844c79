"""Fit a profile's timing parameters to measured latencies (weighted non-negative least squares).

Every observation is a latency the timing model of docs/simulator.md writes as a linear
combination of the profile's parameters: the features below are the coefficients (how many
steps, prefill tokens, attention pairs, decoding sequences, context tokens the latency holds),
so the fit is a linear least-squares problem. Rows are weighted by 1 / measured value: the fit
minimises relative errors, so a 20 ms TTFT counts as much as a 2 s one; Huber weights then
let an observation far from the others (a load spike on the machine) count less.
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

PARAMS = (
    "request_overhead_s",
    "frontend_token_s",
    "step_overhead_s",
    "prefill_token_s",
    "decode_seq_s",
    "prefill_attention_s",
    "decode_context_token_s",
    "decode_max_context_s",
    "decode_kv_token_s",
    "frontend_step_s",
)


@dataclass
class Obs:
    """One measured latency and its features (coefficients of PARAMS)."""

    kind: str  # ttft | decode | interference
    label: str
    y: float
    x: list[float]
    n: int = 1
    """Measurements behind y (it is their median)."""


def pairs(uncached: int, cached: int) -> float:
    """(query, key) pairs a prefill of `uncached` tokens after `cached` ones attends."""
    return uncached * cached + uncached * (uncached + 1) / 2


def ttft_features(prompt: int, cached: int, budget: int) -> list[float]:
    """TTFT of a request on an idle engine: front end, then ceil(r / budget) prefill steps."""
    r = max(1, prompt - cached)
    steps = float(math.ceil(r / budget))
    return [1.0, float(prompt), steps, float(r), 0.0, pairs(r, cached), 0.0, 0.0, 0.0, 0.0]


def decode_features(
    batch: int,
    context_sum: float,
    context_max: float,
    kv: float | None = None,
    frontend: float = 0.0,
) -> list[float]:
    """One decode step of `batch` sequences holding `context_sum` tokens of context, the
    longest `context_max`, `kv` distinct KV tokens in all (default: no block shared);
    `frontend` 1 for a step that started while a request was in the front end."""
    kv = context_sum if kv is None else kv
    return [
        0.0,
        0.0,
        1.0,
        0.0,
        float(batch),
        0.0,
        float(context_sum),
        float(context_max),
        kv,
        frontend,
    ]


def mixed_features(
    prefill: int, cached: int, batch: int, context_sum: float, context_max: float
) -> list[float]:
    """A step that prefills `prefill` tokens beside `batch` decoding sequences: a decode
    step's features plus the prefill's tokens and attention pairs."""
    f = decode_features(batch, context_sum, context_max)
    f[3], f[5] = float(prefill), pairs(prefill, cached)
    return f


def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Non-negative least squares by elimination: solve, drop the most negative column,
    repeat (a handful of columns, so this is exact enough and needs only numpy)."""
    active = list(range(a.shape[1]))
    coef = np.zeros(a.shape[1])
    while active:
        sol, *_ = np.linalg.lstsq(a[:, active], b, rcond=None)
        if (sol >= 0).all():
            coef[:] = 0
            coef[active] = sol
            return coef
        active.pop(int(np.argmin(sol)))
    return coef


@dataclass
class Fit:
    params: dict[str, float]
    obs: list[Obs]
    predicted: list[float] = field(default_factory=list)

    def errors(self) -> list[float]:
        return [p / o.y - 1 for p, o in zip(self.predicted, self.obs, strict=True)]

    def quality(self) -> dict[str, Any]:
        """Median and worst relative error per kind of observation, and overall."""
        errs = self.errors()
        out: dict[str, Any] = {}
        for kind in sorted({o.kind for o in self.obs}):
            e = [abs(x) for x, o in zip(errs, self.obs, strict=True) if o.kind == kind]
            out[kind] = {
                "observations": len(e),
                "median_abs_error": round(float(np.median(e)), 4),
                "max_abs_error": round(max(e), 4),
            }
        a = [abs(x) for x in errs]
        out["all"] = {
            "observations": len(a),
            "median_abs_error": round(float(np.median(a)), 4) if a else None,
            "max_abs_error": round(max(a), 4) if a else None,
        }
        return out

    def table(self) -> list[dict[str, Any]]:
        return [
            {
                "kind": o.kind,
                "label": o.label,
                "measured_s": round(o.y, 6),
                "model_s": round(p, 6),
                "error": round(p / o.y - 1, 4),
            }
            for o, p in zip(self.obs, self.predicted, strict=True)
        ]


def _robust(a: np.ndarray, b: np.ndarray, rounds: int = 8) -> np.ndarray:
    """NNLS with Huber weights (iteratively reweighted): an observation a busy machine spoiled
    counts less than the ones that agree with each other."""
    # Columns differ by orders of magnitude (1 vs P² pairs): scale them to unit norm.
    norms = np.linalg.norm(a, axis=0)
    norms[norms == 0] = 1.0
    a = a / norms
    h = np.ones(len(b))
    coef = nnls(a, b)
    for _ in range(rounds):
        r = a @ coef - b
        scale = 1.4826 * float(np.median(np.abs(r)))
        if scale <= 1e-9:
            break
        k = 1.5 * scale
        h = np.where(np.abs(r) <= k, 1.0, k / np.maximum(np.abs(r), 1e-300))
        coef = nnls(a * np.sqrt(h)[:, None], b * np.sqrt(h))
    return coef / norms


def fit(obs: list[Obs], fixed: dict[str, float] | None = None) -> Fit:
    """The parameters that best explain `obs`; `fixed` ones are held at the given value."""
    fixed = fixed or {}
    usable = [o for o in obs if o.y > 0 and math.isfinite(o.y)]
    if len(usable) < 3:
        raise ValueError(f"too few usable observations to fit ({len(usable)})")
    x = np.array([o.x for o in usable], dtype=float)
    y = np.array([o.y for o in usable], dtype=float)
    w = 1.0 / y
    free = [i for i, name in enumerate(PARAMS) if name not in fixed]
    offset = np.zeros(len(usable))
    for i, name in enumerate(PARAMS):
        if name in fixed:
            offset += x[:, i] * fixed[name]
    coef = _robust(x[:, free] * w[:, None], (y - offset) * w)
    params = dict.fromkeys(PARAMS, 0.0)
    params.update(fixed)
    for i, c in zip(free, coef, strict=True):
        params[PARAMS[i]] = float(c)
    theta = np.array([params[p] for p in PARAMS])
    return Fit(params=params, obs=usable, predicted=[float(v) for v in x @ theta])


def fit_coalescing(batches: list[tuple[int, float]]) -> tuple[float, float]:
    """`coalesce_p`, `coalesce_per_seq` from (batch size, chance a token is held) pairs.

    A token is held with probability p = p0 + p1 (batch − 1), fitted linearly in the batch
    (tokens per chunk are then geometric: a share p of chunks carry more than one token, and
    their mean is 1 / (1 − p))."""
    pts = [(b, min(0.95, max(0.0, p))) for b, p in batches]
    if not pts:
        return 0.0, 0.0
    if len({b for b, _ in pts}) < 2:
        return round(float(np.mean([p for _, p in pts])), 4), 0.0
    xb = np.array([[1.0, b - 1.0] for b, _ in pts])
    yp = np.array([p for _, p in pts])
    p0, p1 = nnls(xb, yp)
    return round(min(0.95, float(p0)), 4), round(min(0.95, float(p1)), 4)


def fit_idle_wake(diffs: list[float], pause_s: float) -> float:
    """`idle_wake_per_s` from the idle pattern's TTFT differences after `pause_s` of quiet:
    their median per second of the pause, or 0 when an idle engine was not slower."""
    if not diffs or pause_s <= 0:
        return 0.0
    return max(0.0, statistics.median(diffs)) / pause_s


def busy_spans(
    bounds: list[tuple[float, float, int]], frontend_token_s: float
) -> list[tuple[float, float]]:
    """Each busy-start arrival's bounds (see `probe.busy_bounds`) with the per-token part of
    its front end taken off: the interval its `request_overhead_s` lies in."""
    spans = [(lo - frontend_token_s * p, hi - frontend_token_s * p) for lo, hi, p in bounds]
    return [(lo, hi) for lo, hi in spans if hi > lo]


def fit_busy_overhead(bounds: list[tuple[float, float, int]], frontend_token_s: float) -> float:
    """`request_overhead_s` on a busy engine from the busy-start pattern's bounds: each
    arrival's front end ended after its lower bound and by its upper one, so the value is
    where most of those intervals overlap (the middle of that stretch; an interval a load
    spike moved does not shift it), less the per-token part (`busy_spans`).

    Written by hand: it is an interval-overlap count over a few dozen intervals."""
    return _overlap_middle(busy_spans(bounds, frontend_token_s))


def _overlap_middle(spans: list[tuple[float, float]]) -> float:
    """The middle of the stretch where most of `spans` overlap (nan for none)."""
    if not spans:
        return math.nan
    edges = sorted({x for span in spans for x in span})
    best, where = -1, (0.0, 0.0)
    for a, b in itertools.pairwise(edges):
        m = 0.5 * (a + b)
        k = sum(1 for lo, hi in spans if lo < m <= hi)
        if k > best:
            best, where = k, (a, b)
        elif k == best and a <= where[1]:
            where = (where[0], b)  # the same stretch goes on
    return max(0.0, 0.5 * (where[0] + where[1]))


# How likely an arrival's bounds count at least: one that no lognormal near the others explains
# (a load spike moved it) then costs the same under every spread instead of widening the fit.
SPAN_FLOOR = 1e-3
# Bounds hold a value this close to them.
SPAN_SLACK_S = 1e-4
# The widest spread a profile takes (`Profile.request_overhead_sigma`), and the narrowest the
# search tries (bounds that all hold one value drive it towards 0, where they divide by it).
MAX_SIGMA = 2.0
MIN_LOG_SIGMA = math.log(1e-3)


def spans_holding(spans: list[tuple[float, float]], value: float) -> int:
    """How many of `spans` hold `value` (within SPAN_SLACK_S): the arrivals that agree on it."""
    slack = SPAN_SLACK_S
    return sum(1 for lo, hi in spans if lo <= value + slack and value - slack <= hi)


class BusyFrontEnd(NamedTuple):
    median: float  # request_overhead_s
    sigma: float  # request_overhead_sigma
    mode: float  # where most bounds overlap (fit_busy_overhead)


def fit_busy_lognormal(
    bounds: list[tuple[float, float, int]], frontend_token_s: float
) -> BusyFrontEnd:
    """The busy engine's front end from the busy-start pattern's bounds: the median
    (`request_overhead_s`) and spread (`request_overhead_sigma`) of the lognormal under which
    the arrivals' bounds are most likely, each arrival's front end having ended inside its own
    (an interval-censored maximum likelihood, the per-token part off as in `busy_spans`). When
    every bound holds one value no spread is as likely as that: the median is then
    `fit_busy_overhead`'s value and the spread 0."""
    # scipy takes a while to import, and only a calibration needs it
    from scipy.optimize import minimize
    from scipy.special import ndtr

    every = busy_spans(bounds, frontend_token_s)
    mode = _overlap_middle(every)
    spans = [(lo, hi) for lo, hi in every if hi > 0]
    if not spans or not mode > 0:
        return BusyFrontEnd(mode, 0.0, mode)
    lo_s = np.array([lo for lo, _ in spans])
    hi_s = np.array([hi for _, hi in spans])
    lo, hi = np.log(np.maximum(lo_s, 1e-9)), np.log(hi_s)
    floor = math.log(SPAN_FLOOR)

    def loglik(theta: np.ndarray) -> float:
        mu, sigma = theta[0], math.exp(max(theta[1], MIN_LOG_SIGMA))
        p = ndtr((hi - mu) / sigma) - ndtr((lo - mu) / sigma)
        return float(np.log(np.maximum(p, SPAN_FLOOR)).sum())

    starts = [np.array([math.log(mode), math.log(s)]) for s in (0.05, 0.3, 1.0)]
    best = max(
        (minimize(lambda t: -loglik(t), x0, method="Nelder-Mead") for x0 in starts),
        key=lambda r: -r.fun,
    )
    outside = len(spans) - spans_holding(spans, mode)
    if outside * floor >= -best.fun:
        return BusyFrontEnd(mode, 0.0, mode)
    sigma = round(min(MAX_SIGMA, math.exp(max(best.x[1], MIN_LOG_SIGMA))), 3)
    return BusyFrontEnd(math.exp(best.x[0]), sigma, mode)


def fit_first_hold(streams: list[tuple[int, int]]) -> tuple[float, float]:
    """`coalesce_first_p`, `coalesce_first_run` from (tokens in the first chunk, tokens in the
    stream) of streams of at least two tokens.

    A stream starts held with probability p; a held stream's hold then takes each next token
    with probability r, so the first chunk of a held stream holds 1 + a geometric number of
    tokens and the token that ended the hold, cut at the stream's end (a hold that lasted to
    the end is censored). p is the share of streams whose first chunk carries more than one
    token; r is the censored geometric's maximum-likelihood estimate."""
    usable = [(k, n) for k, n in streams if n >= 2 and 1 <= k <= n]
    if not usable:
        return 0.0, 0.0
    held = [(k, n) for k, n in usable if k > 1]
    p = len(held) / len(usable)
    if not held:
        return 0.0, 0.0
    # each held stream took k - 2 extensions after its second token; it stopped on its own
    # (one failed extension) unless the hold reached the end of the stream
    taken = sum(k - 2 for k, _ in held)
    stopped = sum(1 for k, n in held if k < n)
    r = taken / (taken + stopped) if taken + stopped else 0.0
    return round(min(1.0, p), 4), round(min(0.99, r), 4)
