"""Recompute a results folder's summary and report, or a sweep folder's points and curves."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from agentload.report.build import write_report
from agentload.report.points import rebuild_sweep
from agentload.results.dirs import has_records, load_sweep
from agentload.results.records import Summary, as_summary
from agentload.results.summary import SUMMARY, summarize, write_summary


def rereport(out_dir: Path, slo: Mapping[str, float] | None = None) -> tuple[Summary, list[Path]]:
    """summary.json and the report of one run, recomputed from its records."""

    summary = summarize(out_dir, slo=slo)
    if added := _added_blocks(out_dir / SUMMARY):
        # Checked as the rest: a block that does not fit its model is left out.
        summary = as_summary({**summary.dump(), **added})
    return summary, [write_summary(out_dir, summary), *write_report(out_dir, summary)]


def _added_blocks(path: Path) -> dict[str, Any]:
    """What the run itself added to its summary.json (the client's own figures, the proxy's):
    blocks the records cannot give. A recomputed block (`episodes` of an old replay summary)
    is not brought back."""
    if not path.exists():
        return {}
    try:
        prev: Any = orjson.loads(path.read_bytes())
    except (orjson.JSONDecodeError, OSError):
        return {}
    return {
        key: value
        for key, value in (prev if isinstance(prev, dict) else {}).items()
        # a damaged summary.json adds nothing odd
        if (key in Summary.ADDED or key not in Summary.model_fields) and isinstance(value, dict)
    }


def rereport_sweep(root: Path, slo: Mapping[str, float] | None = None) -> tuple[dict, list[Path]]:
    """Every point's report, then sweep.json / sweep.md / sweep.html from their summaries."""

    doc = load_sweep(root)
    summaries: dict[str, Summary] = {}
    paths: list[Path] = []
    for row in doc["points"]:
        d = root / row["dir"]
        if has_records(d):
            summaries[row["dir"]], written = rereport(d, slo)
            paths += written
    if slo is not None:  # before the rebuild, so that sweep.md states the thresholds applied
        doc["slo"] = dict(slo)
    doc = rebuild_sweep(root, doc, summaries)
    return doc, [*paths, root / "sweep.json", root / "sweep.md", root / "sweep.html"]
