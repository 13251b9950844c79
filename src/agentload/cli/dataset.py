"""`agentload dataset`: validate, describe and convert replay datasets."""

import sys
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.table import Table

from agentload.cli.root import app, examples
from agentload.workloads.dataset import FORMATS, DatasetError, detect_format, index_dataset
from agentload.workloads.dataset_tools import CONVERT_FROM, convert, dataset_stats, verify
from agentload.workloads.traces import BlockText

dataset_app = typer.Typer(
    help="Validate, describe and convert replay datasets (MLPerf agentic flat rows, agentload "
    "trajectories.jsonl, OpenAI-messages JSONL, ShareGPT JSON, Mooncake traces). Exit codes: "
    "0 ok; 1 the dataset is invalid (one line naming file:line and field) or a verification "
    "failed; 2 bad usage.",
    epilog=examples(
        "agentload dataset validate conversations.jsonl",
        "agentload dataset stats sharegpt.json --tokenizer tokenizer.json",
        "agentload dataset convert trace.jsonl rows.jsonl --from mooncake",
    ),
    no_args_is_help=True,
)
app.add_typer(dataset_app, name="dataset")

Dataset = Annotated[
    Path, typer.Argument(help="Dataset file (JSONL, or a ShareGPT JSON array).", show_default=False)
]
Format = Annotated[
    str, typer.Option("--format", help=f"auto | {' | '.join(FORMATS)}.", metavar="FORMAT")
]
Json = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]
BlockTokens = Annotated[
    int,
    typer.Option(
        "--block-tokens", help="Mooncake traces: tokens per hash_ids block.", metavar="N", min=1
    ),
]


def _fmt(value: str, known: tuple[str, ...]) -> str | None:
    if value not in known:
        print(f"agentload: error: --format: expected one of {', '.join(known)}", file=sys.stderr)
        raise typer.Exit(2)
    return None if value == "auto" else value


def _fail(e: DatasetError) -> None:
    print(f"agentload: error: {e}", file=sys.stderr)
    raise typer.Exit(1)


def _print_json(doc: Any) -> None:
    sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")


@dataset_app.command(
    "validate",
    epilog=examples(
        "agentload dataset validate conversations.jsonl",
        "agentload dataset validate mooncake_trace.jsonl --format mooncake --json",
    ),
)
def validate_command(
    dataset: Dataset,
    format: Format = "auto",
    block_tokens: BlockTokens = 512,
    json_out: Json = False,
) -> None:
    """Check every record; print the first error as file:line: field, or a one-line summary."""
    fmt = _fmt(format, ("auto", *FORMATS))
    try:
        ds = index_dataset(dataset, fmt, block_tokens=block_tokens)
    except DatasetError as e:
        if json_out:
            _print_json({"valid": False, "error": str(e)})
            raise typer.Exit(1) from None
        _fail(e)
        return
    doc: dict[str, Any] = {
        "valid": True,
        "format": ds.format,
        "conversations": len(ds.spans),
        "client_turns": ds.client_turns,
        "without_system_prompt": sum(1 for s in ds.spans if not s.has_system),
    }
    if ds.format == "sharegpt":
        doc["skipped"] = ds.skipped
    if ds.format == "mooncake":
        doc["without_system_prompt"] = 0  # a trace has no system prompts to salt
        times = [s.arrival_s or 0.0 for s in ds.spans]
        doc["duration_s"] = max(times) - min(times)
    if json_out:
        _print_json(doc)
    else:
        print(
            f"{dataset.name}: valid {ds.format} dataset, {doc['conversations']} conversations, "
            f"{doc['client_turns']} client turns"
            + (
                f" ({doc['without_system_prompt']} without a system prompt: --salt adds one)"
                if doc["without_system_prompt"]
                else ""
            )
            + (f" over {doc['duration_s']:.1f} s" if "duration_s" in doc else "")
        )
        if doc.get("skipped"):
            what = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in doc["skipped"].items())
            print(f"skipped or adjusted: {what}")


@dataset_app.command(
    "stats",
    epilog=examples(
        "agentload dataset stats sharegpt.json",
        "agentload dataset stats results/demo/trajectories.jsonl --json",
        "agentload dataset stats rows.jsonl --tokenizer tokenizer.json",
    ),
)
def stats_command(
    dataset: Dataset,
    format: Format = "auto",
    tokenizer: Annotated[
        Path | None,
        typer.Option(
            "--tokenizer",
            help="tokenizer.json for exact token counts (default: estimated).",
            metavar="FILE",
        ),
    ] = None,
    block_tokens: BlockTokens = 512,
    json_out: Json = False,
) -> None:
    """Conversations, turns, tool calls, and ISL / OSL distributions in tokens."""
    fmt = _fmt(format, ("auto", *FORMATS))
    try:
        doc = dataset_stats(dataset, fmt, tokenizer, block_tokens=block_tokens)
    except DatasetError as e:
        _fail(e)
        return
    if json_out:
        _print_json(doc)
        return
    est = " (estimated)" if doc["tokens_estimated"] else " (exact)"
    trace = doc.get("trace")
    if trace is not None:
        est = " (recorded)"  # a trace's own lengths
    table = Table(title=f"{dataset.name} ({doc['format']})", show_header=True)
    table.add_column("")
    for col in ("count", "mean", "p50", "p90", "p99", "max"):
        table.add_column(col, justify="right")
    for key, label in (
        ("turns_per_conversation", "turns / conversation"),
        ("isl_tokens", "ISL tokens" + est),
        ("osl_tokens", "OSL tokens" + est),
        ("delay_s", "delay s"),
        ("interarrival_s", "inter-arrival s"),
    ):
        d = doc[key] if key in doc else (trace or {}).get(key)
        if d is None or (trace is not None and key == "delay_s"):  # a trace has no delays
            continue
        table.add_row(
            label,
            str(d["count"]),
            *(f"{d[k]:.4g}" if k in d else "-" for k in ("mean", "p50", "p90", "p99", "max")),
        )
    Console(width=None if sys.stdout.isatty() else 120).print(table)
    print(
        f"{doc['conversations']} conversations, {doc['client_turns']} client turns, "
        f"{doc['recorded_answers']} recorded answers, {doc['tool_calls']} tool calls "
        f"({doc['parallel_tool_messages']} parallel messages), "
        f"{doc['answers_with_reasoning']} answers with reasoning, "
        f"{doc['system_prompts']} distinct system prompts"
    )
    if doc.get("skipped"):
        what = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in doc["skipped"].items())
        print(f"skipped or adjusted: {what}")
    if trace is not None:
        rate = trace["requests_per_s"]
        print(
            f"trace: {trace['duration_s']:.1f} s, "
            + (f"{rate:.3g} requests/s, " if rate is not None else "")
            + f"{trace['blocks']} blocks of {trace['block_tokens']} tokens, "
            f"{trace['unique_blocks']} unique, {trace['reused_block_share']:.1%} reused "
            "(the prefix-cache hit share with an unbounded cache)"
        )


@dataset_app.command(
    "convert",
    epilog=examples(
        "agentload dataset convert sharegpt.json rows.jsonl --verify",
        "agentload dataset convert trace.jsonl rows.jsonl --from mooncake \\",
        "  --tokenizer tokenizer.json",
    ),
)
def convert_command(
    source: Annotated[Path, typer.Argument(help="Input file.", show_default=False)],
    out: Annotated[
        Path, typer.Argument(help="Output file (MLPerf flat rows).", show_default=False)
    ],
    from_: Annotated[
        str,
        typer.Option(
            "--from",
            help=f"Input format: {' | '.join(CONVERT_FROM)} (snapshots: a full message "
            "array per checkpoint, {conversation_id, messages, tools?}).",
            metavar="FORMAT",
        ),
    ] = "auto",
    check: Annotated[
        bool,
        typer.Option("--verify", help="Rebuild every client turn from both files and compare."),
    ] = False,
    block_tokens: BlockTokens = 512,
    tokenizer: Annotated[
        Path | None,
        typer.Option(
            "--tokenizer",
            help="Mooncake traces: tokenizer.json for prompts of exactly input_length tokens "
            "(default: estimated).",
            metavar="FILE",
        ),
    ] = None,
    json_out: Json = False,
) -> None:
    """Write a dataset as MLPerf agentic flat rows."""
    fmt = _fmt(from_, CONVERT_FROM)
    if out.resolve() == source.resolve():
        print("agentload: error: OUT must differ from SOURCE", file=sys.stderr)
        raise typer.Exit(2)
    doc: dict[str, Any] = {"source": source.name, "out": str(out)}
    try:
        mooncake = (fmt or detect_format(source)) == "mooncake"
        blocks = BlockText(block_tokens, tokenizer) if mooncake else None
        res = convert(source, out, fmt, blocks=blocks)
        doc.update(conversations=res.conversations, rows=res.rows)
        if check:
            n_conv, n_turns = verify(source, out, fmt, blocks=blocks)
            doc["verified"] = {"conversations": n_conv, "client_turns": n_turns}
    except DatasetError as e:
        _fail(e)
        return
    if json_out:
        _print_json(doc)
        return
    print(f"wrote {doc['rows']} rows of {doc['conversations']} conversations to {out}")
    if check:
        v = doc["verified"]
        print(
            f"verified: {v['client_turns']} client turns of {v['conversations']} "
            "conversations match"
        )
