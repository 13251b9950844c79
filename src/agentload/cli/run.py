"""`agentload run` and `agentload sweep`: thin shells over agentload.runner."""

import inspect
import logging
import sys
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.markup import escape

from agentload.cli.app import app
from agentload.config import EXAMPLE_CONFIG, ConfigError, RunConfig, build_config, parse_duration
from agentload.runner import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    RunFailed,
    RunOutcome,
    execute_run,
    execute_sweep,
    load_saved_config,
    sweep_table,
)
from agentload.util import run_async

_EXIT_CODES = """\
Exit codes: 0 finished; 1 the run failed or aborted (harness error, simulator did not start,
every episode failed on infrastructure); 2 bad usage or configuration; 130 interrupted
(Ctrl-C / SIGTERM: no new episodes, in-flight ones drain for --drain-timeout, the summary is
written and `agentload run --resume DIR` continues)."""

RUN_HELP = f"""Run agentic episodes against an endpoint (or the embedded simulator) and record
every call, session and trajectory, then write summary.json and a report.

With no endpoint (no --base-url, no `endpoints:` in the config) the embedded simulator starts
on a free loopback port for the run and stops afterwards.

\b
Example config (YAML; every flag overrides it; annotated in docs/run.md):
\b
{escape(EXAMPLE_CONFIG)}
\b
{_EXIT_CODES}
"""

H = "Endpoint"
W = "Workload"
L = "Load"
S = "Simulator"
O = "Output"  # noqa: E741


def _opt(*names: str, help: str, panel: str, **kw: Any) -> Any:
    return typer.Option(*names, help=help, rich_help_panel=panel, **kw)


def run_command(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="YAML run configuration.")
    ] = None,
    out: Annotated[str | None, _opt("--out", "-o", help="Results folder.", panel=O)] = None,
    resume: Annotated[
        Path | None,
        _opt("--resume", help="Continue an interrupted run in DIR from its saved config.", panel=O),
    ] = None,
    run_id: Annotated[str | None, _opt("--run-id", help="Run identifier.", panel=O)] = None,
    # endpoints
    base_url: Annotated[
        str | None,
        _opt(
            "--base-url", help="Agent (and user) endpoint, e.g. http://127.0.0.1:8000/v1.", panel=H
        ),
    ] = None,
    model: Annotated[str | None, _opt("--model", help="Agent (and user) model.", panel=H)] = None,
    user_base_url: Annotated[
        str | None, _opt("--user-base-url", help="User-simulator endpoint.", panel=H)
    ] = None,
    user_model: Annotated[str | None, _opt("--user-model", help="User model.", panel=H)] = None,
    api_key_env: Annotated[
        str | None, _opt("--api-key-env", help="Env var holding the API key.", panel=H)
    ] = None,
    metrics_url: Annotated[
        str | None, _opt("--metrics-url", help="Prometheus URL of the agent's server.", panel=H)
    ] = None,
    max_tokens: Annotated[int | None, _opt("--max-tokens", help="Per call.", panel=H)] = None,
    temperature: Annotated[
        float | None, _opt("--temperature", help="Sampling temperature.", panel=H)
    ] = None,
    extra_body: Annotated[
        str | None,
        _opt(
            "--extra-body",
            help="JSON merged into every request, e.g. "
            '\'{"chat_template_kwargs": {"enable_thinking": false}}\'.',
            panel=H,
        ),
    ] = None,
    # workload
    domains: Annotated[str | None, _opt("--domains", help="e.g. airline,retail.", panel=W)] = None,
    tasks: Annotated[
        str | None, _opt("--tasks", help="e.g. airline/000-019,retail/005.", panel=W)
    ] = None,
    trials: Annotated[int | None, _opt("--trials", "-k", help="Trials per task.", panel=W)] = None,
    shuffle: Annotated[
        bool | None, _opt("--shuffle/--no-shuffle", help="Shuffle task order per round.", panel=W)
    ] = None,
    seed: Annotated[int | None, _opt("--seed", help="Base seed.", panel=W)] = None,
    agent: Annotated[
        str | None, _opt("--agent", help="tool-calling | react | act | oracle | noop.", panel=W)
    ] = None,
    user: Annotated[str | None, _opt("--user", help="llm | scripted.", panel=W)] = None,
    max_steps: Annotated[
        int | None, _opt("--max-steps", help="Agent calls per episode.", panel=W)
    ] = None,
    tool_latency: Annotated[
        str | None,
        _opt("--tool-latency", help="KIND:MEAN, e.g. lognormal:0.2s, constant:50ms.", panel=W),
    ] = None,
    # load
    concurrency: Annotated[
        int | None, _opt("--concurrency", "-n", help="Closed loop: active episodes.", panel=L)
    ] = None,
    rate: Annotated[
        float | None, _opt("--rate", help="Open loop: episode arrivals per second.", panel=L)
    ] = None,
    burstiness: Annotated[
        float | None, _opt("--burstiness", help="Gamma shape; 1 = Poisson.", panel=L)
    ] = None,
    max_concurrency: Annotated[
        int | None, _opt("--max-concurrency", help="Open loop: cap on active episodes.", panel=L)
    ] = None,
    num_episodes: Annotated[
        int | None, _opt("--num-episodes", help="Measured episodes.", panel=L)
    ] = None,
    duration: Annotated[
        str | None, _opt("--duration", help="Stop issuing after this, e.g. 10m.", panel=L)
    ] = None,
    warmup: Annotated[
        str | None, _opt("--warmup", help="Episodes (5) or time (10s) not in statistics.", panel=L)
    ] = None,
    drain_timeout: Annotated[
        str | None, _opt("--drain-timeout", help="Wait for in-flight episodes on stop.", panel=L)
    ] = None,
    slo: Annotated[str | None, _opt("--slo", help="e.g. ttft_p90=2s,e2e_p99=10s.", panel=L)] = None,
    # simulator
    sim_profile: Annotated[
        str | None,
        _opt("--sim-profile", help="instant | tiny-cpu | llama-8b-h100 | … | FILE.", panel=S),
    ] = None,
    sim_speedup: Annotated[
        float | None, _opt("--sim-speedup", help="Simulated model time runs X× faster.", panel=S)
    ] = None,
    sim_fault_rate: Annotated[
        float | None, _opt("--sim-fault-rate", help="Share of calls given a fault.", panel=S)
    ] = None,
    sim_seed: Annotated[int | None, _opt("--sim-seed", help="Simulator seed.", panel=S)] = None,
    # output
    metrics_interval: Annotated[
        str | None, _opt("--metrics-interval", help="Server-metrics scrape period.", panel=O)
    ] = None,
    no_metrics: Annotated[
        bool, typer.Option("--no-metrics", help="Do not scrape server metrics.", rich_help_panel=O)
    ] = False,
    overwrite: Annotated[
        bool,
        typer.Option("--overwrite", help="Replace results already in --out.", rich_help_panel=O),
    ] = False,
    no_report: Annotated[
        bool, typer.Option("--no-report", help="summary.json only.", rich_help_panel=O)
    ] = False,
    progress: Annotated[
        str, typer.Option("--progress", help="auto | live | plain | off.", rich_help_panel=O)
    ] = "auto",
    progress_interval: Annotated[
        float,
        typer.Option(
            "--progress-interval", help="Seconds between plain progress lines.", rich_help_panel=O
        ),
    ] = 10.0,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress or messages.", rich_help_panel=O)
    ] = False,
    json_out: Annotated[
        bool,
        typer.Option(
            "--json", help="Print the final summary as JSON on stdout.", rich_help_panel=O
        ),
    ] = False,
) -> None:
    args = dict(locals())
    _main("run", args)


# dotted config path and flag for each option that maps straight onto the config
_SIMPLE: dict[str, tuple[str, str]] = {
    "out": ("out", "--out"),
    "run_id": ("run_id", "--run-id"),
    "domains": ("workload.domains", "--domains"),
    "tasks": ("workload.tasks", "--tasks"),
    "trials": ("workload.trials", "--trials"),
    "shuffle": ("workload.shuffle", "--shuffle"),
    "seed": ("workload.seed", "--seed"),
    "agent": ("workload.agent", "--agent"),
    "user": ("workload.user", "--user"),
    "max_steps": ("workload.max_steps", "--max-steps"),
    "concurrency": ("load.concurrency", "--concurrency"),
    "rate": ("load.rate", "--rate"),
    "burstiness": ("load.burstiness", "--burstiness"),
    "max_concurrency": ("load.max_concurrency", "--max-concurrency"),
    "num_episodes": ("load.num_episodes", "--num-episodes"),
    "duration": ("load.duration_s", "--duration"),
    "warmup": ("load.warmup", "--warmup"),
    "drain_timeout": ("load.drain_timeout_s", "--drain-timeout"),
    "slo": ("slo", "--slo"),
    "sim_profile": ("sim.profile", "--sim-profile"),
    "sim_speedup": ("sim.speedup", "--sim-speedup"),
    "sim_fault_rate": ("sim.fault_rate", "--sim-fault-rate"),
    "sim_seed": ("sim.seed", "--sim-seed"),
    "metrics_interval": ("metrics.interval_s", "--metrics-interval"),
}
_OUTPUT_ONLY = {
    "config",
    "resume",
    "progress",
    "progress_interval",
    "quiet",
    "json_out",
    "overwrite",
    "drain_timeout",
    "points",
    "rates",
    "stop_on_slo_fail",
}


def cli_overrides(a: dict[str, Any], base: dict[str, Any]) -> tuple[dict, dict]:
    """(dotted-path overrides, path -> flag) from the parsed flags."""
    ov: dict[str, Any] = {}
    flags: dict[str, str] = {}

    def put(path: str, value: Any, flag: str) -> None:
        ov[path] = value
        flags[path] = flag

    for name, (path, flag) in _SIMPLE.items():
        if a.get(name) is not None:
            put(path, a[name], flag)
    if a.get("no_metrics"):
        put("metrics.enabled", False, "--no-metrics")
    if a.get("no_report"):
        put("report", False, "--no-report")
    if a.get("concurrency") is not None and a.get("rate") is None:
        # A flag picks the loop mode even when the file chose the other one.
        put("load.rate", None, "--concurrency")
        put("load.max_concurrency", None, "--concurrency")
    if a.get("rate") is not None and a.get("concurrency") is None:
        put("load.concurrency", None, "--rate")
    if a.get("tool_latency") is not None:
        kind, _, mean = str(a["tool_latency"]).partition(":")
        try:
            put("workload.tool_latency.kind", kind.strip(), "--tool-latency")
            put("workload.tool_latency.mean_s", parse_duration(mean or 0), "--tool-latency")
        except ValueError as e:
            raise ConfigError(f"flag --tool-latency: {e}") from None

    # Endpoint shorthand: --base-url / --model set the agent, and the user unless given.
    eps = base.get("endpoints") if isinstance(base.get("endpoints"), dict) else {}
    ep_fields = {
        "base_url": a.get("base_url"),
        "model": a.get("model"),
        "api_key_env": a.get("api_key_env"),
        "max_tokens": a.get("max_tokens"),
        "temperature": a.get("temperature"),
    }
    if a.get("extra_body") is not None:
        try:
            body = orjson.loads(a["extra_body"])
        except orjson.JSONDecodeError as e:
            raise ConfigError(f"flag --extra-body: not valid JSON ({e})") from None
        if not isinstance(body, dict):
            raise ConfigError("flag --extra-body: expected a JSON object")
        ep_fields["extra_body"] = body
    flag_of = {
        "base_url": "--base-url",
        "model": "--model",
        "api_key_env": "--api-key-env",
        "max_tokens": "--max-tokens",
        "temperature": "--temperature",
        "extra_body": "--extra-body",
    }
    given = {k: v for k, v in ep_fields.items() if v is not None}
    user_given = {
        k: v
        for k, v in (("base_url", a.get("user_base_url")), ("model", a.get("user_model")))
        if v is not None
    }
    agent_yaml = eps.get("agent") if isinstance(eps.get("agent"), dict) else None
    user_yaml = eps.get("user") if isinstance(eps.get("user"), dict) else None
    if (given or user_given) and agent_yaml is None and "base_url" not in given:
        raise ConfigError(
            "the endpoint flags need --base-url (or an endpoints: section in the config)"
        )
    for k, v in given.items():
        put(f"endpoints.agent.{k}", v, flag_of[k])
    if user_yaml is not None or user_given:
        if user_yaml is None:
            # A separate user endpoint starts as a copy of the agent's.
            put("endpoints.user", {**(agent_yaml or {}), "name": "user"}, "--user-base-url")
        for k, v in given.items():
            if k not in user_given:
                put(f"endpoints.user.{k}", v, flag_of[k])
        for k, v in user_given.items():
            put(f"endpoints.user.{k}", v, f"--user-{k.replace('_', '-')}")
    # Otherwise the user role takes the agent's endpoint as a whole (RunConfig does that).
    if a.get("metrics_url") is not None:
        put("endpoints.agent.metrics_url", a["metrics_url"], "--metrics-url")
    return ov, flags


def _console() -> Console:
    # Piped output (CI logs, `| tee`) gets a wide table instead of Rich's 80-column default.
    return Console() if sys.stdout.isatty() else Console(width=160)


def _err(msg: str) -> None:
    print(f"agentload: error: {msg}", file=sys.stderr, flush=True)


def _configure(a: dict[str, Any]) -> RunConfig:
    if a.get("resume") is not None:
        given = [n for n, v in a.items() if n not in _OUTPUT_ONLY and v not in (None, False)]
        if given or a.get("config") is not None:
            raise ConfigError(
                "--resume continues with the run's saved config.yaml; drop "
                + ", ".join("--" + n.replace("_", "-") for n in (given or ["config"]))
            )
        cfg = load_saved_config(a["resume"])
        updates: dict[str, Any] = {"out": str(a["resume"])}
        if a.get("drain_timeout") is not None:
            load = cfg.load.model_copy(
                update={"drain_timeout_s": parse_duration(a["drain_timeout"])}
            )
            updates["load"] = load
        return cfg.model_copy(update=updates)
    from agentload.config import read_yaml

    path = a.get("config")
    base = read_yaml(path) if path is not None else {}
    ov, flags = cli_overrides(a, base)
    return build_config(path=path, overrides=ov, flags=flags)


def _progress_mode(a: dict[str, Any]) -> str:
    if a.get("quiet"):
        return "off"
    mode = a.get("progress") or "auto"
    if mode not in ("auto", "live", "plain", "off"):
        raise ConfigError(f"flag --progress: expected auto, live, plain or off, got {mode!r}")
    return mode


def _main(command: str, a: dict[str, Any]) -> None:
    quiet = bool(a.get("quiet"))
    logging.basicConfig(level=logging.WARNING, format="agentload: %(levelname)s: %(message)s")

    def say(msg: str) -> None:
        if not quiet:
            print(f"[agentload] {msg}", file=sys.stderr, flush=True)

    try:
        cfg = _configure(a)
        mode = _progress_mode(a)
        if command == "run":
            outcome = run_async(
                execute_run(
                    cfg,
                    resume=a.get("resume") is not None,
                    progress=mode,
                    say=say,
                    progress_interval_s=a["progress_interval"],
                    overwrite=a.get("overwrite", False),
                )
            )
            code = _finish_run(outcome, a)
        else:
            kind, points = _sweep_points(a)
            doc, code = run_async(
                execute_sweep(
                    cfg,
                    kind=kind,
                    points=points,
                    stop_on_slo_fail=a.get("stop_on_slo_fail", False),
                    progress=mode,
                    say=say,
                    progress_interval_s=a["progress_interval"],
                    overwrite=a.get("overwrite", False),
                )
            )
            if a.get("json_out"):
                sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
            elif not quiet:
                _console().print(sweep_table(doc))
                best = doc.get("best_point")
                if doc.get("slo"):
                    print(
                        f"highest {kind} meeting the SLO: {'none' if best is None else f'{best:g}'}"
                    )
                print(f"sweep written to {cfg.out}/sweep.json and sweep.md")
    except ConfigError as e:
        _err(str(e))
        raise typer.Exit(EXIT_USAGE) from None
    except RunFailed as e:
        _err(str(e))
        raise typer.Exit(EXIT_FAILED) from None
    except KeyboardInterrupt:
        _err("interrupted")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    raise typer.Exit(code)


def _finish_run(out: RunOutcome, a: dict[str, Any]) -> int:
    if a.get("json_out"):
        sys.stdout.write(orjson.dumps(out.summary, option=orjson.OPT_INDENT_2).decode() + "\n")
    elif not a.get("quiet"):
        try:
            from agentload.report import summary_table

            _console().print(summary_table(out.summary or {}))
        except ImportError:
            pass
        client = (out.summary or {}).get("client") or {}
        lag = (client.get("event_loop_lag_s") or {}).get("p99")
        print(
            f"{out.stop_reason}: {client.get('episodes_finished', 0)} episodes in "
            f"{client.get('elapsed_s', 0.0):.1f} s; event-loop lag p99 "
            f"{'-' if lag is None else f'{lag * 1000:.1f} ms'}; results in {out.out_dir}"
        )
        html = [p for p in out.report_files if str(p).endswith(".html")]
        if html:
            print(f"report: {html[0]}")
    if out.exit_code == EXIT_INTERRUPTED and not a.get("quiet"):
        print(f"interrupted: continue with `agentload run --resume {out.out_dir}`", file=sys.stderr)
    return out.exit_code


def _floats(text: str, flag: str) -> list[float]:
    try:
        vals = [float(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise ConfigError(f"flag {flag}: expected numbers like 1,2,4,8, got {text!r}") from None
    if not vals or any(v <= 0 for v in vals):
        raise ConfigError(f"flag {flag}: expected positive numbers like 1,2,4,8")
    return vals


def _sweep_points(a: dict[str, Any]) -> tuple[str, list[float]]:
    c, r = a.get("points"), a.get("rates")
    if (c is None) == (r is None):
        raise ConfigError("sweep needs exactly one of --concurrency 1,2,4,… or --rates 0.5,1,…")
    if c is not None:
        vals = _floats(c, "--concurrency")
        if any(v != int(v) for v in vals):
            raise ConfigError("flag --concurrency: expected whole numbers")
        return "concurrency", vals
    return "rate", _floats(r, "--rates")


app.command(
    "run",
    help=RUN_HELP,
    epilog="Annotated options: docs/run.md.",
    context_settings={"max_content_width": 100},
)(run_command)


# The sweep takes the run's options, with the load points in place of --concurrency / --rate.
def sweep_command(**kwargs: Any) -> None:
    _main("sweep", kwargs)


_run_params = inspect.signature(run_command).parameters
_sweep_params = [p for n, p in _run_params.items() if n not in ("concurrency", "rate", "resume")]
_sweep_params[1:1] = [
    inspect.Parameter(
        "points",
        inspect.Parameter.KEYWORD_ONLY,
        default=None,
        annotation=Annotated[
            str | None,
            _opt("--concurrency", "-n", help="Closed-loop points, e.g. 1,2,4,8,16,32.", panel=L),
        ],
    ),
    inspect.Parameter(
        "rates",
        inspect.Parameter.KEYWORD_ONLY,
        default=None,
        annotation=Annotated[
            str | None,
            _opt("--rates", help="Open-loop points (episodes/s), e.g. 0.5,1,2,4.", panel=L),
        ],
    ),
    inspect.Parameter(
        "stop_on_slo_fail",
        inspect.Parameter.KEYWORD_ONLY,
        default=False,
        annotation=Annotated[
            bool,
            typer.Option(
                "--stop-on-slo-fail",
                help="Stop at the first point that misses the SLO.",
                rich_help_panel=L,
            ),
        ],
    ),
]
_sweep_params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in _sweep_params]
sweep_command.__signature__ = inspect.Signature(_sweep_params)  # type: ignore[attr-defined]
sweep_command.__annotations__ = {p.name: p.annotation for p in _sweep_params}

app.command(
    "sweep",
    help="Run the same configuration at several load points (one sub-folder each) and "
    "tabulate throughput, latency, success and SLO attainment per point; names the highest "
    "load that meets the SLO (--slo). Writes sweep.json and sweep.md.\n\n" + _EXIT_CODES,
    context_settings={"max_content_width": 100},
)(sweep_command)

__all__ = ["EXIT_OK", "run_command", "sweep_command"]
