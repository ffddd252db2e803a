"""The optional native speedups, or None: pure Python then, with identical results.

pktflow._speedups is built from _speedups.c at install time when a C compiler is present.
PKTFLOW_PURE=1 (or tests setting `native = None`) forces the pure-Python code; consumers read
`accel.native` when they start a pass, so switching between passes takes effect.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

native: ModuleType | None
try:
    native = importlib.import_module("pktflow._speedups")
except ImportError:  # installed without a compiler
    native = None
if os.environ.get("PKTFLOW_PURE"):
    native = None


def describe() -> str:
    return "native speedups" if native is not None else "pure Python"
