"""What a run measured, and against what: the context shown at the top of every report.

Built from run.json (resolved endpoints, host, versions, what a preflight detected) and
config.yaml (load, workload, sampling, simulator). URLs lose any userinfo; keys never appear
(config.yaml is already redacted).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson
import yaml

from agentload.results.files import CONFIG, RUN
from agentload.util import dig


def redact_url(url: Any) -> str | None:
    """`http://user:pw@host:8000/v1?key=x` -> `http://host:8000/v1` (no userinfo, no query)."""
    if not url:
        return None
    try:
        parts = urlsplit(str(url))
    except ValueError:
        return "<unparseable url>"
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, OSError, ValueError, RecursionError):  # ValueError: not UTF-8
        return {}
    return data if isinstance(data, dict) else {}


def _read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    with contextlib.suppress(orjson.JSONDecodeError, OSError):
        data = orjson.loads(path.read_bytes())
        return data if isinstance(data, dict) else {}
    return {}


def _engines(detected: Any) -> dict[str, str]:
    """endpoints_detected (written by a preflight) -> {endpoint: "vllm 0.11.0"}.

    Accepts a mapping keyed by role or endpoint whose values carry `engine` and `version`
    (or `engine_version`); anything else is shown as it is.
    """
    out: dict[str, str] = {}
    if isinstance(detected, Mapping):
        items = list(detected.items())
    elif isinstance(detected, list):
        items = [
            (str(d.get("name") or i), d) for i, d in enumerate(detected) if isinstance(d, dict)
        ]
    else:
        return out
    for name, d in items:
        if isinstance(d, Mapping):
            engine = d.get("engine") or d.get("server") or "unknown"
            version = d.get("version") or d.get("engine_version")
            out[str(name)] = f"{engine} {version}" if version else str(engine)
        else:
            out[str(name)] = str(d)
    return out


_SAMPLING_KEYS = frozenset(
    {"top_p", "top_k", "min_p", "seed", "repetition_penalty", "presence_penalty"}
    | {"frequency_penalty", "chat_template_kwargs", "reasoning_effort"}
)


def _sampling(cfg: Mapping[str, Any], role: str) -> dict[str, Any]:
    ep = dig(cfg, "endpoints", role) or {}
    w = cfg.get("workload") or {}
    out: dict[str, Any] = {}
    temp = ep.get("temperature")
    if temp is None:
        temp = w.get("temperature")
    if temp is not None:
        out["temperature"] = temp
    mt = ep.get("max_tokens") or w.get(f"{role}_max_tokens")
    if mt is not None:
        out["max_tokens"] = mt
    out.update({k: v for k, v in (ep.get("extra_body") or {}).items() if k in _SAMPLING_KEYS})
    return out


def run_context(out_dir: Path | str) -> dict[str, Any]:
    """The context dict of a results folder (see docs/results.md, `context`)."""
    out_dir = Path(out_dir)
    run = _read_json(out_dir / RUN)
    cfg = _read_yaml(out_dir / CONFIG)
    eps = run.get("endpoints") or {}
    cfg_eps = cfg.get("endpoints") or {}
    # The roles the run called (run.json), else every configured one (an older folder).
    roles = sorted(eps) if eps else sorted(cfg_eps)
    endpoints: dict[str, Any] = {}
    for role in roles:
        e = eps.get(role) or cfg_eps.get(role) or {}
        endpoints[role] = {
            "name": e.get("name"),
            "model": e.get("model"),
            "url": redact_url(e.get("base_url")),
            "sampling": _sampling(cfg, role),
        }
    load = cfg.get("load") or {}
    w = cfg.get("workload") or {}
    sim = cfg.get("sim") or {}
    embedded = not cfg_eps
    mode = "open" if load.get("rate") is not None else "closed"
    ctx: dict[str, Any] = {
        "models": sorted({str(e["model"]) for e in endpoints.values() if e.get("model")}),
        "endpoints": endpoints,
        "engines": _engines(run.get("endpoints_detected")),
        "load": {
            "mode": mode,
            "concurrency": (load.get("concurrency") or 8) if mode == "closed" else None,
            "rate": load.get("rate"),
            "max_concurrency": load.get("max_concurrency"),
            "num_episodes": load.get("num_episodes"),
            "duration_s": load.get("duration_s"),
            "warmup": load.get("warmup"),
        }
        if cfg
        else {},
        "kind": cfg.get("kind") or "episodes",
        "workload_described": run.get("workload"),
        "workload": {
            "tasks": w.get("tasks") or None,
            "domains": w.get("domains") or None,
            "dataset": w.get("dataset"),
            "trials": w.get("trials"),
            "agent": w.get("agent"),
            "user": w.get("user"),
            "seed": w.get("seed"),
            "tasks_selected": run.get("tasks"),
            "data_versions": run.get("data_versions"),
            # τ²-bench runs: the split a whole domain ran and whether a judge graded
            "tau2_split": (run.get("tau2") or {}).get("split"),
            "tau2_judge": (run.get("tau2") or {}).get("judge"),
        }
        if cfg
        else {},
        "simulator": {
            "profile": sim.get("profile"),
            "speedup": sim.get("speedup"),
            "fault_rate": sim.get("fault_rate"),
        }
        if embedded and cfg
        else None,
        "slo": cfg.get("slo") or None,
        "agentload_version": run.get("agentload_version"),
        "host": run.get("hostname"),
    }
    return ctx


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, Mapping):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: d}


def context_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """One line per field whose value differs between two contexts, e.g.
    `load.concurrency: 8 -> 16`."""
    fa, fb = flatten(a), flatten(b)
    both_embedded = bool(a.get("simulator")) and bool(b.get("simulator"))
    lines = []
    for key in sorted(fa.keys() | fb.keys()):
        if both_embedded and key.endswith(".url"):
            continue  # the embedded simulator listens on a new free port each run
        va, vb = fa.get(key), fb.get(key)
        if va != vb:
            lines.append(f"{key}: {_show(va)} -> {_show(vb)}")
    return lines


def _show(v: Any) -> str:
    if v is None:
        return "(none)"
    if isinstance(v, list):
        return ",".join(str(x) for x in v)
    return str(v)
