"""A recording OpenAI-compatible pass-through for agents agentload does not drive.

The agent points its base URL at the proxy; every request goes on to the upstream unchanged,
chat completions are measured on the wire like agentload's own client measures them, and the
calls, sessions and trajectories land in an ordinary results folder (docs/external-agents.md).
"""

from agentload.proxy.service import ProxyConfig, ProxyServer

__all__ = ["ProxyConfig", "ProxyServer"]
