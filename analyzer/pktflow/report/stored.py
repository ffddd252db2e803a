"""A report's connections kept compact: each as its JSON, compressed, once it is reported.

A connection's report is 7-12 KB of JSON (compact or indented) but 25-30 KB as Python dicts,
and a capture of a connection storm (pgbench -C, 20,000 connections) held 570 MB of them until
the report was written. Stored, one takes 500-1,000 bytes (deflate primed with 32 KB of the
first connections' JSON: the keys and most values repeat; primed with the first one only, a
storm's took 1,070 bytes when that one ran pgbench's setup queries and the others did not),
plus what relay matching reads of a PostgreSQL connection (relay.topology.relay_leg) and its
payload bytes (the text overview's ranking). The text is in the layout the output will have,
compact (jsonl) or indented as --format json nests it, so the JSON writers copy it; everything
else decodes one connection at a time. Deflate is ISA-L's level 0 when the isal package is
there (10 us and 640 bytes for an indented connection of that capture, 4 us to inflate; its
level 1 took 16 us for 470 bytes, 7 to inflate), else zlib's level 1 (35 us, 520 bytes); raw
(no checksum over the dictionary and the text each time)."""

from __future__ import annotations

import heapq
import importlib
import json
import zlib
from collections.abc import Collection, Iterator, Sequence
from types import ModuleType
from typing import Any, overload

from pktflow.capture.gz import deflate_lib
from pktflow.relay.topology import Leg, relay_leg
from pktflow.report.jsontext import compact, indented

COMPACT = "compact"  # json.dumps(conn, separators=(",", ":"))
INDENTED = "indented"  # as json.dumps(report, indent=2) writes an item of report["connections"]
# The first connections are kept as their text: a capture of a few never loads a compressor.
RAW = 16
_WBITS = -15  # raw deflate, 32 KB window


def payload_bytes(conn: dict[str, Any]) -> int:
    """What a connection carried, both ways: how the text report ranks connections."""
    return sum(d["payload_bytes"] for d in conn["directions"].values())


class Connections(Sequence[dict[str, Any]]):
    """The report's "connections" list, stored: `add` in any order, `sort` once all are in;
    indexing and iteration then decode one at a time (copies, not kept)."""

    def __init__(self, layout: str = COMPACT) -> None:
        self.layout = layout
        self._zdict = b""  # the first connections' JSON: what deflate matches the others to
        self._lib: ModuleType | None = None  # zlib or isal's twin, from the first one deflated
        # (connection number, JSON without "role": as text, or deflated, what relay matching
        # reads of it or None, payload bytes)
        self._items: list[tuple[int, str | bytes, Leg | None, int]] = []
        self._roles: dict[str, str] = {}  # relay legs' "role"; the others' is "direct"

    def __getstate__(self) -> dict[str, Any]:
        """Picklable (a report crosses from a worker process, `analyze --format jsonl` of
        several captures): the deflate module by its name."""
        state = self.__dict__.copy()
        if self._lib is not None:
            state["_lib"] = self._lib.__name__
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        if state["_lib"] is not None:
            state["_lib"] = importlib.import_module(state["_lib"])
        self.__dict__.update(state)

    def add(self, number: int, report: dict[str, Any]) -> None:
        text = indented(report, 2) if self.layout == INDENTED else compact(report)
        kept: str | bytes = text
        if len(self._items) >= RAW:
            if self._lib is None:
                self._lib = deflate_lib()
                # what deflate matches the others to: the last texts kept as they are, two
                # of the middle size (a capture's first connections are not all alike), at
                # most its window; deflate reads the dictionary anew for each connection
                # (0.3 us a KB), and a scan's connections are small
                sizes = sorted(len(k) for _, k, _, _ in self._items)
                size = min(2 * sizes[len(sizes) // 2], 32768) if sizes else 0
                self._zdict = "".join(str(k) for _, k, _, _ in self._items).encode()[-size:]
            level = 1 if self._lib is zlib else 0  # ISA-L's 0 still compresses, zlib's stores
            c = self._lib.compressobj(level, zlib.DEFLATED, _WBITS, zdict=self._zdict)
            kept = c.compress(text.encode()) + c.flush()
        self._items.append((number, kept, relay_leg(report), payload_bytes(report)))

    def sort(self) -> None:
        self._items.sort(key=lambda item: item[0])

    def relay_legs(self) -> list[Leg]:
        """What relay matching reads, of the connections it can use."""
        return [leg for _, _, leg, _ in self._items if leg is not None]

    def matched(self, roles: dict[str, str]) -> None:
        """Relay matching is done: each connection's "role", by id, as it found them (else
        "direct"); the legs it read go (they would outlive it, and a report that crosses from
        a worker process would carry them: compiled, they do not pickle, and need not)."""
        self._roles = roles
        self._items = [(number, kept, None, nbytes) for number, kept, _, nbytes in self._items]

    def busiest(self, n: int) -> list[int]:
        """The indexes of the n connections that carried the most bytes, busiest first (ties in
        order), found without decoding any (a storm's text report decoded all 20,000: 1.2 s)."""
        items = self._items
        return heapq.nlargest(n, range(len(items)), key=lambda i: items[i][3])

    def connections(self) -> Connections:
        """The report's "connections": this sequence itself."""
        return self

    def ids(self) -> list[str]:
        """Every connection's id, in order, without decoding any."""
        return [f"c{number}" for number, _, _, _ in self._items]

    def picked(self, ids: Collection[str]) -> Iterator[dict[str, Any]]:
        """The connections with these ids, in order: only they are decoded, one at a time."""
        return (self[i] for i, item in enumerate(self._items) if f"c{item[0]}" in ids)

    def _text(self, i: int) -> str:
        """Connection i in the layout, with "role" last as relay matching adds it to a
        connection dict."""
        number, kept, _, _ = self._items[i]
        if isinstance(kept, str):
            text = kept
        else:
            assert self._lib is not None  # it deflated this
            d = self._lib.decompressobj(_WBITS, zdict=self._zdict)
            text = (d.decompress(kept) + d.flush()).decode()
        role = json.dumps(self._roles.get(f"c{number}", "direct"))
        if self.layout == INDENTED:  # the text ends with the closing brace's line, "\n    }"
            return f'{text[:-6]},\n      "role": {role}\n    }}'
        return f'{text[:-1]},"role":{role}}}'

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(i, slice):
            return [self[j] for j in range(len(self))[i]]
        conn: dict[str, Any] = json.loads(self._text(i))
        return conn

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self[i] for i in range(len(self)))

    def texts(self) -> Iterator[str]:
        """Each connection's JSON text, in the layout."""
        return (self._text(i) for i in range(len(self)))


class Reports:
    """Connection reports kept as the dicts they are (analyze()'s default), behind the same
    calls the pipeline makes of Connections."""

    def __init__(self) -> None:
        self._items: list[tuple[int, dict[str, Any]]] = []  # (connection number, report)

    def add(self, number: int, report: dict[str, Any]) -> None:
        self._items.append((number, report))

    def sort(self) -> None:
        self._items.sort(key=lambda item: item[0])

    def relay_legs(self) -> list[Leg]:
        return [leg for leg in (relay_leg(report) for _, report in self._items)
                if leg is not None]

    def matched(self, roles: dict[str, str]) -> None:
        for _, report in self._items:
            report["role"] = roles.get(report["id"], "direct")

    def connections(self) -> list[dict[str, Any]]:
        return [report for _, report in self._items]


def connection_ids(conns: Sequence[dict[str, Any]]) -> list[str]:
    """The ids of a report's connections, in order (stored ones not decoded)."""
    if isinstance(conns, Connections):
        return conns.ids()
    return [c["id"] for c in conns]


def by_id(conns: Sequence[dict[str, Any]], ids: Collection[str]) -> Iterator[dict[str, Any]]:
    """The report's connections with these ids, in order (stored ones decoded only if
    picked, one at a time: a diagram of two connections of a 20,000-connection capture decodes
    two, and one of all of them holds one decoded at a time)."""
    if isinstance(conns, Connections):
        return conns.picked(ids)
    return (c for c in conns if c["id"] in ids)


def busiest(conns: Sequence[dict[str, Any]], n: int) -> list[tuple[int, dict[str, Any]]]:
    """The n connections that carried the most bytes, busiest first (ties in capture order),
    with their indexes: one pass, holding n; stored connections decode only those n."""
    if isinstance(conns, Connections):
        return [(i, conns[i]) for i in conns.busiest(n)]
    return heapq.nlargest(n, enumerate(conns), key=lambda ic: payload_bytes(ic[1]))


def connections_json(conns: Sequence[dict[str, Any]], layout: str) -> Iterator[str]:
    """Each connection's JSON text in `layout`: copied from storage, or encoded."""
    if isinstance(conns, Connections) and conns.layout == layout:
        return conns.texts()
    if layout == INDENTED:
        return (indented(c, 2) for c in conns)
    return (compact(c) for c in conns)
