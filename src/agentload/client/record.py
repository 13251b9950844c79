"""CallRecord: the measurement of one LLM call, one line of calls.jsonl.

Slotted dataclasses rather than pydantic models: a record is built on the hot path of every
call, and orjson serialises dataclasses natively at C speed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import orjson

CALL_SCHEMA = "agentload.call/1"

ERROR_KINDS: tuple[str, ...] = (
    "connect_error",
    "timeout_connect",
    "timeout_first_token",
    "timeout_idle",
    "timeout_total",
    "http_<status>",
    "stream_error",
    "malformed_stream",
    "context_overflow",
    "cancelled",
    "config_error",
    "client_error",
)


@dataclass(slots=True)
class ItlSummary:
    """Inter-token latency summary in seconds (gaps between token-bearing chunks)."""

    count: int = 0
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None


@dataclass(slots=True)
class CallRecord:
    """One LLM call as measured on the wire (final attempt's timings, all attempts counted).

    Times: `*_ns` are monotonic nanoseconds (comparable within one process),
    `started_at` is wall-clock Unix time for alignment across processes.
    """

    call_id: str
    session_id: str | None = None
    role: str | None = None
    endpoint: str = "default"
    model: str = ""
    turn: int | None = None
    stream: bool = True
    started_at: float = 0.0
    start_ns: int = 0
    headers_ns: int | None = None
    first_token_ns: int | None = None
    end_ns: int = 0
    ttft_s: float | None = None
    e2e_s: float | None = None
    tpot_s: float | None = None
    total_s: float = 0.0
    itl: ItlSummary = field(default_factory=ItlSummary)
    itl_s: list[float] | None = None
    # Every gap, as a sparse log-bucket histogram within 1 % (agentload.client.itlhist).
    itl_hist: list[int] | None = None
    token_chunks: int = 0
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    reasoning_tokens: int | None = None
    tokens_estimated: bool = False
    finish_reason: str | None = None
    num_tool_calls: int = 0
    status: str = "ok"
    error_kind: str | None = None
    error_message: str | None = None
    http_status: int | None = None
    attempts: int = 1
    replay: dict[str, Any] | None = None
    """Replayed calls: conversation id, dataset turn, recorded output tokens, send timing,
    divergence (see docs/replay.md)."""
    schema: str = CALL_SCHEMA
    # Seconds slept between attempts (backoff and Retry-After together), and the last wait a
    # server asked for with Retry-After (after the cap), if any.
    retry_wait_s: float = 0.0
    retry_after_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        return orjson.loads(self.to_json())

    def to_json(self) -> bytes:
        return orjson.dumps(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CallRecord:
        """Rebuild a record from its JSON form; unknown keys from newer versions are ignored."""
        if data.get("schema", CALL_SCHEMA).split("/")[0] != CALL_SCHEMA.split("/")[0]:
            raise ValueError(f"not a call record: schema {data.get('schema')!r}")
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        itl = kwargs.get("itl")
        if isinstance(itl, dict):
            kwargs["itl"] = ItlSummary(**itl)
        return cls(**kwargs)
