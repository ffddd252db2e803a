"""The capture reader: formats, link types, IP variants, truncation and damaged files."""

from __future__ import annotations

import io
import os
import random
import socket
from pathlib import Path

import pytest
from craft import (LINKTYPE_ETHERNET, LINKTYPE_NULL, LINKTYPE_RAW, LINKTYPE_SLL, LINKTYPE_SLL2,
                   frame, tcp_segment, write_pcap, write_pcapng)

from pktflow.capture.formats import BLOCK, _Buffer
from pktflow.capture.reader import open_capture
from pktflow.errors import NoFileError, NotACaptureError, UnsupportedCaptureError

# with the native speedups and with the pure-Python code (conftest.py)
pytestmark = pytest.mark.usefixtures("both_paths")


def read(path: Path) -> tuple[list[tuple], object]:  # type: ignore[type-arg]
    with open_capture(str(path)) as cap:
        pkts = list(cap)
    return pkts, cap.stats


PAYLOADS = [b"Q\x00\x00\x00\x0dselect 1;\x00", b"x" * 1400, b""]


def three(linktype: int, **kw: object) -> list[bytes]:
    return [frame(tcp_segment(p, seq=1000 + i * 2000, **kw), linktype)  # type: ignore[arg-type]
            for i, p in enumerate(PAYLOADS)]


@pytest.mark.parametrize("linktype,name", [
    (LINKTYPE_ETHERNET, "EN10MB"), (LINKTYPE_SLL, "LINUX_SLL"), (LINKTYPE_SLL2, "LINUX_SLL2"),
    (LINKTYPE_NULL, "NULL"), (LINKTYPE_RAW, "RAW")])
@pytest.mark.parametrize("v6", [False, True])
def test_link_types_and_ip_versions(tmp_path: Path, linktype: int, name: str, v6: bool) -> None:
    pkts, st = read(write_pcap(tmp_path / "c.pcap", three(linktype, v6=v6), linktype))
    assert [p[11] for p in pkts] == PAYLOADS
    assert [p[10] for p in pkts] == [len(p) for p in PAYLOADS]
    assert st.link_types == [name] and st.tcp_packets == 3  # type: ignore[attr-defined]
    assert len(pkts[0][2]) == (16 if v6 else 4)
    assert socket.inet_ntop(socket.AF_INET6 if v6 else socket.AF_INET, pkts[0][2]) == \
        ("fd00::1" if v6 else "10.0.0.1")
    assert pkts[1][6] == 3000 and pkts[0][4:6] == (40000, 5432)


@pytest.mark.parametrize("vlan", [1, 2])
def test_vlan_and_qinq(tmp_path: Path, vlan: int) -> None:
    frames = [frame(tcp_segment(b"abc"), LINKTYPE_ETHERNET, vlan=vlan)]
    pkts, _ = read(write_pcap(tmp_path / "v.pcap", frames))
    assert pkts[0][11] == b"abc"


def test_ipv6_extension_headers(tmp_path: Path) -> None:
    frames = [frame(tcp_segment(b"hello", v6=True, ext=True), LINKTYPE_ETHERNET)]
    pkts, _ = read(write_pcap(tmp_path / "e.pcap", frames))
    assert pkts[0][11] == b"hello" and pkts[0][10] == 5


def test_ethernet_padding_is_not_payload(tmp_path: Path) -> None:
    frames = [frame(tcp_segment(b"", flags="A"), LINKTYPE_ETHERNET, pad_to=60)]
    pkts, _ = read(write_pcap(tmp_path / "p.pcap", frames))
    assert pkts[0][10] == 0 and pkts[0][11] == b""


@pytest.mark.parametrize("nano,big", [(False, False), (True, False), (False, True), (True, True)])
def test_pcap_variants_timestamps(tmp_path: Path, nano: bool, big: bool) -> None:
    path = write_pcap(tmp_path / "t.pcap", three(LINKTYPE_ETHERNET), nanosecond=nano,
                      big_endian=big, t0=1_700_000_000.123456, dt=0.5)
    pkts, st = read(path)
    assert st.nanosecond == nano  # type: ignore[attr-defined]
    assert [round(p[1], 6) for p in pkts] == [1_700_000_000.123456, 1_700_000_000.623456,
                                              1_700_000_001.123456]


def test_gzip_is_detected_by_content(tmp_path: Path) -> None:
    path = write_pcap(tmp_path / "no-gz-suffix.pcap", three(LINKTYPE_ETHERNET), compress=True)
    pkts, st = read(path)
    assert len(pkts) == 3 and st.compressed  # type: ignore[attr-defined]


def test_pcapng_several_interfaces_and_link_types(tmp_path: Path) -> None:
    ip = tcp_segment(b"data")
    packets = [(0, frame(ip, LINKTYPE_ETHERNET)), (1, frame(ip, LINKTYPE_SLL2)),
               (2, frame(ip, LINKTYPE_NULL)), (0, b"\x00" * 20)]  # last one: not IP
    path = write_pcapng(tmp_path / "m.pcapng", packets,
                        [LINKTYPE_ETHERNET, LINKTYPE_SLL2, LINKTYPE_NULL], drops=7)
    pkts, st = read(path)
    assert [p[11] for p in pkts] == [b"data"] * 3 and [p[0] for p in pkts] == [1, 2, 3]
    assert st.format == "pcapng" and st.packets == 4 and st.non_tcp_packets == 1  # type: ignore[attr-defined]
    assert st.link_types == ["EN10MB", "LINUX_SLL2", "NULL"]  # type: ignore[attr-defined]
    assert st.if_drops == 7  # type: ignore[attr-defined]


def test_pcapng_nanosecond_resolution(tmp_path: Path) -> None:
    path = write_pcapng(tmp_path / "n.pcapng", [(0, frame(tcp_segment(b"x"), 1))], [1],
                        t0=1_700_000_000.000000123, tsresol=9)
    pkts, _ = read(path)
    assert abs(pkts[0][1] - 1_700_000_000.000000123) < 1e-6


def test_snaplen_truncation_keeps_wire_length(tmp_path: Path) -> None:
    full = frame(tcp_segment(b"y" * 1000), LINKTYPE_ETHERNET)
    head_cut = frame(tcp_segment(b"z" * 1000), LINKTYPE_ETHERNET)
    path = write_pcap(tmp_path / "s.pcap", [full[:200], head_cut[:40]],
                      orig_lens=[len(full), len(head_cut)])
    pkts, st = read(path)
    assert len(pkts) == 1 and pkts[0][10] == 1000 and len(pkts[0][11]) == 200 - 54
    assert st.truncated_packets == 2 and st.undecodable_packets == 1  # type: ignore[attr-defined]


def test_fragments_and_non_tcp_are_counted(tmp_path: Path) -> None:
    from scapy.layers.inet import IP, UDP

    frag = bytes(IP(src="10.0.0.1", dst="10.0.0.2", flags="MF", proto=6) / (b"\x00" * 40))
    udp = bytes(IP() / UDP() / b"dns")
    path = write_pcap(tmp_path / "f.pcap", [frame(frag, 1), frame(udp, 1), b"\x00" * 14])
    pkts, st = read(path)
    assert pkts == [] and st.ip_fragments == 1 and st.non_tcp_packets == 2  # type: ignore[attr-defined]


def test_every_cut_of_a_small_capture(tmp_path: Path) -> None:
    whole = write_pcap(tmp_path / "w.pcap", three(LINKTYPE_ETHERNET)).read_bytes()
    for cut in range(len(whole)):
        p = tmp_path / "cut.pcap"
        p.write_bytes(whole[:cut])
        try:
            pkts, st = read(p)
        except NotACaptureError:
            assert cut < 4
            continue
        if cut in (24, 24 + 16 + 96, len(whole)):
            pass  # record boundaries: nothing is damaged
        complete = len(pkts)
        assert all(p[11] == PAYLOADS[i] for i, p in enumerate(pkts))
        if st.damage is None:  # type: ignore[attr-defined]
            assert complete in (0, 1, 2, 3)
        else:
            frame_no, offset, reason = st.damage  # type: ignore[attr-defined]
            assert frame_no == complete + 1 and offset <= cut and reason


def test_absurd_record_length_is_damage(tmp_path: Path) -> None:
    good = write_pcap(tmp_path / "g.pcap", three(LINKTYPE_ETHERNET)[:1]).read_bytes()
    bad = good + (0).to_bytes(8, "little") + (0xFFFFFFF0).to_bytes(4, "little") * 2
    p = tmp_path / "b.pcap"
    p.write_bytes(bad)
    pkts, st = read(p)
    assert len(pkts) == 1 and st.damage[0] == 2 and "claims" in st.damage[2]  # type: ignore[attr-defined,index]


def test_pcapng_bad_block_length(tmp_path: Path) -> None:
    good = write_pcapng(tmp_path / "g.pcapng", [(0, frame(tcp_segment(b"a"), 1))], [1])
    p = tmp_path / "b.pcapng"
    p.write_bytes(good.read_bytes() + (6).to_bytes(4, "little") + (13).to_bytes(4, "little")
                  + b"\x00" * 8)
    pkts, st = read(p)
    assert len(pkts) == 1 and "invalid length" in st.damage[2]  # type: ignore[attr-defined,index]


def test_random_bytes_after_header(tmp_path: Path) -> None:
    head = write_pcap(tmp_path / "h.pcap", []).read_bytes()
    p = tmp_path / "r.pcap"
    p.write_bytes(head + os.urandom(5000))
    pkts, st = read(p)  # either damage is reported or random records parse as non-TCP
    assert st.damage is not None or st.packets > 0  # type: ignore[attr-defined]


def test_unsupported_link_type_only(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedCaptureError):
        read(write_pcap(tmp_path / "u.pcap", [b"\x00" * 30], linktype=147))


@pytest.mark.parametrize("make,exc", [
    (lambda p: p.write_bytes(b""), NotACaptureError),
    (lambda p: p.write_bytes(b"GET / HTTP/1.1\r\n"), NotACaptureError),
    (lambda p: p.mkdir(), NoFileError),
    (lambda p: None, NoFileError),
])
def test_not_a_capture(tmp_path: Path, make, exc) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "x.pcap"
    make(p)
    with pytest.raises(exc):
        read(p)


class _Trickle(io.RawIOBase):
    """A stream that hands out at most `step` bytes a read, as a pipe or gzip does."""

    def __init__(self, data: bytes, step: int) -> None:
        self.data, self.at, self.step = data, 0, step

    def readable(self) -> bool:
        return True

    def readinto1(self, b: memoryview) -> int:  # type: ignore[override]
        n = min(len(b), self.step, len(self.data) - self.at)
        b[:n] = self.data[self.at:self.at + n]
        self.at += n
        return n


@pytest.mark.parametrize("step", [1000, 1 << 20])
def test_read_ahead_window_holds_the_file_whatever_the_needs(step: int) -> None:
    """The reused read buffer: after need(n), buf[pos:pos + n] is the file's bytes at offset,
    for needs smaller and far larger than a read, with the unread tail carried over."""
    data = os.urandom(3 * BLOCK) + bytes(range(256)) * 4000
    b = _Buffer(_Trickle(data, step), 0)  # type: ignore[arg-type]
    rng = random.Random(step)
    while True:
        n = rng.choice((1, 16, 1500, BLOCK - 7, 2 * BLOCK + 3, 5 * BLOCK))
        if not b.need(n):
            assert bytes(b.buf[b.pos:]) == data[b.offset:], "the end: what is left is whole"
            break
        assert bytes(b.buf[b.pos:b.pos + n]) == data[b.offset:b.offset + n]
        b.pos += rng.randrange(n + 1)
    assert b.offset <= len(data) and b.error is None
