"""The external agent adapters' pure parts: command templates, the agent's environment, the
OpenClaw configuration and the reading of its result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentload.config import ConfigError, ExternalConfig
from agentload.external.adapters import AgentError, AgentSession, check_template, make_adapter
from agentload.external.openclaw import openclaw_config, reply_text


def _session(tmp_path: Path) -> AgentSession:
    return AgentSession(
        session_id="run-airline-000-t0",
        task_id="airline/000",
        domain="airline",
        llm_base_url="http://127.0.0.1:9/s/run-airline-000-t0/v1",
        model="m",
        api_key=None,
        mcp_url="http://127.0.0.1:10/sessions/abc/mcp",
        tools_url="http://127.0.0.1:10/sessions/abc/tools",
        policy_file=tmp_path / "policy.md",
        state_dir=tmp_path,
        max_tokens=512,
    )


def test_the_agent_environment_names_the_session_and_never_a_key(tmp_path: Path) -> None:
    env = _session(tmp_path).env()
    assert env["OPENAI_BASE_URL"].endswith("/s/run-airline-000-t0/v1")
    assert env["OPENAI_API_KEY"] == "EMPTY"
    assert env["AGENTLOAD_MCP_URL"].endswith("/sessions/abc/mcp")
    assert env["AGENTLOAD_TASK_ID"] == "airline/000"
    assert env["AGENTLOAD_MAX_TOKENS"] == "512"


def test_command_templates_fill_known_placeholders_and_refuse_others(tmp_path: Path) -> None:
    values = _session(tmp_path).values("hi")
    assert "{session} {mcp_url}".format_map(values) == (
        "run-airline-000-t0 http://127.0.0.1:10/sessions/abc/mcp"
    )
    check_template(["agent", "--url={mcp_url}", "{python}"], "external.command")
    with pytest.raises(ConfigError, match=r"unknown placeholder \{nope\}"):
        check_template(["agent", "{nope}"], "external.command")
    with pytest.raises(ConfigError, match=r"external\.command"):
        check_template(["agent", "{unclosed"], "external.command")


def test_a_command_string_is_split_like_a_shell_would() -> None:
    adapter = make_adapter(ExternalConfig(command="agent --name 'two words' {session}"))
    assert adapter.argv() == ["agent", "--name", "two words", "{session}"]  # type: ignore[attr-defined]


def test_openclaw_config_points_at_the_proxy_and_offers_the_domain_tools_only(
    tmp_path: Path,
) -> None:
    cfg = openclaw_config(_session(tmp_path), tmp_path / "ws")
    provider = cfg["models"]["providers"]["agentload"]
    assert provider["baseUrl"] == "http://127.0.0.1:9/s/run-airline-000-t0/v1"
    assert provider["api"] == "openai-completions"
    assert provider["models"][0]["id"] == "m" and provider["models"][0]["maxTokens"] == 512
    assert cfg["agents"]["defaults"]["model"]["primary"] == "agentload/m"
    assert cfg["mcp"]["servers"] == {
        "airline": {"url": "http://127.0.0.1:10/sessions/abc/mcp", "transport": "streamable-http"}
    }
    assert cfg["tools"]["profile"] == "minimal" and cfg["tools"]["toolSearch"] is False
    assert cfg["tools"]["alsoAllow"] == ["bundle-mcp"]


def test_openclaw_reply_is_the_payloads_text() -> None:
    out = {"payloads": [{"text": "Your flight "}, {"text": "is delayed.", "mediaUrl": None}]}
    assert reply_text(json.dumps(out)) == "Your flight \nis delayed."
    with pytest.raises(AgentError, match="no JSON result"):
        reply_text("Error: gateway unreachable")
    with pytest.raises(AgentError, match="gave no reply: model timeout"):
        reply_text(json.dumps({"payloads": [], "meta": {"error": "model timeout"}}))


def test_the_openclaw_adapter_wants_its_executable() -> None:
    with pytest.raises(ConfigError, match="needs the `/nonexistent/openclaw` executable"):
        make_adapter(ExternalConfig(adapter="openclaw", openclaw="/nonexistent/openclaw"))
