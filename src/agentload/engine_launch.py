"""How to start a real engine: the `launch:` block of an endpoint and `agentload serve`."""

from __future__ import annotations

import shlex
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator

from agentload.redact import redact_argv

ENGINES = ("vllm", "sglang")
Engine = Literal["vllm", "sglang"]


class LaunchConfig(BaseModel):
    """An engine that agentload starts before the first call and stops at the end.

    The engine binds the host and port of the endpoint's `base_url` (or `port` here) and
    serves the endpoint's `model` name; `model` here is what the engine loads.
    """

    model_config = ConfigDict(extra="forbid")

    engine: Engine = Field(..., description="vllm or sglang.")
    model: str | None = Field(
        None,
        description="What the engine loads (a local folder or a hub id); default: the "
        "endpoint's model.",
    )
    served_model_name: str | None = Field(
        None, description="Name the engine serves; default: the endpoint's model."
    )
    host: str = Field("127.0.0.1", description="Address the engine binds.")
    port: int | None = Field(
        None, ge=1, le=65535, description="Port; default: the port of base_url."
    )
    python: str | None = Field(
        None,
        description="Python interpreter (or virtual environment folder) that has the engine "
        "installed; default: the one running agentload.",
    )
    docker: str | None = Field(
        None, description="Run the engine's container image instead of a subprocess."
    )
    docker_args: list[str] = Field(
        default_factory=list, description="Further `docker run` arguments (before the image)."
    )
    gpus: str | None = Field(
        "all", description="docker --gpus value; null for a CPU image. Subprocess: unused."
    )
    args: list[str] = Field(
        default_factory=list, description="Further engine arguments (a list or one string)."
    )
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables.")
    cache_dir: str | None = Field(
        None,
        description="Folder for the instance's caches; default: engine-<name>-cache in the "
        "results folder.",
    )
    startup_timeout_s: float = Field(900.0, gt=0, description="Wait this long for /health.")
    stop_timeout_s: float = Field(
        30.0, ge=0, description="After SIGTERM, wait this long before SIGKILL."
    )

    @field_validator("args", "docker_args", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return shlex.split(value)
        return value

    @field_serializer("args", "docker_args", when_used="json")
    def _hide(self, value: list[str]) -> list[str]:
        # config.yaml keeps the arguments, not an --api-key value among them (VLLM_API_KEY in
        # `env` is redacted by name; prefer it).

        return redact_argv(value)
