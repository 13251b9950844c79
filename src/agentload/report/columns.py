"""The one home of the report's column lists: the console table, report.md / report.html and
the sweep table read their columns from here, so a figure is labelled and formatted the same
way everywhere.

A column is (label, path into a summary block or sweep row, format). `console=False` leaves a
column out of the narrower console table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentload.fmt import DASH, count, num, pct, secs
from agentload.util import dig


def _num1(v: Any) -> str:
    return num(v, 1)


def _yes_no(v: Any) -> str:
    return DASH if v is None else ("yes" if v else "no")


@dataclass(frozen=True)
class Column:
    label: str
    path: tuple[str, ...]
    fmt: Callable[[Any], str]
    console: bool = True

    def value(self, block: Mapping[str, Any]) -> Any:
        return dig(block, *self.path)

    def cell(self, block: Mapping[str, Any]) -> str:
        return self.fmt(self.value(block))


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


def cells(columns: Sequence[Column], block: Mapping[str, Any]) -> list[str]:
    return [c.cell(block) for c in columns]


def console_columns(columns: Sequence[Column]) -> list[Column]:
    return [c for c in columns if c.console]
