"""A connection's transfer facts (pktflow_core::transfer::TransferFacts, as a dict) into the
report: each direction's JSON with the handshake's timings, and the findings."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pktflow.findings import Finding
from pktflow.transfer.verdict import direction_findings, direction_json


def transfer_result(facts: dict[str, Any], d: int, capture_start: float = 0.0) -> dict[str, Any]:
    """JSON for direction d's data (the engine's d: 0 client->server); times relative to
    `capture_start` (the capture's first)."""
    out = direction_json(facts["directions"][d], capture_start)
    if d != 0:
        return out
    # SYN -> SYN-ACK when the first data came: the handshake's round trip
    synack_after = facts["handshake_syn_to_synack_s"]
    if synack_after is not None:
        out["handshake_rtt_ms"] = round(synack_after * 1e3, 3)
    syn, synack, ack = facts["syn_ts"]
    if syn is not None and synack is not None and ack is not None:
        # SYN -> SYN-ACK is the round trip seen from the client's side of the capture
        # point, SYN-ACK -> ACK the one on the server's side: where the capture sits.
        out["handshake_ms"] = {"syn_to_synack": round((synack - syn) * 1e3, 3),
                               "synack_to_ack": round((ack - synack) * 1e3, 3)}
    return out


def transfer_findings(facts: dict[str, Any], conn_id: str,
                      name: Callable[[int], str]) -> list[Finding]:
    """Findings per direction, named once the roles are settled (name(d): 'a->b')."""
    out: list[Finding] = []
    for d, f in enumerate(facts["directions"]):
        out += direction_findings(conn_id, name(d), f)
    return out
