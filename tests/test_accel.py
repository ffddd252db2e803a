"""The native speedups (pktflow._speedups) against their pure-Python twins: same packets, same
stats, same damage reports, same reports, on every shipped capture and on crafted and damaged
input. Other test modules run both paths through the `both_paths` fixture (conftest.py).
The per-packet modules compiled by mypyc (pktflow.compiled) against their own source: the
same reports, run in two processes."""

from __future__ import annotations

import importlib.machinery
import json
import os
import random
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from craft import (LINKTYPE_ETHERNET, LINKTYPE_NULL, LINKTYPE_RAW, LINKTYPE_SLL, LINKTYPE_SLL2,
                   frame, tcp_segment, write_pcap, write_pcapng)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nativepath import native_as

from pktflow import accel
from pktflow.capture.reader import open_capture
from pktflow.pgwire import framing
from pktflow.pgwire.conversation import Conversation
from pktflow.pipeline import analyze

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = sorted((ROOT / "captures").glob("*.pcap")) + sorted(
    (ROOT / "tests" / "regressions").glob("*.pcap"))
NATIVE = accel.native

needs_native = pytest.mark.skipif(
    NATIVE is None, reason="pktflow._speedups is not built (no C compiler at install time): "
                           "only the pure-Python path exists to test")


def _with(native: Any, fn: Any, *args: Any) -> Any:
    with native_as(native):
        return fn(*args)


def _read(path: Path) -> tuple[list[tuple], dict[str, Any]]:  # type: ignore[type-arg]
    with open_capture(str(path)) as cap:
        packets = list(cap)
        return packets, vars(cap.stats)


def both_read(path: Path) -> None:
    native = _with(NATIVE, _read, path)
    pure = _with(None, _read, path)
    assert native[1] == pure[1]
    assert len(native[0]) == len(pure[0])
    for a, b in zip(native[0], pure[0]):
        assert a == b, (a[0], path)
        assert [type(x) for x in a] == [type(x) for x in b]


@needs_native
@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_same_packets_and_report_on_every_capture(path: Path) -> None:
    both_read(path)
    native = _with(NATIVE, analyze, str(path))
    pure = _with(None, analyze, str(path))
    assert json.dumps(native, sort_keys=True) == json.dumps(pure, sort_keys=True)


def _variety() -> Iterator[tuple[int, bytes]]:
    """Frames of every link type and IP shape the decoder knows, and some it must refuse."""
    seg = tcp_segment(b"Q\x00\x00\x00\x0dSELECT 1\x00", options=[("MSS", 1460), ("NOP", None)])
    v6 = tcp_segment(b"x" * 40, v6=True)
    v6ext = tcp_segment(b"y" * 7, v6=True, ext=True)
    for lt in (LINKTYPE_ETHERNET, LINKTYPE_SLL, LINKTYPE_SLL2, LINKTYPE_NULL, LINKTYPE_RAW):
        for ip in (seg, v6, v6ext):
            yield lt, frame(ip, lt)
    yield LINKTYPE_ETHERNET, frame(seg, LINKTYPE_ETHERNET, vlan=1)
    yield LINKTYPE_ETHERNET, frame(seg, LINKTYPE_ETHERNET, vlan=2, pad_to=200)
    frag = bytearray(seg)
    frag[6] |= 0x20  # more fragments
    yield LINKTYPE_RAW, bytes(frag)
    udp = bytearray(seg)
    udp[9] = 17
    yield LINKTYPE_RAW, bytes(udp)
    yield LINKTYPE_RAW, seg[:30]  # TCP header cut
    yield LINKTYPE_RAW, b"\x45" + seg[1:19]  # IP header cut
    yield LINKTYPE_ETHERNET, b"\x00" * 10  # shorter than Ethernet
    yield LINKTYPE_ETHERNET, frame(seg, LINKTYPE_ETHERNET)[:12] + b"\x08\x06" + b"\x00" * 28


@needs_native
def test_decode_of_every_frame_shape() -> None:
    from pktflow.capture.ip import decode
    from pktflow.capture.link import DECODERS
    shapes = list(_variety())
    rng = random.Random(7)
    for lt, data in shapes + [(lt, bytes(rng.getrandbits(8) for _ in range(rng.randrange(80))))
                              for lt, _ in shapes for _ in range(20)] + [(999, b"\x45" * 60)]:
        link = DECODERS.get(lt)
        where = link(data) if link is not None else None
        pure = 1 if where is None else decode(data, where[0], where[1], 5, 1.5)
        assert NATIVE.decode(lt, data, 5, 1.5) == pure, (lt, data.hex())


@needs_native
@pytest.mark.parametrize("nano", [False, True])
@pytest.mark.parametrize("big", [False, True])
def test_crafted_pcaps_and_pcapng(tmp_path: Path, nano: bool, big: bool) -> None:
    shapes = list(_variety())
    for lt in {lt for lt, _ in shapes}:
        frames = [f for t, f in shapes if t == lt]
        both_read(write_pcap(tmp_path / f"{lt}.pcap", frames, lt, nanosecond=nano,
                             big_endian=big, snaplen=60, orig_lens=[len(f) + 3 for f in frames]))
    lts = sorted({lt for lt, _ in shapes})
    both_read(write_pcapng(tmp_path / "all.pcapng", [(lts.index(lt), f) for lt, f in shapes],
                           lts, tsresol=9 if nano else None))


@needs_native
def test_every_cut_reports_the_same_damage(tmp_path: Path) -> None:
    data = (ROOT / "captures" / "extended-direct-loopback.pcap").read_bytes()
    p = tmp_path / "cut.pcap"
    for cut in [*range(4, 3000), *range(3000, len(data), 101)]:
        p.write_bytes(data[:cut])
        both_read(p)


@needs_native
def test_absurd_record_length_and_random_tails(tmp_path: Path) -> None:
    data = (ROOT / "captures" / "error-direct-loopback.pcap").read_bytes()
    rng = random.Random(11)
    p = tmp_path / "bad.pcap"
    for i in range(200):
        blob = bytearray(data)
        at = rng.randrange(24, len(blob))
        blob[at:at + 4] = struct.pack("<I", rng.choice([0, 1, 70000, 1 << 19, rng.getrandbits(32)]))
        p.write_bytes(bytes(blob))
        both_read(p)


# -- message runs ------------------------------------------------------------------------

def _message(t: bytes, body: bytes) -> bytes:
    return t + struct.pack(">I", len(body) + 4) + body


@needs_native
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=st.lists(st.integers(0, 300), min_size=1, max_size=40),
       bad=st.one_of(st.none(), st.integers(0, 3), st.just(0xFFFFFFFF)),
       cuts=st.lists(st.integers(1, 400), max_size=12), copy=st.booleans())
def test_message_runs_split_anywhere(sizes: list[int], bad: int | None, cuts: list[int],
                                     copy: bool) -> None:
    t = b"d" if copy else b"D"
    stream = b"".join(_message(t, bytes(n)) for n in sizes)
    if bad is not None:
        stream += t + struct.pack(">I", bad) + b"\x00" * 8
    stream += _message(b"C", b"SELECT 1\x00") + _message(b"Z", b"I")

    startup_body = struct.pack(">I", 196608) + b"user\x00u\x00\x00"
    front = struct.pack(">I", len(startup_body) + 4) + startup_body + \
        _message(b"Q", b"SELECT 1\x00")
    back = _message(b"R", struct.pack(">I", 0)) + _message(b"Z", b"I") + stream

    def run() -> dict[str, Any]:
        conv = Conversation("c1", start_seen=lambda d: True)
        conv.feed(0, front, 0, 1, 0.001)
        pos, frame = 0, 2
        for c in sorted(set(cuts)) + [len(back)]:
            if pos < c <= len(back):
                conv.feed(1, back[pos:c], pos, frame, frame * 0.001)
                pos, frame = c, frame + 1
        conv.finish()
        return conv.to_json()

    assert _with(NATIVE, run) == _with(None, run)


@pytest.mark.parametrize("native", [True, False], ids=["native", "pure"])
def test_message_run_contract(native: bool) -> None:
    if native and NATIVE is None:
        pytest.skip("pktflow._speedups is not built (no C compiler at install time)")
    message_run = NATIVE.message_run if native else framing.message_run
    rows = b"".join(_message(b"D", bytes(n)) for n in (0, 5, 9))
    assert message_run(rows + b"C", 0, 1 << 30) == (3, len(rows), -1)
    assert message_run(rows + _message(b"C", b""), 0, 1 << 30) == (3, len(rows), -1)
    assert message_run(rows + b"D\x00\x00\x00\x02", 0, 1 << 30) == (3, len(rows), 2)
    assert message_run(rows[:-3], 0, 1 << 30) == (3, len(rows), -1)  # last one runs on
    assert message_run(b"D\x00\x00\x00\x03", 0, 1 << 30) == (0, 0, 3)  # malformed first
    assert message_run(rows, 0, 9) == (2, 15, 13)  # a length over the cap stops the run
    with pytest.raises(ValueError):
        message_run(b"D\x00", 0, 1 << 30)


# -- installing without a compiler -------------------------------------------------------

def test_install_without_a_compiler_falls_back_to_pure_python(tmp_path: Path) -> None:
    """pip builds the package with a compiler that always fails: the build must still succeed,
    without the extension, and pktflow must run (pure Python) from the result."""
    env = {"CC": "false", "LDSHARED": "false", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    wheel_dir = tmp_path / "wheels"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                            str(wheel_dir), str(ROOT)], env=env, capture_output=True, text=True,
                           timeout=600)
    if build.returncode != 0 and "No matching distribution found for setuptools" in build.stderr:
        pytest.skip("the build backend (setuptools) cannot be fetched: no package index here")
    assert build.returncode == 0, build.stderr[-2000:]
    wheels = list(wheel_dir.glob("pktflow-*.whl"))
    assert len(wheels) == 1, wheels
    import zipfile
    names = zipfile.ZipFile(wheels[0]).namelist()
    assert not any(n.endswith(".so") for n in names), names  # neither C nor mypyc modules
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(target), str(wheels[0])], env=env, check=True, timeout=300)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import pktflow.accel as a, "
            "pktflow.compiled as c, pktflow.pipeline as p; assert a.native is None, a.native; "
            "assert c.REASON == 'not compiled', c.REASON; "
            "r = p.analyze(sys.argv[2]); print(r['capture']['tcp_packets'])")
    site_paths = [str(target)] + [p for p in sys.path if p.endswith("site-packages")]
    out = subprocess.run([sys.executable, "-S", "-c", code, str(target),
                          str(ROOT / "captures" / "error-direct-loopback.pcap")],
                         env={**env, "PYTHONPATH": ":".join(site_paths[1:])},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout) > 0


# -- mypyc-compiled modules ------------------------------------------------------------------

_REPORTS = """
import json, sys
from pktflow import compiled
from pktflow.pipeline import analyze
print(json.dumps({"mode": compiled.describe(),
                  "reports": [analyze(p) for p in sys.argv[1:]]}, sort_keys=True))
"""


@pytest.mark.skipif(os.environ.get("CI") != "true",
                    reason="a checkout being edited may run its sources; CI tests the build")
def test_ci_runs_the_compiled_modules_it_built() -> None:
    """CI's fresh build must compile: a module mypyc refuses falls back to pure Python, five
    times slower, with every test still green. The build's record of the sources it compiled
    must be today's sources."""
    from pktflow import compiled
    assert compiled.REASON is None, compiled.REASON
    recorded = (Path(compiled.__file__).parent / compiled.BUILT_FROM).read_text().split()
    assert dict(zip(recorded[::2], recorded[1::2])) == {
        m: compiled.digest(compiled._paths(m)[0]) for m in compiled.MODULES}


@pytest.mark.skipif(os.environ.get("CI") != "true",
                    reason="a machine without a compiler has no native core; CI's build must")
def test_ci_builds_the_native_core() -> None:
    """CI's fresh build must build pktflow._core: a failed optional build falls back to the
    Python pass with every native test skipped, and nothing else would say so."""
    from nativepath import CORE
    assert CORE is not None
    assert "native core" in accel.describe() and "no native core" not in accel.describe()


def test_compiled_modules_give_the_same_reports_as_their_source() -> None:
    from pktflow import compiled
    if compiled.REASON is not None:
        pytest.skip(f"the per-packet modules run as source here: {compiled.REASON}")
    paths = [str(p) for p in CAPTURES]
    env = {k: v for k, v in os.environ.items() if k != "PKTFLOW_PURE"}
    runs = {}
    for mode, extra in (("compiled", {}), ("source", {"PKTFLOW_PURE": "1"})):
        out = subprocess.run([sys.executable, "-c", _REPORTS, *paths], capture_output=True,
                             text=True, env={**env, **extra,
                                             "PYTHONPATH": str(ROOT / "analyzer")},
                             timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        runs[mode] = json.loads(out.stdout)
    assert runs["compiled"]["mode"] == "compiled"
    assert runs["source"]["mode"].startswith("pure Python")
    for path, a, b in zip(paths, runs["compiled"]["reports"], runs["source"]["reports"]):
        assert a == b, path


def test_source_runs_when_changed_after_its_build(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """An edited checkout that was not rebuilt must run the edits, not the old build; a source
    written after its build unchanged must not turn the build off."""
    from pktflow import compiled
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    for module in compiled.MODULES:
        base = tmp_path.joinpath(*module.split("."))
        base.parent.mkdir(parents=True, exist_ok=True)
        base.with_suffix(".py").write_text("")
        Path(str(base) + suffix).write_bytes(b"")
        os.utime(base.with_suffix(".py"), (1000, 1000))
        os.utime(str(base) + suffix, (2000, 2000))
    monkeypatch.setattr(compiled, "_HERE", str(tmp_path))
    monkeypatch.setattr(compiled, "SHARED", "json")  # stands in for a built runtime
    monkeypatch.delenv("PKTFLOW_PURE", raising=False)
    assert compiled.why_source() is None
    os.utime(tmp_path / "tcp" / "engine.py", (3000, 3000))  # edited after the build
    assert "tcp.engine.py is newer" in (compiled.why_source() or "")
    # Written after its build but as compiled: a wheel's install writes the sources last.
    (tmp_path / compiled.BUILT_FROM).write_text(
        "".join(f"{m} {compiled.digest(compiled._paths(m)[0])}\n" for m in compiled.MODULES))
    assert compiled.why_source() is None
    (tmp_path / "tcp" / "engine.py").write_text("x = 1\n")  # and now edited
    os.utime(tmp_path / "tcp" / "engine.py", (3000, 3000))
    assert "tcp.engine.py is newer" in (compiled.why_source() or "")
    monkeypatch.setenv("PKTFLOW_PURE", "1")
    assert compiled.why_source() == "PKTFLOW_PURE"
    os.utime(tmp_path / "tcp" / "engine.py", (1000, 1000))
    monkeypatch.delenv("PKTFLOW_PURE")
    monkeypatch.setattr(compiled, "SHARED", "pktflow_no_such_runtime__mypyc")
    assert "runtime" in (compiled.why_source() or "")  # a partial build: run the source
    Path(str(tmp_path / "pgwire" / "query") + suffix).unlink()
    assert compiled.why_source() == "not compiled"
