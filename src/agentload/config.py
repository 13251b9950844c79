"""Run configuration: pydantic models, YAML loading, CLI overrides, redaction.

A run is described by one :class:`RunConfig`. It comes from a YAML file (optional) with CLI
flags applied on top (flags win). Every validation problem becomes one :class:`ConfigError`
whose message names the field and where its value came from (the file or the flag).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agentload.client.config import EndpointConfig
from agentload.redact import REDACTED as _REDACTED
from agentload.redact import redact as _redact
from agentload.units import check_slo_key, parse_duration, parse_slo

CONFIG_SCHEMA = "agentload.config/1"

# Roles every episode uses; further named roles (e.g. a judge or a second agent model) may be
# added to `endpoints` for multi-model setups.
CORE_ROLES = ("agent", "user")


class ConfigError(Exception):
    """A bad configuration or flag: one message, reported with exit code 2."""


class Warmup(BaseModel):
    """Leading episodes that run normally but are excluded from statistics."""

    model_config = ConfigDict(extra="forbid")

    episodes: int = Field(0, ge=0, description="The first N episodes started are warmup.")
    seconds: float = Field(0.0, ge=0, description="Episodes started in the first S s are warmup.")

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


class ToolLatencyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["none", "constant", "uniform", "lognormal"] = "none"
    mean_s: float = Field(0.0, ge=0, description="Mean simulated tool execution time.")
    spread: float = Field(0.5, ge=0, description="uniform: ±spread×mean; lognormal: sigma.")


class WorkloadConfig(BaseModel):
    """Which episodes run and how the agent and user behave."""

    model_config = ConfigDict(extra="forbid")

    domains: list[str] = Field(
        default_factory=list, description="Domains whose tasks run; empty = all built-in."
    )
    tasks: list[str] = Field(
        default_factory=list,
        description="Task selectors: airline/000-019, retail/005, retail (whole domain).",
    )
    trials: int = Field(1, ge=1, description="Trials per task (k of pass^k).")
    shuffle: bool = Field(False, description="Shuffle the task order of each trial round.")
    seed: int = Field(0, description="Base seed: task order, episode seeds, arrivals.")
    agent: str = Field("tool-calling", description="Agent strategy (a registered name).")
    user: str = Field("llm", description="User simulator (a registered name).")
    temperature: float | None = Field(None, ge=0)
    max_steps: int = Field(30, ge=1, description="Agent LLM calls per episode.")
    max_user_turns: int = Field(20, ge=1)
    budget_s: float | None = Field(900.0, gt=0, description="Wall-time budget per episode.")
    max_errors: int = Field(5, ge=1)
    keep_reasoning: bool = False
    chat_template_kwargs: dict[str, Any] | None = None
    tool_latency: ToolLatencyConfig = Field(default_factory=ToolLatencyConfig)
    agent_max_tokens: int | None = Field(None, ge=1)
    user_max_tokens: int | None = Field(None, ge=1)

    @field_validator("tasks", "domains", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [p.strip() for p in value.split(",") if p.strip()]
        return value

    @field_validator("budget_s", mode="before")
    @classmethod
    def _budget(cls, value: Any) -> Any:
        return None if value is None else parse_duration(value)

    @field_validator("agent")
    @classmethod
    def _agent(cls, value: str) -> str:
        from agentload.plugins import AGENTS

        return AGENTS.check(value)

    @field_validator("user")
    @classmethod
    def _user(cls, value: str) -> str:
        from agentload.plugins import USERS

        return USERS.check(value)


class LoadConfig(BaseModel):
    """How episodes are issued: closed loop (concurrency) or open loop (rate)."""

    model_config = ConfigDict(extra="forbid")

    concurrency: int | None = Field(
        None, ge=1, description="Closed loop: active episodes (default 8 when no rate)."
    )
    rate: float | None = Field(None, gt=0, description="Open loop: episode arrivals per second.")
    burstiness: float = Field(
        1.0, gt=0, description="Gamma shape of inter-arrival times; 1 = Poisson, <1 burstier."
    )
    max_concurrency: int | None = Field(
        None, ge=1, description="Open loop: cap on active episodes (arrivals beyond it queue)."
    )
    num_episodes: int | None = Field(
        None, ge=1, description="Measured episodes (default: tasks × trials)."
    )
    duration_s: float | None = Field(None, gt=0, description="Stop issuing episodes after this.")
    warmup: Warmup = Field(default_factory=Warmup)
    drain_timeout_s: float = Field(
        30.0, ge=0, description="On stop/interrupt: wait this long for in-flight episodes."
    )
    lag_interval_s: float = Field(0.02, gt=0, description="Event-loop lag probe period.")

    @field_validator("duration_s", "drain_timeout_s", mode="before")
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
        return self.concurrency or 8


class SimSettings(BaseModel):
    """The embedded simulator started when no endpoint is configured."""

    model_config = ConfigDict(extra="forbid")

    profile: str = Field("tiny-cpu", description="Timing profile (name or file).")
    speedup: float = Field(1.0, gt=0, description="Model time runs this many times faster.")
    seed: int = 0
    fault_rate: float = Field(0.0, ge=0, le=1, description="Share of calls that get a fault.")
    fault_kinds: list[str] | None = None
    max_num_seqs: int | None = Field(None, ge=1)
    behaviour_options: dict[str, Any] = Field(default_factory=dict)
    options: dict[str, Any] = Field(
        default_factory=dict, description="Any further SimConfig field (see agentload sim)."
    )

    @field_validator("fault_kinds", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [p.strip() for p in value.split(",") if p.strip()]
        return value


class MetricsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    interval_s: float = Field(5.0, gt=0, description="Prometheus scrape period.")

    @field_validator("interval_s", mode="before")
    @classmethod
    def _dur(cls, value: Any) -> Any:
        return parse_duration(value)


class RunConfig(BaseModel):
    """Everything one run needs; saved (redacted) as config.yaml in the results folder."""

    model_config = ConfigDict(extra="forbid")

    schema_: str = Field(CONFIG_SCHEMA, alias="schema")
    out: str = Field("results/run", description="Results folder.")
    run_id: str | None = Field(None, description="Default: derived from the start time.")
    kind: str = Field("episodes", description="Workload kind (a registered name).")
    endpoints: dict[str, EndpointConfig] = Field(
        default_factory=dict,
        description="Endpoint per role (agent, user, …); none = the embedded simulator.",
    )
    sim: SimSettings = Field(default_factory=SimSettings)
    workload: WorkloadConfig = Field(default_factory=WorkloadConfig)
    load: LoadConfig = Field(default_factory=LoadConfig)
    slo: dict[str, float] = Field(
        default_factory=dict, description="e.g. {ttft_p90: 2s, e2e_p99: 10s}."
    )
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    report: bool = Field(True, description="Write report.md / report.html / charts.")

    @field_validator("slo", mode="before")
    @classmethod
    def _slo(cls, value: Any) -> Any:
        if isinstance(value, str | Mapping):
            return parse_slo(value)
        return value

    @field_validator("kind")
    @classmethod
    def _kind(cls, value: str) -> str:
        from agentload.plugins import WORKLOADS

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


def read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(f"{where}: invalid YAML: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of settings")
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
        if flag:
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
    return redact(cfg.model_dump(mode="json", by_alias=True))


def dump_yaml(data: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(data), sort_keys=False, allow_unicode=True)


EXAMPLE_CONFIG = """\
# agentload run --config run.yaml   (every flag overrides the file; see docs/run.md)
out: results/airline-c16
endpoints:                       # omit to use the embedded simulator
  agent:
    base_url: http://127.0.0.1:8000/v1
    model: Qwen/Qwen3-8B
    api_key_env: VLLM_API_KEY     # the env var's name; the key is never written down
    extra_body: {chat_template_kwargs: {enable_thinking: false}}
    max_tokens: 1024
    temperature: 0.0
    timeouts: {connect: 10, first_token: 300, idle: 60, total: 900}
    retry: {max_attempts: 3}
    metrics_url: http://127.0.0.1:8000/metrics
  user:                           # defaults to the agent's endpoint
    base_url: http://127.0.0.1:8001/v1
    model: Qwen/Qwen3-8B
workload:
  domains: [airline, retail]
  tasks: [airline/000-019, retail/005]
  trials: 4
  shuffle: true
  seed: 7
  agent: tool-calling             # tool-calling | react | act | oracle | noop
  user: llm                       # llm | scripted
  tool_latency: {kind: lognormal, mean_s: 0.2, spread: 0.5}
load:
  concurrency: 16                 # closed loop; or rate: 2.0 (+ burstiness, max_concurrency)
  num_episodes: 200
  duration_s: 30m
  warmup: 10s                     # or a number of episodes
  drain_timeout_s: 60
slo: {ttft_p90: 2s, e2e_p99: 10s}
sim: {profile: tiny-cpu, speedup: 1.0, fault_rate: 0.0}
"""
