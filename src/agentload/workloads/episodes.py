"""The `episodes` workload kind: live agent ↔ environment ↔ user episodes over the domains'
tasks, graded, trial after trial (the default kind)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

import orjson

from agentload.client import ChatClient, EndpointConfig
from agentload.client.tokens import HeuristicCounter
from agentload.config import DEFAULT_AGENT_MAX_TOKENS, ConfigError, RunConfig
from agentload.domains import GRADER_VERSION, domain_names, get_domain
from agentload.domains.tau2 import configure
from agentload.domains.tau2.data import Tau2DataError, data_dir, splits
from agentload.domains.tau2.grading import GRADER_VERSION as TAU2_GRADER
from agentload.http_sessions import open_session
from agentload.scheduler import PlanError, WorkItem, select_tasks
from agentload.wire import ROLE_HEADER, SESSION_HEADER, TASK_HEADER
from agentload.workloads.base import SessionOutcome, Workload
from agentload.workloads.episode import (
    EpisodeOptions,
    EpisodeSpec,
    episode_seed,
    run_episode,
)


def available_tasks(domains: list[str]) -> dict[str, list[str]]:
    """Task ids of each registered domain; only the `domains` asked for are loaded (when
    none is named, every domain but the τ² family, whose data must be pointed at)."""

    names = domain_names()
    wanted = [d for d in domains if d in names] or [d for d in names if not d.startswith("tau2-")]
    out: dict[str, list[str]] = {}
    for d in names:
        dom: Any = get_domain(d) if d in wanted else None
        # A τ² task is selectable whatever its split: the split picks a whole domain's tasks.
        tasks = [] if dom is None else dom.all_tasks() if d.startswith("tau2-") else dom.tasks()
        out[d] = [t.id for t in tasks]
    return out


def needed_domains(cfg: RunConfig) -> list[str]:
    """The domains the configuration names, in `domains` or through task selectors."""
    doms = list(cfg.workload.domains)
    for sel in cfg.workload.tasks:
        d = sel.partition("/")[0]
        if d not in doms:
            doms.append(d)
    return doms


def resolve_tasks(cfg: RunConfig) -> list[str]:
    """The task ids the configuration selects, in order."""

    needed = needed_domains(cfg)
    if any(d.startswith("tau2-") for d in needed):
        _check_tau2(cfg)
    unknown = [d for d in needed if d not in domain_names()]
    if unknown:  # said before any domain loads its tasks (seconds for a large one)
        raise ConfigError(
            f"invalid configuration: field 'workload.tasks': unknown domain {unknown[0]!r} "
            f"(known: {', '.join(domain_names())})"
        )
    try:
        available = available_tasks(needed)
        for d in needed:  # a domain the selectors name must be loaded even when not listed
            if d in domain_names() and not available[d]:
                available.update(available_tasks([d]))
        selectors = list(cfg.workload.tasks)
        if any(d.startswith("tau2-") for d in needed):
            selectors = _tau2_selectors(cfg, available)
        return select_tasks(selectors, cfg.workload.domains, available)
    except PlanError as e:
        raise ConfigError(f"invalid configuration: field 'workload.tasks': {e}") from None


def _tau2_selectors(cfg: RunConfig, available: dict[str, list[str]]) -> list[str]:
    """The task selectors with each whole τ² domain spelled out as its split's tasks (the
    split decides what a whole domain runs; any task of the file can be named)."""

    sels = list(cfg.workload.tasks) or list(cfg.workload.domains)
    out: list[str] = []
    for sel in sels:
        d, _, rest = sel.partition("/")
        if not d.startswith("tau2-") or d not in available:
            out.append(sel)
            continue
        domain: Any = get_domain(d)
        if rest in ("", "*"):
            out.extend(t.id for t in domain.tasks())
        else:
            out.append(sel)
    return out


def configure_tau2(cfg: RunConfig) -> None:
    """Point the τ² family at the configured data folder and split (this process and the
    processes it starts: workers and the embedded simulator inherit the environment)."""

    t = cfg.workload.tau2
    configure(t.data, t.split)


def _check_tau2(cfg: RunConfig) -> None:
    """The data folder and split, checked before any task loads: one line naming the field."""

    configure_tau2(cfg)
    try:
        root = data_dir()
    except Tau2DataError as e:
        raise ConfigError(f"invalid configuration: field 'workload.tau2.data': {e}") from None
    split = cfg.workload.tau2.split
    # The split decides only what a whole-domain selection runs; named tasks run as named.
    whole = set(cfg.workload.domains) | {
        sel.partition("/")[0] for sel in cfg.workload.tasks if sel.partition("/")[2] in ("", "*")
    }
    if not cfg.workload.tasks:
        whole |= set(needed_domains(cfg))
    for d in needed_domains(cfg):
        if not d.startswith("tau2-") or d not in whole:
            continue
        key = d.removeprefix("tau2-")
        try:
            known = splits(key) or {"base": []}
        except Tau2DataError as e:
            raise ConfigError(f"invalid configuration: field 'workload.tau2.data': {e}") from None
        except KeyError:
            continue  # not a τ² domain of ours: the unknown-domain check names it
        if split not in known:
            raise ConfigError(
                f"invalid configuration: field 'workload.tau2.split': {d} has no split "
                f"{split!r} in {root}; known: {', '.join(known)}"
            )


def warm_tau2(task_ids: list[str]) -> None:
    """Load the τ² domains' tasks, databases and prompts in this process before the first
    episode: a 14 MB task file or a 7 MB database parsed inside the first episode would stall
    the event loop under measurement."""

    for name in sorted({t.partition("/")[0] for t in task_ids if t.startswith("tau2-")}):
        d: Any = get_domain(name)
        d.get_task(next(t for t in task_ids if t.startswith(name + "/")))
        d.make_world()
        d.system_prompt()


def episode_options(cfg: RunConfig) -> EpisodeOptions:
    """The options of the run's episodes: its workload configuration."""
    return cfg.workload


async def prime_sim(base_url: str, model: str, tasks: list[str]) -> None:
    """One unrecorded request per domain and role so the simulator loads the domain's data
    before the first measured call (otherwise the first episodes' TTFT carries a one-off
    load time)."""
    import aiohttp

    # lazy: start-up: aiohttp's client loads only when a simulator is primed.

    firsts: dict[str, str] = {}
    for t in tasks:
        firsts.setdefault(t.partition("/")[0], t)
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 1,
        "stream": False,
    }
    async with open_session() as http:
        for task in firsts.values():
            for role in ("agent", "user"):
                hdrs = {ROLE_HEADER: role, TASK_HEADER: task, SESSION_HEADER: "agentload-prime"}
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with http.post(
                        f"{base_url}/chat/completions",
                        json=body,
                        headers=hdrs,
                        timeout=aiohttp.ClientTimeout(total=30),
                    ) as r:
                        await r.read()


class EpisodesWorkload(Workload):
    """Live episodes of the selected tasks, `trials` times each."""

    kind = "episodes"
    noun = "episodes"

    def __init__(self, cfg: RunConfig) -> None:
        super().__init__(cfg)
        self._tasks: list[str] | None = None
        self.options = episode_options(cfg)
        configure_tau2(cfg)

    def units(self) -> list[str]:
        if self._tasks is None:
            self._tasks = resolve_tasks(self.cfg)
        return self._tasks

    def trials(self) -> int:
        return self.cfg.workload.trials

    def metadata(self) -> dict[str, Any]:
        meta: dict[str, Any] = {"tasks": len(self.units()), "trials": self.trials()}
        with contextlib.suppress(Exception):
            domains = sorted({t.partition("/")[0] for t in self.units()})
            meta["grader_version"] = GRADER_VERSION
            meta["data_versions"] = {d: get_domain(d).data_version for d in domains}
            tau2 = [d for d in domains if d.startswith("tau2-")]
            if tau2:
                meta["tau2"] = {
                    "data_dir": str(data_dir()),
                    "split": self.cfg.workload.tau2.split,
                    "grader_version": TAU2_GRADER,
                    "files": {d: getattr(get_domain(d), "data_hashes", None) for d in tau2},
                    "judge": "judge" in self.cfg.endpoints,
                }
        return meta

    def first_call_tokens(self) -> dict[str, int]:
        # The agent's first prompt is its domain's system prompt and tool schemas (the bulk:
        # τ² airline's is ~5,400 tokens), estimated at ~4 characters a token.

        count = HeuristicCounter().count
        prompts = []
        with contextlib.suppress(Exception):  # a domain that cannot load fails later, named
            for name in sorted({t.partition("/")[0] for t in self.units()}):
                d: Any = get_domain(name)
                prompts.append(
                    count(d.system_prompt()) + count(orjson.dumps(d.tool_schemas()).decode())
                )
        if not prompts:
            return {}
        ep = self.cfg.endpoints.get("agent")
        cap = self.cfg.workload.agent_max_tokens or (ep.max_tokens if ep else None)
        return {"agent": max(prompts) + (cap or DEFAULT_AGENT_MAX_TOKENS)}

    def tool_roles(self) -> tuple[str, ...]:
        # react / act describe the tools in the prompt; oracle / noop call no model. A
        # plugged-in strategy is assumed to offer tools.
        return () if self.cfg.workload.agent in ("react", "act", "oracle", "noop") else ("agent",)

    async def prepare(self, endpoints: Mapping[str, EndpointConfig], *, embedded: bool) -> None:
        # In a thread: the event loop (and the loop-lag monitor) keeps turning meanwhile.
        await asyncio.to_thread(warm_tau2, self.units())
        if embedded:
            ep = endpoints["agent"]
            await prime_sim(ep.base_url, ep.model, self.units())

    async def run_session(
        self, item: WorkItem, session_id: str, clients: Mapping[str, ChatClient]
    ) -> SessionOutcome:
        spec = EpisodeSpec(
            task_id=item.task_id,
            trial=item.trial,
            seed=episode_seed(self.cfg.workload.seed, item.task_id, item.trial),
            session_id=session_id,
        )
        res = await run_episode(spec, clients, self.options)
        return SessionOutcome(res.session, res.trajectory)
