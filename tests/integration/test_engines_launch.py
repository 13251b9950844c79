"""The engine launcher: command lines (subprocess and docker), environments, and process
handling against a stand-in engine module that serves the simulator over real HTTP."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from agentload.engine_launch import LaunchConfig
from agentload.engines import EngineError, EngineProcess, EngineSpec, EngineStartError
from agentload.engines.launch import port_in_use, redact_args, tail_lines
from agentload.util import free_port

STUB = Path(__file__).parents[1] / "engine_stub"


def _spec(tmp_path: Path, *, port: int | None = None, **launch: object) -> EngineSpec:
    la = LaunchConfig.model_validate({"engine": "vllm", **launch})
    return EngineSpec(
        name="agent",
        launch=la,
        model=str(la.model or "tiny"),
        served_model_name="tiny",
        port=port or free_port(),
        log_path=tmp_path / "engine-agent.log",
        cache_dir=tmp_path / "engine-agent-cache",
    )


def _stub_env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(STUB), os.environ.get("PYTHONPATH", "")])
    return {"PYTHONPATH": path, **extra}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


# ---- command lines -------------------------------------------------------------------------


def test_vllm_subprocess_command(tmp_path: Path) -> None:
    spec = _spec(
        tmp_path,
        port=8021,
        model="/models/tiny",
        python="/opt/venv/bin/python",
        args="--max-model-len 4096 --enable-auto-tool-choice",
    )
    assert spec.command() == [
        "/opt/venv/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/models/tiny",
        "--served-model-name",
        "tiny",
        "--host",
        "127.0.0.1",
        "--port",
        "8021",
        "--max-model-len",
        "4096",
        "--enable-auto-tool-choice",
    ]
    assert spec.base_url == "http://127.0.0.1:8021/v1"
    assert spec.metrics_url == "http://127.0.0.1:8021/metrics"


def test_python_may_be_a_venv_folder(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    venv.mkdir()
    spec = _spec(tmp_path, python=str(venv))
    assert spec.command()[0] == str(venv / "bin" / "python")


def test_sglang_subprocess_command(tmp_path: Path) -> None:
    spec = _spec(tmp_path, port=30001, engine="sglang", model="Qwen/Qwen3-0.6B")
    cmd = spec.command()
    assert cmd[0] == sys.executable
    assert cmd[1:] == [
        "-m",
        "sglang.launch_server",
        "--model-path",
        "Qwen/Qwen3-0.6B",
        "--served-model-name",
        "tiny",
        "--host",
        "127.0.0.1",
        "--port",
        "30001",
    ]


def test_docker_vllm_command_mounts_model_and_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    model_dir = tmp_path / "tiny"
    model_dir.mkdir()
    spec = _spec(
        tmp_path,
        port=8022,
        model=str(model_dir),
        docker="vllm/vllm-openai:v0.32.0",
        env={"VLLM_API_KEY": "sk-secret"},
        args=["--max-model-len", "4096"],
    )
    cmd = spec.command()
    text = " ".join(cmd)
    image = cmd.index("vllm/vllm-openai:v0.32.0")
    assert cmd[:4] == ["docker", "run", "--rm", "--name"]
    assert cmd[4] == spec.container_name
    assert "-p" in cmd and cmd[cmd.index("-p") + 1] == "127.0.0.1:8022:8022"
    assert cmd[cmd.index("--gpus") + 1] == "all"
    assert f"{model_dir.resolve()}:/model:ro" in cmd
    assert f"{spec.cache_dir.resolve()}:/agentload-cache" in cmd
    assert "VLLM_CACHE_ROOT=/agentload-cache/vllm" in cmd
    # Secrets go by name only; their values never reach the command line.
    assert "sk-secret" not in text and "hf_secret_value" not in text
    assert cmd[cmd.index("VLLM_API_KEY") - 1] == "-e"
    assert cmd[cmd.index("HF_TOKEN") - 1] == "-e"
    # The image's own entry point runs the server; the engine's arguments follow the image.
    assert cmd[image + 1 :] == [
        "--model",
        "/model",
        "--served-model-name",
        "tiny",
        "--host",
        "0.0.0.0",
        "--port",
        "8022",
        "--max-model-len",
        "4096",
    ]


def test_docker_sglang_command_names_the_module(tmp_path: Path) -> None:
    spec = _spec(
        tmp_path,
        port=30000,
        engine="sglang",
        model="Qwen/Qwen3-0.6B",
        docker="lmsysorg/sglang:latest",
        gpus=None,
        docker_args=["--shm-size", "16g"],
    )
    cmd = spec.command()
    image = cmd.index("lmsysorg/sglang:latest")
    assert "--gpus" not in cmd
    assert cmd[image - 2 : image] == ["--shm-size", "16g"]
    assert cmd[image + 1 : image + 6] == [
        "python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "Qwen/Qwen3-0.6B",
    ]
    assert "HF_TOKEN" not in cmd or "HF_TOKEN" in os.environ


def test_redact_args_hides_api_keys() -> None:
    assert redact_args(["--api-key", "k1", "--port", "1", "--api-key=k2"]) == [
        "--api-key",
        "<redacted>",
        "--port",
        "1",
        "--api-key=<redacted>",
    ]


def test_environment_has_per_instance_caches(tmp_path: Path) -> None:
    spec = _spec(tmp_path, env={"VLLM_CPU_KVCACHE_SPACE": "1", "DO_NOT_TRACK": "0"})
    env = spec.environment({"HF_HOME": "/home/u/.cache/huggingface", "PATH": "/bin"})
    root = str(spec.cache_dir)
    assert env["VLLM_CACHE_ROOT"] == f"{root}/vllm"
    assert env["TORCHINDUCTOR_CACHE_DIR"] == f"{root}/torchinductor"
    assert env["TRITON_CACHE_DIR"] == f"{root}/triton"
    assert env["HF_HOME"] == f"{root}/huggingface"
    # Downloaded weights stay shared with the caller's hub cache.
    assert env["HF_HUB_CACHE"] == "/home/u/.cache/huggingface/hub"
    assert env["VLLM_NO_USAGE_STATS"] == "1"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert env["DO_NOT_TRACK"] == "0"  # the user's env: wins
    assert env["PATH"] == "/bin"


def test_two_instances_never_share_compile_caches(tmp_path: Path) -> None:
    a = _spec(tmp_path / "a")
    b = _spec(tmp_path / "b")
    assert a.environment({})["VLLM_CACHE_ROOT"] != b.environment({})["VLLM_CACHE_ROOT"]


def test_tail_lines_strips_colours(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("".join(f"\x1b[32mline {i}\x1b[0m\n" for i in range(100)))
    assert tail_lines(log, 3) == "line 97\nline 98\nline 99"
    assert tail_lines(tmp_path / "missing.log") == ""


def test_launch_config_errors_name_the_field() -> None:
    with pytest.raises(ValueError, match="engine"):
        LaunchConfig.model_validate({"engine": "tgi"})
    with pytest.raises(ValueError, match="port"):
        LaunchConfig.model_validate({"engine": "vllm", "port": 70000})


# ---- processes -----------------------------------------------------------------------------


def test_start_wait_serve_and_stop_the_whole_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    envfile = tmp_path / "env.json"
    spec = _spec(
        tmp_path,
        python=sys.executable,
        env=_stub_env(STUB_CHILD_PID_FILE=str(pidfile), STUB_ENV_FILE=str(envfile)),
        args=["--enable-prefix-caching"],
    )
    t0 = time.monotonic()
    with EngineProcess(spec) as eng:
        assert eng.ready_s is not None and eng.ready_s < 30
        body = json.dumps(
            {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        ).encode()
        req = urllib.request.Request(
            f"{spec.base_url}/chat/completions",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            answer = json.loads(r.read())
        assert answer["usage"]["completion_tokens"] == 4
        child = int(pidfile.read_text())
        assert _alive(child)
        seen = json.loads(envfile.read_text())
        assert seen["VLLM_CACHE_ROOT"] == f"{spec.cache_dir}/vllm"
        assert spec.cache_dir.is_dir()
    assert time.monotonic() - t0 < 60
    # The stop reached the engine's own child too (same process group).
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)
    assert not port_in_use("127.0.0.1", spec.port)
    log = spec.log_path.read_text()
    assert log.startswith("# agentload: ")
    assert "vllm.entrypoints.openai.api_server" in log.splitlines()[0]
    assert "stub engine: model=tiny extra=['--enable-prefix-caching']" in log


def test_engine_that_dies_fails_fast_with_its_log_tail(tmp_path: Path) -> None:
    spec = _spec(tmp_path, python=sys.executable, env=_stub_env(STUB_MODE="crash"))
    eng = EngineProcess(spec).start()
    t0 = time.monotonic()
    try:
        with pytest.raises(EngineStartError) as ei:
            eng.wait_ready()
    finally:
        eng.stop()
    assert time.monotonic() - t0 < 20
    msg = str(ei.value)
    assert "exited with status 3 during startup" in msg
    assert str(spec.log_path) in msg
    assert msg.rstrip().endswith("RuntimeError: stub engine cannot load the model")


def test_engine_that_never_gets_healthy_times_out(tmp_path: Path) -> None:
    spec = _spec(tmp_path, python=sys.executable, env=_stub_env(STUB_MODE="hang"))
    eng = EngineProcess(spec, poll_s=0.1).start()
    t0 = time.monotonic()
    try:
        with pytest.raises(EngineStartError, match=r"did not answer .*/health within 2 s"):
            eng.wait_ready(timeout_s=2)
    finally:
        eng.stop(timeout_s=5)
    assert 1.5 < time.monotonic() - t0 < 10


def test_sigterm_ignored_means_sigkill_after_the_grace_period(tmp_path: Path) -> None:
    spec = _spec(tmp_path, python=sys.executable, env=_stub_env(STUB_MODE="stubborn"))
    eng = EngineProcess(spec).start()
    deadline = time.monotonic() + 20
    while "stub engine" not in spec.log_path.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)  # past signal.signal(SIGTERM, SIG_IGN)
    t0 = time.monotonic()
    code = eng.stop(timeout_s=1.0)
    assert code == -signal.SIGKILL
    assert 0.9 < time.monotonic() - t0 < 8


def test_missing_engine_is_a_usage_error(tmp_path: Path) -> None:
    spec = _spec(tmp_path, python=sys.executable)
    with pytest.raises(EngineError, match=r"vllm is not installed for .*python"):
        EngineProcess(spec).start()
    spec = _spec(tmp_path, python=str(tmp_path / "nope" / "python"))
    with pytest.raises(EngineError, match="no Python interpreter at"):
        EngineProcess(spec).start()


def test_port_in_use_is_a_usage_error(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        spec = _spec(tmp_path, port=s.getsockname()[1], python=sys.executable, env=_stub_env())
        with pytest.raises(EngineError, match="already in use"):
            EngineProcess(spec).start()


# ---- agentload serve -----------------------------------------------------------------------


def _agentload(*args: str, env: dict[str, str] | None = None) -> list[str]:
    return [sys.executable, "-m", "agentload", *args]


def test_serve_command_json_ready_then_sigterm_stops_cleanly(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, **_stub_env()}
    proc = subprocess.Popen(
        _agentload(
            "serve",
            "vllm",
            "--model",
            "tiny",
            "--port",
            str(port),
            "--python",
            sys.executable,
            "--out",
            str(tmp_path),
            "--json",
            "--",
            "--max-model-len",
            "4096",
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert proc.stdout is not None
        events = [json.loads(proc.stdout.readline()) for _ in range(2)]
        assert [e["event"] for e in events] == ["starting", "ready"]
        ready = events[1]
        assert ready["base_url"] == f"http://127.0.0.1:{port}/v1"
        assert ready["model"] == "tiny"
        with urllib.request.urlopen(f"{ready['base_url']}/models", timeout=5) as r:
            assert [m["id"] for m in json.loads(r.read())["data"]] == ["tiny"]
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert json.loads(out.splitlines()[-1])["event"] == "stopped"
    assert not port_in_use("127.0.0.1", port)
    log = (tmp_path / "engine-vllm.log").read_text()
    assert "extra=['--max-model-len', '4096']" in log


def test_serve_command_errors(tmp_path: Path) -> None:
    r = subprocess.run(
        _agentload("serve", "vllm", "--model", "tiny", "--python", sys.executable),
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1
    assert "vllm is not installed for" in r.stderr
    r = subprocess.run(
        _agentload("serve", "tgi", "--model", "x"), capture_output=True, text=True, cwd=tmp_path
    )
    assert r.returncode == 2
    assert "unknown engine 'tgi'; choose one of vllm, sglang" in r.stderr
    env = {**os.environ, **_stub_env(STUB_MODE="crash")}
    r = subprocess.run(
        _agentload(
            "serve",
            "vllm",
            "--model",
            "tiny",
            "--port",
            str(free_port()),
            "--python",
            sys.executable,
            "--out",
            str(tmp_path),
        ),
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 1
    assert "exited with status 3 during startup" in r.stderr
    assert "stub engine cannot load the model" in r.stderr
    assert "Traceback" not in r.stderr


def test_readiness_check_uses_the_engines_key(tmp_path: Path) -> None:
    assert _spec(tmp_path, args=["--api-key", "k1"]).api_key() == "k1"
    assert _spec(tmp_path, args=["--api-key=k2"]).api_key() == "k2"
    assert _spec(tmp_path, env={"VLLM_API_KEY": "k3"}).api_key() == "k3"
    assert _spec(tmp_path, engine="sglang", env={"VLLM_API_KEY": "k3"}).api_key() is None


def test_saved_launch_config_hides_secrets() -> None:
    from agentload.config import build_config, config_to_dict

    cfg = build_config(
        data={
            "endpoints": {
                "agent": {
                    "base_url": "http://127.0.0.1:8021/v1",
                    "model": "tiny",
                    "launch": {
                        "engine": "vllm",
                        "args": "--api-key sk-in-args --max-model-len 4096",
                        "env": {"VLLM_API_KEY": "sk-in-env", "HF_TOKEN": "hf-in-env"},
                    },
                }
            }
        }
    )
    saved = str(config_to_dict(cfg))
    assert "sk-in-args" not in saved and "sk-in-env" not in saved and "hf-in-env" not in saved
    launch = config_to_dict(cfg)["endpoints"]["agent"]["launch"]
    assert launch["args"] == ["--api-key", "<redacted>", "--max-model-len", "4096"]
    # The live config still has the key (the engine needs it).
    assert cfg.endpoints["agent"].launch is not None
    assert cfg.endpoints["agent"].launch.args[1] == "sk-in-args"


def test_serve_dry_run_prints_the_docker_command(tmp_path: Path) -> None:
    r = subprocess.run(
        _agentload(
            "serve",
            "sglang",
            "--model",
            "Qwen/Qwen3-0.6B",
            "--docker",
            "lmsysorg/sglang:latest",
            "--docker-arg=--shm-size=16g",
            "--out",
            str(tmp_path),
            "--json",
            "--dry-run",
            "--",
            "--api-key",
            "sk-secret",
            "--context-length",
            "8192",
        ),
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    cmd = json.loads(r.stdout)["command"]
    assert cmd[:2] == ["docker", "run"]
    assert cmd[cmd.index("-p") + 1] == "127.0.0.1:30000:30000"
    assert "--shm-size=16g" in cmd
    assert cmd[-4:] == ["--api-key", "<redacted>", "--context-length", "8192"]
    assert "sk-secret" not in r.stdout


def test_wrong_served_name_times_out_naming_what_is_served(tmp_path: Path) -> None:
    spec = _spec(tmp_path, python=sys.executable, env=_stub_env())
    spec.served_model_name = "other"  # the stand-in serves what --served-model-name says...
    spec.launch = spec.launch.model_copy(update={"args": ["--served-model-name", "tiny"]})
    eng = EngineProcess(spec, poll_s=0.1).start()  # ...and the last flag wins: "tiny"
    try:
        with pytest.raises(EngineStartError, match=r"never listed 'other' \(it lists \['tiny'\]\)"):
            eng.wait_ready(timeout_s=8)
    finally:
        eng.stop()
