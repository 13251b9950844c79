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
from typing import TYPE_CHECKING, Protocol

from agentload.sim.engine import Engine, Output, Seq

if TYPE_CHECKING:
    from agentload.sim.profiles import Profile

COALESCE_MAX = 0.95


def hold_probability(p0: float, per_seq: float, running: int) -> float:
    return min(COALESCE_MAX, max(0.0, p0 + per_seq * (running - 1)))


def van_der_corput(n: int, base: int = 2) -> float:
    """The n-th point (n >= 1) of the van der Corput sequence in `base`, in (0, 1): any
    base^k consecutive points put one in each interval [i / base^k, (i + 1) / base^k).
    Sequences in different prime bases are independent of each other (a Halton sequence)."""
    x, f = 0.0, 1.0 / base
    while n:
        n, digit = divmod(n, base)
        x += f * digit
        f /= base
    return x


class HoldingOutput(Output, Protocol):
    """A stream that can hold its events back (`outputs.StreamOut`): while `held` is a list,
    its events go there; `release_held` writes them as one chunk."""

    held: list[bytes] | None

    def release_held(self, seq: Seq) -> None: ...


class CoalescingOutput:
    """Wraps a stream's output: holds some tokens' events and writes them with the next."""

    __slots__ = ("engine", "holding_first", "inner", "profile", "rng")

    def __init__(self, inner: HoldingOutput, engine: Engine, profile: Profile, seed: int):
        self.inner = inner
        self.engine = engine
        self.profile = profile  # coalesce_p, coalesce_per_seq, coalesce_first_p and _run
        self.rng = random.Random(seed)
        # Whether this stream's first token is held: decided by its place in the sequence.
        self.holding_first = van_der_corput(seed + 1) < profile.coalesce_first_p

    def _hold(self, index: int, finish: str | None) -> bool:
        if finish is not None:
            return False
        p = self.profile
        if index == 0:
            return self.holding_first
        if self.holding_first:
            self.holding_first = self.rng.random() < p.coalesce_first_run
            return self.holding_first
        held = hold_probability(p.coalesce_p, p.coalesce_per_seq, len(self.engine.running))
        return self.rng.random() < held

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


def coalescing(out: HoldingOutput, engine: Engine, profile: Profile, seed: int) -> Output:
    """`out` itself when the profile does not coalesce. The caller passes plain streams only
    (not one with a fault, whose cut must come where the fault says)."""
    p = profile
    if p.coalesce_p <= 0 and p.coalesce_per_seq <= 0 and p.coalesce_first_p <= 0:
        return out
    return CoalescingOutput(out, engine, profile, seed)
