"""The TCP engine: fed packet tuples in capture order, it tracks connections and hands the
reassembled streams and per-packet facts to consumers. No file or terminal access here.

Rules, in the order `feed` applies them:
- A connection is keyed by its 4-tuple; both orientations map to it with the direction number.
- A SYN without ACK on a known 4-tuple starts a new connection when the old one is closed or its
  client ISN differs (a retransmitted SYN carries the same ISN and stays in the old one).
- Client/server: from SYN / SYN-ACK when seen, else the lower port is the server (the report may
  swap them later if the application protocol says otherwise).
- Stream offsets are relative to the first byte after the SYN, or to the first byte seen.
- Data below the highest byte seen is a retransmission unless it fills a hole the capture saw
  open for less than OOO_THRESHOLD_S (then it is reordering, as tshark counts it).
- A hole becomes a capture gap once the receiver has acknowledged past it (the bytes went by but
  the capture missed them), when buffering it would exceed the bounds, or at the end.
- With a `retired` callback, a connection leaves the engine, finished, when its 4-tuple is
  reused or (with `linger`) once it is closed (both FINs, or a RST) and `sweep` finds it silent
  for `linger` seconds of capture time (`settled_linger` after a RST or once both FINs are
  acknowledged): memory then follows the connections open at once, not all a capture held. A
  later packet on its 4-tuple other than a SYN is counted as late (late_packets, late_frames),
  not taken for a new connection (the last MAX_GONE are known).
- With a `retired` callback, a connection whose packets are all handshake segments without data
  (SYN, SYN-ACK, their retransmissions) is kept as those packets, its number reserved, and made
  when another kind of packet comes (they are then fed first) or at the end: a SYN flood or a
  scan of unanswered ports opens a connection a packet, and 200,000 held 2.4 GB as Connections.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from typing import Final

from pktflow.capture.packet import ACK, FIN, RST, SYN, TcpTuple
from pktflow.tcp.connection import Connection, StreamSink
from pktflow.tcp.direction import (MAX_BUFFERED_BYTES, MAX_BUFFERED_SEGMENTS, MAX_HOLES,
                                   OOO_THRESHOLD_S, Direction, note)
from pktflow.tcp.observe import (FILLS_HOLE, KEEPALIVE, NEW, OUT_OF_ORDER, PARTIAL_RETRANS,
                                 RETRANS, PacketObserver)
from pktflow.tcp.options import parse_syn_options

SinkFactory = Callable[[Connection], StreamSink | None]
ObserverFactory = Callable[[Connection], Iterable[PacketObserver]]

Key = tuple[bytes, int, bytes, int]
MAX_GONE: Final = 1 << 16  # 4-tuples of connections retired after closing, remembered
MAX_LATE_FRAMES: Final = 20
# Settled connections waiting out settled_linger: past this, the oldest go at once (a scan of
# 100,000 connections in 0.2 s held every one's analyses, 1.2 GB, for the 2 s; a pgbench -C
# storm of 2,000 connections a second held 4,000, about 19 KB each). A packet that still comes
# for one retired early is counted as late, as after the linger.
MAX_SETTLED: Final = 2_000
MAX_WAITING: Final = 16  # handshake segments kept of a connection not made yet; one more makes it


class _Waiting:
    """A connection not made yet: its reserved number and its packets, all handshake segments
    without data, the first a SYN or a SYN-ACK."""

    __slots__ = ("number", "packets")

    def __init__(self, number: int, first: TcpTuple) -> None:
        self.number = number
        self.packets = [first]

    def takes(self, pkt: TcpTuple) -> bool:
        """Whether the packet is a handshake segment the connection, once made, would take as
        its own (lookup's rules): a SYN-ACK, or the first SYN again (same ISN, same way)."""
        _, _, src, _, sport, _, seq, _, flags, _, plen, _, _ = pkt
        if plen or flags & (FIN | RST) or not flags & SYN or len(self.packets) >= MAX_WAITING:
            return False
        if flags & ACK:
            return True
        _, _, src0, _, sport0, _, seq0, _, flags0, _, _, _, _ = self.packets[0]
        return not flags0 & ACK and seq0 == seq and sport0 == sport and src0 == src


def _side(conn: Connection, src: bytes, sport: int, dst: bytes, dport: int) -> int:
    """The direction of a packet with these very address objects in conn, or -1 (which only
    means: look in the table)."""
    c, s = conn.client, conn.server
    if sport == c[1] and dport == s[1] and src is c[0] and dst is s[0]:
        return 0
    if sport == s[1] and dport == c[1] and src is s[0] and dst is c[0]:
        return 1
    return -1


class TcpEngine:
    def __init__(self, sink_factory: SinkFactory | None = None,
                 observer_factory: ObserverFactory | None = None,
                 retired: Callable[[Connection], None] | None = None,
                 linger: float | None = None, settled_linger: float | None = None) -> None:
        self._sink_factory = sink_factory
        self._observer_factory = observer_factory
        self._retired = retired
        self._linger = linger if retired is not None else None
        # the settled linger in effect: never longer than linger
        self.settled_linger = linger if linger is None or settled_linger is None \
            else min(linger, settled_linger)
        self._closing: deque[Connection] = deque()  # closed, in the order they closed
        self._settled: deque[Connection] = deque()  # reset or both FINs acknowledged, in order
        # those of them not yet retired (a reused 4-tuple retires one before its time; its
        # entry stays until it reaches the head): what MAX_SETTLED bounds
        self._settled_waiting = 0
        self._table: dict[Key, tuple[Connection, int]] = {}
        # The two connections last found in the table. A capture interleaves few busy
        # connections, and the native reader hands out one object per address, so identity
        # finds most packets' connection without building and hashing a key.
        self._hot: Connection | None = None
        self._warm: Connection | None = None
        self._live: dict[str, Connection] = {}  # by id, in the order they opened
        self.opened = 0
        # connections not made yet (see the rules), both ways; only when they can be retired
        self._waiting: dict[Key, _Waiting] = {}
        # Both ways of connections retired closed, oldest first. An OrderedDict: forgetting a
        # plain dict's oldest key walks past every key deleted before it, a quadratic pass.
        self._gone: OrderedDict[Key, None] = OrderedDict()
        self.late_packets = 0  # packets on those 4-tuples after their connection was retired
        self.late_frames: list[int] = []  # the first MAX_LATE_FRAMES of them

    @property
    def connections(self) -> list[Connection]:
        """The connections made and not handed to `retired`, in the order they were made."""
        return list(self._live.values())

    # -- connection table --------------------------------------------------------------

    def _open(self, client: tuple[bytes, int], server: tuple[bytes, int], ts: float,
              frame: int, role_source: str, number: int = 0) -> Connection:
        if not number:
            self.opened += 1
            number = self.opened
        conn = Connection(f"c{number}", client, server, ts, frame, role_source)
        self._live[conn.id] = conn
        self._table[(client[0], client[1], server[0], server[1])] = (conn, 0)
        self._table[(server[0], server[1], client[0], client[1])] = (conn, 1)
        conn.attach(self._sink_factory(conn) if self._sink_factory is not None else None,
                    self._observer_factory(conn) if self._observer_factory is not None else ())
        return conn

    def _lookup(self, src: bytes, sport: int, dst: bytes, dport: int, flags: int, seq: int,
                ts: float, frame: int, pkt: TcpTuple) -> tuple[Connection, int] | None:
        """The packet's connection and direction; None for a late packet (counted) or one
        kept for a connection not made yet (see the rules)."""
        hit: tuple[Connection, int] | None = None
        hot, warm = self._hot, self._warm
        if hot is not None:
            side = _side(hot, src, sport, dst, dport)
            if side >= 0:
                hit = (hot, side)
            elif warm is not None:
                side = _side(warm, src, sport, dst, dport)
                if side >= 0:
                    hit = (warm, side)
        if hit is None:
            hit = self._table.get((src, sport, dst, dport))
            if hit is not None and hit[0] is not hot:
                self._warm = hot
                self._hot = hit[0]
        if hit is None and self._waiting:
            waiting = self._waiting.get((src, sport, dst, dport))
            if waiting is not None:
                if waiting.takes(pkt):
                    waiting.packets.append(pkt)
                    return None
                self._make(waiting)
                hit = self._table.get((src, sport, dst, dport))
        syn_only = flags & (SYN | ACK) == SYN
        if hit is None and self._gone and not flags & SYN \
                and (src, sport, dst, dport) in self._gone:
            self.late_packets += 1
            if len(self.late_frames) < MAX_LATE_FRAMES:
                self.late_frames.append(frame)
            return None
        if hit is not None:
            if not syn_only:
                return hit
            conn, d = hit
            c2s = conn.dirs[0]
            # A retransmitted SYN carries the same ISN; anything else reuses the 4-tuple. (A
            # connection without packets was just made for this one, from the packets kept.)
            if not conn.packets or d == 0 and c2s.isn_seen \
                    and c2s.base == (seq + 1) & 0xFFFFFFFF and not conn.closed:
                return hit
            self._retire(conn)
        # Kept as packets (see the rules), unless the 4-tuple is its own reverse: fed again,
        # its first packet would be taken for side 1.
        if self._retired is not None and flags & SYN and not flags & (FIN | RST) and not pkt[10] \
                and (sport != dport or src != dst):
            self.opened += 1
            waiting = _Waiting(self.opened, pkt)
            self._waiting[(src, sport, dst, dport)] = waiting
            self._waiting[(dst, dport, src, sport)] = waiting
            return None
        return self._new(src, sport, dst, dport, flags, ts, frame)

    def _new(self, src: bytes, sport: int, dst: bytes, dport: int, flags: int, ts: float,
             frame: int, number: int = 0) -> tuple[Connection, int]:
        """A connection opened by this packet, client and server as the rules say, and the
        packet's direction in it."""
        if flags & (SYN | ACK) == SYN:
            return self._open((src, sport), (dst, dport), ts, frame, "handshake", number), 0
        if flags & (SYN | ACK) == SYN | ACK:
            return self._open((dst, dport), (src, sport), ts, frame, "syn-ack", number), 1
        if sport < dport:
            return self._open((dst, dport), (src, sport), ts, frame, "port", number), 1
        return self._open((src, sport), (dst, dport), ts, frame, "port", number), 0

    def _make(self, waiting: _Waiting) -> Connection:
        """Make a connection kept as its handshake segments, and feed it them."""
        frame, ts, src, dst, sport, dport, _, _, flags = waiting.packets[0][:9]
        del self._waiting[(src, sport, dst, dport)]
        del self._waiting[(dst, dport, src, sport)]
        conn, _ = self._new(src, sport, dst, dport, flags, ts, frame, waiting.number)
        packets, waiting.packets = waiting.packets, []  # fed to the connection: let go
        for pkt in packets:
            self.feed(pkt)
        return conn

    def _retire(self, conn: Connection, closed: bool = False) -> None:
        """Finish a connection whose 4-tuple is being reused, or (closed) that closed and went
        silent: its 4-tuple is then remembered, to tell late packets from new connections."""
        if conn is self._hot:
            self._hot = None
        if conn is self._warm:
            self._warm = None
        a, b = conn.client, conn.server
        self._table.pop((a[0], a[1], b[0], b[1]), None)
        self._table.pop((b[0], b[1], a[0], a[1]), None)
        self._finish_connection(conn)
        if conn.settled:
            self._settled_waiting -= 1
        if closed:
            gone = self._gone
            gone[(a[0], a[1], b[0], b[1])] = None
            gone[(b[0], b[1], a[0], a[1])] = None
            while len(gone) > MAX_GONE:
                gone.popitem(last=False)
        if self._retired is not None:
            del self._live[conn.id]
            self._retired(conn)

    def sweep(self, now: float) -> None:
        """Retire the closed connections silent since `now - linger` (capture time), the
        settled ones since `now - settled_linger`; call it between packets, now and then. The
        oldest closed first: one that still has packets holds the others back until it too is
        silent."""
        linger, settled = self._linger, self.settled_linger
        if linger is None or settled is None:
            return
        self._sweep(self._settled, now, settled, MAX_SETTLED)
        self._sweep(self._closing, now, linger)

    def _sweep(self, closing: deque[Connection], now: float, linger: float,
               most: int = -1) -> None:
        """Retire from the head of `closing` those silent for `linger`, and while more than
        `most` settled connections wait (-1: no bound) the oldest, silent or not."""
        while closing:
            conn = closing[0]
            if not conn.finished:
                if now - conn.end_ts < linger and not 0 <= most < self._settled_waiting:
                    return
                self._retire(conn, closed=True)
            closing.popleft()

    # -- per packet --------------------------------------------------------------------

    def feed(self, pkt: TcpTuple) -> None:
        (frame, ts, src, dst, sport, dport, seq, ack, flags, win, plen, payload,
         options) = pkt
        found = self._lookup(src, sport, dst, dport, flags, seq, ts, frame, pkt)
        if found is None:
            return
        conn, d = found
        conn.packets += 1
        conn.end_ts = ts
        conn.last_frame = frame
        mine, peer = conn.dirs[d], conn.dirs[1 - d]

        if flags & SYN:
            mine.syn = parse_syn_options(options)
            mine.base = (seq + 1) & 0xFFFFFFFF
            mine.isn_seen = True
            conn.syn_frames.append(frame)
            if flags & ACK:
                conn.handshake_seen = peer.isn_seen
            mine.update_scale(peer)
            peer.update_scale(mine)
            seq_rel = end = 0
        else:
            if mine.base < 0:
                mine.base = seq
            seq_rel = mine.unwrap(seq)
            end = seq_rel + plen

        # The peer's stream: this packet acknowledges up to ack_rel.
        ack_rel = -1
        if flags & ACK:
            if peer.base < 0:
                peer.base = ack
            ack_rel = peer.unwrap(ack)
            if ack_rel > peer.max_acked:
                peer.max_acked = ack_rel
                if peer.buffer:
                    self._gap_acked(conn, 1 - d, peer, ack_rel, frame, ts)

        # Window: scaled when the handshake proves the factor; SYN windows are never scaled.
        scaled_win = win
        if not flags & SYN:
            if mine.wscale:
                scaled_win = win << mine.wscale
            if win == 0 and not flags & (RST | FIN):
                mine.zero_window_events += 1
                note(mine.ev_zero, frame)
            elif (plen == 0 and not flags & (FIN | RST) and win != mine.last_win
                  and mine.last_win >= 0 and ack_rel == mine.last_ack
                  and seq_rel == mine.last_seq):
                mine.window_updates += 1
            # Data sent beyond the receiver's raw window proves a minimum scale factor.
            if plen and not peer.wscale_known and peer.last_win > 0 and peer.last_ack >= 0:
                inflight = end - peer.last_ack
                lim = peer.last_win
                while peer.wscale_lb < 14 and inflight > lim << peer.wscale_lb:
                    peer.wscale_lb += 1
        mine.last_win = win
        mine.last_ack = ack_rel
        mine.last_seq = seq_rel

        kind = 0
        if plen:
            kind = self._data(conn, d, mine, seq_rel, end, plen, payload, frame, ts)
        if flags & (FIN | RST):
            was_open = conn.closed_by is None
            if flags & FIN:
                mine.fin_at = end
                if was_open and peer.fin_at is not None:
                    conn.closed_by = "fin"
            if flags & RST:
                mine.rst = True
                conn.closed_by = "rst"
            if was_open and conn.closed_by is not None and self._linger is not None:
                self._closing.append(conn)
        if conn.closed_by is not None and not conn.settled and self._linger is not None and (
                conn.closed_by == "rst" or mine.max_acked > (mine.fin_at or 0)
                and peer.max_acked > (peer.fin_at or 0)):
            # A RST, or both FINs acknowledged: what can still come is what crossed the RST
            # (a round trip), or a FIN retransmitted for an ACK lost past the capture point,
            # an RTO later (200 ms at least, doubling).
            conn.settled = True
            self._settled.append(conn)
            self._settled_waiting += 1
        for cobs in conn.compiled_observers:  # a direct call when compiled
            cobs.on_packet(d, frame, ts, seq_rel, end, ack_rel, scaled_win, flags, kind)
        for obs in conn.other_observers:
            obs.on_packet(d, frame, ts, seq_rel, end, ack_rel, scaled_win, flags, kind)

    def _data(self, conn: Connection, d: int, mine: Direction, seq: int, end: int, plen: int,
              payload: bytes, frame: int, ts: float) -> int:
        high = mine.high
        if plen > mine.max_segment:
            mine.max_segment = plen
        if seq >= high:
            kind = NEW
            if seq > high:
                kind |= OUT_OF_ORDER
                if len(mine.holes) < MAX_HOLES:
                    mine.holes.append([high, seq, ts])
                else:
                    mine.holes_forgotten += 1
            mine.payload_bytes += plen
            mine.data_segments += 1
            mine.high = end
            mine.high_ts = ts
        elif end <= high:
            if plen <= 1 and seq == high - 1:
                mine.keepalives += 1
                return KEEPALIVE
            fresh = self._fill_holes(mine, seq, end)
            if fresh:
                mine.payload_bytes += fresh
                mine.data_segments += 1
                kind = FILLS_HOLE
                if ts - mine.high_ts < OOO_THRESHOLD_S:
                    mine.ooo_segments += 1
                    note(mine.ev_ooo, frame)
                else:
                    kind |= RETRANS
                    mine.retrans_segments += 1
                    mine.retrans_bytes += plen
                    note(mine.ev_retrans, frame)
            else:
                kind = RETRANS
                mine.retrans_segments += 1
                mine.retrans_bytes += plen
                note(mine.ev_retrans, frame)
        else:
            kind = NEW | PARTIAL_RETRANS
            fresh = end - high + self._fill_holes(mine, seq, high)
            mine.payload_bytes += fresh
            mine.data_segments += 1
            mine.retrans_segments += 1
            mine.retrans_bytes += plen - fresh
            note(mine.ev_retrans, frame)
            mine.high = end
            mine.high_ts = ts

        captured = len(payload)
        if captured < plen:
            mine.truncated_bytes += plen - captured
            mine.truncated_segments += 1
            note(mine.ev_trunc, frame)
        self._deliver(conn, d, mine, seq, end, payload, frame, ts)
        return kind

    @staticmethod
    def _fill_holes(mine: Direction, seq: int, end: int) -> int:
        """Remove [seq, end) from the open holes; return how many never-seen bytes it held."""
        fresh = 0
        holes = mine.holes
        for i in range(len(holes) - 1, -1, -1):
            h0, h1, opened = holes[i]
            if h1 <= seq or h0 >= end:  # no overlap (the common case, checked cheaply)
                continue
            lo, hi = max(seq, int(h0)), min(end, int(h1))
            fresh += hi - lo
            del holes[i]
            if h0 < lo:
                holes.append([h0, lo, opened])
            if hi < h1:
                holes.append([hi, h1, opened])
        if len(holes) > MAX_HOLES:  # splits past the bound: forget the holes furthest back
            holes.sort(key=lambda h: h[0])
            mine.holes_forgotten += len(holes) - MAX_HOLES
            del holes[:len(holes) - MAX_HOLES]
        return fresh

    # -- reassembly --------------------------------------------------------------------

    def _deliver(self, conn: Connection, d: int, mine: Direction, seq: int, end: int,
                 payload: bytes, frame: int, ts: float) -> None:
        nxt = mine.next
        if end <= nxt:
            return
        if seq > nxt:
            if seq not in mine.buffer or mine.buffer[seq][0] < end:
                old = mine.buffer.get(seq)
                if old is not None:
                    mine.buffered_bytes -= len(old[1])
                mine.buffer[seq] = (end, payload, frame, ts)
                mine.buffered_bytes += len(payload)
            if (mine.buffered_bytes > MAX_BUFFERED_BYTES
                    or len(mine.buffer) > MAX_BUFFERED_SEGMENTS):
                mine.bound_gaps += 1
                self._declare_gap(conn, d, mine, min(mine.buffer), frame, ts)
            return
        self._push(conn, d, mine, seq, end, payload, frame, ts)
        if mine.buffer:
            self._drain(conn, d, mine)

    @staticmethod
    def _push(conn: Connection, d: int, mine: Direction, seq: int, end: int,
              payload: bytes, frame: int, ts: float) -> None:
        """Hand [mine.next, end) to the sink; seq <= mine.next < end."""
        skip = mine.next - seq
        data = payload[skip:] if skip else payload
        sink = conn.sink
        if sink is not None and data:
            compiled = conn.compiled_sink
            if compiled is not None:  # a direct call when compiled
                compiled.feed(d, data, mine.next, frame, ts)
            else:
                sink.feed(d, data, mine.next, frame, ts)
        got = mine.next + len(data)
        if got < end and sink is not None:  # snaplen cut the payload: say so, never invent it
            sink.gap(d, got, end - got, frame, ts)
        mine.next = end

    def _drain(self, conn: Connection, d: int, mine: Direction) -> None:
        buf = mine.buffer
        while buf:
            start = min(buf)
            if start > mine.next:
                return
            end, payload, frame, ts = buf.pop(start)
            mine.buffered_bytes -= len(payload)
            if end > mine.next:
                self._push(conn, d, mine, start, end, payload, frame, ts)

    def _declare_gap(self, conn: Connection, d: int, mine: Direction, upto: int, frame: int,
                     ts: float) -> None:
        """The capture will not see [next, upto): tell the sink and count it."""
        if upto <= mine.next:
            return
        size = upto - mine.next
        mine.gaps += 1
        mine.missing_bytes += size
        note(mine.ev_gap, frame)
        if conn.sink is not None:
            conn.sink.gap(d, mine.next, size, frame, ts)
        mine.next = upto
        # The hole will not be filled now: forget it, so a late copy counts as a retransmission.
        mine.holes = [h for h in mine.holes if h[1] > upto]
        self._drain(conn, d, mine)

    def _gap_acked(self, conn: Connection, d: int, mine: Direction, ack_rel: int, frame: int,
                   ts: float) -> None:
        """The receiver acknowledged bytes of direction d past a hole in the capture."""
        if mine.buffer:
            first = min(mine.buffer)
            if ack_rel >= first:
                self._declare_gap(conn, d, mine, first, frame, ts)

    # -- end ---------------------------------------------------------------------------

    def _finish_connection(self, conn: Connection) -> None:
        if conn.finished:
            return
        conn.finished = True
        for d in (0, 1):
            mine = conn.dirs[d]
            while mine.buffer:
                self._declare_gap(conn, d, mine, min(mine.buffer), conn.last_frame, conn.end_ts)
            # Acknowledged but never captured at the tail (a FIN takes one sequence number).
            acked = mine.max_acked - (1 if mine.fin_at is not None else 0)
            if acked > mine.high and mine.high >= mine.next:
                mine.high = acked
                self._declare_gap(conn, d, mine, acked, conn.last_frame, conn.end_ts)
        if conn.sink is not None:
            conn.sink.finish()
        info = conn.direction_info()
        for obs in conn.observers:
            obs.finish(info)

    def finish(self) -> None:
        # made one at a time, and retired at once: a flood's unanswered SYNs stay small (a
        # list first: taking the next from the table each time would walk the deleted keys)
        for waiting in dict.fromkeys(self._waiting.values()):
            self._retire(self._make(waiting))
        for conn in self._live.values():
            self._finish_connection(conn)
