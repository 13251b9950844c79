"""PNG charts of a run (matplotlib, Agg backend; no pyplot, so no global GUI state)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless; must precede any figure canvas import

import numpy as np
from matplotlib.figure import Figure

from agentload.results.records import Summary

CHARTS_DIR = "charts"
_DPI = 110


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=_DPI, format="png")
    return path


def latency_cdf(s: Summary, path: Path) -> Path | None:
    """TTFT and end-to-end latency CDFs, one line per role."""
    dists = s.distributions
    if not any(d.get("ttft_s") or d.get("e2e_s") for d in dists.values()):
        return None
    fig = Figure(figsize=(10, 4))
    for ax, key, title in (
        (fig.add_subplot(1, 2, 1), "ttft_s", "Time to first token"),
        (fig.add_subplot(1, 2, 2), "e2e_s", "End-to-end latency"),
    ):
        lo, hi = np.inf, 0.0
        for role, d in sorted(dists.items()):
            q = d.get(key)
            if q:
                ax.plot(q, np.linspace(0, 1, len(q)), label=role)
                lo, hi = min(lo, q[0]), max(hi, q[-1])
        log_x = lo > 0 and hi / lo > 50  # long tails: a log axis keeps the body readable
        if log_x:
            ax.set_xscale("log")
        ax.set_title(title)
        ax.set_xlabel("seconds (log scale)" if log_x else "seconds")
        ax.set_ylabel("share of calls")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right")
    return _save(fig, path)


def by_turn(s: Summary, path: Path) -> Path | None:
    """TTFT p50 / p90 and cached share against the call's turn index, per role."""
    turns = s.turns
    if not any(turns.values()):
        return None
    fig = Figure(figsize=(10, 4))
    ax1 = fig.add_subplot(1, 2, 1)
    ax2 = fig.add_subplot(1, 2, 2)
    for role, rows in sorted(turns.items()):
        if not rows:
            continue
        x = [r.turn for r in rows]
        p50 = [np.nan if r.ttft_s["p50"] is None else r.ttft_s["p50"] for r in rows]
        p90 = [np.nan if r.ttft_s["p90"] is None else r.ttft_s["p90"] for r in rows]
        (line,) = ax1.plot(x, p50, marker="o", ms=3, label=f"{role} p50")
        ax1.plot(x, p90, ls="--", color=line.get_color(), label=f"{role} p90")
        share = [np.nan if r.cached_share is None else r.cached_share for r in rows]
        ax2.plot(x, share, marker="o", ms=3, label=role)
    ax1.set_title("TTFT by turn index")
    ax1.set_xlabel("turn (call index within the episode, per role)")
    ax1.set_ylabel("seconds")
    ax1.grid(alpha=0.3)
    ax1.legend()
    ax2.set_title("Cached share of prompt tokens by turn index")
    ax2.set_xlabel("turn")
    ax2.set_ylabel("cached / prompt tokens")
    ax2.set_ylim(0, 1.05)
    ax2.grid(alpha=0.3)
    ax2.legend()
    return _save(fig, path)


def server_timeline(samples: Sequence[Mapping[str, Any]], path: Path) -> Path | None:
    """Running / waiting requests and KV-cache use over time, per scraped endpoint."""
    by_ep: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for s in samples:
        # GPU telemetry (DCGM) has its own chart: gpu_timeline.
        if s.get("ok", True) and s.get("t") is not None and s.get("engine") != "dcgm":
            by_ep[str(s.get("endpoint") or "default")].append(s)
    if not by_ep:
        return None
    t0 = min(float(s["t"]) for v in by_ep.values() for s in v)
    fig = Figure(figsize=(10, 3.2 * len(by_ep)))
    for i, (ep, ss) in enumerate(sorted(by_ep.items())):
        ss = sorted(ss, key=lambda s: float(s["t"]))
        t = np.array([float(s["t"]) - t0 for s in ss])
        ax = fig.add_subplot(len(by_ep), 1, i + 1)
        for key in ("running", "waiting"):
            y = np.array([np.nan if s.get(key) is None else float(s[key]) for s in ss])
            if np.isfinite(y).any():
                ax.step(t, y, where="post", label=key)
        ax.set_ylabel("requests")
        ax.set_title(f"Server state: {ep}")
        ax.grid(alpha=0.3)
        kv = np.array([np.nan if s.get("kv_usage") is None else float(s["kv_usage"]) for s in ss])
        if np.isfinite(kv).any():
            ax2 = ax.twinx()
            ax2.plot(t, kv * 100, color="0.4", lw=1, ls=":", label="KV cache %")
            ax2.set_ylabel("KV cache use %")
            ax2.set_ylim(0, 105)
            ax2.legend(loc="upper right")
        ax.legend(loc="upper left")
    ax.set_xlabel("seconds since first scrape")
    return _save(fig, path)


def gpu_timeline(samples: Sequence[Mapping[str, Any]], path: Path) -> Path | None:
    """DCGM telemetry (--gpu-metrics): utilisation, memory used, power and SM clock over time,
    one line per GPU, four panels sharing the time axis."""
    by_ep: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for s in samples:
        if s.get("ok", True) and s.get("t") is not None and s.get("engine") == "dcgm":
            by_ep[str(s.get("endpoint") or "default")].append(s)
    if not by_ep:
        return None
    t0 = min(float(s["t"]) for v in by_ep.values() for s in v)
    panels = (
        ("util", "utilisation %", 1.0),
        ("fb_used_mib", "memory used (GiB)", 1 / 1024),
        ("power_w", "power (W)", 1.0),
        ("sm_clock_mhz", "SM clock (MHz)", 1.0),
    )
    fig = Figure(figsize=(10, 7.5))
    axes = [fig.add_subplot(len(panels), 1, i + 1) for i in range(len(panels))]
    for ep, ss in sorted(by_ep.items()):
        ss = sorted(ss, key=lambda s: float(s["t"]))
        t = np.array([float(s["t"]) - t0 for s in ss])
        n = max(int(s.get("gpus") or 0) for s in ss)
        for i in range(n):
            label = f"GPU {i}" if len(by_ep) == 1 else f"{ep} GPU {i}"
            for ax, (key, _, scale) in zip(axes, panels, strict=True):
                k = f"gpu{i}_{key}"
                y = np.array([np.nan if s.get(k) is None else float(s[k]) * scale for s in ss])
                if np.isfinite(y).any():
                    ax.plot(t, y, lw=1.2, label=label)
    for ax, (key, title, _) in zip(axes, panels, strict=True):
        ax.set_ylabel(title, fontsize=9)
        # From zero, with room above the highest line (utilisation: the whole 0-100 %).
        ax.set_ylim(0, 105 if key == "util" else max(ax.get_ylim()[1], 1e-9) * 1.1)
        ax.grid(alpha=0.3)
    axes[0].set_title("GPU telemetry (DCGM exporter)")
    axes[0].legend(loc="lower right", fontsize=8, ncols=4)
    axes[-1].set_xlabel("seconds since first scrape")
    return _save(fig, path)


def write_charts(
    out_dir: Path, s: Summary, server_samples: Sequence[Mapping[str, Any]]
) -> list[Path]:
    charts = out_dir / CHARTS_DIR
    made = [
        latency_cdf(s, charts / "latency_cdf.png"),
        by_turn(s, charts / "by_turn.png"),
        server_timeline(server_samples, charts / "server_timeline.png"),
        gpu_timeline(server_samples, charts / "gpu_timeline.png"),
    ]
    return [p for p in made if p is not None]
