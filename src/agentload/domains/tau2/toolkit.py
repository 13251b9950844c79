"""Tool kits and worlds of the τ²-bench domains, written for agentload.

A `ToolKit` is one side's tools (the agent's or the user's) over one database, a plain dict
of JSON types in the exact shape τ²-bench's own models dump to (field order, defaults and
number types included), so that its hash equals τ²'s and a tool's JSON answer has the same
bytes the agent would see from τ². A `World` is one episode's state: the agent's kit, the
user's kit (telecom and mock), and the rule that keeps the two in step after every call.

Behaviour follows τ²-bench's public source (sierra-research/tau2-bench); the code is ours.
"""

from __future__ import annotations

import ast
import bisect
import hashlib
import json
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import orjson

TOOL_KINDS = ("read", "write", "think", "generic")


class ToolError(ValueError):
    """A tool refused the call; the agent reads "Error: <message>" (as τ² words it)."""


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the model sees it: `description` and `parameters` are byte for byte what
    τ²-bench shows (its OpenAI schema), `kind` its tool type and `mutates` whether grading
    replays it."""

    name: str
    kind: str
    mutates: bool
    description: str
    parameters: dict[str, Any]

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


_SPEC_ATTR = "__tau2_tool__"


def tool(
    kind: str = "read",
    *,
    description: str,
    parameters: dict[str, Any],
    mutates: bool | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Marks a ToolKit method as a tool. `mutates` defaults to kind == "write" (τ²'s rule);
    a write that changes no state (a hand-over) says mutates=False."""
    if kind not in TOOL_KINDS:
        raise ValueError(f"tool kind {kind!r} not in {TOOL_KINDS}")

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        spec = ToolSpec(
            name=fn.__name__,
            kind=kind,
            mutates=kind == "write" if mutates is None else mutates,
            description=description,
            parameters=parameters,
        )
        setattr(fn, _SPEC_ATTR, spec)
        return fn

    return mark


class Record(dict[str, Any]):
    """A tool answer that τ² returns as one of its models: dumped to JSON as it stands
    (τ² stringifies the numbers of plain dicts and lists, not those of its models)."""


def to_text(value: Any) -> str:
    """A tool's answer as the text of the tool message, as τ²'s environment renders it:
    strings as they are; models (Record) as their JSON; numbers and booleans inside plain
    lists and dicts as strings; None as null."""
    if isinstance(value, str):
        return value
    return json.dumps(_plain(value), default=str)


def _plain(value: Any) -> Any:
    if isinstance(value, Record) or value is None:
        return value
    if isinstance(value, bool | int | float):
        return str(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def dict_hash(obj: Any) -> str:
    """τ²'s database hash: sha256 of json.dumps(obj, sort_keys=True, default=str) (the same
    text, composed from cached parts where tables are shared)."""
    return hashlib.sha256(_tau2_text(obj).encode()).hexdigest()


def deep_update(target: dict[str, Any], update: Mapping[str, Any]) -> None:
    """Merge `update` into `target` in place, dicts recursively (τ²'s initialization data)."""
    for k, v in update.items():
        cur = target.get(k)
        if isinstance(cur, dict) and isinstance(v, Mapping):
            deep_update(cur, v)
        else:
            target[k] = json.loads(json.dumps(v))


class ToolKit:
    """One side's tools over `self.db`. Subclasses mark tools with @tool; any other public
    method can be named by a task's initialization actions or env assertions (`func_name`).

    `SPECS` lists the tools in the order τ² offers them (definition order)."""

    SPECS: ClassVar[dict[str, ToolSpec]] = {}

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        specs: dict[str, ToolSpec] = {}
        for name, attr in cls.__dict__.items():
            spec = getattr(attr, _SPEC_ATTR, None)
            if isinstance(spec, ToolSpec):
                specs[name] = spec
        cls.SPECS = specs

    def __init__(self, db: dict[str, Any]) -> None:
        self.db = db

    def normalize(self, db: dict[str, Any]) -> dict[str, Any]:
        """`db` in the shape τ²'s model dumps to (defaults filled, numbers typed, fields in
        model order). Called on the loaded file and after initialization data is merged."""
        return db

    def call(self, name: str, arguments: Mapping[str, Any]) -> tuple[str, bool]:
        """Run one tool call: (tool message text, error). Never raises. Like τ², the
        arguments are passed as they came (no schema check): a bad one fails in the tool."""
        if name not in self.SPECS:
            return f"Error: Tool '{name}' not found.", True
        try:
            value = getattr(self, name)(**arguments)
        except Exception as e:  # τ²: any exception is the agent's "Error: ..."
            return to_text(f"Error: {e}"), True
        return to_text(value), False

    def function(self, name: str) -> Callable[..., Any]:
        """A method an initialization action or assertion names."""
        if name.startswith("_") or not callable(getattr(self, name, None)):
            raise KeyError(f"{type(self).__name__} has no function {name!r}")
        return getattr(self, name)

    def db_hash(self) -> str:
        return dict_hash(self.db)

    @classmethod
    def schemas(cls) -> list[dict[str, Any]]:
        return [s.schema() for s in cls.SPECS.values()]


class World:
    """One episode's environment: the agent's kit and, in dual-control domains, the user's.
    Subclasses override `sync` when the two sides see each other's state (τ²'s sync_tools)."""

    def __init__(self, agent: ToolKit, user: ToolKit | None = None) -> None:
        self.agent = agent
        self.user = user

    def sync(self) -> None:
        """Bring each side up to date with the other after a call (default: nothing)."""

    def kit(self, side: str) -> ToolKit:
        if side in ("assistant", "agent"):
            return self.agent
        if side == "user" and self.user is not None:
            return self.user
        raise KeyError(f"no {side} tools in this domain")

    def call(self, requestor: str, name: str, arguments: Mapping[str, Any]) -> tuple[str, bool]:
        """A tool call by the agent ("assistant") or the user: (text, error)."""
        try:
            kit = self.kit(requestor)
        except KeyError as e:
            return f"Error: {e.args[0]}", True
        text, error = kit.call(name, arguments)
        if not error:
            try:
                self.sync()
            except Exception as e:
                return to_text(f"Error: {e}"), True
        return text, error

    def run_function(self, env_type: str, func_name: str, arguments: Mapping[str, Any]) -> Any:
        """An initialization action or assertion: call the named function, then sync."""
        result = self.kit(env_type).function(func_name)(**arguments)
        self.sync()
        return result

    def update(self, agent_data: Mapping[str, Any] | None, user_data: Mapping[str, Any] | None):
        """Merge a task's initialization data into the databases (then re-normalize)."""
        if agent_data:
            deep_update(self.agent.db, agent_data)
            self.agent.db = self.agent.normalize(self.agent.db)
        if user_data and self.user is not None:
            deep_update(self.user.db, user_data)
            self.user.db = self.user.normalize(self.user.db)

    def db_hash(self) -> str:
        return self.agent.db_hash()

    def user_db_hash(self) -> str | None:
        return None if self.user is None else self.user.db_hash()

    def state_hashes(self) -> tuple[str, str | None]:
        """Fast hashes of the agent's and the user's databases (`state_hash`), for grading."""
        return state_hash(self.agent.db), None if self.user is None else state_hash(self.user.db)


def _private(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value))


class CowTable(dict[str, Any]):
    """A table of records (id -> record) shared with a database parsed once per process.

    A record becomes the episode's own deep copy the first time a tool reaches it (by key,
    `get`, `setdefault` or iteration), so tools may change what they read in place while
    the shared records stay as loaded. A whole 7 MB database is some 100 ms of parsing;
    an episode's world built this way costs a shallow copy of each table, and hashing it
    re-serializes only the records its tools reached (`state_hash`). Python has no
    copy-on-write mapping, hence this class."""

    __slots__ = ("base", "owned")

    def __init__(self, base: dict[str, Any]) -> None:
        super().__init__(base)
        self.base = base
        self.owned: set[str] = set()

    def _own(self, key: str) -> Any:
        value = dict.__getitem__(self, key)
        if key not in self.owned:
            self.owned.add(key)
            if value is self.base.get(key):
                value = _private(value)
                dict.__setitem__(self, key, value)
        return value

    def __getitem__(self, key: str) -> Any:
        return self._own(key)

    def get(self, key: str, default: Any = None) -> Any:
        return self._own(key) if dict.__contains__(self, key) else default

    def setdefault(self, key: str, default: Any = None) -> Any:
        if dict.__contains__(self, key):
            return self._own(key)
        self.owned.add(key)
        dict.__setitem__(self, key, default)
        return default

    def __setitem__(self, key: str, value: Any) -> None:
        self.owned.add(key)
        dict.__setitem__(self, key, value)

    def values(self) -> Any:
        return [self._own(k) for k in list(dict.keys(self))]

    def items(self) -> Any:
        return [(k, self._own(k)) for k in list(dict.keys(self))]

    def pop(self, key: str, *default: Any) -> Any:
        if dict.__contains__(self, key):
            self._own(key)
        return dict.pop(self, key, *default)


_TABLE_KEYS: dict[int, frozenset[str]] = {}


def cow_db(base: dict[str, Any]) -> dict[str, Any]:
    """A database for one episode over `base` (never changed): tables of records become
    CowTables, anything else a private copy."""
    tables = _TABLE_KEYS.get(id(base))
    if tables is None:
        tables = _TABLE_KEYS[id(base)] = frozenset(
            k
            for k, v in base.items()
            if isinstance(v, dict) and v and all(isinstance(r, dict) for r in v.values())
        )
    return {k: CowTable(v) if k in tables else _private(v) for k, v in base.items()}


# Per shared table (keyed by its id; shared tables live as long as the process): its
# records' canonical bytes and digest pieces, and the table's digest. Per record: its
# τ²-format JSON text. All computed once per process.
_SORTED = orjson.OPT_SORT_KEYS


@dataclass
class _TableInfo:
    keys: list[str]  # sorted
    index: dict[str, int]
    pieces: list[bytes]  # json(key) + b":" + sha256(record bytes), in key order
    record_bytes: dict[str, bytes]
    digest: bytes


_TABLES: dict[int, _TableInfo] = {}
_TEXTS: dict[int, dict[str, str]] = {}


def _piece(key: str, record_bytes: bytes) -> bytes:
    return orjson.dumps(key) + b":" + hashlib.sha256(record_bytes).digest()


def _table_info(base: dict[str, Any]) -> _TableInfo:
    info = _TABLES.get(id(base))
    if info is None:
        keys = sorted(base)
        raw = {k: orjson.dumps(base[k], option=_SORTED) for k in keys}
        pieces = [_piece(k, raw[k]) for k in keys]
        info = _TABLES[id(base)] = _TableInfo(
            keys,
            {k: i for i, k in enumerate(keys)},
            pieces,
            raw,
            hashlib.sha256(b"".join(pieces)).digest(),
        )
    return info


def _shared(t: CowTable, k: str) -> bool:
    return dict.__getitem__(t, k) is t.base.get(k)


def _table_digest(t: CowTable) -> bytes:
    """sha256 over the table's records in key order, each as its key and the sha256 of its
    canonical bytes. Records only read (owned but unchanged) keep the shared pieces."""
    base = t.base
    info = _table_info(base)
    added = [k for k in t.owned if k not in base and dict.__contains__(t, k)]
    if dict.__len__(t) != len(base) + len(added):  # a record was removed: rebuild
        return hashlib.sha256(
            b"".join(
                info.pieces[info.index[k]]
                if k in info.index and _shared(t, k)
                else _piece(k, orjson.dumps(dict.__getitem__(t, k), option=_SORTED))
                for k in sorted(dict.keys(t))
            )
        ).digest()
    pieces: list[bytes] | None = None
    for k in t.owned:
        if k not in base:
            continue
        v = dict.__getitem__(t, k)
        if v is base[k]:
            continue
        b = orjson.dumps(v, option=_SORTED)
        if b == info.record_bytes[k]:
            continue
        if pieces is None:
            pieces = list(info.pieces)
        pieces[info.index[k]] = _piece(k, b)
    if added:  # new records go in at their place in key order
        if pieces is None:
            pieces = list(info.pieces)
        keys = list(info.keys)
        for k in sorted(added):
            i = bisect.bisect(keys, k)
            keys.insert(i, k)
            pieces.insert(i, _piece(k, orjson.dumps(dict.__getitem__(t, k), option=_SORTED)))
    return info.digest if pieces is None else hashlib.sha256(b"".join(pieces)).digest()


def state_hash(db: Any) -> str:
    """A fast hash of a database's state: a tree of sha256 digests (tables of records
    digest their records' canonical orjson bytes), equal for equal states whatever is
    shared. It is not τ²'s hash value (`dict_hash` is): grading compares the states of
    agentload's own worlds with it, and a table's untouched records cost nothing."""
    h = hashlib.sha256()
    if isinstance(db, dict):
        for k in sorted(db):
            v = dict.__getitem__(db, k)
            d = (
                _table_digest(v)
                if isinstance(v, CowTable)
                else hashlib.sha256(orjson.dumps(v, option=_SORTED)).digest()
            )
            h.update(orjson.dumps(k) + b":" + d)
    else:
        h.update(orjson.dumps(db, option=_SORTED))
    return h.hexdigest()


def _tau2_text(value: Any) -> str:
    """json.dumps(value, sort_keys=True, default=str), reading CowTables without copying."""
    if isinstance(value, CowTable):
        cache = _TEXTS.setdefault(id(value.base), {})
        parts = []
        for k in sorted(dict.keys(value)):
            if _shared(value, k):
                text = cache.get(k)
                if text is None:
                    text = cache[k] = _tau2_text(value.base[k])
            else:
                text = _tau2_text(dict.__getitem__(value, k))
            parts.append(f"{json.dumps(k)}: {text}")
        return "{" + ", ".join(parts) + "}"
    if isinstance(value, dict) and any(isinstance(v, CowTable) for v in value.values()):
        inner = ", ".join(
            f"{json.dumps(k)}: {_tau2_text(dict.__getitem__(value, k))}" for k in sorted(value)
        )
        return "{" + inner + "}"
    return json.dumps(value, sort_keys=True, default=str)


_LOADED: dict[tuple[str, int, int], dict[str, Any]] = {}


def read_policy(domain_dir: Path | str) -> str:
    """A domain's agent policy: its folder's policy.md as it stands (τ² reads it in text
    mode); a domain whose policy is composed (telecom) defines its own `policy`."""
    with open(Path(domain_dir) / "policy.md", encoding="utf-8") as f:
        return f.read()


def load_json_db(path: Any, normalize: Callable[[dict[str, Any]], dict[str, Any]]) -> dict:
    """The database file at `path` (JSON or TOML) after `normalize`, as one episode's own:
    the normalized file is parsed once per process (keyed by path, size and mtime) and each
    call returns a copy-on-write view of it (`cow_db`), so a new episode costs microseconds."""
    import os
    import tomllib

    p = os.fspath(path)
    st = os.stat(p)
    key = (p, st.st_size, st.st_mtime_ns)
    base = _LOADED.get(key)
    if base is None:
        with open(p, "rb") as f:
            raw = f.read()
        data = tomllib.loads(raw.decode()) if p.endswith(".toml") else orjson.loads(raw)
        # One round trip: the base holds JSON types only, as every private copy will.
        base = _LOADED[key] = orjson.loads(orjson.dumps(normalize(data)))
    return cow_db(base)


_CALC_CHARS = "0123456789+-*/(). "
# An integer power can take unbounded time (9**9**9), where τ² would hang; an expression
# whose integer result could pass this many bits is refused instead. Float powers are cheap.
_CALC_MAX_BITS = 1 << 16


def _int_bits(node: ast.AST) -> float | None:
    """An upper bound on the bit length of the integer `node` evaluates to, or None when it
    evaluates to a float (the allowed characters give only numbers, + - * / and powers)."""
    if isinstance(node, ast.Expression):
        return _int_bits(node.body)
    if isinstance(node, ast.Constant):
        v = node.value
        return float(v.bit_length()) if isinstance(v, int) else None
    if isinstance(node, ast.UnaryOp):
        bits = _int_bits(node.operand)
        return None if bits is None else bits + 1
    if isinstance(node, ast.BinOp):
        left, right = _int_bits(node.left), _int_bits(node.right)
        if left is None or right is None or isinstance(node.op, ast.Div):
            return None
        if isinstance(node.op, ast.Pow):
            r = node.right
            negative = isinstance(r, ast.UnaryOp) and isinstance(r.op, ast.USub)
            if negative and isinstance(r.operand, ast.Constant):  # type: ignore[attr-defined]
                return None  # a negative integer power is a float
            return float("inf") if right > 64 else max(left, 1.0) * 2.0**right
        if isinstance(node.op, ast.Mult):
            return left + right
        return max(left, right) + 1
    # Anything else (a call of a number, an empty tuple) fails in eval with small numbers.
    return sum(_int_bits(c) or 0.0 for c in ast.iter_child_nodes(node))


def calculate(expression: Any) -> str:
    """τ²'s calculator: the characters checked, then Python's own arithmetic, rounded to two
    decimals, as text (errors are Python's, which τ² lets through)."""
    if not all(char in _CALC_CHARS for char in expression):
        raise ToolError("Invalid characters in expression")
    if not isinstance(expression, str):
        return str(round(float(eval(expression, {"__builtins__": None}, {})), 2))
    # Compiled as eval compiles a string (leading blanks dropped, same errors), without the
    # SyntaxWarning that "(2)(3)" prints on every call.
    expression = expression.lstrip(" \t")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        if "**" in expression:
            tree = compile(expression, "<string>", "eval", ast.PyCF_ONLY_AST)
            if (_int_bits(tree) or 0.0) > _CALC_MAX_BITS:
                # What τ² ends with for such a number, when it ends: float() refuses it.
                raise ToolError("int too large to convert to float")
        code = compile(expression, "<string>", "eval")
    return str(round(float(eval(code, {"__builtins__": None}, {})), 2))
