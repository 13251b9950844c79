"""agentload: benchmark OpenAI-compatible inference services under agentic workloads."""

from __future__ import annotations

from typing import Any

from agentload.version import __version__

__all__ = ["Summary", "__version__", "run", "run_async"]


def __getattr__(name: str) -> Any:
    if name in ("run", "run_async", "Summary"):
        # lazy: start-up: the run API pulls in the client, scheduler and domains; imported on
        # first use only, so `import agentload` stays cheap for the version or a submodule.
        from agentload import api

        return getattr(api, name)
    raise AttributeError(f"module 'agentload' has no attribute {name!r}")
