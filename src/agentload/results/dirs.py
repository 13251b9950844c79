"""What kind of folder a command was given: a run's results folder (its records) or a sweep's
(`sweep.json` over one sub-folder per load point), checked the same way by every reader."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import orjson

from agentload.results.files import (
    CALLS,
    CONFIG,
    RECORD_FILES,
    RUN,
    SESSIONS,
    SUMMARY,
    ResultsError,
)
from agentload.safeio import file_kind

SWEEP = "sweep.json"
SWEEP_KINDS = ("concurrency", "rate")


def has_records(path: Path) -> bool:
    """Whether `path` holds a run's records (calls or sessions)."""
    return (path / CALLS).exists() or (path / SESSIONS).exists()


def check_results_dir(path: Path) -> None:
    """ResultsError, one line naming `path`, unless it is a run's results folder."""
    if not path.is_dir():
        raise ResultsError(f"{path}: not a directory")
    if not has_records(path):
        raise ResultsError(f"{path}: no {CALLS} or {SESSIONS} (not a results directory?)")
    check_regular_files(path)


def check_regular_files(path: Path) -> None:
    """ResultsError naming the first of the folder's files that is not a regular file: a FIFO
    blocks its reader and a device such as /dev/zero never ends."""
    for name in (*RECORD_FILES, RUN, CONFIG, SUMMARY, SWEEP):
        p = path / name
        try:
            mode = os.stat(p).st_mode
        except OSError:  # absent (or unreadable: the reader says so)
            continue
        if not stat.S_ISREG(mode):
            raise ResultsError(f"{p}: is {file_kind(mode)}, expected a regular file; move it away")


def check_out_dir(out: Path | str) -> None:
    """ResultsError unless `out` is a folder or can become one: a file there, or above it,
    is refused before anything runs."""
    p = Path(out)
    for q in (p, *p.parents):
        try:
            mode = os.stat(q).st_mode
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError:  # unreadable: the writer says so
            return
        if not stat.S_ISDIR(mode):
            what = "is" if q == p else f"is below {q}, which is"
            kind = "a file" if stat.S_ISREG(mode) else file_kind(mode)
            raise ResultsError(f"{p} {what} {kind}, expected a results folder")
        return


def is_sweep(path: Path) -> bool:
    return (path / SWEEP).is_file()


def load_sweep(root: Path, *, derive_planned: bool = True) -> dict[str, Any]:
    """sweep.json of a sweep folder, checked; ResultsError naming the file and the field.

    A sweep.json without `points_planned` (an older or hand-made one) plans the points it
    lists when `derive_planned`, else is refused.
    """
    path = root / SWEEP
    try:
        doc = orjson.loads(path.read_bytes())
    except OSError as e:
        raise ResultsError(f"{path}: cannot read: {e.strerror or e}") from None
    except orjson.JSONDecodeError as e:
        raise ResultsError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(doc, dict):
        raise ResultsError(f"{path}: expected a JSON object")
    kind = doc.get("kind")
    if kind not in SWEEP_KINDS:
        raise ResultsError(f"{path}: kind: expected one of {', '.join(SWEEP_KINDS)}, got {kind!r}")
    points = doc.get("points")
    if not isinstance(points, list):
        raise ResultsError(f"{path}: points: expected a list, got {type(points).__name__}")
    for i, row in enumerate(points):
        if not isinstance(row, dict):
            raise ResultsError(f"{path}: points[{i}]: expected an object, got {type(row).__name__}")
        if not _is_number(row.get(kind)):
            raise ResultsError(f"{path}: points[{i}].{kind}: expected a number")
        if not isinstance(row.get("dir"), str) or not row["dir"]:
            raise ResultsError(f"{path}: points[{i}].dir: expected a folder name")
    planned = doc.get("points_planned")
    if planned is None:
        if not derive_planned:
            raise ResultsError(f"{path}: points_planned: missing")
        doc["points_planned"] = [row[kind] for row in points]
    elif not isinstance(planned, list) or not all(_is_number(p) for p in planned):
        raise ResultsError(f"{path}: points_planned: expected a list of numbers")
    return doc


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)
