"""sweep.md / sweep.html: a sweep's curves against load, quality under load included.

Rows come from sweep.json (one per load point, see agentload.sweep); columns from
agentload.report.columns.SWEEP_COLUMNS.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentload.fmt import DASH, num, pct, secs
from agentload.report.columns import SWEEP_COLUMNS, THIN_NOTE, any_thin, cells
from agentload.report.context import context_rows
from agentload.report.document import Document, to_html, to_markdown
from agentload.report.links import html_links, link, rel_href
from agentload.report.plots import layout
from agentload.results.jsonl import atomic_write_bytes

# Adding load past the knee buys less than this share of the throughput it would buy if
# throughput scaled linearly with load.
KNEE_EFFICIENCY = 0.5


def knee(points: Sequence[Mapping[str, Any]], kind: str) -> float | None:
    """The last load point before throughput stops scaling with load, or None when it
    scales over the whole sweep (or there are fewer than 2 points with throughput).

    Between consecutive points, efficiency = (relative throughput gain) / (relative load
    gain); the knee is the first point whose next step has efficiency < KNEE_EFFICIENCY.
    Throughput is output tokens per second.
    """
    rows = sorted((r for r in points if r.get("output_tokens_per_s")), key=lambda r: float(r[kind]))
    for a, b in itertools.pairwise(rows):
        load_gain = float(b[kind]) / float(a[kind]) - 1
        thr_gain = float(b["output_tokens_per_s"]) / float(a["output_tokens_per_s"]) - 1
        if load_gain > 0 and thr_gain / load_gain < KNEE_EFFICIENCY:
            return float(a[kind])
    return None


def _line(x: list[float], rows: Sequence[Mapping[str, Any]], key: str, name: str, **kw: Any):
    return {
        "type": "scatter",
        "mode": "lines+markers",
        "x": x,
        "y": [r.get(key) for r in rows],
        "name": name,
        **kw,
    }


def _layout(title: str, kind: str, ytitle: str, **kw: Any) -> dict[str, Any]:
    """plots.layout with load on x (its margins grow to fit a second y axis)."""
    axes = {
        "xaxis": {"title": {"text": kind}},
        "yaxis": {"title": {"text": ytitle}, "rangemode": "tozero"},
    }
    return layout(title, **{**axes, **kw})  # kw may replace the y axis


def _knee_shape(k: float | None) -> list[dict[str, Any]]:
    if k is None:
        return []
    return [
        {
            "type": "line",
            "x0": k,
            "x1": k,
            "yref": "paper",
            "y0": 0,
            "y1": 1,
            "line": {"dash": "dot", "color": "#cf222e"},
        }
    ]


_Rows = Sequence[Mapping[str, Any]]


def sweep_charts(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The sweep's charts against load: latency percentiles, throughput with the knee,
    quality under load (when episodes were graded) and SLO attainment (with an SLO)."""
    kind = str(doc["kind"])
    rows = sorted(doc.get("points") or [], key=lambda r: float(r[kind]))
    if not rows:
        return []
    x = [float(r[kind]) for r in rows]
    figs = _latency_charts(x, rows, kind)
    figs.append(_throughput_chart(x, rows, kind, doc.get("knee")))
    if any(r.get("success_rate") is not None for r in rows):
        figs.append(_quality_chart(x, rows, kind))
    if doc.get("slo"):
        figs.append(_slo_chart(x, rows, kind))
    return figs


def _latency_charts(x: list[float], rows: _Rows, kind: str) -> list[dict[str, Any]]:
    """TTFT, ITL and end-to-end percentiles, one chart each that has any."""
    figs = []
    for metric, label in (("ttft", "TTFT"), ("itl", "ITL (all tokens)"), ("e2e", "end-to-end")):
        data = [
            _line(x, rows, f"{metric}_{p}", f"{label} {p}", line={"dash": dash})
            for p, dash in (("p50", "solid"), ("p90", "dash"), ("p99", "dot"))
            if any(r.get(f"{metric}_{p}") is not None for r in rows)
        ]
        if data:
            figs.append(
                {"data": data, "layout": _layout(f"{label} against {kind}", kind, "seconds")}
            )
    return figs


def _throughput_chart(x: list[float], rows: _Rows, kind: str, k: Any) -> dict[str, Any]:
    return {
        "data": [
            _line(x, rows, "output_tokens_per_s", "output tok/s"),
            _line(x, rows, "episodes_per_min", "episodes/min", yaxis="y2"),
        ],
        "layout": _layout(
            f"Throughput against {kind}" + ("" if k is None else f" (knee at {k:g})"),
            kind,
            "output tok/s",
            yaxis2={"overlaying": "y", "side": "right", "title": {"text": "episodes/min"}},
            shapes=_knee_shape(k),
        ),
    }


def _quality_chart(x: list[float], rows: _Rows, kind: str) -> dict[str, Any]:
    """Success rate and pass^k, with the agent's TTFT p90 on a second axis."""
    ks = sorted({kk for r in rows for kk in (r.get("pass_hat_k") or {})}, key=int)
    quality = [_line(x, rows, "success_rate", "success rate")]
    quality += [
        {
            **_line(x, rows, "", f"pass^{kk}", line={"dash": "dash"}),
            "y": [(r.get("pass_hat_k") or {}).get(kk) for r in rows],
        }
        for kk in ks
        if kk != "1"
    ]
    if any(r.get("ttft_p90") is not None for r in rows):
        # Success and latency on one chart: how much quality a load point costs, and when.
        quality.append(
            _line(x, rows, "ttft_p90", "agent TTFT p90 (s)", yaxis="y2", line={"dash": "dot"})
        )
    return {
        "data": quality,
        "layout": _layout(
            f"Quality under load: task success and latency against {kind}",
            kind,
            "share",
            yaxis={"title": {"text": "share"}, "range": [0, 1.05]},
            yaxis2={
                "overlaying": "y",
                "side": "right",
                "title": {"text": "seconds"},
                "rangemode": "tozero",
            },
        ),
    }


def _slo_chart(x: list[float], rows: _Rows, kind: str) -> dict[str, Any]:
    return {
        "data": [
            _line(x, rows, "slo_call_attainment", "calls meeting every SLO"),
            _line(x, rows, "slo_session_attainment", "episodes meeting every SLO"),
            _line(x, rows, "goodput_per_min", "goodput (episodes/min)", yaxis="y2"),
        ],
        "layout": _layout(
            f"SLO attainment and goodput against {kind}",
            kind,
            "share",
            yaxis={"title": {"text": "share"}, "range": [0, 1.05]},
            yaxis2={"overlaying": "y", "side": "right", "title": {"text": "per min"}},
        ),
    }


def sweep_document(doc: Mapping[str, Any], root: Path | None = None) -> Document:
    """The sweep page; with the sweep's `root` folder, each load value links to its point's
    report.html (when the point wrote one)."""
    kind = str(doc["kind"])
    out = Document(f"agentload sweep over {kind}")
    rows = sorted(doc.get("points") or [], key=lambda r: float(r[kind]))
    left, right = Document(""), Document("")
    left.h("Sweep context")
    left.table(["", ""], context_rows(doc.get("context") or {}))
    right.h("Key figures")
    k = doc.get("knee")
    best = doc.get("best_point")
    facts = [
        ["status", str(doc.get("status") or DASH)],
        ["points", f"{len(rows)} of {len(doc.get('points_planned') or [])} planned"],
        ["knee (throughput stops scaling)", DASH if k is None else f"{kind} {k:g}"],
    ]
    if doc.get("slo"):
        slo = ", ".join(f"{key} ≤ {secs(v)}" for key, v in doc["slo"].items())
        facts.append(["SLO", slo])
        facts.append(["highest load meeting the SLO", DASH if best is None else f"{best:g}"])
    if rows:
        top = max(rows, key=lambda r: r.get("output_tokens_per_s") or 0)
        facts.append(
            ["peak output tok/s", f"{num(top.get('output_tokens_per_s'), 1)} at {top[kind]:g}"]
        )
        facts.append(
            [
                "success rate, lowest → highest load",
                " → ".join(pct(r.get("success_rate")) for r in (rows[0], rows[-1])),
            ]
        )
    right.table(["figure", "value"], facts)
    out.row(left, right)
    failed = [r for r in rows if r.get("status") not in (None, "completed", "duration")]
    for r in failed:
        out.warn(f"{kind} {r[kind]:g}: {r.get('status')}")
    for fig in sweep_charts(doc):
        out.chart(fig)
    if doc.get("slo"):
        slo = ", ".join(f"{key} ≤ {secs(v)}" for key, v in doc["slo"].items())
        out.p(
            f"Highest {kind} meeting the SLO ({slo}): **{best:g}**"
            if best is not None
            else f"No point met the SLO ({slo})."
        )
    out.h("Points")
    out.table(
        [kind, *[c.label for c in SWEEP_COLUMNS]],
        [[_point_link(root, r, f"{r[kind]:g}"), *cells(SWEEP_COLUMNS, r)] for r in rows],
    )
    if any_thin(SWEEP_COLUMNS, rows):
        out.p(THIN_NOTE)
    out.p(
        "Each point is a full run in its own folder with its own report (the load value "
        "links to it). `calls in SLO` counts "
        "calls meeting every threshold; goodput counts successful episodes all of whose calls "
        "met every threshold, so it falls to zero faster. The knee is the last point after "
        f"which more load buys less than {KNEE_EFFICIENCY:.0%} of linear throughput scaling."
    )
    return out


def _point_link(root: Path | None, row: Mapping[str, Any], text: str) -> str:
    if root is None or not row.get("dir"):
        return text
    return link(text, rel_href(root / str(row["dir"]) / "report.html", root))


def write_sweep_report(root: Path | str, doc: Mapping[str, Any]) -> list[Path]:
    root = Path(root)
    d = sweep_document(doc, root)
    md, page = root / "sweep.md", root / "sweep.html"
    atomic_write_bytes(md, to_markdown(d).encode())
    atomic_write_bytes(page, html_links(to_html(d)).encode())
    return [md, page]
