"""Run configuration: pydantic models, YAML loading, CLI overrides, redaction.

A run is described by one :class:`RunConfig`. It comes from a YAML file (optional) with CLI
flags applied on top (flags win). Every validation problem becomes one :class:`ConfigError`
whose message names the field and where its value came from (the file or the flag).
"""

from __future__ import annotations

import copy
import math
import random
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agentload.agents.strategies import FEW_SHOT_MISSING, use_few_shot_file
from agentload.bounds import (
    DAY_S,
    INT64_MAX,
    MAX_CONCURRENCY,
    MAX_EPISODES,
    MAX_STEPS,
    MAX_TOKENS,
)
from agentload.client.endpoint import EndpointConfig
from agentload.flags import (
    ENDPOINT,
    EXTERNAL,
    LOAD,
    OUTPUT,
    REPLAY,
    WORKLOAD,
    flag,
)
from agentload.plugins import AGENTS, USERS, WORKLOADS
from agentload.redact import REDACTED as _REDACTED
from agentload.redact import redact as _redact
from agentload.safeio import NotRegularFile, read_regular
from agentload.sim.settings import SimConfig, SimKnobs, fault_kind_list, is_str_list
from agentload.units import check_slo_key, parse_duration, parse_slo

CONFIG_SCHEMA = "agentload.config/1"

# Roles every episode uses; further named roles (e.g. a judge or a second agent model) may be
# added to `endpoints` for multi-model setups.
CORE_ROLES = ("agent", "user")


class ConfigError(Exception):
    """A bad configuration or flag: one message, reported with exit code 2."""


# Numbers are what they look like: `concurrency: true` or `trials: 2.5` is an error, not 1 or 2,
# and no float is infinite or NaN. Every count and duration has a ceiling far above any real
# run, so that a typo (1e30) is refused here instead of exhausting memory later.
_STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
MAX_CONFIG_BYTES = 4 * 1024 * 1024
MAX_CONFIG_DEPTH = 64
MAX_CONFIG_VALUES = 100_000


class Warmup(BaseModel):
    """Leading episodes that run normally but are excluded from statistics."""

    model_config = _STRICT

    episodes: int = Field(
        0, ge=0, le=MAX_EPISODES, description="The first N episodes started are warmup."
    )
    seconds: float = Field(
        0.0, ge=0, le=DAY_S, description="Episodes started in the first S s are warmup."
    )

    @model_validator(mode="before")
    @classmethod
    def _from_scalar(cls, value: Any) -> Any:
        # `5` means five episodes, `10s` ten seconds.
        if value is None:
            return {}
        if isinstance(value, bool):
            raise ValueError("warmup takes a number of episodes (5) or a duration (10s)")
        if isinstance(value, int):
            return {"episodes": value}
        if isinstance(value, str):
            text = value.strip()
            if text.isdigit():
                return {"episodes": int(text)}
            return {"seconds": parse_duration(text)}
        if isinstance(value, float):
            raise ValueError("warmup takes a whole number of episodes (5) or a duration (10s)")
        return value

    @property
    def active(self) -> bool:
        return self.episodes > 0 or self.seconds > 0

    def describe(self) -> str:
        if self.episodes:
            return f"{self.episodes} episodes"
        if self.seconds:
            return f"{self.seconds:g}s"
        return "none"


# max_tokens of agent and user calls when neither the workload nor the endpoint sets one
# (docs/engines.md, "Request defaults", gives the measured turn lengths behind them).
DEFAULT_AGENT_MAX_TOKENS = 1024
DEFAULT_USER_MAX_TOKENS = 256


class ToolLatencyConfig(BaseModel):
    """Simulated time a tool takes, drawn per call from an rng seeded per episode."""

    model_config = _STRICT

    kind: Literal["none", "constant", "uniform", "lognormal"] = "none"
    mean_s: float = Field(0.0, ge=0, le=3600, description="Mean simulated tool execution time.")
    spread: float = Field(0.5, ge=0, le=100, description="uniform: ±spread×mean; lognormal: sigma.")

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        # `lognormal:0.2s` (the --tool-latency flag) names the kind and the mean.
        if isinstance(value, str):
            kind, _, mean = value.partition(":")
            return {"kind": kind.strip(), "mean_s": parse_duration(mean.strip() or 0)}
        return value

    def sampler(self, seed: int) -> random.Random | None:
        """The rng of one episode's tool times (None: tools take no simulated time)."""
        if self.kind == "none" or self.mean_s <= 0:
            return None
        return random.Random(seed ^ 0x7A11CE)

    def draw(self, rng: random.Random) -> float:
        """One tool's simulated execution time."""
        m = self.mean_s
        if self.kind == "constant":
            return m
        if self.kind == "uniform":
            return max(0.0, rng.uniform(m * (1 - self.spread), m * (1 + self.spread)))
        sigma = self.spread  # lognormal, with mean m
        return rng.lognormvariate(math.log(m) - sigma * sigma / 2, sigma)


class Tau2Config(BaseModel):
    """The τ²-bench domain family (tau2-airline, tau2-retail, tau2-telecom, tau2-mock)."""

    model_config = _STRICT

    data: Annotated[str | None, flag("--tau2-data", panel=WORKLOAD, metavar="DIR")] = Field(
        None,
        description="τ²-bench data folder for the tau2-* domains (its data/tau2/domains, or a "
        "checkout); default: the AGENTLOAD_TAU2_DATA environment variable.",
    )
    split: Annotated[str, flag("--split", panel=WORKLOAD, metavar="NAME")] = Field(
        "base",
        min_length=1,
        description="τ² task split a whole tau2-* domain runs: base, train, test (telecom "
        "also small, full).",
    )
    max_steps: int = Field(
        200, ge=1, le=100_000, description="τ² steps per episode (messages passed), as τ²'s."
    )
    max_errors: int = Field(
        10, ge=1, le=100_000, description="Failed tool calls that end a τ² episode, as τ²'s."
    )


_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # an RFC 9110 token

# Request body keys agentload sets on every call, and where each is configured instead: an
# extra_body copy would override them (`stream: false` breaks every streamed call).
CORE_BODY_KEYS = {
    "model": "set the endpoint's model (--model)",
    "messages": "the workload builds them",
    "tools": "the workload builds them",
    "tool_choice": "the agent sets it",
    "stream": "set the endpoint's stream (--no-stream)",
    "stream_options": "sent with streaming (stream)",
    "max_tokens": "set max_tokens (--max-tokens, --agent-max-tokens, --user-max-tokens)",
    "temperature": "set temperature (--temperature)",
    "seed": "set workload.request_seed (--request-seed)",
}


def _line_error(loc: tuple[str, ...], value: Any, msg: str) -> Any:
    """One error of a ValidationError raised by a validator, at a path below its field."""
    from pydantic_core import InitErrorDetails, PydanticCustomError

    return InitErrorDetails(
        type=PydanticCustomError("value_error", "{msg}", {"msg": msg}), loc=loc, input=value
    )


def _agents_help() -> str:

    return "Agent strategy: " + " | ".join(AGENTS.names()) + "."


def _users_help() -> str:

    return "User simulator: " + " | ".join(USERS.names()) + "."


class WorkloadConfig(BaseModel):
    """Which episodes run and how the agent and user behave."""

    model_config = _STRICT

    domains: Annotated[
        list[str], flag("--domains", panel=WORKLOAD, metavar="LIST", type=str | None)
    ] = Field(
        default_factory=list,
        description="Domains whose tasks run, e.g. airline,retail; empty = all built-in.",
    )
    tasks: Annotated[
        list[str], flag("--tasks", panel=WORKLOAD, metavar="LIST", type=str | None)
    ] = Field(
        default_factory=list,
        description="Task selectors: airline/000-019, retail/005, retail (whole domain).",
    )
    trials: Annotated[int, flag("--trials", "-k", panel=WORKLOAD, metavar="K")] = Field(
        1, ge=1, le=100_000, description="Trials per task (k of pass^k)."
    )
    shuffle: Annotated[bool, flag("--shuffle/--no-shuffle", panel=WORKLOAD)] = Field(
        False, description="Shuffle the task order of each trial round."
    )
    seed: Annotated[int, flag("--seed", panel=WORKLOAD, metavar="N")] = Field(
        0, ge=0, le=INT64_MAX, description="Base seed: task order, episode seeds, arrivals."
    )
    request_seed: Annotated[
        Literal["none", "episode"] | int,
        flag("--request-seed", panel=WORKLOAD, metavar="SEED", type=str | None),
    ] = Field(
        "none",
        description="`seed` sent with each LLM call: none (the default: the server samples "
        "as it does for any client), episode (the episode's seed, derived from `seed`, task "
        "and trial) or a fixed integer.",
    )
    agent: Annotated[str, flag("--agent", panel=WORKLOAD, metavar="NAME", help=_agents_help)] = (
        Field("tool-calling", description="Agent strategy (a registered name).")
    )
    user: Annotated[str, flag("--user", panel=WORKLOAD, metavar="NAME", help=_users_help)] = Field(
        "llm", description="User simulator (a registered name)."
    )
    few_shot: Annotated[str | None, flag("--few-shot", panel=WORKLOAD, metavar="FILE")] = Field(
        None,
        description="Example conversations of the few-shot agent: a JSONL file, one example "
        "a line (docs/episodes.md).",
    )
    temperature: float | None = Field(None, ge=0, le=100)
    max_steps: Annotated[int, flag("--max-steps", panel=WORKLOAD, metavar="N")] = Field(
        30, ge=1, le=MAX_STEPS, description="Agent LLM calls per episode."
    )
    max_user_turns: int = Field(20, ge=1, le=MAX_STEPS)
    budget_s: float | None = Field(
        900.0, gt=0, le=30 * DAY_S, description="Wall-time budget per episode."
    )
    max_errors: int = Field(5, ge=1, le=MAX_STEPS)
    keep_reasoning: bool = False
    chat_template_kwargs: dict[str, Any] | None = None
    tool_latency: Annotated[
        ToolLatencyConfig,
        flag(
            "--tool-latency",
            panel=WORKLOAD,
            metavar="KIND:MEAN",
            type=str | None,
            help="Simulated tool execution time, KIND:MEAN: lognormal:0.2s, constant:50ms, "
            "uniform:1s.",
        ),
    ] = Field(default_factory=ToolLatencyConfig)
    tau2: Tau2Config = Field(default_factory=Tau2Config)
    agent_max_tokens: Annotated[
        int | None, flag("--agent-max-tokens", panel=WORKLOAD, metavar="N")
    ] = Field(
        None,
        ge=1,
        le=MAX_TOKENS,
        description="max_tokens of agent calls; default: the agent endpoint's max_tokens, "
        f"else {DEFAULT_AGENT_MAX_TOKENS}.",
    )
    user_max_tokens: Annotated[
        int | None, flag("--user-max-tokens", panel=WORKLOAD, metavar="N")
    ] = Field(
        None,
        ge=1,
        le=MAX_TOKENS,
        description="max_tokens of user-simulator calls; default: the user endpoint's "
        f"max_tokens, else {DEFAULT_USER_MAX_TOKENS}.",
    )

    @field_validator("request_seed", mode="before")
    @classmethod
    def _request_seed(cls, value: Any) -> Any:
        if value is None:
            return "none"
        if isinstance(value, str):
            text = value.strip().lower()
            if text.lstrip("-").isdigit():
                return int(text)
            if text not in ("none", "episode"):
                raise ValueError("expected none, episode or an integer seed")
            return text
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError("expected none, episode or an integer seed")
        return value

    @field_validator("tasks", "domains", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        # An empty selector must not silently mean "every task".
        if isinstance(value, str):
            parts = [p.strip() for p in value.split(",")]
            if not any(parts):
                raise ValueError("empty selection; leave the setting out to run every task")
            value = parts
        if isinstance(value, list) and any(isinstance(p, str) and not p.strip() for p in value):
            raise ValueError("empty entry in the list (a stray comma?)")
        return value

    @field_validator("budget_s", mode="before")
    @classmethod
    def _budget(cls, value: Any) -> Any:
        return None if value is None else parse_duration(value)

    @field_validator("agent")
    @classmethod
    def _agent(cls, value: str) -> str:

        return AGENTS.check(value)

    @field_validator("user")
    @classmethod
    def _user(cls, value: str) -> str:

        return USERS.check(value)

    @field_validator("few_shot")
    @classmethod
    def _few_shot(cls, value: str | None) -> str | None:
        # Read now, so that a bad line is one configuration error before any episode; the
        # few-shot strategy of this process then takes its examples from this file.
        if value is not None:
            use_few_shot_file(value)
        return value

    @model_validator(mode="after")
    def _few_shot_needed(self) -> WorkloadConfig:
        if self.agent == "few-shot" and self.few_shot is None:
            raise ValueError(FEW_SHOT_MISSING)
        return self


DEFAULT_CONCURRENCY = 8
"""Sessions in flight of a closed loop that names no concurrency."""


class LoadConfig(BaseModel):
    """How episodes are issued: closed loop (concurrency) or open loop (rate)."""

    model_config = _STRICT

    concurrency: Annotated[int | None, flag("--concurrency", "-c", panel=LOAD, metavar="N")] = (
        Field(
            None,
            ge=1,
            le=MAX_CONCURRENCY,
            description=f"Closed loop: active sessions ({DEFAULT_CONCURRENCY} when no rate is "
            "given).",
        )
    )
    rate: Annotated[float | None, flag("--rate", "-r", panel=LOAD, metavar="R")] = Field(
        None, gt=0, le=1e6, description="Open loop: session arrivals per second."
    )
    burstiness: Annotated[float, flag("--burstiness", panel=LOAD, metavar="X")] = Field(
        1.0,
        gt=0,
        le=1000,
        description="Gamma shape of inter-arrival times; 1 = Poisson, <1 burstier.",
    )
    max_concurrency: Annotated[int | None, flag("--max-concurrency", panel=LOAD, metavar="N")] = (
        Field(
            None,
            ge=1,
            le=MAX_CONCURRENCY,
            description="Open loop: cap on active sessions (arrivals beyond it queue).",
        )
    )
    num_episodes: Annotated[int | None, flag("--num-episodes", "-n", panel=LOAD, metavar="N")] = (
        Field(
            None, ge=1, le=MAX_EPISODES, description="Measured sessions (default: tasks × trials)."
        )
    )
    duration_s: Annotated[float | None, flag("--duration", panel=LOAD, type=str | None)] = Field(
        None, gt=0, le=365 * DAY_S, description="Stop issuing sessions after this, e.g. 10m."
    )
    warmup: Annotated[
        Warmup, flag("--warmup", panel=LOAD, metavar="N|DURATION", type=str | None)
    ] = Field(
        default_factory=Warmup,
        description="Sessions (5) or time (10s) at the start left out of the statistics.",
    )
    drain_timeout_s: Annotated[
        float, flag("--drain-timeout", panel=LOAD, type=str | None, resume=True)
    ] = Field(
        30.0,
        ge=0,
        le=DAY_S,
        description="On stop or interrupt, wait this long for sessions in flight.",
    )
    lag_interval_s: float = Field(0.02, ge=0.001, le=10, description="Event-loop lag probe period.")
    retry_infra: Annotated[int, flag("--retry-infra", panel=LOAD, metavar="N")] = Field(
        2,
        ge=0,
        le=100,
        description="Run an episode that ended on an infrastructure error (an endpoint "
        "outage) again, up to N times.",
    )
    max_infra_error_share: Annotated[
        float, flag("--max-infra-error-share", panel=LOAD, metavar="X")
    ] = Field(
        0.1,
        ge=0,
        le=1,
        description="Exit 1 when more than this share of episodes ended on infrastructure errors.",
    )
    outage_timeout_s: Annotated[
        float, flag("--outage-timeout", panel=LOAD, type=str | None, resume=True)
    ] = Field(
        120.0,
        gt=0,
        le=DAY_S,
        description="Stop the run when the endpoint has been down for this long.",
    )
    workers: Annotated[
        int | Literal["auto"], flag("--workers", panel=LOAD, metavar="N", type=str | None)
    ] = Field(
        "auto",
        description="Worker processes that run the sessions: N, or auto (more than one only "
        "for a large concurrency on a machine with cores to spare; adds workers when one "
        "saturates).",
    )

    @field_validator("workers", mode="before")
    @classmethod
    def _workers(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        ok = value == "auto" or (
            isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 1024
        )
        if not ok:
            raise ValueError("workers must be auto or a whole number from 1 to 1024")
        return value

    @field_validator("duration_s", "drain_timeout_s", "outage_timeout_s", mode="before")
    @classmethod
    def _dur(cls, value: Any) -> Any:
        return None if value is None else parse_duration(value)

    @model_validator(mode="after")
    def _mode(self) -> LoadConfig:
        if self.rate is not None and self.concurrency is not None:
            raise ValueError(
                "give either concurrency (closed loop) or rate (open loop), not both; "
                "use max_concurrency to cap an open loop"
            )
        if self.rate is None and self.max_concurrency is not None:
            raise ValueError("max_concurrency applies to an open loop (rate); use concurrency")
        return self

    @property
    def mode(self) -> Literal["closed", "open"]:
        return "open" if self.rate is not None else "closed"

    @property
    def effective_concurrency(self) -> int:
        return self.concurrency or DEFAULT_CONCURRENCY


class SimSettings(SimKnobs):
    """The embedded simulator started when no endpoint is configured."""

    model_config = _STRICT

    fault_kinds: list[str] | None = None
    options: dict[str, Any] = Field(
        default_factory=dict, description="Any further SimConfig field (see agentload sim)."
    )

    @field_validator("fault_kinds", mode="before")
    @classmethod
    def _kinds(cls, value: Any) -> Any:
        if isinstance(value, str) or is_str_list(value):
            return fault_kind_list(value)
        return value

    @field_validator("options")
    @classmethod
    def _options(cls, value: dict[str, Any]) -> dict[str, Any]:
        unknown = [k for k in value if k not in SimConfig.model_fields]
        if unknown:
            raise ValueError(f"{unknown[0]}: not a simulator setting (see `agentload sim --help`)")
        try:
            SimConfig.model_validate(value)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            msg = str(err["msg"]).removeprefix("Value error, ")
            got = "" if err["type"] in ("value_error", "missing") else f" (got {err['input']!r})"
            raise ValueError(f"{where}: {msg}{got}"[:300]) from None
        return value


class MetricsConfig(BaseModel):
    model_config = _STRICT

    enabled: Annotated[
        bool,
        flag(
            "--no-metrics",
            panel=OUTPUT,
            sets=False,
            resume=True,
            help="Do not scrape server metrics.",
        ),
    ] = Field(True, description="Scrape the server's Prometheus metrics.")
    interval_s: Annotated[
        float,
        flag("--metrics-interval", panel=OUTPUT, type=str | None, resume=True),
    ] = Field(1.0, ge=0.1, le=DAY_S, description="Server-metrics scrape period.")

    @field_validator("interval_s", mode="before")
    @classmethod
    def _dur(cls, value: Any) -> Any:
        return parse_duration(value)


class ReplayConfig(BaseModel):
    """The `replay` kind: recorded conversations issued turn by turn (docs/replay.md)."""

    model_config = ConfigDict(extra="forbid")

    dataset: str | None = Field(None, description="Dataset file (JSONL).")
    format: Annotated[
        Literal["auto", "mlperf", "trajectories", "openai", "sharegpt", "mooncake"],
        flag("--format", panel=REPLAY, metavar="FORMAT", type=str | None),
    ] = Field("auto", description="auto | mlperf | trajectories | openai | sharegpt | mooncake.")
    history: Annotated[
        Literal["dataset", "live"], flag("--history", panel=REPLAY, metavar="MODE", type=str | None)
    ] = Field(
        "dataset",
        description="dataset (send the recorded history) | live (send the server's answers).",
    )
    num_conversations: Annotated[
        int | None, flag("--num-conversations", panel=REPLAY, metavar="N")
    ] = Field(None, ge=1, description="Replay the first N conversations.")
    repeat: Annotated[int, flag("--repeat", panel=REPLAY, metavar="K")] = Field(
        1, ge=1, description="Passes over the dataset (the trial index)."
    )
    salt: Annotated[bool, flag("--salt", panel=REPLAY, sets=True)] = Field(
        False, description="Salt prompts per repeat and conversation (MLPerf's scheme)."
    )
    delay_scale: Annotated[
        float,
        flag("--delay-scale", panel=REPLAY, metavar="X"),
        flag("--no-delays", panel=REPLAY, sets=0.0, help="Ignore recorded delays."),
    ] = Field(1.0, ge=0, description="Scale recorded delay_seconds by X; 0 = none.")
    turn_timeout_s: Annotated[
        float | None, flag("--turn-timeout", panel=REPLAY, type=str | None)
    ] = Field(None, gt=0, description="Abort a conversation whose turn takes longer, e.g. 60s.")
    on_divergence: Annotated[
        Literal["continue", "stop"],
        flag("--on-divergence", panel=REPLAY, metavar="WHAT", type=str | None),
    ] = Field("continue", description="Live history: continue (with the recorded results) | stop.")
    ignore_eos: Annotated[bool | None, flag("--ignore-eos/--no-ignore-eos", panel=REPLAY)] = Field(
        None,
        description="Output length = the recorded answer's (default: on the simulator only).",
    )
    default_max_tokens: int | None = Field(
        None, ge=1, description="Max tokens of turns the dataset gives none and no answer for."
    )
    trace_block_tokens: Annotated[int, flag("--trace-block-tokens", panel=REPLAY, metavar="N")] = (
        Field(512, ge=1, le=1 << 20, description="Mooncake traces: tokens per hash_ids block.")
    )
    trace_tokenizer: Annotated[
        str | None, flag("--trace-tokenizer", panel=REPLAY, metavar="FILE")
    ] = Field(
        None,
        description="Mooncake traces: tokenizer.json for prompts of exactly input_length "
        "tokens (default: estimated, about 4 characters per token).",
    )

    @field_validator("turn_timeout_s", mode="before")
    @classmethod
    def _dur(cls, value: Any) -> Any:
        return None if value is None else parse_duration(value)


class ExternalConfig(BaseModel):
    """The `external` kind: an outside agent plays the agent role (docs/external-agents.md)."""

    model_config = ConfigDict(extra="forbid")

    adapter: Annotated[str, flag("--agent-adapter", panel=EXTERNAL, metavar="NAME")] = Field(
        "command", description="How to reach the external agent: command | openai-agent | openclaw."
    )
    command: Annotated[
        str | list[str] | None,
        flag("--agent-command", panel=EXTERNAL, metavar="CMD", type=str | None),
    ] = Field(
        None,
        description="command adapter: run per user turn (message on stdin, reply on stdout); "
        "{placeholders} such as {session}, {mcp_url} are filled in. Default: agentload's "
        "reference agent.",
    )
    url: Annotated[str | None, flag("--agent-url", panel=EXTERNAL, metavar="URL")] = Field(
        None, description="openai-agent adapter: the agent's OpenAI-compatible base URL."
    )
    api_key_env: str | None = Field(
        None, description="openai-agent adapter: environment variable holding the agent's key."
    )
    turn_timeout_s: Annotated[
        float, flag("--agent-turn-timeout", panel=EXTERNAL, type=str | None)
    ] = Field(300.0, gt=0, description="Longest one agent turn may take.")
    env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment of the agent's commands."
    )
    openclaw: str = Field("openclaw", description="openclaw adapter: the executable.")

    @field_validator("turn_timeout_s", mode="before")
    @classmethod
    def _dur(cls, value: Any) -> Any:
        return parse_duration(value)


SYNTHETIC = "Synthetic (--workload synthetic)"
"""Help panel of the synthetic kind's flags."""


class TokenLengths(BaseModel):
    """A token length, fixed or drawn per request: `512`, `uniform:256-768` (inclusive),
    `normal:512,64` (mean, standard deviation; rounded, at least 1)."""

    model_config = _STRICT

    dist: Literal["fixed", "uniform", "normal"] = "fixed"
    value: int = Field(512, ge=0, le=MAX_TOKENS, description="fixed: the length.")
    low: int = Field(0, ge=0, le=MAX_TOKENS, description="uniform: the shortest.")
    high: int = Field(0, ge=0, le=MAX_TOKENS, description="uniform: the longest.")
    mean: float = Field(0.0, ge=0, le=MAX_TOKENS, description="normal: the mean.")
    sd: float = Field(0.0, ge=0, le=MAX_TOKENS, description="normal: the standard deviation.")

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError(_LENGTHS_SYNTAX)
        if isinstance(value, int):
            return {"dist": "fixed", "value": value}
        if not isinstance(value, str):
            return value
        text = value.strip().lower()
        dist, sep, args = text.partition(":")
        try:
            if not sep and dist.isdigit():
                return {"dist": "fixed", "value": int(dist)}
            if dist == "uniform":
                low, high = (int(x) for x in args.split("-"))
                return {"dist": "uniform", "low": low, "high": high}
            if dist == "normal":
                mean, sd = (float(x) for x in args.split(","))
                return {"dist": "normal", "mean": mean, "sd": sd}
        except ValueError:
            pass
        raise ValueError(f"{_LENGTHS_SYNTAX}, got {value!r}")

    @model_validator(mode="after")
    def _order(self) -> TokenLengths:
        if self.dist == "uniform" and self.low > self.high:
            raise ValueError(f"uniform:{self.low}-{self.high}: the low end is above the high end")
        return self

    def draw(self, rng: random.Random) -> int:
        if self.dist == "uniform":
            return rng.randint(self.low, self.high)
        if self.dist == "normal":
            return max(1, round(rng.gauss(self.mean, self.sd)))
        return self.value

    def describe(self) -> str:
        if self.dist == "uniform":
            return f"uniform:{self.low}-{self.high}"
        if self.dist == "normal":
            return f"normal:{self.mean:g},{self.sd:g}"
        return str(self.value)


_LENGTHS_SYNTAX = "expected a token length: 512, uniform:256-768 or normal:512,64"


class SyntheticConfig(BaseModel):
    """The `synthetic` kind: generated prompts of given token lengths, single requests or
    multi-turn sessions (docs/synthetic.md)."""

    model_config = _STRICT

    input_tokens: Annotated[
        TokenLengths,
        flag("--input-tokens", panel=SYNTHETIC, metavar="LEN", type=str | None),
    ] = Field(
        default_factory=lambda: TokenLengths(value=512),
        description="Tokens of each request's new user message: 512, uniform:256-768 or "
        "normal:512,64 (default 512).",
    )
    output_tokens: Annotated[
        TokenLengths,
        flag("--output-tokens", panel=SYNTHETIC, metavar="LEN", type=str | None),
    ] = Field(
        default_factory=lambda: TokenLengths(value=128),
        description="Tokens each answer is asked for (max_tokens, with --synthetic-ignore-eos "
        "also the least): 128, uniform:64-256 or normal:128,32 (default 128).",
    )
    num_requests: Annotated[int | None, flag("--num-requests", panel=SYNTHETIC, metavar="N")] = (
        Field(
            None,
            ge=1,
            le=MAX_EPISODES,
            description="Requests (multi-turn: sessions) to issue; default 100, or unbounded "
            "with --duration alone; --num-episodes, when given, wins.",
        )
    )
    tokenizer: Annotated[str | None, flag("--tokenizer", panel=SYNTHETIC, metavar="FILE")] = Field(
        None,
        description="The served model's tokenizer.json: exact prompt lengths (needs the "
        "'tokenizers' package); without it lengths are estimated (~4 characters a token).",
    )
    ignore_eos: Annotated[
        bool, flag("--synthetic-ignore-eos/--no-synthetic-ignore-eos", panel=SYNTHETIC)
    ] = Field(
        True,
        description="Enforce the output length: send ignore_eos and min_tokens beside "
        "max_tokens (vLLM, SGLang and the simulator accept them).",
    )
    turns: Annotated[
        TokenLengths, flag("--turns", panel=SYNTHETIC, metavar="N", type=str | None)
    ] = Field(
        default_factory=lambda: TokenLengths(value=1),
        description="Turns per session: 1 (single requests), 5 or uniform:2-8; each turn "
        "sends the history so far plus a new message (default 1).",
    )
    shared_prefix_tokens: Annotated[
        int, flag("--shared-prefix-tokens", panel=SYNTHETIC, metavar="N")
    ] = Field(
        0,
        ge=0,
        le=MAX_TOKENS,
        description="A system prompt of N tokens shared by every session (prefix-cache "
        "hits by design); 0: none, and no two prompts share a start.",
    )
    think_time_s: Annotated[float, flag("--think-time", panel=SYNTHETIC, type=str | None)] = Field(
        0.0, ge=0, le=DAY_S, description="Pause between a session's turns, e.g. 2s."
    )
    tool_result_tokens: Annotated[
        TokenLengths | None,
        flag("--tool-result-tokens", panel=SYNTHETIC, metavar="LEN", type=str | None),
    ] = Field(
        None,
        description="Multi-turn: every --tool-every-th turn sends a tool result of this "
        "length (after a tool call added to the previous answer) in place of a user message.",
    )
    tool_every: Annotated[int, flag("--tool-every", panel=SYNTHETIC, metavar="K")] = Field(
        2,
        ge=1,
        le=MAX_STEPS,
        description="With --tool-result-tokens: turns K, 2K, 3K, … (the first is turn 0) "
        "send a tool result.",
    )

    @field_validator("think_time_s", mode="before")
    @classmethod
    def _dur(cls, value: Any) -> Any:
        return parse_duration(value)

    @field_validator("tokenizer")
    @classmethod
    def _tokenizer(cls, value: str | None) -> str | None:
        if value is not None and not Path(value).is_file():
            raise ValueError(f"{value}: no such file (a tokenizer.json)")
        return value

    @field_validator("turns")
    @classmethod
    def _turns(cls, value: TokenLengths) -> TokenLengths:
        lowest = {"fixed": value.value, "uniform": value.low, "normal": 1}[value.dist]
        if lowest < 1 or max(value.value, value.high, round(value.mean)) > MAX_STEPS:
            raise ValueError(f"turns per session run from 1 to {MAX_STEPS}")
        return value

    @property
    def multi_turn(self) -> bool:
        return not (self.turns.dist == "fixed" and self.turns.value == 1)


class RayConfig(BaseModel):
    """Workers as Ray actors on an existing Ray cluster (docs/distributed.md)."""

    model_config = _STRICT

    address: Annotated[str, flag("--ray", panel=LOAD, metavar="ADDRESS", resume=True)] = Field(
        min_length=1,
        description="Run the workers as Ray actors on the Ray cluster at ADDRESS: host:port of "
        "its head (GCS), ray://host:port, or auto; needs agentload[ray] on every node. "
        "--workers then counts actors.",
    )
    cpus_per_worker: float = Field(
        1.0, gt=0, le=1024, description="CPUs each worker actor asks of the cluster."
    )
    namespace: str = Field("agentload", min_length=1, description="Ray namespace of the actors.")
    start_timeout_s: float = Field(
        120.0, gt=0, le=DAY_S, description="How long a worker actor may wait to be placed."
    )

    @model_validator(mode="before")
    @classmethod
    def _from_scalar(cls, value: Any) -> Any:
        # `ray: auto` or `ray: 10.0.0.1:6379` names the address alone.
        return {"address": value} if isinstance(value, str) else value


class RunConfig(BaseModel):
    """Everything one run needs; saved (redacted) as config.yaml in the results folder."""

    model_config = _STRICT

    schema_: str = Field(CONFIG_SCHEMA, alias="schema")
    out: Annotated[str, flag("--out", "-o", panel=OUTPUT, metavar="DIR")] = Field(
        "results/run", min_length=1, description="Results folder."
    )
    run_id: Annotated[str | None, flag("--run-id", panel=OUTPUT, metavar="ID")] = Field(
        None, description="Run identifier; default: derived from the start time."
    )
    kind: Annotated[str, flag("--workload", panel=WORKLOAD, metavar="KIND")] = Field(
        "episodes",
        description="Workload kind: episodes (agentload's agents) | external (an outside "
        "agent) | replay | synthetic (generated prompts of given lengths) | … (a registered "
        "name).",
    )
    endpoints: dict[str, EndpointConfig] = Field(
        default_factory=dict,
        description="Endpoint per role (agent, user, …); none = the embedded simulator.",
    )
    sim: SimSettings = Field(default_factory=SimSettings)
    workload: WorkloadConfig = Field(default_factory=WorkloadConfig)
    load: LoadConfig = Field(default_factory=LoadConfig)
    replay: ReplayConfig = Field(default_factory=ReplayConfig)
    external: ExternalConfig = Field(default_factory=ExternalConfig)
    synthetic: SyntheticConfig = Field(default_factory=SyntheticConfig)
    slo: Annotated[dict[str, float], flag("--slo", panel=LOAD, metavar="SPEC", type=str | None)] = (
        Field(
            default_factory=dict,
            description="Service-level objectives, e.g. ttft_p90=2s,e2e_p99=10s (YAML: a mapping).",
        )
    )
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    ray: RayConfig | None = Field(
        None, description="Run the workers as Ray actors on this Ray cluster (none: locally)."
    )
    report: Annotated[
        bool,
        flag("--no-report", panel=OUTPUT, sets=False, resume=True, help="summary.json only."),
    ] = Field(True, description="Write report.md / report.html / charts.")
    preflight: Annotated[
        bool,
        flag(
            "--no-preflight",
            panel=ENDPOINT,
            sets=False,
            resume=True,
            help="Skip the endpoint checks before the first episode (model, engine, tool calling).",
        ),
    ] = Field(
        True,
        description="Check every endpoint (model, engine, usage, tool calling) before the "
        "first episode; a failure stops the run with exit code 2.",
    )

    @field_validator("schema_", mode="before")
    @classmethod
    def _schema(cls, value: Any) -> Any:
        if value != CONFIG_SCHEMA:
            raise ValueError(f"unsupported config schema; this agentload reads {CONFIG_SCHEMA}")
        return value

    @field_validator("out")
    @classmethod
    def _out(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the results folder must not be empty")
        if "\x00" in value:
            raise ValueError("the results folder name holds a NUL byte")
        return value

    @field_validator("run_id")
    @classmethod
    def _run_id(cls, value: str | None) -> str | None:
        # The id becomes part of session ids and file contents, never a path.
        if value is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", value):
            raise ValueError("use 1-128 letters, digits, '.', '_' or '-'")
        return value

    @field_validator("slo", mode="before")
    @classmethod
    def _slo(cls, value: Any) -> Any:
        if isinstance(value, str | Mapping):
            return parse_slo(value)
        return value

    @field_validator("kind")
    @classmethod
    def _kind(cls, value: str) -> str:

        return WORKLOADS.check(value)

    @field_validator("endpoints", mode="before")
    @classmethod
    def _named(cls, value: Any) -> Any:
        # The endpoint's name defaults to its role, so records say which role's server it was.
        if isinstance(value, Mapping):
            out = {}
            for role, ep in value.items():
                if isinstance(ep, Mapping) and "name" not in ep:
                    ep = {**ep, "name": str(role)}
                out[role] = ep
            return out
        return value

    @field_validator("endpoints")
    @classmethod
    def _request_parts(cls, value: dict[str, EndpointConfig]) -> dict[str, EndpointConfig]:
        errors: list[Any] = []
        for role, ep in value.items():
            for name in ep.headers:
                if not _HEADER_NAME.fullmatch(name):
                    errors.append(
                        _line_error(
                            (role, "headers"),  # the name itself may hold a newline
                            name,
                            "not a valid HTTP header name (letters, digits and "
                            "!#$%&'*+-.^_`|~ only, no spaces)",
                        )
                    )
            for key in ep.extra_body:
                if key in CORE_BODY_KEYS:
                    errors.append(
                        _line_error(
                            (role, "extra_body", key),
                            ep.extra_body[key],
                            f"{key!r} is part of the request agentload builds; "
                            f"{CORE_BODY_KEYS[key]}",
                        )
                    )
        if errors:
            raise ValidationError.from_exception_data("endpoints", errors)
        return value

    @model_validator(mode="after")
    def _roles(self) -> RunConfig:
        if self.endpoints:
            missing = [r for r in CORE_ROLES if r not in self.endpoints]
            if "user" in missing and "agent" in self.endpoints:
                # One endpoint plays both roles unless the user has its own.
                self.endpoints["user"] = self.endpoints["agent"].model_copy(
                    update={"name": self.endpoints["agent"].name}
                )
                missing.remove("user")
            if missing:
                raise ValueError(f"endpoints: missing role(s) {', '.join(missing)}")
        # Resolved here so that config.yaml states the max_tokens every call carries.
        w = self.workload
        if w.agent_max_tokens is None:
            ep = self.endpoints.get("agent")
            w.agent_max_tokens = (ep and ep.max_tokens) or DEFAULT_AGENT_MAX_TOKENS
        if w.user_max_tokens is None:
            ep = self.endpoints.get("user")
            w.user_max_tokens = (ep and ep.max_tokens) or DEFAULT_USER_MAX_TOKENS
        for key in self.slo:
            check_slo_key(key)
        return self

    @property
    def embedded(self) -> bool:
        return not self.endpoints


# ---- loading, merging, error messages ----------------------------------------------------


def set_path(data: dict[str, Any], dotted: str, value: Any) -> None:
    node = data
    parts = dotted.split(".")
    for p in parts[:-1]:
        nxt = node.get(p)
        if not isinstance(nxt, dict):
            nxt = {}
            node[p] = nxt
        node = nxt
    node[parts[-1]] = value


def deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (YAML would keep the last one silently)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            dup = key in seen
        except TypeError:  # an unhashable key (a list or mapping used as a key)
            raise yaml.constructor.ConstructorError(
                None, None, "a key must be a plain value", key_node.start_mark
            ) from None
        if dup:
            first = seen[key].start_mark.line + 1
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first on line {first})", key_node.start_mark
            )
        seen[key] = key_node
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,
)


def _shape(node: yaml.Node) -> tuple[int, int]:
    """(nesting depth, values after expanding aliases) of a composed YAML node, iteratively:
    a deep file must not exhaust the stack, and aliases must not expand into a huge one."""
    order: list[yaml.Node] = []
    depth_of: dict[int, int] = {}
    stack: list[tuple[yaml.Node, int]] = [(node, 1)]
    while stack:
        n, d = stack.pop()
        if id(n) in depth_of:  # an alias: a node already walked
            depth_of[id(n)] = max(depth_of[id(n)], d)
            continue
        depth_of[id(n)] = d
        order.append(n)
        stack.extend((c, d + 1) for c in _children(n))
    size: dict[int, int] = {}
    for n in reversed(order):  # children before parents
        size[id(n)] = min(1 + sum(size.get(id(c), 1) for c in _children(n)), 1 << 40)
    return max(depth_of.values()), size[id(node)]


def _children(n: yaml.Node) -> list[yaml.Node]:
    if isinstance(n, yaml.MappingNode):
        return [x for pair in n.value for x in pair]
    if isinstance(n, yaml.SequenceNode):
        return list(n.value)
    return []


_BRACKETS = re.compile(r"[\[\]{}]")


def _flow_depth(text: str) -> int:
    """Deepest nesting of [ ] and { } (brackets inside quoted strings count too: harmless)."""
    depth = deepest = 0
    for m in _BRACKETS.finditer(text):
        depth += 1 if m.group() in "[{" else -1
        if depth > deepest:
            deepest = depth
            if deepest > MAX_CONFIG_DEPTH:
                break
    return deepest


def _decode_config(path: Path, raw: bytes) -> str:
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")) or (len(raw) > 1 and raw[1:2] == b"\x00"):
        raise ConfigError(f"{path}: the file is UTF-16 encoded; save it as UTF-8")
    if b"\x00" in raw:
        raise ConfigError(f"{path}: not a text file (it holds NUL bytes)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ConfigError(
            f"{path}:{line}: not UTF-8 text (byte 0x{raw[e.start]:02x}); save it as UTF-8"
        ) from None
    return text.removeprefix("\ufeff")


def read_yaml(path: Path) -> dict[str, Any]:
    """The mapping in a YAML config file; every problem is one ConfigError naming the file."""
    try:
        # Bounded, and only a regular file: /dev/zero never ends and a FIFO blocks.
        raw = read_regular(path, limit=MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(
                f"{path}: {path.stat().st_size} bytes is too large for a config file "
                f"(at most {MAX_CONFIG_BYTES // (1024 * 1024)} MiB)"
            )
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except NotRegularFile as e:
        raise ConfigError(f"{path}: cannot read: is {e.kind}, expected a regular file") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from None
    text = _decode_config(path, raw)
    if _flow_depth(text) > MAX_CONFIG_DEPTH:
        # Checked on the text: the YAML parser takes seconds to fail on deep flow nesting.
        raise ConfigError(
            f"{path}: nested more than {MAX_CONFIG_DEPTH} levels deep; "
            "a run configuration is a few levels deep"
        )
    try:
        loader = _StrictLoader(text)
        try:
            # Compose first: the depth check must run before construction recurses.
            node = loader.get_single_node()
            depth, values = _shape(node) if node is not None else (0, 0)
            if depth > MAX_CONFIG_DEPTH:
                raise ConfigError(
                    f"{path}: nested more than {MAX_CONFIG_DEPTH} levels deep; "
                    "a run configuration is a few levels deep"
                )
            if values > MAX_CONFIG_VALUES:
                raise ConfigError(
                    f"{path}: expands to more than {MAX_CONFIG_VALUES} values "
                    "(YAML aliases repeating large parts?)"
                )
            data = None if node is None else loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(f"{where}: invalid YAML: {problem}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to read") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of settings")
    if any(not isinstance(k, str) for k in data):
        bad = next(k for k in data if not isinstance(k, str))
        raise ConfigError(f"{path}: setting names are text, got {bad!r}")
    return data


def _fmt_loc(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc if not str(p).startswith(("function-", "union")))


def format_validation_error(
    err: ValidationError, *, source: str | None, flags: Mapping[str, str] | None = None
) -> str:
    """One readable message naming each bad field and where it came from."""
    flags = flags or {}
    lines = []
    for e in err.errors():
        loc = _fmt_loc(tuple(e.get("loc", ())))
        loc = loc.replace("schema_", "schema")
        msg = str(e.get("msg", "invalid")).removeprefix("Value error, ")
        flag = next(
            (
                flags[p]
                for p in sorted(flags, key=len, reverse=True)
                if loc == p or loc.startswith(p + ".")
            ),
            None,
        )
        inner = sorted({f for p, f in flags.items() if loc and p.startswith(loc + ".")})
        if flag is None and inner:
            # A check across fields (e.g. load's loop mode): name the flags that set them.
            where = ("flag " if len(inner) == 1 else "flags ") + ", ".join(inner)
        elif flag:
            where = f"flag {flag}"
        elif source:
            where = source
        else:
            where = "defaults"
        if e.get("type") == "extra_forbidden":
            msg = "unknown setting (see `agentload run --help` for the options)"
        field = f"field '{loc}'" if loc else "configuration"
        inp = e.get("input")
        shown = (
            ""
            if e.get("type") in ("extra_forbidden", "missing") or isinstance(inp, dict | list)
            else f" (got {inp!r})"
        )
        lines.append(f"{where}: {field}: {msg}{shown}")
    return "invalid configuration: " + "; ".join(lines)


def build_config(
    *,
    path: Path | None = None,
    data: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    flags: Mapping[str, str] | None = None,
) -> RunConfig:
    """Validate file (or dict) + dotted-path overrides; raises ConfigError with one message.

    `flags` maps dotted paths to the flag that set them so an error names the flag.
    """
    base: dict[str, Any] = read_yaml(path) if path is not None else dict(data or {})
    merged = copy.deepcopy(base)
    for dotted, value in (overrides or {}).items():
        set_path(merged, dotted, value)
    try:
        return RunConfig.model_validate(merged)
    except ValidationError as e:
        raise ConfigError(
            format_validation_error(e, source=str(path) if path else None, flags=flags)
        ) from None


# ---- redaction -----------------------------------------------------------------------------

# One set of rules for every file a run writes: agentload.redact.
REDACTED = _REDACTED
redact = _redact


def config_to_dict(cfg: RunConfig) -> dict[str, Any]:
    """JSON-safe, redacted form for config.yaml."""
    out = redact(cfg.model_dump(mode="json", by_alias=True))
    # No selection is written as no setting: a config file's `tasks: []` is refused
    # (check_task_selection), and a saved config.yaml is reused as one.
    if isinstance(out.get("workload"), dict) and out["workload"].get("tasks") == []:
        del out["workload"]["tasks"]
    return out


def check_task_selection(path: Path, data: Mapping[str, Any]) -> None:
    """`tasks: []` in a config file reads as "no tasks" but would run every task: refused."""
    w = data.get("workload")
    if isinstance(w, Mapping) and w.get("tasks") == []:
        raise ConfigError(
            f"invalid configuration: {path}: field 'workload.tasks': an empty list would run "
            "every task; leave the setting out for every task, or name the tasks"
        )


def dump_yaml(data: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(data), sort_keys=False, allow_unicode=True)


EXAMPLE_CONFIG = """\
# agentload run --config run.yaml   (every flag overrides the file; see docs/run.md)
out: results/airline-c16
endpoints:                       # omit to use the embedded simulator
  agent:
    base_url: http://127.0.0.1:8000  # /v1 is added when the URL has no path
    model: Qwen/Qwen3-8B
    api_key_env: VLLM_API_KEY     # the env var's name (default OPENAI_API_KEY when set)
    extra_body: {chat_template_kwargs: {enable_thinking: false}}
    temperature: 0.0
    timeouts: {connect: 10, first_token: 300, idle: 60, total: 900}
    retry: {max_attempts: 3}
    metrics_urls: [http://127.0.0.1:8000/metrics]  # replicas: list each (summed)
  user:                           # defaults to the agent's endpoint
    base_url: http://127.0.0.1:8001/v1
    model: Qwen/Qwen3-8B
workload:
  domains: [airline, retail]
  tasks: [airline/000-019, retail/005]
  trials: 4
  shuffle: true
  seed: 7
  request_seed: none              # none | episode | <int>: the `seed` each call carries
  agent_max_tokens: 1024          # user_max_tokens: 256
  agent: tool-calling             # tool-calling | react | act | few-shot | oracle | noop
  # few_shot: examples.jsonl      # the few-shot agent's example conversations
  user: llm                       # llm | react | verify | reflection | scripted
  tool_latency: {kind: lognormal, mean_s: 0.2, spread: 0.5}
  # τ²-bench's domains (tasks: [tau2-airline, tau2-telecom]) read their data from here:
  # tau2: {data: tau2-bench/data/tau2/domains, split: base, max_steps: 200, max_errors: 10}
load:
  concurrency: 16                 # closed loop; or rate: 2.0 (+ burstiness, max_concurrency)
  num_episodes: 200
  duration_s: 30m
  warmup: 10s                     # or a number of episodes
  drain_timeout_s: 60
slo: {ttft_p90: 2s, e2e_p99: 10s}
sim: {profile: tiny-cpu, speedup: 1.0, fault_rate: 0.0}
"""
