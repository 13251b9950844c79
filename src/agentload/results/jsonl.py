"""JSONL reading and repair for the append-only results files.

Every record is written as one `write()` of `json + "\\n"`, so a process killed mid-write can
leave at most one incomplete line, and only at the end of a file. A bad line anywhere else
means the file was damaged some other way (a disk error, an edit, two writers). Readers skip
every unreadable line with a warning naming `file:line` and keep the rest: one damaged line
never costs the records around it.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from agentload.results.files import ResultsError
from agentload.results.lock import check_held
from agentload.safeio import NotRegularFile, read_regular

log = logging.getLogger("agentload.results")


class JsonlError(ResultsError):
    """A corrupt line in a results file; the message names `file:line`."""

    def __init__(self, path: Path, line: int, reason: str) -> None:
        super().__init__(f"{path}:{line}: {reason}")
        self.path = path
        self.line = line


# Bad lines named one by one in the log before the rest are only counted.
MAX_WARNINGS_PER_FILE = 5


@dataclass
class JsonlRead:
    """The readable records of a JSONL file, with where each came from and what was not."""

    path: Path
    records: list[dict[str, Any]] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)  # 1-based line of each record
    bad: list[tuple[int, str]] = field(default_factory=list)  # (line, reason), skipped
    missing: bool = False

    def where(self, i: int) -> str:
        """`file:line` of record i."""
        return f"{self.path}:{self.lines[i]}"


def _split(data: bytes) -> list[bytes]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def _read_bytes(path: Path) -> bytes | None:
    try:
        return read_regular(path)
    except FileNotFoundError:
        return None
    except NotRegularFile as e:
        raise ResultsError(f"{e}; move it away and retry") from None
    except OSError as e:
        raise ResultsError(f"{path}: cannot read: {e.strerror or e}") from None


def read_jsonl(path: Path | str, *, warn: bool = True) -> JsonlRead:
    """Every readable record of a JSONL file; unreadable lines are skipped and listed.

    A line that is not one JSON object (torn by a kill, damaged, binary garbage, two objects
    on one line like `{...},{...}`) is skipped with a warning naming `file:line`; the other
    lines are kept. Blank lines are ignored. A missing file reads as empty.
    """
    path = Path(path)
    out = JsonlRead(path)
    data = _read_bytes(path)
    if data is None:
        out.missing = True
        return out
    body = data.strip()
    if not body:
        return out
    # Fast path: the whole file as one JSON array in a single C call (a JSON line never holds
    # a raw newline). It only counts when it yields exactly one object per line: a line such
    # as `{...},{...}` would otherwise pass as two records.
    try:
        fast = orjson.loads(b"[" + body.replace(b"\n", b",") + b"]")
    except orjson.JSONDecodeError:
        pass
    else:
        n_lines = body.count(b"\n") + 1
        if len(fast) == n_lines and all(type(o) is dict for o in fast):
            lead = data[: len(data) - len(data.lstrip())].count(b"\n")
            out.records = fast
            out.lines = list(range(lead + 1, lead + 1 + n_lines))
            return out
    lines = _split(data)
    last = len(lines) - 1
    loads = orjson.loads
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = loads(line)
        except orjson.JSONDecodeError as e:
            reason = "torn last line" if i == last else f"invalid JSON ({e})"
            out.bad.append((i + 1, reason))
            continue
        if not isinstance(obj, dict):
            out.bad.append((i + 1, f"expected a JSON object, got {type(obj).__name__}"))
            continue
        out.records.append(obj)
        out.lines.append(i + 1)
    if warn:
        warn_bad(out)
    return out


def warn_bad(read: JsonlRead) -> None:
    for line, reason in read.bad[:MAX_WARNINGS_PER_FILE]:
        log.warning("%s:%d: skipping a line: %s", read.path, line, reason[:200])
    more = len(read.bad) - MAX_WARNINGS_PER_FILE
    if more > 0:
        log.warning("%s: skipped %d more unreadable lines", read.path, more)


def load_jsonl(path: Path | str) -> list[dict[str, Any]]:
    """All readable records of a JSONL file (missing file: empty list); see `read_jsonl`."""
    return read_jsonl(path).records


def dumps_line(obj: Any) -> bytes:
    """One JSONL line; numpy scalars and dataclasses serialise natively."""
    return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so a reader never sees a half-written file."""

    check_held(path.parent)  # still this process's folder (agentload.results.lock)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            tmp.unlink()  # never left behind, whatever stopped the write
        if not (isinstance(e, OSError) and e.errno in _NO_SPACE and _rewrite_in_place(path, data)):
            raise


_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def _rewrite_in_place(path: Path, data: bytes) -> bool:
    """On a full disk, a small file (run.json) that must say how the run ended can still be
    rewritten within the blocks it already holds; True when that was done. Not atomic, so
    only for data that fits what the file has allocated."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode) or len(data) > st.st_blocks * 512:
            return False
        with open(path, "r+b") as f:
            f.write(data)
            f.truncate()
            f.flush()
            os.fsync(f.fileno())
    except OSError:
        return False
    return True


def atomic_write_lines(path: Path, records: Iterable[Any]) -> None:
    atomic_write_bytes(path, b"".join(dumps_line(r) for r in records))


def repair_torn_tail(path: Path) -> bool:
    """Cut an incomplete last line off `path` in place; True when something was cut.

    A last line without its newline that still parses (the kill came between the JSON and
    the newline) is kept and completed instead.
    """
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return False
    if size == 0:
        return False
    with open(path, "rb+") as f:
        f.seek(max(0, size - 1))
        if f.read(1) == b"\n":
            return False
        # Find the start of the last line by scanning back in blocks.
        pos = size
        start = 0
        block = 65536
        while pos > 0:
            lo = max(0, pos - block)
            f.seek(lo)
            chunk = f.read(pos - lo)
            j = chunk.rfind(b"\n")
            if j >= 0:
                start = lo + j + 1
                break
            pos = lo
        f.seek(start)
        tail = f.read()
        try:
            ok = isinstance(orjson.loads(tail), dict)
        except orjson.JSONDecodeError:
            ok = False
        if ok:
            f.seek(size)
            f.write(b"\n")
            return False
        f.truncate(start)
    log.warning("%s: removed a torn last line (%d bytes)", path, size - start)
    return True
