"""Was the client itself the bottleneck? Warnings shown in the console and the report.

Thresholds (docs/results.md): event-loop lag p99 above LAG_P99_S means callbacks (and so the
timestamps of arriving bytes) ran that late; client CPU above CPU_SHARE of one core means the
single event loop was close to saturation. Either can inflate TTFT / ITL and cap throughput.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentload.results.records import ClientBlock, Summary

LAG_P99_S = 0.050
CPU_SHARE = 0.80


def client_warnings(s: Summary) -> list[str]:
    """One sentence per sign that the client may have distorted the numbers."""
    out: list[str] = []
    client = s.client
    lags = client.event_loop_lag_s if client else None
    lag = lags.stat("p99") if lags else None
    lag_max = lags.max if lags else None
    if lag is not None and lag > LAG_P99_S:
        out.append(
            f"the client's event loop lagged (p99 {lag * 1e3:.0f} ms"
            + (f", max {lag_max * 1e3:.0f} ms" if lag_max is not None else "")
            + f", above {LAG_P99_S * 1e3:.0f} ms): latencies include client delay; "
            "lower the concurrency per process or use more processes"
        )
    share = client_cpu_share(client)
    if share is not None and share > CPU_SHARE:
        out.append(
            f"the client used {share * 100:.0f}% of a CPU core (above {CPU_SHARE * 100:.0f}%): "
            "it may have limited throughput and delayed timestamps"
        )
    out.extend(_worker_warnings(client.workers if client else None))
    return out


def _worker_warnings(workers: Any) -> list[str]:
    """A run over worker processes: each worker is one event loop on one core."""
    if not isinstance(workers, list):
        return []
    hot = [
        w
        for w in workers
        if isinstance(w, Mapping)
        and (w.get("saturated") or (w.get("cpu_share") or 0.0) > CPU_SHARE)
    ]
    if not hot:
        return []
    names = ", ".join(
        f"{w.get('worker')} ({(w.get('cpu_share') or 0.0) * 100:.0f}% of a core)" for w in hot
    )
    return [
        f"worker process {names} saturated: its latencies include client delay; "
        f"use more --workers (this run had {len(workers)})"
    ]


def client_cpu_share(client: ClientBlock | None) -> float | None:
    """CPU seconds the client process spent during the run per second of the run."""
    if client is None or client.cpu_s is None or not client.elapsed_s:
        return None
    return float(client.cpu_s) / float(client.elapsed_s)
