"""The synthetic kind end to end: on the embedded simulator (lengths as the server counts
them, no accidental prefix-cache hits, a shared prefix that is cached, history growth), what
each request carries (a loopback server that records bodies), and the command line (run and
sweep, bad values)."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from agentload.cli import app
from agentload.config import build_config
from agentload.results.jsonl import load_jsonl
from agentload.runner import execute_run
from recording_server import RecordingServer


def _quiet(_msg: str) -> None:
    pass


def _cfg(out: Path, synthetic: dict[str, Any], base_url: str | None = None, **top: Any) -> Any:
    data: dict[str, Any] = {
        "out": str(out),
        "kind": "synthetic",
        "synthetic": synthetic,
        "load": top.pop("load", {"concurrency": 4}),
        "report": False,
        **top,
    }
    if base_url is not None:
        data["endpoints"] = {"agent": {"base_url": base_url, "model": "m", "stream": False}}
        data["preflight"] = False  # the recording server answers chat completions only
        data["metrics"] = {"enabled": False}
    return build_config(data=data)


async def _run(cfg: Any) -> Any:
    return await execute_run(cfg, progress="off", say=_quiet, install_signals=False)


async def test_single_requests_on_the_simulator(tmp_path: Path) -> None:
    out = tmp_path / "run"
    cfg = _cfg(out, {"input_tokens": 512, "output_tokens": 32, "num_requests": 12})
    res = await _run(cfg)
    assert res.exit_code == 0
    calls = load_jsonl(out / "calls.jsonl")
    assert len(calls) == 12 and all(c["status"] == "ok" for c in calls)
    prompts = {c["prompt_tokens"] for c in calls}
    # 512 tokens of text plus the chat template's few, the same for every request.
    assert len(prompts) == 1 and 512 < prompts.pop() < 530
    assert {c["completion_tokens"] for c in calls} == {32}
    # Distinct starts: not one token came from the prefix cache.
    assert {c["cached_tokens"] for c in calls} == {0}
    sessions = load_jsonl(out / "sessions.jsonl")
    assert len(sessions) == 12 and {s["kind"] for s in sessions} == {"synthetic"}
    assert sorted(s["trial"] for s in sessions) == list(range(12))
    turn = sessions[0]["synthetic"]["turns"][0]
    assert (turn["input_tokens"], turn["output_tokens"], turn["completion_tokens"]) == (512, 32, 32)
    summary = json.loads((out / "summary.json").read_text())
    meta = summary["run"]["synthetic"]
    assert meta["lengths"] == "exact"  # the simulator counts with the text's approximation
    assert meta["input_tokens"] == "512" and meta["output_tokens"] == "32"
    assert "does not apply" in meta["task_success"]
    # config.yaml reads back as the same run (what --resume starts from).
    again = build_config(path=out / "config.yaml")
    assert again.kind == "synthetic" and again.synthetic == cfg.synthetic
    figures = summary["calls"]["all"]
    assert figures["ttft_s"]["count"] == 12 and figures["itl_s"]["gaps"] == 12 * 31


async def test_sessions_share_a_prefix_and_grow(tmp_path: Path) -> None:
    out = tmp_path / "run"
    syn = {
        "turns": 3,
        "input_tokens": 150,
        "output_tokens": 8,
        "shared_prefix_tokens": 600,
        "num_requests": 3,
    }
    # The tiny-cpu profile caches whole blocks of 128 tokens.
    res = await _run(_cfg(out, syn, load={"concurrency": 1}, sim={"profile": "tiny-cpu"}))
    assert res.exit_code == 0
    block = 128
    calls = load_jsonl(out / "calls.jsonl")
    by_session: dict[str, list[dict[str, Any]]] = {}
    for c in sorted(calls, key=lambda c: (c["session_id"], c["turn"])):
        by_session.setdefault(c["session_id"], []).append(c)
    assert len(by_session) == 3 and all(len(v) == 3 for v in by_session.values())
    firsts = []
    for turns in by_session.values():
        p = [c["prompt_tokens"] for c in turns]
        # Each turn adds the previous answer (8) and a new message (150), with their markup.
        assert all(158 <= b - a <= 175 for a, b in itertools.pairwise(p)), p
        # Later turns find the session's own history in the prefix cache.
        for prev, c in itertools.pairwise(turns):
            assert c["cached_tokens"] >= prev["prompt_tokens"] // block * block - block
        firsts.append(turns[0])
    firsts.sort(key=lambda c: c["start_ns"])
    # The first session finds nothing cached; the others the shared system prompt only.
    assert firsts[0]["cached_tokens"] == 0
    assert all(c["cached_tokens"] == 600 // block * block for c in firsts[1:])


async def test_what_each_request_carries(tmp_path: Path) -> None:
    syn = {
        "turns": 4,
        "input_tokens": 30,
        "output_tokens": "uniform:5-9",
        "think_time_s": "0.1s",
        "tool_result_tokens": 50,
        "tool_every": 2,
        "shared_prefix_tokens": 20,
        "num_requests": 2,
    }
    async with RecordingServer() as srv:
        res = await _run(_cfg(tmp_path / "a", syn, srv.base_url, load={"concurrency": 2}))
        assert res.exit_code == 0
        first = srv.by_session()
        srv.seen.clear()
        await _run(_cfg(tmp_path / "b", syn, srv.base_url, load={"concurrency": 2}))
        again = srv.by_session()
        srv.seen.clear()
        await _run(
            _cfg(
                tmp_path / "c",
                {**syn, "ignore_eos": False},
                srv.base_url,
                load={"concurrency": 2},
                workload={"seed": 1},
            )
        )
        other = srv.by_session()
    assert len(first) == 2 and all(len(v) == 4 for v in first.values())
    # The same seed sends the same prompts; another seed other ones.
    msgs = sorted(json.dumps([b["messages"] for b in v]) for v in first.values())
    assert msgs == sorted(json.dumps([b["messages"] for b in v]) for v in again.values())
    assert not set(msgs) & {json.dumps([b["messages"] for b in v]) for v in other.values()}
    system = {b["messages"][0]["content"] for v in first.values() for b in v}
    assert len(system) == 1  # one shared system prompt
    for bodies in first.values():
        for i, b in enumerate(bodies):
            assert 5 <= b["max_tokens"] <= 9
            assert b["ignore_eos"] is True and b["min_tokens"] == b["max_tokens"]
            m = b["messages"]
            assert m[0]["role"] == "system" and len(m) == 2 + 2 * i
            if i == 2:  # a tool result after a tool call added to the answer before it
                assert m[-2]["role"] == "assistant" and m[-2]["tool_calls"][0]["id"]
                assert m[-1] == {
                    "role": "tool",
                    "tool_call_id": m[-2]["tool_calls"][0]["id"],
                    "content": m[-1]["content"],
                }
                assert len(m[-1]["content"].split()) == 50
            else:
                assert m[-1]["role"] == "user" and len(m[-1]["content"].split()) == 30
            if i:
                assert m[-2]["role"] == "assistant"
    for bodies in other.values():
        assert all("ignore_eos" not in b and "min_tokens" not in b for b in bodies)
    sessions = load_jsonl(tmp_path / "a" / "sessions.jsonl")
    for s in sessions:
        assert s["durations"]["delay_s"] >= 0.3 - 1e-9  # three waits of 0.1 s
        assert s["durations"]["total_s"] >= 0.3
        assert s["counts"]["tool_turns"] == 1 and s["counts"]["agent_calls"] == 4
        assert [t["tool_result"] for t in s["synthetic"]["turns"]] == [False, False, True, False]
    meta = json.loads((tmp_path / "a" / "run.json").read_text())["synthetic"]
    assert meta["lengths"] == "estimated" and meta["turns"] == "4"


async def test_duration_bounds_an_unbounded_run(tmp_path: Path) -> None:
    async with RecordingServer() as srv:
        t0 = time.monotonic()
        cfg = _cfg(
            tmp_path / "d",
            {"input_tokens": 16, "output_tokens": 4},
            srv.base_url,
            load={"concurrency": 2, "duration_s": "1s"},
        )
        res = await _run(cfg)
        took = time.monotonic() - t0
    assert res.exit_code == 0 and took < 20
    n = len(load_jsonl(tmp_path / "d" / "sessions.jsonl"))
    assert n > 10  # far more than nothing, with 2 ms answers over a second


def test_run_and_sweep_on_the_command_line(tmp_path: Path) -> None:
    runner = CliRunner()
    bad = runner.invoke(app, ["run", "--workload", "synthetic", "--input-tokens", "uniform:9-3"])
    assert bad.exit_code == 2
    assert "--input-tokens" in bad.output and "Traceback" not in bad.output
    out = tmp_path / "sweep"
    args = ["sweep", "--workload", "synthetic", "--concurrency", "1,4", "--num-requests", "8"]
    args += ["--input-tokens", "uniform:64-128", "--output-tokens", "8", "--sim-speedup", "20"]
    args += ["--no-report", "--json", "--out", str(out)]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [p["concurrency"] for p in doc["points"]] == [1, 4]
    for point in ("c0001", "c0004"):
        calls = load_jsonl(out / point / "calls.jsonl")
        assert len(calls) == 8 and {c["completion_tokens"] for c in calls} == {8}
