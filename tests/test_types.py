"""The code is typed, and mypy agrees: a type error is a test failure, not a style note."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_is_clean() -> None:
    pytest.importorskip("mypy", reason="mypy is in the test extras: pip install -e '.[test]'")
    res = subprocess.run([sys.executable, "-m", "mypy", "analyzer/pktflow",
                          "--ignore-missing-imports", "--no-error-summary"],
                         cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-3000:]
