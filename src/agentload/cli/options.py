"""Options shared by the commands that run a workload (run, sweep, replay): each is declared
once here, with the config path it overrides, and commands are built from groups of them.

Typer reads a command's options from its function signature; `command_options` gives a
``**kwargs`` function the signature of the groups it takes, so no option is written twice.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from pydantic import BaseModel
from rich.markup import escape

from agentload.config import RunConfig
from agentload.plugins import AGENTS, USERS

ENDPOINT = "Endpoint"
WORKLOAD = "Workload"
LOAD = "Load"
SIM = "Simulator"
EXTERNAL_PANEL = "External agent (--workload external)"
OUTPUT = "Output"


REQUIRED: Any = inspect.Parameter.empty
"""The default of an option that must be given."""


@dataclass(frozen=True)
class Opt:
    """One command-line option: its parameter name, flags, type, help and config path."""

    name: str
    decls: tuple[str, ...]
    type: Any
    help: str
    panel: str
    default: Any = None
    path: str | None = None
    """Dotted RunConfig path the flag overrides (None: handled by the command itself)."""
    metavar: str | None = None
    min: float | None = None
    """Smallest value accepted (numbers only)."""

    def parameter(self) -> inspect.Parameter:
        help_text = self.help
        shown = _show(config_default(self.path)) if self.default is None else None
        if shown:
            help_text += escape(f" [default: {shown}]")  # not a rich markup tag
        flag = self.type is bool
        option = typer.Option(
            *self.decls,
            help=help_text,
            rich_help_panel=self.panel,
            # Flags take no value; other options name theirs (typer would print "<str>").
            metavar="" if flag else (self.metavar or self.name.upper()),
            show_default=not flag and self.default not in (None, REQUIRED, []),
            min=self.min,
        )
        return inspect.Parameter(
            self.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=self.default,
            annotation=Annotated[self.type, option],
        )


def _show(value: Any) -> str | None:
    if value is None or value is False or value == [] or value == {}:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def config_default(path: str | None) -> Any:
    """The RunConfig default at a dotted path (shown in --help for flags that override it)."""
    if path is None:
        return None
    model: Any = RunConfig
    value: Any = None
    for part in path.split("."):
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
        field = model.model_fields.get(part)
        if field is None:
            return None
        value = field.get_default(call_default_factory=True)
        model = field.annotation
    return None if isinstance(value, BaseModel) else value


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


def pick(group: Iterable[Opt], *names: str) -> list[Opt]:
    """The options of `group` with these parameter names, in the order given."""
    by_name = {o.name: o for o in group}
    return [by_name[n] for n in names]


def simple_paths(*groups: Iterable[Opt]) -> dict[str, tuple[str, str]]:
    """name -> (config path, flag) for the options that map straight onto the config."""
    return {o.name: (o.path, o.decls[0]) for g in groups for o in g if o.path is not None}


def parse_headers(items: Iterable[str]) -> dict[str, str]:
    """'Name: value' items (the --header flag) as a dict."""
    out: dict[str, str] = {}
    for item in items:
        k, sep, v = item.partition(":")
        if not sep or not k.strip():
            raise typer.BadParameter(f"--header expects 'Name: value', got {item!r}")
        out[k.strip()] = v.strip()
    return out


def parse_json_object(text: str, flag: str) -> dict[str, Any]:
    """A flag's value that must be a JSON object; ValueError naming the flag otherwise."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise ValueError(f"flag {flag}: not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise ValueError(f"flag {flag}: expected a JSON object")
    return value


CONFIG = [
    Opt("config", ("--config",), Path | None, "YAML run configuration.", OUTPUT, metavar="FILE"),
    Opt("out", ("--out", "-o"), str | None, "Results folder.", OUTPUT, path="out", metavar="DIR"),
    Opt("run_id", ("--run-id",), str | None, "Run identifier.", OUTPUT, path="run_id"),
]

RESUME = [
    Opt(
        "resume",
        ("--resume",),
        Path | None,
        "Continue an interrupted run (or sweep) in DIR from its saved config.",
        OUTPUT,
        metavar="DIR",
    ),
]

ENDPOINTS = [
    Opt(
        "base_url",
        ("--base-url",),
        str | None,
        "Agent (and user) endpoint: http://127.0.0.1:8000 or http://127.0.0.1:8000/v1.",
        ENDPOINT,
        metavar="URL",
    ),
    Opt("model", ("--model",), str | None, "Agent (and user) model.", ENDPOINT),
    Opt(
        "user_base_url",
        ("--user-base-url",),
        str | None,
        "User-simulator endpoint.",
        ENDPOINT,
        metavar="URL",
    ),
    Opt("user_model", ("--user-model",), str | None, "User model.", ENDPOINT),
    Opt(
        "judge_base_url",
        ("--judge-base-url",),
        str | None,
        "Judge endpoint (τ² natural-language assertions); default: none, those rewards "
        "are partial.",
        ENDPOINT,
        metavar="URL",
    ),
    Opt("judge_model", ("--judge-model",), str | None, "Judge model.", ENDPOINT),
    Opt(
        "api_key_env",
        ("--api-key-env",),
        str | None,
        "Env var holding the API key (default: OPENAI_API_KEY when set, else no key).",
        ENDPOINT,
        metavar="VAR",
    ),
    Opt(
        "metrics_url",
        ("--metrics-url",),
        str | None,
        "Prometheus URL of the agent's server; comma-separated for replicas (summed). "
        "Default: <server>/metrics when it answers.",
        ENDPOINT,
        metavar="URL",
    ),
    Opt(
        "max_tokens",
        ("--max-tokens",),
        int | None,
        "max_tokens of agent and user calls (default: agent 1024, user 256).",
        ENDPOINT,
        metavar="N",
    ),
    Opt(
        "temperature",
        ("--temperature",),
        float | None,
        "Sampling temperature (default: the server's).",
        ENDPOINT,
        metavar="T",
    ),
    Opt(
        "extra_body",
        ("--extra-body",),
        str | None,
        "JSON merged into every request, e.g. "
        '\'{"chat_template_kwargs": {"enable_thinking": false}}\'.',
        ENDPOINT,
        metavar="JSON",
    ),
    Opt(
        "no_preflight",
        ("--no-preflight",),
        bool,
        "Skip the endpoint checks before the first episode (model, engine, tool calling).",
        ENDPOINT,
        False,
    ),
    Opt(
        "header",
        ("--header", "-H"),
        list[str] | None,
        "Extra HTTP header on every request, 'Name: value' (repeatable).",
        ENDPOINT,
        metavar="HEADER",
    ),
]

EPISODES = [
    Opt(
        "domains",
        ("--domains",),
        str | None,
        "e.g. airline,retail.",
        WORKLOAD,
        path="workload.domains",
        metavar="LIST",
    ),
    Opt(
        "tasks",
        ("--tasks",),
        str | None,
        "e.g. airline/000-019,retail/005.",
        WORKLOAD,
        path="workload.tasks",
        metavar="LIST",
    ),
    Opt(
        "tau2_data",
        ("--tau2-data",),
        str | None,
        "τ²-bench data folder for the tau2-* domains (its data/tau2/domains, or a checkout); "
        "default: $AGENTLOAD_TAU2_DATA.",
        WORKLOAD,
        path="workload.tau2.data",
        metavar="DIR",
    ),
    Opt(
        "split",
        ("--split",),
        str | None,
        "τ² task split a whole tau2-* domain runs: base, train, test (telecom: small, full).",
        WORKLOAD,
        path="workload.tau2.split",
        metavar="NAME",
    ),
    Opt(
        "trials",
        ("--trials", "-k"),
        int | None,
        "Trials per task (k of pass^k).",
        WORKLOAD,
        path="workload.trials",
        metavar="K",
    ),
    Opt(
        "shuffle",
        ("--shuffle/--no-shuffle",),
        bool | None,
        "Shuffle the task order of each round.",
        WORKLOAD,
        path="workload.shuffle",
    ),
    Opt("seed", ("--seed",), int | None, "Base seed.", WORKLOAD, path="workload.seed", metavar="N"),
    Opt(
        "agent",
        ("--agent",),
        str | None,
        "Agent strategy: " + " | ".join(AGENTS.names()) + ".",
        WORKLOAD,
        path="workload.agent",
        metavar="NAME",
    ),
    Opt(
        "few_shot",
        ("--few-shot",),
        str | None,
        "Example conversations of --agent few-shot: a JSONL file, one example a line.",
        WORKLOAD,
        path="workload.few_shot",
        metavar="FILE",
    ),
    Opt(
        "user",
        ("--user",),
        str | None,
        "User simulator: " + " | ".join(USERS.names()) + ".",
        WORKLOAD,
        path="workload.user",
        metavar="NAME",
    ),
    Opt(
        "request_seed",
        ("--request-seed",),
        str | None,
        "`seed` sent with each call: none | episode | N.",
        WORKLOAD,
        path="workload.request_seed",
        metavar="SEED",
    ),
    Opt(
        "agent_max_tokens",
        ("--agent-max-tokens",),
        int | None,
        "max_tokens of agent calls (default: --max-tokens, else 1024).",
        WORKLOAD,
        path="workload.agent_max_tokens",
        metavar="N",
    ),
    Opt(
        "user_max_tokens",
        ("--user-max-tokens",),
        int | None,
        "max_tokens of user-simulator calls (default: --max-tokens, else 256).",
        WORKLOAD,
        path="workload.user_max_tokens",
        metavar="N",
    ),
    Opt(
        "max_steps",
        ("--max-steps",),
        int | None,
        "Agent calls per episode.",
        WORKLOAD,
        path="workload.max_steps",
        metavar="N",
    ),
    Opt(
        "tool_latency",
        ("--tool-latency",),
        str | None,
        "KIND:MEAN, e.g. lognormal:0.2s, constant:50ms.",
        WORKLOAD,
        metavar="KIND:MEAN",
    ),
]

EXTERNAL = [
    Opt(
        "workload_kind",
        ("--workload",),
        str | None,
        "Workload kind: episodes (agentload's agents) | external (an outside agent) | …",
        WORKLOAD,
        path="kind",
        metavar="KIND",
    ),
    Opt(
        "agent_adapter",
        ("--agent-adapter",),
        str | None,
        "How to reach the external agent: command | openai-agent | openclaw.",
        EXTERNAL_PANEL,
        path="external.adapter",
        metavar="NAME",
    ),
    Opt(
        "agent_command",
        ("--agent-command",),
        str | None,
        "command adapter: run per user turn (message on stdin, reply on stdout); "
        "{placeholders} such as {session}, {mcp_url} are filled in. Default: agentload's "
        "reference agent.",
        EXTERNAL_PANEL,
        path="external.command",
        metavar="CMD",
    ),
    Opt(
        "agent_url",
        ("--agent-url",),
        str | None,
        "openai-agent adapter: the agent's OpenAI-compatible base URL.",
        EXTERNAL_PANEL,
        path="external.url",
        metavar="URL",
    ),
    Opt(
        "agent_turn_timeout",
        ("--agent-turn-timeout",),
        str | None,
        "Longest one agent turn may take.",
        EXTERNAL_PANEL,
        path="external.turn_timeout_s",
        metavar="TIME",
    ),
]

CONCURRENCY = Opt(
    "concurrency",
    ("--concurrency", "-c"),
    int | None,
    "Closed loop: active sessions (8 when no --rate is given).",
    LOAD,
    path="load.concurrency",
    metavar="N",
)
RATE = Opt(
    "rate",
    ("--rate", "-r"),
    float | None,
    "Open loop: session arrivals per second.",
    LOAD,
    path="load.rate",
    metavar="R",
)

LOAD_SHAPE = [
    Opt(
        "burstiness",
        ("--burstiness",),
        float | None,
        "Gamma shape of inter-arrival times; 1 = Poisson.",
        LOAD,
        path="load.burstiness",
        metavar="X",
    ),
    Opt(
        "max_concurrency",
        ("--max-concurrency",),
        int | None,
        "Open loop: cap on active sessions.",
        LOAD,
        path="load.max_concurrency",
        metavar="N",
    ),
    Opt(
        "workers",
        ("--workers",),
        str | None,
        "Worker processes that run the sessions: N, or auto (more than one only for a large "
        "concurrency on a machine with cores to spare; adds workers when one saturates).",
        LOAD,
        path="load.workers",
        metavar="N",
    ),
    Opt(
        "ray",
        ("--ray",),
        str | None,
        "Run the workers as Ray actors on the Ray cluster at ADDRESS (host:port of its head, "
        "or auto); needs agentload[ray] on every node. --workers then counts actors.",
        LOAD,
        path="ray.address",
        metavar="ADDRESS",
    ),
    Opt(
        "num_episodes",
        ("--num-episodes", "-n"),
        int | None,
        "Measured sessions (default: tasks × trials).",
        LOAD,
        path="load.num_episodes",
        metavar="N",
    ),
    Opt(
        "duration",
        ("--duration",),
        str | None,
        "Stop issuing after this, e.g. 10m.",
        LOAD,
        path="load.duration_s",
        metavar="TIME",
    ),
    Opt(
        "warmup",
        ("--warmup",),
        str | None,
        "Sessions (5) or time (10s) left out of the statistics.",
        LOAD,
        path="load.warmup",
        metavar="N|TIME",
    ),
    Opt(
        "drain_timeout",
        ("--drain-timeout",),
        str | None,
        "On stop, wait this long for sessions in flight.",
        LOAD,
        path="load.drain_timeout_s",
        metavar="TIME",
    ),
    Opt(
        "retry_infra",
        ("--retry-infra",),
        int | None,
        "Run an episode that failed in an endpoint outage again, up to N times.",
        LOAD,
        path="load.retry_infra",
        metavar="N",
    ),
    Opt(
        "max_infra_error_share",
        ("--max-infra-error-share",),
        float | None,
        "Exit 1 when more than this share of episodes ended on infrastructure errors.",
        LOAD,
        path="load.max_infra_error_share",
        metavar="X",
    ),
    Opt(
        "outage_timeout",
        ("--outage-timeout",),
        str | None,
        "Stop the run when the endpoint stays down this long.",
        LOAD,
        path="load.outage_timeout_s",
        metavar="TIME",
    ),
    Opt(
        "slo",
        ("--slo",),
        str | None,
        "e.g. ttft_p90=2s,e2e_p99=10s.",
        LOAD,
        path="slo",
        metavar="SPEC",
    ),
]

SIMULATOR = [
    Opt(
        "sim_profile",
        ("--sim-profile",),
        str | None,
        "instant | tiny-cpu | llama-8b-h100 | … | FILE.",
        SIM,
        path="sim.profile",
        metavar="NAME",
    ),
    Opt(
        "sim_speedup",
        ("--sim-speedup",),
        float | None,
        "Simulated model time runs X× faster.",
        SIM,
        path="sim.speedup",
        metavar="X",
    ),
    Opt(
        "sim_fault_rate",
        ("--sim-fault-rate",),
        float | None,
        "Share of calls given a fault.",
        SIM,
        path="sim.fault_rate",
        metavar="P",
    ),
    Opt("sim_seed", ("--sim-seed",), int | None, "Simulator seed.", SIM, path="sim.seed"),
]

OUTPUTS = [
    Opt(
        "metrics_interval",
        ("--metrics-interval",),
        str | None,
        "Server-metrics scrape period.",
        OUTPUT,
        path="metrics.interval_s",
        metavar="TIME",
    ),
    Opt("no_metrics", ("--no-metrics",), bool, "Do not scrape server metrics.", OUTPUT, False),
    Opt("overwrite", ("--overwrite",), bool, "Replace results already in --out.", OUTPUT, False),
    Opt("no_report", ("--no-report",), bool, "summary.json only.", OUTPUT, False),
    Opt("progress", ("--progress",), str, "auto | live | plain | off.", OUTPUT, "auto"),
    Opt(
        "progress_interval",
        ("--progress-interval",),
        float,
        "Seconds between plain progress lines.",
        OUTPUT,
        10.0,
        metavar="S",
    ),
    Opt("quiet", ("--quiet", "-q"), bool, "No progress or messages.", OUTPUT, False),
    Opt("json_out", ("--json",), bool, "Print the final summary as JSON on stdout.", OUTPUT, False),
    Opt(
        "mlflow",
        ("--mlflow",),
        bool,
        "Log parameters, metrics and artifacts to MLflow (at MLFLOW_TRACKING_URI, which "
        "alone also turns this on).",
        OUTPUT,
        False,
    ),
]

SWEEP_POINTS = [
    Opt(
        "points",
        ("--concurrency", "-c"),
        str | None,
        "Closed-loop points, e.g. 1,2,4,8,16,32.",
        LOAD,
        metavar="LIST",
    ),
    Opt(
        "rates",
        ("--rates",),
        str | None,
        "Open-loop points (sessions/s), e.g. 0.5,1,2,4.",
        LOAD,
        metavar="LIST",
    ),
    Opt(
        "stop_on_slo_fail",
        ("--stop-on-slo-fail",),
        bool,
        "Stop at the first point that misses the SLO.",
        LOAD,
        False,
    ),
]

RUN_OPTIONS = [
    *CONFIG,
    *RESUME,
    *ENDPOINTS,
    *EPISODES,
    *EXTERNAL,
    CONCURRENCY,
    RATE,
    *LOAD_SHAPE,
    *SIMULATOR,
    *OUTPUTS,
]
SWEEP_OPTIONS = [
    *CONFIG,
    *RESUME,
    *ENDPOINTS,
    *EPISODES,
    *EXTERNAL,
    *SWEEP_POINTS,
    *LOAD_SHAPE,
    *SIMULATOR,
    *OUTPUTS,
]
