"""Grading as τ²-bench grades an episode: the reward is the product of the task's
`reward_basis` components.

- DB: the agent's (and user's) database hashes after the episode equal those after the gold
  actions replayed on a fresh environment with the task's initial state.
- ENV_ASSERTION: each of the task's env assertions holds on the episode's environment.
- ACTION: each gold action is matched by some tool call of the episode (agent or user) with
  the same name and the same values of its `compare_args` (all arguments when unset).
- COMMUNICATE: each `communicate_info` string is in some agent text message (lower case,
  commas dropped from the message).
- NL_ASSERTION: a judge model says every natural-language assertion is met. Without a judge
  the component is not evaluated and the reward is marked partial, never full.

Only episodes that ended with the user's stop (or the agent's) are graded; any other ending
scores 0, as in τ².

Messages are in τ²'s shape: {"role", "content", "tool_calls": [{"id", "name", "arguments",
"requestor"}]} and tool messages {"role": "tool", "id", "content", "requestor", "error"}.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentload.domains.tau2 import Tau2Domain, Tau2Task, history_tool_calls
from agentload.domains.tau2.prompts import GREETING, STOP
from agentload.domains.tau2.toolkit import World

GRADER_VERSION = "tau2-1"
GRADED_ENDINGS = ("user_stop", "agent_stop")


def _gold_key(domain: Tau2Domain, task: Tau2Task) -> tuple[str, str, str]:
    return (domain.name, domain.data_version, task.id)


_GOLD: dict[tuple[str, str, str], tuple[str, str | None]] = {}


def gold_hashes(domain: Tau2Domain, task: Tau2Task) -> tuple[str, str | None]:
    """The agent and user database hashes after the gold actions (cached per task): each
    action is run directly on its side's tools (no sync between the sides), failures
    ignored, as τ²'s evaluator builds its gold environment."""
    key = _gold_key(domain, task)
    got = _GOLD.get(key)
    if got is None:
        world = domain.task_world(task)
        for a in (task.tau2.get("evaluation_criteria") or {}).get("actions") or ():
            try:
                kit = world.kit(a.get("requestor", "assistant"))
            except KeyError:
                continue
            kit.call(a["name"], dict(a.get("arguments") or {}))
        got = _GOLD[key] = world.state_hashes()
    return got


def replay(domain: Tau2Domain, task: Tau2Task, messages: Sequence[Mapping[str, Any]]) -> World:
    """The environment an episode's messages leave: the task's initial state, then every
    state-changing tool call of the messages after the task's own history (τ²'s replay).
    The history is skipped only where the messages start with it: an episode's own
    messages (`tau2.messages` of a trajectory) do not hold it."""
    world = domain.task_world(task)
    history = list((task.tau2.get("initial_state") or {}).get("message_history") or ())
    lead = history and len(messages) >= len(history)
    held = lead and all(
        m.get("role") == h.get("role") and m.get("content") == h.get("content")
        for h, m in zip(history, messages, strict=False)
    )
    for requestor, name, args in history_tool_calls(messages[len(history) if held else 0 :]):
        if domain._mutates(name, requestor):
            world.call(requestor, name, args)
    world.sync()
    return world


def tool_calls(messages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [
        tc
        for m in messages
        if m.get("role") in ("assistant", "user")
        for tc in m.get("tool_calls") or ()
    ]


def action_checks(task: Tau2Task, messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    calls = tool_calls(messages)
    out = []
    for gold in (task.tau2.get("evaluation_criteria") or {}).get("actions") or ():
        found = any(_matches(gold, c) for c in calls)
        out.append({"action": gold, "action_match": found, "action_reward": 1.0 if found else 0.0})
    return out


def _matches(gold: Mapping[str, Any], call: Mapping[str, Any]) -> bool:
    if gold.get("name") != call.get("name"):
        return False
    args = call.get("arguments") or {}
    keys = gold.get("compare_args")
    if keys is None:
        keys = list(args)
    if not keys:
        return True
    want = gold.get("arguments") or {}
    return {k: v for k, v in args.items() if k in keys} == {
        k: v for k, v in want.items() if k in keys
    }


def communicate_checks(
    task: Tau2Task, messages: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    texts = [
        m["content"]
        for m in messages
        if m.get("role") == "assistant"
        and isinstance(m.get("content"), str)
        and m["content"].strip()
    ]
    lowered = [t.lower().replace(",", "") for t in texts]
    out = []
    for info in (task.tau2.get("evaluation_criteria") or {}).get("communicate_info") or ():
        hit = next((t for t, low in zip(texts, lowered, strict=True) if info.lower() in low), None)
        out.append(
            {
                "info": info,
                "met": hit is not None,
                "justification": (
                    f"Information '{info}' communicated in the message:\n '{hit}'"
                    if hit is not None
                    else f"Information '{info}' not communicated."
                ),
            }
        )
    return out


def env_assertion_checks(task: Tau2Task, world: World) -> list[dict[str, Any]]:
    out = []
    for a in (task.tau2.get("evaluation_criteria") or {}).get("env_assertions") or ():
        check: dict[str, Any] = {"env_assertion": a}
        try:
            value = world.run_function(a["env_type"], a["func_name"], a.get("arguments") or {})
            met = isinstance(value, bool) and value == a.get("assert_value", True)
        except Exception as e:
            # τ²'s evaluator raises here (e.g. the asserted record was never created): its
            # runner retries the episode and then records an infrastructure error without a
            # reward. A reward is needed here, so the assertion counts as not met.
            met = False
            check["error"] = f"{type(e).__name__}: {e}"
        out.append({**check, "met": met, "reward": 1.0 if met else 0.0})
    return out


def grade(
    domain: Tau2Domain,
    task: Tau2Task,
    messages: Sequence[Mapping[str, Any]],
    termination: str,
    *,
    world: World | None = None,
    nl_checks: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """τ²'s reward info for an episode. `world` is the episode's own environment (replayed
    from the messages when None); `nl_checks` the judge's verdicts ({"nl_assertion", "met",
    "justification"}), None when no judge was asked."""
    base: dict[str, Any] = {
        "grader_version": GRADER_VERSION,
        "data_version": domain.data_version,
        "reward_basis": task.reward_basis,
        "partial": False,
    }
    if termination not in GRADED_ENDINGS:
        return {
            **base,
            "reward": 0.0,
            "reward_basis": None,
            "info": {
                "note": f"Simulation terminated prematurely. Termination reason: {termination}"
            },
        }
    basis = set(task.reward_basis)
    crit = task.tau2.get("evaluation_criteria") or {}
    if world is None:
        world = replay(domain, task, messages)
    db_hash, user_hash = world.state_hashes()
    gold_db, gold_user = gold_hashes(domain, task)
    has_env = crit.get("actions") is not None or crit.get("env_assertions") is not None
    db_match = not has_env or (db_hash == gold_db and user_hash == gold_user)
    env_checks = env_assertion_checks(task, world) if has_env else []
    acts = action_checks(task, messages)
    comms = communicate_checks(task, messages)
    breakdown, partial = _reward_breakdown(
        basis, crit, db_match, env_checks, acts, comms, nl_checks
    )
    reward = 1.0
    for v in breakdown.values():
        reward *= v
    missing = [c["info"] for c in comms if not c["met"]]
    return {
        **base,
        "reward": reward,
        "partial": partial,
        "reward_breakdown": breakdown,
        "db_check": {"db_match": db_match, "db_reward": 1.0 if db_match else 0.0},
        "env_assertions": env_checks,
        "action_checks": acts,
        "communicate_checks": comms,
        "nl_assertions": nl_checks,
        # agentload's own grade fields, as for the built-in domains
        "db_match": db_match,
        "outputs_ok": not missing,
        "missing_outputs": missing,
        "db_hash": db_hash,
        "gold_hash": gold_db,
        "user_db_hash": user_hash,
        "gold_user_hash": gold_user,
    }


def _reward_breakdown(
    basis: set[str],
    crit: Mapping[str, Any],
    db_match: bool,
    env_checks: list[dict[str, Any]],
    acts: list[dict[str, Any]],
    comms: list[dict[str, Any]],
    nl_checks: list[dict[str, Any]] | None,
) -> tuple[dict[str, float], bool]:
    """Each component of the task's reward basis, 1.0 or 0.0, in τ²'s order; and whether
    the reward is partial (natural-language assertions with no judge's verdicts)."""
    breakdown: dict[str, float] = {}
    if "DB" in basis:
        breakdown["DB"] = 1.0 if db_match else 0.0
    if "ENV_ASSERTION" in basis:
        breakdown["ENV_ASSERTION"] = 1.0 if all(c["met"] for c in env_checks) else 0.0
    if "ACTION" in basis:
        breakdown["ACTION"] = 1.0 if all(c["action_match"] for c in acts) else 0.0
    nl_assertions = crit.get("nl_assertions") or []
    partial = False
    if "NL_ASSERTION" in basis:
        if not nl_assertions:
            breakdown["NL_ASSERTION"] = 1.0
        elif nl_checks is None:
            partial = True  # not evaluated: the reward covers the other components only
        else:
            breakdown["NL_ASSERTION"] = 1.0 if all(c.get("met") for c in nl_checks) else 0.0
    if "COMMUNICATE" in basis:
        breakdown["COMMUNICATE"] = 1.0 if all(c["met"] for c in comms) else 0.0
    return breakdown, partial


def gold_messages(domain: Tau2Domain, task: Tau2Task) -> tuple[list[dict[str, Any]], World]:
    """The gold trajectory of a task, as an episode would record it: the greeting, the gold
    actions (agent's and user's) with their results from a fresh world, then an agent
    message that states every `communicate_info` string and the user's stop. Returns the
    messages and the world they leave."""

    world = domain.task_world(task)
    history = list((task.tau2.get("initial_state") or {}).get("message_history") or ())
    msgs: list[dict[str, Any]] = history or [
        {"role": "assistant", "content": GREETING, "tool_calls": None}
    ]
    crit = task.tau2.get("evaluation_criteria") or {}
    for i, a in enumerate(crit.get("actions") or ()):
        requestor = a.get("requestor", "assistant")
        call = {
            "id": f"gold_{i}",
            "name": a["name"],
            "arguments": dict(a.get("arguments") or {}),
            "requestor": requestor,
        }
        role = "user" if requestor == "user" else "assistant"
        msgs.append({"role": role, "content": None, "tool_calls": [call]})
        text, error = world.call(requestor, a["name"], call["arguments"])
        msgs.append(
            {
                "role": "tool",
                "id": call["id"],
                "content": text,
                "requestor": requestor,
                "error": error,
            }
        )
    infos = "; ".join(crit.get("communicate_info") or ())
    msgs.append({"role": "assistant", "content": f"Done. {infos}".strip(), "tool_calls": None})
    msgs.append({"role": "user", "content": f"Thanks. {STOP}", "tool_calls": None})
    return msgs, world


def check_tasks(domain: Tau2Domain) -> list[str]:
    """The gold trajectory of every task of the current split, graded: one line per task
    that does not score 1 (a task that needs the judge counts when the rest scores 1)."""
    problems = []
    for t in domain.tasks():
        assert isinstance(t, Tau2Task)
        msgs, world = gold_messages(domain, t)
        info = grade(domain, t, msgs, "user_stop", world=world)
        errors = sum(1 for m in msgs if m.get("role") == "tool" and m.get("error"))
        if info["reward"] != 1.0:
            failed = [k for k, v in info["reward_breakdown"].items() if v != 1.0]
            problems.append(
                f"{t.id}: the gold trajectory scores {info['reward']} "
                f"({', '.join(failed)} not met; {errors} gold action(s) failed)"
            )
    return problems


def grade_stored(trajectory: Mapping[str, Any], domain: Any) -> dict[str, Any]:
    """Re-grade a stored τ² trajectory (a trajectories.jsonl line of `domain`) from its own
    messages, on a world rebuilt from them; the judge's stored verdicts are reused (no model
    call)."""
    task_id = str(trajectory.get("task_id") or "")
    stored = trajectory.get("tau2")
    if not isinstance(stored, Mapping) or not isinstance(stored.get("messages"), list):
        raise ValueError(f"trajectory of {task_id or 'an unknown task'} holds no τ² messages")
    if not isinstance(domain, Tau2Domain):
        raise ValueError(f"{task_id} is not a τ² task")
    task = domain.get_task(task_id)
    verdicts = (stored.get("reward_info") or {}).get("nl_assertions")
    return grade(
        domain,
        task,
        stored["messages"],
        str(stored.get("termination_reason") or ""),
        nl_checks=verdicts if isinstance(verdicts, list) else None,
    )
