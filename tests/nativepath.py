"""Switching between the native parts and the pure-Python code inside one test process."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

from pktflow import accel

CORE = accel.core  # as built (None without a compiler)


@contextmanager
def native_as(module: ModuleType | None) -> Iterator[None]:
    """Run with accel.native set to `module` and the native core as built, or (None) with
    neither: pure Python. Consumers read accel when a pass starts, so a pass begun inside sees
    the switch."""
    saved = accel.native, accel.core
    accel.native = module
    accel.core = CORE if module is not None else None
    try:
        yield
    finally:
        accel.native, accel.core = saved


@contextmanager
def core_as(module: ModuleType | None) -> Iterator[None]:
    """Run with the native core `module` (None: the Python pass), the speedups as they are."""
    saved = accel.core
    accel.core = module
    try:
        yield
    finally:
        accel.core = saved
