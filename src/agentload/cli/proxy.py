"""The ``agentload proxy`` command: a recording OpenAI-compatible pass-through."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import orjson
import typer

from agentload.cli.app import app
from agentload.cli.tools import (
    BodyTimeoutOpt,
    HeaderTimeoutOpt,
    KeepaliveTimeoutOpt,
    MaxBodyOpt,
    MaxConnectionsOpt,
)


@app.command("proxy")
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
            "--duration", help="Stop after this many seconds (default: Ctrl-C).", metavar="S", min=0
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
    from agentload.http_limits import check_port, limits_from_flags
    from agentload.proxy.server import ProxyConfig, _upstream_root, serve
    from agentload.util import run_async

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        if (bad := check_port(port)) is not None:
            raise ValueError(bad)
        limits = limits_from_flags(
            header_timeout, body_timeout, keepalive_timeout, max_body, max_connections
        )
    except ValueError as e:
        typer.echo(f"agentload proxy: {e}", err=True)
        raise typer.Exit(2) from None
    try:
        _upstream_root(upstream)
    except ValueError as e:
        typer.echo(f"agentload proxy: {e}", err=True)
        raise typer.Exit(2) from None
    cfg = ProxyConfig(
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
    try:
        summary = run_async(serve(cfg, duration))
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
    figures = summary.get("proxy", {})
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
