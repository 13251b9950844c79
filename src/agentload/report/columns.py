"""The one home of the report's column lists: the console table, report.md / report.html and
the sweep table read their columns from here, so a figure is labelled and formatted the same
way everywhere.

A column is (label, path into a summary block or sweep row, format). `console=False` leaves a
column out of the narrower console table. A summary block is its model (`CallBlock`), read by
attribute; a sweep row is a dict.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from agentload.fmt import DASH, count, num, pct, secs

Block = BaseModel | Mapping[str, Any]
"""What a column reads: a summary block's model (`CallBlock`) or a sweep row."""


def _field(block: Any, key: str) -> Any:
    # A model's field, or its extra (Describe's percentiles: "p50"); a row's key.
    if isinstance(block, BaseModel):
        if key in type(block).model_fields:
            return getattr(block, key)
        return (block.model_extra or {}).get(key)
    return block.get(key) if isinstance(block, Mapping) else None


def _dig(block: Any, *keys: str) -> Any:
    for k in keys:
        block = _field(block, k)
    return block


def _num1(v: Any) -> str:
    return num(v, 1)


def _yes_no(v: Any) -> str:
    return DASH if v is None else ("yes" if v else "no")


THIN_MARK = "*"
THIN_NOTE = (
    "* fewer values than the percentile needs (1 / (1 − p): p90 10, p99 100): it lies "
    "between the largest values, not in a tail they show"
)


def any_thin(columns: Sequence[Column], blocks: Sequence[Block]) -> bool:
    """Whether a table of these blocks marks a figure (and so needs THIN_NOTE under it)."""
    return any(c.thin(b) and c.value(b) is not None for b in blocks for c in columns)


@dataclass(frozen=True)
class Column:
    label: str
    path: tuple[str, ...]
    fmt: Callable[[Any], str]
    console: bool = True

    def value(self, block: Block) -> Any:
        return _dig(block, *self.path)

    def cell(self, block: Block) -> str:
        text = self.fmt(self.value(block))
        return text + THIN_MARK if text != DASH and self.thin(block) else text

    def thin(self, block: Block) -> bool:
        """Whether the figure is a percentile its sample is too small to carry: the
        distribution's `thin` list (a summary block), or the row's (a sweep row)."""
        marks = _dig(block, *self.path[:-1], "thin")
        return isinstance(marks, list) and self.path[-1] in marks


def col(label: str, path: str, fmt: Callable[[Any], str], console: bool = True) -> Column:
    return Column(label, tuple(path.split(".")), fmt, console)


# Per role @ endpoint call blocks (summary.json calls.by_role_endpoint.*).
CALL_COLUMNS: tuple[Column, ...] = (
    col("calls", "calls", count),
    col("failed", "failed", count),
    col("TTFT p50", "ttft_s.p50", secs),
    col("TTFT p90", "ttft_s.p90", secs),
    col("TTFT p99", "ttft_s.p99", secs),
    col("e2e p50", "e2e_s.p50", secs, console=False),
    col("e2e p90", "e2e_s.p90", secs),
    col("e2e p99", "e2e_s.p99", secs, console=False),
    col("TPOT p50", "tpot_s.p50", secs, console=False),
    col("ITL p50", "itl_s.all_gaps.p50", secs),
    col("ITL p99", "itl_s.all_gaps.p99", secs, console=False),
    col("ITL mean", "itl_s.mean", secs),
    col("prompt tok", "tokens.prompt", count, console=False),
    col("cached share", "tokens.cached_share", pct),
    col("output tok", "tokens.completion", count, console=False),
    col("calls/s", "throughput.calls_per_s", num, console=False),
    col("output tok/s", "throughput.output_tokens_per_s", _num1),
)

# One row per load point of a sweep (sweep.json points[*]).
SWEEP_COLUMNS: tuple[Column, ...] = (
    col("episodes", "episodes", count),
    col("episodes/min", "episodes_per_min", num),
    col("calls/s", "calls_per_s", num),
    col("out tok/s", "output_tokens_per_s", _num1),
    col("TTFT p50", "ttft_p50", secs),
    col("TTFT p90", "ttft_p90", secs),
    col("TTFT p99", "ttft_p99", secs),
    col("ITL p50", "itl_p50", secs, console=False),
    col("ITL p99", "itl_p99", secs, console=False),
    col("e2e p99", "e2e_p99", secs),
    col("success", "success_rate", pct),
    col("pass^k", "pass_hat_k_max", pct, console=False),
    col("errors", "error_rate", pct),
    col("SLO", "slo_met", _yes_no),
    col("calls in SLO", "slo_call_attainment", pct),
    col("goodput/min", "goodput_per_min", num),
)


def cells(columns: Sequence[Column], block: Block) -> list[str]:
    return [c.cell(block) for c in columns]


def console_columns(columns: Sequence[Column]) -> list[Column]:
    return [c for c in columns if c.console]
