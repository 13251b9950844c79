"""The `external` workload kind: episodes of the domains' tasks solved by an agent agentload
does not drive.

agentload plays the user simulator (the same one as in the `episodes` kind) and, per episode,
opens a tool session for the task on its tool server (MCP and HTTP/JSON,
`agentload.tools`), points the agent's LLM traffic at its recording proxy (which forwards it
to the agent endpoint under test) and hands each user message to the agent through an
adapter (`agentload.external.adapters`). When the user stops, the tool session's database and
the agent's replies are graded by the domain grader. The session, trajectory and call records
have the form of a native episode's: the agent's calls as the proxy measured them (role
`agent`), the user simulator's as its client measured them (role `user`).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentload.agents.strategies import transfer_tool_name
from agentload.agents.users import is_stop, make_user
from agentload.client import CallRecord, CallResult, ChatClient
from agentload.config import RunConfig
from agentload.domains import get_domain
from agentload.external.adapters import AgentError, AgentSession, make_adapter
from agentload.wire import ROLE_HEADER, SESSION_HEADER, TASK_HEADER
from agentload.workloads.base import SessionOutcome
from agentload.workloads.episode_core import (
    COUNT_KEYS,
    EpisodeEnd,
    EpisodeSpec,
    Stop,
    drive,
    episode_records,
    episode_seed,
    next_user_message,
    tally_calls,
)
from agentload.workloads.episodes import EpisodesWorkload

if TYPE_CHECKING:
    from agentload.client import EndpointConfig
    from agentload.external.routing import AgentProxy
    from agentload.proxy.sessions import ProxySession
    from agentload.scheduler import WorkItem
    from agentload.tools.server import ToolServer

log = logging.getLogger("agentload.external")
_now_ns = time.perf_counter_ns


class ExternalWorkload(EpisodesWorkload):
    """Live episodes of the selected tasks with an external agent, `trials` times each."""

    kind = "external"
    noun = "episodes"

    def __init__(self, cfg: RunConfig) -> None:
        super().__init__(cfg)
        self.adapter = make_adapter(cfg.external)  # a bad adapter setting fails here, early
        self.proxy: AgentProxy | None = None
        self.tools: dict[str, ToolServer] = {}
        self.state_root: Path | None = None

    def tool_roles(self) -> tuple[str, ...]:
        return ("agent",)

    def metadata(self) -> dict[str, Any]:
        return {**super().metadata(), "external": {"adapter": self.adapter.name}}

    async def prepare(self, endpoints: Mapping[str, EndpointConfig], *, embedded: bool) -> None:
        # lazy: start-up: the recording proxy and the tool servers load only when an
        # external run prepares, not when the kinds are listed.
        from agentload.external.routing import AgentProxy
        from agentload.tools.server import ToolServer

        await super().prepare(endpoints, embedded=embedded)
        ep = endpoints["agent"]
        self.agent_endpoint = ep
        self.proxy = AgentProxy(ep.base_url, ep.name, headers=ep.auth_headers())
        await self.proxy.start()
        for d in sorted({t.partition("/")[0] for t in self.units()}):
            self.tools[d] = await ToolServer(d).start()
        self.state_root = Path(tempfile.mkdtemp(prefix="agentload-external-"))

    async def close(self) -> None:
        if self.proxy is not None:
            await self.proxy.stop()
            self.proxy = None
        for ts in self.tools.values():
            await ts.stop()
        self.tools.clear()
        if self.state_root is not None:
            shutil.rmtree(self.state_root, ignore_errors=True)
            self.state_root = None

    async def run_session(
        self, item: WorkItem, session_id: str, clients: Mapping[str, ChatClient]
    ) -> SessionOutcome:
        return await _Episode(self, item, session_id, clients).run()


class _Episode:
    """One episode: the user simulator's loop around the adapter's turns."""

    def __init__(
        self,
        wl: ExternalWorkload,
        item: WorkItem,
        session_id: str,
        clients: Mapping[str, ChatClient],
    ) -> None:
        if wl.proxy is None or wl.state_root is None:
            raise RuntimeError("the external workload was not prepared")
        self.wl, self.item, self.sid = wl, item, session_id
        self.options = wl.options
        self.domain = get_domain(item.task_id.partition("/")[0])
        self.task = self.domain.get_task(item.task_id)
        self.seed = episode_seed(wl.cfg.workload.seed, item.task_id, item.trial)
        self.db_seed = int(getattr(self.task, "db_seed", 0))
        self.user = make_user(self.options.user, self.task, max_turns=self.options.max_user_turns)
        self.user_client = clients["user"]
        self.agent_client = clients["agent"]
        self.headers = {SESSION_HEADER: session_id, ROLE_HEADER: "user", TASK_HEADER: item.task_id}
        self.user_calls: list[CallRecord] = []
        self.replies: list[str] = []
        self.user_turns = 0
        self.counts = dict.fromkeys(COUNT_KEYS, 0)
        self.transfer_tool = transfer_tool_name(self.domain)

    async def user_llm(self, messages: list[dict[str, Any]], tools: Any) -> CallResult:
        opts = self.options
        turn = len(self.user_calls)
        res = await self.user_client.chat(
            messages,
            tools=tools,
            max_tokens=opts.user_max_tokens,
            temperature=opts.temperature,
            headers=self.headers,
            session_id=self.sid,
            role="user",
            turn=turn,
            call_id=f"{self.sid}:u{turn}",
        )
        self.user_calls.append(res.record)
        return res

    async def user_says(self, agent_text: str | None) -> str:
        return await next_user_message(self, agent_text)

    def open(self) -> tuple[AgentSession, str]:
        wl = self.wl
        assert wl.proxy is not None and wl.state_root is not None
        ts = wl.tools[self.domain.name]
        tsid = ts.create_session(self.item.task_id, seed=self.db_seed)
        state = wl.state_root / self.sid
        state.mkdir(parents=True, exist_ok=True)
        policy = state / "policy.md"
        policy.write_text(self.domain.system_prompt(), encoding="utf-8")
        ep = wl.agent_endpoint
        session = AgentSession(
            session_id=self.sid,
            task_id=self.item.task_id,
            domain=self.domain.name,
            llm_base_url=wl.proxy.open(self.sid, self.item.task_id, self.agent_client.on_record),
            model=ep.model,
            api_key=None,  # the proxy adds the endpoint's key; the agent never holds it
            mcp_url=ts.mcp_url(tsid),
            tools_url=f"{ts.url}/sessions/{tsid}/tools",
            policy_file=policy,
            state_dir=state,
            max_tokens=self.options.agent_max_tokens,
        )
        return session, tsid

    async def loop(self, session: AgentSession, tsid: str) -> None:
        adapter = self.wl.adapter
        env = self.wl.tools[self.domain.name].session(tsid).env
        message = await self.user_says(None)
        if is_stop(message):
            raise Stop("user_stop")
        while True:
            try:
                reply = await adapter.turn(session, message)
            except AgentError as e:
                raise Stop("protocol_error", f"agent: {e}") from None
            self.replies.append(reply)
            if self.transfer_tool and any(a.name == self.transfer_tool for a in env.actions):
                raise Stop("agent_transfer")
            message = await self.user_says(reply)
            if is_stop(message):
                raise Stop("user_stop")

    async def run(self) -> SessionOutcome:
        session, tsid = self.open()
        adapter = self.wl.adapter
        spec = EpisodeSpec(self.item.task_id, self.item.trial, self.seed, self.sid)

        async def prepare() -> None:
            try:
                await adapter.open(session)
            except AgentError as e:  # the adapter could not open the agent's session
                raise Stop("protocol_error", f"agent: {e}") from None

        started_at, start_ns = time.time(), _now_ns()
        try:
            termination, error = await drive(
                lambda: self.loop(session, tsid), spec, self.options.budget_s, prepare=prepare
            )
        finally:
            with contextlib.suppress(Exception):
                await adapter.close(session)
        end_ns = _now_ns()
        return self.finish(spec, tsid, termination, error, started_at, start_ns, end_ns)

    def finish(
        self,
        spec: EpisodeSpec,
        tsid: str,
        termination: str,
        error: str | None,
        started_at: float,
        start_ns: int,
        end_ns: int,
    ) -> SessionOutcome:
        wl = self.wl
        assert wl.proxy is not None
        seen, agent_calls = wl.proxy.close(self.sid)
        tool_session = wl.tools[self.domain.name].close_session(tsid)
        messages, tools = _conversation(seen)
        counts = self.counts
        # The agent's calls as the proxy measured them, the user simulator's as its client
        # did; the agent's steps are its model calls.
        llm_s, user_s = tally_calls(
            counts,
            [*agent_calls, *self.user_calls],
            steps=len(agent_calls),
            user_turns=self.user_turns,
        )
        counts["tool_calls"] = tool_session.calls
        counts["tool_errors"] = tool_session.errors
        session, trajectory = episode_records(
            EpisodeEnd(
                spec=spec,
                domain=self.domain,
                task=self.task,
                db_seed=self.db_seed,
                env=tool_session.env,
                replies=self.replies,
                agent=f"external:{wl.adapter.name}",
                user=self.options.user,
                counts=counts,
                messages=messages,
                tools=tools,
                action_format="native",
                termination=termination,
                error=error,
                started_at=started_at,
                start_ns=start_ns,
                end_ns=end_ns,
                llm_s=llm_s,
                tool_s=0.0,  # the agent's own business; not observable from here
                user_s=user_s,
            )
        )
        return SessionOutcome(session, trajectory)


def _conversation(seen: ProxySession | None) -> tuple[list[Any], list[Any]]:
    """The agent's conversation as its last model call sent it, with that call's answer."""
    if seen is None:
        return [], []
    messages = list(seen.messages)
    if seen.answer is not None:
        messages.append(seen.answer)
    return messages, list(seen.tools)
