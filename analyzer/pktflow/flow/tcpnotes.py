"""Teaching mode's sentences on TCP as it happened in the drawing: how Linux acknowledged and
whether the sender waited for it, writes against segments, a window closing and reopening,
segments reordered or lost and what reported it, slow start round by round, TLS records.
Each is said only where the frames show it, with the frames and numbers that do.

The core measures what they rest on over every row of the drawing (drawing/teach.rs), at
the thresholds set here; the rules and the words are these."""

from __future__ import annotations

from typing import Any

from pktflow.flow.ladder import Ladder
from pktflow.flow.tcpsteps import TAG16, tls13
from pktflow.report.connections import by_id

MIN_SEGMENTS = 4  # segments of one size before it is "the" size of a direction
MAX_WAYS = 4  # directions a note speaks of, the busiest (a storm has thousands)
MAX_LOSSES = 500  # retransmissions read for the losses' note
TLS_OVERHEAD = 5 + 1 + 16  # TLS 1.3 record: header, inner content type, AEAD tag
FRAMES_LISTED = 4  # frames a note names of a kind
# An ACK held while the reader lags acknowledges this many median segments or more.
HELD_SEGMENTS = 3
# A segment coalesced after the window reopened is this many of the direction's size or more.
COALESCED = 2
# An ACK the delayed-ACK timer sent comes this long after the data (Linux's timer is 40 ms at
# least, 200 ms at most; a little below 40 for the capture point's clock).
DELAYED_S = (0.038, 0.25)

Way = dict[str, Any]  # the core's facts of a direction (drawing/teach.rs Way)


def _listed(first: list[int], total: int, most: int = FRAMES_LISTED) -> str:
    return ", ".join(str(f) for f in first[:most]) + (" …" if total > most else "")


def _limits(report: dict[str, Any] | None, ways: list[Way]
            ) -> dict[tuple[int, int, int], dict[str, Any]]:
    """What analyze said limited each of these directions: its limits, verdict and RTT."""
    out: dict[tuple[int, int, int], dict[str, Any]] = {}
    if report is None or not ways:
        return out
    for c in by_id(report["connections"], {f"c{w['conn']}" for w in ways}):
        for w in ways:
            if f"c{w['conn']}" == c["id"]:
                d = c["directions"]["client_to_server" if w["to_server"]
                                    else "server_to_client"]
                out[_key(w)] = {"limits": d.get("limits") or {},
                                "verdict": d.get("verdict") or {},
                                "rtt": (d.get("rtt_ms") or {}).get("median")}
    return out


def _key(w: Way) -> tuple[int, int, int]:
    return (w["conn"], w["src"], w["dst"])


RULE = ("ACK n B  how Linux acknowledges: at once when more than one segment's worth has "
        "arrived unacknowledged (a segment's worth is its estimate of the sender's segment "
        "size, rcv_mss, measured on the segments received and at most its own MSS) and its "
        "receive window can move forward, the application reading; at once for every segment "
        "in its quick-ACK mode (a connection's start, after an idle time); otherwise the ACK "
        "waits for the application's read or for the delayed-ACK timer (40 ms at least). RFC "
        "1122 (4.2.3.2) says a receiver SHOULD acknowledge at least every second full-sized "
        "segment.")


def _ack_notes(f: dict[str, Any], limits: dict[tuple[int, int, int], dict[str, Any]]
               ) -> list[str]:
    out: list[str] = []
    if f["acks"]:
        out.append(RULE)
    for w in f["ways"]:
        common = w["common"]
        if w["acks"] < MIN_SEGMENTS or not common:
            continue
        if w["pairs"] >= w["acks"] / 3:
            out.append(f"ACK {2 * common:,} B  here one ACK per two {common:,}-byte segments "
                       f"({w['pairs']:,} of {w['acks']:,} ACKs; frames "
                       f"{_listed(w['pair_frames'], w['pairs'])})")
            got = limits.get(_key(w), {})
            seconds = got.get("limits", {}).get("seconds") or {}
            transfer = got.get("limits", {}).get("transfer_s") or 0.0
            if transfer and got.get("verdict", {}).get("limit") not in (None, "none"):
                waited = seconds.get("latency", 0.0) / transfer
                if not waited:
                    out[-1] += (": the sender never waited for these ACKs (analyze: round trips "
                                f"held it 0 % of the {transfer * 1000:,.1f} ms transfer), so "
                                f"this is ACK pacing, not a round trip the sender waited for.")
                else:
                    out[-1] += (f": round trips held the sender {waited:.0%} of the "
                                f"{transfer * 1000:,.1f} ms transfer (analyze; RTT median "
                                f"{got.get('rtt') or 0:,.3f} ms)"
                                + (": it waited for these ACKs." if waited >= 0.5 else
                                   "; the rest of the time it did not wait for these ACKs."))
                continue
            out[-1] += "."
    return out + _held(f)


def _held(f: dict[str, Any]) -> list[str]:
    """ACKs of many segments at once while the receiver's window shrank: its application had
    not read, so the kernel held the ACK."""
    out = []
    for w in f["ways"]:
        h = w["held"]
        if h is None:
            continue
        raw = " raw" if h["raw"] else ""
        said = (f"ACK {h['bytes']:,} B  (frame {h['frame']}) one ACK for {h['segments']} "
                f"segments, with the window down from {h['win_before']:,} to {h['win']:,}{raw}: "
                f"the receiving application had read less than arrived, so the window it could "
                f"offer was smaller than the last one, and Linux did not acknowledge every "
                f"second segment: the ACK waited")
        if h["update"] is not None:
            frame, ms = h["update"]
            said += (f"; the window update (frame {frame}, {ms:,.3f} ms later) shows it reading "
                     f"again")
        if w["copy_data"] and w["to_server"]:
            said += ("; in a COPY FROM STDIN the server reads the CopyData only as fast as it "
                     "writes their rows into the table")
        out.append(said + ".")
    return out


def _writes(f: dict[str, Any]) -> list[str]:
    """Segments are not writes: Linux ends each write with PSH; a write larger than the MSS
    leaves as full segments and a tail."""
    for w in f["ways"]:
        if w["write"] is None:
            continue
        shape, n = w["write"]
        full, tail = shape[0], shape[-1]
        if n < 3 or len(shape) < 2 or any(s != full for s in shape[:-1]) or tail >= full:
            continue
        return [f"{tail:,} B  segments are not writes: here a {sum(shape):,}-byte write leaves "
                f"as {len(shape) - 1} × {full:,} + {tail:,} bytes ({n:,} times), the last "
                f"with PSH (Linux marks the end of each write): the {tail:,}-byte segment is a "
                f"write's tail."]
    return []


def _coalesced(f: dict[str, Any]) -> list[str]:
    """A segment much larger than the direction's habit right after the receiver's window
    reopened: the writes queued while it was closed left together."""
    for w in f["ways"]:
        c = w["coalesced"]
        if c is not None:
            return [f"{c['bytes']:,} B  (frame {c['frame']}) one segment, the first after the "
                    f"window reopened (frame {c['opened']}), against {w['common']:,} B, its "
                    f"most frequent size: what the sender wrote while the window was closed "
                    f"waited in its buffer and left together."]
    return []


def _windows(f: dict[str, Any], lanes: list[str]) -> list[str]:
    out = []
    if f["zero_windows"]:
        said = ("zero window  the receiver's buffer is full: the sender must stop until a "
                "window update (frames " + _listed(f["zero_frames"], f["zero_windows"]) + ")")
        if any(lanes[a].startswith("pooler") and lanes[b].startswith("server")
               for a, b in f["zero_lanes"]):
            said += ("; here the pooler's window to the server closes: it reads the server "
                     "only as fast as it drains to the client")
        out.append(said + ".")
    if f["window_updates"]:
        out.append("window update  an ACK with nothing new acknowledged and a larger window: "
                   "the application read data and freed buffer space.")
    return out


def _holes(f: dict[str, Any]) -> list[str]:
    """A segment beyond a hole, and the one that filled it: reordered (sent once) or lost."""
    h = f["hole"]
    if h is None:
        return []
    said = (f"[after a hole]  frame {h['frame']} came before the bytes ahead of it, which came "
            f"{h['us']:,.0f} µs later in frame {h['fill_frame']} ([out of order]), sent once, "
            f"not retransmitted: the segments were reordered, nothing was lost")
    if h["sack"] is not None:
        said += (f"; the receiver saw them in this order too: its ACK (frame {h['sack']}) "
                 f"reports the hole with a SACK block")
    return [said + "."]


def _losses(f: dict[str, Any]) -> list[str]:
    """Each retransmission, the original the capture saw, and the duplicate ACKs with SACK
    blocks that reported the loss (the first MAX_LOSSES read)."""
    lost = f["losses"]
    counts, delays, ex = lost["counts"], lost["delays"], lost["example"]
    if not lost["resent"] or not counts:
        return []
    said = f"[retransmission]  {lost['resent']:,} segments sent again"
    if ex is not None:
        said += (f"; frame {ex['frame']} resends the bytes of frame {ex['original']}, which the "
                 f"capture saw go by: they were lost past the capture point. The receiver's "
                 f"{ex['dups']} ACKs after them (frames {_listed(ex['dup_frames'], ex['dups'])})"
                 f" each acknowledged only up to these bytes, with a SACK block for what came "
                 f"after; the sender resent them {ex['ms']:,.3f} ms after the first")
    reported = [c for c in counts if c]
    if len(counts) > 1 and delays:
        said += (f". Of the {len(counts):,} losses, {len(reported):,} were reported by "
                 f"{min(reported)}-{max(reported)} duplicate ACKs with SACK each, and resent "
                 f"{min(delays) * 1000:,.3f}-{max(delays) * 1000:,.3f} ms after the first")
        if len(reported) < len(counts):
            said += (f"; {len(counts) - len(reported):,} were resent with no duplicate ACK "
                     f"before them")
    return [said + "."]


def _slow_start(ladder: Ladder, f: dict[str, Any],
                limits: dict[tuple[int, int, int], dict[str, Any]]) -> list[str]:
    """Rounds of segments a round trip apart: slow start's growth, as it happened."""
    for w in f["ways"]:
        rtt = limits.get(_key(w), {}).get("rtt") or 0.0
        if rtt < 1.0 or w["segments"] < 20:
            continue
        rounds = ladder.drawing.rounds(w["conn"], w["src"], w["dst"], rtt / 2)
        every = [n for n, _ in rounds]

        def run(i: int) -> int:  # rounds from i on that double the one before
            k = i + 1
            while k < len(every) and abs(every[k] - 2 * every[k - 1]) <= every[k - 1] // 10:
                k += 1
            return k - i

        start = max(range(len(every)), key=run)
        doubling = run(start)
        if doubling < 3:
            return []
        rounds, sizes = rounds[start:], every[start:]
        return [f"slow start  round by round, {', '.join(str(n) for n in sizes[:8])}"
                f"{' …' if len(sizes) > 8 else ''} segments, each round a round trip after the "
                f"one before (RTT median {rtt:,.3f} ms; rounds begin at frames "
                f"{_listed([fr for _, fr in rounds], len(rounds), 6)}): the first {doubling} "
                f"double, as the congestion window grows by a segment for each segment "
                f"acknowledged."]
    return []


def _delayed(f: dict[str, Any]) -> list[str]:
    """An ACK alone, 40 ms or more after the data it acknowledges: the delayed-ACK timer."""
    d = f["delayed"]
    if d is None:
        return []
    return [f"ACK {d['bytes']:,} B  (frame {d['frame']}) {d['ms']:,.1f} ms after the data it "
            f"acknowledges (frame {d['data_frame']}): the receiver had nothing to send with "
            f"it, and Linux's delayed-ACK timer (40 ms at least) ran out."]


def _tls_records(f: dict[str, Any], tls: dict[str, list[str] | None]) -> list[str]:
    """Consecutive segments each completing one TLS 1.3 record of one size: the records'
    size, and what of it is the plaintext (`tls`: per connection, what its ServerHello
    chose when it chose TLS 1.3)."""
    for w in f["ways"]:
        chose = tls.get(f"c{w['conn']}")
        if chose is None or len(chose) < 2 or chose[1] not in TAG16:
            continue
        size, runs = w["tls_size"], w["tls_runs"]
        if not size or not runs:
            continue
        plain = size - TLS_OVERHEAD
        said = (f"{size:,} B  one TLS record per segment: {plain:,} bytes of plaintext plus "
                f"{TLS_OVERHEAD} (a 5-byte record header, the 1-byte inner content type and "
                f"{chose[1]}'s 16-byte tag)")
        if plain == 8192:
            said += ": one record per write of PostgreSQL's 8,192-byte send buffer"
        return [said + "."]
    return []


def tcp_notes(ladder: Ladder, report: dict[str, Any] | None,
              tls: dict[str, list[str] | None] | None = None) -> list[str]:
    """The notes on TCP (`tls`: per connection, the TLS 1.3 its ServerHello chose)."""
    f = ladder.drawing.tcp_facts(MAX_WAYS, MIN_SEGMENTS, MAX_LOSSES, HELD_SEGMENTS,
                                 COALESCED, DELAYED_S, FRAMES_LISTED)
    limits = _limits(report, f["ways"])
    out = _ack_notes(f, limits)
    if report is not None and any(r.get("forward_write") == 4096 and r.get("server_write")
                                  == 8192 for r in report.get("relays") or []) and \
            any(name.startswith("pooler") for name in ladder.lanes):
        out.append("~4 KiB segments from the pooler  the server writes 8,192 bytes at a time "
                   "and the pooler forwards them in 4,096-byte writes: PgBouncer reads at most "
                   "pkt_buf bytes (4,096 by default) before it writes to the other side.")
    out += _writes(f) + _coalesced(f) + _windows(f, ladder.lanes)
    if f["dupacks"]:
        out.append("dup ACK  the same acknowledgement again while data is outstanding: the "
                   "receiver got bytes beyond a hole.")
    out += _holes(f) + _losses(f) + _slow_start(ladder, f, limits) + _delayed(f) + \
        _tls_records(f, tls or {})
    if any("raw" in name for name in ladder.lanes) or f["raw_windows"]:
        out.append("win … raw  the connection began before the capture, so the window-scale "
                   "factor (sent only in the SYNs) is unknown: the raw 16-bit value is shown.")
    return out
