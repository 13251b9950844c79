"""Limits for the long-lived HTTP services: `agentload proxy`, `agentload tools serve` and the
simulator's front end (`agentload.http1server` drives them for the simulator and the proxy).

Each connection gets a `ConnectionGuard` driven by its protocol at the request's boundaries:

- a request's headers must be complete within `header_timeout_s` of the connection opening,
  or of the first byte after an idle period (slowloris: a trickle of header bytes);
- its body within `body_timeout_s` of the headers;
- a connection idle between requests is closed after `keepalive_timeout_s`.

The numbers and their meaning are the simulator's (`agentload sim --header-timeout ...`).
A `ConnectionCap` bounds the open connections below what the process's file descriptors
allow: at the cap, a new connection closes the one waiting longest without a request under
way (an idle keep-alive or a slow sender), so hostile connections cannot lock out a real
client; only when every connection is serving a request is a new one refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

DEFAULT_MAX_BODY = 64 << 20
"""Largest request body taken by default: a 128k-token context with tool schemas is a few MB of
JSON; 64 MiB leaves room for inline images, as the simulator does."""

_FD_RESERVE = 64  # descriptors kept for the listener, files, logs and the loop itself


@dataclass(frozen=True)
class ServiceLimits:
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keepalive_timeout_s: float = 75.0
    max_body_bytes: int = DEFAULT_MAX_BODY
    max_connections: int = 4096


def check_port(port: int, flag: str = "--port") -> str | None:
    """The error line for a TCP port out of range, or None."""
    if 0 <= port <= 65535:
        return None
    return f"{flag} {port}: a TCP port is 0 to 65535 (0 picks a free one)"


def raise_fd_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit where allowed; returns the soft limit.

    The common default soft limit, 1,024, would let a few hundred idle connections starve
    accept() (EMFILE) while the hard limit allows far more."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < want:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def connection_budget(wanted: int, fds_per_connection: int = 1) -> int:
    """`wanted`, lowered so that the connections fit in the file descriptors left after
    raising the limit (a proxied call holds two: the caller's and the upstream's)."""
    soft = raise_fd_limit()
    return max(1, min(wanted, (soft - _FD_RESERVE) // fds_per_connection))


class Capped(Protocol):
    """A connection a `ConnectionCap` can hold: `busy` while serving a request (never
    evicted), `expire(kind)` closes it."""

    @property
    def busy(self) -> bool: ...

    def expire(self, kind: str) -> None: ...


class ConnectionCap:
    """The open connections of one server, oldest activity first."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._live: dict[Capped, None] = {}
        self.evicted = 0
        self.refused = 0

    def __len__(self) -> int:
        return len(self._live)

    def admit(self, guard: Capped) -> bool:
        if len(self._live) >= self.limit:
            victim = next((g for g in self._live if not g.busy), None)
            if victim is None:
                self.refused += 1
                return False
            self.evicted += 1
            self.remove(victim)
            victim.expire("evicted")
        self._live[guard] = None
        return True

    def touch(self, guard: Capped) -> None:
        if guard in self._live:
            del self._live[guard]
            self._live[guard] = None

    def remove(self, guard: Capped) -> None:
        self._live.pop(guard, None)


class ConnectionGuard:
    """The deadlines of one connection; `on_expired(kind)` closes it ("header", "body",
    "idle" or "evicted")."""

    __slots__ = ("_cap", "_handle", "_loop", "_on_expired", "busy", "limits", "state")

    def __init__(
        self,
        limits: ServiceLimits,
        cap: ConnectionCap | None,
        on_expired: Callable[[str], None],
    ) -> None:
        self.limits = limits
        self._cap = cap
        self._on_expired = on_expired
        self._loop = asyncio.get_running_loop()
        self._handle: asyncio.TimerHandle | None = None
        self.state = "idle"  # idle | header | body | busy
        self.busy = False  # a request is being served: never evicted

    def opened(self) -> bool:
        """A new connection: False when it must be closed at once (every slot busy)."""
        if self._cap is not None and not self._cap.admit(self):
            return False
        self._enter("header", self.limits.header_timeout_s)
        return True

    def data(self) -> None:
        if self.state == "idle":  # the first byte of the next request
            self._enter("header", self.limits.header_timeout_s)

    def headers_done(self) -> None:
        self.busy = True
        self._enter("body", self.limits.body_timeout_s)

    def message_done(self) -> None:
        self._cancel()
        self.state = "busy"

    def reply_done(self) -> None:
        self.busy = False
        self._enter("idle", self.limits.keepalive_timeout_s)
        if self._cap is not None:
            self._cap.touch(self)

    def lost(self) -> None:
        self._cancel()
        self.state = "closed"
        if self._cap is not None:
            self._cap.remove(self)

    def expire(self, kind: str) -> None:
        self._cancel()
        self.state = "closed"
        self._on_expired(kind)

    def _enter(self, state: str, timeout: float) -> None:
        self._cancel()
        self.state = state
        self._handle = self._loop.call_later(timeout, self._expired, state)

    def _cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _expired(self, state: str) -> None:
        self._handle = None
        if self.state == state:
            if self._cap is not None:
                self._cap.remove(self)
            self.expire(state)


def limits_from_flags(
    header_timeout: float,
    body_timeout: float,
    keepalive_timeout: float,
    max_body_mib: float,
    max_connections: int,
) -> ServiceLimits:
    """The services' `--header-timeout ... --max-connections` flags; ValueError names the
    flag that is out of range."""
    for flag, secs in (
        ("--header-timeout", header_timeout),
        ("--body-timeout", body_timeout),
        ("--keepalive-timeout", keepalive_timeout),
    ):
        if not 0 < secs <= 86400:
            raise ValueError(f"{flag} {secs:g}: expected seconds above 0, at most 86400")
    if not 0 < max_body_mib <= 4096:
        raise ValueError(f"--max-body {max_body_mib:g}: expected MiB above 0, at most 4096")
    if not 1 <= max_connections <= 1_000_000:
        raise ValueError(f"--max-connections {max_connections}: expected 1 to 1000000")
    return ServiceLimits(
        header_timeout_s=header_timeout,
        body_timeout_s=body_timeout,
        keepalive_timeout_s=keepalive_timeout,
        max_body_bytes=int(max_body_mib * (1 << 20)),
        max_connections=max_connections,
    )
