"""A small tool-calling agent of agentload's own, run as an external agent: one process per
user turn, the way the `command` adapter runs agents.

    echo "I want to cancel my reservation" | python -m agentload.external.reference_agent

It reads the user's message on stdin and prints its reply to the user on stdout. In between
it works like any agent built on the OpenAI SDK and an MCP client: the model is at
`OPENAI_BASE_URL` (agentload's proxy), the tools come from the MCP server at
`AGENTLOAD_MCP_URL` (agentload's tool server, which also gives the domain policy as its
instructions), and it calls the model until it answers with text instead of tool calls. The
conversation is kept in `AGENTLOAD_STATE_DIR/conversation.json` from turn to turn.

Environment: OPENAI_BASE_URL, OPENAI_API_KEY, AGENTLOAD_MODEL, AGENTLOAD_MCP_URL,
AGENTLOAD_STATE_DIR (all set by the `external` workload); optional AGENTLOAD_POLICY_FILE
(used when the MCP server gives no instructions), AGENTLOAD_MAX_TOKENS,
AGENTLOAD_MAX_STEPS (model calls per turn, default 30).

Needs the `openai` and `mcp` packages. Exit status 0 with the reply on stdout; 1 with one line
on stderr when it fails.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise SystemExit(f"reference agent: environment variable {name} is not set")
    return value


def _tool_schema(tool: Any) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description or "",
            "parameters": tool.inputSchema or {"type": "object", "properties": {}},
        },
    }


def _tool_text(result: Any) -> str:
    text = "".join(getattr(c, "text", "") for c in result.content)
    return f"Error: {text}" if result.isError and not text.startswith("Error") else text


async def _complete(llm: Any, model: str, messages: list[Any], tools: list[Any]) -> dict:
    """One streamed model call; the assistant message it produced (text and tool calls)."""
    kwargs: dict[str, Any] = {"model": model, "messages": messages, "stream": True}
    if tools:
        kwargs["tools"] = tools
    if max_tokens := os.environ.get("AGENTLOAD_MAX_TOKENS"):
        kwargs["max_tokens"] = int(max_tokens)
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    stream = await llm.chat.completions.create(**kwargs)
    async for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        if delta.content:
            text.append(delta.content)
        for tc in delta.tool_calls or ():
            call = calls.setdefault(
                tc.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
            )
            if tc.id:
                call["id"] = tc.id
            if tc.function and tc.function.name:
                call["function"]["name"] += tc.function.name
            if tc.function and tc.function.arguments:
                call["function"]["arguments"] += tc.function.arguments
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


async def _call_tools(mcp: Any, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for call in calls:
        fn = call["function"]
        try:
            args = json.loads(fn["arguments"] or "{}")
            result = _tool_text(await mcp.call_tool(fn["name"], args))
        except json.JSONDecodeError as e:
            result = f"Error: the arguments are not valid JSON: {e}"
        out.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    return out


async def answer(message: str, messages: list[Any], policy: str) -> str:
    """Run one user turn (`messages`: the conversation so far, extended in place): model and
    tool calls until the model replies with text."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client
    from openai import AsyncOpenAI

    model = _env("AGENTLOAD_MODEL")
    max_steps = int(os.environ.get("AGENTLOAD_MAX_STEPS", "30"))
    llm = AsyncOpenAI(base_url=_env("OPENAI_BASE_URL"), api_key=_env("OPENAI_API_KEY"))
    async with (
        streamablehttp_client(_env("AGENTLOAD_MCP_URL")) as (read, write, _),
        ClientSession(read, write) as mcp,
    ):
        init = await mcp.initialize()
        tools = [_tool_schema(t) for t in (await mcp.list_tools()).tools]
        if not messages:
            policy = init.instructions or policy
            if policy:
                messages.append({"role": "system", "content": policy})
        messages.append({"role": "user", "content": message})
        reply = ""
        for _ in range(max_steps):
            said = await _complete(llm, model, messages, tools)
            messages.append(said)
            if not said.get("tool_calls"):
                reply = said["content"] or ""
                break
            messages.extend(await _call_tools(mcp, said["tool_calls"]))
    await llm.close()
    if not reply:
        raise RuntimeError(f"no reply to the user after {max_steps} model calls")
    return reply


def main() -> int:
    message = sys.stdin.read()
    state = Path(_env("AGENTLOAD_STATE_DIR")) / "conversation.json"
    messages: list[Any] = json.loads(state.read_text()) if state.exists() else []
    path = os.environ.get("AGENTLOAD_POLICY_FILE")
    policy = Path(path).read_text() if path and not messages else ""
    try:
        reply = asyncio.run(answer(message, messages, policy))
    except SystemExit:
        raise
    except Exception as e:
        print(f"reference agent: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    finally:
        state.write_text(json.dumps(messages))
    print(reply)
    return 0


if __name__ == "__main__":
    sys.exit(main())
