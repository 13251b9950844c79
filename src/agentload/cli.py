"""The `agentload` command line: each command is a thin shell over the library."""

from __future__ import annotations

import importlib

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

# Each module registers its commands on `app` when imported; the order is the order in --help.
COMMAND_MODULES = [
    "agentload.client.cli",
    "agentload.domains.cli",
    "agentload.sim.cli",
    "agentload.run_cli",
    "agentload.report.cli",
    "agentload.servermetrics.cli",
    "agentload.results.cli",
]


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


for _name in COMMAND_MODULES:
    importlib.import_module(_name)


def main() -> None:
    app()
