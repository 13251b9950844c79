"""How many replayed calls per second one agentload process sends, and how late it sends them.

Writes a synthetic MLPerf flat-row dataset (conversations of user and tool turns with a
shared system prompt), then runs `agentload replay` in this process against the embedded
simulator's `instant` profile (no model time, in its own process) with a closed loop of
1,000 active conversations, and reports calls per second (whole run and steady state: while
the loop was full), the send-time lag of every turn (actual minus intended send time, from
calls.jsonl), the client's event-loop lag and CPU time. Results: benchmarks/README.md,
"Replay throughput".

    .venv/bin/python benchmarks/replay_throughput.py --concurrency 1000 --conversations 3000
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
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


def steady_calls_per_s(calls: list[dict], sessions: list[dict], concurrency: int) -> dict:
    """Calls ended per second from the time the first `concurrency` conversations ended
    (ramp-up over) to the last conversation start (drain not begun)."""
    ends = sorted(s["end_ns"] for s in sessions)
    if len(ends) <= concurrency:
        return {"calls_per_s": None, "window_s": None}
    t_a, t_b = ends[concurrency - 1], max(s["start_ns"] for s in sessions)
    n = sum(1 for c in calls if t_a < c["end_ns"] <= t_b)
    window = (t_b - t_a) / 1e9
    return {
        "calls_per_s": round(n / window, 1) if window > 0 else None,
        "window_s": round(window, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=1000)
    ap.add_argument("--conversations", type=int, default=3000)
    ap.add_argument("--turns", type=int, default=8, help="client turns per conversation")
    ap.add_argument("--answer-words", type=int, default=8, help="recorded answer length")
    ap.add_argument("--profile", default="instant")
    ap.add_argument("--history", default="dataset", choices=["dataset", "live"])
    ap.add_argument("--no-stream", action="store_true", help="non-streamed calls")
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
    cfg = build_config(data=cfg_data)
    t = time.perf_counter()
    res = run_async(execute_run(cfg, progress="plain", progress_interval_s=10.0))
    wall = time.perf_counter() - t
    s = res.summary or {}
    c = s["client"]
    lag = c["event_loop_lag_s"]
    calls = load_jsonl(out / "run" / "calls.jsonl")
    sessions = load_jsonl(out / "run" / "sessions.jsonl")
    send_lag = np.array([x["replay"]["send_lag_s"] for x in calls])
    steady = steady_calls_per_s(calls, sessions, args.concurrency)
    rp = s.get("replay") or {}
    result = {
        "concurrency": args.concurrency,
        "conversations": len(sessions),
        "client_turns_planned": turns,
        "calls": len(calls),
        "failed_calls": s["errors"]["calls_failed"],
        "history": args.history,
        "stream": not args.no_stream,
        "max_active": c["max_active"],
        "elapsed_s": round(c["elapsed_s"], 2),
        "calls_per_s": round(len(calls) / c["elapsed_s"], 1),
        "steady_calls_per_s": steady["calls_per_s"],
        "steady_window_s": steady["window_s"],
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
