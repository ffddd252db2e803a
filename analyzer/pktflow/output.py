"""The file a command writes its result to (-o): checked before the analysis, so that a long
run does not fail at its end, and written with any failure said as the user's path, in one
line (exit code 9), never as a bug."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from pktflow.errors import OutputError


def _why(path: Path, exc: OSError) -> str:
    parent = path.parent
    if exc.errno == errno.ENOENT:
        if parent.is_dir():  # /proc, /sys: a file system that makes no new files
            return f"cannot be written: {parent} does not allow new files in it"
        return f"cannot be written: the directory {parent} does not exist"
    if exc.errno == errno.ENOTDIR:
        return f"cannot be written: {parent} is not a directory"
    if exc.errno == errno.EISDIR:
        return "cannot be written: it is a directory (name a file in it)"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "cannot be written: permission denied"
    if exc.errno == errno.EROFS:
        return "cannot be written: the file system is read-only"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "could not be written whole: no space left on the device"
    return f"cannot be written: {exc.strerror or exc}"


def error(path: Path, exc: OSError) -> OutputError:
    return OutputError(_why(path, exc), file=str(path))


def check(path: Path) -> None:
    """Open `path` for writing as the command will, without truncating a file already there;
    a file made for the check is removed again."""
    existed = os.path.lexists(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | (0 if existed else os.O_EXCL), 0o666)
    except FileExistsError:  # made by someone else since: writable or not, the write says
        return
    except OSError as exc:
        raise error(path, exc) from None
    os.close(fd)
    if not existed:
        os.unlink(path)


def write_text(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError as exc:
        raise error(path, exc) from None


def write_bytes(path: Path, data: bytes) -> None:
    try:
        path.write_bytes(data)
    except OSError as exc:
        raise error(path, exc) from None


def check_dir(path: Path) -> None:
    """A folder a command writes files into (--format parquet -o DIR): made if missing, and a
    file made and removed in it, before the analysis."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # a file of that name
        raise OutputError("cannot be written: it is a file, not a folder", file=str(path)) \
            from None
    except OSError as exc:
        raise OutputError(_why(path, exc).replace("cannot be written", "cannot be made"),
                          file=str(path)) from None
    probe = path / f".pktflow-check-{os.getpid()}"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        os.unlink(probe)
    except OSError as exc:
        raise OutputError(_why(probe, exc), file=str(path)) from None
