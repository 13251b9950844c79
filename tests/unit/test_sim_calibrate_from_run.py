"""`agentload sim calibrate --from RESULTS_DIR`: a fit from a finished run's calls.jsonl."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from agentload.calibration.fit import PARAMS, decode_features, ttft_features
from agentload.calibration.fromrun import calibrate_from_run
from agentload.cli import app
from agentload.sim.profiles import load_profile

TRUE = dict(
    zip(PARAMS, (0.012, 2.0e-6, 0.003, 4.0e-5, 0.0008, 3.0e-8, 9.0e-8, 0.0, 0.0, 0.0), strict=True),
)


def _t(x: list[float]) -> float:
    return sum(c * TRUE[p] for c, p in zip(x, PARAMS, strict=True))


def _write_run(d: Path) -> None:
    """Calls one after another (each alone), of several prompt lengths, some cache hits."""
    d.mkdir()
    rows = []
    t = 1_000_000_000
    for i, (p, cached) in enumerate(
        [(300, 0), (900, 0), (2000, 0), (2000, 1920), (4000, 0), (4000, 3968), (6000, 0)] * 2
    ):
        ttft = _t(ttft_features(p, cached, 8192))
        n = 40
        tpot = _t(decode_features(1, p + n / 2, p + n / 2))
        start = t
        first = start + int(ttft * 1e9)
        end = first + int(tpot * (n - 1) * 1e9)
        rows.append(
            {
                "call_id": f"c{i}",
                "status": "ok",
                "stream": True,
                "start_ns": start,
                "first_token_ns": first,
                "end_ns": end,
                "ttft_s": ttft,
                "tpot_s": tpot,
                "prompt_tokens": p,
                "cached_tokens": cached,
                "completion_tokens": n,
                "token_chunks": n,
            }
        )
        t = end + 10_000_000
    rows.append({"call_id": "bad", "status": "error", "error_kind": "http_500"})
    (d / "calls.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    scrapes = [
        {"ttft_sum": 0.0, "ttft_count": 0, "queue_sum": 0.0, "queue_count": 0},
        {"ttft_sum": 1.4, "ttft_count": 14, "queue_sum": 0.014, "queue_count": 14},
    ]
    (d / "server_metrics.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in scrapes))


def test_from_run_fits_ttft_of_isolated_calls(tmp_path: Path) -> None:
    _write_run(tmp_path / "run")
    c = calibrate_from_run(tmp_path / "run", name="fromrun", base="tiny-cpu", budget=8192)
    q = c.fit.quality()
    assert q["ttft"]["observations"] >= 5
    assert q["ttft"]["max_abs_error"] < 0.01
    assert q["decode"]["max_abs_error"] < 0.05
    assert c.profile.prefill_attention_s == pytest.approx(TRUE["prefill_attention_s"], rel=0.05)
    assert c.profile.calibration is not None
    assert c.profile.calibration["calls"] == 14
    assert c.profile.calibration["server_mean_ttft_s"] == pytest.approx(0.1)
    assert c.profile.calibration["server_mean_queue_s"] == pytest.approx(0.001)


def test_from_run_cli(tmp_path: Path) -> None:
    _write_run(tmp_path / "run")
    out = tmp_path / "p.yaml"
    r = CliRunner().invoke(
        app, ["sim", "calibrate", "--from", str(tmp_path / "run"), "-o", str(out)]
    )
    assert r.exit_code == 0, r.output
    assert load_profile(str(out)).calibrated


def test_from_run_bad_line_names_it(tmp_path: Path) -> None:
    d = tmp_path / "run"
    d.mkdir()
    (d / "calls.jsonl").write_text('{"call_id": "a"}\nnot json\n{"call_id": "b"}\n')
    r = CliRunner().invoke(app, ["sim", "calibrate", "--from", str(d)])
    assert r.exit_code == 2
    assert "calls.jsonl:2: not JSON" in r.output
    # a torn last line (a run killed mid-write) is skipped: the fit goes on to judge the rest
    (d / "calls.jsonl").write_text('{"call_id": "a"}\n{"call_id": "b", "sta')
    r = CliRunner().invoke(app, ["sim", "calibrate", "--from", str(d)])
    assert r.exit_code == 2
    assert "not JSON" not in r.output and "a fit needs more" in r.output
    (d / "calls.jsonl").write_text('{"call_id": "a"}\n')
    r = CliRunner().invoke(app, ["sim", "calibrate", "--from", str(d)])
    assert r.exit_code == 2
    assert "a fit needs more" in r.output
