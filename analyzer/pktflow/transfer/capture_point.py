"""Where was the capture taken? From which side's ACKs follow data at once, and on what kind of
link (loopback, a NIC with segmentation offloads, an MTU-1500 path). Reads a connection's
Judgement (the handshake's halves, the RTT medians, the segment sizes).

The handshake decides: captured at the client, its ACK follows the SYN-ACK at once while the
SYN-ACK took a round trip; at the server, the SYN-ACK follows the SYN at once. Data ACK delays
are reported as evidence but do not decide: they include delayed ACKs and the server's work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from pktflow._core import CapturePoint, Judgement

SAME_HOST_MS = 0.2  # both round trips under this: one host or adjacent namespaces
RATIO = 4.0  # one side's ACK delay this many times the other's decides the side
# the capture point in words, by position
WHERE: Final = {
    "client": "at the client (it answered the SYN-ACK at once; the server was a round trip "
              "away): times of server data are when the client received it",
    "server": "at the server (it answered the SYN at once; the client was a round trip "
              "away): times of server data are when the server sent it",
    "between": "between the hosts (each side takes a share of the handshake's round trip)",
    "same host": "on the same host as both ends, or adjacent to both: round trips under "
                 f"{SAME_HOST_MS} ms, so the side cannot be told",
    "unknown": "at an unknown point: the handshake is not in the capture (the data's ACK "
               "delays include each side's own delayed ACK and work, so they cannot tell)",
}


def capture_point(j: Judgement) -> CapturePoint:
    dirs = j["directions"]
    c2s, s2c = dirs["client_to_server"], dirs["server_to_client"]
    hs = j["handshake_ms"]
    evidence = []
    for name, d, who in (("client_to_server", c2s, "server"), ("server_to_client", s2c,
                                                                "client")):
        r = d["transfer"]["rtt_median_ms"] if d["transfer"] is not None else None
        if r is not None:
            evidence.append(f"the {who} acknowledged {name.replace('_', ' ')} data after "
                            f"{r:.3f} ms (median; includes its own delayed ACK and work)")
    if hs is None:
        position = "unknown"
    else:
        to_server, to_client = hs["syn_to_synack"], hs["synack_to_ack"]
        evidence.insert(0, f"SYN -> SYN-ACK {to_server:.3f} ms, SYN-ACK -> ACK "
                           f"{to_client:.3f} ms")
        if max(to_server, to_client) < SAME_HOST_MS:
            position = "same host"
        elif to_client * RATIO <= to_server:
            position = "client"
        elif to_server * RATIO <= to_client:
            position = "server"
        else:
            position = "between"
    if j["loopback"]:
        link = "loopback"
        limit = ("loopback (MTU 65,536): segments are the programs' writes, and there is no "
                 "network delay, so timing shows the hosts' own scheduling")
    elif max(c2s["segments_above_mss"], s2c["segments_above_mss"]) or \
            max(c2s["max_segment"], s2c["max_segment"]) > 1500:
        link = "nic with offloads"
        limit = ("segments larger than the MSS were captured: TSO/GSO or GRO merged wire "
                 "packets, so segment counts and sizes are the host's view, not the wire's")
    else:
        link = "mtu 1500"
        limit = "segments are at most one MTU: the capture shows the wire's packets"
    return {"position": position, "link": link,
            "summary": f"captured {WHERE[position]}; {limit}", "evidence": evidence}
