"""The root `agentload` Typer app; the command modules of this package register on it."""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperGroup

from agentload.version import __version__


class _OneLineErrors(TyperGroup):
    """Usage errors as one line naming the flag (scripts grep stderr), exit code 2."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        # Click's own signature, so no argument can reach it twice.
        call = (args, prog_name, complete_var, False, windows_expand_args)
        _plain_metavars(self)
        _one_line_paragraphs(self)
        if not standalone_mode:
            return super().main(*call, **extra)
        try:
            rv = super().main(*call, **extra)
        except typer.Abort:
            print("agentload: interrupted", file=sys.stderr, flush=True)
            sys.exit(130)
        except Exception as e:
            # Click's exceptions (typer may vendor click, so they are recognised by shape).
            if not (hasattr(e, "format_message") and hasattr(e, "exit_code")):
                raise
            ctx = getattr(e, "ctx", None)
            if type(e).__name__ == "NoArgsIsHelpError":
                print(ctx.get_help() if ctx else e.format_message(), file=sys.stderr)
                sys.exit(e.exit_code)
            where = getattr(ctx, "command_path", None) or "agentload"
            msg = " ".join(str(e.format_message()).split())
            print(f"{where}: error: {msg} (see {where} --help)", file=sys.stderr, flush=True)
            sys.exit(e.exit_code)
        sys.exit(rv if isinstance(rv, int) else 0)


def _plain_metavars(command: Any) -> None:
    """Give every option without a metavar a plain one, as argparse does: nothing for flags,
    the option's name in upper case otherwise. Newer typers print a Python type there
    ("<bool>", "<list[str]>"); an explicit metavar, a public Click attribute, is shown as it is
    by every typer this package supports. (The --help option and positional arguments keep
    what the installed typer prints: neither takes a metavar for that column.)"""
    for param in getattr(command, "params", ()):
        if getattr(param, "param_type_name", "") != "option":
            continue
        if param.is_flag or param.count:
            param.metavar = ""
        elif param.metavar is None:
            param.metavar = str(param.name or "value").upper()
    for sub in getattr(command, "commands", {}).values():
        _plain_metavars(sub)


EXAMPLES = "\b\nExamples:\n"


def examples(*lines: str) -> str:
    """A command's examples for its --help (``epilog=examples(...)``): command lines that work
    as shown, a ``# …`` line above one says what it does, a line ending in `` \\`` goes on.
    Each line fits an 80-column terminal; tests/unit/test_help_examples.py checks that every
    flag an example names exists on its command."""
    return EXAMPLES + "\n".join("  " + line for line in lines)


def _examples_into_help(command: Any) -> None:
    """Show the examples of a command's epilog at the end of its help text: every supported
    typer keeps the lines of a \\b paragraph there, while typer 0.16 joins an epilog's."""
    epilog = getattr(command, "epilog", None) or ""
    before, found, after = epilog.partition(EXAMPLES)
    if not found:
        return
    block, _, rest = after.partition("\n\n")
    command.help = (command.help or "").rstrip() + "\n\n" + EXAMPLES + block
    command.epilog = "\n\n".join(p for p in (before.strip(), rest.strip()) if p) or None


_PARAGRAPH = re.compile(r"\n[ \t]*\n")


def _one_line(text: str) -> str:
    """Each paragraph of a help text on one line, for the terminal to wrap at its width (a
    line break kept from the source mangles the text at 80 columns); a paragraph that starts
    with \\b keeps its lines, as Click renders it. Text after \\f (hidden) is left alone."""
    shown, mark, hidden = inspect.cleandoc(text).partition("\f")
    paragraphs = _PARAGRAPH.split(shown)
    kept = [p if p.lstrip(" ").startswith("\b") else " ".join(p.split()) for p in paragraphs]
    return "\n\n".join(kept) + mark + hidden


def _one_line_paragraphs(command: Any) -> None:
    """Rewrap the help of `command`, its options and its sub-commands (`_one_line`)."""
    _examples_into_help(command)
    for attr in ("help", "epilog"):
        text = getattr(command, attr, None)
        if isinstance(text, str) and text:
            setattr(command, attr, _one_line(text))
    for param in getattr(command, "params", ()):
        if isinstance(getattr(param, "help", None), str) and "\n" in param.help:
            param.help = _one_line(param.help)
    for sub in getattr(command, "commands", {}).values():
        _one_line_paragraphs(sub)


app = typer.Typer(
    cls=_OneLineErrors,
    name="agentload",
    help="Benchmark OpenAI-compatible LLM inference services under agentic workloads.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"agentload {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Benchmark OpenAI-compatible LLM inference services under agentic workloads."""
