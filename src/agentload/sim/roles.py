"""Role-aware behaviours: the simulator plays a skilled agent and a cooperative customer.

Requests carrying ``X-Agentload-Role: agent`` (or ``user``) and ``X-Agentload-Task:
<domain>/<NNN>`` are answered from the task itself, so an episode run against the simulator
has the shapes of a real one: a static policy + tools prefix, 10-ish agent calls, short
replies, lookups before writes, confirmations, parallel reads and a closing stop token.

Both behaviours are stateless: every call re-derives where the episode stands from the
messages it receives (which of the planned tool calls were made, what the customer has said,
what the agent asked last). Every random choice comes from a generator seeded with
(simulator seed, ``X-Session-ID``, task), so all calls of one episode agree and a rerun gives
the same tool arguments, texts and number of calls.

The agent succeeds with probability ``agent_skill`` (behaviour option, default 0.8) per
episode; a failing agent makes one plausible mistake: a wrong argument in a write, a skipped
write, or a required output left out of its replies.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import TYPE_CHECKING, Any

from agentload.sim import roles_text as W
from agentload.sim.behaviour import (
    GenericBehaviour,
    RequestView,
    ResponsePlan,
    ToolCallPlan,
)
from agentload.sim.seeding import stable_rng
from agentload.sim.tau2_roles import agent_response, user_response

if TYPE_CHECKING:
    from agentload.domains.base import Action, Domain, Task
    from agentload.sim.settings import SimConfig

log = logging.getLogger("agentload.sim")

AGENT_ROLE = "agent"
USER_ROLE = "user"
DEFAULT_SKILL = 0.8
MISTAKES = ("wrong_argument", "skipped_write", "omitted_output")
# Asking the customer for the same thing more often than this, the agent goes on without it
# (a real user model may never give it).
MAX_ASKS = 3
MAX_USER_TURNS = 30
PREFACE_RATE = 0.2


def agent_skill(options: Mapping[str, Any]) -> float:
    """The ``agent_skill`` behaviour option (CLI values arrive as strings), clamped to [0, 1]."""
    raw = options.get("agent_skill", DEFAULT_SKILL)
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ValueError(f"behaviour option agent_skill must be a number, got {raw!r}") from None
    return min(1.0, max(0.0, value))


# --- tasks ------------------------------------------------------------------------------------


_warned: set[str] = set()


def _lookup(task_id: str | None) -> tuple[Domain, Task] | None:
    if not task_id:
        return None
    # lazy: start-up time (the domains load with the first request that needs them)
    from agentload.domains import get_domain, get_task

    try:
        task = get_task(task_id)
    except (KeyError, LookupError):
        if task_id not in _warned:  # once per id: a misconfigured run would flood the log
            _warned.add(task_id)
            log.warning("unknown task %r in X-Agentload-Task; answering generically", task_id)
        return None
    return get_domain(task.domain), task


def _canon(arguments: Any) -> str:
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False)


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _leaves(v)]
    if isinstance(value, list):
        return [x for v in value for x in _leaves(v)]
    return [value]


def _text_leaves(arguments: dict[str, Any]) -> list[str]:
    # Short strings ("OR", "") say nothing about who knows them.
    return [v for v in _leaves(arguments) if isinstance(v, str) and len(v) >= 3]


# --- the episode plan --------------------------------------------------------------------------


@dataclass(frozen=True)
class EpisodePlan:
    """What the agent intends in one episode: the gold actions, maybe with one mistake."""

    task: Task
    domain: Domain
    success: bool
    mistake: str | None
    actions: tuple[Action, ...]
    omitted: str | None  # the required output a forgetful agent never says
    ask_together: bool  # ask for all missing facts at once (then look them up in parallel)
    verify: frozenset[int]  # indexes of writes followed by a re-read of what they changed
    outputs: tuple[str, ...]
    checkin: bool  # after the first lookups, asks the customer to spell out the request
    canon: tuple[str, ...]  # the actions' arguments as canonical JSON, to match calls against
    clarify: bool  # with nothing to write, checks its understanding before answering

    def is_write(self, name: str) -> bool:
        tool = self.domain.tool(name)
        return bool(tool and tool.writes)


_ISO_DATE = r"\d{4}-\d\d-\d\d"


def _wrong_argument(action: Action, domain: Domain, rng: random.Random) -> Action:
    """The action with one argument changed the way a careless agent would change it."""
    args = copy.deepcopy(action.arguments)
    tool = domain.tool(action.name)
    props = (tool.parameters.get("properties") or {}) if tool else {}
    slots = _argument_slots(args, props)
    if not slots:
        return action
    best = min(s[0] for s in slots)
    _, path, value = rng.choice([s for s in slots if s[0] == best])
    target: Any = args
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = _careless_value(value)
    return type(action)(action.name, args)


def _argument_slots(args: Any, props: dict[str, Any]) -> list[tuple[int, list[Any], Any]]:
    """Every scalar in `args` a careless agent could get wrong, as (preference, path, value):
    numbers first, then booleans and dates, then free text (enum values are never wrong)."""
    slots: list[tuple[int, list[Any], Any]] = []

    def walk(value: Any, path: list[Any]) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, [*path, k])
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, [*path, i])
        elif isinstance(value, bool):
            slots.append((1, path, value))
        elif isinstance(value, int | float):
            slots.append((0, path, value))
        elif isinstance(value, str) and value:
            enum = (props.get(path[0]) or {}).get("enum") if path else None
            if not enum:
                slots.append((1 if re.fullmatch(_ISO_DATE, value) else 2, path, value))

    walk(args, [])
    return slots


def _careless_value(value: Any) -> Any:
    """`value` slightly wrong: flipped, off by one, a day late, or mistyped."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if re.fullmatch(_ISO_DATE, value):
        return (date.fromisoformat(value) + timedelta(days=1)).isoformat()
    # a mistyped identifier: the last character slips to its neighbour
    last = value[-1]
    if last.isdigit():
        repl = str((int(last) + 1) % 10)
    elif last.isalpha():
        repl = "a" if last.lower() == "z" else chr(ord(last) + 1)
    else:
        repl = "x"
    return value[:-1] + repl


@functools.lru_cache(maxsize=4096)
def episode_plan(task_id: str, session_id: str, sim_seed: int, skill: float) -> EpisodePlan:
    """The agent's plan for one episode (cached; a pure function of its arguments)."""
    found = _lookup(task_id)
    if found is None:
        raise KeyError(task_id)
    domain, task = found
    rng = stable_rng("agent-plan", sim_seed, session_id, task_id)
    success = rng.random() < skill
    actions = list(task.gold_actions)
    writes = [i for i, a in enumerate(actions) if (t := domain.tool(a.name)) and t.writes]
    choices = []
    if writes:
        choices += ["wrong_argument", "skipped_write"]
    if task.required_outputs:
        choices.append("omitted_output")
    mistake = None if success or not choices else rng.choice(choices)
    omitted = None
    if mistake == "wrong_argument":
        i = rng.choice(writes)
        actions[i] = _wrong_argument(actions[i], domain, rng)
    elif mistake == "skipped_write":
        del actions[rng.choice(writes)]
    elif mistake == "omitted_output":
        omitted = rng.choice(task.required_outputs)
    verify = frozenset(
        i
        for i, a in enumerate(actions)
        if (t := domain.tool(a.name)) and t.writes and rng.random() < 0.9
    )
    outputs = tuple(o for o in task.required_outputs if o != omitted)
    return EpisodePlan(
        task=task,
        domain=domain,
        success=success,
        mistake=mistake,
        actions=tuple(actions),
        omitted=omitted,
        ask_together=rng.random() < 0.3,
        verify=verify,
        outputs=outputs,
        checkin=rng.random() < 0.7,
        clarify=rng.random() < 0.8,
        canon=tuple(_canon(a.arguments) for a in actions),
    )


# --- reading the conversation ------------------------------------------------------------------


def text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("text")
        )
    return str(content)


@dataclass
class Call:
    name: str
    arguments: Any
    canon: str
    call_id: str
    ok: bool = True


@dataclass
class AgentView:
    """The agent-side conversation, digested."""

    user_texts: list[str] = field(default_factory=list)
    tool_texts: list[str] = field(default_factory=list)
    assistant_texts: list[str] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    last_role: str = ""
    last_user: str = ""
    prev_assistant_text: str = ""  # the assistant's text right before the last user message
    trailing_calls: list[Call] = field(default_factory=list)  # answered by the last tool msgs
    final_given: bool = False  # the agent has answered since its last tool call
    n_assistant: int = 0

    @functools.cached_property
    def said(self) -> str:
        return W.norm("\n".join(self.user_texts))

    @functools.cached_property
    def tool_seen(self) -> str:
        # Tool results are JSON that quotes values verbatim: lower case is enough (and cheap
        # on the long texts).
        return "\n".join(self.tool_texts).lower()


def read_agent_view(messages: Sequence[Mapping[str, Any]]) -> AgentView:
    view = AgentView()
    by_id: dict[str, Call] = {}
    last_assistant_calls: list[Call] = []
    last_text = ""
    for msg in messages:
        role = msg.get("role")
        text = text_of(msg.get("content"))
        if role == "user":
            view.user_texts.append(text)
            view.last_user = text
            view.prev_assistant_text = last_text
        elif role == "tool":
            view.tool_texts.append(text)
            call = by_id.get(str(msg.get("tool_call_id")))
            if call is not None and text.lstrip().startswith("Error"):
                call.ok = False
        elif role == "assistant":
            view.n_assistant += 1
            tool_calls = msg.get("tool_calls") or []
            last_text = "" if tool_calls else text
            last_assistant_calls = []
            for tc in tool_calls:
                fn = tc.get("function") or {}
                raw = fn.get("arguments")
                try:
                    args = json.loads(raw) if isinstance(raw, str) else (raw or {})
                except ValueError:
                    args = raw
                call = Call(str(fn.get("name")), args, _canon(args), str(tc.get("id")))
                view.calls.append(call)
                last_assistant_calls.append(call)
                by_id[call.call_id] = call
            if tool_calls:
                view.final_given = False
            elif text:
                view.assistant_texts.append(text)
                # Answers (final or follow-up) end by offering more help; questions do not.
                view.final_given = view.final_given or W.ANYTHING_ELSE in text
        if role in ("user", "assistant", "tool"):
            view.last_role = str(role)
    if view.last_role == "tool":
        view.trailing_calls = last_assistant_calls
    if view.last_role != "user":
        view.prev_assistant_text = ""
    return view


# --- the agent ---------------------------------------------------------------------------------


@dataclass
class Step:
    texts: list[str] = field(default_factory=list)  # core sentences of a text reply
    calls: list[Action] = field(default_factory=list)
    kind: str = "text"  # ask | details | clarify | confirm | final | followup | closing | tools
    lead: list[str] = field(default_factory=list)
    tail: list[str] = field(default_factory=list)


class AgentPlayer:
    """Decides the next step of the skilled agent from the plan and the conversation."""

    def __init__(self, plan: EpisodePlan, view: AgentView, rng: random.Random) -> None:
        self.plan = plan
        self.view = view
        self.rng = rng
        self.known = plan.task.scenario.known_info

    # -- what the agent knows --

    def pending(self) -> int:
        """Index of the first planned action not attempted yet (in order)."""
        pos = 0
        calls = self.view.calls
        for i, (action, want) in enumerate(zip(self.plan.actions, self.plan.canon, strict=True)):
            for j in range(pos, len(calls)):
                if calls[j].name == action.name and calls[j].canon == want:
                    pos = j + 1
                    break
            else:
                return i
        return len(self.plan.actions)

    def asked(self, key: str) -> int:
        lab = W.label(key)
        return sum(1 for t in self.view.assistant_texts if lab in t.lower())

    def missing_keys(self, action: Action) -> list[str]:
        """Facts only the customer knows that this action needs and they have not said."""
        said = self.view.said
        out: list[str] = []
        for leaf in _text_leaves(action.arguments):
            needle = leaf.lower()
            if W.norm(leaf) in said:
                continue
            for key, value in self.known.items():
                if needle in value.lower():
                    if key not in out and self.asked(key) < MAX_ASKS:
                        out.append(key)
                    break
        return out

    def unresolved(self, action: Action) -> bool:
        """Some argument neither the customer nor a tool result has mentioned yet."""
        said, tools = self.view.said, self.view.tool_seen
        known = " ".join(self.known.values()).lower()
        return any(
            W.norm(leaf) not in said and leaf.lower() not in tools and leaf.lower() not in known
            for leaf in _text_leaves(action.arguments)
        )

    def details_asked(self) -> bool:
        return any(W.DETAILS_ASK in t for t in self.view.assistant_texts)

    def extra_keys(self) -> list[str]:
        """Known facts no action argument carries (a reason, a preference): asked before the
        first write so the conversation covers them, as a careful agent would."""
        linked = set()
        for action in self.plan.task.gold_actions:
            for leaf in _text_leaves(action.arguments):
                for key, value in self.known.items():
                    if leaf.lower() in value.lower():
                        linked.add(key)
        return [k for k in self.known if k not in linked and self.asked(k) == 0]

    # -- decisions --

    def decide(self) -> Step:
        plan, view = self.plan, self.view
        # A write just went through: re-read what it changed.
        if view.last_role == "tool" and view.trailing_calls:
            check = self.verification()
            if check is not None:
                return Step(calls=[check], kind="tools")
        p = self.pending()
        if (
            plan.checkin
            and view.last_role == "tool"
            and not self.details_asked()
            and not any(plan.is_write(c.name) for c in view.trailing_calls)
        ):
            return Step(texts=[W.CHECKIN, W.DETAILS_ASK], kind="details")
        if p < len(plan.actions):
            return self.next_action(p)
        extras = self.extra_keys()
        if extras and not any(plan.is_write(a.name) for a in plan.actions):
            # Nothing to write: the remaining facts are what the answer depends on.
            return self.ask(extras if plan.ask_together else extras[:2], view.n_assistant == 0)
        if (
            plan.clarify
            and not view.final_given
            and not any(plan.is_write(a.name) for a in plan.actions)
            and not any(W.CLARIFY in t for t in view.assistant_texts)
        ):
            return Step(texts=[W.CLARIFY], kind="clarify", tail=[W.CLARIFY_QUESTION])
        if view.last_role == "user" and view.final_given:
            if "?" in view.last_user:
                return self.followup()
            return Step(texts=[W.CLOSING], kind="closing")
        return self.final()

    def verification(self) -> Action | None:
        plan = self.plan
        for call in reversed(self.view.trailing_calls):
            if not call.ok or not plan.is_write(call.name) or not isinstance(call.arguments, dict):
                continue
            idx = next(
                (
                    i
                    for i, a in enumerate(plan.actions)
                    if a.name == call.name and _canon(a.arguments) == call.canon
                ),
                None,
            )
            if idx is None or idx not in plan.verify:
                return None
            for tool in plan.domain.tools:
                required = tool.parameters.get("required") or []
                if (
                    not tool.writes
                    and tool.name.startswith("get_")
                    and required
                    and all(isinstance(call.arguments.get(r), str) for r in required)
                ):
                    return type(plan.actions[0])(
                        tool.name, {r: call.arguments[r] for r in required}
                    )
            return None
        return None

    def ask(self, keys: list[str], first: bool) -> Step:
        phrases = [W.what(k) for k in keys]
        template = self.rng.choice(W.ASK_TEMPLATES)
        lead = [self.rng.choice(W.GREETINGS)] if first else []
        return Step(texts=[template.format(what=W.join_words(phrases))], kind="ask", lead=lead)

    def next_action(self, p: int) -> Step:
        """The step towards gold action `p`: ask for what is missing, then call it (a read,
        with the reads after it that are ready) or confirm it (a write)."""
        plan, view = self.plan, self.view
        action = plan.actions[p]
        first = view.n_assistant == 0
        is_write = plan.is_write(action.name)
        missing = self.missing_keys(action) if is_write else self.missing_for_reads(p)
        if missing:
            return self.ask(missing if plan.ask_together else missing[:1], first)
        if self.unresolved(action) and not self.details_asked():
            lead = [self.rng.choice(W.GREETINGS)] if first else []
            return Step(texts=[W.DETAILS_ASK], kind="details", lead=lead)
        if not is_write:
            return Step(calls=self.read_batch(p), kind="tools")
        return self.write_step(p, first)

    def missing_for_reads(self, p: int) -> list[str]:
        """What read `p` misses; asking all at once, also what the reads after it miss."""
        plan = self.plan
        missing = self.missing_keys(plan.actions[p])
        if plan.ask_together:
            for nxt in plan.actions[p + 1 :]:
                if plan.is_write(nxt.name):
                    break
                missing += [k for k in self.missing_keys(nxt) if k not in missing]
        return missing

    def read_batch(self, p: int) -> list[Action]:
        """Read `p` and the reads after it that need nothing more from the customer."""
        plan = self.plan
        batch = [plan.actions[p]]
        for nxt in plan.actions[p + 1 :]:
            if plan.is_write(nxt.name) or self.missing_keys(nxt) or self.unresolved(nxt):
                break
            batch.append(nxt)
        return batch

    def write_step(self, p: int, first: bool) -> Step:
        """Write `p`, with all its facts known: the extra facts before the first write, then
        a summary to confirm, then the call once the customer says yes."""
        plan, view = self.plan, self.view
        action = plan.actions[p]
        first_write = next(i for i, a in enumerate(plan.actions) if plan.is_write(a.name))
        if p == first_write:
            extras = self.extra_keys()
            if extras:
                keys = extras if plan.ask_together else extras[:2]
                return self.ask(keys, first)
        if view.last_role == "user" and W.is_confirm_request(view.prev_assistant_text):
            if W.is_yes(view.last_user):
                return Step(calls=[action], kind="tools")
            if W.is_no(view.last_user):
                return Step(texts=[W.DECLINED], kind="declined", tail=[W.ANYTHING_ELSE])
        summary = W.describe_action(action.name, action.arguments, full=True)
        return Step(
            texts=[f"Here is what I am about to do: {summary}."],
            kind="confirm",
            lead=["I have everything I need for the next step."],
            tail=[self.rng.choice(W.CONFIRM_QUESTIONS)],
        )

    def output_sentences(self) -> list[str]:
        outs = [W.say_output(o) for o in self.plan.outputs]
        if not outs:
            return []
        return [f"For your records, the key details are: {W.join_words(outs)}."]

    def final(self) -> Step:
        plan = self.plan
        task = plan.task
        texts: list[str] = []
        if task.refusal_reason:
            texts.append(
                f"I have reviewed your request, but I am unable to do this: {task.refusal_reason}."
            )
            texts.append("This is a firm rule of our policy, and I cannot make an exception.")
        else:
            done = self.done_sentence()
            texts.append(f"All done: {done}" if done else "I have looked into this for you.")
        texts += self.output_sentences()
        return Step(texts=texts, kind="final", tail=[W.ANYTHING_ELSE])

    def done_sentence(self) -> str:
        done = [
            W.describe_action(c.name, c.arguments, full=False)
            for c in self.view.calls
            if c.ok and self.plan.is_write(c.name) and isinstance(c.arguments, dict)
        ]
        return f"I have completed {W.join_words(done)}." if done else ""

    def followup(self) -> Step:
        reason = self.plan.task.refusal_reason
        first = (
            f"I understand, but I'm afraid I really cannot: {reason}."
            if reason
            else self.rng.choice(W.FOLLOWUP_ANSWERS)
        )
        texts = [first, *filter(None, [self.done_sentence()]), *self.output_sentences()]
        return Step(texts=texts, kind="followup", tail=[W.ANYTHING_ELSE])


def _target_tokens(rng: random.Random, kind: str) -> int:
    if kind == "closing":
        return rng.randint(20, 40)
    return rng.randint(60, 150)


def _reasoning(step: Step, plan: EpisodePlan, rng: random.Random) -> str:
    if step.calls:
        what = "call " + ", ".join(a.name for a in step.calls)
    else:
        what = {
            "ask": "ask the customer for what I still need",
            "details": "ask the customer to describe the request",
            "confirm": "summarise the change and ask for explicit confirmation",
            "final": "report the outcome to the customer",
        }.get(step.kind, "reply briefly")
    core = [
        f"The customer's request falls under the {plan.domain.name} policy.",
        f"Next I should {what}.",
    ]
    extra = list(W.REASONING_FILLER)
    rng.shuffle(extra)
    return " ".join(core + extra[: rng.randint(1, 3)])


class SkilledAgent:
    """``X-Agentload-Role: agent``: follows the task's gold actions through the conversation."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.generic = GenericBehaviour(config)

    def respond(self, request: RequestView) -> ResponsePlan:
        if (request.task or "").startswith("tau2-"):
            tau2 = agent_response(request, self.config.seed, agent_skill(request.options))
            return tau2 if tau2 is not None else self.generic.respond(request)
        try:
            plan = episode_plan(
                request.task or "",
                request.episode_key,
                self.config.seed,
                agent_skill(request.options),
            )
        except KeyError:
            return self.generic.respond(request)
        mode = text_mode(request)
        messages = from_text_actions(request.messages) if mode else request.messages
        # MCP clients often offer a server's tools under prefixed names (`airline__get_x`,
        # `mcp__airline__get_x`): the plan speaks of the domain's names.
        offered = {_bare(name): name for t in request.tools_allowed() if (name := _tool_name(t))}
        if any(bare != name for bare, name in offered.items()):
            messages = _bare_calls(messages)
        view = read_agent_view(messages)
        rng = stable_rng(
            "agent-call",
            self.config.seed,
            request.episode_key,
            plan.task.id,
            len(request.messages),
            view.n_assistant,
        )
        step = AgentPlayer(plan, view, rng).decide()
        out = ResponsePlan()
        if request.thinking:
            out.reasoning = _reasoning(step, plan, rng)
        if mode:
            return self._text_action(step, plan, rng, mode, out)
        calls = [a for a in step.calls if a.name in offered]
        if step.calls and calls:
            if not request.parallel_tool_calls:
                calls = calls[:1]
            out.tool_calls = [
                ToolCallPlan(offered[a.name], json.dumps(a.arguments, ensure_ascii=False))
                for a in calls
            ]
            if rng.random() < PREFACE_RATE:  # models often say a word before calling tools
                writes = any(plan.is_write(a.name) for a in calls)
                out.content = rng.choice(W.WRITE_PREFACES if writes else W.READ_PREFACES)
            return out
        if step.calls:  # the tool is not offered on this request: say so instead
            step = Step(texts=["Let me check that for you."], kind="ask")
        out.content = self._text(step, plan, rng)
        return out

    @staticmethod
    def _text(step: Step, plan: EpisodePlan, rng: random.Random) -> str:
        return W.padded(
            step.texts,
            rng,
            _target_tokens(rng, step.kind),
            lead=step.lead,
            tail=step.tail,
            avoid=plan.omitted,
        )

    def _text_action(
        self, step: Step, plan: EpisodePlan, rng: random.Random, mode: str, out: ResponsePlan
    ) -> ResponsePlan:
        """One action in the react / act text format (no parallel calls there)."""
        # lazy: start-up time (the domains load with the first request that needs them)
        from agentload.domains.text_actions import RESPOND, format_action

        if step.calls:
            action = format_action(step.calls[0].name, step.calls[0].arguments)
        else:
            action = format_action(RESPOND, {"content": self._text(step, plan, rng)})
        if mode == "react":
            thought = _reasoning(step, plan, rng)
            out.content = f"Thought: {thought}\nAction: {action}"
        else:
            out.content = f"Action: {action}"
        return out


_ACTION_FORMAT_RE = re.compile(r'^Action: \{"name"', re.MULTILINE)


def text_mode(request: RequestView) -> str | None:
    """``"react"`` or ``"act"`` when the agent is told to write actions as text, else None."""
    if request.tools or not request.messages:
        return None
    first = request.messages[0]
    system = text_of(first.get("content")) if first.get("role") == "system" else ""
    if not _ACTION_FORMAT_RE.search(system):
        return None
    return "react" if re.search(r"^Thought: ", system, re.MULTILINE) else "act"


def from_text_actions(messages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """A text-action conversation in the native tool-calling shape: actions become tool
    calls, ``Observation:`` messages tool results, ``respond`` actions plain replies."""
    # lazy: start-up time (the domains load with the first request that needs them)
    from agentload.domains.text_actions import ActionParseError, parse_action

    out: list[Mapping[str, Any]] = []
    open_ids: list[str] = []
    for msg in messages:
        role = msg.get("role")
        text = text_of(msg.get("content"))
        if role == "assistant":
            try:
                act = parse_action(text)
            except ActionParseError:
                out.append({"role": "assistant", "content": text})
                continue
            if act.is_respond:
                out.append({"role": "assistant", "content": act.respond_text()})
                continue
            cid = f"action_{len(out)}"
            open_ids = [cid]
            out.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": cid,
                            "type": "function",
                            "function": {"name": act.name, "arguments": json.dumps(act.arguments)},
                        }
                    ],
                }
            )
        elif role == "user" and text.startswith("Observation:") and open_ids:
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": open_ids.pop(),
                    "content": text[len("Observation:") :].strip(),
                }
            )
        else:
            out.append(msg)
    return out


def _bare(name: str) -> str:
    """A tool name without the server prefix an MCP client may add (`server__tool`)."""
    return name.rpartition("__")[2] or name


def _bare_calls(messages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """`messages` with the prefixes taken off the names of the tool calls they hold."""
    out: list[Mapping[str, Any]] = []
    for msg in messages:
        calls = msg.get("tool_calls") if msg.get("role") == "assistant" else None
        if calls:
            bare = []
            for tc in calls:
                fn = tc.get("function") or {}
                bare.append({**tc, "function": {**fn, "name": _bare(str(fn.get("name")))}})
            msg = {**msg, "tool_calls": bare}
        out.append(msg)
    return out


def _tool_name(tool: Mapping[str, Any]) -> str:
    fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
    return str((fn or {}).get("name", ""))


# --- the user ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class UserProfile:
    followups: int  # questions asked after the agent has answered, before stopping
    one_at_a_time: bool  # answers one fact per message even when asked for several
    pushes_back: bool  # told no, asks once whether nothing can be done


@functools.lru_cache(maxsize=4096)
def user_profile(task_id: str, session_id: str, sim_seed: int) -> UserProfile:
    rng = stable_rng("user-profile", sim_seed, session_id, task_id)
    followups = rng.choices((0, 1, 2), weights=(0.1, 0.45, 0.45))[0]
    return UserProfile(
        followups=followups, one_at_a_time=rng.random() < 0.4, pushes_back=rng.random() < 0.7
    )


@functools.lru_cache(maxsize=256)
def _label_pattern(key: str) -> re.Pattern[str]:
    """The field's name as an agent may word it: "reservation id", "reservation number",
    "reservation code"; "zip" or "zip code"; "email" or "e-mail"."""
    words = [re.escape(w) for w in W.label(key).split()]
    if words and words[-1] in ("id", "ids"):
        plural = words[-1] == "ids"
        words[-1] = "(?:ids?|numbers?|codes?)" if plural else "(?:id|number|code)"
    text = r"\s+".join(words).replace("email", "e-?mail")
    return re.compile(rf"\b{text}\b")


def requested_keys(text: str, known: Mapping[str, str]) -> list[str]:
    """The known-info keys an agent message asks for, longest label first wins."""
    low = text.lower()
    hits: list[str] = []
    spans: list[tuple[int, int]] = []
    for key in sorted(known, key=lambda k: -len(W.label(k))):
        for m in re.finditer(_label_pattern(key), low):
            if not any(a <= m.start() < b for a, b in spans):
                hits.append(key)
                spans.append((m.start(), m.end()))
                break
    order = list(known)
    return sorted(set(hits), key=order.index)


class CooperativeUser:
    """``X-Agentload-Role: user``: the customer of the task named by ``X-Agentload-Task``.

    It sees the conversation from its side. With the roles flipped (the agent's words as
    ``user``, its own as ``assistant``) or not, its own turns are the role opposite to the
    last message's.
    """

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.generic = GenericBehaviour(config)

    def respond(self, request: RequestView) -> ResponsePlan:
        if (request.task or "").startswith("tau2-"):
            tau2 = user_response(request)
            return tau2 if tau2 is not None else self.generic.respond(request)
        found = _lookup(request.task)
        if found is None:
            return self.generic.respond(request)
        _, task = found
        return ResponsePlan(content=self.reply(task, request.messages, request.episode_key))

    def reply(self, task: Task, messages: Sequence[Mapping[str, Any]], session_id: str) -> str:
        scenario = task.scenario
        turns = [m for m in messages if m.get("role") in ("user", "assistant")]
        if not turns:
            return scenario.opening
        last = turns[-1]
        mine = "assistant" if last.get("role") == "user" else "user"
        own = [text_of(m.get("content")) for m in turns if m.get("role") == mine]
        if not own:
            return scenario.opening
        if len(own) >= MAX_USER_TURNS:
            return W.STOP
        profile = user_profile(task.id, session_id, self.config.seed)
        rng = stable_rng("user-call", self.config.seed, session_id, task.id, len(own))
        said = text_of(last.get("content"))
        asking = bool(W.INFO_REQUEST_RE.search(said) or W.DETAILS_REQUEST_RE.search(said))
        keys = requested_keys(said, scenario.known_info) if asking else []
        # "Can you confirm your user id?" asks for a fact; "shall I proceed?" for a yes.
        if W.is_confirm_request(said) and not (keys and not W.PROCEED_RE.search(said)):
            return rng.choice(W.YES_REPLIES)
        if asking:
            if keys:
                if profile.one_at_a_time:
                    keys = keys[:1]
                parts = [
                    f"my {W.label(k)} is {W.first_person(scenario.known_info[k])}" for k in keys
                ]
                return "Sure, " + W.join_words(parts) + "."
            if W.DETAILS_REQUEST_RE.search(said):
                return W.restated(scenario.instructions)
            return W.NO_INFO
        if task.refusal_reason and profile.pushes_back and W.PUSHBACK not in own:
            return W.PUSHBACK
        asked = sum(1 for t in own if t in W.FOLLOWUPS)
        if asked < profile.followups:
            return W.FOLLOWUPS[asked % len(W.FOLLOWUPS)]
        return W.STOP
