"""One run, wired end to end: config → workload → (embedded sim) → clients → scheduler →
recorder → summary and report. `execute_run` reads as the run's phases; the workload kind
(episodes, replay, …) plugs in through `agentload.workloads.base.Workload`.

Exit codes (what `agentload run` / `sweep` return, and what scripts can rely on):
0 finished (all planned sessions, or the duration elapsed); 1 the run failed or aborted
(harness error, the simulator did not start, or every session failed on infrastructure);
2 bad usage or configuration; 130 interrupted (SIGINT / SIGTERM) — results so far are written
and resumable.
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
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import yaml

from agentload.client import CallRecord, ChatClient, EndpointConfig
from agentload.config import ConfigError, RunConfig, build_config, config_to_dict
from agentload.scheduler import (
    EpisodePlan,
    LoadSpec,
    ProgressDisplay,
    ProgressTracker,
    Scheduler,
    SchedulerReport,
    WorkItem,
)

if TYPE_CHECKING:
    from agentload.results.recorder import Recorder
    from agentload.workloads.base import Workload

log = logging.getLogger("agentload.run")

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class RunFailed(Exception):
    """The run could not proceed (exit code 1)."""


Say = Callable[[str], None]


def say_stderr(msg: str) -> None:
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


@dataclass
class RunOptions:
    """How a run is driven (not what it measures: that is the RunConfig)."""

    resume: bool = False
    progress: str = "auto"  # auto | live | plain | off
    progress_interval_s: float = 10.0
    say: Say = say_stderr
    install_signals: bool = True
    progress_title: str = ""
    overwrite: bool = False
    tune_gc: bool = True


@dataclass
class RunState:
    """One run's parts, from opening the results folder to the summary."""

    cfg: RunConfig
    opts: RunOptions
    workload: Workload
    recorder: Recorder
    plan: EpisodePlan
    meta: dict[str, Any]
    attempt: int
    tracker: ProgressTracker
    sched: Scheduler | None = None
    interrupts: int = 0

    @property
    def out_dir(self) -> Path:
        return Path(self.cfg.out)

    @property
    def run_id(self) -> str:
        return str(self.cfg.run_id)


# ---- the run -----------------------------------------------------------------------------


async def execute_run(
    cfg: RunConfig,
    *,
    resume: bool = False,
    progress: str = "auto",
    progress_interval_s: float = 10.0,
    say: Say = say_stderr,
    install_signals: bool = True,
    progress_title: str = "",
    overwrite: bool = False,
    tune_gc: bool = True,
) -> RunOutcome:
    """Run `cfg` into `cfg.out`; raises ConfigError (exit 2) or RunFailed (exit 1)."""
    opts = RunOptions(
        resume=resume,
        progress=progress,
        progress_interval_s=progress_interval_s,
        say=say,
        install_signals=install_signals,
        progress_title=progress_title,
        overwrite=overwrite,
        tune_gc=tune_gc,
    )
    from agentload.results.jsonl import ResultsError

    out_dir = Path(cfg.out)
    with results_lock(out_dir, "resume" if resume else "run"):
        try:
            run = open_run(cfg, opts)
            try:
                rep = await drive(run)
            finally:
                run.recorder.close()
            _raise_write_error(run)
            return conclude(run, rep)
        except ResultsError as e:  # a damaged folder, a full disk: one line, no traceback
            raise RunFailed(str(e)) from None
        except OSError as e:
            where = e.filename or out_dir
            raise RunFailed(f"cannot write results to {where}: {e.strerror or e}") from None


def results_lock(out_dir: Path, purpose: str) -> Any:
    """The folder's writer lock; a held or unwritable folder is a one-line RunFailed."""
    from agentload.results.lock import FolderLocked, ResultsLock

    lock = ResultsLock(out_dir, purpose=purpose)
    try:
        lock.acquire()
    except FolderLocked as e:
        raise RunFailed(str(e)) from None
    except OSError as e:
        raise RunFailed(f"cannot write results to {out_dir}: {e.strerror or e}") from None
    return contextlib.closing(lock)


def open_run(cfg: RunConfig, opts: RunOptions) -> RunState:
    """Phase 1: the workload, the results folder (fresh or resumed), the plan, run.json."""
    from agentload.workloads.base import make_workload

    out_dir = Path(cfg.out)
    prev = _previous_meta(out_dir) if opts.resume else {}
    if cfg.run_id is None:
        cfg = cfg.model_copy(update={"run_id": prev.get("run_id") or new_run_id()})
    workload = make_workload(cfg)
    workload.units()  # a selection that matches nothing fails before the folder is touched
    recorder = _open_recorder(out_dir, opts)
    from agentload.redact import endpoint_secrets

    for ep_cfg in cfg.endpoints.values():
        recorder.add_secrets(endpoint_secrets(ep_cfg))
    plan = workload.plan(recorder.finished_keys())
    recorder.write_config(config_to_dict(cfg))
    prev_count = prev.get("resume_count", -1)
    attempt = (prev_count if isinstance(prev_count, int) else -1) + 1 if opts.resume else 0
    meta: dict[str, Any] = {
        "run_id": cfg.run_id,
        "kind": workload.kind,
        "command": sys.argv,
        "started_at": time.time(),
        "seed": cfg.workload.seed,
        **workload.metadata(),
        "planned_episodes": plan.total,
        "status": "running",
    }
    recorder.write_meta(meta)
    if opts.resume:
        total = "∞" if plan.total is None else plan.total
        opts.say(
            f"resuming {out_dir}: {plan.resume_done} of {total} {workload.noun} already "
            f"finished; {recorder.dropped_calls} calls of unfinished {workload.noun} set aside "
            "in dropped/" + (f"; {n} sessions rebuilt" if (n := recorder.rebuilt_sessions) else "")
        )
    tracker = ProgressTracker(total=plan.to_issue, duration_s=cfg.load.duration_s)
    return RunState(cfg, opts, workload, recorder, plan, meta, attempt, tracker)


async def drive(run: RunState) -> SchedulerReport:
    """Phase 2: endpoints, clients and scrapers up; the scheduler runs the plan."""
    from agentload.util import gc_tuned

    async with contextlib.AsyncExitStack() as stack:
        stack.enter_context(_signal_handlers(run))
        endpoints = await stack.enter_async_context(_endpoints(run))
        await run.workload.prepare(endpoints, embedded=run.cfg.embedded)
        clients = await _open_clients(run, endpoints, stack)
        await _start_scrapers(run, endpoints, stack)
        run.sched = Scheduler(run.plan, _load_spec(run.cfg), _session_runner(run, clients))
        sched = run.sched
        run.recorder.on_write_error = lambda _e: _stop_on_write_error(sched)
        run.tracker.active = lambda: sched.active
        run.tracker.lag_p99 = sched.lag.recent_p99
        if run.interrupts:
            sched.stop("interrupted")
        with gc_tuned(run.opts.tune_gc):
            async with ProgressDisplay(
                run.tracker,
                mode=run.opts.progress,
                interval_s=run.opts.progress_interval_s,
                title=run.opts.progress_title,
            ):
                return await sched.run()
    raise AssertionError("unreachable")  # pragma: no cover - the stack re-raises


def conclude(run: RunState, rep: SchedulerReport) -> RunOutcome:
    """Phase 3: summary, exit code, final run.json, report."""
    from agentload.results.summary import load_run_meta, summarize, write_summary

    out_dir = run.out_dir
    summary = summarize(out_dir, slo=run.cfg.slo or None)
    from agentload.results.client import combine_client, lag_histogram

    block = client_block(rep, run.cfg, {"resume_attempt": run.attempt})
    block["event_loop_lag_hist"] = lag_histogram(run.sched.lag.samples if run.sched else [])
    summary["client"] = combine_client(out_dir, block, resume=run.opts.resume)
    code, reason = _exit_status(run, rep, summary)
    run.meta.update(
        {
            "ended_at": time.time(),
            "status": reason,
            "exit_code": code,
            "stop_reason": rep.stop_reason,
        }
    )
    update_meta(out_dir, run.meta)
    # The summary embeds run.json: take the final status, not the "running" it read.
    summary["run"] = load_run_meta(out_dir)
    write_summary(out_dir, summary)
    files = _write_report(out_dir, summary) if run.cfg.report else []
    return RunOutcome(out_dir, code, reason, summary, rep, files)


# ---- phase 1 helpers ---------------------------------------------------------------------


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(2)


def _previous_meta(out_dir: Path) -> dict[str, Any]:
    from agentload.results.summary import load_run_meta

    return load_run_meta(out_dir) or {}


def _open_recorder(out_dir: Path, opts: RunOptions) -> Recorder:
    from agentload.results.recorder import Recorder

    try:
        return Recorder(out_dir, resume=opts.resume, overwrite=opts.overwrite and not opts.resume)
    except FileExistsError as e:
        raise ConfigError(f"{e} (agentload run --resume {out_dir}, or --overwrite)") from None
    except OSError as e:
        raise ConfigError(f"cannot write results to {out_dir}: {e.strerror}") from None


def load_saved_config(out_dir: Path) -> RunConfig:
    path = out_dir / "config.yaml"
    if not path.exists():
        raise ConfigError(f"--resume {out_dir}: no config.yaml there (not a run folder?)")
    try:
        return build_config(path=path)
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError) as e:
        reason = getattr(e, "strerror", None) or str(e).splitlines()[0][:200]
        raise ConfigError(f"--resume {out_dir}: cannot read config.yaml: {reason}") from None


# ---- phase 2 helpers ---------------------------------------------------------------------


@contextlib.contextmanager
def _signal_handlers(run: RunState) -> Iterator[None]:
    """SIGINT / SIGTERM: the first stops issuing and drains, the second cancels."""
    loop = asyncio.get_running_loop()
    say, noun = run.opts.say, run.workload.noun

    def on_signal(signame: str) -> None:
        run.interrupts += 1
        sched = run.sched
        if sched is None:
            return
        if run.interrupts == 1:
            say(
                f"{signame}: no new {noun}; waiting up to {run.cfg.load.drain_timeout_s:g}s "
                f"for {sched.active} in flight (again to stop now)"
            )
            sched.stop("interrupted")
        else:
            say(f"{signame}: cancelling {noun} in flight")
            sched.abort()

    installed: list[signal.Signals] = []
    if run.opts.install_signals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, on_signal, sig.name)
                installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


@contextlib.asynccontextmanager
async def _endpoints(run: RunState) -> AsyncIterator[dict[str, EndpointConfig]]:
    """The configured endpoints by role, or the embedded simulator for every role (started
    here, stopped on the way out)."""
    cfg = run.cfg
    if not cfg.embedded:
        endpoints = dict(cfg.endpoints)
        run.meta["endpoints"] = _describe_endpoints(endpoints)
        yield endpoints
        return
    # Started from the main thread: the death signal is tied to the starting thread.
    sim = start_embedded_sim(cfg, run.out_dir / "sim.log")
    try:
        ep = EndpointConfig(
            name="sim", base_url=sim.base_url, model=sim.config.model, metrics_url=sim.metrics_url
        )
        endpoints = {role: ep for role in run.workload.roles}
        run.meta["endpoints"] = _describe_endpoints(endpoints)
        run.opts.say(
            f"no endpoint given: started the embedded simulator on {sim.base_url} "
            f"(profile {cfg.sim.profile}, speedup {cfg.sim.speedup:g}"
            + (f", fault rate {cfg.sim.fault_rate:g}" if cfg.sim.fault_rate else "")
            + "); it stops when the run ends. Use --base-url to benchmark a real server, "
            "--sim-profile / --sim-speedup to change the simulator."
        )
        yield endpoints
    finally:
        await asyncio.to_thread(sim.stop)


def _describe_endpoints(endpoints: Mapping[str, EndpointConfig]) -> dict[str, Any]:
    return {
        r: {"name": e.name, "base_url": e.base_url, "model": e.model} for r, e in endpoints.items()
    }


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


async def _open_clients(
    run: RunState, endpoints: Mapping[str, EndpointConfig], stack: contextlib.AsyncExitStack
) -> dict[str, ChatClient]:
    recorder, tracker = run.recorder, run.tracker

    def on_record(rec: CallRecord) -> None:
        recorder.record_call(rec)
        tracker.on_call(rec)

    return {
        role: await stack.enter_async_context(ChatClient(ep, on_record=on_record))
        for role, ep in endpoints.items()
    }


async def _start_scrapers(
    run: RunState, endpoints: Mapping[str, EndpointConfig], stack: contextlib.AsyncExitStack
) -> None:
    """One Prometheus scraper per distinct metrics URL, for the run's whole length."""
    if not run.cfg.metrics.enabled:
        return
    from agentload.servermetrics.scraper import MetricsScraper

    seen: set[str] = set()
    for ep in endpoints.values():
        if ep.metrics_url and ep.metrics_url not in seen:
            seen.add(ep.metrics_url)
            scraper = MetricsScraper(
                ep.metrics_url,
                run.recorder,
                interval_s=run.cfg.metrics.interval_s,
                endpoint=ep.name,
            )
            await stack.enter_async_context(scraper)


def session_id_for(run_id: str, item: WorkItem, attempt: int) -> str:
    task = item.task_id.replace("/", "-")
    if item.warmup:
        # Warmup repeats on resume, so its ids carry the attempt to stay unique.
        return f"{run_id}-warmup{attempt}-{item.index}-{task}"
    return f"{run_id}-{task}-t{item.trial}"


def _session_runner(run: RunState, clients: Mapping[str, ChatClient]) -> Any:
    """The scheduler's `run_one`: one session of the workload, recorded with its timing."""
    workload, recorder, tracker = run.workload, run.recorder, run.tracker
    run_id, attempt = run.run_id, run.attempt

    async def run_one(item: WorkItem, intended_ns: int, actual_ns: int) -> None:
        out = await workload.run_session(item, session_id_for(run_id, item, attempt), clients)
        session = out.session
        session["run_id"] = run_id
        session["warmup"] = item.warmup
        session["attempt"] = attempt  # groups the monotonic clock's records
        session["intended_start_ns"] = intended_ns
        session["sched_delay_s"] = (actual_ns - intended_ns) / 1e9
        recorder.record_episode(session, out.trajectory)
        tracker.on_episode(session)

    return run_one


def _load_spec(cfg: RunConfig) -> LoadSpec:
    ld = cfg.load
    return LoadSpec(
        mode=ld.mode,
        concurrency=ld.effective_concurrency,
        rate=ld.rate,
        burstiness=ld.burstiness,
        max_concurrency=ld.max_concurrency,
        duration_s=ld.duration_s,
        drain_timeout_s=ld.drain_timeout_s,
        lag_interval_s=ld.lag_interval_s,
        seed=cfg.workload.seed,
    )


# ---- phase 3 helpers ---------------------------------------------------------------------


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


def _exit_status(
    run: RunState, rep: SchedulerReport, summary: Mapping[str, Any]
) -> tuple[int, str]:
    sessions = (summary.get("counts") or {}).get("sessions", 0)
    if rep.stop_reason == "interrupted":
        return EXIT_INTERRUPTED, "interrupted"
    if rep.stop_reason == "failed":
        return EXIT_FAILED, f"failed: {rep.error}"
    if sessions and _infra_failures(run.out_dir) >= sessions:
        noun = run.workload.noun.removesuffix("s")
        return EXIT_FAILED, f"failed: every {noun} ended with an infrastructure error"
    return EXIT_OK, rep.stop_reason


def _stop_on_write_error(sched: Scheduler | None) -> None:
    """Results can no longer be written: start nothing more, cancel what is in flight."""
    if sched is not None:
        sched.stop("failed")
        sched.abort()


def _raise_write_error(run: RunState) -> None:
    err = run.recorder.write_error
    if err is not None:
        with contextlib.suppress(OSError):  # the disk may still be full
            update_meta(run.out_dir, {"status": f"failed: {err}", "exit_code": 1})
        raise err


def _infra_failures(out_dir: Path) -> int:
    from agentload.results.jsonl import load_jsonl

    return sum(
        1
        for s in load_jsonl(out_dir / "sessions.jsonl")
        if not s.get("warmup") and s.get("termination") == "infra_error"
    )


def _write_report(out_dir: Path, summary: Mapping[str, Any]) -> list[Path]:
    try:
        from agentload.report import write_report
    except ImportError:  # the report package is optional for a run to be useful
        log.warning("report module unavailable; wrote summary.json only")
        return []
    return list(write_report(out_dir, summary))


def update_meta(out_dir: Path, meta: Mapping[str, Any]) -> None:
    """Update run.json after the recorder closed (merged, atomic)."""
    from agentload.redact import redact_meta
    from agentload.results.jsonl import atomic_write_bytes

    cur = _previous_meta(out_dir)
    cur.update(redact_meta(meta))
    atomic_write_bytes(out_dir / "run.json", orjson.dumps(cur, option=orjson.OPT_INDENT_2))
