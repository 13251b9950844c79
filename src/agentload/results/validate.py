"""Checking records before they are aggregated: odd values are flagged, never a crash.

A summary reads what is in the folder, which may have been written by another version, edited,
or damaged. Each record is checked field by field:

- a field of the wrong type or with an impossible value (`"prompt_tokens": "many"`, a negative
  or NaN duration, an `end_ns` before `start_ns`) is set to null and the record is *flagged*
  (it still counts, without that value);
- a record that cannot be placed (no usable identity, another schema version) is *skipped*;
- a record seen twice (the same call, the same session, the same (task, trial)) is counted
  once: the first is kept, the others are *duplicates*.

Every case is logged with `file:line` (the first few per file) and counted in summary.json's
`integrity` block.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentload.results.jsonl import JsonlRead
from agentload.results.records import SessionRecord, parse_lenient, version_of

log = logging.getLogger("agentload.results")

MAX_LOGGED = 5

CALL_SCHEMA_PREFIX = "agentload.call/"
SUPPORTED_MAJOR = "1"

# Non-negative numbers (durations in s, token counts, monotonic ns).
_CALL_NONNEG = (
    "ttft_s",
    "e2e_s",
    "tpot_s",
    "total_s",
    "prompt_tokens",
    "cached_tokens",
    "completion_tokens",
    "reasoning_tokens",
    "start_ns",
    "headers_ns",
    "first_token_ns",
    "end_ns",
    "attempts",
    "num_tool_calls",
    "token_chunks",
    "http_status",
)
_CALL_NUM = ("started_at",)
_ITL_FIELDS = ("count", "mean", "p50", "p90", "p99", "max")
_SESSION_NONNEG = ("start_ns", "end_ns", "intended_start_ns")
_SESSION_NUM = ("started_at", "sched_delay_s")
_DURATIONS = ("total_s", "llm_s", "tool_s", "user_s")


@dataclass
class FileIntegrity:
    bad_lines: int = 0
    skipped: int = 0
    flagged: int = 0
    duplicates: int = 0
    examples: list[str] = field(default_factory=list)

    def note(self, where: str, what: str) -> None:
        if len(self.examples) < MAX_LOGGED:
            self.examples.append(f"{where}: {what}")
            log.warning("%s: %s", where, what)

    def to_dict(self) -> dict[str, Any]:
        return {
            "bad_lines": self.bad_lines,
            "skipped_records": self.skipped,
            "flagged_records": self.flagged,
            "duplicates": self.duplicates,
            "examples": self.examples,
        }


@dataclass
class Integrity:
    files: dict[str, FileIntegrity] = field(default_factory=dict)

    def of(self, name: str) -> FileIntegrity:
        return self.files.setdefault(name, FileIntegrity())

    def to_dict(self) -> dict[str, Any]:
        files = {k: v.to_dict() for k, v in sorted(self.files.items())}
        total = Counter[str]()
        for v in self.files.values():
            total.update(
                {
                    "bad_lines": v.bad_lines,
                    "skipped_records": v.skipped,
                    "flagged_records": v.flagged,
                    "duplicates": v.duplicates,
                }
            )
        keys = ("bad_lines", "skipped_records", "flagged_records", "duplicates")
        return {**{k: int(total[k]) for k in keys}, "files": files}


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


# A duration beyond this (about 116 days) is not a measurement; it would overflow statistics.
MAX_SECONDS = 1e7


def _check_num(
    rec: dict[str, Any], key: str, nonneg: bool, problems: list[str], seconds: bool = False
) -> None:
    v = rec.get(key)
    if v is None:
        return
    too_long = (seconds or key.endswith("_s")) and _is_num(v) and abs(v) > MAX_SECONDS
    if not _is_num(v) or (nonneg and v < 0) or too_long:
        problems.append(f"{key}={_show(v)}")
        rec[key] = None


def _check_nested(rec: dict[str, Any], name: str, keys: Any, problems: list[str]) -> None:
    """`rec[name]`, when present, must be a dict of non-negative numbers (seconds, but for
    `count`): odd values are nulled, a non-dict is nulled whole."""
    v = rec.get(name)
    if v is None:
        return
    if not isinstance(v, dict):
        problems.append(f"{name}={_show(v)}")
        rec[name] = None
        return
    v = dict(v)
    for key in keys:
        _check_num(v, key, True, problems, seconds=key != "count")
    rec[name] = v


def _check_str(
    rec: dict[str, Any], keys: Any, problems: list[str], fallback: Mapping[str, Any] = {}
) -> None:
    """Fields that must be strings when present; others are replaced by their fallback."""
    for key in keys:
        v = rec.get(key)
        if v is not None and not isinstance(v, str):
            problems.append(f"{key}={_show(v)}")
            rec[key] = fallback.get(key)


def _check_order(rec: dict[str, Any], problems: list[str]) -> None:
    s, e = rec.get("start_ns"), rec.get("end_ns")
    if s is not None and e is not None and e < s:
        problems.append("end_ns before start_ns")
        rec["start_ns"] = rec["end_ns"] = None


def _show(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def _schema_ok(rec: Mapping[str, Any], prefix: str) -> str | None:
    """None when usable, else why not."""
    schema = rec.get("schema")
    if schema is None:
        return None
    if not isinstance(schema, str):
        return f"schema is {_show(schema)}"
    if schema.startswith(prefix) and schema[len(prefix) :] != SUPPORTED_MAJOR:
        return f"unsupported schema {schema!r} (this agentload reads {prefix}{SUPPORTED_MAJOR})"
    return None


def _scalar_id(v: Any) -> bool:
    return v is None or (isinstance(v, str | int) and not isinstance(v, bool))


_CALL_BOUNDS = tuple((k, MAX_SECONDS if k.endswith("_s") else 1e300) for k in _CALL_NONNEG)
_ITL_BOUNDS = tuple((k, 1e300 if k == "count" else MAX_SECONDS) for k in _ITL_FIELDS)
_CALL_STR = ("status", "role", "endpoint", "error_kind", "model")
_CALL_SCHEMA = CALL_SCHEMA_PREFIX + SUPPORTED_MAJOR


def _call_fast_ok(rec: Mapping[str, Any]) -> bool:
    """True for a record with nothing odd (nearly all of them): no copy, no per-field report.
    Anything it does not recognise goes through the detailed checks."""
    schema = rec.get("schema")
    if schema is not None and schema != _CALL_SCHEMA:
        return False
    for k, hi in _CALL_BOUNDS:
        v = rec.get(k)
        if v is None:
            continue
        t = type(v)
        if (t is not int and t is not float) or not 0 <= v <= hi:
            return False
    v = rec.get("started_at")
    if v is not None and (type(v) not in (int, float) or not -1e300 < v < 1e300):
        return False
    turn = rec.get("turn")
    if turn is not None and type(turn) is not int:
        return False
    for k in ("session_id", "call_id"):
        v = rec.get(k)
        if v is not None and type(v) is not str and type(v) is not int:
            return False
    for k in _CALL_STR:
        v = rec.get(k)
        if v is not None and type(v) is not str:
            return False
    itl = rec.get("itl")
    if itl is not None:
        if type(itl) is not dict:
            return False
        for k, hi in _ITL_BOUNDS:
            v = itl.get(k)
            if v is not None and (
                (type(v) is not int and type(v) is not float) or not 0 <= v <= hi
            ):
                return False
    s, e = rec.get("start_ns"), rec.get("end_ns")
    return s is None or e is None or e >= s


def clean_calls(read: JsonlRead, integ: Integrity) -> list[dict[str, Any]]:
    fi = integ.of(read.path.name)
    fi.bad_lines += len(read.bad)
    out: list[dict[str, Any]] = []
    seen: set[tuple[Any, ...]] = set()
    for i, raw in enumerate(read.records):
        if _call_fast_ok(raw):
            ident = (
                raw.get("call_id"),
                raw.get("session_id"),
                raw.get("start_ns"),
                raw.get("end_ns"),
            )
            if ident[0] is None or ident not in seen:
                seen.add(ident)
                out.append(raw)
                continue
        where = read.where(i)
        why = _schema_ok(raw, CALL_SCHEMA_PREFIX)
        if why is None and not _scalar_id(raw.get("session_id")):
            why = f"session_id is {_show(raw.get('session_id'))}"
        if why is None and not _scalar_id(raw.get("call_id")):
            why = f"call_id is {_show(raw.get('call_id'))}"
        if why is not None:
            fi.skipped += 1
            fi.note(where, f"record skipped: {why}")
            continue
        rec = dict(raw)
        problems: list[str] = []
        for key in _CALL_NONNEG:
            _check_num(rec, key, True, problems)
        for key in _CALL_NUM:
            _check_num(rec, key, False, problems)
        turn = rec.get("turn")
        if turn is not None and not (isinstance(turn, int) and not isinstance(turn, bool)):
            problems.append(f"turn={_show(turn)}")
            rec["turn"] = None
        _check_nested(rec, "itl", _ITL_FIELDS, problems)
        _check_str(rec, _CALL_STR, problems, {"status": "error"})
        _check_order(rec, problems)
        ident = (rec.get("call_id"), rec.get("session_id"), rec.get("start_ns"), rec.get("end_ns"))
        if rec.get("call_id") is not None and ident in seen:
            fi.duplicates += 1
            fi.note(where, f"duplicate of call {rec.get('call_id')!r}: counted once")
            continue
        seen.add(ident)
        if problems:
            fi.flagged += 1
            fi.note(where, "odd values set to null: " + ", ".join(problems))
        out.append(rec)
    return out


def _session_unplaceable(raw: Mapping[str, Any]) -> str | None:
    """Why a session line cannot be counted at all (None when it can)."""
    try:
        version_of(raw, SessionRecord)
    except ValueError as e:
        return str(e)
    trial = raw.get("trial")
    if not _scalar_id(raw.get("session_id")):
        return f"session_id is {_show(raw.get('session_id'))}"
    if trial is not None and not (isinstance(trial, int) and not isinstance(trial, bool)):
        return f"trial is {_show(trial)}"
    if trial is not None and trial < 0 and raw.get("warmup") is not True:
        return f"trial is {_show(trial)} (only warmup episodes have negative trials)"
    if not _scalar_id(raw.get("task_id")):
        return f"task_id is {_show(raw.get('task_id'))}"
    return None


def _check_session(raw: Mapping[str, Any]) -> tuple[SessionRecord, list[str]]:
    """The typed session, with odd values left out and named."""
    rec = dict(raw)
    problems: list[str] = []
    for key in _SESSION_NONNEG:
        _check_num(rec, key, True, problems)
    for key in _SESSION_NUM:
        _check_num(rec, key, False, problems)
    r = rec.get("reward")
    if r is not None and not (_is_num(r) and 0 <= r <= 1):
        problems.append(f"reward={_show(r)}")
        rec["reward"] = None
    _check_nested(rec, "durations", _DURATIONS, problems)
    _check_str(rec, ("termination", "domain"), problems)
    _check_order(rec, problems)
    session, more = parse_lenient(SessionRecord, rec)
    return session, problems + more


def clean_sessions(read: JsonlRead, integ: Integrity) -> list[SessionRecord]:
    """The sessions of sessions.jsonl as typed records (agentload.results.records)."""
    fi = integ.of(read.path.name)
    fi.bad_lines += len(read.bad)
    out: list[SessionRecord] = []
    seen_ids: set[str] = set()
    seen_keys: set[tuple[str, int]] = set()
    for i, raw in enumerate(read.records):
        where = read.where(i)
        why = _session_unplaceable(raw)
        if why is not None:
            fi.skipped += 1
            fi.note(where, f"record skipped: {why}")
            continue
        rec, problems = _check_session(raw)
        sid = rec.session_id
        task = rec.task_id or rec.conversation_id or sid
        tkey = rec.key
        dup = (sid is not None and str(sid) in seen_ids) or (
            not rec.warmup and task is not None and tkey in seen_keys
        )
        if dup:
            fi.duplicates += 1
            fi.note(
                where, f"duplicate of session {sid!r} ({tkey[0]}, trial {tkey[1]}): not counted"
            )
            continue
        if sid is not None:
            seen_ids.add(str(sid))
        if not rec.warmup and task is not None:
            seen_keys.add(tkey)
        if problems:
            fi.flagged += 1
            fi.note(where, "odd values set to null: " + ", ".join(problems))
        out.append(rec)
    return out


_SAMPLE_NUM = ("t", "scrape_s")


def clean_samples(read: JsonlRead, integ: Integrity) -> list[dict[str, Any]]:
    """server_metrics.jsonl: a sample without a usable time is skipped; other non-numbers are
    dropped from the sample."""
    fi = integ.of(read.path.name)
    fi.bad_lines += len(read.bad)
    out: list[dict[str, Any]] = []
    for i, raw in enumerate(read.records):
        if not _is_num(raw.get("t")):
            fi.skipped += 1
            fi.note(read.where(i), f"record skipped: t is {_show(raw.get('t'))}")
            continue
        rec: dict[str, Any] = {}
        problems: list[str] = []
        for k, v in raw.items():
            if k in ("endpoint", "url", "engine", "error"):
                rec[k] = v if v is None or isinstance(v, str) else str(v)
            elif k in ("ok", "schema") or v is None or _is_num(v):
                rec[k] = v
            else:
                problems.append(f"{k}={_show(v)}")
        if problems:
            fi.flagged += 1
            fi.note(read.where(i), "odd values dropped: " + ", ".join(problems))
        out.append(rec)
    return out
