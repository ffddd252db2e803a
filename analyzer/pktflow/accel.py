"""The optional native speedups, or None: pure Python then, with identical results.
(The per-packet modules compiled from their own source are pktflow.compiled's business.)

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
    from pktflow import compiled
    c = "C speedups" if native is not None else "no C speedups"
    return f"{c}; per-packet modules {compiled.describe()}"
