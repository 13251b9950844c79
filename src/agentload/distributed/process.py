"""Worker processes on this machine: the `Backend` behind `agentload run --workers N`.

Each worker is a fresh interpreter (multiprocessing's spawn: no state inherited from the
driver's event loop or open sockets) joined to the driver by a socket pair carrying
length-prefixed pickles, read and written through each side's event loop (a write never
blocks the loop). Workers ignore SIGINT: Ctrl-C reaches the whole terminal process group, and
the driver turns it into `Stop` or `Abort` so that the drain behaves as in a one-process run.
A worker whose driver is gone (the socket closed) cancels its sessions and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing as mp
import os
import pickle
import signal
import socket
import sys
from dataclasses import dataclass
from typing import Any

from agentload.distributed.protocol import (
    Exited,
    Finished,
    FromWorker,
    ToWorker,
    WorkerSpec,
)

log = logging.getLogger("agentload.distributed")

_LEN = 4


def frame(msg: object) -> bytes:
    data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
    return len(data).to_bytes(_LEN, "big") + data


async def read_frame(reader: asyncio.StreamReader) -> Any:
    """The next message, or None at the end of the stream."""
    try:
        head = await reader.readexactly(_LEN)
        return pickle.loads(await reader.readexactly(int.from_bytes(head, "big")))
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


class SocketChannel:
    """The worker's end of its socket."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def send(self, msg: FromWorker) -> None:
        if not self.writer.is_closing():
            self.writer.write(frame(msg))

    async def recv(self) -> ToWorker | None:
        msg: ToWorker | None = await read_frame(self.reader)
        return msg

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.writer.drain()
            self.writer.close()
            await self.writer.wait_closed()


def _process_main(spec: WorkerSpec, sock: socket.socket) -> None:
    """A worker process's entry point."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # lazy: start-up: what a worker runs loads in the worker process, not in the driver's.
    from agentload.util import die_with_parent

    die_with_parent()  # a driver killed while this one is stuck in C code leaves nothing behind
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    from agentload.distributed.worker import run_worker  # lazy: start-up (as above)
    from agentload.util import run_async

    async def main() -> None:
        reader, writer = await asyncio.open_connection(sock=sock)
        channel = SocketChannel(reader, writer)
        try:
            await run_worker(spec, channel)
        finally:
            await channel.close()

    run_async(main())
    # Everything was sent and the socket closed: skip the interpreter's teardown of a large
    # heap (CPU the run would pay for nothing).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@dataclass
class _Worker:
    index: int
    proc: Any  # multiprocessing's SpawnProcess
    writer: asyncio.StreamWriter
    task: asyncio.Task[None] | None = None
    finished: bool = False
    gone: bool = False


class ProcessBackend:
    """Spawned worker processes, one socket pair each."""

    name = "process"
    exit_wait_s = 10.0
    """How long a worker whose connection closed may take to exit before it is killed."""

    def __init__(self) -> None:
        self._ctx = mp.get_context("spawn")
        self._workers: dict[int, _Worker] = {}
        self._queue: asyncio.Queue[FromWorker] = asyncio.Queue()

    async def start(self, spec: WorkerSpec) -> None:
        ours, theirs = socket.socketpair()
        proc = self._ctx.Process(
            target=_process_main,
            args=(spec, theirs),
            name=f"agentload-worker-{spec.index}",
            daemon=True,
        )
        try:
            # From this (the driver's) thread: the child's death signal is tied to the thread
            # that started it, and a helper thread may end before the worker does.
            proc.start()
        finally:
            theirs.close()
        reader, writer = await asyncio.open_connection(sock=ours)
        w = _Worker(spec.index, proc, writer)
        self._workers[spec.index] = w
        w.task = asyncio.get_running_loop().create_task(self._read(w, reader))

    async def _read(self, w: _Worker, reader: asyncio.StreamReader) -> None:
        broken = ""
        try:
            while (msg := await read_frame(reader)) is not None:
                if isinstance(msg, Finished):
                    w.finished = True
                self._queue.put_nowait(msg)
        except Exception as e:  # a frame that does not unpickle: this worker is lost, not the run
            log.warning("worker %d sent an unreadable message", w.index, exc_info=True)
            broken = f"unreadable message: {type(e).__name__}"
        w.gone = True
        w.writer.close()
        await asyncio.to_thread(w.proc.join, self.exit_wait_s)
        if w.proc.is_alive():  # its socket closed but it does not exit: Exited must still come
            w.proc.kill()
            await asyncio.to_thread(w.proc.join, 5)
            broken = broken or "did not exit after its connection closed; killed"
        code = w.proc.exitcode
        reason = broken or ("" if w.finished and code == 0 else f"exit status {code}")
        self._queue.put_nowait(Exited(w.index, reason))

    def send(self, worker: int, msg: ToWorker) -> None:
        w = self._workers.get(worker)
        if w is None or w.gone or w.writer.is_closing():
            return  # its Exited follows from the reader
        w.writer.write(frame(msg))

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
            if w.task is not None:
                w.task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await w.task
            w.writer.close()
