"""`agentload run --ray` on a real local multi-node Ray cluster (a head and two raylets on
this machine, all on loopback): the workers run as actors spread over the nodes, one results
folder holds every session exactly once, and killing an actor mid-run (`ray.kill`) loses no
session: its unfinished ones run again elsewhere. The clock offsets the driver measured are
checked against the truth (every node shares this machine's clocks: the offset is zero)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from agentload.results.jsonl import load_jsonl
from ray_cluster import LOOPBACK_ENV, LocalCluster, local_ray_cluster

ray = pytest.importorskip("ray", reason="the ray extra is not installed")

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

AGENTLOAD = str(Path(sys.executable).parent / "agentload")
TASKS = 18
RUN_ID = "raytest"


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    try:
        cm = local_ray_cluster(workers=2, cpus_per_node=2)
        c = cm.__enter__()
    except Exception as e:  # pragma: no cover - a box where Ray cannot start at all
        pytest.skip(f"a local Ray cluster could not start here: {e}")
    try:
        yield c
    finally:
        cm.__exit__(None, None, None)


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def _kill_one_actor_mid_run(proc: subprocess.Popen[bytes], out: Path, address: str) -> str:
    """Once a few sessions are recorded, kill worker 1's actor; returns its name."""
    name = f"agentload-{RUN_ID}-worker-1"
    deadline = time.monotonic() + 150
    while _lines(out / "sessions.jsonl") < 3:
        assert proc.poll() is None, "the run ended before an actor could be killed"
        assert time.monotonic() < deadline, "no session was recorded in time"
        time.sleep(0.2)
    ray.init(address=address, namespace="agentload", log_to_driver=False)
    try:
        ray.kill(ray.get_actor(name, namespace="agentload"), no_restart=True)
    finally:
        ray.shutdown()
    return name


def test_ray_run_survives_an_actor_kill_with_no_session_lost(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    config = tmp_path / "run.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "run_id": RUN_ID,
                "out": str(out),
                "workload": {"tasks": [f"airline/000-{TASKS - 1:03d}"], "trials": 1},
                "load": {"concurrency": 6, "workers": 3},
                "sim": {"profile": "tiny-cpu", "speedup": 8.0},
                "report": False,
                "ray": {"address": cluster.address, "start_timeout_s": 90},
            }
        )
    )
    env = {**os.environ, **LOOPBACK_ENV}
    log = tmp_path / "agentload.log"
    with log.open("wb") as f:
        proc = subprocess.Popen(
            [AGENTLOAD, "run", "--config", str(config), "--progress", "plain"],
            stdout=f,
            stderr=subprocess.STDOUT,
            env=env,
        )
        try:
            killed = _kill_one_actor_mid_run(proc, out, cluster.address)
            code = proc.wait(timeout=200)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = log.read_text(errors="replace")
    assert code == 0, text[-4000:]
    assert "worker 1 exited (actor died" in text, text[-4000:]

    # One folder, every (task, trial) exactly once: nothing lost, nothing twice.
    sessions = load_jsonl(out / "sessions.jsonl")
    keys = Counter((s["task_id"], s["trial"]) for s in sessions)
    assert sorted(keys) == [(f"airline/{i:03d}", 0) for i in range(TASKS)]
    assert set(keys.values()) == {1}
    redone = [s["session_id"] for s in sessions if "-redo" in s["session_id"]]
    assert redone, "the killed actor held sessions in flight; they must have run again"

    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"]["episodes"] == TASKS
    assert summary["integrity"]["duplicates"] == 0
    assert summary["integrity"]["bad_lines"] == 0
    # Every call of a recorded session is in calls.jsonl (records streamed back in full).
    calls = Counter(c["session_id"] for c in load_jsonl(out / "calls.jsonl"))
    for s in sessions:
        n = s["counts"]["agent_calls"] + s["counts"]["user_calls"]
        assert calls[s["session_id"]] == n, s["session_id"]

    workers = {w["worker"]: w for w in summary["client"]["workers"]}
    assert workers[1]["exit"].startswith("actor died"), (killed, workers[1])
    assert len(workers) == 4  # the three, and the one started in the killed one's place
    assert all(w["exit"] == "done" for i, w in workers.items() if i != 1)

    # Actors ran on both raylets; the offsets measured are right within their bound.
    offsets = summary["client"]["clock_offsets"]
    assert len({o["node_id"] for o in offsets}) == 2
    for o in offsets:
        assert o["same_machine"] is True and o["offset_s"] == 0.0
        assert o["bound_s"] is not None and 0 < o["bound_s"] < 1.0
        assert abs(o["measured_offset_s"]) <= o["bound_s"], o


def test_an_unreachable_cluster_is_one_line_and_leaves_no_folder(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = subprocess.run(
        [AGENTLOAD, "run", "--ray", "127.0.0.1:1", "--out", str(out), "-n", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **LOOPBACK_ENV},
    )
    assert res.returncode == 1
    assert res.stderr.strip().splitlines() == [
        "agentload: error: cannot connect to the Ray cluster at 127.0.0.1:1: Connection "
        "refused (is `ray start --head` running there?)"
    ]
    assert not out.exists()


async def test_a_worker_on_another_machine_sends_records_on_the_driver_clocks(
    cluster: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every actor here shares this machine's clocks; one made to look remote, with a
    measured offset of +5 s, must send records 5 s ahead of this process's clocks (it shifts
    them itself; the driver writes them as received)."""
    from agentload.config import build_config
    from agentload.distributed.clock import ClockOffset
    from agentload.integrations.ray import backend
    from agentload.runner import execute_run

    skew = ClockOffset(mono_ns=5_000_000_000, wall_ns=5_000_000_000, bound_ns=1_000, samples=8)

    async def measure(ask: object, samples: int = 8) -> ClockOffset:
        return skew

    monkeypatch.setattr(backend, "measure", measure)
    monkeypatch.setattr(backend.RayBackend, "_same_machine", lambda _self, _a: False)
    out = tmp_path / "run"
    cfg = build_config(
        data={
            "out": str(out),
            "workload": {"tasks": ["airline/000-003"], "user": "scripted"},
            "load": {"concurrency": 2, "workers": 2},
            "sim": {"profile": "instant"},
            "metrics": {"enabled": False},
            "report": False,
            "ray": {"address": cluster.address, "start_timeout_s": 90},
        }
    )
    wall0, mono0 = time.time(), time.perf_counter_ns()
    try:
        res = await execute_run(cfg, progress="off", say=lambda _m: None, install_signals=False)
    finally:
        ray.shutdown()
    wall1, mono1 = time.time(), time.perf_counter_ns()
    assert res.exit_code == 0, res.message
    records = load_jsonl(out / "calls.jsonl") + load_jsonl(out / "sessions.jsonl")
    assert len(records) > 4
    for r in records:
        assert wall0 + 5 <= r["started_at"] <= wall1 + 5, r
        assert mono0 + 5e9 <= r["start_ns"] <= r["end_ns"] <= mono1 + 5e9, r
    offsets = json.loads((out / "summary.json").read_text())["client"]["clock_offsets"]
    assert [o["offset_s"] for o in offsets] == [5.0, 5.0]
    assert not any(o["same_machine"] for o in offsets)
