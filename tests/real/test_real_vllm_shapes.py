"""The simulator and a real vLLM answer the same requests with the same stream shapes: event
field sets, where usage comes, how tool-call fragments are cut."""

from __future__ import annotations

from typing import Any

import pytest
from real_helpers import raw_stream, run
from test_real_vllm_wire import FORCED_CALL, WEATHER_TOOL

from agentload.sim import SimConfig, SimServer

pytestmark = pytest.mark.real


def _text_body(model: str) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [
            {"role": "system", "content": "You are a helpful agent."},
            {"role": "user", "content": "Say something about flights."},
        ],
        "max_tokens": 12,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def _tool_body(model: str) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [WEATHER_TOOL],
        "tool_choice": "auto",
        "max_tokens": 64,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        **FORCED_CALL,
    }


def _kind(e: dict[str, Any]) -> str:
    """What one event is, to a client."""
    if not e.get("choices"):
        return "usage" if e.get("usage") else "empty"
    (c,) = e["choices"]
    d = c.get("delta") or {}
    if c.get("finish_reason"):
        return f"finish:{c['finish_reason']}" + ("+content" if d.get("content") else "")
    if d.get("role"):
        return "role"
    if d.get("tool_calls"):
        (tc,) = d["tool_calls"]
        return "tool_first" if "id" in tc else "tool_args"
    return "content"


def shape(events: list[dict[str, Any]]) -> dict[str, Any]:
    """A stream's shape: the event sequence (repeats collapsed) and the field sets."""
    seq: list[str] = []
    for e in events:
        k = _kind(e)
        if not seq or seq[-1] != k or k not in ("content", "tool_args"):
            seq.append(k)
    usage = [e for e in events if e.get("usage")]
    frags = [
        tc
        for e in events
        for c in e.get("choices") or []
        for tc in (c.get("delta") or {}).get("tool_calls") or []
    ]
    return {
        "sequence": seq,
        "event_fields": sorted({k for e in events for k in e if k != "usage"} & CLIENT_FIELDS),
        "choice_fields": sorted(
            {k for e in events for c in e.get("choices") or [] for k in c} & CHOICE_FIELDS
        ),
        "usage_events": len(usage),
        "usage_last": bool(usage) and usage[-1] is events[-1],
        "usage_fields": sorted(usage[-1]["usage"]) if usage else [],
        "usage_details": sorted(usage[-1]["usage"].get("prompt_tokens_details") or {})
        if usage
        else [],
        "first_fragment": sorted(frags[0]) if frags else [],
        "first_fragment_function": sorted(frags[0]["function"]) if frags else [],
        "later_fragments": sorted({k for f in frags[1:] for k in f}),
        "later_fragment_function": sorted({k for f in frags[1:] for k in f["function"]}),
    }


# Fields OpenAI-compatible clients read; engine-specific extras (vLLM's token_ids,
# prompt_token_ids, stop_reason ...) are outside the contract.
CLIENT_FIELDS = {"id", "object", "created", "model", "choices", "system_fingerprint"}
CHOICE_FIELDS = {"index", "delta", "finish_reason", "logprobs"}


async def _both(server: Any, body_for: Any) -> tuple[list[Any], list[Any]]:
    real = await raw_stream(server.base_url, body_for(server.model))
    cfg = SimConfig(port=0, model=server.model, speedup=50, tool_call_probability=1.0)
    async with SimServer(cfg) as sim:
        simulated = await raw_stream(sim.base_url, body_for(server.model))
    return real, simulated


@pytest.mark.parametrize("body_for", [_text_body, _tool_body], ids=["text", "tool-call"])
def test_simulator_streams_have_vllms_shapes(vllm_server: Any, body_for: Any) -> None:
    real, simulated = run(_both(vllm_server, body_for))
    want, got = shape(real), shape(simulated)
    assert got == want, f"simulator {got}\n   vLLM {want}"
