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
    # lazy: start-up: a command's machinery loads when it runs, not for --help
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

    def given(value: Any) -> Any:
        # typer stands a DefaultPlaceholder in for what a command did not set; its docstring
        # is not the command's.
        return (
            getattr(value, "value", None) if type(value).__name__ == "DefaultPlaceholder" else value
        )

    def doc(callback: Any) -> str:
        return (inspect.getdoc(callback) or "") if callable(callback) else ""

    for info in [*app.registered_commands, *app.registered_groups]:
        if given(info.short_help):
            continue
        text = given(info.help) or doc(given(info.callback))
        if not text and getattr(info, "typer_instance", None) is not None:
            ti = info.typer_instance
            cb = ti.registered_callback
            text = given(ti.info.help) or doc(given(cb.callback) if cb else None)
        first = re.split(r"(?<=\.)\s", " ".join(text.split("\n\n")[0].split()), maxsplit=1)[0]
        info.short_help = first.strip() or None


def __getattr__(name: str) -> Any:
    # `from agentload.cli import app` loads the commands; `agentload --version` does not.
    if name == "app":
        return load_app()
    raise AttributeError(f"module 'agentload.cli' has no attribute {name!r}")


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        # lazy: start-up: a command's machinery loads when it runs, not for --help
        from agentload.version import __version__

        print(f"agentload {__version__}")
        return
    load_app()()


__all__ = ["COMMAND_MODULES", "app", "load_app", "main"]
