"""What running the workers as Ray actors costs against worker processes, and how tight the
clock offsets are, on a local multi-node Ray cluster (a head and two raylets on this machine,
all on loopback: tests/ray_cluster.py).

Each repeat runs the same `agentload run` twice as a subprocess, once with `--workers N`
(processes) and once with `--ray ADDRESS --workers N` (actors): episodes against the embedded
simulator's `instant` profile (no model time), so the client and its transport do all the
work. Reported per backend (medians over the repeats): the run's wall time from start to exit,
the sessions' measurement window and sessions per second in it, and the start-up (wall time
outside the window: imports, the simulator, placing actors or spawning processes). For the
Ray runs: each actor's measured clock offset and its bound (all nodes share this machine's
clock, so the true offset is zero). Results: benchmarks/README.md.

    .venv/bin/python benchmarks/ray_cluster.py --workers 3 --sessions 120 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from ray_cluster import LOOPBACK_ENV, local_ray_cluster  # noqa: E402

AGENTLOAD = str(Path(sys.executable).parent / "agentload")


def one_run(tmp: Path, name: str, workers: int, sessions: int, ray: str | None) -> dict:
    out = tmp / name
    cfg = {
        "out": str(out),
        "workload": {"tasks": ["airline", "retail"], "trials": 2},
        "load": {"concurrency": 8 * workers, "workers": workers, "num_episodes": sessions},
        "sim": {"profile": "instant"},
        "report": False,
        "metrics": {"enabled": False},
    }
    if ray:
        cfg["ray"] = {"address": ray}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    t0 = time.perf_counter()
    res = subprocess.run(
        [AGENTLOAD, "run", "--config", str(path), "--progress", "off"],
        capture_output=True,
        text=True,
        env={**os.environ, **LOOPBACK_ENV},
        timeout=600,
    )
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"{name} failed ({res.returncode}):\n{res.stderr[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    window = summary["window"]["duration_s"]
    n = summary["episodes"]["episodes"]
    return {
        "wall_s": wall,
        "window_s": window,
        "sessions": n,
        "sessions_per_s": n / window,
        "startup_s": wall - window,
        "clock": summary["client"].get("clock_offsets") or [],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--sessions", type=int, default=120)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    a = ap.parse_args()
    results: dict[str, list[dict]] = {"processes": [], "ray": []}
    t = time.perf_counter()
    with local_ray_cluster(workers=2, cpus_per_node=2) as cluster:
        started = time.perf_counter() - t
        print(f"local Ray cluster up in {started:.1f} s at {cluster.address}", file=sys.stderr)
        with tempfile.TemporaryDirectory() as d:
            for i in range(a.repeats):  # interleaved: both backends see the same load
                for kind, addr in (("processes", None), ("ray", cluster.address)):
                    r = one_run(Path(d), f"{kind}-{i}", a.workers, a.sessions, addr)
                    results[kind].append(r)
                    print(
                        f"{kind:9s} #{i}: {r['sessions']} sessions, window {r['window_s']:.2f} s, "
                        f"{r['sessions_per_s']:.1f}/s, start-up {r['startup_s']:.1f} s",
                        file=sys.stderr,
                    )
    table = {
        kind: {
            k: statistics.median(r[k] for r in rs)
            for k in ("wall_s", "window_s", "sessions_per_s", "startup_s")
        }
        for kind, rs in results.items()
    }
    clocks = [c for r in results["ray"] for c in r["clock"]]
    bounds = sorted(c["bound_s"] for c in clocks)
    errs = sorted(abs(c["measured_offset_s"]) for c in clocks)
    doc = {
        "workers": a.workers,
        "sessions": a.sessions,
        "repeats": a.repeats,
        "cluster_start_s": started,
        "median": table,
        "clock": {
            "actors": len(clocks),
            "bound_s": {"min": bounds[0], "median": statistics.median(bounds), "max": bounds[-1]},
            "abs_measured_offset_s": {"median": statistics.median(errs), "max": errs[-1]},
            "all_within_bound": all(abs(c["measured_offset_s"]) <= c["bound_s"] for c in clocks),
        },
    }
    if a.json:
        print(json.dumps(doc, indent=2))
        return
    print(
        f"{'backend':10s} {'wall s':>8s} {'window s':>9s} {'sessions/s':>11s} {'start-up s':>11s}"
    )
    for kind, row in table.items():
        print(
            f"{kind:10s} {row['wall_s']:8.1f} {row['window_s']:9.2f} "
            f"{row['sessions_per_s']:11.1f} {row['startup_s']:11.1f}"
        )
    c = doc["clock"]
    print(
        f"clock offsets over {c['actors']} actors: bound median {c['bound_s']['median'] * 1e3:.2f}"
        f" ms (max {c['bound_s']['max'] * 1e3:.2f} ms); |measured| median "
        f"{c['abs_measured_offset_s']['median'] * 1e6:.0f} µs, max "
        f"{c['abs_measured_offset_s']['max'] * 1e6:.0f} µs; all within bound: "
        f"{c['all_within_bound']}"
    )


if __name__ == "__main__":
    main()
