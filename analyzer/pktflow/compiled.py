"""The modules the build may compile with mypyc, and running their Python source instead.

The build compiles MODULES from their own source when it has a C compiler
(analyzer/pktflow_build.py); Python then imports the compiled module before the .py beside it.
The source runs instead, with identical results, when PKTFLOW_PURE is set or when a source was
changed after its module was compiled (an edited checkout not rebuilt: its edits must not be
ignored). A source newer than its build is checked against the digest the build recorded in
BUILT_FROM: installing a wheel writes the sources after the compiled modules, unchanged.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

# The runtime mypyc builds for the group, a top-level module the compiled modules import.
SHARED = "pktflow_native__mypyc"
# On the per-packet path; module names under pktflow.
MODULES = ("pipeline", "tcp.engine", "tcp.direction", "tcp.connection", "tcp.observe",
           "transfer.analyzer", "transfer.histogram", "transfer.verdict", "transfer.capture_point",
           "tcp.findings", "pgwire.conversation", "pgwire.query", "pgwire.messages",
           "relay.topology", "relay.measure", "tcp.options")
# Written by the build beside this file: "module digest-of-its-source" per line.
BUILT_FROM = "compiled-from.txt"
_HERE = os.path.dirname(os.path.abspath(__file__))


def digest(source: str) -> str:
    """CRC-32 and length: to notice an edit, not to resist one. (hashlib would load OpenSSL,
    4 ms and 4 MB, at every start of a wheel install, whose sources are newer than its build.)"""
    import zlib

    with open(source, "rb") as f:
        data = f.read()
    return f"crc32:{zlib.crc32(data):08x}:{len(data)}"


def _built_from() -> dict[str, str]:
    try:
        with open(os.path.join(_HERE, BUILT_FROM), encoding="ascii") as f:
            return dict(line.split() for line in f if line.strip())
    except (OSError, ValueError):
        return {}


def _paths(module: str) -> tuple[str, list[str]]:
    """The module's .py and the compiled files beside it."""
    base = os.path.join(_HERE, *module.split("."))
    folder, stem = os.path.split(base)
    found = [os.path.join(folder, f) for f in os.listdir(folder)
             if f.startswith(stem + ".")
             and any(f.endswith(s) for s in importlib.machinery.EXTENSION_SUFFIXES)]
    return base + ".py", found


def why_source() -> str | None:
    """Why the Python source runs instead of compiled modules, or None when compiled ones do."""
    if os.environ.get("PKTFLOW_PURE"):
        return "PKTFLOW_PURE"
    recorded: dict[str, str] | None = None  # read only when a source is newer than its build
    for module in MODULES:
        source, built = _paths(module)
        if not built:
            return "not compiled"
        if os.path.exists(source) and os.path.getmtime(source) > max(map(os.path.getmtime, built)):
            if recorded is None:
                recorded = _built_from()
            if recorded.get(module) != digest(source):
                return f"{module}.py is newer than its build: rerun bootstrap.sh"
    # a partial build must not break imports (importlib.util would cost 4 ms to import)
    if importlib.machinery.PathFinder.find_spec(SHARED) is None:
        return f"the compiled modules' runtime ({SHARED}) is missing"
    return None


class _SourceFirst:
    """A meta path finder (only find_spec is needed; importlib.abc costs 13 ms to import):
    finds MODULES as their .py files, ahead of the compiled ones."""

    names = {f"pktflow.{m}": m for m in MODULES}

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        module = self.names.get(fullname)
        if module is None:
            return None
        import importlib.util  # only when the source runs

        return importlib.util.spec_from_file_location(fullname, _paths(module)[0])


REASON = why_source()
if REASON is not None and not any(isinstance(f, _SourceFirst) for f in sys.meta_path):
    sys.meta_path.insert(0, _SourceFirst())


def describe() -> str:
    return "compiled" if REASON is None else f"pure Python ({REASON})"
