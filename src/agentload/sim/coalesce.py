"""Output coalescing: several tokens in one streamed chunk, as a lagging engine sends them.

A real server's front end drains each request's output queue when it gets to run; when it lags
behind the engine (a busy CPU, a large batch), the tokens of several steps leave together. A
profile describes that with the probability that a token is held back and leaves with the next
one: ``coalesce_p + coalesce_per_seq × (running sequences − 1)``, capped at ``COALESCE_MAX``
(so the number of tokens per chunk is geometric with mean ``1 / (1 − p)``). The first token is
never held (TTFT is unchanged), the last always flushes what is held.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from agentload.sim.engine import Engine, Output, Seq

if TYPE_CHECKING:
    from agentload.sim.server import StreamOut

COALESCE_MAX = 0.95


def hold_probability(p0: float, per_seq: float, running: int) -> float:
    return min(COALESCE_MAX, max(0.0, p0 + per_seq * (running - 1)))


class CoalescingOutput:
    """Wraps a stream's output: holds some tokens' events and writes them with the next."""

    __slots__ = ("engine", "inner", "p0", "per_seq", "rng")

    def __init__(self, inner: StreamOut, engine: Engine, p0: float, per_seq: float, seed: int):
        self.inner = inner
        self.engine = engine
        self.p0 = p0
        self.per_seq = per_seq
        self.rng = random.Random(seed)

    def token(self, seq: Seq, index: int, finish: str | None, now: float) -> None:
        inner = self.inner
        p = hold_probability(self.p0, self.per_seq, len(self.engine.running))
        hold = finish is None and index > 0 and self.rng.random() < p
        if hold and inner.held is None:
            inner.held = []
        inner.token(seq, index, finish, now)
        if not hold and inner.held is not None:
            inner.release_held(seq)

    def aborted(self, seq: Seq | None) -> None:
        self.inner.aborted(seq)


def coalescing(out: Output, engine: Engine, p0: float, per_seq: float, seed: int) -> Output:
    """`out` itself when the profile does not coalesce or `out` is not a plain stream."""
    if p0 <= 0 and per_seq <= 0:
        return out
    from agentload.sim.server import StreamOut

    if not isinstance(out, StreamOut) or out.fault is not None:
        return out
    return CoalescingOutput(out, engine, p0, per_seq, seed)
