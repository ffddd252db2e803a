"""Finding message boundaries in a stream that did not start at the beginning.

A boundary is provable when a chain of consecutive well-formed messages starts there: valid
type bytes for the side, lengths >= 4 and below a sane cap, each header where the previous
message ends. Random or foreign bytes (HTTP, TLS) fail the chain within a message or two.
Which side is the frontend is proven by types only one side sends (Q, P, B for the frontend;
Z, T, 1, 2 for the backend).
"""

from __future__ import annotations

from pktflow.pgwire.messages import BACKEND, BACKEND_ONLY, FRONTEND, FRONTEND_ONLY, HEADER

# PostgreSQL caps a message near 1 GiB; anything claiming more is not PostgreSQL framing.
MAX_MESSAGE = (1 << 30) + 64
# Messages other than DataRow/CopyData this long are implausible in a chain we try to trust.
MAX_CONTROL = 1 << 24
CHAIN = 3  # messages a boundary needs behind it
TYPES = {"frontend": frozenset(FRONTEND), "backend": frozenset(BACKEND)}
ONLY = {"frontend": FRONTEND_ONLY, "backend": BACKEND_ONLY}
_BULK = (ord("D"), ord("d"))
_Z = ord("Z")


def plausible(t: int, ln: int, side: str) -> bool:
    if ln < 4 or ln > MAX_MESSAGE or t not in TYPES[side]:
        return False
    if t == _Z and ln != 5:
        return False
    return ln <= MAX_CONTROL or t in _BULK


def chain_at(buf: bytes, pos: int, side: str) -> tuple[int, bool] | None:
    """If a chain of messages for `side` starts at pos: (messages, proves the side), else None.

    A chain may run off the end of the buffer (the rest is not here yet) once it has two
    whole messages, or end exactly at the buffer's end.
    """
    n = len(buf)
    count = 0
    proof = False
    only = ONLY[side]
    while count < CHAIN:
        if n - pos < 5:
            return (count, proof) if count and pos == n else None
        t, ln = HEADER.unpack_from(buf, pos)
        if not plausible(t, ln, side):
            return None
        proof = proof or t in only
        pos += 1 + ln
        count += 1
        if pos > n:
            return (count, proof) if count > 1 else None
    return count, proof


def find_boundary(buf: bytes, sides: tuple[str, ...], need_proof: bool
                  ) -> tuple[int, str] | None:
    """First position where a chain for one of `sides` begins (with proof of the side, when
    asked: a run of DataRows alone would also frame as frontend Describe messages)."""
    for pos in range(0, len(buf) - 4):
        for side in sides:
            hit = chain_at(buf, pos, side)
            if hit is not None and (hit[1] or not need_proof):
                return pos, side
    return None
