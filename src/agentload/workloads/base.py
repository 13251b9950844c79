"""The workload seam: what the runner needs from a kind of session source.

The runner opens the results folder, starts the endpoints' clients and the scheduler, and
records what each session reports; a :class:`Workload` says which sessions there are (the
units a plan cycles over), prepares the endpoints, and runs one session through the clients.
The scheduler, recorder and summary never know which kind is running.

Kinds are found by name in :data:`WORKLOADS` (built-ins, or an outside package's entry point
in the `agentload.workloads` group); the run configuration's `kind` picks one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from agentload.client import ChatClient, EndpointConfig
from agentload.config import RunConfig
from agentload.plugins import WORKLOADS
from agentload.results.records import Line
from agentload.scheduler import EpisodePlan, WorkItem


@dataclass
class SessionOutcome:
    """What one session reports: its session record (`agentload.session/1` fields: at least
    `session_id`, `task_id`, `trial`, `termination`, the timing fields) and, when the kind
    keeps one, its trajectory (OpenAI-format messages and tools). Either is a record class
    of agentload.results.records (the built-in kinds) or a mapping."""

    session: dict[str, Any] | Line
    trajectory: dict[str, Any] | Line | None = None


class Workload(ABC):
    """One kind of workload, configured from a RunConfig."""

    kind: ClassVar[str]
    noun: ClassVar[str] = "sessions"
    graded: ClassVar[bool] = True
    """Sessions carry a reward (progress shows a success rate)."""
    """What the user calls one unit of work in messages ("episodes", "conversations")."""
    roles: ClassVar[tuple[str, ...]] = ("agent", "user")
    """Endpoint roles the sessions call (the runner opens one client per role)."""

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg

    @abstractmethod
    def units(self) -> list[str]:
        """The ids a plan cycles over (task ids, conversation ids), in order. Raises
        ConfigError when the configuration selects none."""

    def trials(self) -> int:
        """How many times each unit runs (the k of pass^k)."""
        return 1

    def plan(self, finished: set[tuple[str, int]]) -> EpisodePlan:
        """The issue order: `units()` × `trials()` under the run's load settings, less the
        (unit, trial) pairs already `finished` (a resumed run)."""

        ld = self.cfg.load
        return EpisodePlan(
            self.units(),
            trials=self.trials(),
            num_episodes=ld.num_episodes,
            unbounded=ld.num_episodes is None and ld.duration_s is not None,
            shuffle=self.cfg.workload.shuffle,
            seed=self.cfg.workload.seed,
            warmup_episodes=ld.warmup.episodes,
            warmup_seconds=ld.warmup.seconds,
            finished=finished,
        )

    def metadata(self) -> dict[str, Any]:
        """Entries for run.json (data and grader versions, dataset digests, …)."""
        return {}

    def first_call_tokens(self) -> dict[str, int]:
        """Per role, about how many tokens its first call takes (prompt plus output cap), for
        preflight's check against the served context length ({}: not known)."""
        return {}

    def max_tokens_by_role(self) -> dict[str, Any] | None:
        """What each role's calls send as max_tokens, for run.json's `sampling` (None: the
        workload's agent_max_tokens / user_max_tokens, else the endpoint's)."""
        return None

    def context_block(self) -> dict[str, Any]:
        """What the run measured, in the words of this kind (the report's and compare's
        context): the episodes kind's tasks and strategies, a replay's dataset, …"""
        w = self.cfg.workload
        return {"kind": self.kind, "tasks": w.tasks or None, "domains": w.domains or None}

    def tool_roles(self) -> tuple[str, ...]:
        """Roles whose calls offer tools (`tool_choice: auto`): preflight checks that their
        endpoints accept such a request."""
        return ()

    async def prepare(self, endpoints: Mapping[str, EndpointConfig], *, embedded: bool) -> None:  # noqa: B027 - optional hook
        """Called once before the first session, with the endpoints by role (e.g. to warm the
        embedded simulator up so the first measured call carries no one-off cost), in every
        process that runs sessions: the run's own, or each worker's with `--workers N`."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Called once after the last session (also when the run fails or is interrupted),
        to stop what `prepare` started."""

    @abstractmethod
    async def run_session(
        self, item: WorkItem, session_id: str, clients: Mapping[str, ChatClient]
    ) -> SessionOutcome:
        """Run one session; its calls go through `clients` (by role), which record them.
        Should not raise for failures of the server under test: those end the session with
        a termination reason."""


def make_workload(cfg: RunConfig) -> Workload:
    """The configured kind's workload for `cfg`."""
    return WORKLOADS.get(cfg.kind)(cfg)
