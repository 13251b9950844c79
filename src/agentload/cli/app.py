"""The root `agentload` Typer app; the command modules of this package register on it."""

from __future__ import annotations

import typer

from agentload import __version__

app = typer.Typer(
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
