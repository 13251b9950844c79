"""What benchmarks/reliability_probe.py found not holding, each fixed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from agentload.cli import app


def _run(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def test_a_run_started_again_removes_a_killed_writers_temporary_file(tmp_path: Path) -> None:
    out = tmp_path / "r"
    out.mkdir()
    # What a kill while config.yaml was in its temporary file leaves behind.
    (out / ".config.yaml.tmp4242").write_text("out: x\n")
    res = _run("run", "--tasks", "airline/000", "--sim-profile", "instant", "--out", str(out),
               "--no-report", "--quiet")  # fmt: skip
    assert res.exit_code == 0, res.output
    assert not list(out.glob(".*.tmp*")) and (out / "config.yaml").is_file()


def test_a_metrics_url_that_is_not_http_is_refused() -> None:
    res = _run("run", "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
               "--metrics-url", "ftp://x/metrics")  # fmt: skip
    assert res.exit_code == 2
    assert "flag --metrics-url" in res.stderr and "not an http(s):// URL" in res.stderr
    res = _run("metrics", "ftp://127.0.0.1/metrics")
    assert res.exit_code == 2 and res.stderr.count("\n") == 1


def test_quiet_still_says_why_a_run_failed(tmp_path: Path) -> None:
    out = tmp_path / "r"
    assert _run("run", "--tasks", "airline/000", "--sim-profile", "instant", "--out", str(out),
                "--no-report", "--quiet").exit_code == 0  # fmt: skip
    (out / "summary.json").unlink()
    (out / "summary.json").mkdir()  # the summary cannot be written
    res = _run("run", "--resume", str(out), "--quiet")
    assert res.exit_code == 1
    assert "summary.json could not be written" in res.stderr
