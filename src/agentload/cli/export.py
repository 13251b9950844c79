"""`agentload export DIR`: the run's records as flat tables, or its τ² episodes as τ²-bench
results files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import orjson
import typer

from agentload.cli.root import app, examples
from agentload.results.jsonl import ResultsError

FORMATS = ("csv", "parquet", "tau2")


@app.command(
    "export",
    epilog=examples(
        "agentload export results/demo --format parquet --out tables",
        "agentload export results/sweep --format csv",
        "agentload export results/tau2 --format tau2 --tau2-data tau2-bench",
    ),
)
def export_command(
    out_dir: Annotated[
        Path,
        typer.Argument(
            help="Results directory of a run, or of a sweep (its points in one table each, "
            "with the load value and the point's folder as the first columns)."
        ),
    ],
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="csv or parquet (tables; parquet needs pyarrow), or tau2 (the τ² episodes "
            "as τ²-bench results files, one per domain).",
        ),
    ] = "csv",
    dest: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="Folder for the files; for tau2 also a .json file (a run of one domain).",
            show_default="DIR/export",
        ),
    ] = None,
    tau2_data: Annotated[
        Path | None,
        typer.Option(
            "--tau2-data",
            metavar="DIR",
            help="tau2: τ²-bench data folder for the task records.",
            show_default="the run's, else AGENTLOAD_TAU2_DATA",
        ),
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the written paths as JSON.")
    ] = False,
) -> None:
    """Write calls, sessions and per-turn statistics as CSV or Parquet tables, or the run's
    τ² episodes as τ²-bench results files (`tau2 view` opens them; τ²'s evaluator re-grades
    them)."""
    # lazy: start-up: a command's machinery loads when it runs, not for --help
    from agentload.results.dirs import check_results_dir, is_sweep
    from agentload.results.export import ExportError, export
    from agentload.results.tau2_export import Tau2ExportError, export_tau2

    if fmt not in FORMATS:
        typer.echo(
            f"error: --format: expected csv or parquet tables, or tau2, got {fmt!r}", err=True
        )
        raise typer.Exit(2)
    sweep = is_sweep(out_dir)
    if sweep and fmt == "tau2":
        typer.echo(
            f"error: {out_dir} is a sweep: --format tau2 exports one run; give one of its "
            "point folders",
            err=True,
        )
        raise typer.Exit(2)
    try:
        if not sweep:
            check_results_dir(out_dir)
        if fmt == "tau2":
            done = export_tau2(out_dir, dest, tau2_data)
            paths = done.paths
            for w in done.warnings:
                typer.echo(f"warning: {w}", err=True)
        else:
            say = None if json_out else (lambda m: typer.echo(m, err=True))
            paths = export(out_dir, fmt, dest, say=say)
    except (ExportError, Tau2ExportError, ResultsError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    if json_out:
        typer.echo(orjson.dumps([str(p) for p in paths]).decode())
    else:
        for p in paths:
            typer.echo(f"wrote {p}")
