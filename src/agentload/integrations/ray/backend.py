"""The Ray backend of a distributed run: each worker is a Ray actor on an existing cluster.

It implements `agentload.distributed.protocol.Backend`, so the driver's bookkeeping (grants,
records, redo of a lost worker's sessions) is the one worker processes use. Per worker:

- the actor is placed with the `SPREAD` strategy and `ray.cpus_per_worker` CPUs, named
  `agentload-<run id>-worker-<i>` in the `ray.namespace` namespace;
- the driver measures the clock offset to it (agentload.distributed.clock) before it
  starts, and again when it ends (the drift); the worker is started with the offset and
  sends its records already on the driver's clocks, so they are written as received;
- a pump task long-polls `pull`, so batches reach the driver as they are sent, and turns the
  actor's death (killed, crashed, its node lost: `RayActorError`) into `Exited` with the
  reason: the driver then runs that worker's unfinished sessions again.

The records are written by the driver alone, into its own results folder: nothing of the
run is stored on the nodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentload.distributed.clock import ClockOffset, boot_id, measure
from agentload.distributed.protocol import Exited, Finished, FromWorker, ToWorker, WorkerSpec
from agentload.outcome import RunFailed
from agentload.util import is_loopback_url

if TYPE_CHECKING:
    from agentload.client import EndpointConfig
    from agentload.config import RayConfig

log = logging.getLogger("agentload.ray")

PULL_WAIT_S = 0.5
"""Longest a pull waits for a message before it returns empty (and is sent again)."""
CLOCK_SAMPLES = 8
CONNECT_TIMEOUT_S = 5.0
ACTOR_CONCURRENCY = 4
"""Calls an actor serves at once: a pull waiting, pushes, a clock read."""


class RayUnavailable(Exception):
    """Ray is not installed, or the cluster cannot be reached (exit code 1, one line)."""


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayUnavailable("--ray needs Ray: pip install 'agentload[ray]'") from None
    return ray


def connect(rc: RayConfig) -> Any:
    """The `ray` module, connected to the cluster at `rc.address` (once per process)."""
    ray = _ray()
    if ray.is_initialized():
        return ray
    _reachable(rc.address)
    try:
        ray.init(
            address=rc.address,
            namespace=rc.namespace,
            log_to_driver=False,
            logging_level=logging.WARNING,
            configure_logging=False,
        )
    except (ConnectionError, RuntimeError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise RayUnavailable(
            f"cannot connect to the Ray cluster at {rc.address}: {first}"
        ) from None
    return ray


def _reachable(address: str) -> None:
    """A head that does not answer fails in seconds (Ray itself retries for minutes)."""
    if address == "auto" or "://" in address:
        return  # Ray finds (or refuses) these itself, at once
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise RayUnavailable(
            f"--ray {address}: give the head's host:port (e.g. 10.0.0.1:6379), "
            "ray://host:10001 or auto"
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), CONNECT_TIMEOUT_S).close()
    except OSError as e:
        raise RayUnavailable(
            f"cannot connect to the Ray cluster at {address}: {e.strerror or e} "
            "(is `ray start --head` running there?)"
        ) from None


def cluster_workers(rc: RayConfig, cap: int) -> tuple[int, str]:
    """`--workers auto` on a Ray cluster: one worker per `cpus_per_worker` CPUs of the
    cluster, at most `cap` (the sessions that can be in flight)."""
    ray = connect(rc)
    cpus = float(ray.cluster_resources().get("CPU", 0.0))
    n = max(1, min(cap, math.floor(cpus / rc.cpus_per_worker)))
    nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
    return n, (
        f"--ray {rc.address}: {n} worker actors ({cpus:g} CPUs on {nodes} nodes, "
        f"{rc.cpus_per_worker:g} per worker)"
    )


def check_reachable(rc: RayConfig, endpoints: Mapping[str, EndpointConfig]) -> None:
    """A loopback endpoint (the embedded simulator, a local engine) is only reachable by
    actors on the driver's own machine: refuse a cluster with nodes elsewhere."""
    local = [
        f"{role} {ep.base_url}" for role, ep in endpoints.items() if is_loopback_url(ep.base_url)
    ]
    if not local:
        return
    ray = connect(rc)
    here = ray.util.get_node_ip_address()
    others = sorted(
        {n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive")} - {here, "127.0.0.1"}
    )
    if others:
        raise RayUnavailable(
            f"the endpoint ({', '.join(local)}) is on this machine's loopback, which the Ray "
            f"nodes at {', '.join(others)} cannot reach; give --base-url an address they can "
            "(the embedded simulator serves only this machine: start `agentload sim --host "
            "0.0.0.0` on a reachable host instead)"
        )


@dataclass
class _Actor:
    index: int
    handle: Any
    seq: int = 0
    offset: ClockOffset = field(default_factory=ClockOffset.zero)
    """What its records are moved by: zero on the driver's machine (one monotonic clock)."""
    measured: ClockOffset | None = None
    drift_ns: int | None = None
    where: dict[str, Any] = field(default_factory=dict)
    finished: bool = False
    gone: bool = False
    pump: asyncio.Task[None] | None = None


class RayBackend:
    """Worker actors on a Ray cluster."""

    name = "ray"

    def __init__(self, rc: RayConfig, run_id: str, say: Callable[[str], None]) -> None:
        self.rc = rc
        self.run_id = run_id
        self.say = say
        self._ray = connect(rc)
        # lazy: optional dependency: the actor module needs ray, which connect() found.
        from agentload.integrations.ray.actor import ACTOR_NAME_PREFIX, WorkerActor

        self._prefix = f"{ACTOR_NAME_PREFIX}{run_id}-worker-"
        self._remote = self._ray.remote(max_concurrency=ACTOR_CONCURRENCY)(WorkerActor)
        self._actors: dict[int, _Actor] = {}
        self._queue: asyncio.Queue[FromWorker] = asyncio.Queue()
        self._boot_id = boot_id()

    def actor_name(self, worker: int) -> str:
        return f"{self._prefix}{worker}"

    async def start(self, spec: WorkerSpec) -> None:
        handle = self._remote.options(
            name=self.actor_name(spec.index),
            namespace=self.rc.namespace,
            num_cpus=self.rc.cpus_per_worker,
            scheduling_strategy="SPREAD",
            max_restarts=0,
            max_task_retries=0,
        ).remote()
        a = _Actor(spec.index, handle)
        self._actors[spec.index] = a
        a.pump = asyncio.get_running_loop().create_task(self._run(a, spec))

    async def _run(self, a: _Actor, spec: WorkerSpec) -> None:
        """Place the actor, measure its clock, start the worker, pump its messages; always
        ends with the worker's `Exited`."""
        ray = self._ray
        reason = ""
        try:
            try:
                a.where = await asyncio.wait_for(
                    _ref(a.handle.where.remote()), self.rc.start_timeout_s
                )
            except TimeoutError:
                reason = (
                    f"not placed on the cluster within {self.rc.start_timeout_s:g} s (it asks "
                    f"{self.rc.cpus_per_worker:g} CPUs; the cluster has "
                    f"{ray.available_resources().get('CPU', 0):g} free)"
                )
                return
            a.measured = await measure(lambda: _ref(a.handle.clocks.remote()), CLOCK_SAMPLES)
            if not self._same_machine(a):
                a.offset = a.measured
                spec = dataclasses.replace(
                    spec, clock_offset_ns=(a.offset.mono_ns, a.offset.wall_ns)
                )
            await _ref(a.handle.start.remote(spec))
            await self._pump(a)
            with contextlib.suppress(Exception):
                end = await measure(lambda: _ref(a.handle.clocks.remote()), CLOCK_SAMPLES)
                a.drift_ns = end.mono_ns - a.measured.mono_ns if a.measured else None
            if not a.finished:
                reason = "the worker ended without finishing"
        except asyncio.CancelledError:
            reason = "stopped"
            raise
        except Exception as e:
            reason = _death(ray, e)
        finally:
            a.gone = True
            with contextlib.suppress(Exception):
                ray.kill(a.handle, no_restart=True)
            self._queue.put_nowait(Exited(a.index, reason))

    async def _pump(self, a: _Actor) -> None:
        while True:
            msgs, done = await _ref(a.handle.pull.remote(PULL_WAIT_S))
            for m in msgs:
                if isinstance(m, Finished):
                    a.finished = True
                self._queue.put_nowait(m)
            if done:
                return

    def _same_machine(self, a: _Actor) -> bool:
        here = self._boot_id
        return here is not None and a.where.get("boot_id") == here

    def send(self, worker: int, msg: ToWorker) -> None:
        a = self._actors.get(worker)
        if a is None or a.gone:
            return  # its Exited follows from its pump
        a.handle.push.remote(a.seq, [msg])
        a.seq += 1

    async def receive(self) -> FromWorker:
        return await self._queue.get()

    def kill(self, worker: int) -> None:
        a = self._actors.get(worker)
        if a is not None and not a.gone:
            with contextlib.suppress(Exception):
                self._ray.kill(a.handle, no_restart=True)

    async def close(self) -> None:
        for a in self._actors.values():
            self.kill(a.index)
        for a in self._actors.values():
            if a.pump is not None and not a.pump.done():
                a.pump.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await a.pump

    def clock_block(self) -> list[dict[str, Any]]:
        """summary.json client.clock_offsets: each worker's node and clock offset."""
        out = []
        for a in self._actors.values():
            m = a.measured
            out.append(
                {
                    "worker": a.index,
                    "node_ip": a.where.get("node_ip"),
                    "node_id": a.where.get("node_id"),
                    "host": a.where.get("host"),
                    "same_machine": self._same_machine(a),
                    "offset_s": a.offset.mono_ns / 1e9,
                    "wall_offset_s": a.offset.wall_ns / 1e9,
                    "measured_offset_s": None if m is None else m.mono_ns / 1e9,
                    "measured_wall_offset_s": None if m is None else m.wall_ns / 1e9,
                    "bound_s": None if m is None else m.bound_ns / 1e9,
                    "drift_s": None if a.drift_ns is None else a.drift_ns / 1e9,
                }
            )
        return out


async def _ref(ref: Any) -> Any:
    """Await a Ray ObjectRef on the running loop."""
    return await ref


def _death(ray: Any, e: Exception) -> str:
    exc = ray.exceptions
    if isinstance(e, exc.RayActorError):
        text = str(e).strip().splitlines()
        detail = next((t for t in text if "died" in t or "killed" in t or "node" in t), "")
        return f"actor died: {detail.strip()[:200]}" if detail else "actor died"
    if isinstance(e, exc.RayTaskError):
        return f"actor error: {str(e).strip().splitlines()[-1][:200]}"
    return f"actor unreachable: {type(e).__name__}: {str(e)[:200]}"


def ray_backend(run: Any, endpoints: Mapping[str, EndpointConfig]) -> RayBackend:
    """The Ray backend of a run (`run.cfg.ray` set); a cluster that cannot serve the run is
    one RunFailed line."""
    assert run.cfg.ray is not None
    try:
        check_reachable(run.cfg.ray, endpoints)
        return RayBackend(run.cfg.ray, run.run_id, run.opts.say)
    except RayUnavailable as e:
        raise RunFailed(str(e)) from None
