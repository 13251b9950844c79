"""Paths into a run: the folder lock, the saved config, special files (real processes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from agentload.results.jsonl import load_jsonl
from agentload.results.lock import LOCK_FILE, FolderLocked, FolderLost, ResultsLock, read_holder

AGENTLOAD = str(Path(sys.executable).parent / "agentload")

HOLDER = textwrap.dedent(
    """
    import sys, time
    from agentload.results.lock import ResultsLock
    lock = ResultsLock(sys.argv[1], purpose="test").acquire()
    print("held", flush=True)
    sys.stdin.readline()
    lock.check()
    print("checked", flush=True)
    time.sleep(60)
    """
)


def _agentload(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AGENTLOAD, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def _one_line(r: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


# ---- the folder lock -------------------------------------------------------------------------


def test_deleted_lock_file_does_not_hand_the_folder_out_twice(tmp_path: Path) -> None:
    p = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdin is not None and p.stdout is not None
    try:
        assert p.stdout.readline().strip() == "held"
        (tmp_path / LOCK_FILE).unlink()
        with pytest.raises(FolderLocked, match="in use by another process"):
            ResultsLock(tmp_path).acquire()
        # The holder checks again before it writes, and puts its name back.
        p.stdin.write("\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == "checked"
        assert read_holder(tmp_path)["pid"] == p.pid
        with pytest.raises(FolderLocked, match=f"in use by pid {p.pid}"):
            ResultsLock(tmp_path).acquire()
    finally:
        p.kill()
        p.wait()
    lock = ResultsLock(tmp_path).acquire()  # the holder is gone: the folder is free again
    lock.release()


def test_a_replaced_folder_is_not_written_to(tmp_path: Path) -> None:
    out = tmp_path / "run"
    lock = ResultsLock(out).acquire()
    try:
        lock.check()
        out.rename(tmp_path / "moved")
        out.mkdir()
        with pytest.raises(FolderLost, match="moved, deleted or replaced"):
            lock.check()
    finally:
        lock.release()


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
    "--progress",
    "off",
]


def test_resume_after_the_lock_file_was_deleted_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = subprocess.Popen(
        [AGENTLOAD, "run", "--out", str(out), *LONG_RUN],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (out / "sessions.jsonl").exists() or not (out / "sessions.jsonl").stat().st_size:
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.05)
        (out / LOCK_FILE).unlink()
        r = _agentload("run", "--resume", str(out), "--progress", "off")
        assert r.returncode == 1
        assert "is in use by another process" in _one_line(r)
        assert first.poll() is None
        os.killpg(first.pid, signal.SIGINT)
        _, err = first.communicate(timeout=120)
        assert first.returncode == 130, err
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    keys = [(s["task_id"], s["trial"]) for s in load_jsonl(out / "sessions.jsonl")]
    assert keys and len(keys) == len(set(keys))
    assert json.loads((out / "run.json").read_text())["resume_count"] == 0
    # The first run wrote its name back before its last writes.
    assert read_holder(out)["pid"] == first.pid and read_holder(out)["released"] is True


# ---- a finished run to damage ----------------------------------------------------------------


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("finished") / "run"
    r = _agentload(
        "run",
        "--tasks",
        "airline/000-001",
        "--sim-speedup",
        "50",
        "--no-report",
        "--progress",
        "off",
        "--quiet",
        "--out",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    return out


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_resume_with_an_emptied_config_yaml_is_refused(finished_run: Path, tmp_path: Path) -> None:
    for text in ("", "# settings were here\n---\n"):
        out = _copy(finished_run, tmp_path / f"run{len(text)}")
        (out / "config.yaml").write_text(text)
        before = (out / "sessions.jsonl").read_bytes()
        r = _agentload("run", "--resume", str(out), "--progress", "off")
        assert r.returncode == 2
        line = _one_line(r)
        assert f"{out / 'config.yaml'}: holds no settings" in line
        assert (out / "sessions.jsonl").read_bytes() == before
        assert (out / "config.yaml").read_text() == text


def test_config_that_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "run.yaml"
    os.mkfifo(fifo)
    for path, kind in ((fifo, "a FIFO"), (Path(os.devnull), "a device"), (tmp_path, "a directory")):
        r = _agentload("run", "--config", str(path), "--out", str(tmp_path / "out"), timeout=20)
        assert r.returncode == 2
        assert f"{path}: cannot read: is {kind}" in _one_line(r)
    zero = Path("/dev/zero")
    if zero.exists():  # endless: read it and the process grows until the kernel kills it
        r = _agentload("run", "--config", str(zero), "--out", str(tmp_path / "out"), timeout=20)
        assert r.returncode == 2 and "/dev/zero: cannot read: is a device" in _one_line(r)


@pytest.mark.parametrize("name", ["calls.jsonl", "sessions.jsonl"])
@pytest.mark.parametrize("special", ["fifo", "zero"])
def test_results_file_that_is_not_a_regular_file_is_refused(
    finished_run: Path, tmp_path: Path, name: str, special: str
) -> None:
    if special == "zero" and not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero")
    out = _copy(finished_run, tmp_path / "run")
    (out / name).unlink()
    if special == "fifo":
        os.mkfifo(out / name)
    else:
        (out / name).symlink_to("/dev/zero")
    kind = "a FIFO" if special == "fifo" else "a device"
    for args in (["report", str(out)], ["export", str(out)], ["run", "--resume", str(out)]):
        r = _agentload(*args, timeout=20)
        assert r.returncode == 2, (args, r.stderr)
        assert f"{out / name}: is {kind}" in _one_line(r), args


def test_read_regular_reads_what_was_there_when_opened(tmp_path: Path) -> None:
    from agentload.safeio import NotRegularFile, read_regular

    p = tmp_path / "a.jsonl"
    p.write_bytes(b'{"a": 1}\n' * 1000)
    assert read_regular(p) == b'{"a": 1}\n' * 1000
    assert read_regular(p, limit=5) == b'{"a":'
    with pytest.raises(NotRegularFile, match="is a directory"):
        read_regular(tmp_path)


# ---- replay datasets ---------------------------------------------------------------------------


@pytest.mark.parametrize("delay", ["1e308", "86400.5"])
def test_dataset_delay_the_replay_cannot_honour_is_refused(tmp_path: Path, delay: str) -> None:
    ds = tmp_path / "big.jsonl"
    ds.write_text(
        '{"conversation_id":"c1","turn":1,"role":"user","content":"hi"}\n'
        '{"conversation_id":"c1","turn":2,"role":"assistant","content":"yo"}\n'
        '{"conversation_id":"c1","turn":3,"role":"user","content":"again",'
        f'"delay_seconds":{delay}}}\n'
    )
    v = _agentload("dataset", "validate", str(ds))
    assert v.returncode != 0
    assert "big.jsonl:3: field 'delay_seconds': at most 86400" in _one_line(v)
    r = _agentload("replay", str(ds), "--out", str(tmp_path / "out"), "--progress", "off")
    assert r.returncode == 2
    assert "big.jsonl:3: field 'delay_seconds'" in _one_line(r)
    assert not (tmp_path / "out" / "calls.jsonl").exists()


def test_dataset_delay_of_a_day_is_kept(tmp_path: Path) -> None:
    ds = tmp_path / "ok.jsonl"
    ds.write_text(
        '{"conversation_id":"c1","turn":1,"role":"user","content":"hi","delay_seconds":86400}\n'
    )
    v = _agentload("dataset", "validate", str(ds))
    assert v.returncode == 0, v.stderr


# ---- bad input to `run` exits 2 before anything runs ------------------------------------------


def test_empty_task_list_in_a_config_file_is_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "run.yaml"
    cfg.write_text("workload:\n  tasks: []\n")
    r = _agentload("run", "--config", str(cfg), "--out", str(tmp_path / "out"))
    assert r.returncode == 2
    assert f"{cfg}: field 'workload.tasks': an empty list would run every task" in _one_line(r)
    assert not (tmp_path / "out").exists()


def test_saved_config_of_a_run_of_every_task_can_be_run_again(tmp_path: Path) -> None:
    from agentload.config import build_config, config_to_dict, dump_yaml

    saved = tmp_path / "config.yaml"
    saved.write_text(dump_yaml(config_to_dict(build_config(data={}))))
    r = _agentload(
        "run", "--config", str(saved), "--out", str(tmp_path / "out"), "--tasks", "airline/000",
        "--sim-speedup", "50", "--no-report", "--quiet",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr


def test_out_that_is_a_file_exits_2(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    for out, what in ((f, "is a file"), (f / "sub", f"is below {f}, which is a file")):
        r = _agentload("run", "--out", str(out), "--tasks", "airline/000", "--no-report")
        assert r.returncode == 2
        assert f"{out} {what}, expected a results folder" in _one_line(r)
    assert f.read_text() == "x"


def test_ray_address_that_does_not_resolve_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    from typer.testing import CliRunner

    from agentload.cli.root import app

    def no_such_host(host: str, *args: Any, **kw: Any) -> Any:
        # Name resolution fails as for an unknown host (without a query leaving the machine).
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_such_host)
    res = CliRunner().invoke(
        app, ["run", "--ray", "nosuch.invalid:10001", "--out", str(tmp_path / "o"), "--no-report"]
    )
    assert res.exit_code == 2, res.output
    assert "--ray nosuch.invalid:10001: cannot resolve 'nosuch.invalid'" in res.output
    assert not (tmp_path / "o").exists()
