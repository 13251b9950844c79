"""Recorded conversations for replay: the MLPerf agentic flat-row format, agentload's
trajectories.jsonl and OpenAI-messages JSONL, read into one shape (:class:`Conversation`).

Reading is two passes over bytes, never the whole file in memory at once: :func:`index_dataset`
streams the file line by line, checks every row (each error names file:line and the field)
and keeps only where each conversation's lines are (a byte span); :meth:`Dataset.load` parses
one conversation's span when it is replayed. Memory is bounded by the largest conversation,
not by the dataset.

Flat rows (one message per row, a conversation's rows contiguous, turns 1..N): user and tool
rows are client turns (what is sent), assistant rows are the recorded answers. Consecutive
tool rows (results of one assistant message), like consecutive user rows, form one client turn.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from agentload.client.tokens import HeuristicCounter, TokenCounter, message_text
from agentload.results.records import TrajectoryRecord, version_of
from agentload.workloads import traces
from agentload.workloads.conversation import (
    TRACE_FORMATS,
    ClientTurn,
    Conversation,
    Dataset,
    DatasetError,
    Span,
    json_line,
    line_error,
    printable_id,
    read_lines,
    where,
)

FORMATS = ("mlperf", "trajectories", "openai", "sharegpt", "mooncake")
ROLES = ("user", "assistant", "tool")
KEEP_BYTES = 32 << 20  # datasets up to this size stay parsed in memory after the index
MAX_TOKEN_KEYS = ("max_new_tokens", "max_completion_tokens", "max_tokens")
MAX_DELAY_S = 86400  # delay_seconds: longest think or tool time a replay waits
# Episodes that ended with these reasons stopped before sending their last client turn (the
# user's stop message, the results of a hand-over or of the last allowed step).
_UNSENT_TAIL = frozenset({"user_stop", "agent_transfer", "max_steps", "too_many_errors"})


# ---- reading ---------------------------------------------------------------------------------


def detect_format(path: Path) -> str:
    """mlperf, trajectories, openai, sharegpt or mooncake, from the first record of `path`
    (a JSON array is ShareGPT)."""
    try:
        with path.open("rb") as f:
            if f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"[":
                f.seek(0)
                first = traces.first_array_item(path, f)
                if first is not None and ("conversations" in first or "messages" in first):
                    return "sharegpt"  # else: any other array is "not JSONL", below
            f.seek(0)
            for n, _, _, text in read_lines(f):
                obj = json_line(path, n, text)
                if obj.get("_type") == "dataset_metadata":
                    continue
                if "role" in obj and "conversation_id" in obj:
                    return "mlperf"
                if str(obj.get("schema", "")).startswith("agentload.trajectory"):
                    return "trajectories"
                if "messages" in obj:
                    return "openai"
                if "conversations" in obj:
                    return "sharegpt"
                if "hash_ids" in obj:
                    return "mooncake"
                raise line_error(
                    path,
                    n,
                    None,
                    "unknown format: expected MLPerf flat rows (conversation_id, turn, role), "
                    "agentload trajectories, OpenAI messages ({messages, tools?}), ShareGPT "
                    "({conversations: [{from, value}]}) or a Mooncake trace ({timestamp, "
                    "input_length, output_length, hash_ids})",
                )
    except OSError as e:
        raise DatasetError(f"{path}: cannot read ({e.strerror})") from None
    raise DatasetError(f"{path}: no records")


def _check_tool_calls(
    path: Path, line: int, value: Any, key: str, *, string_args: bool = False
) -> list[dict[str, Any]]:
    """The tool calls of an answer; `string_args`: arguments must be a JSON string, as
    MLCommons' schema of the flat rows says (the messages formats also take an object)."""
    if not isinstance(value, list) or not value:
        raise line_error(path, line, key, "expected a non-empty list of tool calls")
    out = []
    for i, tc in enumerate(value):
        f = f"{key}[{i}]"
        if not isinstance(tc, dict):
            raise line_error(path, line, f, "expected an object")
        printable_id(path, line, f"{f}.id", tc.get("id"))
        if tc.get("type") != "function":
            raise line_error(
                path, line, f"{f}.type", f"expected 'function', got {tc.get('type')!r}"
            )
        fn = tc.get("function")
        if not isinstance(fn, dict):
            raise line_error(path, line, f"{f}.function", "missing (needs name and arguments)")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise line_error(path, line, f"{f}.function.name", "missing or empty")
        args = fn.get("arguments")
        if isinstance(args, dict):
            if string_args:
                raise line_error(
                    path, line, f"{f}.function.arguments", "expected a JSON string, got an object"
                )
            args = orjson.dumps(args).decode()
        if not isinstance(args, str):
            raise line_error(path, line, f"{f}.function.arguments", "missing (a JSON string)")
        out.append(
            {
                "id": str(tc["id"]),
                "type": "function",
                "function": {"name": fn["name"], "arguments": args},
            }
        )
    return out


def _pos_int(path: Path, line: int, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise line_error(path, line, key, f"expected a positive integer, got {value!r}")
    return value


class _Builder:
    """Checks one conversation's flat rows in order and builds its Conversation."""

    def __init__(self, path: Path, cid: str, line: int, counter: TokenCounter) -> None:
        self.path = path
        self.conv = Conversation(cid, line=line)
        self.counter = counter
        self.prev_role: str | None = None
        self.prev_turn = 0
        self.open_ids: set[str] = set()  # ids of the last assistant message's tool calls
        self.model: str | None = None
        self.stream: bool | None = None
        self.max_tokens: int | None = None

    def add(self, line: int, row: dict[str, Any]) -> None:
        turn = self._check_turn(line, row)
        role = self._check_role(line, row)
        content, delay, mt = self._row_fields(line, row)
        if self.prev_role is None:
            self._first_row(line, row, mt)
        elif row.get("system") is not None:
            raise line_error(
                self.path, line, "system", "only the conversation's first user row has a system"
            )
        if role == "assistant":
            self._add_answer(line, row, content, mt)
        elif role == "user":
            self._add_user(line, turn, row, content, delay, mt)
        else:
            self._add_tool(line, turn, row, delay, mt)
        self.prev_role = role

    def _check_turn(self, line: int, row: dict[str, Any]) -> int:
        turn = row.get("turn")
        if isinstance(turn, bool) or not isinstance(turn, int):
            raise line_error(self.path, line, "turn", f"expected an integer, got {turn!r}")
        if turn != self.prev_turn + 1:
            raise line_error(
                self.path,
                line,
                "turn",
                f"conversation {self.conv.id!r}: expected turn {self.prev_turn + 1}, got {turn} "
                "(turns run 1..N in order)",
            )
        self.prev_turn = turn
        return turn

    def _check_role(self, line: int, row: dict[str, Any]) -> str:
        """The row's role, refusing transitions a client could not have sent."""
        p, prev, role = self.path, self.prev_role, row.get("role")
        if role not in ROLES:
            raise line_error(p, line, "role", f"expected user, assistant or tool, got {role!r}")
        if prev is None and role != "user":
            raise line_error(p, line, "role", f"a conversation starts with a user row, not {role}")
        if role == "tool" and prev != "tool" and not (prev == "assistant" and self.open_ids):
            raise line_error(
                p, line, "role", "a tool row must follow an assistant row with tool_calls"
            )
        if role == "user" and prev == "assistant" and self.open_ids:
            raise line_error(
                p,
                line,
                "role",
                "a user row cannot follow an assistant row with tool_calls (tool results missing)",
            )
        if role == "assistant" and prev == "assistant":
            raise line_error(p, line, "role", "two assistant rows in a row")
        return str(role)

    def _row_fields(self, line: int, row: dict[str, Any]) -> tuple[Any, float, int | None]:
        """(content, delay_seconds, max tokens) of a row, each checked."""
        p = self.path
        content = row.get("content")
        if content is not None and not isinstance(content, str | list):
            raise line_error(p, line, "content", f"expected a string, got {type(content).__name__}")
        delay = row.get("delay_seconds", 0.0) or 0.0
        if isinstance(delay, bool) or not isinstance(delay, int | float) or not delay >= 0:
            raise line_error(p, line, "delay_seconds", f"expected a number >= 0, got {delay!r}")
        if delay > MAX_DELAY_S:  # a wait the replay could not honour (or the clock overflows)
            raise line_error(
                p, line, "delay_seconds", f"at most {MAX_DELAY_S} (one day), got {delay!r}"
            )
        mt = None
        for key in MAX_TOKEN_KEYS:
            if row.get(key) is not None:
                mt = _pos_int(p, line, key, row[key])
                break
        if row.get("stream") is not None and not isinstance(row["stream"], bool):
            raise line_error(p, line, "stream", "expected true or false")
        if row.get("model") is not None and not isinstance(row["model"], str):
            raise line_error(p, line, "model", "expected a string")
        return content, float(delay), mt

    def _first_row(self, line: int, row: dict[str, Any], mt: int | None) -> None:
        """The conversation-wide fields, which only its first user row carries."""
        system = row.get("system")
        if system is not None and not isinstance(system, str):
            raise line_error(self.path, line, "system", "expected a string")
        self.conv.system = system
        tools = row.get("tools")
        if tools is not None and not isinstance(tools, list):
            raise line_error(self.path, line, "tools", "expected a list of tool schemas")
        self.conv.tools = tools or None
        self.model, self.stream, self.max_tokens = row.get("model"), row.get("stream"), mt

    def _add_answer(self, line: int, row: dict[str, Any], content: Any, mt: int | None) -> None:
        msg: dict[str, Any] = {"role": "assistant", "content": content}
        if row.get("tool_calls") is not None:
            calls = _check_tool_calls(
                self.path, line, row["tool_calls"], "tool_calls", string_args=True
            )
            msg["tool_calls"] = calls
            self.open_ids = {c["id"] for c in calls}
        else:
            self.open_ids = set()
        if isinstance(row.get("reasoning_content"), str):
            msg["reasoning_content"] = row["reasoning_content"]
        t = self.conv.turns[-1]
        t.answer = msg
        t.answer_tokens = max(1, self.counter.count(message_text(msg)))
        if t.max_tokens is None and mt is not None:
            t.max_tokens = mt  # a per-row limit given on the answer row

    def _add_user(
        self, line: int, turn: int, row: dict[str, Any], content: Any, delay: float, mt: int | None
    ) -> None:
        if content is None:  # MLCommons' schema: a user row has its text
            raise line_error(
                self.path, line, "content", "a user row needs its text (missing or null)"
            )
        msg = {"role": "user", "content": content}
        if self.prev_role == "user":
            # Consecutive user rows are one client turn, as consecutive user messages are.
            self._extend_turn([msg], delay)
            return
        self.open_ids = set()
        self._new_turn(line, turn, row, [msg], delay, mt)

    def _add_tool(
        self, line: int, turn: int, row: dict[str, Any], delay: float, mt: int | None
    ) -> None:
        msgs = self._tool_messages(line, row)
        if self.prev_role == "tool":
            self._extend_turn(msgs, delay)
        else:
            self._new_turn(line, turn, row, msgs, delay, mt)

    def _extend_turn(self, msgs: list[dict[str, Any]], delay: float) -> None:
        t = self.conv.turns[-1]
        t.messages.extend(msgs)
        t.delay_s += delay

    def _new_turn(
        self,
        line: int,
        turn: int,
        row: dict[str, Any],
        msgs: list[dict[str, Any]],
        delay: float,
        mt: int | None,
    ) -> None:
        """A client turn; model, stream and max tokens carry over from the first user row."""
        turns = self.conv.turns
        turns.append(
            ClientTurn(
                index=len(turns),
                row=turn,
                line=line,
                messages=msgs,
                delay_s=delay,
                max_tokens=mt if mt is not None else self.max_tokens,
                model=row.get("model") or self.model,
                stream=row.get("stream") if row.get("stream") is not None else self.stream,
            )
        )

    def _tool_messages(self, line: int, row: dict[str, Any]) -> list[dict[str, Any]]:
        p = self.path
        results = row.get("tool_results")
        one = results is None
        if one:
            # One result per row, in the OpenAI tool-message shape.
            if row.get("tool_call_id") is None:
                raise line_error(
                    p, line, "tool_results", "a tool row needs tool_results (or tool_call_id)"
                )
            results = [{"tool_call_id": row["tool_call_id"], "content": row.get("content")}]
        if not isinstance(results, list) or not results:
            raise line_error(p, line, "tool_results", "expected a non-empty list")
        out = []
        for i, r in enumerate(results):
            f = f"tool_results[{i}]"
            if not isinstance(r, dict):
                raise line_error(p, line, f, "expected {tool_call_id, content}")
            tid = printable_id(p, line, f"{f}.tool_call_id", r.get("tool_call_id"))
            if tid not in self.open_ids:
                raise line_error(
                    p,
                    line,
                    f"{f}.tool_call_id",
                    f"{tid!r} names no tool call of the preceding assistant row",
                )
            c = r.get("content")
            if c is None:  # MLCommons' schema: a tool result has content ("" when empty)
                where = "content" if one else f"{f}.content"
                raise line_error(
                    p, line, where, "a tool result needs its content (missing or null)"
                )
            if not isinstance(c, str):
                c = orjson.dumps(c).decode()
            out.append({"role": "tool", "tool_call_id": tid, "content": c})
        return out


def _flat_rows(
    path: Path, f: BinaryIO, first_line: int = 1
) -> Iterator[tuple[int, int, int, dict[str, Any]]]:
    for n, start, end, text in read_lines(f, first_line):
        row = json_line(path, n, text)
        if row.get("_type") == "dataset_metadata":
            continue
        yield n, start, end, row


def _iter_mlperf(
    path: Path, f: BinaryIO, counter: TokenCounter, first_line: int = 1
) -> Iterator[tuple[Conversation, int, int]]:
    """(conversation, start offset, end offset) in file order; raises on the first bad row."""
    seen: dict[str, int] = {}
    cur: _Builder | None = None
    span_start = span_end = 0
    for n, start, end, row in _flat_rows(path, f, first_line):
        if "conversation_id" not in row:
            raise line_error(path, n, "conversation_id", "missing")
        cid = printable_id(path, n, "conversation_id", row["conversation_id"])
        if cur is None or cid != cur.conv.id:
            if cid in seen:
                raise line_error(
                    path,
                    n,
                    "conversation_id",
                    f"rows of conversation {cid!r} are not contiguous (it began at line "
                    f"{seen[cid]})",
                )
            if cur is not None:
                yield cur.conv, span_start, span_end
            seen[cid] = n
            cur = _Builder(path, cid, n, counter)
            span_start = start
        cur.add(n, row)
        span_end = end
    if cur is not None:
        yield cur.conv, span_start, span_end


def conversation_from_messages(
    path: Path,
    line: int,
    cid: str,
    messages: Any,
    tools: Any,
    counter: TokenCounter,
    *,
    drop_unsent_tail: bool = False,
) -> Conversation:
    """A Conversation from an OpenAI message array (system first, optional)."""
    if not isinstance(messages, list) or not messages:
        raise line_error(path, line, "messages", "expected a non-empty list of messages")
    if tools is not None and not isinstance(tools, list):
        raise line_error(path, line, "tools", "expected a list of tool schemas")
    b = _MessagesBuilder(path, line, Conversation(cid, tools=tools or None, line=line), counter)
    for i, m in enumerate(messages):
        b.add(i, m)
    conv = b.conv
    if not conv.turns:
        raise line_error(path, line, "messages", "no user message")
    if drop_unsent_tail and conv.turns[-1].answer is None:
        conv.turns.pop()
    return conv


class _MessagesBuilder:
    """Checks an OpenAI message array in order (all on one dataset line) into a Conversation."""

    def __init__(self, path: Path, line: int, conv: Conversation, counter: TokenCounter) -> None:
        self.path, self.line, self.conv, self.counter = path, line, conv, counter
        self.open_ids: set[str] = set()  # ids of the last assistant message's tool calls
        self.prev: str | None = None

    def _fail(self, field: str, message: str) -> DatasetError:
        return line_error(self.path, self.line, field, message)

    def add(self, i: int, m: Any) -> None:
        f = f"messages[{i}]"
        if not isinstance(m, dict):
            raise self._fail(f, "expected a message object")
        role = m.get("role")
        if role == "system" and i == 0:
            c = m.get("content")
            self.conv.system = c if isinstance(c, str) else message_text(m)
            return
        if role not in ROLES:
            raise self._fail(f"{f}.role", f"expected user, assistant or tool, got {role!r}")
        if role == "assistant":
            self._answer(f, m)
        elif role == "tool":
            self._tool(i, f, m)
        else:
            self._user(i, f, m)
        self.prev = role

    def _answer(self, f: str, m: dict[str, Any]) -> None:
        if self.prev not in ("user", "tool"):
            raise self._fail(f"{f}.role", "an assistant message must answer a user or tool message")
        msg = {k: v for k, v in m.items() if k != "name"}
        if m.get("tool_calls"):
            msg["tool_calls"] = _check_tool_calls(
                self.path, self.line, m["tool_calls"], f"{f}.tool_calls"
            )
            self.open_ids = {c["id"] for c in msg["tool_calls"]}
        else:
            msg.pop("tool_calls", None)
            self.open_ids = set()
        t = self.conv.turns[-1]
        t.answer = msg
        t.answer_tokens = max(1, self.counter.count(message_text(msg)))

    def _tool(self, i: int, f: str, m: dict[str, Any]) -> None:
        prev = self.prev
        if prev not in ("tool", "assistant") or (prev == "assistant" and not self.open_ids):
            raise self._fail(
                f"{f}.role", "a tool message must follow an assistant message with tool_calls"
            )
        tid = printable_id(self.path, self.line, f"{f}.tool_call_id", m.get("tool_call_id"))
        if tid not in self.open_ids:
            raise self._fail(
                f"{f}.tool_call_id",
                f"{tid!r} names no tool call of the preceding assistant message",
            )
        self._append(i, m, same_turn=prev == "tool")

    def _user(self, i: int, f: str, m: dict[str, Any]) -> None:
        if self.prev == "assistant" and self.open_ids:
            raise self._fail(
                f"{f}.role", "a user message cannot follow an assistant message with tool_calls"
            )
        self.open_ids = set()
        self._append(i, m, same_turn=self.prev == "user")

    def _append(self, i: int, m: dict[str, Any], *, same_turn: bool) -> None:
        turns = self.conv.turns
        if same_turn:
            turns[-1].messages.append(m)
        else:
            turns.append(ClientTurn(len(turns), i, self.line, [m]))


def _iter_lines_format(
    path: Path, f: BinaryIO, fmt: str, counter: TokenCounter, first_line: int = 1
) -> Iterator[tuple[Conversation, int, int]]:
    seen: dict[str, int] = {}
    for n, start, end, text in read_lines(f, first_line):
        obj = json_line(path, n, text)
        if obj.get("_type") == "dataset_metadata":
            continue
        if fmt == "trajectories":
            try:
                version_of(obj, TrajectoryRecord)
            except ValueError as e:
                raise line_error(path, n, "schema_version", str(e)) from None
            raw_id = obj.get("session_id")
            field_name = "session_id"
            unsent = obj.get("termination") in _UNSENT_TAIL
        else:
            field_name = next(
                (k for k in ("conversation_id", "id") if obj.get(k) is not None), "conversation_id"
            )
            raw_id = obj.get(field_name, f"line-{n}")
            unsent = False
        cid = printable_id(path, n, field_name, raw_id)
        if cid in seen:
            raise line_error(
                path, n, field_name, f"duplicate conversation id {cid!r} (line {seen[cid]})"
            )
        seen[cid] = n
        conv = conversation_from_messages(
            path, n, cid, obj.get("messages"), obj.get("tools"), counter, drop_unsent_tail=unsent
        )
        if not conv.turns:
            continue
        yield conv, start, end


def iter_records(
    path: Path,
    f: BinaryIO,
    fmt: str,
    counter: TokenCounter,
    first_line: int = 1,
    *,
    blocks: Any = None,
) -> Iterator[tuple[Conversation, int, int]]:
    if fmt in TRACE_FORMATS:
        return traces.iterate(path, f, fmt, counter, blocks)
    if fmt == "mlperf":
        return _iter_mlperf(path, f, counter, first_line)
    if fmt in ("trajectories", "openai"):
        return _iter_lines_format(path, f, fmt, counter, first_line)
    raise DatasetError(f"unknown dataset format {fmt!r}; known: {', '.join(FORMATS)}")


def iter_conversations(
    path: Path, f: BinaryIO, fmt: str, counter: TokenCounter | None = None, *, blocks: Any = None
) -> Iterator[Conversation]:
    for conv, _, _ in iter_records(path, f, fmt, counter or HeuristicCounter(), blocks=blocks):
        yield conv


def index_dataset(
    path: str | Path,
    fmt: str | None = None,
    *,
    keep_bytes: int = KEEP_BYTES,
    block_tokens: int | None = None,
    tokenizer: str | Path | None = None,
) -> Dataset:
    """Check every record of `path` and index its conversations (see the module docs). A
    file of at most `keep_bytes` keeps its parsed conversations, so replaying it parses
    nothing more. `block_tokens` and `tokenizer`: how a Mooncake trace's prompts are built
    (agentload.workloads.traces)."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: no such dataset file")
    fmt = fmt or detect_format(path)
    if fmt in TRACE_FORMATS:
        blocks = traces.BlockText(block_tokens or traces.BLOCK_TOKENS, tokenizer)
        return traces.index(path, fmt, keep_bytes, blocks)
    spans: list[Span] = []
    counter = HeuristicCounter()
    n_turns = 0
    kept: dict[str, Conversation] | None = {} if path.stat().st_size <= keep_bytes else None
    try:
        with path.open("rb") as f:
            for conv, start, end in iter_records(path, f, fmt, counter):
                spans.append(
                    Span(
                        conv.id,
                        start,
                        end,
                        conv.line,
                        conv.system is not None,
                        len(conv.turns),
                        bool(conv.tools),
                    )
                )
                n_turns += len(conv.turns)
                if kept is not None:
                    kept[conv.id] = conv
    except OSError as e:
        raise DatasetError(f"{path}: cannot read ({e.strerror})") from None
    if not spans:
        raise DatasetError(f"{path}: no conversations")
    ds = Dataset(path, fmt, spans, n_turns, reader=FLAT)
    if kept:
        ds.keep(kept)
    return ds


class _FlatReader:
    """MLPerf rows, trajectories and OpenAI messages: a span is that conversation's lines."""

    def read_span(self, ds: Dataset, span: Span, data: bytes) -> Conversation:
        rows = iter_records(ds.path, io.BytesIO(data), ds.format, HeuristicCounter(), span.line)
        for conv, _, _ in rows:
            return conv
        raise DatasetError(f"{where(ds.path, span.line)}: conversation {span.id!r} vanished")

    def walk(self, ds: Dataset, f: BinaryIO) -> Iterator[Conversation]:
        return iter_conversations(ds.path, f, ds.format)


FLAT = _FlatReader()
