"""`agentload tasks`: list, show and check the built-in domains' tasks."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import typer
from rich.console import Console
from rich.table import Table

from agentload.cli.options import Opt, command_options
from agentload.cli.root import app, examples
from agentload.domains import domain_names, get_domain, get_task, grade_trajectory
from agentload.domains.base import (
    GRADER_VERSION,
    TASK_CATEGORIES,
    Domain,
    Environment,
    check_tasks,
)

tasks_app = typer.Typer(
    help="List, show and check the built-in domains' tasks.",
    epilog=examples(
        "agentload tasks --domain airline",
        "agentload tasks show airline/007",
        "agentload tasks grade results/demo/trajectories.jsonl",
    ),
    no_args_is_help=False,
    invoke_without_command=True,
)
app.add_typer(tasks_app, name="tasks")


def _domains(names: list[str] | None, category: str | None = None) -> list[tuple[Domain, list]]:
    """(domain, its tasks of `category`) for each named domain, or for every domain that
    loads when none is named: one broken domain must not hide the others."""
    out = []
    known = domain_names()
    # The τ² family is listed when named: its data lives outside agentload.
    for name in names or [d for d in known if not d.startswith("tau2-")]:
        if name not in known:
            raise typer.BadParameter(
                f"unknown domain {name!r}; known: {', '.join(known)}", param_hint="--domain"
            )
        try:
            d = get_domain(name)
            tasks = [t for t in d.tasks() if category is None or t.category == category]
        except Exception as e:
            if names:
                raise
            typer.echo(f"warning: domain {name!r} unavailable: {type(e).__name__}: {e}", err=True)
            continue
        out.append((d, tasks))
    return out


def _task_splits(domain: Domain, task: Any) -> list[str]:
    splits = getattr(domain, "splits", None)
    tid = getattr(task, "tau2_id", None)
    if splits is None or tid is None:
        return []
    return [name for name, ids in splits().items() if tid in ids] or ["base"]


def _first_sentence(text: str) -> str:
    head, dot, _ = text.partition(". ")
    return head + ("." if dot else "")


def _check_category(category: str | None) -> None:
    if category is not None and category not in TASK_CATEGORIES:
        raise typer.BadParameter(
            f"{category!r} is not one of {', '.join(TASK_CATEGORIES)}", param_hint="--category"
        )


_LIST_OPTIONS = [
    Opt(
        "domain",
        ("--domain", "-d"),
        list[str] | None,
        "Domain(s) to list [default: all built-in; name tau2-airline etc. for τ²'s].",
        "",
    ),
    Opt(
        "tau2_data",
        ("--tau2-data",),
        str | None,
        "τ²-bench data folder for the tau2-* domains [default: $AGENTLOAD_TAU2_DATA].",
        "",
        metavar="DIR",
    ),
    Opt("split", ("--split",), str | None, "τ² task split to list [default: base].", ""),
    Opt(
        "category",
        ("--category",),
        str | None,
        f"Only tasks of this category: {', '.join(TASK_CATEGORIES)}.",
        "",
    ),
    Opt("as_json", ("--json",), bool, "One JSON object per task, one a line.", "", False),
]


@tasks_app.callback()
@command_options(_LIST_OPTIONS)
def tasks_list(ctx: typer.Context, **kw: Any) -> None:
    """List tasks (the default when no subcommand is given)."""
    if ctx.invoked_subcommand is not None:
        return
    _tau2(kw)
    _list(kw["domain"], kw["category"], kw["as_json"])


@tasks_app.command(
    "list",
    epilog=examples(
        "agentload tasks list --domain retail --category refusal",
        "agentload tasks list -d tau2-airline --tau2-data tau2-bench --split test",
        "agentload tasks list --json",
    ),
)
@command_options(_LIST_OPTIONS)
def tasks_list_command(**kw: Any) -> None:
    """List tasks: id, category, gold actions, writes, required outputs, the customer's goal
    (τ² tasks: also the splits each belongs to)."""
    _tau2(kw)
    _list(kw["domain"], kw["category"], kw["as_json"])


def _tau2(kw: dict[str, Any]) -> None:
    """Point the τ² family at --tau2-data / --split; a bad folder or split is one line."""
    # lazy: start-up: a command's machinery loads when it runs, not for --help
    from agentload.domains.tau2 import configure
    from agentload.domains.tau2.data import Tau2DataError, data_dir, splits

    configure(kw.get("tau2_data"), kw.get("split"))
    wanted = [d for d in kw.get("domain") or () if d.startswith("tau2-")]
    if not wanted:
        return
    try:
        data_dir()
        for d in wanted:
            known = splits(d.removeprefix("tau2-").removesuffix("-workflow")) or {"base": []}
            if (kw.get("split") or "base") not in known:
                raise typer.BadParameter(
                    f"{d} has no split {kw.get('split')!r}; known: {', '.join(known)}",
                    param_hint="--split",
                )
    except Tau2DataError as e:
        raise typer.BadParameter(str(e), param_hint="--tau2-data") from None


def _list(domain: list[str] | None, category: str | None, as_json: bool) -> None:
    _check_category(category)
    domains = _domains(domain, category)
    if as_json:
        out = sys.stdout.buffer
        for _, tasks in domains:
            for t in tasks:
                out.write(orjson.dumps(t.to_dict()) + b"\n")
        out.flush()
        return
    table = Table(title="agentload tasks")
    tau2 = any(d.name.startswith("tau2-") for d, _ in domains)
    cols = ["id", "category", "actions", "writes", "outputs", "what the customer wants"]
    for col in [*cols, "splits"] if tau2 else cols:
        table.add_column(col, overflow="fold")
    counts: Counter[str] = Counter()
    for d, tasks in domains:
        for t in tasks:
            writes = sum(1 for a in t.gold_actions if (tool := d.tool(a.name)) and tool.writes)
            row = [
                t.id,
                t.category,
                str(len(t.gold_actions)),
                str(writes),
                ", ".join(t.required_outputs),
                _first_sentence(t.scenario.opening or t.scenario.instructions),
            ]
            if tau2:
                row.append(", ".join(_task_splits(d, t)))
            table.add_row(*row)
            counts[t.category] += 1
    console = Console()
    console.print(table)
    summary = ", ".join(f"{c} {counts[c]}" for c in TASK_CATEGORIES if counts[c])
    console.print(f"{sum(counts.values())} tasks ({summary})")


@tasks_app.command(
    "show",
    epilog=examples(
        "agentload tasks show airline/007",
        "agentload tasks show tau2-airline/3 --tau2-data tau2-bench",
    ),
)
def tasks_show(
    task_id: str = typer.Argument(..., help='Task id, e.g. "airline/007" or "tau2-airline/3".'),
    tau2_data: str | None = typer.Option(
        None, "--tau2-data", help="τ²-bench data folder [default: $AGENTLOAD_TAU2_DATA]."
    ),
) -> None:
    """Print one task as JSON: scenario, gold actions, required outputs (τ²'s: its record)."""
    # lazy: start-up: a command's machinery loads when it runs, not for --help
    from agentload.domains.tau2 import configure
    from agentload.domains.tau2.data import Tau2DataError

    configure(tau2_data)
    try:
        task = get_task(task_id)
    except KeyError as e:
        typer.echo(f"error: {e.args[0]}", err=True)
        raise typer.Exit(2) from None
    except Tau2DataError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    sys.stdout.buffer.write(orjson.dumps(task.to_dict(), option=orjson.OPT_INDENT_2) + b"\n")


@tasks_app.command(
    "check",
    epilog=examples("agentload tasks check", "agentload tasks check --domain retail"),
)
def tasks_check(
    domain: list[str] | None = typer.Option(None, "--domain", "-d", help="Domain(s) to check."),
) -> None:
    """Replay every task's gold actions on a fresh database and grade the result.

    Fails (exit 1) when a gold action errors, a task fails its own grading, a write task
    leaves the database unchanged, or a read-only / refusal task changes it.
    """
    # lazy: start-up: a command's machinery loads when it runs, not for --help
    from agentload.domains.tau2 import Tau2Domain
    from agentload.domains.tau2.grading import GRADER_VERSION as TAU2_GRADER
    from agentload.domains.tau2.grading import check_tasks as check_tau2_tasks

    problems = 0
    for d, tasks in _domains(domain):
        tau2 = isinstance(d, Tau2Domain)
        found = check_tau2_tasks(d) if isinstance(d, Tau2Domain) else check_tasks(d)
        for line in found:
            typer.echo(line)
        problems += len(found)
        where = "" if tau2 else f", db {Environment(d).db_hash()[:12]}"
        typer.echo(
            f"{d.name}: {len(tasks)} tasks checked, data {d.data_version}, "
            f"grader {TAU2_GRADER if tau2 else GRADER_VERSION}{where}"
        )
    if problems:
        typer.echo(f"{problems} problem(s)")
        raise typer.Exit(1)


@tasks_app.command(
    "grade",
    epilog=examples(
        "agentload tasks grade results/demo",
        "agentload tasks grade results/demo/trajectories.jsonl --json",
    ),
)
def tasks_grade(
    path: Path = typer.Argument(..., help="A trajectories.jsonl file (or a results folder)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per trajectory."),
) -> None:
    """Re-grade stored trajectories offline by replaying their tool calls.

    Exit 1 when a trajectory's stored reward differs from the replay's (or one cannot be
    graded), 2 for a file that cannot be read.
    """
    if path.is_dir():
        path = path / "trajectories.jsonl"
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise typer.BadParameter(f"cannot read {path}: {e.strerror or e}") from None
    rows: list[dict[str, Any]] = []
    for n, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            t = orjson.loads(line)
            g = grade_trajectory(t)
        except (orjson.JSONDecodeError, ValueError, KeyError) as e:
            rows.append({"line": n, "error": f"{path}:{n}: {e}", "match": False})
            continue
        stored = t.get("reward")
        rows.append(
            {
                "line": n,
                "session_id": t.get("session_id"),
                "task_id": t.get("task_id"),
                "stored_reward": stored,
                "reward": g.reward,
                "match": stored == g.reward,
                "db_match": g.db_match,
                "missing_outputs": g.missing_outputs,
            }
        )
    bad = [r for r in rows if not r["match"]]
    if as_json:
        out = sys.stdout.buffer
        for r in rows:
            out.write(orjson.dumps(r) + b"\n")
        out.flush()
    else:
        table = Table(title=f"agentload tasks grade: {path}")
        for col in ("line", "task", "stored", "replayed", "db", "missing outputs"):
            table.add_column(col, overflow="fold")
        for r in rows:
            if "error" in r:
                table.add_row(str(r["line"]), "[red]error[/]", "", "", "", r["error"])
                continue
            mark = "" if r["match"] else "[red]≠[/] "
            table.add_row(
                str(r["line"]),
                str(r["task_id"]),
                str(r["stored_reward"]),
                mark + str(r["reward"]),
                "ok" if r["db_match"] else "differs",
                ", ".join(r["missing_outputs"]),
            )
        Console().print(table)
        typer.echo(
            f"{len(rows) - len(bad)} of {len(rows)} trajectories re-grade to their stored reward"
        )
    if bad:
        typer.echo(f"{len(bad)} of {len(rows)} differ or failed", err=as_json)
        raise typer.Exit(1)
