"""Starting and stopping a simulator from Python: in-process or as a subprocess."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import subprocess
import sys
import time
import urllib.request
from types import TracebackType
from typing import Any

from aiohttp import web

from agentload.http_limits import ConnectionCap, connection_budget
from agentload.sim.app import SimApp
from agentload.sim.behaviour import BehaviourOptionError
from agentload.sim.fasthttp import fast_factory
from agentload.sim.settings import SimConfig
from agentload.util import ServedAt, die_with_parent, free_port, gc_tuned

MAX_CONNECTIONS = 1 << 16
"""The simulator's connection cap where file descriptors allow (a load target: far above any
concurrency a benchmark drives; the file-descriptor budget is what usually bounds it)."""

STDIN_CONFIG_FLAG = "--stdin-config"
"""`python -m agentload.sim --stdin-config` reads its SimConfig as JSON on stdin."""


class SimBindError(OSError):
    """The simulator could not listen on its address (port in use, unknown host, ...)."""


class _Addresses(ServedAt):
    """URLs of a running simulator, for both the in-process and the subprocess form."""

    config: SimConfig
    port: int

    def bind_address(self) -> tuple[str, int]:
        return self.config.host, self.port


class SimServer(_Addresses):
    """A simulator on the running event loop.

    ``port=0`` binds a free port; :attr:`base_url` reports the real one::

        async with SimServer(SimConfig(port=0, speedup=10)) as sim:
            client = AsyncOpenAI(base_url=sim.base_url, api_key="x")
    """

    def __init__(self, config: SimConfig | None = None, **overrides: Any) -> None:
        base = config or SimConfig(port=0)
        self.config = base.model_copy(update=overrides) if overrides else base
        self.sim: SimApp | None = None
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.Server | None = None
        self.connections: ConnectionCap | None = None
        self.port: int = self.config.port

    async def start(self) -> SimServer:
        cfg = self.config
        self.sim = SimApp(cfg)
        self.sim.start_engine()
        self._runner = web.AppRunner(
            self.sim.app,
            access_log=None,
            handle_signals=False,
            shutdown_timeout=1.0,
            keepalive_timeout=cfg.keepalive_timeout_s,
            # After an early reply (401, 408) the rest of a body is drained for at most this
            # long before the connection closes; aiohttp's 10 s would let a slow client hold
            # the connection well past its body deadline.
            lingering_time=min(1.0, cfg.body_timeout_s),
        )
        await self._runner.setup()
        assert self._runner.server is not None
        # Open connections stay below the file-descriptor limit: past it every accept fails
        # (EMFILE), so idle or slowloris connections would lock out every real client.
        self.connections = ConnectionCap(connection_budget(MAX_CONNECTIONS))
        try:
            # Our own listener rather than web.TCPSite: each connection gets the fast path
            # for generation requests and the header deadline guard in front of aiohttp's
            # protocol, which serves everything else.
            self._listener = await asyncio.get_running_loop().create_server(
                fast_factory(self._runner.server, self.sim, self.connections),
                cfg.host,
                cfg.port,
                backlog=4096,
                reuse_address=True,
            )
        except OSError as exc:
            await self.stop()
            reason = exc.strerror or str(exc) or type(exc).__name__
            raise SimBindError(f"cannot listen on {cfg.host}:{cfg.port}: {reason}") from exc
        sockets = self._listener.sockets  # a tuple, empty once closed
        if sockets:
            self.port = int(sockets[0].getsockname()[1])
        return self

    async def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        if self.sim is not None:
            await self.sim.stop_engine()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> SimServer:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


async def serve_forever(config: SimConfig, ready_line: bool = True) -> None:
    """Run a simulator until SIGINT / SIGTERM (the ``agentload sim`` command)."""
    server = SimServer(config)
    await server.start()
    if ready_line:
        print(
            f"agentload sim listening on {server.url} (model {config.model!r}, "
            f"profile {server.sim.profile.name if server.sim else '?'})",
            flush=True,
        )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        with gc_tuned():
            if server.sim is not None and server.sim.zero_time:
                # No model time, so no token times a long collection could disturb: collect
                # the young generation far less often (about a tenth of this simulator's CPU
                # went to it at 1,000 active conversations).
                gc.set_threshold(200_000, 20, 20)
            await stop.wait()
    finally:
        if server.sim is not None:
            server.sim.engine.log_stats()
        await server.stop()


def run_blocking(config: SimConfig) -> None:
    """Serve with uvloop when available; exit 2 with one line if the address is unusable."""
    try:
        try:
            import uvloop
        except ImportError:  # pragma: no cover - platform without uvloop
            asyncio.run(serve_forever(config))
            return
        uvloop.run(serve_forever(config))
    except (SimBindError, BehaviourOptionError) as exc:
        print(f"agentload sim: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


class SimProcess(_Addresses):
    """A simulator in its own process (its own core), for benchmarks and ``agentload run``::

    with SimProcess(SimConfig(port=0)) as sim:
        ... sim.base_url ...
    """

    def __init__(
        self,
        config: SimConfig | None = None,
        *,
        startup_timeout_s: float = 30.0,
        log_path: str | None = None,
        own_session: bool = False,
        **overrides: Any,
    ) -> None:
        base = config or SimConfig(port=0)
        self.config = base.model_copy(update=overrides) if overrides else base
        self.startup_timeout_s = startup_timeout_s
        self.log_path = log_path
        # own_session: a terminal's Ctrl-C reaches only the parent (which can then drain
        # against a live simulator), and the simulator gets SIGTERM if the parent dies.
        self.own_session = own_session
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = self.config.port
        self._log: Any = None

    def start(self) -> SimProcess:
        if self.port == 0:
            self.port = free_port(self.config.host)
        config = self.config.model_copy(update={"port": self.port})
        # The settings go over stdin, not argv: nothing (an API key in particular) shows on
        # the process list, and every field round-trips exactly.
        cmd = [sys.executable, "-m", "agentload.sim", STDIN_CONFIG_FLAG]
        if self.log_path:
            self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
            out: Any = self._log
        else:
            out = subprocess.DEVNULL
        self.proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.PIPE,
            start_new_session=self.own_session,
            preexec_fn=die_with_parent if self.own_session else None,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.write(config.model_dump_json().encode())
        self.proc.stdin.close()
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                where = f" (log: {self.log_path})" if self.log_path else ""
                raise RuntimeError(
                    f"agentload sim exited with status {self.proc.returncode} "
                    f"during startup{where}: {' '.join(cmd)}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=1.0) as resp:
                    if resp.status == 200:
                        return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise TimeoutError(
            f"agentload sim did not answer /health within {self.startup_timeout_s} s"
        )

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> SimProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
