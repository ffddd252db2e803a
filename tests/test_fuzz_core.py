"""The Rust core's coverage-guided fuzz targets (analyzer/core/fuzz, cargo-fuzz under
AddressSanitizer): `capture` (the reader alone), `pass` (reader, TCP engine, PostgreSQL decoder,
transfer, then the diagram's pass) and `pgwire` (the decoder on scripted feeds and gaps). Each
runs for a bounded time from seeds made of the repository's captures (analyzer/core/fuzz/seed.py)
and fails on a crash: a panic, a broken check of its facts, a sanitizer report or a hang.

Needs a nightly toolchain and cargo-fuzz, skipped otherwise. The inputs that once crashed a
target are kept in tests/regressions/ and replayed on stable by the core's own
tests/regressions.rs (`cargo test`), so that part never needs nightly.

PKTFLOW_FUZZ_CORE_SECONDS=600 searches longer (per target), with fresh randomness.
"""

from __future__ import annotations

import base64
import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "analyzer" / "core"
FUZZ = CORE / "fuzz"
TARGETS = ("capture", "pass", "pgwire")
CARGO_BIN = Path.home() / ".cargo" / "bin"
CARGO = shutil.which("cargo") or next(
    (str(p) for p in [CARGO_BIN / "cargo"] if p.exists()), None)

# Bounded: 30 s of fuzzing per target (and at most RUNS inputs), after a build of a few minutes
# the first time. Derandomized (a fixed libFuzzer seed) unless a longer search is asked for.
_LONG = os.environ.get("PKTFLOW_FUZZ_CORE_SECONDS")
SECONDS = int(_LONG or 30)
RUNS = 2_000_000_000 if _LONG else 200_000
PER_INPUT_S = 20  # libFuzzer's -timeout: far above any input (milliseconds); catches hangs
NEEDS = ("cargo-fuzz needs a nightly toolchain: "
         "rustup toolchain install nightly && cargo install cargo-fuzz")


def _env() -> dict[str, str]:
    # rustup's proxies and cargo-fuzz live in ~/.cargo/bin, which CI's PATH may lack
    return dict(os.environ, CARGO_TERM_COLOR="never",
                PATH=f"{CARGO_BIN}{os.pathsep}{os.environ.get('PATH', '')}")


def _cargo(*args: str, cwd: Path = CORE, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CARGO or "cargo", *args], cwd=cwd, capture_output=True, text=True,
                          env=_env(), timeout=timeout, stdin=subprocess.DEVNULL)


def _why_not() -> str | None:
    """Why cargo-fuzz cannot run here, or None when it can."""
    if CARGO is None:
        return f"cargo is not installed; {NEEDS}"
    try:
        nightly = _cargo("+nightly", "--version")
        fuzz = _cargo("+nightly", "fuzz", "--help")
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{e}; {NEEDS}"
    if nightly.returncode != 0 or "nightly" not in nightly.stdout:
        return f"no nightly toolchain; {NEEDS}"
    if fuzz.returncode != 0:
        return f"cargo-fuzz is not installed; {NEEDS}"
    return None


WHY_NOT = _why_not()
needs_fuzz = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")


@pytest.fixture(scope="module")
def built() -> None:
    res = _cargo("+nightly", "fuzz", "build", timeout=3600)
    assert res.returncode == 0, res.stderr[-4000:]


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = importlib.util.spec_from_file_location("fuzz_seed", FUZZ / "seed.py")
    assert spec and spec.loader
    seed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(seed)
    out = tmp_path_factory.mktemp("fuzz-seeds")
    seed.main(out)
    return out


def _crash_report(artifacts: Path, output: str) -> str:
    lines = [output[-6000:]]
    for f in sorted(artifacts.iterdir()):
        data = f.read_bytes()
        shown = base64.b64encode(data).decode() if len(data) <= 16384 else "(over 16 KiB)"
        lines.append(f"{f.name}: {len(data)} bytes, base64: {shown}")
    lines.append("keep the input in tests/regressions/ (tests/regressions.rs replays it), fix the "
                 "core, and reproduce with: cargo +nightly fuzz run <target> <file>")
    return "\n".join(lines)


@needs_fuzz
@pytest.mark.parametrize("target", TARGETS)
def test_a_bounded_fuzz_run_finds_no_crash(target: str, built: None, seeds: Path,
                                           tmp_path: Path) -> None:
    corpus, artifacts = tmp_path / "corpus", tmp_path / "artifacts"
    corpus.mkdir()
    artifacts.mkdir()
    flags = [f"-max_total_time={SECONDS}", f"-runs={RUNS}", f"-timeout={PER_INPUT_S}",
             f"-artifact_prefix={artifacts}/", "-print_final_stats=1"]
    if not _LONG:
        flags.append("-seed=1")
    res = _cargo("+nightly", "fuzz", "run", target, str(corpus), str(seeds / target), "--",
                 *flags, timeout=SECONDS + 600)
    output = res.stdout + res.stderr
    assert res.returncode == 0 and not any(artifacts.iterdir()), _crash_report(artifacts, output)
    assert "stat::number_of_executed_units" in output, output[-4000:]


@pytest.mark.skipif(CARGO is None, reason="cargo is not installed")
def test_the_fuzz_workspace_is_rustfmt_clean() -> None:
    # its checks (src/) are compiled into the core's tests too, so clippy covers them there
    res = _cargo("fmt", "--check", cwd=FUZZ)
    if res.returncode != 0 and "rustfmt" in res.stderr and "not installed" in res.stderr:
        pytest.skip("rustfmt is not installed")
    assert res.returncode == 0, res.stdout[-4000:]
