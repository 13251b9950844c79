"""One writer per results folder: real processes, real flock, the embedded simulator."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from agentload.results.jsonl import load_jsonl
from agentload.results.lock import LOCK_FILE, FolderLocked, ResultsLock, read_holder

AGENTLOAD = str(Path(sys.executable).parent / "agentload")

RUN_ARGS = [
    "--tasks",
    "airline/000-009",
    "--trials",
    "2",
    "--concurrency",
    "2",
    "--sim-speedup",
    "4",
    "--metrics-interval",
    "0.5",
    "--no-report",
]

HOLDER = textwrap.dedent(
    """
    import sys, time
    from agentload.results.lock import ResultsLock
    lock = ResultsLock(sys.argv[1], purpose="test").acquire()
    print("held", flush=True)
    time.sleep(60)
    """
)


def _holder(out: Path) -> subprocess.Popen[str]:
    p = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(out)], stdout=subprocess.PIPE, text=True
    )
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    return p


def test_lock_refuses_a_second_process_and_names_the_holder(tmp_path: Path) -> None:
    p = _holder(tmp_path)
    try:
        with pytest.raises(FolderLocked) as e:
            ResultsLock(tmp_path).acquire()
        msg = str(e.value)
        assert f"pid {p.pid} on host {socket.gethostname()}" in msg
        assert "UTC" in msg and "\n" not in msg
        assert read_holder(tmp_path)["purpose"] == "test"
    finally:
        p.kill()
        p.wait()


def test_stale_lock_of_a_killed_process_is_taken_over(tmp_path: Path) -> None:
    p = _holder(tmp_path)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert read_holder(tmp_path)["pid"] == p.pid  # the file stays, the kernel lock is gone
    lock = ResultsLock(tmp_path).acquire()
    try:
        assert lock.took_over is not None and lock.took_over["pid"] == p.pid
        assert read_holder(tmp_path)["pid"] == os.getpid()
    finally:
        lock.release()
    assert read_holder(tmp_path)["released"] is True
    # A cleanly released lock is not reported as stale.
    again = ResultsLock(tmp_path).acquire()
    assert again.took_over is None
    again.release()


def _spawn(args: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [AGENTLOAD, "run", "--progress", "off", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def _wait_sessions(out: Path, n: int, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    path = out / "sessions.jsonl"
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= n:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError("the run made no progress")


# Slow enough that the first run is still going while the others try (it is interrupted).
LONG_RUN = [
    "--tasks",
    "airline/000-019",
    "--trials",
    "5",
    "--concurrency",
    "2",
    "--sim-speedup",
    "2",
    "--metrics-interval",
    "0.5",
    "--no-report",
]


def test_second_writer_is_refused_and_first_run_stays_intact(tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = _spawn(["--out", str(out), *LONG_RUN])
    try:
        _wait_sessions(out, 1, first)
        for args in (
            ["--resume", str(out)],
            ["--out", str(out), *RUN_ARGS, "--overwrite"],
            ["--out", str(out), *RUN_ARGS],
        ):
            assert first.poll() is None, "the first run ended too soon for this test"
            r = subprocess.run(
                [AGENTLOAD, "run", "--progress", "off", *args],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert r.returncode == 1, (args, r.stderr)
            lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
            assert len(lines) == 1, r.stderr
            assert f"is in use by pid {first.pid}" in lines[0]
            assert "Traceback" not in r.stderr
        assert first.poll() is None
        os.killpg(first.pid, signal.SIGINT)  # the first run ends normally, drained
        _, err = first.communicate(timeout=120)
        assert first.returncode == 130, err
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    keys = [(s["task_id"], s["trial"]) for s in load_jsonl(out / "sessions.jsonl")]
    assert 1 <= len(keys) == len(set(keys)) < 100
    for name in ("calls.jsonl", "sessions.jsonl", "trajectories.jsonl"):
        assert all(line.startswith(b"{") for line in (out / name).read_bytes().splitlines())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["counts"]["sessions"] == len(keys)
    assert summary["counts"]["unfinished_calls"] == 0
    assert summary["integrity"]["duplicates"] == 0 and summary["integrity"]["bad_lines"] == 0
    assert json.loads((out / "run.json").read_text())["resume_count"] == 0
    assert read_holder(out)["released"] is True


def test_kill9_holder_then_resume_takes_over(tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = _spawn(["--out", str(out), *RUN_ARGS])
    _wait_sessions(out, 3, first)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    assert (out / LOCK_FILE).exists() and read_holder(out)["pid"] == first.pid
    before = [(s["task_id"], s["trial"]) for s in load_jsonl(out / "sessions.jsonl")]
    r = subprocess.run(
        [AGENTLOAD, "run", "--resume", str(out), "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert f"stale lock of pid {first.pid}" in r.stderr
    keys = [(s["task_id"], s["trial"]) for s in load_jsonl(out / "sessions.jsonl")]
    assert keys[: len(before)] == before
    assert len(keys) == len(set(keys)) == 20
    per_session = Counter(c["session_id"] for c in load_jsonl(out / "calls.jsonl"))
    assert set(per_session) == {s["session_id"] for s in load_jsonl(out / "sessions.jsonl")}
