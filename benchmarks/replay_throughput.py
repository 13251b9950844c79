"""How many replayed calls per second one agentload process sends, and how late it sends them.

Writes a synthetic MLPerf flat-row dataset (conversations of user and tool turns with a
shared system prompt), then runs `agentload replay` in this process against the embedded
simulator's `instant` profile (no model time, in its own process) with a closed loop of
1,000 active conversations, and reports calls per second (whole run and steady state: while
the loop was full), the send-time lag of every turn (actual minus intended send time, from
calls.jsonl), the client's event-loop lag and its CPU time per call in the steady state (the
figure that does not depend on how busy the machine is: one core sustains 1e6 / that many
calls per second). Results: benchmarks/README.md, "Replay throughput".

    .venv/bin/python benchmarks/replay_throughput.py --concurrency 1000 --conversations 3000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import orjson

from agentload.config import build_config
from agentload.results.jsonl import load_jsonl
from agentload.runner import execute_run
from agentload.util import run_async

SYSTEM = "You are a support agent for an online shop. Follow the policy. " * 30  # ~2 KB


def write_dataset(path: Path, conversations: int, turns: int, answer_words: int) -> int:
    """`turns` client turns per conversation, alternating user messages and tool results;
    returns the number of client turns."""
    n = 0
    with path.open("wb") as f:
        for c in range(conversations):
            rows: list[dict] = []
            for t in range(turns):
                n += 1
                if t == 0:
                    rows.append(
                        {"role": "user", "content": f"Order {c} has a problem.", "system": SYSTEM}
                    )
                elif t % 2 == 0:
                    rows.append({"role": "user", "content": f"Thanks. One more thing ({t})."})
                else:
                    result = {"tool_call_id": f"call-{c}-{t}", "content": '{"status": "ok"}'}
                    rows.append({"role": "tool", "content": None, "tool_results": [result]})
                if t % 2 == 0 and t + 1 < turns:
                    call = {
                        "id": f"call-{c}-{t + 1}",
                        "type": "function",
                        "function": {"name": "get_order", "arguments": '{"id": 1}'},
                    }
                    rows.append({"role": "assistant", "content": None, "tool_calls": [call]})
                else:
                    rows.append({"role": "assistant", "content": " ".join(["word"] * answer_words)})
            for k, r in enumerate(rows, start=1):
                row = {"conversation_id": f"bench-{c:06d}", "turn": k, **r}
                f.write(orjson.dumps(row) + b"\n")
    return n


def _children_cpu_s() -> float:
    """CPU seconds (user + system) of this process's live child processes (the simulator)."""
    me, total = str(os.getpid()), 0.0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if fields[1].decode() == me:  # ppid
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


class CpuSampler:
    """(perf_counter_ns, process CPU s, child processes' CPU s) every 0.2 s from a thread, so
    CPU time per call can be taken over the steady window only (no start-up, no summary)."""

    def __init__(self) -> None:
        self.samples: list[tuple[int, float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            self.samples.append((time.perf_counter_ns(), time.process_time(), _children_cpu_s()))

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def cpu_between(self, t_a: int, t_b: int) -> tuple[float, float, float] | None:
        """(client CPU s, wall s, server CPU s) between the samples nearest inside [t_a, t_b]."""
        inside = [x for x in self.samples if t_a <= x[0] <= t_b]
        if len(inside) < 2:
            return None
        (n0, c0, s0), (n1, c1, s1) = inside[0], inside[-1]
        return c1 - c0, (n1 - n0) / 1e9, s1 - s0


def steady(calls: list[dict], sessions: list[dict], concurrency: int, cpu: CpuSampler) -> dict:
    """Calls ended per second, and client CPU per call, from the time the first
    `concurrency` conversations ended (ramp-up over) to the last conversation start (drain
    not begun)."""
    ends = sorted(s["end_ns"] for s in sessions)
    if len(ends) <= concurrency:
        return {
            "calls_per_s": None,
            "window_s": None,
            "cpu_us_per_call": None,
            "cpu_share": None,
            "server_cpu_us_per_call": None,
        }
    t_a, t_b = ends[concurrency - 1], max(s["start_ns"] for s in sessions)
    window = (t_b - t_a) / 1e9
    used = cpu.cpu_between(t_a, t_b)
    per_call = share = server_per_call = None
    if used is not None:
        n_cpu = sum(1 for c in calls if t_a < c["end_ns"] <= t_a + int(used[1] * 1e9))
        per_call = round(used[0] / n_cpu * 1e6, 1) if n_cpu else None
        server_per_call = round(used[2] / n_cpu * 1e6, 1) if n_cpu else None
        share = round(used[0] / used[1], 3) if used[1] > 0 else None
    n = sum(1 for c in calls if t_a < c["end_ns"] <= t_b)
    return {
        "calls_per_s": round(n / window, 1) if window > 0 else None,
        "window_s": round(window, 2),
        "cpu_us_per_call": per_call,
        "cpu_share": share,
        "server_cpu_us_per_call": server_per_call,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=1000)
    ap.add_argument("--conversations", type=int, default=3000)
    ap.add_argument("--turns", type=int, default=8, help="client turns per conversation")
    ap.add_argument("--answer-words", type=int, default=8, help="recorded answer length")
    ap.add_argument("--profile", default="instant")
    ap.add_argument(
        "--server",
        default="sim",
        choices=["sim", "canned"],
        help="sim: the embedded simulator; canned: client_throughput.py's canned-stream server "
        "(16 tokens per answer, a fraction of a core), so the client alone is measured",
    )
    ap.add_argument("--history", default="dataset", choices=["dataset", "live"])
    ap.add_argument("--no-stream", action="store_true", help="non-streamed calls")
    ap.add_argument(
        "--sim-src",
        default=None,
        help="run the simulator process from another checkout's src/ folder (the client stays "
        "this one): paired A/B of the simulator's CPU per call",
    )
    ap.add_argument("--out", default=None, help="results folder (default: a temporary one)")
    ap.add_argument("--json", dest="json_path", default=None, help="write the numbers here")
    args = ap.parse_args()

    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="agentload-replay-"))
    if out.exists() and any(out.iterdir()):
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    data = out.parent / f"{out.name}-dataset.jsonl"
    turns = write_dataset(data, args.conversations, args.turns, args.answer_words)
    cfg_data: dict = {
        "out": str(out / "run"),
        "kind": "replay",
        "sim": {"profile": args.profile},
        "replay": {"dataset": str(data), "history": args.history},
        "load": {"concurrency": args.concurrency, "drain_timeout_s": 120},
        "metrics": {"interval_s": 2.0},
        "report": False,
    }
    if args.no_stream:
        # The simulator runs embedded; streaming is a property of the replayed rows.
        data.write_bytes(
            data.read_bytes().replace(b'"role":"user"', b'"role":"user","stream":false')
        )
    srv = None
    if args.server == "canned":
        import multiprocessing as mp

        from client_throughput import _serve

        q: mp.Queue = mp.Queue()
        srv = mp.Process(target=_serve, args=(q, (os.cpu_count() or 1) - 1), daemon=True)
        srv.start()
        port = q.get(timeout=10)
        cfg_data["endpoints"] = {
            "agent": {"base_url": f"http://127.0.0.1:{port}/v1", "model": "bench"}
        }
    if args.sim_src:
        # Only the simulator's process (a child) imports from there: this one is loaded.
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [str(Path(args.sim_src).resolve()), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
    cfg = build_config(data=cfg_data)
    t = time.perf_counter()
    try:
        with CpuSampler() as cpu:
            res = run_async(execute_run(cfg, progress="plain", progress_interval_s=10.0))
    finally:
        if srv is not None:
            srv.terminate()
    wall = time.perf_counter() - t
    s = json.loads((out / "run" / "summary.json").read_bytes())  # as any tree wrote it
    c = s["client"]
    lag = c["event_loop_lag_s"]
    calls = load_jsonl(out / "run" / "calls.jsonl")
    sessions = load_jsonl(out / "run" / "sessions.jsonl")
    send_lag = np.array([x["replay"]["send_lag_s"] for x in calls])
    st = steady(calls, sessions, args.concurrency, cpu)
    rp = s.get("replay") or {}
    result = {
        "concurrency": args.concurrency,
        "conversations": len(sessions),
        "client_turns_planned": turns,
        "calls": len(calls),
        "failed_calls": s["errors"]["calls_failed"],
        "server": args.server,
        "history": args.history,
        "stream": not args.no_stream,
        "max_active": c["max_active"],
        "elapsed_s": round(c["elapsed_s"], 2),
        "calls_per_s": round(len(calls) / c["elapsed_s"], 1),
        "steady_calls_per_s": st["calls_per_s"],
        "steady_window_s": st["window_s"],
        "steady_client_cpu_us_per_call": st["cpu_us_per_call"],
        "steady_client_cpu_share": st["cpu_share"],
        # The simulator (or canned server) process: its CPU per call over the same window.
        "steady_server_cpu_us_per_call": st["server_cpu_us_per_call"],
        "send_lag_p50_ms": round(float(np.percentile(send_lag, 50)) * 1000, 2),
        "send_lag_p99_ms": round(float(np.percentile(send_lag, 99)) * 1000, 2),
        "send_lag_max_ms": round(float(send_lag.max()) * 1000, 2),
        "loop_lag_p50_ms": round(lag["p50"] * 1000, 2),
        "loop_lag_p99_ms": round(lag["p99"] * 1000, 2),
        "client_cpu_s": round(c["process"]["cpu_user_s"] + c["process"]["cpu_system_s"], 1),
        "output_tokens_match": (rp.get("output_tokens") or {}).get("matching_calls"),
        "wall_s_incl_setup": round(wall, 1),
        "exit_code": res.exit_code,
    }
    print(json.dumps(result, indent=2))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(result, indent=2) + "\n")
    if not args.out:
        shutil.rmtree(out, ignore_errors=True)
        data.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
