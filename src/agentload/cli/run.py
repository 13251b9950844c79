"""`agentload run` and `agentload sweep`: thin shells over agentload.runner."""

import logging
import sys
from collections.abc import Callable
from typing import Any

import orjson
import typer
from rich.console import Console
from rich.markup import escape

from agentload.cli.app import app
from agentload.cli.options import (
    RUN_OPTIONS,
    SWEEP_OPTIONS,
    command_options,
    parse_headers,
    parse_json_object,
    simple_paths,
)
from agentload.config import (
    EXAMPLE_CONFIG,
    MAX_CONCURRENCY,
    ConfigError,
    RunConfig,
    build_config,
    set_path,
)
from agentload.runner import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    RunFailed,
    RunOutcome,
    execute_run,
    load_saved_config,
)
from agentload.sweep import execute_sweep, sweep_table
from agentload.units import parse_duration
from agentload.util import run_async

_EXIT_CODES = """\
Exit codes: 0 episodes completed; 1 the run failed (0 episodes measured, every call failed,
more than --max-infra-error-share of the episodes ended on infrastructure errors, the endpoint
stayed down, a harness error, or the summary / report could not be written); 2 bad usage or
configuration; 130 interrupted (Ctrl-C / SIGTERM: no new episodes, in-flight ones drain for
--drain-timeout, the summary is written and `agentload run --resume DIR` continues)."""

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

_SIMPLE = simple_paths(RUN_OPTIONS)
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
    "no_report",
    "no_metrics",
    "metrics_interval",
    "outage_timeout",
    "no_preflight",
    "mlflow",
    "ray",
}
# Flags --resume takes on top of the saved config: (config path, flag, value).
_RESUME_FLAGS = {
    "drain_timeout": ("load.drain_timeout_s", "--drain-timeout"),
    "metrics_interval": ("metrics.interval_s", "--metrics-interval"),
    "outage_timeout": ("load.outage_timeout_s", "--outage-timeout"),
    # The cluster a run continues on may not be the one it started on.
    "ray": ("ray.address", "--ray"),
}
PROGRESS_INTERVAL_MIN_S = 0.1


def resume_overrides(a: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    ov: dict[str, Any] = {}
    flags: dict[str, str] = {}
    for name, (path, flag) in _RESUME_FLAGS.items():
        if a.get(name) is not None:
            ov[path], flags[path] = a[name], flag
    if a.get("no_report"):
        ov["report"], flags["report"] = False, "--no-report"
    if a.get("no_metrics"):
        ov["metrics.enabled"], flags["metrics.enabled"] = False, "--no-metrics"
    if a.get("no_preflight"):
        ov["preflight"], flags["preflight"] = False, "--no-preflight"
    return ov, flags


@command_options(RUN_OPTIONS)
def run_command(**kwargs: Any) -> None:
    _main("run", kwargs)


class _Overrides:
    """Dotted-path overrides of the run configuration, each with the flag that set it."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.flags: dict[str, str] = {}

    def put(self, path: str, value: Any, flag: str) -> None:
        self.values[path] = value
        self.flags[path] = flag


# Endpoint fields the agent flags set, with their flags.
_ENDPOINT_FLAGS = {
    "headers": "--header",
    "base_url": "--base-url",
    "model": "--model",
    "api_key_env": "--api-key-env",
    "max_tokens": "--max-tokens",
    "temperature": "--temperature",
    "extra_body": "--extra-body",
}


def cli_overrides(a: dict[str, Any], base: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """(dotted-path overrides, path -> flag) from the parsed flags."""
    ov = _Overrides()
    _plain_overrides(a, ov)
    _endpoint_overrides(a, base, ov)
    return ov.values, ov.flags


def _plain_overrides(a: dict[str, Any], ov: _Overrides) -> None:
    """Flags that map onto one config path, the loop mode and the tool latency."""
    for name, (path, flag) in _SIMPLE.items():
        if a.get(name) is not None:
            ov.put(path, a[name], flag)
    if a.get("no_metrics"):
        ov.put("metrics.enabled", False, "--no-metrics")
    if a.get("no_report"):
        ov.put("report", False, "--no-report")
    if a.get("no_preflight"):
        ov.put("preflight", False, "--no-preflight")
    if a.get("concurrency") is not None and a.get("rate") is None:
        # A flag picks the loop mode even when the file chose the other one.
        ov.put("load.rate", None, "--concurrency")
        ov.put("load.max_concurrency", None, "--concurrency")
    if a.get("rate") is not None and a.get("concurrency") is None:
        ov.put("load.concurrency", None, "--rate")
    if a.get("tool_latency") is not None:
        kind, _, mean = str(a["tool_latency"]).partition(":")
        try:
            ov.put("workload.tool_latency.kind", kind.strip(), "--tool-latency")
            ov.put("workload.tool_latency.mean_s", parse_duration(mean or 0), "--tool-latency")
        except ValueError as e:
            raise ConfigError(f"flag --tool-latency: {e}") from None


def _agent_endpoint_fields(a: dict[str, Any]) -> dict[str, Any]:
    """The endpoint fields given by the agent flags (--base-url, --model, ...)."""
    fields = {
        "base_url": a.get("base_url"),
        "model": a.get("model"),
        "api_key_env": a.get("api_key_env"),
        "max_tokens": a.get("max_tokens"),
        "temperature": a.get("temperature"),
    }
    if a.get("extra_body") is not None:
        try:
            fields["extra_body"] = parse_json_object(a["extra_body"], "--extra-body")
        except ValueError as e:
            raise ConfigError(str(e)) from None
    if a.get("header"):
        fields["headers"] = parse_headers(a["header"])
    return {k: v for k, v in fields.items() if v is not None}


def _endpoint_overrides(a: dict[str, Any], base: dict[str, Any], ov: _Overrides) -> None:
    """Endpoint shorthand: --base-url / --model set the agent, and the user unless given."""
    eps = base.get("endpoints")
    if not isinstance(eps, dict):
        eps = {}
    given = _agent_endpoint_fields(a)
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
        ov.put(f"endpoints.agent.{k}", v, _ENDPOINT_FLAGS[k])
    if user_yaml is not None or user_given:
        if user_yaml is None:
            # A separate user endpoint starts as a copy of the agent's.
            ov.put("endpoints.user", {**(agent_yaml or {}), "name": "user"}, "--user-base-url")
        for k, v in given.items():
            if k not in user_given:
                ov.put(f"endpoints.user.{k}", v, _ENDPOINT_FLAGS[k])
        for k, v in user_given.items():
            ov.put(f"endpoints.user.{k}", v, f"--user-{k.replace('_', '-')}")
    # Otherwise the user role takes the agent's endpoint as a whole (RunConfig does that).
    judge_given = {
        k: v
        for k, v in (("base_url", a.get("judge_base_url")), ("model", a.get("judge_model")))
        if v is not None
    }
    if judge_given:
        judge_yaml = eps.get("judge") if isinstance(eps.get("judge"), dict) else None
        if judge_yaml is None:
            # A judge starts as a copy of the agent's endpoint, as a separate user does.
            ov.put("endpoints.judge", {**(agent_yaml or {}), "name": "judge"}, "--judge-base-url")
            for k, v in given.items():
                if k not in judge_given:
                    ov.put(f"endpoints.judge.{k}", v, _ENDPOINT_FLAGS[k])
        for k, v in judge_given.items():
            ov.put(f"endpoints.judge.{k}", v, f"--judge-{k.replace('_', '-')}")
    if a.get("metrics_url") is not None:
        urls = [u.strip() for u in str(a["metrics_url"]).split(",") if u.strip()]
        if len(urls) > 1:  # replicas behind one address: scraped and summed
            ov.put("endpoints.agent.metrics_urls", urls, "--metrics-url")
        else:
            ov.put("endpoints.agent.metrics_url", a["metrics_url"], "--metrics-url")


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
        if a.get("overwrite"):
            raise ConfigError("--resume keeps the results in DIR; drop --overwrite")
        from agentload.results.jsonl import ResultsError
        from agentload.results.resume import check_resumable

        try:  # a FIFO would hang the reads below; an emptied config.yaml, run the defaults
            check_resumable(a["resume"])
        except ResultsError as e:
            raise ConfigError(f"--resume: {e}") from None
        cfg = load_saved_config(a["resume"])
        # Output flags apply to this attempt; they change no episode.
        data = cfg.model_dump(by_alias=True)
        ov, flags = resume_overrides(a)
        for dotted, value in ov.items():
            set_path(data, dotted, value)
        data["out"] = str(a["resume"])
        return build_config(data=data, flags=flags)
    from agentload.config import check_task_selection, read_yaml

    path = a.get("config")
    base = read_yaml(path) if path is not None else {}
    if path is not None:
        check_task_selection(path, base)
    ov, flags = cli_overrides(a, base)
    return build_config(path=path, overrides=ov, flags=flags)


def _progress_mode(a: dict[str, Any]) -> str:
    if a.get("quiet"):
        return "off"
    mode = a.get("progress") or "auto"
    if mode not in ("auto", "live", "plain", "off"):
        raise ConfigError(f"flag --progress: expected auto, live, plain or off, got {mode!r}")
    every = a.get("progress_interval")
    # A tiny period costs the client CPU that shows up in its own measurements.
    if every is not None and not PROGRESS_INTERVAL_MIN_S <= every <= 86_400:
        raise ConfigError(
            f"flag --progress-interval: expected {PROGRESS_INTERVAL_MIN_S:g} to 86400 seconds, "
            f"got {every!r}"
        )
    return mode


def _check_places(cfg: RunConfig) -> None:
    """Bad input, not a failed run (exit 2): an --out that is a file (or below one), a --ray
    host that does not resolve."""
    from agentload.results.dirs import check_out_dir
    from agentload.results.jsonl import ResultsError

    try:
        check_out_dir(cfg.out)
    except ResultsError as e:
        raise ConfigError(f"results folder (--out): {e}") from None
    address = cfg.ray.address if cfg.ray is not None else "auto"
    host, _, port = address.rpartition(":")
    if address != "auto" and "://" not in address and host and port.isdigit():
        import socket

        try:
            socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM)
        except socket.gaierror as e:
            raise ConfigError(f"--ray {address}: cannot resolve {host!r} ({e.strerror})") from None


def _main(
    command: str, a: dict[str, Any], configure: Callable[[dict[str, Any]], RunConfig] | None = None
) -> None:
    """The flow of run-like commands (flags → RunConfig → execute_run); `configure` builds
    the RunConfig of commands with options of their own (replay)."""
    quiet = bool(a.get("quiet"))
    logging.basicConfig(level=logging.WARNING, format="agentload: %(levelname)s: %(message)s")

    def say(msg: str) -> None:
        if not quiet:
            print(f"[agentload] {msg}", file=sys.stderr, flush=True)

    try:
        cfg = (configure or _configure)(a)
        _check_places(cfg)
        mode = _progress_mode(a)
        if command != "sweep":
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
            _mlflow(a, say, lambda m: m.log_run(outcome.out_dir, outcome.summary or {}))
        else:
            # A resumed sweep takes its points from sweep.json.
            kind, points = ("concurrency", []) if a.get("resume") else _sweep_points(a)
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
                    resume=a.get("resume") is not None,
                )
            )
            _mlflow(a, say, lambda m: m.log_sweep(cfg.out, doc))
            if a.get("json_out"):
                sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
            elif not quiet:
                _console().print(sweep_table(doc))
                best = doc.get("best_point")
                if doc.get("slo"):
                    print(
                        f"highest {kind} meeting the SLO: {'none' if best is None else f'{best:g}'}"
                    )
                print(f"sweep written to {cfg.out}/sweep.json, sweep.md and sweep.html")
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


def _mlflow(a: dict[str, Any], say: Any, log: Any) -> None:
    """Log to MLflow when asked; a logging failure is reported, the results stay."""
    from agentload.integrations import mlflow as ml

    if not ml.enabled(bool(a.get("mlflow"))):
        return
    try:
        run_id = log(ml)
    except Exception as e:  # MLflow raises many kinds (connection, REST, ImportError, ...)
        _err(f"MLflow logging failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
        return
    say(f"logged to MLflow: run {run_id}")


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
        noun = "conversations" if (out.summary or {}).get("replay") else "episodes"
        print(
            f"{out.stop_reason}: {client.get('episodes_finished', 0)} {noun} in "
            f"{client.get('elapsed_s', 0.0):.1f} s; event-loop lag p99 "
            f"{'-' if lag is None else f'{lag * 1000:.1f} ms'}; results in {out.out_dir}"
        )
        if client.get("workers"):  # a run over workers (the driver is imported only then)
            from agentload.distributed.driver import describe_workers

            if line := describe_workers(client):
                print(line)
        html = [p for p in out.report_files if str(p).endswith(".html")]
        if html:
            print(f"report: {html[0]}")
    if out.exit_code == EXIT_INTERRUPTED and not a.get("quiet"):
        print(f"interrupted: continue with `agentload run --resume {out.out_dir}`", file=sys.stderr)
    return out.exit_code


def _floats(text: str, flag: str, most: float) -> list[float]:
    try:
        vals = [float(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise ConfigError(f"flag {flag}: expected numbers like 1,2,4,8, got {text!r}") from None
    # Every point is checked before the first one runs.
    if not vals or any(not 0 < v <= most for v in vals):  # also false for NaN
        raise ConfigError(
            f"flag {flag}: expected numbers above 0 and at most {most:g}, got {text!r}"
        )
    return vals


def _sweep_points(a: dict[str, Any]) -> tuple[str, list[float]]:
    c, r = a.get("points"), a.get("rates")
    if c is not None and r is None:
        vals = _floats(c, "--concurrency", MAX_CONCURRENCY)
        if any(v != int(v) for v in vals):
            raise ConfigError("flag --concurrency: expected whole numbers")
        return "concurrency", vals
    if r is not None and c is None:
        return "rate", _floats(r, "--rates", 1e6)
    raise ConfigError("sweep needs exactly one of --concurrency 1,2,4,… or --rates 0.5,1,…")


app.command(
    "run",
    help=RUN_HELP,
    epilog="Annotated options: docs/run.md.",
    context_settings={"max_content_width": 100},
)(run_command)


# The sweep takes the run's options, with the load points in place of --concurrency / --rate.
@command_options(SWEEP_OPTIONS)
def sweep_command(**kwargs: Any) -> None:
    _main("sweep", kwargs)


app.command(
    "sweep",
    help="Run the same configuration at several load points (one sub-folder each) and "
    "tabulate throughput, latency, success and SLO attainment per point; names the highest "
    "load that meets the SLO (--slo). Writes sweep.json and sweep.md.\n\n" + _EXIT_CODES,
    context_settings={"max_content_width": 100},
)(sweep_command)

__all__ = ["EXIT_OK", "run_command", "sweep_command"]
