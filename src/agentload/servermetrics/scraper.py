"""Periodic scraping of an engine's Prometheus endpoint during a run."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import aiohttp

from agentload.client.safety import without_userinfo
from agentload.http_sessions import open_session
from agentload.servermetrics.parse import (
    GPU_ENGINE,
    SAMPLE_SCHEMA,
    combine_samples,
    parse_metrics,
)

log = logging.getLogger("agentload.servermetrics")


class _Sink(Protocol):
    def record_server_metrics(self, sample: Mapping[str, Any]) -> None: ...


async def fetch_metrics(
    url: str,
    *,
    session: aiohttp.ClientSession | None = None,
    timeout_s: float = 5.0,
    headers: Mapping[str, str] | None = None,
) -> str:
    """The text of one GET of a /metrics URL (raises on HTTP or network errors)."""
    own = session is None
    sess = session or open_session()
    url, headers = without_userinfo(url, headers)
    try:
        async with sess.get(
            url, timeout=aiohttp.ClientTimeout(total=timeout_s), headers=headers
        ) as resp:
            resp.raise_for_status()
            return await resp.text()
    finally:
        if own:
            await sess.close()


class MetricsScraper:
    """Scrape `url` every `interval_s` and hand each sample to `sink`.

    `url` may be a list (replicas serving one endpoint): each tick scrapes them all at once
    and records one sample with their counters and request gauges summed (see
    `combine_samples`); the sample fails when any replica fails, so a sum is never partial.

    `sink` is a Recorder (its `record_server_metrics`) or any callable taking the sample.
    Ticks are on a fixed schedule (a slow scrape does not shift later ones). A failed scrape
    is recorded as a sample with `ok: false` and the error, so gaps in the timeline are
    visible. `stop()` takes one last sample so that counter deltas cover the whole run.

    `gpu=True`: the URLs are NVIDIA DCGM exporters (GPU telemetry); every sample, failed ones
    included, has `engine: "dcgm"`, and a page without DCGM metrics is a failed scrape.
    """

    def __init__(
        self,
        url: str | Sequence[str],
        sink: _Sink | Callable[[dict[str, Any]], None],
        *,
        interval_s: float = 1.0,
        endpoint: str = "default",
        timeout_s: float = 5.0,
        headers: Mapping[str, str] | None = None,
        gpu: bool = False,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self.urls = [url] if isinstance(url, str) else list(url)
        if not self.urls:
            raise ValueError("no metrics URL")
        self.url = self.urls[0] if len(self.urls) == 1 else ",".join(self.urls)
        self.interval_s = interval_s
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.headers = dict(headers or {})
        self.gpu = gpu
        record = getattr(sink, "record_server_metrics", None)
        self._emit: Callable[[dict[str, Any]], None] = record if record else sink  # type: ignore[assignment]
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self.samples = 0
        self.failures = 0

    async def scrape_once(self) -> dict[str, Any]:
        """One scrape, emitted to the sink and returned."""
        if self._session is None:
            self._session = open_session()
        t = time.time()
        t0 = time.perf_counter()
        sample: dict[str, Any] = {
            "schema": SAMPLE_SCHEMA,
            "t": t,
            "endpoint": self.endpoint,
            "url": self.url,
        }
        if self.gpu:
            sample["engine"] = GPU_ENGINE
        try:
            sess, hdrs = self._session, self.headers
            texts = await asyncio.gather(
                *(
                    fetch_metrics(u, session=sess, timeout_s=self.timeout_s, headers=hdrs)
                    for u in self.urls
                )
            )
            parts = [parse_metrics(txt) for txt in texts]
            if self.gpu and any(p.get("engine") != GPU_ENGINE for p in parts):
                raise ValueError("not a DCGM exporter's page (no DCGM_FI_DEV_* metrics)")
            sample.update(combine_samples(parts))
            if len(self.urls) > 1:
                sample["replicas"] = len(self.urls)
            sample["ok"] = True
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            self.failures += 1
            if self.failures == 1:
                log.warning("metrics scrape of %s failed: %s", self.url, e)
            sample["ok"] = False
            sample["error"] = f"{type(e).__name__}: {e}"
        sample["scrape_s"] = time.perf_counter() - t0
        self.samples += 1
        self._emit(sample)
        return sample

    async def run(self, baseline_taken: bool = False) -> None:
        """Scrape until `stop()` (the first scrape one interval from now if a baseline sample
        was just taken)."""
        loop = asyncio.get_running_loop()
        next_t = loop.time()
        while not self._stopping.is_set():
            if baseline_taken:
                baseline_taken = False
            else:
                await self.scrape_once()
            next_t += self.interval_s
            now = loop.time()
            if next_t < now:  # fell behind: skip missed ticks rather than bursting
                next_t = now + self.interval_s
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), next_t - now)

    def start(self, baseline_taken: bool = False) -> asyncio.Task[None]:
        self._stopping.clear()
        self._task = asyncio.create_task(
            self.run(baseline_taken), name=f"metrics-scraper-{self.endpoint}"
        )
        return self._task

    async def stop(self, *, final_sample: bool = True) -> None:
        self._stopping.set()
        if self._task is not None:
            await self._task
            self._task = None
        if final_sample:
            await self.scrape_once()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> MetricsScraper:
        # The baseline sample before the caller's first request, not in a task that may run
        # after it: counters differenced over a run then cover every call of it, however fast
        # the first calls finish.
        await self.scrape_once()
        self.start(baseline_taken=True)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
