"""An MCP stdio server that forwards to a session of a running tool server.

For agents that only spawn MCP servers as commands (stdio) while the harness keeps the
episode's environment in its `ToolServer`: the agent runs
`agentload tools serve --transport stdio --remote http://HOST:PORT/sessions/SID`, and every
tool call goes to that session over the HTTP/JSON endpoint, so the harness grades it as usual.
"""

from __future__ import annotations

import re
from typing import Any

import aiohttp
import mcp.types as mt
import orjson
from mcp.server.lowlevel import Server

from agentload.http_sessions import open_session
from agentload.tools.sessions import ToolsError
from agentload.version import __version__

_SESSION_URL = re.compile(r"^(https?://[^/]+(?:/.*?)?)/sessions/([^/]+)/?$")


def split_session_url(url: str) -> tuple[str, str]:
    """(root URL, session id) of `http://HOST:PORT[/prefix]/sessions/SID`."""
    m = _SESSION_URL.match(url.strip())
    if not m:
        raise ToolsError(
            f"{url!r} is not a session URL (http://HOST:PORT/sessions/SID)", field="remote"
        )
    return m.group(1), m.group(2)


def _text(text: str, is_error: bool) -> mt.CallToolResult:
    return mt.CallToolResult(content=[mt.TextContent(type="text", text=text)], isError=is_error)


class RemoteSession:
    """A session of a running tool server, reached over its JSON endpoint."""

    def __init__(self, url: str, http: aiohttp.ClientSession) -> None:
        self.root, self.sid = split_session_url(url)
        self.base = f"{self.root}/sessions/{self.sid}"
        self.http = http

    async def _request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else orjson.dumps(body)
        headers = {"Content-Type": "application/json"}
        try:
            async with self.http.request(method, self.base + path, data=data, headers=headers) as r:
                raw = await r.read()
                status = r.status
        except (aiohttp.ClientError, OSError) as e:
            raise ToolsError(f"tool server {self.root} unreachable: {e}") from None
        try:
            return status, orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise ToolsError(f"tool server answered {status} with no JSON") from None

    async def tools(self) -> list[mt.Tool]:
        """The session's tools, as MCP tools; raises ToolsError when the session is unknown."""
        status, body = await self._request("GET", "/tools")
        if status != 200:
            raise ToolsError(f"{self.base}: {body.get('error', status)}", field="remote")
        return [
            mt.Tool(
                name=t["function"]["name"],
                description=t["function"].get("description", ""),
                inputSchema=t["function"]["parameters"],
            )
            for t in body
        ]

    async def policy(self) -> str | None:
        """The domain's policy (the MCP server's instructions), if the server gives it."""
        try:
            async with self.http.get(f"{self.root}/policy") as r:
                body = orjson.loads(await r.read()) if r.status == 200 else {}
        except (aiohttp.ClientError, OSError, orjson.JSONDecodeError):
            return None
        policy = body.get("policy") if isinstance(body, dict) else None
        return policy if isinstance(policy, str) and policy else None

    async def call(self, tool: str, arguments: dict[str, Any]) -> mt.CallToolResult:
        try:
            status, body = await self._request("POST", f"/tools/{tool}", arguments)
        except ToolsError as e:
            return _text(f"Error: {e}", True)
        if status != 200:
            return _text(f"Error: {body.get('error', status)}", True)
        return _text(body["content"], not body["ok"])


async def serve_stdio_remote(url: str) -> None:
    """Serve the tools of the session at `url` over stdin/stdout, forwarding every call; raises
    ToolsError before serving when that session cannot be reached."""
    from mcp.server.stdio import stdio_server

    async with open_session() as http:
        remote = RemoteSession(url, http)
        listed = await remote.tools()
        instructions = await remote.policy()
        server: Server = Server("agentload-tools", version=__version__, instructions=instructions)

        @server.list_tools()
        async def _list_tools() -> list[mt.Tool]:
            return listed

        @server.call_tool(validate_input=False)  # the tool server checks and names the field
        async def _call_tool(tool: str, arguments: dict[str, Any]) -> mt.CallToolResult:
            return await remote.call(tool, arguments)

        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
