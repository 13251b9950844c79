"""Real inference engines: launching vLLM / SGLang for a run or for `agentload serve`."""

from agentload.engines.config import ENGINES, LaunchConfig
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
