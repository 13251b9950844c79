"""A run asked to stop exits 130 whenever the signal comes: after the last episode (while the
run winds down) and while the report is written, as well as mid-run."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

import agentload.report
from agentload.config import build_config
from agentload.runner import execute_run
from agentload.scheduler.core import Scheduler

FAST = {"sim": {"profile": "tiny-cpu", "speedup": 50.0}, "metrics": {"interval_s": 0.5}}


def _cfg(out: Path):
    return build_config(
        data={
            "out": str(out),
            **FAST,
            "workload": {"tasks": ["airline/000-001"], "trials": 1},
            "load": {"concurrency": 2},
        }
    )


def _quiet(_msg: str) -> None:
    pass


async def _finish(out: Path) -> Any:
    return await execute_run(_cfg(out), progress="off", say=_quiet, install_signals=True)


def _assert_interrupted(out: Path, res: Any, report: bool) -> None:
    assert res.exit_code == 130, res
    meta = json.loads((out / "run.json").read_text())
    assert meta["status"] == "interrupted" and meta["exit_code"] == 130, meta
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run"]["exit_code"] == 130
    assert (out / "report.md").exists() is report


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
async def test_signal_after_the_last_episode_exits_130(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sig: signal.Signals
) -> None:
    real = Scheduler.run

    async def run_then_signal(self: Scheduler) -> Any:
        rep = await real(self)  # every episode done
        os.kill(os.getpid(), sig)
        await asyncio.sleep(0.05)  # the handler runs on the loop
        return rep

    monkeypatch.setattr(Scheduler, "run", run_then_signal)
    out = tmp_path / "run"
    res = await _finish(out)
    _assert_interrupted(out, res, report=True)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
async def test_signal_during_the_report_exits_130(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sig: signal.Signals
) -> None:
    real = agentload.report.write_report

    def signal_then_write(*a: Any, **kw: Any) -> Any:
        os.kill(os.getpid(), sig)  # handled once the (blocking) report is written
        return real(*a, **kw)

    monkeypatch.setattr(agentload.report, "write_report", signal_then_write)
    out = tmp_path / "run"
    res = await _finish(out)
    _assert_interrupted(out, res, report=True)
