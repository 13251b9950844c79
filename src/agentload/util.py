"""Small process-level helpers shared by the commands."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import ipaddress
from collections.abc import Coroutine, Iterator, Mapping
from typing import Any, TypeVar
from urllib.parse import urlsplit

T = TypeVar("T")


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop when available (lower per-event overhead), else the stdlib loop."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - platform without uvloop
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run_async(coro: Coroutine[Any, Any, T], *, debug: bool = False) -> T:
    """Run a coroutine to completion on a fresh (uv)loop."""
    with asyncio.Runner(loop_factory=new_event_loop, debug=debug) as runner:
        return runner.run(coro)


@contextlib.contextmanager
def gc_tuned(enabled: bool = True) -> Iterator[None]:
    """Fewer, cheaper garbage collections for a long-running event loop.

    Hundreds of live episodes (or a simulator's caches) hold millions of objects; CPython's
    default thresholds then run full collections often enough to stall the event loop for
    tens of milliseconds. Freezing what exists at start (modules, domain data) and collecting
    the young generation less often keeps loop lag down; cycles still get collected.
    """
    if not enabled:
        yield
        return
    old = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()


def dig(d: Any, *keys: str) -> Any:
    """d[k1][k2]... or None where a level is missing (summary fields are often absent)."""
    for k in keys:
        if not isinstance(d, Mapping):
            return None
        d = d.get(k)
    return d


class ServedAt:
    """The URLs of an HTTP server that agentload starts (simulator, engine, proxy).

    Subclasses say where the server binds; a wildcard bind is reached on loopback, since the
    client runs on the same machine.
    """

    def bind_address(self) -> tuple[str, int]:
        raise NotImplementedError

    @property
    def url(self) -> str:
        host, port = self.bind_address()
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        return f"http://{host}:{port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL (``.../v1``)."""
        return f"{self.url}/v1"

    @property
    def metrics_url(self) -> str:
        return f"{self.url}/metrics"


def die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """`preexec_fn` for servers agentload starts: SIGTERM when the parent dies.

    PR_SET_PDEATHSIG (Linux; elsewhere a no-op), so a killed agentload leaves no simulator or
    engine behind; an engine's leader then shuts down its own workers.
    """
    import ctypes
    import signal

    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on `host` now, for a server agentload is about to start."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def is_loopback_url(url: str) -> bool:
    """Whether a URL's host is this machine's loopback (`localhost`, 127.0.0.0/8, ::1)."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
