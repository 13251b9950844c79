"""Preflight warns when the served context cannot hold the workload's first call, and names
the likely fix of a base URL whose path the server does not have."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentload.client import EndpointConfig
from agentload.config import build_config
from agentload.engines.preflight import PreflightFailed, preflight_for_run
from agentload.sim import SimConfig, SimServer
from agentload.workloads.base import make_workload


async def _preflight(max_model_len: int, tasks: list[str]) -> list[str]:
    said: list[str] = []
    async with SimServer(SimConfig(port=0, profile="instant", max_model_len=max_model_len)) as sim:
        ep = EndpointConfig(base_url=sim.base_url, model="agentload-sim")
        workload = make_workload(build_config(data={"workload": {"tasks": tasks}}))
        await preflight_for_run(
            {"agent": ep, "user": ep},
            say=said.append,
            first_call=workload.first_call_tokens(),
            metrics=False,
        )
    return [s for s in said if "WARNING" in s and "context" in s]


def test_a_context_too_small_for_the_first_call_is_warned_about() -> None:
    need = make_workload(build_config(data={"workload": {"tasks": ["retail/000"]}}))
    first = need.first_call_tokens()["agent"]
    assert 5000 < first < 8000  # ~5.4k of policy and tool schemas, 1024 of output cap
    small = asyncio.run(_preflight(8192, ["retail/000"]))
    assert len(small) == 1 and "8,192-token context" in small[0]
    assert "context_overflow" in small[0] and "leaves little room" in small[0]
    tiny = asyncio.run(_preflight(4096, ["retail/000"]))
    assert "does not fit" in tiny[0]
    assert asyncio.run(_preflight(32768, ["retail/000"])) == []


def test_a_wrong_base_path_names_the_fix() -> None:
    async def go() -> Any:
        async with SimServer(SimConfig(port=0, profile="instant")) as sim:
            root = sim.base_url.removesuffix("/v1")
            ep = EndpointConfig(base_url=f"{root}/openai/v1", model="agentload-sim")
            with pytest.raises(PreflightFailed) as e:
                await preflight_for_run({"agent": ep}, metrics=False)
            return root, str(e.value)

    root, msg = asyncio.run(go())
    assert f"use --base-url {root}/v1" in msg
