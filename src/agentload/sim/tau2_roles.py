"""The simulator's agent and customer on τ² tasks (`X-Agentload-Task: tau2-<domain>/<id>`).

They play `agentload.domains.tau2.oracle`'s scripted players statelessly, call by call: the
agent follows the task's gold actions (with one mistake in an episode it fails, as decided
by `agent_skill` per session), the customer answers from its scenario and runs its own gold
actions on its phone when the agent asks for them. The τ² data folder is the one the run
points at (the simulator inherits AGENTLOAD_TAU2_DATA).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from agentload.sim.behaviour import RequestView, ResponsePlan, ToolCallPlan
from agentload.sim.seeding import stable_rng

log = logging.getLogger("agentload.sim")
_warned: set[str] = set()


def _task(task_id: str) -> Any:
    # lazy: start-up time (the domains load with the first request that needs them)
    from agentload.domains import get_domain

    try:
        domain = get_domain(task_id.partition("/")[0])
        return domain, domain.get_task(task_id)
    except (KeyError, LookupError) as e:
        if task_id not in _warned:  # once per id: a misconfigured run would flood the log
            _warned.add(task_id)
            log.warning("τ² task %r unavailable (%s); answering generically", task_id, e)
        return None


def _names(request: RequestView) -> list[str]:
    return [str((t.get("function") or {}).get("name") or "") for t in request.tools_allowed()]


def agent_response(request: RequestView, seed: int, skill: float) -> ResponsePlan | None:
    """The agent's answer, or None when the task is not a τ² task this process can load."""
    # lazy: start-up time (the domains load with the first request that needs them)
    from agentload.domains.tau2 import oracle

    found = _task(request.task or "")
    if found is None:
        return None
    domain, task = found
    rng = stable_rng("tau2-plan", seed, request.episode_key, task.id)
    steps, _ = oracle.plan(domain, task, rng, skill)
    step = oracle.agent_step(steps, request.messages)
    offered = set(_names(request))
    if step.kind == "call":
        calls = [a for a in step.actions if a["name"] in offered]
        if calls:
            return ResponsePlan(
                tool_calls=[
                    ToolCallPlan(a["name"], json.dumps(a.get("arguments") or {})) for a in calls
                ]
            )
        return ResponsePlan(content="Let me check that for you.")
    return ResponsePlan(content=step.text)


def user_response(request: RequestView) -> ResponsePlan | None:
    # lazy: start-up time (the domains load with the first request that needs them)
    from agentload.domains.tau2 import oracle

    found = _task(request.task or "")
    if found is None:
        return None
    _, task = found
    text, asked = oracle.user_step(task, request.messages, _names(request))
    if asked:
        return ResponsePlan(
            tool_calls=[ToolCallPlan(name, json.dumps(args)) for name, args in asked]
        )
    return ResponsePlan(content=text)


class Judge:
    """``X-Agentload-Role: judge``: answers τ²'s judge prompt with its JSON verdict, every
    expected outcome met unless the `judge_strict` behaviour option names a word that, found
    in the conversation, fails them all (so tests can see both verdicts)."""

    def __init__(self, config: Any) -> None:
        self.config = config

    def respond(self, request: RequestView) -> ResponsePlan:
        import ast
        import re

        text = ""
        for m in request.messages:
            if m.get("role") == "user" and isinstance(m.get("content"), str):
                text = m["content"]
        head, _, tail = text.rpartition("expectedOutcomes:")
        try:
            outcomes = ast.literal_eval(tail.strip())
        except (ValueError, SyntaxError):
            outcomes = []
        if not isinstance(outcomes, list):
            outcomes = []
        word = str(request.options.get("judge_strict") or "")
        met = not (word and re.search(re.escape(word), head, re.IGNORECASE))
        verdict = {
            "results": [
                {
                    "expectedOutcome": str(o),
                    "reasoning": "The conversation shows it." if met else f"It says {word!r}.",
                    "metExpectation": met,
                }
                for o in outcomes
            ]
        }
        return ResponsePlan(content=json.dumps(verdict))
