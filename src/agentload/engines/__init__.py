"""Real inference engines: what a server is and whether it can run a benchmark
(preflight), and launching vLLM / SGLang for a run or for `agentload serve`."""

from agentload.engine_launch import ENGINES, LaunchConfig
from agentload.engines.launch import (
    EngineError,
    EngineProcess,
    EngineSpec,
    EngineStartError,
)

__all__ = [
    "ENGINES",
    "EngineError",
    "EngineProcess",
    "EngineSpec",
    "EngineStartError",
    "LaunchConfig",
]
