"""``python -m agentload.sim``: the simulator without the rest of the command line."""

from __future__ import annotations

import typer

from agentload.sim.command import sim_command


def main() -> None:
    app = typer.Typer(
        add_completion=False,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.command()(sim_command)
    app()


if __name__ == "__main__":
    main()
