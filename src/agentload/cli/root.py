"""The root `agentload` Typer app; the command modules of this package register on it."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperGroup

from agentload import __version__


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
