"""An engine output that discards its tokens, for tests that drive `Engine` directly."""

from __future__ import annotations

from agentload.sim.engine import Seq


class NullOutput:
    def token(self, seq: Seq, index: int, finish: str | None, now: float) -> None:
        return None

    def aborted(self, seq: Seq | None) -> None:
        return None
