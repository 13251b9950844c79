"""report.md / report.html / charts/*.png from a summary (its model, read by attribute)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from agentload import stats
from agentload.fmt import DASH, count, duration, num, pct, secs, when
from agentload.report import plots
from agentload.report.columns import CALL_COLUMNS, THIN_NOTE, any_thin, cells
from agentload.report.context import context_rows
from agentload.report.document import Document, to_html, to_markdown
from agentload.report.errors import HEADER, error_rows
from agentload.report.health import client_cpu_share, client_warnings
from agentload.report.replay_section import replay_section
from agentload.report.series import Series, build_series
from agentload.results.files import CALLS, SERVER_METRICS, SESSIONS
from agentload.results.jsonl import atomic_write_bytes, read_jsonl
from agentload.results.records import (
    CallBlock,
    Describe,
    Episodes,
    SloBlock,
    Summary,
    as_summary,
)
from agentload.results.validate import Integrity, clean_calls, clean_samples, clean_sessions
from agentload.util import dig

PCTS = [stats.pct_key(p) for p in stats.PERCENTILES]


def _status(status: Any) -> str:
    if status in (None, "running"):
        return "in progress when summarized" if status else DASH
    return str(status)


def _describe_row(label: str, d: Describe, mean: float | None = None) -> list[str]:
    """n, the percentiles, mean, min and max of one describe() block."""
    return [
        label,
        count(d.count),
        *[secs(d.stat(p)) for p in PCTS],
        secs(d.mean if mean is None else mean),
        secs(d.min),
        secs(d.max),
    ]


def _latency_rows(block: CallBlock) -> list[list[str]]:
    rows = []
    for d, label in ((block.ttft_s, "TTFT"), (block.e2e_s, "end-to-end"), (block.tpot_s, "TPOT")):
        if d.count:
            rows.append(_describe_row(label, d))
    itl = block.itl_s
    gaps = itl.all_gaps
    if gaps and gaps.count:
        # every gap of every call: the exact mean and the largest gap, no minimum kept
        row = _describe_row("ITL (all gaps)", gaps, itl.mean)
        row[-2:] = [DASH, secs(itl.max)]
        rows.append(row)
    for per_call, label in (
        (itl.per_call_p50, "ITL (per-call p50)"),
        (itl.per_call_p99, "ITL (per-call p99)"),
    ):
        if per_call and per_call.count:
            rows.append(_describe_row(label, per_call))
    return rows


def _given(block: BaseModel, name: str) -> Any:
    """A field as the summary gave it: None (shown as a dash) where it was absent, not the
    model's default."""
    return getattr(block, name) if name in block.model_fields_set else None


def _status_rows(s: Summary) -> list[list[str]]:
    run = s.run or {}
    window, counts = s.window, s.counts
    client = s.client
    facts = [
        ["status", _status(run.get("status"))],
        ["started", when(run.get("started_at"))],
        ["ended", when(run.get("ended_at"))],
        [
            "measurement window",
            f"{duration(window.duration_s)} (first start → last end of {window.source or DASH})",
        ],
    ]
    running, span = window.running_s, window.duration_s
    if running is not None and span and running < span - 0.5:
        # A resumed run: its downtime is in the window but not in any rate.
        facts.append(["time running (rates divide by it)", duration(running)])
    if window.active_s is not None and span and window.active_s < 0.95 * span:
        facts.append(["time with episodes active", duration(window.active_s)])
    planned = run.get("planned_episodes")
    facts += [
        ["calls measured", count(_given(counts, "calls"))],
        [
            "episodes measured",
            count(_given(counts, "sessions"))
            + (f" of {count(planned)} planned" if planned is not None else ""),
        ],
        [
            "warmup (excluded)",
            f"{count(_given(counts, 'warmup_sessions'))} episodes, "
            f"{count(_given(counts, 'warmup_calls'))} calls",
        ],
    ]
    if client and client.episodes_cancelled:
        facts.append(["episodes cancelled at stop", count(client.episodes_cancelled)])
    if counts.unfinished_calls:
        facts.append(["calls of unfinished episodes (excluded)", count(counts.unfinished_calls)])
    for key in ("data_version", "grader_version", "seed"):
        if run.get(key) is not None:
            facts.append([key.replace("_", " "), str(run[key])])
    return facts


def rates_meaningful(summary: Summary | Mapping[str, Any]) -> bool:
    """False for a failed run, or one where no call succeeded: per-minute rates and
    throughput would describe how fast things failed, not the service."""
    s = as_summary(summary)
    status = str((s.run or {}).get("status") or "")
    return not status.startswith("failed") and bool(s.calls.all.ok)


def _key_rows(s: Summary) -> list[list[str]]:
    ep, slo = s.episodes, s.slo
    allc, agent = s.calls.all, s.agent_calls()
    rates = rates_meaningful(s)
    rows: list[list[str]] = []
    if ep:
        pk = list(ep.pass_hat_k.items())[:8]
        rows += [
            ["episodes", count(ep.episodes)],
            ["success rate", pct(ep.success_rate)],
            ["pass^k", ", ".join(f"k={k}: {pct(v)}" for k, v in pk) or DASH],
        ]
        for label, left in (
            ("partial rewards (no judge)", ep.partial),
            ("ended on infrastructure errors", ep.infra_error),
        ):
            if left:
                n = count(left.get("episodes"))
                rows.append([label, f"{n} episodes, not in success rate or pass^k"])
        if rates:
            rows.append(["episodes / min", num(ep.episodes_per_min)])
    if slo and rates:
        rows.append(["calls meeting every SLO", pct(slo.call_attainment)])
        rows.append(["goodput (episodes / min meeting every SLO)", num(slo.goodput_per_min)])
    for label, d in (("TTFT", agent.ttft_s), ("e2e", agent.e2e_s)):
        vals = " / ".join(secs(d.stat(p)) for p in ("p50", "p90", "p99"))
        rows.append([f"agent {label} p50 / p90 / p99", vals])
    gaps = agent.itl_s.all_gaps
    if gaps and gaps.count:
        vals = " / ".join(secs(gaps.stat(p)) for p in ("p50", "p90", "p99"))
        rows.append(["agent ITL p50 / p90 / p99 (all tokens)", vals])
    rows.append(["cached share of prompt tokens", pct(allc.tokens.cached_share)])
    if rates:
        rows.append(["output tokens / s (all calls)", num(allc.throughput.output_tokens_per_s, 1)])
    rows.append(["failed calls", f"{count(allc.failed)} of {count(allc.calls)}"])
    return rows


def _warnings(doc: Document, s: Summary) -> None:
    status = str((s.run or {}).get("status") or "")
    allc = s.calls.all
    if status.startswith("failed"):
        doc.warn(f"the run {status}. Figures below describe only what completed.")
    elif status == "interrupted":
        doc.warn("the run was interrupted; figures describe the episodes that finished.")
    if allc.calls and not allc.ok:
        doc.warn("no call succeeded: no latency or throughput can be given; see Errors.")
    elif not allc.calls:
        doc.warn("no calls were measured.")
    for w in client_warnings(s):
        doc.warn(w)


def _first_screen(doc: Document, s: Summary, ser: Series | None, pngs: Mapping[str, str]) -> None:
    """Context, key figures and the main charts: what most readers want from a run."""
    _warnings(doc, s)
    left, right = Document(""), Document("")
    left.h("Run context")
    left.table(["", ""], context_rows(s.context or {}, s))
    right.h("Key figures")
    right.table(["figure", "value"], _key_rows(s))
    doc.row(left, right)
    if rates_meaningful(s):
        doc.chart(plots.timeline(ser), pngs.get("server_timeline"))
    doc.chart(plots.latency_cdf(s), pngs.get("latency_cdf"))
    doc.h("Run")
    doc.table(["", ""], _status_rows(s))


def _calls_section(doc: Document, s: Summary) -> None:
    allc = s.calls.all
    doc.h("Calls by role and endpoint")
    blocks = dict(s.calls.by_role_endpoint)
    if not blocks:
        doc.p("No calls were measured.")
        return
    if len(blocks) > 1:
        blocks["all"] = allc
    doc.table(
        ["role @ endpoint", *[c.label for c in CALL_COLUMNS]],
        [[name, *cells(CALL_COLUMNS, b)] for name, b in blocks.items()],
    )
    if any_thin(CALL_COLUMNS, list(blocks.values())):
        doc.p(THIN_NOTE)
    tokens = allc.tokens
    est = tokens.estimated_calls
    if est:
        doc.p(
            f"Token counts of {count(est)} calls are estimated with a tokenizer (the server "
            "sent no usage)."
        )
    # A summary from before token counts were kept says nothing of caching.
    if "tokens" in allc.model_fields_set and tokens.calls_reporting_cached == 0 and allc.calls:
        doc.p("The server reported no cached-token counts, so the cached share is unknown.")
    doc.p(
        "ITL p50 / p99 are over every inter-token gap of every call (within 1 %); ITL mean is "
        "the exact mean of all gaps. Throughput is over the measurement window."
    )


def _latency_section(doc: Document, s: Summary, ser: Series | None) -> None:
    lat_by_role = {role: _latency_rows(b) for role, b in s.calls.by_role.items()}
    if not any(lat_by_role.values()):
        return
    doc.h("Latency percentiles")
    for role, lat in lat_by_role.items():
        if lat:
            doc.h(f"Role `{role}`", 3)
            doc.table(["metric", "n", *PCTS, "mean", "min", "max"], lat)
    doc.chart(plots.itl_histogram(ser))
    doc.chart(plots.prompt_vs_latency(ser))


def _turns_section(doc: Document, s: Summary, pngs: Mapping[str, str]) -> None:
    turns = {r: rows for r, rows in s.turns.items() if rows}
    if not turns:
        return
    doc.h("By turn index")
    doc.p(
        "How latency and caching evolve as the conversation grows: `turn` is the index "
        "of the call among its episode's calls of the same role."
    )
    doc.chart(plots.by_turn(s), pngs.get("by_turn"))
    header = ["turn", "calls", "TTFT p50", "TTFT p90", "TTFT p99", "e2e p50"]
    header += ["prompt tok (mean)", "cached share"]
    for role, trows in turns.items():
        doc.h(f"Role `{role}`", 3)
        doc.table(
            header,
            [
                [
                    str(r.turn),
                    count(r.calls),
                    secs(r.ttft_s["p50"]),
                    secs(r.ttft_s["p90"]),
                    secs(r.ttft_s["p99"]),
                    secs(r.e2e_s["p50"]),
                    num(r.prompt_tokens_mean, 0),
                    pct(r.cached_share),
                ]
                for r in trows
            ],
        )


def _errors_section(doc: Document, s: Summary, ser: Series | None) -> None:
    errors = s.errors
    doc.h("Errors")
    if not errors.by_kind:
        doc.p("No failed calls.")
    else:
        doc.table(["error kind", "calls"], [[k, count(v)] for k, v in errors.by_kind.items()])
        if errors.messages:
            doc.p("Most frequent messages per kind (the servers' words, redacted):")
            doc.table(HEADER, error_rows(s), align_left=2)
        doc.chart(plots.error_timeline(ser))
    if errors.retried_calls:
        doc.p(f"{count(errors.retried_calls)} calls needed more than one attempt.")


def _client_section(doc: Document, s: Summary) -> None:
    sd = s.scheduling.sched_delay_s
    lag = (s.client.event_loop_lag_s if s.client else None) or Describe()
    if not sd.count and not lag.count:
        return
    doc.h("Client health")
    doc.p(
        "Scheduling delay is the actual minus the intended start of each episode; event-loop "
        "lag is how late the client's timers fired. Large values mean the client, not the "
        "server, held work back (thresholds: docs/results.md)."
    )
    rows = []
    for label, d in (("scheduling delay", sd), ("event-loop lag", lag)):
        if d.count:
            rows.append([label, count(d.count), *[secs(d.stat(p)) for p in ("p50", "p90", "p99")]])
            rows[-1].append(secs(d.max))
    doc.table(["", "n", "p50", "p90", "p99", "max"], rows)
    share = client_cpu_share(s.client)
    if share is not None:
        doc.p(f"Client CPU: {pct(share, 0)} of one core over the run.")


SHARED_MARK = "‡"


def _server_section(
    doc: Document, s: Summary, ser: Series | None, pngs: Mapping[str, str] | None = None
) -> None:
    server = dig(s.server, "endpoints") or {}
    if not server:
        if s.gpu:  # GPU telemetry without the engine's own metrics
            doc.h("Server-side metrics")
            _gpu_section(doc, s.gpu, ser, pngs or {})
        return
    doc.h("Server-side metrics")
    shared = dig(s.server, "shared")
    mark = SHARED_MARK if shared else ""
    if shared:
        doc.p(
            f"{SHARED_MARK} **A shared server**: over the window the server finished "
            f"{count(shared['server_requests'])} requests and this run sent "
            f"{count(shared['run_calls'])}: every figure marked {SHARED_MARK} (queue, KV, "
            "hit rate, server TTFT) includes other clients' traffic."
        )
    doc.table(
        [
            "endpoint",
            "engine",
            "samples",
            "running mean / max",
            "waiting mean / max",
            "KV use max",
            "prefix-cache hit rate",
            "preemptions",
            "server TTFT mean",
            "server queue mean",
        ],
        [
            [
                name,
                str(e.get("engine")),
                count(e.get("samples")),
                f"{num(dig(e, 'running', 'mean'), 1)} / {num(dig(e, 'running', 'max'), 0)}" + mark,
                f"{num(dig(e, 'waiting', 'mean'), 1)} / {num(dig(e, 'waiting', 'max'), 0)}" + mark,
                pct(dig(e, "kv_usage", "max")) + mark,
                pct(e.get("prefix_cache_hit_rate")) + mark,
                count(e.get("preemptions")) + mark,
                secs(e.get("ttft_mean_s")) + mark,
                secs(e.get("queue_mean_s")) + mark,
            ]
            for name, e in server.items()
        ],
    )
    srcs = {e.get("prefix_cache_hit_rate_source") for e in server.values()} - {None}
    if srcs:
        doc.p(
            "Hit rate from "
            + "; ".join(f"`{x}`" for x in sorted(srcs))
            + ", over the measurement window."
        )
    doc.chart(plots.server_kv(ser))
    if s.gpu:
        _gpu_section(doc, s.gpu, ser, pngs or {})


def _gib(mib: Any) -> str:
    return DASH if mib is None else f"{float(mib) / 1024:.1f} GiB"


def _gpu_section(
    doc: Document, gpu: Mapping[str, Any], ser: Series | None, pngs: Mapping[str, str]
) -> None:
    """GPU telemetry from the DCGM exporters (--gpu-metrics) over the measurement window."""
    doc.h("GPU telemetry", 3)
    eps = gpu.get("endpoints") or {}
    sources = {e.get("energy_source") for e in eps.values()} - {None}
    doc.p(
        f"NVIDIA DCGM exporter{'s' if len(eps) > 1 else ''} "
        + ", ".join(f"`{e.get('url')}`" for e in eps.values())
        + f", {count(gpu.get('gpus'))} GPUs, over the measurement window. Utilisation is a "
        "mean over the GPUs (its max: the highest such mean in one scrape); memory, power and "
        "energy are totals. Energy: "
        + (" and ".join(sorted(sources)) if sources else "no samples")
        + "; per output token: over the run's completion tokens."
    )
    doc.table(
        ["figure", "value"],
        [
            ["GPU utilisation mean / max", f"{num(gpu.get('util_mean'), 1)} / "
             f"{num(gpu.get('util_max'), 1)} %"],
            ["memory used max", _gib(gpu.get("fb_used_max_mib"))],
            ["power mean", f"{num(gpu.get('power_mean_w'), 1)} W"],
            ["energy over the window", f"{num(gpu.get('energy_j'), 0)} J"],
            ["output tokens", count(gpu.get("output_tokens"))],
            ["energy per output token", f"{num(gpu.get('j_per_output_token'), 3)} J/token"],
        ],
    )  # fmt: skip
    doc.table(
        ["exporter", "GPU", "util mean / max %", "memory max", "power mean W", "SM clock MHz",
         "energy J"],
        [
            [name, str(g.get("gpu")),
             f"{num(g.get('util_mean'), 1)} / {num(g.get('util_max'), 1)}",
             _gib(g.get("fb_used_max_mib")), num(g.get("power_mean_w"), 1),
             num(g.get("sm_clock_mean_mhz"), 0), num(g.get("energy_j"), 0)]
            for name, e in eps.items()
            for g in e.get("per_gpu") or []
        ],
    )  # fmt: skip
    doc.chart(plots.gpu_timeline(ser), pngs.get("gpu_timeline"))


def build_document(
    summary: Summary | Mapping[str, Any],
    series: Series | None = None,
    pngs: Mapping[str, str] | None = None,
) -> Document:
    """The report, in the order a reader looks: context and key figures with the main charts,
    then the tables behind them. `series` (from the records) adds the serving charts."""
    s = as_summary(summary)  # parsed once: every section reads this model
    doc = Document(f"agentload report: {(s.run or {}).get('run_id') or 'run'}")
    pngs = pngs or {}
    _first_screen(doc, s, series, pngs)
    _calls_section(doc, s)
    _latency_section(doc, s, series)
    _turns_section(doc, s, pngs)
    # A replay's sessions are not graded: its own section replaces the episodes'.
    if s.replay:
        replay_section(doc, s.replay)
    elif s.episodes:
        _episodes(doc, s.episodes, rates_meaningful(s))
    if s.slo:
        _slo(doc, s.slo)
    _errors_section(doc, s, series)
    _client_section(doc, s)
    _server_section(doc, s, series, pngs)
    return doc


def _by_domain(doc: Document, ep: Episodes) -> None:
    dom = ep.by_domain
    if not dom:
        return
    doc.h("By domain", 3)
    kmax = max((len(d.pass_hat_k) for d in dom.values()), default=0)
    ks = [str(k) for k in range(1, min(kmax, 8) + 1)]
    doc.table(
        ["domain", "episodes", "tasks", "success rate", *[f"pass^{k}" for k in ks]],
        [
            [
                name,
                count(d.episodes),
                count(d.tasks),
                pct(d.success_rate),
                *[pct(d.pass_hat_k.get(k)) for k in ks],
            ]
            for name, d in dom.items()
        ],
    )


def _partial_text(partial: Mapping[str, Any]) -> str:
    return (
        f"{count(partial.get('episodes'))} episodes of {count(partial.get('tasks'))} tasks "
        "with natural-language assertions were not judged (no judge endpoint); they are "
        "left out of success rate, mean reward and pass^k"
    )


def _episodes(doc: Document, ep: Episodes, rates: bool = True) -> None:
    doc.h("Episodes")
    if ep.partial:
        doc.p("Partial rewards: " + _partial_text(ep.partial) + ".")
    if ep.infra_error:
        doc.p(
            f"{count(ep.infra_error.get('episodes'))} episodes ended on infrastructure errors: "
            "they are left out of success rate, mean reward and pass^k "
            "(`agentload run --resume` runs them again)."
        )
    per = ep.tokens_per_success
    doc.table(
        ["figure", "value"],
        [
            ["episodes", count(ep.episodes)],
            ["tasks", count(ep.tasks)],
            ["successes", count(ep.successes)],
            ["success rate", pct(ep.success_rate)],
            ["mean reward", num(ep.mean_reward, 3)],
            ["episodes / min", num(ep.episodes_per_min) if rates else DASH],
            ["successes / min", num(ep.successes_per_min) if rates else DASH],
            ["episodes with an error", count(ep.with_error)],
            ["prompt tokens per success", num(per.get("prompt"), 0)],
            ["completion tokens per success", num(per.get("completion"), 0)],
        ],
    )
    pk = ep.pass_hat_k
    if pk:
        doc.h("pass^k", 3)
        doc.table(["k", *pk.keys()], [["pass^k", *[pct(v) for v in pk.values()]]])
    _by_domain(doc, ep)
    terms = ep.terminations
    if terms:
        doc.h("Terminations", 3)
        n = sum(terms.values())
        doc.table(
            ["termination", "episodes", "share"],
            [[k, count(v), pct(v / n if n else None)] for k, v in terms.items()],
        )
    d = ep.duration_s
    if d.count:
        doc.h("Episode duration", 3)
        doc.table(
            ["n", *PCTS, "mean", "max"],
            [[count(d.count), *[secs(d.stat(p)) for p in PCTS], secs(d.mean), secs(d.max)]],
            align_left=0,
        )
    split = ep.time_split
    if split.get("total_s"):
        doc.h("Where episode time goes", 3)
        doc.table(
            ["part", "seconds (sum)", "share"],
            [
                ["LLM calls", num(split.get("llm_s"), 1), pct(split.get("llm_share"))],
                ["tools", num(split.get("tool_s"), 1), pct(split.get("tool_share"))],
                ["user", num(split.get("user_s"), 1), pct(split.get("user_share"))],
                ["total", num(split.get("total_s"), 1), "100.0%"],
            ],
        )


def _slo(doc: Document, slo: SloBlock) -> None:
    doc.h("SLOs and goodput")
    doc.p(
        f"Conditions over calls of role `{slo.role}`. A call meets a condition when "
        "its own value is within the threshold (a failed call never does); an episode meets "
        "the SLOs when every one of its calls meets every condition."
    )
    doc.table(
        ["condition", "threshold", "observed", "met", "calls within threshold"],
        [
            [
                k,
                secs(c.threshold),
                secs(c.observed),
                "yes" if c.met else "**no**",
                pct(c.attainment),
            ]
            for k, c in slo.conditions.items()
        ],
    )
    doc.table(
        ["figure", "value"],
        [
            ["all conditions met", "yes" if slo.all_met else "**no**"],
            ["calls meeting every condition", pct(slo.call_attainment)],
            [
                "episodes meeting the SLOs",
                f"{count(slo.sessions_meeting_slo)} ({pct(slo.session_attainment)})",
            ],
            ["successful episodes meeting the SLOs", count(slo.good_sessions)],
            ["goodput (episodes / min)", num(slo.goodput_per_min)],
        ],
    )


def write_report(out_dir: Path | str, summary: Summary | Mapping[str, Any]) -> list[Path]:
    """report.md, report.html and charts/*.png in `out_dir`; returns the written paths."""
    out_dir = Path(out_dir)
    s = as_summary(summary)
    samples = clean_samples(read_jsonl(out_dir / SERVER_METRICS, warn=False), Integrity())
    ser = build_series(
        clean_calls(read_jsonl(out_dir / CALLS, warn=False), Integrity()),
        clean_sessions(read_jsonl(out_dir / SESSIONS, warn=False), Integrity()),
        samples,
        {"start": s.window.start, "end": s.window.end},
    )
    from agentload.report import charts  # lazy: start-up (matplotlib, when a report is drawn)

    written = charts.write_charts(out_dir, s, samples)
    pngs = {p.stem: f"{charts.CHARTS_DIR}/{p.name}" for p in written}
    doc = build_document(s, ser, pngs)
    md = out_dir / "report.md"
    html_path = out_dir / "report.html"
    atomic_write_bytes(md, to_markdown(doc).encode())
    atomic_write_bytes(html_path, to_html(doc).encode())
    return [md, html_path, *written]
