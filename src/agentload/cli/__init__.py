"""The `agentload` command line: one module per command group, each a thin shell over the
library. The library never imports this package."""

from __future__ import annotations

import importlib
import sys
from typing import Any

# Each module registers its commands on `app` when imported; the order is the order in --help.
COMMAND_MODULES = (
    "agentload.cli.call",
    "agentload.cli.tasks",
    "agentload.cli.sim",
    "agentload.cli.sim_calibrate",
    "agentload.cli.run",
    "agentload.cli.replay",
    "agentload.cli.dataset",
    "agentload.cli.report",
    "agentload.cli.metrics",
    "agentload.cli.serve",
    "agentload.cli.export",
    "agentload.cli.proxy",
    "agentload.cli.tools",
)


def load_app() -> Any:
    """The typer app with every command registered (importing the commands imports the
    client, numpy and aiohttp: about a second on a small machine)."""
    from agentload.cli.root import app

    for name in COMMAND_MODULES:
        importlib.import_module(name)
    globals()["app"] = app  # later `from agentload.cli import app` finds it directly
    return app


def __getattr__(name: str) -> Any:
    # `from agentload.cli import app` loads the commands; `agentload --version` does not.
    if name == "app":
        return load_app()
    raise AttributeError(f"module 'agentload.cli' has no attribute {name!r}")


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        from agentload import __version__

        print(f"agentload {__version__}")
        return
    load_app()()


__all__ = ["COMMAND_MODULES", "app", "load_app", "main"]
