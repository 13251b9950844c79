"""`agentload export DIR`: the run's records as flat tables."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import orjson
import typer

from agentload.cli.app import app
from agentload.results.jsonl import ResultsError


@app.command("export")
def export_command(
    out_dir: Annotated[Path, typer.Argument(help="Results directory of a run.")],
    fmt: Annotated[
        str, typer.Option("--format", "-f", help="csv or parquet (parquet needs pyarrow).")
    ] = "csv",
    dest: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Folder for the tables.", show_default="DIR/export"),
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the written paths as JSON.")
    ] = False,
) -> None:
    """Write calls, sessions and per-turn statistics as CSV or Parquet tables."""
    from agentload.results.dirs import check_results_dir
    from agentload.results.export import ExportError, export

    try:
        check_results_dir(out_dir)
        paths = export(out_dir, fmt, dest)
    except (ExportError, ResultsError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    if json_out:
        typer.echo(orjson.dumps([str(p) for p in paths]).decode())
    else:
        for p in paths:
            typer.echo(f"wrote {p}")
