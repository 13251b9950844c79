"""The engines of a run: endpoints with a `launch:` block are started before the first
episode and stopped when the run ends (also on Ctrl-C and on errors)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from agentload.client.endpoint import EndpointConfig
from agentload.engines.launch import EngineInterrupted, EngineProcess, EngineSpec

Say = Callable[[str], None]


def _port_of(base_url: str) -> int:
    parts = urlsplit(base_url)
    return parts.port or (443 if parts.scheme == "https" else 80)


def engine_specs(
    endpoints: Mapping[str, EndpointConfig], out_dir: Path
) -> dict[str, tuple[EngineSpec, list[str]]]:
    """One spec per distinct launched engine (roles sharing an endpoint share its engine),
    keyed by engine name, with the roles it serves."""
    out: dict[str, tuple[EngineSpec, list[str]]] = {}
    seen: dict[tuple[str, str], str] = {}
    for role, ep in endpoints.items():
        if ep.launch is None:
            continue
        key = (ep.base_url, ep.launch.model_dump_json())
        if key in seen:
            out[seen[key]][1].append(role)
            continue
        name = ep.name if ep.name not in out else f"{ep.name}-{role}"
        la = ep.launch
        spec = EngineSpec(
            name=name,
            launch=la,
            model=la.model or ep.model,
            served_model_name=la.served_model_name or ep.model,
            port=la.port or _port_of(ep.base_url),
            host=la.host,
            log_path=out_dir / f"engine-{name}.log",
            cache_dir=Path(la.cache_dir) if la.cache_dir else out_dir / f"engine-{name}-cache",
        )
        seen[key] = name
        out[name] = (spec, [role])
    return out


class RunEngines:
    """Start, wait for and stop the launched engines of one run."""

    def __init__(
        self, endpoints: Mapping[str, EndpointConfig], out_dir: Path, say: Say = print
    ) -> None:
        self.specs = engine_specs(endpoints, out_dir)
        self.say = say
        self.procs: list[EngineProcess] = []

    def __bool__(self) -> bool:
        return bool(self.specs)

    def start(self) -> None:
        """Start every engine; from the main thread, as the engines must outlive the call."""
        for spec, roles in self.specs.values():
            proc = EngineProcess(spec)
            self.say(
                f"starting {spec.engine} for {', '.join(roles)} on {spec.base_url} "
                f"(model {spec.model}; log {spec.log_path})"
            )
            proc.start()
            self.procs.append(proc)

    async def wait_ready(self) -> None:
        waits = [asyncio.to_thread(p.wait_ready) for p in self.procs]
        times = await asyncio.gather(*waits)
        for p, t in zip(self.procs, times, strict=True):
            self.say(f"{p.spec.engine} engine '{p.spec.name}' ready after {t:.1f} s")

    def cancel(self) -> None:
        """Give up waiting (Ctrl-C during startup); `wait_ready` raises EngineInterrupted."""
        for p in self.procs:
            p.cancel()

    def stop(self) -> None:
        for p in reversed(self.procs):
            with contextlib.suppress(Exception):
                p.stop()
        self.procs.clear()

    def endpoints(self, endpoints: Mapping[str, EndpointConfig]) -> dict[str, EndpointConfig]:
        """The endpoints with the metrics URL of their launched engine where none was given."""
        out = dict(endpoints)
        for spec, roles in self.specs.values():
            for role in roles:
                if out[role].metrics_url is None:
                    out[role] = out[role].model_copy(update={"metrics_url": spec.metrics_url})
        return out

    def meta(self) -> dict[str, Any]:
        """What run.json records about each launched engine."""
        out: dict[str, Any] = {}
        for p in self.procs:
            s = p.spec
            out[s.name] = {
                "engine": s.engine,
                "model": s.model,
                "served_model_name": s.served_model_name,
                "url": s.url,
                "docker": s.launch.docker,
                "log": s.log_path.name,
                "ready_s": p.ready_s,
            }
        return out


@contextlib.asynccontextmanager
async def launched_engines(
    engines: RunEngines, endpoints: Mapping[str, EndpointConfig]
) -> AsyncIterator[dict[str, EndpointConfig]]:
    """The endpoints, with their engines started and ready; the engines stop on the way out.

    Raises EngineError (the user's to fix) or EngineStartError (the engine did not come up);
    a cancelled wait (Ctrl-C) yields at once, so the run stops before its first episode.
    """
    if not engines:
        yield dict(endpoints)
        return
    try:
        engines.start()  # from this thread: each engine's death signal is tied to it
        with contextlib.suppress(EngineInterrupted):
            await engines.wait_ready()
        yield engines.endpoints(endpoints)
    finally:
        await asyncio.to_thread(engines.stop)
