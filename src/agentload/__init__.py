"""agentload: benchmark OpenAI-compatible inference services under agentic workloads."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["Summary", "__version__", "run", "run_async"]


def __getattr__(name: str) -> Any:
    # The run API pulls in the client, scheduler and domains: imported on first use only, so
    # `import agentload` stays cheap for tools that need the version or a submodule.
    if name in ("run", "run_async", "Summary"):
        from agentload import api

        return getattr(api, name)
    raise AttributeError(f"module 'agentload' has no attribute {name!r}")
