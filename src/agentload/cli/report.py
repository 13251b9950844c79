"""`agentload report DIR` and `agentload compare DIR_A DIR_B`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agentload.cli.app import app
from agentload.fmt import pct, secs
from agentload.results.jsonl import ResultsError


@app.command("report")
def report_command(
    out_dir: Annotated[Path, typer.Argument(help="Results directory of a run, or of a sweep.")],
    slo: Annotated[
        str | None,
        typer.Option(
            "--slo",
            help="SLO thresholds, e.g. ttft_p90=2s,e2e_p99=10s (default: the run's config.yaml).",
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No console table.")] = False,
) -> None:
    """Re-summarize a results directory (summary.json, report.md, report.html, charts/*.png),
    or a sweep directory (every point, then sweep.json, sweep.md and sweep.html)."""
    from agentload.report import summary_table
    from agentload.report.redo import rereport, rereport_sweep
    from agentload.results.dirs import check_results_dir, is_sweep
    from agentload.units import parse_slo

    sweep = is_sweep(out_dir)
    try:
        thresholds = parse_slo(slo) if slo else None
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--slo") from None
    try:
        if not sweep:
            check_results_dir(out_dir)
        if sweep:
            doc, paths = rereport_sweep(out_dir, thresholds)
        else:
            summary, paths = rereport(out_dir, thresholds)
    except (ResultsError, orjson.JSONDecodeError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    except OSError as e:
        typer.echo(f"error: cannot write to {e.filename or out_dir}: {e.strerror or e}", err=True)
        raise typer.Exit(1) from None
    console = Console()
    if not quiet:
        if sweep:
            from agentload.sweep import sweep_table

            console.print(sweep_table(doc))
        else:
            console.print(summary_table(summary))
    for p in paths:
        console.print(f"wrote {p}", highlight=False, soft_wrap=True)


def _cell(m: dict[str, Any] | None, rate: bool) -> str:
    if not m or m.get("value") is None:
        return "–"
    f = pct if rate else secs
    ci = m.get("ci")
    return f"{f(m['value'])} [{f(ci[0])}, {f(ci[1])}]" if ci else f(m["value"])


@app.command("compare")
def compare_command(
    dir_a: Annotated[Path, typer.Argument(help="Baseline results directory.")],
    dir_b: Annotated[Path, typer.Argument(help="Results directory to compare with it.")],
    role: Annotated[str, typer.Option(help="Role whose calls are compared.")] = "agent",
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    gateway: Annotated[
        bool,
        typer.Option(
            "--gateway",
            help="B is A's workload run through a gateway or `agentload proxy`: show the "
            "latency it adds per role (TTFT, E2E, ITL) with 95% CIs of the difference.",
        ),
    ] = False,
    max_added: Annotated[
        str | None,
        typer.Option(
            "--max-added",
            metavar="LIMIT",
            help="With --gateway (implied): verdict against LIMIT (5% or 2ms) on --gate; exit "
            "0 within, 1 exceeds, 3 inconclusive.",
        ),
    ] = None,
    gate: Annotated[
        str,
        typer.Option(help="Comma-separated figures --max-added checks, e.g. ttft_p50,e2e_p99."),
    ] = "ttft_p50,e2e_p50",
) -> None:
    """Compare two runs side by side with 95% bootstrap confidence intervals."""
    from agentload.report.compare import compare_dirs
    from agentload.results.dirs import check_results_dir, is_sweep

    gated = _gate_args(max_added, gate) if gateway or max_added is not None else None
    if is_sweep(dir_a) or is_sweep(dir_b):
        _compare_sweeps(dir_a, dir_b, gated, json_out)
    added: dict[str, Any] | None = None
    try:
        check_results_dir(dir_a)
        check_results_dir(dir_b)
        res = compare_dirs(dir_a, dir_b, role)
        if gated is not None:
            from agentload.report.added import added_latency

            added = added_latency(dir_a, dir_b, max_added=gated[0], gate=gated[1])
            res["added_latency"] = added
    except ResultsError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    if json_out:
        typer.echo(orjson.dumps(res, option=orjson.OPT_INDENT_2).decode())
    else:
        _print_compare(res, dir_a, dir_b, role, added)
    if added is not None:
        from agentload.report.added import exit_code

        raise typer.Exit(exit_code(added))


def _compare_sweeps(
    dir_a: Path, dir_b: Path, gated: tuple[Any, tuple[str, ...]] | None, json_out: bool
) -> None:
    """Two sweeps (direct, then through the gateway): the added latency point by point."""
    from agentload.cli.added import print_added
    from agentload.report.added import added_latency_sweep, exit_code
    from agentload.results.dirs import is_sweep

    if gated is None or not (is_sweep(dir_a) and is_sweep(dir_b)):
        raise typer.BadParameter(
            "two sweeps compare point by point with --gateway (or --max-added); "
            "a sweep does not compare with a single run"
        )
    try:
        res = added_latency_sweep(dir_a, dir_b, max_added=gated[0], gate=gated[1])
    except ResultsError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    if json_out:
        typer.echo(orjson.dumps(res, option=orjson.OPT_INDENT_2).decode())
    else:
        console = Console()
        for point in res["points"]:
            console.print(f"[bold]{res['kind']} {point[res['kind']]:g}[/]", highlight=False)
            print_added(console, {**point, "gate": None})
        if res["unmatched"]:
            console.print(f"[yellow]warning:[/] points in one sweep only: {res['unmatched']}")
        print_added(console, {"roles": {}, "gate": res.get("gate")})
    raise typer.Exit(exit_code(res))


def _gate_args(max_added: str | None, gate: str) -> tuple[Any, tuple[str, ...]]:
    """(--max-added as a Threshold or None, --gate's figures); a usage error if malformed."""
    from agentload.report.added import NAMES, parse_threshold

    gates = tuple(g.strip() for g in gate.split(",") if g.strip())
    unknown = [g for g in gates if g not in NAMES]
    if unknown or not gates:
        raise typer.BadParameter(
            f"unknown figure {', '.join(unknown) or gate!r}; choose from {', '.join(NAMES)}",
            param_hint="--gate",
        )
    try:
        limit = parse_threshold(max_added) if max_added is not None else None
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--max-added") from None
    return limit, gates


def _print_compare(
    res: dict[str, Any], dir_a: Path, dir_b: Path, role: str, added: dict[str, Any] | None
) -> None:
    t = Table(
        title=f"A = {dir_a}   B = {dir_b}   ({role} calls, 95% bootstrap CI)", title_justify="left"
    )
    t.add_column("metric")
    for col in ("A", "B", "B − A", "change", "CIs apart"):
        t.add_column(col, justify="right")
    for key, row in res["metrics"].items():
        rate = key == "success_rate"
        per_min = key == "episodes_per_min"
        if per_min:
            a = f"{row['a']['value']:.2f}" if row["a"] and row["a"]["value"] else "–"
            b = f"{row['b']['value']:.2f}" if row["b"] and row["b"]["value"] else "–"
            d = "–" if row["delta"] is None else f"{row['delta']:+.2f}"
        else:
            a, b = _cell(row["a"], rate), _cell(row["b"], rate)
            d = (
                "–"
                if row["delta"] is None
                else (
                    f"{row['delta'] * 100:+.1f} pt"
                    if rate
                    else ("+" if row["delta"] >= 0 else "−") + secs(abs(row["delta"]))
                )
            )
        rel = "–" if row["relative"] is None else f"{row['relative'] * 100:+.1f}%"
        t.add_row(key, a, b, d, rel, "yes" if row["significant"] else "")
    console = Console()
    console.print(t)
    console.print("Calls resampled by whole episode (cluster bootstrap).", highlight=False)
    for line in res["context_differences"]:
        console.print(f"[yellow]warning:[/] the runs differ in {escape(line)}", highlight=False)
    if added is not None:
        from agentload.cli.added import print_added

        print_added(console, added)
