"""Episodes over real loopback HTTP: the embedded simulator, and a small scripted
chat-completions server of our own for exact replies (protocol errors, transfers, headers)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import orjson
import pytest
from aiohttp import web

from agentload.agents.prompts import PARSE_RETRY
from agentload.client import ChatClient, EndpointConfig, RetryPolicy
from agentload.sim import SimConfig, SimServer
from agentload.workloads import (
    COUNT_KEYS,
    TERMINATIONS,
    EpisodeOptions,
    EpisodeResult,
    EpisodeSpec,
    ToolLatency,
    episode_seed,
    run_episode,
)

SESSION_KEYS = {
    "schema",
    "session_id",
    "domain",
    "task_id",
    "trial",
    "seed",
    "agent",
    "user",
    "reward",
    "reward_breakdown",
    "grader_version",
    "data_version",
    "termination",
    "error",
    "counts",
    "durations",
    "started_at",
    "start_ns",
    "end_ns",
    "num_messages",
}
TRAJECTORY_KEYS = {
    "schema",
    "session_id",
    "domain",
    "task_id",
    "trial",
    "seed",
    "messages",
    "tools",
    "reward",
    "termination",
    "grade",
}
# airline/000: a read-only flight-status task; a multi-write task is looked up below.
READ_TASK = "airline/000"


def multi_write_task() -> str:
    from agentload.domains import get_domain

    return next(t.id for t in get_domain("airline").tasks() if t.category == "multi_write")


def spec(task_id: str = READ_TASK, trial: int = 0, sid: str | None = None) -> EpisodeSpec:
    return EpisodeSpec(
        task_id,
        trial,
        episode_seed(7, task_id, trial),
        sid or f"sess-{task_id.replace('/', '-')}-{trial}",
    )


def check_contract(res: EpisodeResult) -> None:
    s, t = res.session, res.trajectory
    assert s.keys() >= SESSION_KEYS
    assert t.keys() >= TRAJECTORY_KEYS
    assert s["schema"] == "agentload.session/1" and t["schema"] == "agentload.trajectory/1"
    assert set(COUNT_KEYS) <= s["counts"].keys()
    assert {"total_s", "llm_s", "tool_s", "user_s"} <= s["durations"].keys()
    assert {"db_match", "outputs_ok", "missing_outputs"} <= s["reward_breakdown"].keys()
    assert s["termination"] in TERMINATIONS and t["termination"] == s["termination"]
    assert isinstance(s["reward"], float) and t["reward"] == s["reward"]
    assert s["num_messages"] == len(t["messages"])
    assert t["messages"][0]["role"] == "system"
    assert s["end_ns"] >= s["start_ns"]
    assert s["counts"]["agent_calls"] == sum(1 for c in res.calls if c.role == "agent")
    assert s["counts"]["user_calls"] == sum(1 for c in res.calls if c.role == "user")
    for role in ("agent", "user"):
        turns = sorted(c.turn for c in res.calls if c.role == role)
        assert turns == list(range(len(turns)))
    assert all(c.session_id == s["session_id"] for c in res.calls)
    # tool results answer tool calls made before them
    ids: set[str] = set()
    for m in t["messages"]:
        for tc in m.get("tool_calls") or []:
            ids.add(tc["id"])
        if m["role"] == "tool":
            assert m["tool_call_id"] in ids
    # The lines as written decode as their writer's records, every field there and typed.
    for rec in (s, t):
        msgspec.json.decode(orjson.dumps(rec.line()), type=type(rec), strict=True)


# --- the simulator ------------------------------------------------------------------------


@pytest.fixture
async def sim() -> AsyncIterator[SimServer]:
    cfg = SimConfig(port=0, profile="instant", behaviour_options={"agent_skill": 1.0})
    async with SimServer(cfg) as server:
        yield server


def endpoint(base_url: str, **kw: Any) -> EndpointConfig:
    kw.setdefault("retry", RetryPolicy(max_attempts=2, backoff_base=0.01, backoff_max=0.02))
    return EndpointConfig(base_url=base_url, model="agentload-sim", **kw)


@pytest.mark.parametrize("agent", ["tool-calling", "react", "act"])
async def test_scripted_user_episodes_end_with_user_stop(sim: SimServer, agent: str) -> None:
    async with ChatClient(endpoint(sim.base_url)) as c:
        tasks = [READ_TASK, multi_write_task()]
        results = await asyncio.gather(
            *[
                run_episode(
                    spec(t, sid=f"{agent}-{t}"),
                    {"agent": c},
                    EpisodeOptions(agent=agent, user="scripted"),
                )
                for t in tasks
            ]
        )
    for res in results:
        check_contract(res)
        s = res.session
        assert s["termination"] == "user_stop", s["error"]
        assert s["reward"] == 1.0, s["reward_breakdown"]
        assert s["counts"]["user_calls"] == 0 and s["counts"]["agent_calls"] >= 2
        assert s["counts"]["tool_calls"] >= 1 and s["counts"]["failed_calls"] == 0
        assert s["durations"]["llm_s"] > 0
        assert res.trajectory["action_format"] == ("native" if agent == "tool-calling" else "text")


async def test_llm_user_episode(sim: SimServer) -> None:
    records: list[Any] = []
    async with ChatClient(endpoint(sim.base_url), on_record=records.append) as c:
        res = await run_episode(
            spec(multi_write_task()), {"agent": c, "user": c}, EpisodeOptions(user="llm")
        )
    check_contract(res)
    s = res.session
    assert s["termination"] == "user_stop", s["error"]
    assert s["reward"] == 1.0
    assert s["counts"]["user_calls"] >= 2
    assert "###STOP###" in res.trajectory["messages"][-1]["content"]
    # the caller's on_record still sees every call, and the episode keeps the same records
    assert [r.call_id for r in records] == [r.call_id for r in res.calls]


async def test_max_steps(sim: SimServer) -> None:
    async with ChatClient(endpoint(sim.base_url)) as c:
        res = await run_episode(
            spec(multi_write_task()), {"agent": c}, EpisodeOptions(user="scripted", max_steps=2)
        )
    check_contract(res)
    assert res.session["termination"] == "max_steps"
    assert res.session["counts"]["agent_calls"] == 2


async def test_budget_exceeded_keeps_the_cancelled_call() -> None:
    cfg = SimConfig(
        port=0,
        profile="instant",
        fault_rate=1.0,
        fault_kinds=["stall_first_token"],
        fault_stall_s=5.0,
    )
    async with SimServer(cfg) as server, ChatClient(endpoint(server.base_url)) as c:
        res = await run_episode(spec(), {"agent": c}, EpisodeOptions(user="scripted", budget_s=0.3))
    check_contract(res)
    s = res.session
    assert s["termination"] == "budget_exceeded"
    assert 0.3 <= s["durations"]["total_s"] < 2.0
    assert [c.error_kind for c in res.calls] == ["cancelled"]
    assert s["counts"]["failed_calls"] == 1


async def test_infra_error_on_http_500() -> None:
    cfg = SimConfig(port=0, profile="instant", fault_rate=1.0, fault_kinds=["http_500"])
    async with SimServer(cfg) as server, ChatClient(endpoint(server.base_url)) as c:
        res = await run_episode(spec(), {"agent": c}, EpisodeOptions(user="scripted"))
    check_contract(res)
    s = res.session
    assert s["termination"] == "infra_error"
    assert "agent call http_500" in s["error"]
    assert s["counts"]["failed_calls"] == 1


async def test_infra_error_on_a_closed_port() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with ChatClient(endpoint(f"http://127.0.0.1:{port}/v1")) as c:
        res = await run_episode(spec(), {"agent": c, "user": c}, EpisodeOptions(user="llm"))
    check_contract(res)
    s = res.session
    assert s["termination"] == "infra_error"
    assert s["error"].startswith("user call connect_error")  # the llm user speaks first
    assert res.calls[0].attempts == 2


async def test_context_overflow() -> None:
    cfg = SimConfig(port=0, profile="instant", max_model_len=512)
    async with SimServer(cfg) as server, ChatClient(endpoint(server.base_url)) as c:
        res = await run_episode(spec(), {"agent": c}, EpisodeOptions(user="scripted"))
    check_contract(res)
    assert res.session["termination"] == "context_overflow"
    assert res.calls[-1].error_kind == "context_overflow"


async def test_many_concurrent_episodes(sim: SimServer) -> None:
    from agentload.domains import get_domain

    tasks = [t.id for t in get_domain("airline").tasks()][:24]
    async with ChatClient(endpoint(sim.base_url)) as c:
        results = await asyncio.gather(
            *[
                run_episode(
                    spec(t, trial, f"{t}-{trial}"),
                    {"agent": c, "user": c},
                    EpisodeOptions(user="scripted" if trial else "llm"),
                )
                for t in tasks
                for trial in range(2)
            ]
        )
    assert {r.session["termination"] for r in results} == {"user_stop"}
    assert all(r.session["reward"] == 1.0 for r in results)
    ids = [c.call_id for r in results for c in r.calls]
    assert len(ids) == len(set(ids))


# --- a scripted server: exact replies --------------------------------------------------


def _sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "x",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


class Reply:
    """One scripted assistant message."""

    def __init__(
        self,
        content: str | None = None,
        tools: list[tuple[str, str]] | None = None,
        reasoning: str | None = None,
        delay: float = 0.0,
    ) -> None:
        self.content, self.tools = content, tools or []
        self.reasoning, self.delay = reasoning, delay

    def stream(self) -> list[bytes]:
        out = [_sse(_chunk({"role": "assistant", "content": ""}))]
        if self.reasoning:
            out.append(_sse(_chunk({"reasoning_content": self.reasoning})))
        if self.content:
            out.append(_sse(_chunk({"content": self.content})))
        for i, (name, args) in enumerate(self.tools):
            out.append(
                _sse(
                    _chunk(
                        {
                            "tool_calls": [
                                {
                                    "index": i,
                                    "id": f"call_{i}",
                                    "type": "function",
                                    "function": {"name": name, "arguments": args},
                                }
                            ]
                        }
                    )
                )
            )
        out.append(_sse(_chunk({}, "tool_calls" if self.tools else "stop")))
        usage = {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105}
        out.append(
            _sse({"id": "x", "object": "chat.completion.chunk", "choices": [], "usage": usage})
        )
        out.append(b"data: [DONE]\n\n")
        return out


class ScriptServer:
    """Answers each role (X-Agentload-Role) from its own list of replies, in order; the last
    reply repeats. Records every request's headers and body."""

    def __init__(self, choose: Any = None, **scripts: list[Reply]) -> None:
        self.choose = choose  # optional (role, body) -> Reply, instead of the lists
        self.scripts = scripts
        self.requests: list[dict[str, Any]] = []
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    async def __aenter__(self) -> ScriptServer:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        role = request.headers.get("X-Agentload-Role", "agent")
        if self.choose is not None:
            reply = self.choose(role, body)
        else:
            self.requests.append({"headers": dict(request.headers), "body": body})
            queue = self.scripts[role]
            reply = queue.pop(0) if len(queue) > 1 else queue[0]
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        for part in reply.stream():
            await resp.write(part)
        await resp.write_eof()
        return resp

    def bodies(self, role: str) -> list[dict[str, Any]]:
        return [r["body"] for r in self.requests if r["headers"].get("X-Agentload-Role") == role]


USER_ID_TOOL = ("get_customer_profile", '{"user_id": "nobody_1"}')


async def scripted(
    replies: list[Reply],
    options: EpisodeOptions,
    users: list[Reply] | None = None,
    task_id: str = READ_TASK,
) -> tuple[EpisodeResult, ScriptServer]:
    server = ScriptServer(agent=replies, user=users or [Reply("###STOP###")])
    async with server, ChatClient(endpoint(server.base_url)) as c:
        res = await run_episode(spec(task_id), {"agent": c, "user": c}, options)
    check_contract(res)
    return res, server


async def test_headers_seed_and_options_on_the_wire() -> None:
    opts = EpisodeOptions(
        user="llm",
        temperature=0.3,
        chat_template_kwargs={"thinking": False},
        agent_max_tokens=77,
        user_max_tokens=33,
        request_seed="episode",
    )
    res, server = await scripted(
        [Reply("Which flight?"), Reply("It is on time.")],
        opts,
        users=[Reply("Is SK1 on time?"), Reply("SK1 today."), Reply("###STOP###")],
    )
    assert res.session["termination"] == "user_stop"
    sid, seed = res.session["session_id"], res.session["seed"]
    assert seed == episode_seed(7, READ_TASK, 0)
    roles = [r["headers"]["X-Agentload-Role"] for r in server.requests]
    assert roles == ["user", "agent", "user", "agent", "user"]
    for r in server.requests:
        h, b = r["headers"], r["body"]
        assert h["X-Session-ID"] == sid and h["X-Agentload-Task"] == READ_TASK
        assert b["seed"] == seed and b["temperature"] == 0.3
        assert b["chat_template_kwargs"] == {"thinking": False}
        assert b["max_tokens"] == (77 if h["X-Agentload-Role"] == "agent" else 33)
    agent_bodies = server.bodies("agent")
    assert all(b["tools"] for b in agent_bodies)
    assert agent_bodies[0]["messages"][-1] == {"role": "user", "content": "Is SK1 on time?"}
    # the user model sees the conversation with the roles flipped
    user_last = server.bodies("user")[-1]["messages"]
    assert user_last[0]["role"] == "system" and "Never invent facts" in user_last[0]["content"]
    assert [m["role"] for m in user_last[1:]] == ["user", "assistant", "user", "assistant", "user"]
    assert user_last[-1]["content"] == "It is on time."
    assert [c.turn for c in res.calls if c.role == "user"] == [0, 1, 2]


async def test_same_task_and_trial_sends_the_same_seed() -> None:
    seeds = []
    for _ in range(2):
        _, server = await scripted(
            [Reply("Done.")], EpisodeOptions(user="scripted", request_seed="episode")
        )
        seeds.append(server.bodies("agent")[0]["seed"])
    assert seeds[0] == seeds[1] == episode_seed(7, READ_TASK, 0)


async def test_agent_transfer() -> None:
    res, _ = await scripted(
        [Reply(tools=[("handoff_to_human", '{"summary": "wants a human"}')])],
        EpisodeOptions(user="scripted"),
    )
    s = res.session
    assert s["termination"] == "agent_transfer" and s["error"] is None
    assert s["counts"]["tool_calls"] == 1 and s["counts"]["tool_errors"] == 0
    assert res.trajectory["messages"][-1]["role"] == "tool"


async def test_empty_message_is_a_protocol_error() -> None:
    res, _ = await scripted([Reply("")], EpisodeOptions(user="scripted"))
    assert res.session["termination"] == "protocol_error"
    assert res.session["counts"]["protocol_errors"] == 1
    assert "empty message" in res.session["error"]


async def test_unknown_tool_and_bad_arguments_get_error_results() -> None:
    res, _ = await scripted(
        [
            Reply(tools=[("fly_me_home", "{}")]),
            Reply(tools=[("get_customer_profile", '{"user_id":')]),
            Reply(tools=[USER_ID_TOOL]),
            Reply("All done."),
        ],
        EpisodeOptions(user="scripted"),
    )
    s = res.session
    assert s["termination"] == "user_stop"
    assert s["counts"]["protocol_errors"] == 2
    assert s["counts"]["tool_errors"] == 1  # the user does not exist
    assert s["counts"]["tool_calls"] == 3
    tool_msgs = [m["content"] for m in res.trajectory["messages"] if m["role"] == "tool"]
    assert tool_msgs[0].startswith("Error: unknown tool 'fly_me_home'")
    assert tool_msgs[1].startswith("Error: arguments of get_customer_profile are not valid JSON")
    assert tool_msgs[2].startswith("Error:")


async def test_too_many_errors() -> None:
    res, _ = await scripted(
        [Reply(tools=[("fly_me_home", "{}")])], EpisodeOptions(user="scripted", max_errors=2)
    )
    s = res.session
    assert s["termination"] == "too_many_errors"
    assert s["counts"]["protocol_errors"] == 3 and s["counts"]["agent_calls"] == 3


async def test_parallel_calls_and_text_beside_tools() -> None:
    res, server = await scripted(
        [
            Reply(
                "Let me look.",
                tools=[
                    USER_ID_TOOL,
                    ("check_flight_status", '{"flight_number": "SK269", "date": "2025-06-16"}'),
                ],
            ),
            Reply("Your flight is delayed to 10:50."),
        ],
        EpisodeOptions(user="scripted"),
    )
    s = res.session
    assert s["termination"] == "user_stop"
    c = s["counts"]
    assert c["text_and_tool_messages"] == 1 and c["parallel_tool_messages"] == 1
    assert c["tool_calls"] == 2
    msgs = res.trajectory["messages"]
    assert msgs[2]["content"] == "Let me look." and len(msgs[2]["tool_calls"]) == 2
    assert [m.get("tool_call_id") for m in msgs[3:5]] == ["call_0", "call_1"]
    # the text beside the tool calls never reached the user
    assert msgs[5]["role"] == "assistant" and msgs[6] == {"role": "user", "content": "###STOP###"}
    assert s["reward"] == 1.0  # the flight-status task's outputs were said
    assert len(server.bodies("agent")[1]["messages"]) == 5


async def test_react_parse_error_gets_one_retry() -> None:
    good = 'Thought: done.\nAction: {"name": "respond", "arguments": {"content": "Done."}}'
    res, server = await scripted(
        [Reply("I think I will answer."), Reply(good)],
        EpisodeOptions(agent="react", user="scripted"),
    )
    s = res.session
    assert s["termination"] == "user_stop"
    assert s["counts"]["parse_errors"] == 1
    retry = server.bodies("agent")[1]["messages"][-1]
    assert retry["role"] == "user" and retry["content"].startswith(PARSE_RETRY[:30])
    assert "tools" not in server.bodies("agent")[0]
    assert 'Action: {"name"' in server.bodies("agent")[0]["messages"][0]["content"]


async def test_react_parse_error_twice_is_a_protocol_error() -> None:
    res, _ = await scripted([Reply("no action here")], EpisodeOptions(agent="act", user="scripted"))
    s = res.session
    assert s["termination"] == "protocol_error"
    assert s["counts"]["protocol_errors"] == 1
    assert s["counts"]["parse_errors"] == 2 and "unparsable" in s["error"]


async def test_react_tool_action_and_observation() -> None:
    res, server = await scripted(
        [
            Reply(
                'Action: {"name": "check_flight_status", "arguments": '
                '{"flight_number": "SK269", "date": "2025-06-16"}}'
            ),
            Reply('Action: {"name": "respond", "arguments": {"content": "Delayed to 10:50."}}'),
        ],
        EpisodeOptions(agent="act", user="scripted"),
    )
    s = res.session
    assert s["termination"] == "user_stop" and s["reward"] == 1.0
    obs = server.bodies("agent")[1]["messages"][-1]
    assert obs["role"] == "user" and obs["content"].startswith("Observation: ")


@pytest.mark.parametrize("keep", [True, False])
async def test_reasoning_kept_or_dropped(keep: bool) -> None:
    _, server = await scripted(
        [Reply(reasoning="I should look it up.", tools=[USER_ID_TOOL]), Reply("Done.")],
        EpisodeOptions(user="scripted", keep_reasoning=keep),
    )
    sent = server.bodies("agent")[1]["messages"][2]
    assert sent["role"] == "assistant"
    assert ("reasoning_content" in sent) == keep


async def test_tool_latency_is_waited_and_counted() -> None:
    res, _ = await scripted(
        [Reply(tools=[USER_ID_TOOL, USER_ID_TOOL]), Reply(tools=[USER_ID_TOOL]), Reply("Done.")],
        EpisodeOptions(user="scripted", tool_latency=ToolLatency(kind="constant", mean_s=0.05)),
    )
    # two tool messages: the parallel pair waits once (the slowest), the single one once
    assert 0.1 <= res.session["durations"]["tool_s"] < 0.3


async def test_a_thousand_episodes_in_flight() -> None:
    """The runner holds 1,000 concurrent episodes in one process (server on the same loop
    here, so the rate is a floor, not the runner's capacity)."""
    import time

    flight = Reply(
        tools=[("check_flight_status", '{"flight_number": "SK269", "date": "2025-06-16"}')]
    )
    answer = Reply("Your flight SK269 is delayed to 10:50.")
    server = ScriptServer(
        choose=lambda role, body: answer if body["messages"][-1]["role"] == "tool" else flight
    )
    n = 1000
    active = peak = 0

    async def one(i: int) -> EpisodeResult:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        try:
            return await run_episode(
                spec(READ_TASK, i, f"k{i}"), {"agent": c}, EpisodeOptions(user="scripted")
            )
        finally:
            active -= 1

    async with server, ChatClient(endpoint(server.base_url)) as c:
        t0 = time.perf_counter()
        results = await asyncio.gather(*[one(i) for i in range(n)])
        rate = n / (time.perf_counter() - t0)
    assert peak == n
    assert all(
        r.session["termination"] == "user_stop" and r.session["reward"] == 1.0 for r in results
    )
    assert rate > 30, f"{rate:.0f} episodes/s"


async def test_empty_user_message_is_a_protocol_error() -> None:
    res, _ = await scripted(
        [Reply("Which flight?")],
        EpisodeOptions(user="llm"),
        users=[Reply("Is my flight on time?"), Reply("")],
    )
    s = res.session
    assert s["termination"] == "protocol_error"
    assert s["counts"]["protocol_errors"] == 1
    assert s["error"].startswith("user: empty message")
    assert s["counts"]["user_calls"] == 2 and s["counts"]["agent_calls"] == 1


async def test_bad_input_is_rejected_before_any_call() -> None:
    with pytest.raises(ValueError, match="unknown task"):
        await run_episode(spec("airline/999"), {}, EpisodeOptions(agent="noop", user="scripted"))
    with pytest.raises(ValueError, match="unknown domain"):
        await run_episode(spec("space/000"), {}, EpisodeOptions(agent="noop", user="scripted"))
    with pytest.raises(ValueError, match="clients"):
        await run_episode(spec(), {}, EpisodeOptions(user="scripted"))
    # Options no episode can run with are refused when they are made.
    with pytest.raises(ValueError, match="unknown user"):
        EpisodeOptions(agent="noop", user="robot")
    with pytest.raises(ValueError, match=r"tool_latency\.kind"):
        EpisodeOptions(agent="noop", user="scripted", tool_latency={"kind": "gamma", "mean_s": 1})
