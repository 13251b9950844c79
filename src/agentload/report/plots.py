"""Interactive charts of report.html: plotly figure specs (plain dicts, drawn by plotly.js).

Each function returns {"data": [...], "layout": {...}} or None when it has nothing to draw, so
a failed run gets no empty chart.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from agentload.report.series import Series
from agentload.results.records import Summary, as_summary

Fig = dict[str, Any]

_BASE_LAYOUT: dict[str, Any] = {
    "margin": {"l": 60, "r": 20, "t": 40, "b": 45},
    "height": 340,
    "hovermode": "x unified",
    # At the figure's bottom edge, not at a share of the plot's height below it: a negative
    # paper y lands on the x axis title at some widths and heights.
    "legend": {"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom"},
    "template": "plotly_white",
}

# Every axis: tick labels and titles of any length widen the margin instead of being clipped
# or drawn over each other (plotly's fixed margins do not grow on their own).
_AXIS = {"automargin": True}
# Every y axis: every value the report draws (latency, rates, counts, shares) is >= 0, so an
# axis starts at 0, never at a negative tick; the standoff keeps its "0" clear of the x
# axis's "0" where both axes start at the same corner.
_Y_AXIS = {**_AXIS, "rangemode": "tozero", "ticklabelstandoff": 4}
# Every x axis: its labels stand off too, so that a first tick at the corner (a time axis
# that starts before the window, at -0.3 s) clears the y axis's "0" beside it.
_X_AXIS = {**_AXIS, "ticklabelstandoff": 8}
# A second y axis on the right: round ticks of its own (plotly would place them at the first
# axis's grid lines, at values such as 0.389) and no second grid.
_OVERLAY_AXIS = {"tickmode": "auto", "showgrid": False}


def layout(title: str, **kw: Any) -> dict[str, Any]:
    """A figure's layout: the report's common look, `kw` added or replacing (the sweep page
    and compare use it too). Axes get the common axis settings unless `kw` sets them."""
    out = {**_BASE_LAYOUT, "title": {"text": title, "font": {"size": 14}}, **kw}
    for key in list(out):
        if key.startswith("xaxis"):
            out[key] = {**_X_AXIS, **out[key]}
        elif key.startswith("yaxis"):
            extra = _OVERLAY_AXIS if "overlaying" in out[key] else {}
            out[key] = {**_Y_AXIS, **extra, **out[key]}
    out.setdefault("xaxis", dict(_X_AXIS))
    out.setdefault("yaxis", dict(_Y_AXIS))
    return out


# A horizontal legend's entry: the line sample and gaps (px) plus its text (px per character
# at plotly's 12 px font, a generous average), packed into rows of a chart about 1,000 px wide.
_LEGEND_ITEM_PX, _LEGEND_CHAR_PX, _LEGEND_ROW_PX, _LEGEND_WIDTH_PX = 50, 7, 20, 1000


def fit_legend(fig: Fig) -> Fig:
    """`fig` made taller by the legend's rows past the first, so that a legend of many or
    long names wraps without squeezing the plot."""
    # plotly stacks a legend group's entries in one column: a group is one block of them.
    groups: dict[str, list[str]] = {}
    for i, d in enumerate(fig["data"]):
        if d.get("showlegend", True):
            groups.setdefault(d.get("legendgroup") or f"#{i}", []).append(d.get("name") or "")
    rows, line_rows, used = 0, 0, 0
    for names in groups.values():
        w = _LEGEND_ITEM_PX + _LEGEND_CHAR_PX * max(len(n) for n in names)
        if used and used + w > _LEGEND_WIDTH_PX:
            rows, line_rows, used = rows + line_rows, 0, 0
        used += w
        line_rows = max(line_rows, len(names))
    rows += line_rows
    lay = fig["layout"]
    lay["height"] = lay.get("height", _BASE_LAYOUT["height"]) + _LEGEND_ROW_PX * max(0, rows - 1)
    return fig


def latency_cdf(summary: Summary | Mapping[str, Any]) -> Fig | None:
    dists = as_summary(summary).distributions
    data = []
    for role, d in sorted(dists.items()):
        for key, name, axis in (("ttft_s", "TTFT", "x"), ("e2e_s", "e2e", "x2")):
            q = d.get(key)
            if q:
                data.append(
                    {
                        "type": "scatter",
                        "mode": "lines",
                        "x": q,
                        "y": np.linspace(0, 1, len(q)).round(3).tolist(),
                        "name": f"{role} {name}",
                        "xaxis": axis,
                        "yaxis": "y" if axis == "x" else "y2",
                    }
                )
    if not data:
        return None
    return {
        "data": data,
        "layout": layout(
            "Latency CDF: TTFT (left) and end-to-end (right)",
            hovermode="closest",
            xaxis={"domain": [0, 0.47], "title": {"text": "TTFT (s)"}},
            xaxis2={"domain": [0.53, 1], "title": {"text": "e2e (s)"}},
            yaxis={"title": {"text": "share of calls"}, "range": [0, 1]},
            yaxis2={"anchor": "x2", "range": [0, 1]},
        ),
    }


def timeline(ser: Series | None) -> Fig | None:
    """Throughput, client active sessions / calls in flight and server running / waiting on
    one time axis (two stacked panels sharing x)."""
    if ser is None or not ser.t:
        return None
    # A step ("hv") holds each bin's value from its start to the next bin's start, so the
    # steps start at the bins' starts (ser.t holds their middles) and the last one is held
    # to its bin's end: in line with the server's samples, drawn at their own times.
    half = ser.bin_s / 2
    steps = [t - half for t in ser.t] + [ser.t[-1] + half]

    def held(ys: list[Any]) -> list[Any]:
        return [*ys, ys[-1]]

    data: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "lines",
            "x": steps,
            "y": held(ser.output_tokens_per_s),
            "name": "output tok/s",
            "line": {"shape": "hv"},
        },
        {
            "type": "scatter",
            "mode": "lines",
            "x": steps,
            "y": held(ser.calls_per_s),
            "name": "calls/s",
            "yaxis": "y3",
            "line": {"shape": "hv", "dash": "dot"},
        },
        {
            "type": "scatter",
            "mode": "lines",
            "x": steps,
            "y": held(ser.active_sessions),
            "name": "client: active sessions",
            "yaxis": "y2",
            "line": {"shape": "hv"},
        },
        {
            "type": "scatter",
            "mode": "lines",
            "x": steps,
            "y": held(ser.calls_in_flight),
            "name": "client: calls in flight",
            "yaxis": "y2",
            "line": {"shape": "hv", "dash": "dot"},
        },
    ]
    for ep, s in ser.server.items():
        for key in ("running", "waiting"):
            if any(v is not None for v in s[key]):
                data.append(
                    {
                        "type": "scatter",
                        "mode": "lines+markers",
                        "marker": {"size": 3},
                        "x": s["t"],
                        "y": s[key],
                        "name": f"server {ep}: {key}",
                        "yaxis": "y2",
                        "line": {"shape": "hv"},
                    }
                )
    return {
        "data": data,
        "layout": layout(
            f"Throughput and concurrency over time ({ser.bin_s:g} s bins)",
            height=460,
            xaxis={"title": {"text": "seconds since the window's start"}, "anchor": "y2"},
            yaxis={"domain": [0.55, 1], "title": {"text": "output tok/s"}},
            yaxis3={"overlaying": "y", "side": "right", "title": {"text": "calls/s"}},
            yaxis2={"domain": [0, 0.45], "title": {"text": "requests / sessions"}},
        ),
    }


def by_turn(summary: Summary | Mapping[str, Any]) -> Fig | None:
    turns = {r: rows for r, rows in as_summary(summary).turns.items() if rows}
    if not turns:
        return None
    data = []
    for role, rows in sorted(turns.items()):
        x = [r.turn for r in rows]
        for p, dash in (("p50", "solid"), ("p90", "dash")):
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines+markers",
                    "x": x,
                    "y": [r.ttft_s.get(p) for r in rows],
                    "name": f"{role} TTFT {p}",
                    "line": {"dash": dash},
                }
            )
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "x": x,
                "y": [r.cached_share for r in rows],
                "name": f"{role} cached share",
                "yaxis": "y2",
                "line": {"dash": "dot"},
            }
        )
    return {
        "data": data,
        "layout": layout(
            "TTFT and cached share by turn index",
            xaxis={"title": {"text": "turn (call index within the episode, per role)"}},
            yaxis={"title": {"text": "TTFT (s)"}},
            yaxis2={
                "overlaying": "y",
                "side": "right",
                "range": [0, 1.05],
                "title": {"text": "cached share"},
            },
        ),
    }


def prompt_vs_latency(ser: Series | None) -> Fig | None:
    if ser is None or not ser.prompt_vs_latency:
        return None
    data = [
        {
            "type": "scatter",
            "mode": "markers",
            "marker": {"size": 4, "opacity": 0.5},
            "x": d["prompt_tokens"],
            "y": d["ttft_s"],
            "name": f"{role} TTFT",
        }
        for role, d in ser.prompt_vs_latency.items()
    ]
    return {
        "data": data,
        "layout": layout(
            "TTFT against prompt length",
            hovermode="closest",
            xaxis={"title": {"text": "prompt tokens"}},
            yaxis={"title": {"text": "TTFT (s)"}},
        ),
    }


def itl_histogram(ser: Series | None) -> Fig | None:
    if ser is None or not ser.itl_hist[1]:
        return None
    x, n = ser.itl_hist
    return {
        "data": [{"type": "bar", "x": [v * 1e3 for v in x], "y": n, "name": "gaps"}],
        "layout": layout(
            "Inter-token gaps, all tokens of all calls",
            hovermode="closest",
            xaxis={"type": "log", "title": {"text": "gap (ms, log scale)"}},
            yaxis={"title": {"text": "gaps"}},
            bargap=0,
        ),
    }


def error_timeline(ser: Series | None) -> Fig | None:
    if ser is None or not ser.errors:
        return None
    data = [
        {"type": "bar", "x": ser.t, "y": v, "name": kind} for kind, v in sorted(ser.errors.items())
    ]
    return {
        "data": data,
        "layout": layout(
            "Failed calls over time",
            barmode="stack",
            xaxis={"title": {"text": "seconds since the window's start"}},
            yaxis={"title": {"text": f"failed calls per {ser.bin_s:g} s"}},
        ),
    }


def server_kv(ser: Series | None) -> Fig | None:
    if ser is None:
        return None
    data = [
        {
            "type": "scatter",
            "mode": "lines",
            "x": s["t"],
            "y": [None if v is None else v * 100 for v in s["kv_usage"]],
            "name": f"{ep} KV cache %",
        }
        for ep, s in ser.server.items()
        if any(v is not None for v in s["kv_usage"])
    ]
    if not data:
        return None
    return {
        "data": data,
        "layout": layout(
            "Server KV-cache use",
            xaxis={"title": {"text": "seconds since the window's start"}},
            yaxis={"title": {"text": "%"}, "range": [0, 105]},
        ),
    }


# GPU charts' panels, top to bottom: (sample key suffix, axis title, scale of the value).
_GPU_PANELS = (
    ("util", "utilisation %", 1.0),
    ("fb_used_mib", "memory used (GiB)", 1 / 1024),
    ("power_w", "power (W)", 1.0),
    ("sm_clock_mhz", "SM clock (MHz)", 1.0),
)


_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
            "#7f7f7f", "#bcbd22", "#17becf")  # fmt: skip


def gpu_timeline(ser: Series | None) -> Fig | None:
    """DCGM telemetry over time: utilisation, memory used, power and SM clock, one line per
    GPU, in four stacked panels sharing the time axis (a GPU's legend entry toggles all four)."""
    if ser is None or not ser.gpu:
        return None
    data: list[dict[str, Any]] = []
    n_panels = len(_GPU_PANELS)
    line = 0
    for ep, s in ser.gpu.items():
        n = int((s.get("gpus") or [0])[0] or 0)
        for i in range(n):
            name = f"GPU {i}" if len(ser.gpu) == 1 else f"{ep} GPU {i}"
            color = _PALETTE[line % len(_PALETTE)]  # one colour per GPU in every panel
            line += 1
            for p, (key, _, scale) in enumerate(_GPU_PANELS):
                ys = s.get(f"gpu{i}_{key}") or []
                if not any(v is not None for v in ys):
                    continue
                data.append(
                    {
                        "type": "scatter",
                        "mode": "lines",
                        "x": s["t"],
                        "y": [None if v is None else round(v * scale, 3) for v in ys],
                        "name": name,
                        "legendgroup": name,
                        "line": {"color": color},
                        "showlegend": p == 0,
                        "yaxis": "y" if p == 0 else f"y{p + 1}",
                    }
                )
    if not data:
        return None
    gap = 0.06
    h = (1 - gap * (n_panels - 1)) / n_panels
    axes: dict[str, Any] = {}
    for p, (_, title, _) in enumerate(_GPU_PANELS):
        top = 1 - p * (h + gap)
        axes["yaxis" if p == 0 else f"yaxis{p + 1}"] = {
            "domain": [round(top - h, 3), round(top, 3)],
            "title": {"text": title, "font": {"size": 11}},
            "anchor": "x",
            "rangemode": "tozero",
            **({"range": [0, 105]} if p == 0 else {}),  # utilisation: the whole 0-100 %
        }
    return {
        "data": data,
        "layout": layout(
            "GPU telemetry (DCGM exporter)",
            height=620,
            xaxis={"title": {"text": "seconds since the window's start"}, "anchor": f"y{n_panels}"},
            **axes,
        ),
    }
