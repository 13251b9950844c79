"""The airline domain: Skyline Air, a domestic carrier, on a frozen clock (2025-06-12 10:00 ET)."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

from agentload.domains.airline.data import make_db
from agentload.domains.airline.tasks import build_tasks
from agentload.domains.airline.tools import TOOLS
from agentload.domains.base import Domain, Task

__all__ = ["DOMAIN", "AirlineDomain"]


class AirlineDomain(Domain):
    name = "airline"
    # Bump on any change to the generated data, the tools' effects or the tasks.
    data_version = "airline-2"
    # Write tools copy a record before changing it (see tools.py), so episodes share one base.
    copy_on_write = True

    def __init__(self) -> None:
        self.tools = list(TOOLS)

    @cached_property
    def policy(self) -> str:  # type: ignore[override]
        return (Path(__file__).parent / "policy.md").read_text(encoding="utf-8")

    def make_db(self, seed: int = 0) -> dict:
        return make_db(seed)

    @cached_property
    def _tasks(self) -> tuple[Task, ...]:
        return tuple(build_tasks())

    def tasks(self) -> list[Task]:
        return list(self._tasks)


DOMAIN = AirlineDomain()
