"""Configuration of one simulator instance."""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agentload.bounds import INT64_MAX, MAX_CONCURRENCY
from agentload.flags import SIM, comma_list, flag, flags_of, split_items
from agentload.sim.profiles import BUILTIN_PROFILES, Profile, load_profile, profile_note

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


def is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def fault_kind_list(value: str | list[str]) -> list[str]:
    """The fault kinds named, comma-separated or repeated; ValueError names one that is not."""
    kinds = [k for v in ([value] if isinstance(value, str) else value) for k in comma_list(v)]
    for kind in kinds:
        if kind not in FAULT_KINDS:
            raise ValueError(f"{kind!r} is not one of {', '.join(FAULT_KINDS)}")
    return kinds


def _profiles_help() -> str:
    named = ", ".join(f"{n} ({profile_note(p)})" for n, p in BUILTIN_PROFILES.items())
    return (
        f"Timing profile: one of {named}, or a YAML/JSON profile file (`agentload sim "
        "calibrate` writes one)."
    )


class SimKnobs(BaseModel):
    """The simulator settings a run's embedded simulator and `agentload sim` share; declared
    once here, each with its flag (`--speedup` on `sim`, `--sim-speedup` on `run`)."""

    profile: Annotated[
        str, flag("--profile", panel=SIM, metavar="NAME|FILE", type=str | None, help=_profiles_help)
    ] = Field("tiny-cpu", description="Timing profile (a built-in name or a file).")
    speedup: Annotated[float, flag("--speedup", panel=SIM, metavar="X")] = Field(
        1.0, gt=0, le=1e6, description="Simulated model time runs this many times faster."
    )
    seed: Annotated[int, flag("--seed", panel=SIM, metavar="N")] = Field(
        0, ge=0, le=INT64_MAX, description="Seed of the simulator's outputs and fault selection."
    )
    fault_rate: Annotated[float, flag("--fault-rate", panel=SIM, metavar="P")] = Field(
        0.0, ge=0, le=1, description="Share of generation requests that get an injected fault."
    )
    max_num_seqs: Annotated[int | None, flag("--max-num-seqs", panel=SIM, metavar="N")] = Field(
        None,
        ge=1,
        le=MAX_CONCURRENCY,
        description="Most sequences in one engine step (default: the profile's).",
    )
    behaviour_options: Annotated[
        dict[str, Any],
        flag("--behaviour-option", panel=SIM, metavar="KEY=VALUE", type=list[str]),
    ] = Field(
        default_factory=dict,
        description="KEY=VALUE passed to behaviours (repeatable), e.g. agent_skill=0.8.",
    )

    # Checked as the simulator will read them, so that a bad setting is one line naming its
    # field before anything starts (not the simulator's own multi-line error).
    @field_validator("profile")
    @classmethod
    def _profile(cls, value: Any) -> Any:
        if not isinstance(value, str):  # a Profile object (agentload.sim.settings.SimConfig)
            return value
        try:
            load_profile(value)
        except ValueError as e:
            raise ValueError(str(e).splitlines()[0][:300]) from None
        return value

    @field_validator("behaviour_options", mode="before")
    @classmethod
    def _key_values(cls, value: Any) -> Any:
        # The flag's KEY=VALUE items; a value reads as YAML (0.8 a number, true a boolean).
        if not isinstance(value, list):
            return value
        out: dict[str, Any] = {}
        for key, raw in split_items(value, "=", lambda item: f"{item!r}: expected KEY=VALUE"):
            try:
                out[key] = yaml.safe_load(raw) if raw else ""
            except yaml.YAMLError:
                out[key] = raw
        return out

    @field_validator("behaviour_options")
    @classmethod
    def _behaviour_options(cls, value: dict[str, Any]) -> dict[str, Any]:
        skill = value.get("agent_skill")
        if skill is not None:
            try:
                ok = not isinstance(skill, bool) and 0 <= float(skill) <= 1
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise ValueError(f"agent_skill: a share from 0 to 1, got {skill!r}")
        return value


SERVER = "Server"
ENGINE = "Engine"
BEHAVIOUR = "Generic behaviour"
FAULTS = "Faults"
LOGS = "Logging"


class SimConfig(SimKnobs):
    """Everything that shapes a simulator: network, engine limits, timing, behaviour, faults.

    Engine limits left as ``None`` take the profile's. The settings a run's embedded
    simulator shares (profile, speedup, seed, …) are declared on `SimKnobs`.
    """

    model_config = ConfigDict(extra="forbid")

    host: Annotated[str, flag("--host", panel=SERVER, metavar="ADDR")] = Field(
        "127.0.0.1", description="Address to bind (loopback by default)."
    )
    port: Annotated[int, flag("--port", panel=SERVER, metavar="PORT")] = Field(
        8000, ge=0, le=65535, description="TCP port; 0 picks a free one."
    )
    model: Annotated[str, flag("--model", panel=SERVER, metavar="MODEL")] = Field(
        "agentload-sim", description="Model name served and checked in requests."
    )
    # The same field, widened to take a Profile object too (calibration builds one).
    profile: str | Profile = SimKnobs.model_fields["profile"]  # type: ignore[assignment]
    max_num_batched_tokens: Annotated[
        int | None, flag("--max-num-batched-tokens", panel=ENGINE, metavar="N")
    ] = Field(
        None,
        ge=1,
        description="Token budget of one engine step, prefill chunks included (default: the "
        "profile's).",
    )
    kv_blocks: Annotated[int | None, flag("--kv-blocks", panel=ENGINE, metavar="N")] = Field(
        None, ge=1, description="KV-cache size in blocks (default: the profile's)."
    )
    block_size: Annotated[int | None, flag("--block-size", panel=ENGINE, metavar="N")] = Field(
        None,
        ge=1,
        description="Tokens per KV block, also the prefix-cache granularity (default: the "
        "profile's; 16 on the GPU profiles, 128 on tiny-cpu).",
    )
    prefix_caching: Annotated[
        bool,
        flag(
            "--no-prefix-caching",
            panel=ENGINE,
            sets=False,
            help="Disable automatic prefix caching.",
        ),
    ] = Field(True, description="Automatic prefix caching.")
    max_model_len: Annotated[int | None, flag("--max-model-len", panel=ENGINE, metavar="N")] = (
        Field(
            None,
            ge=16,
            description="Longest prompt + completion in tokens (default: the profile's).",
        )
    )
    api_key: Annotated[str | None, flag("--api-key", panel=SERVER, metavar="KEY")] = Field(
        None,
        description="Require 'Authorization: Bearer KEY' on /v1 routes (401 otherwise). "
        "Visible to other users in the process list: prefer --api-key-env or --api-key-file.",
    )
    tokenizer: Annotated[str | None, flag("--tokenizer", panel=SERVER, metavar="FILE")] = Field(
        None,
        description="A tokenizer.json to count tokens with (needs the 'tokenizers' package); "
        "default: the built-in approximation (~4 characters per token).",
    )
    # generic behaviour
    mean_output_tokens: Annotated[
        float, flag("--mean-output-tokens", panel=BEHAVIOUR, metavar="N")
    ] = Field(96.0, gt=0, description="Mean length of text answers, in tokens (lognormal).")
    output_tokens_sigma: Annotated[
        float, flag("--output-tokens-sigma", panel=BEHAVIOUR, metavar="SIGMA")
    ] = Field(0.6, ge=0, description="Sigma of the lognormal text length.")
    mean_reasoning_tokens: Annotated[
        float, flag("--mean-reasoning-tokens", panel=BEHAVIOUR, metavar="N")
    ] = Field(64.0, gt=0, description="Mean reasoning length when thinking is requested.")
    tool_call_probability: Annotated[
        float, flag("--tool-call-probability", panel=BEHAVIOUR, metavar="P")
    ] = Field(0.5, ge=0, le=1, description="Probability of a tool call when tool_choice is auto.")
    parallel_tool_call_probability: Annotated[
        float, flag("--parallel-tool-call-probability", panel=BEHAVIOUR, metavar="P")
    ] = Field(0.0, ge=0, le=1, description="Probability that a tool-call answer holds 2-3 calls.")
    # faults
    fault_kinds: Annotated[
        list[FaultKind], flag("--fault-kinds", panel=FAULTS, metavar="KINDS", type=list[str])
    ] = Field(
        default_factory=lambda: list(FAULT_KINDS),
        description="Comma-separated (or repeated) fault kinds among "
        + ", ".join(FAULT_KINDS)
        + " (default: all).",
    )
    fault_stall_s: Annotated[float, flag("--fault-stall-s", panel=FAULTS)] = Field(
        5.0, ge=0, description="Length of a 'stall' fault in seconds (wall clock, not sped up)."
    )
    fault_after_tokens: Annotated[int, flag("--fault-after-tokens", panel=FAULTS, metavar="N")] = (
        Field(
            2,
            ge=0,
            description="Tokens sent before a mid-stream fault (reset, truncate, malformed, "
            "stall).",
        )
    )
    # observability
    log_interval_s: Annotated[float, flag("--log-interval", panel=LOGS)] = Field(
        10.0,
        ge=0,
        description="Seconds between log lines with queue, KV and emission-lag figures; 0: none.",
    )
    # connections that do not finish sending a request are closed after these
    header_timeout_s: Annotated[float, flag("--header-timeout", panel=SERVER)] = Field(
        10.0,
        gt=0,
        le=3600,
        description="Seconds a connection has to send a request's headers, then it is closed.",
    )
    body_timeout_s: Annotated[float, flag("--body-timeout", panel=SERVER)] = Field(
        30.0,
        gt=0,
        le=3600,
        description="Seconds a request's body may take to arrive (408 and close otherwise).",
    )
    keepalive_timeout_s: Annotated[float, flag("--keepalive-timeout", panel=SERVER)] = Field(
        75.0, gt=0, le=86400, description="Seconds an idle keep-alive connection stays open."
    )

    @field_validator("fault_kinds", mode="before")
    @classmethod
    def _kind_list(cls, value: Any) -> Any:
        # Comma-separated or repeated (the flag); none named: every kind.
        if isinstance(value, str) or is_str_list(value):
            return fault_kind_list(value) or list(FAULT_KINDS)
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


def _flag_of(name: str) -> str:
    info = SimConfig.model_fields.get(name)
    declared = flags_of(info) if info is not None else []
    return declared[0].decls[0] if declared else "--" + name.replace("_", "-")


def describe_errors(exc: ValidationError, flags: bool = True) -> list[str]:
    """One line per bad setting: its flag (or field name), what is wrong, the value given."""
    lines = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        name = loc[0] if loc else "settings"
        label = _flag_of(name) if flags else name
        if len(loc) > 1:
            label += "[" + ".".join(loc[1:]) + "]"
        msg = err["msg"].removeprefix("Value error, ")
        shown = "" if err["type"] in ("value_error", "missing") else f" (got {err['input']!r})"
        lines.append(f"{label}: {msg}{shown}"[:300])
    return lines
