"""Teaching mode's sentences on TCP as it happened in the drawing: how Linux acknowledged and
whether the sender waited for it, writes against segments, a window closing and reopening,
segments reordered or lost and what reported it, slow start round by round, TLS records.
Each is said only where the frames show it, with the frames and numbers that do."""

from __future__ import annotations

from collections import Counter
from typing import Any

from pktflow.flow.ladder import Ladder, Row
from pktflow.flow.tcpsteps import TAG16, tls13
from pktflow.report.connections import by_id

Way = tuple[str, int, int]  # (connection, sender lane, receiver lane)
MIN_SEGMENTS = 4  # segments of one size before it is "the" size of a direction
MAX_WAYS = 4  # directions a note speaks of, the busiest (a storm has thousands)
MAX_LOSSES = 500  # retransmissions read for the losses' note
TLS_OVERHEAD = 5 + 1 + 16  # TLS 1.3 record: header, inner content type, AEAD tag


def _frames(frames: list[int], most: int = 4) -> str:
    return ", ".join(str(f) for f in frames[:most]) + (" …" if len(frames) > most else "")


class Drawing:
    """The rows indexed once: per connection, per data direction (its segments, and the ACKs
    of new data coming back), so that a note costs a pass, not a pass per direction (a storm
    draws 40,000 directions)."""

    def __init__(self, ladder: Ladder) -> None:
        self.ladder = ladder
        self.by_conn: dict[str, list[Row]] = {}
        self.ways: dict[Way, list[Row]] = {}
        self.acks: dict[Way, list[Row]] = {}
        for r in ladder.rows:
            self.by_conn.setdefault(r.conn, []).append(r)
            if r.kind == "data" and "retransmission" not in r.marks:
                self.ways.setdefault((r.conn, r.src, r.dst), []).append(r)
            elif r.kind == "ack" and r.nbytes:
                self.acks.setdefault((r.conn, r.dst, r.src), []).append(r)
        self.top = sorted(self.ways.items(), key=lambda kv: -len(kv[1]))[:MAX_WAYS]

    def busiest(self) -> list[tuple[Way, list[Row]]]:
        """The directions that carried the most segments: the ones a note speaks of."""
        return self.top


def _common(segments: list[Row]) -> int:
    """The direction's habitual segment size (0 when no size repeats enough)."""
    size, n = Counter(r.nbytes for r in segments).most_common(1)[0] if segments else (0, 0)
    return size if n >= MIN_SEGMENTS else 0


def _limits(report: dict[str, Any] | None, ways: list[tuple[Way, list[Row]]]
            ) -> dict[Way, dict[str, Any]]:
    """What analyze said limited each of these directions: its limits, verdict and RTT."""
    out: dict[Way, dict[str, Any]] = {}
    if report is None or not ways:
        return out
    for c in by_id(report["connections"], {w[0] for w, _ in ways}):
        for way, segments in ways:
            if way[0] == c["id"]:
                d = c["directions"]["client_to_server" if segments[0].to_server
                                    else "server_to_client"]
                out[way] = {"limits": d.get("limits") or {}, "verdict": d.get("verdict") or {},
                            "rtt": (d.get("rtt_ms") or {}).get("median")}
    return out


RULE = ("ACK n B  how Linux acknowledges: at once when more than one segment's worth has "
        "arrived unacknowledged (a segment's worth is its estimate of the sender's segment "
        "size, rcv_mss, measured on the segments received and at most its own MSS) and its "
        "receive window can move forward, the application reading; at once for every segment "
        "in its quick-ACK mode (a connection's start, after an idle time); otherwise the ACK "
        "waits for the application's read or for the delayed-ACK timer (40 ms at least). RFC "
        "1122 (4.2.3.2) says a receiver SHOULD acknowledge at least every second full-sized "
        "segment.")


def _ack_notes(d: Drawing, report: dict[str, Any] | None) -> list[str]:
    out: list[str] = []
    if d.acks:
        out.append(RULE)
    busiest = d.busiest()
    limits = _limits(report, busiest)
    for way, segments in busiest:
        acks = d.acks.get(way, [])
        common = _common(segments)
        if len(acks) < MIN_SEGMENTS or not common:
            continue
        pairs = [a for a in acks if a.nbytes == 2 * common]
        if len(pairs) >= len(acks) / 3:
            out.append(f"ACK {2 * common:,} B  here one ACK per two {common:,}-byte segments "
                       f"({len(pairs):,} of {len(acks):,} ACKs; frames "
                       f"{_frames([a.frame for a in pairs])})")
            got = limits.get(way, {})
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
    return out + _held(d)


def _held(d: Drawing) -> list[str]:
    """ACKs of many segments at once while the receiver's window shrank: its application had
    not read, so the kernel held the ACK."""
    out = []
    for way, segments in d.busiest():
        conn, src, dst = way
        rows = d.by_conn[conn]
        sizes = sorted(r.nbytes for r in segments)
        median = sizes[len(sizes) // 2] if sizes else 0
        win = None
        for i, r in enumerate(rows):
            if r.src != dst or r.kind not in ("ack", "window"):
                continue
            if r.kind == "ack" and r.nbytes >= 3 * median > 0 and win is not None \
                    and r.win < win:
                n = sum(1 for s in segments if s.frame < r.frame
                        and r.ack - r.nbytes <= s.seq and s.seq + s.nbytes <= r.ack)
                raw = " raw" if r.win_raw else ""
                said = (f"ACK {r.nbytes:,} B  (frame {r.frame}) one ACK for {n} segments, with "
                        f"the window down from {win:,} to {r.win:,}{raw}: the receiving "
                        f"application had read less than arrived, so the window it could offer "
                        f"was smaller than the last one, and Linux did not acknowledge every "
                        f"second segment: the ACK waited")
                update = next((u for u in rows[i + 1:] if u.src == dst
                               and u.kind == "window" and u.win > r.win), None)
                if update is not None:
                    said += (f"; the window update (frame {update.frame}, "
                             f"{(update.t - r.t) * 1000:,.3f} ms later) shows it reading again")
                if any(n == "CopyData" for s in segments for n, _ in s.msgs) and \
                        segments[0].to_server:
                    said += ("; in a COPY FROM STDIN the server reads the CopyData only as "
                             "fast as it writes their rows into the table")
                out.append(said + ".")
                break
            win = r.win
    return out


def _writes(d: Drawing) -> list[str]:
    """Segments are not writes: Linux ends each write with PSH; a write larger than the MSS
    leaves as full segments and a tail."""
    out = []
    for _, segments in d.busiest():
        shapes: Counter[tuple[int, ...]] = Counter()
        run: list[int] = []
        for r in segments:
            run.append(r.nbytes)
            if r.push:
                shapes[tuple(run)] += 1
                run = []
        if not shapes:
            continue
        shape, n = shapes.most_common(1)[0]
        full, tail = shape[0], shape[-1]
        if n < 3 or len(shape) < 2 or any(s != full for s in shape[:-1]) or tail >= full:
            continue
        out.append(f"{tail:,} B  segments are not writes: here a {sum(shape):,}-byte write "
                   f"leaves as {len(shape) - 1} × {full:,} + {tail:,} bytes ({n:,} times), the "
                   f"last with PSH (Linux marks the end of each write): the {tail:,}-byte "
                   f"segment is a write's tail.")
        break
    return out


def _coalesced(d: Drawing) -> list[str]:
    """A segment much larger than the direction's habit right after the receiver's window
    reopened: the writes queued while it was closed left together."""
    for (conn, src, dst), segments in d.busiest():
        common = _common(segments)
        if not common:
            continue
        zero, opened = False, None
        for r in d.by_conn[conn]:
            if r.src == dst and r.kind in ("ack", "window", "dupack"):
                if r.win == 0:
                    zero, opened = True, None
                elif zero:
                    zero, opened = False, r  # the first window above zero
            elif r.src == src and r.kind == "data":
                if opened is not None and r.nbytes >= 2 * common:
                    return [f"{r.nbytes:,} B  (frame {r.frame}) one segment, the first after "
                            f"the window reopened (frame {opened.frame}), against {common:,} B, "
                            f"its most frequent size: what the sender wrote while the window "
                            f"was closed waited in its buffer and left together."]
                opened = None
    return []


def _windows(ladder: Ladder) -> list[str]:
    out = []
    zero = [r for r in ladder.rows if "zero window" in r.marks]
    if zero:
        said = ("zero window  the receiver's buffer is full: the sender must stop until a "
                "window update (frames " + _frames([r.frame for r in zero]) + ")")
        lanes = ladder.lanes
        if any(lanes[r.src].startswith("pooler") and lanes[r.dst].startswith("server")
               for r in zero):
            said += ("; here the pooler's window to the server closes: it reads the server "
                     "only as fast as it drains to the client")
        out.append(said + ".")
    if any(r.kind == "window" for r in ladder.rows):
        out.append("window update  an ACK with nothing new acknowledged and a larger window: "
                   "the application read data and freed buffer space.")
    return out


def _holes(d: Drawing) -> list[str]:
    """A segment beyond a hole, and the one that filled it: reordered (sent once) or lost."""
    for rows in d.by_conn.values():
        said = _hole(rows)
        if said:
            return [said]
    return []


def _hole(rows: list[Row]) -> str:
    for i, r in enumerate(rows):
        if "after a hole" not in r.marks:
            continue
        fill = next((f for f in rows[i + 1:] if f.src == r.src and f.kind == "data"
                     and f.seq < r.seq), None)
        if fill is None or "retransmission" in fill.marks:
            continue
        said = (f"[after a hole]  frame {r.frame} came before the bytes ahead of it, which "
                f"came {(fill.t - r.t) * 1e6:,.0f} µs later in frame {fill.frame} ([out of "
                f"order]), sent once, not retransmitted: the segments were reordered, nothing "
                f"was lost")
        sack = next((a for a in rows[i + 1:] if a.src == r.dst and "SACK" in a.marks
                     and a.ack <= fill.seq), None)
        if sack is not None:
            said += (f"; the receiver saw them in this order too: its ACK (frame {sack.frame}) "
                     f"reports the hole with a SACK block")
        return said + "."
    return ""


def _losses(d: Drawing) -> list[str]:
    """Each retransmission, the original the capture saw, and the duplicate ACKs with SACK
    blocks that reported the loss (the first MAX_LOSSES read)."""
    resent = [(rows, i, r) for rows in d.by_conn.values() for i, r in enumerate(rows)
              if "retransmission" in r.marks]
    if not resent:
        return []
    counts: list[int] = []
    delays: list[float] = []
    example = ""
    for rows, i, r in resent[:MAX_LOSSES]:
        at = next((k for k in range(i - 1, -1, -1) if rows[k].src == r.src
                   and rows[k].kind == "data" and rows[k].seq == r.seq), None)
        if at is None:
            continue
        original = rows[at]
        dups = [a for a in rows[at + 1:i] if a.src == r.dst and a.ack == r.seq
                and "SACK" in a.marks]
        counts.append(len(dups))
        if dups:
            delays.append(r.t - dups[0].t)
        if not example and dups:
            example = (f"frame {r.frame} resends the bytes of frame {original.frame}, which "
                       f"the capture saw go by: they were lost past the capture point. The "
                       f"receiver's {len(dups)} ACKs after them (frames "
                       f"{_frames([a.frame for a in dups])}) each acknowledged only up to "
                       f"these bytes, with a SACK block for what came after; the sender "
                       f"resent them {(r.t - dups[0].t) * 1000:,.3f} ms after the first")
    if not counts:
        return []
    said = f"[retransmission]  {len(resent):,} segments sent again"
    if example:
        said += f"; {example}"
    reported = [c for c in counts if c]
    if len(counts) > 1 and delays:
        said += (f". Of the {len(counts):,} losses, {len(reported):,} were reported by "
                 f"{min(reported)}-{max(reported)} duplicate ACKs with SACK each, and resent "
                 f"{min(delays) * 1000:,.3f}-{max(delays) * 1000:,.3f} ms after the first")
        if len(reported) < len(counts):
            said += (f"; {len(counts) - len(reported):,} were resent with no duplicate ACK "
                     f"before them")
    return [said + "."]


def _slow_start(d: Drawing, report: dict[str, Any] | None) -> list[str]:
    """Rounds of segments a round trip apart: slow start's growth, as it happened."""
    busiest = d.busiest()
    limits = _limits(report, busiest)
    for way, segments in busiest:
        rtt = limits.get(way, {}).get("rtt") or 0.0
        if rtt < 1.0 or len(segments) < 20:
            continue
        rounds = [[segments[0]]]
        for a, b in zip(segments, segments[1:]):
            if (b.t - a.t) * 1000 >= rtt / 2:
                rounds.append([])
            rounds[-1].append(b)
        every = [len(r) for r in rounds]

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
                f"{_frames([r[0].frame for r in rounds], 6)}): the first {doubling} double, "
                f"as the congestion window grows by a segment for each segment acknowledged."]
    return []


def _delayed(ladder: Ladder) -> list[str]:
    """An ACK alone, 40 ms or more after the data it acknowledges: the delayed-ACK timer."""
    last: dict[tuple[str, int], Row] = {}  # (connection, sender lane) -> its last data
    for r in ladder.rows:
        if r.kind == "data":
            last[(r.conn, r.src)] = r
        elif r.kind == "ack" and r.nbytes:
            data = last.get((r.conn, r.dst))
            mine = last.get((r.conn, r.src))
            if data is not None and 0.038 <= r.t - data.t < 0.25 and \
                    (mine is None or mine.t < data.t):
                return [f"ACK {r.nbytes:,} B  (frame {r.frame}) {(r.t - data.t) * 1000:,.1f} ms "
                        f"after the data it acknowledges (frame {data.frame}): the receiver had "
                        f"nothing to send with it, and Linux's delayed-ACK timer (40 ms at "
                        f"least) ran out."]
    return []


def _tls_records(d: Drawing) -> list[str]:
    """Consecutive segments each completing one TLS 1.3 record of one size: the records'
    size, and what of it is the plaintext."""
    one = (("TLSApplicationData", 1),)
    for (conn, _, _), segments in d.busiest():
        chose = tls13(d.by_conn[conn])
        if chose is None or len(chose) < 2 or chose[1] not in TAG16:
            continue
        size = _common([r for r in segments if r.msgs == one])
        runs = sum(1 for a, b in zip(segments, segments[1:]) if a.msgs == b.msgs == one
                   and a.nbytes == b.nbytes == size)
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


def tcp_notes(ladder: Ladder, report: dict[str, Any] | None) -> list[str]:
    d = Drawing(ladder)
    out = _ack_notes(d, report)
    if report is not None and any(r.get("forward_write") == 4096 and r.get("server_write")
                                  == 8192 for r in report.get("relays") or []) and \
            any(name.startswith("pooler") for name in ladder.lanes):
        out.append("~4 KiB segments from the pooler  the server writes 8,192 bytes at a time "
                   "and the pooler forwards them in 4,096-byte writes: PgBouncer reads at most "
                   "pkt_buf bytes (4,096 by default) before it writes to the other side.")
    out += _writes(d) + _coalesced(d) + _windows(ladder)
    if any(r.kind == "dupack" for r in ladder.rows):
        out.append("dup ACK  the same acknowledgement again while data is outstanding: the "
                   "receiver got bytes beyond a hole.")
    out += _holes(d) + _losses(d) + _slow_start(d, report) + _delayed(ladder) + _tls_records(d)
    if any("raw" in name for name in ladder.lanes) or any(r.win_raw for r in ladder.rows):
        out.append("win … raw  the connection began before the capture, so the window-scale "
                   "factor (sent only in the SYNs) is unknown: the raw 16-bit value is shown.")
    return out
