"""Reading a file that a mistake (or a hostile folder) may have replaced with something else.

A FIFO would block the reader and a device such as /dev/zero never ends, so only regular
files are read, and never past their size when opened. Shared by the configuration's loader
and every reader of a results folder.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class NotRegularFile(OSError):
    """A path that is a directory, FIFO, device or socket where a file was expected."""

    def __init__(self, path: Path | str, kind: str) -> None:
        super().__init__(f"{path}: is {kind}, expected a regular file")
        self.kind = kind


def file_kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_regular(path: Path | str, *, limit: int | None = None) -> bytes:
    """The bytes of a regular file, at most its size when opened (or `limit`, whichever is
    smaller): a FIFO would block the reader and a device such as /dev/zero never ends, so both
    are refused (NotRegularFile) before a byte is read. Other errors are OSError as usual."""
    # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(path, file_kind(st.st_mode))
        size = st.st_size if limit is None else min(st.st_size, limit)
        chunks: list[bytes] = []
        got = 0
        while got < size:  # a file that grows meanwhile is read as it was when opened
            chunk = os.read(fd, min(size - got, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
