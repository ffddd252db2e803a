"""`bash analyzer/bootstrap.sh` on a fresh checkout says what it is doing while the core
builds, instead of a silent minute or more: run for real until cargo compiles its first crates,
then stopped (the whole build is what CI's fresh clone does)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEADLINE_S = 900  # a cold build on a busy 2-core machine; the lines come long before


def _checkout(dest: Path) -> Path:
    """The tracked files as they are in this working tree (its edits too), without the
    captures and tests the build does not read, and without .venv or a target directory."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in files:
        if not name or name.startswith(("captures/", "tests/", "bench/")):
            continue
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def test_bootstrap_says_what_it_does_while_the_core_builds(tmp_path: Path) -> None:
    tree = _checkout(tmp_path / "pktflow")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    env["TMPDIR"] = str(tmp_path)
    proc = subprocess.Popen(["bash", "analyzer/bootstrap.sh"], cwd=tree, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    said: list[str] = []
    started = time.monotonic()
    building_on = False
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            said.append(line.rstrip("\n"))
            if line.startswith("bootstrap:   compiling "):
                # said while cargo works, not all at once when it is done: 26 crates more
                # take far longer than 5 s, and the end of bootstrap far less
                time.sleep(5)
                building_on = proc.poll() is None
                break
            if time.monotonic() - started > DEADLINE_S:
                break
    finally:
        # bootstrap, pip, maturin, cargo and rustc: the session started here, stopped by its id
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=20)
                break
            except subprocess.TimeoutExpired:
                continue
    assert said[0].startswith("bootstrap: making the virtual environment .venv (Python 3."), said
    building = [i for i, s in enumerate(said) if s.startswith("bootstrap: building pktflow's "
                                                              "core (Rust, analyzer/core)")]
    compiling = [i for i, s in enumerate(said) if s.startswith("bootstrap:   compiling ")]
    # the build is announced, then each crate is named as cargo compiles it
    assert building and compiling and building[0] < compiling[0], said
    assert said[compiling[0]].endswith("(crate 1)") and building_on
