"""The optional native parts, or None: pure Python then, with identical results.
(The per-packet modules compiled from their own source are pktflow.compiled's business.)

- `native`: pktflow._speedups, built from _speedups.c: record scanning, header decoding,
  message runs, JSON text.
- `core`: pktflow._core, built from native/*.c: the whole analysis pass in C, each
  connection's report written as JSON text (pipeline.analyze takes it when reports are
  stored, as every command keeps them; the Python pass is its twin and reference).

Both are built at install time when a C compiler is present. PKTFLOW_PURE=1 (or tests setting
them to None) forces the pure-Python code, PKTFLOW_NO_CORE=1 the Python pass alone; consumers
read them when they start a pass, so switching between passes takes effect.
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
core: ModuleType | None
try:
    core = importlib.import_module("pktflow._core")
except ImportError:
    core = None
if os.environ.get("PKTFLOW_PURE"):
    native = core = None
if os.environ.get("PKTFLOW_NO_CORE"):
    core = None


def describe() -> str:
    from pktflow import compiled
    c = "C speedups" if native is not None else "no C speedups"
    n = "native core" if core is not None else "no native core"
    return f"{c}; {n}; per-packet modules {compiled.describe()}"
