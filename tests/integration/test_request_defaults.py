"""Requests carry only what the user asked for: no seed by default, per-role max_tokens,
and the sampling parameters stated in config.yaml and run.json / summary.json."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import yaml
from test_episode import Reply, scripted

from agentload.config import (
    DEFAULT_AGENT_MAX_TOKENS,
    DEFAULT_USER_MAX_TOKENS,
    ConfigError,
    build_config,
)
from agentload.runner import execute_run
from agentload.workloads import EpisodeOptions

FAST = {"sim": {"profile": "tiny-cpu", "speedup": 50.0}, "metrics": {"interval_s": 0.5}}
EP = {"base_url": "http://127.0.0.1:9/v1", "model": "m"}


def test_defaults_are_stated_in_the_config() -> None:
    cfg = build_config(data={})
    w = cfg.workload
    assert w.request_seed == "none"
    assert (w.agent_max_tokens, w.user_max_tokens) == (1024, 256)
    assert (DEFAULT_AGENT_MAX_TOKENS, DEFAULT_USER_MAX_TOKENS) == (1024, 256)


def test_max_tokens_come_from_workload_then_endpoint_then_default() -> None:
    cfg = build_config(data={"endpoints": {"agent": {**EP, "max_tokens": 512}}})
    # the user role shares the agent's endpoint, and so its max_tokens
    assert (cfg.workload.agent_max_tokens, cfg.workload.user_max_tokens) == (512, 512)
    cfg = build_config(
        data={
            "endpoints": {"agent": {**EP, "max_tokens": 512}, "user": EP},
            "workload": {"agent_max_tokens": 2000},
        }
    )
    assert (cfg.workload.agent_max_tokens, cfg.workload.user_max_tokens) == (2000, 256)
    # resolved values survive a round trip through config.yaml (resume, sweep points)
    again = build_config(data=cfg.model_dump(by_alias=True))
    assert again.workload == cfg.workload


@pytest.mark.parametrize(
    ("value", "expected"), [("none", "none"), ("episode", "episode"), ("7", 7), (7, 7)]
)
def test_request_seed_values(value: object, expected: object) -> None:
    assert build_config(data={"workload": {"request_seed": value}}).workload.request_seed == (
        expected
    )


def test_request_seed_rejects_other_words() -> None:
    with pytest.raises(ConfigError) as exc:
        build_config(
            data={"workload": {"request_seed": "always"}},
            flags={"workload.request_seed": "--request-seed"},
        )
    assert str(exc.value) == (
        "invalid configuration: flag --request-seed: field 'workload.request_seed': "
        "expected none, episode or an integer seed (got 'always')"
    )


async def test_no_seed_on_the_wire_by_default() -> None:
    _, server = await scripted([Reply("Done.")], EpisodeOptions(user="scripted"))
    assert server.requests
    assert all("seed" not in r["body"] for r in server.requests)


async def test_a_fixed_seed_goes_on_every_call() -> None:
    opts = EpisodeOptions(user="llm", request_seed=1234)
    _, server = await scripted([Reply("Done.")], opts, users=[Reply("Hello."), Reply("###STOP###")])
    assert len(server.requests) >= 3
    assert {r["body"]["seed"] for r in server.requests} == {1234}


async def test_run_states_its_sampling(tmp_path: Path) -> None:
    out = tmp_path / "run"
    cfg = build_config(
        data={
            "out": str(out),
            **FAST,
            "workload": {"tasks": ["airline/000-001"], "temperature": 0.5},
            "load": {"concurrency": 2},
            "report": False,
        }
    )
    lines: list[str] = []
    res = await execute_run(cfg, progress="off", say=lines.append, install_signals=False)
    assert res.exit_code == 0
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["workload"]["request_seed"] == "none"
    assert saved["workload"]["agent_max_tokens"] == 1024
    assert saved["workload"]["user_max_tokens"] == 256
    assert saved["preflight"] is True
    summary = orjson.loads((out / "summary.json").read_bytes())
    sampling = summary["run"]["sampling"]
    assert sampling["agent"]["max_tokens"] == 1024 and sampling["user"]["max_tokens"] == 256
    assert sampling["agent"]["temperature"] == 0.5
    assert sampling["agent"]["seed"].startswith("none")
    detected = summary["run"]["endpoints_detected"]
    assert detected["agent"]["engine"] == "agentload-sim" and detected["agent"]["tool_calling"]
    assert any(line.startswith("preflight: agent and user endpoint") for line in lines)
    assert any("agent max_tokens 1024, user max_tokens 256" in line for line in lines)
    # calls respected the caps the summary states
    calls = [orjson.loads(x) for x in (out / "calls.jsonl").read_bytes().splitlines()]
    assert calls and all(
        c["completion_tokens"] <= (1024 if c["role"] == "agent" else 256) for c in calls
    )


async def test_no_preflight_skips_it(tmp_path: Path) -> None:
    out = tmp_path / "run"
    cfg = build_config(
        data={
            "out": str(out),
            **FAST,
            "workload": {"tasks": ["airline/000"]},
            "load": {"concurrency": 1},
            "report": False,
            "preflight": False,
        }
    )
    res = await execute_run(cfg, progress="off", say=lambda _m: None, install_signals=False)
    assert res.exit_code == 0
    run = orjson.loads((out / "run.json").read_bytes())
    assert "endpoints_detected" not in run and "sampling" in run
