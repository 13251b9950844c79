"""The Ray actor that hosts one agentload worker.

The worker body (`agentload.distributed.worker.run_worker`) runs unchanged on its own thread
and event loop inside the actor; the actor's methods are the transport:

- `push(seq, msgs)` hands the driver's messages to the worker. A threaded actor may run two
  calls at once, so messages carry the driver's sequence number and are delivered in order;
- `pull(wait_s)` returns what the worker sent since the last pull, waiting up to `wait_s` for
  something to arrive (a long poll: one call in flight per worker, answered as soon as a
  batch is ready), and whether the worker has ended (then nothing more will come);
- `clocks()` reads the actor's clocks for the driver's offset measurement.

The actor is owned by the driver: Ray ends it when the driver's process goes, so a worker
never outlives its run.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
from typing import Any

from agentload.distributed.clock import ClockReading, boot_id, read_clocks

log = logging.getLogger("agentload.ray")

START_TIMEOUT_S = 60.0
ACTOR_NAME_PREFIX = "agentload-"


class _Channel:
    """The worker's end: `send` appends under the actor's lock, `recv` reads the inbox."""

    def __init__(self, host: WorkerActor, inbox: asyncio.Queue[Any]) -> None:
        self._host = host
        self._inbox = inbox

    def send(self, msg: Any) -> None:
        with self._host.cond:
            self._host.outbox.append(msg)
            self._host.cond.notify_all()

    async def recv(self) -> Any:
        return await self._inbox.get()


class WorkerActor:
    """One worker; Ray makes it an actor with `ray.remote(max_concurrency=...)`."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.outbox: list[Any] = []
        self.done = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inbox: asyncio.Queue[Any] | None = None
        self._order = threading.Lock()
        self._next_seq = 0
        self._held: dict[int, list[Any]] = {}
        self._thread: threading.Thread | None = None

    def clocks(self) -> ClockReading:
        return read_clocks()

    def where(self) -> dict[str, Any]:
        """Where the actor runs: its node, address, host name and process."""
        import ray

        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "node_ip": ray.util.get_node_ip_address(),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "boot_id": boot_id(),
        }

    def start(self, spec: Any) -> None:
        """Start the worker body on its own thread; returns once it can take messages."""
        ready = threading.Event()
        logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")

        def main() -> None:
            # lazy: start-up: the worker's machinery loads in the actor's process only.
            from agentload.distributed.worker import run_worker
            from agentload.util import run_async

            async def body() -> None:
                inbox: asyncio.Queue[Any] = asyncio.Queue()
                self._loop, self._inbox = asyncio.get_running_loop(), inbox
                ready.set()
                await run_worker(spec, _Channel(self, inbox))

            try:
                run_async(body())
            except BaseException:  # run_worker reports its own failures; this is the rest
                log.exception("agentload worker %s ended with an error", spec.index)
            finally:
                with self.cond:
                    self.done = True
                    self.cond.notify_all()

        self._thread = threading.Thread(target=main, name=f"agentload-worker-{spec.index}")
        self._thread.daemon = True
        self._thread.start()
        if not ready.wait(START_TIMEOUT_S):
            raise RuntimeError("the worker's event loop did not start")
        self._deliver()

    def push(self, seq: int, msgs: list[Any]) -> None:
        """Deliver the driver's messages in the driver's order (those sent before the
        worker started wait for it)."""
        with self._order:
            self._held[seq] = msgs
        self._deliver()

    def _deliver(self) -> None:
        with self._order:
            loop, inbox = self._loop, self._inbox
            if loop is None or inbox is None:
                return
            while self._next_seq in self._held:
                for m in self._held.pop(self._next_seq):
                    try:
                        loop.call_soon_threadsafe(inbox.put_nowait, m)
                    except RuntimeError:  # the worker's loop has closed: nothing to deliver
                        return
                self._next_seq += 1

    def pull(self, wait_s: float) -> tuple[list[Any], bool]:
        """(messages since the last pull, whether the worker has ended)."""
        with self.cond:
            if not self.outbox and not self.done:
                self.cond.wait(wait_s)
            out, self.outbox = self.outbox, []
            return out, self.done
