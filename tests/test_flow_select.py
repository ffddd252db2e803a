"""What `flow`, `plot` and `report` draw: a diagram is titled by what it shows, and a selection
with no packets is an error (exit 2, one line naming the file and the selection), not an
empty diagram."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from pktflow.cli import Env, main
from pktflow.errors import ExitCode

ROOT = Path(__file__).resolve().parent.parent
POOLED = ROOT / "captures" / "seqscan-10k-pgbouncer-loopback.pcap"


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Env(stdout=out, stderr=err, width=120))
    return code, out.getvalue(), err.getvalue()


def title(*argv: str) -> str:
    code, out, err = cli("flow", str(POOLED), *argv, "--format", "json")
    assert code == 0, err
    return str(json.loads(out)["title"])


def test_titles_say_what_is_drawn() -> None:
    assert title("--from", "0.05", "--to", "0.07") == "every connection, 0.05 s to 0.07 s"
    assert title("--from", "0.05") == "every connection, from 0.05 s"
    assert title("--to", "0.07") == "every connection, up to 0.07 s"
    assert title("--all") == "whole capture"
    assert title("--connection", "c2", "--connection", "c1") == "connections c1, c2"
    assert title("--connection", "c1", "--from", "0.05", "--to", "0.07") == \
        "connection c1, 0.05 s to 0.07 s"
    code, out, _ = cli("flow", str(POOLED), "--from", "0.05", "--to", "0.07")
    assert code == 0 and out.splitlines()[0] == "every connection, 0.05 s to 0.07 s"
    assert "whole capture" not in out


@pytest.mark.parametrize(("argv", "selection"), [
    (["--connection", "c1", "--from", "0.06", "--to", "0.0601"],
     "connection c1, 0.06 s to 0.0601 s"),
    (["--from", "500"], "every connection, from 500 s"),
])
@pytest.mark.parametrize("command", ["flow", "plot", "report"])
def test_an_empty_selection_is_an_error(tmp_path: Path, command: str, argv: list[str],
                                        selection: str) -> None:
    if command == "plot":
        pytest.importorskip("matplotlib", reason="plots need matplotlib")
    suffix = {"flow": None, "plot": "svg", "report": "html"}[command]
    extra = ["-o", str(tmp_path / f"x.{suffix}")] if suffix else []
    code, out, err = cli(command, str(POOLED), *argv, *extra)
    assert code == ExitCode.USAGE
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"pktflow: {POOLED}: no packets in the selection ({selection})")
    assert not list(tmp_path.iterdir())  # nothing written
