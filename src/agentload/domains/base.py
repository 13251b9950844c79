"""The domain framework: tools, tasks, a stateful environment, grading and pass^k.

A domain is a tau-style customer-service world: a JSON database generated deterministically
from a seed on a frozen clock, a written policy, tools (read and write) with OpenAI JSON
schemas, and tasks (a user scenario, gold actions, required outputs).

Reward for an episode = (final database hash == hash after replaying the gold actions on a
fresh database) * (every required output appears in the agent's replies).
"""

from __future__ import annotations

import ast
import hashlib
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import jsonschema
import orjson

from agentload.domains.text_actions import ActionParseError, parse_action
from agentload.stats import pass_hat_k as pass_hat_k  # one implementation, re-exported

# Bump when grading semantics change; it goes into every Grade (and so every result).
GRADER_VERSION = "1"

# Generated databases kept per domain (as JSON bytes), least recently used dropped first.
DB_CACHE_SEEDS = 8

ToolFn = Callable[..., Any]
"""fn(db: dict, **arguments) -> JSON-able result; raises ToolError for bad input or rule
violations. A tool must check everything before it mutates `db`, so that a call that fails
leaves the database untouched (grading replays failed calls too)."""


class ToolError(Exception):
    """A tool refused the call; the message becomes the tool result "Error: <message>"."""


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict  # JSON Schema: type object, properties, required, additionalProperties False
    writes: bool
    fn: ToolFn = field(repr=False, compare=False)

    def schema(self) -> dict:
        """The OpenAI `tools` entry for this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


@dataclass(frozen=True)
class Action:
    """One tool call, gold or executed."""

    name: str
    arguments: dict

    def to_dict(self) -> dict:
        return {"name": self.name, "arguments": self.arguments}


@dataclass(frozen=True)
class UserScenario:
    persona: str  # how the customer talks
    instructions: str  # what they want, second person ("You want to cancel ...")
    known_info: dict[str, str]  # facts the user can reveal when asked
    unknown_info: list[str]  # things the user does not know
    opening: str  # first utterance


TASK_CATEGORIES = ("read_only", "single_write", "multi_write", "refusal")


@dataclass(frozen=True)
class Task:
    id: str  # "<domain>/<NNN>", e.g. "airline/007"
    domain: str
    category: str  # one of TASK_CATEGORIES
    scenario: UserScenario
    gold_actions: tuple[Action, ...]  # only writes change the db; reads may be listed too
    required_outputs: tuple[str, ...]  # must appear in the agent's text replies
    flags: frozenset[str] = frozenset()  # e.g. {"refusal"}
    refusal_reason: str | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["gold_actions"] = [a.to_dict() for a in self.gold_actions]
        d["required_outputs"] = list(self.required_outputs)
        d["flags"] = sorted(self.flags)
        return d


class Domain:
    """Base class of a domain. Subclasses set the class attributes and implement
    `make_db` and `tasks`; one instance per process is kept by the registry."""

    name: ClassVar[str] = ""
    data_version: ClassVar[str] = ""
    policy: str = ""  # markdown; documents the frozen "now"
    tools: list[Tool]

    def make_db(self, seed: int = 0) -> dict:
        """A fresh database, a pure function of `seed` (JSON types only, str keys)."""
        raise NotImplementedError

    def tasks(self) -> list[Task]:
        """The domain's tasks, deterministic, in id order."""
        raise NotImplementedError

    # --- derived helpers (subclasses need not override) ---

    def tool_schemas(self) -> list[dict]:
        return [t.schema() for t in self.tools]

    def tool(self, name: str) -> Tool | None:
        index = self.__dict__.get("_tool_index")
        if index is None:
            index = self.__dict__["_tool_index"] = {t.name: t for t in self.tools}
        return index.get(name)

    def validator(self, tool: Tool) -> jsonschema.protocols.Validator:
        """A compiled JSON-schema validator for the tool's arguments (built once)."""
        cache = self.__dict__.setdefault("_validators", {})
        v = cache.get(tool.name)
        if v is None:
            schema = tool.parameters
            cls = jsonschema.validators.validator_for(schema, jsonschema.Draft202012Validator)
            v = cache[tool.name] = cls(schema)
        return v

    def get_task(self, task_id: str) -> Task:
        index = self.__dict__.get("_task_index")
        if index is None:
            index = self.__dict__["_task_index"] = {t.id: t for t in self.tasks()}
        try:
            return index[task_id]
        except KeyError:
            raise KeyError(f"unknown task {task_id!r} in domain {self.name!r}") from None

    # A domain whose write tools never change a record in place, but first replace it by a
    # private copy (`own`), sets this: episodes then share the records of one parsed base
    # database (a new episode costs microseconds) and hashing reuses the base's bytes.
    copy_on_write: ClassVar[bool] = False

    def _base(self, seed: int) -> _Base:
        cache: dict[int, _Base] = self.__dict__.setdefault("_db_cache", {})
        base = cache.pop(seed, None)
        if base is None:
            base = _Base(orjson.dumps(self.make_db(seed)))
            if len(cache) >= DB_CACHE_SEEDS:  # bounded: a run may use many seeds
                del cache[next(iter(cache))]
        cache[seed] = base  # most recently used last
        return base

    def fresh_db(self, seed: int = 0) -> dict:
        """The database of a new episode. The generated db is cached per seed as JSON bytes:
        by default each episode gets a private parse of them; with `copy_on_write`, new
        top-level tables whose records are shared with a parsed base (only tools that `own`
        a record before changing it may write to such a db)."""
        base = self._base(seed)
        if not self.copy_on_write:
            return orjson.loads(base.blob)
        return {
            k: dict(v) if isinstance(v, dict) else orjson.loads(orjson.dumps(v))
            for k, v in base.parsed().items()
        }

    def db_hash(self, db: Mapping[str, Any], seed: int = 0) -> str:
        """hash_db(db), faster for copy-on-write databases: records still shared with the
        base database of `seed` are serialised once per process."""
        if not self.copy_on_write:
            return hash_db(db)
        base = self._base(seed)
        ref = base.parsed()
        parts = []
        for k in sorted(db):
            v, bv = db[k], ref.get(k)
            if isinstance(v, dict) and isinstance(bv, dict):
                done = base.record_bytes.setdefault(k, {})
                recs = []
                for rk in sorted(v):
                    rec = v[rk]
                    if rk in bv and rec is bv[rk]:
                        b = done.get(rk)
                        if b is None:
                            b = done[rk] = canonical_json(rec)
                    else:
                        b = canonical_json(rec)
                    recs.append(orjson.dumps(rk) + b":" + b)
                vb = b"{" + b",".join(recs) + b"}"
            else:
                vb = canonical_json(v)
            parts.append(orjson.dumps(k) + b":" + vb)
        # Same bytes as canonical_json(db): orjson sorts keys by code point, as sorted() does.
        return hashlib.sha256(b"{" + b",".join(parts) + b"}").hexdigest()

    def system_prompt(self) -> str:
        """The agent's static prefix: the policy (tool schemas travel in `tools`)."""
        return self.policy


_ARITHMETIC: dict[type, Callable[..., float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def evaluate_arithmetic(expression: str) -> float:
    """The value of an expression of numbers, + - * / and parentheses (what a domain's
    `calculate` tool offers); anything else, or a division by zero, raises ToolError."""
    if len(expression) > 200:
        raise ToolError("expression too long")

    def ev(node: ast.AST) -> float:
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, int | float)
            and not isinstance(node.value, bool)  # True + 1 is not arithmetic
        ):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
            return _ARITHMETIC[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _ARITHMETIC:
            return _ARITHMETIC[type(node.op)](ev(node.operand))
        raise ToolError("only numbers, + - * / and parentheses are allowed")

    try:
        return ev(ast.parse(expression.strip(), mode="eval").body)
    except SyntaxError:
        raise ToolError(f"cannot parse {expression!r}") from None
    except ZeroDivisionError:
        raise ToolError("division by zero") from None


@dataclass
class _Base:
    """A generated database: its JSON bytes and, for copy-on-write domains, one parse that
    episodes share and never change, with the canonical bytes of its records."""

    blob: bytes
    db: dict | None = None
    record_bytes: dict[str, dict[str, bytes]] = field(default_factory=dict)

    def parsed(self) -> dict:
        if self.db is None:
            self.db = orjson.loads(self.blob)
        return self.db


def own(db: dict, table: str, key: str) -> dict:
    """Replace db[table][key] by a private deep copy and return it: what a write tool of a
    copy-on-write domain does before it changes a record."""
    rec = orjson.loads(orjson.dumps(db[table][key]))
    db[table][key] = rec
    return rec


def canonical_json(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


def hash_db(db: Mapping[str, Any]) -> str:
    """sha256 of canonical JSON: stable across processes and machines."""
    return hashlib.sha256(canonical_json(db)).hexdigest()


@dataclass
class ToolResult:
    ok: bool
    content: str  # what goes into the tool message: JSON text or "Error: ..."


class BadArguments(ValueError):
    """Arguments a tool cannot be called with (not JSON, not an object, against its schema).

    `str()` is what the agent is told in the tool result. `field` names the part of a tool
    request at fault ("arguments" or "arguments/<path>", None for unparsable text) and
    `detail` is the message that names it (it adds the name of a missing required property,
    which jsonschema gives only inside its own sentence)."""

    def __init__(self, message: str, *, field: str | None = None, detail: str = "") -> None:
        super().__init__(message)
        self.field = field
        self.detail = detail or message


def check_arguments(domain: Domain, tool: Tool, arguments: Any) -> dict[str, Any]:
    """The call's arguments as a dict (JSON text is parsed; None or blank is `{}`), checked
    against the tool's schema; raises BadArguments."""
    name = tool.name
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        arguments = {}
    elif isinstance(arguments, str):
        try:
            arguments = orjson.loads(arguments)
        except orjson.JSONDecodeError as e:
            raise BadArguments(f"arguments of {name} are not valid JSON: {e}") from None
    if not isinstance(arguments, Mapping):
        raise BadArguments(f"arguments of {name} must be a JSON object", field="arguments")
    arguments = dict(arguments)
    err = jsonschema.exceptions.best_match(domain.validator(tool).iter_errors(arguments))
    if err is None:
        return arguments
    path = "/".join(str(p) for p in err.absolute_path)
    where = path or (_missing_property(err.message) if err.validator == "required" else "")
    raise BadArguments(
        f"invalid arguments for {name}: {path + ': ' if path else ''}{err.message}",
        field="arguments" + (f"/{where}" if where else ""),
        detail=f"invalid arguments for {name}: {where + ': ' if where else ''}{err.message}",
    )


def _missing_property(message: str) -> str:
    # jsonschema: "'reservation_id' is a required property"
    if message.startswith("'") and "' is a required property" in message:
        return message[1 : message.index("' is a required property")]
    return ""


def _error(message: str) -> ToolResult:
    return ToolResult(ok=False, content=f"Error: {message}")


def _result_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


class Environment:
    """One episode's world: a fresh database and the domain's tools."""

    def __init__(self, domain: Domain, seed: int = 0) -> None:
        self.domain = domain
        self.seed = seed
        self.db = domain.fresh_db(seed)
        # Every call that reached a tool (well-formed name and arguments), in order, whether
        # the tool accepted it or not: what `grade` needs as `executed`.
        self.actions: list[Action] = []

    def execute(self, name: str, arguments: dict | str | None) -> ToolResult:
        """Run one tool call. Never raises: every failure becomes an "Error: ..." result."""
        tool = self.domain.tool(name)
        if tool is None:
            return _error(f"unknown tool {name!r}")
        try:
            checked = check_arguments(self.domain, tool, arguments)
        except BadArguments as e:
            return _error(str(e))
        return self.run(tool, checked)

    def run(self, tool: Tool, arguments: dict[str, Any]) -> ToolResult:
        """Run a call whose arguments `check_arguments` accepted (it is not checked again)."""
        name = tool.name
        # The record and the tool each get their own copy: a tool may keep parts of its
        # arguments in the db and change them later, which must not rewrite history (or a
        # task's gold actions).
        try:
            blob = orjson.dumps(arguments)
        except TypeError as e:
            return _error(f"arguments of {name} are not JSON: {e}")
        self.actions.append(Action(name, orjson.loads(blob)))
        try:
            value = tool.fn(self.db, **orjson.loads(blob))
        except ToolError as e:
            return _error(str(e))
        except Exception as e:  # a tool bug must not end the episode
            return _error(f"{type(e).__name__}: {e}")
        try:
            return ToolResult(ok=True, content=_result_text(value))
        except TypeError as e:
            return _error(f"tool {name} returned a non-JSON result: {e}")

    def replay(self, actions: Sequence[Action]) -> None:
        for a in actions:
            self.execute(a.name, a.arguments)

    def db_hash(self) -> str:
        return self.domain.db_hash(self.db, self.seed)


@dataclass
class Grade:
    reward: float
    db_match: bool
    outputs_ok: bool
    missing_outputs: list[str]
    grader_version: str
    data_version: str
    db_hash: str = ""  # the agent's final database
    gold_hash: str = ""  # after replaying the gold actions

    def to_dict(self) -> dict:
        return asdict(self)


_NUM_COMMA = re.compile(r"(?<=\d),(?=\d{3}\b)")
_SPACES = re.compile(r"\s+")


_AS_SPACE = str.maketrans("_-", "  ")


def normalize_text(text: str) -> str:
    """Lower case, thousands separators dropped ("$1,234" -> "$1234"), underscores and
    hyphens read as spaces ("basic_economy" == "basic economy", "24-hour" == "24 hour"),
    runs of spaces collapsed. Applied to required outputs and replies alike."""
    return _SPACES.sub(" ", _NUM_COMMA.sub("", text.lower()).translate(_AS_SPACE))


def missing_outputs(required: Sequence[str], agent_replies: Sequence[str]) -> list[str]:
    said = normalize_text("\n".join(r for r in agent_replies if r))
    return [r for r in required if normalize_text(r) not in said]


_GOLD_HASHES: dict[tuple[str, str, str, int], str] = {}


def gold_hash(domain: Domain, task: Task, seed: int = 0) -> str:
    """Hash of the database after the task's gold actions (cached: gold never changes)."""
    key = (domain.name, domain.data_version, task.id, seed)
    h = _GOLD_HASHES.get(key)
    if h is None:
        env = Environment(domain, seed)
        env.replay(task.gold_actions)
        h = _GOLD_HASHES[key] = env.db_hash()
    return h


def grade(
    domain: Domain,
    task: Task,
    executed: Sequence[Action],
    agent_replies: Sequence[str],
    seed: int = 0,
) -> Grade:
    """Replay `executed` on a fresh environment and the gold actions on another; compare."""
    env = Environment(domain, seed)
    env.replay(executed)
    return grade_db_hash(domain, task, env.db_hash(), agent_replies, seed)


def trajectory_actions(trajectory: Mapping[str, Any]) -> tuple[list[Action], list[str]]:
    """The tool calls an agent made and the replies it sent the user, read back from a stored
    trajectory (`trajectories.jsonl`): native tool calls, or for text agents (react / act)
    the JSON action in each assistant message. Arguments that are not JSON objects are kept
    as their text, so replaying them fails exactly as it did live."""
    text_actions = trajectory.get("action_format") == "text"
    actions: list[Action] = []
    replies: list[str] = []
    for msg in trajectory.get("messages") or ():
        if not isinstance(msg, Mapping) or msg.get("role") != "assistant":
            continue
        content = msg.get("content")
        calls = msg.get("tool_calls") or []
        if text_actions:
            try:
                parsed = parse_action(content if isinstance(content, str) else None)
            except ActionParseError:
                continue
            if parsed.is_respond:
                replies.append(parsed.respond_text())
            else:
                actions.append(Action(parsed.name, dict(parsed.arguments)))
            continue
        for call in calls:
            fn = (call.get("function") or {}) if isinstance(call, Mapping) else {}
            args: Any = fn.get("arguments")  # any JSON value; see the docstring
            if isinstance(args, str):
                try:
                    args = orjson.loads(args)
                except orjson.JSONDecodeError:
                    pass
            actions.append(Action(str(fn.get("name", "")), args if args is not None else {}))
        if not calls and isinstance(content, str):
            replies.append(content)
    return actions, replies


def grade_db_hash(
    domain: Domain, task: Task, actual: str, agent_replies: Sequence[str], seed: int = 0
) -> Grade:
    """The grade of an episode whose final database hashed to `actual`."""
    expected = gold_hash(domain, task, seed)
    missing = missing_outputs(task.required_outputs, agent_replies)
    db_match = actual == expected
    outputs_ok = not missing
    return Grade(
        reward=1.0 if db_match and outputs_ok else 0.0,
        db_match=db_match,
        outputs_ok=outputs_ok,
        missing_outputs=missing,
        grader_version=GRADER_VERSION,
        data_version=domain.data_version,
        db_hash=actual,
        gold_hash=expected,
    )


WRITE_CATEGORIES = ("single_write", "multi_write")


def check_tasks(domain: Domain, seed: int = 0) -> list[str]:
    """Self-consistency of a domain's tasks; returns one line per problem (empty: all good).

    Each task's gold actions must all succeed on a fresh database, the gold trajectory must
    earn reward 1 when the required outputs are said, write tasks must change the database
    and read-only / refusal tasks must not; ids must be unique and categories known.
    """
    problems: list[str] = []
    pristine = Environment(domain, seed).db_hash()
    seen: set[str] = set()
    for t in domain.tasks():
        if t.id in seen:
            problems.append(f"{t.id}: duplicate id")
        seen.add(t.id)
        if t.category not in TASK_CATEGORIES:
            problems.append(f"{t.id}: unknown category {t.category!r}")
        env = Environment(domain, seed)
        for a in t.gold_actions:
            r = env.execute(a.name, a.arguments)
            if not r.ok:
                problems.append(f"{t.id}: gold action {a.name} fails: {r.content}")
        g = grade(domain, t, env.actions, [" ".join(t.required_outputs)], seed)
        if g.reward != 1.0:
            problems.append(f"{t.id}: the gold trajectory does not pass its own grading")
        changed = g.db_hash != pristine
        if changed != (t.category in WRITE_CATEGORIES):
            problems.append(f"{t.id}: category {t.category} but database changed={changed}")
    return problems
