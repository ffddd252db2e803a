"""A TCP connection: two directions, who is client and server, and its consumers."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from pktflow.tcp.direction import Direction
from pktflow.tcp.observe import CompiledObserver, DirectionInfo, PacketObserver


class StreamSink(Protocol):
    """Consumes the reassembled byte streams of both directions (the PostgreSQL decoder)."""

    def feed(self, d: int, data: bytes, offset: int, frame: int, ts: float) -> None: ...

    def gap(self, d: int, offset: int, length: int, frame: int, ts: float) -> None: ...

    def finish(self) -> None: ...


class CompiledSink:
    """Base of pktflow's own stream consumer (the PostgreSQL decoder): called directly when
    compiled, like CompiledObserver."""

    def feed(self, d: int, data: bytes, offset: int, frame: int, ts: float) -> None:
        raise NotImplementedError

    def gap(self, d: int, offset: int, length: int, frame: int, ts: float) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        raise NotImplementedError


def format_ip(raw: bytes) -> str:
    """As inet_ntop writes it; socket is loaded only for IPv6 (4 ms at every start)."""
    if len(raw) == 4:
        return f"{raw[0]}.{raw[1]}.{raw[2]}.{raw[3]}"
    import socket

    return socket.inet_ntop(socket.AF_INET6, raw)


class Connection:
    __slots__ = ("id", "client", "server", "dirs", "handshake_seen", "start_ts", "end_ts",
                 "first_frame", "last_frame", "packets", "closed_by", "sink", "compiled_sink",
                 "compiled_observers", "other_observers",
                 "swapped", "role_source", "syn_frames", "finished", "settled")

    def __init__(self, conn_id: str, client: tuple[bytes, int], server: tuple[bytes, int],
                 ts: float, frame: int, role_source: str) -> None:
        self.id = conn_id
        self.client = client
        self.server = server
        self.dirs = (Direction(), Direction())  # [0] client->server, [1] server->client
        self.handshake_seen = False
        self.start_ts = ts
        self.end_ts = ts
        self.first_frame = frame
        self.last_frame = frame
        self.packets = 0
        self.closed_by: str | None = None
        # The consumers (see attach): the sink, also as compiled_sink when the engine may call
        # it directly, and the observers split the same way.
        self.sink: StreamSink | None = None
        self.compiled_sink: CompiledSink | None = None
        self.compiled_observers: tuple[CompiledObserver, ...] = ()
        self.other_observers: tuple[PacketObserver, ...] = ()
        # True when the application protocol showed the engine's client/server guess was wrong;
        # the report swaps labels, the engine's own numbering never changes mid-connection.
        self.swapped = False
        self.role_source = role_source  # "handshake" | "syn-ack" | "port" | "application"
        self.syn_frames: list[int] = []
        self.finished = False
        self.settled = False  # reset, or both FINs sent and acknowledged

    def attach(self, sink: StreamSink | None, observers: Iterable[PacketObserver]) -> None:
        """Give the connection its consumers, sorted by how the engine calls them per packet:
        pktflow's own (CompiledSink, CompiledObserver) directly, any other through Python."""
        self.sink = sink
        self.compiled_sink = sink if isinstance(sink, CompiledSink) else None
        both = tuple(observers)
        self.compiled_observers = tuple(o for o in both if isinstance(o, CompiledObserver))
        self.other_observers = tuple(o for o in both if not isinstance(o, CompiledObserver))

    def detach(self) -> None:
        """Let go of the consumers (reported: what they found is in the report)."""
        self.attach(None, ())

    @property
    def observers(self) -> tuple[PacketObserver, ...]:
        return (*self.compiled_observers, *self.other_observers)

    @property
    def closed(self) -> bool:
        c2s, s2c = self.dirs
        return c2s.rst or s2c.rst or (c2s.fin_at is not None and s2c.fin_at is not None)

    def direction_info(self) -> tuple[DirectionInfo, DirectionInfo]:
        out = []
        for d in (0, 1):
            mine, peer = self.dirs[d], self.dirs[1 - d]
            scale, known = mine.window_scale(peer)
            out.append(DirectionInfo(mss=mine.syn.mss if mine.syn else None, window_scale=scale,
                                     window_scale_known=known,
                                     window_scale_lower_bound=None if known else mine.wscale_lb))
        return out[0], out[1]

    def to_json(self, capture_start: float) -> dict[str, Any]:
        client, server = self.client, self.server
        c2s, s2c = self.dirs
        d_c2s, d_s2c = c2s.to_json(s2c), s2c.to_json(c2s)
        if self.swapped:
            client, server = server, client
            d_c2s, d_s2c = d_s2c, d_c2s
        return {
            "id": self.id,
            "client": {"ip": format_ip(client[0]), "port": client[1]},
            "server": {"ip": format_ip(server[0]), "port": server[1]},
            "handshake_seen": self.handshake_seen,
            "roles_from": self.role_source,
            "start_s": round(self.start_ts - capture_start, 6),
            "end_s": round(self.end_ts - capture_start, 6),
            "first_frame": self.first_frame,
            "last_frame": self.last_frame,
            "packets": self.packets,
            "closed_by": self.closed_by,
            "directions": {"client_to_server": d_c2s, "server_to_client": d_s2c},
        }
