"""τ-bench's agent and user strategies in whole episodes over loopback HTTP: the few-shot agent
and the react / verify / reflection users, on built-in and τ² tasks, against the embedded
simulator (every call a measured one) and a scripted server (exact replies)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_episode import READ_TASK, Reply, ScriptServer, check_contract, endpoint, spec
from typer.testing import CliRunner

from agentload.agents.strategies import use_few_shot_file
from agentload.agents.user_strategies import CHECK_PROMPT, REACT_FORMAT
from agentload.cli import app
from agentload.client import ChatClient
from agentload.config import ConfigError, build_config
from agentload.results.jsonl import load_jsonl
from agentload.runner import execute_run
from agentload.sim import SimConfig, SimServer
from agentload.workloads import EpisodeOptions, EpisodeResult, run_episode

# Per message: the simulator's customer never answers a check with "true", so verify makes
# every draft and check it may (3 of each), reflection its draft, check, reflection, second
# draft and check.
CALLS_PER_MESSAGE = {"react": 1, "verify": 6, "reflection": 5}
CHECK_MARK = CHECK_PROMPT.splitlines()[0]
EXAMPLE = (
    "user: Is flight HAT001 on time?\nassistant: None\ntool: on time\n"
    "assistant: HAT001 is on time. ###EXAMPLE-MARK###"
)


@pytest.fixture(autouse=True)
def no_examples_file() -> Iterator[None]:
    use_few_shot_file(None)
    yield
    use_few_shot_file(None)


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    p = tmp_path / "shots.jsonl"
    p.write_text(json.dumps({"messages_display": EXAMPLE}) + "\n", encoding="utf-8")
    return p


@pytest.fixture
async def sim() -> Any:
    cfg = SimConfig(port=0, profile="instant", behaviour_options={"agent_skill": 1.0})
    async with SimServer(cfg) as server:
        yield server


async def episode(base_url: str, task_id: str, options: EpisodeOptions) -> EpisodeResult:
    async with ChatClient(endpoint(base_url)) as c:
        return await run_episode(
            spec(task_id, sid=f"{options.user}-{task_id}"), {"agent": c, "user": c}, options
        )


def user_text_messages(res: EpisodeResult) -> int:
    return sum(1 for m in res.trajectory["messages"] if m["role"] == "user")


# --- the embedded simulator ------------------------------------------------------------------


@pytest.mark.parametrize("user", ["react", "verify", "reflection"])
async def test_user_strategies_on_the_simulator(sim: SimServer, user: str) -> None:
    res = await episode(sim.base_url, READ_TASK, EpisodeOptions(user=user))
    check_contract(res)
    s = res.session
    assert s["termination"] == "user_stop" and s["reward"] == 1.0, s["error"]
    assert s["user"] == user
    # every check, reflection and new draft is a measured user call
    turns = s["counts"]["user_turns"]
    assert turns >= 2 and s["counts"]["user_calls"] == CALLS_PER_MESSAGE[user] * turns
    assert turns == user_text_messages(res)  # one message to the agent per turn


async def test_few_shot_agent_on_the_simulator(sim: SimServer, shots: Path) -> None:
    opts = EpisodeOptions(agent="few-shot", user="scripted", few_shot=str(shots))
    res = await episode(sim.base_url, "airline/001", opts)
    check_contract(res)
    s = res.session
    assert s["agent"] == "few-shot" and s["termination"] == "user_stop", s["error"]
    assert s["reward"] == 1.0 and s["counts"]["tool_calls"] >= 1
    system = res.trajectory["messages"][0]["content"]
    assert system.endswith(f"\n\nExample 1:\n{EXAMPLE}")
    assert res.trajectory["action_format"] == "native"


# --- exact replies --------------------------------------------------------------------------


class Roles:
    """Replies per role and call kind (draft, check, reflect), recording each request."""

    def __init__(self, **scripts: list[Reply]) -> None:
        self.scripts = scripts
        self.seen: list[tuple[str, dict[str, Any]]] = []

    def kind(self, role: str, body: dict[str, Any]) -> str:
        if role != "user" or len(body["messages"]) != 1:
            return role
        text = body["messages"][0]["content"]
        return "check" if CHECK_MARK in text else "reflect" if "Say briefly" in text else role

    def __call__(self, role: str, body: dict[str, Any]) -> Reply:
        kind = self.kind(role, body)
        self.seen.append((kind, body))
        queue = self.scripts[kind]
        return queue.pop(0) if len(queue) > 1 else queue[0]

    def kinds(self) -> list[str]:
        return [k for k, _ in self.seen]

    def bodies(self, kind: str) -> list[dict[str, Any]]:
        return [b for k, b in self.seen if k == kind]


async def run_scripted(roles: Roles, options: EpisodeOptions) -> EpisodeResult:
    async with ScriptServer(choose=roles) as server:
        res = await episode(server.base_url, READ_TASK, options)
    check_contract(res)
    return res


async def test_verify_asks_again_when_the_check_fails() -> None:
    roles = Roles(
        agent=[Reply("It is on time.")],
        user=[
            Reply("Is SK1 on time? My id is bob_9."),
            Reply("Is SK1 on time?"),
            Reply("###STOP###"),
        ],
        check=[Reply("false"), Reply("true")],
    )
    res = await run_scripted(roles, EpisodeOptions(user="verify"))
    s = res.session
    assert s["termination"] == "user_stop", s["error"]
    assert roles.kinds() == ["user", "check", "user", "check", "agent", "user", "check"]
    assert s["counts"]["user_calls"] == 6 and s["counts"]["user_turns"] == 2
    # the first check judged the first draft; the agent heard the second
    assert "bob_9" in roles.bodies("check")[0]["messages"][0]["content"]
    assert roles.bodies("agent")[0]["messages"][-1] == {
        "role": "user",
        "content": "Is SK1 on time?",
    }
    # checks carry no tools and are user calls like the drafts (turns numbered together)
    assert all("tools" not in b for b in roles.bodies("check"))
    assert [c.turn for c in res.calls if c.role == "user"] == list(range(6))


async def test_reflection_reflects_then_drafts_again() -> None:
    roles = Roles(
        agent=[Reply("It is on time.")],
        user=[Reply("Cancel everything!"), Reply("Is SK1 on time?"), Reply("###STOP###")],
        check=[Reply("false"), Reply("true")],
        reflect=[Reply("Reflection: the task is a status question.\nResponse: Is SK1 on time?")],
    )
    res = await run_scripted(roles, EpisodeOptions(user="reflection"))
    assert res.session["termination"] == "user_stop", res.session["error"]
    assert roles.kinds()[:5] == ["user", "check", "reflect", "user", "check"]
    redraft = roles.bodies("user")[1]["messages"]
    assert redraft[-2] == {"role": "assistant", "content": "Cancel everything!"}
    assert "the task is a status question" in redraft[-1]["content"]
    assert roles.bodies("agent")[0]["messages"][-1]["content"] == "Is SK1 on time?"
    # the user's own history keeps the accepted draft, not the rejected one nor the note
    later = roles.bodies("user")[2]["messages"]
    assert [m["content"] for m in later[-3:]] == [
        "Hello, thank you for contacting us. How can I help you today?",
        "Is SK1 on time?",
        "It is on time.",
    ]


async def test_react_sends_only_the_response() -> None:
    roles = Roles(
        agent=[Reply("It is on time.")],
        user=[
            Reply("Thought:\nAsk about the flight.\n\nUser Response:\nIs SK1 on time?"),
            Reply("Thought: all done.\nUser Response: ###STOP###"),
        ],
    )
    res = await run_scripted(roles, EpisodeOptions(user="react"))
    assert res.session["termination"] == "user_stop", res.session["error"]
    assert roles.bodies("agent")[0]["messages"][-1]["content"] == "Is SK1 on time?"
    second = roles.bodies("user")[1]["messages"]
    assert second[0]["content"].endswith(REACT_FORMAT)
    assert second[-2]["content"].startswith("Thought:\nAsk about the flight.")


async def test_few_shot_examples_are_in_the_system_prompt_on_the_wire(shots: Path) -> None:
    roles = Roles(
        agent=[Reply("It is on time.")], user=[Reply("Is SK1 on time?"), Reply("###STOP###")]
    )
    opts = EpisodeOptions(agent="few-shot", user="llm", few_shot=str(shots))
    res = await run_scripted(roles, opts)
    assert res.session["termination"] == "user_stop"
    body = roles.bodies("agent")[0]
    assert body["messages"][0]["role"] == "system"
    assert "Example 1:\n" + EXAMPLE in body["messages"][0]["content"]
    assert body["tools"]  # few-shot is tool-calling: the schemas go in `tools`


# --- configuration and command line ----------------------------------------------------------


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, ["run", *args])


def test_few_shot_without_a_file_is_one_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        build_config(data={"workload": {"agent": "few-shot"}})
    assert "workload.few_shot" in str(e.value) and "--few-shot FILE" in str(e.value)
    r = cli("--agent", "few-shot", "--out", str(tmp_path / "o"))
    assert r.exit_code == 2 and "workload.few_shot" in r.output
    assert "Traceback" not in r.output and r.output.count("error") == 1


def test_a_bad_few_shot_file_names_the_file_and_line(tmp_path: Path, shots: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(shots.read_text() + '{"messages_display": \n', encoding="utf-8")
    r = cli("--agent", "few-shot", "--few-shot", str(bad), "--out", str(tmp_path / "o"))
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "--few-shot" in r.output and f"{bad}, line 2: not valid JSON" in r.output
    cfg = build_config(data={"workload": {"agent": "few-shot", "few_shot": str(shots)}})
    assert cfg.workload.few_shot == str(shots)


# --- τ² tasks ------------------------------------------------------------------------------


@pytest.mark.parametrize("user", ["react", "verify", "reflection"])
async def test_tau2_run_with_each_user_strategy(tmp_path: Path, tau2_data: Path, user: str) -> None:
    out = tmp_path / "run"
    cfg = build_config(
        data={
            "out": str(out),
            "sim": {"profile": "instant"},
            "metrics": {"interval_s": 0.5},
            "workload": {
                "tasks": ["tau2-airline/0-2"],
                "user": user,
                "tau2": {"data": str(tau2_data)},
            },
            "load": {"concurrency": 3},
        }
    )
    res = await execute_run(cfg, progress="off", say=lambda _m: None, install_signals=False)
    assert res.exit_code == 0, res.stop_reason
    sessions = load_jsonl(out / "sessions.jsonl")
    assert len(sessions) == 3
    calls = Counter((c["session_id"], c["role"]) for c in load_jsonl(out / "calls.jsonl"))
    for s in sessions:
        assert s["user"] == user and s["termination"] == "user_stop", s["error"]
        assert s["reward"] == 1.0
        turns = s["counts"]["user_turns"]
        assert calls[s["session_id"], "user"] == s["counts"]["user_calls"]
        assert s["counts"]["user_calls"] == CALLS_PER_MESSAGE[user] * turns


def telecom_task() -> str:
    from agentload.domains import get_domain

    return get_domain("tau2-telecom").tasks()[0].id


@pytest.mark.parametrize("user", ["verify", "reflection"])
async def test_tau2_user_tool_calls_pass_through(
    sim: SimServer, tau2_data: Path, user: str
) -> None:
    res = await episode(sim.base_url, telecom_task(), EpisodeOptions(user=user))
    s = res.session
    assert s["termination"] == "user_stop", s["error"]
    said = [m for m in res.trajectory["tau2"]["messages"] if m["role"] == "user"]
    tool_turns = sum(1 for m in said if m["tool_calls"])
    assert tool_turns >= 1 and s["counts"]["user_tool_calls"] >= tool_turns
    # a tool call is one call, never checked; a message is checked (and redrafted)
    text_turns = len(said) - tool_turns
    assert s["counts"]["user_calls"] == tool_turns + CALLS_PER_MESSAGE[user] * text_turns


async def test_tau2_few_shot_agent(sim: SimServer, tau2_data: Path, shots: Path) -> None:
    opts = EpisodeOptions(agent="few-shot", user="scripted", few_shot=str(shots))
    res = await episode(sim.base_url, "tau2-airline/1", opts)
    s = res.session
    assert s["agent"] == "few-shot" and s["termination"] == "user_stop", s["error"]
    assert s["reward"] == 1.0
    assert res.trajectory["messages"][0]["content"].endswith(f"Example 1:\n{EXAMPLE}")


def test_tau2_rejects_an_unknown_user(tau2_data: Path) -> None:
    from agentload.domains import get_domain
    from agentload.workloads.tau2_episode import Tau2User

    domain = get_domain("tau2-airline")
    task = domain.get_task("tau2-airline/1")
    with pytest.raises(ValueError, match="not available for τ² tasks"):
        Tau2User(domain, task, strategy="shy")
    user = Tau2User(domain, task, strategy="react")
    assert user.uses_llm and "User Response:" in user.messages[0]["content"]
    assert Tau2User(domain, task, scripted=True).uses_llm is False
