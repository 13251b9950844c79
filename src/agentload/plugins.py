"""Every extension point of agentload, in one place.

Each is a :class:`~agentload.registry.Registry` whose built-ins are import paths, loaded on
first use; an outside package adds to one with an entry point in its group (see
docs/architecture.md). Nothing here imports an implementation, so listing the names (for
``--help``, ``tasks list``) stays cheap.
"""

from __future__ import annotations

from typing import Any

from agentload.registry import Registry

DOMAINS: Registry[Any] = Registry(
    "domains",
    "domain",
    {
        "airline": "agentload.domains.airline",
        "retail": "agentload.domains.retail",
        # τ²-bench's domains, read from a τ²-bench data folder (docs/tau2.md)
        "tau2-airline": "agentload.domains.tau2:make_airline",
        "tau2-retail": "agentload.domains.tau2:make_retail",
        "tau2-telecom": "agentload.domains.tau2:make_telecom",
        "tau2-telecom-workflow": "agentload.domains.tau2:make_telecom_workflow",
        "tau2-mock": "agentload.domains.tau2:make_mock",
    },
    convert="agentload.domains:to_domain",
)
"""Domains (`agentload.domains` group): a Domain instance, subclass or factory, or a module
holding one. The `tau2-` family runs only when asked for by name: its data lives outside
agentload."""

AGENTS: Registry[Any] = Registry(
    "agents",
    "agent strategy",
    {
        "tool-calling": "agentload.agents.strategies:ToolCallingAgent",
        "react": "agentload.agents.strategies:react_agent",
        "act": "agentload.agents.strategies:act_agent",
        # tool-calling with examples from workload.few_shot in the system prompt
        "few-shot": "agentload.agents.strategies:few_shot_agent",
        "oracle": "agentload.agents.strategies:OracleAgent",
        "noop": "agentload.agents.strategies:NoopAgent",
    },
)
"""Agent strategies (`agentload.agents` group): `factory(domain, task, *, keep_reasoning)`
returning an Agent (an Agent class is such a factory)."""

USERS: Registry[Any] = Registry(
    "users",
    "user simulator",
    {
        "llm": "agentload.agents.users:llm_user",
        "scripted": "agentload.agents.users:scripted_user",
        # τ-bench's user strategies (agentload.agents.user_strategies)
        "react": "agentload.agents.users:react_user",
        "verify": "agentload.agents.users:verify_user",
        "reflection": "agentload.agents.users:reflection_user",
    },
)
"""User simulators (`agentload.users` group): `factory(task, *, max_turns)`."""

WORKLOADS: Registry[Any] = Registry(
    "workloads",
    "workload kind",
    {
        "episodes": "agentload.workloads.episodes:EpisodesWorkload",
        "replay": "agentload.workloads.replay:ReplayWorkload",
        "external": "agentload.workloads.external:ExternalWorkload",
        "synthetic": "agentload.workloads.synthetic:SyntheticWorkload",
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
        "judge": "agentload.sim.tau2_roles:Judge",
    },
)
"""Simulator behaviours by the role they play (`agentload.sim_behaviours` group):
`factory(sim_config)` returning an object with `respond(request) -> ResponsePlan`."""

ALL = {r.group: r for r in (DOMAINS, AGENTS, USERS, WORKLOADS, BEHAVIOURS)}
