"""The user's mistakes, said the same way by every command: an output path that cannot be
written is one line, exit 9, found before the analysis."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from pktflow.cli import Env, main
from pktflow.errors import ExitCode

ROOT = Path(__file__).resolve().parent.parent
DIRECT = ROOT / "captures" / "seqscan-10k-direct-loopback.pcap"
POOLED = ROOT / "captures" / "seqscan-10k-pgbouncer-loopback.pcap"

# each command that writes a file, and a name it takes
WRITERS = [("report", "r.html"), ("plot", "p.png"), ("flow", "f.txt")]


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Env(stdout=out, stderr=err, width=120))
    return code, out.getvalue(), err.getvalue()


def one_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err and "internal error" not in err, err
    return lines[0]


# -- item 1: the output path ------------------------------------------------------------------

@pytest.mark.parametrize("command,name", WRITERS)
def test_output_in_a_missing_directory_is_the_users_error(tmp_path: Path, command: str,
                                                          name: str) -> None:
    out = tmp_path / "no-such-dir" / name
    code, _, err = cli(command, str(POOLED), "-o", str(out))
    assert code == ExitCode.OUTPUT
    assert one_line(err) == (f"pktflow: {out}: cannot be written: the directory "
                             f"{out.parent} does not exist")


@pytest.mark.parametrize("command,name", WRITERS)
def test_output_naming_a_directory_is_the_users_error(tmp_path: Path, command: str,
                                                      name: str) -> None:
    out = tmp_path / name
    out.mkdir()
    code, _, err = cli(command, str(POOLED), "-o", str(out))
    assert code == ExitCode.OUTPUT
    assert one_line(err) == (f"pktflow: {out}: cannot be written: it is a directory (name a "
                             f"file in it)")
    assert not any(out.iterdir())


@pytest.mark.parametrize("command,name", WRITERS)
def test_output_is_checked_before_the_analysis(tmp_path: Path, command: str, name: str) -> None:
    """A bad output with a capture that does not exist: the output is what is said, so a long
    analysis would not have run first only to fail at its end."""
    out = tmp_path / "no-such-dir" / name
    code, _, err = cli(command, str(tmp_path / "missing.pcap"), "-o", str(out))
    assert code == ExitCode.OUTPUT and str(out) in one_line(err)


@pytest.mark.parametrize("command,name", WRITERS)
def test_a_good_output_is_written_and_the_check_leaves_nothing_behind(
        tmp_path: Path, command: str, name: str) -> None:
    out = tmp_path / name
    code, _, err = cli(command, str(POOLED), "--query", "c1#0", "-o", str(out))
    assert code == 0, err
    assert out.stat().st_size > 0
    # a selection that misses: the usage error, and no empty file left by the check
    missed = tmp_path / f"missed-{name}"
    code, _, err = cli(command, str(POOLED), "--query", "c9#0", "-o", str(missed))
    assert code == ExitCode.USAGE and not missed.exists()


@pytest.fixture
def unwritable_dir() -> Iterator[Path]:
    """A directory anyone may enter and no one but root may write to."""
    d = Path(tempfile.mkdtemp(prefix="pktflow-ro-"))
    d.chmod(0o555)
    try:
        yield d
    finally:
        d.chmod(0o755)
        shutil.rmtree(d)


@pytest.mark.parametrize("command,name", WRITERS)
def test_output_without_permission_is_the_users_error(unwritable_dir: Path, command: str,
                                                       name: str) -> None:
    """Root writes anywhere: as root, the command runs as the unprivileged user `nobody`."""
    out = unwritable_dir / name
    argv = [sys.executable, "-m", "pktflow", command, str(POOLED), "-o", str(out)]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        assert setpriv, "setpriv (util-linux) runs the command as nobody"
        argv = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=unwritable_dir,
                          env={"PATH": os.environ["PATH"], "HOME": str(unwritable_dir),
                               "PYTHONPATH": str(ROOT / "analyzer")})
    assert proc.returncode == ExitCode.OUTPUT, proc.stderr
    assert one_line(proc.stderr) == f"pktflow: {out}: cannot be written: permission denied"
