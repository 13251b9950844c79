"""The ``agentload sim`` command (also ``python -m agentload.sim``)."""

from __future__ import annotations

import logging
import os
import stat
from typing import Annotated, Any

import typer
from pydantic import BaseModel, Field, ValidationError

from agentload.cli.options import ARGS, CONFIG, command_options, from_model, given, parse_args
from agentload.cli.root import app, examples
from agentload.config import ConfigError
from agentload.flags import flag
from agentload.sim.settings import (
    BEHAVIOUR,
    ENGINE,
    FAULTS,
    LOGS,
    SERVER,
    SimConfig,
    describe_errors,
)


class SimArgs(BaseModel):
    """Options of `agentload sim` that are not simulator settings."""

    api_key_env: Annotated[str | None, flag("--api-key-env", panel=SERVER, metavar="NAME")] = Field(
        None, description="Like --api-key, the key read from this environment variable."
    )
    api_key_file: Annotated[str | None, flag("--api-key-file", panel=SERVER, metavar="PATH")] = (
        Field(None, description="Like --api-key, the key read from this file (its first line).")
    )
    log_level: Annotated[str, flag("--log-level", panel=LOGS, metavar="LEVEL")] = Field(
        "INFO", description="Logging level."
    )


def _sim(*paths: str, panel: str | None = None) -> list[Any]:
    return from_model(SimConfig, *paths, panel=panel)


# Each option is a SimConfig field's (declared there, with its default) or SimArgs'.
SIM_OPTIONS = [
    *_sim("host", "port", "model", "api_key"),
    *from_model(SimArgs, "api_key_env", "api_key_file", target=ARGS),
    *_sim("tokenizer", "header_timeout_s", "body_timeout_s", "keepalive_timeout_s"),
    *_sim("profile", "max_num_seqs", panel=ENGINE),
    *_sim("max_num_batched_tokens", "kv_blocks", "block_size", "prefix_caching", "max_model_len"),
    *_sim("speedup", "seed", panel=ENGINE),
    *_sim(
        "mean_output_tokens",
        "output_tokens_sigma",
        "mean_reasoning_tokens",
        "tool_call_probability",
        "parallel_tool_call_probability",
    ),
    *_sim("behaviour_options", panel=BEHAVIOUR),
    *_sim("fault_rate", panel=FAULTS),
    *_sim("fault_kinds", "fault_stall_s", "fault_after_tokens", "log_interval_s"),
    *from_model(SimArgs, "log_level", target=ARGS),
]


# A key file larger than this is not a key (and reading /dev/zero must end).
KEY_FILE_MAX_BYTES = 64 * 1024


def _read_key_file(path: str) -> str:
    flag = "--api-key-file"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block the open
    except OSError as e:
        raise typer.BadParameter(
            f"cannot read {path}: {e.strerror or e}", param_hint=flag
        ) from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise typer.BadParameter(f"{path} is not a regular file", param_hint=flag)
        data = f.read(KEY_FILE_MAX_BYTES + 1)
    if len(data) > KEY_FILE_MAX_BYTES:
        raise typer.BadParameter(
            f"{path} is larger than {KEY_FILE_MAX_BYTES // 1024} KiB; expected one key",
            param_hint=flag,
        )
    try:
        lines = data.decode().strip().splitlines()
    except UnicodeDecodeError:
        raise typer.BadParameter(f"{path} is not UTF-8 text", param_hint=flag) from None
    if not lines or not lines[0].strip():
        raise typer.BadParameter(f"{path} is empty; expected the key", param_hint=flag)
    return lines[0].strip()


def api_key(args: SimArgs, given_key: str | None) -> str | None:
    """The key the server requires, from --api-key, --api-key-env or --api-key-file (one of
    them at most): the latter two keep it out of the process list."""
    named = {"--api-key": given_key, "--api-key-env": args.api_key_env}
    named["--api-key-file"] = args.api_key_file
    given_flags = [f for f, v in named.items() if v is not None]
    if len(given_flags) > 1:
        raise typer.BadParameter(
            f"give the key one way only, not {' and '.join(given_flags)}",
            param_hint=given_flags[0],
        )
    if args.api_key_env is not None:
        key = os.environ.get(args.api_key_env)
        if not key:
            raise typer.BadParameter(
                f"environment variable {args.api_key_env} is not set or empty",
                param_hint="--api-key-env",
            )
        return str(key)
    if args.api_key_file is not None:
        return _read_key_file(args.api_key_file)
    return given_key


def sim_config(a: dict[str, Any]) -> SimConfig:
    """The SimConfig the parsed flags describe (ValidationError for values it refuses)."""
    settings = given(SIM_OPTIONS, a, CONFIG).values
    args = parse_args(SimArgs, SIM_OPTIONS, a)
    settings["api_key"] = api_key(args, settings.get("api_key"))
    return SimConfig(**settings)


@command_options(SIM_OPTIONS)
def sim_command(**a: Any) -> None:
    """Run the embedded engine simulator: an OpenAI-compatible server with vLLM's wire format,
    metrics and continuous-batching timing."""
    try:
        config = sim_config(a)
    except ValidationError as exc:
        for line in describe_errors(exc):
            typer.echo(f"agentload sim: {line}", err=True)
        raise typer.Exit(2) from None
    except ConfigError as exc:
        typer.echo(f"agentload sim: {str(exc).removeprefix('invalid configuration: ')}", err=True)
        raise typer.Exit(2) from None
    logging.basicConfig(
        level=a["log_level"].upper() if a.get("log_level") else "INFO",
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # lazy: start-up: a command's machinery loads when it runs, not for --help
    from agentload.sim.api import run_blocking

    run_blocking(config)


sim_app = typer.Typer(
    name="sim",
    epilog=examples(
        "agentload sim --port 8000",
        "# a calibrated profile, 4x faster, 5% injected faults",
        "agentload sim --profile vllm-cpu-tiny --speedup 4 --fault-rate 0.05",
        "agentload sim calibrate --from results/demo -o fitted.yaml",
    ),
    invoke_without_command=True,
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@sim_app.callback(invoke_without_command=True)
@command_options(SIM_OPTIONS)
def _sim_group(ctx: typer.Context, **a: Any) -> None:
    """Run the embedded engine simulator: an OpenAI-compatible server with vLLM's wire format,
    metrics and continuous-batching timing. `agentload sim calibrate` fits a timing profile to a
    real server; `agentload sim fidelity` checks a profile against one."""
    if ctx.invoked_subcommand is None:
        sim_command(**a)


app.add_typer(sim_app, name="sim")


def standalone() -> None:
    """``python -m agentload.sim FLAGS``: the sim command without the rest of the CLI."""
    single = typer.Typer(
        add_completion=False,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    single.command()(sim_command)
    single()
