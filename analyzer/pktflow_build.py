"""pktflow's build backend: setuptools, plus the compiled hot path when a C compiler is there.

Three kinds of extension, all optional (a failed compile leaves the Python code in use, with
identical results; PKTFLOW_PURE=1 forces pure Python at run time):
- pktflow._speedups, hand-written C: record scanning, header decoding, message runs, and
  writing JSON text;
- pktflow._core, hand-written C (native/): the whole analysis pass, each connection's report
  written as JSON text; the Python pass is its twin;
- the per-packet modules (TCP engine, transfer analysis, PostgreSQL decoder) compiled from
  their own Python source by mypyc, which turns their typed classes into C structs.
Everything else is setuptools' own backend, configured by pyproject.toml.
"""

from __future__ import annotations

import glob
import os
import sys
from typing import Any

from setuptools import Extension, setup
from setuptools import build_meta as _meta
from setuptools.command.build_ext import build_ext

SRC = "analyzer"
# Commands that only compute metadata: no need to generate C for them.
_METADATA_ONLY = {"egg_info", "dist_info"}


def _extensions() -> list[Any]:
    native = f"{SRC}/pktflow/"
    core = sorted(glob.glob(native + "native/*.c"))
    exts: list[Any] = [Extension("pktflow._speedups",
                                 [native + "_speedups.c", native + "_jsontext.c"],
                                 depends=[native + "_jsontext.h", native + "native/decode.h"],
                                 optional=True, extra_compile_args=["-O2"]),
                       Extension("pktflow._core", core,
                                 depends=sorted(glob.glob(native + "native/*.h")),
                                 optional=True, extra_compile_args=["-O2"])]
    if _METADATA_ONLY.intersection(sys.argv) or os.environ.get("PKTFLOW_NO_MYPYC"):
        return exts
    try:
        from mypyc.build import mypycify

        from pktflow.compiled import MODULES, SHARED  # the code that honours them
        files = ["pktflow/" + m.replace(".", "/") + ".py" for m in MODULES]
        here = os.getcwd()
        os.chdir(SRC)  # module names come from the package layout under analyzer/
        try:
            compiled = mypycify(["--ignore-missing-imports", *files], opt_level="3",
                                group_name=SHARED.removesuffix("__mypyc"),
                                target_dir=os.path.join(here, "build", "mypyc"))
        finally:
            os.chdir(here)
    except (Exception, SystemExit) as exc:  # mypy missing or refusing the code: pure Python
        print(f"pktflow: not compiling with mypyc ({exc!r}); pure Python it is", file=sys.stderr)
        return exts
    for ext in compiled:  # their C sources are absolute paths under target_dir
        ext.optional = True
    return exts + compiled


class _BuildExt(build_ext):
    """Once the compiled modules' runtime is built, records the sources it was built from
    beside them (pktflow.compiled.BUILT_FROM); a failed optional build records nothing, and
    the record of the last good build stays with the modules it built."""

    def build_extension(self, ext: Any) -> None:
        super().build_extension(ext)
        from pktflow.compiled import MODULES, SHARED, digest

        if ext.name == SHARED:
            sources = {m: os.path.join(SRC, "pktflow", *m.split(".")) + ".py" for m in MODULES}
            with open(self._built_from(self.build_lib), "w", encoding="ascii") as f:
                f.writelines(f"{m} {digest(path)}\n" for m, path in sources.items())

    def copy_extensions_to_source(self) -> None:  # an editable install's build
        super().copy_extensions_to_source()
        if os.path.exists(self._built_from(self.build_lib)):
            self.copy_file(self._built_from(self.build_lib), self._built_from(SRC))

    @staticmethod
    def _built_from(root: str) -> str:
        from pktflow.compiled import BUILT_FROM

        return os.path.join(root, "pktflow", BUILT_FROM)


class _Backend(_meta._BuildMetaBackend):
    def run_setup(self, setup_script: str = "setup.py") -> None:
        setup(ext_modules=_extensions(), cmdclass={"build_ext": _BuildExt})


_BACKEND = _Backend()
get_requires_for_build_wheel = _BACKEND.get_requires_for_build_wheel
get_requires_for_build_sdist = _BACKEND.get_requires_for_build_sdist
get_requires_for_build_editable = _BACKEND.get_requires_for_build_editable
prepare_metadata_for_build_wheel = _BACKEND.prepare_metadata_for_build_wheel
prepare_metadata_for_build_editable = _BACKEND.prepare_metadata_for_build_editable
build_wheel = _BACKEND.build_wheel
build_sdist = _BACKEND.build_sdist
build_editable = _BACKEND.build_editable
