"""Configuration of one simulator instance."""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agentload.sim.profiles import Profile, load_profile

FaultKind = Literal[
    "http_500",
    "http_429",
    "http_503",
    "reset",
    "truncate",
    "malformed",
    "stall",
    "stall_first_token",
    "error_event",
]
FAULT_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)


class SimConfig(BaseModel):
    """Everything that shapes a simulator: network, engine limits, timing, behaviour, faults.

    Engine limits left as ``None`` take the profile's value.
    """

    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    model: str = "agentload-sim"
    profile: str | Profile = "tiny-cpu"
    max_num_seqs: int | None = Field(default=None, ge=1)
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    kv_blocks: int | None = Field(default=None, ge=1)
    block_size: int | None = Field(default=None, ge=1)
    prefix_caching: bool = True
    max_model_len: int | None = Field(default=None, ge=16)
    speedup: float = Field(default=1.0, gt=0)
    api_key: str | None = None
    seed: int = 0
    tokenizer: str | None = None
    # generic behaviour
    mean_output_tokens: float = Field(default=96.0, gt=0)
    output_tokens_sigma: float = Field(default=0.6, ge=0)
    mean_reasoning_tokens: float = Field(default=64.0, gt=0)
    tool_call_probability: float = Field(default=0.5, ge=0, le=1)
    parallel_tool_call_probability: float = Field(default=0.0, ge=0, le=1)
    behaviour_options: dict[str, Any] = Field(default_factory=dict)
    # faults
    fault_rate: float = Field(default=0.0, ge=0, le=1)
    fault_kinds: list[FaultKind] = Field(default_factory=lambda: list(FAULT_KINDS))
    fault_stall_s: float = Field(default=5.0, ge=0)
    fault_after_tokens: int = Field(default=2, ge=0)
    # observability
    log_interval_s: float = Field(default=10.0, ge=0)
    # connections that do not finish sending a request are closed after these
    header_timeout_s: float = Field(default=10.0, gt=0, le=3600)
    body_timeout_s: float = Field(default=30.0, gt=0, le=3600)
    keepalive_timeout_s: float = Field(default=75.0, gt=0, le=86400)

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, value: str | Profile) -> str | Profile:
        if isinstance(value, str):
            load_profile(value)
        return value

    @field_validator("host")
    @classmethod
    def _host_given(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value

    def resolved_profile(self) -> Profile:
        """The profile with this config's engine-limit overrides applied."""
        base = self.profile if isinstance(self.profile, Profile) else load_profile(self.profile)
        updates: dict[str, Any] = {}
        for key in (
            "max_num_seqs",
            "max_num_batched_tokens",
            "kv_blocks",
            "block_size",
            "max_model_len",
        ):
            value = getattr(self, key)
            if value is not None:
                updates[key] = value
        return base.model_copy(update=updates)


# Settings whose command-line flag is not the field name with dashes.
_FLAGS = {
    "prefix_caching": "--no-prefix-caching",
    "behaviour_options": "--behaviour-option",
    "log_interval_s": "--log-interval",
    "header_timeout_s": "--header-timeout",
    "body_timeout_s": "--body-timeout",
    "keepalive_timeout_s": "--keepalive-timeout",
}


def describe_errors(exc: ValidationError, flags: bool = True) -> list[str]:
    """One line per bad setting: its flag (or field name), what is wrong, the value given."""
    lines = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        name = loc[0] if loc else "settings"
        label = _FLAGS.get(name, "--" + name.replace("_", "-")) if flags else name
        if len(loc) > 1:
            label += "[" + ".".join(loc[1:]) + "]"
        msg = err["msg"].removeprefix("Value error, ")
        shown = "" if err["type"] in ("value_error", "missing") else f" (got {err['input']!r})"
        lines.append(f"{label}: {msg}{shown}"[:300])
    return lines
