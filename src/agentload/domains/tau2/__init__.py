"""The τ²-bench domains as an agentload domain family: `tau2-airline`, `tau2-retail`,
`tau2-telecom` (with `tau2-telecom-workflow`, its workflow policy) and `tau2-mock`.

Tasks, databases, policies and user-simulator guidelines are read at run time from a τ²-bench
data folder (see `data`); the tools (`airline`, `retail`, `telecom`, `mock`), the
orchestration (`episode`) and the grading (`grading`) are agentload's own code, written to
match τ²-bench's behaviour: the same tool schemas, the same database effects and hashes, the
same rewards.
"""

from __future__ import annotations

import importlib
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import Any

from agentload.domains.base import Action, Domain, Task, Tool, ToolError, UserScenario
from agentload.domains.tau2 import data
from agentload.domains.tau2.data import Tau2DataError, configure, current_split
from agentload.domains.tau2.prompts import agent_system_prompt
from agentload.domains.tau2.toolkit import World, deep_update

__all__ = [
    "FAMILY_PREFIX",
    "Tau2DataError",
    "Tau2Domain",
    "Tau2Task",
    "configure",
    "current_split",
    "is_tau2",
]

FAMILY_PREFIX = "tau2-"
_MODULES = {
    "airline": "airline",
    "retail": "retail",
    "telecom": "telecom",
    "telecom-workflow": "telecom",
    "mock": "mock",
}


def is_tau2(domain_or_task: str) -> bool:
    """Whether a domain name or task id belongs to the τ² family."""
    return domain_or_task.startswith(FAMILY_PREFIX)


def _not_direct(db: dict, **_: Any) -> Any:
    raise ToolError("τ² tools run through the episode's World, not on a bare database")


class Tau2Task(Task):
    """A τ² task: the agentload view (scenario, gold agent actions, required outputs) and
    τ²'s own record (`tau2`), which orchestration and grading read."""

    tau2: dict[str, Any]
    tau2_id: str

    def __init__(self, domain: str, raw: dict[str, Any], category: str) -> None:
        crit = raw.get("evaluation_criteria") or {}
        actions = tuple(
            Action(a["name"], dict(a.get("arguments") or {}))
            for a in crit.get("actions") or ()
            if a.get("requestor", "assistant") == "assistant"
        )
        scenario = raw.get("user_scenario") or {}
        instr = scenario.get("instructions")
        reason = instr.get("reason_for_call", "") if isinstance(instr, dict) else str(instr)
        super().__init__(
            id=f"{domain}/{raw['id']}",
            domain=domain,
            category=category,
            scenario=UserScenario(
                persona=scenario.get("persona") or "",
                instructions=user_instructions(scenario),
                known_info={},
                unknown_info=[],
                opening=reason.strip(),
            ),
            gold_actions=actions,
            required_outputs=tuple(crit.get("communicate_info") or ()),
        )
        object.__setattr__(self, "tau2", raw)
        object.__setattr__(self, "tau2_id", str(raw["id"]))

    @property
    def reward_basis(self) -> list[str]:
        crit = self.tau2.get("evaluation_criteria") or {}
        basis = crit.get("reward_basis")
        return list(basis) if basis is not None else ["DB", "COMMUNICATE"]

    @property
    def needs_judge(self) -> bool:
        """Whether grading needs the judge: NL assertions listed and in the reward basis."""
        crit = self.tau2.get("evaluation_criteria") or {}
        return "NL_ASSERTION" in self.reward_basis and bool(crit.get("nl_assertions"))

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        d["tau2"] = self.tau2
        return d


def _indent(text: str) -> str:
    # textwrap.indent's default: a tab before every line that is not blank.
    return "".join("\t" + line if line.strip() else line for line in text.splitlines(True))


def user_instructions(scenario: dict[str, Any]) -> str:
    """The task's user scenario as text, in the layout τ²'s user simulator reads it."""
    lines = []
    if scenario.get("persona") is not None:
        lines += ["Persona:", _indent(scenario["persona"])]
    instr = scenario.get("instructions")
    if isinstance(instr, dict):
        parts = [f"Domain: {instr.get('domain', '')}"]
        parts.append(f"Reason for call:\n{_indent(instr.get('reason_for_call', ''))}")
        if instr.get("known_info") is not None:
            parts.append(f"Known info:\n{_indent(instr['known_info'])}")
        if instr.get("unknown_info") is not None:
            parts.append(f"Unknown info:\n{_indent(instr['unknown_info'])}")
        parts.append(f"Task instructions:\n{_indent(instr.get('task_instructions', ''))}")
        text = "\n".join(parts)
    else:
        text = str(instr or "")
    lines += ["Instructions:", _indent(text)]
    return "\n".join(lines)


class Tau2Domain(Domain):
    """One τ² domain. Tasks are τ²'s, in file order; `tasks()` lists the current split's
    (`configure(split=...)`, default "base"), while `get_task` finds any task of the file."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.name = FAMILY_PREFIX + key  # type: ignore[misc]

    @cached_property
    def module(self) -> ModuleType:
        return importlib.import_module(f"agentload.domains.tau2.{_MODULES[self.key]}")

    @property
    def folder(self) -> Path:
        return data.domain_dir(self.key)

    @property
    def data_version(self) -> str:  # type: ignore[override]
        return data.data_files(self.key).version

    @property
    def data_hashes(self) -> dict[str, str]:
        return dict(data.data_files(self.key).hashes)

    @cached_property
    def tools(self) -> list[Tool]:  # type: ignore[override]
        return [
            Tool(s.name, s.description, s.parameters, s.mutates, _not_direct)
            for s in self.module.AGENT_KIT.SPECS.values()
        ]

    def tool_schemas(self) -> list[dict]:
        return [dict(s.schema()) for s in self.module.AGENT_KIT.SPECS.values()]

    def user_tool_schemas(self) -> list[dict]:
        kit = self.module.USER_KIT
        return [] if kit is None else [dict(s.schema()) for s in kit.SPECS.values()]

    @property
    def policy(self) -> str:  # type: ignore[override]
        return self._prompts()[0]

    def system_prompt(self) -> str:
        return self._prompts()[1]

    def _prompts(self) -> tuple[str, str]:
        """(policy, the agent's system prompt), read once per data version: every episode
        of a run shares the one string (and the server sees one static prefix)."""

        version = self.data_version
        cached = self.__dict__.get("_prompt_cache")
        if cached is None or cached[0] != version:
            if self.key == "telecom-workflow":
                policy = str(self.module.workflow_policy(self.folder))
            else:
                policy = str(self.module.policy(self.folder))
            cached = self.__dict__["_prompt_cache"] = (version, policy, agent_system_prompt(policy))
        return cached[1], cached[2]

    def make_db(self, seed: int = 0) -> dict:
        return self.make_world().agent.db

    def make_world(self) -> World:
        return self.module.make_world(self.folder)

    @cached_property
    def _all_tasks(self) -> dict[str, Tau2Task]:
        out: dict[str, Tau2Task] = {}
        for raw in data.raw_tasks(self.key):
            crit = raw.get("evaluation_criteria") or {}
            writes = sum(
                1
                for a in crit.get("actions") or ()
                if (s := self._spec(a.get("name", ""), a.get("requestor", "assistant")))
                and s.mutates
            )
            category = (
                "read_only" if writes == 0 else "single_write" if writes == 1 else "multi_write"
            )
            t = Tau2Task(self.name, raw, category)
            out[t.id] = t
        return out

    def _spec(self, name: str, requestor: str) -> Any:
        kit = self.module.AGENT_KIT if requestor == "assistant" else self.module.USER_KIT
        return None if kit is None else kit.SPECS.get(name)

    def all_tasks(self) -> list[Tau2Task]:
        """Every task of τ²'s task file, whatever its split, in file order."""
        return list(self._all_tasks.values())

    def splits(self) -> dict[str, list[str]]:
        return data.splits(self.key)

    def tasks(self, split: str | None = None) -> list[Task]:
        split = split or current_split()
        all_tasks = self._all_tasks
        sp = self.splits()
        if not sp:  # a domain without a split file has every task in "base"
            if split != data.DEFAULT_SPLIT:
                raise KeyError(f"{self.name} has no split {split!r}; known: base")
            return list(all_tasks.values())
        if split not in sp:
            raise KeyError(f"{self.name} has no split {split!r}; known: {', '.join(sp)}")
        ids = {f"{self.name}/{i}" for i in sp[split]}
        return [t for tid, t in all_tasks.items() if tid in ids]

    def get_task(self, task_id: str) -> Tau2Task:
        try:
            return self._all_tasks[task_id]
        except KeyError:
            raise KeyError(f"unknown task {task_id!r} in domain {self.name!r}") from None

    def task_world(self, task: Tau2Task) -> World:
        """A fresh world with the task's initial state set as τ² sets it: initialization
        data merged, initialization actions run, the message history's state-changing tool
        calls replayed, then one sync."""
        world = self.make_world()
        init = task.tau2.get("initial_state") or {}
        idata = init.get("initialization_data") or {}
        agent_data, user_data = idata.get("agent_data"), idata.get("user_data")
        # τ² rebuilds a side's database from the merged data and then points the other
        # side at that same database object (its set_state): the hashes depend on it.
        if agent_data is not None:
            deep_update(world.agent.db, agent_data)
            world.agent.db = world.agent.normalize(world.agent.db)
            if world.user is not None:
                world.user.db = world.agent.db
        if user_data is not None and world.user is not None:
            deep_update(world.user.db, user_data)
            world.user.db = world.user.normalize(world.user.db)
            world.agent.db = world.user.db
        for a in init.get("initialization_actions") or ():
            world.run_function(a["env_type"], a["func_name"], a.get("arguments") or {})
        for requestor, name, args in history_tool_calls(init.get("message_history") or ()):
            if self._mutates(name, requestor):
                world.call(requestor, name, args)
        world.sync()
        return world

    def _mutates(self, name: str, requestor: str) -> bool:
        spec = self._spec(name, requestor)
        if spec is None and requestor == "assistant":
            spec = self._spec(name, "user")
        return bool(spec is not None and spec.mutates)


def history_tool_calls(messages: Any) -> list[tuple[str, str, dict[str, Any]]]:
    """(requestor, name, arguments) of every tool call in a τ² message list, in order."""
    out = []
    for m in messages:
        if m.get("role") not in ("assistant", "user"):
            continue
        for tc in m.get("tool_calls") or ():
            requestor = tc.get("requestor") or ("user" if m["role"] == "user" else "assistant")
            out.append((requestor, tc["name"], dict(tc.get("arguments") or {})))
    return out


# Factories the domain registry names (not `airline` etc.: those are the tool modules).
def make_airline() -> Tau2Domain:
    return Tau2Domain("airline")


def make_retail() -> Tau2Domain:
    return Tau2Domain("retail")


def make_telecom() -> Tau2Domain:
    return Tau2Domain("telecom")


def make_telecom_workflow() -> Tau2Domain:
    return Tau2Domain("telecom-workflow")


def make_mock() -> Tau2Domain:
    return Tau2Domain("mock")
