"""The one-call Python API: `agentload.run(config) -> Summary`.

import agentload

s = agentload.run({"workload": {"tasks": ["airline/000-004"]}, "load": {"concurrency": 4}})
print(s.exit_code, s["episodes"]["success_rate"], s.get_path("calls.all.ttft_s.p90"))
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentload.config import RunConfig, build_config
from agentload.util import run_async as run_coro


class Summary(dict[str, Any]):
    """summary.json of the run (docs/results.md), plus where it lies and how the run ended."""

    def __init__(self, data: Mapping[str, Any], out_dir: Path, exit_code: int, stop_reason: str):
        super().__init__(data)
        self.out_dir = out_dir
        self.exit_code = exit_code
        self.stop_reason = stop_reason

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def get_path(self, dotted: str, default: Any = None) -> Any:
        """`s.get_path("calls.by_role.agent.ttft_s.p90")`; `default` where a level is missing."""
        d: Any = self
        for k in dotted.split("."):
            if not isinstance(d, Mapping) or k not in d:
                return default
            d = d[k]
        return d


def _config(config: RunConfig | Mapping[str, Any] | str | Path, overrides: Mapping) -> RunConfig:
    if isinstance(config, RunConfig):
        if not overrides:
            return config
        config = config.model_dump(by_alias=True)
    if isinstance(config, str | Path):
        return build_config(path=Path(config), overrides=overrides)
    return build_config(data=config, overrides=overrides)


async def run_async(
    config: RunConfig | Mapping[str, Any] | str | Path,
    *,
    resume: bool = False,
    overwrite: bool = False,
    progress: str = "off",
    **overrides: Any,
) -> Summary:
    """`run` for code that already has an event loop."""
    from agentload.runner import execute_run  # lazy: start-up (`import agentload` stays cheap)

    out = await execute_run(
        _config(config, overrides),
        resume=resume,
        overwrite=overwrite,
        progress=progress,
        say=lambda _m: None,
        install_signals=False,
    )
    data = out.summary.dump() if out.summary is not None else {}
    return Summary(data, out.out_dir, out.exit_code, out.stop_reason)


def run(
    config: RunConfig | Mapping[str, Any] | str | Path,
    *,
    resume: bool = False,
    overwrite: bool = False,
    progress: str = "off",
    **overrides: Any,
) -> Summary:
    """Run one benchmark and return its summary.

    `config` is a RunConfig, a dict shaped like the YAML file, or the path of one;
    `overrides` are dotted config paths: `run(cfg, **{"load.concurrency": 16})`. Raises
    agentload.config.ConfigError on bad configuration and agentload.runner.RunFailed when the
    run cannot start; a run that starts returns, whatever its outcome (`Summary.exit_code`).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("agentload.run() inside an event loop: await agentload.run_async()")
    return run_coro(
        run_async(config, resume=resume, overwrite=overwrite, progress=progress, **overrides)
    )
