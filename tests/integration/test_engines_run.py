"""`launch:` in a run configuration: the run starts the engine before the first episode and
stops it at the end. The engine is the stand-in vLLM module serving the simulator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from agentload.config import build_config
from agentload.engines.launch import port_in_use
from agentload.engines.run import engine_specs
from agentload.results.jsonl import load_jsonl
from agentload.util import free_port

STUB = Path(__file__).parents[1] / "engine_stub"


def _config(tmp_path: Path, port: int, **env: str) -> Path:
    cfg = {
        "out": str(tmp_path / "run"),
        "endpoints": {
            "agent": {
                "base_url": f"http://127.0.0.1:{port}/v1",
                "model": "tiny",
                "launch": {
                    "engine": "vllm",
                    "model": "/models/tiny",
                    "python": sys.executable,
                    "args": "--max-model-len 8192",
                    "env": {"PYTHONPATH": str(STUB), **env},
                    "startup_timeout_s": 60,
                },
            }
        },
        "workload": {"tasks": ["airline/000-001"]},
        "load": {"concurrency": 2},
        "metrics": {"interval_s": 0.5},
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _alive(pid: int) -> bool:
    try:  # a zombie (state Z) has exited
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _run(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentload", "run", "--config", str(config), "--progress", "off"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": ""},
    )


def test_agent_and_user_share_one_launched_engine(tmp_path: Path) -> None:
    cfg = build_config(path=_config(tmp_path, 8123))
    specs = engine_specs(cfg.endpoints, Path(cfg.out))
    assert list(specs) == ["agent"]
    spec, roles = specs["agent"]
    assert roles == ["agent", "user"]
    assert spec.model == "/models/tiny" and spec.served_model_name == "tiny"
    assert spec.port == 8123
    assert spec.log_path == Path(cfg.out) / "engine-agent.log"
    assert spec.cache_dir == Path(cfg.out) / "engine-agent-cache"


def test_run_launches_the_engine_and_stops_it(tmp_path: Path) -> None:
    port = free_port()
    r = _run(_config(tmp_path, port))
    assert r.returncode == 0, r.stderr
    out = tmp_path / "run"
    assert "starting vllm for agent, user on" in r.stderr
    meta = json.loads((out / "run.json").read_text())
    eng = meta["engines"]["agent"]
    assert eng["engine"] == "vllm" and eng["url"] == f"http://127.0.0.1:{port}"
    assert 0 < eng["ready_s"] < 60
    sessions = load_jsonl(out / "sessions.jsonl")
    assert len(sessions) == 2
    assert all(s["termination"] != "infra_error" for s in sessions)
    # The launched engine's /metrics was scraped without a metrics_url in the config.
    assert load_jsonl(out / "server_metrics.jsonl")
    assert "stub engine: model=/models/tiny" in (out / "engine-agent.log").read_text()
    assert not port_in_use("127.0.0.1", port)


def test_run_whose_engine_dies_exits_1_with_the_log_tail(tmp_path: Path) -> None:
    port = free_port()
    r = _run(_config(tmp_path, port, STUB_MODE="crash"))
    assert r.returncode == 1
    assert "vllm engine 'agent'" in r.stderr
    assert "exited with status 3 during startup" in r.stderr
    assert "RuntimeError: stub engine cannot load the model" in r.stderr
    assert "Traceback" not in r.stderr
    assert not port_in_use("127.0.0.1", port)


def test_ctrl_c_while_the_engine_starts_stops_it_and_the_run(tmp_path: Path) -> None:
    import signal
    import time

    port = free_port()
    pidfile = tmp_path / "child.pid"
    config = _config(tmp_path, port, STUB_MODE="hang", STUB_CHILD_PID_FILE=str(pidfile))
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentload", "run", "--config", str(config), "--progress", "off"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": ""},
    )
    try:
        deadline = time.monotonic() + 60
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        child = int(pidfile.read_text())
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert time.monotonic() - t0 < 30
    assert "Traceback" not in err
    # The engine's whole group is gone, its child included.
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)
    assert not port_in_use("127.0.0.1", port)
