"""`agentload compare` over several runs or sweeps side by side: one table row per run (or per
sweep point) and their curves overlaid against load, written as compare.md, compare.html
(self-contained: charts inline, nothing fetched) and compare.json.

A single run is one point at its own load (its concurrency, or its arrival rate when open
loop); a sweep is one line through its points. Rows are sweep.json's point rows
(`agentload.report.points.summary_row`), so a figure has the same definition as in sweep.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from agentload.fmt import DASH, pct, secs
from agentload.report.columns import SWEEP_COLUMNS, THIN_NOTE, Column, any_thin, cells
from agentload.report.context import load_text
from agentload.report.document import Document, to_html, to_markdown
from agentload.report.links import html_links, link, rel_href
from agentload.report.plots import fit_legend, layout
from agentload.report.points import summary_row
from agentload.results.context import context_differences, run_context
from agentload.results.dirs import check_results_dir, is_sweep, load_sweep
from agentload.results.files import SUMMARY
from agentload.results.jsonl import ResultsError, atomic_write_bytes
from agentload.results.records import Summary, as_summary
from agentload.results.summary import summarize

SCHEMA = "agentload.compare/1"
FILES = ("compare.md", "compare.html", "compare.json")
DEFAULT_OUT = Path("results/compare")
# plotly's default colour sequence, assigned by hand so that a run keeps one colour for its
# p50 and p90 lines and across every chart.
COLORS = (
    "#636efa",
    "#ef553b",
    "#00cc96",
    "#ab63fa",
    "#ffa15a",
    "#19d3f3",
    "#ff6692",
    "#b6e880",
    "#ff97ff",
    "#fecb52",
)


@dataclass
class Series:
    """One folder given to compare: a run (one row) or a sweep (one row per point)."""

    label: str
    path: Path
    sweep: bool
    kind: str  # the load on the x axis: "concurrency" or "rate"
    rows: list[dict[str, Any]]  # sweep.json point rows, lowest load first
    context: dict[str, Any]

    def report_file(self, row: Mapping[str, Any]) -> Path:
        return (self.path / str(row["dir"]) if self.sweep else self.path) / "report.html"


def _summary(path: Path) -> Summary:
    """The run's summary.json, else one computed from its records (a run with --no-report
    still has summary.json; a folder of bare records does not)."""
    p = path / SUMMARY
    if p.is_file():
        try:
            doc = orjson.loads(p.read_bytes())
        except orjson.JSONDecodeError as e:
            raise ResultsError(f"{p}: not valid JSON ({e})") from None
        except OSError as e:
            raise ResultsError(f"{p}: cannot read: {e.strerror or e}") from None
        if isinstance(doc, dict):
            return as_summary(doc)

    return as_summary(summarize(path))


def load_series(path: Path, label: str) -> Series:
    """A run or sweep folder as a Series; ResultsError (one line naming the folder or file)
    when it is neither."""
    if is_sweep(path):
        doc = load_sweep(path)
        kind = str(doc["kind"])
        rows = sorted((dict(r) for r in doc["points"]), key=lambda r: float(r[kind]))
        sctx = doc.get("context")
        if not isinstance(sctx, dict):
            sctx = run_context(path / rows[0]["dir"]) if rows else {}
        return Series(label, path, True, kind, rows, sctx)
    check_results_dir(path)

    s = _summary(path)
    ctx: dict[str, Any] = s.context if isinstance(s.context, dict) else run_context(path)
    load = ctx.get("load") or {}
    kind = "rate" if load.get("mode") == "open" else "concurrency"
    status = (s.run or {}).get("stop_reason")
    row = summary_row(0.0, kind, ".", status, s)
    value = load.get(kind)
    row[kind] = float(value) if isinstance(value, int | float) else None
    return Series(label, path, False, kind, [row], ctx)


def default_labels(paths: Sequence[Path]) -> list[str]:
    """Folder names, with as many parent folders as it takes to tell them apart."""
    parts = [p.resolve().parts for p in paths]
    for depth in range(1, max(len(x) for x in parts) + 1):
        names = ["/".join(x[-depth:]) for x in parts]
        if len(set(names)) == len(names):
            return names
    # The same folder given twice: its name and the position
    pairs = enumerate(zip(parts, paths, strict=True))
    return [f"{x[-1] if x else p} #{i + 1}" for i, (x, p) in pairs]


def parse_labels(text: str | None, n: int) -> list[str] | None:
    """--labels A,B,C: one per folder; ValueError otherwise."""
    if text is None:
        return None
    labels = [x.strip() for x in text.split(",")]
    if len(labels) != n or not all(labels):
        raise ValueError(f"expected {n} non-empty comma-separated names, got {text!r}")
    if len(set(labels)) != n:
        raise ValueError(f"names must differ, got {text!r}")
    return labels


def load_all(paths: Sequence[Path], labels: Sequence[str] | None = None) -> list[Series]:
    names = list(labels) if labels else default_labels(paths)
    return [load_series(p, name) for p, name in zip(paths, names, strict=True)]


def _load_cell(row: Mapping[str, Any], kind: str, mixed: bool) -> str:
    v = row.get(kind)
    text = DASH if v is None else f"{v:g}"
    return f"{kind} {text}" if mixed else text


def table_columns(series: Sequence[Series]) -> list[Column]:
    """SWEEP_COLUMNS that any row has a value for (no empty SLO columns without an SLO)."""
    rows = [r for s in series for r in s.rows]
    return [c for c in SWEEP_COLUMNS if any(c.value(r) is not None for r in rows)]


def _what(s: Series) -> str:
    if not s.sweep:
        return "run"
    return f"sweep over {s.kind}, {len(s.rows)} points"


def _runs_rows(series: Sequence[Series]) -> list[list[str]]:
    rows = []
    for s in series:
        ctx = s.context
        engines = sorted({str(v) for v in (ctx.get("engines") or {}).values()})
        w = ctx.get("workload") or {}
        if s.sweep:
            load = f"{s.kind} " + ", ".join(f"{r[s.kind]:g}" for r in s.rows)
        else:
            load = load_text(ctx.get("load") or {})
        work = w.get("dataset") or ", ".join(w.get("tasks") or w.get("domains") or []) or DASH
        rows.append(
            [
                s.label,
                f"`{s.path}`",
                _what(s),
                ", ".join(ctx.get("models") or []) or DASH,
                ", ".join(engines) or "not detected",
                load,
                str(work),
            ]
        )
    return rows


def context_notes(series: Sequence[Series], limit: int = 6) -> list[str]:
    """How each run's context differs from the first one's, load aside (load is the x axis):
    a difference in numbers may come from here."""

    first = series[0]
    notes = []
    for s in series[1:]:
        diffs = [
            d
            for d in context_differences(first.context, s.context)
            if not d.startswith(("load.", "host:", "agentload_version:"))
        ]
        if diffs:
            more = f"; and {len(diffs) - limit} more" if len(diffs) > limit else ""
            notes.append(
                f"{s.label} differs from {first.label} in " + "; ".join(diffs[:limit]) + more
            )
    return notes


def _trace(x: list[Any], y: list[Any], name: str, color: str, dash: str, group: str) -> Any:
    return {
        "type": "scatter",
        "mode": "lines+markers",
        "x": x,
        "y": y,
        "name": name,
        "legendgroup": group,
        "line": {"color": color, "dash": dash},
        "marker": {"color": color, "size": 8},
    }


def _fig_layout(title: str, kind: str, ytitle: str, **kw: Any) -> dict[str, Any]:
    axes = {
        "hovermode": "closest",
        "xaxis": {"title": {"text": kind}},
        "yaxis": {"title": {"text": ytitle}, "rangemode": "tozero"},
    }
    return layout(title, **{**axes, **kw})


# (row key prefix, chart title, y axis title)
_LATENCY = (("ttft", "TTFT", "seconds"), ("e2e", "End-to-end latency", "seconds"))


def _points(s: Series, kind: str, key: str) -> tuple[list[float], list[Any]]:
    """x (load) and y of a run's points that have a load value."""
    pts = [r for r in s.rows if r.get(kind) is not None]
    return [float(r[kind]) for r in pts], [r.get(key) for r in pts]


def compare_charts(series: Sequence[Series]) -> list[dict[str, Any]]:
    """Per load kind present: TTFT p50 / p90, e2e p50 / p90, success rate and output tok/s
    against load, one colour per run (solid p50, dashed p90)."""
    figs: list[dict[str, Any]] = []
    kinds = list(dict.fromkeys(s.kind for s in series))
    for kind in kinds:
        group = [(i, s) for i, s in enumerate(series) if s.kind == kind]
        for metric, title, ytitle in _LATENCY:
            data = []
            for i, s in group:
                for p, dash in (("p50", "solid"), ("p90", "dash")):
                    x, y = _points(s, kind, f"{metric}_{p}")
                    if any(v is not None for v in y):
                        color = COLORS[i % len(COLORS)]
                        data.append(_trace(x, y, f"{s.label} {p}", color, dash, s.label))
            if data:
                figs.append(
                    {
                        "data": data,
                        "layout": _fig_layout(
                            f"{title} p50 (solid) and p90 (dashed) against {kind}", kind, ytitle
                        ),
                    }
                )
        for key, title, ytitle, extra in (
            ("success_rate", "Task success", "share", {"range": [0, 1.05]}),
            ("output_tokens_per_s", "Output tokens per second", "output tok/s", {}),
        ):
            data = []
            for i, s in group:
                x, y = _points(s, kind, key)
                if any(v is not None for v in y):
                    data.append(_trace(x, y, s.label, COLORS[i % len(COLORS)], "solid", s.label))
            if data:
                figs.append(
                    {
                        "data": data,
                        "layout": _fig_layout(
                            f"{title} against {kind}",
                            kind,
                            ytitle,
                            yaxis={"title": {"text": ytitle}, "rangemode": "tozero", **extra},
                        ),
                    }
                )
    return [fit_legend(f) for f in figs]  # an entry per run (two: p50, p90) wraps to rows


def _stat_cell(m: Mapping[str, Any] | None, key: str) -> str:
    if not m or m.get("value") is None:
        return DASH
    if key.endswith("_per_min"):
        return f"{m['value']:.2f}"
    f = pct if key == "success_rate" else secs
    ci = m.get("ci")
    return f"{f(m['value'])} [{f(ci[0])}, {f(ci[1])}]" if ci else f(m["value"])


def _delta_cell(delta: float | None, key: str) -> str:
    if delta is None:
        return DASH
    if key == "success_rate":
        return f"{delta * 100:+.1f} pt"
    if key.endswith("_per_min"):
        return f"{delta:+.2f}"
    return ("+" if delta >= 0 else "−") + secs(abs(delta))


def statistics_rows(res: Mapping[str, Any]) -> list[list[str]]:
    """compare_dirs' metrics as table rows (the console table's cells)."""
    out = []
    for key, row in res["metrics"].items():
        rel = "–" if row["relative"] is None else f"{row['relative'] * 100:+.1f}%"
        out.append(
            [
                key,
                _stat_cell(row["a"], key),
                _stat_cell(row["b"], key),
                _delta_cell(row["delta"], key),
                rel,
                "yes" if row["significant"] else "",
            ]
        )
    return out


def compare_document(
    series: Sequence[Series],
    page_dir: Path,
    statistics: Mapping[str, Any] | None = None,
    role: str = "agent",
) -> Document:
    kinds = list(dict.fromkeys(s.kind for s in series))
    mixed = len(kinds) > 1
    doc = Document(f"agentload compare: {', '.join(s.label for s in series)}")
    doc.h("Runs")
    header = ["run", "folder", "what", "model", "engine", "load", "tasks / dataset"]
    doc.table(header, _runs_rows(series), align_left=len(header))
    for note in context_notes(series):
        doc.warn(note)
    for s in series:
        for r in s.rows:
            if r.get("status") not in (None, "completed", "duration"):
                doc.warn(f"{s.label} {_load_cell(r, s.kind, True)}: {r.get('status')}")
    for fig in compare_charts(series):
        doc.chart(fig)
    doc.h("Points")
    cols = table_columns(series)
    rows = []
    for s in series:
        for r in s.rows:
            href = rel_href(s.report_file(r), page_dir)
            rows.append([s.label, link(_load_cell(r, s.kind, mixed), href), *cells(cols, r)])
    doc.table(["run", "load" if mixed else kinds[0], *[c.label for c in cols]], rows, 2)
    all_rows = [r for s in series for r in s.rows]
    if any_thin(cols, all_rows):
        doc.p(THIN_NOTE)
    doc.p(
        "One row per run, or per point of a sweep; figures of agent calls (all calls where a "
        "run has no agent), defined as in sweep.json. Each load value links to that run's "
        "report; a single run is one point at its own load."
    )
    if statistics is not None:
        a, b = series[0].label, series[1].label
        doc.h(f"{a} against {b}: 95% bootstrap confidence intervals")
        header = ["metric", a, b, f"{b} − {a}", "change", "CIs apart"]
        doc.table(header, statistics_rows(statistics))
        doc.p(
            f"{role} calls; calls resampled by whole episode (cluster bootstrap). "
            "`CIs apart`: the two intervals do not overlap."
        )
    return doc


def compare_json(
    series: Sequence[Series], page_dir: Path, statistics: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    notes = context_notes(series, limit=1000)
    return {
        "schema": SCHEMA,
        "runs": [
            {"label": s.label, "path": str(s.path), "sweep": s.sweep, "kind": s.kind}
            for s in series
        ],
        "context_differences": notes,
        "points": [
            {
                "run": s.label,
                "load_kind": s.kind,
                **r,
                "report": rel_href(s.report_file(r), page_dir),
            }
            for s in series
            for r in s.rows
        ],
        "statistics": statistics,
    }


def write_compare(
    series: Sequence[Series],
    out_dir: Path,
    statistics: Mapping[str, Any] | None = None,
    role: str = "agent",
) -> list[Path]:
    """compare.md, compare.html and compare.json in `out_dir` (created)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = compare_document(series, out_dir, statistics, role)
    md, page, js = (out_dir / f for f in FILES)
    atomic_write_bytes(md, to_markdown(doc).encode())
    atomic_write_bytes(page, html_links(to_html(doc)).encode())
    data = compare_json(series, out_dir, statistics)
    atomic_write_bytes(js, orjson.dumps(data, option=orjson.OPT_INDENT_2))
    return [md, page, js]


# The console's share of SWEEP_COLUMNS: a row per run and point fits 100 columns.
CONSOLE_COLUMNS = ("episodes", "out tok/s", "TTFT p50", "TTFT p90", "e2e p99", "success", "SLO")


def compare_table(series: Sequence[Series]) -> Any:
    """The console table: one row per run or sweep point (the console's columns)."""
    from rich.markup import escape
    from rich.table import Table

    kinds = list(dict.fromkeys(s.kind for s in series))
    mixed = len(kinds) > 1
    cols = [c for c in table_columns(series) if c.label in CONSOLE_COLUMNS]
    t = Table(title=f"{len(series)} runs side by side", title_justify="left")
    t.add_column("run")
    t.add_column("load" if mixed else kinds[0], justify="right")
    for c in cols:
        t.add_column(c.label, justify="right")
    for s in series:
        for r in s.rows:
            t.add_row(escape(s.label), _load_cell(r, s.kind, mixed), *cells(cols, r))
    if any_thin(cols, [r for s in series for r in s.rows]):
        t.caption = THIN_NOTE
        t.caption_justify = "left"
    return t
