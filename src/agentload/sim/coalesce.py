"""Output coalescing: several tokens in one streamed chunk, as a lagging engine sends them.

A real server's front end drains each request's output queue when it gets to run; when it lags
behind the engine (a busy CPU, a large batch), the tokens of several steps leave together. A
profile describes that with the probability that a token is held back and leaves with the next
one: ``coalesce_p + coalesce_per_seq × (running sequences − 1)``, capped at ``COALESCE_MAX``
(so the number of tokens per chunk is geometric with mean ``1 / (1 − p)``). The last token
always flushes what is held.

The first token is held too in a share ``coalesce_first_p`` of the streams (the front end was
not running when it came, as vLLM's CPU server's often is: see docs/simulator.md), and each
later token extends that hold with probability ``coalesce_first_run``; the client then sees
its first chunk, carrying several tokens, late. Which streams start held follows a van der
Corput sequence over the request counter, so any run of n streams holds close to
``coalesce_first_p × n`` of them (a fidelity workload of six requests sees the configured tail,
not a lucky draw).
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


def van_der_corput(n: int) -> float:
    """The n-th point (n >= 1) of the base-2 van der Corput sequence, in (0, 1): any 2^k
    consecutive points put one in each interval [i / 2^k, (i + 1) / 2^k)."""
    x, f = 0.0, 0.5
    while n:
        if n & 1:
            x += f
        n >>= 1
        f *= 0.5
    return x


class CoalescingOutput:
    """Wraps a stream's output: holds some tokens' events and writes them with the next."""

    __slots__ = (
        "engine",
        "first_p",
        "first_run",
        "holding_first",
        "inner",
        "p0",
        "per_seq",
        "rng",
        "seed",
    )

    def __init__(
        self,
        inner: StreamOut,
        engine: Engine,
        p0: float,
        per_seq: float,
        seed: int,
        first_p: float = 0.0,
        first_run: float = 0.0,
    ):
        self.inner = inner
        self.engine = engine
        self.p0 = p0
        self.per_seq = per_seq
        self.rng = random.Random(seed)
        self.seed = seed
        self.first_p = first_p
        self.first_run = first_run
        self.holding_first = False

    def _hold(self, index: int, finish: str | None) -> bool:
        if finish is not None:
            return False
        if index == 0:
            self.holding_first = van_der_corput(self.seed + 1) < self.first_p
            return self.holding_first
        if self.holding_first:
            self.holding_first = self.rng.random() < self.first_run
            return self.holding_first
        p = hold_probability(self.p0, self.per_seq, len(self.engine.running))
        return self.rng.random() < p

    def token(self, seq: Seq, index: int, finish: str | None, now: float) -> None:
        inner = self.inner
        hold = self._hold(index, finish)
        if hold and inner.held is None:
            inner.held = []
        inner.token(seq, index, finish, now)
        if not hold and inner.held is not None:
            inner.release_held(seq)

    def aborted(self, seq: Seq | None) -> None:
        self.inner.aborted(seq)


def coalescing(
    out: Output,
    engine: Engine,
    p0: float,
    per_seq: float,
    seed: int,
    first_p: float = 0.0,
    first_run: float = 0.0,
) -> Output:
    """`out` itself when the profile does not coalesce or `out` is not a plain stream."""
    if p0 <= 0 and per_seq <= 0 and first_p <= 0:
        return out
    from agentload.sim.server import StreamOut

    if not isinstance(out, StreamOut) or out.fault is not None:
        return out
    return CoalescingOutput(out, engine, p0, per_seq, seed, first_p, first_run)
