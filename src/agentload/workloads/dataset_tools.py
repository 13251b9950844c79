"""What `agentload dataset` does: statistics of a replay dataset, conversion to MLPerf flat
rows (from trajectories, OpenAI messages or snapshot records), and verification that a
conversion rebuilds every client turn unchanged. All of it streams: one conversation in
memory at a time (snapshots: the latest snapshot of each conversation)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from agentload.client.tokens import (
    MESSAGE_OVERHEAD_TOKENS,
    HeuristicCounter,
    TokenCounter,
    TokenizerJsonCounter,
    message_text,
)
from agentload.workloads.conversation import (
    Conversation,
    DatasetError,
    json_line,
    line_error,
    printable_id,
    read_lines,
    value_dist,
)
from agentload.workloads.dataset import conversation_from_messages, detect_format, iter_records
from agentload.workloads.traces import BLOCK_TOKENS, iter_sharegpt, mooncake_stats

CONVERT_FROM = ("auto", "mlperf", "trajectories", "openai", "sharegpt", "mooncake", "snapshots")
STATS_PERCENTILES = (50, 90, 99)


def counter_for(tokenizer: str | Path | None) -> tuple[TokenCounter, bool]:
    """(counter, exact): a tokenizer.json gives exact counts, else the heuristic estimate."""
    if tokenizer is None:
        return HeuristicCounter(), False
    try:
        return TokenizerJsonCounter(tokenizer), True
    except Exception as e:  # missing file, bad JSON, tokenizers not installed
        raise DatasetError(f"{tokenizer}: cannot load the tokenizer ({e})") from None


def conversations(
    path: Path,
    fmt: str | None = None,
    counter: TokenCounter | None = None,
    *,
    blocks: Any = None,
    skipped: dict[str, int] | None = None,
) -> Iterator[Conversation]:
    """Every conversation of `path`, checked, one at a time (snapshots included).
    `blocks`: how a Mooncake trace's prompts are built (traces.BlockText); `skipped` gets
    the counts of ShareGPT records a replay cannot send."""
    fmt = fmt or detect_format(path)
    counter = counter or HeuristicCounter()
    try:
        with path.open("rb") as f:
            if fmt == "snapshots":
                yield from _snapshots(path, f, counter)
            elif fmt == "sharegpt":
                for conv, _, _ in iter_sharegpt(path, f, counter, skipped):
                    yield conv
            else:
                for conv, _, _ in iter_records(path, f, fmt, counter, blocks=blocks):
                    yield conv
    except OSError as e:
        raise DatasetError(f"{path}: cannot read ({e.strerror})") from None


def _snapshots(path: Path, f: BinaryIO, counter: TokenCounter) -> Iterator[Conversation]:
    """Snapshot records: `{conversation_id, messages, tools?}` per checkpoint, each one the
    whole message array so far; the last snapshot of a conversation is its conversation."""
    latest: dict[str, tuple[int, list[Any], Any]] = {}
    for n, _, _, text in read_lines(f):
        obj = json_line(path, n, text)
        cid = printable_id(path, n, "conversation_id", obj.get("conversation_id"))
        msgs = obj.get("messages")
        if not isinstance(msgs, list):
            raise line_error(path, n, "messages", "expected the message array of this checkpoint")
        prev = latest.get(cid)
        if prev is not None and msgs[: len(prev[1])] != prev[1]:
            raise line_error(
                path,
                n,
                "messages",
                f"snapshot of {cid!r} does not extend its previous one (line {prev[0]})",
            )
        latest[cid] = (n, msgs, obj.get("tools"))
    for cid, (n, msgs, tools) in latest.items():
        yield conversation_from_messages(path, n, cid, msgs, tools, counter)


# ---- stats -----------------------------------------------------------------------------------


def dataset_stats(
    path: Path,
    fmt: str | None = None,
    tokenizer: str | Path | None = None,
    *,
    block_tokens: int | None = None,
) -> dict[str, Any]:
    """Conversations, client turns, tool calls, and the ISL (prompt tokens of each call
    under dataset history) and OSL (recorded answer tokens) distributions. A Mooncake trace
    gives its own lengths, arrival times and block sharing (traces.mooncake_stats)."""
    fmt = fmt or detect_format(path)
    if fmt == "mooncake":
        return mooncake_stats(path, block_tokens or BLOCK_TOKENS)
    counter, exact = counter_for(tokenizer)
    skipped: dict[str, int] = {}
    n_conv = n_turns = n_answers = n_tools = n_parallel = n_reasoning = n_delays = 0
    systems: set[str] = set()
    isl: list[float] = []
    osl: list[float] = []
    turns_per_conv: list[float] = []
    delays: list[float] = []
    for conv in conversations(path, fmt, counter, skipped=skipped):
        n_conv += 1
        turns_per_conv.append(len(conv.turns))
        if conv.system is not None:
            systems.add(conv.system)
        # The prompt grows message by message: count each message once.
        prompt = counter.count(orjson.dumps(conv.tools).decode()) if conv.tools else 0
        for m in conv.prefix_messages():
            prompt += counter.count(message_text(m)) + MESSAGE_OVERHEAD_TOKENS
        for t in conv.turns:
            n_turns += 1
            for m in t.messages:
                prompt += counter.count(message_text(m)) + MESSAGE_OVERHEAD_TOKENS
            isl.append(prompt)
            if t.delay_s > 0:
                n_delays += 1
                delays.append(t.delay_s)
            a = t.answer
            if a is not None:
                n_answers += 1
                out = counter.count(message_text(a))
                osl.append(out)
                prompt += out + MESSAGE_OVERHEAD_TOKENS
                calls = a.get("tool_calls") or ()
                n_tools += len(calls)
                n_parallel += len(calls) > 1
                n_reasoning += bool(a.get("reasoning_content"))
    doc = {
        "path": path.name,
        "format": fmt,
        "conversations": n_conv,
        "client_turns": n_turns,
        "recorded_answers": n_answers,
        "tool_calls": n_tools,
        "parallel_tool_messages": n_parallel,
        "answers_with_reasoning": n_reasoning,
        "turns_with_delay": n_delays,
        "system_prompts": len(systems),
        "tokens_estimated": not exact,
        "turns_per_conversation": value_dist(turns_per_conv),
        "isl_tokens": value_dist(isl),
        "osl_tokens": value_dist(osl),
        "delay_s": value_dist(delays),
    }
    if fmt == "sharegpt":
        doc["skipped"] = skipped  # records a replay cannot send (traces module docs)
    return doc


# ---- convert ---------------------------------------------------------------------------------


def flat_rows(conv: Conversation) -> Iterator[dict[str, Any]]:
    """MLPerf flat rows of one conversation."""
    turn = 0
    first = True

    def row(role: str, **kw: Any) -> dict[str, Any]:
        nonlocal turn, first
        turn += 1
        r: dict[str, Any] = {"conversation_id": conv.id, "turn": turn, "role": role}
        if first:
            if conv.system is not None:
                r["system"] = conv.system
            if conv.tools:
                r["tools"] = conv.tools
            first = False
        r.update({k: v for k, v in kw.items() if v is not None})
        return r

    for t in conv.turns:
        delay = t.delay_s or None
        if t.messages[0].get("role") == "tool":
            yield row(
                "tool",
                content=None,
                tool_results=[
                    # Flat rows need text where messages may hold null (MLCommons' schema).
                    {"tool_call_id": m["tool_call_id"], "content": _text_or_empty(m)}
                    for m in t.messages
                ],
                delay_seconds=delay,
                max_new_tokens=t.max_tokens,
            )
        else:
            for k, m in enumerate(t.messages):
                yield row(
                    "user",
                    content=_text_or_empty(m),
                    delay_seconds=delay if k == 0 else None,
                    max_new_tokens=t.max_tokens if k == 0 else None,
                )
        a = t.answer
        if a is not None:
            yield row(
                "assistant",
                content=a.get("content"),
                tool_calls=a.get("tool_calls") or None,
                reasoning_content=a.get("reasoning_content"),
            )


def _text_or_empty(m: dict[str, Any]) -> Any:
    c = m.get("content")
    return "" if c is None else c


@dataclass
class ConvertResult:
    conversations: int = 0
    rows: int = 0


def convert(src: Path, dst: Path, fmt: str | None = None, *, blocks: Any = None) -> ConvertResult:
    """Write `src` (any readable format) as MLPerf flat rows to `dst`. A Mooncake row
    becomes a one-turn conversation: its built prompt and `max_new_tokens`; the flat rows
    have no field for its timestamp."""
    fmt = None if fmt in (None, "auto") else fmt
    res = ConvertResult()
    tmp = dst.with_name(dst.name + ".tmp")
    with tmp.open("wb") as out:
        for conv in conversations(src, fmt, blocks=blocks):
            res.conversations += 1
            for r in flat_rows(conv):
                out.write(orjson.dumps(r) + b"\n")
                res.rows += 1
    tmp.replace(dst)
    return res


_KEPT = ("role", "content", "tool_calls", "tool_call_id", "reasoning_content")


def canonical(msg: dict[str, Any]) -> dict[str, Any]:
    """The parts of a message flat rows carry (role, content, tool calls and ids,
    reasoning), for comparing a conversion with its source."""
    out = {k: msg[k] for k in _KEPT if msg.get(k) is not None}
    if msg.get("role") in ("user", "tool") and msg.get("content") is None:
        out["content"] = ""  # what flat rows hold for it (see flat_rows)
    return out


def requests(conv: Conversation) -> Iterator[list[dict[str, Any]]]:
    """The messages of each call under dataset history, in canonical form."""
    hist = [canonical(m) for m in conv.prefix_messages()]
    for t in conv.turns:
        hist = hist + [canonical(m) for m in t.messages]
        yield hist
        if t.answer is not None:
            hist = [*hist, canonical(t.answer)]


def verify(src: Path, dst: Path, fmt: str | None = None, *, blocks: Any = None) -> tuple[int, int]:
    """Rebuild every client turn of `src` and of its conversion `dst` and compare; returns
    (conversations, turns) checked, or raises DatasetError at the first difference."""
    fmt = None if fmt in (None, "auto") else fmt
    a_iter = conversations(src, fmt, blocks=blocks)
    b_iter = conversations(dst, "mlperf")
    n_conv = n_turns = 0
    for a in a_iter:
        b = next(b_iter, None)
        if b is None or b.id != a.id:
            raise DatasetError(
                f"{dst.name}: conversation {a.id!r} missing (found {b.id if b else 'none'!r})"
            )
        ra, rb = list(requests(a)), list(requests(b))
        if len(ra) != len(rb):
            raise DatasetError(
                f"{dst.name}:{b.line}: conversation {a.id!r}: {len(rb)} client turns, "
                f"the source has {len(ra)}"
            )
        for k, (x, y) in enumerate(zip(ra, rb, strict=True)):
            if x != y or (a.tools or None) != (b.tools or None):
                raise DatasetError(
                    f"{dst.name}:{b.turns[k].line}: conversation {a.id!r} turn {k}: the "
                    "rebuilt request differs from the source's"
                )
        n_conv += 1
        n_turns += len(ra)
    extra = next(b_iter, None)
    if extra is not None:
        raise DatasetError(f"{dst.name}:{extra.line}: conversation {extra.id!r} not in the source")
    return n_conv, n_turns
