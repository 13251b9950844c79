"""What spreading a run over worker processes costs: requests per client CPU-second with 1, 2,
4 and 8 workers.

Each point runs `agentload run --config … --workers N` as a subprocess: a replay of a
synthetic dataset (`replay_throughput.py`'s) in a closed loop against `client_throughput.py`'s
canned-stream server (in this process's child, pinned to the last core, the client tree to
the others; with `--unpinned` nothing is pinned), so the client alone does work. A sampler
thread reads the CPU time of the client's whole process tree (the driver, its workers, and
the workers it has already reaped) from /proc every 0.2 s. Reported per point:

- steady requests per client CPU-second: calls that ended while the loop was full (from the
  time the first `concurrency` conversations ended to the last conversation's start) over the
  process tree's CPU in that window — the coordination cost, without start-up;
- whole-run requests per client CPU-second (start-up included: each worker is an interpreter
  that imports agentload);
- the same as a ratio to one worker's.

With `--workers 1` the sessions run in the driver itself (no worker processes), which is the
baseline every other point is compared with. A point that has not ended after
`--point-timeout` seconds is killed and reported as hung (with how many sessions it had
recorded), and the next point runs; a point that fails is reported with its exit code.
Linux only (/proc). Results: benchmarks/README.md.

    .venv/bin/python benchmarks/workers_efficiency.py --workers 1,2,4,8 --unpinned
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

from agentload.results.jsonl import load_jsonl
from client_throughput import _serve  # this folder is on sys.path when run as a script
from replay_throughput import write_dataset

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()  # fields from the state on


def tree_cpu_s(pid: int) -> float | None:
    """CPU seconds of `pid`, its reaped children and its live children."""
    me = _stat(pid)
    if me is None:
        return None
    # utime, stime, cutime, cstime are fields 14-17 (1-based), 11-14 after the state.
    total = sum(int(x) for x in me[11:15])
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := _stat(int(entry))) is not None and st[1] == str(pid):
            total += int(st[11]) + int(st[12])
    return total / _TICK


class TreeSampler:
    """(CLOCK_MONOTONIC ns, CPU s) of a process tree, every 0.2 s (the clock of the
    records' `*_ns` times)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[tuple[int, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            cpu = tree_cpu_s(self.pid)
            if cpu is not None:
                self.samples.append((time.perf_counter_ns(), cpu))

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def between(self, t_a: int, t_b: int) -> tuple[float, float] | None:
        inside = [x for x in self.samples if t_a <= x[0] <= t_b]
        if len(inside) < 2:
            return None
        (n0, c0), (n1, c1) = inside[0], inside[-1]
        return c1 - c0, (n1 - n0) / 1e9


def run_point(
    args: argparse.Namespace, workers: int, port: int, data: Path, root: Path, repeat: int
) -> dict:
    out = root / f"w{workers}-r{repeat}"
    cfg = {
        "out": str(out),
        "kind": "replay",
        "replay": {"dataset": str(data)},
        "endpoints": {"agent": {"base_url": f"http://127.0.0.1:{port}/v1", "model": "bench"}},
        "load": {"concurrency": args.concurrency, "drain_timeout_s": 120, "workers": workers},
        "metrics": {"enabled": False},
        "preflight": False,  # the canned server answers POSTs only
        "report": False,
    }
    path = root / f"w{workers}-r{repeat}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    # Its messages (a worker lost, a worker added) go to a log: the tail is reported when the
    # point fails or hangs.
    cmd = [sys.executable, "-m", "agentload", "run", "--config", str(path), "--progress", "off"]
    log = root / f"w{workers}-r{repeat}.log"
    cores = args.client_cores
    pin = None if args.unpinned else (lambda: os.sched_setaffinity(0, cores))
    t = time.perf_counter()
    # A session of its own: a hung point is killed with its workers.
    with log.open("wb") as sink:  # started before the sampler thread (preexec_fn)
        proc = subprocess.Popen(
            cmd, preexec_fn=pin, start_new_session=True, stdout=sink, stderr=subprocess.STDOUT
        )
    with TreeSampler(proc.pid) as cpu:
        try:
            code = proc.wait(timeout=args.point_timeout)
        except subprocess.TimeoutExpired:
            code = None
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    wall = time.perf_counter() - t
    if code != 0:
        done = out / "sessions.jsonl"
        return {
            "workers": workers,
            "exit_code": code,
            "hung": code is None,
            "wall_s": round(wall, 1),
            "sessions_recorded": len(load_jsonl(done)) if done.exists() else 0,
            "said": log.read_text(errors="replace").splitlines()[-20:],
        }
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    total_cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    calls = load_jsonl(out / "calls.jsonl")
    sessions = load_jsonl(out / "sessions.jsonl")
    ends = sorted(s["end_ns"] for s in sessions)
    t_a, t_b = ends[args.concurrency - 1], max(s["start_ns"] for s in sessions)
    used = cpu.between(t_a, t_b)
    steady: dict[str, float | None] | None = None
    if used is not None:
        lo, hi = t_a, t_a + int(used[1] * 1e9)
        n = sum(1 for c in calls if lo < c["end_ns"] <= hi)
        steady = {"calls": n, "cpu_s": round(used[0], 2), "window_s": round(used[1], 2)}
        steady["calls_per_cpu_s"] = round(n / used[0], 1) if used[0] > 0 else None
        steady["cpu_share"] = round(used[0] / used[1], 2)
    client = json.loads((out / "summary.json").read_text())["client"]
    return {
        "workers": workers,
        "exit_code": code,
        "calls": len(calls),
        "failed_calls": sum(1 for c in calls if c["status"] != "ok"),
        "sessions": len(sessions),
        "wall_s": round(wall, 1),
        "elapsed_s": round(client["elapsed_s"], 1),
        "client_cpu_s": round(total_cpu, 1),
        "calls_per_cpu_s": round(len(calls) / total_cpu, 1) if total_cpu else None,
        "steady": steady,
        # Whole run, from summary.json: the driver's own CPU and each worker's.
        "driver_cpu_s": round(client["cpu_s"], 2),
        "workers_cpu_s": [round(w["cpu_s"], 2) for w in client.get("workers", [])],
        "workers_startup_cpu_s": [round(w["startup_cpu_s"], 2) for w in client.get("workers", [])],
        "worker_lag_p99_ms": [
            round(w["event_loop_lag_s"]["p99"] * 1e3, 1) for w in client.get("workers", [])
        ],
    }


def summarize(points: list[dict], counts: list[int]) -> list[dict]:
    """Per worker count: median requests per client CPU-second (steady and whole run), and
    their ratio to the first count's."""
    rows = []
    for n in counts:
        ran = [p for p in points if p["workers"] == n]
        mine = [p for p in ran if p["exit_code"] == 0]
        steady = [p["steady"]["calls_per_cpu_s"] for p in mine if p["steady"]]
        whole = [p["calls_per_cpu_s"] for p in mine if p["calls_per_cpu_s"]]
        rows.append(
            {
                "workers": n,
                "runs": len(mine),
                "hung": sum(1 for p in ran if p.get("hung")),
                "failed": sum(1 for p in ran if p["exit_code"] not in (0, None)),
                "steady_calls_per_cpu_s": statistics.median(steady) if steady else None,
                "whole_run_calls_per_cpu_s": statistics.median(whole) if whole else None,
                "steady_cpu_share": statistics.median(
                    p["steady"]["cpu_share"] for p in mine if p["steady"]
                )
                if steady
                else None,
            }
        )
    base = rows[0]
    for row in rows:
        for key in ("steady_calls_per_cpu_s", "whole_run_calls_per_cpu_s"):
            val, first = row[key], base[key]
            if val and first:
                row[key.replace("calls_per_cpu_s", "vs_first")] = round(val / first, 3)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="1,2,4,8", help="worker counts, e.g. 1,2,4,8")
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--conversations", type=int, default=2000)
    ap.add_argument("--turns", type=int, default=8, help="client turns per conversation")
    ap.add_argument(
        "--repeats", type=int, default=1, help="rounds over the worker counts (medians reported)"
    )
    ap.add_argument(
        "--unpinned",
        action="store_true",
        help="pin nothing: the server and the client tree share every core",
    )
    ap.add_argument(
        "--point-timeout",
        type=float,
        default=300.0,
        help="seconds a point may take before it is killed and reported as hung",
    )
    ap.add_argument("--json", dest="json_path", default=None, help="write the numbers here")
    args = ap.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    server_core = cores[-1]
    args.client_cores = set(cores) if args.unpinned else (set(cores[:-1]) or {server_core})
    root = Path(tempfile.mkdtemp(prefix="agentload-workers-"))
    data = root / "dataset.jsonl"
    write_dataset(data, args.conversations, args.turns, 8)
    q: mp.Queue = mp.Queue()
    srv = mp.Process(target=_serve, args=(q, server_core), daemon=True)
    srv.start()
    port = q.get(timeout=10)
    if args.unpinned:  # the server pinned itself; give it every core back
        os.sched_setaffinity(srv.pid or 0, set(cores))
    counts = [int(x) for x in args.workers.split(",")]
    points = []
    try:
        for r in range(args.repeats):  # interleaved, so a change in the machine's load is shared
            for n in counts:
                points.append({"repeat": r, **run_point(args, n, port, data, root, r)})
                print(json.dumps(points[-1]), flush=True)
    finally:
        srv.terminate()
        shutil.rmtree(root, ignore_errors=True)
    medians = summarize(points, counts)
    result = {
        "concurrency": args.concurrency,
        "conversations": args.conversations,
        "turns": args.turns,
        "pinned": not args.unpinned,
        "cpu_count": len(cores),
        "client_cores": sorted(args.client_cores),
        "server_core": None if args.unpinned else server_core,
        "load_average": os.getloadavg(),
        "medians": medians,
        "points": points,
    }
    print(json.dumps(result, indent=2))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
