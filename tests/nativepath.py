"""Switching between the native speedups and the pure-Python code inside one test process."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

from pktflow import accel


@contextmanager
def native_as(module: ModuleType | None) -> Iterator[None]:
    """Run with accel.native set to `module` (None: pure Python), then put it back. Consumers
    read accel.native when a pass starts, so a pass begun inside sees the switch."""
    saved = accel.native
    accel.native = module
    try:
        yield
    finally:
        accel.native = saved
