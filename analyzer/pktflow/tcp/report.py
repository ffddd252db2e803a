"""A connection's TCP facts in the report's layout (pktflow.report/1).

The facts are pktflow-core's ConnectionFacts as the binding hands them: a dict, endpoints as
[ip, port] with the address already written as inet_ntop writes it, directions as a list
(index 0: the engine's client->server). Times are raw epoch seconds: rounding and the shift to
the capture's start happen here, so numbers format as they always have.
"""

from __future__ import annotations

from typing import Any

# Direction.to_json's keys, in the report's order.
DIRECTION_KEYS = ("payload_bytes", "data_segments", "max_segment", "mss", "window_scale",
                  "window_scale_known", "window_scale_lower_bound", "retransmitted_segments",
                  "retransmitted_bytes", "out_of_order_segments", "gaps", "missing_bytes",
                  "truncated_bytes", "zero_window_events", "window_updates",
                  "segments_above_mss", "keepalives")


def settle_roles(facts: dict[str, Any], frontend_direction: int | None) -> tuple[bool, str]:
    """Whether the report swaps the engine's client and server, and where its roles come
    from: without a handshake, the wire protocol's frontend (0 or 1, None when unknown)
    corrects the engine's guess by port."""
    if frontend_direction is None or facts["handshake_seen"]:
        return False, facts["role_source"]
    return frontend_direction == 1, "application"


def direction_json(d: dict[str, Any]) -> dict[str, Any]:
    return {key: d[key] for key in DIRECTION_KEYS}


def _endpoint(ep: list[Any]) -> dict[str, Any]:
    return {"ip": ep[0], "port": ep[1]}


def connection_json(facts: dict[str, Any], capture_start: float, swapped: bool,
                    roles_from: str | None = None) -> dict[str, Any]:
    """The connection's TCP part of the report; `swapped`: the report's client is the
    engine's server (see settle_roles, which also gives `roles_from`)."""
    client, server = facts["client"], facts["server"]
    c2s, s2c = (direction_json(d) for d in facts["directions"])
    if swapped:
        client, server = server, client
        c2s, s2c = s2c, c2s
    return {
        "id": f"c{facts['number']}",
        "client": _endpoint(client),
        "server": _endpoint(server),
        "handshake_seen": facts["handshake_seen"],
        "roles_from": roles_from or facts["role_source"],
        "start_s": round(facts["start_ts"] - capture_start, 6),
        "end_s": round(facts["end_ts"] - capture_start, 6),
        "first_frame": facts["first_frame"],
        "last_frame": facts["last_frame"],
        "packets": facts["packets"],
        "closed_by": facts["closed_by"],
        "directions": {"client_to_server": c2s, "server_to_client": s2c},
    }
