"""Every example under examples/ is a configuration agentload accepts, and each command line
its header shows names only existing flags."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer.main

from agentload.cli import app
from agentload.config import build_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CONFIGS = sorted(EXAMPLES.glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_the_example_config_is_valid(path: Path, request: pytest.FixtureRequest) -> None:
    # Files an example names (a dataset, few-shot examples) are the user's own.
    text = path.read_text()
    if "tau2-" in text:
        request.getfixturevalue("tau2_data")  # τ²'s data folder, or the test is skipped
    if "few_shot:" in text and not text.split("few_shot:")[1].lstrip().startswith("#"):
        pytest.skip("names a few-shot examples file of the user's")
    cfg = build_config(path=path)
    assert cfg.out.startswith("results/")


def _flags(command: list[str]) -> set[str]:
    cmd = typer.main.get_command(app)
    for name in command:
        cmd = cmd.commands[name]  # type: ignore[attr-defined]
    return {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}


@pytest.mark.parametrize("path", [*CONFIGS, *EXAMPLES.glob("*.sh")], ids=lambda p: p.name)
def test_the_command_lines_shown_use_real_flags(path: Path) -> None:
    shown = re.findall(
        r"^(?:#\s+|exec )agentload ((?:[a-z]+ )+)([^\n]*)", path.read_text(), flags=re.MULTILINE
    )
    assert shown, f"{path.name} shows no command line"
    for words, rest in shown:
        command = words.split()
        known = _flags(command) | {"…"}
        used = {w for w in shlex.split(rest.replace("\\", "")) if w.startswith("--")}
        assert used <= known, f"{path.name}: agentload {words}has no {used - known}"
