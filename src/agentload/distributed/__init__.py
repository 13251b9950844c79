"""Runs spread over several workers: the driver keeps the results, workers run sessions.

`protocol` holds the messages and the two seams a transport implements (`Backend` on the
driver's side, `WorkerChannel` on the worker's); `worker.run_worker` is the body every worker
runs, whatever started it; `process` is the backend of worker processes on this machine;
`driver` is the bookkeeping (grants, records, redo of lost sessions, worker health). See
docs/distributed.md.
"""

from agentload.distributed.protocol import (
    PROTOCOL_VERSION,
    Abort,
    Assignment,
    Backend,
    Batch,
    CallBrief,
    Exited,
    Failed,
    Finished,
    FromWorker,
    Grant,
    Hello,
    NoMore,
    SessionDone,
    Stop,
    ToWorker,
    WorkerChannel,
    WorkerSpec,
    WorkerStats,
)

__all__ = [
    "PROTOCOL_VERSION",
    "Abort",
    "Assignment",
    "Backend",
    "Batch",
    "CallBrief",
    "Exited",
    "Failed",
    "Finished",
    "FromWorker",
    "Grant",
    "Hello",
    "NoMore",
    "SessionDone",
    "Stop",
    "ToWorker",
    "WorkerChannel",
    "WorkerSpec",
    "WorkerStats",
]
