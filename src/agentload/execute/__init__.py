"""How a run's sessions run: the Executor seam.

The runner opens one `Executor` for the run (`runner.open_executor`: this process, or the
workers the configuration asks for) and knows nothing else of it:
it runs the plan, reports how many sessions are active and how late the event loop is, and
stops (drain) or aborts (cancel) on request. Three implementations:

- in this process (`LocalExecutor`: one Scheduler over one SessionHost);
- worker processes on this machine (agentload.distributed, `ProcessBackend`);
- Ray actors on a cluster (agentload.integrations.ray, `RayBackend`).

The last two share the coordinator of agentload.distributed.driver and differ only in how a
worker is started and spoken to. Each place that runs sessions opens a
`agentload.session.SessionHost` (workload, clients, gate, retries, stamps), so the session
is run the same way by every executor. A fourth executor is a class with this protocol and a
factory given to the runner (`RunOptions.executor`); docs/architecture.md has a worked one.
"""

from __future__ import annotations

from agentload.execute.base import Executor, ExecutorFactory, Lag, RunView
from agentload.execute.local import LocalExecutor, open_local

__all__ = ["Executor", "ExecutorFactory", "Lag", "LocalExecutor", "RunView", "open_local"]
