"""Recorder: flush per record, resume after a kill, torn lines, metadata, load_jsonl errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
import yaml

from agentload.client.record import CallRecord
from agentload.results import Recorder, load_jsonl


def _session(sid: str, task: str, trial: int, **kw: object) -> dict[str, object]:
    return {
        "schema": "agentload.session/1",
        "session_id": sid,
        "task_id": task,
        "trial": trial,
        "reward": 1.0,
        "termination": "user_stop",
        "warmup": False,
        **kw,
    }


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_each_record_is_readable_while_the_recorder_is_open(tmp_path: Path) -> None:
    rec = Recorder(tmp_path)
    rec.record_call(CallRecord(call_id="c1", session_id="s1", role="agent", ttft_s=0.1))
    assert _lines(tmp_path / "calls.jsonl")[0]["call_id"] == "c1"
    rec.record_episode(_session("s1", "t/1", 0), {"session_id": "s1", "messages": []})
    assert _lines(tmp_path / "sessions.jsonl")[0]["session_id"] == "s1"
    assert _lines(tmp_path / "trajectories.jsonl")[0]["session_id"] == "s1"
    rec.record_server_metrics({"t": 1.0, "running": 2})
    assert _lines(tmp_path / "server_metrics.jsonl") == [{"t": 1.0, "running": 2}]
    rec.record_call({"call_id": "c2", "session_id": None})  # plain dicts too
    assert len(_lines(tmp_path / "calls.jsonl")) == 2
    assert rec.finished_keys() == {("t/1", 0)}
    rec.close()
    with pytest.raises(ValueError, match="closed"):
        rec.record_call(CallRecord(call_id="c3"))
    # the call line is a CallRecord again
    assert CallRecord.from_dict(load_jsonl(tmp_path / "calls.jsonl")[0]).ttft_s == 0.1


def test_refuses_to_append_to_a_finished_run(tmp_path: Path) -> None:
    with Recorder(tmp_path) as rec:
        rec.record_call(CallRecord(call_id="c1"))
    with pytest.raises(FileExistsError, match="resume"):
        Recorder(tmp_path)
    Recorder(tmp_path, overwrite=True).close()
    assert (tmp_path / "calls.jsonl").read_bytes() == b""


def test_resume_drops_orphans_and_torn_lines(tmp_path: Path) -> None:
    with Recorder(tmp_path) as rec:
        for sid in ("a", "b"):
            for j in range(3):
                rec.record_call(CallRecord(call_id=f"{sid}{j}", session_id=sid))
        rec.record_call(CallRecord(call_id="free", session_id=None))
        rec.record_episode(_session("a", "t/1", 0), {"session_id": "a"})
        rec.record_episode(_session("w", "t/1", 9, warmup=True), {"session_id": "w"})
    # a kill while episode "b" was being committed: trajectory written, session line torn
    with open(tmp_path / "trajectories.jsonl", "ab") as f:
        f.write(orjson.dumps({"session_id": "b"}) + b"\n")
    with open(tmp_path / "sessions.jsonl", "ab") as f:
        f.write(b'{"session_id": "b", "task_id": "t/2", "tri')
    with open(tmp_path / "calls.jsonl", "ab") as f:
        f.write(b'{"call_id": "b3", "sess')

    # readers tolerate the torn last line
    assert [s["session_id"] for s in load_jsonl(tmp_path / "sessions.jsonl")] == ["a", "w"]

    rec = Recorder(tmp_path, resume=True)
    assert rec.finished_keys() == {("t/1", 0)}  # warmup episodes do not count as done
    assert rec.dropped_calls == 3 and rec.dropped_trajectories == 1
    assert set(rec.repaired_files) == {"sessions.jsonl", "calls.jsonl"}
    calls = _lines(tmp_path / "calls.jsonl")
    assert [c["call_id"] for c in calls] == ["a0", "a1", "a2", "free"]
    assert [t["session_id"] for t in _lines(tmp_path / "trajectories.jsonl")] == ["a", "w"]
    # the resumed run re-runs t/2 and appends after intact lines
    rec.record_call(CallRecord(call_id="b'0", session_id="b'"))
    rec.record_episode(_session("b'", "t/2", 0), {"session_id": "b'"})
    rec.close()
    sessions = _lines(tmp_path / "sessions.jsonl")
    assert [(s["task_id"], s["trial"]) for s in sessions] == [("t/1", 0), ("t/1", 9), ("t/2", 0)]
    assert len(_lines(tmp_path / "calls.jsonl")) == 5


def test_resume_keeps_a_complete_line_missing_its_newline(tmp_path: Path) -> None:
    with Recorder(tmp_path) as rec:
        rec.record_episode(_session("a", "t/1", 0))
    with open(tmp_path / "sessions.jsonl", "ab") as f:
        f.write(orjson.dumps(_session("b", "t/2", 0)))  # killed before the newline
    rec = Recorder(tmp_path, resume=True)
    assert rec.finished_keys() == {("t/1", 0), ("t/2", 0)}
    rec.record_episode(_session("c", "t/3", 0))
    rec.close()
    assert len(_lines(tmp_path / "sessions.jsonl")) == 3


def test_load_jsonl_skips_bad_lines_naming_file_and_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A damaged line costs that line only: the records around it are kept.
    p = tmp_path / "calls.jsonl"
    p.write_bytes(b'{"a": 1}\n{"a": 2\n{"a": 3}\n')
    assert load_jsonl(p) == [{"a": 1}, {"a": 3}]
    assert "calls.jsonl:2: skipping a line: invalid JSON" in caplog.text
    caplog.clear()
    p.write_bytes(b'{"a": 1}\n[1, 2]\n{"a": 3}\n')
    assert load_jsonl(p) == [{"a": 1}, {"a": 3}]
    assert "calls.jsonl:2: skipping a line: expected a JSON object" in caplog.text
    p.write_bytes(b'{"a": 1}\n\n{"a": 3}\n{"a": ')
    assert load_jsonl(p) == [{"a": 1}, {"a": 3}]
    assert load_jsonl(tmp_path / "missing.jsonl") == []


def test_config_is_redacted_and_meta_merged(tmp_path: Path) -> None:
    with Recorder(tmp_path) as rec:
        rec.write_config(
            {
                "endpoints": {
                    "agent": {
                        "base_url": "http://x",
                        "api_key": "sk-secret",
                        "api_key_env": "OPENAI_API_KEY",
                        "headers": {"Authorization": "Bearer sk-secret"},
                    }
                },
                "slo": {"ttft_p90": 2.0},
            }
        )
        rec.write_meta({"run_id": "r1", "status": "running", "seed": 3})
    text = (tmp_path / "config.yaml").read_text()
    assert "sk-secret" not in text
    cfg = yaml.safe_load(text)
    assert cfg["endpoints"]["agent"]["api_key_env"] == "OPENAI_API_KEY"
    assert cfg["endpoints"]["agent"]["api_key"] == "<redacted>"
    meta = orjson.loads((tmp_path / "run.json").read_bytes())
    assert meta["resume_count"] == 0 and meta["agentload_version"] and meta["hostname"]

    with Recorder(tmp_path, resume=True) as rec:
        rec.write_meta({"status": "completed"})
    meta = orjson.loads((tmp_path / "run.json").read_bytes())
    assert meta["resume_count"] == 1
    assert meta["run_id"] == "r1" and meta["status"] == "completed"


_WRITER = """
import sys
from agentload.client.record import CallRecord
from agentload.results import Recorder
rec = Recorder(sys.argv[1], resume=True)
done = rec.finished_keys()
i = 0
while True:
    task = f"t/{i}"
    if (task, 0) not in done:
        sid = f"{task}-{sys.argv[2]}"
        for j in range(5):
            rec.record_call(CallRecord(call_id=f"{sid}-{j}", session_id=sid, turn=j,
                                       error_message="x" * 2000))
        rec.record_episode({"session_id": sid, "task_id": task, "trial": 0, "reward": 1.0},
                           {"session_id": sid, "messages": ["y" * 5000]})
    i += 1
    if i >= int(sys.argv[3]):
        break
"""


def test_sigkill_then_resume_has_no_duplicates_or_gaps(tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(out), "1", "10000000"], env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        p = out / "sessions.jsonl"
        if p.exists() and p.stat().st_size > 20_000:
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = len(load_jsonl(out / "sessions.jsonl"))
    assert killed_at > 0
    target = killed_at + 50
    subprocess.run(
        [sys.executable, "-c", _WRITER, str(out), "2", str(target)], env=env, check=True, timeout=60
    )
    sessions = load_jsonl(out / "sessions.jsonl")
    keys = [s["task_id"] for s in sessions]
    assert sorted(keys) == sorted(f"t/{i}" for i in range(target))  # once each, none missing
    sids = {s["session_id"] for s in sessions}
    calls = load_jsonl(out / "calls.jsonl")
    assert {c["session_id"] for c in calls} == sids
    assert len(calls) == 5 * target
    trajectories = load_jsonl(out / "trajectories.jsonl")
    assert sorted(t["session_id"] for t in trajectories) == sorted(sids)
