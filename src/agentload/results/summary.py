"""Aggregate a results directory into summary.json (schema "agentload.summary/1").

Which records count: the calls and sessions of finished, non-warmup episodes, plus calls that
belong to no episode (session_id null). Warmup sessions and their calls are counted apart;
calls whose episode never finished (the run was interrupted) are counted as `unfinished_calls`
and left out, so that the statistics always describe complete episodes. docs/results.md
defines every figure.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import yaml

from agentload import stats
from agentload.client import itlhist
from agentload.outcome import INFRA
from agentload.results.context import run_context
from agentload.results.errors import top_error_messages
from agentload.results.files import CALLS, CONFIG, RUN, SERVER_METRICS, SESSIONS, SUMMARY
from agentload.results.jsonl import JsonlRead, read_jsonl
from agentload.results.records import (
    SUMMARY_SCHEMA,
    SUMMARY_VERSION,
    CallBlock,
    CallsSection,
    Describe,
    EngineStopped,
    EpisodeGroup,
    Episodes,
    Errors,
    IntegrityBlock,
    ItlBlock,
    Scheduling,
    SessionRecord,
    SloBlock,
    SloCondition,
    Summary,
    SummaryCounts,
    Throughput,
    Tokens,
    TurnRow,
    Window,
    write_summary_file,
)
from agentload.results.replay_summary import replay_summary
from agentload.results.validate import Integrity, clean_calls, clean_samples, clean_sessions
from agentload.results.window import EMPTY_WINDOW, call_window, session_window
from agentload.scheduler.outage import is_infra_failure
from agentload.servermetrics.summary import summarize_gpu, summarize_server
from agentload.units import check_slo_key, parse_duration
from agentload.version import __version__

log = logging.getLogger("agentload.results")

SUCCESS_REWARD = 1.0 - 1e-6  # an episode succeeds when its reward is 1 (float tolerance)
CDF_POINTS = 101  # quantiles at 0, 1, ..., 100 % for the CDF charts
TURN_PERCENTILES = (50, 90, 99)


NAN = math.nan


def _num(x: Any) -> float | None:
    """JSON-safe float: NaN and infinities become null."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _ratio(a: float, b: float) -> float | None:
    return float(a / b) if b else None


# ---- call arrays ------------------------------------------------------------------------


class CallArrays:
    """Column arrays over a list of call dicts (one pass per field, numpy afterwards)."""

    def __init__(self, calls: Sequence[Mapping[str, Any]]) -> None:
        self.n = len(calls)

        def col(key: str) -> np.ndarray:
            return np.array([NAN if (v := c.get(key)) is None else v for c in calls], dtype=float)

        itls = [c.get("itl") or {} for c in calls]

        def itl_col(key: str) -> np.ndarray:
            return np.array([NAN if (v := d.get(key)) is None else v for d in itls], dtype=float)

        self.role = np.array([str(c.get("role") or "none") for c in calls], dtype=object)
        self.endpoint = np.array([str(c.get("endpoint") or "default") for c in calls], dtype=object)
        self.session_id = np.array([c.get("session_id") for c in calls], dtype=object)
        self.turn = np.array(
            [-1 if (t := c.get("turn")) is None else int(t) for c in calls], dtype=np.int64
        )
        self.ok = np.array([c.get("status", "ok") == "ok" for c in calls], dtype=bool)
        self.error_kind = np.array([c.get("error_kind") or "unknown" for c in calls], dtype=object)
        self.estimated = np.array([bool(c.get("tokens_estimated")) for c in calls], dtype=bool)
        self.ttft = col("ttft_s")
        self.e2e = col("e2e_s")
        self.tpot = col("tpot_s")
        self.started_at = col("started_at")
        self.total_s = col("total_s")
        self.end_ns = col("end_ns")
        self.prompt = col("prompt_tokens")
        self.cached = col("cached_tokens")
        self.completion = col("completion_tokens")
        self.reasoning = col("reasoning_tokens")
        self.itl_count = np.nan_to_num(itl_col("count"))
        self.itl_mean = itl_col("mean")
        self.itl_p50 = itl_col("p50")
        self.itl_p90 = itl_col("p90")
        self.itl_p99 = itl_col("p99")
        self.itl_max = itl_col("max")
        self.itl_hist = [c.get("itl_hist") for c in calls]


def _desc(values: np.ndarray) -> Describe:
    """`agentload.stats.describe` computed on an array without a Python-level pass."""
    v = values[np.isfinite(values)]
    if v.size == 0:
        return Describe(**stats.describe([]))
    out: dict[str, Any] = {
        "count": int(v.size),
        "mean": float(v.mean()),
        "std": float(v.std(ddof=1)) if v.size > 1 else 0.0,
        "min": float(v.min()),
        "max": float(v.max()),
    }
    qs = np.percentile(v, list(stats.PERCENTILES))
    out.update({stats.pct_key(p): float(q) for p, q in zip(stats.PERCENTILES, qs, strict=True)})
    if thin := stats.thin_percentiles(int(v.size)):
        out["thin"] = thin  # percentiles too few values carry (agentload.stats.min_samples)
    return Describe(**out)


def _brief(values: np.ndarray, ps: Sequence[float] = TURN_PERCENTILES) -> dict[str, Any]:
    v = values[np.isfinite(values)]
    out: dict[str, Any] = {"count": int(v.size), "mean": _num(v.mean()) if v.size else None}
    qs = np.percentile(v, list(ps)) if v.size else [None] * len(ps)
    out.update({stats.pct_key(p): _num(q) for p, q in zip(ps, qs, strict=True)})
    return out


def _tokens(a: CallArrays, m: np.ndarray) -> Tokens:
    prompt = a.prompt[m]
    cached = a.cached[m]
    reported = np.isfinite(cached) & np.isfinite(prompt)
    prompt_reported = float(prompt[reported].sum())
    cached_sum = float(np.nansum(cached))
    return Tokens(
        prompt=int(np.nansum(prompt)),
        cached=int(cached_sum),
        completion=int(np.nansum(a.completion[m])),
        reasoning=int(np.nansum(a.reasoning[m])),
        calls_reporting_cached=int(reported.sum()),
        cached_share=_ratio(float(cached[reported].sum()), prompt_reported),
        estimated_calls=int(a.estimated[m].sum()),
    )


def _itl(a: CallArrays, m: np.ndarray) -> ItlBlock:
    sel = m & a.ok & (a.itl_count > 0) & np.isfinite(a.itl_mean)
    counts = a.itl_count[sel]
    gaps = float(counts.sum())
    return ItlBlock(
        calls=int(sel.sum()),
        gaps=int(gaps),
        # Exact mean of all gaps of all calls: the per-call means weighted by their gap counts.
        mean=_ratio(float((a.itl_mean[sel] * counts).sum()), gaps),
        max=_num(np.nanmax(a.itl_max[sel])) if sel.any() else None,
        # Every gap of every call, from the per-call histograms (within 1 %).
        all_gaps=_all_gaps(a, sel),
        # Distributions over calls of each call's own ITL percentile.
        per_call_p50=_desc(a.itl_p50[sel]),
        per_call_p90=_desc(a.itl_p90[sel]),
        per_call_p99=_desc(a.itl_p99[sel]),
    )


def _all_gaps(a: CallArrays, sel: np.ndarray) -> Describe:

    ks, ns = itlhist.merge(a.itl_hist[i] for i in np.flatnonzero(sel))
    qs = itlhist.quantiles(ks, ns, stats.PERCENTILES)
    out: dict[str, Any] = {"count": int(ns.sum()), "relative_error": itlhist.RELATIVE_ERROR}
    out.update({stats.pct_key(p): q for p, q in zip(stats.PERCENTILES, qs, strict=True)})
    return Describe(**out)


def _call_block(a: CallArrays, m: np.ndarray, window_s: float | None) -> CallBlock:
    ok = m & a.ok
    tokens = _tokens(a, m)
    n_ok = int(ok.sum())
    return CallBlock(
        calls=int(m.sum()),
        ok=n_ok,
        failed=int(m.sum()) - n_ok,
        ttft_s=_desc(a.ttft[ok]),
        e2e_s=_desc(a.e2e[ok]),
        tpot_s=_desc(a.tpot[ok]),
        itl_s=_itl(a, m),
        tokens=tokens,
        throughput=Throughput(
            calls_per_s=_ratio(n_ok, window_s or 0.0),
            output_tokens_per_s=_ratio(tokens.completion, window_s or 0.0),
            prompt_tokens_per_s=_ratio(tokens.prompt, window_s or 0.0),
        ),
    )


def _by_turn(a: CallArrays, m: np.ndarray) -> list[TurnRow]:
    rows: list[TurnRow] = []
    turns = a.turn[m]
    if turns.size == 0:
        return rows
    idx = np.flatnonzero(m)
    order = np.argsort(turns, kind="stable")
    sorted_turns = turns[order]
    uniq, starts = np.unique(sorted_turns, return_index=True)
    bounds = [*starts[1:], sorted_turns.size]
    for t, lo, hi in zip(uniq, starts, bounds, strict=True):
        if t < 0:
            continue
        sel = np.zeros(a.n, dtype=bool)
        sel[idx[order[lo:hi]]] = True
        ok = sel & a.ok
        tok = _tokens(a, sel)
        rows.append(
            TurnRow(
                turn=int(t),
                calls=int(sel.sum()),
                ttft_s=_brief(a.ttft[ok]),
                e2e_s=_brief(a.e2e[ok], (50, 90)),
                prompt_tokens_mean=_num(np.nanmean(a.prompt[sel]))
                if np.isfinite(a.prompt[sel]).any()
                else None,
                cached_share=tok.cached_share,
            )
        )
    return rows


def _quantile_grid(values: np.ndarray) -> list[float] | None:
    v = values[np.isfinite(values)]
    if v.size == 0:
        return None
    return [float(x) for x in np.percentile(v, np.linspace(0, 100, CDF_POINTS))]


# ---- SLOs ---------------------------------------------------------------------------------


def _per_call_values(a: CallArrays, metric: str, stat: str) -> tuple[np.ndarray, np.ndarray]:
    """(value each call is judged by, measured value) for an SLO key.

    NaN in the first means a failed call: a miss. A call without token gaps (one chunk) has
    no ITL, and a single-token answer no TPOT, to violate: judged 0. The measured values
    (NaN where absent) give the observed statistic, as in the call blocks.
    """
    if metric == "itl":
        raw = {"p50": a.itl_p50, "p90": a.itl_p90, "p99": a.itl_p99, "mean": a.itl_mean}.get(
            stat, a.itl_max
        )
        raw = np.where(a.itl_count > 0, raw, NAN)
    else:
        raw = {"ttft": a.ttft, "e2e": a.e2e, "tpot": a.tpot}[metric]
    if metric == "itl":
        judged = np.where(a.itl_count == 0, 0.0, raw)
    elif metric == "tpot":
        judged = np.nan_to_num(raw, nan=0.0)
    else:
        judged = raw
    return np.where(a.ok, judged, NAN), np.where(a.ok, raw, NAN)


def _stat(values: np.ndarray, stat: str) -> float | None:
    v = values[np.isfinite(values)]
    if v.size == 0:
        return None
    if stat == "mean":
        return float(v.mean())
    if stat == "max":
        return float(v.max())
    return float(np.percentile(v, float(stat[1:])))


def _slo_block(
    slo: Mapping[str, float],
    a: CallArrays,
    m_calls: np.ndarray,
    sessions: Sequence[SessionRecord],
    success: np.ndarray,
    window_s: float | None,
) -> SloBlock:
    roles = set(a.role[m_calls].tolist())
    slo_role = "agent" if "agent" in roles or not roles else None
    m = m_calls & (a.role == slo_role) if slo_role else m_calls.copy()
    meet_all = np.ones(a.n, dtype=bool)
    conditions: dict[str, SloCondition] = {}
    for key, threshold in slo.items():
        metric, stat = check_slo_key(key)
        vals, raw = _per_call_values(a, metric, stat)
        with np.errstate(invalid="ignore"):
            meet = vals <= float(threshold)  # NaN (failed call) compares False: a miss
        meet_all &= meet
        # itl_mean is gap-weighted, as calls.*.itl_s.mean
        itl_mean = metric == "itl" and stat == "mean"
        observed = _itl(a, m).mean if itl_mean else _stat(raw[m], stat)
        conditions[key] = SloCondition(
            metric=metric,
            stat=stat,
            threshold=float(threshold),
            observed=observed,
            met=observed is not None and observed <= float(threshold),
            attainment=_ratio(float(meet[m].sum()), float(m.sum())),
        )
    # Sessions: every SLO-role call of the episode must meet every per-call threshold.
    missed: set[str] = {str(s) for s in a.session_id[m & ~meet_all] if s is not None}
    meets = np.array([str(s.session_id) not in missed for s in sessions], dtype=bool)
    good = meets & success
    minutes = window_s / 60 if window_s else 0.0
    return SloBlock(
        thresholds={k: float(v) for k, v in slo.items()},
        role=slo_role or "all",
        conditions=conditions,
        all_met=all(c.met for c in conditions.values()),
        call_attainment=_ratio(float(meet_all[m].sum()), float(m.sum())),
        sessions_meeting_slo=int(meets.sum()),
        session_attainment=_ratio(float(meets.sum()), float(len(sessions))),
        good_sessions=int(good.sum()),
        goodput_per_min=_ratio(float(good.sum()), minutes),
    )


# ---- episodes -----------------------------------------------------------------------------


def _success(session: SessionRecord) -> bool:
    r = session.reward
    return r is not None and r >= SUCCESS_REWARD


def _pass_k(sessions: Sequence[SessionRecord]) -> dict[str, float]:
    by_task: dict[str, list[bool]] = defaultdict(list)
    for s in sessions:
        by_task[str(s.task_id)].append(_success(s))
    return {str(k): v for k, v in stats.pass_hat_k(by_task).items()}


def _group_figures(sessions: Sequence[SessionRecord]) -> dict[str, Any]:
    """Success, reward and pass^k of fully graded episodes; episodes whose reward is partial
    (τ²'s natural-language assertions with no judge) are counted apart, and so are episodes
    that ended on infrastructure errors: they say nothing about the agent's task."""
    infra = [s for s in sessions if s.termination == INFRA]
    if infra:
        graded = _group_figures([s for s in sessions if s.termination != INFRA])
        return {
            **graded,
            "graded_episodes": graded.get("graded_episodes", graded["episodes"]),
            "episodes": len(sessions),
            "tasks": len({str(s.task_id) for s in sessions}),
            "infra_error": {
                "episodes": len(infra),
                "tasks": len({str(s.task_id) for s in infra}),
                "note": "ended on infrastructure errors: left out of success rate, mean reward "
                "and pass^k (`agentload run --resume` runs them again)",
            },
        }
    partial = [s for s in sessions if s.reward_partial]
    if partial:
        graded = _group_figures([s for s in sessions if not s.reward_partial])
        return {
            **graded,
            "graded_episodes": graded["episodes"],
            "episodes": len(sessions),
            "tasks": len({str(s.task_id) for s in sessions}),
            "partial": {
                "episodes": len(partial),
                "tasks": len({str(s.task_id) for s in partial}),
                "successes_without_judge": sum(_success(s) for s in partial),
                "note": "natural-language assertions not judged (no judge endpoint): left out "
                "of success rate, mean reward and pass^k",
            },
        }
    n = len(sessions)
    succ = sum(_success(s) for s in sessions)
    rewards = [s.reward for s in sessions if s.reward is not None]
    trials = Counter(str(s.task_id) for s in sessions)
    return {
        "episodes": n,
        "tasks": len(trials),
        "trials_per_task": {"min": min(trials.values()), "max": max(trials.values())}
        if trials
        else None,
        "successes": succ,
        "success_rate": _ratio(succ, n),
        "mean_reward": float(np.mean(rewards)) if rewards else None,
        "pass_hat_k": _pass_k(sessions),
    }


def _dur(s: SessionRecord, key: str) -> float:
    v = s.duration(key)
    return v if v is not None else NAN


def _time_split(sessions: Sequence[SessionRecord], totals: np.ndarray) -> dict[str, float | None]:
    """Seconds of the episodes spent in the LLM, tools and the user, and their shares."""
    split: dict[str, float | None] = {}
    total_sum = float(np.nansum(totals))
    for key in ("llm_s", "tool_s", "user_s"):
        v = float(np.nansum([_dur(s, key) for s in sessions]))
        split[key] = v
        split[key.replace("_s", "_share")] = _ratio(v, total_sum)
    split["total_s"] = total_sum
    return split


def _episodes(
    sessions: list[SessionRecord],
    window_s: float | None,
    a: CallArrays,
    m: np.ndarray,
) -> Episodes:
    figures = _group_figures(sessions)
    by_domain: dict[str, list[SessionRecord]] = defaultdict(list)
    for s in sessions:
        by_domain[str(s.domain or "none")].append(s)
    totals = np.array([_dur(s, "total_s") for s in sessions])
    counts: defaultdict[str, int | float] = defaultdict(int)
    for s in sessions:
        for k, v in (s.counts or {}).items():
            if isinstance(v, int | float):
                counts[k] += v
    minutes = window_s / 60 if window_s else 0.0
    tok = _tokens(a, m)
    return Episodes(
        **figures,
        by_domain={d: EpisodeGroup(**_group_figures(v)) for d, v in sorted(by_domain.items())},
        terminations=dict(Counter(str(s.termination) for s in sessions).most_common()),
        with_error=sum(1 for s in sessions if s.error),
        duration_s=_desc(totals),
        time_split=_time_split(sessions, totals),
        counts=dict(counts),
        episodes_per_min=_ratio(len(sessions), minutes),
        successes_per_min=_ratio(figures["successes"], minutes),
        tokens_per_success={
            "prompt": _ratio(tok.prompt, figures["successes"]),
            "completion": _ratio(tok.completion, figures["successes"]),
        },
    )


# ---- window -------------------------------------------------------------------------------


def _beyond_sessions(sessions: list[SessionRecord], a: CallArrays, m: np.ndarray) -> bool:
    """Whether measured calls belong to no finished session (a stopped replay's turns): the
    window then spans the calls, which the sessions' own window would not hold."""
    done = {str(s.session_id) for s in sessions}
    return any(sid is not None and str(sid) not in done for sid in a.session_id[m].tolist())


def _window(sessions: list[SessionRecord], a: CallArrays, m: np.ndarray) -> Window:
    """First start -> last end of the measured episodes (calls when there are none), from the
    monotonic clock (agentload.results.window)."""
    if sessions and not _beyond_sessions(sessions, a, m):
        return Window(**session_window(sessions))
    if m.any():
        return Window(**call_window(a.started_at[m], a.end_ns[m], a.total_s[m]))
    return Window(**EMPTY_WINDOW)


# ---- entry points -------------------------------------------------------------------------


def _config_slo(out_dir: Path) -> dict[str, float]:
    path = out_dir / CONFIG
    if not path.exists():
        return {}
    try:
        cfg = yaml.safe_load(path.read_text()) or {}
    except (yaml.YAMLError, OSError, UnicodeDecodeError, ValueError, RecursionError):
        log.warning("%s: unreadable; no SLO thresholds taken from it", path)
        return {}
    slo = cfg.get("slo") if isinstance(cfg, dict) else None
    if not isinstance(slo, dict):
        return {}
    out: dict[str, float] = {}
    for k, v in slo.items():
        try:
            check_slo_key(str(k))
            out[str(k)] = parse_duration(v)
        except ValueError as e:
            log.warning("%s: slo.%s ignored: %s", path, k, e)
    return out


@dataclass
class MeasuredRun:
    """The records of a results directory, split into what counts and what does not."""

    calls: CallArrays
    raw_calls: list[dict[str, Any]]
    measured: np.ndarray  # calls of finished non-warmup episodes, and episode-less calls
    warmup: np.ndarray  # calls of warmup episodes
    unfinished: np.ndarray  # calls of episodes with no session line
    sessions: list[SessionRecord]  # finished non-warmup episodes
    warmup_sessions: int
    integrity: Integrity


def load_measured(
    out_dir: Path | str,
    *,
    calls_read: JsonlRead | None = None,
    sessions_read: JsonlRead | None = None,
) -> MeasuredRun:
    """The run's records, cleaned, and which calls count; `calls_read` / `sessions_read`:
    the files as a caller already read them."""
    out_dir = Path(out_dir)
    integ = Integrity()
    if sessions_read is None:
        sessions_read = read_jsonl(out_dir / SESSIONS)
    if calls_read is None:
        calls_read = read_jsonl(out_dir / CALLS)
    all_sessions = clean_sessions(sessions_read, integ)
    all_calls = clean_calls(calls_read, integ)
    warm_ids = {str(s.session_id) for s in all_sessions if s.warmup}
    sessions = [s for s in all_sessions if not s.warmup]
    done_ids = {str(s.session_id) for s in sessions}
    a = CallArrays(all_calls)
    sid = [None if s is None else str(s) for s in a.session_id]
    no_session = np.array([s is None for s in sid], dtype=bool)
    in_done = np.array([s in done_ids for s in sid], dtype=bool)
    in_warm = np.array([s in warm_ids for s in sid], dtype=bool)
    # A directory with calls but no episode records at all (calls made outside the episode
    # runner) is a calls-only run: every call counts.
    m = no_session | in_done if all_sessions else np.ones(a.n, dtype=bool)
    # A replayed turn is a measurement of its own whether or not its conversation got to
    # the end (an interrupt, a --duration cap): every call that finished counts.
    m |= _finished_replay_calls(all_calls) & ~in_warm
    return MeasuredRun(
        a,
        all_calls,
        m,
        in_warm,
        ~(m | in_warm),
        sessions,
        len(all_sessions) - len(sessions),
        integ,
    )


def _finished_replay_calls(calls: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """Replayed calls that ran to an answer or an error (not those cancelled by the stop)."""
    return np.array(
        [isinstance(c.get("replay"), dict) and c.get("error_kind") != "cancelled" for c in calls],
        dtype=bool,
    )


def _calls_section(a: CallArrays, m: np.ndarray, window_s: float | None) -> CallsSection:
    """`calls`: the call block of all measured calls, per role, endpoint and both."""
    roles = sorted(set(a.role[m].tolist()))
    endpoints = sorted(set(a.endpoint[m].tolist()))
    combos = sorted({(r, e) for r, e in zip(a.role[m], a.endpoint[m], strict=True)})
    return CallsSection(
        all=_call_block(a, m, window_s),
        by_role={r: _call_block(a, m & (a.role == r), window_s) for r in roles},
        by_endpoint={e: _call_block(a, m & (a.endpoint == e), window_s) for e in endpoints},
        by_role_endpoint={
            f"{r}@{e}": _call_block(a, m & (a.role == r) & (a.endpoint == e), window_s)
            for r, e in combos
        },
    )


def _errors(
    a: CallArrays, m: np.ndarray, all_calls: list[dict[str, Any]], meta: Mapping[str, Any] | None
) -> Errors:
    failed = m & ~a.ok
    roles = sorted(set(a.role[m].tolist()))
    stopped = engine_stopped(a, all_calls, meta)
    return Errors(
        calls_failed=int(failed.sum()),
        error_rate=_ratio(float(failed.sum()), float(m.sum())),
        by_kind=dict(Counter(a.error_kind[failed].tolist()).most_common()),
        by_role={
            r: dict(Counter(a.error_kind[failed & (a.role == r)].tolist()).most_common())
            for r in roles
            if (failed & (a.role == r)).any()
        },
        retried_calls=int(
            sum(1 for i in np.flatnonzero(m) if (all_calls[i].get("attempts") or 1) > 1)
        ),
        # The servers' own words, per kind (redacted): what the counts above do not say.
        messages=top_error_messages(all_calls[i] for i in np.flatnonzero(failed)),
        # Only when the pattern is there: absent from summary.json otherwise.
        **({"engine_stopped": stopped} if stopped is not None else {}),
    )


def _connection_failure(call: Mapping[str, Any]) -> bool:
    """A call that failed because the server was not there (refused, reset, lost mid-answer),
    as opposed to one it answered with an error."""

    kind = call.get("error_kind")
    if call.get("status") == "ok" or not isinstance(kind, str) or kind.startswith("http_"):
        return False
    return is_infra_failure(kind, str(call.get("error_message") or ""))


def engine_stopped(
    a: CallArrays, calls: Sequence[Mapping[str, Any]], meta: Mapping[str, Any] | None
) -> EngineStopped | None:
    """`errors.engine_stopped`: the server answered, then every call after its last answer
    failed to connect or lost its connection, the way an engine that died looks from the
    client. Says which calls were in flight when it stopped answering and what they carried
    (seed, temperature: run.json `sampling`), since one of them may have killed it: a seeded
    request kills vLLM's CPU build (docs/engines.md). None for any other pattern."""
    ends = a.started_at + np.nan_to_num(a.total_s)
    ok = a.ok & np.isfinite(ends)
    if not ok.any():
        return None
    last_ok = float(ends[ok].max())
    idx = np.flatnonzero(ends > last_ok)
    if idx.size < 2:
        return None
    after = [calls[i] for i in idx[np.argsort(ends[idx], kind="stable")]]
    if not all(_connection_failure(c) for c in after):
        return None

    def end(c: Mapping[str, Any]) -> float:
        return float(c["started_at"]) + float(c.get("total_s") or 0.0)

    n_ok = int(ok.sum())
    stopped_at = end(after[0])
    in_flight = [c for c in after if float(c["started_at"]) <= stopped_at]
    sampling = (meta or {}).get("sampling") or {}
    sent: dict[str, Any] = {}
    for role in sorted({str(c.get("role")) for c in in_flight}):
        block = sampling.get(role) if isinstance(sampling, Mapping) else None
        if isinstance(block, Mapping):
            sent[role] = {"seed": block.get("seed"), "temperature": block.get("temperature")}
    seeds = {str(v["seed"]) for v in sent.values() if not str(v["seed"]).startswith("none")}
    text = (
        f"the server stopped answering after {n_ok} working calls: the {len(after)} calls "
        f"since failed to connect or lost their connection "
        f"({', '.join(f'{k} {n}' for k, n in Counter(c.get('error_kind') for c in after).items())})"
        f"; {len(in_flight)} in flight then ("
        + ", ".join(f"{c.get('role')} turn {c.get('turn')}" for c in in_flight[:3])
        + (", …" if len(in_flight) > 3 else "")
        + ")"
    )
    if seeds:
        temps = {str(v["temperature"]) for v in sent.values()}
        text += (
            f" carried seed {', '.join(sorted(seeds))} at temperature {', '.join(sorted(temps))}"
            ": a per-request seed is known to kill vLLM's CPU build (docs/engines.md); "
            "rerun without --request-seed or with --temperature 0"
        )
    return EngineStopped(
        ok_calls=n_ok,
        failed_after=len(after),
        stopped_at=stopped_at,
        in_flight=[
            {
                k: c.get(k)
                for k in ("call_id", "session_id", "role", "turn", "started_at", "prompt_tokens")
            }
            for c in in_flight[:10]
        ],
        sent=sent,
        message=text,
    )


def turn_table(a: CallArrays, m: np.ndarray) -> dict[str, list[TurnRow]]:
    """`turns`: per role, latency by turn index (also `agentload export`'s turns table)."""
    return {r: _by_turn(a, m & (a.role == r)) for r in sorted(set(a.role[m].tolist()))}


def _distributions(a: CallArrays, m: np.ndarray) -> dict[str, dict[str, list[float] | None]]:
    """`distributions`: per role, the CDF grids of TTFT and end-to-end latency."""
    return {
        r: {
            "ttft_s": _quantile_grid(a.ttft[m & a.ok & (a.role == r)]),
            "e2e_s": _quantile_grid(a.e2e[m & a.ok & (a.role == r)]),
        }
        for r in sorted(set(a.role[m].tolist()))
    }


UNGRADED_KINDS = ("replay", "synthetic")
"""Kinds whose sessions carry no reward: no `episodes` block (success, pass^k)."""


def _graded(sessions: Sequence[SessionRecord]) -> bool:
    """Whether the run's sessions are graded episodes (an `episodes` block): every kind but
    a replay (its `replay` block instead) or synthetic requests (`run.synthetic`)."""
    return any(s.kind not in UNGRADED_KINDS for s in sessions)


def summarize(out_dir: Path | str, *, slo: Mapping[str, float] | None = None) -> Summary:
    """Read the JSONL files of `out_dir` and build the summary (see docs/results.md).

    `slo=None` takes the thresholds from config.yaml's `slo` when present.
    """
    out_dir = Path(out_dir)
    if slo is None:
        slo = _config_slo(out_dir)
    for key in slo:
        check_slo_key(key)
    run = load_measured(out_dir)
    a, m, sessions, all_calls = run.calls, run.measured, run.sessions, run.raw_calls
    window = _window(sessions, a, m)
    window_s = window.rate_seconds()
    success = np.array([_success(s) for s in sessions], dtype=bool)
    delays = [NAN if s.sched_delay_s is None else s.sched_delay_s for s in sessions]
    meta = load_run_meta(out_dir)
    calls = _calls_section(a, m, window_s)
    # A block of one workload kind is absent (not null) from the others' summaries.
    optional: dict[str, Any] = {}
    if _graded(sessions) or not sessions:
        optional["episodes"] = _episodes(sessions, window_s, a, m) if sessions else None
    # Engine metrics and GPU telemetry share one file, read once; its problems go to
    # `integrity` with the other files'.
    samples = clean_samples(read_jsonl(out_dir / SERVER_METRICS), run.integrity)
    span = (window.start, window.end)
    gpu = summarize_gpu(samples, span, float(calls.all.tokens.completion)) if samples else None
    if gpu is not None:
        optional["gpu"] = gpu
    replay = replay_summary(sessions, [all_calls[i] for i in np.flatnonzero(m)])
    if replay is not None:
        optional["replay"] = replay
    return Summary(
        schema=SUMMARY_SCHEMA,
        schema_version=SUMMARY_VERSION,
        agentload_version=__version__,
        generated_at=time.time(),
        run=meta,
        context=run_context(out_dir),
        window=window,
        counts=SummaryCounts(
            calls=int(m.sum()),
            warmup_calls=int(run.warmup.sum()),
            unfinished_calls=int(run.unfinished.sum()),
            sessions=len(sessions),
            warmup_sessions=run.warmup_sessions,
        ),
        calls=calls,
        turns=turn_table(a, m),
        distributions=_distributions(a, m),
        slo=_slo_block(slo, a, m, sessions, success, window_s) if slo else None,
        errors=_errors(a, m, all_calls, meta),
        scheduling=Scheduling(sched_delay_s=_desc(np.array(delays, dtype=float))),
        server=summarize_server(samples, span, run_calls=a.n) if samples else None,
        # What the readers skipped, flagged or counted once (agentload.results.validate).
        integrity=IntegrityBlock(**run.integrity.to_dict()),
        **optional,
    )


def load_run_meta(out_dir: Path) -> dict[str, Any] | None:
    """run.json of a results folder, or None when missing or unreadable."""
    path = out_dir / RUN
    if not path.exists():
        return None
    try:
        meta = orjson.loads(path.read_bytes())
    except (orjson.JSONDecodeError, OSError):
        log.warning("%s: unreadable run metadata, ignored", path)
        return None
    if not isinstance(meta, dict):
        log.warning("%s: not a JSON object, ignored", path)
        return None
    return meta


def write_summary(out_dir: Path | str, summary: Summary | Mapping[str, Any]) -> Path:
    """summary.json (indented, atomic replace), checked against the `Summary` model."""
    return write_summary_file(Path(out_dir) / SUMMARY, summary)
