"""The judgement of each connection, in words: what limited each direction, its ACK pattern,
the idle periods' causes, where the capture was taken, the round trips' summary, why decoding
stopped, and the findings. The core calls a Judge once per connection as it retires it, with
the few numbers these rules read (a Judgement, pktflow/_core.pyi), and writes the Words it
returns into the connection's record: Python never sees, nor rebuilds, the record itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pktflow.capture.snaplen import Cut
from pktflow.findings import Finding
from pktflow.pgwire.report import conversation_findings, late_copies_finding, stop_reason
from pktflow.tcp.findings import connection_findings, engine_order
from pktflow.transfer.capture_point import capture_point
from pktflow.transfer.round_trips import conversation_saving, round_trip_findings, summary
from pktflow.transfer.saving import apply as apply_saving
from pktflow.transfer.verdict import (MIN_BYTES, MIN_SEGMENTS, direction_findings,
                                      note_capture_point, pattern, verdict, waiting_for)

if TYPE_CHECKING:
    from pktflow._core import DirectionsWords, DirectionWords, Judgement, Words


class Judge:
    """Judges connections one at a time, keeping what the capture's own findings need: what a
    short snapshot length cut (said once, not per connection) and each connection's findings,
    by connection number."""

    # A transfer smaller than this is too little to judge (transfer.verdict): the core hands
    # over its limits only for transfers at least this large.
    min_bytes = MIN_BYTES
    min_segments = MIN_SEGMENTS

    def __init__(self) -> None:
        self.cut = Cut()
        self.findings_of: list[tuple[int, list[Finding]]] = []

    def __call__(self, j: Judgement) -> Words:
        found = connection_findings(j)
        pg = j["postgres"]
        if pg is not None:
            found += conversation_findings(pg["events"], j["id"])
            found += late_copies_finding(pg["late"], j["id"])
            found += round_trip_findings(j["round_trips"], j["id"], j["query_frames"])
        directions = self._directions(j, found)
        cp = None
        if directions is not None:
            cp = capture_point(j)
            note_capture_point({"client_to_server": directions["client_to_server"]["verdict"],
                                "server_to_client": directions["server_to_client"]["verdict"]},
                               cp["position"])
        found = self.cut.fold(j, found)
        if found:  # most have none: a storm's 80,000 empty lists were 10 MB
            self.findings_of.append((int(j["id"][1:]), found))
        rt = j["round_trips"]
        stopped = pg["decode_stopped"] if pg is not None else None
        return {"directions": directions, "capture_point": cp,
                "round_trips": None if rt is None else summary(rt),
                "round_trips_saving": None if rt is None else conversation_saving(rt),
                "decode_stopped": None if stopped is None else stop_reason(stopped),
                "findings": [f.to_json() for f in found]}

    def _directions(self, j: Judgement, found: list[Finding]) -> DirectionsWords | None:
        """Each direction's words, and the transfer's findings (in the engine's order)."""
        dirs = j["directions"]
        words: dict[str, DirectionWords] = {}
        for key, _, name, _ in engine_order(j):
            t = dirs[key]["transfer"]
            if t is None:
                return None
            v = verdict(t)
            apply_saving(t, v)
            words[key] = {"pattern": pattern(t), "verdict": v,
                          "waiting_for": [waiting_for(p) for p in t["idle"]["periods"]]}
            found += direction_findings(j["id"], name, t)
        return {"client_to_server": words["client_to_server"],
                "server_to_client": words["server_to_client"]}
