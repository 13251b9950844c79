"""Typed, versioned records of a results folder: sessions, trajectories and the summary.

`CallRecord` (agentload.client.record) is the call line; the models here are the other three.
They type today's JSON as it is -- the same field names, the same shape -- plus a
`schema_version` integer per record type.

One declaration per field. Each field of a session or trajectory line is declared once, on
the reader's model (`SessionRecord`, `TrajectoryRecord`: its type, bounds and meaning).
Reading stays lenient there: every field has a default, so old folders and other kinds'
lines read. Each writer has its own record class *derived* from that declaration
(`writer_record`): a frozen msgspec Struct whose fields are the ones that writer always writes
-- required, with the reader's type less its `None` -- in the order the line is written,
plus the fields it writes only sometimes (τ²'s, the run's stamp) that are left out of the
line when not set:

- `EpisodeSessionLine` / `EpisodeTrajectoryLine`: a built-in, τ² or external agent's episode;
- `ReplaySessionLine` / `ReplayTrajectoryLine`: a replayed conversation;
- `ProxySessionLine` / `ProxyTrajectoryLine`: a session the recording proxy saw.

A writer builds its record once; a missing or unknown field fails there (TypeError), not in
a reader. Nothing edits a record after it is built: the run's stamp (run_id, warmup,
attempt, intended_start_ns, sched_delay_s) makes a new one (`msgspec.structs.replace`,
agentload.session.host). `Line.line()` is the JSON object written, encoded once by the
recorder (orjson). Structs, not pydantic models, because of the hot path: an episode's two
lines cost about 5 % more to build and encode than the dict literals they replace, where
`model_construct` costs nine times as much (benchmarks/record_encode.py).

- writers stamp `schema` and `schema_version` (`session_line`, `trajectory_line`) and write
  with orjson: no validation on the recording path, which runs once per finished episode
  while hundreds of others are in flight;
- readers validate (`parse_session`, `parse_trajectory`, `load_summary`): a record of a newer
  `schema_version` than this agentload reads is refused with one line naming `file:line`, a
  field of the wrong type is named (`counts.agent_calls: ...`). A line without
  `schema_version` (written before it existed) reads as the version its `schema` string names.

Fields a model does not declare are kept (`extra="allow"`): a record read and written back
loses nothing, and a workload kind can carry its own fields (`kind: "external"`).
"""

from __future__ import annotations

import sys
import types
import typing
from collections.abc import KeysView, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import msgspec
import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agentload.results.jsonl import ResultsError, atomic_write_bytes

SESSION_SCHEMA = "agentload.session/1"
TRAJECTORY_SCHEMA = "agentload.trajectory/1"
SUMMARY_SCHEMA = "agentload.summary/1"

# The version each writer stamps; readers take 1 .. this (a newer one is refused).
SESSION_VERSION = 1
TRAJECTORY_VERSION = 1
SUMMARY_VERSION = 1

Id = str | int


class _Model(BaseModel):
    # defer_build: schemas are built on first use, not when a command imports the module.
    model_config = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)

    def dump(self) -> dict[str, Any]:
        """The JSON object as read or built: declared fields that were given, and extras."""
        return self.model_dump(by_alias=True, exclude_unset=True)


class Record(_Model):
    """A versioned record: `schema` (family/major, as before) and `schema_version`."""

    FAMILY: ClassVar[str] = ""
    VERSION: ClassVar[int] = 1

    schema_: str | None = Field(None, alias="schema")
    schema_version: int | None = None


# ---- versions ------------------------------------------------------------------------------


def _show(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def version_of(data: Mapping[str, Any], cls: type[Record]) -> int:
    """The record's version: `schema_version`, else the major of its `schema` string, else 1
    (a line from before either existed). Raises ValueError (one line) when unreadable."""
    v = data.get("schema_version")
    if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
        raise ValueError(f"schema_version {_show(v)} is not a version")
    schema = data.get("schema")
    if schema is not None and not isinstance(schema, str):
        raise ValueError(f"schema is {_show(schema)}")
    prefix = cls.FAMILY + "/"
    if v is None and isinstance(schema, str) and schema.startswith(prefix):
        major = schema[len(prefix) :]
        if not major.isdigit() or int(major) < 1:
            raise ValueError(f"unsupported schema {schema!r}")
        v = int(major)
    version = 1 if v is None else int(v)
    if version > cls.VERSION:
        raise ValueError(
            f"{cls.FAMILY} version {version} is newer than this agentload reads "
            f"(up to {cls.VERSION}); upgrade agentload to read it"
        )
    return version


def field_errors(e: ValidationError) -> list[tuple[str, str]]:
    """(dotted field, what is wrong) of each error, e.g. ("counts.agent_calls", "...")."""
    out = []
    for err in e.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "record"
        out.append((loc, f"{loc}={_show(err.get('input'))} ({err['msg']})"))
    return out


# ---- sessions ------------------------------------------------------------------------------


class Durations(_Model):
    total_s: float | None = None
    llm_s: float | None = None
    tool_s: float | None = None
    user_s: float | None = None
    delay_s: float | None = None  # replay: the recorded gaps waited out


class ReplaySession(_Model):
    """A replayed conversation's own block (docs/replay.md)."""

    aborted_turns: list[int] = Field(default_factory=list)
    divergences: list[dict[str, Any]] = Field(default_factory=list)
    send_lag_s: dict[str, float | None] | None = None


class SessionRecord(Record):
    """One line of sessions.jsonl: a finished episode (or replayed conversation)."""

    FAMILY: ClassVar[str] = "agentload.session"
    VERSION: ClassVar[int] = SESSION_VERSION

    kind: str | None = None  # null: an episode; "replay", "proxy", "external"
    run_id: str | None = None
    session_id: Id | None = None
    domain: str | None = None
    task_id: Id | None = None
    conversation_id: Id | None = None
    trial: int | None = None  # >= 0; warmup episodes count down from -1
    seed: int | None = None
    warmup: bool | None = None
    attempt: int | None = None
    agent: Any = None
    user: Any = None
    reward: float | None = Field(None, ge=0, le=1)
    reward_breakdown: dict[str, Any] | None = None
    # τ² tasks with natural-language assertions and no judge: the reward covers the other
    # components only (a partial reward, never reported as a full one).
    reward_partial: bool | None = None
    grader_version: Any = None
    data_version: Any = None
    termination: str | None = None
    error: str | None = None
    counts: dict[str, Any] | None = None
    durations: Durations | None = None
    started_at: float | None = None
    start_ns: int | None = None
    end_ns: int | None = None
    intended_start_ns: int | None = None
    sched_delay_s: float | None = None
    num_messages: int | None = None
    category: Any = None  # the task's category (episodes)
    db_seed: int | None = None  # the database the task is written against (episodes)
    tau2_termination: str | None = None  # τ²'s own name of the ending
    models: list[str] | None = None  # proxy: the models the session's calls named
    history: Any = None  # replay: how the conversation's history was built
    replay: ReplaySession | None = None
    synthetic: dict[str, Any] | None = None  # synthetic: its lengths and turns as sent

    @model_validator(mode="after")
    def _trial_sign(self) -> SessionRecord:
        if self.trial is not None and self.trial < 0 and not self.warmup:
            raise ValueError("trial: negative, but the session is not a warmup episode")
        return self

    @property
    def key(self) -> tuple[str, int]:
        """(task, trial) identity; replayed conversations key by conversation id."""
        task = self.task_id or self.conversation_id or self.session_id
        return (str(task), self.trial or 0)

    def duration(self, name: str) -> float | None:
        d = self.durations
        v = getattr(d, name, None) if d is not None else None
        return None if v is None else float(v)

    def count(self, name: str) -> int | float:
        v = (self.counts or {}).get(name)
        return v if isinstance(v, int | float) and not isinstance(v, bool) else 0


# ---- trajectories --------------------------------------------------------------------------


class FunctionCall(_Model):
    name: str | None = None
    arguments: Any = None  # a JSON string in the OpenAI format; some datasets hold an object


class ToolCall(_Model):
    id: Id | None = None
    type: str | None = None
    function: FunctionCall | None = None


class Message(_Model):
    """One chat message (OpenAI format): a turn of the system, user, assistant or a tool."""

    role: str
    content: Any = None  # text, a list of parts, or null beside tool calls
    tool_calls: list[ToolCall] | None = None
    tool_call_id: Id | None = None
    name: str | None = None


class TrajectoryRecord(Record):
    """One line of trajectories.jsonl: the whole conversation of a finished episode."""

    FAMILY: ClassVar[str] = "agentload.trajectory"
    VERSION: ClassVar[int] = TRAJECTORY_VERSION

    kind: str | None = None
    run_id: str | None = None
    session_id: Id | None = None
    domain: str | None = None
    task_id: Id | None = None
    conversation_id: Id | None = None
    trial: int | None = None  # warmup episodes count down from -1
    seed: int | None = None
    db_seed: int | None = None
    messages: list[Message] = Field(default_factory=list)
    tools: list[dict[str, Any]] = Field(default_factory=list)
    action_format: str | None = None
    reward: float | None = None
    termination: str | None = None
    grade: dict[str, Any] | None = None
    tau2: dict[str, Any] | None = None  # τ²'s own trajectory, reward info and user side


# ---- the writers' records ------------------------------------------------------------------


class Line(msgspec.Struct, frozen=True, kw_only=True):
    """A record as its writer builds it (see the module docs); read like a mapping."""

    SOMETIMES: ClassVar[tuple[str, ...]] = ()
    """The fields written only when set (the others are required)."""

    def line(self) -> dict[str, Any]:
        """The JSON object written: every field in order, less those not set."""
        d = msgspec.structs.asdict(self)
        for f in self.SOMETIMES:  # a few; asdict is C, a filter of every field is not
            if d[f] is msgspec.UNSET:
                del d[f]
        return d

    def get(self, key: str, default: Any = None) -> Any:
        v = getattr(self, key, msgspec.UNSET) if key in self.__struct_fields__ else msgspec.UNSET
        return default if v is msgspec.UNSET else v

    def __getitem__(self, key: str) -> Any:
        v = self.get(key, msgspec.UNSET)
        if v is msgspec.UNSET:
            raise KeyError(key)
        return v

    def keys(self) -> KeysView[str]:
        return self.line().keys()


STAMP = ("run_id", "warmup", "attempt", "intended_start_ns", "sched_delay_s")
"""The run's fields of a session line (agentload.session.host.stamp_session)."""

_NULLABLE = frozenset({"error"})  # always written, null when there is none


def _wire_type(tp: Any, nullable: bool) -> Any:
    """The writer's type of a reader's field: its `None` dropped (unless `nullable`), and a
    nested reader model (`Durations`, `Message`) a plain JSON object, as writers pass them."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [_wire_type(a, True) for a in typing.get_args(tp)]
        if not nullable:
            args = [a for a in args if a is not type(None)]
        return args[0] if len(args) == 1 else typing.Union[tuple(args)]  # noqa: UP007
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return dict[str, Any]
    if origin is list:
        (item,) = typing.get_args(tp) or (Any,)
        return list[_wire_type(item, True)]  # type: ignore[misc]
    return tp


def writer_record(
    name: str, reader: type[Record], schema: str, always: str, sometimes: Sequence[str] = ()
) -> type[Line]:
    """The record class of one writer, derived from the `reader`'s declarations: the fields
    in `always` (space separated, in the order written) required, those in `sometimes`
    written only when set. `schema` and `schema_version` (the reader's) are filled in."""
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = [
        ("schema", str, schema),
        ("schema_version", int, reader.VERSION),
    ]
    decl = reader.model_fields
    # Interned names: a keyword argument then finds its field by identity (building a
    # record costs half as much as with the split strings).
    for f in map(sys.intern, always.split()):
        fields.append((f, _wire_type(decl[f].annotation, f in _NULLABLE)))
    for f in map(sys.intern, sometimes):
        fields.append((f, _wire_type(decl[f].annotation, False) | msgspec.UnsetType, msgspec.UNSET))
    # Required fields may follow defaulted ones (kw_only); the module makes them picklable
    # (records travel from worker processes).
    cls = msgspec.defstruct(
        name,
        fields,
        bases=(Line,),
        module=__name__,
        namespace={"SOMETIMES": tuple(sometimes)},
        frozen=True,
        kw_only=True,
        # Records hold data only, never a cycle: the collector need not track them, which
        # makes building one cheaper (msgspec's `gc=False`).
        gc=False,
    )
    return typing.cast(type[Line], cls)


EpisodeSessionLine = writer_record(
    "EpisodeSessionLine",
    SessionRecord,
    SESSION_SCHEMA,
    "session_id domain task_id trial seed agent user reward reward_breakdown grader_version"
    " data_version termination error counts durations started_at start_ns end_ns"
    " num_messages category db_seed",
    ("reward_partial", "tau2_termination", *STAMP),
)
ReplaySessionLine = writer_record(
    "ReplaySessionLine",
    SessionRecord,
    SESSION_SCHEMA,
    "kind session_id task_id conversation_id trial history termination error counts"
    " durations started_at start_ns end_ns replay",
    STAMP,
)
ProxySessionLine = writer_record(
    "ProxySessionLine",
    SessionRecord,
    SESSION_SCHEMA,
    "kind run_id session_id task_id trial warmup termination error models counts durations"
    " started_at start_ns end_ns",
)
SyntheticSessionLine = writer_record(
    "SyntheticSessionLine",
    SessionRecord,
    SESSION_SCHEMA,
    "kind session_id task_id trial termination error counts durations started_at start_ns"
    " end_ns synthetic",
    STAMP,
)
EpisodeTrajectoryLine = writer_record(
    "EpisodeTrajectoryLine",
    TrajectoryRecord,
    TRAJECTORY_SCHEMA,
    "session_id domain task_id trial seed db_seed messages tools action_format reward"
    " termination grade",
    ("tau2",),
)
ReplayTrajectoryLine = writer_record(
    "ReplayTrajectoryLine",
    TrajectoryRecord,
    TRAJECTORY_SCHEMA,
    "kind session_id task_id conversation_id trial messages tools termination",
)
ProxyTrajectoryLine = writer_record(
    "ProxyTrajectoryLine",
    TrajectoryRecord,
    TRAJECTORY_SCHEMA,
    "kind run_id session_id task_id trial messages tools termination",
)


# ---- writing -------------------------------------------------------------------------------


def _data(rec: Mapping[str, Any] | Record | Line) -> Mapping[str, Any]:
    if isinstance(rec, Line):
        return rec.line()
    return rec.dump() if isinstance(rec, Record) else rec


def session_line(session: Mapping[str, Any] | SessionRecord | Line) -> dict[str, Any]:
    """The object written to sessions.jsonl: the writer's fields, stamped with the schema and
    version (first in the line, as before). No validation: readers do that."""
    return _stamped(_data(session), SESSION_SCHEMA, SESSION_VERSION)


def trajectory_line(traj: Mapping[str, Any] | TrajectoryRecord | Line) -> dict[str, Any]:
    return _stamped(_data(traj), TRAJECTORY_SCHEMA, TRAJECTORY_VERSION)


def _stamped(data: Mapping[str, Any], schema: str, version: int) -> dict[str, Any]:
    if type(data) is dict and _leads(data, schema, version):
        return data  # a record's line: stamped when it was built
    out: dict[str, Any] = {"schema": schema, "schema_version": version}
    out.update(data)
    out["schema"], out["schema_version"] = schema, version
    return out


def _leads(data: dict[str, Any], schema: str, version: int) -> bool:
    # A record's line (`Line.line()`) starts with `schema` and holds this version already.
    return (
        data.get("schema_version") == version
        and data.get("schema") == schema
        and next(iter(data)) == "schema"
    )


# ---- reading -------------------------------------------------------------------------------

R = TypeVar("R", bound=Record)


def parse(cls: type[R], data: Mapping[str, Any], where: str) -> R:
    """Validate one record; ResultsError `where: field=value (why)` when it does not fit."""
    try:
        version_of(data, cls)
        return cls.model_validate(data)
    except ValidationError as e:
        raise ResultsError(f"{where}: " + "; ".join(w for _, w in field_errors(e))) from None
    except ValueError as e:
        raise ResultsError(f"{where}: {e}") from None


def parse_lenient(cls: type[R], data: Mapping[str, Any]) -> tuple[R, list[str]]:
    """Validate, leaving out each field that does not fit (named in the list returned).
    The version is checked by the caller (`version_of`)."""
    rec = dict(data)
    problems: list[str] = []
    for _ in range(4):  # each round nulls the fields named; nested errors null the block
        try:
            return cls.model_validate(rec), problems
        except ValidationError as e:
            for loc, what in field_errors(e):
                top = loc.split(".")[0]
                if top in rec:  # the default (null, or an empty list) stands in
                    problems.append(what)
                    del rec[top]
    return cls.model_validate({}), problems  # not reached: every field has a default


def parse_session(data: Mapping[str, Any], where: str = "session") -> SessionRecord:
    return parse(SessionRecord, data, where)


def parse_trajectory(data: Mapping[str, Any], where: str = "trajectory") -> TrajectoryRecord:
    return parse(TrajectoryRecord, data, where)


# ---- summary.json --------------------------------------------------------------------------


class Describe(_Model):
    """`agentload.stats.describe`: count, mean, std, min, max and p10 .. p99.9 (as extras,
    keyed "p50", "p99.9"; read any of them with `stat`)."""

    count: int = 0
    mean: float | None = None
    std: float | None = None
    min: float | None = None
    max: float | None = None
    thin: list[str] = []
    """Percentiles too few values carry (agentload.stats.min_samples)."""

    def stat(self, key: str) -> float | None:
        """A figure by name: "mean", "max", ... or a percentile "p99", "p99.9"."""
        v = (
            getattr(self, key)
            if key in Describe.model_fields
            else (self.model_extra or {}).get(key)
        )
        return None if v is None or isinstance(v, bool) else float(v)


class ItlBlock(_Model):
    calls: int = 0
    gaps: int = 0
    mean: float | None = None
    max: float | None = None
    all_gaps: Describe | None = None
    per_call_p50: Describe | None = None
    per_call_p90: Describe | None = None
    per_call_p99: Describe | None = None


class Tokens(_Model):
    prompt: int = 0
    cached: int = 0
    completion: int = 0
    reasoning: int = 0
    calls_reporting_cached: int = 0
    cached_share: float | None = None
    estimated_calls: int = 0


class Throughput(_Model):
    calls_per_s: float | None = None
    output_tokens_per_s: float | None = None
    prompt_tokens_per_s: float | None = None


class CallBlock(_Model):
    calls: int = 0
    ok: int = 0
    failed: int = 0
    ttft_s: Describe = Field(default_factory=Describe)
    e2e_s: Describe = Field(default_factory=Describe)
    tpot_s: Describe = Field(default_factory=Describe)
    itl_s: ItlBlock = Field(default_factory=ItlBlock)
    tokens: Tokens = Field(default_factory=Tokens)
    throughput: Throughput = Field(default_factory=Throughput)


class CallsSection(_Model):
    all: CallBlock = Field(default_factory=CallBlock)
    by_role: dict[str, CallBlock] = Field(default_factory=dict)
    by_endpoint: dict[str, CallBlock] = Field(default_factory=dict)
    by_role_endpoint: dict[str, CallBlock] = Field(default_factory=dict)


class Window(_Model):
    """`window`: first start to last end of what counts (agentload.results.window)."""

    start: float | None = None
    end: float | None = None
    duration_s: float | None = None
    running_s: float | None = None
    """The attempts' own spans (downtime between a run and its resume left out): every rate
    divides by it."""
    active_s: float | None = None
    source: str | None = None
    clock: str | None = None
    wall_clock_step_s: float | None = None

    def rate_seconds(self) -> float | None:
        """The seconds every rate of a run divides by: the time it ran, downtime between
        attempts excluded (`duration_s` for a window written before `running_s` existed)."""
        running = self.running_s if self.running_s is not None else self.duration_s
        return running or None


class SummaryCounts(_Model):
    calls: int = 0
    warmup_calls: int = 0
    unfinished_calls: int = 0
    sessions: int = 0
    warmup_sessions: int = 0


class TurnRow(_Model):
    turn: int
    calls: int = 0
    ttft_s: dict[str, float | int | None] = Field(default_factory=dict)
    e2e_s: dict[str, float | int | None] = Field(default_factory=dict)
    prompt_tokens_mean: float | None = None
    cached_share: float | None = None


class EpisodeGroup(_Model):
    """Success figures of a set of episodes (the whole run, or one domain)."""

    episodes: int = 0
    tasks: int = 0
    trials_per_task: dict[str, int] | None = None
    successes: int = 0
    success_rate: float | None = None
    mean_reward: float | None = None
    pass_hat_k: dict[str, float] = Field(default_factory=dict)
    # Episodes left out of the figures above: partial rewards (τ² NL assertions, no judge)
    # and episodes that ended on infrastructure errors; `graded_episodes` the rest.
    partial: dict[str, Any] | None = None
    infra_error: dict[str, Any] | None = None
    graded_episodes: int | None = None


class Episodes(EpisodeGroup):
    """The `episodes` block: task success (reward, pass^k) and episode timing; present for
    the workload kinds that grade their sessions, never for a replay run."""

    by_domain: dict[str, EpisodeGroup] = Field(default_factory=dict)
    terminations: dict[str, int] = Field(default_factory=dict)
    with_error: int = 0
    duration_s: Describe = Field(default_factory=Describe)
    time_split: dict[str, float | None] = Field(default_factory=dict)
    counts: dict[str, int | float] = Field(default_factory=dict)
    episodes_per_min: float | None = None
    successes_per_min: float | None = None
    tokens_per_success: dict[str, float | None] = Field(default_factory=dict)


class SloCondition(_Model):
    metric: str
    stat: str
    threshold: float
    observed: float | None = None
    met: bool = False
    attainment: float | None = None


class SloBlock(_Model):
    thresholds: dict[str, float] = Field(default_factory=dict)
    role: str = "all"
    conditions: dict[str, SloCondition] = Field(default_factory=dict)
    all_met: bool = False
    call_attainment: float | None = None
    sessions_meeting_slo: int = 0
    session_attainment: float | None = None
    good_sessions: int = 0
    goodput_per_min: float | None = None


class EngineStopped(_Model):
    """`errors.engine_stopped`: every call after the server's last answer failed to connect."""

    ok_calls: int = 0
    failed_after: int = 0
    stopped_at: float | None = None
    in_flight: list[dict[str, Any]] = Field(default_factory=list)
    sent: dict[str, dict[str, Any]] = Field(default_factory=dict)
    message: str = ""


class Errors(_Model):
    calls_failed: int = 0
    error_rate: float | None = None
    by_kind: dict[str, int] = Field(default_factory=dict)
    by_role: dict[str, dict[str, int]] = Field(default_factory=dict)
    retried_calls: int = 0
    messages: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)
    engine_stopped: EngineStopped | None = None


class Scheduling(_Model):
    sched_delay_s: Describe = Field(default_factory=Describe)


class IntegrityCounts(_Model):
    bad_lines: int = 0
    skipped_records: int = 0
    flagged_records: int = 0
    duplicates: int = 0


class FileIntegrityBlock(IntegrityCounts):
    examples: list[str] = Field(default_factory=list)


class IntegrityBlock(IntegrityCounts):
    files: dict[str, FileIntegrityBlock] = Field(default_factory=dict)


class UpperBound(_Model):
    """Early-stopping upper bounds of a percentile at a confidence (docs/replay.md)."""

    confidence: float | None = None
    p90: float | None = None
    p99: float | None = None


class ReplayWindow(_Model):
    window: str | None = None
    start: float | None = None
    end: float | None = None
    duration_s: float | None = None
    conversations_ended: int = 0
    calls: int = 0
    failed_calls: int = 0
    calls_per_s: float | None = None
    output_tokens: int = 0
    output_tokens_per_s: float | None = None
    ttft_s: Describe = Field(default_factory=Describe)
    e2e_s: Describe = Field(default_factory=Describe)
    ttft_s_upper_bound: UpperBound | None = None


class ReplayTurn(_Model):
    turn: int
    calls: int = 0
    failed: int = 0
    diverged: int = 0
    ttft_s: Describe = Field(default_factory=Describe)
    cached_share: float | None = None
    prompt_tokens_mean: float | None = None


class ReplayBlock(_Model):
    """`replay`: a replay run's own roll-ups (docs/replay.md); absent for other kinds."""

    conversations: int = 0
    history: list[str] = Field(default_factory=list)
    terminations: dict[str, int] = Field(default_factory=dict)
    turns: int = 0
    turns_sent: int = 0
    turns_aborted: int = 0
    divergences: int = 0
    conversation_duration_s: Describe = Field(default_factory=Describe)
    conversation_duration_s_upper_bound: UpperBound | None = None
    send_lag_s: Describe = Field(default_factory=Describe)
    output_tokens: dict[str, int] = Field(default_factory=dict)
    windows: dict[str, ReplayWindow] = Field(default_factory=dict)
    by_turn: list[ReplayTurn] = Field(default_factory=list)
    warm_cache: dict[str, Any] | None = None
    """The run's first call mostly cached: the server held the dataset before the run."""


class ClientBlock(_Model):
    """`client`: the harness's own figures (added by `agentload run`; docs/results.md)."""

    event_loop_lag_s: Describe | None = None
    sched_delay_s: Describe | None = None
    stop_reason: str | None = None
    elapsed_s: float | None = None
    cpu_s: float | None = None
    """CPU seconds of the client process over `elapsed_s` (the driver's, over workers)."""
    episodes_cancelled: int | None = None
    workers: list[Any] | None = None
    """A run over worker processes: each worker's health (agentload.distributed.driver)."""


class ProxyBlock(_Model):
    """`proxy`: what `agentload proxy` forwarded and the time it added
    (docs/external-agents.md)."""

    upstream: str | None = None
    sessions: int = 0
    calls: int = 0


class Summary(Record):
    """summary.json (docs/results.md). Blocks of one workload kind (`episodes`, `replay`)
    are absent from the others' summaries; `client` is added by `agentload run`."""

    FAMILY: ClassVar[str] = "agentload.summary"
    VERSION: ClassVar[int] = SUMMARY_VERSION
    ADDED: ClassVar[tuple[str, ...]] = ("client", "proxy")
    """Blocks the service that ran the load adds; the records alone cannot give them."""

    agentload_version: str | None = None
    generated_at: float | None = None
    run: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    window: Window = Field(default_factory=Window)
    counts: SummaryCounts = Field(default_factory=SummaryCounts)
    calls: CallsSection = Field(default_factory=CallsSection)
    turns: dict[str, list[TurnRow]] = Field(default_factory=dict)
    distributions: dict[str, dict[str, list[float] | None]] = Field(default_factory=dict)
    episodes: Episodes | None = None
    slo: SloBlock | None = None
    errors: Errors = Field(default_factory=Errors)
    scheduling: Scheduling = Field(default_factory=Scheduling)
    server: dict[str, Any] | None = None
    gpu: dict[str, Any] | None = None
    integrity: IntegrityBlock = Field(default_factory=IntegrityBlock)
    client: ClientBlock | None = None
    replay: ReplayBlock | None = None
    proxy: ProxyBlock | None = None

    def agent_calls(self) -> CallBlock:
        """The agent's call block; all calls' when the run had no agent role."""
        return self.calls.by_role.get("agent") or self.calls.all


def as_summary(data: Summary | Mapping[str, Any] | None) -> Summary:
    """A summary to read by attribute: a Summary as it is, a dict validated with the blocks
    that do not fit left out (a partial or damaged summary still reads)."""
    if isinstance(data, Summary):
        return data
    return parse_lenient(Summary, data or {})[0]


def summary_json(summary: Summary | Mapping[str, Any]) -> bytes:
    """summary.json's bytes (indented): a Summary dumps as built, a mapping is checked
    against the model first so that a writer's mistake fails here, not in a reader."""
    if not isinstance(summary, Summary):
        summary = parse(Summary, summary, "summary")
    opts = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
    return orjson.dumps(summary.dump(), option=opts) + b"\n"


def write_summary_file(path: Path, summary: Summary | Mapping[str, Any]) -> Path:
    atomic_write_bytes(path, summary_json(summary))
    return path


def _line_of(text: bytes, key: str) -> int:
    i = text.find(f'"{key}"'.encode())
    return 1 if i < 0 else text.count(b"\n", 0, i) + 1


def load_summary(path: Path | str) -> Summary:
    """Read and validate summary.json; ResultsError naming `file:line` and the field when it
    is unreadable, of a newer schema_version, or a figure has the wrong type."""
    path = Path(path)
    try:
        text = path.read_bytes()
    except OSError as e:
        raise ResultsError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise ResultsError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise ResultsError(f"{path}:1: expected a JSON object")
    try:
        version_of(data, Summary)
    except ValueError as e:
        raise ResultsError(f"{path}:{_line_of(text, 'schema_version')}: {e}") from None
    try:
        return Summary.model_validate(data)
    except ValidationError as e:
        loc, what = field_errors(e)[0]
        line = _line_of(text, loc.split(".")[-1] if loc else "schema")
        raise ResultsError(f"{path}:{line}: {what}") from None
