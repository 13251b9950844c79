"""The report's chart specs: throughput spread over each call, and no y axis below zero."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agentload.report import plots
from agentload.report.multi import Series as RunSeries
from agentload.report.multi import compare_charts
from agentload.report.series import build_series
from agentload.report.sweep import sweep_charts

T0 = 1_795_000_000.0  # epoch seconds, as in records


def _call(start: float, ttft: float | None, e2e: float | None, tokens: int, **kw: Any) -> dict:
    return {
        "started_at": T0 + start,
        "ttft_s": ttft,
        "e2e_s": e2e,
        "total_s": e2e,
        "completion_tokens": tokens,
        "status": "ok",
        **kw,
    }


def _tok_s(calls: list[dict], start: float, end: float) -> list[float]:
    ser = build_series(calls, [], [], {"start": T0 + start, "end": T0 + end})
    assert ser is not None and ser.bin_s == 1.0
    return ser.output_tokens_per_s


def test_a_call_s_tokens_spread_from_first_token_to_end() -> None:
    # 10 tokens, first at 0.5 s, last at 2.5 s: 5 tok/s in each of the two 1-s bins it spans.
    assert _tok_s([_call(0.0, 0.5, 2.5, 10)], 0.5, 2.5) == pytest.approx([5.0, 5.0])
    # The same call in bins from 0: a quarter, a half and a quarter of its tokens.
    assert _tok_s([_call(0.0, 0.5, 2.5, 10)], 0.0, 3.0) == pytest.approx([2.5, 5.0, 2.5])


def test_one_token_untimed_and_failed_calls() -> None:
    calls = [
        _call(0.2, 0.1, 1.6, 1),  # one token: at its end, 1.8 s
        _call(0.0, None, 2.4, 7),  # no TTFT (not streamed): at its end, 2.4 s
        _call(0.0, 0.1, 0.9, 50, status="error"),  # failed: no output counted
    ]
    assert _tok_s(calls, 0.0, 3.0) == pytest.approx([0.0, 1.0, 7.0])


def test_retries_spread_over_the_last_attempt_only() -> None:
    # total_s holds a failed attempt and the wait; e2e_s and ttft_s are the last attempt's.
    c = _call(0.0, 0.5, 2.5, 20)
    c["total_s"] = 4.5  # ends at 4.5 s: tokens from 2.5 to 4.5 s
    assert _tok_s([c], 0.0, 5.0) == pytest.approx([0.0, 0.0, 5.0, 10.0, 5.0])


def test_spread_keeps_every_token_and_smooths_the_line() -> None:
    rng = np.random.default_rng(7)
    calls = []
    for _ in range(2000):
        start = float(rng.uniform(0, 50))
        e2e = float(rng.uniform(0.5, 8))
        calls.append(_call(start, e2e * 0.1, e2e, int(rng.integers(2, 400))))
    total = sum(c["completion_tokens"] for c in calls)
    ser = build_series(calls, [], [], {"start": T0, "end": T0 + 60})
    assert ser is not None
    assert sum(ser.output_tokens_per_s) * ser.bin_s == pytest.approx(total, rel=1e-9)
    assert min(ser.output_tokens_per_s) >= 0
    # Counted at each call's end, the same calls give a spikier line.
    ends = np.array([c["started_at"] + c["e2e_s"] - T0 for c in calls])
    at_end = np.bincount(ends.astype(int), [c["completion_tokens"] for c in calls], 60)
    spread = np.array(ser.output_tokens_per_s)
    assert np.abs(np.diff(spread[5:50])).mean() < 0.6 * np.abs(np.diff(at_end[5:50])).mean()


def _run_figures() -> list[dict]:
    calls = [_call(i * 0.3, 0.05 + 0.01 * i, 1.0 + 0.1 * i, 30 + i, role="agent",
                   prompt_tokens=100 * i + 1, itl_hist=None) for i in range(20)]  # fmt: skip
    calls.append(_call(1.0, None, 0.2, 0, status="error", error_kind="http_500"))
    samples: list[dict] = [
        {"t": T0 + i, "endpoint": "agent", "running": 2, "waiting": 0, "kv_usage": 0.2}
        for i in range(8)
    ]
    samples += [
        {"t": T0 + i, "endpoint": "agent", "engine": "dcgm", "gpus": 1, "gpu0_util": 50.0,
         "gpu0_fb_used_mib": 1024.0, "gpu0_power_w": 300.0, "gpu0_sm_clock_mhz": 1700.0}
        for i in range(8)
    ]  # fmt: skip
    ser = build_series(calls, [], samples, {"start": T0, "end": T0 + 8})
    q = [0.01 * i for i in range(11)]
    summary = {
        "distributions": {"agent": {"ttft_s": q, "e2e_s": q}},
        "turns": {"agent": [{"turn": i, "ttft_s": {"p50": 0.1, "p90": 0.2}, "cached_share": 0.5}
                            for i in range(4)]},
    }  # fmt: skip
    figs = [
        plots.timeline(ser),
        plots.latency_cdf(summary),
        plots.by_turn(summary),
        plots.prompt_vs_latency(ser),
        plots.error_timeline(ser),
        plots.server_kv(ser),
        plots.gpu_timeline(ser),
    ]
    assert all(f is not None for f in figs)
    return [f for f in figs if f is not None]


def _sweep_rows() -> list[dict]:
    return [
        {"concurrency": c, "dir": f"c{c}", "output_tokens_per_s": 100.0 * c,
         "episodes_per_min": 3.0 * c, "ttft_p50": 0.1 * c, "ttft_p90": 0.2 * c,
         "e2e_p50": 1.0 * c, "e2e_p90": 2.0 * c, "itl_p50": 0.01, "itl_p90": 0.02 * c,
         "success_rate": 1 - 0.1 * c,
         "slo_call_attainment": 1 - 0.1 * c, "slo_session_attainment": 1 - 0.12 * c,
         "goodput_per_min": max(0.0, 6.0 - c)}
        for c in (1, 2, 4, 8)
    ]  # fmt: skip


def _y_axes(fig: dict) -> dict[str, dict]:
    return {k: v for k, v in fig["layout"].items() if k.startswith("yaxis")}


def test_no_y_axis_reaches_below_zero() -> None:
    """Every value the charts draw is >= 0: each y axis starts at 0 or has a range from >= 0,
    so plotly's padding never shows a tick such as -0.73 (the SLO chart's goodput axis did)."""
    rows = _sweep_rows()
    figs = _run_figures()
    figs += sweep_charts({"kind": "concurrency", "points": rows, "slo": {"ttft_p90": 0.5}})
    figs += compare_charts([RunSeries("a", Path("sweep"), True, "concurrency", rows, {})])
    assert len(figs) == 7 + 6 + 4
    for fig in figs:
        title = fig["layout"]["title"]["text"]
        for name, ax in _y_axes(fig).items():
            if "range" in ax:
                assert ax["range"][0] >= 0, (title, name)
            else:
                assert ax.get("rangemode") in ("tozero", "nonnegative"), (title, name, ax)
    slo = next(f for f in figs if f["layout"]["title"]["text"].startswith("SLO attainment"))
    goodput = slo["layout"]["yaxis2"]
    assert goodput["rangemode"] == "tozero" and goodput["tickmode"] == "auto"
    assert goodput["showgrid"] is False  # one grid: the left axis's


def test_every_axis_grows_its_margin_and_the_legend_sits_below_the_x_title() -> None:
    rows = _sweep_rows()
    figs = _run_figures() + sweep_charts({"kind": "concurrency", "points": rows})
    for fig in figs:
        lay = fig["layout"]
        axes = [v for k, v in lay.items() if k.startswith(("xaxis", "yaxis"))]
        assert axes and all(ax["automargin"] is True for ax in axes), lay["title"]
        assert lay["legend"]["yref"] == "container" and lay["legend"]["y"] == 0


def test_compare_charts_grow_with_their_legend() -> None:
    """Each run adds legend entries (a p50 / p90 pair on latency charts): the figure grows by
    the rows they wrap to, so the plot keeps its height."""
    rows = _sweep_rows()

    def heights(n: int, label: str) -> list[int]:
        series = [RunSeries(f"{label} {i}", Path(f"s{i}"), True, "concurrency", rows, {})
                  for i in range(n)]  # fmt: skip
        return [f["layout"]["height"] for f in compare_charts(series)]

    # TTFT, e2e (two rows per run: p50 over p90), success, throughput (one row).
    assert heights(1, "a") == [360, 360, 340, 340]
    # Ten long names (about 330 px each): three to a row, four rows.
    assert heights(10, "vLLM 0.11 TP4 prefix caching off") == [480, 480, 400, 400]
