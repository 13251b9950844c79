"""Agent strategies, user simulators and the controls, without a model server."""

from __future__ import annotations

import pytest

from agentload.agents import (
    STOP,
    ActionParseError,
    ScriptedUser,
    make_agent,
    make_user,
    parse_action,
    transfer_tool_name,
    user_system_prompt,
)
from agentload.agents.prompts import text_system_prompt
from agentload.agents.strategies import parse_tool_call
from agentload.domains import get_domain, grade, own_domain_names
from agentload.domains.base import Task, UserScenario
from agentload.workloads import EpisodeOptions, EpisodeSpec, ToolLatency, episode_seed, run_episode
from agentload.workloads.episode import grade_environment


def available_domains() -> list[str]:
    names = []
    for name in own_domain_names():
        try:
            if get_domain(name).tasks():
                names.append(name)
        except Exception:  # a domain still being written is skipped, not failed
            continue
    return names


DOMAINS = available_domains()


# --- the react / act action parser --------------------------------------------------------


def test_parse_react_action() -> None:
    a = parse_action(
        'Thought: I need the user.\nAction: {"name": "get_customer_profile", '
        '"arguments": {"user_id": "u1"}}'
    )
    assert (a.name, a.arguments, a.thought) == (
        "get_customer_profile",
        {"user_id": "u1"},
        "I need the user.",
    )
    assert not a.is_respond


def test_parse_act_and_layout_variants() -> None:
    assert parse_action('{"name": "x", "arguments": {}}').name == "x"
    fenced = 'Action:\n```json\n{"name": "x", "arguments": {"a": 1}}\n```'
    assert parse_action(fenced).arguments == {"a": 1}
    # Arguments double-encoded as a string, and missing arguments.
    assert parse_action('Action: {"name": "x", "arguments": "{\\"a\\": 2}"}').arguments == {"a": 2}
    assert parse_action('Action: {"name": "x"}').arguments == {}
    # The last Action: label wins (a model that echoes the format first).
    text = 'Action: {"name": "<tool name>"} then\nAction: {"name": "real", "arguments": {}}'
    assert parse_action(text).name == "real"
    r = parse_action('Action: {"name": "respond", "arguments": {"content": "Hello"}}')
    assert r.is_respond and r.respond_text() == "Hello"
    assert (
        parse_action('Action: {"name": "respond", "arguments": {"message": "Hi"}}').respond_text()
        == "Hi"
    )


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty"),
        ("   \n", "empty"),
        ("I will look that up for you.", "no JSON object"),
        ('Action: {"name": "x", "arguments": {"a": 1}', "invalid JSON"),
        ("Action: [1, 2]", "no JSON object"),
        ('Action: {"arguments": {}}', '"name"'),
        ('Action: {"name": "", "arguments": {}}', '"name"'),
        ('Action: {"name": 3, "arguments": {}}', '"name"'),
        ('Action: {"name": "x", "arguments": [1]}', '"arguments" must be a JSON object'),
        ('Action: {"name": "x", "arguments": "{oops"}', "not JSON"),
        ('Action: {"name": "respond", "arguments": {}}', "respond"),
        ("Action: {'name': 'x', 'arguments': {}}", "invalid JSON"),
    ],
)
def test_parse_action_errors(text: str, fragment: str) -> None:
    with pytest.raises(ActionParseError) as e:
        parse_action(text)
    assert fragment in str(e.value)


def test_parse_requires_thought_when_asked() -> None:
    with pytest.raises(ActionParseError, match="Thought"):
        parse_action('Action: {"name": "x", "arguments": {}}', require_thought=True)


def test_native_tool_call_parsing() -> None:
    ok = parse_tool_call({"id": "c1", "function": {"name": "f", "arguments": '{"a": 1}'}})
    assert ok.error is None and ok.arguments == {"a": 1} and ok.id == "c1"
    assert parse_tool_call({"id": "c", "function": {"name": "f", "arguments": ""}}).arguments == {}
    assert "not valid JSON" in (
        parse_tool_call({"id": "c", "function": {"name": "f", "arguments": "{"}}).error or ""
    )
    assert "JSON object" in (
        parse_tool_call({"id": "c", "function": {"name": "f", "arguments": "[1]"}}).error or ""
    )
    assert "name" in (parse_tool_call({"id": "c", "function": {"arguments": "{}"}}).error or "")


# --- prompts ------------------------------------------------------------------------------


def _scenario() -> UserScenario:
    return UserScenario(
        persona="Terse.",
        instructions="You want to cancel reservation ABC123.",
        known_info={"user_id": "jo_1", "reservation_id": "ABC123"},
        unknown_info=["your membership level"],
        opening="I want to cancel a booking.",
    )


def _task(scenario: UserScenario | None = None) -> Task:
    return Task(
        id="test/000",
        domain="test",
        category="single_write",
        scenario=scenario or _scenario(),
        gold_actions=(),
        required_outputs=(),
    )


def test_user_prompt_holds_the_scenario_and_rules() -> None:
    p = user_system_prompt(_scenario())
    for piece in (
        "Terse.",
        "cancel reservation ABC123",
        "user id: jo_1",
        "membership level",
        STOP,
        "###TRANSFER###",
        "###OUT-OF-SCOPE###",
        "I want to cancel a booking.",
        "Never invent facts",
    ):
        assert piece in p


@pytest.mark.parametrize("mode", ["react", "act"])
def test_text_prompts_describe_tools_and_format(mode: str) -> None:
    if not DOMAINS:
        pytest.skip("no domain available")
    domain = get_domain(DOMAINS[0])
    p = text_system_prompt(domain, mode)
    assert p.startswith(domain.system_prompt().rstrip()[:200])
    for tool in domain.tools:
        assert f"## {tool.name}" in p
    assert 'Action: {"name"' in p and '"respond"' in p
    assert ("Thought:" in p) == (mode == "react")
    assert text_system_prompt(domain, mode) is p  # cached: one static prefix per process


# --- the scripted user ----------------------------------------------------------------------


def test_scripted_user_dialogue() -> None:
    u = ScriptedUser(_task(), max_turns=10)
    assert u.answer(None) == "I want to cancel a booking."
    assert u.answer("Sure. Could you give me your user ID?") == "My user id is jo_1."
    assert u.answer("Thanks. And which reservation is it?") == "My reservation id is ABC123."
    assert (
        u.answer("I will cancel reservation ABC123. Shall I proceed? (yes/no)")
        == "Yes, please go ahead."
    )
    assert u.answer("What is your favourite colour?") == "I'm sorry, I don't know that."
    assert u.answer("Your reservation ABC123 is cancelled.") == STOP


def test_scripted_user_matches_facts_as_words() -> None:
    sc = UserScenario(
        persona="",
        instructions="",
        opening="Hi.",
        known_info={"order_id": "#W1", "date": "2025-06-16", "name": "Jo Ng"},
        unknown_info=[],
    )
    u = ScriptedUser(_task(sc), max_turns=20)
    u.answer(None)
    # "date" inside "update" is not a request for the date; a statement ends the chat
    assert u.answer("I will update the order now.") == STOP
    u = ScriptedUser(_task(sc), max_turns=20)
    u.answer(None)
    # "order number" asks for the order id, even with "confirm" in the question
    assert u.answer("Can you confirm the order number?") == "My order id is #W1."
    assert u.answer("And your full name, please?") == "My name is Jo Ng."
    assert u.answer("What date?") == "My date is 2025-06-16."


def test_scripted_user_stops_on_closing_and_turn_limit() -> None:
    u = ScriptedUser(_task(), max_turns=3)
    u.answer(None)
    assert u.answer("Done. Is there anything else I can help you with?") == STOP
    u = ScriptedUser(_task(), max_turns=3)
    u.answer(None)
    u.answer("What is your favourite colour?")
    assert u.answer("What is your favourite colour?") == STOP  # third message: the limit


def test_unknown_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown agent"):
        make_agent("clever", get_domain(DOMAINS[0]) if DOMAINS else None, _task())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown user"):
        make_user("robot", _task())


# --- seeds, latency ------------------------------------------------------------------------


def test_episode_seed_is_stable() -> None:
    s = episode_seed(0, "airline/007", 0)
    assert s == episode_seed(0, "airline/007", 0)
    # Pinned: a change here changes every recorded run's sampling.
    assert s == 1005568095
    assert 0 <= s < 2**31
    others = {
        episode_seed(0, "airline/007", 1),
        episode_seed(1, "airline/007", 0),
        episode_seed(0, "airline/008", 0),
    }
    assert s not in others and len(others) == 3


@pytest.mark.parametrize("kind", ["constant", "uniform", "lognormal"])
def test_tool_latency_draws_are_seeded(kind: str) -> None:
    lat = ToolLatency(kind=kind, mean_s=0.2, spread=0.5)
    a, b = lat.sampler(42), lat.sampler(42)
    assert a is not None and b is not None
    xs = [lat.draw(a) for _ in range(2000)]
    assert xs[:20] == [lat.draw(b) for _ in range(20)]
    assert all(x >= 0 for x in xs)
    assert abs(sum(xs) / len(xs) - 0.2) < 0.02
    if kind == "uniform":
        assert min(xs) >= 0.1 - 1e-9 and max(xs) <= 0.3 + 1e-9
    assert ToolLatency().sampler(1) is None


# --- the controls on every task of every domain -------------------------------------------


@pytest.mark.parametrize("domain_name", DOMAINS)
async def test_oracle_scores_one_and_noop_zero(domain_name: str) -> None:
    domain = get_domain(domain_name)
    for task in domain.tasks():
        for agent, want in (("oracle", 1.0), ("noop", 0.0)):
            spec = EpisodeSpec(task.id, 0, episode_seed(0, task.id, 0), f"{agent}-{task.id}")
            res = await run_episode(spec, {}, EpisodeOptions(agent=agent, user="scripted"))
            s = res.session
            assert s["reward"] == want, (task.id, agent, s["reward_breakdown"], s["error"])
            assert s["termination"] in ("user_stop", "agent_transfer"), (task.id, s["error"])
            assert res.calls == [] and s["counts"]["agent_calls"] == 0
            if agent == "oracle":
                assert s["counts"]["tool_calls"] == len(task.gold_actions)


@pytest.mark.parametrize("domain_name", DOMAINS)
def test_fast_grading_matches_the_domain_grader(domain_name: str) -> None:
    """The runner grades from the episode's own environment; the domain's `grade` replays.
    Both must agree, for gold actions, no actions and a partial prefix of the gold."""
    from agentload.domains import Environment

    domain = get_domain(domain_name)
    for task in domain.tasks()[::3]:
        for actions in (task.gold_actions, (), task.gold_actions[:1]):
            env = Environment(domain, 0)
            env.replay(actions)
            replies = ["; ".join(task.required_outputs)]
            fast = grade_environment(domain, task, env, replies, 0)
            slow = grade(domain, task, actions, replies, 0)
            assert fast.to_dict() == slow.to_dict(), task.id


def test_transfer_tool_is_found() -> None:
    for name in DOMAINS:
        tool = transfer_tool_name(get_domain(name))
        assert tool is None or get_domain(name).tool(tool) is not None
