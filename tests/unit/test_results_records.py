"""Typed, versioned records: round trips, versions, fields named, old files, kind blocks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from agentload.client.record import CallRecord
from agentload.report.redo import rereport
from agentload.results import Recorder
from agentload.results.jsonl import ResultsError, read_jsonl
from agentload.results.records import (
    SESSION_VERSION,
    SUMMARY_VERSION,
    TRAJECTORY_VERSION,
    SessionRecord,
    Summary,
    TrajectoryRecord,
    load_summary,
    parse_session,
    parse_trajectory,
)
from agentload.results.summary import summarize, write_summary
from agentload.results.validate import Integrity, clean_sessions
from agentload.workloads.dataset import DatasetError, index_dataset

MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "policy"},
    {"role": "user", "content": "cancel order 7"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "cancel", "arguments": '{"order": 7}'},
            }
        ],
        "reasoning_content": "the user wants order 7 cancelled",
    },
    {"role": "tool", "tool_call_id": "call_1", "content": '{"ok": true}'},
    {"role": "assistant", "content": "Done."},
]


def _session(sid: str, trial: int = 0, **kw: Any) -> dict[str, Any]:
    return {
        "schema": "agentload.session/1",
        "session_id": sid,
        "domain": "retail",
        "task_id": "retail/1",
        "trial": trial,
        "reward": 1.0,
        "reward_breakdown": {"db_match": True, "outputs_ok": True, "missing_outputs": []},
        "termination": "user_stop",
        "error": None,
        "counts": {"agent_calls": 2, "user_calls": 1, "tool_calls": 1},
        "durations": {"total_s": 2.0, "llm_s": 1.5, "tool_s": 0.1, "user_s": 0.4},
        "started_at": 1_700_000_000.0 + trial,
        "start_ns": 10**9 * (trial + 1),
        "end_ns": 10**9 * (trial + 3),
        "category": "cancel",  # a field the model does not declare: kept as it is
        **kw,
    }


def _trajectory(sid: str) -> dict[str, Any]:
    return {
        "schema": "agentload.trajectory/1",
        "session_id": sid,
        "domain": "retail",
        "task_id": "retail/1",
        "trial": 0,
        "seed": 3,
        "messages": MESSAGES,
        "tools": [{"type": "function", "function": {"name": "cancel", "parameters": {}}}],
        "reward": 1.0,
        "termination": "user_stop",
        "grade": {"reward": 1.0},
    }


def _call(sid: str, i: int, **kw: Any) -> CallRecord:
    return CallRecord(
        call_id=f"{sid}-c{i}",
        session_id=sid,
        role="agent",
        turn=i,
        started_at=1_700_000_000.0 + i,
        start_ns=10**9 * (i + 1),
        end_ns=10**9 * (i + 1) + 5 * 10**8,
        total_s=0.5,
        ttft_s=0.1,
        e2e_s=0.5,
        prompt_tokens=100,
        completion_tokens=10,
        **kw,
    )


def _write_lines(path: Path, objs: list[Any]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(o) + b"\n" for o in objs))
    return path


# ---- round trips ---------------------------------------------------------------------------


def test_session_round_trip_keeps_every_field_and_types_them() -> None:
    raw = _session("s1", seed=4, kind="external", agent_framework="mine")
    rec = parse_session(raw)
    assert rec.dump() == raw  # nothing added, nothing lost (extras included)
    assert rec.durations is not None and rec.durations.llm_s == 1.5
    assert rec.key == ("retail/1", 0)
    assert rec.count("agent_calls") == 2 and rec.count("absent") == 0
    # `category` is declared (an episode's writer writes it); the kind's own field is kept.
    assert rec.category == "cancel"
    assert rec.kind == "external" and rec.model_extra == {"agent_framework": "mine"}


def test_trajectory_round_trip_types_messages_and_tool_calls() -> None:
    raw = _trajectory("s1")
    rec = parse_trajectory(raw)
    assert rec.dump() == raw
    call = rec.messages[2].tool_calls[0]  # type: ignore[index]
    assert call.function is not None and call.function.name == "cancel"
    assert rec.messages[3].tool_call_id == "call_1"
    assert rec.messages[2].model_extra == {"reasoning_content": "the user wants order 7 cancelled"}


def test_recorder_stamps_versions_and_lines_read_back_as_models(tmp_path: Path) -> None:
    with Recorder(tmp_path) as rec:
        rec.record_episode(_session("s1"), _trajectory("s1"))
        rec.record_episode(SessionRecord.model_validate(_session("s2", 1)))
    sessions = read_jsonl(tmp_path / "sessions.jsonl").records
    assert [s["schema_version"] for s in sessions] == [SESSION_VERSION] * 2
    assert list(sessions[0])[:2] == ["schema", "schema_version"]  # first, as `schema` was
    traj = read_jsonl(tmp_path / "trajectories.jsonl").records[0]
    assert traj["schema_version"] == TRAJECTORY_VERSION
    assert parse_trajectory(traj).messages[-1].content == "Done."
    typed = clean_sessions(read_jsonl(tmp_path / "sessions.jsonl"), Integrity())
    assert [s.session_id for s in typed] == ["s1", "s2"]
    assert typed[1].started_at == 1_700_000_001.0


def _episode_run(out: Path) -> None:
    with Recorder(out) as rec:
        for trial in range(2):
            sid = f"s{trial}"
            for i in range(2):
                rec.record_call(_call(sid, i))
            rec.record_episode(_session(sid, trial), _trajectory(sid))


def test_summary_round_trip_through_summary_json(tmp_path: Path) -> None:
    _episode_run(tmp_path)
    summary = summarize(tmp_path)
    path = write_summary(tmp_path, summary)
    loaded = load_summary(path)
    assert loaded.schema_version == SUMMARY_VERSION
    assert loaded.episodes is not None and loaded.episodes.episodes == 2
    assert loaded.episodes.pass_hat_k == {"1": 1.0, "2": 1.0}
    assert loaded.calls.all.calls == 4 and loaded.calls.by_role["agent"].ok == 4
    assert loaded.calls.all.ttft_s.stat("p50") == pytest.approx(0.1)
    assert loaded.counts.sessions == 2
    # Same JSON as the model it came from (numbers equal; keys and nesting identical).
    assert json.loads(path.read_text()) == json.loads(orjson.dumps(summary.dump()))
    assert loaded.dump() == json.loads(path.read_text())


# ---- versions ------------------------------------------------------------------------------


def test_a_newer_session_version_is_refused_with_file_line(tmp_path: Path) -> None:
    path = _write_lines(
        tmp_path / "sessions.jsonl",
        [_session("s1"), {**_session("s2", 1), "schema_version": SESSION_VERSION + 1}],
    )
    integ = Integrity()
    kept = clean_sessions(read_jsonl(path), integ)
    assert [s.session_id for s in kept] == ["s1"]
    fi = integ.of("sessions.jsonl")
    assert fi.skipped == 1
    assert fi.examples == [
        f"{path}:2: record skipped: agentload.session version 2 is newer than this "
        "agentload reads (up to 1); upgrade agentload to read it"
    ]
    with pytest.raises(ResultsError, match=r"^s\.jsonl:7: agentload.session version 2"):
        parse_session({"schema_version": 2}, "s.jsonl:7")
    with pytest.raises(ResultsError, match=r"unsupported schema .agentload\.trajectory/x."):
        parse_trajectory({"schema": "agentload.trajectory/x"})


def test_a_newer_summary_is_refused_naming_its_line(tmp_path: Path) -> None:
    _episode_run(tmp_path)
    summary = summarize(tmp_path).model_copy(update={"schema_version": SUMMARY_VERSION + 1})
    path = tmp_path / "summary.json"
    path.write_bytes(orjson.dumps(summary.dump(), option=orjson.OPT_INDENT_2))
    with pytest.raises(ResultsError) as e:
        load_summary(path)
    assert str(e.value) == (
        f"{path}:3: agentload.summary version 2 is newer than this agentload reads (up to 1); "
        "upgrade agentload to read it"
    )


def test_replaying_a_newer_trajectory_file_names_file_line(tmp_path: Path) -> None:
    path = _write_lines(
        tmp_path / "trajectories.jsonl",
        [_trajectory("s1"), {**_trajectory("s2"), "schema_version": 9}],
    )
    with pytest.raises(
        DatasetError, match=r"^trajectories\.jsonl:2: field .schema_version.: .*version 9 is newer"
    ):
        index_dataset(path)


# ---- damaged fields ------------------------------------------------------------------------


def test_a_corrupted_session_field_is_named_and_the_record_kept(tmp_path: Path) -> None:
    bad = _session("s2", 1, counts=[1], durations={"total_s": 1.0, "llm_s": "slow"})
    bad["replay"] = {"aborted_turns": "none"}
    path = _write_lines(tmp_path / "sessions.jsonl", [_session("s1"), bad])
    integ = Integrity()
    kept = clean_sessions(read_jsonl(path), integ)
    assert [s.session_id for s in kept] == ["s1", "s2"]
    assert kept[1].counts is None and kept[1].replay is None
    assert kept[1].durations is not None and kept[1].durations.total_s == 1.0
    assert kept[1].durations.llm_s is None
    fi = integ.of("sessions.jsonl")
    assert fi.flagged == 1
    (example,) = fi.examples
    assert example.startswith(f"{path}:2: odd values set to null: ")
    for named in ("llm_s='slow'", "counts=[1]", "replay.aborted_turns='none'"):
        assert named in example


def test_a_corrupted_summary_field_is_named_with_its_line(tmp_path: Path) -> None:
    _episode_run(tmp_path)
    path = write_summary(tmp_path, summarize(tmp_path))
    data = json.loads(path.read_text())
    data["counts"]["sessions"] = "many"
    path.write_text(json.dumps(data, indent=2))
    line = next(
        i for i, t in enumerate(path.read_text().splitlines(), 1) if '"sessions": "many"' in t
    )
    with pytest.raises(ResultsError) as e:
        load_summary(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}:")
    assert "counts.sessions='many'" in msg
    # the line named is one holding a "sessions" key (the first one in the file)
    named = int(msg.split(":")[1])
    assert named <= line and '"sessions"' in path.read_text().splitlines()[named - 1]


def test_a_summary_writer_mistake_fails_at_writing(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match=r"summary: counts.calls='x'"):
        write_summary(tmp_path, {"counts": {"calls": "x"}})
    assert not (tmp_path / "summary.json").exists()


# ---- old files -----------------------------------------------------------------------------


def test_lines_without_schema_version_are_read_as_version_1(tmp_path: Path) -> None:
    no_schema = {k: v for k, v in _session("s2", 1).items() if k != "schema"}
    path = _write_lines(tmp_path / "sessions.jsonl", [_session("s1"), no_schema])
    integ = Integrity()
    kept = clean_sessions(read_jsonl(path), integ)
    assert [s.session_id for s in kept] == ["s1", "s2"]
    assert integ.to_dict()["skipped_records"] == 0
    assert kept[0].schema_version is None  # read as it was, not rewritten
    traj = {k: v for k, v in _trajectory("s1").items() if k != "schema"}
    assert parse_trajectory(traj).session_id == "s1"
    old = {"schema": "agentload.summary/1", "counts": {"calls": 3}}
    p = tmp_path / "summary.json"
    p.write_bytes(orjson.dumps(old))
    assert load_summary(p).counts.calls == 3


# ---- blocks per workload kind --------------------------------------------------------------


def _replay_run(out: Path) -> None:
    with Recorder(out) as rec:
        for n in range(2):
            sid = f"r{n}"
            for i in range(2):
                rec.record_call(_call(sid, i, replay={"conversation_id": f"c{n}"}))
            rec.record_episode(
                {
                    "schema": "agentload.session/1",
                    "kind": "replay",
                    "session_id": sid,
                    "task_id": f"c{n}",
                    "conversation_id": f"c{n}",
                    "trial": 0,
                    "termination": "done",
                    "counts": {"agent_calls": 2, "turns": 2, "turns_sent": 2},
                    "durations": {"total_s": 1.0, "llm_s": 1.0, "delay_s": 0.0},
                    "started_at": 1_700_000_000.0,
                    "start_ns": 10**9,
                    "end_ns": 2 * 10**9,
                    "replay": {"aborted_turns": [], "divergences": [], "send_lag_s": {}},
                },
                {"kind": "replay", "session_id": sid, "messages": MESSAGES[1:2]},
            )


def test_a_replay_summary_has_no_episodes_block(tmp_path: Path) -> None:
    _replay_run(tmp_path)
    summary = summarize(tmp_path)
    assert "episodes" not in summary.dump()  # absent, not null
    assert summary.replay is not None and summary.replay.conversations == 2
    path = write_summary(tmp_path, summary)
    assert "episodes" not in json.loads(path.read_text())
    assert load_summary(path).episodes is None
    # An old summary.json of the run held an episodes block: a re-report does not keep it.
    stale = json.loads(path.read_text()) | {"episodes": {"episodes": 2}, "client": {"x": 1}}
    path.write_text(json.dumps(stale))
    redone = rereport(tmp_path)[0].dump()
    assert "episodes" not in redone and redone["client"] == {"x": 1}


def test_an_episode_summary_keeps_its_episodes_block_and_no_replay(tmp_path: Path) -> None:
    _episode_run(tmp_path)
    summary = summarize(tmp_path)
    assert summary.episodes is not None and summary.episodes.successes == 2
    assert "replay" not in summary.dump()
    assert Summary.model_validate(summary.dump()).episodes == summary.episodes
    assert TrajectoryRecord.model_validate(_trajectory("s1")).reward == 1.0


def test_report_and_console_read_the_typed_replay_block(tmp_path: Path) -> None:
    from rich.console import Console

    from agentload.report import summary_table
    from agentload.report.build import build_document
    from agentload.report.document import to_markdown

    _replay_run(tmp_path)
    summary = summarize(tmp_path)
    md = to_markdown(build_document(summary))
    assert "## Replay" in md and "### Windows" in md and "### By turn" in md
    assert "## Episodes" not in md
    assert "| conversations | 2 |" in md
    console = Console(record=True, width=200)
    console.print(summary_table(summary))
    text = console.export_text()
    assert "agentload: replay" in text and "agentload: episodes" not in text


def test_warmup_sessions_keep_their_negative_trials_and_others_do_not(tmp_path: Path) -> None:
    # Warmup episodes count their trials down from -1 so they never collide with measured
    # (task, trial) keys; a negative trial on a measured session is a damaged line.
    lines = [_session("w1", -1, warmup=True), _session("m1", 0), _session("bad", -2)]
    path = _write_lines(tmp_path / "sessions.jsonl", lines)
    integ = Integrity()
    kept = clean_sessions(read_jsonl(path), integ)
    assert [(s.session_id, s.trial, s.warmup) for s in kept] == [("w1", -1, True), ("m1", 0, None)]
    fi = integ.of("sessions.jsonl")
    assert fi.skipped == 1
    assert "trial is -2 (only warmup episodes have negative trials)" in fi.examples[0]
