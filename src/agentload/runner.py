"""One run, wired end to end: config → workload → (embedded sim) → clients → scheduler →
recorder → summary and report. `execute_run` reads as the run's phases; the workload kind
(episodes, replay, …) plugs in through `agentload.workloads.base.Workload`.

Exit codes (what `agentload run` / `sweep` return, and what scripts can rely on; decided in
`agentload.outcome`, see docs/reliability.md): 0 sessions completed; 1 the run failed (nothing
measured, every call failed, too many infrastructure errors, the endpoint stayed down, a
harness error, or the summary / report could not be written); 2 bad usage or configuration;
130 interrupted (SIGINT / SIGTERM) — results so far are written and resumable.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
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

from agentload.client import EndpointConfig
from agentload.config import CORE_ROLES, ConfigError, RunConfig, build_config, config_to_dict
from agentload.engines.launch import EngineError, EngineStartError
from agentload.engines.preflight import preflight_for_run, seeded_roles
from agentload.engines.run import RunEngines, launched_engines
from agentload.execute import ExecutorFactory, open_local
from agentload.outcome import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    RunFailed,
    Verdict,
    concurrency_cap,
    judge,
    say_stderr,
)
from agentload.redact import endpoint_secrets, redact_meta, redacted_paths
from agentload.results.client import combine_client, lag_histogram
from agentload.results.context import run_context
from agentload.results.jsonl import ResultsError, atomic_write_bytes
from agentload.results.lock import FolderLocked, ResultsLock
from agentload.results.recorder import Recorder
from agentload.results.records import ClientBlock, Summary
from agentload.results.resume import count_infra_episodes, drop_infra_sessions
from agentload.results.summary import load_run_meta, summarize, write_summary
from agentload.scheduler import (
    EpisodePlan,
    ProgressDisplay,
    ProgressTracker,
    SchedulerReport,
)
from agentload.servermetrics.scraper import MetricsScraper
from agentload.sim import SimConfig, SimProcess
from agentload.util import gc_tuned
from agentload.workloads.base import make_workload
from agentload.workloads.sampling import describe, sampling_block

if TYPE_CHECKING:
    from agentload.execute import Executor
    from agentload.scheduler.outage import OutageGate
    from agentload.workloads.base import Workload

log = logging.getLogger("agentload.run")

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "RunFailed", "execute_run"]


Say = Callable[[str], None]


@dataclass
class RunOutcome:
    out_dir: Path
    exit_code: int
    stop_reason: str
    summary: Summary | None = None
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
    executor: ExecutorFactory | None = None
    """What runs the sessions (None: agentload.execute.open_executor's choice)."""


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
    workers: int = 1
    """Closed loop: sessions in flight (the configured concurrency, capped at the plan)."""
    processes: tuple[int, int] = (1, 1)
    """Worker processes to start, and the most auto may grow to; (1, 1) runs the sessions in
    this process (agentload.distributed)."""
    sched: Executor | None = None
    gate: OutageGate | None = None
    sim: Any = None
    interrupts: int = 0
    finishing_interrupts: int = -1
    """Signals received once the sessions are over (-1 until then)."""
    engines: Any = None  # engines.run.RunEngines of endpoints with `launch:`
    # The client's own CPU time at the start, for the report's client-health check.
    cpu_start_s: float = field(default_factory=time.process_time)
    cpu_run_s: float | None = None

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
    executor: ExecutorFactory | None = None,
) -> RunOutcome:
    """Run `cfg` into `cfg.out`; raises ConfigError (exit 2) or RunFailed (exit 1).
    `executor` runs the sessions in place of the configuration's choice (agentload.execute)."""
    opts = RunOptions(
        resume=resume,
        progress=progress,
        progress_interval_s=progress_interval_s,
        say=say,
        install_signals=install_signals,
        progress_title=progress_title,
        overwrite=overwrite,
        tune_gc=tune_gc,
        executor=executor,
    )

    workload = make_workload(cfg)
    workload.units()  # a selection that matches nothing fails before the folder is touched
    checked: tuple[dict[str, EndpointConfig], dict[str, Any] | None] | None = None
    if not _late_preflight(cfg):
        # Before the results folder is touched: a failed preflight leaves nothing behind, so
        # the same --out works for the next try.
        checked = await _preflight(cfg, used_endpoints(cfg.endpoints, workload), workload, opts.say)
        cfg = workload.cfg = cfg.model_copy(update={"endpoints": {**cfg.endpoints, **checked[0]}})
    if cfg.ray is not None:  # an unreachable cluster fails before the folder is touched
        from agentload.integrations.ray.backend import RayUnavailable, connect  # lazy: optional

        try:
            connect(cfg.ray)
        except RayUnavailable as e:
            raise RunFailed(str(e)) from None
    out_dir = Path(cfg.out)
    with results_lock(out_dir, "resume" if resume else "run"):
        try:
            run = open_run(cfg, opts, workload)
            if checked is not None:
                _note_endpoints(run, *checked)
            with _signal_handlers(run):
                try:
                    rep = await drive(run)
                except BaseException as e:
                    # Whatever stops the run here, run.json must not stay "running".
                    _mark_ended(run, e)
                    raise
                finally:
                    run.recorder.close()
                _raise_write_error(run)
                run.finishing_interrupts = 0
                return await conclude(run, rep)
        except ResultsError as e:  # a damaged folder, a full disk: one line, no traceback
            raise RunFailed(str(e)) from None
        except OSError as e:
            where = e.filename or out_dir
            raise RunFailed(f"cannot write results to {where}: {e.strerror or e}") from None


def results_lock(out_dir: Path, purpose: str) -> Any:
    """The folder's writer lock; a held or unwritable folder is a one-line RunFailed."""

    lock = ResultsLock(out_dir, purpose=purpose)
    try:
        lock.acquire()
    except FolderLocked as e:
        raise RunFailed(str(e)) from None
    except OSError as e:
        raise RunFailed(f"cannot write results to {out_dir}: {e.strerror or e}") from None
    return contextlib.closing(lock)


def open_run(cfg: RunConfig, opts: RunOptions, workload: Workload) -> RunState:
    """Phase 1: the results folder (fresh or resumed), the plan, run.json."""
    out_dir = Path(cfg.out)
    prev = _previous_meta(out_dir) if opts.resume else {}
    if cfg.run_id is None:
        cfg = cfg.model_copy(update={"run_id": prev.get("run_id") or new_run_id()})

    # Sessions that ended on infrastructure errors did not run: a resume redoes them.
    redo = drop_infra_sessions(out_dir) if opts.resume else 0

    secrets = [endpoint_secrets(ep_cfg) for ep_cfg in cfg.endpoints.values()]
    # config.yaml is written before the record files, so a folder is resumable from the start.
    recorder = _open_recorder(out_dir, opts, config_to_dict(cfg), secrets)
    plan = workload.plan(recorder.finished_keys())
    issue = None if plan.to_issue is None else plan.to_issue + cfg.load.warmup.episodes
    workers, note = concurrency_cap(cfg.load.mode, cfg.load.effective_concurrency, issue)
    if note:
        opts.say(note)

    cluster = None
    if cfg.ray is not None:
        from agentload.integrations.ray.backend import cluster_workers  # lazy: optional (ray)

        cluster = functools.partial(cluster_workers, cfg.ray)
    # lazy: start-up: agentload.distributed (the worker machinery) loads only for a run over
    # workers, never for a one-process run.
    from agentload.distributed.sizing import decide_workers

    *processes, note = decide_workers(cfg, workers, cluster)
    if note:
        opts.say(note)
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
        # What was measured, in the kind's own words (the report's and compare's context).
        "workload": {**workload.context_block(), "noun": workload.noun},
        "status": "running",
    }
    recorder.write_meta(meta)
    if opts.resume:
        total = "∞" if plan.total is None else plan.total
        opts.say(
            f"resuming {out_dir}: {plan.resume_done} of {total} {workload.noun} already "
            f"finished; {recorder.dropped_calls} calls of unfinished {workload.noun} set aside "
            "in dropped/"
            + (f"; {n} sessions rebuilt" if (n := recorder.rebuilt_sessions) else "")
            + (f"; {redo} {workload.noun} ended by infrastructure errors run again" if redo else "")
        )
    # A replay counts its ETA in turns (agentload.workloads.replay.TurnProgress).
    make_tracker = getattr(workload, "progress_tracker", None)
    tracker = (make_tracker(plan) if make_tracker else ProgressTracker)(
        total=plan.to_issue,
        duration_s=cfg.load.duration_s,
        noun=workload.noun,
        graded=workload.graded,
    )
    run = RunState(cfg, opts, workload, recorder, plan, meta, attempt, tracker, workers)
    run.processes = (processes[0], processes[1])
    return run


async def drive(run: RunState) -> SchedulerReport:
    """Phase 2: endpoints, clients and scrapers up; the scheduler runs the plan."""

    async with contextlib.AsyncExitStack() as stack:
        endpoints = await stack.enter_async_context(_endpoints(run))
        # The simulator or a launched engine, once it is up (unless the run was interrupted
        # while it started).
        if _late_preflight(run.cfg) and not run.interrupts:
            endpoints, detected = await _preflight(run.cfg, endpoints, run.workload, run.opts.say)
            _note_endpoints(run, endpoints, detected)
        # In this process, over worker processes or on Ray actors (agentload.execute).
        sched = run.sched = await (run.opts.executor or open_executor)(run, endpoints, stack)
        await _start_scrapers(run, endpoints, stack)
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
                # CPU time over the scheduler's window, the one its elapsed_s covers (start-up
                # and the summary are not the load's, and a resume may have nothing to run).
                run.cpu_start_s = time.process_time()
                report = await sched.run()
                run.cpu_run_s = time.process_time() - run.cpu_start_s
                return report
    raise AssertionError("unreachable")  # pragma: no cover - the stack re-raises


async def conclude(run: RunState, rep: SchedulerReport) -> RunOutcome:
    """Phase 3: summary, exit code, final run.json, report.

    run.json ends with the status the exit code says, whatever fails here: a summary or
    report that cannot be written makes the run `failed` (exit 1) with the reason, and an
    interrupt while the summary is written makes it `interrupted` (exit 130) with the report
    skipped.
    """

    summary, verdict = _summarize(run, rep)
    if await _interrupted(run):
        verdict = Verdict(EXIT_INTERRUPTED, "interrupted")
    _settle(run, rep, verdict)
    if summary is not None:
        try:
            summary = _write_summary(run, summary)
        except Exception as e:
            verdict = Verdict(EXIT_FAILED, f"failed: summary.json could not be written: {_why(e)}")
            _settle(run, rep, verdict)
    if await _interrupted(run) and verdict.code != EXIT_INTERRUPTED:
        verdict = Verdict(EXIT_INTERRUPTED, "interrupted")
        summary = _settle(run, rep, verdict, summary)
    files: list[Path] = []
    if run.cfg.report and summary is not None:
        if verdict.code == EXIT_INTERRUPTED and run.finishing_interrupts > 0:
            run.opts.say(
                f"interrupted: report skipped (write it with `agentload report {run.out_dir}`)"
            )
        else:
            files, failed = _report(run, summary, verdict)
            if failed is not None:  # the report could not be written: the run failed
                verdict = failed
                summary = _settle(run, rep, verdict, summary)
            if await _interrupted(run) and verdict.code != EXIT_INTERRUPTED:
                # A signal during the (blocking) report: written, but the run was stopped.
                verdict = Verdict(EXIT_INTERRUPTED, "interrupted")
                summary = _settle(run, rep, verdict, summary)
    if verdict.code == EXIT_FAILED and rep.stop_reason != "failed":
        run.opts.say(f"the {run.workload.noun} ran, but the run {verdict.status}")
    return RunOutcome(run.out_dir, verdict.code, verdict.status, summary, rep, files)


# ---- phase 1 helpers ---------------------------------------------------------------------


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(2)


def _previous_meta(out_dir: Path) -> dict[str, Any]:

    return load_run_meta(out_dir) or {}


def _open_recorder(
    out_dir: Path, opts: RunOptions, config: dict[str, Any] | None = None, secrets: Any = ()
) -> Recorder:

    try:
        return Recorder(
            out_dir,
            resume=opts.resume,
            overwrite=opts.overwrite and not opts.resume,
            config=config,
            secrets=secrets,
        )
    except FileExistsError as e:
        raise ConfigError(f"{e} (agentload run --resume {out_dir}, or --overwrite)") from None
    except OSError as e:
        raise ConfigError(f"cannot write results to {out_dir}: {e.strerror}") from None


def load_saved_config(out_dir: Path) -> RunConfig:
    path = out_dir / "config.yaml"
    if not path.exists():
        raise ConfigError(f"--resume {out_dir}: no config.yaml there (not a run folder?)")
    try:
        cfg = build_config(path=path)
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError) as e:
        reason = getattr(e, "strerror", None) or str(e).splitlines()[0][:200]
        raise ConfigError(f"--resume {out_dir}: cannot read config.yaml: {reason}") from None

    # Secrets were never written down; sending their placeholders would be a silent lie.
    hidden = redacted_paths(cfg.model_dump(mode="json", by_alias=True, exclude={"sim"}))
    if hidden:
        raise ConfigError(
            f"--resume {out_dir}: config.yaml holds secrets that were not saved "
            f"({', '.join(hidden[:5])}); keep keys in the environment (api_key_env, "
            "OPENAI_API_KEY) so a resume can read them, or start a new run"
        )
    return cfg


# ---- phase 2 helpers ---------------------------------------------------------------------


@contextlib.contextmanager
def _signal_handlers(run: RunState) -> Iterator[None]:
    """SIGINT / SIGTERM: the first stops issuing and drains, the second cancels."""
    loop = asyncio.get_running_loop()
    say, noun = run.opts.say, run.workload.noun

    def on_signal(signame: str) -> None:
        run.interrupts += 1
        if run.finishing_interrupts >= 0:
            run.finishing_interrupts += 1
            say(f"{signame}: finishing the results files, then stopping (exit 130)")
            return
        sched = run.sched
        if sched is None:
            if run.engines:
                run.engines.cancel()  # interrupted while engines start: stop at once
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
        async with _launched(run) as launched:
            endpoints = used_endpoints(launched, run.workload)
            run.meta["endpoints"] = _describe_endpoints(endpoints)
            yield endpoints
        return
    # Started from the main thread: the death signal is tied to the starting thread.
    sim = run.sim = start_embedded_sim(cfg, run.out_dir / "sim.log")
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


def used_endpoints(
    endpoints: Mapping[str, EndpointConfig], workload: Workload
) -> dict[str, EndpointConfig]:
    """The endpoints the workload calls: its roles, and any further named role (a judge); a
    replay, which calls no user, neither checks nor describes the user endpoint a --base-url
    also set."""
    return {r: e for r, e in endpoints.items() if r in workload.roles or r not in CORE_ROLES}


def _late_preflight(cfg: RunConfig) -> bool:
    """Endpoints that exist only once the run starts them (the embedded simulator, engines
    with `launch:`) are checked then; the others before the results folder is touched."""
    return cfg.embedded or any(ep.launch is not None for ep in cfg.endpoints.values())


async def _preflight(
    cfg: RunConfig, endpoints: dict[str, EndpointConfig], workload: Workload, say: Say
) -> tuple[dict[str, EndpointConfig], dict[str, Any] | None]:
    """Preflight (unless disabled) and metrics URLs before the first session: (endpoints to
    use, run.json's endpoints_detected). Raises PreflightFailed (exit code 2)."""

    w = cfg.workload
    return await preflight_for_run(
        endpoints,
        enabled=cfg.preflight,
        tool_roles=workload.tool_roles(),
        metrics=cfg.metrics.enabled,
        say=say,
        seeded=seeded_roles(w.request_seed, w.temperature, endpoints),
        first_call=workload.first_call_tokens(),
    )


def _note_endpoints(
    run: RunState, endpoints: Mapping[str, EndpointConfig], detected: dict[str, Any] | None
) -> None:
    """run.json: what preflight found, and the sampling parameters every call carries."""

    if detected is not None:
        run.meta["endpoints_detected"] = detected
    run.meta["sampling"] = sampling_block(run.cfg, endpoints, run.workload.max_tokens_by_role())
    run.recorder.write_meta(run.meta)
    run.opts.say(describe(run.meta["sampling"]))


@contextlib.asynccontextmanager
async def _launched(run: RunState) -> AsyncIterator[dict[str, EndpointConfig]]:
    """Endpoints with `launch:` get their engine before the first episode (stopped at the
    end); a launch problem is exit 2, an engine that does not come up exit 1."""

    run.engines = RunEngines(run.cfg.endpoints, run.out_dir, run.opts.say)
    try:
        async with launched_engines(run.engines, run.cfg.endpoints) as endpoints:
            if run.engines:
                run.meta["engines"] = run.engines.meta()
            yield endpoints
    except EngineError as e:
        raise ConfigError(str(e)) from None
    except EngineStartError as e:
        raise RunFailed(str(e)) from None


def _describe_endpoints(endpoints: Mapping[str, EndpointConfig]) -> dict[str, Any]:
    return {
        r: {"name": e.name, "base_url": e.base_url, "model": e.model} for r, e in endpoints.items()
    }


def start_embedded_sim(cfg: RunConfig, log_path: Path | None) -> Any:
    """Start the simulator subprocess on a free loopback port; returns the SimProcess."""

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


async def _start_scrapers(
    run: RunState, endpoints: Mapping[str, EndpointConfig], stack: contextlib.AsyncExitStack
) -> None:
    """One Prometheus scraper per distinct metrics URL list, for the run's whole length: the
    engine's (several: replicas, one sample summed over them) and the GPUs' DCGM exporters
    (several: hosts, one sample with all their GPUs), by the same scraper and parser."""
    if not run.cfg.metrics.enabled:
        return

    seen: set[str] = set()
    for ep in endpoints.values():
        for urls, gpu in ((ep.all_metrics_urls, False), (ep.gpu_metrics_urls, True)):
            if not urls or ",".join(urls) in seen:
                continue
            seen.add(",".join(urls))
            scraper = MetricsScraper(
                urls,
                run.recorder,
                interval_s=run.cfg.metrics.interval_s,
                endpoint=ep.name,
                gpu=gpu,
            )
            await stack.enter_async_context(scraper)


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


def _summarize(run: RunState, rep: SchedulerReport) -> tuple[Summary | None, Verdict]:
    """(summary, verdict); odd records or a full disk must not leave run.json "running"."""

    out_dir = run.out_dir
    try:
        summary = summarize(out_dir, slo=run.cfg.slo or None)
        cpu_s = (
            run.cpu_run_s if run.cpu_run_s is not None else time.process_time() - run.cpu_start_s
        )
        extra = {
            "resume_attempt": run.attempt,
            "cpu_s": cpu_s,
            "outages": run.gate.summary() if run.gate else None,
        }
        if run.sched is not None:  # the executor's own entries (each worker's health, ...)
            extra.update(run.sched.client_extra(cpu_s))
        block = client_block(rep, run.cfg, extra)
        block["event_loop_lag_hist"] = lag_histogram(run.sched.lag.samples if run.sched else [])
        client = ClientBlock(**combine_client(out_dir, block, resume=run.opts.resume))
        summary = summary.model_copy(update={"client": client})
        stopped = summary.errors.engine_stopped
        if stopped:  # the likeliest cause of a dead engine, before the verdict
            run.opts.say(stopped.message)
        verdict = judge(
            stop_reason=rep.stop_reason,
            error=rep.error,
            sessions=summary.counts.sessions,
            calls=summary.counts.calls,
            failed_calls=summary.errors.calls_failed,
            failed_by_kind=summary.errors.by_kind,
            infra_episodes=count_infra_episodes(out_dir),
            max_infra_share=run.cfg.load.max_infra_error_share,
        )
    except Exception as e:
        log.debug("summary failed", exc_info=True)
        return None, Verdict(EXIT_FAILED, f"failed: the summary could not be computed: {_why(e)}")
    return summary, verdict


async def _interrupted(run: RunState) -> bool:
    # Signal handlers run on the event loop: give it a turn between the blocking steps (a
    # signal takes three: the wake-up read, the handler's scheduling, the handler).
    for _ in range(4):
        await asyncio.sleep(0)
    # Any SIGINT / SIGTERM, also one after the last episode ended: the run exits 130.
    return run.interrupts > 0


def _settle(
    run: RunState, rep: SchedulerReport, verdict: Verdict, summary: Summary | None = None
) -> Summary | None:
    """run.json takes the verdict (and summary.json's copy of run.json, when given); the
    summary as written."""
    run.meta.update(
        ended_at=time.time(),
        status=verdict.status,
        exit_code=verdict.code,
        stop_reason=rep.stop_reason,
    )
    try:
        update_meta(run.out_dir, run.meta)
    except OSError as e:
        run.opts.say(f"cannot update run.json: {_why(e)}")
    if summary is not None:
        with contextlib.suppress(Exception):
            return _write_summary(run, summary)
    return summary


def _write_summary(run: RunState, summary: Summary) -> Summary:
    """summary.json with the final run.json (not the "running" it read); the summary written."""
    meta = {"run": load_run_meta(run.out_dir), "context": run_context(run.out_dir)}
    summary = summary.model_copy(update=meta)
    write_summary(run.out_dir, summary)
    return summary


def _report(run: RunState, summary: Summary, verdict: Verdict) -> tuple[list[Path], Verdict | None]:
    """The report's files, and the run's new verdict when the report could not be written
    (None: the verdict stands)."""
    try:
        from agentload.report import write_report  # lazy: optional (a run is useful without)
    except ImportError:  # the report package is optional for a run to be useful
        log.warning("report module unavailable; wrote summary.json only")
        return [], None
    try:
        return list(write_report(run.out_dir, summary)), None
    except Exception as e:
        log.debug("report failed", exc_info=True)
        if verdict.code == EXIT_INTERRUPTED:
            return [], None
        return [], Verdict(EXIT_FAILED, f"failed: the report could not be written: {_why(e)}")


async def open_executor(
    run: RunState, endpoints: Mapping[str, EndpointConfig], stack: contextlib.AsyncExitStack
) -> Executor:
    """The executor the configuration asks for: worker processes or Ray actors
    (agentload.distributed, imported only then: a one-process run never loads it) when the
    run goes over workers, else this process."""
    if run.cfg.ray is None and run.processes == (1, 1):
        return await open_local(run, endpoints, stack)
    from agentload.distributed.driver import coordinator  # lazy: start-up (see above)

    if run.cfg.ray is not None:
        from agentload.integrations.ray.backend import ray_backend  # lazy: optional dependency

        return coordinator(run, endpoints, ray_backend(run, endpoints))
    from agentload.distributed.process import ProcessBackend  # lazy: start-up (see above)

    return coordinator(run, endpoints, ProcessBackend())


def _stop_on_write_error(sched: Executor | None) -> None:
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


def _why(e: BaseException) -> str:
    if isinstance(e, OSError) and e.strerror:
        return f"{e.strerror}" + (f" ({e.filename})" if e.filename else "")
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _mark_ended(run: RunState, e: BaseException) -> None:
    if isinstance(e, KeyboardInterrupt | asyncio.CancelledError):
        status, code = "interrupted", EXIT_INTERRUPTED
    else:
        status = f"failed: {e}" if isinstance(e, ConfigError | RunFailed) else f"failed: {_why(e)}"
        code = EXIT_USAGE if isinstance(e, ConfigError) else EXIT_FAILED
    run.meta.update(ended_at=time.time(), status=status, exit_code=code)
    with contextlib.suppress(Exception):
        update_meta(run.out_dir, run.meta)


def update_meta(out_dir: Path, meta: Mapping[str, Any]) -> None:
    """Update run.json after the recorder closed (merged, atomic)."""

    cur = _previous_meta(out_dir)
    cur.update(redact_meta(meta))
    atomic_write_bytes(out_dir / "run.json", orjson.dumps(cur, option=orjson.OPT_INDENT_2))
