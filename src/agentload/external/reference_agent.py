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

With `--serve` the same agent answers as an OpenAI-compatible agent endpoint (one process for
every session), the shape the `openai-agent` adapter talks to.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from dataclasses import dataclass
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


async def _complete(
    llm: Any, cfg: AgentConfig, messages: list[Any], tools: list[Any]
) -> dict[str, Any]:
    """One streamed model call; the assistant message it produced (text and tool calls)."""
    kwargs: dict[str, Any] = {"model": cfg.model, "messages": messages, "stream": True}
    if tools:
        kwargs["tools"] = tools
    if cfg.max_tokens:
        kwargs["max_tokens"] = cfg.max_tokens
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


@dataclass
class AgentConfig:
    """Where one session's agent finds its model and tools."""

    base_url: str
    model: str
    mcp_url: str
    api_key: str = "EMPTY"
    max_tokens: int | None = None
    max_steps: int = 30

    @classmethod
    def from_env(cls) -> AgentConfig:
        max_tokens = os.environ.get("AGENTLOAD_MAX_TOKENS")
        return cls(
            base_url=_env("OPENAI_BASE_URL"),
            model=_env("AGENTLOAD_MODEL"),
            mcp_url=_env("AGENTLOAD_MCP_URL"),
            api_key=os.environ.get("OPENAI_API_KEY") or "EMPTY",
            max_tokens=int(max_tokens) if max_tokens else None,
            max_steps=int(os.environ.get("AGENTLOAD_MAX_STEPS", "30")),
        )


async def answer(cfg: AgentConfig, message: str, messages: list[Any], policy: str = "") -> str:
    """Run one user turn (`messages`: the conversation so far, extended in place): model and
    tool calls until the model replies with text."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from openai import AsyncOpenAI

    llm = AsyncOpenAI(base_url=cfg.base_url, api_key=cfg.api_key)
    reply = ""
    try:
        async with (
            streamable_http_client(cfg.mcp_url) as (read, write, _),
            ClientSession(read, write) as mcp,
        ):
            init = await mcp.initialize()
            tools = [_tool_schema(t) for t in (await mcp.list_tools()).tools]
            if not messages:
                policy = init.instructions or policy
                if policy:
                    messages.append({"role": "system", "content": policy})
            messages.append({"role": "user", "content": message})
            for _ in range(cfg.max_steps):
                said = await _complete(llm, cfg, messages, tools)
                messages.append(said)
                if not said.get("tool_calls"):
                    reply = said["content"] or ""
                    break
                messages.extend(await _call_tools(mcp, said["tool_calls"]))
    finally:
        await llm.close()
    if not reply:
        raise RuntimeError(f"no reply to the user after {cfg.max_steps} model calls")
    return reply


# --- serving: the same agent behind an OpenAI-compatible endpoint (the openai-agent adapter)


def agent_app() -> Any:
    """An aiohttp app answering `POST /v1/chat/completions` as this agent: the last user
    message is the turn, the conversation (with tool calls) is kept per session
    (`X-Session-ID`, else the body's `user`), and the model and tools are found at the URLs in
    the `X-Agentload-LLM-Base-URL` and `X-Agentload-MCP-URL` headers."""
    from aiohttp import web

    sessions: dict[str, list[Any]] = {}

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        sid = request.headers.get("X-Session-ID") or str(body.get("user") or "default")
        turns = [m for m in body.get("messages", []) if m.get("role") == "user"]
        base_url = request.headers.get("X-Agentload-LLM-Base-URL")
        mcp_url = request.headers.get("X-Agentload-MCP-URL")
        if not turns or not base_url or not mcp_url:
            return _error(
                400,
                "need a user message and the X-Agentload-LLM-Base-URL and "
                "X-Agentload-MCP-URL headers",
            )
        cfg = AgentConfig(base_url=base_url, model=str(body.get("model") or ""), mcp_url=mcp_url)
        try:
            text = await answer(
                cfg, str(turns[-1].get("content") or ""), sessions.setdefault(sid, [])
            )
        except Exception as e:
            return _error(502, f"{type(e).__name__}: {e}")
        return web.json_response(
            {
                "id": f"agent-{sid}-{len(sessions[sid])}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": cfg.model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": "stop",
                    }
                ],
            }
        )

    def _error(status: int, message: str) -> web.Response:
        return web.json_response({"error": {"message": message, "code": status}}, status=status)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(
        prog="python -m agentload.external.reference_agent",
        description="agentload's reference external agent: one user turn from stdin to "
        "stdout (configured by the environment the external workload sets), or --serve as "
        "an OpenAI-compatible agent endpoint.",
    )
    ap.add_argument("--serve", action="store_true", help="serve POST /v1/chat/completions")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8200)
    args = ap.parse_args(argv)
    if args.serve:
        from aiohttp import web

        web.run_app(agent_app(), host=args.host, port=args.port)
        return 0
    message = sys.stdin.read()
    cfg = AgentConfig.from_env()
    state = Path(_env("AGENTLOAD_STATE_DIR")) / "conversation.json"
    messages: list[Any] = json.loads(state.read_text()) if state.exists() else []
    path = os.environ.get("AGENTLOAD_POLICY_FILE")
    policy = Path(path).read_text() if path and not messages else ""
    try:
        reply = asyncio.run(answer(cfg, message, messages, policy))
    except Exception as e:
        print(f"reference agent: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    finally:
        state.write_text(json.dumps(messages))
    print(reply)
    return 0


if __name__ == "__main__":
    sys.exit(main())
