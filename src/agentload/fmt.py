"""Number and duration formatting: one home for the report, console tables, progress lines
and sweep tables."""

from __future__ import annotations

import datetime as dt
from typing import Any

DASH = "–"


def secs(v: Any, *, compact: bool = False) -> str:
    """Latency: µs / ms below a second, seconds above ("92.5 ms"; compact: "92.5ms", for
    progress lines)."""
    if v is None:
        return DASH
    v = float(v)
    a = abs(v)
    sep = "" if compact else " "
    if a == 0:
        return "0"
    if a < 1e-3:
        return f"{v * 1e6:.0f}{sep}µs"
    if a < 1.0:
        return f"{v * 1e3:.1f}{sep}ms" if a < 0.1 else f"{v * 1e3:.0f}{sep}ms"
    if a < 100:
        return f"{v:.2f}{sep}s"
    return f"{v:.0f}{sep}s"


def pct(v: Any, digits: int = 1) -> str:
    return DASH if v is None else f"{float(v) * 100:.{digits}f}%"


def num(v: Any, digits: int = 2) -> str:
    if v is None:
        return DASH
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) >= 1000):
        return f"{int(v):,}"
    v = float(v)
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}"


def count(v: Any) -> str:
    return DASH if v is None else f"{int(v):,}"


def when(t: Any) -> str:
    if t is None:
        return DASH
    return dt.datetime.fromtimestamp(float(t), dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def eta(v: Any) -> str:
    """A countdown: "45s", "3m05s", "2h10m"; "?" when unknown."""
    if v is None:
        return "?"
    v = int(max(0.0, float(v)))
    h, rem = divmod(v, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def duration(v: Any) -> str:
    if v is None:
        return DASH
    v = float(v)
    if v < 120:
        return f"{v:.1f} s"
    m, s = divmod(round(v), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"
