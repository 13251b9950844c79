"""``python -m agentload.sim``: the simulator in a process of its own.

``--stdin-config`` (how `SimProcess` starts it) reads a JSON `SimConfig` on stdin; anything
else is parsed as the flags of ``agentload sim``.
"""

from __future__ import annotations

import sys


def main() -> None:
    from agentload.sim.api import STDIN_CONFIG_FLAG

    if sys.argv[1:] == [STDIN_CONFIG_FLAG]:
        from agentload.sim.api import run_blocking
        from agentload.sim.config import SimConfig

        run_blocking(SimConfig.model_validate_json(sys.stdin.buffer.read()))
        return
    from agentload.cli.sim import standalone

    standalone()


if __name__ == "__main__":
    main()
