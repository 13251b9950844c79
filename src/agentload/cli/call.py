"""`agentload call`: send one chat completion and show what came back and how fast."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson
import typer
from rich.console import Console
from rich.table import Table

from agentload.cli.app import app
from agentload.cli.options import parse_headers
from agentload.client.client import CallResult, ChatClient
from agentload.client.config import EndpointConfig, RetryPolicy, Timeouts
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
        f"completion {rec.completion_tokens}  reasoning {rec.reasoning_tokens}",
    )
    console.print(t)


@app.command("call")
def call(
    base_url: str = typer.Option(..., help="Endpoint base URL, e.g. http://127.0.0.1:8000/v1."),
    model: str = typer.Option(..., help="Model name to request."),
    prompt: str | None = typer.Option(None, help="User message text."),
    messages: Path | None = typer.Option(
        None, help="JSON file with an OpenAI `messages` list (instead of --prompt)."
    ),
    system: str | None = typer.Option(None, help="System message prepended to the messages."),
    tools: Path | None = typer.Option(
        None, help="JSON file with an OpenAI `tools` list (or a request body holding one)."
    ),
    tool_choice: str | None = typer.Option(
        None, help="auto | none | required | a tool name (named choice)."
    ),
    max_tokens: int | None = typer.Option(None, min=1, help="max_tokens for the reply."),
    temperature: float | None = typer.Option(None, min=0.0, help="Sampling temperature."),
    seed: int | None = typer.Option(None, help="Sampling seed sent to the server."),
    header: list[str] = typer.Option(
        [], "--header", "-H", help="Extra request header KEY:VALUE (repeatable)."
    ),
    api_key_env: str | None = typer.Option(
        None, help="Environment variable that holds the API key (sent as a bearer token)."
    ),
    extra_body: str | None = typer.Option(
        None, help="JSON object merged into the request body, e.g. '{\"ignore_eos\": true}'."
    ),
    no_stream: bool = typer.Option(False, "--no-stream", help="Send a non-streaming request."),
    timeout: float = typer.Option(300.0, min=0.001, help="Total time limit per attempt (s)."),
    retries: int = typer.Option(0, min=0, help="Retries for retryable errors (429, 5xx, ...)."),
    keep_itl: bool = typer.Option(False, help="Include every inter-token gap in --json output."),
    json_out: bool = typer.Option(False, "--json", help="Print the full result as JSON."),
) -> None:
    """Send one chat completion and print the reply with its timing and token figures.

    Exit code 0 on success; 1 when the call failed (the error kind is printed); 2 for bad
    arguments.
    """
    if (prompt is None) == (messages is None):
        raise typer.BadParameter("give exactly one of --prompt or --messages")
    msgs: list[dict[str, Any]]
    if messages is not None:
        loaded = _load_json(messages, "messages")
        if not isinstance(loaded, list) or not all(isinstance(m, dict) for m in loaded):
            raise typer.BadParameter(f"{messages}: expected a JSON list of message objects")
        msgs = loaded
    else:
        msgs = [{"role": "user", "content": prompt}]
    if system is not None:
        msgs = [{"role": "system", "content": system}, *msgs]
    tool_list = None
    if tools is not None:
        tool_list = _load_json(tools, "tools")
        if isinstance(tool_list, dict) and isinstance(tool_list.get("tools"), list):
            tool_list = tool_list["tools"]  # a saved request body: take its tools
        if not isinstance(tool_list, list):
            raise typer.BadParameter(
                f"{tools}: expected a JSON list of tools (or an object with a 'tools' list)"
            )
    choice: Any = tool_choice
    if tool_choice and tool_choice not in ("auto", "none", "required"):
        choice = {"type": "function", "function": {"name": tool_choice}}
    extra: dict[str, Any] = {}
    if extra_body:
        try:
            extra = orjson.loads(extra_body)
        except orjson.JSONDecodeError as e:
            raise typer.BadParameter(f"--extra-body is not valid JSON: {e}") from None
        if not isinstance(extra, dict):
            raise typer.BadParameter("--extra-body must be a JSON object")
    try:
        endpoint = EndpointConfig(
            base_url=base_url,
            model=model,
            api_key_env=api_key_env,
            headers=parse_headers(header),
            extra_body=extra,
            stream=not no_stream,
            timeouts=Timeouts(total=timeout, first_token=timeout, idle=timeout),
            retry=RetryPolicy(max_attempts=retries + 1),
        )
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None

    async def _go() -> CallResult:
        async with ChatClient(endpoint) as client:
            return await client.chat(
                msgs,
                tools=tool_list,
                tool_choice=choice,
                max_tokens=max_tokens,
                temperature=temperature,
                seed=seed,
                keep_itl=keep_itl,
            )

    res = run_async(_go())
    if json_out:
        sys.stdout.buffer.write(orjson.dumps(res.to_dict(), option=orjson.OPT_INDENT_2) + b"\n")
    else:
        _print_human(res, Console())
    if not res.ok:
        Console(stderr=True).print(
            f"[red]call failed:[/] {res.record.error_kind}: {res.record.error_message or ''}",
            highlight=False,
        )
        raise typer.Exit(1)
