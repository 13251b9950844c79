"""Every command's --help: no Python type noise beside the options, and it exits 0.

The --help option itself and positional arguments keep whatever the installed typer prints
there (no public attribute sets that column for them)."""

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
# A type column as typer prints it ("<bool>", "<str>", "<list[str]>") in an option's row.
_NOISE = re.compile(r"│\s*\*?\s*--[^│]*\s<(bool|str|int|float|path|Path|list\[[a-z]+\])>\s")
_HELP_ROW = re.compile(r"│\s*--help\s")


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: " ".join(c) or "agentload")
def test_help_has_no_type_noise(cmd: list[str]) -> None:
    res = CliRunner().invoke(app, [*cmd, "--help"], env={"COLUMNS": "120"})
    assert res.exit_code == 0, res.output
    assert "--help" in res.output
    rows = [line for line in res.output.splitlines() if not _HELP_ROW.match(line)]
    noisy = [row for row in rows if _NOISE.search(row)]
    assert not noisy, noisy
