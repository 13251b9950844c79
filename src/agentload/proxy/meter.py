"""The proxy's own measurement of a passed-through reply.

On the forwarding path the proxy only keeps each upstream chunk and its arrival time (two list
appends); everything else happens here, after the last byte has been written to the caller,
through the client's own code: the reads are folded by `client.stream.fold_stream` (the parser
`ChatClient` runs on a live stream) and the record is completed by `client.finish_call`. So a
proxied call and a direct one are measured and scored alike (docs/metrics.md): TTFT is the
arrival of the first chunk that carries a token of any kind, ITL the gaps between such chunks,
token counts the server's usage (estimated, and marked so, when absent), and a malformed
chunk is the same error with the same message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentload.client.client import CallResult, finish_call
from agentload.client.errors import SHAPE_ERRORS, CallError
from agentload.client.record import CallRecord
from agentload.client.stream import Attempt, assemble, fold_body, fold_stream
from agentload.client.tokens import HeuristicCounter

_COUNTER = HeuristicCounter()


# Why a proxied call counts as failed: the client's own error, with a kind of the taxonomy
# (record.ERROR_KINDS).
Failure = CallError


class Answer:
    """What one reply said: the client's accumulators, assembled once the record is done."""

    __slots__ = ("acc", "result")

    def __init__(self, acc: Attempt | None = None) -> None:
        self.acc = acc if acc is not None else Attempt()
        self.result: CallResult | None = None  # set by finish_record

    def message(self, call_id: str) -> dict[str, Any]:
        """The assistant message, as the trajectory keeps it."""
        if self.result is not None:
            content, calls = self.result.content, self.result.tool_calls
        else:
            try:
                content, _, calls = assemble(self.acc, call_id)
            except SHAPE_ERRORS:
                content, calls = "", []
        msg: dict[str, Any] = {"role": "assistant", "content": content or None}
        if calls:
            msg["tool_calls"] = calls
        return msg


def parse_stream(
    chunks: Sequence[bytes], times: Sequence[int], secrets: Sequence[str]
) -> tuple[Answer, Failure | None]:
    """The answer an SSE reply carried; `times[i]` is when `chunks[i]` arrived."""
    acc, err = fold_stream(chunks, times, secrets)
    return Answer(acc), err


def parse_body(raw: bytes, arrived: int, secrets: Sequence[str]) -> tuple[Answer, Failure | None]:
    """The answer of a non-streamed reply (its tokens all arrive at once, at `arrived`)."""
    acc, err = fold_body(raw, secrets)
    if err is None and (acc.content or acc.reasoning or acc.tool_slots):
        acc.token_times.append(arrived)
        acc.first_token_ns = arrived
    return Answer(acc), err


def finish_record(
    rec: CallRecord,
    ans: Answer,
    err: Failure | None,
    messages: Sequence[Any],
    tools: Sequence[Any] | None,
) -> None:
    """Fill `rec` (whose start_ns, end_ns and headers_ns are set) from the answer."""
    acc = ans.acc
    acc.headers_ns = rec.headers_ns
    ans.result = CallResult(rec)
    finish_call(rec, ans.result, acc, err, messages, tools, _COUNTER)
    rec.total_s = rec.e2e_s or 0.0
