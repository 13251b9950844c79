"""Command-line options, generated from the models whose fields declare them.

An option is declared once, on the field it sets (`agentload.flags`): its flag, help, panel,
default and bounds. A command picks the fields it offers (`from_model`); typer reads the
options from the signature that `command_options` gives a ``**kwargs`` function, and
`given` reads back what a command line set, by field path.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import typer
from pydantic import BaseModel, Field, ValidationError, field_validator
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from rich.markup import escape

from agentload.client.endpoint import EndpointConfig
from agentload.config import ConfigError, RunConfig, format_validation_error
from agentload.flags import (
    LOAD,
    OUTPUT,
    UNSET,
    Flag,
    duration,
    flag,
    flagged_fields,
    help_of,
)
from agentload.units import parse_duration

REQUIRED: Any = inspect.Parameter.empty
"""The default of an option that must be given."""

CONFIG = "config"
ARGS = "args"
"""Targets of generated options: the run's RunConfig, or the command's own options model."""


@dataclass(frozen=True)
class Opt:
    """One command-line option: its parameter name, flags, type, help and where it goes."""

    name: str
    decls: tuple[str, ...]
    type: Any
    help: str
    panel: str
    default: Any = None
    path: str | None = None
    """Dotted path of the field it sets in its target model (None: read by the command)."""
    metavar: str | None = None
    min: float | None = None
    """Smallest value accepted (numbers only; options of generated fields take the field's)."""
    target: str | None = None
    sets: Any = UNSET
    """A flag without a value that sets its field to this."""
    resume: bool = False
    """Taken by --resume too."""
    shown: str | None = None
    """The default shown in --help (the field's)."""

    def parameter(self) -> inspect.Parameter:
        help_text = escape(self.help)  # "[default: …]" in a help text is not a rich tag
        if self.shown:
            help_text += escape(f" [default: {self.shown}]")  # not a rich markup tag
        is_flag = self.type is bool
        option = typer.Option(
            *self.decls,
            help=help_text,
            rich_help_panel=self.panel,
            # Flags take no value; other options name theirs (typer would print "<str>").
            metavar="" if is_flag else (self.metavar or self.name.upper()),
            show_default=not is_flag and self.default not in (None, REQUIRED, []),
            min=self.min,
        )
        return inspect.Parameter(
            self.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=self.default,
            annotation=Annotated[self.type, option],
        )


def _show(value: Any) -> str | None:
    if value is None or value is False or value is PydanticUndefined:
        return None
    if isinstance(value, list | dict | BaseModel):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def _optional(annotation: Any) -> Any:
    """The field's type as a flag's: may be absent (None: not given)."""
    if annotation is type(None) or type(None) in typing.get_args(annotation):
        return annotation
    return annotation | None


def _opt(
    path: str,
    info: FieldInfo,
    f: Flag,
    target: str,
    prefix: str = "",
    help_prefix: str = "",
    panel: str | None = None,
) -> Opt:
    if prefix:
        f = f.renamed(prefix)
    if panel:
        f = replace(f, panel=panel)
    valueless = f.sets is not UNSET
    return Opt(
        f.name,
        f.decls,
        bool if valueless else (f.type or _optional(info.annotation)),
        help_prefix + help_of(info, f),
        f.panel,
        False if valueless else None,
        path,
        f.metavar,
        target=target,
        sets=f.sets,
        resume=f.resume,
        shown=None if valueless else _show(info.get_default(call_default_factory=True)),
    )


def from_model(
    model: type[BaseModel],
    *paths: str,
    target: str = CONFIG,
    prefix: str = "",
    help_prefix: str = "",
    panel: str | None = None,
) -> list[Opt]:
    """The options of `model`'s flagged fields at `paths`, in that order; a path that names a
    nested model takes all of its flagged fields. `prefix` renames them (``sim-``); `panel`
    shows them under another --help panel."""
    fields = list(flagged_fields(model))
    out = []
    for want in paths:
        found = [
            _opt(path, info, f, target, prefix, help_prefix, panel)
            for path, info, f in fields
            if path == want or path.startswith(want + ".")
        ]
        if not found:
            raise KeyError(f"{model.__name__} declares no flag at {want}")
        out += found
    return out


def command_options(*groups: Iterable[Opt]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a ``def f(**kwargs)`` command the options of `groups`, in order."""
    opts = [o for g in groups for o in g]

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        # The function's own named parameters (e.g. a typer.Context) come first.
        own = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind is not inspect.Parameter.VAR_KEYWORD
        ]
        params = own + [o.parameter() for o in opts]
        fn.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        fn.__annotations__ = {p.name: p.annotation for p in params}
        return fn

    return wrap


@dataclass(frozen=True)
class Given:
    """What a command line set: field path -> value, and path -> the flag that set it."""

    values: dict[str, Any]
    flags: dict[str, str]

    def __contains__(self, path: str) -> bool:
        return path in self.values


def given(opts: Iterable[Opt], kwargs: Mapping[str, Any], target: str = CONFIG) -> Given:
    """The options of `target` that the command line gave (a valueless flag only when set)."""
    values: dict[str, Any] = {}
    flags: dict[str, str] = {}
    for o in opts:
        if o.target != target or o.path is None:
            continue
        value = kwargs.get(o.name)
        if o.sets is not UNSET:
            if not value:
                continue
            value = o.sets
        elif value is None or value == []:
            continue
        values[o.path], flags[o.path] = value, o.decls[0]
    return Given(values, flags)


M = TypeVar("M", bound=BaseModel)


def parse_args(model: type[M], opts: Iterable[Opt], kwargs: Mapping[str, Any]) -> M:
    """The command's own options as its typed model; ConfigError naming the flag otherwise."""
    g = given(opts, kwargs, ARGS)
    try:
        return model.model_validate(g.values)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, source=None, flags=g.flags)) from None


# ---- the run-like commands (run, sweep, replay) ------------------------------------------


class RunArgs(BaseModel):
    """Options of run, sweep and replay that steer the command, not the run it configures."""

    config: Annotated[Path | None, flag("--config", panel=OUTPUT, metavar="FILE", resume=True)] = (
        Field(None, description="YAML run configuration.")
    )
    resume: Annotated[Path | None, flag("--resume", panel=OUTPUT, metavar="DIR", resume=True)] = (
        Field(
            None, description="Continue an interrupted run (or sweep) in DIR from its saved config."
        )
    )
    overwrite: Annotated[bool, flag("--overwrite", panel=OUTPUT, sets=True, resume=True)] = Field(
        False, description="Replace results already in --out."
    )
    progress: Annotated[
        Literal["auto", "live", "plain", "off"],
        flag("--progress", panel=OUTPUT, metavar="MODE", type=str | None, resume=True),
    ] = Field("auto", description="auto | live | plain | off.")
    # A tiny period costs the client CPU that shows up in its own measurements.
    progress_interval: Annotated[
        float, duration("--progress-interval", panel=OUTPUT, resume=True)
    ] = Field(10.0, ge=0.1, le=86_400, description="Time between plain progress lines, e.g. 30s.")
    quiet: Annotated[bool, flag("--quiet", "-q", panel=OUTPUT, sets=True, resume=True)] = Field(
        False, description="No progress or messages."
    )
    json_out: Annotated[bool, flag("--json", panel=OUTPUT, sets=True, resume=True)] = Field(
        False, description="Print the final summary as JSON on stdout."
    )
    mlflow: Annotated[bool, flag("--mlflow", panel=OUTPUT, sets=True, resume=True)] = Field(
        False,
        description="Log parameters, metrics and artifacts to MLflow (at MLFLOW_TRACKING_URI, "
        "which alone also turns this on).",
    )

    @field_validator("progress_interval", mode="before")
    @classmethod
    def _interval(cls, value: Any) -> float:
        return parse_duration(value)

    @property
    def progress_mode(self) -> str:
        return "off" if self.quiet else self.progress


class SweepArgs(RunArgs):
    """The sweep's own options: its load points in place of --concurrency / --rate."""

    points: Annotated[str | None, flag("--concurrency", "-c", panel=LOAD, metavar="LIST")] = Field(
        None, description="Closed-loop points, e.g. 1,2,4,8,16,32."
    )
    rates: Annotated[str | None, flag("--rates", panel=LOAD, metavar="LIST")] = Field(
        None, description="Open-loop points (sessions/s), e.g. 0.5,1,2,4."
    )
    stop_on_slo_fail: Annotated[bool, flag("--stop-on-slo-fail", panel=LOAD, sets=True)] = Field(
        False, description="Stop at the first point that misses the SLO."
    )


# Roles besides the agent that the endpoint flags name (--user-base-url, --judge-model).
_ROLE_FLAGS = {
    "user": "User simulator: ",
    "judge": "Judge (τ² natural-language assertions; none: those rewards are partial): ",
}


def endpoint_options() -> list[Opt]:
    """--base-url, --model, ... of the agent (and the user and judge unless they are given
    their own), then --user-base-url, --user-model, --judge-base-url, --judge-model."""
    named = from_model(EndpointConfig, "base_url", "model", help_prefix="Agent (and user): ")
    rest = from_model(
        EndpointConfig,
        "api_key_env",
        "metrics_url",
        "gpu_metrics_urls",
        "max_tokens",
        "temperature",
        "extra_body",
        "headers",
    )
    agent = [_at(o, "endpoints.agent.") for o in named + rest]
    roles = [
        _at(o, f"endpoints.{role}.")
        for role, text in _ROLE_FLAGS.items()
        for o in from_model(
            EndpointConfig, "base_url", "model", prefix=role + "-", help_prefix=text
        )
    ]
    return agent[:2] + roles + agent[2:]


def _at(o: Opt, prefix: str) -> Opt:
    return Opt(**{**o.__dict__, "path": prefix + (o.path or "")})


def _run_config(*paths: str, prefix: str = "") -> list[Opt]:
    return from_model(RunConfig, *paths, prefix=prefix)


def _args(model: type[BaseModel], *paths: str) -> list[Opt]:
    return from_model(model, *paths, target=ARGS)


# Options common to the run-like commands, in the order --help lists them.
def _files(out_default: str) -> list[Opt]:
    """--config, --out (shown with the command's own default folder), --run-id, --resume."""
    out = [replace(o, shown=out_default) for o in _run_config("out")]
    return [*_args(RunArgs, "config"), *out, *_run_config("run_id"), *_args(RunArgs, "resume")]


_FILES = _files("results/run")
_ENDPOINTS = [*endpoint_options(), *_run_config("preflight")]
_EPISODES = _run_config(
    "workload.domains",
    "workload.tasks",
    "workload.tau2",
    "workload.trials",
    "workload.shuffle",
    "workload.seed",
    "workload.agent",
    "workload.few_shot",
    "workload.user",
    "workload.request_seed",
    "workload.agent_max_tokens",
    "workload.user_max_tokens",
    "workload.max_steps",
    "workload.tool_latency",
    "kind",
    "external",
)
_LOOP = _run_config("load.concurrency", "load.rate")
_LOAD = _run_config(
    "load.burstiness",
    "load.max_concurrency",
    "load.workers",
    "ray.address",
    "load.num_episodes",
    "load.duration_s",
    "load.warmup",
    "load.drain_timeout_s",
    "load.retry_infra",
    "load.max_infra_error_share",
    "load.outage_timeout_s",
    "slo",
)
SIMULATOR = _run_config("sim.profile", "sim.speedup", "sim.fault_rate", "sim.seed", prefix="sim-")
_OUTPUTS = [
    *_run_config("metrics.interval_s", "metrics.enabled", "report"),
    *_args(RunArgs, "overwrite", "progress", "progress_interval", "quiet", "json_out", "mlflow"),
]

_SYNTHETIC = _run_config("synthetic")

RUN_OPTIONS = [
    *_FILES,
    *_ENDPOINTS,
    *_EPISODES,
    *_LOOP,
    *_LOAD,
    *_SYNTHETIC,
    *SIMULATOR,
    *_OUTPUTS,
]
SWEEP_OPTIONS = [
    *_files("results/sweep"),
    *_ENDPOINTS,
    *_EPISODES,
    *_args(SweepArgs, "points", "rates", "stop_on_slo_fail"),
    *_LOAD,
    *_SYNTHETIC,
    *SIMULATOR,
    *_OUTPUTS,
]
REPLAY_OPTIONS = [
    *_files("results/replay"),
    *_ENDPOINTS,
    *_LOOP,
    *_LOAD,
    *_run_config("replay"),
    *SIMULATOR,
    *_OUTPUTS,
]
__all__ = [
    "ARGS",
    "CONFIG",
    "REPLAY_OPTIONS",
    "REQUIRED",
    "RUN_OPTIONS",
    "SIMULATOR",
    "SWEEP_OPTIONS",
    "Given",
    "Opt",
    "RunArgs",
    "SweepArgs",
    "command_options",
    "from_model",
    "given",
    "parse_args",
]
