"""`agentload replay`: recorded conversations against an endpoint, through the run's flow."""

from pathlib import Path
from typing import Annotated, Any

import typer

from agentload.cli.options import REPLAY_OPTIONS, command_options
from agentload.cli.root import app, examples
from agentload.cli.run import CommandLine, cli_overrides, configure_resume, default_out, run_flow
from agentload.config import ConfigError, RunConfig, build_config, read_yaml

HELP = """Replay recorded conversations (MLPerf agentic flat rows, agentload trajectories.jsonl,
OpenAI-messages JSONL, ShareGPT JSON) turn by turn, or Mooncake traces at their timestamps,
against an endpoint or the embedded simulator when none is given.

Results as for `run` (calls, sessions = one line per conversation, summary, report).
--concurrency is active conversations (one call in flight each), --rate
conversation arrivals per second. Details: docs/replay.md.

""" + (
    "Exit codes: 0 finished; 1 the run failed; 2 bad usage, configuration or dataset (one "
    "line naming file:line and field); 130 interrupted (continue with --resume DIR)."
)


def configure(cl: CommandLine) -> RunConfig:
    if cl.args.resume is not None:
        if cl.dataset is not None:
            raise ConfigError("--resume continues with the run's saved config.yaml; drop DATASET")
        return configure_resume(cl)
    path = cl.args.config
    base = read_yaml(path) if path is not None else {}
    ov, flags = cli_overrides(cl.config, base)
    default_out(cl, base, ov)
    ov["kind"], flags["kind"] = "replay", "replay"
    if cl.dataset is not None:
        ov["replay.dataset"], flags["replay.dataset"] = str(cl.dataset), "DATASET"
    elif not (base.get("replay") or {}).get("dataset"):
        raise ConfigError("replay needs a DATASET (or replay.dataset in --config)")
    return build_config(path=path, overrides=ov, flags=flags)


@command_options(REPLAY_OPTIONS)
def replay_command(
    dataset: Annotated[
        Path | None, typer.Argument(help="Dataset file (JSONL).", show_default=False)
    ] = None,
    **kwargs: Any,
) -> None:
    line = CommandLine.parse(REPLAY_OPTIONS, kwargs, dataset=dataset, command="replay")
    run_flow("replay", line, configure)


app.command(
    "replay",
    help=HELP,
    epilog=examples(
        "# a run's own conversations again, on the embedded simulator",
        "agentload replay results/demo/trajectories.jsonl --concurrency 8",
        "agentload replay sharegpt.json --base-url http://127.0.0.1:8000 \\",
        "  --model Qwen/Qwen3-8B --rate 2 --num-episodes 200",
        "agentload replay mooncake_trace.jsonl --format mooncake --salt",
    )
    + "\n\nAnnotated options: docs/replay.md.",
    context_settings={"max_content_width": 100},
)(replay_command)
