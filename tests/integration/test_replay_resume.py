"""A replay stopped part-way (a --duration cap) keeps what it measured: the summary counts
every finished call, `--resume` goes on at each conversation's first unsent turn (dataset
history), and the progress ETA is counted in turns."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from agentload.config import build_config
from agentload.results.jsonl import load_jsonl
from agentload.runner import execute_run
from agentload.workloads.dataset import index_dataset
from agentload.workloads.replay import TurnProgress
from recording_server import RecordingServer
from replay_fixture import client_turns, write_dataset

N = 12


def _cfg(out: Path, dataset: Path, base_url: str, **load: Any) -> Any:
    return build_config(
        data={
            "out": str(out),
            "kind": "replay",
            "replay": {"dataset": str(dataset)},
            "endpoints": {"agent": {"base_url": base_url, "model": "m", "stream": False}},
            "load": {"concurrency": N, **load},
            "metrics": {"enabled": False},
            "report": False,
            "preflight": False,
        }
    )


def _expected(dataset: Path, cid: str) -> list[list[dict[str, Any]]]:
    conv = index_dataset(dataset).load(cid)
    out, hist = [], conv.prefix_messages()
    for t in conv.turns:
        hist = hist + t.messages
        out.append(hist)
        if t.answer is not None:
            hist = [*hist, t.answer]
    return out


async def test_capped_replay_counts_its_calls_and_resumes_at_the_first_unsent_turn(
    tmp_path: Path,
) -> None:
    ds = write_dataset(tmp_path / "d.jsonl", n=N)
    out = tmp_path / "out"
    turns = {f"conv-{i:03d}": client_turns(i) for i in range(N)}
    said: list[str] = []
    # Each answer takes 0.12 s: at the 0.3 s cap every conversation is part-way.
    async with RecordingServer(delay=lambda _h: 0.12) as srv:
        capped = _cfg(
            out, ds, srv.base_url, duration_s="0.3s", drain_timeout_s="0.01s", num_episodes=N
        )
        res = await execute_run(capped, progress="off", say=said.append, install_signals=False)
        calls = load_jsonl(out / "calls.jsonl")
        finished = [c for c in calls if c.get("error_kind") != "cancelled"]
        sessions = load_jsonl(out / "sessions.jsonl")
        assert len(sessions) < N and len(finished) > sum(
            s["counts"]["turns_sent"] for s in sessions
        )
        summary = orjson.loads((out / "summary.json").read_bytes())
        assert summary["counts"]["calls"] == len(finished)  # every finished call counts
        assert res.summary.calls.all.calls == len(finished)
        first_round = len(srv.seen)

        full = _cfg(out, ds, srv.base_url)
        res2 = await execute_run(
            full, resume=True, progress="off", say=said.append, install_signals=False
        )
    assert res2.exit_code == 0, res2.stop_reason
    assert first_round < len(srv.seen)

    # Every turn was answered once in calls.jsonl, and nothing answered was sent again.
    calls = load_jsonl(out / "calls.jsonl")
    ok = [c for c in calls if c["status"] == "ok"]
    keys = Counter((c["replay"]["conversation_id"], c["turn"]) for c in ok)
    assert max(keys.values()) == 1
    assert len(ok) == sum(turns.values())
    assert len({c["call_id"] for c in calls}) == len(calls)
    sessions = {s["task_id"]: s for s in load_jsonl(out / "sessions.jsonl")}
    assert len(sessions) == N
    resumed = [s for s in sessions.values() if s["counts"].get("turns_resumed")]
    assert resumed, "no conversation was part-way at the cap"
    for s in resumed:
        c = s["counts"]
        assert c["turns_resumed"] + c["turns_sent"] == c["turns"] == turns[s["task_id"]]
    # What the server received: each conversation's requests as the dataset gives them, in
    # order; a turn cancelled by the cap is the only one sent twice.
    for cid, bodies in srv.by_session().items():
        sent = [b["messages"] for b in bodies]
        unique = [m for i, m in enumerate(sent) if i == 0 or m != sent[i - 1]]
        assert unique == _expected(ds, cid), cid
        assert len(sent) - len(unique) <= 1, cid
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert summary["counts"]["calls"] == len(
        [c for c in calls if c.get("error_kind") != "cancelled"]
    )


def test_eta_is_counted_in_turns() -> None:
    # 4 conversations: one of 40 turns, three of 2 (46 turns). After the three short ones
    # (6 calls) in 6 s, the long one's 40 turns are left: 40 s, not 1/3 of the time so far.
    p = TurnProgress(46, total=4)
    p.t0 = time.perf_counter() - 6.0
    for _ in range(3):
        p.on_episode({"termination": "completed"})
    for _ in range(6):
        p.calls += 1
    eta = p.snapshot()["eta_s"]
    assert 39.0 < eta < 41.5
