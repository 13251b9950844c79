"""Durations and SLO specifications: one parser each, for configs, flags and `report --slo`."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

_DURATION_RE = re.compile(
    r"^\s*([0-9]*\.?[0-9]+(?:e[-+]?\d+)?)\s*(us|µs|ms|s|sec|m|min|h)?\s*$", re.IGNORECASE
)
_UNIT_S = {
    None: 1.0,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
}


def parse_duration(value: Any) -> float:
    """Seconds from `90`, `90s`, `1.5m`, `1min`, `500ms`, `250us` or `2h` (finite, >= 0)."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration like 30s, got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        m = _DURATION_RE.match(str(value))
        if not m:
            raise ValueError(f"expected a duration like 30s, 5m or 500ms, got {value!r}")
        unit = m.group(2).lower() if m.group(2) else None
        seconds = float(m.group(1)) * _UNIT_S[unit]
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"expected a finite, non-negative duration, got {value!r}")
    return seconds


SLO_METRICS = ("ttft", "e2e", "itl", "tpot")
SLO_MAX_S = 86_400.0
_SLO_STAT = re.compile(r"^p(\d+(?:\.\d+)?)$|^(mean|max)$")


def check_slo_key(key: str) -> tuple[str, str]:
    """`ttft_p90` -> ("ttft", "p90"). Metric ttft | e2e | itl | tpot; stat a percentile
    p0 < N <= p100 (p99.9 allowed), mean or max."""
    metric, _, stat = key.partition("_")
    m = _SLO_STAT.match(stat)
    if metric in SLO_METRICS and m and (m.group(2) or 0 < float(m.group(1)) <= 100):
        return metric, stat
    raise ValueError(
        f"SLO key {key!r}: expected <metric>_<stat> with metric one of "
        f"{', '.join(SLO_METRICS)} and stat a percentile like p90, p99 or p99.9 (at most p100), "
        "mean or max (e.g. ttft_p90)"
    )


def parse_slo(spec: str | Sequence[str] | Mapping[str, Any]) -> dict[str, float]:
    """`"ttft_p90=2s,e2e_p99=10s"`, a list of such terms, or a mapping -> {key: seconds}."""
    if isinstance(spec, Mapping):
        items = [(str(k), v) for k, v in spec.items()]
    else:
        parts = [spec] if isinstance(spec, str) else list(spec)
        items = []
        terms = [t for part in parts for t in part.split(",")]
        for term in terms:
            if not term.strip():
                if any(t.strip() for t in terms):  # `ttft_p90=1s,,`: a term lost to a typo?
                    raise ValueError("empty SLO term (a stray comma?); expected key=value,...")
                continue
            key, sep, val = term.partition("=")
            if not sep:
                raise ValueError(f"SLO term {term.strip()!r}: expected key=value like ttft_p90=2s")
            items.append((key.strip(), val.strip()))
    out: dict[str, float] = {}
    for key, val in items:
        check_slo_key(key)
        seconds = parse_duration(val)
        if not 0 < seconds <= SLO_MAX_S:
            raise ValueError(
                f"SLO {key}: expected a duration above 0 and at most 1 day, got {val!r}"
            )
        out[key] = seconds
    return out
