"""The one place that opens aiohttp client sessions.

Every aiohttp client in the package (the run's chat client for non-streamed paths, the proxy's
pass-through of other paths, preflight and outage probes, metrics scrapes, calibration, tool
bridges, external adapters) gets its session here, so that timeouts, connection limits and
header choices are set in one module and read the same everywhere. The defaults are aiohttp's
own (300 s in all, 30 s to connect, 100 connections, DNS answers kept 10 s); a caller that needs
others says so by argument. tests/unit/test_code_shape.py fails on an `aiohttp.ClientSession(`
anywhere else in src/.
"""

from __future__ import annotations

import aiohttp

TOTAL_S = 300.0
"""A whole request's deadline unless the caller sets one (aiohttp's default)."""
CONNECT_S = 30.0
"""Connecting a socket (aiohttp's default `sock_connect`)."""
LIMIT = 100
"""Open connections per session (aiohttp's connector default)."""
DNS_CACHE_S = 10
"""Seconds a resolved address is reused (aiohttp's connector default)."""


def open_session(
    *,
    total_s: float | None = TOTAL_S,
    connect_s: float | None = CONNECT_S,
    limit: int = LIMIT,
    dns_cache_s: int = DNS_CACHE_S,
    cleanup_closed: bool = False,
    read_bufsize: int = 1 << 16,
    skip_headers: tuple[str, ...] = (),
    decompress: bool = True,
) -> aiohttp.ClientSession:
    """A new aiohttp session (close it, or use it as `async with`); `total_s=None` sets no
    deadline for a whole request (streams that may run for minutes)."""
    connector = aiohttp.TCPConnector(
        limit=limit, ttl_dns_cache=dns_cache_s, enable_cleanup_closed=cleanup_closed
    )
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=total_s, sock_connect=connect_s),
        read_bufsize=read_bufsize,
        skip_auto_headers=skip_headers,
        auto_decompress=decompress,
    )
