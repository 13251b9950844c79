"""Every command's --help: no Python type noise beside the options, and it exits 0."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from agentload.cli import app

COMMANDS = [
    [],
    ["run"],
    ["sweep"],
    ["replay"],
    ["call"],
    ["sim"],
    ["serve"],
    ["proxy"],
    ["tasks"],
    ["tasks", "list"],
    ["report"],
    ["compare"],
    ["export"],
    ["metrics"],
    ["dataset"],
    ["dataset", "stats"],
]
# A type column as typer prints it ("<bool>", "<str>", "<list[str]>") inside the option table.
_NOISE = re.compile(r"│[^│]*\s<(bool|str|int|float|Path|list\[[a-z]+\])>\s")


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: " ".join(c) or "agentload")
def test_help_has_no_type_noise(cmd: list[str]) -> None:
    res = CliRunner().invoke(app, [*cmd, "--help"], env={"COLUMNS": "120"})
    assert res.exit_code == 0, res.output
    assert "--help" in res.output
    assert not _NOISE.search(res.output), res.output
