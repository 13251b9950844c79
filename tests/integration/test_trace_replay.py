"""ShareGPT files and Mooncake traces replayed end to end: on the embedded simulator (calls
recorded, shared Mooncake blocks hit its prefix cache, rows sent at their timestamps) and on a
recording server (what is sent), and `agentload dataset` / `replay` on the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
from typer.testing import CliRunner

from agentload.cli import app
from agentload.config import build_config
from agentload.results.jsonl import load_jsonl
from agentload.runner import execute_run
from agentload.sim.tokenizer import IM_START, split_pieces
from agentload.workloads.dataset import index_dataset
from recording_server import RecordingServer

DATA = Path(__file__).resolve().parents[1] / "data"
SHAREGPT = DATA / "sharegpt_sample.json"
MOONCAKE = DATA / "mooncake_sample.jsonl"
SIM_BLOCK = 16  # the `instant` profile's KV block size
# Simulator tokens before a user message's text: "<|im_start|>", "user", "\n" (which takes
# the text's leading space).
LEAD = len(split_pieces(f"{IM_START}user\n abc")) - 1
runner = CliRunner()


def _quiet(_msg: str) -> None:
    pass


def _cfg(out: Path, dataset: Path, base_url: str | None = None, **replay: Any) -> Any:
    data: dict[str, Any] = {
        "out": str(out),
        "kind": "replay",
        "replay": {"dataset": str(dataset), **replay},
        "load": {"concurrency": 8},
        "metrics": {"enabled": False},
        "report": False,
    }
    if base_url is None:
        data["sim"] = {"profile": "instant"}
    else:
        data["endpoints"] = {"agent": {"base_url": base_url, "model": "m", "stream": False}}
        data["preflight"] = False
    return build_config(data=data)


async def _run(cfg: Any) -> Any:
    return await execute_run(cfg, progress="off", say=_quiet, install_signals=False)


def _shared_prefix(rows: list[dict[str, Any]], k: int) -> int:
    """Tokens row k shares with the longest matching earlier row: blocks of the same id
    hold the same words, so two prompts agree token by token while their ids agree (a
    partial last block is the start of its block)."""

    def tokens(r: dict[str, Any]) -> list[tuple[int, int]]:
        n = r["input_length"]
        return [(h, j) for b, h in enumerate(r["hash_ids"]) for j in range(min(512, n - b * 512))]

    mine = tokens(rows[k])
    best = 0
    for earlier in rows[:k]:
        theirs = tokens(earlier)
        n = 0
        while n < min(len(mine), len(theirs)) and mine[n] == theirs[n]:
            n += 1
        best = max(best, n)
    return best


async def test_mooncake_on_the_simulator(tmp_path: Path) -> None:
    """Each row is one call of input_length prompt tokens and output_length output tokens,
    sent at its timestamp (here at half speed: --delay-scale 0.5); the blocks it shares with
    an earlier row are prefix-cache hits on the simulator, to its 16-token block."""
    out = tmp_path / "out"
    res = await _run(_cfg(out, MOONCAKE, delay_scale=0.5))
    assert res.exit_code == 0, res.stop_reason
    rows = [json.loads(line) for line in MOONCAKE.read_text().splitlines()]
    calls = {c["replay"]["conversation_id"]: c for c in load_jsonl(out / "calls.jsonl")}
    assert sorted(calls) == sorted(f"line-{n}" for n in range(1, 7))
    t0 = calls["line-1"]["replay"]["intended_send_ns"]
    template = calls["line-6"]["prompt_tokens"] - rows[5]["input_length"]  # chat markers
    assert 0 < template < 16
    for k, row in enumerate(rows):
        c = calls[f"line-{k + 1}"]
        assert c["status"] == "ok"
        assert c["prompt_tokens"] == row["input_length"] + template
        assert c["completion_tokens"] == row["output_length"]
        # due at the recorded time, scaled; sent within a generous lag of it
        assert c["replay"]["intended_send_ns"] - t0 == round(row["timestamp"] / 1e3 * 0.5 * 1e9)
        assert 0 <= c["replay"]["send_lag_s"] < 0.25
        shared = _shared_prefix(rows, k)
        expected = (LEAD + shared) // SIM_BLOCK * SIM_BLOCK if shared else 0
        assert c["cached_tokens"] == expected, (k, c["cached_tokens"], expected)
    # rows 3, 4 and 5 reuse 1024, 512 and 700 tokens of earlier rows: the full 16-token
    # blocks of the simulator within the shared part (the 3 chat-marker tokens before it)
    assert [calls[f"line-{n}"]["cached_tokens"] for n in (3, 4, 5)] == [1024, 512, 688]
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert summary["replay"]["turns_sent"] == 6
    meta = orjson.loads((out / "run.json").read_bytes())
    assert meta["dataset"]["format"] == "mooncake"
    assert meta["trace"] == {
        "block_tokens": 512,
        "prompt_tokens": "estimated",
        "tokenizer": None,
        "timestamps": "x0.5",
    }


async def test_sharegpt_on_the_simulator(tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = await _run(_cfg(out, SHAREGPT))
    assert res.exit_code == 0, res.stop_reason
    calls = load_jsonl(out / "calls.jsonl")
    assert sorted((c["replay"]["conversation_id"], c["turn"]) for c in calls) == [
        ("EKPbCzS_0", 0),
        ("QWJhYvA_0", 0),
        ("QWJhYvA_0", 1),
        ("hRPPgZT_13", 0),
        ("i6IyJda_0", 0),
    ]
    assert all(c["status"] == "ok" for c in calls)
    # on the simulator the output length is the recorded answer's
    for c in calls:
        assert c["completion_tokens"] == c["replay"]["recorded_output_tokens"]
    sessions = load_jsonl(out / "sessions.jsonl")
    assert {s["termination"] for s in sessions} == {"completed"}
    run = orjson.loads((out / "summary.json").read_bytes())
    assert run["replay"]["conversations"] == 4
    meta = orjson.loads((out / "run.json").read_bytes())
    assert meta["trace"] == {"skipped": {"empty": 1, "leading_answers_dropped": 1}}


async def test_sharegpt_sends_the_recorded_history(tmp_path: Path) -> None:
    async with RecordingServer() as srv:
        res = await _run(_cfg(tmp_path / "out", SHAREGPT, srv.base_url))
    assert res.exit_code == 0, res.stop_reason
    got = srv.by_session()
    hamlet = got["QWJhYvA_0"]
    conv = index_dataset(SHAREGPT).load("QWJhYvA_0")
    assert hamlet[1]["messages"] == [
        conv.turns[0].messages[0],
        conv.turns[0].answer,
        {"role": "user", "content": "Now in one sentence, for a child."},
    ]
    assert got["i6IyJda_0"][0]["messages"][0] == {
        "role": "system",
        "content": "You are a terse Python expert.",
    }


def test_dataset_commands_on_trace_files(tmp_path: Path) -> None:
    r = runner.invoke(app, ["dataset", "validate", str(MOONCAKE)])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == (
        "mooncake_sample.jsonl: valid mooncake dataset, 6 conversations, 6 client turns over 1.2 s"
    )
    r = runner.invoke(app, ["dataset", "validate", str(SHAREGPT), "--json"])
    assert orjson.loads(r.stdout)["skipped"] == {"empty": 1, "leading_answers_dropped": 1}
    r = runner.invoke(app, ["dataset", "validate", str(MOONCAKE), "--block-tokens", "256"])
    assert r.exit_code == 1
    assert r.stderr.strip() == (
        "agentload: error: mooncake_sample.jsonl:1: field 'hash_ids': 3 blocks, but "
        "input_length 1200 needs 5 blocks of 256 tokens (is the block size "
        "--trace-block-tokens right?)"
    )
    bad = tmp_path / "bad.json"
    bad.write_text('[\n  {"id": "a", "conversations": [{"from": "human", "value": 1}]}\n]\n')
    r = runner.invoke(app, ["dataset", "validate", str(bad)])
    assert r.exit_code == 1
    assert "bad.json:2: field 'conversations[0].value': expected a string" in r.stderr
    r = runner.invoke(app, ["dataset", "stats", str(MOONCAKE)], env={"COLUMNS": "160"})
    assert r.exit_code == 0, r.output
    assert "ISL tokens (recorded)" in r.stdout and "inter-arrival s" in r.stdout
    assert "13 blocks of 512 tokens, 8 unique, 38.5% reused" in r.stdout
    flat = tmp_path / "flat.jsonl"
    r = runner.invoke(app, ["dataset", "convert", str(SHAREGPT), str(flat), "--verify"])
    assert r.exit_code == 0, r.output
    assert "verified: 5 client turns of 4 conversations match" in r.stdout


def test_replay_command_with_trace_flags(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["replay", str(MOONCAKE), "--format", "mooncake", "--trace-block-tokens", "512"]
    args += ["--no-delays", "--sim-profile", "instant", "--out", str(out), "--no-report"]
    r = runner.invoke(app, [*args, "--no-metrics", "--json", "-q"])
    assert r.exit_code == 0, r.output
    assert orjson.loads(r.stdout)["replay"]["turns_sent"] == 6
    assert "trace_block_tokens: 512" in (out / "config.yaml").read_text()
    r = runner.invoke(app, ["replay", str(MOONCAKE), "--trace-block-tokens", "0", "-q"])
    assert r.exit_code == 2 and "trace_block_tokens" in r.stderr
    r = runner.invoke(app, ["replay", str(MOONCAKE), "--trace-block-tokens", "100", "-q"])
    assert r.exit_code == 2 and "mooncake_sample.jsonl:1: field 'hash_ids'" in r.stderr
    r = runner.invoke(app, ["replay", str(MOONCAKE), "--trace-tokenizer", str(MOONCAKE), "-q"])
    assert r.exit_code == 2
    assert "--trace-tokenizer " in r.stderr and "cannot load the tokenizer" in r.stderr
    missing = str(tmp_path / "none.json")
    r = runner.invoke(app, ["replay", str(MOONCAKE), "--trace-tokenizer", missing, "-q"])
    assert r.exit_code == 2 and f"--trace-tokenizer: no such file: {missing}" in r.stderr
