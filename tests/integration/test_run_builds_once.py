"""A run builds its workload once (preflight asks that one which roles offer tools), so a
replay dataset is indexed once; and a one-process run never imports the distributed driver.
Checked in a fresh interpreter, where nothing else has imported it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from replay_fixture import write_dataset

SCRIPT = """
import asyncio, json, sys

import agentload.workloads.base as base
import agentload.workloads.replay as replay

built, indexed = [], []
make, index = base.make_workload, replay.index_dataset
base.make_workload = lambda cfg: built.append(cfg) or make(cfg)
replay.index_dataset = lambda *a, **k: indexed.append(a) or index(*a, **k)

from agentload.config import build_config
from agentload.runner import execute_run
from agentload.sim import SimConfig, SimServer


async def main(dataset, out):
    async with SimServer(SimConfig(port=0, profile="instant")) as sim:
        cfg = build_config(data={
            "out": out,
            "kind": "replay",
            "replay": {"dataset": dataset, "num_conversations": 2},
            "endpoints": {"agent": {"base_url": sim.url, "model": sim.config.model}},
            "metrics": {"enabled": False},
            "report": False,
        })
        res = await execute_run(cfg, progress="off", say=lambda _m: None, install_signals=False)
    print(json.dumps({
        "exit": res.exit_code,
        "built": len(built),
        "indexed": len(indexed),
        "driver": "agentload.distributed.driver" in sys.modules,
    }))


asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


@pytest.mark.timeout(120)
def test_one_workload_one_index_and_no_driver(tmp_path: Path) -> None:
    ds = write_dataset(tmp_path / "d.jsonl")
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(ds), str(out)],
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == {"exit": 0, "built": 1, "indexed": 1, "driver": False}, proc.stderr[-2000:]
    # The preflight ran, and asked the workload: the dataset offers tools.
    run = json.loads((out / "run.json").read_text())
    assert run["endpoints_detected"]
