"""A run against a server whose every answer is malformed keeps one record per call."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentload.config import build_config
from agentload.results.jsonl import load_jsonl
from agentload.runner import execute_run
from scripted_server import DONE, Script, ScriptedServer, chunk, sse, usage_chunk

BAD_CHUNKS = {
    "content-int": sse(chunk({"content": 123})),
    "choices-null": sse({"choices": [None]}),
    "tool-calls-string": sse(chunk({"tool_calls": "x"})),
    "usage-string": sse({"choices": [], "usage": "x"}),
}


def _quiet(_msg: str) -> None:
    pass


@pytest.mark.parametrize("bad", list(BAD_CHUNKS), ids=list(BAD_CHUNKS))
async def test_every_malformed_call_is_recorded(tmp_path: Path, bad: str) -> None:
    out = tmp_path / "run"
    async with ScriptedServer() as server:
        server.scripts["default"] = Script(
            parts=[
                (0.0, sse(chunk({"role": "assistant", "content": ""}))),
                (0.0, BAD_CHUNKS[bad]),
                (0.0, sse(chunk({}, "stop"))),
                (0.0, sse(usage_chunk(10, 1))),
                (0.0, DONE),
            ]
        )
        cfg = build_config(
            data={
                "out": str(out),
                "endpoints": {"agent": {"base_url": server.base_url, "model": "m"}},
                "workload": {"tasks": ["airline/000-003"], "user": "scripted"},
                "load": {"concurrency": 2},
                "report": False,
                # The preflight would refuse this server before the run: the point here is
                # what the run records when every call goes wrong.
                "preflight": False,
            }
        )
        res = await execute_run(cfg, progress="off", say=_quiet, install_signals=False)
        sent = len(server.requests)
    calls = load_jsonl(out / "calls.jsonl")
    assert sent > 0 and len(calls) == sent
    assert {c["error_kind"] for c in calls} == {"malformed_stream"}
    assert res.summary.errors.calls_failed == sent
