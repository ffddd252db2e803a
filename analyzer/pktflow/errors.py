"""Exit codes and the errors that reach the user.

Every error the CLI prints is one line naming the file, where in it (frame or byte offset) and
why. Each class of bad input has its own exit code so scripts can tell them apart.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FINDINGS = 1  # --strict and a finding of severity "error"
    USAGE = 2  # bad command line (argparse's own code)
    NO_FILE = 3  # missing, unreadable, or a directory
    NOT_A_CAPTURE = 4  # no pcap/pcapng magic, empty file
    UNSUPPORTED = 5  # a capture, but nothing in it we can read (unknown link type only)
    DAMAGED = 6  # a capture cut short or corrupt part-way: what precedes was analysed
    LAB = 7  # the lab could not record (not root, program missing)
    NO_SPACE = 8  # the report's temporary files could not be written (TMPDIR full, read-only)
    OUTPUT = 9  # the output file (-o) cannot be written: no such directory, a directory, denied
    INTERNAL = 70  # a bug in pktflow: reported without a traceback unless --debug


class PktflowError(Exception):
    """An error with a user-facing one-line message and an exit code."""

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(self, reason: str, *, file: str | None = None, frame: int | None = None,
                 offset: int | None = None, hint: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.file = file
        self.frame = frame
        self.offset = offset
        self.hint = hint

    def one_line(self) -> str:
        where = []
        if self.frame is not None:
            where.append(f"frame {self.frame}")
        if self.offset is not None:
            where.append(f"byte offset {self.offset}")
        # the CLI prefixes "pktflow: "; without a file the reason stands alone
        head = self.file or ""
        if where:
            head += f" ({', '.join(where)})" if head else ", ".join(where)
        line = f"{head}: {self.reason}" if head else self.reason
        if self.hint:
            line += f"; {self.hint}"
        return line


class NoFileError(PktflowError):
    exit_code = ExitCode.NO_FILE


class NotACaptureError(PktflowError):
    exit_code = ExitCode.NOT_A_CAPTURE


class UnsupportedCaptureError(PktflowError):
    exit_code = ExitCode.UNSUPPORTED


class DamagedCaptureError(PktflowError):
    """The capture is cut or corrupt at `offset`; packets before it were delivered."""

    exit_code = ExitCode.DAMAGED


class LabError(PktflowError):
    exit_code = ExitCode.LAB


class NoSpaceError(PktflowError):
    """The report's temporary file (the core's spool of connection records) could not be
    written."""

    exit_code = ExitCode.NO_SPACE


class OutputError(PktflowError):
    """The file a command was told to write (-o) cannot be written: the user's path, not a
    bug."""

    exit_code = ExitCode.OUTPUT


class UsageError(PktflowError):
    """The command line asks for something the capture does not have (a connection, a query)."""

    exit_code = ExitCode.USAGE
