"""The capture reader end to end: formats, link types, IP variants, truncation and damaged files,
as the report (analyze), the core's pass statistics and the packets it keeps for a diagram
show them. The reader's own unit tests are beside it (analyzer/core/src/capture/tests.rs)."""

from __future__ import annotations

import gzip
import io
import json
import random
from pathlib import Path
from typing import Any

import pytest
from craft import (LINKTYPE_ETHERNET, LINKTYPE_NULL, LINKTYPE_RAW, LINKTYPE_SLL, LINKTYPE_SLL2,
                   frame, tcp_segment, write_pcap, write_pcapng)

from pktflow import _core
from pktflow.judge import Judge
from pktflow.cli import Env, main
from pktflow.errors import ExitCode, NoFileError, NotACaptureError, UnsupportedCaptureError
from pktflow.pipeline import Options, analyze

PAYLOADS = [b"Q\x00\x00\x00\x0dselect 1;\x00", b"x" * 1400, b""]


def three(linktype: int, **kw: object) -> list[bytes]:
    return [frame(tcp_segment(p, seq=1000 + i * 2000, **kw), linktype)  # type: ignore[arg-type]
            for i, p in enumerate(PAYLOADS)]


def events(path: Path) -> list[tuple[Any, ...]]:
    """Every packet of every connection as the engine saw it: (connection, direction, frame,
    ts, seq, end, ack, win, flags, kind), sequence numbers relative to the first seen."""
    report = analyze(str(path), Options(record=True))
    return report.core.packets(list(range(1, 100)), 0.0, 1e12, 100_000)["events"]


def stats(path: Path) -> dict[str, Any]:
    """The core pass's capture statistics once every record is read."""
    core = _core.Pass(str(path), True, True, None, None)
    while core.step(Judge()) is not None:
        pass
    return core.stats()


def client_to_server(report: dict[str, Any]) -> dict[str, Any]:
    (conn,) = report["connections"]
    return conn["directions"]["client_to_server"]


@pytest.mark.parametrize("linktype,name", [
    (LINKTYPE_ETHERNET, "EN10MB"), (LINKTYPE_SLL, "LINUX_SLL"), (LINKTYPE_SLL2, "LINUX_SLL2"),
    (LINKTYPE_NULL, "NULL"), (LINKTYPE_RAW, "RAW")])
@pytest.mark.parametrize("v6", [False, True])
def test_link_types_and_ip_versions(tmp_path: Path, linktype: int, name: str, v6: bool) -> None:
    path = write_pcap(tmp_path / "c.pcap", three(linktype, v6=v6), linktype)
    report = analyze(str(path))
    cap = report["capture"]
    assert cap["link_types"] == [name] and cap["packets"] == cap["tcp_packets"] == 3
    (conn,) = report["connections"]
    assert conn["client"] == {"ip": "fd00::1" if v6 else "10.0.0.1", "port": 40000}
    assert conn["server"] == {"ip": "fd00::2" if v6 else "10.0.0.2", "port": 5432}
    c2s = conn["directions"]["client_to_server"]
    assert (c2s["payload_bytes"], c2s["data_segments"], c2s["max_segment"]) == (1415, 2, 1400)
    # the raw sequence numbers 1000, 3000, 5000: 1,985 bytes never seen between the first two
    assert (c2s["gaps"], c2s["missing_bytes"]) == (1, 1985)
    got = [(e[2], e[4], e[5], e[6], e[7], e[8]) for e in events(path)]
    assert got == [(i + 1, 2000 * i, 2000 * i + len(p), 0, 512, 0x18)
                   for i, p in enumerate(PAYLOADS)]


@pytest.mark.parametrize("vlan", [1, 2])
def test_vlan_and_qinq(tmp_path: Path, vlan: int) -> None:
    frames = [frame(tcp_segment(b"abc"), LINKTYPE_ETHERNET, vlan=vlan)]
    report = analyze(str(write_pcap(tmp_path / "v.pcap", frames)))
    assert report["capture"]["tcp_packets"] == 1
    assert client_to_server(report)["payload_bytes"] == 3


def test_ipv6_extension_headers(tmp_path: Path) -> None:
    frames = [frame(tcp_segment(b"hello", v6=True, ext=True), LINKTYPE_ETHERNET)]
    path = write_pcap(tmp_path / "e.pcap", frames)
    report = analyze(str(path))
    assert report["capture"]["tcp_packets"] == 1 and report["capture"]["undecodable_packets"] == 0
    assert client_to_server(report)["payload_bytes"] == 5
    assert [(e[4], e[5]) for e in events(path)] == [(0, 5)]


def test_ethernet_padding_is_not_payload(tmp_path: Path) -> None:
    frames = [frame(tcp_segment(b"", flags="A"), LINKTYPE_ETHERNET, pad_to=60)]
    path = write_pcap(tmp_path / "p.pcap", frames)
    report = analyze(str(path))
    c2s = client_to_server(report)
    assert report["capture"]["tcp_packets"] == 1
    assert c2s["payload_bytes"] == 0 and c2s["data_segments"] == 0
    assert [(e[4], e[5]) for e in events(path)] == [(0, 0)]


@pytest.mark.parametrize("nano,big", [(False, False), (True, False), (False, True), (True, True)])
def test_pcap_variants_timestamps(tmp_path: Path, nano: bool, big: bool) -> None:
    path = write_pcap(tmp_path / "t.pcap", three(LINKTYPE_ETHERNET), nanosecond=nano,
                      big_endian=big, t0=1_700_000_000.123456, dt=0.5)
    st = stats(path)
    assert st["nanosecond"] == nano and st["format"] == "pcap" and st["packets"] == 3
    assert [round(e[3], 6) for e in events(path)] == [1_700_000_000.123456,
                                                      1_700_000_000.623456,
                                                      1_700_000_001.123456]
    cap = analyze(str(path))["capture"]
    assert round(cap["first_ts"], 6) == 1_700_000_000.123456 and cap["duration_s"] == 1.0


def test_gzip_is_detected_by_content(tmp_path: Path) -> None:
    path = write_pcap(tmp_path / "no-gz-suffix.pcap", three(LINKTYPE_ETHERNET), compress=True)
    plain = write_pcap(tmp_path / "plain.pcap", three(LINKTYPE_ETHERNET))
    report, want = analyze(str(path)), analyze(str(plain))
    assert report["capture"]["compressed"] and not want["capture"]["compressed"]
    assert report["capture"]["packets"] == 3 and report["capture"]["damage"] is None
    assert report["connections"] == want["connections"]


def test_pcapng_several_interfaces_and_link_types(tmp_path: Path) -> None:
    ip = tcp_segment(b"data")
    packets = [(0, frame(ip, LINKTYPE_ETHERNET)), (1, frame(ip, LINKTYPE_SLL2)),
               (2, frame(ip, LINKTYPE_NULL)), (0, b"\x00" * 20)]  # last one: not IP
    path = write_pcapng(tmp_path / "m.pcapng", packets,
                        [LINKTYPE_ETHERNET, LINKTYPE_SLL2, LINKTYPE_NULL], drops=7)
    report = analyze(str(path))
    cap = report["capture"]
    assert cap["format"] == "pcapng" and cap["packets"] == 4
    assert cap["tcp_packets"] == 1 and cap["non_tcp_packets"] == 1
    assert cap["link_types"] == ["EN10MB", "LINUX_SLL2", "NULL"]
    assert cap["if_drops"] == 7
    assert "capture-drops" in [f["code"] for f in report["findings"]]
    # one segment read three times, from three interfaces: the copies are dropped, not
    # taken for retransmissions
    assert [(e[2], e[4], e[5]) for e in events(path)] == [(1, 0, 4)]
    assert cap["duplicates"] == {"packets": 2, "frames": [(2, 1), (3, 1)]}
    c2s = client_to_server(report)
    assert c2s["payload_bytes"] == 4 and c2s["retransmitted_segments"] == 0


def test_pcapng_nanosecond_resolution(tmp_path: Path) -> None:
    path = write_pcapng(tmp_path / "n.pcapng", [(0, frame(tcp_segment(b"x"), 1))], [1],
                        t0=1_700_000_000.000000123, tsresol=9)
    (e,) = events(path)
    assert abs(e[3] - 1_700_000_000.000000123) < 1e-6
    assert abs(analyze(str(path))["capture"]["first_ts"] - 1_700_000_000.000000123) < 1e-6


def test_snaplen_truncation_keeps_wire_length(tmp_path: Path) -> None:
    full = frame(tcp_segment(b"y" * 1000), LINKTYPE_ETHERNET)
    head_cut = frame(tcp_segment(b"z" * 1000), LINKTYPE_ETHERNET)
    path = write_pcap(tmp_path / "s.pcap", [full[:200], head_cut[:40]],
                      orig_lens=[len(full), len(head_cut)])
    report = analyze(str(path))
    cap = report["capture"]
    assert cap["packets"] == 2 and cap["tcp_packets"] == 1
    assert cap["truncated_packets"] == 2 and cap["undecodable_packets"] == 1
    c2s = client_to_server(report)
    assert c2s["payload_bytes"] == 1000 and c2s["truncated_bytes"] == 1000 - (200 - 54)
    assert [(e[4], e[5]) for e in events(path)] == [(0, 1000)]
    codes = [f["code"] for f in report["findings"]]
    assert "snaplen" in codes and "undecodable-packets" in codes


def test_fragments_and_non_tcp_are_counted(tmp_path: Path) -> None:
    from scapy.layers.inet import IP, UDP

    frag = bytes(IP(src="10.0.0.1", dst="10.0.0.2", flags="MF", proto=6) / (b"\x00" * 40))
    udp = bytes(IP() / UDP() / b"dns")
    path = write_pcap(tmp_path / "f.pcap", [frame(frag, 1), frame(udp, 1), b"\x00" * 14])
    report = analyze(str(path))
    cap = report["capture"]
    assert report["connections"] == [] and cap["packets"] == 3 and cap["tcp_packets"] == 0
    assert cap["ip_fragments"] == 1 and cap["non_tcp_packets"] == 2
    assert [f["code"] for f in report["findings"]] == ["no-tcp"]


def record_ends(data: bytes) -> list[int]:
    """Offsets where the pcap file header (24) and each record end."""
    ends, pos = [24], 24
    while pos + 16 <= len(data):
        pos += 16 + int.from_bytes(data[pos + 8:pos + 12], "little")
        if pos <= len(data):
            ends.append(pos)
    return ends


def test_cuts_of_a_small_capture(tmp_path: Path) -> None:
    """Cut anywhere: the whole records before the cut are analysed and the damage names the
    next frame, where it starts and why (every cut near a record boundary, and a spread)."""
    whole = write_pcap(tmp_path / "w.pcap", three(LINKTYPE_ETHERNET)).read_bytes()
    ends = record_ends(whole)
    cuts = set(range(0, 60)) | set(range(0, len(whole) + 1, 11))
    cuts |= {e + d for e in ends for d in (-1, 0, 1, 15, 16, 17)} & set(range(len(whole) + 1))
    p = tmp_path / "cut.pcap"
    for cut in sorted(cuts):
        p.write_bytes(whole[:cut])
        if cut < 4:
            with pytest.raises(NotACaptureError, match="the file is empty" if cut == 0
                               else "not a pcap or pcapng capture"):
                analyze(str(p))
            continue
        report = analyze(str(p))
        complete = sum(1 for e in ends[1:] if e <= cut)
        cap = report["capture"]
        assert cap["packets"] == cap["tcp_packets"] == complete, cut
        c2s = client_to_server(report)["payload_bytes"] if complete else 0
        assert c2s == sum(len(x) for x in PAYLOADS[:complete]), cut
        if cut in ends:
            assert cap["damage"] is None, cut
            continue
        last = max([e for e in ends if e <= cut], default=4)
        frame_no = complete + 1
        if cut < 24:
            reason = "the file ends inside the pcap file header"
        elif cut - last < 16:
            reason = f"the file ends inside the header of frame {frame_no}"
        else:
            caplen = ends[complete + 1] - last - 16
            reason = (f"the file ends inside frame {frame_no} ({caplen:,} bytes announced, "
                      f"{cut - last - 16:,} present)")
        assert cap["damage"] == {"frame": frame_no, "offset": last, "reason": reason}, cut
        (finding,) = [f for f in report["findings"] if f["code"] == "capture-damaged"]
        assert finding["severity"] == "error" and finding["frames"] == [frame_no]


def test_absurd_record_length_is_damage(tmp_path: Path) -> None:
    good = write_pcap(tmp_path / "g.pcap", three(LINKTYPE_ETHERNET)[:1]).read_bytes()
    bad = good + (0).to_bytes(8, "little") + (0xFFFFFFF0).to_bytes(4, "little") * 2
    p = tmp_path / "b.pcap"
    p.write_bytes(bad)
    cap = analyze(str(p))["capture"]
    assert cap["packets"] == 1
    assert cap["damage"] == {"frame": 2, "offset": len(good), "reason":
                             "frame 2 claims 4,294,967,280 captured bytes, more than any "
                             "capture holds (snaplen 262,144)"}


def test_pcapng_bad_block_length(tmp_path: Path) -> None:
    good = write_pcapng(tmp_path / "g.pcapng", [(0, frame(tcp_segment(b"a"), 1))], [1])
    p = tmp_path / "b.pcapng"
    p.write_bytes(good.read_bytes() + (6).to_bytes(4, "little") + (13).to_bytes(4, "little")
                  + b"\x00" * 8)
    cap = analyze(str(p))["capture"]
    assert cap["packets"] == 1
    assert cap["damage"] == {"frame": 2, "offset": good.stat().st_size, "reason":
                             "a pcapng block (type 0x6) has an invalid length of 13 bytes"}


@pytest.mark.parametrize("seed", range(4))
def test_random_bytes_after_header(tmp_path: Path, seed: int) -> None:
    head = write_pcap(tmp_path / "h.pcap", []).read_bytes()
    p = tmp_path / "r.pcap"
    p.write_bytes(head + random.Random(seed).randbytes(5000))
    cap = analyze(str(p))["capture"]  # either damage is reported or records parse as non-TCP
    assert cap["damage"] is not None or cap["packets"] > 0


def test_unsupported_link_type_only(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedCaptureError, match=r"no supported link type \(LINKTYPE_147\)"):
        analyze(str(write_pcap(tmp_path / "u.pcap", [b"\x00" * 30], linktype=147)))


@pytest.mark.parametrize("make,exc,words", [
    (lambda p: p.write_bytes(b""), NotACaptureError, "the file is empty"),
    (lambda p: p.write_bytes(b"GET / HTTP/1.1\r\n"), NotACaptureError,
     r"not a pcap or pcapng capture \(starts with 47455420\)"),
    (lambda p: p.mkdir(), NoFileError, "is a directory"),
    (lambda p: None, NoFileError, "no such file"),
])
def test_not_a_capture(tmp_path: Path, make, exc, words) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "x.pcap"
    make(p)
    with pytest.raises(exc, match=words):
        analyze(str(p))


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_records_of_every_size_across_the_read_window(tmp_path: Path, compress: bool) -> None:
    """Records from 54 bytes to 64 KiB, 1.4 MB in all: those that straddle the end of the
    read window (256 KiB) and of a decompressed chunk are read whole, from where they start."""
    rng = random.Random(5)
    sizes = [rng.choice((0, 1, 1448, rng.randrange(60_000, 65_400))) for _ in range(110)]
    frames, seq = [], 1000
    for i, n in enumerate(sizes):
        # each its own window: empty segments in a row are not copies of one another
        frames.append(frame(tcp_segment(rng.randbytes(n), seq=seq, window=1000 + i),
                            LINKTYPE_ETHERNET))
        seq += n
    path = write_pcap(tmp_path / "w.pcap", frames, compress=compress)
    report = analyze(str(path))
    cap = report["capture"]
    assert cap["packets"] == cap["tcp_packets"] == len(sizes) and cap["damage"] is None
    c2s = client_to_server(report)
    assert c2s["payload_bytes"] == sum(sizes) and c2s["max_segment"] == max(sizes)
    assert (c2s["gaps"], c2s["retransmitted_segments"]) == (0, 0)
    offsets = [0]
    for n in sizes:
        offsets.append(offsets[-1] + n)
    assert [(e[4], e[5]) for e in events(path)] == list(zip(offsets, offsets[1:]))


def test_the_cli_names_a_damaged_capture(tmp_path: Path) -> None:
    """The same damage through the command line: exit 6, one line, the report on stdout."""
    whole = write_pcap(tmp_path / "w.pcap", three(LINKTYPE_ETHERNET)).read_bytes()
    p = tmp_path / "cut.pcap"
    p.write_bytes(whole[:record_ends(whole)[2] + 20])
    out, err = io.StringIO(), io.StringIO()
    assert main(["analyze", "--format", "json", str(p)], Env(stdout=out, stderr=err)) == \
        ExitCode.DAMAGED
    damage = json.loads(out.getvalue())["capture"]["damage"]
    assert damage["frame"] == 3
    assert err.getvalue() == (f"pktflow: {p} (frame 3, byte offset {damage['offset']}): "
                              f"{damage['reason']}; the report covers what precedes it\n")


def test_gzipped_and_plain_read_the_same_packets(tmp_path: Path) -> None:
    frames = three(LINKTYPE_SLL2, v6=True)
    plain = write_pcap(tmp_path / "p.pcap", frames)
    gz = tmp_path / "p.pcap.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes(), mtime=0))
    assert events(gz) == events(plain)
