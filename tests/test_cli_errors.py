"""The user's mistakes and damaged inputs, said the same way by every command: an output path
that cannot be written (one line, exit 9, found before the analysis) and a capture cut short
(analyze's line and exit 6 from flow, plot, report and compare too)."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
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


def test_output_where_the_file_system_makes_no_files_says_so() -> None:
    """/proc exists but makes no new files (ENOENT, as for a missing directory): the line must
    not say that /proc does not exist."""
    out = Path("/proc/pktflow-report.html")
    code, _, err = cli("report", str(POOLED), "-o", str(out))
    assert code == ExitCode.OUTPUT
    assert one_line(err) == (f"pktflow: {out}: cannot be written: /proc does not allow new "
                             f"files in it")


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
def unwritable_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory its owner may read and enter but not write to."""
    d = tmp_path / "read-only"
    d.mkdir(mode=0o555)
    try:
        yield d
    finally:
        d.chmod(0o755)


@pytest.mark.parametrize("command,name", WRITERS)
def test_output_without_permission_is_the_users_error(unwritable_dir: Path, command: str,
                                                       name: str) -> None:
    """Root writes anywhere: as root, the command runs without the capability to override
    permissions (still root, the owner of the checkout and the directory, wherever they are)."""
    out = unwritable_dir / name
    argv = [sys.executable, "-m", "pktflow", command, str(POOLED), "-o", str(out)]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        assert setpriv, "setpriv (util-linux) drops the capability"
        argv = [setpriv, "--bounding-set=-dac_override,-dac_read_search", "--", *argv]
    proc = subprocess.run(argv, capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT / "analyzer")})
    assert proc.returncode == ExitCode.OUTPUT, proc.stderr
    assert one_line(proc.stderr) == f"pktflow: {out}: cannot be written: permission denied"
    assert not out.exists()


# -- item 2: a damaged capture -----------------------------------------------------------------

def _cut(src: Path, dest: Path, nbytes: int) -> Path:
    with open(dest, "wb") as fh:
        subprocess.run(["head", "-c", str(nbytes), str(src)], stdout=fh, check=True)
    return dest


@pytest.fixture(scope="module")
def cuts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The pooled seqscan cut inside a packet as pcap, and as pcapng (editcap's)."""
    tmp = tmp_path_factory.mktemp("cuts")
    got = {"pcap": _cut(POOLED, tmp / "cut.pcap", 1_200_000)}
    editcap = shutil.which("editcap")
    assert editcap, "editcap (Debian package wireshark-common, with tshark) converts to pcapng"
    ng = tmp / "whole.pcapng"
    subprocess.run([editcap, "-F", "pcapng", str(POOLED), str(ng)], check=True)
    got["pcapng"] = _cut(ng, tmp / "cut.pcapng", ng.stat().st_size * 2 // 3)
    return got


def _analyze_says(path: Path) -> str:
    code, _, err = cli("analyze", "--format", "json", str(path))
    assert code == ExitCode.DAMAGED
    return one_line(err)


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
@pytest.mark.parametrize("command,name", WRITERS + [("flow", None)])
def test_every_drawing_says_the_capture_is_damaged(tmp_path: Path, cuts: dict[str, Path],
                                                   fmt: str, command: str,
                                                   name: str | None) -> None:
    cut = cuts[fmt]
    said = _analyze_says(cut)
    assert "the report covers what precedes it" in said
    argv = [command, str(cut)] + (["-o", str(tmp_path / name)] if name else [])
    code, out, err = cli(*argv)
    assert code == ExitCode.DAMAGED
    # the drawing is made, from what precedes the damage, and the same line is said
    assert (tmp_path / name).stat().st_size > 0 if name else "│" in out
    assert [x for x in err.splitlines() if not x.startswith("wrote ")] == [said]


def test_compare_says_which_capture_is_damaged(cuts: dict[str, Path]) -> None:
    said = _analyze_says(cuts["pcap"])
    code, out, err = cli("compare", str(DIRECT), str(cuts["pcap"]))
    assert code == ExitCode.DAMAGED and ("slower" in out or "faster" in out)
    assert err.splitlines() == [said]
    code, _, err = cli("compare", str(cuts["pcapng"]), str(cuts["pcap"]), "--format", "json")
    assert code == ExitCode.DAMAGED
    assert err.splitlines() == [_analyze_says(cuts["pcapng"]), said]
