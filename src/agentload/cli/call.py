"""`agentload call`: send one chat completion and show what came back and how fast."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from agentload.cli.options import REQUIRED, Opt, command_options, from_model
from agentload.cli.root import app, examples
from agentload.client.client import CallResult, ChatClient
from agentload.client.endpoint import EndpointConfig, RetryPolicy, Timeouts
from agentload.config import format_validation_error
from agentload.flags import OUTPUT, SECONDS
from agentload.fmt import secs
from agentload.util import run_async


def _load_json(path: Path, what: str) -> Any:
    try:
        return orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise typer.BadParameter(f"{what} file not found: {path}") from None
    except orjson.JSONDecodeError as e:
        raise typer.BadParameter(f"{path}: not valid JSON ({e})") from None


def _print_human(res: CallResult, console: Console) -> None:
    rec = res.record
    if res.reasoning:
        console.print("[bold]reasoning[/]")
        console.print(res.reasoning, markup=False, highlight=False)
    if res.content:
        console.print("[bold]content[/]")
        console.print(res.content, markup=False, highlight=False)
    for tc in res.tool_calls:
        fn = tc["function"]
        console.print(
            f"[bold]tool call[/] {fn['name']}({fn['arguments']})  [dim]{tc['id']}[/]",
            highlight=False,
        )
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="dim")
    t.add_column()
    if rec.status != "ok":
        t.add_row("error", f"[red]{rec.error_kind}[/] {rec.error_message or ''}")
    t.add_row("status", f"{rec.status} (HTTP {rec.http_status or '-'}, attempts {rec.attempts})")
    t.add_row("finish reason", str(rec.finish_reason))
    t.add_row("TTFT", secs(rec.ttft_s))
    t.add_row("end-to-end", secs(rec.e2e_s))
    t.add_row("TPOT", secs(rec.tpot_s))
    itl = rec.itl
    if itl.count:
        t.add_row(
            "ITL",
            f"mean {secs(itl.mean)}  p50 {secs(itl.p50)}  p90 {secs(itl.p90)}  "
            f"p99 {secs(itl.p99)}  max {secs(itl.max)}  (n={itl.count})",
        )
    est = " (estimated)" if rec.tokens_estimated else ""
    t.add_row(
        "tokens" + est,
        f"prompt {rec.prompt_tokens}  cached {rec.cached_tokens}  "
        f"completion {rec.completion_tokens}  reasoning {rec.reasoning_tokens or 0}",
    )
    console.print(t)


REQUEST = "Request"

# The endpoint's options are EndpointConfig's (base URL and model required here).
_max_tokens, _temperature = from_model(EndpointConfig, "max_tokens", "temperature")
CALL_OPTIONS = [
    *(
        replace(o, type=str, default=REQUIRED)
        for o in from_model(EndpointConfig, "base_url", "model")
    ),
    *from_model(EndpointConfig, "api_key_env", "headers", "extra_body"),
    Opt("prompt", ("--prompt",), str | None, "User message text.", REQUEST, metavar="TEXT"),
    Opt(
        "messages",
        ("--messages",),
        Path | None,
        "JSON file with an OpenAI `messages` list (instead of --prompt).",
        REQUEST,
        metavar="FILE",
    ),
    Opt(
        "system",
        ("--system",),
        str | None,
        "System message prepended to the messages.",
        REQUEST,
        metavar="TEXT",
    ),
    Opt(
        "tools",
        ("--tools",),
        Path | None,
        "JSON file with an OpenAI `tools` list (or a request body holding one).",
        REQUEST,
        metavar="FILE",
    ),
    Opt(
        "tool_choice",
        ("--tool-choice",),
        str | None,
        "auto | none | required | a tool name (named choice).",
        REQUEST,
        metavar="CHOICE",
    ),
    replace(_max_tokens, help="max_tokens for the reply.", panel=REQUEST, min=1),
    replace(_temperature, panel=REQUEST, min=0.0),
    Opt("seed", ("--seed",), int | None, "Sampling seed sent to the server.", REQUEST, metavar="N"),
    Opt("no_stream", ("--no-stream",), bool, "Send a non-streaming request.", REQUEST, False),
    Opt(
        "timeout",
        ("--timeout",),
        float,
        "Total time limit per attempt, in seconds.",
        REQUEST,
        300.0,
        metavar=SECONDS,
        min=0.001,
    ),
    Opt(
        "retries",
        ("--retries",),
        int,
        "Retries for retryable errors (429, 5xx, ...).",
        REQUEST,
        0,
        metavar="N",
        min=0,
    ),
    Opt(
        "keep_itl",
        ("--keep-itl",),
        bool,
        "Include every inter-token gap in --json output.",
        OUTPUT,
        False,
    ),
    Opt("json_out", ("--json",), bool, "Print the full result as JSON.", OUTPUT, False),
]


@app.command(
    "call",
    epilog=examples(
        "# one request to `agentload sim` (serving agentload-sim on port 8000)",
        "agentload call --base-url http://127.0.0.1:8000 --model agentload-sim \\",
        "  --prompt 'Say hi' --max-tokens 32",
        "agentload call --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen3-8B \\",
        "  --prompt Hi --no-stream --json",
    ),
)
@command_options(CALL_OPTIONS)
def call(**a: Any) -> None:
    """Send one chat completion and print the reply with its timing and token figures.

    Exit code 0 on success; 1 when the call failed (the error kind is printed); 2 for bad
    arguments.
    """
    msgs = _messages(a["prompt"], a["messages"], a["system"])
    tools = _tools(a["tools"])
    endpoint = _endpoint(a)

    async def _go() -> CallResult:
        async with ChatClient(endpoint) as client:
            return await client.chat(
                msgs,
                tools=tools,
                tool_choice=_tool_choice(a["tool_choice"]),
                max_tokens=a["max_tokens"],
                temperature=a["temperature"],
                seed=a["seed"],
                keep_itl=a["keep_itl"],
            )

    res = run_async(_go())
    if a["json_out"]:
        sys.stdout.buffer.write(orjson.dumps(res.to_dict(), option=orjson.OPT_INDENT_2) + b"\n")
    else:
        _print_human(res, Console())
    if not res.ok:
        Console(stderr=True).print(
            f"[red]call failed:[/] {res.record.error_kind}: {res.record.error_message or ''}",
            highlight=False,
        )
        raise typer.Exit(1)


def _messages(prompt: str | None, path: Path | None, system: str | None) -> list[dict[str, Any]]:
    """The request's messages: --prompt as one user message, or the --messages file."""
    if (prompt is None) == (path is None):
        raise typer.BadParameter("give exactly one of --prompt or --messages")
    msgs: list[dict[str, Any]]
    if path is not None:
        loaded = _load_json(path, "messages")
        if not isinstance(loaded, list) or not all(isinstance(m, dict) for m in loaded):
            raise typer.BadParameter(f"{path}: expected a JSON list of message objects")
        msgs = loaded
    else:
        msgs = [{"role": "user", "content": prompt}]
    if system is not None:
        msgs = [{"role": "system", "content": system}, *msgs]
    return msgs


def _tools(path: Path | None) -> list[Any] | None:
    if path is None:
        return None
    tools = _load_json(path, "tools")
    if isinstance(tools, dict) and isinstance(tools.get("tools"), list):
        tools = tools["tools"]  # a saved request body: take its tools
    if not isinstance(tools, list):
        raise typer.BadParameter(
            f"{path}: expected a JSON list of tools (or an object with a 'tools' list)"
        )
    return tools


def _tool_choice(choice: str | None) -> Any:
    """auto / none / required as they are; any other name as a named function choice."""
    if choice and choice not in ("auto", "none", "required"):
        return {"type": "function", "function": {"name": choice}}
    return choice


def _endpoint(a: dict[str, Any]) -> EndpointConfig:
    timeout = a["timeout"]
    try:
        return EndpointConfig(
            base_url=a["base_url"],
            model=a["model"],
            api_key_env=a["api_key_env"],
            headers=a["header"] or {},
            extra_body=a["extra_body"] or {},
            stream=not a["no_stream"],
            timeouts=Timeouts(total=timeout, first_token=timeout, idle=timeout),
            retry=RetryPolicy(max_attempts=a["retries"] + 1),
        )
    except ValidationError as e:
        flags = {"headers": "--header", "extra_body": "--extra-body", "base_url": "--base-url"}
        msg = format_validation_error(e, source=None, flags=flags)
        raise typer.BadParameter(msg.removeprefix("invalid configuration: ")) from None
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
