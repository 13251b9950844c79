"""The simulator as a subprocess and on the command line."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from agentload.sim import SimConfig, SimProcess, load_profile


def test_sim_process_serves_and_stops(tmp_path: Path) -> None:
    profile = tmp_path / "fast.yaml"
    profile.write_text("base: tiny-cpu\nstep_overhead_s: 0.001\nkv_blocks: 64\n")
    config = SimConfig(
        port=0,
        model="proc-model",
        profile=str(profile),
        speedup=5,
        behaviour_options={"agent_skill": 0.8, "style": "terse"},
    )
    log = tmp_path / "sim.log"
    with SimProcess(config, log_path=str(log)) as sim:
        assert sim.port != 0
        body = json.dumps(
            {
                "model": "proc-model",
                "max_tokens": 5,
                "ignore_eos": True,
                "messages": [{"role": "user", "content": "hi"}],
            }
        ).encode()
        req = urllib.request.Request(
            f"{sim.base_url}/chat/completions",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            out = json.loads(resp.read())
        assert out["usage"]["completion_tokens"] == 5
        with urllib.request.urlopen(sim.metrics_url, timeout=10) as resp:
            text = resp.read().decode()
        assert 'vllm:cache_config_info{block_size="128"' in text
        assert 'num_gpu_blocks="64"' in text
        proc = sim.proc
        assert proc is not None
    assert proc.poll() is not None  # stopped
    assert "listening on" in log.read_text()


def test_cli_help_documents_every_knob() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "agentload.sim", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )
    assert res.returncode == 0, res.stderr
    for flag in (
        "--host",
        "--port",
        "--model",
        "--profile",
        "--max-num-seqs",
        "--max-num-batched-tokens",
        "--kv-blocks",
        "--block-size",
        "--no-prefix-caching",
        "--max-model-len",
        "--speedup",
        "--api-key",
        "--seed",
        "--fault-rate",
        "--fault-kinds",
        "--fault-stall-s",
        "--tokenizer",
        "--behaviour-option",
    ):
        assert flag in res.stdout, flag


def test_bad_profile_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown profile"):
        load_profile("no-such-profile")
    bad = tmp_path / "bad.yaml"
    bad.write_text("step_overhead_s: -1\n")
    with pytest.raises(ValueError, match=r"bad\.yaml"):
        load_profile(str(bad))
    with pytest.raises(ValueError):
        SimConfig(profile="no-such-profile")


def test_settings_reach_the_subprocess_over_stdin_not_argv() -> None:
    config = SimConfig(
        port=0,
        model="m",
        profile="instant",
        max_num_seqs=7,
        block_size=32,
        prefix_caching=False,
        api_key="sk-canary-7f3a",
        seed=5,
        fault_kinds=["reset", "http_429"],
        behaviour_options={"agent_skill": 0.8, "name": "x", "flags": [1, 2], "on": True},
    )
    assert SimConfig.model_validate_json(config.model_dump_json()) == config
    with SimProcess(config) as sim:
        assert sim.proc is not None
        cmdline = Path(f"/proc/{sim.proc.pid}/cmdline").read_bytes()
        assert b"sk-canary" not in cmdline
        req = urllib.request.Request(f"{sim.base_url}/models")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=5)
        assert err.value.code == 401
        req.add_header("Authorization", "Bearer sk-canary-7f3a")
        with urllib.request.urlopen(req, timeout=5) as resp:
            served = json.loads(resp.read())
        assert [m["id"] for m in served["data"]] == ["m"]
