"""report.md / report.html / charts/*.png from a summary dict."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentload import stats
from agentload.fmt import DASH, count, duration, num, pct, secs, when
from agentload.report.document import Document, to_html, to_markdown
from agentload.results.jsonl import atomic_write_bytes, read_jsonl
from agentload.results.recorder import SERVER_METRICS
from agentload.results.validate import Integrity, clean_samples
from agentload.util import dig

PCTS = [stats.pct_key(p) for p in stats.PERCENTILES]


def _status(status: Any) -> str:
    if status in (None, "running"):
        return "in progress when summarized" if status else DASH
    return str(status)


def _latency_rows(block: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for key, label in (("ttft_s", "TTFT"), ("e2e_s", "end-to-end"), ("tpot_s", "TPOT")):
        d = block.get(key) or {}
        if not d.get("count"):
            continue
        rows.append(
            [
                label,
                count(d["count"]),
                *[secs(d.get(p)) for p in PCTS],
                secs(d.get("mean")),
                secs(d.get("min")),
                secs(d.get("max")),
            ]
        )
    itl = block.get("itl_s") or {}
    for key, label in (
        ("per_call_p50", "ITL (per-call p50)"),
        ("per_call_p99", "ITL (per-call p99)"),
    ):
        d = itl.get(key) or {}
        if d.get("count"):
            rows.append(
                [
                    label,
                    count(d["count"]),
                    *[secs(d.get(p)) for p in PCTS],
                    secs(d.get("mean")),
                    secs(d.get("min")),
                    secs(d.get("max")),
                ]
            )
    return rows


def _role_row(name: str, b: Mapping[str, Any]) -> list[str]:
    tok = b.get("tokens") or {}
    thr = b.get("throughput") or {}
    return [
        name,
        count(b.get("calls")),
        count(b.get("failed")),
        secs(dig(b, "ttft_s", "p50")),
        secs(dig(b, "ttft_s", "p90")),
        secs(dig(b, "ttft_s", "p99")),
        secs(dig(b, "e2e_s", "p50")),
        secs(dig(b, "e2e_s", "p90")),
        secs(dig(b, "e2e_s", "p99")),
        secs(dig(b, "tpot_s", "p50")),
        secs(dig(b, "itl_s", "mean")),
        count(tok.get("prompt")),
        pct(tok.get("cached_share")),
        count(tok.get("completion")),
        num(thr.get("calls_per_s")),
        num(thr.get("output_tokens_per_s"), 1),
    ]


ROLE_HEADER = [
    "role @ endpoint",
    "calls",
    "failed",
    "TTFT p50",
    "TTFT p90",
    "TTFT p99",
    "e2e p50",
    "e2e p90",
    "e2e p99",
    "TPOT p50",
    "ITL mean",
    "prompt tok",
    "cached share",
    "output tok",
    "calls/s",
    "output tok/s",
]


def build_document(summary: Mapping[str, Any]) -> Document:
    run = summary.get("run") or {}
    title = f"agentload report: {run.get('run_id') or 'run'}"
    doc = Document(title)
    window = summary.get("window") or {}
    counts = summary.get("counts") or {}
    ep = summary.get("episodes")
    slo = summary.get("slo")

    doc.h("Run")
    facts = [
        ["status", _status(run.get("status"))],
        [
            "agentload version",
            str(run.get("agentload_version") or summary.get("agentload_version") or DASH),
        ],
        ["started", when(run.get("started_at"))],
        ["ended", when(run.get("ended_at"))],
        [
            "measurement window",
            f"{duration(window.get('duration_s'))} "
            f"(first start → last end of {window.get('source') or DASH})",
        ],
        *(
            [["time with episodes active", duration(window.get("active_s"))]]
            if window.get("active_s") is not None
            and window.get("duration_s")
            and window["active_s"] < 0.95 * window["duration_s"]
            else []
        ),
        ["calls measured", count(counts.get("calls"))],
        ["episodes measured", count(counts.get("sessions"))],
        [
            "warmup (excluded)",
            f"{count(counts.get('warmup_sessions'))} episodes, "
            f"{count(counts.get('warmup_calls'))} calls",
        ],
    ]
    if counts.get("unfinished_calls"):
        facts.append(["calls of unfinished episodes (excluded)", count(counts["unfinished_calls"])])
    for key in ("data_version", "grader_version", "seed", "hostname"):
        if run.get(key) is not None:
            facts.append([key.replace("_", " "), str(run[key])])
    doc.table(["", ""], facts)

    # Key figures first: what most readers want from a run.
    allc = dig(summary, "calls", "all") or {}
    agent = dig(summary, "calls", "by_role", "agent") or allc
    key_rows = []
    if ep:
        key_rows += [
            ["episodes", count(ep.get("episodes"))],
            ["success rate", pct(ep.get("success_rate"))],
            [
                "pass^k",
                ", ".join(
                    f"k={k}: {pct(v)}" for k, v in list((ep.get("pass_hat_k") or {}).items())[:8]
                )
                or DASH,
            ],
            ["episodes / min", num(ep.get("episodes_per_min"))],
        ]
    if slo:
        key_rows.append(
            ["goodput (episodes / min meeting every SLO)", num(slo.get("goodput_per_min"))]
        )
    key_rows += [
        [
            "agent TTFT p50 / p90 / p99",
            " / ".join(secs(dig(agent, "ttft_s", p)) for p in ("p50", "p90", "p99")),
        ],
        [
            "agent e2e p50 / p90 / p99",
            " / ".join(secs(dig(agent, "e2e_s", p)) for p in ("p50", "p90", "p99")),
        ],
        ["cached share of prompt tokens (all calls)", pct(dig(allc, "tokens", "cached_share"))],
        ["output tokens / s (all calls)", num(dig(allc, "throughput", "output_tokens_per_s"), 1)],
        ["failed calls", f"{count(allc.get('failed'))} of {count(allc.get('calls'))}"],
    ]
    doc.h("Key figures")
    doc.table(["figure", "value"], key_rows)

    doc.h("Calls by role and endpoint")
    rows = [
        _role_row(name, b) for name, b in (dig(summary, "calls", "by_role_endpoint") or {}).items()
    ]
    if not rows:
        doc.p("No calls were measured.")
    if len(rows) > 1:
        rows.append(_role_row("all", allc))
    doc.table(ROLE_HEADER, rows)
    est = dig(allc, "tokens", "estimated_calls")
    if est:
        doc.p(
            f"Token counts of {count(est)} calls are estimated with a tokenizer (the server "
            "sent no usage)."
        )
    if dig(allc, "tokens", "calls_reporting_cached") == 0 and allc.get("calls"):
        doc.p("The server reported no cached-token counts, so the cached share is unknown.")
    doc.p(
        "ITL mean is the mean of all inter-token gaps (per-call means weighted by gap count). "
        "Throughput is over the measurement window."
    )

    lat_by_role = {
        role: _latency_rows(b) for role, b in (dig(summary, "calls", "by_role") or {}).items()
    }
    if any(lat_by_role.values()):
        doc.h("Latency percentiles")
    for role, lat in lat_by_role.items():
        if lat:
            doc.h(f"Role `{role}`", 3)
            doc.table(["metric", "n", *PCTS, "mean", "min", "max"], lat)

    turns = {r: rows for r, rows in (summary.get("turns") or {}).items() if rows}
    if turns:
        doc.h("By turn index")
        doc.p(
            "How latency and caching evolve as the conversation grows: `turn` is the index "
            "of the call among its episode's calls of the same role."
        )
    for role, trows in turns.items():
        doc.h(f"Role `{role}`", 3)
        doc.table(
            [
                "turn",
                "calls",
                "TTFT p50",
                "TTFT p90",
                "TTFT p99",
                "e2e p50",
                "prompt tok (mean)",
                "cached share",
            ],
            [
                [
                    str(r["turn"]),
                    count(r["calls"]),
                    secs(r["ttft_s"]["p50"]),
                    secs(r["ttft_s"]["p90"]),
                    secs(r["ttft_s"]["p99"]),
                    secs(r["e2e_s"]["p50"]),
                    num(r.get("prompt_tokens_mean"), 0),
                    pct(r.get("cached_share")),
                ]
                for r in trows
            ],
        )

    if ep:
        _episodes(doc, ep)
    if slo:
        _slo(doc, slo)

    errors = summary.get("errors") or {}
    doc.h("Errors")
    if errors.get("by_kind"):
        doc.table(["error kind", "calls"], [[k, count(v)] for k, v in errors["by_kind"].items()])
        from agentload.report.errors import HEADER, error_rows

        if errors.get("messages"):
            doc.p("Most frequent messages per kind (the servers' words, redacted):")
            doc.table(HEADER, error_rows(summary), align_left=2)
    else:
        doc.p("No failed calls.")
    if errors.get("retried_calls"):
        doc.p(f"{count(errors['retried_calls'])} calls needed more than one attempt.")

    sd = dig(summary, "scheduling", "sched_delay_s") or {}
    if sd.get("count"):
        doc.h("Client scheduling delay")
        doc.p(
            "Actual minus intended start of each episode: large values mean the client, not "
            "the server, held episodes back."
        )
        doc.table(
            ["n", *PCTS, "mean", "max"],
            [
                [
                    count(sd["count"]),
                    *[secs(sd.get(p)) for p in PCTS],
                    secs(sd.get("mean")),
                    secs(sd.get("max")),
                ]
            ],
            align_left=0,
        )

    server = dig(summary, "server", "endpoints") or {}
    if server:
        doc.h("Server-side metrics")
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
                    str(s.get("engine")),
                    count(s.get("samples")),
                    f"{num(dig(s, 'running', 'mean'), 1)} / {num(dig(s, 'running', 'max'), 0)}",
                    f"{num(dig(s, 'waiting', 'mean'), 1)} / {num(dig(s, 'waiting', 'max'), 0)}",
                    pct(dig(s, "kv_usage", "max")),
                    pct(s.get("prefix_cache_hit_rate")),
                    count(s.get("preemptions")),
                    secs(s.get("ttft_mean_s")),
                    secs(s.get("queue_mean_s")),
                ]
                for name, s in server.items()
            ],
        )
        srcs = {s.get("prefix_cache_hit_rate_source") for s in server.values()} - {None}
        if srcs:
            doc.p(
                "Hit rate from "
                + "; ".join(f"`{x}`" for x in sorted(srcs))
                + ", over the measurement window."
            )
    return doc


def _episodes(doc: Document, ep: Mapping[str, Any]) -> None:
    doc.h("Episodes")
    doc.table(
        ["figure", "value"],
        [
            ["episodes", count(ep.get("episodes"))],
            ["tasks", count(ep.get("tasks"))],
            ["successes", count(ep.get("successes"))],
            ["success rate", pct(ep.get("success_rate"))],
            ["mean reward", num(ep.get("mean_reward"), 3)],
            ["episodes / min", num(ep.get("episodes_per_min"))],
            ["successes / min", num(ep.get("successes_per_min"))],
            ["episodes with an error", count(ep.get("with_error"))],
            ["prompt tokens per success", num(dig(ep, "tokens_per_success", "prompt"), 0)],
            ["completion tokens per success", num(dig(ep, "tokens_per_success", "completion"), 0)],
        ],
    )
    pk = ep.get("pass_hat_k") or {}
    if pk:
        doc.h("pass^k", 3)
        doc.table(["k", *pk.keys()], [["pass^k", *[pct(v) for v in pk.values()]]])
    dom = ep.get("by_domain") or {}
    if dom:
        doc.h("By domain", 3)
        kmax = max((len(d.get("pass_hat_k") or {}) for d in dom.values()), default=0)
        ks = [str(k) for k in range(1, min(kmax, 8) + 1)]
        doc.table(
            ["domain", "episodes", "tasks", "success rate", *[f"pass^{k}" for k in ks]],
            [
                [
                    name,
                    count(d.get("episodes")),
                    count(d.get("tasks")),
                    pct(d.get("success_rate")),
                    *[pct((d.get("pass_hat_k") or {}).get(k)) for k in ks],
                ]
                for name, d in dom.items()
            ],
        )
    terms = ep.get("terminations") or {}
    if terms:
        doc.h("Terminations", 3)
        n = sum(terms.values())
        doc.table(
            ["termination", "episodes", "share"],
            [[k, count(v), pct(v / n if n else None)] for k, v in terms.items()],
        )
    d = ep.get("duration_s") or {}
    if d.get("count"):
        doc.h("Episode duration", 3)
        doc.table(
            ["n", *PCTS, "mean", "max"],
            [
                [
                    count(d["count"]),
                    *[secs(d.get(p)) for p in PCTS],
                    secs(d.get("mean")),
                    secs(d.get("max")),
                ]
            ],
            align_left=0,
        )
    split = ep.get("time_split") or {}
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


def _slo(doc: Document, slo: Mapping[str, Any]) -> None:
    doc.h("SLOs and goodput")
    doc.p(
        f"Conditions over calls of role `{slo.get('role')}`. A call meets a condition when "
        "its own value is within the threshold (a failed call never does); an episode meets "
        "the SLOs when every one of its calls meets every condition."
    )
    doc.table(
        ["condition", "threshold", "observed", "met", "calls within threshold"],
        [
            [
                k,
                secs(c.get("threshold")),
                secs(c.get("observed")),
                "yes" if c.get("met") else "**no**",
                pct(c.get("attainment")),
            ]
            for k, c in (slo.get("conditions") or {}).items()
        ],
    )
    doc.table(
        ["figure", "value"],
        [
            ["all conditions met", "yes" if slo.get("all_met") else "**no**"],
            ["calls meeting every condition", pct(slo.get("call_attainment"))],
            [
                "episodes meeting the SLOs",
                f"{count(slo.get('sessions_meeting_slo'))} ({pct(slo.get('session_attainment'))})",
            ],
            ["successful episodes meeting the SLOs", count(slo.get("good_sessions"))],
            ["goodput (episodes / min)", num(slo.get("goodput_per_min"))],
        ],
    )


def write_report(out_dir: Path | str, summary: Mapping[str, Any]) -> list[Path]:
    """report.md, report.html and charts/*.png in `out_dir`; returns the written paths."""
    out_dir = Path(out_dir)
    samples = clean_samples(read_jsonl(out_dir / SERVER_METRICS, warn=False), Integrity())
    from agentload.report import charts  # matplotlib: only when a report is drawn

    pngs = charts.write_charts(out_dir, summary, samples)
    doc = build_document(summary)
    if pngs:
        doc.h("Charts")
        for p in pngs:
            doc.image(f"{charts.CHARTS_DIR}/{p.name}", p.stem.replace("_", " "))
    md = out_dir / "report.md"
    html_path = out_dir / "report.html"
    atomic_write_bytes(md, to_markdown(doc).encode())
    atomic_write_bytes(html_path, to_html(doc).encode())
    return [md, html_path, *pngs]
