"""Endpoint configuration: where to send calls, how long to wait, when to retry."""

from __future__ import annotations

import os
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

# Error kinds worth another attempt: the request never reached a model, or the server said
# "not now". Anything that produced tokens or a definite rejection is not retried.
DEFAULT_RETRY_ON: tuple[str, ...] = (
    "connect_error",
    "timeout_connect",
    "http_429",
    "http_502",
    "http_503",
    "http_504",
)

# Error kinds `retry_on` may name (besides http_NNN).
RETRYABLE_KINDS = frozenset(
    {
        "connect_error",
        "timeout_connect",
        "timeout_first_token",
        "timeout_idle",
        "timeout_total",
        "malformed_stream",
        "stream_error",
        "context_overflow",
    }
)
_DAY = 86_400.0
_HTTP_KIND = re.compile(r"http_[1-5]\d\d")


class Timeouts(BaseModel):
    """Per-call deadlines in seconds; `None` disables one."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    connect: float | None = Field(
        10.0, gt=0, le=_DAY, strict=True, description="TCP connect (and pool wait)."
    )
    first_token: float | None = Field(
        300.0,
        gt=0,
        le=_DAY,
        strict=True,
        description="Request start to the first token of any kind.",
    )
    idle: float | None = Field(
        60.0, gt=0, le=_DAY, strict=True, description="Longest gap between two stream chunks."
    )
    total: float | None = Field(
        900.0, gt=0, le=_DAY, strict=True, description="Whole attempt, start to end."
    )


class RetryPolicy(BaseModel):
    """Exponential backoff with full jitter for retryable error kinds."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    max_attempts: int = Field(
        3, ge=1, le=100, strict=True, description="Attempts in all, the first included."
    )
    backoff_base: float = Field(
        0.5, ge=0, le=3600, strict=True, description="First backoff ceiling in seconds."
    )
    backoff_max: float = Field(
        10.0, ge=0, le=3600, strict=True, description="Largest backoff ceiling in seconds."
    )
    retry_on: tuple[str, ...] = DEFAULT_RETRY_ON

    @field_validator("retry_on")
    @classmethod
    def _known_kinds(cls, kinds: tuple[str, ...]) -> tuple[str, ...]:
        # A misspelt kind would silently never retry anything.
        for k in kinds:
            if k not in RETRYABLE_KINDS and not _HTTP_KIND.fullmatch(k):
                raise ValueError(
                    f"unknown error kind {k!r}; use http_NNN (e.g. http_503) or one of "
                    + ", ".join(sorted(RETRYABLE_KINDS))
                )
        return kinds


class EndpointConfig(BaseModel):
    """One OpenAI-compatible endpoint (a role in a run maps to one of these)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = "default"
    base_url: str = Field(..., description="e.g. http://127.0.0.1:8000/v1")
    model: str
    api_key_env: str | None = Field(
        None, description="Environment variable holding the bearer key (the key is never stored)."
    )
    headers: dict[str, str] = Field(default_factory=dict)
    extra_body: dict[str, Any] = Field(default_factory=dict)
    max_tokens: int | None = Field(None, ge=1, le=10_000_000, strict=True)
    temperature: float | None = Field(None, ge=0, le=100, strict=True)
    stream: bool = Field(True, strict=True)
    timeouts: Timeouts = Field(default_factory=Timeouts)
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    max_connections: int = Field(
        0, ge=0, le=1_000_000, strict=True, description="Connection-pool size; 0 = unlimited."
    )
    metrics_url: str | None = Field(None, description="Prometheus endpoint of the server.")

    @field_validator("base_url")
    @classmethod
    def _strip_slash(cls, v: str) -> str:
        v = v.strip().rstrip("/")
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {v!r}")
        return v

    def api_key(self) -> str | None:
        """The bearer key from the environment, read at call time and never stored."""
        if not self.api_key_env:
            return None
        key = os.environ.get(self.api_key_env)
        if key is None:
            raise KeyError(f"environment variable {self.api_key_env} (api_key_env) is not set")
        return key

    @property
    def chat_url(self) -> str:
        return f"{self.base_url}/chat/completions"
