"""Outage handling: stop issuing episodes while the endpoint is down, probe it, resume.

A single failed call says little (the client already retries connect errors and 5xx); an
outage is failures that *spread*: at least `threshold` infrastructure failures (connect
errors, connect timeouts, 5xx, a connection lost mid-stream) from at least `min_sessions`
different episodes within `window_s`, with no successful call in between. When that happens
the gate closes: the scheduler awaits :meth:`OutageGate.wait_open` before it starts an
episode, and the runner re-queues episodes that ended on infrastructure errors instead of
recording them as burned. A probe (GET on the endpoint's model list or health URL) runs with
exponential backoff and opens the gate at the first answer. When the endpoint stays down past
`give_up_s` (or it can never come back, e.g. the embedded simulator's process exited), the
gate gives up: `wait_open()` returns False and the run stops, resumable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("agentload.outage")

_now = time.monotonic

Probe = Callable[[], Awaitable[bool]]
"""True when the endpoint answers (any HTTP status below 500)."""


class OutageGaveUp(Exception):
    """The endpoint stayed down past the limit: the run stops (resumable)."""


_INFRA_KINDS = frozenset({"connect_error", "timeout_connect"})


def is_infra_failure(kind: str | None, message: str | None = None) -> bool:
    """An error kind that says the endpoint (not the request or the model) failed."""
    if not kind:
        return False
    if kind in _INFRA_KINDS:
        return True
    if kind.startswith("http_5") and kind[5:].isdigit():
        return True
    # A server that dies mid-answer: the stream breaks, not the request.
    return kind == "malformed_stream" and (message or "").startswith("connection lost")


@dataclass
class OutagePolicy:
    threshold: int = 3
    """Infrastructure failures within the window that make an outage..."""
    min_sessions: int = 2
    """...from at least this many different episodes."""
    window_s: float = 10.0
    probe_base_s: float = 0.25
    """First wait between probes; doubles up to `probe_max_s`."""
    probe_max_s: float = 2.0
    probe_timeout_s: float = 2.0
    give_up_s: float = 120.0
    """Stop the run when the endpoint has not answered for this long."""
    never_answered_give_up_s: float = 10.0
    """The same, while no call of the run has succeeded yet (a wrong URL, not an outage)."""


@dataclass
class Outage:
    started: float
    ended: float | None = None
    failures: int = 0
    probes: int = 0

    @property
    def duration_s(self) -> float:
        return (self.ended if self.ended is not None else _now()) - self.started


class OutageGate:
    """Watches call outcomes; closed during an outage, open otherwise.

    Feed it every finished call with :meth:`on_call` (cheap; called on the hot path).
    """

    def __init__(
        self,
        probe: Probe,
        policy: OutagePolicy | None = None,
        *,
        say: Callable[[str], None] | None = None,
        gone: Callable[[], str | None] | None = None,
    ) -> None:
        self.probe = probe
        self.policy = policy or OutagePolicy()
        self.say = say or (lambda msg: log.warning("%s", msg))
        # `gone()` names why the endpoint can never come back (None while it might).
        self.gone = gone or (lambda: None)
        self.outages: list[Outage] = []
        self.episodes_retried = 0
        self.failed: str | None = None
        self._recent: deque[tuple[float, str]] = deque()
        self._open = asyncio.Event()
        self._open.set()
        self._prober: asyncio.Task[None] | None = None
        self._seen_success = False

    # -- state ------------------------------------------------------------------------

    @property
    def paused(self) -> bool:
        return not self._open.is_set() and self.failed is None

    @property
    def current(self) -> Outage | None:
        return self.outages[-1] if self.outages and self.outages[-1].ended is None else None

    def status(self) -> str | None:
        """A short text for progress displays while paused."""
        if self.failed is not None:
            return f"STOPPED: {self.failed}"
        cur = self.current
        if cur is None:
            return None
        return f"PAUSED: endpoint down {cur.duration_s:.1f}s, probing"

    # -- inputs -----------------------------------------------------------------------

    def on_call(self, kind: str | None, message: str | None, session_id: str | None) -> None:
        """One finished call: `kind` None for a success, else its error kind."""
        now = _now()
        if kind is None:
            self._seen_success = True
            self._recent.clear()
            return
        if not is_infra_failure(kind, message):
            return
        cur = self.current
        if cur is not None:
            cur.failures += 1
            return
        if self.failed is not None:
            return
        p = self.policy
        recent = self._recent
        recent.append((now, session_id or ""))
        while recent and now - recent[0][0] > p.window_s:
            recent.popleft()
        if len(recent) >= p.threshold and len({s for _, s in recent}) >= p.min_sessions:
            self._trip(now, len(recent))

    def on_record(self, rec: Any) -> None:
        """`on_call` from a CallRecord."""
        ok = getattr(rec, "status", "ok") == "ok"
        self.on_call(None if ok else (rec.error_kind or "error"), rec.error_message, rec.session_id)

    def note_retry(self) -> None:
        self.episodes_retried += 1

    def outage_since(self, t: float) -> bool:
        """An outage was on at some point after monotonic time `t` (or is on now)."""
        return any(o.ended is None or o.ended >= t for o in self.outages)

    async def confirm(self, since: float) -> bool:
        """An episode that started at `since` ended on an infrastructure error: was it the
        endpoint? True when an outage covers it, or a probe fails now (which starts one);
        False for a lone failure of a live endpoint (the episode counts as failed)."""
        if self.failed is not None:
            return False
        if self.outage_since(since):
            return True
        ok = False
        with contextlib.suppress(Exception):
            ok = await asyncio.wait_for(self.probe(), self.policy.probe_timeout_s)
        if ok or self.failed is not None:
            return self.outage_since(since)
        if self.current is None:
            self._trip(_now(), 1)
        return True

    # -- the pause --------------------------------------------------------------------

    def _trip(self, now: float, failures: int) -> None:
        self._recent.clear()
        self.outages.append(Outage(started=now, failures=failures))
        self._open.clear()
        self.say(
            f"endpoint outage: {failures} infrastructure failure(s) and the endpoint does not "
            "answer; no new episodes until it does (probing with backoff)"
            if failures == 1
            else f"endpoint outage: {failures} infrastructure failures across episodes; "
            "no new episodes until it answers (probing with backoff)"
        )
        self._prober = asyncio.get_running_loop().create_task(self._probe_loop())

    async def _probe_loop(self) -> None:
        p = self.policy
        cur = self.current
        assert cur is not None
        delay = p.probe_base_s
        limit = p.give_up_s if self._seen_success else min(p.give_up_s, p.never_answered_give_up_s)
        while True:
            why = self.gone()
            if why is not None:
                self._give_up(why)
                return
            cur.probes += 1
            ok = False
            with contextlib.suppress(Exception):
                ok = await asyncio.wait_for(self.probe(), p.probe_timeout_s)
            if ok:
                cur.ended = _now()
                self._open.set()
                self.say(
                    f"endpoint answers again after {cur.duration_s:.1f}s "
                    f"({cur.probes} probes); resuming"
                )
                return
            if _now() - cur.started >= limit:
                self._give_up(f"the endpoint did not answer for {limit:g}s")
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, p.probe_max_s)

    def _give_up(self, why: str) -> None:
        cur = self.current
        if cur is not None:
            cur.ended = _now()
        self.failed = why
        self._open.set()  # wake the waiters; they see `failed`
        self.say(f"endpoint outage: giving up: {why}")

    async def wait_open(self) -> bool:
        """Return True when episodes may start; False when the gate gave up (stop the run)."""
        if not self._open.is_set():
            await self._open.wait()
        return self.failed is None

    async def close(self) -> None:
        if self._prober is not None and not self._prober.done():
            self._prober.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._prober
        cur = self.current
        if cur is not None:
            cur.ended = _now()

    # -- results ----------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        """summary.json `client.outages`."""
        return {
            "count": len(self.outages),
            "paused_s": sum(o.duration_s for o in self.outages),
            "episodes_retried": self.episodes_retried,
            "gave_up": self.failed,
            "events": [
                {"duration_s": o.duration_s, "failures": o.failures, "probes": o.probes}
                for o in self.outages
            ],
        }


def http_probe(urls: Sequence[str], *, timeout_s: float = 2.0) -> Probe:
    """A probe that GETs every URL; True when all answer with a status below 500."""
    import aiohttp

    # lazy: start-up: aiohttp's client loads only for a run that watches for outages.
    from agentload.http_sessions import open_session

    async def probe() -> bool:
        async with open_session(total_s=timeout_s, connect_s=None) as http:
            for url in urls:
                try:
                    async with http.get(url) as resp:
                        await resp.read()
                        if resp.status >= 500:
                            return False
                except (aiohttp.ClientError, TimeoutError, OSError):
                    return False
        return True

    return probe


def probe_urls(endpoints: Mapping[str, Any]) -> list[str]:
    """GET targets for a run's endpoints: each distinct base URL's model list."""
    seen: list[str] = []
    for ep in endpoints.values():
        url = f"{ep.base_url}/models"
        if url not in seen:
            seen.append(url)
    return seen


def infra_share_exceeded(infra: int, total: int, max_share: float) -> bool:
    """More than `max_share` of the measured episodes ended on infrastructure errors."""
    return total > 0 and infra / total > max_share
