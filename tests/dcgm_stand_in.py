"""The simulator and, beside it, a DCGM exporter stand-in serving a recorded page, on one
event-loop thread of the test process: a run under test scrapes both as a real engine and
its GPU exporter."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from agentload.sim import SimConfig, SimServer

PAGE = (Path(__file__).parent / "data" / "dcgm_exporter_2gpu.prom").read_text()
"""dcgm-exporter's /metrics as recorded on a 2-GPU node."""


class SimBesideExporter:
    """`sim` serves the chat API; `url` is the exporter's /metrics, whose k-th scrape gets
    `page(k)` (the recorded page by default); `scrapes` counts them."""

    def __init__(self, sim: SimConfig, page: Callable[[int], str] = lambda _k: PAGE) -> None:
        self.sim = SimServer(sim)
        self.page = page
        self.scrapes = 0
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    async def _metrics(self, _req: web.Request) -> web.Response:
        text = self.page(self.scrapes)
        self.scrapes += 1
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(runner.setup())
        self._loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", 0).start())
        self.url = f"http://127.0.0.1:{runner.addresses[0][1]}/metrics"
        self._loop.run_until_complete(self.sim.start())
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self.sim.stop())
        self._loop.run_until_complete(runner.cleanup())

    def __enter__(self) -> SimBesideExporter:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
