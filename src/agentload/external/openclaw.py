"""OpenClaw (the npm package `openclaw`) as an external agent.

Each episode gets its own OpenClaw home: a config file (`OPENCLAW_CONFIG_PATH`) and a state
folder (`OPENCLAW_STATE_DIR`, where OpenClaw keeps its sessions), so concurrent episodes never
share state. The config declares

- one OpenAI-compatible model provider, `agentload`, whose `baseUrl` is the episode's proxy
  URL (so every model call is recorded in the episode, and reaches the endpoint under test);
- the domain's tools as one MCP server (streamable HTTP) bound to the episode's tool session;
  OpenClaw offers them to its model as `{domain}__{tool}`;
- a tool policy that leaves the model only those tools (profile `minimal` plus `bundle-mcp`,
  its two remaining built-ins denied, Tool Search off), so the model sees the domain's tools
  and nothing else, as agentload's own agent does;
- the domain policy as the workspace's `AGENTS.md`, which OpenClaw puts in its system prompt.

Each user turn is one `openclaw agent --local --session-id ID --message-file F --json` run;
OpenClaw keeps the conversation in its session between turns. Its reply is the text of the
JSON result's payloads. Findings and limits: docs/external-agents.md.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from agentload.config import ConfigError
from agentload.external.adapters import AgentAdapter, AgentError, AgentSession, run_turn_command

PROVIDER = "agentload"
CONTEXT_WINDOW = 32768
"""What OpenClaw is told the model's context holds (its own system prompt is ~7k tokens)."""


def openclaw_config(session: AgentSession, workspace: Path) -> dict[str, Any]:
    """The OpenClaw configuration of one episode."""
    model = {
        "id": session.model,
        "name": session.model,
        "reasoning": False,
        "input": ["text"],
        "contextWindow": CONTEXT_WINDOW,
        "maxTokens": session.max_tokens or 1024,
    }
    return {
        "models": {
            "providers": {
                PROVIDER: {
                    "baseUrl": session.llm_base_url,
                    "apiKey": session.api_key or "EMPTY",
                    "api": "openai-completions",
                    "models": [model],
                }
            }
        },
        "agents": {
            "defaults": {
                "model": {"primary": f"{PROVIDER}/{session.model}"},
                "workspace": str(workspace),
            }
        },
        "tools": {
            "profile": "minimal",
            "alsoAllow": ["bundle-mcp"],
            "deny": ["gateway", "session_status"],
            "toolSearch": False,
        },
        "mcp": {
            "servers": {
                session.domain: {"url": session.mcp_url, "transport": "streamable-http"},
            }
        },
    }


def reply_text(stdout: str) -> str:
    """The agent's reply from `openclaw agent --json` output; AgentError when it holds none."""
    try:
        result = json.loads(stdout)
    except json.JSONDecodeError:
        raise AgentError(f"openclaw printed no JSON result: {stdout[:200]!r}") from None
    if not isinstance(result, dict):
        raise AgentError("openclaw's JSON result is not an object")
    payloads = result.get("payloads") or []
    text = "\n".join(
        p["text"] for p in payloads if isinstance(p, dict) and isinstance(p.get("text"), str)
    ).strip()
    if not text:
        meta = result.get("meta") or {}
        err = meta.get("error") if isinstance(meta, dict) else None
        raise AgentError(f"openclaw gave no reply{f': {err}' if err else ''}")
    return text


class OpenClawAdapter(AgentAdapter):
    """`openclaw agent --local` per user turn, one OpenClaw home per episode."""

    name = "openclaw"

    def executable(self) -> str:
        found = shutil.which(self.cfg.openclaw)
        if found is None:
            raise ConfigError(
                f"the openclaw adapter needs the `{self.cfg.openclaw}` executable "
                "(npm install openclaw; it needs Node >= 24.16), or external.openclaw set "
                "to its path"
            )
        return found

    def check(self) -> None:
        self.executable()

    def _paths(self, session: AgentSession) -> tuple[Path, Path, Path]:
        home = session.state_dir / "openclaw"
        return home / "openclaw.json", home / "state", home / "workspace"

    async def open(self, session: AgentSession) -> None:
        config, state, workspace = self._paths(session)
        state.mkdir(parents=True, exist_ok=True)
        workspace.mkdir(parents=True, exist_ok=True)
        # OpenClaw puts the workspace's AGENTS.md in its system prompt.
        shutil.copyfile(session.policy_file, workspace / "AGENTS.md")
        config.write_text(json.dumps(openclaw_config(session, workspace), indent=1))

    async def turn(self, session: AgentSession, message: str) -> str:
        config, state, workspace = self._paths(session)
        turn_file = session.state_dir / "openclaw" / "message.txt"
        turn_file.write_text(message, encoding="utf-8")
        timeout = self.cfg.turn_timeout_s
        argv = [
            self.executable(),
            "agent",
            "--local",
            "--session-id",
            session.session_id,
            "--message-file",
            str(turn_file),
            "--json",
            "--timeout",
            str(max(1, int(timeout))),
        ]
        env = {
            **self.cfg.env,
            **session.env(),
            "OPENCLAW_CONFIG_PATH": str(config),
            "OPENCLAW_STATE_DIR": str(state),
        }
        return reply_text(await run_turn_command(argv, b"", env, timeout + 30, workspace))
