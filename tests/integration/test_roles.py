"""The simulator's role behaviours, driven through whole episodes over loopback HTTP.

The episode runner talks to a real simulator (instant profile) for both the agent and the
user; rewards come from the domains' own grader.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import zlib
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest

from agentload.client import CallRecord, ChatClient, EndpointConfig
from agentload.domains import get_domain, get_task, own_domain_names
from agentload.sim import SimConfig, SimProcess, SimServer
from agentload.sim.roles import (
    MISTAKES,
    CooperativeUser,
    agent_skill,
    episode_plan,
    requested_keys,
)
from agentload.sim.roles_text import STOP, padded
from agentload.workloads.episode import EpisodeOptions, EpisodeResult, EpisodeSpec, run_episode

Pairs = Sequence[tuple[str, str]]  # (task id, session id)


async def _run(
    pairs: Pairs,
    *,
    skill: float,
    agent: str = "tool-calling",
    sim_seed: int = 0,
    concurrency: int = 32,
) -> tuple[list[EpisodeResult], list[CallRecord]]:
    cfg = SimConfig(
        port=0, profile="instant", seed=sim_seed, behaviour_options={"agent_skill": skill}
    )
    async with SimServer(cfg) as sim:
        # Non-streaming: these tests are about what is said, and per-token chunks would
        # only cost time.
        return await _episodes(
            sim.base_url, pairs, agent=agent, concurrency=concurrency, stream=False
        )


async def _episodes(
    base_url: str,
    pairs: Pairs,
    *,
    agent: str = "tool-calling",
    concurrency: int = 32,
    stream: bool = True,
) -> tuple[list[EpisodeResult], list[CallRecord]]:
    records: list[CallRecord] = []
    endpoint = EndpointConfig(base_url=base_url, model="agentload-sim", stream=stream)
    async with ChatClient(endpoint, on_record=records.append) as client:
        gate = asyncio.Semaphore(concurrency)

        async def one(task_id: str, session_id: str) -> EpisodeResult:
            async with gate:
                spec = EpisodeSpec(
                    task_id=task_id, trial=0, seed=seed_of(session_id), session_id=session_id
                )
                return await run_episode(
                    spec, {"agent": client, "user": client}, EpisodeOptions(agent=agent)
                )

        results = await asyncio.gather(*(one(t, s) for t, s in pairs))
    return list(results), records


def seed_of(session: str) -> int:
    """Each named session is its own episode: its seed, which the simulator plays it by."""
    return zlib.crc32(session.encode())


def key_of(session: str) -> str:
    """The simulator's key for the episode of that session (RequestView.episode_key)."""
    return f"seed:{seed_of(session)}"


def run(pairs: Pairs, **kw: Any) -> tuple[list[EpisodeResult], list[CallRecord]]:
    return asyncio.run(_run(pairs, **kw))


def all_task_ids() -> list[str]:
    return [t.id for name in own_domain_names() for t in get_domain(name).tasks()]


@pytest.fixture(scope="module")
def skilled() -> tuple[list[EpisodeResult], list[CallRecord]]:
    """Every task of every domain, once, with a perfect agent."""
    return run([(tid, f"skilled-{tid}") for tid in all_task_ids()], skill=1.0)


def test_skilled_agent_solves_every_task(skilled: tuple[list[EpisodeResult], list]) -> None:
    results, _ = skilled
    assert len(results) >= 100
    failed = [
        (r.session["task_id"], r.session["termination"], r.session["reward_breakdown"])
        for r in results
        if r.session["reward"] != 1.0 or r.session["termination"] != "user_stop"
    ]
    assert not failed, failed


def test_episode_shapes(skilled: tuple[list[EpisodeResult], list[CallRecord]]) -> None:
    results, records = skilled
    calls = [r.session["counts"]["agent_calls"] for r in results]
    within = sum(10 <= c <= 17 for c in calls) / len(calls)
    dist = sorted(Counter(calls).items())
    print(
        f"agent calls per episode: {dist}; median {statistics.median(calls)}; "
        f"{within:.0%} within 10-17"
    )
    assert 10 <= statistics.median(calls) <= 17
    assert within >= 0.5
    assert max(calls) <= 25
    assert sum(r.session["counts"]["parallel_tool_messages"] for r in results) > 0
    assert all(r.session["counts"]["tool_errors"] == 0 for r in results)

    agent = [rec for rec in records if rec.role == "agent"]
    assert agent and all(rec.status == "ok" for rec in agent)
    # The static prefix: the policy and the tool schemas, thousands of tokens.
    first = [rec.prompt_tokens for rec in agent if rec.turn == 0]
    assert min(first) >= 2000
    text = [rec.completion_tokens for rec in agent if rec.num_tool_calls == 0]
    mean_out = statistics.mean(rec.completion_tokens for rec in agent)
    print(
        f"agent completion tokens: text replies mean {statistics.mean(text):.0f}, "
        f"all calls mean {mean_out:.0f}"
    )
    assert 60 <= statistics.mean(text) <= 150
    assert 40 <= mean_out <= 150


def test_success_rate_tracks_skill() -> None:
    tasks = all_task_ids()
    n = 80
    pairs = [(tasks[(i * 7) % len(tasks)], f"half-{i}") for i in range(n)]
    results, _ = run(pairs, skill=0.5)
    rewards = [r.session["reward"] for r in results]
    rate = sum(rewards) / n
    print(f"success rate at agent_skill=0.5 over {n} episodes: {rate:.3f}")
    assert abs(rate - 0.5) <= 3 * math.sqrt(0.25 / n)
    # Every episode the agent meant to get right is right, and every mistake costs the reward.
    for (task_id, session), r in zip(pairs, results, strict=True):
        plan = episode_plan(task_id, key_of(session), 0, 0.5)
        assert r.session["termination"] == "user_stop", (task_id, session)
        assert r.session["reward"] == (1.0 if plan.success else 0.0), (task_id, plan.mistake)


def _shape(result: EpisodeResult) -> list[tuple[Any, ...]]:
    """The messages without the server's per-request tool-call ids."""
    out = []
    for m in result.trajectory["messages"]:
        calls = tuple(
            (c["function"]["name"], c["function"]["arguments"]) for c in m.get("tool_calls") or ()
        )
        out.append((m["role"], m.get("content"), calls))
    return out


def test_same_session_same_responses() -> None:
    pairs = [("airline/012", "det-a"), ("retail/006", "det-b"), ("retail/018", "det-c")]
    first, _ = run(pairs, skill=0.6)
    second, _ = run(list(reversed(pairs)), skill=0.6, concurrency=1)
    second = list(reversed(second))
    for a, b in zip(first, second, strict=True):
        assert _shape(a) == _shape(b)
        assert a.session["counts"]["agent_calls"] == b.session["counts"]["agent_calls"]
        assert a.session["reward"] == b.session["reward"]


def test_skill_option_from_the_command_line_streaming() -> None:
    # A simulator in its own process gets the option as text: "0" means every episode fails.
    cfg = SimConfig(port=0, profile="instant", behaviour_options={"agent_skill": "0"})
    pairs = [("airline/012", "cli-a"), ("retail/030", "cli-b"), ("retail/006", "cli-c")]
    with SimProcess(cfg) as sim:
        results, records = asyncio.run(_episodes(sim.base_url, pairs))
    assert [r.session["reward"] for r in results] == [0.0, 0.0, 0.0]
    assert all(r.session["termination"] == "user_stop" for r in results)
    assert all(rec.status == "ok" and rec.stream for rec in records)


@pytest.mark.parametrize("agent", ["react", "act"])
def test_text_action_agents(agent: str) -> None:
    pairs = [
        (tid, f"{agent}-{tid}")
        for tid in ("airline/012", "airline/040", "retail/006", "retail/024", "retail/030")
    ]
    results, _ = run(pairs, skill=1.0, agent=agent)
    for r in results:
        assert r.session["reward"] == 1.0, (r.session["task_id"], r.session["reward_breakdown"])
        assert r.session["termination"] == "user_stop"


async def test_without_role_headers_answers_generically() -> None:
    cfg = SimConfig(port=0, profile="instant", mean_output_tokens=20)
    async with SimServer(cfg) as sim:
        endpoint = EndpointConfig(base_url=sim.base_url, model=cfg.model)
        async with ChatClient(endpoint) as client:
            msgs = [{"role": "user", "content": "Hi, I need to cancel a reservation."}]
            plain = await client.chat(msgs, headers={"X-Agentload-Task": "airline/012"})
            unknown = await client.chat(
                msgs, headers={"X-Agentload-Role": "agent", "X-Agentload-Task": "airline/999"}
            )
            user = await client.chat(
                msgs, headers={"X-Agentload-Role": "user", "X-Agentload-Task": "airline/012"}
            )
    assert plain.ok and unknown.ok and user.ok
    for res in (plain, unknown):  # the generic behaviour's words, not the agent's
        assert res.content and "user id" not in res.content
    assert user.content == get_task("airline/012").scenario.opening


# --- the customer, unit level ------------------------------------------------------------------


def _user_reply(task_id: str, messages: list[dict[str, Any]]) -> str:
    user = CooperativeUser(SimConfig(port=0, profile="instant"))
    return user.reply(get_task(task_id), messages, "unit")


@pytest.mark.parametrize("flipped", [True, False])
def test_user_follows_the_conversation(flipped: bool) -> None:
    task = get_task("airline/012")
    them, me = ("user", "assistant") if flipped else ("assistant", "user")
    sys = {"role": "system", "content": "You are a customer."}
    convo: list[dict[str, Any]] = [sys, {"role": them, "content": "Hello! How can I help?"}]
    assert _user_reply(task.id, convo) == task.scenario.opening
    convo += [
        {"role": me, "content": task.scenario.opening},
        {"role": them, "content": "Could you please share your user id?"},
    ]
    assert task.scenario.known_info["user_id"] in _user_reply(task.id, convo)
    convo += [
        {"role": me, "content": "fine"},
        {"role": them, "content": "I will cancel it. Shall I go ahead? (yes/no)"},
    ]
    assert _user_reply(task.id, convo).lower().startswith("yes")
    done = [
        *convo,
        {"role": me, "content": "yes"},
        {"role": them, "content": "All done. Is there anything else I can help you with?"},
    ]
    # After the agent's answer: at most two follow-up questions, then the stop token.
    for _ in range(3):
        reply = _user_reply(task.id, done)
        if reply == STOP:
            break
        assert reply.endswith("?")
        done += [{"role": me, "content": reply}, {"role": them, "content": "Yes, all settled."}]
    assert reply == STOP


def test_requested_keys_prefers_the_longest_label() -> None:
    known = {"order_id": "R1", "cancel_order_id": "R2", "reason": "x"}
    assert requested_keys("Could you share the cancel order id?", known) == ["cancel_order_id"]
    assert requested_keys("May I have the order id and the reason?", known) == [
        "order_id",
        "reason",
    ]
    # A real agent model's wording.
    known = {"user_id": "u1", "reservation_id": "ABC", "email": "a@b.c", "zip": "12345"}
    assert requested_keys("Can you give me your user ID and reservation number?", known) == [
        "user_id",
        "reservation_id",
    ]
    assert requested_keys("What's your e-mail and zip code?", known) == ["email", "zip"]


def test_user_tells_a_fact_asked_to_be_confirmed() -> None:
    task = get_task("airline/012")
    convo = [
        {"role": "user", "content": "Hello!"},
        {"role": "assistant", "content": task.scenario.opening},
        {"role": "user", "content": "Can you confirm your user ID for me?"},
    ]
    assert task.scenario.known_info["user_id"] in _user_reply(task.id, convo)


# --- the plan, unit level ----------------------------------------------------------------------


def test_failing_agent_makes_one_mistake() -> None:
    kinds = Counter()
    for tid in all_task_ids():
        task = get_task(tid)
        plan = episode_plan(tid, "always-wrong", 0, 0.0)
        assert not plan.success and plan.mistake in MISTAKES
        kinds[plan.mistake] += 1
        if plan.mistake == "omitted_output":
            assert plan.omitted in task.required_outputs
            assert plan.actions == task.gold_actions
        elif plan.mistake == "skipped_write":
            assert len(plan.actions) == len(task.gold_actions) - 1
        else:
            changed = [a for a, g in zip(plan.actions, task.gold_actions, strict=True) if a != g]
            assert len(changed) == 1
    assert set(kinds) == set(MISTAKES)
    assert episode_plan("airline/012", "s", 0, 1.0).actions == get_task("airline/012").gold_actions


def test_agent_skill_option() -> None:
    assert agent_skill({}) == 0.8
    assert agent_skill({"agent_skill": "0.25"}) == 0.25
    assert agent_skill({"agent_skill": 3}) == 1.0
    with pytest.raises(ValueError, match="agent_skill"):
        agent_skill({"agent_skill": "high"})


def test_padding_drops_the_omitted_output() -> None:
    import random

    text = padded(["The fee is $270.", "All done."], random.Random(1), 120, avoid="270")
    assert "270" not in text and "All done." in text
    assert len(text.split()) >= 40
