import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Tests run against the source tree even when the package is not installed.
sys.path.insert(0, str(ROOT / "analyzer"))
sys.path.insert(0, str(ROOT / "tests"))
