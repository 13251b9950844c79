"""The `agentload` command line: one module per command group, each a thin shell over the
library. The library never imports this package."""

from __future__ import annotations

import importlib

from agentload.cli.app import app

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

for _name in COMMAND_MODULES:
    importlib.import_module(_name)


def main() -> None:
    app()


__all__ = ["app", "main"]
