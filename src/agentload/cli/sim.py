"""The ``agentload sim`` command (also ``python -m agentload.sim``)."""

from __future__ import annotations

import logging
from typing import Any, cast

import typer
import yaml
from pydantic import ValidationError

from agentload.cli.app import app
from agentload.sim.config import FAULT_KINDS, FaultKind, SimConfig, describe_errors
from agentload.sim.profiles import BUILTIN_PROFILES


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
            kinds.append(cast(FaultKind, kind))
    return kinds or list(FAULT_KINDS)


def sim_command(
    host: str = typer.Option("127.0.0.1", help="Address to bind (loopback by default)."),
    port: int = typer.Option(8000, help="TCP port; 0 picks a free one."),
    model: str = typer.Option("agentload-sim", help="Model name served and checked in requests."),
    profile: str = typer.Option(
        "tiny-cpu",
        help="Timing profile: one of "
        + ", ".join(BUILTIN_PROFILES)
        + ", or a YAML/JSON profile file.",
    ),
    max_num_seqs: int | None = typer.Option(
        None, help="Most sequences in one engine step (default: the profile's)."
    ),
    max_num_batched_tokens: int | None = typer.Option(
        None,
        help="Token budget of one engine step, prefill chunks included (default: the profile's).",
    ),
    kv_blocks: int | None = typer.Option(
        None, help="KV-cache size in blocks (default: the profile's)."
    ),
    block_size: int | None = typer.Option(
        None,
        help="Tokens per KV block, also the prefix-cache granularity (default: the "
        "profile's; 16 on the GPU profiles, 128 on tiny-cpu).",
    ),
    no_prefix_caching: bool = typer.Option(
        False, "--no-prefix-caching", help="Disable automatic prefix caching."
    ),
    max_model_len: int | None = typer.Option(
        None, help="Longest prompt + completion in tokens (default: the profile's)."
    ),
    speedup: float = typer.Option(1.0, help="Run the model clock this many times faster."),
    api_key: str | None = typer.Option(
        None, help="Require 'Authorization: Bearer KEY' on /v1 routes (401 otherwise)."
    ),
    seed: int = typer.Option(0, help="Seed for outputs and fault selection."),
    tokenizer: str | None = typer.Option(
        None,
        help="A tokenizer.json to count tokens with (needs the 'tokenizers' package); "
        "default: the built-in approximation (~4 characters per token).",
    ),
    mean_output_tokens: float = typer.Option(
        96.0, help="Generic behaviour: mean length of text answers, in tokens (lognormal)."
    ),
    output_tokens_sigma: float = typer.Option(
        0.6, help="Generic behaviour: sigma of the lognormal text length."
    ),
    mean_reasoning_tokens: float = typer.Option(
        64.0, help="Generic behaviour: mean reasoning length when thinking is requested."
    ),
    tool_call_probability: float = typer.Option(
        0.5, help="Generic behaviour: probability of a tool call when tool_choice is auto."
    ),
    parallel_tool_call_probability: float = typer.Option(
        0.0, help="Generic behaviour: probability that a tool-call answer holds 2-3 calls."
    ),
    behaviour_option: list[str] = typer.Option(
        [],
        "--behaviour-option",
        help="KEY=VALUE passed to behaviours (repeatable), e.g. agent_skill=0.8.",
    ),
    fault_rate: float = typer.Option(
        0.0, help="Share of generation requests that get an injected fault."
    ),
    fault_kinds: list[str] = typer.Option(
        [],
        "--fault-kinds",
        help="Comma-separated (or repeated) fault kinds among "
        + ", ".join(FAULT_KINDS)
        + " (default: all).",
    ),
    fault_stall_s: float = typer.Option(
        5.0, help="Length of a 'stall' fault in seconds (wall clock, not sped up)."
    ),
    fault_after_tokens: int = typer.Option(
        2, help="Tokens sent before a mid-stream fault (reset, truncate, malformed, stall)."
    ),
    log_interval: float = typer.Option(
        10.0, help="Seconds between log lines with queue, KV and emission-lag figures; 0: none."
    ),
    header_timeout: float = typer.Option(
        10.0, help="Seconds a connection has to send a request's headers, then it is closed."
    ),
    body_timeout: float = typer.Option(
        30.0, help="Seconds a request's body may take to arrive (408 and close otherwise)."
    ),
    log_level: str = typer.Option("INFO", help="Logging level."),
) -> None:
    """Run the embedded engine simulator: an OpenAI-compatible server with vLLM's wire format,
    metrics and continuous-batching timing."""
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        config = SimConfig(
            host=host,
            port=port,
            model=model,
            profile=profile,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            kv_blocks=kv_blocks,
            block_size=block_size,
            prefix_caching=not no_prefix_caching,
            max_model_len=max_model_len,
            speedup=speedup,
            api_key=api_key,
            seed=seed,
            tokenizer=tokenizer,
            mean_output_tokens=mean_output_tokens,
            output_tokens_sigma=output_tokens_sigma,
            mean_reasoning_tokens=mean_reasoning_tokens,
            tool_call_probability=tool_call_probability,
            parallel_tool_call_probability=parallel_tool_call_probability,
            behaviour_options=_parse_options(behaviour_option),
            fault_rate=fault_rate,
            fault_kinds=_parse_kinds(fault_kinds),
            fault_stall_s=fault_stall_s,
            fault_after_tokens=fault_after_tokens,
            log_interval_s=log_interval,
            header_timeout_s=header_timeout,
            body_timeout_s=body_timeout,
        )
    except ValidationError as exc:
        for line in describe_errors(exc):
            typer.echo(f"agentload sim: {line}", err=True)
        raise typer.Exit(2) from None
    from agentload.sim.api import run_blocking

    run_blocking(config)


app.command("sim")(sim_command)


def standalone() -> None:
    """``python -m agentload.sim FLAGS``: the sim command without the rest of the CLI."""
    single = typer.Typer(
        add_completion=False,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    single.command()(sim_command)
    single()
