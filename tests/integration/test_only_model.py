"""--base-url without --model: the one model the server serves, said so; else one line."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from agentload.cli import app
from agentload.sim import SimConfig, SimProcess


def test_the_one_served_model_is_used_and_named(tmp_path: Path) -> None:
    with SimProcess(SimConfig(port=0, profile="instant", model="only-one")) as sim:
        res = CliRunner().invoke(
            app,
            ["run", "--base-url", sim.base_url, "--tasks", "airline/000", "--no-report",
             "--out", str(tmp_path / "r"), "--progress", "off"],
        )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "--model not given: only-one, the one model the server serves" in res.stderr
    assert "model: only-one" in (tmp_path / "r" / "config.yaml").read_text()


def test_no_server_is_one_line_and_exit_2(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        app, ["run", "--base-url", "http://127.0.0.1:9/v1", "--out", str(tmp_path / "r")]
    )
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "--model is needed: the models could not be listed" in lines[0]
