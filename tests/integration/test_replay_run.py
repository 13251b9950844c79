"""Replay end to end over loopback: what is sent per turn (dataset and live history, id
remapping, divergence, salting), delays, timeouts, failures and load control."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import pytest

from agentload.config import build_config
from agentload.results.jsonl import load_jsonl
from agentload.runner import execute_run
from agentload.workloads.dataset import index_dataset
from agentload.workloads.replay import salt
from recording_server import RecordingServer
from replay_fixture import SYSTEMS, conversation_rows, write_dataset


def _quiet(_msg: str) -> None:
    pass


def _cfg(out: Path, dataset: Path, base_url: str | None, **replay: Any) -> Any:
    load = replay.pop("load", {"concurrency": 4})
    data: dict[str, Any] = {
        "out": str(out),
        "kind": "replay",
        "replay": {"dataset": str(dataset), **replay},
        "load": load,
        "metrics": {"enabled": False},
        "report": False,
        # The recording server answers chat completions only, not an engine's preflight.
        "preflight": False,
    }
    if base_url is not None:
        data["endpoints"] = {"agent": {"base_url": base_url, "model": "m", "stream": False}}
    else:
        data["sim"] = {"profile": "instant"}
    return build_config(data=data)


async def _run(cfg: Any) -> Any:
    return await execute_run(cfg, progress="off", say=_quiet, install_signals=False)


def _expected_requests(dataset: Path, cid: str) -> list[list[dict[str, Any]]]:
    """The messages of each call under dataset history: the recorded prefix up to each
    client turn."""
    conv = index_dataset(dataset).load(cid)
    out, hist = [], conv.prefix_messages()
    for t in conv.turns:
        hist = hist + t.messages
        out.append(hist)
        if t.answer is not None:
            hist = [*hist, t.answer]
    return out


async def test_dataset_history_sends_the_recorded_prefix(tmp_path: Path) -> None:
    ds = write_dataset(tmp_path / "d.jsonl")
    async with RecordingServer() as srv:
        res = await _run(_cfg(tmp_path / "out", ds, srv.base_url))
    assert res.exit_code == 0, res.stop_reason
    got = srv.by_session()
    assert sorted(got) == [f"conv-{i:03d}" for i in range(24)]  # X-Session-ID = conversation
    for cid, bodies in got.items():
        assert [b["messages"] for b in bodies] == _expected_requests(ds, cid), cid
        conv = index_dataset(ds).load(cid)
        assert [b.get("max_tokens") for b in bodies] == [
            t.max_tokens or t.answer_tokens for t in conv.turns
        ]
        assert all("ignore_eos" not in b for b in bodies)  # a real endpoint: not by default
    sessions = load_jsonl(tmp_path / "out" / "sessions.jsonl")
    assert len(sessions) == 24
    s = next(s for s in sessions if s["task_id"] == "conv-002")
    assert s["counts"]["turns_sent"] == 3 and s["counts"]["turns_aborted"] == 0
    assert s["termination"] == "completed"
    calls = load_jsonl(tmp_path / "out" / "calls.jsonl")
    assert len(calls) == sum(len(b) for b in got.values())
    c = next(c for c in calls if c["replay"]["conversation_id"] == "conv-002" and c["turn"] == 2)
    assert c["replay"]["row"] == 5
    assert c["replay"]["recorded_output_tokens"] > 0
    assert c["replay"]["output_tokens"] == c["completion_tokens"]
    # the text server never calls tools: recorded tool calls count as divergence
    assert c["replay"]["diverged"] is False
    first = next(c for c in calls if c["replay"]["conversation_id"] == "conv-002")
    assert first["replay"]["diverged"] is True


def _live_answer(dataset: Path, wrong: set[str] = frozenset()):  # type: ignore[assignment]
    """Answer like the recording (same tool names), with the server's own ids; the
    conversations in `wrong` get a different tool."""
    index = index_dataset(dataset)

    def answer(body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        cid = headers["X-Session-ID"]
        conv = index.load(cid)
        k = sum(1 for m in body["messages"] if m["role"] == "assistant")
        rec = conv.turns[k].answer or {"role": "assistant", "content": "end"}
        msg: dict[str, Any] = {"role": "assistant", "content": rec.get("content")}
        if rec.get("tool_calls"):
            msg["tool_calls"] = [
                {
                    "id": f"live-{cid}-{k}-{j}",
                    "type": "function",
                    "function": {
                        "name": "other" if cid in wrong else tc["function"]["name"],
                        "arguments": "{}",
                    },
                }
                for j, tc in enumerate(rec["tool_calls"])
            ]
        return msg

    return answer


async def test_live_history_remaps_tool_call_ids(tmp_path: Path) -> None:
    ds = write_dataset(tmp_path / "d.jsonl")
    async with RecordingServer(answer=_live_answer(ds)) as srv:
        res = await _run(_cfg(tmp_path / "out", ds, srv.base_url, history="live"))
    assert res.exit_code == 0
    bodies = srv.by_session()["conv-002"]  # parallel calls, then a user turn
    assert len(bodies) == 3
    tool_msgs = [m for m in bodies[1]["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == ["live-conv-002-0-0", "live-conv-002-0-1"]
    sent_answer = bodies[1]["messages"][2]
    assert [tc["id"] for tc in sent_answer["tool_calls"]] == [
        "live-conv-002-0-0",
        "live-conv-002-0-1",
    ]
    assert sent_answer["tool_calls"][0]["function"]["arguments"] == "{}"  # the live one
    bodies3 = srv.by_session()["conv-003"]  # two rounds of one call each
    assert [m["tool_call_id"] for m in bodies3[2]["messages"] if m["role"] == "tool"] == [
        "live-conv-003-0-0",
        "live-conv-003-1-0",
    ]
    sessions = load_jsonl(tmp_path / "out" / "sessions.jsonl")
    assert all(s["counts"]["divergences"] == 0 for s in sessions)


@pytest.mark.parametrize("on_divergence", ["continue", "stop"])
async def test_live_divergence(tmp_path: Path, on_divergence: str) -> None:
    ds = write_dataset(tmp_path / "d.jsonl")
    wrong = {"conv-002", "conv-003"}
    async with RecordingServer(answer=_live_answer(ds, wrong)) as srv:
        res = await _run(
            _cfg(tmp_path / "out", ds, srv.base_url, history="live", on_divergence=on_divergence)
        )
    assert res.exit_code == 0
    sessions = {s["task_id"]: s for s in load_jsonl(tmp_path / "out" / "sessions.jsonl")}
    s = sessions["conv-002"]
    assert s["replay"]["divergences"][0] == {
        "turn": 0,
        "row": 1,
        "recorded": ["get_weather", "get_weather"],
        "live": ["other", "other"],
    }
    got = srv.by_session()
    if on_divergence == "continue":
        assert s["termination"] == "completed" and s["counts"]["turns_sent"] == 3
        # went on with the recorded answer and results (ids consistent)
        assert got["conv-002"][1]["messages"] == _expected_requests(ds, "conv-002")[1]
        assert sessions["conv-003"]["counts"]["divergences"] == 2
    else:
        assert s["termination"] == "diverged"
        assert s["replay"]["aborted_turns"] == [1, 2]
        assert s["counts"]["turns_aborted"] == 2 and len(got["conv-002"]) == 1
    assert sessions["conv-001"]["counts"]["divergences"] == 0
    calls = load_jsonl(tmp_path / "out" / "calls.jsonl")
    div = [c for c in calls if c["replay"]["diverged"]]
    assert {c["replay"]["conversation_id"] for c in div} == wrong


async def test_salting_across_repeats(tmp_path: Path) -> None:
    ds = write_dataset(tmp_path / "d.jsonl", n=6)
    async with RecordingServer() as srv:
        res = await _run(_cfg(tmp_path / "out", ds, srv.base_url, salt=True, repeat=2))
    assert res.exit_code == 0
    systems: dict[tuple[str, int], str] = {}
    calls = load_jsonl(tmp_path / "out" / "calls.jsonl")
    assert len(calls) == len(srv.seen)
    by_cid: dict[str, list[str]] = {}
    for seen in srv.seen:
        by_cid.setdefault(str(seen.session), []).append(seen.body["messages"][0]["content"])
    for cid, contents in by_cid.items():
        assert len(set(contents)) == 2  # one system text per repeat, the same within it
        i = int(cid.split("-")[1])
        for r in (0, 1):
            # MLCommons' bytes: blake2b-16 of the pass number (from 1) and of the id
            head = hashlib.blake2b(str(r + 1).encode(), digest_size=2).hexdigest()
            tail = hashlib.blake2b(cid.encode(), digest_size=2).hexdigest()
            systems[(cid, r)] = f"[salt: {head}]\n\n{SYSTEMS[i % 3]}\n\n[salt: {tail}]"
        assert set(contents) == {systems[(cid, 0)], systems[(cid, 1)]}
    # within a pass the prefix before the conversation's salt is shared; across repeats not
    a, b = systems[("conv-000", 0)], systems[("conv-003", 0)]
    assert a.split("\n\n")[:2] == b.split("\n\n")[:2] and a != b
    assert a.split("\n")[0] != systems[("conv-000", 1)].split("\n")[0]
    assert salt(1) == "4461" and salt("conv-000") == systems[("conv-000", 0)][-5:-1]


async def test_salting_works_without_a_system_prompt(tmp_path: Path) -> None:
    rows = [r for r in conversation_rows(0)]
    for r in rows:
        r.pop("system", None)
    import orjson

    p = tmp_path / "nosys.jsonl"
    p.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    async with RecordingServer() as srv:
        res = await _run(_cfg(tmp_path / "out", p, srv.base_url, salt=True, repeat=2))
    assert res.exit_code == 0
    firsts = {seen.body["messages"][0]["content"] for seen in srv.seen}
    head = [hashlib.blake2b(str(n).encode(), digest_size=2).hexdigest() for n in (1, 2)]
    tail = hashlib.blake2b(b"conv-000", digest_size=2).hexdigest()
    # The salts alone make the system message, one text per pass.
    assert firsts == {f"[salt: {h}]\n\n[salt: {tail}]" for h in head}
    assert all(seen.body["messages"][0]["role"] == "system" for seen in srv.seen)


async def test_turn_timeout_and_failure_abort_the_rest(tmp_path: Path) -> None:
    ds = write_dataset(tmp_path / "d.jsonl", n=8)

    def answer(body: dict[str, Any], headers: dict[str, str]) -> Any:
        cid = headers["X-Session-ID"]
        n_assist = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if cid == "conv-002" and n_assist == 1:
            return None  # hang on the second turn
        if cid == "conv-006" and n_assist == 0:
            return 500
        return {"role": "assistant", "content": "ok"}

    async with RecordingServer(answer=answer) as srv:
        t0 = time.perf_counter()
        res = await _run(_cfg(tmp_path / "out", ds, srv.base_url, turn_timeout_s=0.3))
        took = time.perf_counter() - t0
    assert took < 10
    assert res.exit_code == 0
    sessions = {s["task_id"]: s for s in load_jsonl(tmp_path / "out" / "sessions.jsonl")}
    s = sessions["conv-002"]
    assert s["termination"] == "turn_timeout"
    assert s["replay"]["aborted_turns"] == [2] and s["counts"]["turns_sent"] == 2
    f = sessions["conv-006"]
    assert f["termination"] == "failed" and "http_500" in f["error"]
    assert f["replay"]["aborted_turns"] == [1, 2]
    calls = load_jsonl(tmp_path / "out" / "calls.jsonl")
    to = [c for c in calls if c["replay"]["conversation_id"] == "conv-002" and c["turn"] == 1]
    assert len(to) == 1 and to[0]["error_kind"] == "timeout_turn"
    assert 0.25 < to[0]["end_ns"] / 1e9 - to[0]["start_ns"] / 1e9 < 2


async def test_delays_scaled_and_send_lag_recorded(tmp_path: Path) -> None:
    ds = write_dataset(tmp_path / "d.jsonl", n=4)  # conv-000 waits 0.02 s before turn 1
    async with RecordingServer() as srv:
        res = await _run(_cfg(tmp_path / "out", ds, srv.base_url, delay_scale=10))
    assert res.exit_code == 0
    calls = load_jsonl(tmp_path / "out" / "calls.jsonl")
    c0 = [c for c in calls if c["replay"]["conversation_id"] == "conv-000"]
    c0.sort(key=lambda c: c["turn"])
    gap = (c0[1]["start_ns"] - c0[0]["end_ns"]) / 1e9
    assert gap >= 0.2 - 0.005
    assert c0[1]["replay"]["intended_send_ns"] == c0[0]["end_ns"] + 200_000_000
    assert 0 <= c0[1]["replay"]["send_lag_s"] < 0.2
    sessions = {s["task_id"]: s for s in load_jsonl(tmp_path / "out" / "sessions.jsonl")}
    assert sessions["conv-000"]["durations"]["delay_s"] == pytest.approx(0.2)
    # --no-delays
    async with RecordingServer() as srv:
        res = await _run(_cfg(tmp_path / "out2", ds, srv.base_url, delay_scale=0))
    sessions = {s["task_id"]: s for s in load_jsonl(tmp_path / "out2" / "sessions.jsonl")}
    assert sessions["conv-000"]["durations"]["delay_s"] == 0


async def test_concurrency_is_active_conversations(tmp_path: Path) -> None:
    ds = write_dataset(tmp_path / "d.jsonl")

    def slow(body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        return {"role": "assistant", "content": "ok"}

    async with RecordingServer(answer=slow) as srv:
        res = await _run(_cfg(tmp_path / "out", ds, srv.base_url, load={"concurrency": 3}))
    assert res.exit_code == 0
    assert srv.max_in_flight == 3  # 24 conversations, 3 at a time
    assert srv.max_per_session == 1  # one call in flight per conversation


async def test_rate_and_num_conversations(tmp_path: Path) -> None:
    ds = write_dataset(tmp_path / "d.jsonl")
    async with RecordingServer() as srv:
        t0 = time.perf_counter()
        res = await _run(
            _cfg(
                tmp_path / "out",
                ds,
                srv.base_url,
                num_conversations=10,
                load={"rate": 25.0},
                delay_scale=0,
            )
        )
        took = time.perf_counter() - t0
    assert res.exit_code == 0
    assert len(srv.by_session()) == 10
    # 10 Poisson arrivals at 25/s: ~0.4 s on average, not all at once
    starts = sorted(s["started_at"] for s in load_jsonl(tmp_path / "out" / "sessions.jsonl"))
    assert starts[-1] - starts[0] > 0.05
    assert took < 15


async def test_embedded_simulator_output_lengths_from_the_dataset(tmp_path: Path) -> None:
    ds = write_dataset(tmp_path / "d.jsonl", n=8)
    res = await _run(_cfg(tmp_path / "out", ds, None))
    assert res.exit_code == 0, res.stop_reason
    calls = load_jsonl(tmp_path / "out" / "calls.jsonl")
    assert len(calls) == sum(index_dataset(ds).span(f"conv-{i:03d}").turns for i in range(8))
    for c in calls:
        assert c["status"] == "ok"
        assert c["completion_tokens"] == c["replay"]["recorded_output_tokens"], c
        assert c["ttft_s"] is not None and c["token_chunks"] == c["completion_tokens"], c


async def test_round_trip_live_run_then_replay_of_its_trajectories(tmp_path: Path) -> None:
    """A live `run` records trajectories; replaying them sends, per conversation, as many
    calls as the live agent made, each with the messages the agent had at that point."""
    live = tmp_path / "live"
    cfg = build_config(
        data={
            "out": str(live),
            "sim": {"profile": "tiny-cpu", "speedup": 50.0},
            "workload": {"tasks": ["airline/000-003", "retail/000-002"]},
            "load": {"concurrency": 4},
            "metrics": {"enabled": False},
            "report": False,
        }
    )
    res = await _run(cfg)
    assert res.exit_code == 0, res.stop_reason
    live_calls: dict[str, int] = {}
    for c in load_jsonl(live / "calls.jsonl"):
        if c["role"] == "agent":
            live_calls[c["session_id"]] = live_calls.get(c["session_id"], 0) + 1
    trajectories = {t["session_id"]: t for t in load_jsonl(live / "trajectories.jsonl")}
    assert len(trajectories) == 7

    async with RecordingServer() as srv:
        res = await _run(_cfg(tmp_path / "replayed", live / "trajectories.jsonl", srv.base_url))
    assert res.exit_code == 0, res.stop_reason
    sent = srv.by_session()
    assert sorted(sent) == sorted(trajectories)
    for sid, traj in trajectories.items():
        bodies = sent[sid]
        assert len(bodies) == live_calls[sid], sid
        msgs = traj["messages"]
        answers = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
        for k, body in enumerate(bodies):
            upto = answers[k] if k < len(answers) else len(msgs)
            assert body["messages"] == msgs[:upto], (sid, k)
            assert body.get("tools") == (traj["tools"] or None)


async def test_tail_window_ends_when_the_first_slot_runs_dry(tmp_path: Path) -> None:
    """Two slots, four conversations: conv-000 is slow and holds one slot; the other slot
    runs the rest. The performance window ends at the first end after the last start
    (conv-003's); conv-000 finishes in the complete window only."""
    ds = write_dataset(tmp_path / "d.jsonl", n=4)

    def delay(headers: dict[str, str]) -> float:
        return 0.4 if headers.get("X-Session-ID") == "conv-000" else 0.01

    async with RecordingServer(delay=delay) as srv:
        res = await _run(
            _cfg(
                tmp_path / "out",
                ds,
                srv.base_url,
                load={"concurrency": 2},
                delay_scale=0,
            )
        )
    assert res.exit_code == 0
    sessions = {s["task_id"]: s for s in load_jsonl(tmp_path / "out" / "sessions.jsonl")}
    rp = res.summary.dump()["replay"]
    perf, full = rp["windows"]["performance"], rp["windows"]["complete"]
    t0 = min(s["start_ns"] for s in sessions.values())
    # from the monotonic clock: first start -> conv-003's end
    assert perf["duration_s"] == pytest.approx(
        (sessions["conv-003"]["end_ns"] - t0) / 1e9, abs=1e-6
    )
    last_end = max(s["end_ns"] for s in sessions.values())
    assert full["duration_s"] == pytest.approx((last_end - t0) / 1e9, abs=1e-6)
    assert perf["conversations_ended"] == 3 and full["conversations_ended"] == 4
    assert full["end"] > perf["end"] + 0.3
    n_slow = sessions["conv-000"]["counts"]["turns_sent"]
    total = sum(s["counts"]["turns_sent"] for s in sessions.values())
    assert full["calls"] == total
    assert perf["calls"] <= total - n_slow + 1  # conv-000's later calls end after the tail
    assert rp["conversations"] == 4 and rp["turns_aborted"] == 0
    assert rp["conversation_duration_s"]["count"] == 4
    assert rp["by_turn"][0]["turn"] == 0 and rp["by_turn"][0]["calls"] == 4
    assert rp["send_lag_s"]["count"] == total


async def test_a_replay_describes_itself(tmp_path: Path) -> None:
    """The report, console and run.json speak of a replay's dataset, history, passes and
    recorded answer lengths, not of tasks, trials, strategies or a user endpoint."""
    from rich.console import Console

    from agentload.report.build import build_document
    from agentload.report.document import to_markdown
    from agentload.report.table import summary_table

    ds = write_dataset(tmp_path / "d.jsonl", n=4)
    async with RecordingServer() as srv:
        cfg = _cfg(tmp_path / "out", ds, srv.base_url, repeat=2, load={"rate": 50.0})
        # What --base-url does: the user role gets the agent's endpoint too.
        cfg = cfg.model_copy(
            update={"endpoints": {**cfg.endpoints, "user": cfg.endpoints["agent"]}}
        )
        res = await _run(cfg)
    assert res.exit_code == 0
    summary = res.summary.dump() if res.summary else {}
    assert summary["run"]["sampling"]["agent"]["max_tokens"].startswith(
        "each turn's recorded answer length"
    )
    assert (
        set(summary["run"]["endpoints"]) == {"agent"} and "user" not in summary["run"]["sampling"]
    )
    rows = {r[0]: r[1] for r in _context_rows(summary)}
    assert rows["workload"] == "replay" and rows["dataset"].endswith("d.jsonl")
    assert rows["history"] == "dataset" and rows["passes"] == "2"
    assert "conversations/s" in rows["load"]
    assert not {"tasks", "trials per task", "agent / user", "user endpoint"} & set(rows)
    text = to_markdown(build_document(summary))
    assert "all built-in" not in text and "user endpoint" not in text
    console = Console(width=200, record=True)
    console.print(summary_table(summary))
    assert "conversations/s" in console.export_text()


def _context_rows(summary: dict[str, Any]) -> list[list[str]]:
    from agentload.report.context import context_rows

    return context_rows(summary["context"], summary)


async def test_a_second_replay_on_a_warm_cache_is_warned_about(tmp_path: Path) -> None:
    """The prefix-cache trap: replaying a dataset the server already holds is faster than any
    cold server; the summary, console and report say so."""
    import orjson

    from agentload.report.build import build_document
    from agentload.report.document import to_markdown
    from agentload.sim import SimConfig, SimServer

    long_system = "You are a careful support agent. " * 120  # ~1k tokens, many cache blocks
    rows = []
    for i in range(4):
        for r in conversation_rows(i):
            rows.append({**r, "system": long_system} if "system" in r else r)
    ds = tmp_path / "d.jsonl"
    ds.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    async with SimServer(SimConfig(port=0, profile="instant")) as sim:
        summaries = []
        for n in ("first", "second"):
            cfg = build_config(
                data={
                    "out": str(tmp_path / n),
                    "kind": "replay",
                    "replay": {"dataset": str(ds)},
                    "endpoints": {"agent": {"base_url": sim.base_url, "model": "agentload-sim"}},
                    "load": {"concurrency": 1},
                    "metrics": {"enabled": False},
                    "report": False,
                }
            )
            res = await _run(cfg)
            assert res.exit_code == 0
            summaries.append(res.summary.dump() if res.summary else {})
    cold, warm = (s["replay"]["warm_cache"] for s in summaries)
    assert cold is None
    assert warm is not None and warm["cached_share"] > 0.5
    text = to_markdown(build_document(summaries[1]))
    assert "prefix cache already held this dataset" in text
    assert "prefix cache already held" not in to_markdown(build_document(summaries[0]))


def test_compare_of_two_replays_speaks_of_conversations(tmp_path: Path) -> None:
    """No success rate (a replay has no reward), and the rate is conversations a minute."""
    from typer.testing import CliRunner

    from agentload.cli import app
    from agentload.report.compare import compare_dirs

    ds = write_dataset(tmp_path / "d.jsonl", n=4)
    for name in ("a", "b"):
        res = CliRunner().invoke(
            app,
            ["replay", str(ds), "--sim-profile", "instant", "--out", str(tmp_path / name),
             "--quiet", "--no-report"],
        )  # fmt: skip
        assert res.exit_code == 0, res.output
    metrics = compare_dirs(tmp_path / "a", tmp_path / "b")["metrics"]
    assert "success_rate" not in metrics and "episodes_per_min" not in metrics
    assert metrics["conversations_per_min"]["a"]["n"] == 4
