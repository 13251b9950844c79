"""The real-engine tier (`make test-real`): one vLLM CPU server for the whole session, on a
tiny model built here, started through agentload's own launcher.

AGENTLOAD_REAL_PYTHON names the interpreter of the environment that has vLLM (make test-real
sets it to .venv-real/bin/python); without it every test here is skipped.
AGENTLOAD_REAL_CACHE, when set, keeps the engine's compile caches between sessions.
AGENTLOAD_REAL_URL (e.g. http://127.0.0.1:8021), when set, uses a vLLM already running there
(model `tiny`, started with VLLM_ARGS) instead of launching one: for quick local iterations.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from real_helpers import LOCKED_KEY, MODEL_NAME, RealServer

from agentload.engine_launch import LaunchConfig
from agentload.engines import EngineProcess, EngineSpec, EngineStartError
from agentload.util import free_port

HERE = Path(__file__).parent
MAX_MODEL_LEN = 16384
# What a vLLM user starts the server with for agentload (docs/engines.md says why).
VLLM_ARGS = [
    "--max-model-len",
    str(MAX_MODEL_LEN),
    "--dtype",
    "float32",
    "--enable-prefix-caching",
    "--enable-prompt-tokens-details",
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "hermes",
    # The tiny model gains nothing from torch.compile: skip its warm-up at start.
    "--enforce-eager",
]


def _real_python() -> str:
    python = os.environ.get("AGENTLOAD_REAL_PYTHON")
    if not python:
        pytest.skip("AGENTLOAD_REAL_PYTHON is not set (run `make test-real`)")
    return python


def _domain_corpus(path: Path) -> Path:
    """Text of agentload's own domains, so the tokenizer encodes their prompts compactly."""
    from agentload.domains import domain_names, get_domain
    from agentload.domains.tau2.data import Tau2DataError

    parts = []
    for name in domain_names():
        d = get_domain(name)
        try:  # τ²'s domains join when their data folder is there
            parts.append(d.policy)
            parts.extend(json.dumps(t) for t in d.tool_schemas())
        except Tau2DataError:
            continue
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    python = _real_python()
    root = tmp_path_factory.mktemp("model")
    out = root / MODEL_NAME
    corpus = _domain_corpus(root / "corpus.txt")
    subprocess.run(
        [python, str(HERE / "tiny_model.py"), str(out), "--corpus", str(corpus)],
        check=True,
        timeout=300,
    )
    return out


# The locked engine of the preflight tests: it wants an API key and has no tool calling.
LOCKED_ARGS = ["--max-model-len", str(MAX_MODEL_LEN), "--dtype", "float32", "--enforce-eager"]


def _spec(name: str, model: Path, logs: Path, args: list[str], env: dict[str, str]) -> EngineSpec:
    launch = LaunchConfig(
        engine="vllm",
        python=_real_python(),
        args=args,
        # A small KV cache: the tiny model needs little, and CI machines are small.
        env={"VLLM_CPU_KVCACHE_SPACE": "1", **env},
        startup_timeout_s=600,
        stop_timeout_s=20,
    )
    cache = os.environ.get("AGENTLOAD_REAL_CACHE")
    return EngineSpec(
        name=name,
        launch=launch,
        model=str(model),
        served_model_name=MODEL_NAME,
        port=free_port(),
        log_path=logs / f"engine-{name}.log",
        cache_dir=Path(cache) / name if cache else logs / f"engine-{name}-cache",
    )


def _wants_locked(session: pytest.Session) -> bool:
    return any(item.path.name == "test_real_vllm_preflight.py" for item in session.items)


@pytest.fixture(scope="session")
def engines(
    request: pytest.FixtureRequest, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, EngineProcess]]:
    """The session's engines, started together (their start-up is mostly Python imports, so
    two overlap well) and stopped at the end."""
    logs = tmp_path_factory.mktemp("engines")
    specs = (
        []
        if os.environ.get("AGENTLOAD_REAL_URL")
        else [_spec("vllm", tiny_model, logs, VLLM_ARGS, {})]
    )
    if _wants_locked(request.session):
        specs.append(
            _spec("vllm-locked", tiny_model, logs, LOCKED_ARGS, {"VLLM_API_KEY": LOCKED_KEY})
        )
    procs: dict[str, EngineProcess] = {}
    try:
        for spec in specs:
            procs[spec.name] = EngineProcess(spec).start()
        yield procs
    finally:
        for p in procs.values():
            p.stop()


def _ready(proc: EngineProcess) -> RealServer:
    spec = proc.spec
    if proc.ready_s is None:
        try:
            proc.wait_ready()
        except EngineStartError as e:
            pytest.fail(str(e), pytrace=False)
        print(f"\n{spec.name} ready after {proc.ready_s:.1f} s on {spec.base_url}", file=sys.stderr)
    assert proc.ready_s is not None
    return RealServer(spec.base_url, spec.metrics_url, MODEL_NAME, spec.log_path, proc.ready_s)


@pytest.fixture(scope="session")
def vllm_server(request: pytest.FixtureRequest) -> RealServer:
    """vLLM as agentload users should start it (VLLM_ARGS)."""
    url = os.environ.get("AGENTLOAD_REAL_URL", "").rstrip("/")
    if url:
        return RealServer(f"{url}/v1", f"{url}/metrics", MODEL_NAME, Path("/dev/null"), 0.0)
    return _ready(request.getfixturevalue("engines")["vllm"])


@pytest.fixture(scope="session")
def locked_vllm(engines: dict[str, EngineProcess]) -> RealServer:
    """vLLM started with an API key (VLLM_API_KEY) and without tool calling."""
    return _ready(engines["vllm-locked"])
