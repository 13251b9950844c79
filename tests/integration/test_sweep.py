"""`agentload sweep` from the command line: SLO, stop on the first miss, JSON output."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from agentload.cli import app


def test_sweep_cli_stops_on_slo_fail(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    args = ["sweep", "--concurrency", "1,2,4", "--tasks", "airline/000-001"]
    args += ["--sim-speedup", "50", "--slo", "ttft_p90=1us,e2e_p99=10s", "--stop-on-slo-fail"]
    args += ["--no-report", "--no-metrics", "--json", "--out", str(out)]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc == json.loads((out / "sweep.json").read_text())
    assert doc["slo"] == {"ttft_p90": 1e-6, "e2e_p99": 10.0}
    # The first point misses an impossible TTFT bound, so the sweep stops there.
    assert [p["concurrency"] for p in doc["points"]] == [1]
    assert doc["points"][0]["slo_met"] is False and doc["best_point"] is None
    assert doc["stopped_on_slo_fail"] == 1 and doc["status"] == "completed"
    assert (out / "c0001" / "summary.json").exists() and not (out / "c0002").exists()
    assert "No point met the SLO" in (out / "sweep.md").read_text()
    # A second sweep into the same folder is refused with a usage error.
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and "already holds a sweep" in r.output


def test_a_rate_sweep_writes_its_pages(tmp_path: Path) -> None:
    # The sweep's context lists the swept rates ("2, 4") where a run has one number.
    out = tmp_path / "sweep"
    args = ["sweep", "--rates", "2,4", "--num-episodes", "2", "--tasks", "airline/000-001"]
    args += ["--sim-speedup", "50", "--no-metrics", "--out", str(out)]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "sweep.json").read_text())
    assert [p["rate"] for p in doc["points"]] == [2.0, 4.0]
    assert "open loop, 2, 4 episodes/s" in (out / "sweep.md").read_text()
    assert (out / "sweep.html").stat().st_size > 0
