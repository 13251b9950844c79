"""Built-in tau-style domains and their registry.

Each domain lives in its own module (`agentload.domains.<name>`, or an outside package's,
found through the `agentload.domains` entry-point group), imported only when asked for, so a
broken domain cannot break the others. The module exposes its domain as one of: a module
attribute `DOMAIN` (an instance), a factory `make_domain()`, or a `Domain` subclass whose
`name` is the domain's name.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from agentload.domains.base import (
    GRADER_VERSION,
    Action,
    Domain,
    Environment,
    Grade,
    Task,
    Tool,
    ToolError,
    ToolResult,
    UserScenario,
    grade,
    pass_hat_k,
    trajectory_actions,
)
from agentload.plugins import DOMAINS

__all__ = [
    "DOMAINS",
    "GRADER_VERSION",
    "Action",
    "Domain",
    "Environment",
    "Grade",
    "Task",
    "Tool",
    "ToolError",
    "ToolResult",
    "UserScenario",
    "domain_names",
    "get_domain",
    "get_task",
    "grade",
    "grade_trajectory",
    "own_domain_names",
    "pass_hat_k",
    "to_domain",
]


def to_domain(name: str, obj: Any) -> Domain:
    """A Domain from what a registry path names: an instance, a Domain subclass, a factory,
    or a module holding one of those (`DOMAIN`, `make_domain()`, a class named `name`)."""
    if isinstance(obj, Domain):
        return obj
    if inspect.isclass(obj) and issubclass(obj, Domain):
        return obj()
    if inspect.ismodule(obj):
        inst = getattr(obj, "DOMAIN", None)
        if isinstance(inst, Domain):
            return inst
        factory = getattr(obj, "make_domain", None)
        if callable(factory):
            return to_domain(name, factory())
        for _, cls in inspect.getmembers(obj, inspect.isclass):
            if issubclass(cls, Domain) and cls is not Domain and cls.name == name:
                return cls()
        raise LookupError(f"module {obj.__name__} defines no Domain named {name!r}")
    if callable(obj):
        return to_domain(name, obj())
    raise LookupError(f"domain {name!r}: {obj!r} is not a Domain")


def domain_names() -> list[str]:
    """Registered domain names, sorted."""
    return DOMAINS.names()


def own_domain_names() -> list[str]:
    """Registered domains whose data agentload has (every one but the τ² family, whose
    data is read from a τ²-bench data folder)."""
    return [d for d in DOMAINS.names() if not d.startswith("tau2-")]


def get_domain(name: str) -> Domain:
    """The domain's (per-process) instance. Raises KeyError for an unknown name."""
    return DOMAINS.get(name)


def get_task(task_id: str) -> Task:
    """A task by its id, "<domain>/<NNN>"."""
    domain, sep, _ = task_id.partition("/")
    if not sep:
        raise KeyError(f"task id {task_id!r} is not of the form <domain>/<NNN>")
    return get_domain(domain).get_task(task_id)


def grade_trajectory(trajectory: Mapping[str, Any], domain: Domain | None = None) -> Grade:
    """Grade a stored trajectory offline: replay its tool calls on a fresh database of the
    task's domain and check its replies (deterministic; the same Grade as the live one)."""
    task_id = trajectory.get("task_id")
    if not isinstance(task_id, str) or "/" not in task_id:
        raise ValueError(f"trajectory has no task id: {task_id!r}")
    if domain is None:
        domain = get_domain(task_id.split("/", 1)[0])
    if task_id.startswith("tau2-"):
        # lazy: start-up: τ²'s grader (and its data) load only for a τ² trajectory.
        from agentload.domains.tau2.grading import grade_stored

        info = grade_stored(trajectory, domain)
        return Grade(
            reward=float(info["reward"]),
            db_match=bool(info.get("db_match", False)),
            outputs_ok=bool(info.get("outputs_ok", False)),
            missing_outputs=list(info.get("missing_outputs") or ()),
            grader_version=str(info["grader_version"]),
            data_version=str(info["data_version"]),
            db_hash=str(info.get("db_hash") or ""),
            gold_hash=str(info.get("gold_hash") or ""),
        )
    task = domain.get_task(task_id)
    actions, replies = trajectory_actions(trajectory)
    return grade(domain, task, actions, replies, int(trajectory.get("db_seed", 0)))
