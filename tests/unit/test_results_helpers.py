"""A results directory with hand-chosen records, shared by the results and report tests.

Layout (6 measured episodes + 1 warmup, window 80 s):

- tasks airline/001 (rewards 1, 1), airline/002 (1, 0), retail/001 (0, 0), trials 0 and 1;
- episode i starts at T0 + 10 i and lasts 30 s, so the window is T0 .. T0 + 80;
- each episode: 3 agent calls (turns 0..2, TTFT 0.1 / 0.2 / 0.3 s, e2e = TTFT + 1 s) and one
  user call (TTFT 0.05 s); airline/001 trial 1 has a slow agent call (TTFT 0.9 s) and
  retail/001 trial 0's last agent call failed (timeout_first_token);
- one warmup episode with 100 s TTFTs, and one call of an episode that never finished.

With SLO {ttft_p90: 0.5, e2e_p99: 2.0}: episodes meeting the SLOs are all but airline/001#1
(slow call) and retail/001#0 (failed call); of those, airline/001#0 and airline/002#0
succeeded, so goodput = 2 episodes / (80 s / 60) = 1.5 per minute.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentload.client.record import CallRecord, ItlSummary
from agentload.results import Recorder

T0 = 1_800_000_000.0
SLO = {"ttft_p90": 0.5, "e2e_p99": 2.0}
EPISODES = [  # (task, trial, reward)
    ("airline/001", 0, 1.0),
    ("airline/001", 1, 1.0),
    ("airline/002", 0, 1.0),
    ("airline/002", 1, 0.0),
    ("retail/001", 0, 0.0),
    ("retail/001", 1, 0.0),
]
WINDOW_S = 80.0
GOODPUT_PER_MIN = 1.5
PASS_HAT_K = {"1": 0.5, "2": 1 / 3}
PASS_HAT_K_AIRLINE = {"1": 0.75, "2": 0.5}


def agent_call(
    sid: str, j: int, start: float, *, ttft: float | None = None, failed: bool = False
) -> CallRecord:
    ttft = 0.1 * (j + 1) if ttft is None else ttft
    if failed:
        return CallRecord(
            call_id=f"{sid}-a{j}",
            session_id=sid,
            role="agent",
            turn=j,
            started_at=start,
            total_s=3.0,
            status="error",
            error_kind="timeout_first_token",
            error_message="no first token",
        )
    completion = 20 + j
    return CallRecord(
        call_id=f"{sid}-a{j}",
        session_id=sid,
        role="agent",
        turn=j,
        model="m",
        started_at=start,
        start_ns=1,
        end_ns=2,
        ttft_s=ttft,
        e2e_s=ttft + 1.0,
        tpot_s=1.0 / (completion - 1),
        total_s=ttft + 1.0,
        itl=ItlSummary(
            count=completion - 1,
            mean=0.01 * (j + 1),
            p50=0.01 * (j + 1),
            p90=0.02 * (j + 1),
            p99=0.03 * (j + 1),
            max=0.04 * (j + 1),
        ),
        token_chunks=completion,
        prompt_tokens=1000 + 500 * j,
        cached_tokens=500 * j,
        completion_tokens=completion,
        finish_reason="tool_calls",
        num_tool_calls=1,
    )


def user_call(sid: str, start: float) -> CallRecord:
    return CallRecord(
        call_id=f"{sid}-u0",
        session_id=sid,
        role="user",
        turn=0,
        model="m",
        started_at=start,
        ttft_s=0.05,
        e2e_s=0.25,
        tpot_s=0.02,
        total_s=0.25,
        itl=ItlSummary(count=9, mean=0.02, p50=0.02, p90=0.02, p99=0.02, max=0.02),
        prompt_tokens=300,
        cached_tokens=None,
        completion_tokens=10,
        finish_reason="stop",
    )


def session(
    sid: str, task: str, trial: int, reward: float, start: float, i: int, *, warmup: bool = False
) -> dict[str, Any]:
    return {
        "schema": "agentload.session/1",
        "session_id": sid,
        "domain": task.split("/")[0],
        "task_id": task,
        "trial": trial,
        "seed": 7,
        "agent": "tool-calling",
        "user": "llm",
        "reward": reward,
        "reward_breakdown": {"db_match": reward == 1.0, "outputs_ok": True, "missing_outputs": []},
        "grader_version": "1",
        "data_version": "x-1",
        "termination": "user_stop" if reward else ("max_steps" if i == 3 else "user_stop"),
        "error": None,
        "counts": {"agent_calls": 3, "user_calls": 1, "tool_calls": 3, "tool_errors": 0},
        "durations": {"total_s": 30.0, "llm_s": 12.0, "tool_s": 3.0, "user_s": 6.0},
        "started_at": start,
        # monotonic clock consistent with started_at (an arbitrary origin 1000 s before T0)
        "start_ns": round((start - T0 + 1000) * 1e9),
        "end_ns": round((start - T0 + 1030) * 1e9),
        "num_messages": 9,
        "run_id": "r1",
        "warmup": warmup,
        "intended_start_ns": 0,
        "sched_delay_s": 0.001 * i,
    }


def build_run(out: Path, *, server_samples: bool = True) -> Path:
    with Recorder(out) as rec:
        rec.write_config({"slo": {"ttft_p90": "500ms", "e2e_p99": "2s"}})
        rec.write_meta({"run_id": "r1", "status": "completed", "started_at": T0})
        # warmup episode, before the window
        ws = T0 - 100
        rec.record_call(agent_call("w", 0, ws, ttft=100.0))
        rec.record_call(agent_call("w", 1, ws + 1, ttft=100.0))
        rec.record_episode(
            session("w", "airline/001", 99, 1.0, ws, 0, warmup=True),
            {"session_id": "w", "messages": []},
        )
        for i, (task, trial, reward) in enumerate(EPISODES):
            sid = f"s{i}"
            start = T0 + 10 * i
            for j in range(3):
                slow = task == "airline/001" and trial == 1 and j == 1
                fail = task == "retail/001" and trial == 0 and j == 2
                rec.record_call(
                    agent_call(sid, j, start + 5 * j, ttft=0.9 if slow else None, failed=fail)
                )
            rec.record_call(user_call(sid, start + 20))
            rec.record_episode(
                session(sid, task, trial, reward, start, i),
                {"session_id": sid, "messages": [], "reward": reward},
            )
        # a call of an episode that never finished (the run was interrupted)
        rec.record_call(agent_call("ghost", 0, T0 + 70, ttft=50.0))
        if server_samples:
            for k in range(10):
                t = T0 - 5 + 10 * k
                rec.record_server_metrics(
                    {
                        "schema": "agentload.server_metrics/1",
                        "t": t,
                        "endpoint": "default",
                        "url": "http://127.0.0.1:1/metrics",
                        "ok": True,
                        "engine": "vllm",
                        "running": float(k % 4),
                        "waiting": float(k % 2),
                        "kv_usage": 0.1 * k,
                        "prefix_queries": 1000.0 * k,
                        "prefix_hits": 600.0 * k,
                        "prompt_tokens": 1000.0 * k,
                        "generation_tokens": 50.0 * k,
                        "preemptions": float(k // 5),
                        "ttft_sum": 0.2 * k,
                        "ttft_count": 1.0 * k,
                    }
                )
    return out
