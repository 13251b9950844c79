"""`agentload metrics URL`: what an engine's Prometheus endpoint says, once or as it changes."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any

import aiohttp
import orjson
import typer
from rich.console import Console
from rich.table import Table

from agentload.cli.root import app, examples
from agentload.flags import SECONDS
from agentload.redact import Scrubber, redact_url, url_secrets
from agentload.servermetrics.derived import metrics_url, rate_rows, snapshot_rows
from agentload.servermetrics.parse import COUNTERS, GAUGES, parse_metrics
from agentload.servermetrics.scraper import fetch_metrics
from agentload.servermetrics.summary import summarize_endpoint
from agentload.util import run_async


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float) and not v.is_integer():
        return f"{v:,.4g}"
    return f"{int(v):,}"


def _snapshot_table(sample: dict[str, Any], url: str, raw: bool) -> Table:
    t = Table(title=f"{redact_url(url)} ({sample.get('engine')})", title_justify="left")
    t.add_column("figure")
    t.add_column("value", justify="right")
    for label, value in snapshot_rows(sample):
        t.add_row(label, value)
    if raw:
        t.add_section()
        for key in (*GAUGES, *COUNTERS):
            if key in sample:
                t.add_row(key, _fmt(sample[key]))
    return t


async def _fetch(url: str, timeout_s: float) -> dict[str, Any]:
    text = await fetch_metrics(url, timeout_s=timeout_s)
    return {"t": time.time(), "ok": True, **parse_metrics(text)}


async def _watch(
    url: str, interval_s: float, count: int, timeout_s: float, json_out: bool, console: Console
) -> None:
    samples: list[dict[str, Any]] = []
    n = 0
    while count <= 0 or n < count:
        sample = await _fetch(url, timeout_s)
        samples.append(sample)
        n += 1
        if json_out:
            typer.echo(orjson.dumps(sample).decode())
        elif len(samples) >= 2:
            now = snapshot_rows(sample)[:3] + rate_rows(samples[-2], sample)
            console.print("  ".join(f"{k} {v}" for k, v in now), highlight=False)
        if count <= 0 or n < count:
            await asyncio.sleep(interval_s)
    if not json_out and len(samples) >= 2:
        whole = summarize_endpoint(samples)
        console.print(
            f"over {samples[-1]['t'] - samples[0]['t']:.1f} s: prefix-cache hit rate "
            f"{_fmt(whole['prefix_cache_hit_rate'])}, running max "
            f"{_fmt(whole['running']['max'])}, waiting max "
            f"{_fmt(whole['waiting']['max'])}",
            highlight=False,
        )


@app.command(
    "metrics",
    epilog=examples(
        "agentload metrics http://127.0.0.1:8000",
        "# what changes every 2 s, ten times",
        "agentload metrics http://127.0.0.1:8000/metrics --watch 2 --count 10",
    ),
)
def metrics_command(
    url: Annotated[
        str,
        typer.Argument(
            help="The server's base URL (http://127.0.0.1:8000, …/v1) or its /metrics URL."
        ),
    ],
    watch: Annotated[
        float | None,
        typer.Option(
            "--watch", "-w", help="Scrape every SECONDS and print what changed.", metavar=SECONDS
        ),
    ] = None,
    count: Annotated[
        int, typer.Option("--count", help="With --watch: stop after N scrapes (0 = until Ctrl-C).")
    ] = 0,
    timeout_s: Annotated[
        float, typer.Option("--timeout", help="Seconds per scrape.", metavar=SECONDS)
    ] = 5.0,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON sample per line.")] = False,
    raw: Annotated[bool, typer.Option("--raw", help="Also list the raw values kept.")] = False,
) -> None:
    """Show the vLLM / SGLang metrics agentload keeps (running, waiting, KV use, cache, tokens)."""
    console = Console()
    if not url.startswith(("http://", "https://")):
        typer.echo(f"error: {url!r} is not an http(s):// URL", err=True)
        raise typer.Exit(2)
    url = metrics_url(url)
    try:
        if watch is None:
            sample = run_async(_fetch(url, timeout_s))
            if json_out:
                typer.echo(orjson.dumps(sample).decode())
            else:
                console.print(_snapshot_table(sample, url, raw))
        else:
            if watch <= 0:
                raise typer.BadParameter("must be positive", param_hint="--watch")
            run_async(_watch(url, watch, count, timeout_s, json_out, console))
    except (aiohttp.ClientError, TimeoutError) as e:
        # Neither the URL's password nor an error quoting it back is printed.
        why = redact_url(Scrubber(url_secrets(url)).text(str(e)))
        typer.echo(f"error: cannot scrape {redact_url(url)}: {type(e).__name__}: {why}", err=True)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
