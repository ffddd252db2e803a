"""Findings: what went wrong on the wire or in the capture, with the evidence for it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, NamedTuple

if TYPE_CHECKING:
    from pktflow import _core

Severity = Literal["info", "warning", "error"]

# Cap on evidence frames kept per finding: evidence, not a packet list.
MAX_EVIDENCE_FRAMES = 20


class Finding(NamedTuple):
    severity: Severity
    code: str  # stable, kebab-case: "capture-gap", "retransmission", "tls", ...
    message: str  # one sentence, with numbers
    connection: str | None = None  # "c1", ... or None for the capture as a whole
    frames: Sequence[int] = ()  # Wireshark frame numbers, from 1

    def to_json(self) -> _core.Finding:
        return {"severity": self.severity, "code": self.code, "message": self.message,
                "connection": self.connection, "frames": list(self.frames[:MAX_EVIDENCE_FRAMES])}


SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}
