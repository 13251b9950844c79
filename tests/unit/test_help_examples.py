"""Every command's --help ends with examples that work: each example line is parsed by the
command it names, so a renamed or removed flag fails here instead of going stale in the help.
And each --help reads well at 80 and 120 columns: prose is wrapped by the terminal, not by
line breaks in the source, and every example line is shown whole."""

from __future__ import annotations

import shlex
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from agentload.cli import app
from agentload.cli.root import EXAMPLES, _one_line_paragraphs

ROOT: Any = typer.main.get_command(app)
_one_line_paragraphs(ROOT)  # as `agentload` does before parsing its command line
WIDTH = 80
# Padding of the help's text (1 column each side) and the examples' indent.
LONGEST_LINE = WIDTH - 2


def _commands(cmd: Any = ROOT, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    out = [(path, cmd)] if path else []
    for name, sub in getattr(cmd, "commands", {}).items():
        out += _commands(sub, (*path, name))
    return out


COMMANDS = dict(_commands())


def _example_lines(cmd: Any) -> list[str]:
    """The lines of the command's examples block, as written (indent included); --help
    shows them at the end of the command's help text."""
    text = cmd.help or ""
    if EXAMPLES not in text:
        return []
    block = text.split(EXAMPLES, 1)[1].split("\n\n", 1)[0]
    return block.splitlines()


def _examples(cmd: Any) -> list[str]:
    """Each example command line, continuation lines joined, comments left out."""
    out: list[str] = []
    pending = ""
    for line in _example_lines(cmd):
        text = line.strip()
        if not pending and text.startswith("#"):
            continue
        if text.endswith("\\"):
            pending += text[:-1]
            continue
        out.append(pending + text)
        pending = ""
    assert not pending, f"an example ends with a continuation: {pending!r}"
    return out


def _resolve(argv: list[str]) -> tuple[tuple[str, ...], list[str]]:
    """(command path, its arguments) of an example's argv after `agentload`."""
    cmd, path = ROOT, ()
    while argv and argv[0] in getattr(cmd, "commands", {}):
        cmd = cmd.commands[argv[0]]
        path, argv = (*path, argv[0]), argv[1:]
    return path, argv


def test_every_command_is_walked() -> None:
    names = {" ".join(p) for p in COMMANDS}
    assert {"run", "sweep", "replay", "call", "sim", "sim calibrate", "dataset convert"} <= names
    assert {"tasks grade", "tools serve", "tools scripts", "proxy", "serve"} <= names
    assert len(COMMANDS) >= 25


@pytest.mark.parametrize("path", list(COMMANDS), ids=" ".join)
def test_each_command_has_one_to_three_examples(path: tuple[str, ...]) -> None:
    found = _examples(COMMANDS[path])
    assert 1 <= len(found) <= 3, f"agentload {' '.join(path)}: {len(found)} examples"
    for line in _example_lines(COMMANDS[path]):
        # Square brackets would be read as rich markup; a long line wraps at 80 columns.
        assert "[" not in line, line
        assert len(line) <= LONGEST_LINE, f"{len(line)} columns: {line}"


@pytest.mark.parametrize("path", list(COMMANDS), ids=" ".join)
def test_every_example_parses_on_its_command(path: tuple[str, ...]) -> None:
    for example in _examples(COMMANDS[path]):
        argv = shlex.split(example)
        assert argv[0] == "agentload", example
        target, args = _resolve(argv[1:])
        # An example shows its own command, or one of a group's sub-commands.
        assert target[: len(path)] == path, f"{example!r} is not an example of {path}"
        cmd = COMMANDS[target]
        try:
            ctx = cmd.make_context(" ".join(("agentload", *target)), list(args))
        except Exception as e:  # click's errors (typer may vendor click): name the flag
            if not hasattr(e, "format_message"):
                raise
            pytest.fail(f"{example!r}: {e.format_message()}")
        # Every word was taken by an option or an argument of the command.
        if not hasattr(cmd, "commands"):
            assert not ctx.args, f"{example!r}: {ctx.args} not taken"


def test_an_unknown_flag_in_an_example_is_caught() -> None:
    cmd = COMMANDS[("run",)]
    with pytest.raises(Exception, match="no-such-flag"):
        cmd.make_context("agentload run", ["--no-such-flag", "1"])
    assert _resolve(["sim", "calibrate", "--quick"]) == (("sim", "calibrate"), ["--quick"])


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("path", list(COMMANDS), ids=" ".join)
def test_help_reads_at_width(path: tuple[str, ...], width: int) -> None:
    res = CliRunner().invoke(
        app, [*path, "--help"], env={"COLUMNS": str(width), "NO_COLOR": "1", "TERM": "dumb"}
    )
    assert res.exit_code == 0, res.output
    shown = res.output.splitlines()
    assert max(len(line) for line in shown) <= width
    # Each example line is shown whole, on a line of its own.
    rows = {line.strip() for line in shown}
    for line in _example_lines(COMMANDS[path]):
        assert line.strip() in rows, f"{line!r} is wrapped at {width} columns"
    # Prose is one paragraph per source paragraph: the terminal wraps it, so no line of it
    # stops far short of the width while the next goes on with the same sentence.
    cmd = COMMANDS[path]
    for attr in ("help", "epilog"):
        for para in (getattr(cmd, attr) or "").split("\n\n"):
            assert para.startswith("\b") or "\n" not in para, (attr, para[:80])


@pytest.mark.parametrize("width", [80, 120])
def test_the_command_list_reads_at_width(width: int) -> None:
    res = CliRunner().invoke(app, ["--help"], env={"COLUMNS": str(width), "NO_COLOR": "1"})
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    # A group shows its own first sentence, not the docstring of typer's placeholder.
    assert "shouldn't use this class" not in text
    for sentence in (
        "List, show and check the built-in domains' tasks.",
        "Run the embedded engine simulator:",
        "Validate, describe and convert replay datasets",
        "Serve a domain's tools to outside agents:",
    ):
        assert sentence in text.replace(" │ ", " "), sentence
