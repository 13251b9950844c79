"""Agent adapters: how the `external` workload talks to an agent it does not drive.

An adapter opens one agent session per episode, hands it each user message and returns the
agent's reply; the agent does its own model calls (through agentload's proxy, at
`AgentSession.llm_base_url`) and tool calls (through agentload's tool server, at
`AgentSession.mcp_url` or `AgentSession.tools_url`) in between.

Built-in adapters:

- ``command``: a command run once per user turn. The message arrives on stdin (and as the
  ``{message}`` placeholder); the reply is what the command prints on stdout. The session's
  URLs and ids are in its environment (`AgentSession.env`) and in placeholders.
- ``openai-agent``: an OpenAI-compatible agent endpoint (``POST {url}/chat/completions``);
  the conversation so far goes in `messages`, the reply is the answer's text.
- ``openclaw``: OpenClaw's `openclaw agent` command, configured per session
  (`agentload.external.openclaw`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import string
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from agentload.config import ConfigError

if TYPE_CHECKING:
    from agentload.config import ExternalConfig

PLACEHOLDERS = (
    "message",
    "session",
    "task",
    "domain",
    "base_url",
    "model",
    "mcp_url",
    "tools_url",
    "state_dir",
    "policy_file",
    "python",
)
"""What a `command` template may name in braces (`{python}`: the interpreter agentload runs
on, e.g. for `{python} -m agentload.external.reference_agent`)."""


REFERENCE_COMMAND = ("{python}", "-m", "agentload.external.reference_agent")
"""The command adapter's default: agentload's reference agent."""


class AgentError(Exception):
    """The agent failed a turn (crashed, timed out, gave no reply): the episode ends with
    termination `protocol_error` and this message."""


@dataclass
class AgentSession:
    """One episode as the external agent sees it."""

    session_id: str
    task_id: str
    domain: str
    llm_base_url: str
    """OpenAI base URL (ending in /v1) of the proxy, with this session in its path."""
    model: str
    api_key: str | None
    mcp_url: str
    """The domain's tools as an MCP server (streamable HTTP), bound to this session."""
    tools_url: str
    """The same tools over plain HTTP/JSON (`GET` lists them, `POST .../{name}` calls one)."""
    policy_file: Path
    """The domain policy (the system prompt agentload's own agents get)."""
    state_dir: Path
    """A folder of this session's own, for agents that keep state between turns."""
    max_tokens: int | None = None
    """max_tokens agentload's own agent would send (a hint the agent may follow)."""
    history: list[dict[str, Any]] = field(default_factory=list)
    """User and assistant messages so far (for stateless agent endpoints)."""

    def values(self, message: str = "") -> dict[str, str]:
        return {
            "message": message,
            "session": self.session_id,
            "task": self.task_id,
            "domain": self.domain,
            "base_url": self.llm_base_url,
            "model": self.model,
            "mcp_url": self.mcp_url,
            "tools_url": self.tools_url,
            "state_dir": str(self.state_dir),
            "policy_file": str(self.policy_file),
            "python": sys.executable,
        }

    def env(self) -> dict[str, str]:
        """What an agent process finds in its environment."""
        env = {
            "OPENAI_BASE_URL": self.llm_base_url,
            "OPENAI_API_KEY": self.api_key or "EMPTY",
            "AGENTLOAD_SESSION_ID": self.session_id,
            "AGENTLOAD_TASK_ID": self.task_id,
            "AGENTLOAD_DOMAIN": self.domain,
            "AGENTLOAD_MODEL": self.model,
            "AGENTLOAD_MCP_URL": self.mcp_url,
            "AGENTLOAD_TOOLS_URL": self.tools_url,
            "AGENTLOAD_STATE_DIR": str(self.state_dir),
            "AGENTLOAD_POLICY_FILE": str(self.policy_file),
        }
        if self.max_tokens is not None:
            env["AGENTLOAD_MAX_TOKENS"] = str(self.max_tokens)
        return env


class AgentAdapter(ABC):
    """One way of talking to an external agent; one instance serves every session of a run."""

    name: ClassVar[str]

    def __init__(self, cfg: ExternalConfig) -> None:
        self.cfg = cfg

    def check(self) -> None:  # noqa: B027 - optional hook
        """Raise ConfigError for a configuration no session can run with (called before the
        results folder is opened)."""

    async def open(self, session: AgentSession) -> None:  # noqa: B027 - optional hook
        """Called once before the session's first turn."""

    @abstractmethod
    async def turn(self, session: AgentSession, message: str) -> str:
        """The agent's reply to one user message; AgentError when it gives none."""

    async def close(self, session: AgentSession) -> None:  # noqa: B027 - optional hook
        """Called once after the session's last turn, also when it failed."""


def _argv(template: str | list[str]) -> list[str]:
    return shlex.split(template) if isinstance(template, str) else list(template)


def check_template(argv: list[str], where: str) -> None:
    """ConfigError unless every `{name}` in `argv` is a known placeholder."""
    for arg in argv:
        try:
            names = [f for _, f, _, _ in string.Formatter().parse(arg) if f is not None]
        except ValueError as e:
            raise ConfigError(f"invalid configuration: field '{where}': {arg!r}: {e}") from None
        for n in names:
            if n not in PLACEHOLDERS:
                raise ConfigError(
                    f"invalid configuration: field '{where}': unknown placeholder {{{n}}} "
                    f"(known: {', '.join('{' + p + '}' for p in PLACEHOLDERS)})"
                )


async def run_turn_command(
    argv: list[str], stdin: bytes, env: dict[str, str], timeout_s: float, cwd: Path | None
) -> str:
    """Run one agent turn as a process: stdin in, stdout (stripped) out; AgentError when it
    fails, prints nothing or runs past `timeout_s` (it is killed then, and when cancelled)."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, **env},
            cwd=cwd,
        )
    except OSError as e:
        raise AgentError(f"cannot start the agent command {argv[0]!r}: {e}") from None
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), timeout_s)
    except TimeoutError:
        raise AgentError(f"the agent's turn took longer than {timeout_s:g} s") from None
    finally:
        if proc.returncode is None:  # timed out or cancelled: never leave it running
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(Exception):
                await asyncio.shield(proc.wait())
    if proc.returncode != 0:
        tail = err.decode(errors="replace").strip().splitlines()[-3:]
        raise AgentError(
            f"the agent command exited with status {proc.returncode}"
            + (": " + " | ".join(tail) if tail else "")
        )
    reply = out.decode(errors="replace").strip()
    if not reply:
        raise AgentError("the agent command printed no reply")
    return reply


class CommandAdapter(AgentAdapter):
    """A command run once per user turn (message on stdin, reply on stdout)."""

    name = "command"

    def argv(self) -> list[str]:
        return _argv(self.cfg.command) if self.cfg.command else list(REFERENCE_COMMAND)

    def check(self) -> None:
        argv = self.argv()
        if not argv:
            raise ConfigError("invalid configuration: field 'external.command': empty command")
        check_template(argv, "external.command")

    async def turn(self, session: AgentSession, message: str) -> str:
        values = session.values(message)
        argv = [a.format_map(values) for a in self.argv()]
        env = {**self.cfg.env, **session.env()}
        return await run_turn_command(
            argv, message.encode(), env, self.cfg.turn_timeout_s, session.state_dir
        )


class OpenAIAgentAdapter(AgentAdapter):
    """An agent behind an OpenAI-compatible chat endpoint: the user and assistant messages so
    far are posted each turn; the session's URLs go along as headers."""

    name = "openai-agent"

    def check(self) -> None:
        url = self.cfg.url
        if not url or not url.startswith(("http://", "https://")):
            raise ConfigError(
                "invalid configuration: field 'external.url': the openai-agent adapter needs "
                f"the agent's http(s) URL (--agent-url), got {url!r}"
            )
        env = self.cfg.api_key_env
        if env and not os.environ.get(env):
            raise ConfigError(
                f"invalid configuration: field 'external.api_key_env': {env} is not set"
            )

    async def turn(self, session: AgentSession, message: str) -> str:
        import aiohttp

        # lazy: start-up: aiohttp's client loads only for an agent behind an endpoint.
        from agentload.http_sessions import open_session
        from agentload.wire import SESSION_HEADER

        assert self.cfg.url is not None
        url = self.cfg.url.rstrip("/")
        if not url.endswith("/v1"):
            url += "/v1"
        session.history.append({"role": "user", "content": message})
        body = {"model": session.model, "messages": session.history, "user": session.session_id}
        headers = {
            SESSION_HEADER: session.session_id,
            "X-Agentload-LLM-Base-URL": session.llm_base_url,
            "X-Agentload-MCP-URL": session.mcp_url,
            "X-Agentload-Tools-URL": session.tools_url,
        }
        if self.cfg.api_key_env and (key := os.environ.get(self.cfg.api_key_env)):
            headers["Authorization"] = f"Bearer {key}"
        try:
            async with (
                open_session(total_s=self.cfg.turn_timeout_s, connect_s=None) as http,
                http.post(f"{url}/chat/completions", json=body, headers=headers) as r,
            ):
                text = await r.text()
                if r.status != 200:
                    raise AgentError(f"the agent endpoint answered HTTP {r.status}: {text[:200]}")
                data = await r.json(content_type=None)
        except TimeoutError:
            raise AgentError(
                f"the agent's turn took longer than {self.cfg.turn_timeout_s:g} s"
            ) from None
        except aiohttp.ClientError as e:
            raise AgentError(f"the agent endpoint failed: {type(e).__name__}: {e}") from None
        reply = _answer_text(data)
        if not reply:
            raise AgentError("the agent endpoint gave no text reply")
        session.history.append({"role": "assistant", "content": reply})
        return reply


def _answer_text(data: Any) -> str:
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return ""
    if isinstance(content, list):  # content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content.strip() if isinstance(content, str) else ""


ADAPTERS: dict[str, str] = {
    "command": "agentload.external.adapters:CommandAdapter",
    "openai-agent": "agentload.external.adapters:OpenAIAgentAdapter",
    "openclaw": "agentload.external.openclaw:OpenClawAdapter",
}


def make_adapter(cfg: ExternalConfig) -> AgentAdapter:
    """The configured adapter, checked; ConfigError for an unknown name or a bad setting."""
    import importlib

    path = ADAPTERS.get(cfg.adapter)
    if path is None:
        raise ConfigError(
            f"invalid configuration: field 'external.adapter': unknown adapter "
            f"{cfg.adapter!r} (known: {', '.join(ADAPTERS)})"
        )
    module, _, attr = path.partition(":")
    cls = getattr(importlib.import_module(module), attr)
    adapter: AgentAdapter = cls(cfg)
    adapter.check()
    return adapter
