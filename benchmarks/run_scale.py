"""How many live episodes one agentload process holds, and how fast it completes them.

Runs `agentload run` in this process against the embedded simulator's `instant` profile (no
model time, in its own process) at a high closed-loop concurrency and reports completed
episodes per second, the most episodes live at once, LLM calls per second and the event-loop
lag of the client process (p50 / p99 / max). Results: benchmarks/README.md, "Run scale".

    .venv/bin/python benchmarks/run_scale.py --concurrency 1000 --episodes 4000
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from agentload.config import build_config
from agentload.runner import execute_run
from agentload.util import run_async


def steady_state(sessions_path: Path, concurrency: int) -> dict[str, float | None]:
    """Completions per second while the loop was full: from the time the first
    `concurrency` episodes have ended (ramp-up over) to the last start (drain not begun)."""
    from agentload.results.jsonl import load_jsonl

    ss = load_jsonl(sessions_path)
    ends = sorted(s["end_ns"] for s in ss)
    if len(ends) <= concurrency:
        return {"episodes_per_s": None, "window_s": None}
    t_a = ends[concurrency - 1]
    t_b = max(s["start_ns"] for s in ss)
    n = sum(1 for e in ends if t_a < e <= t_b)
    window = (t_b - t_a) / 1e9
    return {
        "episodes_per_s": round(n / window, 1) if window > 0 else None,
        "window_s": round(window, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=1000)
    ap.add_argument("--episodes", type=int, default=4000)
    ap.add_argument("--tasks", default="airline,retail")
    ap.add_argument("--user", default="llm", choices=["llm", "scripted"])
    ap.add_argument("--agent", default="tool-calling")
    ap.add_argument("--profile", default="instant")
    ap.add_argument("--out", default=None, help="results folder (default: a temporary one)")
    ap.add_argument("--no-gc-tune", action="store_true", help="keep CPython's GC defaults")
    ap.add_argument(
        "--tool-latency",
        type=float,
        default=0.0,
        help="mean seconds per tool call (lognormal): episodes then last as long as real "
        "ones, so many stay live at a rate the client sustains",
    )
    ap.add_argument("--json", dest="json_path", default=None, help="write the numbers here")
    args = ap.parse_args()

    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="agentload-scale-"))
    if out.exists() and any(out.iterdir()):
        shutil.rmtree(out)
    cfg = build_config(
        data={
            "out": str(out),
            "sim": {"profile": args.profile},
            "workload": {
                "tasks": args.tasks.split(","),
                "user": args.user,
                "agent": args.agent,
                "tool_latency": (
                    {"kind": "lognormal", "mean_s": args.tool_latency, "spread": 0.5}
                    if args.tool_latency > 0
                    else {"kind": "none"}
                ),
            },
            "load": {
                "concurrency": args.concurrency,
                "num_episodes": args.episodes,
                "drain_timeout_s": 120,
            },
            "metrics": {"interval_s": 2.0},
            "report": False,
        }
    )
    t = time.perf_counter()
    res = run_async(
        execute_run(cfg, progress="plain", progress_interval_s=10.0, tune_gc=not args.no_gc_tune)
    )
    wall = time.perf_counter() - t
    s = json.loads((out / "summary.json").read_bytes())  # as any tree under A/B wrote it
    steady = steady_state(out / "sessions.jsonl", args.concurrency)
    c = s["client"]
    lag = c["event_loop_lag_s"]
    calls = s["counts"]["calls"]
    result = {
        "concurrency": args.concurrency,
        "episodes": c["episodes_finished"],
        "user": args.user,
        "agent": args.agent,
        "profile": args.profile,
        "tool_latency_s": args.tool_latency,
        "max_active": c["max_active"],
        "elapsed_s": round(c["elapsed_s"], 2),
        "episodes_per_s": round(c["episodes_per_s"], 1),
        "episodes_per_hour": round(c["episodes_per_s"] * 3600),
        "steady_episodes_per_s": steady["episodes_per_s"],
        "steady_window_s": steady["window_s"],
        "calls": calls,
        "calls_per_s": round(calls / c["elapsed_s"], 1),
        "calls_per_episode": round(calls / max(1, c["episodes_finished"]), 1),
        "loop_lag_p50_ms": round(lag["p50"] * 1000, 2),
        "loop_lag_p99_ms": round(lag["p99"] * 1000, 2),
        "loop_lag_max_ms": round(lag["max"] * 1000, 2),
        "client_cpu_s": round(c["process"]["cpu_user_s"] + c["process"]["cpu_system_s"], 1),
        "failed_calls": s["errors"]["calls_failed"],
        "gc_tuned": not args.no_gc_tune,
        "wall_s_incl_setup": round(wall, 1),
        "exit_code": res.exit_code,
    }
    print(json.dumps(result, indent=2))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(result, indent=2) + "\n")
    if not args.out:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
