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
    _short_helps(app)
    globals()["app"] = app  # later `from agentload.cli import app` finds it directly
    return app


def _short_helps(app: Any) -> None:
    """`agentload --help` lists each command by its first sentence on one line: the full
    help, with its hard line breaks, is the command's own --help."""
    import inspect
    import re

    for info in [*app.registered_commands, *app.registered_groups]:
        if info.short_help:
            continue
        text = info.help or inspect.getdoc(info.callback) or ""
        if not text and getattr(info, "typer_instance", None) is not None:
            ti = info.typer_instance
            text = ti.info.help or inspect.getdoc(ti.registered_callback.callback) or ""
        first = re.split(r"(?<=\.)\s", " ".join(text.split("\n\n")[0].split()), maxsplit=1)[0]
        info.short_help = first.strip() or None


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
