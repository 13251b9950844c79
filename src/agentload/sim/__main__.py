"""``python -m agentload.sim``: the simulator in a process of its own.

``--stdin-config`` (how `SimProcess` starts it) reads a JSON `SimConfig` on stdin; anything
else is parsed as the flags of ``agentload sim``.
"""

from __future__ import annotations

import sys


def main() -> None:
    # lazy: start-up: the simulator's process imports only what it serves
    from agentload.sim.api import STDIN_CONFIG_FLAG

    if sys.argv[1:] == [STDIN_CONFIG_FLAG]:
        # lazy: start-up: the simulator's process imports only what it serves
        from agentload.sim.api import run_blocking
        from agentload.sim.settings import SimConfig

        run_blocking(SimConfig.model_validate_json(sys.stdin.buffer.read()))
        return
    # lazy: start-up: the sim command alone, without the rest of the CLI (the one import
    # that runs back up the layers: tests/unit/test_layers.py)
    from agentload.cli.sim import standalone

    standalone()


if __name__ == "__main__":
    main()
