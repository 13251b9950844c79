"""`agentload sim calibrate` and `agentload sim fidelity` against the real vLLM (bounded: the
quick probe and the four fidelity workloads take a minute or two on 2 cores)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentload.sim.profiles import load_profile

pytestmark = pytest.mark.real


def _agentload(*args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentload", *args], capture_output=True, text=True, timeout=timeout
    )


def test_calibrate_quick_against_vllm(vllm_server: Any, tiny_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "vllm.yaml"
    r = _agentload(
        "sim", "calibrate", "--base-url", vllm_server.base_url, "--model", vllm_server.model,
        "--tokenizer", str(tiny_model / "tokenizer.json"), "--quick", "-o", str(out),
    )  # fmt: skip
    print(r.stderr)
    assert r.returncode == 0, r.stderr
    # vLLM's /metrics cannot show the prefill chunk: the command says what it assumed
    assert "does not show its prefill chunk" in r.stderr
    p = load_profile(str(out))
    cal = p.calibration or {}
    assert cal["server"]["version"].startswith("0.32")
    assert cal["server"]["block_size"] == p.block_size == 128
    assert cal["clock"] == "wall"
    # a freshly started server is warmed up first, and nothing of it is recorded
    assert cal["probe"]["warmup_s"] == 30 and "warm-up:" in r.stderr
    assert cal["fit"]["ttft"]["observations"] >= 4
    assert p.prefill_token_s + p.prefill_attention_s > 0
    assert p.step_overhead_s + p.decode_seq_s > 0
    # the real streams' chunks by batch size: how many carried several tokens, and their mean
    held, chunking = cal["held"], cal["chunking"]
    assert set(held) == set(chunking) and "1" in held
    assert all(0 <= held[b] <= 1 <= chunking[b] for b in held)
    assert p.coalesce_p <= max(held.values()) + 1e-4  # (rounded to 4 places)
    # short prompts arriving beside decoding streams were found in a real server's steps, and
    # the idle engine's front end is split between the busy one's and idle_wake_s
    busy = cal["busy_start"]
    assert busy["arrivals"] >= 3
    if p.idle_wake_s > 0:  # the busy front end was taken, and its spread with it (widened by
        # the simulator's serving overhead, which does not vary)
        assert p.request_overhead_sigma >= busy["sigma"] >= 0
    idle_front = busy["request_overhead_idle_s"]
    over = cal["serving_overhead"]
    assert over["request_overhead_fitted_s"] + p.idle_wake_s == pytest.approx(
        idle_front, rel=0.01, abs=2e-5
    )
    # what this client and a simulator's HTTP path add to a short request comes off the fitted
    # front end (a simulator serving the profile adds it back)
    assert over["requests"] == 16 and 0 < over["median_s"] < 0.01
    assert p.request_overhead_s == pytest.approx(
        max(0.0, over["request_overhead_fitted_s"] - over["median_s"]), rel=0.01, abs=2e-5
    )
    assert "less" in r.stderr and "the simulator adds by serving it" in r.stderr
    # the probe's measurements were kept beside the profile, and a refit from them alone (no
    # server) gives the same fitted costs, with the serving overhead timed again
    kept = tmp_path / "vllm.probe.json"
    assert f"kept the probe's measurements in {kept}" in r.stderr
    again = tmp_path / "again.yaml"
    r = _agentload(
        "sim", "calibrate", "--pool", str(kept), "--tokenizer", str(tiny_model / "tokenizer.json"),
        "-o", str(again),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    refit = load_profile(str(again))
    for name in ("step_overhead_s", "prefill_token_s", "decode_seq_s", "prefill_attention_s",
                 "frontend_token_s", "frontend_step_s", "idle_wake_s"):  # fmt: skip
        assert getattr(refit, name) == getattr(p, name), name
    assert (refit.calibration or {})["serving_overhead"]["requests"] == 16
    assert refit.block_size == 128 and refit.max_num_batched_tokens == p.max_num_batched_tokens


def test_fidelity_of_the_shipped_profile(
    vllm_server: Any, tiny_model: Path, tmp_path: Path
) -> None:
    out = tmp_path / "fidelity.json"
    r = _agentload(
        "sim", "fidelity", "--real", vllm_server.base_url, "--model", vllm_server.model,
        "--profile", "vllm-cpu-tiny", "--tokenizer", str(tiny_model / "tokenizer.json"),
        "--passes", "2", "--warmup", "5", "-o", str(out),
    )  # fmt: skip
    print(r.stdout, r.stderr)
    assert r.returncode in (0, 3), r.stderr  # 3: outside the 10 % goal on this machine's load
    result = json.loads(out.read_text())
    assert [row["workload"] for row in result["rows"]] == [
        "prefill-heavy", "decode-heavy", "shared-prefix", "concurrent",
    ]  # fmt: skip
    for row in result["rows"]:
        for metric in ("ttft_p50_s", "tpot_mean_s"):
            ratio = row["sim"][metric] / row["real"][metric]
            assert math.isfinite(ratio)
            # Within a factor of three even on a loaded 2-core machine, where the real
            # engine's own timings swing by half from one minute to the next (the 10 % goal
            # is measured by benchmarks/sim_fidelity.py on a quiet machine).
            assert 1 / 3 < ratio < 3, (row["workload"], metric, ratio)
    # five seconds of the workloads went to the server first, and nothing of them was kept
    assert result["warmup"]["workloads"] >= 1 and "warm-up: prefill-heavy" in r.stderr
    assert len(result["per_pass"]["real"]) == 2
    # each pass's pace against the other: with two passes the ratios mirror about 1
    real_pace = result["pace"]["real"]
    assert len(real_pace) == 2 and sum(real_pace) == pytest.approx(2.0)
    assert "the real server's pace by pass:" in r.stdout
    assert math.isfinite(result["median_error"])
    # each TTFT percentile's shift on both sides; the ones named between bands are told
    for row in result["rows"]:
        assert set(row["shift"]) == {"ttft_p50_s", "ttft_p90_s"}
        assert all(0 <= v < 2 for side in row["shift"].values() for v in side.values())
    for e in result["band_edges"]:
        assert f"note: {e['workload']} TTFT {e['metric'][5:8]} lies between bands" in r.stdout
