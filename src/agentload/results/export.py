"""Flat tables of a results folder for pandas, spreadsheets and warehouses: calls, sessions
and per-turn statistics as CSV (stdlib) or Parquet (pyarrow, the `parquet` extra).

Nested record fields are flattened with dots (`itl.p50`, `durations.total_s`); lists (the
per-call gap histogram, tool lists) become JSON text. A sweep folder gives the same three
tables over all its points, each row led by the point's load value and folder.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from agentload.results.dirs import has_records, is_sweep, load_sweep
from agentload.results.files import CALLS, SESSIONS
from agentload.results.jsonl import read_jsonl
from agentload.results.summary import load_measured, turn_table

FORMATS = ("csv", "parquet")
TABLES = ("calls", "sessions", "turns")


class ExportError(Exception):
    """Export cannot proceed (bad format, missing library); one line for the user."""


# Most values are scalars: a type lookup settles them before the (slow) Mapping ABC check.
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if type(v) in _SCALARS:
            out[key] = v
        elif isinstance(v, Mapping):
            out.update(_flatten(v, key + "."))
        elif isinstance(v, list | tuple):
            out[key] = orjson.dumps(v).decode()
        else:
            out[key] = v
    return out


def tables(out_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """The three tables as lists of flat rows (each file read once: the turns table is
    summary.json's `turns`, computed from the same records)."""

    calls = read_jsonl(out_dir / CALLS)
    sessions = read_jsonl(out_dir / SESSIONS)
    run = load_measured(out_dir, calls_read=calls, sessions_read=sessions)
    turns = turn_table(run.calls, run.measured)
    return {
        "calls": [_flatten(c) for c in calls.records],
        "sessions": [_flatten(s) for s in sessions.records],
        "turns": [
            {"role": role, **_flatten(r.dump())} for role, trows in turns.items() for r in trows
        ],
    }


def sweep_tables(
    root: Path, say: Callable[[str], None] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """A sweep's tables: every point's rows, one table each (tidy, for a pandas groupby or a
    filter on the load), led by two columns: the load value under the sweep's kind
    (`concurrency` or `rate`) and `point`, the point's folder. Points without records (never
    started) are left out."""

    doc = load_sweep(root)
    kind = str(doc["kind"])
    points = sorted(doc["points"], key=lambda r: float(r[kind]))
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in TABLES}
    for i, row in enumerate(points):
        d = root / row["dir"]
        if not has_records(d):
            if say:
                say(f"{d}: no records, left out")
            continue
        if say:
            say(f"point {i + 1}/{len(points)}: {kind} {row[kind]:g} ({row['dir']})")
        lead = {kind: row[kind], "point": row["dir"]}
        for name, rows in tables(d).items():
            out[name] += [{**lead, **r} for r in rows]
    return out


def _columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    cols: dict[str, None] = {}
    for r in rows:
        cols.update(dict.fromkeys(r))
    return list(cols)


def _write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=_columns(rows))
        w.writeheader()
        w.writerows(rows)


def _write_parquet(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = _columns(rows)
    data = {c: [r.get(c) for r in rows] for c in cols}
    arrays = {}
    for c, vals in data.items():
        try:
            arrays[c] = pa.array(vals)
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed types across rows: keep as text
            arrays[c] = pa.array([None if v is None else str(v) for v in vals], pa.string())
    pq.write_table(pa.table(arrays) if arrays else pa.table({}), path)


def export(
    out_dir: Path | str,
    fmt: str = "csv",
    dest: Path | str | None = None,
    say: Callable[[str], None] | None = None,
) -> list[Path]:
    """Write calls / sessions / turns as `fmt` into `dest` (default `<out_dir>/export`); of a
    sweep folder, one file per table over all points (see `sweep_tables`), `say` told of
    each point."""

    out_dir = Path(out_dir)
    if fmt not in FORMATS:
        raise ExportError(f"--format: expected csv or parquet, got {fmt!r}")
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise ExportError("parquet needs pyarrow: pip install 'agentload[parquet]'") from None
    target = Path(dest) if dest is not None else out_dir / "export"
    target.mkdir(parents=True, exist_ok=True)
    written = []
    tabs = sweep_tables(out_dir, say) if is_sweep(out_dir) else tables(out_dir)
    for name, rows in tabs.items():
        path = target / f"{name}.{fmt}"
        (_write_csv if fmt == "csv" else _write_parquet)(path, rows)
        written.append(path)
    return written
