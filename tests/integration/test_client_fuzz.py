"""Property test: mutated real vLLM streams never crash the client and never lose a record.

The four vLLM 0.32 captures in tests/data are cut into SSE events, then mutated (events
dropped, duplicated or reordered; JSON values swapped for values of other types; the body
truncated, garbage bytes injected, split at random byte offsets) and served from a loopback
server. For every example: `ChatClient.chat` returns (no exception escapes), `on_record` saw
exactly one record, the record is classified with a known kind (never the `client_error`
safety net), and it survives the round trip to JSON. Derandomized so the suite is
reproducible; the example count is in docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentload.client import CallRecord, ChatClient, EndpointConfig, RetryPolicy, Timeouts
from scripted_server import Script, ScriptedServer

REFERENCE = Path(__file__).parents[1] / "data" / "vllm-0.32-cpu"
CAPTURES = (
    "real-vllm-stream.txt",
    "real-vllm-stream-tools.txt",
    "real-vllm-stream-tools-hermes.txt",
    "real-vllm-stream-tools-required.txt",
)
MSGS = [{"role": "user", "content": "hi"}]
EXAMPLES = 150
KNOWN_KINDS = {None, "malformed_stream", "stream_error", "context_overflow"}


def _events(name: str) -> list[bytes]:
    raw = (REFERENCE / name).read_bytes()
    body = raw.split(b"\r\n\r\n", 1)[1]
    return [e + b"\n\n" for e in body.split(b"\n\n") if e.strip()]


EVENTS = {name: _events(name) for name in CAPTURES}

ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=4),
    st.lists(st.one_of(st.none(), st.integers(), st.text(max_size=2)), max_size=2),
    st.dictionaries(st.sampled_from(["index", "content", "a"]), st.integers(), max_size=2),
)
GARBAGE = st.one_of(
    st.binary(min_size=1, max_size=12),
    st.sampled_from(
        [b"\n\n", b"data: ", b"data: {\n\n", b"1e400", b"\xff\xfe", b"\r", b"[DONE]", b"\x00"]
    ),
)


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, (*prefix, i))


def _replace(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    parent = obj
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return obj


@st.composite
def mutated_streams(draw: st.DrawFn) -> list[bytes]:
    events = list(EVENTS[draw(st.sampled_from(CAPTURES))])
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(["drop", "dup", "swap", "retype", "retype", "retype"]))
        i = draw(st.integers(0, len(events) - 1)) if events else 0
        if not events:
            break
        if op == "drop":
            del events[i]
        elif op == "dup":
            events.insert(i, events[i])
        elif op == "swap":
            j = draw(st.integers(0, len(events) - 1))
            events[i], events[j] = events[j], events[i]
        else:
            data = events[i][6:].strip()
            if data == b"[DONE]":
                continue
            obj = orjson.loads(data)
            path = draw(st.sampled_from(list(_paths(obj))))
            obj = _replace(obj, path, draw(ODD_VALUES))
            events[i] = b"data: " + orjson.dumps(obj) + b"\n\n"
    body = b"".join(events)
    for _ in range(draw(st.integers(0, 2))):
        at = draw(st.integers(0, len(body)))
        body = body[:at] + draw(GARBAGE) + body[at:]
    if draw(st.booleans()):
        body = body[: draw(st.integers(0, len(body)))]
    cuts = sorted(set(draw(st.lists(st.integers(0, len(body)), max_size=6))))
    bounds = [0, *cuts, len(body)]
    return [body[a:b] for a, b in itertools.pairwise(bounds) if b > a]


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[asyncio.AbstractEventLoop, ScriptedServer, ChatClient]]:
    loop = asyncio.new_event_loop()
    server = ScriptedServer()
    loop.run_until_complete(server.__aenter__())
    ep = EndpointConfig(
        base_url=server.base_url,
        model="m",
        retry=RetryPolicy(max_attempts=1),
        timeouts=Timeouts(first_token=5, idle=5, total=10),
    )
    client = ChatClient(ep)
    loop.run_until_complete(client.__aenter__())
    yield loop, server, client
    loop.run_until_complete(client.close())
    loop.run_until_complete(server.__aexit__(None, None, None))
    loop.close()


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(parts=mutated_streams())
def test_mutated_vllm_streams(
    served: tuple[asyncio.AbstractEventLoop, ScriptedServer, ChatClient], parts: list[bytes]
) -> None:
    loop, server, client = served
    server.scripts["default"] = Script(parts=[(0.0, p) for p in parts])
    seen: list[CallRecord] = []
    client.on_record = seen.append
    res = loop.run_until_complete(client.chat(MSGS, tools=None))
    assert len(seen) == 1 and seen[0] is res.record
    rec = res.record
    assert rec.error_kind in KNOWN_KINDS, rec
    assert (rec.status == "ok") == (rec.error_kind is None)
    assert CallRecord.from_dict(orjson.loads(rec.to_json())) == rec
    assert isinstance(res.content, str) and isinstance(res.reasoning, str)
    for tc in res.tool_calls:
        assert isinstance(tc["id"], str) and isinstance(tc["function"]["arguments"], str)
        assert tc["function"]["name"] is None or isinstance(tc["function"]["name"], str)
    if rec.ok:
        assert rec.finish_reason is None or isinstance(rec.finish_reason, str)


def test_unmutated_captures_are_ok(
    served: tuple[asyncio.AbstractEventLoop, ScriptedServer, ChatClient],
) -> None:
    # The baseline of the property: without mutations every capture parses cleanly.
    loop, server, client = served
    for name in CAPTURES:
        server.scripts["default"] = Script(parts=[(0.0, b"".join(EVENTS[name]))])
        res = loop.run_until_complete(client.chat(MSGS))
        assert res.ok, (name, res.record)
