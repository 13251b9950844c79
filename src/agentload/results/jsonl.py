"""JSONL reading and repair for the append-only results files.

Every record is written as one `write()` of `json + "\\n"`, so a process killed mid-write can
leave at most one incomplete line, and only at the end of a file. Readers skip such a torn
last line with a warning; a bad line anywhere else means the file was damaged some other way
and is reported with its file and line number.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger("agentload.results")


class JsonlError(ValueError):
    """A corrupt line in a results file; the message names `file:line`."""

    def __init__(self, path: Path, line: int, reason: str) -> None:
        super().__init__(f"{path}:{line}: {reason}")
        self.path = path
        self.line = line


def _split(data: bytes) -> list[bytes]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def load_jsonl(path: Path | str) -> list[dict[str, Any]]:
    """All records of a JSONL file (missing file: empty list).

    A last line that does not parse (a kill mid-write) is skipped with a warning; any other
    bad line raises `JsonlError` naming `file:line`. Blank lines are ignored.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    # Fast path: the whole file as one JSON array in a single C call (a JSON line never holds
    # a raw newline). Any problem falls through to the line-by-line pass that locates it.
    body = data.strip()
    if not body:
        return []
    try:
        fast = orjson.loads(b"[" + body.replace(b"\n", b",") + b"]")
    except orjson.JSONDecodeError:
        pass
    else:
        if all(type(o) is dict for o in fast):
            return fast
    lines = _split(data)
    out: list[dict[str, Any]] = []
    last = len(lines) - 1
    loads = orjson.loads
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = loads(line)
        except orjson.JSONDecodeError as e:
            if i == last:
                log.warning("%s:%d: skipping a torn last line (%d bytes)", path, i + 1, len(line))
                continue
            raise JsonlError(path, i + 1, f"invalid JSON: {e}") from None
        if not isinstance(obj, dict):
            if i == last:
                log.warning("%s:%d: skipping a torn last line", path, i + 1)
                continue
            raise JsonlError(path, i + 1, f"expected a JSON object, got {type(obj).__name__}")
        out.append(obj)
    return out


def dumps_line(obj: Any) -> bytes:
    """One JSONL line; numpy scalars and dataclasses serialise natively."""
    return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so a reader never sees a half-written file."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


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
