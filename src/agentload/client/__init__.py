"""OpenAI-compatible streaming client: precise timing, error taxonomy, retries."""

from agentload.client.client import CallError, CallResult, ChatClient, itl_summary
from agentload.client.endpoint import EndpointConfig, RetryPolicy, Timeouts
from agentload.client.normalize import normalize_messages
from agentload.client.record import CALL_SCHEMA, ERROR_KINDS, CallRecord, ItlSummary
from agentload.client.sse import SSEParser
from agentload.client.tokens import HeuristicCounter, TokenizerJsonCounter

__all__ = [
    "CALL_SCHEMA",
    "ERROR_KINDS",
    "CallError",
    "CallRecord",
    "CallResult",
    "ChatClient",
    "EndpointConfig",
    "HeuristicCounter",
    "ItlSummary",
    "RetryPolicy",
    "SSEParser",
    "Timeouts",
    "TokenizerJsonCounter",
    "itl_summary",
    "normalize_messages",
]
