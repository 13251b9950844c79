"""Every extension point of agentload, in one place.

Each is a :class:`~agentload.registry.Registry` whose built-ins are import paths, loaded on
first use; an outside package adds to one with an entry point in its group (see
docs/architecture.md). Nothing here imports an implementation, so listing the names (for
``--help``, ``tasks list``) stays cheap.
"""

from __future__ import annotations

from typing import Any

from agentload.registry import Registry


def _domain(name: str, obj: Any) -> Any:
    from agentload.domains import to_domain

    return to_domain(name, obj)


DOMAINS: Registry[Any] = Registry(
    "domains",
    "domain",
    {"airline": "agentload.domains.airline", "retail": "agentload.domains.retail"},
    convert=_domain,
)
"""Domains (`agentload.domains` group): a Domain instance, subclass or factory, or a module
holding one."""

AGENTS: Registry[Any] = Registry(
    "agents",
    "agent strategy",
    {
        "tool-calling": "agentload.agents.strategies:ToolCallingAgent",
        "react": "agentload.agents.strategies:react_agent",
        "act": "agentload.agents.strategies:act_agent",
        "oracle": "agentload.agents.strategies:OracleAgent",
        "noop": "agentload.agents.strategies:NoopAgent",
    },
)
"""Agent strategies (`agentload.agents` group): `factory(domain, task, *, keep_reasoning)`
returning an Agent (an Agent class is such a factory)."""

USERS: Registry[Any] = Registry(
    "users",
    "user simulator",
    {"llm": "agentload.agents.users:llm_user", "scripted": "agentload.agents.users:scripted_user"},
)
"""User simulators (`agentload.users` group): `factory(task, *, max_turns)`."""

WORKLOADS: Registry[Any] = Registry(
    "workloads",
    "workload kind",
    {
        "episodes": "agentload.workloads.episodes:EpisodesWorkload",
        "replay": "agentload.workloads.replay:ReplayWorkload",
        "external": "agentload.workloads.external:ExternalWorkload",
    },
)
"""Workload kinds (`agentload.workloads` group): a Workload subclass."""

BEHAVIOURS: Registry[Any] = Registry(
    "sim_behaviours",
    "simulator behaviour",
    {
        "generic": "agentload.sim.behaviour:GenericBehaviour",
        "agent": "agentload.sim.roles:SkilledAgent",
        "user": "agentload.sim.roles:CooperativeUser",
    },
)
"""Simulator behaviours by the role they play (`agentload.sim_behaviours` group):
`factory(sim_config)` returning an object with `respond(request) -> ResponsePlan`."""

ALL = {r.group: r for r in (DOMAINS, AGENTS, USERS, WORKLOADS, BEHAVIOURS)}
