"""A short snapshot length, said once. Captured with -s 200 (common in production), every
segment keeps its headers and a few payload bytes: each direction would report its cut bytes and
each PostgreSQL stream its resyncs, dozens of findings that say one thing. They are folded
into one finding for the capture: what was cut, and what that costs the analysis."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pktflow.findings import Finding

if TYPE_CHECKING:
    from pktflow._core import Judgement

FOLDED = ("truncated-payload", "pgwire-resync")
MAX_FRAMES = 10


class Cut:
    """What the snapshot length cut, summed over the connections as they are reported."""

    def __init__(self) -> None:
        self.bytes = 0
        self.segments = 0
        self.resyncs = 0
        self.connections = 0
        self.frames: list[int] = []

    def fold(self, j: Judgement, found: list[Finding]) -> list[Finding]:
        """A connection's findings without those about its cut bytes, which are counted here
        (a connection with no cut bytes keeps its resyncs: those are capture gaps)."""
        both = j["directions"]
        dirs = [both["client_to_server"], both["server_to_client"]]
        if j["swapped"]:  # in the engine's order, as the frames were always gathered
            dirs.reverse()
        cut = sum(d["truncated_bytes"] for d in dirs)
        if not cut:
            return found
        self.bytes += cut
        self.segments += sum(d["truncated_segments"] for d in dirs)
        self.connections += 1
        for d in dirs:
            room = MAX_FRAMES - len(self.frames)
            self.frames += (d["ev_trunc"] or [])[:max(room, 0)]
        pg = j["postgres"]
        self.resyncs += sum(1 for ev in pg["events"] if ev["kind"] == "resync") if pg else 0
        return [f for f in found if f.code not in FOLDED]

    def finding(self, packets: int) -> Finding:
        """The one finding, given how many packets the capture cut."""
        said = (f"{packets:,} packets were cut by the snapshot length: {self.bytes:,} payload "
                f"bytes of {self.segments:,} segments in {self.connections:,} connection(s) "
                f"were not captured. Sequence numbers still size every transfer and response, "
                f"and queries are matched by the start of their SQL")
        if self.resyncs:
            said += (f"; the PostgreSQL decoder lost message boundaries {self.resyncs:,} times "
                     f"and found them again, so rows and command tags inside the cut bytes are "
                     f"unknown (null)")
        return Finding("warning", "snaplen", said + ". Capture with -s 0 (or at least the "
                       "largest message) to see them.", None, sorted(set(self.frames)))
