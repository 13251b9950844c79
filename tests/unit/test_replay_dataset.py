"""Reading and checking replay datasets: every validation error names file:line and field."""

from __future__ import annotations

import resource
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from agentload.workloads.dataset import DatasetError, detect_format, index_dataset
from replay_fixture import conversation_rows, write_dataset


def _write(path: Path, rows: list[Any]) -> Path:
    path.write_bytes(
        b"".join((r if isinstance(r, bytes) else orjson.dumps(r)) + b"\n" for r in rows)
    )
    return path


def test_fixture_reads_into_client_turns(tmp_path: Path) -> None:
    ds = index_dataset(write_dataset(tmp_path / "d.jsonl"))
    assert ds.format == "mlperf"
    assert len(ds.ids) == 24 and ds.ids[0] == "conv-000"
    conv = ds.load("conv-002")  # user, parallel tool calls, user again
    assert conv.system == "You are a helpful assistant."
    assert conv.tools is not None and len(conv.tools) == 2
    assert [t.row for t in conv.turns] == [1, 3, 5]
    assert [m["tool_call_id"] for m in conv.turns[1].messages] == [
        "call_conv-002_0",
        "call_conv-002_1",
    ]
    assert conv.turns[0].answer is not None
    assert [tc["function"]["name"] for tc in conv.turns[0].answer["tool_calls"]] == [
        "get_weather",
        "get_weather",
    ]
    assert conv.turns[1].answer["reasoning_content"] == "Compare."
    assert conv.turns[2].delay_s == pytest.approx(0.01)
    # per-row max tokens on the answer row
    assert ds.load("conv-003").turns[-1].max_tokens == 64
    # the whole conversation round-trips to messages: system + all rows
    assert len(conv.messages()) == 1 + len(conversation_rows(2)) + 1  # 2 results in one row
    # a dataset over the keep size is parsed again from its byte span: the same result
    reread = index_dataset(ds.path, keep_bytes=0)
    assert reread.load("conv-002") == conv and reread.load("conv-023") == ds.load("conv-023")


def _rows(i: int = 1) -> list[dict[str, Any]]:
    return conversation_rows(i)


def _bad(tmp_path: Path, rows: list[Any]) -> str:
    with pytest.raises(DatasetError) as e:
        index_dataset(_write(tmp_path / "bad.jsonl", rows))
    return str(e.value)


def test_error_not_json(tmp_path: Path) -> None:
    msg = _bad(tmp_path, [_rows()[0], b"{not json"])
    assert msg.startswith("bad.jsonl:2: not valid JSON")


def test_error_rows_not_contiguous(tmp_path: Path) -> None:
    a, b = _rows(0), _rows(1)
    msg = _bad(tmp_path, [*a[:2], *b, *a[2:]])
    assert msg.startswith(f"bad.jsonl:{len(b) + 3}: field 'conversation_id'")
    assert "not contiguous" in msg and "line 1" in msg


def test_error_turn_gap(tmp_path: Path) -> None:
    rows = _rows(0)
    rows[2]["turn"] = 4
    msg = _bad(tmp_path, rows)
    assert msg.startswith("bad.jsonl:3: field 'turn'") and "expected turn 3, got 4" in msg


def test_error_turn_not_starting_at_one(tmp_path: Path) -> None:
    rows = _rows(0)
    for r in rows:
        r["turn"] += 1
    assert _bad(tmp_path, rows).startswith("bad.jsonl:1: field 'turn'")


def test_error_tool_row_without_tool_calls(tmp_path: Path) -> None:
    rows = _rows(1)
    del rows[1]["tool_calls"]
    msg = _bad(tmp_path, rows)
    assert msg.startswith("bad.jsonl:3: field 'role'") and "tool row must follow" in msg


def test_error_user_after_tool_calls(tmp_path: Path) -> None:
    rows = _rows(1)
    rows[2] = {"conversation_id": "conv-001", "turn": 3, "role": "user", "content": "hm"}
    msg = _bad(tmp_path, rows)
    assert msg.startswith("bad.jsonl:3: field 'role'") and "cannot follow" in msg


def test_error_conversation_starts_with_assistant(tmp_path: Path) -> None:
    rows = [{"conversation_id": "x", "turn": 1, "role": "assistant", "content": "hi"}]
    assert _bad(tmp_path, rows).startswith("bad.jsonl:1: field 'role'")


def test_error_unknown_role(tmp_path: Path) -> None:
    rows = _rows(0)
    rows[1]["role"] = "bot"
    assert _bad(tmp_path, rows).startswith("bad.jsonl:2: field 'role'")


@pytest.mark.parametrize(
    ("drop", "field"),
    [
        ("id", "tool_calls[0].id"),
        ("type", "tool_calls[0].type"),
        ("name", "tool_calls[0].function.name"),
        ("arguments", "tool_calls[0].function.arguments"),
    ],
)
def test_error_tool_call_incomplete(tmp_path: Path, drop: str, field: str) -> None:
    rows = _rows(1)
    tc = rows[1]["tool_calls"][0]
    if drop in ("id", "type"):
        del tc[drop]
    else:
        del tc["function"][drop]
    assert _bad(tmp_path, rows).startswith(f"bad.jsonl:2: field '{field}'")


def test_error_tool_result_names_no_call(tmp_path: Path) -> None:
    rows = _rows(2)
    rows[2]["tool_results"][1]["tool_call_id"] = "call_nobody"
    msg = _bad(tmp_path, rows)
    assert msg.startswith("bad.jsonl:3: field 'tool_results[1].tool_call_id'")
    assert "call_nobody" in msg


def test_error_id_not_printable(tmp_path: Path) -> None:
    rows = _rows(0)
    for r in rows:
        r["conversation_id"] = "bad\x07id"
    assert _bad(tmp_path, rows).startswith("bad.jsonl:1: field 'conversation_id'")
    rows = _rows(1)
    rows[1]["tool_calls"][0]["id"] = "x\ny"
    assert _bad(tmp_path, rows).startswith("bad.jsonl:2: field 'tool_calls[0].id'")


def test_error_delay_and_max_tokens(tmp_path: Path) -> None:
    rows = _rows(0)
    rows[2]["delay_seconds"] = -1
    assert _bad(tmp_path, rows).startswith("bad.jsonl:3: field 'delay_seconds'")
    rows = _rows(0)
    rows[0]["max_new_tokens"] = 0
    assert _bad(tmp_path, rows).startswith("bad.jsonl:1: field 'max_new_tokens'")


def test_error_missing_file_and_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="no such dataset file"):
        index_dataset(tmp_path / "nope.jsonl")
    with pytest.raises(DatasetError, match="unknown format"):
        detect_format(_write(tmp_path / "x.jsonl", [{"foo": 1}]))


def test_openai_messages_format(tmp_path: Path) -> None:
    msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "ok"},
        {"role": "assistant", "content": "done"},
    ]
    p = _write(
        tmp_path / "o.jsonl", [{"messages": msgs, "tools": []}, {"id": "two", "messages": msgs}]
    )
    ds = index_dataset(p)
    assert ds.format == "openai" and ds.ids == ["line-1", "two"]
    conv = ds.load("two")
    assert conv.system == "sys" and len(conv.turns) == 2
    assert conv.messages() == msgs
    bad = [*msgs[:3], {"role": "tool", "tool_call_id": "zz", "content": "x"}]
    with pytest.raises(DatasetError, match=r"o2.jsonl:1: field 'messages\[3\].tool_call_id'"):
        index_dataset(_write(tmp_path / "o2.jsonl", [{"messages": bad}]))


def test_large_dataset_bounded_time_and_memory(tmp_path: Path) -> None:
    """100,000 rows index in bounded time, and memory does not grow with the file: only a
    byte span per conversation is kept."""
    path = tmp_path / "big.jsonl"
    pad = "x" * 900  # ~1 KB rows: ~100 MB, 100,000 rows
    with path.open("wb") as f:
        for c in range(20_000):
            for r in conversation_rows(c):
                if r.get("content"):
                    r["content"] = r["content"] + pad
                f.write(orjson.dumps(r) + b"\n")
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    ds = index_dataset(path)
    took = time.perf_counter() - t0
    grew_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
    assert len(ds.spans) == 20_000
    assert ds.load("conv-19999").id == "conv-19999"
    assert took < 60, took
    assert grew_mb < 60, grew_mb  # the file is ~100 MB


# MLCommons' JSON schema of the flat rows: arguments a JSON string, tool results and user
# messages with text. Each refusal names file:line and the field.
def test_error_tool_call_arguments_as_an_object(tmp_path: Path) -> None:
    rows = _rows(1)
    rows[1]["tool_calls"][0]["function"]["arguments"] = {"order_id": "#W0001"}
    msg = _bad(tmp_path, rows)
    assert msg.startswith("bad.jsonl:2: field 'tool_calls[0].function.arguments'"), msg
    assert "a JSON string" in msg and "object" in msg


def test_error_null_tool_result_content(tmp_path: Path) -> None:
    rows = _rows(1)
    rows[2]["tool_results"][0]["content"] = None
    msg = _bad(tmp_path, rows)
    assert msg.startswith("bad.jsonl:3: field 'tool_results[0].content'"), msg
    rows = _rows(1)
    rows[2]["tool_call_id"] = rows[2].pop("tool_results")[0]["tool_call_id"]
    rows[2]["content"] = None  # the one-result form
    assert _bad(tmp_path, rows).startswith("bad.jsonl:3: field 'content'")


@pytest.mark.parametrize("null", [True, False])
def test_error_null_user_content(tmp_path: Path, null: bool) -> None:
    rows = _rows(0)
    if null:
        rows[2]["content"] = None
    else:
        del rows[2]["content"]
    msg = _bad(tmp_path, rows)
    assert msg.startswith("bad.jsonl:3: field 'content'") and "user" in msg, msg


@pytest.mark.parametrize("indent", [True, False])
def test_error_pretty_printed_json_is_not_jsonl(tmp_path: Path, indent: bool) -> None:
    path = tmp_path / "bad.jsonl"
    option = orjson.OPT_INDENT_2 if indent else 0
    path.write_bytes(orjson.dumps(_rows(0), option=option))
    with pytest.raises(DatasetError) as e:
        index_dataset(path)
    msg = str(e.value)
    assert msg.startswith("bad.jsonl:1: not JSONL"), msg
    assert "one JSON object per line" in msg


def test_converted_nulls_still_validate(tmp_path: Path) -> None:
    from agentload.workloads.dataset_tools import convert, verify

    src = tmp_path / "m.jsonl"
    msgs = [
        {"role": "user", "content": None},
        {"role": "assistant", "content": None, "tool_calls": [_rows(1)[1]["tool_calls"][0]]},
        {"role": "tool", "tool_call_id": _rows(1)[1]["tool_calls"][0]["id"], "content": None},
        {"role": "assistant", "content": "ok"},
    ]
    src.write_bytes(orjson.dumps({"messages": msgs}) + b"\n")
    convert(src, tmp_path / "flat.jsonl")
    assert index_dataset(tmp_path / "flat.jsonl").format == "mlperf"
    assert verify(src, tmp_path / "flat.jsonl") == (1, 2)
