"""json.dumps's text for report values, byte for byte, faster.

Compact text is json.dumps's own. With an indent, json.dumps runs the pure-Python
encoder (a generator step per value, 8 s for the 20,000 connections of that capture), so
pieces() walks only the containers that hold containers and writes their plain values itself;
a container of plain values only (most of a report: counters, histograms, a query's fields) is
encoded in one call of the C encoder, whose item separator carries the newline and the
indentation.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from functools import cache
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any


_COMPACT = (",", ":")
# pieces() hands out text in pieces at most this long where it can (a container larger than
# that is walked, its items handed out one by one)
PIECE = 1 << 16
_CONTAINERS = (dict, list, tuple)
_CONSTANTS = {None: "null", True: "true", False: "false"}
_INF = float("inf")


@cache
def _flat_encoder(depth: int) -> Callable[[Any], str]:
    """Encodes a container of plain values at `depth`, without its brackets' line breaks."""
    separator = ",\n" + "  " * (depth + 1)
    if c_make_encoder is None:  # a Python without the C accelerator
        return lambda value: json.dumps(value, separators=(separator, ": "))
    encode = c_make_encoder(None, None, encode_basestring_ascii, None, ": ", separator, False,
                            False, True)
    return lambda value: "".join(encode(value, 0))


def _plain(value: Any) -> str:  # a document that is one plain value
    """A value that is not a container, as json.dumps writes it."""
    kind = type(value)
    if kind is str:
        return str(encode_basestring_ascii(value))
    if kind is int:
        return int.__repr__(value)
    if kind is float:
        if value != value:
            return "NaN"
        if value in (_INF, -_INF):
            return "Infinity" if value > 0 else "-Infinity"
        return float.__repr__(value)
    if kind is bool or value is None:
        return _CONSTANTS[value]
    return json.dumps(value)  # subclasses and the rare rest: as json.dumps decides


def _key(key: Any) -> str:
    """A dict key as json.dumps writes it: int, float, bool and None keys become strings."""
    if type(key) is str:
        return str(encode_basestring_ascii(key))
    return json.dumps({key: None})[1:-7]


def compact(value: Any) -> str:
    """json.dumps(value, separators=(",", ":"))."""
    return json.dumps(value, separators=_COMPACT)


def indented(value: Any, depth: int = 0) -> str:
    """value as json.dumps(value, indent=2) writes it, every line after the first indented
    2 * depth spaces more (value nested `depth` levels inside an indented document)."""
    return "".join(pieces(value, depth))


def pieces(value: Any, depth: int = 0) -> Iterator[str]:
    """indented(value, depth) in pieces, none larger than PIECE or a container of plain values:
    a writer need not hold a large value's text at once (a relay's 20,000 matched queries)."""
    if isinstance(value, dict):
        opening, closing = "{", "}"
    elif isinstance(value, (list, tuple)):
        opening, closing = "[", "]"
    else:
        yield _plain(value)
        return
    if not value:
        yield opening + closing
        return
    flat = _flat_encoder(depth)
    inner = "\n" + "  " * (depth + 1)
    sep = opening + inner  # before the first item, then between items
    if isinstance(value, dict):
        # runs of plain values in one C call each; a nested container by recursion
        run: dict[Any, Any] = {}
        for k, v in value.items():
            if isinstance(v, _CONTAINERS):
                if run:
                    yield sep + flat(run)[1:-1]
                    sep, run = "," + inner, {}
                yield sep + _key(k) + ": "
                sep = "," + inner
                yield from pieces(v, depth + 1)
            else:
                run[k] = v
        if run:
            yield sep + flat(run)[1:-1]
    else:
        items: list[Any] = []
        for v in value:
            if isinstance(v, _CONTAINERS):
                if items:
                    yield sep + flat(items)[1:-1]
                    sep, items = "," + inner, []
                yield sep
                sep = "," + inner
                yield from pieces(v, depth + 1)
            else:
                items.append(v)
        if items:
            yield sep + flat(items)[1:-1]
    yield "\n" + "  " * depth + closing
