"""A run's τ² episodes as τ²-bench results files (`agentload export DIR --format tau2`).

One file per τ² domain of the run, in the shape of τ²-bench's `Results` (v1.0.1): `info`
(the agent, the user simulator, the domain's policy, the step and error limits), `tasks` (τ²'s
own task records, read from the data folder the run used) and `simulations` (one per
episode: τ²'s messages, termination reason, reward info, times, trial and seed). τ²'s viewer
and analysis scripts open it, and its evaluator can re-grade it.

What τ² has no field for goes under `info["agentload"]` of the simulation or of its reward
info: the session id, agentload's termination and counts, whether the reward is partial
(natural-language assertions not judged), the database hashes.

A task's message history (τ²'s `initial_state.message_history`) leads its simulations'
messages, as in τ²'s own results: τ²'s evaluator replays it into the database, as agentload's
episode world did.

Message timestamps are spread evenly over the episode's wall time: agentload records when each
model call ran, not when each message was passed, and τ² orders messages by timestamp.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import yaml

from agentload.domains import get_domain
from agentload.domains.tau2 import FAMILY_PREFIX, Tau2DataError, Tau2Domain, data
from agentload.domains.tau2.data import DATA_ENV
from agentload.domains.tau2.prompts import guidelines
from agentload.results.files import CONFIG, RUN, SESSIONS, TRAJECTORIES
from agentload.results.jsonl import atomic_write_bytes, read_jsonl
from agentload.version import __version__

FILE_PREFIX = "tau2-"
# τ²'s TerminationReason values; anything else is exported as its catch-all.
TERMINATIONS = frozenset(
    {
        "user_stop",
        "agent_stop",
        "max_steps",
        "timeout",
        "too_many_errors",
        "agent_error",
        "user_error",
        "infrastructure_error",
        "context_window_exceeded",
        "unexpected_error",
    }
)
# The τ² RewardInfo fields agentload's grade carries under the same names.
_REWARD_FIELDS = (
    "db_check",
    "env_assertions",
    "action_checks",
    "nl_assertions",
    "communicate_checks",
    "reward_breakdown",
)
# agentload's own grade fields, kept under info["agentload"].
_GRADE_EXTRAS = (
    "partial",
    "grader_version",
    "data_version",
    "db_hash",
    "gold_hash",
    "user_db_hash",
    "gold_user_hash",
    "missing_outputs",
    "judge",
    "error",
)


class Tau2ExportError(Exception):
    """The τ² export cannot proceed; the message is one line for the user."""


@dataclass
class Episode:
    """One finished τ² episode: its session record and its trajectory's `tau2` part."""

    session: dict[str, Any]
    tau2: dict[str, Any]

    @property
    def domain(self) -> str:
        return str(self.tau2.get("domain") or "")


@dataclass
class Tau2Export:
    """What an export wrote and what the user should know about it."""

    paths: list[Path] = field(default_factory=list)
    episodes: dict[str, int] = field(default_factory=dict)  # per τ² domain
    warnings: list[str] = field(default_factory=list)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def _dig(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, Mapping):
            return None
        d = d.get(k)
    return d


def episodes(out_dir: Path) -> list[Episode]:
    """The run's finished, non-warmup τ² episodes, in the order they were recorded."""
    sessions = {
        str(s.get("session_id")): s
        for s in read_jsonl(out_dir / SESSIONS).records
        if not s.get("warmup")
    }
    out = []
    for t in read_jsonl(out_dir / TRAJECTORIES).records:
        tau2 = t.get("tau2")
        session = sessions.get(str(t.get("session_id")))
        if isinstance(tau2, dict) and session is not None:
            out.append(Episode(session, tau2))
    return out


def data_folder(out_dir: Path, override: str | os.PathLike[str] | None) -> Path:
    """The τ² data folder to read tasks from: `override`, else the one the run recorded
    (run.json, then config.yaml), else AGENTLOAD_TAU2_DATA."""

    if override is not None:
        return Path(override).expanduser()
    recorded = [
        _dig(_read_json(out_dir / RUN), "tau2", "data_dir"),
        _dig(_read_yaml(out_dir / CONFIG), "workload", "tau2", "data"),
    ]
    for p in recorded:
        if isinstance(p, str) and p and Path(p).expanduser().is_dir():
            return Path(p).expanduser()
    env = os.environ.get(DATA_ENV)
    if env:
        return Path(env).expanduser()
    named = next((p for p in recorded if isinstance(p, str) and p), None)
    where = f"the run's folder {named} is gone; " if named else ""
    raise Tau2ExportError(f"no τ²-bench data folder: {where}give --tau2-data DIR or set {DATA_ENV}")


@contextlib.contextmanager
def _reading(folder: Path) -> Iterator[None]:
    """The τ² domains read `folder` for the export; the process's own setting is put back
    after (the export may run inside a longer-lived process)."""

    saved_env, saved = os.environ.get(data.DATA_ENV), data._explicit
    data.configure(folder)
    try:
        yield
    finally:
        data._explicit = saved
        if saved_env is None:
            os.environ.pop(data.DATA_ENV, None)
        else:
            os.environ[data.DATA_ENV] = saved_env
        data._folder.cache_clear()


def _iso(ts: float) -> str:
    # τ² writes local wall-clock times without a zone (datetime.now().isoformat()).
    return datetime.fromtimestamp(ts).isoformat()


def _stamps(start: float, duration: float, n: int) -> list[str]:
    """n strictly increasing timestamps spread over [start, start + duration]."""
    base = datetime.fromtimestamp(start)
    step_us = max(duration, 0.0) * 1e6 / max(n, 1)
    out: list[str] = []
    last = -1
    for i in range(n):
        us = max(round(i * step_us), last + 1)
        last = us
        out.append((base + timedelta(microseconds=us)).isoformat())
    return out


def _history_present(history: Sequence[Mapping[str, Any]], messages: Sequence[Any]) -> bool:
    if len(messages) < len(history):
        return False
    return all(
        isinstance(m, Mapping)
        and m.get("role") == h.get("role")
        and m.get("content") == h.get("content")
        for h, m in zip(history, messages, strict=False)
    )


def _tool_calls(calls: Any, requestor: str) -> list[dict[str, Any]] | None:
    if not calls:
        return None
    return [
        {
            "id": str(c.get("id") or ""),
            "name": str(c.get("name") or ""),
            "arguments": c["arguments"] if isinstance(c.get("arguments"), dict) else {},
            "requestor": c.get("requestor") or requestor,
        }
        for c in calls
    ]


def _message(m: Mapping[str, Any]) -> dict[str, Any]:
    """One message in τ²'s shape (its turn index and timestamp are set by the caller)."""
    role = m.get("role")
    content = m.get("content")
    content = content if isinstance(content, str) or content is None else json.dumps(content)
    if role == "tool":
        return {
            "role": "tool",
            "id": str(m.get("id") or ""),
            "content": content,
            "requestor": m.get("requestor") or "assistant",
            "error": bool(m.get("error")),
        }
    if role in ("assistant", "user"):
        return {
            "role": role,
            "content": content,
            "tool_calls": _tool_calls(
                m.get("tool_calls"), "assistant" if role == "assistant" else "user"
            ),
        }
    return {"role": "system", "content": content}


def messages(
    task: Mapping[str, Any], ep: Episode, start: float, duration: float
) -> list[dict[str, Any]]:
    """The episode's full τ² trajectory: the task's message history (which τ² keeps at the
    start of a simulation's messages and replays when grading), then the episode's."""
    raw = list(ep.tau2.get("messages") or ())
    history = list(_dig(task, "initial_state", "message_history") or ())
    if history and not _history_present(history, raw):
        raw = history + raw
    out = [_message(m) for m in raw if isinstance(m, Mapping)]
    for i, (m, ts) in enumerate(zip(out, _stamps(start, duration, len(out)), strict=True)):
        m["turn_idx"] = i
        m["timestamp"] = ts
    return out


def reward_info(grade: Mapping[str, Any], tool_kinds: Mapping[str, str]) -> dict[str, Any]:
    """agentload's grade in τ²'s RewardInfo shape; agentload's own fields under
    info["agentload"]."""
    out: dict[str, Any] = {"reward": float(grade.get("reward") or 0.0)}
    for k in _REWARD_FIELDS:
        v = grade.get(k)
        if v is not None:
            out[k] = v
    if out.get("action_checks"):
        out["action_checks"] = [
            {**c, "tool_type": tool_kinds.get(str(_dig(c, "action", "name")))}
            for c in out["action_checks"]
        ]
    # τ² leaves reward_basis out (None) for an episode it did not grade.
    out["reward_basis"] = grade.get("reward_basis")
    info = dict(grade.get("info") or {})
    extras = {k: grade[k] for k in _GRADE_EXTRAS if k in grade}
    if extras.get("partial"):
        extras["note"] = (
            "natural-language assertions not judged: the reward covers the other components"
        )
    info["agentload"] = extras
    out["info"] = info
    return out


def _tool_kinds(domain: Any) -> dict[str, str]:
    kinds: dict[str, str] = {}
    for kit in (domain.module.AGENT_KIT, domain.module.USER_KIT):
        if kit is not None:
            kinds.update({name: spec.kind for name, spec in kit.SPECS.items()})
    return kinds


def simulation(
    ep: Episode, task: Mapping[str, Any], tool_kinds: Mapping[str, str]
) -> dict[str, Any]:
    s = ep.session
    start = float(s.get("started_at") or 0.0)
    duration = float(_dig(s, "durations", "total_s") or 0.0)
    term = str(ep.tau2.get("termination_reason") or s.get("tau2_termination") or "")
    grade = ep.tau2.get("reward_info") or {}
    return {
        "id": str(s.get("session_id")),
        "task_id": str(ep.tau2.get("task_id")),
        "timestamp": _iso(start + duration),
        "start_time": _iso(start),
        "end_time": _iso(start + duration),
        "duration": duration,
        "termination_reason": term if term in TERMINATIONS else "unexpected_error",
        "agent_cost": None,
        "user_cost": None,
        "reward_info": reward_info(grade, tool_kinds),
        "messages": messages(task, ep, start, duration),
        "trial": int(s.get("trial") or 0),
        "seed": s.get("seed"),
        "mode": "half_duplex",
        "info": {
            "agentload": {
                "session_id": s.get("session_id"),
                "task_id": s.get("task_id"),
                "run_id": s.get("run_id"),
                "agent": s.get("agent"),
                "user": s.get("user"),
                "termination": s.get("termination"),
                "tau2_termination": term,
                "error": s.get("error"),
                "reward_partial": bool(s.get("reward_partial")),
                "counts": s.get("counts"),
                "durations": s.get("durations"),
            }
        },
    }


def _llm_info(cfg: Mapping[str, Any], run: Mapping[str, Any], role: str) -> dict[str, Any]:
    ep = _dig(run, "endpoints", role) or _dig(cfg, "endpoints", role) or {}
    w = cfg.get("workload") or {}
    args: dict[str, Any] = {}
    temp = ep.get("temperature") if isinstance(ep, Mapping) else None
    temp = temp if temp is not None else w.get("temperature")
    if temp is not None:
        args["temperature"] = temp
    if w.get(f"{role}_max_tokens") is not None:
        args["max_tokens"] = w[f"{role}_max_tokens"]
    model = ep.get("model") if isinstance(ep, Mapping) else None
    return {"llm": model, "llm_args": args or None}


def info(
    domain: Any, cfg: Mapping[str, Any], run: Mapping[str, Any], eps: Sequence[Episode]
) -> dict[str, Any]:

    w = cfg.get("workload") or {}
    t = w.get("tau2") or {}
    first = eps[0].session
    agent = str(first.get("agent") or w.get("agent") or "unknown")
    user = str(first.get("user") or w.get("user") or "unknown")
    has_user_tools = domain.module.USER_KIT is not None
    trials = w.get("trials")
    if not isinstance(trials, int):
        trials = max(int(e.session.get("trial") or 0) for e in eps) + 1
    return {
        "git_commit": f"agentload {run.get('agentload_version') or __version__}",
        "num_trials": trials,
        "max_steps": int(t.get("max_steps") or 200),
        "max_errors": int(t.get("max_errors") or 10),
        "user_info": {
            "implementation": f"agentload-{user}",
            **_llm_info(cfg, run, "user"),
            "global_simulation_guidelines": guidelines(has_user_tools),
        },
        "agent_info": {"implementation": f"agentload-{agent}", **_llm_info(cfg, run, "agent")},
        "environment_info": {"domain_name": domain.key, "policy": domain.policy},
        "seed": w.get("seed") if isinstance(w.get("seed"), int) else None,
    }


def results(
    key: str, eps: Sequence[Episode], cfg: Mapping[str, Any], run: Mapping[str, Any]
) -> dict[str, Any]:
    """τ²'s Results document for the episodes of one domain (`key`: τ²'s domain name)."""

    domain = get_domain(FAMILY_PREFIX + key)
    assert isinstance(domain, Tau2Domain)
    order = {t.tau2_id: i for i, t in enumerate(domain._all_tasks.values())}
    tasks: dict[str, dict[str, Any]] = {}
    for ep in eps:
        tid = str(ep.tau2.get("task_id"))
        if tid not in tasks:
            try:
                tasks[tid] = domain.get_task(f"{domain.name}/{tid}").tau2
            except KeyError:
                raise Tau2ExportError(
                    f"task {tid!r} of the run is not in {domain.name}'s tasks.json of the "
                    "data folder: give --tau2-data the folder the run used"
                ) from None
    kinds = _tool_kinds(domain)
    ordered = sorted(
        eps,
        key=lambda e: (
            order.get(str(e.tau2.get("task_id")), len(order)),
            int(e.session.get("trial") or 0),
            float(e.session.get("started_at") or 0.0),
        ),
    )
    started = run.get("started_at")
    return {
        "timestamp": _iso(float(started)) if isinstance(started, int | float) else None,
        "info": info(domain, cfg, run, eps),
        "tasks": sorted(tasks.values(), key=lambda t: order.get(str(t["id"]), len(order))),
        "simulations": [simulation(e, tasks[str(e.tau2.get("task_id"))], kinds) for e in ordered],
    }


def _check_data(key: str, run: Mapping[str, Any]) -> str | None:
    """A warning when the data folder's files differ from those the run recorded."""

    name = FAMILY_PREFIX + key
    recorded = _dig(run, "tau2", "files", name)
    if not isinstance(recorded, Mapping):
        return None
    domain = get_domain(name)
    now: Mapping[str, str] = getattr(domain, "data_hashes", {})
    changed = sorted(f for f, h in recorded.items() if f in now and now[f] != h)
    if changed:
        return f"{name}: {', '.join(changed)} differ from the files the run used"
    return None


def _targets(out_dir: Path, dest: Path | None, keys: Iterable[str]) -> dict[str, Path]:
    keys = list(keys)
    if dest is not None and dest.suffix == ".json":
        if len(keys) > 1:
            raise Tau2ExportError(
                f"the run holds τ² episodes of {len(keys)} domains ({', '.join(keys)}): "
                "give --out a folder to write one file per domain"
            )
        return {keys[0]: dest}
    folder = dest if dest is not None else out_dir / "export"
    return {k: folder / f"{FILE_PREFIX}{k}.json" for k in keys}


def export_tau2(
    out_dir: Path | str,
    dest: Path | str | None = None,
    data_dir: str | os.PathLike[str] | None = None,
) -> Tau2Export:
    """Write the run's τ² episodes as τ²-bench results files: `dest` a .json file (a run of
    one domain) or a folder (default `<out_dir>/export`) that gets `tau2-<domain>.json` per
    domain. `data_dir` overrides the τ² data folder the run recorded."""

    out_dir = Path(out_dir)
    eps = episodes(out_dir)
    if not eps:
        raise Tau2ExportError(f"{out_dir}: no τ² episodes in {TRAJECTORIES}")
    by_domain: dict[str, list[Episode]] = {}
    for ep in eps:
        by_domain.setdefault(ep.domain, []).append(ep)
    targets = _targets(out_dir, Path(dest) if dest is not None else None, sorted(by_domain))
    folder = data_folder(out_dir, data_dir)
    run = _read_json(out_dir / RUN)
    cfg = _read_yaml(out_dir / CONFIG)
    report = Tau2Export()
    for key, path in targets.items():
        try:
            with _reading(folder):
                warning = _check_data(key, run)
                doc = results(key, by_domain[key], cfg, run)
        except Tau2DataError as e:
            raise Tau2ExportError(str(e)) from None
        except KeyError as e:  # a domain this agentload does not know
            raise Tau2ExportError(str(e.args[0]) if e.args else str(e)) from None
        if warning:
            report.warnings.append(warning)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, orjson.dumps(doc, option=orjson.OPT_INDENT_2))
        report.paths.append(path)
        report.episodes[key] = len(by_domain[key])
    return report
