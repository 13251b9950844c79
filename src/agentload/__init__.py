"""agentload: benchmark OpenAI-compatible inference services under agentic workloads."""

__version__ = "0.1.0"
