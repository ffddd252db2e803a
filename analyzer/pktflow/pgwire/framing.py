"""Finding message boundaries in a stream that did not start at the beginning.

A boundary is provable when a chain of consecutive well-formed messages starts there: valid
type bytes for the side, lengths >= 4 and below a sane cap, each header where the previous
message ends. Random or foreign bytes (HTTP, TLS) fail the chain within a message or two.
Which side is the frontend is proven by types only one side sends (Q, P, B for the frontend;
Z, T, 1, 2 for the backend).
"""

from __future__ import annotations

import itertools
from typing import Final

from pktflow.pgwire.messages import BACKEND, BACKEND_ONLY, FRONTEND, FRONTEND_ONLY, HEADER

# PostgreSQL caps a message near 1 GiB; anything claiming more is not PostgreSQL framing.
MAX_MESSAGE: Final = (1 << 30) + 64
# Messages other than DataRow/CopyData this long are implausible in a chain we try to trust.
MAX_CONTROL: Final = 1 << 24
CHAIN: Final = 3  # messages a boundary needs behind it
TYPES = {"frontend": frozenset(FRONTEND), "backend": frozenset(BACKEND)}
ONLY = {"frontend": FRONTEND_ONLY, "backend": BACKEND_ONLY}
_BULK = (ord("D"), ord("d"))
_Z = ord("Z")


def message_run(buf: bytes, pos: int, max_message: int) -> tuple[int, int, int]:
    """Walk the run of messages of buf[pos]'s type from pos, a whole header there: (how many,
    where the run ends, the malformed length that stopped it or -1). The last message may run
    past the buffer (then the end is beyond len(buf)). Twin of pktflow._speedups.message_run."""
    if pos < 0 or len(buf) - pos < 5:
        raise ValueError("message_run needs a whole header at pos")
    n, t, count = len(buf), buf[pos], 0
    unpack = HEADER.unpack_from
    while True:
        ln = unpack(buf, pos)[1]
        if ln < 4 or ln > max_message:
            return count, pos, ln
        count += 1
        pos += 1 + ln
        if n - pos < 5 or buf[pos] != t:
            return count, pos, -1


def plausible(t: int, ln: int, side: str) -> bool:
    if ln < 4 or ln > MAX_MESSAGE or t not in TYPES[side]:
        return False
    if t == _Z and ln != 5:
        return False
    return ln <= MAX_CONTROL or t in _BULK


def _chain(buf: bytes, pos: int, side: str) -> tuple[int, bool, bool]:
    """The chain of messages for `side` at pos: (messages, proves the side, final). Messages 0:
    no chain. Not final: bytes still to come could change the answer."""
    n = len(buf)
    count = 0
    proof = False
    only = ONLY[side]
    while count < CHAIN:
        if n - pos < 5:
            return (count if pos == n else 0), proof, False
        t, ln = HEADER.unpack_from(buf, pos)
        if not plausible(t, ln, side):
            return 0, proof, True
        proof = proof or t in only
        pos += 1 + ln
        count += 1
        if pos > n:
            return (count if count > 1 else 0), proof, False
    return count, proof, True


def chain_at(buf: bytes, pos: int, side: str) -> tuple[int, bool] | None:
    """If a chain of messages for `side` starts at pos: (messages, proves the side), else None.

    A chain may run off the end of the buffer (the rest is not here yet) once it has two
    whole messages, or end exactly at the buffer's end.
    """
    count, proof, _final = _chain(buf, pos, side)
    return (count, proof) if count else None


def _first_bytes(sides: tuple[str, ...]) -> frozenset[int]:
    return frozenset().union(*(TYPES[side] for side in sides))


def find_boundary(buf: bytes, sides: tuple[str, ...], need_proof: bool
                  ) -> tuple[int, str] | None:
    """First position where a chain for one of `sides` begins (with proof of the side, when
    asked: a run of DataRows alone would also frame as frontend Describe messages)."""
    return BoundaryScan(sides, need_proof).find(buf, 0)


class BoundaryScan:
    """find_boundary over a buffer that only grows at its end, each position judged once.

    Rescanning the whole buffer on every segment made a side that never resynchronises
    (foreign or garbage bytes) quadratic in the sync window. Positions whose chain could still
    form when more bytes arrive are kept and retried first; all others are settled for good.
    """

    __slots__ = ("key", "first", "done", "pending")

    def __init__(self, sides: tuple[str, ...], need_proof: bool) -> None:
        self.key = (sides, need_proof)
        self.first = _first_bytes(sides)
        self.done = 0  # stream offsets below this were judged (settled or in pending)
        self.pending: list[int] = []  # stream offsets still undecided, ascending

    def find(self, buf: bytes, base: int) -> tuple[int, str] | None:
        """The first boundary in buf, whose first byte is at stream offset `base`."""
        sides, need_proof = self.key
        first = self.first
        end = len(buf) - 4
        retry = [p - base for p in self.pending if p >= base]
        pending: list[int] = []
        for pos in itertools.chain(retry, range(max(self.done - base, 0), end)):
            if buf[pos] not in first:
                continue
            undecided = False
            for side in sides:
                count, proof, final = _chain(buf, pos, side)
                if count and (proof or not need_proof):
                    return pos, side
                undecided = undecided or not final
            if undecided:
                pending.append(pos + base)
        self.pending = pending
        self.done = max(self.done, base + end)
        return None
