"""Runs over worker processes end, on any number of cores: 4 and 8 workers, auto adding
workers mid-run and while the plan ends, and workers whose process fails after they finished.

Each run is a process of its own (tests/integration/workers_harness.py) under a time bound,
so a run that hangs fails its test instead of stalling the suite. Nothing is pinned to a
core: the driver and its workers run wherever the machine puts them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agentload.results.jsonl import load_jsonl
from replay_fixture import write_dataset

HARNESS = Path(__file__).with_name("workers_harness.py")
BOUND_S = 60.0
"""Each run takes a few seconds; a hang is killed here."""


def _run(tmp_path: Path, workers: int | str, n: int, concurrency: int, *flags: str) -> Any:
    data = write_dataset(tmp_path / "d.jsonl", n)
    out = tmp_path / "run"
    cfg = {
        "out": str(out),
        "kind": "replay",
        "replay": {"dataset": str(data)},
        "sim": {"profile": "instant"},
        "load": {"concurrency": concurrency, "workers": workers, "drain_timeout_s": 10},
        "metrics": {"enabled": False},
        "report": False,
    }
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(cfg))
    cmd = [sys.executable, str(HARNESS), str(path), *flags]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=BOUND_S)
    except subprocess.TimeoutExpired:
        proc.kill()  # its workers follow (they end with their driver)
        _, stderr = proc.communicate()
        pytest.fail(f"the run over workers hung ({BOUND_S:.0f} s); it said:\n{stderr[-3000:]}")
    assert proc.returncode == 0, stderr[-3000:]
    res = json.loads(stdout.strip().splitlines()[-1])
    assert res["exit_code"] == 0, res
    sessions = load_jsonl(out / "sessions.jsonl")
    assert sorted(Counter(s["session_id"] for s in sessions).values()) == [1] * n
    summary = json.loads((out / "summary.json").read_text())
    assert summary["counts"]["sessions"] == n
    return res, summary["client"]["workers"]


@pytest.mark.parametrize("workers", [4, 8])
def test_many_workers_run_to_the_end(tmp_path: Path, workers: int) -> None:
    _, block = _run(tmp_path, workers, 48, 32)
    assert len(block) == workers
    assert all(w["exit"] == "done" for w in block), block
    assert sum(w["sessions"] for w in block) == 48


def test_auto_adding_workers_mid_run_and_at_the_end_finishes(tmp_path: Path) -> None:
    # As on a 9-core machine: auto starts 2 workers and may grow to 8; every stats window
    # counts as saturated, so workers are added while sessions run and while the plan ends.
    res, block = _run(tmp_path, "auto", 60, 16, "--cores", "9", "--grow-fast")
    added = [m for m in res["said"] if "adding worker" in m]
    assert added, res["said"]
    assert 2 < len(block) <= 8
    assert all(w["exit"] == "done" for w in block), block


def test_workers_failing_after_they_finished_are_not_replaced(tmp_path: Path) -> None:
    # Each worker sends its last records and Finished, then its process ends with status 3:
    # nothing was lost, so nothing runs again and no worker is started in its place (one
    # that was would never be told that the plan had ended).
    res, block = _run(tmp_path, 2, 24, 8, "--exit-status-3")
    assert not [m for m in res["said"] if "in its place" in m], res["said"]
    assert [w["exit"] for w in block] == ["exit status 3", "exit status 3"]
