import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Tests run against the source tree even when the package is not installed.
sys.path.insert(0, str(ROOT / "analyzer"))
sys.path.insert(0, str(ROOT / "tests"))


@pytest.fixture(scope="module", params=["native", "pure"])
def both_paths(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run a module's tests with the native speedups and again with the pure-Python code."""
    from nativepath import native_as

    from pktflow import accel
    if request.param == "native" and accel.native is None:
        pytest.skip("pktflow._speedups is not built (no C compiler at install time)")
    with native_as(accel.native if request.param == "native" else None):
        yield request.param
