"""`agentload tasks` through the real command line app."""

from __future__ import annotations

import orjson
from typer.testing import CliRunner

from agentload.cli import app

runner = CliRunner()


def test_tasks_list_table() -> None:
    r = runner.invoke(app, ["tasks", "--domain", "airline"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "airline/000" in r.output and "airline/057" in r.output
    assert "58 tasks (read_only 12, single_write 22, multi_write 10, refusal 14)" in r.output


def test_tasks_list_json_filtered() -> None:
    r = runner.invoke(app, ["tasks", "-d", "airline", "--category", "refusal", "--json"])
    assert r.exit_code == 0, r.output
    rows = [orjson.loads(line) for line in r.stdout.splitlines()]
    assert len(rows) == 14
    assert all(row["category"] == "refusal" and row["flags"] == ["refusal"] for row in rows)


def test_tasks_list_subcommand_matches_the_default_listing() -> None:
    listed = runner.invoke(app, ["tasks", "list", "--domain", "retail", "--json"])
    default = runner.invoke(app, ["tasks", "--domain", "retail", "--json"])
    assert listed.exit_code == 0, listed.output
    assert listed.stdout == default.stdout
    ids = [orjson.loads(line)["id"] for line in listed.stdout.splitlines()]
    assert ids[0] == "retail/000" and len(ids) == len(set(ids)) >= 50
    bad = runner.invoke(app, ["tasks", "list", "--category", "nonsense"])
    assert bad.exit_code == 2


def test_tasks_show_and_errors() -> None:
    r = runner.invoke(app, ["tasks", "show", "airline/025"])
    assert r.exit_code == 0, r.output
    task = orjson.loads(r.stdout)
    assert task["id"] == "airline/025" and task["gold_actions"][-1]["name"] == "create_booking"

    r = runner.invoke(app, ["tasks", "show", "airline/999"])
    assert r.exit_code == 2 and "unknown task 'airline/999'" in r.output
    r = runner.invoke(app, ["tasks", "--category", "bogus"])
    assert r.exit_code == 2 and "bogus" in r.output
    r = runner.invoke(app, ["tasks", "-d", "nope"])
    assert r.exit_code == 2 and "unknown domain 'nope'" in r.output


def test_tasks_check_airline() -> None:
    r = runner.invoke(app, ["tasks", "check", "-d", "airline"])
    assert r.exit_code == 0, r.output
    assert "airline: 58 tasks checked, data airline-2, grader 1" in r.output
