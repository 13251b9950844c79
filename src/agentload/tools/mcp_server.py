"""A domain's tools as an MCP server (the official `mcp` SDK's low-level server).

Which environment a call acts on is decided per request by a resolver (see `ToolServer` for
the HTTP rules); the stdio server has exactly one session per process.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import mcp.types as mt
from mcp.server.lowlevel import Server

from agentload.domains import Tool
from agentload.tools.sessions import ToolsError, ToolSession
from agentload.version import __version__

GRADE_TOOL = "agentload_grade"
"""Name of the optional grading tool (a name no domain tool uses)."""

_GRADE_TOOL_SCHEMA = {
    "type": "object",
    "properties": {
        "replies": {
            "type": "array",
            "items": {"type": "string"},
            "description": "The agent's replies to the user, in order (required outputs are "
            "looked for in them).",
        }
    },
    "additionalProperties": False,
}

Resolver = Callable[[Any], ToolSession]
"""request (a Starlette Request over HTTP, None over stdio) -> the session a call acts on;
raises ToolsError when there is none."""


def _error(message: str) -> mt.CallToolResult:
    return mt.CallToolResult(content=[mt.TextContent(type="text", text=message)], isError=True)


def build_mcp_server(
    resolve: Resolver,
    tools: Sequence[Tool],
    *,
    name: str = "agentload-tools",
    instructions: str | None = None,
    grade_tool: bool = False,
) -> Server:
    """An MCP server offering a domain's `tools` (their JSON schemas as `inputSchema`; read
    tools marked read-only), each call run in the session `resolve` picks. With
    `grade_tool`, also `agentload_grade` (the domain grader)."""
    server: Server = Server(name, version=__version__, instructions=instructions)
    listed = [
        mt.Tool(
            name=t.name,
            description=t.description,
            inputSchema=t.parameters,
            annotations=mt.ToolAnnotations(
                readOnlyHint=not t.writes,
                destructiveHint=t.writes,
                idempotentHint=not t.writes,
                openWorldHint=False,  # the domain's own database, nothing outside
            ),
        )
        for t in tools
    ]
    if grade_tool:
        listed.append(
            mt.Tool(
                name=GRADE_TOOL,
                description="Grade this session's episode with the domain grader: reward, "
                "whether the database matches the task's goal, missing outputs.",
                inputSchema=_GRADE_TOOL_SCHEMA,
                annotations=mt.ToolAnnotations(readOnlyHint=True, openWorldHint=False),
            )
        )

    @server.list_tools()
    async def _list_tools() -> list[mt.Tool]:
        return listed

    # Arguments are checked by the session (the same messages over every transport), not by
    # the SDK.
    @server.call_tool(validate_input=False)
    async def _call_tool(tool: str, arguments: dict[str, Any]) -> mt.CallToolResult:
        try:
            session = resolve(server.request_context.request)
            if grade_tool and tool == GRADE_TOOL:
                replies = arguments.get("replies") or []
                if not isinstance(replies, list) or not all(isinstance(r, str) for r in replies):
                    return _error("Error: replies must be a list of strings")
                g = session.grade(replies).to_dict()
                return mt.CallToolResult(
                    content=[mt.TextContent(type="text", text=_json(g))],
                    structuredContent=g,
                )
            result = session.call(tool, arguments)
        except ToolsError as e:
            return _error(f"Error: {e}")
        return mt.CallToolResult(
            content=[mt.TextContent(type="text", text=result.content)], isError=not result.ok
        )

    return server


def _json(obj: Any) -> str:
    import orjson

    return orjson.dumps(obj).decode()


async def serve_stdio(session: ToolSession, *, grade_tool: bool = False) -> None:
    """Serve one session's tools over stdin/stdout until the client closes them."""
    from mcp.server.stdio import stdio_server

    server = build_mcp_server(
        lambda _request: session,
        session.domain.tools,
        instructions=session.domain.system_prompt() or None,
        grade_tool=grade_tool,
    )
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())
