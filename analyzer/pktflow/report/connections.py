"""A finished report's connections and a relay's matched pairs as renderers read them: from the
core, one at a time, as they are asked for. A storm's text report draws 50 connections and 15
pairs of 20,000 each; the JSON is written by the core itself, never from these.

The helpers below take either these sequences or plain lists (a report made with every value
at once, `pipeline.Options(lazy=False)`), so renderers read both the same way."""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterator, Sequence
from typing import TYPE_CHECKING, Any, overload

if TYPE_CHECKING:
    from pktflow import _core

BULK_SEGMENTS = 4  # a pair whose back leg carried this many segments or more is bulk


class Connections(Sequence[dict[str, Any]]):
    """The report's "connections", in connection order, each decoded when read."""

    def __init__(self, core: _core.Report) -> None:
        self._core = core

    def __len__(self) -> int:
        return len(self._core)

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
        return dict(self._core.connection(i))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self[i] for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def ids(self) -> list[str]:
        return [f"c{n}" for n in self._core.numbers()]

    def panel(self, i: int) -> dict[str, Any]:
        """Connection i as a panel draws it: its queries read as they are asked for, their
        response sizes at once (`Queries`)."""
        conn = self.summary(i)
        conn["queries"] = Queries(self._core, i)
        return conn

    def summary(self, i: int) -> dict[str, Any]:
        """Connection i without its listed queries (`queries_total` still counts them): what
        an overview reads, a fraction of a pooler's back leg that lists 10,000."""
        return dict(self._core.connection(i, False))

    def busiest(self, n: int) -> list[int]:
        """The indexes of the n connections that carried the most bytes, busiest first (ties
        in order), found without decoding any."""
        payload = self._core.payload()
        return heapq.nlargest(n, range(len(payload)), key=payload.__getitem__)


class Decoded(Sequence[dict[str, Any]]):
    """Items the core decodes when read, a few at a time (`at`): a connection's queries, a
    relay's matched pairs."""

    def at(self, indices: list[int]) -> list[dict[str, Any]]:
        raise NotImplementedError

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(i, slice):
            return self.at(list(range(len(self))[i]))
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self.at([i])[0]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        step = 512
        for start in range(0, len(self), step):
            yield from self.at(list(range(start, min(start + step, len(self)))))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]


class Queries(Decoded):
    """A connection's listed queries, each decoded when read; their response sizes all at
    once. A panel shows 30 of a pooler's back leg's 10,000."""

    def __init__(self, core: _core.Report, connection: int) -> None:
        self._core = core
        self._connection = connection
        self._sizes: list[int] | None = None

    def sizes(self) -> list[int]:
        if self._sizes is None:
            self._sizes = self._core.query_sizes(self._connection)
        return self._sizes

    def __len__(self) -> int:
        return len(self.sizes())

    def at(self, indices: list[int]) -> list[dict[str, Any]]:
        return [dict(q) for q in self._core.queries(self._connection, indices)]


def response_sizes(queries: Sequence[dict[str, Any]]) -> list[int]:
    """Each query's response bytes, in order (from the core at once for `Queries`)."""
    if isinstance(queries, Queries):
        return queries.sizes()
    return [q.get("response_bytes") or 0 for q in queries]


def queries_at(queries: Sequence[dict[str, Any]], indices: list[int]) -> list[dict[str, Any]]:
    """The queries at `indices`, in that order (only those decoded, for `Queries`)."""
    if isinstance(queries, Queries):
        return queries.at(indices)
    return [queries[i] for i in indices]


def panel(conns: Sequence[dict[str, Any]], i: int) -> dict[str, Any]:
    """Connection i as a panel draws it (`Connections.panel`), or as it is."""
    return conns.panel(i) if isinstance(conns, Connections) else conns[i]


class Pairs(Decoded):
    """A relay's matched queries, each decoded when read."""

    def __init__(self, core: _core.Report, relay: int) -> None:
        self._core = core
        self._relay = relay
        self._len = core.pair_count(relay)

    def __len__(self) -> int:
        return self._len

    def keys(self) -> Iterator[tuple[int, float | None, int]]:
        """What ranking reads of each pair, in order: (front response bytes, relay cost, back
        segments), read a chunk at a time (a storm's are many)."""
        step = 4096
        for start in range(0, len(self), step):
            yield from self._core.pair_keys(self._relay, start, start + step)

    def at(self, indices: list[int]) -> list[dict[str, Any]]:
        return [dict(p) for p in self._core.pairs(self._relay, indices)]



def _bulk(segments_in: int | None) -> bool:
    return (segments_in or 0) >= BULK_SEGMENTS


def ranked_pairs(pairs: Sequence[dict[str, Any]], n: int) -> tuple[bool, list[dict[str, Any]]]:
    """Whether a relay carried bulk responses, and its first n matched queries: the biggest
    responses first if so, else those the relay delayed most (ties in order)."""
    if isinstance(pairs, Pairs):
        bulk = any(_bulk(k[2]) for k in pairs.keys())
        chosen = heapq.nsmallest(n, enumerate(pairs.keys()),
                                 key=lambda ik: -(ik[1][0] or 0) if bulk
                                 else -(ik[1][1] or 0.0))
        return bulk, pairs.at([i for i, _ in chosen])
    bulk = any(_bulk(p["segments_in"]) for p in pairs)
    return bulk, heapq.nsmallest(
        n, pairs, key=lambda p: -(p["response_bytes"]["front"] or 0) if bulk
        else -(p["relay_cost_ms"] or 0.0))


def payload_bytes(conn: dict[str, Any]) -> int:
    """What a connection carried, both ways: how the text report ranks connections."""
    return sum(d["payload_bytes"] for d in conn["directions"].values())


def connection_ids(conns: Sequence[dict[str, Any]]) -> list[str]:
    """The ids of a report's connections, in order (none decoded)."""
    if isinstance(conns, Connections):
        return conns.ids()
    return [c["id"] for c in conns]


def by_id(conns: Sequence[dict[str, Any]], ids: Collection[str]) -> Iterator[dict[str, Any]]:
    """The report's connections with these ids, in order (only they are decoded, one at a
    time)."""
    if isinstance(conns, Connections):
        return (conns[i] for i, cid in enumerate(conns.ids()) if cid in ids)
    return (c for c in conns if c["id"] in ids)


def busiest(conns: Sequence[dict[str, Any]], n: int) -> list[tuple[int, dict[str, Any]]]:
    """The n connections that carried the most bytes, busiest first (ties in capture order),
    with their indexes; a report's own sequence decodes only those n."""
    if isinstance(conns, Connections):
        return [(i, conns[i]) for i in conns.busiest(n)]
    return heapq.nlargest(n, enumerate(conns), key=lambda ic: payload_bytes(ic[1]))


def busiest_summaries(conns: Sequence[dict[str, Any]],
                      n: int) -> list[tuple[int, dict[str, Any]]]:
    """The n connections that carried the most bytes, as `busiest`; a report's own sequence
    gives each without its listed queries (read `conns[i]` for those), so the n held at once
    stay small however many queries the busiest list."""
    if isinstance(conns, Connections):
        return [(i, conns.summary(i)) for i in conns.busiest(n)]
    return busiest(conns, n)
