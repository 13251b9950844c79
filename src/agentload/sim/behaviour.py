"""What a simulated response says: the behaviour hook.

A behaviour turns a request into a :class:`ResponsePlan` (content, reasoning, tool calls); the
engine then decides *when* each of its tokens leaves. The server picks the behaviour whose
role matches the request's ``X-Agentload-Role`` header and falls back to the generic one, so a
module can add role-aware behaviours without touching the server::

    from agentload.sim.behaviour import ResponsePlan, register_behaviour

    class Agent:
        def __init__(self, config): self.skill = config.behaviour_options.get("agent_skill", 1)
        def respond(self, req): return ResponsePlan(content="Done.")

    register_behaviour("agent", Agent)

or, from an outside package, an entry point in the `agentload.sim_behaviours` group naming the
factory (loaded on first use).
"""

from __future__ import annotations

import json
import logging
import math
import random
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from agentload.plugins import BEHAVIOURS
from agentload.sim.tokenizer import split_pieces
from agentload.wire import EPISODE_HEADER, ROLE_HEADER, SESSION_HEADER, TASK_HEADER

if TYPE_CHECKING:
    from agentload.sim.settings import SimConfig

log = logging.getLogger("agentload.sim")

GENERIC_ROLE = "generic"

OPTION_RANGES: dict[str, tuple[float, float]] = {"agent_skill": (0.0, 1.0)}
"""The documented numeric behaviour options and their ranges (inclusive)."""


class BehaviourOptionError(ValueError):
    """A documented behaviour option out of its range (refused at start, not clamped)."""


def check_behaviour_options(options: Mapping[str, Any]) -> None:
    """Raise BehaviourOptionError naming the first documented option out of its range."""
    for name, (lo, hi) in OPTION_RANGES.items():
        if name not in options:
            continue
        raw = options[name]
        try:
            ok = not isinstance(raw, bool) and lo <= float(raw) <= hi
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise BehaviourOptionError(
                f"--behaviour-option {name}={raw}: expected a number from {lo:g} to {hi:g}"
            )


@dataclass
class ToolCallPlan:
    name: str
    arguments: str
    """The arguments as a JSON string, exactly as they will be streamed."""


@dataclass
class ResponsePlan:
    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCallPlan] = field(default_factory=list)


@dataclass
class RequestView:
    """A parsed request as a behaviour sees it."""

    body: dict[str, Any]
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    tool_choice: Any
    """``"none"``, ``"auto"``, ``"required"`` or ``{"type": "function", "function": {...}}``."""
    max_tokens: int
    rng: random.Random
    headers: Mapping[str, str]
    settings: SimConfig
    thinking: bool = False
    prompt_tokens: int = 0
    endpoint: str = "chat"
    parallel_tool_calls: bool = True

    @property
    def role(self) -> str | None:
        return self.headers.get(ROLE_HEADER)

    @property
    def task(self) -> str | None:
        return self.headers.get(TASK_HEADER)

    @property
    def session_id(self) -> str | None:
        return self.headers.get(SESSION_HEADER)

    @property
    def episode_key(self) -> str:
        """What the scripted roles seed an episode's choices with: the episode's own seed
        when the client sends it (the same in every run with the run's seed), else the
        session id."""
        seed = self.headers.get(EPISODE_HEADER)
        return f"seed:{seed}" if seed else (self.session_id or "")

    @property
    def options(self) -> dict[str, Any]:
        return self.settings.behaviour_options

    def tools_allowed(self) -> list[dict[str, Any]]:
        """The tools the request's ``tool_choice`` lets the model call (maybe none)."""
        if not self.tools or self.tool_choice == "none":
            return []
        if isinstance(self.tool_choice, dict):
            wanted = (self.tool_choice.get("function") or {}).get("name")
            return [t for t in self.tools if _tool_name(t) == wanted]
        return list(self.tools)

    def must_call_tool(self) -> bool:
        return bool(self.tools) and (
            self.tool_choice == "required" or isinstance(self.tool_choice, dict)
        )


class Behaviour(Protocol):
    def respond(self, request: RequestView) -> ResponsePlan: ...


BehaviourFactory = Callable[["SimConfig"], Behaviour]


def register_behaviour(role: str, factory: BehaviourFactory) -> None:
    """Use ``factory(config)`` for requests whose ``X-Agentload-Role`` header is ``role``."""
    BEHAVIOURS.register(role, factory)


def unregister_behaviour(role: str) -> None:
    BEHAVIOURS.unregister(role)


def behaviour_factory(role: str | None) -> BehaviourFactory:
    """The factory registered for ``role``, or the generic behaviour's."""
    if role:
        try:
            return BEHAVIOURS.get(role)
        except KeyError:
            pass
    return BEHAVIOURS.get(GENERIC_ROLE)


class BehaviourSet:
    """One server's behaviour instances, created on first use with the server's config."""

    def __init__(self, config: SimConfig) -> None:
        check_behaviour_options(config.behaviour_options)
        self.config = config
        self._instances: dict[tuple[str, int], Behaviour] = {}

    def for_role(self, role: str | None) -> Behaviour:
        factory = behaviour_factory(role)
        key = (role or GENERIC_ROLE, id(factory))
        inst = self._instances.get(key)
        if inst is None:
            inst = factory(self.config)
            self._instances[key] = inst
        return inst


# --- the generic behaviour -----------------------------------------------------------------

_WORD_TEXT = (
    "the of and to in is that for it as was with be by on not he this are or his from at "
    "which but have an they you were her she there been one all we their has would when if "
    "so no will can more about time only new some could these two may first then do any "
    "like my now over such our man me even most made after also did many before must "
    "through back years where much your way well down should because each just those people "
    "how too little state good very make world still own see men work long get here between "
    "both life being under never day same another know while last might us great old year "
    "off come since against go came right used take three booking flight order account "
    "refund ticket customer policy reservation payment baggage seat upgrade cancel change "
    "confirm details number please check"
)
_WORDS = _WORD_TEXT.split()


def lorem_text(n_tokens: int, rng: random.Random) -> str:
    """English-looking text of about ``n_tokens`` approximate tokens."""
    if n_tokens <= 0:
        return ""
    words: list[str] = []
    count = 0
    sentence_len = 0
    while count < n_tokens:
        word = rng.choice(_WORDS)
        if sentence_len == 0:
            word = word.capitalize()
        sentence_len += 1
        token = (" " if words else "") + word
        if sentence_len >= rng.randint(6, 16):
            token += "."
            sentence_len = 0
        count += len(split_pieces(token))
        words.append(token)
    return "".join(words)


def lognormal_tokens(mean: float, sigma: float, rng: random.Random, cap: int) -> int:
    """A lognormal draw with the given mean (not median), at least 1, at most ``cap``."""
    mu = math.log(mean) - sigma * sigma / 2
    value = round(rng.lognormvariate(mu, sigma)) if sigma > 0 else round(mean)
    return max(1, min(cap, value))


def _tool_name(tool: Mapping[str, Any]) -> str:
    fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
    return str((fn or {}).get("name", ""))


def _tool_params(tool: Mapping[str, Any]) -> dict[str, Any]:
    fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
    params = (fn or {}).get("parameters")
    return params if isinstance(params, dict) else {"type": "object", "properties": {}}


def example_from_schema(schema: Any, rng: random.Random, depth: int = 0) -> Any:
    """A value valid against a (common subset of) JSON Schema."""
    if not isinstance(schema, dict):
        return None
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return rng.choice(schema["enum"])
    if schema.get("anyOf") or schema.get("oneOf") or schema.get("allOf"):
        return example_from_schema(_one_subschema(schema, rng), rng, depth + 1)
    typ = _schema_type(schema, rng)
    if typ == "object":
        return _example_object(schema, rng, depth)
    if typ == "array":
        return _example_array(schema, rng, depth)
    if typ in ("integer", "number"):
        return _example_number(schema, rng, integer=typ == "integer")
    if typ == "boolean":
        return rng.random() < 0.5
    if typ == "null":
        return None
    return _example_string(schema, rng)


def _one_subschema(schema: dict[str, Any], rng: random.Random) -> Any:
    """The schema to follow for an anyOf / oneOf (one non-null option) or allOf (merged)."""
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            options = [s for s in schema[key] if isinstance(s, dict) and s.get("type") != "null"]
            return rng.choice(options or schema[key])
    merged: dict[str, Any] = {}
    for sub in schema["allOf"]:
        if isinstance(sub, dict):
            merged.update(sub)
    return merged


def _schema_type(schema: dict[str, Any], rng: random.Random) -> Any:
    """The type to produce: one non-null type of a list, else inferred when not given."""
    typ = schema.get("type")
    if isinstance(typ, list):
        non_null = [t for t in typ if t != "null"]
        typ = rng.choice(non_null) if non_null else "null"
    if typ is None:
        typ = "object" if "properties" in schema else "string"
    return typ


def _example_object(schema: dict[str, Any], rng: random.Random, depth: int) -> dict[str, Any]:
    """Every required property and, fewer than three levels down, optional ones by coin toss."""
    props = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    out: dict[str, Any] = {}
    for name, sub in props.items():
        if name in required or (depth < 3 and rng.random() < 0.5):
            out[name] = example_from_schema(sub, rng, depth + 1)
    return out


def _example_array(schema: dict[str, Any], rng: random.Random, depth: int) -> list[Any]:
    lo = int(schema.get("minItems", 1))
    hi = max(lo, min(int(schema.get("maxItems", lo + 2)), lo + 2))
    return [
        example_from_schema(schema.get("items", {}), rng, depth + 1)
        for _ in range(rng.randint(lo, hi))
    ]


def _example_string(schema: dict[str, Any], rng: random.Random) -> str:
    """A date, time or email for those formats; else words cut to a length in range."""
    fmt = schema.get("format")
    if fmt == "date":
        return f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    if fmt == "date-time":
        return f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T12:00:00Z"
    if fmt == "email":
        return f"user{rng.randint(1, 9999)}@example.com"
    lo_len = int(schema.get("minLength", 1))
    hi_len = max(lo_len, int(schema.get("maxLength", max(lo_len, 12))))
    if "pattern" in schema:
        return "".join(rng.choice(string.ascii_uppercase + string.digits) for _ in range(lo_len))
    length = rng.randint(lo_len, min(hi_len, max(lo_len, 12)))
    word = ""
    while len(word) < length:
        word += rng.choice(_WORDS) + " "
    return word[:length].strip().ljust(length, "x") if length else ""


def _example_number(schema: dict[str, Any], rng: random.Random, *, integer: bool) -> float:
    inc_lo, inc_hi = schema.get("minimum"), schema.get("maximum")
    ex_lo, ex_hi = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    low = float(inc_lo if inc_lo is not None else ex_lo if ex_lo is not None else 0)
    high = float(inc_hi if inc_hi is not None else ex_hi if ex_hi is not None else low + 1000)
    if integer:
        a, b = math.ceil(low), math.floor(high)
        if inc_lo is None and ex_lo is not None and a <= ex_lo:
            a += 1
        if inc_hi is None and ex_hi is not None and b >= ex_hi:
            b -= 1
        return rng.randint(a, max(a, b))
    if high <= low:
        return low
    value = low + (high - low) * rng.uniform(0.1, 0.9)
    rounded = round(value, 2)
    return rounded if low < rounded < high else value


class GenericBehaviour:
    """Text of lognormal length, or schema-valid tool calls when tools and tool_choice allow.

    Settings: ``mean_output_tokens``, ``output_tokens_sigma``, ``mean_reasoning_tokens``,
    ``tool_call_probability`` and ``parallel_tool_call_probability`` of the sim config.
    """

    def __init__(self, config: SimConfig) -> None:
        self.config = config

    def respond(self, request: RequestView) -> ResponsePlan:
        cfg = request.settings
        rng = request.rng
        plan = ResponsePlan()
        if request.thinking:
            n = lognormal_tokens(
                cfg.mean_reasoning_tokens,
                cfg.output_tokens_sigma,
                rng,
                max(1, request.max_tokens // 2),
            )
            plan.reasoning = lorem_text(n, rng)
        allowed = request.tools_allowed()
        call = bool(allowed) and (
            request.must_call_tool() or rng.random() < cfg.tool_call_probability
        )
        if call:
            count = 1
            if (
                request.parallel_tool_calls
                and not isinstance(request.tool_choice, dict)
                and rng.random() < cfg.parallel_tool_call_probability
            ):
                count = rng.randint(2, 3)
            for _ in range(count):
                tool = rng.choice(allowed)
                args = example_from_schema(_tool_params(tool), rng)
                plan.tool_calls.append(
                    ToolCallPlan(_tool_name(tool), json.dumps(args, separators=(", ", ": ")))
                )
            return plan
        n = lognormal_tokens(
            cfg.mean_output_tokens, cfg.output_tokens_sigma, rng, max(1, request.max_tokens)
        )
        plan.content = lorem_text(n, rng)
        return plan
