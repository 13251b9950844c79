"""Worker processes on this machine: the `Backend` behind `agentload run --workers N`.

Each worker is a fresh interpreter (multiprocessing's spawn: no state inherited from the
driver's event loop or open sockets) joined to the driver by a pipe. Workers ignore SIGINT:
Ctrl-C reaches the whole terminal process group, and the driver turns it into `Stop` or
`Abort` so that the drain behaves as in a one-process run. A worker whose driver is gone (the
pipe closed) cancels its sessions and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing as mp
import signal
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from agentload.distributed.protocol import (
    Exited,
    Finished,
    FromWorker,
    ToWorker,
    WorkerSpec,
)

log = logging.getLogger("agentload.distributed")


class PipeChannel:
    """The worker's end of its pipe, read through the event loop."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._queue: asyncio.Queue[ToWorker | None] = asyncio.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None

    def open(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.conn.fileno(), self._readable)

    def _readable(self) -> None:
        try:
            while self.conn.poll():
                self._queue.put_nowait(self.conn.recv())
        except (EOFError, OSError):
            assert self._loop is not None
            self._loop.remove_reader(self.conn.fileno())
            self._queue.put_nowait(None)

    def send(self, msg: FromWorker) -> None:
        with contextlib.suppress(BrokenPipeError, OSError):
            self.conn.send(msg)

    async def recv(self) -> ToWorker | None:
        return await self._queue.get()


def _process_main(spec: WorkerSpec, conn: Connection) -> None:
    """A worker process's entry point."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    from agentload.distributed.worker import run_worker
    from agentload.util import new_event_loop

    channel = PipeChannel(conn)

    async def main() -> None:
        channel.open()
        await run_worker(spec, channel)

    loop = new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        with contextlib.suppress(Exception):
            loop.close()
        conn.close()


@dataclass
class _Worker:
    index: int
    proc: Any  # multiprocessing's SpawnProcess
    conn: Connection
    finished: bool = False
    gone: bool = False


class ProcessBackend:
    """Spawned worker processes, one pipe each."""

    name = "process"

    def __init__(self) -> None:
        self._ctx = mp.get_context("spawn")
        self._workers: dict[int, _Worker] = {}
        self._queue: asyncio.Queue[FromWorker] = asyncio.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self, spec: WorkerSpec) -> None:
        self._loop = asyncio.get_running_loop()
        parent, child = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(
            target=_process_main,
            args=(spec, child),
            name=f"agentload-worker-{spec.index}",
            daemon=True,
        )
        # Spawning pickles the spec and starts an interpreter: keep the loop free meanwhile.
        await asyncio.to_thread(proc.start)
        child.close()
        w = _Worker(spec.index, proc, parent)
        self._workers[spec.index] = w
        self._loop.add_reader(parent.fileno(), self._readable, w)

    def _readable(self, w: _Worker) -> None:
        try:
            while w.conn.poll():
                msg = w.conn.recv()
                if isinstance(msg, Finished):
                    w.finished = True
                self._queue.put_nowait(msg)
        except (EOFError, OSError):
            self._gone(w)

    def _gone(self, w: _Worker) -> None:
        if w.gone:
            return
        w.gone = True
        assert self._loop is not None
        with contextlib.suppress(Exception):
            self._loop.remove_reader(w.conn.fileno())
        w.conn.close()
        w.proc.join(timeout=5)
        code = w.proc.exitcode
        reason = "" if w.finished and code == 0 else f"exit status {code}"
        self._queue.put_nowait(Exited(w.index, reason))

    def send(self, worker: int, msg: ToWorker) -> None:
        w = self._workers.get(worker)
        if w is None or w.gone:
            return
        try:
            w.conn.send(msg)
        except (BrokenPipeError, OSError):
            pass  # its Exited follows from the reader

    async def receive(self) -> FromWorker:
        return await self._queue.get()

    def kill(self, worker: int) -> None:
        w = self._workers.get(worker)
        if w is not None and w.proc.is_alive():
            w.proc.kill()

    def pid(self, worker: int) -> int | None:
        w = self._workers.get(worker)
        return None if w is None else w.proc.pid

    async def close(self) -> None:
        for w in self._workers.values():
            if w.proc.is_alive():
                w.proc.terminate()
        for w in self._workers.values():
            await asyncio.to_thread(w.proc.join, 5)
            if w.proc.is_alive():
                w.proc.kill()
                await asyncio.to_thread(w.proc.join, 5)
            if not w.gone:
                w.gone = True
                assert self._loop is not None
                with contextlib.suppress(Exception):
                    self._loop.remove_reader(w.conn.fileno())
                w.conn.close()
