"""Built-in tau-style domains and their registry.

Each domain lives in its own module (`agentload.domains.<name>`), imported only when asked
for, so a broken domain cannot break the others. The module exposes its domain as one of:
a module attribute `DOMAIN` (an instance), a factory `make_domain()`, or a `Domain` subclass
whose `name` is the domain's name.
"""

from __future__ import annotations

import importlib
import inspect
import threading

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
)

__all__ = [
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
    "pass_hat_k",
]

# name -> module path
_REGISTRY: dict[str, str] = {
    "airline": "agentload.domains.airline",
    "retail": "agentload.domains.retail",
}
_INSTANCES: dict[str, Domain] = {}
_LOCK = threading.Lock()


def domain_names() -> list[str]:
    """Registered domain names, sorted."""
    return sorted(_REGISTRY)


def _load(name: str) -> Domain:
    module = importlib.import_module(_REGISTRY[name])
    obj = getattr(module, "DOMAIN", None)
    if isinstance(obj, Domain):
        return obj
    factory = getattr(module, "make_domain", None)
    if callable(factory):
        return factory()
    for _, cls in inspect.getmembers(module, inspect.isclass):
        if issubclass(cls, Domain) and cls is not Domain and cls.name == name:
            return cls()
    raise LookupError(f"module {module.__name__} defines no Domain named {name!r}")


def get_domain(name: str) -> Domain:
    """The domain's (per-process) instance. Raises KeyError for an unknown name."""
    if name not in _REGISTRY:
        raise KeyError(f"unknown domain {name!r}; known: {', '.join(domain_names())}")
    with _LOCK:
        inst = _INSTANCES.get(name)
        if inst is None:
            inst = _INSTANCES[name] = _load(name)
    return inst


def get_task(task_id: str) -> Task:
    """A task by its id, "<domain>/<NNN>"."""
    domain, sep, _ = task_id.partition("/")
    if not sep:
        raise KeyError(f"task id {task_id!r} is not of the form <domain>/<NNN>")
    return get_domain(domain).get_task(task_id)
