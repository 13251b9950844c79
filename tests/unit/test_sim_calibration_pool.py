"""Kept probes: `ProbeResult` to JSON and back, several probes pooled into one, and the errors
`sim calibrate --pool` gives for files it cannot pool."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from agentload.calibration.calibrate import (
    PROBE_FORMAT,
    ServerInfo,
    pool,
    probe_path,
    read_probe,
    write_probe,
)
from agentload.calibration.fit import decode_features, ttft_features
from agentload.calibration.probe import ProbeResult, pooled

INFO = ServerInfo("vllm", "0.32.0", "tiny", 16384, 128, 4096, False)


COLD = ttft_features(128, 0, 2048)
LONG = ttft_features(1024, 0, 2048)


def _step(k: int) -> list[float]:
    return decode_features(1, 256.0 + k, 256.0 + k)


def _result(ttfts: list[float], steps: list[float]) -> ProbeResult:
    """A probe of two TTFT patterns and one decode pattern, a sample of each per round."""
    r = ProbeResult(rounds=len(ttfts), requests=3 * len(ttfts))
    r.samples[("ttft", "cold 128")] = [(y, COLD, k) for k, y in enumerate(ttfts)]
    r.samples[("ttft", "cold 1024")] = [(8 * y, LONG, k) for k, y in enumerate(ttfts)]
    r.samples[("decode", "batch 1 context 256")] = [(y, _step(k), k) for k, y in enumerate(steps)]
    r.chunks = {1: [1, 1, 2]}
    r.first_chunks = [(1, 32)]
    r.idle = [0.002]
    r.busy = [(0.003, 0.007, 64)]
    r.summarise()
    return r


def _obs(r: ProbeResult) -> dict[tuple[str, str], tuple[float, list[float], int]]:
    return {(o.kind, o.label): (o.y, o.x, o.n) for o in r.obs}


def test_a_probe_result_survives_json() -> None:
    r = _result([0.010, 0.014, 0.011], [0.004, 0.005, 0.0045])
    back = ProbeResult.from_dict(orjson.loads(orjson.dumps(r.as_dict())))
    assert _obs(back) == _obs(r)
    assert back.pace == r.pace and len(back.pace) == 3
    assert back.chunking == r.chunking == {1: pytest.approx(4 / 3)}
    assert back.held == r.held == {1: pytest.approx(1 / 3)}
    assert (back.first_chunks, back.idle, back.busy) == (r.first_chunks, r.idle, r.busy)
    assert (back.rounds, back.requests) == (3, 9)


def test_pooled_probes_take_each_patterns_median_over_all_their_samples() -> None:
    a = _result([0.010, 0.030], [0.004, 0.006])
    b = _result([0.020], [0.005])
    p = pooled([a, b])
    obs = _obs(p)
    # TTFT: the median sample of 10, 30 and 20 ms; decode: the median step, features averaged
    assert obs[("ttft", "cold 128")] == (0.020, COLD, 3)
    y, x, n = obs[("decode", "batch 1 context 256")]
    assert (y, n) == (0.005, 3)
    assert x == pytest.approx(decode_features(1, (256 + 257 + 256) / 3, (256 + 257 + 256) / 3))
    # b's round counts after a's two: three rounds, each judged against the other two
    assert p.rounds == 3 and p.requests == 9
    assert p.pace == pytest.approx([0.5, 1.5, 1.0])
    assert p.busy == a.busy + b.busy and p.idle == [0.002, 0.002]
    assert p.chunks == {1: [1, 1, 2, 1, 1, 2]}


def test_a_pattern_only_one_probe_has_still_counts() -> None:
    a = _result([0.010], [0.004])
    b = ProbeResult(rounds=1, requests=1)
    b.samples[("ttft", "cold 8192")] = [(0.9, ttft_features(8192, 0, 2048), 0)]
    b.summarise()
    assert set(_obs(pooled([a, b]))) == {
        ("ttft", "cold 128"),
        ("ttft", "cold 1024"),
        ("decode", "batch 1 context 256"),
        ("ttft", "cold 8192"),
    }


def _keep(path: Path, clock: str = "model", budget: int = 2048, **server: Any) -> Path:
    info = ServerInfo(**{**INFO.__dict__, **server})
    extra = {"created": "2026-11-25T00:00:00+00:00", "clock": clock,
             "probe": {"max_num_batched_tokens": budget, "max_num_seqs": 96, "seconds": 10.0,
                       "idle_pause_s": 5.0},
             "host": {}}  # fmt: skip
    write_probe(path, info, extra, _result([0.010, 0.012], [0.004, 0.0042]))
    return path


def test_a_kept_probe_reads_back(tmp_path: Path) -> None:
    assert probe_path(tmp_path / "my.yaml") == tmp_path / "my.probe.json"
    saved = read_probe(_keep(tmp_path / "a.probe.json"))
    assert saved.info == INFO
    assert saved.extra["clock"] == "model"
    assert orjson.loads((tmp_path / "a.probe.json").read_bytes())["format"] == PROBE_FORMAT


NO_LABEL = {
    "format": PROBE_FORMAT,
    "server": {"engine": "v", "model": "m"},
    "calibration": {"clock": "wall", "probe": {"max_num_batched_tokens": 2048, "idle_pause_s": 5}},
    "result": {"rounds": 1, "requests": 1, "samples": [{"kind": "ttft", "samples": []}],
               "chunks": {}, "first_chunks": [], "idle": [], "busy": []},
}  # fmt: skip


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"{not json", "not JSON"),
        (b'{"rounds": 1}', "not a probe kept by `agentload sim calibrate`"),
        (orjson.dumps({"format": PROBE_FORMAT, "server": {"engine": "vllm"}}), "'model'"),
        (orjson.dumps(NO_LABEL), "'label'"),
        (
            orjson.dumps({**NO_LABEL, "calibration": {"clock": "wall", "probe": {}}}),
            "calibration.probe.max_num_batched_tokens",
        ),
    ],
)
def test_a_file_that_is_not_a_kept_probe_is_named(
    tmp_path: Path, content: bytes, said: str
) -> None:
    bad = tmp_path / "bad.probe.json"
    bad.write_bytes(content)
    with pytest.raises(ValueError) as e:
        read_probe(bad)
    assert str(e.value).startswith(f"{bad}: ") and said in str(e.value)


def test_probes_that_do_not_line_up_are_refused(tmp_path: Path) -> None:
    a = _keep(tmp_path / "a.json")
    with pytest.raises(ValueError, match="different token budgets per step \\(2048, 8192\\)"):
        asyncio.run(pool([a, _keep(tmp_path / "b.json", budget=8192)], name="p"))
    with pytest.raises(ValueError, match="model clock and some on the wall clock"):
        asyncio.run(pool([a, _keep(tmp_path / "c.json", clock="wall")], name="p"))
    with pytest.raises(ValueError, match="different KV block sizes"):
        asyncio.run(pool([a, _keep(tmp_path / "d.json", block_size=16)], name="p"))


def test_pooling_names_each_probe_and_different_servers(tmp_path: Path) -> None:
    a = _keep(tmp_path / "a.probe.json")
    b = _keep(tmp_path / "b.probe.json", version="0.33.0")
    lines: list[str] = []
    c = asyncio.run(pool([a, b], name="both", say=lines.append))
    cal = c.profile.calibration or {}
    assert [q["file"] for q in cal["pooled"]] == ["a.probe.json", "b.probe.json"]
    assert [q["server"] for q in cal["pooled"]] == [
        "vllm 0.32.0 serving tiny",
        "vllm 0.33.0 serving tiny",
    ]
    assert cal["probe"]["repeats"] == 4 and cal["probe"]["seconds"] == 20.0
    assert "2 probes pooled" in c.profile.description
    # the engine limits the first probe's calibration was given, unless given again
    assert c.profile.max_num_batched_tokens == 2048 and c.profile.max_num_seqs == 96
    again = asyncio.run(pool([a], name="one", max_num_seqs=8))
    assert again.profile.max_num_seqs == 8 and "pooled" not in again.profile.description
    assert any("the probes came from different servers" in line for line in lines), lines
    assert any("pooled 2 probes, 12 requests in 4 rounds" in line for line in lines), lines
