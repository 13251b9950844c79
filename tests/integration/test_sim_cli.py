"""`agentload sim` flags: each lands on its SimConfig field, and a real process serves them."""

from __future__ import annotations

import asyncio
import re
import signal
import sys

import aiohttp
import pytest
from typer.testing import CliRunner

import agentload.sim.api
from agentload.cli import app
from agentload.sim.settings import FAULT_KINDS, SimConfig

runner = CliRunner()


def _config(monkeypatch: pytest.MonkeyPatch, *args: str) -> SimConfig:
    """The SimConfig `agentload sim ARGS` would serve (the server itself is not started)."""
    seen: list[SimConfig] = []
    monkeypatch.setattr(agentload.sim.api, "run_blocking", seen.append)
    result = runner.invoke(app, ["sim", *args])
    assert result.exit_code == 0, result.output
    (config,) = seen
    return config


def test_no_flags_give_the_config_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _config(monkeypatch) == SimConfig()


def test_every_flag_reaches_its_field(monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config(
        monkeypatch,
        *("--host", "127.0.0.2", "--port", "0", "--model", "m-x", "--api-key", "k"),
        *("--profile", "instant", "--max-num-seqs", "3", "--max-num-batched-tokens", "64"),
        *("--kv-blocks", "99", "--block-size", "32", "--no-prefix-caching"),
        *("--max-model-len", "4096", "--speedup", "2.5", "--seed", "7"),
        *("--mean-output-tokens", "10", "--output-tokens-sigma", "0.1"),
        *("--mean-reasoning-tokens", "5", "--tool-call-probability", "0.25"),
        *("--parallel-tool-call-probability", "0.5"),
        *("--behaviour-option", "agent_skill=0.8", "--behaviour-option", "name=x"),
        *("--fault-rate", "0.1", "--fault-kinds", "reset,stall", "--fault-kinds", "http_500"),
        *("--fault-stall-s", "1.5", "--fault-after-tokens", "4", "--log-interval", "0"),
    )
    assert config == SimConfig(
        host="127.0.0.2",
        port=0,
        model="m-x",
        api_key="k",
        profile="instant",
        max_num_seqs=3,
        max_num_batched_tokens=64,
        kv_blocks=99,
        block_size=32,
        prefix_caching=False,
        max_model_len=4096,
        speedup=2.5,
        seed=7,
        mean_output_tokens=10.0,
        output_tokens_sigma=0.1,
        mean_reasoning_tokens=5.0,
        tool_call_probability=0.25,
        parallel_tool_call_probability=0.5,
        behaviour_options={"agent_skill": 0.8, "name": "x"},
        fault_rate=0.1,
        fault_kinds=["reset", "stall", "http_500"],
        fault_stall_s=1.5,
        fault_after_tokens=4,
        log_interval_s=0.0,
    )
    assert SimConfig().fault_kinds == list(FAULT_KINDS)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--fault-kinds", "reset,bogus"], "'bogus' is not one of"),
        (["--behaviour-option", "novalue"], "expected KEY=VALUE"),
        (["--fault-rate", "2"], "--fault-rate: "),
        (["--profile", "no-such-profile"], "no-such-profile"),
    ],
)
def test_bad_values_exit_2_with_one_message(
    monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    monkeypatch.setattr(agentload.sim.api, "run_blocking", lambda config: None)
    result = runner.invoke(app, ["sim", *args])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


async def test_a_real_process_serves_the_flags() -> None:
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "agentload.sim", "--port", "0", "--model", "m-x"),
        *("--api-key", "k", "--no-prefix-caching", "--block-size", "32", "--log-interval", "0"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        match = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        assert match, line
        url = match.group(1)
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{url}/v1/models") as resp:
                assert resp.status == 401
            auth = {"Authorization": "Bearer k"}
            async with http.get(f"{url}/v1/models", headers=auth) as resp:
                assert resp.status == 200
                assert [m["id"] for m in (await resp.json())["data"]] == ["m-x"]
            async with http.get(f"{url}/metrics") as resp:
                text = await resp.text()
        assert re.search(r'block_size="32"', text)
        assert re.search(r'enable_prefix_caching="False"', text)
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 30)
