"""Public trace files for replay: the streamed ShareGPT array, ShareGPT and Mooncake checks
(file:line and field), the prompts built from Mooncake's hash ids, stats and conversion."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import orjson
import pytest

from agentload.client.tokens import HeuristicCounter
from agentload.sim.tokenizer import split_pieces
from agentload.workloads import traces
from agentload.workloads.dataset import DatasetError, detect_format, index_dataset
from agentload.workloads.dataset_tools import convert, dataset_stats, requests, verify
from agentload.workloads.traces import BlockText, json_array_items

DATA = Path(__file__).resolve().parents[1] / "data"
SHAREGPT = DATA / "sharegpt_sample.json"
MOONCAKE = DATA / "mooncake_sample.jsonl"


def _tricky_array(n: int) -> bytes:
    """Elements whose strings hold what a scanner could mistake for structure."""
    items = [
        {
            "id": f"c{i}",
            "conversations": [
                {"from": "human", "value": f'q{i} "quoted" \\ ] }} {{ [ , ü \\"' + "x" * i},
                {"from": "gpt", "value": "\\" * (i % 5) + "end"},
            ],
        }
        for i in range(n)
    ]
    return json.dumps(items, indent=2, ensure_ascii=False).encode()


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64, 1 << 20])
def test_array_elements_at_any_chunk_size(chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every element's bytes, offsets and first line are right wherever a read ends."""
    data = _tricky_array(40)
    monkeypatch.setattr(traces, "CHUNK", chunk)
    items = list(json_array_items(Path("a.json"), io.BytesIO(data)))
    assert len(items) == 40
    for k, (line, start, end, raw) in enumerate(items):
        assert data[start:end] == raw
        assert json.loads(raw)["id"] == f"c{k}"
        assert line == data[:start].count(b"\n") + 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b'[\n{"a": 1}\n{"b": 2}\n]', "a.json:2: expected ',' between conversations"),
        (b'[\n{"a": 1},\n]', "a.json:2: expected ',' between conversations, found ','"),
        (b'[\n{"a": "x\n', "a.json:2: unterminated string"),
        (b'[\n{"a": 1},\n"text"\n]', "a.json:3: expected a conversation object"),
        (b'[\n{"a": 1}\n]\n{"b": 2}', "a.json:3: data after the end of the JSON array"),
        (b'[\n{"a": [1, 2}\n', "a.json:3: the JSON array ends early"),
        (b'{"a": 1}', "a.json:1: expected a JSON array of conversations"),
    ],
)
def test_array_errors_name_the_line(text: bytes, message: str) -> None:
    with pytest.raises(DatasetError) as e:
        list(json_array_items(Path("a.json"), io.BytesIO(text)))
    assert str(e.value).startswith(message), str(e.value)


def test_detects_the_trace_formats(tmp_path: Path) -> None:
    assert detect_format(SHAREGPT) == "sharegpt"
    assert detect_format(MOONCAKE) == "mooncake"
    jl = tmp_path / "sg.jsonl"
    jl.write_text('{"id": "a", "conversations": [{"from": "human", "value": "hi"}]}\n')
    assert detect_format(jl) == "sharegpt"


def test_sharegpt_sample_reads_with_its_quirks_counted() -> None:
    ds = index_dataset(SHAREGPT, keep_bytes=0)  # spans only: each load parses its element
    assert ds.format == "sharegpt"
    assert ds.ids == ["QWJhYvA_0", "i6IyJda_0", "hRPPgZT_13", "EKPbCzS_0"]
    assert ds.client_turns == 5
    assert ds.skipped == {"empty": 1, "leading_answers_dropped": 1}
    hamlet = ds.load("QWJhYvA_0")
    assert [t.messages[0]["content"][:9] for t in hamlet.turns] == ["Summarize", "Now in on"]
    assert hamlet.turns[1].answer == {
        "role": "assistant",
        "content": "A sad prince tries to make things right after his father dies, but it goes "
        "very wrong.",
    }
    assert ds.load("i6IyJda_0").system == "You are a terse Python expert."
    sunset = ds.load("hRPPgZT_13")  # its leading answer dropped, two answers joined
    assert len(sunset.turns) == 1
    assert sunset.turns[0].answer is not None
    assert sunset.turns[0].answer["content"] == (
        "At sunset light crosses more air,\nso blue is scattered away and reds remain.\\n"
    )
    haiku = ds.load("EKPbCzS_0")  # the messages variant
    assert haiku.turns[0].messages == [{"role": "user", "content": "Write a haiku about caches."}]


def test_sharegpt_jsonl_and_duplicate_ids(tmp_path: Path) -> None:
    p = tmp_path / "sg.jsonl"
    conv = [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]
    p.write_text("".join(json.dumps({"id": "x", "conversations": conv}) + "\n" for _ in range(3)))
    ds = index_dataset(p)
    assert ds.ids == ["x", "x#2", "x#3"]
    assert ds.skipped == {"duplicate_ids": 2}
    assert ds.load("x#3").turns[0].answer == {"role": "assistant", "content": "hello"}


@pytest.mark.parametrize(
    ("element", "message"),
    [
        (
            {"id": "a", "conversations": [{"from": "human", "value": "q"}, {"from": "bot"}]},
            "field 'conversations[1].value': expected a string, got None",
        ),
        (
            {"id": "a", "conversations": [{"from": "robot", "value": "q"}]},
            "field 'conversations[0].from': expected human, gpt or system",
        ),
        (
            {"id": "a", "conversations": [{"from": "human", "value": 3}]},
            "field 'conversations[0].value': expected a string, got 3",
        ),
        ({"id": "a", "conversations": "hi"}, "field 'conversations': expected a list"),
        ({"id": "a"}, "field 'conversations': missing"),
        ({"id": "", "conversations": []}, "field 'id': id '' is empty or not printable"),
        (
            {
                "id": "a",
                "conversations": [
                    {"from": "human", "value": "q"},
                    {"from": "system", "value": "s"},
                ],
            },
            "field 'conversations[1].from': a system message comes first only",
        ),
    ],
)
def test_sharegpt_errors_name_file_line_and_field(
    tmp_path: Path, element: dict[str, object], message: str
) -> None:
    good = {"id": "ok", "conversations": [{"from": "human", "value": "hi"}]}
    p = tmp_path / "sg.json"
    p.write_text(json.dumps([good, element], indent=1))
    # The line the bad element starts on in the pretty-printed array.
    line = p.read_text().splitlines().index(" {", 2) + 1
    assert line > 2
    with pytest.raises(DatasetError) as e:
        index_dataset(p)
    assert str(e.value).startswith(f"sg.json:{line}: {message}"), str(e.value)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (
            {"timestamp": 0, "input_length": 1200, "output_length": 5, "hash_ids": [0, 1]},
            "field 'hash_ids': 2 blocks, but input_length 1200 needs 3 blocks of 512 tokens",
        ),
        (
            {"timestamp": 0, "input_length": 10, "output_length": 5},
            "field 'hash_ids': missing",
        ),
        (
            {"timestamp": -1, "input_length": 10, "output_length": 5, "hash_ids": [0]},
            "field 'timestamp': expected a number >= 0, got -1",
        ),
        (
            {"timestamp": 0, "input_length": True, "output_length": 5, "hash_ids": [0]},
            "field 'input_length': expected an integer >= 0, got True",
        ),
        (
            {"timestamp": 0, "input_length": 10, "output_length": 0, "hash_ids": [0]},
            "field 'output_length': expected at least 1 token",
        ),
        (
            {"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": ["a"]},
            "field 'hash_ids[0]': expected an integer >= 0, got 'a'",
        ),
    ],
)
def test_mooncake_errors_name_file_line_and_field(
    tmp_path: Path, row: dict[str, object], message: str
) -> None:
    p = tmp_path / "trace.jsonl"
    p.write_bytes(MOONCAKE.read_bytes() + json.dumps(row).encode() + b"\n")
    with pytest.raises(DatasetError) as e:
        index_dataset(p, "mooncake")
    assert str(e.value).startswith(f"trace.jsonl:7: {message}"), str(e.value)


def test_mooncake_prompts_share_exactly_their_blocks() -> None:
    """Estimated prompts: input_length tokens by the heuristic and by the simulator's
    tokenizer; the same hash id gives the same text, a partial last block is its prefix."""
    blocks = BlockText()
    ds = index_dataset(MOONCAKE)
    assert [s.arrival_s for s in ds.spans] == [0.0, 0.0, 0.4, 0.8, 0.8, 1.2]
    rows = [json.loads(line) for line in MOONCAKE.read_text().splitlines()]
    prompts = []
    for span, row in zip(ds.spans, rows, strict=True):
        conv = ds.load(span.id)
        (turn,) = conv.turns
        assert turn.max_tokens == row["output_length"] and turn.answer is None
        text = turn.messages[0]["content"]
        assert text == blocks.prompt(row["hash_ids"], row["input_length"])
        assert HeuristicCounter().count(text) == row["input_length"]
        assert len(split_pieces(text)) == row["input_length"]
        prompts.append(text)
    block0 = "".join(blocks.block(0))
    assert len(block0) == 4 * 512
    assert prompts[0].startswith(block0 + "".join(blocks.block(1)))
    assert prompts[2].startswith(block0 + "".join(blocks.block(1)))  # ids 0, 1 shared
    assert prompts[3].startswith(block0) and prompts[3][2048:] != prompts[0][2048:4400]
    # [3, 4] cut at 700 tokens is the start of [3, 4] at 1024
    assert prompts[4].startswith(prompts[1]) and len(prompts[4]) == 4 * 1024
    assert BlockText().block(6) == blocks.block(6) != blocks.block(7)


def test_mooncake_prompts_exact_with_a_tokenizer(tmp_path: Path) -> None:
    """With a tokenizer.json a prompt encodes to exactly input_length tokens."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    words = [a + b + c for a in "bdkmst" for b in "aeiou" for c in "lnrx"] + ["and", "the"]
    vocab = {w: i for i, w in enumerate(["[UNK]", *words])}
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = WhitespaceSplit()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    blocks = BlockText(64, path)
    assert blocks.exact and len(blocks.words) == len(words)
    text = blocks.prompt([5, 9, 11], 150)
    assert len(tok.encode(text).ids) == 150
    assert "[UNK]" not in tok.encode(text).tokens
    ds = index_dataset(MOONCAKE, block_tokens=512, tokenizer=path)
    row = ds.load(ds.ids[2]).turns[0].messages[0]["content"]
    assert len(tok.encode(row).ids) == 1500
    with pytest.raises(DatasetError, match="cannot load the tokenizer"):
        BlockText(64, tmp_path / "missing.json")


def test_stats_numbers() -> None:
    doc = dataset_stats(MOONCAKE)
    assert (doc["format"], doc["conversations"], doc["client_turns"]) == ("mooncake", 6, 6)
    assert doc["isl_tokens"]["mean"] == (1200 + 700 + 1500 + 600 + 1024 + 100) / 6
    assert doc["osl_tokens"]["max"] == 30 and doc["osl_tokens"]["min"] == 3
    trace = doc["trace"]
    assert trace["duration_s"] == pytest.approx(1.2)
    assert trace["requests_per_s"] == pytest.approx(5 / 1.2)
    assert (trace["blocks"], trace["unique_blocks"]) == (13, 8)
    assert trace["reused_block_share"] == pytest.approx(5 / 13)
    assert trace["interarrival_s"]["count"] == 5
    doc = dataset_stats(SHAREGPT)
    assert (doc["conversations"], doc["client_turns"], doc["recorded_answers"]) == (4, 5, 5)
    assert doc["system_prompts"] == 1
    assert doc["skipped"] == {"empty": 1, "leading_answers_dropped": 1}
    assert doc["turns_per_conversation"]["max"] == 2 and doc["tokens_estimated"] is True


@pytest.mark.parametrize("src", [SHAREGPT, MOONCAKE])
def test_convert_round_trip(tmp_path: Path, src: Path) -> None:
    """The flat rows rebuild every request of the source, and read back the same."""
    out = tmp_path / "flat.jsonl"
    res = convert(src, out)
    assert verify(src, out) == ((4, 5) if src == SHAREGPT else (6, 6))
    flat = index_dataset(out)
    assert flat.format == "mlperf" and len(flat.spans) == res.conversations
    source = index_dataset(src)
    for cid in source.ids:
        assert list(requests(flat.load(cid))) == list(requests(source.load(cid)))
        a, b = source.load(cid).turns, flat.load(cid).turns
        assert [t.max_tokens for t in a] == [t.max_tokens for t in b]
    if src == MOONCAKE:
        rows = [orjson.loads(line) for line in out.read_bytes().splitlines()]
        assert [r["max_new_tokens"] for r in rows] == [20, 8, 12, 5, 3, 30]


def test_trace_arrival_times() -> None:
    """Rows are due at their timestamps since the first measured issue, scaled; a repeat
    one trace period later (span 1.2 s plus a mean gap of 0.24 s); none for warmup, with
    --no-delays or under --rate."""
    from agentload.config import build_config
    from agentload.scheduler.plan import WorkItem
    from agentload.workloads.replay import ReplayWorkload

    def workload(**kw: object) -> ReplayWorkload:
        load = kw.pop("load", {"concurrency": 2})
        data = {"kind": "replay", "replay": {"dataset": str(MOONCAKE), **kw}, "load": load}
        return ReplayWorkload(build_config(data=data))

    w = workload(delay_scale=2.0)
    assert w.units() == [f"line-{n}" for n in range(1, 7)]
    t0 = w.arrival_ns(WorkItem("line-1", 0, False, 0))
    assert t0 is not None
    assert w.arrival_ns(WorkItem("line-3", 0, False, 2)) == t0 + round(0.4 * 2 * 1e9)
    assert w.arrival_ns(WorkItem("line-6", 1, False, 11)) == t0 + round((1.2 + 1.44) * 2 * 1e9)
    assert w.arrival_ns(WorkItem("line-3", 0, True, 0)) is None
    assert workload(delay_scale=0.0).arrival_ns(WorkItem("line-3", 0, False, 2)) is None
    w = workload(load={"rate": 5.0})
    assert w.arrival_ns(WorkItem("line-3", 0, False, 2)) is None
    # a resumed run whose first item left is line-4 sends it at once, line-6 0.4 s later
    w = workload()
    before = time.perf_counter_ns()
    t4 = w.arrival_ns(WorkItem("line-4", 0, False, 3))
    assert t4 is not None and before <= t4 <= time.perf_counter_ns()
    assert w.arrival_ns(WorkItem("line-6", 0, False, 5)) == t4 + round(0.4 * 1e9)
