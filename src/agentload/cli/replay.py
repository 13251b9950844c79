"""`agentload replay`: recorded conversations against an endpoint, through the run's flow."""

from pathlib import Path
from typing import Annotated, Any

import typer

from agentload.cli.app import app
from agentload.cli.options import (
    CONCURRENCY,
    CONFIG,
    ENDPOINTS,
    LOAD_SHAPE,
    OUTPUTS,
    RATE,
    RESUME,
    SIMULATOR,
    Opt,
    command_options,
    simple_paths,
)
from agentload.cli.run import _configure, _main, cli_overrides
from agentload.config import ConfigError, RunConfig, build_config, read_yaml

PANEL = "Replay"

REPLAY = [
    Opt(
        "history",
        ("--history",),
        str | None,
        "dataset (send the recorded history) | live (send the server's answers).",
        PANEL,
        path="replay.history",
        metavar="MODE",
    ),
    Opt(
        "num_conversations",
        ("--num-conversations",),
        int | None,
        "Replay the first N conversations.",
        PANEL,
        path="replay.num_conversations",
        metavar="N",
    ),
    Opt(
        "repeat",
        ("--repeat",),
        int | None,
        "Passes over the dataset.",
        PANEL,
        path="replay.repeat",
        metavar="K",
    ),
    Opt(
        "salt",
        ("--salt",),
        bool,
        "Salt prompts per repeat and conversation (MLPerf's scheme).",
        PANEL,
        False,
    ),
    Opt(
        "delay_scale",
        ("--delay-scale",),
        float | None,
        "Scale recorded delay_seconds by X.",
        PANEL,
        path="replay.delay_scale",
        metavar="X",
    ),
    Opt("no_delays", ("--no-delays",), bool, "Ignore recorded delays.", PANEL, False),
    Opt(
        "turn_timeout",
        ("--turn-timeout",),
        str | None,
        "Abort a conversation whose turn takes longer, e.g. 60s.",
        PANEL,
        path="replay.turn_timeout_s",
        metavar="TIME",
    ),
    Opt(
        "on_divergence",
        ("--on-divergence",),
        str | None,
        "Live history: continue (with the recorded results) | stop.",
        PANEL,
        path="replay.on_divergence",
        metavar="WHAT",
    ),
    Opt(
        "ignore_eos",
        ("--ignore-eos/--no-ignore-eos",),
        bool,
        "Output length = the recorded answer's (default: on the simulator only).",
        PANEL,
        path="replay.ignore_eos",
    ),
    Opt(
        "format",
        ("--format",),
        str | None,
        "auto | mlperf | trajectories | openai.",
        PANEL,
        path="replay.format",
    ),
]

REPLAY_OPTIONS = [
    *CONFIG,
    *RESUME,
    *ENDPOINTS,
    CONCURRENCY,
    RATE,
    *LOAD_SHAPE,
    *REPLAY,
    *SIMULATOR,
    *OUTPUTS,
]
_SIMPLE = simple_paths(REPLAY)

HELP = """Replay recorded conversations (MLPerf agentic flat rows, agentload trajectories.jsonl
or OpenAI-messages JSONL) against an endpoint, or the embedded simulator when none is given,
turn by turn; results as for `run` (calls, sessions = one line per conversation, summary,
report). --concurrency is active conversations (one call in flight each), --rate
conversation arrivals per second. Details: docs/replay.md.

""" + (
    "Exit codes: 0 finished; 1 the run failed; 2 bad usage, configuration or dataset (one "
    "line naming file:line and field); 130 interrupted (continue with --resume DIR)."
)


def configure(a: dict[str, Any]) -> RunConfig:
    if a.get("resume") is not None:
        if a.get("dataset") is not None:
            raise ConfigError("--resume continues with the run's saved config.yaml; drop DATASET")
        return _configure({k: v for k, v in a.items() if k != "dataset"})
    path = a.get("config")
    base = read_yaml(path) if path is not None else {}
    ov, flags = cli_overrides(a, base)
    ov["kind"], flags["kind"] = "replay", "replay"
    if a.get("dataset") is not None:
        ov["replay.dataset"], flags["replay.dataset"] = str(a["dataset"]), "DATASET"
    elif not (base.get("replay") or {}).get("dataset"):
        raise ConfigError("replay needs a DATASET (or replay.dataset in --config)")
    for name, (p, flag) in _SIMPLE.items():
        if a.get(name) is not None:
            ov[p], flags[p] = a[name], flag
    if a.get("salt"):
        ov["replay.salt"], flags["replay.salt"] = True, "--salt"
    if a.get("no_delays"):
        ov["replay.delay_scale"], flags["replay.delay_scale"] = 0.0, "--no-delays"
    return build_config(path=path, overrides=ov, flags=flags)


@command_options(REPLAY_OPTIONS)
def replay_command(
    dataset: Annotated[
        Path | None, typer.Argument(help="Dataset file (JSONL).", show_default=False)
    ] = None,
    **kwargs: Any,
) -> None:
    _main("replay", {"dataset": dataset, **kwargs}, configure)


app.command(
    "replay",
    help=HELP,
    epilog="Annotated options: docs/replay.md.",
    context_settings={"max_content_width": 100},
)(replay_command)
