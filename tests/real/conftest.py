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
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentload.engines import EngineProcess, EngineSpec, EngineStartError
from agentload.engines.config import LaunchConfig
from agentload.engines.launch import free_port

HERE = Path(__file__).parent
MODEL_NAME = "tiny"
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
    # Test-tier speed-ups: no torch.compile warm-up at start (the tiny model gains nothing
    # from it), and no chunked prefill: runs still send a per-request seed, and a seeded,
    # sampled request whose prompt is prefilled in chunks kills vLLM's CPU worker.
    "--enforce-eager",
    "--max-num-batched-tokens",
    str(MAX_MODEL_LEN),
]


@dataclass
class RealServer:
    base_url: str
    metrics_url: str
    model: str
    log_path: Path
    ready_s: float


def _real_python() -> str:
    python = os.environ.get("AGENTLOAD_REAL_PYTHON")
    if not python:
        pytest.skip("AGENTLOAD_REAL_PYTHON is not set (run `make test-real`)")
    return python


def _domain_corpus(path: Path) -> Path:
    """Text of agentload's own domains, so the tokenizer encodes their prompts compactly."""
    from agentload.domains import domain_names, get_domain

    parts = []
    for name in domain_names():
        d = get_domain(name)
        parts.append(d.policy)
        parts.extend(json.dumps(t) for t in d.tool_schemas())
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


@pytest.fixture(scope="session")
def vllm_server(request: pytest.FixtureRequest) -> Iterator[RealServer]:
    url = os.environ.get("AGENTLOAD_REAL_URL", "").rstrip("/")
    if url:
        yield RealServer(f"{url}/v1", f"{url}/metrics", MODEL_NAME, Path("/dev/null"), 0.0)
        return
    yield from _launched(request.getfixturevalue("tiny_model"), request)


def _launched(tiny_model: Path, request: pytest.FixtureRequest) -> Iterator[RealServer]:
    tmp_path_factory: pytest.TempPathFactory = request.getfixturevalue("tmp_path_factory")
    python = _real_python()
    logs = tmp_path_factory.mktemp("engine")
    cache = os.environ.get("AGENTLOAD_REAL_CACHE") or str(logs / "cache")
    launch = LaunchConfig(
        engine="vllm",
        python=python,
        args=VLLM_ARGS,
        # A small KV cache: the tiny model needs little, and CI machines are small.
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
        startup_timeout_s=600,
        stop_timeout_s=20,
    )
    spec = EngineSpec(
        name="vllm",
        launch=launch,
        model=str(tiny_model),
        served_model_name=MODEL_NAME,
        port=free_port(),
        log_path=logs / "engine-vllm.log",
        cache_dir=Path(cache),
    )
    eng = EngineProcess(spec)
    eng.start()
    try:
        try:
            ready = eng.wait_ready()
        except EngineStartError as e:
            pytest.fail(str(e), pytrace=False)
        print(f"\nvLLM ready after {ready:.1f} s on {spec.base_url}", file=sys.stderr)
        yield RealServer(spec.base_url, spec.metrics_url, MODEL_NAME, spec.log_path, ready)
    finally:
        eng.stop()
