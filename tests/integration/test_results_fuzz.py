"""Corrupted results folders through `agentload report DIR` and `agentload run --resume DIR`.

One real run on the embedded simulator gives the base folder; each case damages a copy of it
one way (truncations, torn lines, binary garbage, missing files, duplicated lines, empty
files, wrong types, other schema versions, a directory where a file should be, ...). Both
commands must end with a correct result or one clear error line, never a traceback, and
neither may lose a line that was recorded: `report` leaves the record files byte-identical,
and after `--resume` each record file plus what resume set aside in `dropped/` holds at least
the lines it held before.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from agentload.cli import app
from agentload.config import build_config
from agentload.results.resume import DROPPED_DIR
from agentload.runner import execute_run

RECORD_FILES = ("calls.jsonl", "sessions.jsonl", "trajectories.jsonl", "server_metrics.jsonl")
EPISODES = 6


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import asyncio

    out = tmp_path_factory.mktemp("fuzz") / "base"
    cfg = build_config(
        data={
            "out": str(out),
            "sim": {"profile": "instant", "speedup": 50.0},
            "metrics": {"interval_s": 0.1},
            "workload": {"tasks": ["airline/000-002"], "trials": 2},
            "load": {"concurrency": 3},
            "report": False,
        }
    )
    res = asyncio.run(execute_run(cfg, progress="off", say=lambda _m: None, install_signals=False))
    assert res.exit_code == 0
    assert len((out / "sessions.jsonl").read_bytes().splitlines()) == EPISODES
    return out


# ---- the damage -----------------------------------------------------------------------------


def _lines(p: Path) -> list[bytes]:
    return p.read_bytes().splitlines(keepends=True)


def _put(p: Path, lines: list[bytes]) -> None:
    p.write_bytes(b"".join(lines))


def _mid(p: Path, new: Callable[[list[bytes], int], None]) -> None:
    lines = _lines(p)
    new(lines, len(lines) // 2)
    _put(p, lines)


def torn_tail(name: str) -> Callable[[Path], None]:
    def f(d: Path) -> None:
        data = (d / name).read_bytes()
        (d / name).write_bytes(data[: len(data) - 7])

    return f


def torn_middle(name: str) -> Callable[[Path], None]:
    def f(d: Path) -> None:
        def cut(lines: list[bytes], i: int) -> None:
            lines[i] = lines[i][: len(lines[i]) // 2] + b"\n"

        _mid(d / name, cut)

    return f


def insert_mid(name: str, junk: bytes) -> Callable[[Path], None]:
    def f(d: Path) -> None:
        _mid(d / name, lambda lines, i: lines.insert(i, junk))

    return f


def two_on_one_line(name: str) -> Callable[[Path], None]:
    def f(d: Path) -> None:
        def join(lines: list[bytes], i: int) -> None:
            lines[i] = lines[i].rstrip(b"\n") + b"," + lines[i + 1]
            del lines[i + 1]

        _mid(d / name, join)

    return f


def duplicate(name: str) -> Callable[[Path], None]:
    def f(d: Path) -> None:
        _mid(d / name, lambda lines, i: lines.insert(i + 1, lines[i]))

    return f


def empty(name: str) -> Callable[[Path], None]:
    return lambda d: (d / name).write_bytes(b"")


def missing(name: str) -> Callable[[Path], None]:
    return lambda d: (d / name).unlink()


def directory(name: str) -> Callable[[Path], None]:
    def f(d: Path) -> None:
        (d / name).unlink()
        (d / name).mkdir()

    return f


def content(name: str, data: bytes) -> Callable[[Path], None]:
    return lambda d: (d / name).write_bytes(data)


def edit_record(name: str, change: dict[str, Any], index: int = 1) -> Callable[[Path], None]:
    def f(d: Path) -> None:
        lines = _lines(d / name)
        rec = orjson.loads(lines[index])
        rec.update(change)
        lines[index] = orjson.dumps(rec) + b"\n"
        _put(d / name, lines)

    return f


def all_records(name: str, change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def f(d: Path) -> None:
        out = []
        for line in _lines(d / name):
            rec = orjson.loads(line)
            change(rec)
            out.append(orjson.dumps(rec) + b"\n")
        _put(d / name, out)

    return f


def dup_task_trial(d: Path) -> None:
    lines = _lines(d / "sessions.jsonl")
    rec = orjson.loads(lines[0])
    rec["session_id"] = rec["session_id"] + "-again"
    lines.append(orjson.dumps(rec) + b"\n")
    _put(d / "sessions.jsonl", lines)


def crlf(name: str) -> Callable[[Path], None]:
    return lambda d: (d / name).write_bytes((d / name).read_bytes().replace(b"\n", b"\r\n"))


def _null_numbers(rec: dict[str, Any]) -> None:
    for k, v in list(rec.items()):
        if isinstance(v, int | float) and not isinstance(v, bool):
            rec[k] = None


def _only_id(rec: dict[str, Any]) -> None:
    keep = {"call_id": rec["call_id"], "session_id": rec["session_id"]}
    rec.clear()
    rec.update(keep)


GARBAGE = bytes(range(256)) * 3 + b"\n"

CASES: dict[str, Callable[[Path], None]] = {
    "calls torn last line": torn_tail("calls.jsonl"),
    "sessions torn last line": torn_tail("sessions.jsonl"),
    "trajectories torn last line": torn_tail("trajectories.jsonl"),
    "server_metrics torn last line": torn_tail("server_metrics.jsonl"),
    "calls torn line mid-file": torn_middle("calls.jsonl"),
    "sessions torn line mid-file": torn_middle("sessions.jsonl"),
    "trajectories torn line mid-file": torn_middle("trajectories.jsonl"),
    "calls binary garbage mid-file": insert_mid("calls.jsonl", GARBAGE),
    "sessions binary garbage mid-file": insert_mid("sessions.jsonl", GARBAGE),
    "calls NUL block mid-file": insert_mid("calls.jsonl", b"\x00" * 4096 + b"\n"),
    "calls two records on one line": two_on_one_line("calls.jsonl"),
    "sessions two records on one line": two_on_one_line("sessions.jsonl"),
    "calls duplicated line": duplicate("calls.jsonl"),
    "sessions duplicated line": duplicate("sessions.jsonl"),
    "trajectories duplicated line": duplicate("trajectories.jsonl"),
    "sessions same task and trial twice": dup_task_trial,
    "calls empty file": empty("calls.jsonl"),
    "sessions empty file": empty("sessions.jsonl"),
    "trajectories empty file": empty("trajectories.jsonl"),
    "server_metrics empty file": empty("server_metrics.jsonl"),
    "calls missing": missing("calls.jsonl"),
    "sessions missing": missing("sessions.jsonl"),
    "trajectories missing": missing("trajectories.jsonl"),
    "server_metrics missing": missing("server_metrics.jsonl"),
    "run.json missing": missing("run.json"),
    "summary.json missing": missing("summary.json"),
    "calls is a directory": directory("calls.jsonl"),
    "sessions is a directory": directory("sessions.jsonl"),
    "run.json is a directory": directory("run.json"),
    "config.yaml is a directory": directory("config.yaml"),
    "calls prompt_tokens 'many'": edit_record("calls.jsonl", {"prompt_tokens": "many"}),
    "calls every number null": all_records("calls.jsonl", _null_numbers),
    "calls negative timings": edit_record("calls.jsonl", {"ttft_s": -1.0, "e2e_s": -5}),
    "calls NaN and infinite timings": edit_record(
        "calls.jsonl", {"ttft_s": "NaN", "e2e_s": 1e308, "tpot_s": "inf"}
    ),
    "calls missing fields": all_records("calls.jsonl", _only_id),
    "sessions wrong types": edit_record(
        "sessions.jsonl", {"reward": "high", "durations": "long", "counts": [1], "trial": "x"}
    ),
    "sessions end before start": edit_record("sessions.jsonl", {"end_ns": 1, "started_at": -1}),
    "sessions other schema version": edit_record(
        "sessions.jsonl", {"schema": "agentload.session/99"}
    ),
    "calls other schema version": edit_record("calls.jsonl", {"schema": "agentload.call/99"}),
    "sessions a JSON list line": insert_mid("sessions.jsonl", b"[1, 2, 3]\n"),
    "calls bare string and number lines": insert_mid("calls.jsonl", b'"call"\n42\nnull\n'),
    "calls session_id an object": edit_record("calls.jsonl", {"session_id": {"a": 1}}),
    "server_metrics odd values": edit_record(
        "server_metrics.jsonl", {"running": "many", "kv_usage": [1]}, 0
    ),
    "run.json garbage": content("run.json", GARBAGE),
    "run.json a JSON list": content("run.json", b"[1, 2]"),
    "summary.json garbage": content("summary.json", GARBAGE),
    "summary.json a JSON list": content("summary.json", b'[{"client": 1}]'),
    "config.yaml binary garbage": content("config.yaml", GARBAGE),
    "config.yaml slo value not a duration": lambda d: (d / "config.yaml").write_text(
        (d / "config.yaml").read_text().replace("slo: {}", "slo: {ttft_p90: soon}")
        + ("" if "slo: {}" in (d / "config.yaml").read_text() else "slo: {ttft_p90: soon}\n")
    ),
    "calls CRLF line endings": crlf("calls.jsonl"),
    "sessions UTF-8 BOM": lambda d: (d / "sessions.jsonl").write_bytes(
        b"\xef\xbb\xbf" + (d / "sessions.jsonl").read_bytes()
    ),
    "calls whole file random bytes": content("calls.jsonl", GARBAGE * 20),
}


def _count(d: Path, name: str) -> int:
    n = 0
    for p in (d / name, d / DROPPED_DIR / name):
        if p.is_file():
            n += sum(1 for line in p.read_bytes().split(b"\n") if line.strip())
    return n


def _snapshot(d: Path) -> dict[str, bytes]:
    return {n: (d / n).read_bytes() for n in RECORD_FILES if (d / n).is_file()}


def _check_outcome(r: Any, what: str) -> str:
    """'ok', or 'error: <the line>'; fails on a traceback or an error that is not one line."""
    assert r.exception is None or isinstance(r.exception, SystemExit), (
        what,
        repr(r.exception),
        r.output,
    )
    err = r.stderr
    assert "Traceback" not in err, (what, err)
    if r.exit_code == 0:
        return "ok"
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert r.exit_code in (1, 2), (what, r.exit_code, err)
    assert len(lines) == 1 and "error" in lines[0], (what, err)
    return f"error: {lines[0]}"


OUTCOMES: dict[str, tuple[str, str]] = {}


@pytest.fixture(scope="module", autouse=True)
def _outcome_table() -> Any:
    """With `pytest -s`, the table of outcomes (the figures in docs/reliability.md)."""
    yield
    if OUTCOMES:
        print("\ncase | report | resume")
        for case, (rep, res) in OUTCOMES.items():
            print(f"{case} | {rep} | {res}")


@pytest.mark.parametrize("case", list(CASES))
def test_corrupted_folder(base: Path, tmp_path: Path, case: str) -> None:
    runner = CliRunner()
    d = tmp_path / "run"
    shutil.copytree(base, d)
    CASES[case](d)

    # report reads and never rewrites the record files
    before = _snapshot(d)
    r = runner.invoke(app, ["report", str(d), "--quiet"])
    report = _check_outcome(r, f"report: {case}")
    assert _snapshot(d) == before, case
    if report == "ok":
        summary = orjson.loads((d / "summary.json").read_bytes())
        assert summary["counts"]["sessions"] <= EPISODES

    # --resume keeps every line: in its file, or set aside in dropped/
    counts = {n: _count(d, n) for n in RECORD_FILES}
    r = runner.invoke(app, ["run", "--resume", str(d), "--quiet", "--progress", "off"])
    resume = _check_outcome(r, f"resume: {case}")
    for n in RECORD_FILES:
        if (d / n).is_file() or (d / DROPPED_DIR / n).is_file():
            assert _count(d, n) >= counts[n], (case, n, counts[n], _count(d, n))
    if resume == "ok":
        summary = orjson.loads((d / "summary.json").read_bytes())
        # Every planned (task, trial) is finished exactly once in the summary.
        assert summary["counts"]["sessions"] == EPISODES, (case, summary["integrity"])
    OUTCOMES[case] = (report, resume)


def test_case_count() -> None:
    assert len(CASES) >= 46
