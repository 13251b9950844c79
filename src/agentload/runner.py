"""One run, wired end to end: config → (embedded sim) → clients → scheduler → recorder →
summary and report. Also the sweep: the same run at several load points.

Exit codes (what `agentload run` / `sweep` return, and what scripts can rely on):
0 finished (all planned episodes, or the duration elapsed); 1 the run failed or aborted (harness
error, the simulator did not start, or every episode failed on infrastructure); 2 bad usage or
configuration; 130 interrupted (SIGINT / SIGTERM) — results so far are written and resumable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import secrets
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml

from agentload.client import CallRecord, ChatClient, EndpointConfig
from agentload.config import (
    ConfigError,
    RunConfig,
    build_config,
    config_to_dict,
)
from agentload.scheduler import (
    EpisodePlan,
    LoadSpec,
    PlanError,
    ProgressDisplay,
    ProgressTracker,
    Scheduler,
    SchedulerReport,
    WorkItem,
    select_tasks,
)
from agentload.util import dig

log = logging.getLogger("agentload.run")

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

SWEEP_SCHEMA = "agentload.sweep/1"


class RunFailed(Exception):
    """The run could not proceed (exit code 1)."""


Say = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclass
class RunOutcome:
    out_dir: Path
    exit_code: int
    stop_reason: str
    summary: dict[str, Any] | None = None
    scheduler: SchedulerReport | None = None
    report_files: list[Path] = field(default_factory=list)
    message: str = ""


# ---- embedded simulator ------------------------------------------------------------------


def start_embedded_sim(cfg: RunConfig, log_path: Path | None) -> Any:
    """Start the simulator subprocess on a free loopback port; returns the SimProcess."""
    from agentload.sim import SimConfig, SimProcess

    s = cfg.sim
    fields: dict[str, Any] = {
        "port": 0,
        "profile": s.profile,
        "speedup": s.speedup,
        "seed": s.seed,
        "fault_rate": s.fault_rate,
        "behaviour_options": dict(s.behaviour_options),
        **s.options,
    }
    if s.fault_kinds is not None:
        fields["fault_kinds"] = s.fault_kinds
    if s.max_num_seqs is not None:
        fields["max_num_seqs"] = s.max_num_seqs
    try:
        sim_cfg = SimConfig.model_validate(fields)
    except Exception as e:  # pydantic ValidationError, or a profile that does not load
        raise ConfigError(f"invalid configuration: field 'sim': {e}") from None

    proc = SimProcess(sim_cfg, log_path=str(log_path) if log_path else None, own_session=True)
    try:
        return proc.start()
    except (RuntimeError, TimeoutError) as e:
        raise RunFailed(f"the embedded simulator did not start: {e}") from None


async def prime_sim(base_url: str, model: str, tasks: list[str]) -> None:
    """One unrecorded request per domain so the simulator loads the domain's data before the
    first measured call (otherwise the first episodes' TTFT carries a one-off load time)."""
    import aiohttp

    firsts: dict[str, str] = {}
    for t in tasks:
        firsts.setdefault(t.partition("/")[0], t)
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 1,
        "stream": False,
    }
    async with aiohttp.ClientSession() as http:
        for task in firsts.values():
            for role in ("agent", "user"):
                hdrs = {
                    "X-Agentload-Role": role,
                    "X-Agentload-Task": task,
                    "X-Session-ID": "agentload-prime",
                }
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with http.post(
                        f"{base_url}/chat/completions",
                        json=body,
                        headers=hdrs,
                        timeout=aiohttp.ClientTimeout(total=30),
                    ) as r:
                        await r.read()


# ---- helpers -----------------------------------------------------------------------------


def available_tasks(domains: list[str]) -> dict[str, list[str]]:
    from agentload.domains import domain_names, get_domain

    names = domain_names()
    wanted = [d for d in domains if d in names] or names
    out = {}
    for d in names:
        out[d] = [t.id for t in get_domain(d).tasks()] if d in wanted else []
    return out


def _needed_domains(cfg: RunConfig) -> list[str]:
    doms = list(cfg.workload.domains)
    for sel in cfg.workload.tasks:
        d = sel.partition("/")[0]
        if d not in doms:
            doms.append(d)
    return doms


def resolve_tasks(cfg: RunConfig) -> list[str]:
    from agentload.domains import domain_names

    needed = _needed_domains(cfg)
    try:
        available = available_tasks(needed)
        if needed:  # a domain the selectors name must be loaded even when not listed
            for d in needed:
                if d in domain_names() and not available[d]:
                    available.update(available_tasks([d]))
        return select_tasks(cfg.workload.tasks, cfg.workload.domains, available)
    except PlanError as e:
        raise ConfigError(f"invalid configuration: field 'workload.tasks': {e}") from None


def make_plan(cfg: RunConfig, tasks: list[str], finished: set[tuple[str, int]]) -> EpisodePlan:
    w, ld = cfg.workload, cfg.load
    return EpisodePlan(
        tasks,
        trials=w.trials,
        num_episodes=ld.num_episodes,
        unbounded=ld.num_episodes is None and ld.duration_s is not None,
        shuffle=w.shuffle,
        seed=w.seed,
        warmup_episodes=ld.warmup.episodes,
        warmup_seconds=ld.warmup.seconds,
        finished=finished,
    )


def episode_options(cfg: RunConfig) -> Any:
    from agentload.workloads.episode import EpisodeOptions, ToolLatency

    w = cfg.workload
    return EpisodeOptions(
        agent=w.agent,
        user=w.user,
        temperature=w.temperature,
        max_steps=w.max_steps,
        max_user_turns=w.max_user_turns,
        budget_s=w.budget_s,
        max_errors=w.max_errors,
        keep_reasoning=w.keep_reasoning,
        chat_template_kwargs=w.chat_template_kwargs,
        tool_latency=ToolLatency(
            kind=w.tool_latency.kind, mean_s=w.tool_latency.mean_s, spread=w.tool_latency.spread
        ),
        agent_max_tokens=w.agent_max_tokens,
        user_max_tokens=w.user_max_tokens,
    )


def session_id_for(run_id: str, item: WorkItem, attempt: int) -> str:
    task = item.task_id.replace("/", "-")
    if item.warmup:
        # Warmup repeats on resume, so its ids carry the attempt to stay unique.
        return f"{run_id}-warmup{attempt}-{item.index}-{task}"
    return f"{run_id}-{task}-t{item.trial}"


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(2)


def load_saved_config(out_dir: Path) -> RunConfig:
    path = out_dir / "config.yaml"
    if not path.exists():
        raise ConfigError(f"--resume {out_dir}: no config.yaml there (not a run folder?)")
    return build_config(path=path)


def _process_stats() -> dict[str, Any]:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "cpu_user_s": ru.ru_utime,
        "cpu_system_s": ru.ru_stime,
        "max_rss_mb": ru.ru_maxrss / 1024.0,
        "pid": os.getpid(),
    }


def client_block(rep: SchedulerReport, cfg: RunConfig, extra: Mapping[str, Any]) -> dict:
    """summary.json "client": the harness's own behaviour (lag, scheduling, rates)."""
    return {
        "mode": rep.mode,
        "concurrency": cfg.load.effective_concurrency if rep.mode == "closed" else None,
        "rate": cfg.load.rate,
        "burstiness": cfg.load.burstiness if rep.mode == "open" else None,
        "max_concurrency": cfg.load.max_concurrency,
        "stop_reason": rep.stop_reason,
        "elapsed_s": rep.elapsed_s,
        "episodes_started": rep.started,
        "episodes_finished": rep.finished,
        "episodes_cancelled": rep.cancelled,
        "arrivals_not_started": rep.not_started,
        "max_active": rep.max_active,
        "episodes_per_s": rep.finished / rep.elapsed_s if rep.elapsed_s else None,
        "event_loop_lag_s": rep.lag_s,
        "sched_delay_s": rep.sched_delay_s,
        "rate_target": rep.rate_target,
        "rate_offered": rep.rate_offered,
        "rate_achieved": rep.rate_achieved,
        "error": rep.error,
        "process": _process_stats(),
        **extra,
    }


# ---- the run -----------------------------------------------------------------------------


async def execute_run(
    cfg: RunConfig,
    *,
    resume: bool = False,
    progress: str = "auto",  # auto | live | plain | off
    progress_interval_s: float = 10.0,
    say: Say = _stderr,
    install_signals: bool = True,
    progress_title: str = "",
    overwrite: bool = False,
    tune_gc: bool = True,
) -> RunOutcome:
    """Run `cfg` into `cfg.out`; raises ConfigError (exit 2) or RunFailed (exit 1)."""
    from agentload.results.context import run_context
    from agentload.results.recorder import Recorder
    from agentload.results.summary import load_run_meta, summarize, write_summary
    from agentload.util import gc_tuned
    from agentload.workloads.episode import episode_seed, run_episode

    out_dir = Path(cfg.out)
    tasks = resolve_tasks(cfg)
    prev_meta: dict[str, Any] = {}
    if resume and (out_dir / "run.json").exists():
        with contextlib.suppress(orjson.JSONDecodeError):
            prev_meta = orjson.loads((out_dir / "run.json").read_bytes())
    if cfg.run_id is None:
        cfg = cfg.model_copy(update={"run_id": prev_meta.get("run_id") or new_run_id()})
    run_id = str(cfg.run_id)
    attempt = int(prev_meta.get("resume_count", -1)) + 1 if resume else 0

    try:
        recorder = Recorder(out_dir, resume=resume, overwrite=overwrite and not resume)
    except FileExistsError as e:
        raise ConfigError(f"{e} (agentload run --resume {out_dir}, or --overwrite)") from None
    except OSError as e:
        raise ConfigError(f"cannot write results to {out_dir}: {e.strerror}") from None
    finished = recorder.finished_keys()
    plan = make_plan(cfg, tasks, finished)
    options = episode_options(cfg)
    recorder.write_config(config_to_dict(cfg))
    started_at = time.time()
    meta: dict[str, Any] = {
        "run_id": run_id,
        "command": sys.argv,
        "started_at": started_at,
        "seed": cfg.workload.seed,
        "tasks": len(tasks),
        "trials": cfg.workload.trials,
        "planned_episodes": plan.total,
        "status": "running",
    }
    with contextlib.suppress(Exception):
        from agentload.domains import GRADER_VERSION, get_domain

        meta["grader_version"] = GRADER_VERSION
        meta["data_versions"] = {
            d: get_domain(d).data_version for d in sorted({t.partition("/")[0] for t in tasks})
        }
    recorder.write_meta(meta)
    if resume:
        total = "∞" if plan.total is None else plan.total
        say(
            f"resuming {out_dir}: {plan.resume_done} of {total} episodes already finished; "
            f"{recorder.dropped_calls} calls of unfinished episodes dropped"
        )

    sim = None
    endpoints: dict[str, EndpointConfig] = dict(cfg.endpoints)
    loop = asyncio.get_running_loop()
    sched: Scheduler | None = None
    interrupts = 0

    def on_signal(signame: str) -> None:
        nonlocal interrupts
        interrupts += 1
        if sched is None:
            return
        if interrupts == 1:
            say(
                f"{signame}: no new episodes; waiting up to {cfg.load.drain_timeout_s:g}s for "
                f"{sched.active} in flight (again to stop now)"
            )
            sched.stop("interrupted")
        else:
            say(f"{signame}: cancelling episodes in flight")
            sched.abort()

    installed: list[int] = []
    if install_signals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, on_signal, sig.name)
                installed.append(sig)

    tracker = ProgressTracker(total=plan.to_issue, duration_s=cfg.load.duration_s)
    cpu0 = time.process_time()  # the client's own CPU use, for the report's health check
    rep: SchedulerReport | None = None
    try:
        if cfg.embedded:
            # Started from the main thread: the death signal is tied to the starting thread.
            sim = start_embedded_sim(cfg, out_dir / "sim.log")
            model = sim.config.model
            ep = EndpointConfig(
                name="sim", base_url=sim.base_url, model=model, metrics_url=sim.metrics_url
            )
            endpoints = {"agent": ep, "user": ep}
            await prime_sim(sim.base_url, model, tasks)
            say(
                f"no endpoint given: started the embedded simulator on {sim.base_url} "
                f"(profile {cfg.sim.profile}, speedup {cfg.sim.speedup:g}"
                + (f", fault rate {cfg.sim.fault_rate:g}" if cfg.sim.fault_rate else "")
                + "); it stops when the run ends. Use --base-url to benchmark a real server, "
                "--sim-profile / --sim-speedup to change the simulator."
            )
        meta["endpoints"] = {
            r: {"name": e.name, "base_url": e.base_url, "model": e.model}
            for r, e in endpoints.items()
        }

        def on_record(rec: CallRecord) -> None:
            recorder.record_call(rec)
            tracker.on_call(rec)

        clients: dict[str, ChatClient] = {}
        scrapers: list[Any] = []
        async with contextlib.AsyncExitStack() as stack:
            for role, ep in endpoints.items():
                clients[role] = await stack.enter_async_context(ChatClient(ep, on_record=on_record))
            if cfg.metrics.enabled:
                from agentload.servermetrics.scraper import MetricsScraper

                seen: set[str] = set()
                for ep in endpoints.values():
                    if ep.metrics_url and ep.metrics_url not in seen:
                        seen.add(ep.metrics_url)
                        sc = MetricsScraper(
                            ep.metrics_url,
                            recorder,
                            interval_s=cfg.metrics.interval_s,
                            endpoint=ep.name,
                        )
                        scrapers.append(await stack.enter_async_context(sc))

            base_seed = cfg.workload.seed

            async def run_one(item: WorkItem, intended_ns: int, actual_ns: int) -> None:
                from agentload.workloads.episode import EpisodeSpec

                spec = EpisodeSpec(
                    task_id=item.task_id,
                    trial=item.trial,
                    seed=episode_seed(base_seed, item.task_id, item.trial),
                    session_id=session_id_for(run_id, item, attempt),
                )
                res = await run_episode(spec, clients, options)
                session = dict(res.session)
                session["run_id"] = run_id
                session["warmup"] = item.warmup
                session["intended_start_ns"] = intended_ns
                session["sched_delay_s"] = (actual_ns - intended_ns) / 1e9
                recorder.record_episode(session, res.trajectory)
                tracker.on_episode(session)

            spec = LoadSpec(
                mode=cfg.load.mode,
                concurrency=cfg.load.effective_concurrency,
                rate=cfg.load.rate,
                burstiness=cfg.load.burstiness,
                max_concurrency=cfg.load.max_concurrency,
                duration_s=cfg.load.duration_s,
                drain_timeout_s=cfg.load.drain_timeout_s,
                lag_interval_s=cfg.load.lag_interval_s,
                seed=cfg.workload.seed,
            )
            sched = Scheduler(plan, spec, run_one)
            tracker.active = lambda: sched.active if sched else 0
            tracker.lag_p99 = sched.lag.recent_p99
            if interrupts:
                sched.stop("interrupted")
            with gc_tuned(tune_gc):
                async with ProgressDisplay(
                    tracker, mode=progress, interval_s=progress_interval_s, title=progress_title
                ):
                    rep = await sched.run()
    finally:
        if sim is not None:
            await asyncio.to_thread(sim.stop)
        for sig in installed:
            loop.remove_signal_handler(sig)
        recorder.close()

    assert rep is not None
    summary = summarize(out_dir, slo=cfg.slo or None)
    summary["client"] = client_block(
        rep, cfg, {"resume_attempt": attempt, "cpu_s": time.process_time() - cpu0}
    )

    sessions = (summary.get("counts") or {}).get("sessions", 0)
    infra = _infra_failures(out_dir)
    if rep.stop_reason == "interrupted":
        code, reason = EXIT_INTERRUPTED, "interrupted"
    elif rep.stop_reason == "failed":
        code, reason = EXIT_FAILED, f"failed: {rep.error}"
    elif sessions and infra >= sessions:
        code, reason = EXIT_FAILED, "failed: every episode ended with an infrastructure error"
    else:
        code, reason = EXIT_OK, rep.stop_reason
    meta.update(
        {
            "ended_at": time.time(),
            "status": reason,
            "exit_code": code,
            "stop_reason": rep.stop_reason,
        }
    )
    update_meta(out_dir, meta)
    # The summary embeds run.json: take the final status, not the "running" it read.
    summary["run"] = load_run_meta(out_dir)
    summary["context"] = run_context(out_dir)
    write_summary(out_dir, summary)
    files: list[Path] = []
    if cfg.report:
        try:
            from agentload.report import write_report
        except ImportError:  # the report package is optional for a run to be useful
            log.warning("report module unavailable; wrote summary.json only")
        else:
            files = list(write_report(out_dir, summary))
    return RunOutcome(out_dir, code, reason, summary, rep, files)


def _infra_failures(out_dir: Path) -> int:
    from agentload.results.jsonl import load_jsonl

    return sum(
        1
        for s in load_jsonl(out_dir / "sessions.jsonl")
        if not s.get("warmup") and s.get("termination") == "infra_error"
    )


def update_meta(out_dir: Path, meta: Mapping[str, Any]) -> None:
    """Update run.json after the recorder closed (merged, atomic)."""
    from agentload.results.jsonl import atomic_write_bytes

    path = out_dir / "run.json"
    cur: dict[str, Any] = {}
    if path.exists():
        with contextlib.suppress(orjson.JSONDecodeError):
            cur = orjson.loads(path.read_bytes())
    cur.update(meta)
    atomic_write_bytes(path, orjson.dumps(cur, option=orjson.OPT_INDENT_2))


# ---- sweep -------------------------------------------------------------------------------


def sweep_row(point: float, kind: str, out: RunOutcome) -> dict[str, Any]:
    s = out.summary or {}
    agent = dig(s, "calls", "by_role", "agent") or dig(s, "calls", "all") or {}
    eps = dig(s, "episodes") or {}
    slo = dig(s, "slo")
    client = dig(s, "client") or {}
    return {
        kind: point,
        "dir": out.out_dir.name,
        "status": out.stop_reason,
        "episodes": dig(s, "counts", "sessions"),
        "episodes_per_min": dig(eps, "episodes_per_min"),
        "calls_per_s": dig(agent, "throughput", "calls_per_s"),
        "output_tokens_per_s": dig(agent, "throughput", "output_tokens_per_s"),
        "ttft_p50": dig(agent, "ttft_s", "p50"),
        "ttft_p90": dig(agent, "ttft_s", "p90"),
        "ttft_p99": dig(agent, "ttft_s", "p99"),
        "e2e_p50": dig(agent, "e2e_s", "p50"),
        "e2e_p99": dig(agent, "e2e_s", "p99"),
        "success_rate": dig(eps, "success_rate"),
        "error_rate": dig(s, "errors", "error_rate"),
        "slo_met": None if not slo else bool(slo.get("all_met")),
        "slo_call_attainment": None if not slo else slo.get("call_attainment"),
        "goodput_per_min": None if not slo else slo.get("goodput_per_min"),
        "loop_lag_p99": dig(client, "event_loop_lag_s", "p99"),
        "sched_delay_p99": dig(client, "sched_delay_s", "p99"),
    }


def point_dir_name(kind: str, point: float) -> str:
    if kind == "concurrency":
        return f"c{int(point):04d}"
    return f"r{point:g}".replace(".", "_")


def _fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "-"
    if unit == "s":
        return f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s"
    if unit == "%":
        return f"{100 * v:.1f}%"
    if isinstance(v, float):
        return f"{v:.2f}"
    return str(v)


SWEEP_COLUMNS = [
    ("episodes", "episodes", ""),
    ("episodes/min", "episodes_per_min", ""),
    ("calls/s", "calls_per_s", ""),
    ("out tok/s", "output_tokens_per_s", ""),
    ("TTFT p50", "ttft_p50", "s"),
    ("TTFT p90", "ttft_p90", "s"),
    ("TTFT p99", "ttft_p99", "s"),
    ("e2e p99", "e2e_p99", "s"),
    ("success", "success_rate", "%"),
    ("errors", "error_rate", "%"),
    ("SLO", "slo_met", ""),
    ("goodput/min", "goodput_per_min", ""),
]


def sweep_markdown(doc: Mapping[str, Any]) -> str:
    kind = doc["kind"]
    head = [kind] + [c[0] for c in SWEEP_COLUMNS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in doc["points"]:
        cells = [f"{row[kind]:g}"]
        for _, key, unit in SWEEP_COLUMNS:
            v = row.get(key)
            cells.append(
                ("yes" if v else "no") if key == "slo_met" and v is not None else _fmt(v, unit)
            )
        lines.append("| " + " | ".join(cells) + " |")
    best = doc.get("best_point")
    if doc.get("slo"):
        slo = ", ".join(f"{k} ≤ {v:g}s" for k, v in doc["slo"].items())
        lines.append("")
        lines.append(
            f"Highest {kind} meeting the SLO ({slo}): **{best:g}**"
            if best is not None
            else f"No point met the SLO ({slo})."
        )
    return "\n".join(lines) + "\n"


def sweep_table(doc: Mapping[str, Any]) -> Any:
    from rich.table import Table

    kind = doc["kind"]
    t = Table(title=f"sweep over {kind}")
    t.add_column(kind, justify="right")
    for name, _, _ in SWEEP_COLUMNS:
        t.add_column(name, justify="right")
    for row in doc["points"]:
        cells = [f"{row[kind]:g}"]
        for _, key, unit in SWEEP_COLUMNS:
            v = row.get(key)
            if key == "slo_met" and v is not None:
                cells.append("[green]yes[/]" if v else "[red]no[/]")
            else:
                cells.append(_fmt(v, unit))
        t.add_row(*cells)
    return t


async def execute_sweep(
    cfg: RunConfig,
    *,
    kind: str,  # concurrency | rate
    points: list[float],
    stop_on_slo_fail: bool = False,
    progress: str = "auto",
    say: Say = _stderr,
    progress_interval_s: float = 10.0,
    overwrite: bool = False,
) -> tuple[dict[str, Any], int]:
    """Run every point into <out>/<point>/; writes sweep.json and sweep.md in <out>."""
    root = _sweep_root(cfg, overwrite)
    base = cfg.model_dump(by_alias=True)
    doc: dict[str, Any] = {
        "schema": SWEEP_SCHEMA,
        "kind": kind,
        "points_planned": points,
        "slo": dict(cfg.slo),
        "started_at": time.time(),
        "points": [],
        "best_point": None,
        "status": "running",
    }
    _write_text(root / "config.yaml", yaml.safe_dump(config_to_dict(cfg), sort_keys=False))
    code = EXIT_OK
    for i, point in enumerate(points):
        data = dict(base)
        data["out"] = str(root / point_dir_name(kind, point))
        load = dict(data["load"])
        if kind == "concurrency":
            load["concurrency"], load["rate"], load["max_concurrency"] = int(point), None, None
        else:
            load["rate"], load["concurrency"] = float(point), None
        data["load"] = load
        point_cfg = build_config(data=data)
        say(f"sweep point {i + 1}/{len(points)}: {kind} {point:g}")
        out = await execute_run(
            point_cfg,
            progress=progress,
            say=say,
            progress_interval_s=progress_interval_s,
            progress_title=f"{kind} {point:g}",
            overwrite=overwrite,
        )
        row = sweep_row(point, kind, out)
        doc["points"].append(row)
        if row["slo_met"]:
            doc["best_point"] = (
                point if doc["best_point"] is None else max(doc["best_point"], point)
            )
        _write_sweep(root, doc)
        if out.exit_code != EXIT_OK:
            code = out.exit_code
            break
        if stop_on_slo_fail and cfg.slo and row["slo_met"] is False:
            say(f"{kind} {point:g} misses the SLO: stopping the sweep (--stop-on-slo-fail)")
            doc["stopped_on_slo_fail"] = point
            break
    doc["ended_at"] = time.time()
    doc["status"] = {EXIT_OK: "completed", EXIT_INTERRUPTED: "interrupted"}.get(code, "failed")
    _write_sweep(root, doc)
    return doc, code


def _sweep_root(cfg: RunConfig, overwrite: bool) -> Path:
    root = Path(cfg.out)
    root.mkdir(parents=True, exist_ok=True)
    if (root / "sweep.json").exists() and not overwrite:
        raise ConfigError(f"{root} already holds a sweep; choose another --out (or --overwrite)")
    return root


def _write_text(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def _write_sweep(root: Path, doc: Mapping[str, Any]) -> None:
    from agentload.results.jsonl import atomic_write_bytes

    atomic_write_bytes(root / "sweep.json", orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    atomic_write_bytes(root / "sweep.md", sweep_markdown(doc).encode())
