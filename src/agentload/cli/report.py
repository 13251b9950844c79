"""`agentload report DIR` and `agentload compare DIR_A DIR_B`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agentload.cli.root import app, examples
from agentload.flags import comma_list
from agentload.fmt import pct, secs
from agentload.results.jsonl import ResultsError


@app.command(
    "report",
    epilog=examples(
        "agentload report results/demo",
        "agentload report results/demo --slo ttft_p90=1s,e2e_p99=20s",
        "# a sweep folder: every point, then sweep.md and sweep.html",
        "agentload report results/sweep --quiet",
    ),
)
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
    # lazy: start-up: a command's machinery loads when it runs, not for --help
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
            # lazy: start-up: a command's machinery loads when it runs, not for --help
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


@app.command(
    "compare",
    epilog=examples(
        "agentload compare results/c8 results/c16",
        "agentload compare results/vllm results/sglang results/trtllm \\",
        "  --labels vllm,sglang,trtllm --out results/engines",
        "agentload compare results/direct results/gateway --max-added 5%",
    ),
)
def compare_command(
    dirs: Annotated[
        list[Path],
        typer.Argument(
            help="Results folders of runs or sweeps, the baseline first. Two runs: side by "
            "side with 95% CIs. Three or more, or any sweep: a table and curves against load "
            "(compare.md / .html / .json in --out).",
            metavar="DIR",
        ),
    ],
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
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            metavar="DIR",
            help="Folder for compare.md, compare.html (opens alone) and compare.json; "
            "written for three or more folders or any sweep (default results/compare), "
            "and for two runs when given.",
        ),
    ] = None,
    labels: Annotated[
        str | None,
        typer.Option(
            "--labels",
            metavar="A,B,...",
            help="Names of the folders in tables and legends, in order (default: folder names).",
        ),
    ] = None,
) -> None:
    """Compare runs side by side: two runs with 95% bootstrap confidence intervals; N runs
    or sweeps as one table and overlaid curves (TTFT, e2e, success, throughput against load)."""
    # lazy: start-up: a command's machinery loads when it runs, not for --help
    from agentload.results.dirs import is_sweep

    if len(dirs) < 2:
        raise typer.BadParameter("give two or more results folders", param_hint="DIR")
    gated = _gate_args(max_added, gate) if gateway or max_added is not None else None
    if gated is not None and len(dirs) > 2:
        raise typer.BadParameter(
            "--gateway / --max-added compare two folders: direct, then through the gateway"
        )
    # lazy: start-up: a command's machinery loads when it runs, not for --help
    from agentload.report.multi import DEFAULT_OUT, parse_labels

    try:
        names = parse_labels(labels, len(dirs))
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--labels") from None
    if gated is None and (len(dirs) > 2 or any(is_sweep(d) for d in dirs)):
        _compare_many(dirs, out or DEFAULT_OUT, names, json_out)
        return
    _compare_two(dirs, role, gated, out, names, json_out)


def _compare_two(
    dirs: list[Path],
    role: str,
    gated: Any,
    out: Path | None,
    names: list[str] | None,
    json_out: bool,
) -> None:
    """Two runs side by side with 95% CIs (and, with --gateway, the latency B adds)."""
    # lazy: start-up: a command's machinery loads when it runs, not for --help
    from agentload.report.compare import compare_dirs
    from agentload.results.dirs import check_results_dir, is_sweep

    dir_a, dir_b = dirs
    if is_sweep(dir_a) or is_sweep(dir_b):
        _compare_sweeps(dir_a, dir_b, gated, json_out)
    added: dict[str, Any] | None = None
    try:
        check_results_dir(dir_a)
        check_results_dir(dir_b)
        res = compare_dirs(dir_a, dir_b, role)
        if gated is not None:
            # lazy: start-up: a command's machinery loads when it runs, not for --help
            from agentload.report.added import added_latency

            added = added_latency(dir_a, dir_b, max_added=gated[0], gate=gated[1])
            res["added_latency"] = added
    except ResultsError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    written: list[Path] = []
    if out is not None:  # the page too: both runs' rows and curves, and this table
        written = _write_many(_load_many(dirs, names), out, statistics=res, role=role)
    if json_out:
        typer.echo(orjson.dumps(res, option=orjson.OPT_INDENT_2).decode())
    else:
        _print_compare(res, dir_a, dir_b, role, added)
        for p in written:
            typer.echo(f"wrote {p}")
    if added is not None:
        # lazy: start-up: a command's machinery loads when it runs, not for --help
        from agentload.report.added import exit_code

        raise typer.Exit(exit_code(added))


def _load_many(dirs: list[Path], names: list[str] | None) -> list[Any]:
    """The folders as report.multi.Series; exit 2 on one that is not a run or a sweep."""
    # lazy: start-up: a command's machinery loads when it runs, not for --help
    from agentload.report.multi import load_all

    try:
        return load_all(dirs, names)
    except (ResultsError, orjson.JSONDecodeError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None


def _write_many(
    series: list[Any], out: Path, statistics: dict[str, Any] | None = None, role: str = "agent"
) -> list[Path]:
    """compare.md / .html / .json in `out`; exit 1 when it cannot be written."""
    # lazy: start-up: a command's machinery loads when it runs, not for --help
    from agentload.report.multi import write_compare

    try:
        return write_compare(series, out, statistics, role)
    except OSError as e:
        typer.echo(f"error: cannot write to {e.filename or out}: {e.strerror or e}", err=True)
        raise typer.Exit(1) from None


def _compare_many(dirs: list[Path], out: Path, names: list[str] | None, json_out: bool) -> None:
    """N runs or sweeps: the table on the console (or compare.json on stdout), the files."""
    # lazy: start-up: a command's machinery loads when it runs, not for --help
    from agentload.report.multi import compare_table

    series = _load_many(dirs, names)
    paths = _write_many(series, out)
    if json_out:
        typer.echo((out / "compare.json").read_text(encoding="utf-8"))
        return
    console = Console()
    console.print(compare_table(series))
    for p in paths:
        console.print(f"wrote {p}", highlight=False, soft_wrap=True)


def _compare_sweeps(
    dir_a: Path, dir_b: Path, gated: tuple[Any, tuple[str, ...]] | None, json_out: bool
) -> None:
    """Two sweeps (direct, then through the gateway): the added latency point by point."""
    # lazy: start-up: a command's machinery loads when it runs, not for --help
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
    # lazy: start-up: a command's machinery loads when it runs, not for --help
    from agentload.report.added import NAMES, parse_threshold

    gates = tuple(comma_list(gate))
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
        per_min = key.endswith("_per_min")
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
        # lazy: start-up: a command's machinery loads when it runs, not for --help
        from agentload.cli.added import print_added

        print_added(console, added)
