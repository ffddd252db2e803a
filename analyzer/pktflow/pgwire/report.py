"""What the PostgreSQL decoder's facts say in words: why decoding stopped, and the findings of
its events. The decoder (pktflow-core, pgwire/) measures; the sentences are written here, once.

Events and stop reasons arrive as the binding hands them: a dict with "kind" for each.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pktflow.findings import Finding
from pktflow.pgwire.messages import BACKEND, FRONTEND

if TYPE_CHECKING:
    from pktflow._core import Event, LateCopies, StopReason

_DIRECT_TLS = 'the client started TLS directly (PostgreSQL 17 sslnegotiation=direct, ALPN "postgresql")'


def stop_reason(r: StopReason | dict[str, Any]) -> str:
    """Why decoding stopped, in words."""
    kind = r["kind"]
    if kind == "length_under_4":
        return f"length {r['length']} is under 4"
    if kind == "length_absurd":
        return f"length {r['length']:,} is absurd"
    if kind == "not_role_type":
        return f"type byte {r['type_byte']:#04x} is not a {r['role']} message"
    if kind == "wrong_length":
        names = FRONTEND if r["role"] == "frontend" else BACKEND
        name = names.get(r["type_byte"], f"type {r['type_byte']:#04x}")
        always = (f"always {r['min']}" if r["min"] == r["max"]
                  else f"between {r['min']} and {r['max']}")
        return (f"a {name} ('{chr(r['type_byte'])}') of length {r['length']:,}, which is "
                f"{always}")
    if kind == "not_startup":
        return "the first message is not a PostgreSQL startup, SSL or cancel request"
    if kind == "tls_without_alpn":
        offered = ", ".join(r["offered"]) if r["offered"] else "none"  # [""]: empty, not none
        return (f'the first message is a TLS ClientHello without ALPN "postgresql" (offered: '
                f"{offered}), which PostgreSQL's direct TLS requires")
    if kind == "no_framing":
        return f"no PostgreSQL message framing in {r['lost']:,} bytes"
    if kind == "nothing_captured":
        return (f"none of its {r['bytes']:,} payload bytes was captured (a snapshot length that "
                f"keeps only headers), so what it carries cannot be known")
    if kind == "other_protocol":
        return f"where a segment starts, {r['protocol']}: {r['seen']}"
    if kind == "misfit":
        return (f"a {r['role']} message of type {_type(r['type_byte'])} and length "
                f"{r['length']:,} does not have the shape that type has in PostgreSQL")
    if kind == "unproven":
        said = (f"the capture does not show the connection's start, and what it shows does not "
                f"prove PostgreSQL: {r['frontend_messages']:,} frontend and "
                f"{r['backend_messages']:,} backend messages framed as PostgreSQL, ")
        if not r["exchanges"]:
            said += "but no request was answered by its kind of response"
        else:
            said += (f"{r['exchanges']} request(s) answered by their kind of response, but no "
                     f"ReadyForQuery closed the cycle")
        if r["misfits"]:
            said += f" ({r['misfits']} answered by a kind of message they never draw)"
        return said
    raise ValueError(f"unknown stop reason {kind!r}")


def _type(byte: int) -> str:
    """A type byte as the documentation writes it: 'Q', or its code when not printable."""
    return f"'{chr(byte)}'" if 0x21 <= byte < 0x7f else f"{byte:#04x}"


def conversation_findings(events: list[Event], conn_id: str) -> list[Finding]:
    """The decoder's events as findings, in the order they happened; a stream's resyncs are
    one finding, where the first happened (a short snaplen cuts a message in every segment)."""
    resyncs: dict[str, list[Any]] = {}
    for ev in events:
        if ev["kind"] == "resync":
            resyncs.setdefault(ev["role"], []).append(ev)
    out = []
    for ev in events:
        if ev["kind"] != "resync":
            out.append(_finding(ev, conn_id))
        elif ev is resyncs[ev["role"]][0]:
            out.append(_resyncs(resyncs[ev["role"]], conn_id))
    return out


def _ms(seconds: float) -> str:
    """Milliseconds to a tenth, or to the microsecond under one (a quick retransmission)."""
    return f"{seconds * 1e3:,.1f} ms" if seconds >= 1e-3 else f"{seconds * 1e3:.3f} ms"


def late_copies_finding(late: LateCopies | None, conn_id: str) -> list[Finding]:
    """Requests and responses the capture saw whose receiver took them only from a later copy:
    the query times listed are the capture's, the JSON's `delivered` has them as received."""
    if late is None:
        return []
    parts = [f"{n:,} {what}{'s' if n != 1 else ''} reached the {end}"
             for n, what, end in ((late["responses"], "response", "client"),
                                  (late["requests"], "request", "server")) if n]
    longest = late["longest"]
    which = f"{conn_id}#{longest['query_index']}"
    return [Finding(
        "info", "late-copy",
        f"{' and '.join(parts)} only with a retransmission, the copy the capture saw being lost "
        f"past the capture point: {_ms(late['added_s'])} later than the capture shows in all, "
        f"at most {_ms(longest['seconds'])} (query {which}: frame "
        f"{longest['seen_frame']} seen, frame {longest['taken_frame']} taken); the query times "
        f"listed are as captured, the JSON's `delivered` has them as received",
        conn_id, late["frames"])]


def _resyncs(evs: list[Any], conn_id: str) -> Finding:
    first = evs[0]
    if len(evs) == 1:
        what = (f"a capture gap of {first['length']:,} bytes at offset {first['offset']:,} cut "
                f"a message")
    else:
        what = (f"{len(evs):,} capture gaps ({sum(e['length'] for e in evs):,} bytes, the "
                f"first at offset {first['offset']:,}) cut messages")
    cost = ("responses count the missing bytes (their rows and tags there are unknown)"
            if first["role"] == "backend" else "requests inside the gaps are not listed")
    return Finding(
        "warning", "pgwire-resync",
        f"{first['role']} stream: {what}; decoding resumes at the next provable message "
        f"boundary, and {cost}", conn_id, [e["frame"] for e in evs[:10]])


def _finding(ev: Any, conn_id: str) -> Finding:
    kind = ev["kind"]
    if kind == "mid_stream":
        p = ev["proof"]
        why = (f"the client's {p['request']} (frame {p['request_frame']}) was answered by the "
               f"server's {p['response']} (frame {p['response_frame']})")
        if p["closed_frame"] is not None:
            why += f" and a ReadyForQuery closed that cycle (frame {p['closed_frame']})"
        if p["exchanges"] > 1:
            why += f"; {p['exchanges']} requests were answered by their kind of response"
        begun = ("the snapshot length cut the connection's first message to fewer than 8 bytes"
                 if ev["start_seen"] else "the connection began before the capture")
        frames = [ev["frame"], p["request_frame"], p["response_frame"]]
        frames += [p["closed_frame"]] if p["closed_frame"] is not None else []
        return Finding(
            "info", "pgwire-mid-stream",
            f"{begun}: {ev['role']} decoding starts at stream offset {ev['offset']:,} (frame "
            f"{ev['frame']}), and it is taken as PostgreSQL because {why}", conn_id,
            sorted(set(frames)))
    if kind == "startup_cut":
        return Finding(
            "warning", "startup-cut",
            f"the snapshot length cut the {ev['message']} after {ev['captured']:,} of its "
            f"{ev['length']:,} bytes: it is recognised by its first 8, the parameters past the "
            f"cut are unknown (null), and decoding goes on from the message after it", conn_id,
            [ev["frame"]])
    if kind == "encrypted":
        how = _DIRECT_TLS if ev["request"] is None else f"the server accepted {ev['request']}"
        return Finding(
            "info", "encrypted",
            f"{how}: the rest of the connection is {ev['encryption'].upper()}-encrypted, so only "
            f"its TCP transfer is analysed", conn_id, [ev["frame"]])
    if kind == "not_postgresql":
        frame = ev["frame"]
        if ev["reason"]["kind"] == "other_protocol":
            return Finding(
                "info", "not-postgresql",
                f"{ev['role']} stream at offset {ev['offset']:,}: {stop_reason(ev['reason'])}; "
                f"the connection is {ev['reason']['protocol']}, not PostgreSQL, so only its TCP "
                f"transfer is analysed", conn_id, [frame] if frame else [])
        return Finding(
            "warning", "not-postgresql",
            f"{ev['role']} stream at offset {ev['offset']:,}: {stop_reason(ev['reason'])}; the "
            f"connection is not PostgreSQL as far as the capture shows, so only its TCP transfer "
            f"is analysed", conn_id, [frame] if frame else [])
    if kind == "malformed":
        return Finding(
            "error", "pgwire-malformed",
            f"{ev['role']} stream at offset {ev['offset']:,}: {stop_reason(ev['reason'])}; this "
            f"direction is not decoded past that point", conn_id, [ev["frame"]])
    if kind == "server_error":
        return Finding(
            "warning", "server-error",
            f"server error {_text(ev['code'], '')}: {_text(ev['message'], '')}", conn_id,
            [ev["frame"]])
    if kind == "query_error":
        sql = " ".join(ev["sql"].split())
        return Finding(
            "info", "query-error",
            f"a query failed with {_text(ev['code'], '?')} ({_text(ev['message'], '')}): "
            f"{sql[:60]}{'…' if len(sql) > 60 else ''}", conn_id,
            [ev["sent_frame"], ev["frame"]])
    if kind == "query_errors_total":
        return Finding(
            "info", "query-error",
            f"{ev['count']:,} queries failed in all (the first {ev['listed']} are listed)",
            conn_id, [])
    if kind == "queries_capped":
        listed = ev["listed"]
        return Finding(
            "info", "queries-capped",
            f"more than {listed:,} queries on this connection: the first {listed:,} are listed, "
            f"the message counts cover all of them (from frame {ev['frame']})", conn_id,
            [ev["frame"]])
    raise ValueError(f"unknown pgwire event {kind!r}")


def _text(value: str | None, absent: str) -> str:
    return absent if value is None else value
