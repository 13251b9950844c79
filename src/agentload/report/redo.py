"""Recompute a results folder's summary and report, or a sweep folder's points and curves."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from agentload.report.build import write_report
from agentload.report.points import rebuild_sweep
from agentload.results.dirs import has_records, load_sweep
from agentload.results.records import Summary
from agentload.results.summary import SUMMARY, summarize, write_summary


def rereport(out_dir: Path, slo: Mapping[str, float] | None = None) -> tuple[dict, list[Path]]:
    """summary.json and the report of one run, recomputed from its records."""

    summary = summarize(out_dir, slo=slo)
    # Keep what the run itself added to summary.json (the client's own figures).
    old = out_dir / SUMMARY
    if old.exists():
        try:
            prev: Any = orjson.loads(old.read_bytes())
        except (orjson.JSONDecodeError, OSError):
            prev = {}
        for key, value in (prev if isinstance(prev, dict) else {}).items():
            # Only blocks the records cannot give: a recomputed block (`episodes` of an old
            # replay summary) is not brought back.
            added = key == "client" or key not in Summary.model_fields
            if added and isinstance(value, dict):  # a damaged summary.json adds nothing odd
                summary.setdefault(key, value)
    return summary, [write_summary(out_dir, summary), *write_report(out_dir, summary)]


def rereport_sweep(root: Path, slo: Mapping[str, float] | None = None) -> tuple[dict, list[Path]]:
    """Every point's report, then sweep.json / sweep.md / sweep.html from their summaries."""

    doc = load_sweep(root)
    summaries: dict[str, dict[str, Any]] = {}
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
