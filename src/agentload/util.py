"""Small process-level helpers shared by the commands."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

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
