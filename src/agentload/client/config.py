"""Endpoint configuration: where to send calls, how long to wait, when to retry."""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentload.engines.config import LaunchConfig

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


class Timeouts(BaseModel):
    """Per-call deadlines in seconds; `None` disables one."""

    model_config = ConfigDict(extra="forbid")

    connect: float | None = Field(10.0, gt=0, description="TCP connect (and pool wait).")
    first_token: float | None = Field(
        300.0, gt=0, description="Request start to the first token of any kind."
    )
    idle: float | None = Field(60.0, gt=0, description="Longest gap between two stream chunks.")
    total: float | None = Field(900.0, gt=0, description="Whole attempt, start to end.")


class RetryPolicy(BaseModel):
    """Exponential backoff with full jitter for retryable error kinds."""

    model_config = ConfigDict(extra="forbid")

    max_attempts: int = Field(3, ge=1, description="Attempts in all, the first included.")
    backoff_base: float = Field(0.5, ge=0, description="First backoff ceiling in seconds.")
    backoff_max: float = Field(10.0, ge=0, description="Largest backoff ceiling in seconds.")
    retry_on: tuple[str, ...] = DEFAULT_RETRY_ON


class EndpointConfig(BaseModel):
    """One OpenAI-compatible endpoint (a role in a run maps to one of these)."""

    model_config = ConfigDict(extra="forbid")

    name: str = "default"
    base_url: str = Field(..., description="e.g. http://127.0.0.1:8000/v1")
    model: str
    api_key_env: str | None = Field(
        None, description="Environment variable holding the bearer key (the key is never stored)."
    )
    headers: dict[str, str] = Field(default_factory=dict)
    extra_body: dict[str, Any] = Field(default_factory=dict)
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0)
    stream: bool = True
    timeouts: Timeouts = Field(default_factory=Timeouts)
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    max_connections: int = Field(0, ge=0, description="Connection-pool size; 0 = unlimited.")
    metrics_url: str | None = Field(None, description="Prometheus endpoint of the server.")
    launch: LaunchConfig | None = Field(
        None, description="Start this engine for the run (see docs/engines.md)."
    )

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
