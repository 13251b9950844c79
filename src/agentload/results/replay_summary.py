"""summary.json "replay": the roll-ups of a replay run (see docs/replay.md).

- windows: MLPerf's performance window ends when the first slot has no next conversation
  left, i.e. at the first conversation end after the last conversation start; conversations
  still running then finish for completeness (the complete window). Both are reported.
- per conversation: duration percentiles, terminations, turns sent / aborted, divergences;
- per turn index: calls, TTFT, cached share, divergences;
- send lag: actual minus intended send time of every call (coordinated omission);
- early-stopping bounds (`*_upper_bound`): for p90 and p99, the value the true percentile
  stays under with 99 % confidence given the number of samples (MLPerf's early stopping).

Times come from the monotonic clock when the records are of one process (see `_Clock`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from agentload import stats
from agentload.results.records import (
    Describe,
    ReplayBlock,
    ReplayTurn,
    ReplayWindow,
    SessionRecord,
    UpperBound,
)

EARLY_STOPPING_CONFIDENCE = 0.99


def quantile_upper_bound(
    values: Sequence[float | None], q: float, confidence: float = EARLY_STOPPING_CONFIDENCE
) -> float | None:
    """MLPerf-style early-stopping bound: the smallest order statistic that is at least the
    true q-quantile with the given confidence, i.e. x_(j) for the smallest j with
    P(Binomial(n, q) <= j - 1) >= confidence. None when n samples are too few to say."""
    v = sorted(x for x in values if x is not None and math.isfinite(x))
    n = len(v)
    if n == 0 or not 0 < q < 1:
        return None
    lq, l1q = math.log(q), math.log1p(-q)
    lgn = math.lgamma(n + 1)
    cdf = 0.0
    for k in range(n):  # k = j - 1
        cdf += math.exp(lgn - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * lq + (n - k) * l1q)
        if cdf >= confidence:
            return v[k]
    return None


def _early(values: Sequence[float | None]) -> UpperBound:
    return UpperBound(
        confidence=EARLY_STOPPING_CONFIDENCE,
        p90=quantile_upper_bound(values, 0.90),
        p99=quantile_upper_bound(values, 0.99),
    )


def _desc(values: Sequence[float | None]) -> Describe:
    return Describe(**stats.describe([v for v in values if v is not None and math.isfinite(v)]))


def _brief(values: Sequence[float | None]) -> Describe:
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if v.size == 0:
        return Describe(count=0, mean=None, p50=None, p90=None, p99=None)
    p50, p90, p99 = np.percentile(v, [50, 90, 99])
    return Describe(
        count=int(v.size), mean=float(v.mean()), p50=float(p50), p90=float(p90), p99=float(p99)
    )


class _Clock:
    """Times of sessions and calls in seconds on one axis: the monotonic `*_ns` fields when
    every record comes from one process (one resume attempt), else the wall clock (the
    monotonic clocks of two processes are not comparable)."""

    def __init__(self, sessions: Sequence[SessionRecord]) -> None:
        attempts = {s.attempt for s in sessions}
        self.mono = len(attempts) <= 1 and all(
            s.start_ns is not None and s.end_ns is not None for s in sessions
        )
        # Shown as wall-clock times: the first session's start anchors the monotonic axis.
        first = min(sessions, key=lambda s: s.started_at or 0.0)
        self.anchor = first.started_at or 0.0
        self.t0 = (first.start_ns or 0) if self.mono else 0

    def _at(self, ns: Any, fallback: float) -> float:
        if self.mono and isinstance(ns, int):
            return self.anchor + (ns - self.t0) / 1e9
        return fallback

    def session(self, s: SessionRecord) -> tuple[float, float]:
        wall0 = s.started_at or 0.0
        wall1 = wall0 + (s.duration("total_s") or 0.0)
        return self._at(s.start_ns, wall0), self._at(s.end_ns, wall1)

    def call(self, c: Mapping[str, Any]) -> tuple[float, float]:
        wall0 = float(c.get("started_at") or 0.0)
        wall1 = wall0 + float(c.get("total_s") or 0.0)
        end = self._at(c.get("end_ns"), wall1)
        return end - float(c.get("total_s") or 0.0), end


def _window(
    name: str,
    start: float,
    end: float,
    calls: list[Mapping[str, Any]],
    clock: _Clock,
    conversations: int,
) -> ReplayWindow:
    inside = []
    for c in calls:
        c0, c1 = clock.call(c)
        if c0 >= start - 1e-6 and c1 <= end + 1e-6:
            inside.append(c)
    ok = [c for c in inside if c.get("status", "ok") == "ok"]
    dur = max(0.0, end - start)
    out_tok = sum(int(c.get("completion_tokens") or 0) for c in ok)
    return ReplayWindow(
        window=name,
        start=start,
        end=end,
        duration_s=dur,
        conversations_ended=conversations,
        calls=len(inside),
        failed_calls=len(inside) - len(ok),
        calls_per_s=len(inside) / dur if dur > 0 else None,
        output_tokens=out_tok,
        output_tokens_per_s=out_tok / dur if dur > 0 else None,
        ttft_s=_brief([c.get("ttft_s") for c in ok]),
        e2e_s=_brief([c.get("e2e_s") for c in ok]),
        ttft_s_upper_bound=_early([c.get("ttft_s") for c in ok]),
    )


def replay_summary(
    sessions: Sequence[SessionRecord], calls: Sequence[Mapping[str, Any]]
) -> ReplayBlock | None:
    """The "replay" block from the measured sessions and their calls; None when the run
    replayed nothing."""
    conv = [s for s in sessions if s.kind == "replay"]
    if not conv:
        return None
    ids = {str(s.session_id) for s in conv}
    rcalls = [c for c in calls if c.get("replay") and str(c.get("session_id")) in ids]
    clock = _Clock(conv)
    spans = [clock.session(s) for s in conv]
    starts = [a for a, _ in spans]
    ends = [b for _, b in spans]
    first, last_start, last_end = min(starts), max(starts), max(ends)
    tail = min((e for e in ends if e >= last_start), default=last_end)
    counts: Counter[str] = Counter()
    for s in conv:
        for k in ("turns", "turns_sent", "turns_aborted", "divergences"):
            counts[k] += int(s.count(k))
    by_turn: dict[int, list[Mapping[str, Any]]] = {}
    for c in rcalls:
        by_turn.setdefault(int(c.get("turn") or 0), []).append(c)
    turns = []
    for t in sorted(by_turn):
        cs = by_turn[t]
        ok = [c for c in cs if c.get("status", "ok") == "ok"]
        prompt = sum(int(c.get("prompt_tokens") or 0) for c in ok)
        cached = sum(int(c.get("cached_tokens") or 0) for c in ok)
        turns.append(
            ReplayTurn(
                turn=t,
                calls=len(cs),
                failed=len(cs) - len(ok),
                diverged=sum(1 for c in cs if c["replay"].get("diverged")),
                ttft_s=_brief([c.get("ttft_s") for c in ok]),
                cached_share=cached / prompt if prompt else None,
                prompt_tokens_mean=prompt / len(ok) if ok else None,
            )
        )
    recorded = [c["replay"].get("recorded_output_tokens") for c in rcalls]
    actual = [c.get("completion_tokens") for c in rcalls]
    pairs = [(r, a) for r, a in zip(recorded, actual, strict=True) if r and a is not None]
    return ReplayBlock(
        conversations=len(conv),
        history=sorted({str(s.history) for s in conv}),
        terminations=dict(Counter(str(s.termination) for s in conv).most_common()),
        turns=counts["turns"],
        turns_sent=counts["turns_sent"],
        turns_aborted=counts["turns_aborted"],
        divergences=counts["divergences"],
        conversation_duration_s=_desc([b - a for a, b in spans]),
        conversation_duration_s_upper_bound=_early([b - a for a, b in spans]),
        send_lag_s=_desc([c["replay"].get("send_lag_s") for c in rcalls]),
        output_tokens={
            "recorded": int(sum(r for r, _ in pairs)),
            "actual": int(sum(a for _, a in pairs)),
            "matching_calls": sum(1 for r, a in pairs if r == a),
            "calls": len(pairs),
        },
        windows={
            "performance": _window(
                "performance", first, tail, rcalls, clock, sum(1 for e in ends if e <= tail)
            ),
            "complete": _window("complete", first, last_end, rcalls, clock, len(conv)),
        },
        by_turn=turns,
        warm_cache=warm_cache(rcalls, clock),
    )


# The first call of a replay can reuse nothing of this run: a cached share above this says the
# server held the dataset's prompts before it started.
WARM_CACHE_SHARE = 0.5


def warm_cache(calls: Sequence[Mapping[str, Any]], clock: Any) -> dict[str, Any] | None:
    """{call_id, cached_share} when the run's first call found most of its prompt in the
    server's prefix cache (a replay of the same dataset before, unsalted or with the same
    salts): every TTFT of the run is then faster than the dataset's own sharing explains."""
    ok = [c for c in calls if c.get("status", "ok") == "ok" and c.get("prompt_tokens")]
    if not ok:
        return None
    first = min(ok, key=lambda c: clock.call(c)[0])
    share = int(first.get("cached_tokens") or 0) / int(first["prompt_tokens"])
    if share <= WARM_CACHE_SHARE:
        return None
    return {"call_id": first.get("call_id"), "cached_share": share}
