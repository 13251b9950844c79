"""The ``agentload sim`` command (also ``python -m agentload.sim``)."""

from __future__ import annotations

import logging
import os
import stat
from typing import Any

import typer
import yaml
from pydantic import ValidationError

from agentload.cli.app import app
from agentload.cli.options import Opt, command_options
from agentload.sim.config import FAULT_KINDS, FaultKind, SimConfig, describe_errors
from agentload.sim.profiles import BUILTIN_PROFILES, profile_note

SERVER = "Server"
ENGINE = "Engine"
BEHAVIOUR = "Generic behaviour"
FAULTS = "Faults"
LOGS = "Logging"


def _sim(name: str, decl: str, type_: Any, help: str, panel: str, **kw: Any) -> Opt:
    """An option named after its SimConfig field, defaulting to that field's default."""
    default = SimConfig.model_fields[name].get_default(call_default_factory=True)
    return Opt(name, (decl,), type_, help, panel, default, **kw)


# Each option is named after the SimConfig field it sets, and takes that field's default.
SIM_OPTIONS = [
    _sim("host", "--host", str, "Address to bind (loopback by default).", SERVER, metavar="ADDR"),
    _sim("port", "--port", int, "TCP port; 0 picks a free one.", SERVER, metavar="PORT"),
    _sim("model", "--model", str, "Model name served and checked in requests.", SERVER),
    _sim(
        "api_key",
        "--api-key",
        str | None,
        "Require 'Authorization: Bearer KEY' on /v1 routes (401 otherwise). Visible to "
        "other users in the process list: prefer --api-key-env or --api-key-file.",
        SERVER,
        metavar="KEY",
    ),
    Opt(
        "api_key_env",
        ("--api-key-env",),
        str | None,
        "Like --api-key, the key read from this environment variable.",
        SERVER,
        None,
        metavar="NAME",
    ),
    Opt(
        "api_key_file",
        ("--api-key-file",),
        str | None,
        "Like --api-key, the key read from this file (its first line).",
        SERVER,
        None,
        metavar="PATH",
    ),
    _sim(
        "tokenizer",
        "--tokenizer",
        str | None,
        "A tokenizer.json to count tokens with (needs the 'tokenizers' package); "
        "default: the built-in approximation (~4 characters per token).",
        SERVER,
        metavar="FILE",
    ),
    _sim(
        "header_timeout_s",
        "--header-timeout",
        float,
        "Seconds a connection has to send a request's headers, then it is closed.",
        SERVER,
        metavar="S",
    ),
    _sim(
        "body_timeout_s",
        "--body-timeout",
        float,
        "Seconds a request's body may take to arrive (408 and close otherwise).",
        SERVER,
        metavar="S",
    ),
    _sim(
        "profile",
        "--profile",
        str,
        "Timing profile: one of "
        + ", ".join(f"{n} ({profile_note(p)})" for n, p in BUILTIN_PROFILES.items())
        + ", or a YAML/JSON profile file (`agentload sim calibrate` writes one).",
        ENGINE,
        metavar="NAME|FILE",
    ),
    _sim(
        "max_num_seqs",
        "--max-num-seqs",
        int | None,
        "Most sequences in one engine step (default: the profile's).",
        ENGINE,
        metavar="N",
    ),
    _sim(
        "max_num_batched_tokens",
        "--max-num-batched-tokens",
        int | None,
        "Token budget of one engine step, prefill chunks included (default: the profile's).",
        ENGINE,
        metavar="N",
    ),
    _sim(
        "kv_blocks",
        "--kv-blocks",
        int | None,
        "KV-cache size in blocks (default: the profile's).",
        ENGINE,
        metavar="N",
    ),
    _sim(
        "block_size",
        "--block-size",
        int | None,
        "Tokens per KV block, also the prefix-cache granularity (default: the "
        "profile's; 16 on the GPU profiles, 128 on tiny-cpu).",
        ENGINE,
        metavar="N",
    ),
    Opt(
        "no_prefix_caching",
        ("--no-prefix-caching",),
        bool,
        "Disable automatic prefix caching.",
        ENGINE,
        False,
    ),
    _sim(
        "max_model_len",
        "--max-model-len",
        int | None,
        "Longest prompt + completion in tokens (default: the profile's).",
        ENGINE,
        metavar="N",
    ),
    _sim(
        "speedup",
        "--speedup",
        float,
        "Run the model clock this many times faster.",
        ENGINE,
        metavar="X",
    ),
    _sim("seed", "--seed", int, "Seed for outputs and fault selection.", ENGINE, metavar="N"),
    _sim(
        "mean_output_tokens",
        "--mean-output-tokens",
        float,
        "Mean length of text answers, in tokens (lognormal).",
        BEHAVIOUR,
        metavar="N",
    ),
    _sim(
        "output_tokens_sigma",
        "--output-tokens-sigma",
        float,
        "Sigma of the lognormal text length.",
        BEHAVIOUR,
        metavar="S",
    ),
    _sim(
        "mean_reasoning_tokens",
        "--mean-reasoning-tokens",
        float,
        "Mean reasoning length when thinking is requested.",
        BEHAVIOUR,
        metavar="N",
    ),
    _sim(
        "tool_call_probability",
        "--tool-call-probability",
        float,
        "Probability of a tool call when tool_choice is auto.",
        BEHAVIOUR,
        metavar="P",
    ),
    _sim(
        "parallel_tool_call_probability",
        "--parallel-tool-call-probability",
        float,
        "Probability that a tool-call answer holds 2-3 calls.",
        BEHAVIOUR,
        metavar="P",
    ),
    Opt(
        "behaviour_options",
        ("--behaviour-option",),
        list[str],
        "KEY=VALUE passed to behaviours (repeatable), e.g. agent_skill=0.8.",
        BEHAVIOUR,
        [],
        metavar="KEY=VALUE",
    ),
    _sim(
        "fault_rate",
        "--fault-rate",
        float,
        "Share of generation requests that get an injected fault.",
        FAULTS,
        metavar="P",
    ),
    Opt(
        "fault_kinds",
        ("--fault-kinds",),
        list[str],
        "Comma-separated (or repeated) fault kinds among "
        + ", ".join(FAULT_KINDS)
        + " (default: all).",
        FAULTS,
        [],
        metavar="KINDS",
    ),
    _sim(
        "fault_stall_s",
        "--fault-stall-s",
        float,
        "Length of a 'stall' fault in seconds (wall clock, not sped up).",
        FAULTS,
        metavar="S",
    ),
    _sim(
        "fault_after_tokens",
        "--fault-after-tokens",
        int,
        "Tokens sent before a mid-stream fault (reset, truncate, malformed, stall).",
        FAULTS,
        metavar="N",
    ),
    _sim(
        "log_interval_s",
        "--log-interval",
        float,
        "Seconds between log lines with queue, KV and emission-lag figures; 0: none.",
        LOGS,
        metavar="S",
    ),
    Opt("log_level", ("--log-level",), str, "Logging level.", LOGS, "INFO", metavar="LEVEL"),
]


def _parse_options(values: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in values:
        if "=" not in item:
            raise typer.BadParameter(
                f"{item!r}: expected KEY=VALUE", param_hint="--behaviour-option"
            )
        key, _, raw = item.partition("=")
        try:
            value = yaml.safe_load(raw) if raw else ""
        except yaml.YAMLError:
            value = raw
        out[key.strip()] = value
    return out


def _parse_kinds(values: list[str]) -> list[FaultKind]:
    kinds: list[FaultKind] = []
    for value in values:
        for kind in value.split(","):
            kind = kind.strip()
            if not kind:
                continue
            if kind not in FAULT_KINDS:
                raise typer.BadParameter(
                    f"{kind!r} is not one of {', '.join(FAULT_KINDS)}", param_hint="--fault-kinds"
                )
            kinds.append(kind)
    return kinds or list(FAULT_KINDS)


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


def api_key(a: dict[str, Any]) -> str | None:
    """The key the server requires, from --api-key, --api-key-env or --api-key-file (one of
    them at most): the latter two keep it out of the process list."""
    given = [f for f, n in _KEY_FLAGS if a.get(n) is not None]
    if len(given) > 1:
        raise typer.BadParameter(
            f"give the key one way only, not {' and '.join(given)}", param_hint=given[0]
        )
    if a.get("api_key_env") is not None:
        name = a["api_key_env"]
        key = os.environ.get(name)
        if not key:
            raise typer.BadParameter(
                f"environment variable {name} is not set or empty", param_hint="--api-key-env"
            )
        return str(key)
    if a.get("api_key_file") is not None:
        return _read_key_file(a["api_key_file"])
    key = a.get("api_key")
    return None if key is None else str(key)


_KEY_FLAGS = (
    ("--api-key", "api_key"),
    ("--api-key-env", "api_key_env"),
    ("--api-key-file", "api_key_file"),
)


def sim_config(a: dict[str, Any]) -> SimConfig:
    """The SimConfig the parsed flags describe (ValidationError for values it refuses)."""
    skip = ("no_prefix_caching", "log_level", "api_key_env", "api_key_file")
    fields = {k: v for k, v in a.items() if k not in skip}
    fields["api_key"] = api_key(a)
    fields["prefix_caching"] = not a["no_prefix_caching"]
    fields["behaviour_options"] = _parse_options(a["behaviour_options"])
    fields["fault_kinds"] = _parse_kinds(a["fault_kinds"])
    return SimConfig(**fields)


@command_options(SIM_OPTIONS)
def sim_command(**a: Any) -> None:
    """Run the embedded engine simulator: an OpenAI-compatible server with vLLM's wire format,
    metrics and continuous-batching timing."""
    logging.basicConfig(
        level=a["log_level"].upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        config = sim_config(a)
    except ValidationError as exc:
        for line in describe_errors(exc):
            typer.echo(f"agentload sim: {line}", err=True)
        raise typer.Exit(2) from None
    from agentload.sim.api import run_blocking

    run_blocking(config)


sim_app = typer.Typer(
    name="sim",
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
