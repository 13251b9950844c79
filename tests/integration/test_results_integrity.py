"""Odd records, duplicates, clock steps, resume without loss, combined client figures, and
a full disk."""

from __future__ import annotations

import errno
import math
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from test_results_helpers import T0, WINDOW_S, build_run

from agentload import stats
from agentload.results import Recorder, summarize
from agentload.results.client import (
    combine_client,
    describe_histogram,
    lag_histogram,
    merge_histograms,
)
from agentload.results.jsonl import read_jsonl
from agentload.results.resume import DROPPED_DIR

AGENTLOAD = str(Path(sys.executable).parent / "agentload")


def _lines(p: Path) -> list[bytes]:
    return [ln for ln in p.read_bytes().splitlines() if ln.strip()]


# ---- the reader ----------------------------------------------------------------------------


def test_two_objects_on_one_line_are_one_bad_line(tmp_path: Path) -> None:
    p = tmp_path / "sessions.jsonl"
    p.write_bytes(b'{"a": 1}\n{"a": 2},{"a": 3}\n{"a": 4}\n')
    r = read_jsonl(p)
    assert r.records == [{"a": 1}, {"a": 4}]
    assert r.lines == [1, 3]
    assert [line for line, _ in r.bad] == [2]
    # the whole file on one line: still one bad line, not two records
    p.write_bytes(b'{"a": 1},{"a": 2}\n')
    r = read_jsonl(p)
    assert r.records == [] and len(r.bad) == 1


def test_garbage_mid_file_keeps_the_rest(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    p = tmp_path / "calls.jsonl"
    p.write_bytes(b'{"a": 1}\n\xff\xfe\x00garbage\n{"a": 3}\n{"a": 4}\n')
    r = read_jsonl(p)
    assert r.records == [{"a": 1}, {"a": 3}, {"a": 4}] and r.lines == [1, 3, 4]
    assert f"{p}:2: skipping a line" in caplog.text


# ---- odd records in a summary ----------------------------------------------------------------


def _odd_run(tmp_path: Path) -> Path:
    out = build_run(tmp_path / "run")
    calls = _lines(out / "calls.jsonl")
    sessions = _lines(out / "sessions.jsonl")
    odd = [
        {"prompt_tokens": "many"},
        {"ttft_s": None, "e2e_s": None, "completion_tokens": None},
        {"ttft_s": -1.0, "e2e_s": "NaN"},
        {"itl": "fast", "turn": "first"},
    ]
    for i, change in enumerate(odd):
        rec = orjson.loads(calls[i])
        rec.update(change)
        calls[i] = orjson.dumps(rec)
    calls.insert(5, calls[5])  # an exact duplicate
    stripped = orjson.loads(calls[8])
    calls[8] = orjson.dumps({"call_id": stripped["call_id"], "session_id": None})  # fields gone
    (out / "calls.jsonl").write_bytes(b"\n".join(calls) + b"\n")
    rec = orjson.loads(sessions[1])
    rec["reward"] = "high"
    sessions[1] = orjson.dumps(rec)
    sessions.append(sessions[2])  # the same session twice
    (out / "sessions.jsonl").write_bytes(b"\n".join(sessions) + b"\n")
    return out


def test_odd_records_are_flagged_not_fatal(tmp_path: Path) -> None:
    clean = summarize(build_run(tmp_path / "clean")).dump()
    out = _odd_run(tmp_path)
    s = summarize(out).dump()
    integ = s["integrity"]
    calls, sessions = integ["files"]["calls.jsonl"], integ["files"]["sessions.jsonl"]
    assert calls["flagged_records"] == 3  # "many", negative/NaN, itl+turn (nulls are fine)
    assert calls["duplicates"] == 1 and sessions["duplicates"] == 1
    assert sessions["flagged_records"] == 1
    assert integ["duplicates"] == 2 and integ["bad_lines"] == 0
    assert any(
        "calls.jsonl:1: odd values set to null: prompt_tokens='many'" in e
        for e in calls["examples"]
    )
    # duplicates counted once: the same numbers of calls and sessions as the clean folder
    # (the stripped call lost its session and counts as an episode-less call)
    assert s["counts"]["sessions"] == clean["counts"]["sessions"]
    assert s["counts"]["calls"] == clean["counts"]["calls"]
    eps = s["episodes"]
    assert eps["episodes"] == clean["episodes"]["episodes"]
    # the session whose reward is unreadable counts as not successful, not as a crash
    assert eps["successes"] <= clean["episodes"]["successes"]
    assert orjson.dumps(s, option=orjson.OPT_SERIALIZE_NUMPY)  # JSON-safe


def test_report_cli_on_odd_records(tmp_path: Path) -> None:
    out = _odd_run(tmp_path)
    r = subprocess.run(
        [AGENTLOAD, "report", str(out), "--quiet"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert "calls.jsonl:1: odd values set to null" in r.stderr
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert summary["integrity"]["flagged_records"] == 4


# ---- time -----------------------------------------------------------------------------------


@pytest.mark.parametrize("jump_s", [3600.0, -3600.0])
def test_wall_clock_step_does_not_change_rates(tmp_path: Path, jump_s: float) -> None:
    clean = summarize(build_run(tmp_path / "clean")).dump()
    out = build_run(tmp_path / "stepped")
    # The wall clock jumps by an hour half-way through: started_at moves, the *_ns do not.
    for name in ("sessions.jsonl", "calls.jsonl"):
        lines = []
        for line in _lines(out / name):
            rec = orjson.loads(line)
            if (rec.get("started_at") or 0) >= T0 + 25:
                rec["started_at"] += jump_s
            lines.append(orjson.dumps(rec))
        (out / name).write_bytes(b"\n".join(lines) + b"\n")
    s = summarize(out).dump()
    assert s["window"]["duration_s"] == pytest.approx(WINDOW_S)
    assert s["window"]["active_s"] == pytest.approx(WINDOW_S)
    assert s["window"]["clock"] == "monotonic"
    assert s["window"]["wall_clock_step_s"] == pytest.approx(abs(jump_s))
    assert s["window"]["start"] == T0
    for path in (
        ("episodes", "episodes_per_min"),
        ("calls", "all", "throughput", "calls_per_s"),
        ("calls", "all", "throughput", "output_tokens_per_s"),
    ):
        a: Any = s
        b: Any = clean
        for k in path:
            a, b = a[k], b[k]
        assert a == pytest.approx(b), path
    assert clean["window"]["wall_clock_step_s"] == 0.0


def test_window_spans_resume_attempts(tmp_path: Path) -> None:
    # Two attempts: each monotonic clock has its own origin; the downtime between them comes
    # from the wall clock.
    def session(i: int, attempt: int, wall: float, ns0: int) -> dict[str, Any]:
        return {
            "session_id": f"s{i}",
            "task_id": f"t/{i}",
            "trial": 0,
            "reward": 1.0,
            "attempt": attempt,
            "started_at": wall,
            "start_ns": ns0,
            "end_ns": ns0 + 10_000_000_000,
            "durations": {"total_s": 10.0},
        }

    with Recorder(tmp_path) as rec:
        rec.record_episode(session(0, 0, T0, 5_000_000_000))
        rec.record_episode(session(1, 0, T0 + 5, 10_000_000_000))  # ends at T0 + 15
        rec.record_episode(session(2, 1, T0 + 100, 7))  # another process: origin near 0
    s = summarize(tmp_path).dump()
    assert s["window"]["duration_s"] == pytest.approx(110.0)
    assert s["window"]["active_s"] == pytest.approx(25.0)
    # Rates are over the time the run ran (15 s, then 10 s), not the 85 s it was stopped.
    assert s["window"]["running_s"] == pytest.approx(25.0)
    assert s["episodes"]["episodes_per_min"] == pytest.approx(3 / (25.0 / 60))


# ---- resume never destroys data --------------------------------------------------------------


def _session(sid: str, task: str, trial: int) -> dict[str, Any]:
    return {"session_id": sid, "task_id": task, "trial": trial, "reward": 1.0}


def _call(cid: str, sid: str | None) -> dict[str, Any]:
    return {"call_id": cid, "session_id": sid, "status": "ok", "role": "agent"}


def _trajectory(sid: str, task: str, trial: int) -> dict[str, Any]:
    return {
        "session_id": sid,
        "task_id": task,
        "trial": trial,
        "reward": 1.0,
        "termination": "user_stop",
        "domain": "t",
        "messages": [],
    }


def test_resume_without_sessions_file_rebuilds_it(tmp_path: Path) -> None:
    with Recorder(tmp_path) as rec:
        for i in range(3):
            rec.record_call(
                {
                    **_call(f"c{i}", f"s{i}"),
                    "end_ns": 10**10 + i,
                    "total_s": 1.0,
                    "started_at": T0 + i,
                }
            )
            rec.record_episode(_session(f"s{i}", f"t/{i}", 0), _trajectory(f"s{i}", f"t/{i}", 0))
        rec.record_call(_call("c9", "s9"))  # an episode in flight, no trajectory
    (tmp_path / "sessions.jsonl").unlink()
    rec = Recorder(tmp_path, resume=True)
    rec.close()
    assert rec.rebuilt_sessions == 3
    assert rec.finished_keys() == {("t/0", 0), ("t/1", 0), ("t/2", 0)}
    sessions = read_jsonl(tmp_path / "sessions.jsonl").records
    assert [s["rebuilt_from"] for s in sessions] == ["trajectories.jsonl"] * 3
    assert sessions[0]["start_ns"] == 10**10 - 10**9 and sessions[0]["started_at"] == T0
    # the calls of finished episodes stay; the in-flight one is set aside, not deleted
    assert len(_lines(tmp_path / "calls.jsonl")) == 3
    assert len(_lines(tmp_path / DROPPED_DIR / "calls.jsonl")) == 1


def test_resume_refuses_when_nothing_can_rebuild_sessions(tmp_path: Path) -> None:
    from agentload.results.jsonl import ResultsError

    with Recorder(tmp_path) as rec:
        rec.record_call(_call("c0", "s0"))
        rec.record_episode(_session("s0", "t/0", 0))
    (tmp_path / "sessions.jsonl").unlink()
    (tmp_path / "trajectories.jsonl").unlink()
    before = (tmp_path / "calls.jsonl").read_bytes()
    with pytest.raises(ResultsError, match=r"sessions\.jsonl: missing, and no trajectories"):
        Recorder(tmp_path, resume=True)
    assert (tmp_path / "calls.jsonl").read_bytes() == before


def test_resume_sets_aside_orphans_and_bad_lines_byte_for_byte(tmp_path: Path) -> None:
    with Recorder(tmp_path) as rec:
        rec.record_call(_call("c0", "s0"))
        rec.record_episode(_session("s0", "t/0", 0))
        rec.record_call(_call("c1", "s1"))  # unfinished
        rec.record_call(_call("c2", None))  # no episode: kept
    path = tmp_path / "calls.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines.insert(1, b'{"call_id": "torn", "sess\n')
    path.write_bytes(b"".join(lines) + b'{"call_id": "c3"')  # and a torn tail
    before = path.read_bytes()
    rec = Recorder(tmp_path, resume=True)
    rec.close()
    kept = path.read_bytes()
    aside = (tmp_path / DROPPED_DIR / "calls.jsonl").read_bytes()
    assert [orjson.loads(x)["call_id"] for x in kept.splitlines()] == ["c0", "c2"]
    assert aside.splitlines() == [
        b'{"call_id": "torn", "sess',
        lines[2].rstrip(b"\n"),
        b'{"call_id": "c3"',
    ]
    assert sorted(kept.splitlines() + aside.splitlines()) == sorted(before.splitlines())
    assert rec.dropped_calls == 1 and rec.set_aside == {"calls.jsonl": 3}


# ---- client figures across attempts ----------------------------------------------------------


def test_lag_histogram_percentiles_within_two_percent() -> None:
    rng = np.random.default_rng(1)
    a = rng.lognormal(-7, 1.0, 20_000)
    b = np.concatenate([rng.lognormal(-5, 0.5, 5_000), np.zeros(50)])
    h = merge_histograms(lag_histogram(a), lag_histogram(b))
    d = describe_histogram(h)
    both = np.concatenate([a, b])
    assert d["count"] == both.size
    assert d["mean"] == pytest.approx(both.mean())
    assert d["std"] == pytest.approx(both.std(ddof=1), rel=1e-6)
    assert d["max"] == both.max() and d["min"] == 0.0
    for p in (50, 90, 99, 99.9):
        key = stats.pct_key(p)
        assert d[key] == pytest.approx(np.percentile(both, p), rel=0.02), p
    assert describe_histogram(lag_histogram([]))["p99"] is None


def test_resume_combines_client_figures(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    first = rng.exponential(0.001, 3000)
    second = rng.exponential(0.050, 1000)  # a much laggier second attempt

    def block(samples: np.ndarray, attempt: int) -> dict[str, Any]:
        h = lag_histogram(samples)
        return {
            "resume_attempt": attempt,
            "stop_reason": "completed",
            "elapsed_s": 10.0,
            "cpu_s": 2.0 + attempt,
            "episodes_started": 5,
            "episodes_finished": 5,
            "episodes_cancelled": 0,
            "max_active": 3 + attempt,
            "event_loop_lag_s": {**describe_histogram(h), "interval_s": 0.02},
            "event_loop_lag_hist": h,
            "sched_delay_s": {"count": 5},
        }

    with Recorder(tmp_path) as rec:
        for i, d in enumerate([0.1, 0.2, 0.3, 0.4]):
            rec.record_episode({**_session(f"s{i}", f"t/{i}", 0), "sched_delay_s": d})
    one = combine_client(tmp_path, block(first, 0), resume=False)
    (tmp_path / "summary.json").write_bytes(orjson.dumps({"client": one}))
    both = combine_client(tmp_path, block(second, 1), resume=True)
    allv = np.concatenate([first, second])
    lag = both["event_loop_lag_s"]
    assert lag["count"] == 4000
    assert lag["mean"] == pytest.approx(allv.mean())
    assert lag["p90"] == pytest.approx(np.percentile(allv, 90), rel=0.02)
    assert both["episodes_finished"] == 10 and both["elapsed_s"] == 20.0
    assert both["cpu_s"] == 5.0  # 2 + 3: the CPU share covers both attempts
    assert both["max_active"] == 4
    assert [a["resume_attempt"] for a in both["attempts"]] == [0, 1]
    assert both["attempts_without_figures"] == 0
    # scheduling delay recomputed from every recorded episode
    assert both["sched_delay_s"]["count"] == 4
    assert both["sched_delay_s"]["mean"] == pytest.approx(0.25)
    # an attempt killed before its summary leaves a gap that is said, not hidden
    (tmp_path / "summary.json").write_bytes(orjson.dumps({"client": both}))
    third = combine_client(tmp_path, block(first, 3), resume=True)
    assert third["attempts_without_figures"] == 1


# ---- a full disk ----------------------------------------------------------------------------


class _FullDisk:
    def write(self, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self) -> None:
        pass

    def close(self) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")


def test_enospc_is_reported_once(tmp_path: Path) -> None:
    errors: list[Exception] = []
    rec = Recorder(tmp_path)
    rec.on_write_error = errors.append
    rec.record_call(_call("c0", None))
    rec._files["calls.jsonl"].close()
    rec._files["calls.jsonl"] = _FullDisk()  # type: ignore[assignment]
    for i in range(5):
        rec.record_call(_call(f"c{i + 1}", None))  # no exception into the callers
    rec.close()  # nor from the final flush
    assert len(errors) == 1
    msg = str(errors[0])
    assert "calls.jsonl: No space left on device" in msg and "\n" not in msg
    assert rec.write_error is errors[0]
    assert len(_lines(tmp_path / "calls.jsonl")) == 1


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Any:
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(mnt)], capture_output=True
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_full_disk_run_ends_with_one_line(tiny_fs: Path) -> None:
    out = tiny_fs / "run"
    if shutil.disk_usage(tiny_fs).total > 1 << 20:
        pytest.skip("tmpfs size option ignored")
    r = subprocess.run(
        [
            AGENTLOAD,
            "run",
            "--out",
            str(out),
            "--tasks",
            "airline/000-019",
            "--trials",
            "3",
            "--concurrency",
            "4",
            "--sim-speedup",
            "50",
            "--quiet",
            "--progress",
            "off",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert r.returncode == 1, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in r.stderr
    # one error line (a warning may say that episodes in flight were cancelled)
    errors = [ln for ln in lines if "error" in ln]
    assert len(errors) == 1 and len(lines) <= 2, r.stderr
    assert "No space left on device" in errors[0] and "--resume" in errors[0]
    assert math.isfinite(len(_lines(out / "calls.jsonl")))


def test_overwrite_replaces_what_resume_set_aside(tmp_path: Path) -> None:
    with Recorder(tmp_path) as rec:
        rec.record_call(_call("c1", "s1"))  # an unfinished episode's call
    Recorder(tmp_path, resume=True).close()
    assert (tmp_path / DROPPED_DIR / "calls.jsonl").exists()
    Recorder(tmp_path, overwrite=True).close()
    assert not (tmp_path / DROPPED_DIR).exists()
    assert (tmp_path / "calls.jsonl").read_bytes() == b""
