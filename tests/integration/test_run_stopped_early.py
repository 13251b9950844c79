"""Runs stopped where the results folder is half made: killed while the record files are
created, and a full disk. Each leaves a folder that `--resume` continues to `completed`."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest

import agentload.results.jsonl as jsonl_mod
import agentload.results.recorder as recorder_mod
from agentload.config import ConfigError, build_config
from agentload.runner import RunFailed, execute_run, load_saved_config

FAST = {"sim": {"profile": "tiny-cpu", "speedup": 50.0}, "metrics": {"interval_s": 0.5}}


def _cfg(out: Path):
    return build_config(
        data={
            "out": str(out),
            **FAST,
            "workload": {"tasks": ["airline/000-003"], "trials": 1},
            "load": {"concurrency": 2},
        }
    )


def _quiet(_msg: str) -> None:
    pass


async def _run(cfg: Any, resume: bool = False) -> Any:
    return await execute_run(cfg, resume=resume, progress="off", say=_quiet, install_signals=False)


def _temps(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if ".tmp" in p.name)


class _Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs."""


async def test_killed_while_the_record_files_are_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    real_open = open

    def open_then_die(path: Any, mode: str = "r", *a: Any, **kw: Any) -> Any:
        f = real_open(path, mode, *a, **kw)
        if Path(path).name == "calls.jsonl":
            f.close()
            raise _Killed
        return f

    monkeypatch.setattr(recorder_mod, "open", open_then_die, raising=False)
    with pytest.raises(_Killed):
        await _run(_cfg(out))
    monkeypatch.undo()
    assert (out / "calls.jsonl").exists()
    res = await _run(load_saved_config(out), resume=True)  # not "not a run folder"
    assert res.exit_code == 0
    assert json.loads((out / "run.json").read_text())["status"] == "completed"
    # A folder that never was a run's keeps its message.
    (tmp_path / "other").mkdir()
    with pytest.raises(ConfigError, match="not a run folder"):
        load_saved_config(tmp_path / "other")


class _FullDisk:
    """Writes that need new space fail with ENOSPC once `full`; writing within the blocks a
    file already holds does not (as on a real full disk)."""

    def __init__(self) -> None:
        self.full = False
        self.calls_lines = 0

    def open(self, path: Any, mode: str = "r", *a: Any, **kw: Any) -> Any:
        f = open(path, mode, *a, **kw)  # noqa: SIM115 - returned wrapped
        if "r" in mode and "+" not in mode:
            return f
        return _File(self, f, Path(path))


class _File:
    def __init__(self, disk: _FullDisk, f: Any, path: Path) -> None:
        self._disk, self._f, self._path = disk, f, path
        self._room = os.fstat(f.fileno()).st_blocks * 512

    def write(self, data: bytes) -> int:
        if self._path.name == "calls.jsonl":
            self._disk.calls_lines += 1
            if self._disk.calls_lines == 3:
                self._disk.full = True
        if self._disk.full and self._f.tell() + len(data) > self._room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self._path))
        return self._f.write(data)

    def __enter__(self) -> _File:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._f.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


async def test_disk_full_stop_then_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "run"
    disk = _FullDisk()
    monkeypatch.setattr(recorder_mod, "open", disk.open, raising=False)
    monkeypatch.setattr(jsonl_mod, "open", disk.open, raising=False)
    with pytest.raises(RunFailed, match="No space left"):
        await _run(_cfg(out))
    assert disk.full
    meta = json.loads((out / "run.json").read_text())
    assert meta["status"].startswith("failed") and "No space left" in meta["status"], meta
    assert meta["exit_code"] == 1
    assert _temps(out) == []
    disk.full = False  # space freed
    (out / ".run.json.tmp99999999").write_bytes(b"{")  # as a kill mid-write leaves it
    res = await _run(load_saved_config(out), resume=True)
    assert res.exit_code == 0
    meta = json.loads((out / "run.json").read_text())
    assert meta["status"] == "completed" and meta["exit_code"] == 0
    assert _temps(out) == []


async def test_resume_with_nothing_left_reports_a_sane_cpu_share(tmp_path: Path) -> None:
    from agentload.report.health import client_cpu_share
    from agentload.results.records import ClientBlock

    out = tmp_path / "run"
    assert (await _run(_cfg(out))).exit_code == 0
    first = json.loads((out / "summary.json").read_text())["client"]
    res = await _run(load_saved_config(out), resume=True)
    assert res.exit_code == 0
    client = json.loads((out / "summary.json").read_text())["client"]
    # The CPU time is counted over the same window as elapsed_s: an attempt that ran nothing
    # adds next to nothing to either.
    assert client["cpu_s"] - first["cpu_s"] < 0.5, (first, client)
    share = client_cpu_share(ClientBlock.model_validate(client))
    assert share is not None and share < 1.0, client
