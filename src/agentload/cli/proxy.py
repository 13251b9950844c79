"""The ``agentload proxy`` command: a recording OpenAI-compatible pass-through."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import orjson
import typer

from agentload.cli.root import app, examples
from agentload.cli.tools import (
    BodyTimeoutOpt,
    HeaderTimeoutOpt,
    KeepaliveTimeoutOpt,
    MaxBodyOpt,
    MaxConnectionsOpt,
)
from agentload.flags import DURATION
from agentload.units import parse_duration

if TYPE_CHECKING:
    from agentload.proxy.service import ProxyConfig
    from agentload.results.records import Summary


@app.command(
    "proxy",
    epilog=examples(
        "# then point the agent at http://127.0.0.1:8100/v1",
        "agentload proxy --upstream http://127.0.0.1:8000 --out results/agent",
        "agentload proxy --upstream http://127.0.0.1:8000 --out results/agent \\",
        "  --port 9000 --duration 10m --json",
    ),
)
def proxy_command(
    upstream: Annotated[
        str,
        typer.Option(
            "--upstream",
            help="Root URL of the server to forward to, e.g. http://127.0.0.1:8000.",
            metavar="URL",
        ),
    ],
    out: Annotated[Path, typer.Option("--out", help="Results folder to write.", metavar="DIR")],
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on.", metavar="ADDR")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", help="TCP port; 0 picks a free one.", metavar="PORT")
    ] = 8100,
    duration: Annotated[
        float | None,
        typer.Option(
            "--duration",
            help="Stop after this long, e.g. 90s or 10m (default: Ctrl-C).",
            metavar=DURATION,
            parser=parse_duration,
        ),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace results already in --out.")
    ] = False,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the proxy's figures as JSON when it stops.")
    ] = False,
    header_timeout: HeaderTimeoutOpt = 10.0,
    body_timeout: BodyTimeoutOpt = 30.0,
    keepalive_timeout: KeepaliveTimeoutOpt = 75.0,
    max_body: MaxBodyOpt = 64.0,
    max_connections: MaxConnectionsOpt = 4096,
) -> None:
    """Forward every request to --upstream unchanged and record its chat completions (calls,
    sessions, trajectories, summary and report) into --out. Point an agent's OpenAI base URL
    at http://HOST:PORT/v1, or http://HOST:PORT/s/SESSION/v1 to name its session.
    SIGTERM and SIGHUP stop it as Ctrl-C does, with everything written."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    cfg = _proxy_config(
        upstream,
        out,
        host,
        port,
        overwrite,
        (header_timeout, body_timeout, keepalive_timeout, max_body, max_connections),
    )
    summary = _serve(cfg, duration)
    _say_figures(summary.proxy.dump() if summary and summary.proxy else {}, out, json_out)


def _proxy_config(
    upstream: str,
    out: Path,
    host: str,
    port: int,
    overwrite: bool,
    limit_flags: tuple[float, float, float, float, int],
) -> ProxyConfig:
    """The proxy's settings from its flags; exit 2 on a bad port, limit or upstream."""
    # lazy: start-up: a command's machinery loads when it runs, not for --help
    from agentload.http_limits import check_port, limits_from_flags
    from agentload.proxy.service import ProxyConfig, upstream_root

    try:
        if (bad := check_port(port)) is not None:
            raise ValueError(bad)
        limits = limits_from_flags(*limit_flags)
    except ValueError as e:
        typer.echo(f"agentload proxy: {e}", err=True)
        raise typer.Exit(2) from None
    try:
        upstream_root(upstream)
    except ValueError as e:
        typer.echo(f"agentload proxy: {e}", err=True)
        raise typer.Exit(2) from None
    return ProxyConfig(
        upstream=upstream,
        out=out,
        host=host,
        port=port,
        overwrite=overwrite,
        max_body_bytes=limits.max_body_bytes,
        max_callers=limits.max_connections,
        header_timeout_s=limits.header_timeout_s,
        body_timeout_s=limits.body_timeout_s,
        keepalive_timeout_s=limits.keepalive_timeout_s,
    )


def _serve(cfg: ProxyConfig, duration: float | None) -> Summary | None:
    """Run the proxy until it stops; its summary. Exit 2 on results already in --out,
    1 when it cannot listen."""
    # lazy: start-up: a command's machinery loads when it runs, not for --help
    from agentload.proxy.service import serve
    from agentload.util import run_async

    out, host, port = cfg.out, cfg.host, cfg.port  # as given, whatever serving changes
    try:
        return run_async(serve(cfg, duration))
    except FileExistsError:
        typer.echo(
            f"agentload proxy: {out} already holds results; choose another folder or pass "
            "--overwrite",
            err=True,
        )
        raise typer.Exit(2) from None
    except OSError as e:
        typer.echo(f"agentload proxy: cannot listen on {host}:{port}: {e.strerror or e}", err=True)
        raise typer.Exit(1) from None


def _say_figures(figures: dict[str, Any], out: Path, json_out: bool) -> None:
    """The proxy's figures as JSON, or a line: calls, sessions and its added latency."""
    if json_out:
        typer.echo(orjson.dumps(figures, option=orjson.OPT_INDENT_2).decode())
        return
    o = figures.get("overhead_s", {})
    p50, p99 = o.get("p50"), o.get("p99")
    typer.echo(
        f"agentload proxy: {figures.get('calls', 0)} calls in {figures.get('sessions', 0)} "
        f"sessions written to {out}"
        + (f"; added latency p50 {p50 * 1e3:.3f} ms, p99 {p99 * 1e3:.3f} ms" if p99 else "")
    )
