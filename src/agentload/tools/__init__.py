"""A domain's tools served to agents agentload does not drive: MCP, HTTP/JSON, command scripts.

Library API (the CLI `agentload tools serve|scripts` is a thin layer over it)::

    from agentload.tools import ToolServer

    async with ToolServer("airline", host="127.0.0.1", port=0) as ts:
        sid = ts.create_session("airline/007")    # one fresh environment per session
        ts.mcp_url(sid)      # http://127.0.0.1:PORT/sessions/<sid>/mcp  (MCP, streamable HTTP)
        ts.url               # JSON endpoint root (routes below)
        ...                  # the agent calls tools
        grade = ts.grade(sid, replies=["...agent's replies to the user..."])  # domain Grade
        ts.session(sid).env.actions   # the calls that reached the database (what grading replays)
        ts.session(sid).log           # every call as made, with result, ok, reached and timing
        ts.close_session(sid)

Sessions. Each session holds one `Environment` (a fresh database of the domain, seed 0 unless
given) and, when created for a task, that task, so the domain grader can compare its database
with the task's goal. The grade's `reward` needs the agent's replies to the user (the task's
required outputs are looked for in them); whoever plays the user passes them to `grade`.

MCP over HTTP, two ways to reach an environment:
- `/sessions/{sid}/mcp`: the session created beforehand (`create_session` or
  `POST /sessions`); every MCP connection to that URL acts on the same environment. This is
  what a harness that creates one session per episode hands its agent.
- `/mcp[?task=airline/007]`: a fresh environment per MCP session, keyed by the
  `Mcp-Session-Id` the server assigns at initialisation; the task comes from `?task=` or the
  server's `default_task`. It is listed as session `mcp-<Mcp-Session-Id>`.

HTTP/JSON (errors are 4xx with `{"error": message, "field": name}`):
- `GET /healthz`, `GET /tools` (OpenAI tool schemas), `GET /policy`
- `POST /sessions` `{"task_id": "airline/007", "seed": 0}` -> 201 `{"session", "mcp_url", ...}`
- `GET /sessions`, `GET /sessions/{sid}` (task, actions, every tool call with its result
  and timing), `DELETE /sessions/{sid}`
- `GET /sessions/{sid}/tools` -> OpenAI tool schemas
- `POST /sessions/{sid}/tools/{name}` body = the arguments object -> `{"ok", "content"}`
  (a tool's own refusal is `ok: false` with `"Error: ..."`, status 200; an unknown tool is 404
  and arguments that do not fit the schema are 400, neither reaches the environment)
- `POST /sessions/{sid}/tool_calls` an assistant message's OpenAI `tool_calls` -> the `tool`
  messages to append
- `POST /sessions/{sid}/grade` `{"replies": [...]}` -> the Grade plus the session's actions

stdio: `serve_stdio(session)` serves one session over stdin/stdout (the agent spawns the
process; `agentload tools serve --transport stdio --task T`), and
`bridge.serve_stdio_remote(url)` serves a session of a running ToolServer over stdio,
forwarding each call to its JSON endpoint (`--transport stdio --remote URL/sessions/SID`), for
agents that only spawn MCP servers while the harness keeps and grades the environment.

Optionally (`grade_tool=True`) the MCP server also offers `agentload_grade`, the grader as a
tool, for setups where only the MCP connection reaches the server.

Command scripts: `write_scripts(domain, out_dir, url)` writes one stdlib-Python executable per
tool that POSTs its arguments to the JSON endpoint and prints the result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentload.tools.sessions import (
    NotGradable,
    SessionStore,
    ToolsError,
    ToolSession,
    UnknownDomain,
    UnknownSession,
    UnknownTask,
    UnknownTool,
)

if TYPE_CHECKING:
    from agentload.tools.mcp_server import GRADE_TOOL, build_mcp_server, serve_stdio
    from agentload.tools.scripts import write_scripts
    from agentload.tools.server import ToolServer

__all__ = [
    "GRADE_TOOL",
    "NotGradable",
    "SessionStore",
    "ToolServer",
    "ToolSession",
    "ToolsError",
    "UnknownDomain",
    "UnknownSession",
    "UnknownTask",
    "UnknownTool",
    "build_mcp_server",
    "serve_stdio",
    "write_scripts",
]


def __getattr__(name: str) -> object:
    if name == "ToolServer":
        # lazy: start-up: the MCP SDK and uvicorn load only when a server is asked for
        from agentload.tools.server import ToolServer

        return ToolServer
    if name in ("build_mcp_server", "serve_stdio", "GRADE_TOOL"):
        # lazy: start-up: the MCP SDK and uvicorn load only when a server is asked for
        from agentload.tools import mcp_server

        return getattr(mcp_server, name)
    if name == "write_scripts":
        # lazy: start-up: as the servers, loaded when asked for
        from agentload.tools.scripts import write_scripts

        return write_scripts
    raise AttributeError(name)
