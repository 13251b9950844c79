"""Direct vs gateway: the same workload on the simulator directly and through `agentload proxy`,
then `agentload compare --gateway` (added latency per role with CIs, the --max-added verdict)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from agentload.cli import app
from agentload.config import build_config
from agentload.proxy import ProxyConfig, ProxyServer
from agentload.results.jsonl import load_jsonl
from agentload.runner import execute_run
from agentload.sim import SimConfig, SimServer


def _quiet(_msg: str) -> None:
    pass


async def _run(out: Path, base_url: str) -> None:
    cfg = build_config(
        data={
            "out": str(out),
            "endpoints": {"agent": {"base_url": base_url, "model": "sim"}},
            "workload": {"tasks": ["airline/000-007"], "trials": 1},
            "load": {"concurrency": 4},
            "report": False,
        }
    )
    res = await execute_run(cfg, progress="off", say=_quiet, install_signals=False)
    assert res.exit_code == 0, res.stop_reason


async def test_same_workload_direct_and_through_the_proxy(tmp_path: Path) -> None:
    direct, gateway, recorded = tmp_path / "direct", tmp_path / "gateway", tmp_path / "proxy"
    sim_cfg = SimConfig(port=0, profile="tiny-cpu", speedup=50.0, seed=3, model="sim")
    async with SimServer(sim_cfg) as sim:
        await _run(direct, sim.url)
        async with ProxyServer(ProxyConfig(upstream=sim.url, out=recorded)) as proxy:
            await _run(gateway, proxy.url)
    # The proxy saw, and recorded, every call of the gateway arm's episodes, in its sessions
    # (the run's preflight calls carry no session: `anonymous`).
    seen = [c for c in load_jsonl(recorded / "calls.jsonl") if c["session_id"] != "anonymous"]
    made = load_jsonl(gateway / "calls.jsonl")
    assert sorted(c["session_id"] for c in seen) == sorted(c["session_id"] for c in made)

    res = CliRunner().invoke(app, ["compare", str(direct), str(gateway), "--gateway", "--json"])
    assert res.exit_code == 0, res.output
    added = json.loads(res.output)["added_latency"]
    assert set(added["roles"]) == {"agent", "user"}
    for role in ("agent", "user"):
        r = added["roles"][role]
        assert r["calls"]["direct"] > 10 and r["calls"]["gateway"] > 10
        assert r["episodes"] == {"direct": 8, "gateway": 8}
        for name in ("ttft_p50", "e2e_p99", "itl_p50", "itl_mean"):
            m = r["metrics"][name]
            assert m["direct"] > 0 and m["gateway"] > 0, (role, name, m)
            assert m["added"] == pytest.approx(m["gateway"] - m["direct"])
            lo, hi = m["added_ci"]
            assert lo <= hi and lo <= m["added"] <= hi, (role, name, m)
            assert m["relative"] == pytest.approx(m["added"] / m["direct"])
    # A generous limit: the proxy on loopback adds far less than 1000 % to any figure.
    res = CliRunner().invoke(
        app, ["compare", str(direct), str(gateway), "--max-added", "1000%", "--gate", "e2e_p50"]
    )
    assert res.exit_code == 0, res.output
    assert "WITHIN" in res.output and "added latency, agent calls" in res.output


def _calls(out: Path, ttft_s: float, n_sessions: int = 20) -> Path:
    """A calls-only results folder: `n_sessions` sessions of 3 calls with known latencies."""
    out.mkdir()
    lines: list[dict[str, Any]] = []
    for s in range(n_sessions):
        for t in range(3):
            jitter = 0.001 * ((s * 3 + t) % 7)
            lines.append(
                {
                    "call_id": f"c{s}-{t}",
                    "session_id": f"s{s}",
                    "role": "agent",
                    "turn": t,
                    "status": "ok",
                    "ttft_s": ttft_s + jitter,
                    "e2e_s": ttft_s + 0.5 + jitter,
                    "itl": {"count": 10, "mean": 0.02},
                    "itl_hist": [150, 10],
                    "start_ns": 1_000_000 * (s * 3 + t),
                    "end_ns": 1_000_000 * (s * 3 + t) + 500_000,
                    "started_at": 1.7e9 + s,
                }
            )
    (out / "calls.jsonl").write_bytes(b"".join(orjson.dumps(c) + b"\n" for c in lines))
    return out


def test_max_added_verdicts_and_exit_codes(tmp_path: Path) -> None:
    from agentload.report.added import added_latency, parse_threshold

    base = _calls(tmp_path / "a", 0.100)
    same = _calls(tmp_path / "b", 0.100)
    slow = _calls(tmp_path / "c", 0.150)  # +50 ms on a ~100 ms TTFT: about +50 %

    def gate(b: Path, limit: str, a: Path = base) -> dict[str, Any]:
        return added_latency(a, b, max_added=parse_threshold(limit), n_resamples=200)

    assert gate(same, "5%")["gate"]["verdict"] == "within"
    res = gate(slow, "60ms")  # +50 ms absolute is within 60 ms
    assert res["gate"]["verdict"] == "within"
    row = res["roles"]["agent"]["metrics"]["ttft_p50"]
    assert row["added"] == pytest.approx(0.05, abs=1e-9)
    assert row["relative"] == pytest.approx(0.05 / row["direct"])
    # ITL comes from the histograms: the same gaps in both arms add nothing.
    itl = res["roles"]["agent"]["metrics"]["itl_p50"]
    assert itl["added"] == 0 and itl["added_ci"] == (0.0, 0.0)
    # One episode per arm: no CI, so no verdict either way.
    few_a, few_b = _calls(tmp_path / "d", 0.1, 1), _calls(tmp_path / "e", 0.1, 1)
    assert gate(few_b, "5%", few_a)["gate"]["verdict"] == "inconclusive"
    # The command: its verdict line and the exit code scripts rely on.
    run = CliRunner().invoke
    res = run(app, ["compare", str(base), str(slow), "--max-added", "5%"])
    assert res.exit_code == 1, res.output
    assert "EXCEEDS" in res.output and "agent ttft_p50: exceeds" in res.output
    for bad in (["--max-added", "5"], ["--max-added", "5%", "--gate", "ttft_p42"]):
        res = run(app, ["compare", str(base), str(same), *bad])
        assert res.exit_code == 2 and "Traceback" not in res.output, res.output


def _sweep(root: Path, ttfts: dict[int, float]) -> Path:
    root.mkdir()
    points = []
    for c, ttft in ttfts.items():
        _calls(root / f"c{c:04d}", ttft)
        points.append({"concurrency": c, "dir": f"c{c:04d}", "status": "completed"})
    doc = {"schema": "agentload.sweep/1", "kind": "concurrency", "points": points}
    (root / "sweep.json").write_bytes(orjson.dumps(doc))
    return root


def test_two_sweeps_compare_point_by_point(tmp_path: Path) -> None:
    direct = _sweep(tmp_path / "direct", {1: 0.1, 4: 0.1, 8: 0.1})
    gateway = _sweep(tmp_path / "gateway", {1: 0.1, 4: 0.2})  # slower at 4; no point 8
    run = CliRunner().invoke
    res = run(app, ["compare", str(direct), str(gateway), "--max-added", "5%", "--json"])
    assert res.exit_code == 1, res.output
    doc = json.loads(res.output)
    assert [p["concurrency"] for p in doc["points"]] == [1, 4] and doc["unmatched"] == [8]
    assert [p["gate"]["verdict"] for p in doc["points"]] == ["within", "exceeds"]
    ttft = doc["points"][1]["roles"]["agent"]["metrics"]["ttft_p50"]
    assert ttft["added"] == pytest.approx(0.1) and ttft["added_ci"][0] > 0.05
    res = run(app, ["compare", str(direct), str(gateway), "--max-added", "5%"])
    assert res.exit_code == 1 and "concurrency 4 agent ttft_p50: exceeds" in res.output
    # A sweep and a single run do not compare.
    res = run(app, ["compare", str(direct), str(direct / "c0001"), "--gateway"])
    assert res.exit_code == 2 and "Traceback" not in res.output
