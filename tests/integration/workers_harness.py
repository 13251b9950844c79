"""One `agentload run` over worker processes, in a process of its own, for
test_workers_end.py: a run that hangs is then a timeout of this process, not a stuck test.
Also worker bodies that misbehave, for test_workers_backend.py.

    python workers_harness.py CONFIG.json [--cores N] [--grow-fast] [--exit-status-3]

Prints the run's exit code, message and console lines as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path

import agentload.distributed.driver as driver
import agentload.distributed.process as process
import agentload.distributed.sizing as sizing
from agentload.config import build_config
from agentload.distributed.protocol import WorkerSpec
from agentload.runner import execute_run
from agentload.util import run_async


def exit_status_3_main(spec: WorkerSpec, sock: socket.socket) -> None:
    """A worker that runs and finishes as usual, then its process ends with status 3 (as a
    crash in an interpreter's teardown would)."""
    real_exit = os._exit
    os._exit = lambda status: real_exit(3)
    process._process_main(spec, sock)


def unreadable_main(spec: WorkerSpec, sock: socket.socket) -> None:
    """A worker process whose first message is not a pickle, and which then keeps running."""
    from agentload.util import die_with_parent

    die_with_parent()
    bad = b"not a pickle"
    sock.sendall(len(bad).to_bytes(4, "big") + bad)
    time.sleep(60)


def lingering_main(spec: WorkerSpec, sock: socket.socket) -> None:
    """A worker process that closes its connection and does not exit."""
    from agentload.util import die_with_parent

    die_with_parent()
    sock.close()
    time.sleep(60)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--cores", type=int, help="the machine's usable cores, as auto sees them")
    ap.add_argument("--grow-fast", action="store_true")
    ap.add_argument("--exit-status-3", action="store_true")
    args = ap.parse_args()
    if args.cores:
        sizing.usable_cores = lambda: args.cores
        sizing.AUTO_SESSIONS_PER_WORKER = 4  # auto spreads a small test run
    if args.grow_fast:
        # Every stats window is "saturated": auto adds workers from the first second up to
        # its limit, also while the plan ends and after.
        driver.CPU_SATURATED = 0.0
        driver.LAG_SATURATED_S = -1.0
        driver.SATURATED_WINDOWS = 1
    if args.exit_status_3:
        process._process_main = exit_status_3_main
    cfg = build_config(data=json.loads(Path(args.config).read_text()))
    said: list[str] = []

    def say(msg: str) -> None:  # as it happens too: a hung run's test shows how far it got
        said.append(msg)
        print(msg, file=sys.stderr, flush=True)

    res = run_async(execute_run(cfg, progress="off", say=say, install_signals=False))
    print(json.dumps({"exit_code": res.exit_code, "message": res.message, "said": said}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
