"""Endpoint configuration: where to send calls, how long to wait, when to retry."""

from __future__ import annotations

import os
import re
from typing import Annotated, Any
from urllib.parse import urlsplit, urlunsplit

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agentload.engine_launch import LaunchConfig
from agentload.flags import ENDPOINT, comma_list, flag, split_items
from agentload.redact import DEFAULT_KEY_ENV

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


# Read when an endpoint names no api_key_env, as the OpenAI SDK does.


def normalize_base_url(url: str) -> str:
    """The OpenAI API root of a server address: `http://host:8000`, `http://host:8000/`,
    `http://host:8000/v1/` and `http://host:8000/v1/chat/completions` all give
    `http://host:8000/v1`. Any other path (a gateway's prefix) is kept as given."""
    v = url.strip().rstrip("/")
    if not v.startswith(("http://", "https://")):
        raise ValueError(f"base_url must start with http:// or https://, got {v!r}")
    parts = urlsplit(v)
    if not parts.netloc:
        raise ValueError(f"base_url has no host: {v!r}")
    path = parts.path.rstrip("/")
    for tail in ("/chat/completions", "/completions"):
        if path.endswith(tail):
            path = path[: -len(tail)]
            break
    if not path:
        path = "/v1"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def server_root(base_url: str) -> str:
    """`scheme://host:port` of a base URL: where vLLM and SGLang serve /metrics, /version."""
    parts = urlsplit(base_url)
    return f"{parts.scheme}://{parts.netloc}"


class EndpointConfig(BaseModel):
    """One OpenAI-compatible endpoint (a role in a run maps to one of these)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = "default"
    base_url: Annotated[str, flag("--base-url", panel=ENDPOINT, metavar="URL")] = Field(
        ...,
        description="The server's base URL: http://127.0.0.1:8000 or http://127.0.0.1:8000/v1 "
        "(the same).",
    )
    model: Annotated[str, flag("--model", panel=ENDPOINT, metavar="MODEL")] = Field(
        ..., description="Model name sent in each request."
    )
    api_key_env: Annotated[str | None, flag("--api-key-env", panel=ENDPOINT, metavar="VAR")] = (
        Field(
            None,
            description="Environment variable holding the bearer key (the key is never "
            f"stored); default: {DEFAULT_KEY_ENV} when set, else no key.",
        )
    )
    headers: Annotated[
        dict[str, str],
        flag("--header", "-H", panel=ENDPOINT, metavar="HEADER", type=list[str] | None),
    ] = Field(
        default_factory=dict,
        description="Extra HTTP header on every request, 'Name: value' (repeatable).",
    )
    extra_body: Annotated[
        dict[str, Any], flag("--extra-body", panel=ENDPOINT, metavar="JSON", type=str | None)
    ] = Field(
        default_factory=dict,
        description="JSON merged into every request, e.g. "
        '\'{"chat_template_kwargs": {"enable_thinking": false}}\'.',
    )
    max_tokens: Annotated[int | None, flag("--max-tokens", panel=ENDPOINT, metavar="N")] = Field(
        None,
        ge=1,
        le=10_000_000,
        strict=True,
        description="max_tokens of the calls (default: agent 1024, user 256).",
    )
    temperature: Annotated[float | None, flag("--temperature", panel=ENDPOINT, metavar="T")] = (
        Field(
            None,
            ge=0,
            le=100,
            strict=True,
            description="Sampling temperature (default: the server's).",
        )
    )
    stream: bool = Field(True, strict=True)
    timeouts: Timeouts = Field(default_factory=Timeouts)
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    max_connections: int = Field(
        0, ge=0, le=1_000_000, strict=True, description="Connection-pool size; 0 = unlimited."
    )
    metrics_url: Annotated[str | None, flag("--metrics-url", panel=ENDPOINT, metavar="URL")] = (
        Field(
            None,
            description="Prometheus URL of the server; comma-separated for replicas (summed). "
            "Default: <server>/metrics when it answers.",
        )
    )
    metrics_urls: list[str] = Field(
        default_factory=list,
        description="Several Prometheus endpoints (replicas behind one address), summed.",
    )
    gpu_metrics_urls: Annotated[
        list[str], flag("--gpu-metrics", panel=ENDPOINT, metavar="URL", type=str | None)
    ] = Field(
        default_factory=list,
        description="NVIDIA DCGM exporter /metrics of the server's GPUs, scraped beside the "
        "engine's (comma-separated for several hosts): GPU use, memory, power and energy per "
        "output token in the report and summary.",
    )
    launch: LaunchConfig | None = Field(
        None, description="Start this engine for the run (see docs/engines.md)."
    )

    @field_validator("base_url")
    @classmethod
    def _normalize(cls, v: str) -> str:
        return normalize_base_url(v)

    @model_validator(mode="before")
    @classmethod
    def _replicas(cls, data: Any) -> Any:
        # `metrics_url: a,b` (the --metrics-url flag) names replicas behind one address.
        url = data.get("metrics_url") if isinstance(data, dict) else None
        if isinstance(url, str) and "," in url:
            urls = comma_list(url)
            data = {**data, "metrics_url": None, "metrics_urls": urls}
        return data

    @field_validator("headers", mode="before")
    @classmethod
    def _header_items(cls, value: Any) -> Any:
        # The --header flag's 'Name: value' items.
        if not isinstance(value, list):
            return value
        items = split_items(value, ":", lambda item: f"expected 'Name: value', got {item!r}")
        return {name: raw.strip() for name, raw in items}

    @field_validator("extra_body", mode="before")
    @classmethod
    def _json_text(cls, value: Any) -> Any:
        # The --extra-body flag's JSON text.
        if not isinstance(value, str):
            return value
        try:
            parsed = orjson.loads(value)
        except orjson.JSONDecodeError as e:
            raise ValueError(f"not valid JSON ({e})") from None
        if not isinstance(parsed, dict):
            raise ValueError("expected a JSON object")
        return parsed

    @field_validator("metrics_urls", "gpu_metrics_urls", mode="before")
    @classmethod
    def _split_urls(cls, value: Any) -> Any:
        if isinstance(value, str):
            return comma_list(value)
        return value

    @field_validator("gpu_metrics_urls")
    @classmethod
    def _gpu_urls(cls, value: list[str]) -> list[str]:
        for u in value:
            if not u.startswith(("http://", "https://")):
                raise ValueError(f"{u!r} is not an http(s):// URL (a DCGM exporter's /metrics)")
        return list(dict.fromkeys(value))

    @field_validator("metrics_url", "metrics_urls")
    @classmethod
    def _metrics_urls(cls, value: Any) -> Any:
        for u in [value] if isinstance(value, str) else (value or []):
            if not u.startswith(("http://", "https://")):
                raise ValueError(f"{u!r} is not an http(s):// URL (a Prometheus /metrics)")
        return value

    @property
    def all_metrics_urls(self) -> list[str]:
        """metrics_url and metrics_urls together, without repeats, in order."""
        urls = ([self.metrics_url] if self.metrics_url else []) + list(self.metrics_urls)
        return list(dict.fromkeys(urls))

    @property
    def key_source(self) -> str | None:
        """The name of the environment variable the key comes from (None: no key is sent)."""
        if self.api_key_env:
            return self.api_key_env
        return DEFAULT_KEY_ENV if os.environ.get(DEFAULT_KEY_ENV) else None

    def api_key(self) -> str | None:
        """The bearer key from the environment, read at call time and never stored.

        `api_key_env` names the variable (it must then be set); without it, OPENAI_API_KEY is
        used when set, as OpenAI clients do, and otherwise no key is sent."""
        if not self.api_key_env:
            return os.environ.get(DEFAULT_KEY_ENV) or None
        key = os.environ.get(self.api_key_env)
        if key is None:
            raise KeyError(f"environment variable {self.api_key_env} (api_key_env) is not set")
        return key

    def auth_headers(self) -> dict[str, str]:
        """The endpoint's own headers plus the bearer key (raises KeyError like api_key)."""
        key = self.api_key()
        hdrs = dict(self.headers)
        if key:
            hdrs["Authorization"] = f"Bearer {key}"
        return hdrs

    @property
    def chat_url(self) -> str:
        return f"{self.base_url}/chat/completions"
