"""`agentload run` and `agentload sweep`: thin shells over agentload.runner."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import typer
from rich.console import Console
from rich.markup import escape

from agentload.cli.options import (
    RUN_OPTIONS,
    SWEEP_OPTIONS,
    Given,
    Opt,
    RunArgs,
    SweepArgs,
    command_options,
    given,
    parse_args,
)
from agentload.cli.root import app, examples
from agentload.config import (
    EXAMPLE_CONFIG,
    MAX_CONCURRENCY,
    ConfigError,
    RunConfig,
    build_config,
    set_path,
)
from agentload.report.context import noun_of
from agentload.results.records import as_summary, summary_json
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
from agentload.util import run_async

_EXIT_CODES = """\
Exit codes: 0 episodes completed; 1 the run failed (0 episodes measured, every call failed,
more than --max-infra-error-share of the episodes ended on infrastructure errors, the endpoint
stayed down, a harness error, the summary / report could not be written, or MLflow logging
was asked for and failed); 2 bad usage or configuration; 130 interrupted (Ctrl-C / SIGTERM:
no new episodes, in-flight ones drain for --drain-timeout, the summary is written and
`agentload run --resume DIR` continues)."""

_SWEEP_EXIT_CODES = """\
Exit codes: 0 every point completed; 1 a point failed (the sweep stops there; sweep.json says
which) or MLflow logging was asked for and failed; 2 bad usage or configuration; 130
interrupted (`agentload sweep --resume DIR` continues at the point it was on)."""

# Where each command writes when neither --out nor the config file's `out` says.
DEFAULT_OUT = {"run": "results/run", "sweep": "results/sweep", "replay": "results/replay"}

RUN_HELP = f"""Run agentic episodes against an endpoint (or the embedded simulator) and record
every call, session and trajectory, then write summary.json and a report.

With no endpoint (no --base-url, no `endpoints:` in the config) the embedded simulator starts
on a free loopback port for the run and stops afterwards.

\b
Example config (YAML; every flag overrides it; annotated in docs/run.md):
{escape(EXAMPLE_CONFIG)}
{_EXIT_CODES}
"""


@dataclass(frozen=True)
class CommandLine:
    """A run-like command's parsed command line: its own options, typed, and the RunConfig
    fields it set (path -> value, and the flag of each)."""

    args: RunArgs
    config: Given
    resume_ok: frozenset[str]
    """Config paths --resume takes on top of the saved config."""
    dataset: Path | None = None
    command: str = "run"

    @classmethod
    def parse(
        cls,
        opts: list[Opt],
        kwargs: dict[str, Any],
        model: type[RunArgs] = RunArgs,
        dataset: Path | None = None,
        command: str = "run",
    ) -> CommandLine:
        try:
            args = parse_args(model, opts, kwargs)
        except ConfigError as e:
            _err(str(e))
            raise typer.Exit(EXIT_USAGE) from None
        resume_ok = frozenset(o.path for o in opts if o.resume and o.path)
        return cls(args, given(opts, kwargs), resume_ok, dataset, command)


def resume_overrides(cl: CommandLine) -> tuple[dict[str, Any], dict[str, str]]:
    """The flags that apply to a resumed attempt (they change how it runs, not what)."""
    paths = [p for p in cl.config.values if p in cl.resume_ok]
    return {p: cl.config.values[p] for p in paths}, {p: cl.config.flags[p] for p in paths}


@command_options(RUN_OPTIONS)
def run_command(**kwargs: Any) -> None:
    run_flow("run", CommandLine.parse(RUN_OPTIONS, kwargs))


class _Overrides:
    """Dotted-path overrides of the run configuration, each with the flag that set it."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.flags: dict[str, str] = {}

    def put(self, path: str, value: Any, flag: str) -> None:
        self.values[path] = value
        self.flags[path] = flag


def cli_overrides(g: Given, base: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """(dotted-path overrides, path -> flag) from the parsed flags."""
    ov = _Overrides()
    _plain_overrides(g, ov)
    _endpoint_overrides(g, base, ov)
    return ov.values, ov.flags


def _plain_overrides(g: Given, ov: _Overrides) -> None:
    """Flags that set one config path, and the loop mode a load flag picks."""
    for path, value in g.values.items():
        if not path.startswith("endpoints."):
            ov.put(path, value, g.flags[path])
    if "load.concurrency" in g and "load.rate" not in g:
        # A flag picks the loop mode even when the file chose the other one.
        ov.put("load.rate", None, "--concurrency")
        ov.put("load.max_concurrency", None, "--concurrency")
    if "load.rate" in g and "load.concurrency" not in g:
        ov.put("load.concurrency", None, "--rate")


def _role_fields(g: Given, role: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The endpoint fields the flags give a role, with their flags."""
    prefix = f"endpoints.{role}."
    paths = [p for p in g.values if p.startswith(prefix)]
    return (
        {p.removeprefix(prefix): g.values[p] for p in paths},
        {p.removeprefix(prefix): g.flags[p] for p in paths},
    )


def only_model(fields: dict[str, Any]) -> str:
    """--base-url without --model: the model the server serves, when it serves exactly one
    (said on stderr); otherwise one line naming the ones it serves."""
    import urllib.error
    import urllib.request

    # lazy: start-up: a command's machinery loads when it runs, not for --help
    from agentload.client.endpoint import normalize_base_url
    from agentload.redact import DEFAULT_KEY_ENV, redact_url

    url = f"{normalize_base_url(str(fields['base_url']))}/models"
    key = os.environ.get(str(fields.get("api_key_env") or DEFAULT_KEY_ENV))
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            data = orjson.loads(r.read(4 * 1024 * 1024)).get("data")
        ids = [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]
    except (OSError, ValueError, AttributeError, TypeError, KeyError) as e:
        raise ConfigError(
            f"--model is needed: the models could not be listed at {redact_url(url)} ({e})"
        ) from None
    if len(ids) != 1:
        served = ", ".join(ids) if ids else "none"
        raise ConfigError(f"--model is needed: {redact_url(url)} serves {served}")
    print(f"[agentload] --model not given: {ids[0]}, the one model the server serves",
          file=sys.stderr, flush=True)  # fmt: skip
    return ids[0]


def _endpoint_overrides(g: Given, base: dict[str, Any], ov: _Overrides) -> None:
    """Endpoint shorthand: --base-url / --model set the agent, and the user and judge unless
    they are given their own."""
    eps = base.get("endpoints")
    if not isinstance(eps, dict):
        eps = {}
    agent, agent_flags = _role_fields(g, "agent")
    agent_yaml = eps.get("agent") if isinstance(eps.get("agent"), dict) else None
    roles = {r: _role_fields(g, r) for r in ("user", "judge")}
    if (agent or roles["user"][0]) and agent_yaml is None and "base_url" not in agent:
        raise ConfigError(
            "the endpoint flags need --base-url (or an endpoints: section in the config)"
        )
    if "base_url" in agent and "model" not in agent and not (agent_yaml or {}).get("model"):
        agent["model"], agent_flags["model"] = only_model(agent), "--model"
    for k, v in agent.items():
        ov.put(f"endpoints.agent.{k}", v, agent_flags[k])
    for role, (own, own_flags) in roles.items():
        role_yaml = eps.get(role) if isinstance(eps.get(role), dict) else None
        # Without a section or flags of its own, the user takes the agent's endpoint as a
        # whole (RunConfig does that), and there is no judge.
        if role_yaml is None and not own:
            continue
        if role_yaml is None:
            # A role's own endpoint starts as a copy of the agent's.
            ov.put(
                f"endpoints.{role}",
                {**(agent_yaml or {}), "name": role},
                own_flags.get("base_url", next(iter(own_flags.values()), "--base-url")),
            )
        if role_yaml is None or role == "user":
            for k, v in agent.items():
                if k not in own:
                    ov.put(f"endpoints.{role}.{k}", v, agent_flags[k])
        for k, v in own.items():
            ov.put(f"endpoints.{role}.{k}", v, own_flags[k])


def _console() -> Console:
    # Piped output (CI logs, `| tee`) gets a wide table instead of Rich's 80-column default.
    return Console() if sys.stdout.isatty() else Console(width=160)


def _err(msg: str) -> None:
    print(f"agentload: error: {msg}", file=sys.stderr, flush=True)


def _configure(cl: CommandLine) -> RunConfig:
    if cl.args.resume is not None:
        return configure_resume(cl)
    # lazy: start-up: a command's machinery loads when it runs, not for --help
    from agentload.config import check_task_selection, read_yaml

    path = cl.args.config
    base = read_yaml(path) if path is not None else {}
    if path is not None:
        check_task_selection(path, base)
    ov, flags = cli_overrides(cl.config, base)
    default_out(cl, base, ov)
    return build_config(path=path, overrides=ov, flags=flags)


def default_out(cl: CommandLine, base: dict[str, Any], ov: dict[str, Any]) -> None:
    """The command's own results folder when neither --out nor the config file names one."""
    if "out" not in cl.config and "out" not in base:
        ov["out"] = DEFAULT_OUT[cl.command]


def configure_resume(cl: CommandLine) -> RunConfig:
    """The saved config of the run in --resume DIR, with the flags a resumed attempt takes."""
    assert cl.args.resume is not None
    drop = [cl.config.flags[p] for p in cl.config.values if p not in cl.resume_ok]
    if cl.args.config is not None:
        drop.append("--config")
    if drop:
        raise ConfigError(
            "--resume continues with the run's saved config.yaml; drop " + ", ".join(drop)
        )
    if cl.args.overwrite:
        raise ConfigError("--resume keeps the results in DIR; drop --overwrite")
    # lazy: start-up: a command's machinery loads when it runs, not for --help
    from agentload.results.jsonl import ResultsError
    from agentload.results.resume import check_resumable

    try:  # a FIFO would hang the reads below; an emptied config.yaml, run the defaults
        check_resumable(cl.args.resume)
    except ResultsError as e:
        raise ConfigError(f"--resume: {e}") from None
    cfg = load_saved_config(cl.args.resume)
    # Output flags apply to this attempt; they change no episode.
    data = cfg.model_dump(by_alias=True)
    ov, flags = resume_overrides(cl)
    for dotted, value in ov.items():
        set_path(data, dotted, value)
    data["out"] = str(cl.args.resume)
    return build_config(data=data, flags=flags)


def _check_places(cfg: RunConfig) -> None:
    """Bad input, not a failed run (exit 2): an --out that is a file (or below one), a --ray
    host that does not resolve."""
    # lazy: start-up: a command's machinery loads when it runs, not for --help
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


def run_flow(
    command: str, cl: CommandLine, configure: Callable[[CommandLine], RunConfig] | None = None
) -> None:
    """The flow of run-like commands (flags → RunConfig → execute_run); `configure` builds
    the RunConfig of commands with options of their own (replay)."""
    quiet = cl.args.quiet
    logging.basicConfig(level=logging.WARNING, format="agentload: %(levelname)s: %(message)s")

    def say(msg: str) -> None:
        if not quiet:
            print(f"[agentload] {msg}", file=sys.stderr, flush=True)

    try:
        cfg = (configure or _configure)(cl)
        _check_places(cfg)
        if isinstance(cl.args, SweepArgs):
            code = _sweep(cfg, cl.args, say)
        else:
            outcome = run_async(
                execute_run(
                    cfg,
                    resume=cl.args.resume is not None,
                    progress=cl.args.progress_mode,
                    say=say,
                    progress_interval_s=cl.args.progress_interval,
                    overwrite=cl.args.overwrite,
                )
            )
            code = _finish_run(outcome, cl.args)
            if not _mlflow(
                cl.args, say, lambda m: m.log_run(outcome.out_dir, outcome.summary or {})
            ):
                code = code or EXIT_FAILED
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


def _sweep(cfg: RunConfig, args: SweepArgs, say: Callable[[str], None]) -> int:
    # A resumed sweep takes its points from sweep.json.
    kind, points = ("concurrency", []) if args.resume else _sweep_points(args)
    doc, code = run_async(
        execute_sweep(
            cfg,
            kind=kind,
            points=points,
            stop_on_slo_fail=args.stop_on_slo_fail,
            progress=args.progress_mode,
            say=say,
            progress_interval_s=args.progress_interval,
            overwrite=args.overwrite,
            resume=args.resume is not None,
        )
    )
    if not _mlflow(args, say, lambda m: m.log_sweep(cfg.out, doc), "sweep run"):
        code = code or EXIT_FAILED
    if args.json_out:
        sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
    elif not args.quiet:
        _console().print(sweep_table(doc))
        best = doc.get("best_point")
        if doc.get("slo"):
            print(f"highest {kind} meeting the SLO: {'none' if best is None else f'{best:g}'}")
        print(f"sweep written to {cfg.out}/sweep.json, sweep.md and sweep.html")
    return code


def _mlflow(args: RunArgs, say: Any, log: Any, what: str = "run") -> bool:
    """Log to MLflow when asked (--mlflow or MLFLOW_TRACKING_URI); False when that failed.
    The failure is one whole line and the results folder stays complete; the caller turns a
    successful run's exit code into 1, so a job that asked for MLflow notices."""
    # lazy: start-up: a command's machinery loads when it runs, not for --help
    from agentload.integrations import mlflow as ml

    if not ml.enabled(args.mlflow):
        return True
    try:
        run_id = log(ml)
    except Exception as e:  # MLflow raises many kinds (connection, REST, ImportError, ...)
        _err(f"MLflow logging failed (the results are written): {ml.one_line(e)}")
        return False
    say(f"logged to MLflow: {what} {run_id}")
    return True


def _finish_run(out: RunOutcome, args: RunArgs) -> int:
    if args.json_out:  # the bytes of summary.json (null when there is none)
        sys.stdout.buffer.write(summary_json(out.summary) if out.summary else b"null\n")
        sys.stdout.flush()
    elif not args.quiet:
        s = as_summary(out.summary)
        try:
            # lazy: start-up: a command's machinery loads when it runs, not for --help
            from agentload.report import summary_table

            _console().print(summary_table(s))
        except ImportError:
            pass
        client = s.client.dump() if s.client else {}
        described = (s.run or {}).get("synthetic") or {}
        if described.get("description"):
            print(described["description"])
        lag = (
            s.client.event_loop_lag_s.stat("p99")
            if s.client and s.client.event_loop_lag_s
            else None
        )
        print(
            f"{out.stop_reason}: {client.get('episodes_finished', 0)} {noun_of(s.context or {})} "
            f"in {client.get('elapsed_s', 0.0):.1f} s; event-loop lag p99 "
            f"{'-' if lag is None else f'{lag * 1000:.1f} ms'}; results in {out.out_dir}"
        )
        if client.get("workers"):  # a run over workers (the driver is imported only then)
            # lazy: start-up: a command's machinery loads when it runs, not for --help
            from agentload.distributed.driver import describe_workers

            if line := describe_workers(client):
                print(line)
        html = [p for p in out.report_files if str(p).endswith(".html")]
        if html:
            print(f"report: {html[0]}")
    if out.exit_code == EXIT_FAILED and args.quiet:
        # --quiet silences progress, not why the run failed: scripts read it from stderr.
        _err(f"the run {out.stop_reason}")
    if out.exit_code == EXIT_INTERRUPTED and not args.quiet:
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


def _sweep_points(args: SweepArgs) -> tuple[str, list[float]]:
    c, r = args.points, args.rates
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
    epilog=examples(
        "# 20 airline episodes on the embedded simulator (no server needed)",
        "agentload run --tasks airline --num-episodes 20 --out results/demo",
        "agentload run --base-url http://127.0.0.1:8000 --model Qwen/Qwen3-8B \\",
        "  --tasks airline,retail --trials 4 --concurrency 16 --warmup 10s",
        "# fixed lengths: 512 tokens in, 128 out, 8 at a time for 5 minutes",
        "agentload run --workload synthetic --input-tokens 512 \\",
        "  --output-tokens 128 --concurrency 8 --duration 5m",
    )
    + "\n\nAnnotated options: docs/run.md.",
    context_settings={"max_content_width": 100},
)(run_command)


# The sweep takes the run's options, with the load points in place of --concurrency / --rate.
@command_options(SWEEP_OPTIONS)
def sweep_command(**kwargs: Any) -> None:
    run_flow("sweep", CommandLine.parse(SWEEP_OPTIONS, kwargs, SweepArgs, command="sweep"))


app.command(
    "sweep",
    help="Run the same configuration at several load points (one sub-folder each) and "
    "tabulate throughput, latency, success and SLO attainment per point; names the highest "
    "load that meets the SLO (--slo). Writes sweep.json, sweep.md and sweep.html (each load "
    "value links to its point's report).\n\n" + _SWEEP_EXIT_CODES,
    epilog=examples(
        "# three load points on the embedded simulator, in about a minute",
        "agentload sweep --tasks airline --concurrency 1,4,16 --num-episodes 16 \\",
        "  --sim-speedup 8",
        "agentload sweep --base-url http://127.0.0.1:8000 --model Qwen/Qwen3-8B \\",
        "  --concurrency 1,2,4,8,16,32 --slo ttft_p90=2s,e2e_p99=10s \\",
        "  --stop-on-slo-fail",
        "agentload sweep --workload synthetic --rates 0.5,1,2,4 --duration 2m",
    ),
    context_settings={"max_content_width": 100},
)(sweep_command)

__all__ = ["EXIT_OK", "run_command", "sweep_command"]
