"""The Rust core on its own: its unit tests pass without Python, and it is clippy and rustfmt
clean (a lint is a failure here, as the mypy check is for the Python)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WORKSPACE = ROOT / "analyzer"
CARGO = shutil.which("cargo") or next(
    (str(p) for p in [Path.home() / ".cargo" / "bin" / "cargo"] if p.exists()), None)

pytestmark = pytest.mark.skipif(CARGO is None, reason="cargo is not installed "
                                "(analyzer/bootstrap.sh installs it to build the core)")


def cargo(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, CARGO_TERM_COLOR="never")
    return subprocess.run([CARGO or "cargo", *args], cwd=WORKSPACE, capture_output=True,
                          text=True, env=env, timeout=1800)


def _has(component: str) -> bool:
    return cargo(component, "--version").returncode == 0


def test_cargo_test_of_the_core_alone() -> None:
    res = cargo("test", "-q", "-p", "pktflow-core")
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    assert "test result: ok" in res.stdout


@pytest.mark.skipif(not CARGO or not _has("clippy"), reason="clippy is not installed")
def test_clippy_is_clean() -> None:
    res = cargo("clippy", "-q", "--workspace", "--all-targets", "--", "-D", "warnings")
    assert res.returncode == 0, res.stderr[-4000:]


@pytest.mark.skipif(not CARGO or not _has("fmt"), reason="rustfmt is not installed")
def test_rustfmt_is_clean() -> None:
    res = cargo("fmt", "--all", "--check")
    assert res.returncode == 0, res.stdout[-4000:]
