"""A report's connections and a relay's matched queries kept compact: each as its JSON,
compressed, as it is reported.

A connection's report is 7-12 KB of JSON (compact or indented) but 25-30 KB as Python dicts,
and a capture of a connection storm (pgbench -C, 20,000 connections) held 570 MB of them until
the report was written. Stored, one takes 500-1,000 bytes (deflate primed with the JSON of the
last connections kept as text: the keys and most values repeat), plus what relay matching reads
of a PostgreSQL connection (relay.topology.relay_leg) and its payload bytes (the text overview's
ranking). A storm's matched queries (one per front-leg query) are 2 KB each as dicts, 250 bytes
deflated, 700 as text (how they are kept). Past a megabyte the texts go to a temporary file.
The text is in the layout the output will have, compact (jsonl) or indented as --format json
nests it, so the JSON writers copy it; everything else decodes one item at a time. Deflate is
ISA-L's level 0 when the isal package is there (10 us and 640 bytes for an indented connection
of that capture, 4 us to inflate; its level 1 took 16 us for 470 bytes, 7 to inflate), else
zlib's level 1 (35 us, 520 bytes); raw (no checksum over the dictionary and the text each
time)."""

from __future__ import annotations

import functools
import heapq
import importlib
import json
import os
import tempfile
import zlib
from array import array
from collections.abc import Collection, Iterator, Sequence
from types import ModuleType
from typing import IO, Any, overload

from pktflow.errors import NoSpaceError
BULK_SEGMENTS = 4  # a response in this many segments or more is a bulk one (core relay/legs.rs)
from pktflow.report.jsontext import compact, indented, pieces

COMPACT = "compact"  # json.dumps(conn, separators=(",", ":"))
INDENTED = "indented"  # as json.dumps(report, indent=2) writes an item nested `depth` deep
# The first items are kept as their text (a capture of a few never loads a compressor), up to
# so many bytes in all: a connection that lists 10,000 queries is 5 MB of text.
RAW = 16
RAW_BYTES = 1 << 18
_WBITS = -15  # raw deflate, 32 KB window
# Deflated items are held in memory up to this many bytes, then written to an unnamed
# temporary file (in TMPDIR) and read back one at a time: 80,000 connections of a storm held
# 54 MB of them.
SPILL = 1 << 20
CONNECTION_DEPTH = 2  # report -> "connections" -> a connection
PAIR_DEPTH = 4  # report -> "relays" -> a relay -> "queries" -> a matched pair


@functools.cache
def deflate_lib() -> ModuleType:
    """isal's zlib-compatible module when installed (looked for when first needed: a report
    of a few connections does not load it), zlib otherwise: isal deflates (level 0) about 3x
    as fast, and both inflate each other's output."""
    try:
        return importlib.import_module("isal.isal_zlib")
    except ImportError:
        return zlib


def payload_bytes(conn: dict[str, Any]) -> int:
    """What a connection carried, both ways: how the text report ranks connections."""
    return sum(d["payload_bytes"] for d in conn["directions"].values())


class Spill:
    """Byte strings appended and read back by number: in memory up to SPILL bytes at a time,
    the rest in a temporary file (deleted when closed, or when the process ends)."""

    def __init__(self) -> None:
        self._ends = array("q")  # where each ends, counted from the first one's start
        self._buf = bytearray()  # the latest, not yet written
        self._file: IO[bytes] | None = None
        self._written = 0  # bytes in the file

    def __len__(self) -> int:
        return len(self._ends)

    def append(self, data: bytes) -> None:
        self._buf += data
        self._ends.append(self._written + len(self._buf))
        if len(self._buf) >= SPILL:
            try:
                if self._file is None:
                    self._file = tempfile.TemporaryFile(buffering=0)
                view = memoryview(self._buf)
                while view:
                    view = view[self._file.write(view) or 0:]
            except OSError as exc:
                raise NoSpaceError(
                    f"cannot write the report's temporary file in {tempfile.gettempdir()} "
                    f"({exc.strerror or exc})",
                    hint="set TMPDIR to a directory with room") from None
            self._written += len(self._buf)
            self._buf = bytearray()

    def __getitem__(self, i: int) -> bytes:
        start, end = self._ends[i - 1] if i else 0, self._ends[i]
        if start >= self._written:  # still in memory (a write leaves none half in the file)
            return bytes(self._buf[start - self._written:end - self._written])
        assert self._file is not None
        return os.pread(self._file.fileno(), end - start, start)

    def __getstate__(self) -> dict[str, Any]:
        """Picklable, all in memory (a report crossing from a worker process)."""
        data = b"".join([os.pread(self._file.fileno(), self._written, 0)
                         if self._file is not None else b"", self._buf])
        return {"_ends": self._ends, "_buf": bytearray(data), "_file": None, "_written": 0}


class Texts(Sequence[dict[str, Any]]):
    """A list of a report's dicts (connections, a relay's matched queries) kept as their JSON
    in the layout the output will have, compressed past the first RAW: `append` encodes one,
    indexing and iteration decode one at a time (copies, not kept), and the JSON writers copy
    the text (`json_pieces`)."""

    def __init__(self, layout: str = COMPACT, depth: int = CONNECTION_DEPTH,
                 deflate: bool = True) -> None:
        self.layout = layout
        self.depth = depth  # how deep an item sits in the report (indented layout)
        # False: the items past RAW are kept as UTF-8 (small ones, which spill soon: deflating
        # and inflating a relay's matched query took 5 us, 3% of a storm's analysis)
        self.deflate = deflate
        self._raw: list[str] = []  # the first RAW (RAW_BYTES at most), as text
        self._raw_bytes = 0
        self._zdict = b""  # the last of those: what deflate matches the others to
        self._lib: ModuleType | None = None  # zlib or isal's twin, from the first one deflated
        self._rest = Spill()  # the items past RAW

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

    def append(self, item: dict[str, Any]) -> None:
        self._store(indented(item, self.depth) if self.layout == INDENTED else compact(item))

    def _store(self, text: str) -> None:
        """Keep an item's text: as it is while few, else deflated (or as UTF-8)."""
        if (len(self._raw) < RAW and not len(self._rest)
                and self._raw_bytes + len(text) <= RAW_BYTES):
            self._raw.append(text)
            self._raw_bytes += len(text)
            return
        if not self.deflate:
            self._rest.append(text.encode())
            return
        if self._lib is None:
            self._lib = deflate_lib()
            # what deflate matches the others to: the last texts kept as they are, two of the
            # middle size (a capture's first connections are not all alike), at most its
            # window; deflate reads the dictionary anew for each item (0.3 us a KB), and a
            # scan's connections are small
            sizes = sorted(len(k) for k in self._raw)
            size = min(2 * sizes[len(sizes) // 2], 32768) if sizes else 0
            self._zdict = "".join(self._raw).encode()[-size:]
        level = 1 if self._lib is zlib else 0  # ISA-L's 0 still compresses, zlib's stores
        c = self._lib.compressobj(level, zlib.DEFLATED, _WBITS, zdict=self._zdict)
        self._rest.append(c.compress(text.encode()) + c.flush())

    def _stored(self, position: int) -> str:
        """The text of the item appended `position`-th."""
        if position < len(self._raw):
            return self._raw[position]
        if not self.deflate:
            return self._rest[position - len(self._raw)].decode()
        assert self._lib is not None  # it deflated this
        d = self._lib.decompressobj(_WBITS, zdict=self._zdict)
        return (d.decompress(self._rest[position - len(self._raw)]) + d.flush()).decode()

    def _text(self, i: int) -> str:
        return self._stored(i)

    def __len__(self) -> int:
        return len(self._raw) + len(self._rest)

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(i, slice):
            return [self[j] for j in range(len(self))[i]]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        item: dict[str, Any] = json.loads(self._text(i))
        return item

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self[i] for i in range(len(self)))

    def texts(self) -> Iterator[str]:
        """Each item's JSON text, in the layout."""
        return (self._text(i) for i in range(len(self)))


class Connections(Texts):
    """The report's "connections" list, stored: `add` in any order, `sort` once all are in;
    beside each, what relay matching reads of it (until `matched`) and its payload bytes.

    With `keep`, only the reports of the `keep` busiest connections are kept (and those of
    busy relay legs until matching has read them): the text report draws no more, and a
    storm's 20,000 reports were a fifth of its analysis to encode and deflate. Every
    connection's id, payload bytes and role are still there; reading one that was not kept
    raises LookupError."""

    def __init__(self, layout: str = COMPACT, keep: int | None = None) -> None:
        super().__init__(layout, CONNECTION_DEPTH)
        self._numbers = array("q")  # by position added
        self._payload = array("q")
        self._order: array[int] | None = None  # positions in connection order, once sorted
        self._roles: dict[str, str] = {}  # relay legs' "role"; the others' is "direct"
        self._keep = keep
        # with `keep`: where each position's text is among the stored ones (-1: not kept),
        # and the busiest so far as (payload, -number, position), the least busy first
        self._where = array("q")
        self._busiest: list[tuple[int, int, int]] = []

    def __len__(self) -> int:
        return len(self._numbers)

    def add(self, number: int, report: dict[str, Any]) -> None:
        position = len(self._numbers)
        payload = payload_bytes(report)
        self._numbers.append(number)
        self._payload.append(payload)
        if self._keep is None:
            self.append(report)
            return
        # ties go to the earlier connection, as busiest() ranks them
        rank = (payload, -number, position)
        kept = len(self._busiest) < self._keep
        if len(self._busiest) < self._keep:
            heapq.heappush(self._busiest, rank)
        elif rank > self._busiest[0]:
            heapq.heapreplace(self._busiest, rank)
            kept = True
        self._where.append(super().__len__() if kept else -1)
        if kept:
            self.append(report)

    def _stored(self, position: int) -> str:
        if self._keep is None:
            return super()._stored(position)
        where = self._where[position]
        if where < 0:
            raise LookupError(f"connection c{self._numbers[position]}'s report was not kept "
                              f"(only the {self._keep} busiest were)")
        return super()._stored(where)

    def sort(self) -> None:
        numbers = self._numbers
        self._order = array("q", sorted(range(len(numbers)), key=numbers.__getitem__))

    def _positions(self) -> Sequence[int]:
        return range(len(self)) if self._order is None else self._order

    def matched(self, roles: dict[str, str]) -> None:
        """Relay matching is done: each connection's "role", by id, as it found them (else
        "direct"); the legs it read go (they would outlive it, and a report that crosses from
        a worker process would carry them: compiled, they do not pickle, and need not)."""
        self._roles = roles

    def busiest(self, n: int) -> list[int]:
        """The indexes of the n connections that carried the most bytes, busiest first (ties in
        order), found without decoding any (a storm's text report decoded all 20,000: 1.2 s)."""
        payload, positions = self._payload, self._positions()
        return heapq.nlargest(n, range(len(self)), key=lambda i: payload[positions[i]])

    def connections(self) -> Connections:
        """The report's "connections": this sequence itself."""
        return self

    def ids(self) -> list[str]:
        """Every connection's id, in order, without decoding any."""
        numbers = self._numbers
        return [f"c{numbers[p]}" for p in self._positions()]

    def picked(self, ids: Collection[str]) -> Iterator[dict[str, Any]]:
        """The connections with these ids, in order: only they are decoded, one at a time."""
        return (self[i] for i, cid in enumerate(self.ids()) if cid in ids)

    def _text(self, i: int) -> str:
        """Connection i in the layout, with "role" last as relay matching adds it to a
        connection dict."""
        position = self._positions()[i]
        text = self._stored(position)
        role = json.dumps(self._roles.get(f"c{self._numbers[position]}", "direct"))
        if self.layout == INDENTED:  # the text ends with the closing brace's line, "\n    }"
            return f'{text[:-6]},\n      "role": {role}\n    }}'
        return f'{text[:-1]},"role":{role}}}'


class Reports:
    """Connection reports kept as the dicts they are (analyze()'s default), behind the same
    calls the pipeline makes of Connections."""

    def __init__(self) -> None:
        self._items: list[tuple[int, dict[str, Any]]] = []  # (connection number, report)

    def add(self, number: int, report: dict[str, Any]) -> None:
        self._items.append((number, report))

    def sort(self) -> None:
        self._items.sort(key=lambda item: item[0])

    def matched(self, roles: dict[str, str]) -> None:
        for _, report in self._items:
            report["role"] = roles.get(report["id"], "direct")

    def connections(self) -> list[dict[str, Any]]:
        return [report for _, report in self._items]


def _bulk(pair: dict[str, Any]) -> bool:
    return (pair["segments_in"] or 0) >= BULK_SEGMENTS


def _by_bytes(pair: dict[str, Any]) -> float:
    return -(pair["response_bytes"]["front"] or 0)


def _by_cost(pair: dict[str, Any]) -> float:
    return -(pair["relay_cost_ms"] or 0.0)


class TopPairs:
    """A relay's matched queries when only the text report reads them: how many, whether any
    was a bulk response, and the `keep` first by each of ranked_pairs' orders (a storm's
    20,000 were stored and decoded twice to draw 15)."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.count = 0
        self.bulk = False
        # per order: (-key, -position, pair), the last in that order on top
        self._tops: tuple[list[tuple[float, int, dict[str, Any]]], ...] = ([], [])

    def __len__(self) -> int:
        return self.count

    def append(self, pair: dict[str, Any]) -> None:
        self.bulk = self.bulk or _bulk(pair)
        for top, key in zip(self._tops, (_by_bytes, _by_cost)):
            item = (-key(pair), -self.count, pair)
            if len(top) < self.keep:
                heapq.heappush(top, item)
            elif item[:2] > top[0][:2]:  # a smaller key (ties: the earlier stays)
                heapq.heapreplace(top, item)
        self.count += 1

    def first(self, n: int, bulk: bool) -> list[dict[str, Any]]:
        top = self._tops[0 if bulk else 1]
        return [p for _, _, p in sorted(top, key=lambda t: (-t[0], -t[1]))[:n]]


def ranked_pairs(pairs: Sequence[dict[str, Any]] | TopPairs, n: int
                 ) -> tuple[bool, list[dict[str, Any]]]:
    """Whether a relay carried bulk responses, and its first n matched queries: the biggest
    responses first if so, else those the relay delayed most (ties in order), holding n."""
    if isinstance(pairs, TopPairs):
        return pairs.bulk, pairs.first(n, pairs.bulk)
    bulk = any(_bulk(p) for p in pairs)
    return bulk, heapq.nsmallest(n, pairs, key=_by_bytes if bulk else _by_cost)


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


def json_pieces(value: Any, layout: str, depth: int) -> Iterator[str]:
    """value's JSON text in `layout` (nested `depth` levels deep when indented, as
    json.dumps(report, indent=2) writes it), in pieces: stored items (Texts) copied when
    stored in that layout, else decoded and encoded one at a time; dicts and lists that hold
    Texts (a stored report's relays) walked."""
    if isinstance(value, Texts):
        yield from _texts_json(value, layout, depth)
    elif isinstance(value, (dict, list)) and _holds_texts(value, 2):
        inner = "\n" + "  " * (depth + 1) if layout == INDENTED else ""
        sep, colon = ("," + inner, ": ") if layout == INDENTED else (",", ":")
        opening, closing = ("{", "}") if isinstance(value, dict) else ("[", "]")
        items = value.items() if isinstance(value, dict) else ((None, v) for v in value)
        for n, (key, item) in enumerate(items):  # not empty: it holds Texts
            yield (sep if n else opening + inner) + (
                "" if key is None else json.dumps(key) + colon)
            yield from json_pieces(item, layout, depth + 1)
        yield (inner[:-2] if inner else "") + closing
    elif layout == INDENTED:
        yield from pieces(value, depth)
    else:
        yield compact(value)


def _holds_texts(value: Any, levels: int) -> bool:
    """Whether Texts are among value's items, or their items `levels` deep."""
    items = value.values() if isinstance(value, dict) else value
    for item in items:
        if isinstance(item, Texts):
            return True
        if levels and isinstance(item, (dict, list)) and _holds_texts(item, levels - 1):
            return True
    return False


def _texts_json(items: Texts, layout: str, depth: int) -> Iterator[str]:
    if not len(items):
        yield "[]"
        return
    if items.layout == layout and (layout == COMPACT or items.depth == depth + 1):
        texts = items.texts()
    elif layout == INDENTED:
        texts = (indented(item, depth + 1) for item in items)
    else:
        texts = (compact(item) for item in items)
    if layout == INDENTED:
        inner = "\n" + "  " * (depth + 1)
        sep = "[" + inner
        for text in texts:
            yield sep + text
            sep = "," + inner
        yield "\n" + "  " * depth + "]"
    else:
        sep = "["
        for text in texts:
            yield sep + text
            sep = ","
        yield "]"
