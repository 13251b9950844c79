"""`agentload tools`: a domain's tools for agents agentload does not drive (MCP server, HTTP/JSON
endpoint, command scripts)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Coroutine
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import orjson
import typer

from agentload.cli.root import app, examples
from agentload.flags import DURATION, SECONDS
from agentload.units import parse_duration

if TYPE_CHECKING:
    from agentload.http_limits import ServiceLimits
    from agentload.tools import SessionStore, ToolSession

tools_app = typer.Typer(
    help="Serve a domain's tools to outside agents: MCP (HTTP or stdio), HTTP/JSON, scripts.",
    epilog=examples(
        "agentload tools serve --domain airline --port 8765",
        "agentload tools scripts --domain airline --out bin",
    ),
    no_args_is_help=True,
)
app.add_typer(tools_app, name="tools")


class Transport(StrEnum):
    http = "http"
    stdio = "stdio"


DomainOpt = Annotated[
    str, typer.Option("--domain", "-d", help="Domain whose tools to serve.", metavar="NAME")
]


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"agentload tools: {message}", err=True)
    return typer.Exit(code)


def _store(domain: str, seed: int) -> SessionStore:
    # lazy: start-up: a command's machinery loads when it runs, not for --help
    from agentload.domains import domain_names
    from agentload.tools import SessionStore

    if domain not in domain_names():
        raise _fail(f"unknown domain {domain!r}; known: {', '.join(domain_names())}")
    return SessionStore(domain, seed=seed)


def _record(path: Path | None, sessions: list[ToolSession]) -> None:
    """One JSON line per session: its task, actions, final db hash and the grade on the
    database alone (replies are not seen here; `outputs_ok` then only says whether the task
    required any)."""
    if path is None:
        return
    with path.open("wb") as f:
        for s in sessions:
            row = s.info()
            row["db_hash"] = s.env.db_hash()
            row["grade"] = s.grade().to_dict() if s.task is not None else None
            f.write(orjson.dumps(row) + b"\n")


ServeDomainOpt = Annotated[
    str | None,
    typer.Option(
        "--domain",
        "-d",
        help="Domain whose tools to serve (not with --remote).",
        metavar="NAME",
    ),
]
TransportOpt = Annotated[
    Transport,
    typer.Option("--transport", help="http: MCP + JSON over HTTP; stdio: MCP on stdin/out."),
]
TaskOpt = Annotated[
    str | None,
    typer.Option(
        "--task",
        help="Task of the stdio session, or of sessions opened at /mcp without ?task=.",
        metavar="ID",
    ),
]
HostOpt = Annotated[
    str, typer.Option("--host", help="Address to listen on (http).", metavar="ADDR")
]
PortOpt = Annotated[
    int, typer.Option("--port", help="TCP port (http); 0 picks a free one.", metavar="PORT")
]
# The limits of a long-lived HTTP service (agentload.http_limits), shared with `proxy`.
HeaderTimeoutOpt = Annotated[
    float,
    typer.Option(
        "--header-timeout",
        help="Seconds a connection has to send a request's headers, then it is closed.",
        metavar=SECONDS,
    ),
]
BodyTimeoutOpt = Annotated[
    float,
    typer.Option(
        "--body-timeout", help="Seconds a request's body may take to arrive.", metavar=SECONDS
    ),
]
KeepaliveTimeoutOpt = Annotated[
    float,
    typer.Option(
        "--keepalive-timeout",
        help="Seconds an idle connection stays open between requests.",
        metavar=SECONDS,
    ),
]
MaxBodyOpt = Annotated[
    float,
    typer.Option("--max-body", help="Largest request body in MiB (413 beyond it).", metavar="MIB"),
]
MaxConnectionsOpt = Annotated[
    int,
    typer.Option(
        "--max-connections",
        help="Open connections at most (lowered to fit the file descriptor limit); at the "
        "cap a new connection closes the longest idle one.",
        metavar="N",
    ),
]
SeedOpt = Annotated[int, typer.Option("--seed", help="Database seed of new sessions.")]
GradeToolOpt = Annotated[
    bool,
    typer.Option("--grade-tool", help="Also offer the grader as MCP tool agentload_grade."),
]
DurationOpt = Annotated[
    float | None,
    typer.Option(
        "--duration",
        help="Stop after this long, e.g. 90s or 10m (http; default: Ctrl-C).",
        metavar=DURATION,
        parser=parse_duration,
    ),
]
RecordOpt = Annotated[
    Path | None,
    typer.Option(
        "--record",
        help="On exit, write each session's actions, db hash and grade as JSON lines.",
        metavar="FILE",
    ),
]
RemoteOpt = Annotated[
    str | None,
    typer.Option(
        "--remote",
        help="stdio: forward every call to this session of a running tool server "
        "(http://HOST:PORT/sessions/SID) instead of a local environment.",
        metavar="URL",
    ),
]


@tools_app.command(
    "serve",
    epilog=examples(
        "# MCP at http://127.0.0.1:8765/mcp, one fresh environment per session",
        "agentload tools serve --domain airline --port 8765 --duration 1h",
        "agentload tools serve --transport stdio --domain retail --task retail/005",
    ),
)
def serve_command(
    domain: ServeDomainOpt = None,
    transport: TransportOpt = Transport.http,
    task: TaskOpt = None,
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8200,
    seed: SeedOpt = 0,
    grade_tool: GradeToolOpt = False,
    duration: DurationOpt = None,
    record: RecordOpt = None,
    remote: RemoteOpt = None,
    header_timeout: HeaderTimeoutOpt = 10.0,
    body_timeout: BodyTimeoutOpt = 30.0,
    keepalive_timeout: KeepaliveTimeoutOpt = 75.0,
    max_body: MaxBodyOpt = 4.0,
    max_connections: MaxConnectionsOpt = 4096,
) -> None:
    """Serve a domain's tools over MCP (HTTP or stdio) and HTTP/JSON.

    http: MCP at /mcp (one environment per MCP session, task from ?task= or --task) and at
    /sessions/SID/mcp (a session created by POST /sessions), JSON at /sessions; see
    docs/external-agents.md. stdio: one environment for the process, for --task, or with
    --remote the session of a running tool server."""
    # lazy: start-up: a command's machinery loads when it runs, not for --help
    from agentload.http_limits import check_port, limits_from_flags
    from agentload.tools import ToolsError

    if (bad := check_port(port)) is not None:
        raise _fail(bad)
    try:
        limits = limits_from_flags(
            header_timeout, body_timeout, keepalive_timeout, max_body, max_connections
        )
    except ValueError as e:
        raise _fail(str(e)) from None
    logging.basicConfig(
        level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    # The SDK warns on every call of an unlisted tool; the caller already gets an error result.
    logging.getLogger("mcp.server.lowlevel.server").setLevel(logging.ERROR)
    if remote is not None:
        if transport is not Transport.stdio or domain or task or record or grade_tool:
            raise _fail(
                "--remote goes with --transport stdio alone (the remote session has its "
                "domain, task, record and grade)"
            )
        _serve_remote(remote)
        return
    if domain is None:
        raise _fail("--domain is required (or --remote URL with --transport stdio)")
    store = _store(domain, seed)
    try:
        store.task(task)
    except ToolsError as e:
        raise _fail(f"--task: {e}") from None
    if transport is Transport.stdio:
        _serve_stdio(store, task, grade_tool, record)
    else:
        _serve_http(store, task, host, port, grade_tool, duration, record, limits)


def _serve_stdio(store: SessionStore, task: str | None, grade_tool: bool, rec: Path | None) -> None:
    # lazy: start-up: a command's machinery loads when it runs, not for --help
    from agentload.tools import serve_stdio
    from agentload.util import run_async

    session = store.create(task)
    try:
        run_async(_until_stopped(serve_stdio(session, grade_tool=grade_tool), None))
    except KeyboardInterrupt:
        pass
    finally:
        _record(rec, [session])


def _serve_remote(url: str) -> None:
    # lazy: start-up: a command's machinery loads when it runs, not for --help
    from agentload.tools import ToolsError
    from agentload.tools.bridge import serve_stdio_remote, split_session_url
    from agentload.util import run_async

    try:
        split_session_url(url)
    except ToolsError as e:
        raise _fail(f"--remote: {e}") from None
    try:
        run_async(_until_stopped(serve_stdio_remote(url), None))
    except KeyboardInterrupt:
        pass
    except ToolsError as e:
        raise _fail(f"--remote: {e}", 1) from None


def _serve_http(
    store: SessionStore,
    task: str | None,
    host: str,
    port: int,
    grade_tool: bool,
    duration: float | None,
    rec: Path | None,
    limits: ServiceLimits,
) -> None:
    # lazy: start-up: a command's machinery loads when it runs, not for --help
    from agentload.tools import ToolServer
    from agentload.util import run_async

    ts = ToolServer(
        store.domain,
        host=host,
        port=port,
        seed=store.seed,
        default_task=task,
        grade_tool=grade_tool,
        limits=limits,
    )

    async def main() -> None:
        await ts.start()
        typer.echo(
            f"agentload tools: {ts.url} domain {store.domain.name}: MCP {ts.mcp_url()}, "
            f"JSON {ts.url}/sessions",
            err=True,
        )
        try:
            await _until_stopped(None, duration)
        finally:
            await ts.stop()

    try:
        run_async(main())
    except KeyboardInterrupt:
        pass
    except OSError as e:
        raise _fail(f"cannot listen on {host}:{port}: {e.strerror or e}", 1) from None
    finally:
        _record(rec, list(ts.store))


async def _until_stopped(work: Coroutine[Any, Any, None] | None, duration: float | None) -> None:
    """Run until `work` ends (re-raising its error), `duration` passes or SIGTERM or SIGHUP
    arrives; Ctrl-C raises KeyboardInterrupt as usual. SIGTERM is a normal stop (exit 0,
    --record written): how a harness, docker, systemd or Kubernetes ends the server. SIGHUP
    (a closed terminal; nothing to reload here) stops it the same way, --record written."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread
            loop.add_signal_handler(sig, stop.set)
    tasks: list[asyncio.Task[Any]] = [asyncio.create_task(stop.wait())]
    if work is not None:
        tasks.append(asyncio.create_task(work))
    try:
        done, _ = await asyncio.wait(tasks, timeout=duration, return_when=asyncio.FIRST_COMPLETED)
        for t in done:
            t.result()
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)


@tools_app.command(
    "scripts",
    epilog=examples(
        "agentload tools scripts --domain airline --out bin",
        "agentload tools scripts --domain retail --out bin \\",
        "  --url http://127.0.0.1:8765 --json",
    ),
)
def scripts_command(
    domain: DomainOpt,
    out: Annotated[
        Path, typer.Option("--out", help="Folder to write the scripts into.", metavar="DIR")
    ],
    url: Annotated[
        str,
        typer.Option(
            "--url",
            help="Root URL of `agentload tools serve` (override: $AGENTLOAD_TOOLS_URL).",
            metavar="URL",
        ),
    ] = "http://127.0.0.1:8200",
    session: Annotated[
        str,
        typer.Option(
            "--session",
            help="Session id to write in (default: read $AGENTLOAD_TOOLS_SESSION at run time).",
            metavar="SID",
        ),
    ] = "",
    json_out: Annotated[bool, typer.Option("--json", help="Print the paths as JSON.")] = False,
) -> None:
    """Write one command per tool, for agents that only run commands.

    Each is stdlib Python (`NAME --arg value` or `NAME '{json}'`): it calls the HTTP/JSON
    endpoint of `agentload tools serve` and prints the result. Exit codes: 0 ok, 1 the tool
    refused, 2 bad arguments, 3 endpoint unreachable."""
    # lazy: start-up: a command's machinery loads when it runs, not for --help
    from agentload.tools import write_scripts

    if not url.startswith(("http://", "https://")):
        raise _fail(f"--url must start with http:// or https://, got {url!r}")
    store = _store(domain, 0)
    try:
        paths = write_scripts(store.domain, out, url, session)
    except OSError as e:
        raise _fail(f"cannot write to {out}: {e.strerror or e}", 1) from None
    if json_out:
        typer.echo(orjson.dumps([str(p) for p in paths]).decode())
    else:
        typer.echo(f"agentload tools: wrote {len(paths)} tool scripts and tools.json to {out}")
