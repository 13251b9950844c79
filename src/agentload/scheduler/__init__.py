"""Load control for runs: episode plans, closed / open loop, warmup, limits, progress."""

from agentload.scheduler.core import LagMonitor, LoadSpec, Scheduler, SchedulerReport
from agentload.scheduler.plan import EpisodePlan, PlanError, WorkItem, select_tasks
from agentload.scheduler.progress import ProgressDisplay, ProgressTracker, progress_line

__all__ = [
    "EpisodePlan",
    "LagMonitor",
    "LoadSpec",
    "PlanError",
    "ProgressDisplay",
    "ProgressTracker",
    "Scheduler",
    "SchedulerReport",
    "WorkItem",
    "progress_line",
    "select_tasks",
]
