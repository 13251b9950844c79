"""`agentload dataset validate|stats|convert` and `agentload replay` on the command line."""

from __future__ import annotations

from pathlib import Path

import orjson
from typer.testing import CliRunner

from agentload.cli import app
from agentload.results.jsonl import load_jsonl
from agentload.workloads.dataset import index_dataset
from agentload.workloads.dataset_tools import requests
from replay_fixture import write_dataset

runner = CliRunner()


def test_validate_ok_and_invalid(tmp_path: Path) -> None:
    ds = write_dataset(tmp_path / "d.jsonl")
    r = runner.invoke(app, ["dataset", "validate", str(ds), "--json"])
    assert r.exit_code == 0, r.output
    doc = orjson.loads(r.stdout)
    assert doc == {
        "valid": True,
        "format": "mlperf",
        "conversations": 24,
        "client_turns": 60,
        "without_system_prompt": 0,
    }
    bad = tmp_path / "bad.jsonl"
    lines = ds.read_bytes().splitlines()
    bad.write_bytes(b"\n".join([lines[0], lines[1], lines[3]]) + b"\n")
    r = runner.invoke(app, ["dataset", "validate", str(bad)])
    assert r.exit_code == 1
    assert "bad.jsonl:3: field 'turn'" in r.stderr
    assert "Traceback" not in r.output
    r = runner.invoke(app, ["dataset", "validate", str(ds), "--format", "csv"])
    assert r.exit_code == 2


def test_stats_counts_and_distributions(tmp_path: Path) -> None:
    ds = write_dataset(tmp_path / "d.jsonl")
    r = runner.invoke(app, ["dataset", "stats", str(ds), "--json"])
    assert r.exit_code == 0, r.output
    doc = orjson.loads(r.stdout)
    assert doc["conversations"] == 24 and doc["client_turns"] == 60
    # kinds cycle chat / one call / two parallel calls / two rounds of one call
    assert doc["tool_calls"] == 6 * 1 + 6 * 2 + 6 * 2
    assert doc["parallel_tool_messages"] == 6
    assert doc["answers_with_reasoning"] == 12
    assert doc["system_prompts"] == 3
    assert doc["tokens_estimated"] is True
    isl, osl = doc["isl_tokens"], doc["osl_tokens"]
    assert isl["count"] == 60 and osl["count"] == 60
    assert 0 < isl["p50"] <= isl["p90"] <= isl["max"]
    assert osl["min"] >= 1
    r = runner.invoke(app, ["dataset", "stats", str(ds)], env={"COLUMNS": "160"})
    assert r.exit_code == 0 and "ISL tokens (estimated)" in r.stdout


def test_convert_openai_and_snapshots_with_verify(tmp_path: Path) -> None:
    ds = write_dataset(tmp_path / "d.jsonl")
    index = index_dataset(ds)
    oai = tmp_path / "oai.jsonl"
    snaps = tmp_path / "snaps.jsonl"
    with oai.open("wb") as f, snaps.open("wb") as g:
        for conv in index:
            msgs = conv.messages()
            f.write(orjson.dumps({"id": conv.id, "messages": msgs, "tools": conv.tools}) + b"\n")
            for k in range(2, len(msgs) + 1):  # a snapshot after every message
                g.write(
                    orjson.dumps(
                        {"conversation_id": conv.id, "messages": msgs[:k], "tools": conv.tools}
                    )
                    + b"\n"
                )
    for src, fmt in ((oai, "auto"), (snaps, "snapshots")):
        out = tmp_path / f"{src.stem}-flat.jsonl"
        r = runner.invoke(
            app, ["dataset", "convert", str(src), str(out), "--from", fmt, "--verify", "--json"]
        )
        assert r.exit_code == 0, r.output
        doc = orjson.loads(r.stdout)
        assert doc["verified"] == {"conversations": 24, "client_turns": 60}
        back = index_dataset(out)
        for cid in ("conv-002", "conv-003"):
            assert list(requests(back.load(cid))) == list(requests(index.load(cid)))
    # a snapshot that rewrites history is refused, naming its line
    lines = snaps.read_bytes().splitlines()
    first = orjson.loads(lines[1])
    first["messages"][1]["content"] = "rewritten"
    lines[1] = orjson.dumps(first)
    snaps.write_bytes(b"\n".join(lines) + b"\n")
    r = runner.invoke(
        app, ["dataset", "convert", str(snaps), str(tmp_path / "x.jsonl"), "--from", "snapshots"]
    )
    assert r.exit_code == 1
    assert "snaps.jsonl:2: field 'messages'" in r.stderr


def test_replay_command_on_the_simulator(tmp_path: Path) -> None:
    ds = write_dataset(tmp_path / "d.jsonl", n=6)
    out = tmp_path / "out"
    r = runner.invoke(
        app,
        [
            "replay",
            str(ds),
            "-c",
            "3",
            "--repeat",
            "2",
            "--salt",
            "--no-delays",
            "--sim-profile",
            "instant",
            "--out",
            str(out),
            "--no-report",
            "--no-metrics",
            "--json",
            "-q",
        ],
    )
    assert r.exit_code == 0, r.output
    summary = orjson.loads(r.stdout)
    assert summary["counts"]["sessions"] == 12
    sessions = load_jsonl(out / "sessions.jsonl")
    assert sorted({(s["task_id"], s["trial"]) for s in sessions}) == sorted(
        (f"conv-{i:03d}", k) for i in range(6) for k in (0, 1)
    )
    cfg = (out / "config.yaml").read_text()
    assert "kind: replay" in cfg and "salt: true" in cfg and "delay_scale: 0.0" in cfg
    assert summary["replay"]["conversations"] == 12


def test_replay_command_errors(tmp_path: Path) -> None:
    r = runner.invoke(app, ["replay", str(tmp_path / "missing.jsonl"), "-q"])
    assert r.exit_code == 2
    assert "no such dataset file" in r.stderr and "Traceback" not in r.output
    r = runner.invoke(app, ["replay", "-q"])
    assert r.exit_code == 2 and "DATASET" in r.stderr
    ds = write_dataset(tmp_path / "d.jsonl", n=2)
    r = runner.invoke(app, ["replay", str(ds), "--history", "both", "-q"])
    assert r.exit_code == 2 and "replay.history" in r.stderr


def test_stats_exact_with_a_tokenizer(tmp_path: Path) -> None:
    """A tokenizer.json gives exact counts (here one token per whitespace-separated word)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    tok = Tokenizer(WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tok.pre_tokenizer = WhitespaceSplit()
    tok_path = tmp_path / "tokenizer.json"
    tok.save(str(tok_path))
    rows = [
        {"conversation_id": "a", "turn": 1, "role": "user", "content": "one two three"},
        {"conversation_id": "a", "turn": 2, "role": "assistant", "content": "four five"},
        {"conversation_id": "a", "turn": 3, "role": "user", "content": "six"},
        {"conversation_id": "a", "turn": 4, "role": "assistant", "content": "seven eight nine"},
    ]
    ds = tmp_path / "d.jsonl"
    ds.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    r = runner.invoke(app, ["dataset", "stats", str(ds), "--tokenizer", str(tok_path), "--json"])
    assert r.exit_code == 0, r.output
    doc = orjson.loads(r.stdout)
    assert doc["tokens_estimated"] is False
    assert doc["osl_tokens"]["min"] == 2 and doc["osl_tokens"]["max"] == 3
    # ISL: 3 (+4 per message); then 3 + 2 + 1 words and three messages' overhead
    assert doc["isl_tokens"]["min"] == 3 + 4 and doc["isl_tokens"]["max"] == 6 + 3 * 4
    r = runner.invoke(app, ["dataset", "stats", str(ds), "--tokenizer", str(tmp_path / "no")])
    assert r.exit_code == 1 and "cannot load the tokenizer" in r.stderr
