"""json.dumps's text for report values, byte for byte, faster.

With an indent, json.dumps runs the pure-Python encoder (a generator step per value: 8 s of
the 20,000 connections of a pgbench -C storm), and even its C encoder, compact, took 1.8 s
where the binding's json_text takes 0.8 s. So both layouts are written by json_text, which
walks the values once and leaves every choice of how a value looks to Python's rules (float
and int repr, json's string escaping), byte for byte (tests/test_jsontext.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from pktflow._core import json_text

# pieces() walks a list longer than this item by item, so a writer need not hold a large
# value's text at once (a relay's 20,000 matched queries)
PIECE_ITEMS = 256
_CONTAINERS = (dict, list, tuple)


def _key(key: Any) -> str:
    """A dict key as json.dumps writes it: int, float, bool and None keys become strings."""
    return json_text(key) if type(key) is str else json.dumps({key: None})[1:-7]


def compact(value: Any) -> str:
    """json.dumps(value, separators=(",", ":"))."""
    return json_text(value)


def indented(value: Any, depth: int = 0) -> str:
    """value as json.dumps(value, indent=2) writes it, every line after the first indented
    2 * depth spaces more (value nested `depth` levels inside an indented document)."""
    return json_text(value, depth)


def pieces(value: Any, depth: int = 0) -> Iterator[str]:
    """indented(value, depth) in pieces: dicts and long lists are walked item by item, so no
    piece is larger than a short list or a value that holds no long list."""
    if isinstance(value, dict):
        items: Any = value.items()
        opening, closing = "{", "}"
    elif isinstance(value, (list, tuple)) and len(value) > PIECE_ITEMS:
        items = ((None, v) for v in value)
        opening, closing = "[", "]"
    else:
        yield json_text(value, depth)
        return
    if not value:
        yield opening + closing
        return
    inner = "\n" + "  " * (depth + 1)
    sep = opening + inner  # before the first item, then between items
    for k, v in items:
        yield sep if k is None else sep + _key(k) + ": "
        sep = "," + inner
        if isinstance(v, _CONTAINERS):
            yield from pieces(v, depth + 1)
        else:
            yield json_text(v, depth + 1)
    yield "\n" + "  " * depth + closing
