//! The reader on crafted files: formats, link types, IP variants, cuts and damage.

use std::io::Write;

use super::error::{DamageKind, OpenError, StreamFault};
use super::gzip::GzipStream;
use super::{Capture, Format, Item};

// -- building captures ------------------------------------------------------------------------

const SRC: [u8; 4] = [10, 0, 0, 1];
const DST: [u8; 4] = [10, 0, 0, 2];

/// TCP header (20 bytes + options) and payload.
fn tcp(payload: &[u8], seq: u32, options: &[u8]) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend(40000u16.to_be_bytes());
    t.extend(5432u16.to_be_bytes());
    t.extend(seq.to_be_bytes());
    t.extend(7u32.to_be_bytes());
    t.push((((20 + options.len()) / 4) << 4) as u8);
    t.push(0x18);
    t.extend(512u16.to_be_bytes());
    t.extend([0, 0, 0, 0]);
    t.extend(options);
    t.extend(payload);
    t
}

fn ipv4(l4: &[u8], proto: u8, frag: [u8; 2], options: &[u8]) -> Vec<u8> {
    let ihl = 20 + options.len();
    let mut ip = vec![0x40 | (ihl / 4) as u8, 0];
    ip.extend(((ihl + l4.len()) as u16).to_be_bytes());
    ip.extend([0, 0, frag[0], frag[1], 64, proto, 0, 0]);
    ip.extend(SRC);
    ip.extend(DST);
    ip.extend(options);
    ip.extend(l4);
    ip
}

/// IPv6 with extension headers given as (type, total length in bytes).
fn ipv6(l4: &[u8], exts: &[(u8, usize)]) -> Vec<u8> {
    let mut body = Vec::new();
    for (i, &(t, size)) in exts.iter().enumerate() {
        let next = exts.get(i + 1).map_or(6, |e| e.0);
        let units = if t == 51 { size / 4 - 2 } else { size / 8 - 1 };
        body.push(next);
        body.push(units as u8);
        body.extend(vec![0u8; size - 2]);
    }
    body.extend(l4);
    let mut ip = vec![0x60, 0, 0, 0];
    ip.extend((body.len() as u16).to_be_bytes());
    ip.push(exts.first().map_or(6, |e| e.0));
    ip.push(64);
    ip.extend([0xfd; 16]);
    ip.extend([0xfe; 16]);
    ip.extend(body);
    ip
}

fn ether(ip: &[u8], etype: u16, vlans: &[u16]) -> Vec<u8> {
    let mut f = vec![2u8; 12];
    for &tag in vlans {
        f.extend(tag.to_be_bytes());
        f.extend([0, 100]);
    }
    f.extend(etype.to_be_bytes());
    f.extend(ip);
    f
}

fn segment(payload: &[u8], seq: u32) -> Vec<u8> {
    ether(&ipv4(&tcp(payload, seq, &[]), 6, [0, 0], &[]), 0x0800, &[])
}

struct Rec {
    frame: Vec<u8>,
    orig: u32,
}

fn rec(frame: Vec<u8>) -> Rec {
    Rec {
        orig: frame.len() as u32,
        frame,
    }
}

fn pcap(recs: &[Rec], link: u32, nano: bool, big: bool) -> Vec<u8> {
    let w32 = |v: u32| {
        if big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let w16 = |v: u16| {
        if big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let mut out = Vec::new();
    out.extend(w32(if nano { 0xA1B2_3C4D } else { 0xA1B2_C3D4 }));
    out.extend(w16(2));
    out.extend(w16(4));
    out.extend([0; 8]);
    out.extend(w32(262_144));
    out.extend(w32(link));
    for (i, r) in recs.iter().enumerate() {
        out.extend(w32(1_700_000_000 + i as u32));
        out.extend(w32(if nano { 123_456_789 } else { 123_456 }));
        out.extend(w32(r.frame.len() as u32));
        out.extend(w32(r.orig));
        out.extend(&r.frame);
    }
    out
}

struct Ng {
    big: bool,
    out: Vec<u8>,
}

impl Ng {
    fn section(big: bool) -> Ng {
        let mut ng = Ng {
            big,
            out: Vec::new(),
        };
        ng.append_section();
        ng
    }

    fn append_section(&mut self) {
        let mut body = self.u32(0x1A2B_3C4D).to_vec();
        body.extend(self.u16(1));
        body.extend(self.u16(0));
        body.extend([0xff; 8]);
        self.block(0x0A0D_0D0A, &body);
    }

    fn u32(&self, v: u32) -> [u8; 4] {
        if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    }

    fn u16(&self, v: u16) -> [u8; 2] {
        if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    }

    fn block(&mut self, btype: u32, body: &[u8]) {
        let mut body = body.to_vec();
        while body.len() % 4 != 0 {
            body.push(0);
        }
        let n = body.len() as u32 + 12;
        self.out.extend(self.u32(btype));
        self.out.extend(self.u32(n));
        self.out.extend(body);
        self.out.extend(self.u32(n));
    }

    fn option(&self, code: u16, val: &[u8]) -> Vec<u8> {
        let mut o = self.u16(code).to_vec();
        o.extend(self.u16(val.len() as u16));
        o.extend(val);
        while o.len() % 4 != 0 {
            o.push(0);
        }
        o
    }

    fn idb(&mut self, link: u16, snap: u32, opts: &[Vec<u8>]) {
        let mut body = self.u16(link).to_vec();
        body.extend(self.u16(0));
        body.extend(self.u32(snap));
        for o in opts {
            body.extend(o);
        }
        if !opts.is_empty() {
            body.extend([0; 4]);
        }
        self.block(1, &body);
    }

    fn epb(&mut self, iface: u32, ts: u64, frame: &[u8], orig: u32) {
        let mut body = self.u32(iface).to_vec();
        body.extend(self.u32((ts >> 32) as u32));
        body.extend(self.u32(ts as u32));
        body.extend(self.u32(frame.len() as u32));
        body.extend(self.u32(orig));
        body.extend(frame);
        self.block(6, &body);
    }

    fn spb(&mut self, frame: &[u8]) {
        let mut body = self.u32(frame.len() as u32).to_vec();
        body.extend(frame);
        self.block(3, &body);
    }

    fn pb(&mut self, iface: u16, ts: u64, frame: &[u8]) {
        let mut body = self.u16(iface).to_vec();
        body.extend(self.u16(0));
        body.extend(self.u32((ts >> 32) as u32));
        body.extend(self.u32(ts as u32));
        body.extend(self.u32(frame.len() as u32));
        body.extend(self.u32(frame.len() as u32));
        body.extend(frame);
        self.block(2, &body);
    }

    fn isb(&mut self, iface: u32, drops: u64) {
        let mut body = self.u32(iface).to_vec();
        body.extend([0; 8]);
        let v = if self.big {
            drops.to_be_bytes()
        } else {
            drops.to_le_bytes()
        };
        body.extend(self.option(5, &v));
        body.extend([0; 4]);
        self.block(5, &body);
    }
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
    e.write_all(data).unwrap_or_default();
    e.finish().unwrap_or_default()
}

/// Everything a capture hands out: (frame, ts, payload, plen) per packet, the batch ends.
struct Read {
    packets: Vec<(u64, f64, Vec<u8>, u32)>,
    batch_ends: Vec<f64>,
    cap: Capture,
}

fn read_cap(mut cap: Capture) -> Read {
    let (mut packets, mut batch_ends) = (Vec::new(), Vec::new());
    while let Some(item) = cap.next_item() {
        match item {
            Item::Packet(p) => packets.push((p.frame, p.ts, p.payload.to_vec(), p.plen)),
            Item::BatchEnd { ts } => batch_ends.push(ts),
        }
    }
    Read {
        packets,
        batch_ends,
        cap,
    }
}

fn read(data: &[u8]) -> Read {
    match Capture::from_bytes(data) {
        Ok(cap) => read_cap(cap),
        Err(e) => panic!("not opened: {e:?}"),
    }
}

fn payloads(r: &Read) -> Vec<Vec<u8>> {
    r.packets.iter().map(|p| p.2.clone()).collect()
}

const PAYLOADS: [&[u8]; 3] = [b"Q\x00\x00\x00\x0dselect 1;\x00", &[b'x'; 1400], b""];

fn three() -> Vec<Rec> {
    PAYLOADS
        .iter()
        .enumerate()
        .map(|(i, p)| rec(segment(p, 1000 + 2000 * i as u32)))
        .collect()
}

// -- formats ----------------------------------------------------------------------------------

#[test]
fn every_pcap_magic() {
    for (nano, big) in [(false, false), (true, false), (false, true), (true, true)] {
        let r = read(&pcap(&three(), 1, nano, big));
        assert_eq!(payloads(&r), PAYLOADS.map(<[u8]>::to_vec));
        let st = r.cap.stats();
        assert_eq!(
            (st.nanosecond, st.format, st.packets, st.tcp_packets),
            (nano, Format::Pcap, 3, 3)
        );
        let frac = if nano {
            123_456_789.0 * 1e-9
        } else {
            123_456.0 * 1e-6
        };
        assert_eq!(r.packets[1].1, 1_700_000_001.0 + frac);
        assert_eq!(r.packets.iter().map(|p| p.0).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(r.batch_ends, [r.packets[2].1]);
        assert!(st.damage.is_none() && r.cap.outcome().is_ok());
    }
}

#[test]
fn pcapng_sections_interfaces_and_options() {
    let mut ng = Ng::section(false);
    ng.idb(1, 0, &[]);
    let nine = ng.option(9, &[9]);
    let offset = ng.option(14, &100i64.to_le_bytes());
    ng.idb(276, 0, &[nine, offset]);
    let mut sll2 = vec![0x08, 0x00];
    sll2.extend([0u8; 18]);
    sll2.extend(ipv4(&tcp(b"two", 5, &[]), 6, [0, 0], &[]));
    ng.epb(0, 1_700_000_000_000_000, &segment(b"one", 1), 60);
    ng.epb(1, 1_700_000_000_000_000_123, &sll2, sll2.len() as u32);
    ng.isb(0, 7);
    ng.isb(1, 5);
    ng.isb(0, 9); // the last counter of an interface counts
                  // a second section, big-endian: interfaces start again
    ng.big = true;
    ng.append_section();
    let binary = ng.option(9, &[0x80 | 10]);
    ng.idb(0, 0, &[binary]);
    let mut null = 2u32.to_le_bytes().to_vec();
    null.extend(ipv4(&tcp(b"three", 9, &[]), 6, [0, 0], &[]));
    ng.epb(0, 3 * 1024, &null, null.len() as u32);
    ng.spb(&null);
    ng.pb(0, 4 * 1024, &null);
    ng.epb(0, 5 * 1024, &[0u8; 4], 4); // family 0: not IP
    let r = read(&ng.out);
    let st = r.cap.stats();
    assert_eq!(
        payloads(&r),
        [&b"one"[..], b"two", b"three", b"three", b"three"].map(<[u8]>::to_vec)
    );
    assert_eq!(
        r.packets.iter().map(|p| p.0).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5]
    );
    assert_eq!(r.packets[0].1, 1_700_000_000.0);
    assert_eq!(
        r.packets[1].1,
        1_700_000_000_000_000_123u64 as f64 * 1e-9 + 100.0
    );
    assert_eq!(r.packets[2].1, 3.0);
    assert_eq!(
        r.packets[3].1, 3.0,
        "a Simple Packet Block takes the previous time"
    );
    assert_eq!(r.packets[4].1, 4.0);
    assert_eq!(st.format, Format::Pcapng);
    assert_eq!(st.link_types, ["EN10MB", "LINUX_SLL2", "NULL"]);
    assert_eq!(
        (
            st.packets,
            st.tcp_packets,
            st.non_tcp_packets,
            st.truncated_packets
        ),
        (6, 5, 1, 1)
    );
    assert_eq!(st.if_drops, Some(14));
    // the first two EPBs are one run; the SPB and the PB are batches of their own
    assert_eq!(r.batch_ends, [r.packets[1].1, 3.0, 3.0, 4.0]);
}

#[test]
fn simple_packet_block_before_any_interface_is_skipped() {
    let mut ng = Ng::section(false);
    ng.spb(&segment(b"lost", 1));
    ng.idb(1, 40, &[]);
    ng.spb(&segment(b"cut by the snaplen", 1));
    let r = read(&ng.out);
    let st = r.cap.stats();
    assert_eq!(st.packets, 1);
    assert_eq!(st.first_ts, Some(0.0), "no time before it: 0");
    assert_eq!(
        (st.undecodable_packets, st.truncated_packets),
        (1, 1),
        "40 bytes kept"
    );
}

#[test]
fn batches_end_where_the_window_is_refilled() {
    // 40 records of ~9 KiB: the 256 KiB window holds 28 of them
    let recs: Vec<Rec> = (0..40)
        .map(|i| rec(segment(&[b'd'; 9000], i * 9000)))
        .collect();
    let data = pcap(&recs, 1, false, false);
    let r = read(&data);
    assert_eq!(r.packets.len(), 40);
    let per = (2 * super::BLOCK - 20) / (16 + recs[0].frame.len());
    assert_eq!(r.batch_ends, [r.packets[per - 1].1, r.packets[39].1]);
}

// -- link types and IP --------------------------------------------------------------------------

#[test]
fn link_types_and_ip_versions() {
    let v4 = ipv4(&tcp(b"abc", 1, &[]), 6, [0, 0], &[]);
    let v6 = ipv6(&tcp(b"abc", 1, &[]), &[]);
    for ip in [&v4, &v6] {
        let etype = if ip[0] >> 4 == 6 { 0x86DD } else { 0x0800 };
        let mut sll = vec![0u8; 14];
        sll.extend((etype as u16).to_be_bytes());
        sll.extend(ip.iter());
        let mut sll2 = (etype as u16).to_be_bytes().to_vec();
        sll2.extend([0u8; 18]);
        sll2.extend(ip.iter());
        let fam: u32 = if etype == 0x86DD { 30 } else { 2 };
        let mut null = fam.to_le_bytes().to_vec();
        null.extend(ip.iter());
        let mut loop_ = fam.to_be_bytes().to_vec();
        loop_.extend(ip.iter());
        let raw_type = if etype == 0x86DD { 229 } else { 228 };
        for (link, frame, name) in [
            (1, ether(ip, etype as u16, &[]), "EN10MB"),
            (1, ether(ip, etype as u16, &[0x8100]), "EN10MB"),
            (
                1,
                ether(ip, etype as u16, &[0x88A8, 0x8100, 0x9100]),
                "EN10MB",
            ),
            (113, sll, "LINUX_SLL"),
            (276, sll2, "LINUX_SLL2"),
            (0, null.clone(), "NULL"),
            (108, loop_, "LOOP"),
            (101, ip.clone(), "RAW"),
            (12, ip.clone(), "RAW"),
            (
                raw_type,
                ip.clone(),
                if raw_type == 228 { "IPV4" } else { "IPV6" },
            ),
        ] {
            let r = read(&pcap(&[rec(frame)], link, false, false));
            assert_eq!(payloads(&r), [b"abc".to_vec()], "{name}");
            assert_eq!(r.cap.stats().link_types, [name]);
            let mut cap =
                Capture::from_bytes(&pcap(&[rec(ether(ip, etype as u16, &[]))], 1, false, false))
                    .unwrap_or_else(|e| panic!("{e:?}"));
            let p = cap.next_packet().unwrap_or_else(|| panic!("a packet"));
            assert_eq!(p.src.octets().len(), if etype == 0x86DD { 16 } else { 4 });
            assert_eq!(
                (p.sport, p.dport, p.seq, p.ack, p.flags, p.win),
                (40000, 5432, 1, 7, 0x18, 512)
            );
        }
    }
}

#[test]
fn unsupported_link_type_only() {
    let r = read(&pcap(&[rec(vec![0u8; 30])], 147, false, false));
    assert_eq!(r.cap.stats().non_tcp_packets, 1);
    assert_eq!(
        r.cap.outcome(),
        Err(OpenError::Unsupported {
            link_types: vec!["LINKTYPE_147".into()]
        })
    );
    // a supported link type without TCP is not an error: the report says no TCP
    let r = read(&pcap(&[rec(vec![0u8; 30])], 1, false, false));
    assert_eq!(r.cap.outcome(), Ok(()));
}

#[test]
fn ipv6_extension_headers() {
    for exts in [
        &[(0u8, 8usize), (60, 16)][..],
        &[(51, 12), (43, 8)],
        &[(0, 8)],
    ] {
        let r = read(&pcap(
            &[rec(ether(&ipv6(&tcp(b"hello", 1, &[]), exts), 0x86DD, &[]))],
            1,
            false,
            false,
        ));
        assert_eq!(r.packets[0].2, b"hello");
        assert_eq!(r.packets[0].3, 5);
    }
    let frag = ipv6(&tcp(b"x", 1, &[]), &[(44, 8)]);
    let udp = ipv6(&[0u8; 8], &[]);
    let mut udp = udp.clone();
    udp[6] = 17;
    let hop_then_udp = {
        let mut f = ipv6(&[0u8; 16], &[(0, 8)]);
        f[40] = 17;
        f
    };
    let cut_ext = ipv6(&[], &[(0, 8)])[..41].to_vec();
    let frames = [frag, udp, hop_then_udp, cut_ext].map(|ip| rec(ether(&ip, 0x86DD, &[])));
    let r = read(&pcap(&frames, 1, false, false));
    let st = r.cap.stats();
    assert_eq!(
        (st.ip_fragments, st.non_tcp_packets, st.undecodable_packets),
        (1, 2, 1)
    );
}

#[test]
fn ipv4_variants() {
    let opts = [1u8, 1, 1, 0]; // NOP NOP NOP EOL
    let with_options = ipv4(&tcp(b"opt", 1, &[2, 4, 5, 180]), 6, [0, 0], &opts);
    let mut tso = ipv4(&tcp(b"tso", 1, &[]), 6, [0, 0], &[]);
    tso[2..4].copy_from_slice(&[0, 0]);
    let df = ipv4(&tcp(b"df", 1, &[]), 6, [0x40, 0], &[]);
    let mf = ipv4(&tcp(b"mf", 1, &[]), 6, [0x20, 0], &[]);
    let offset = ipv4(&[0u8; 8], 6, [0, 1], &[]);
    let udp_frag = ipv4(&[0u8; 8], 17, [0x20, 0], &[]);
    let mut bad_version = ipv4(&tcp(b"v", 1, &[]), 6, [0, 0], &[]);
    bad_version[0] = 0x65;
    let mut short_ihl = ipv4(&tcp(b"v", 1, &[]), 6, [0, 0], &[]);
    short_ihl[0] = 0x44;
    let mut short_total = ipv4(&tcp(b"abc", 1, &[]), 6, [0, 0], &[]);
    short_total[2..4].copy_from_slice(&30u16.to_be_bytes());
    let padded = {
        let mut f = ether(&ipv4(&tcp(b"", 1, &[]), 6, [0, 0], &[]), 0x0800, &[]);
        f.resize(60, 0);
        f
    };
    let mut frames: Vec<Rec> = [
        with_options,
        tso,
        df,
        mf,
        offset,
        udp_frag,
        bad_version,
        short_ihl,
        short_total,
    ]
    .iter()
    .map(|ip| rec(ether(ip, 0x0800, &[])))
    .collect();
    frames.push(rec(padded));
    let mut cap =
        Capture::from_bytes(&pcap(&frames, 1, false, false)).unwrap_or_else(|e| panic!("{e:?}"));
    let p = cap.next_packet().unwrap_or_else(|| panic!("a packet"));
    assert_eq!(
        (p.payload, p.options, p.plen),
        (&b"opt"[..], &[2u8, 4, 5, 180][..], 3)
    );
    let r = read_cap(cap);
    assert_eq!(
        r.packets
            .iter()
            .map(|p| (p.2.clone(), p.3))
            .collect::<Vec<_>>(),
        [(b"tso".to_vec(), 3), (b"df".to_vec(), 2), (vec![], 0)]
    );
    let st = r.cap.stats();
    assert_eq!(
        (st.ip_fragments, st.non_tcp_packets, st.undecodable_packets),
        (2, 1, 3)
    );
}

#[test]
fn snaplen_cut_keeps_the_wire_length() {
    let full = segment(&[b'y'; 1000], 1);
    let head_cut = segment(&[b'z'; 1000], 1);
    let recs = [
        Rec {
            frame: full[..200].to_vec(),
            orig: full.len() as u32,
        },
        Rec {
            frame: head_cut[..40].to_vec(),
            orig: head_cut.len() as u32,
        },
    ];
    let r = read(&pcap(&recs, 1, false, false));
    assert_eq!(r.packets.len(), 1);
    assert_eq!((r.packets[0].2.len(), r.packets[0].3), (200 - 54, 1000));
    let st = r.cap.stats();
    assert_eq!((st.truncated_packets, st.undecodable_packets), (2, 1));
}

// -- damage ------------------------------------------------------------------------------------

/// File offsets where each pcap record ends (the file header ends at 24).
fn record_ends(data: &[u8]) -> Vec<usize> {
    let (mut ends, mut pos) = (vec![24], 24);
    while pos + 16 <= data.len() {
        pos += 16
            + u32::from_le_bytes([data[pos + 8], data[pos + 9], data[pos + 10], data[pos + 11]])
                as usize;
        if pos <= data.len() {
            ends.push(pos);
        }
    }
    ends
}

#[test]
fn every_cut_of_a_small_pcap() {
    let whole = pcap(&three(), 1, false, false);
    let ends = record_ends(&whole);
    for cut in 0..=whole.len() {
        let cap = match Capture::from_bytes(&whole[..cut]) {
            Ok(c) => c,
            Err(e) => {
                assert!(cut < 4, "{cut}: {e:?}");
                continue;
            }
        };
        let r = read_cap(cap);
        let complete = ends[1..].iter().filter(|&&e| e <= cut).count();
        let st = r.cap.stats();
        assert_eq!(st.packets as usize, complete, "{cut}");
        assert_eq!(
            payloads(&r),
            PAYLOADS[..complete]
                .iter()
                .map(|p| p.to_vec())
                .collect::<Vec<_>>()
        );
        match &st.damage {
            None => assert!(ends.contains(&cut), "{cut}"),
            Some(d) => {
                assert_eq!(d.frame as usize, complete + 1);
                let want = ends
                    .iter()
                    .copied()
                    .filter(|&e| e <= cut)
                    .max()
                    .unwrap_or(4);
                assert_eq!(d.offset as usize, want, "{cut}");
                let kind = if cut < 24 {
                    DamageKind::FileHeaderCut
                } else if cut - want < 16 {
                    DamageKind::RecordHeaderCut
                } else {
                    let caplen = three()[complete].frame.len() as u32;
                    DamageKind::RecordCut {
                        caplen,
                        present: (cut - want - 16) as u64,
                    }
                };
                assert_eq!(d.kind, kind, "{cut}");
            }
        }
    }
}

#[test]
fn every_cut_of_a_small_pcapng() {
    let mut ng = Ng::section(false);
    ng.idb(1, 0, &[]);
    let mut ends = vec![ng.out.len()];
    for p in PAYLOADS {
        ng.epb(0, 1, &segment(p, 1), 0);
        ends.push(ng.out.len());
    }
    let whole = ng.out;
    for cut in 4..=whole.len() {
        let r = read(&whole[..cut]);
        let st = r.cap.stats();
        let complete = ends[1..].iter().filter(|&&e| e <= cut).count();
        assert_eq!(st.packets as usize, complete, "{cut}");
        match &st.damage {
            None => assert!(cut == 28 || ends.contains(&cut), "{cut}"),
            Some(d) => {
                let last = ends
                    .iter()
                    .copied()
                    .filter(|&e| e <= cut)
                    .max()
                    .unwrap_or(if cut >= 28 { 28 } else { 0 });
                assert_eq!(
                    (d.frame as usize, d.offset as usize),
                    (complete + 1, last),
                    "{cut}"
                );
                let header = if cut - last < 12 {
                    DamageKind::BlockHeaderCut
                } else {
                    d.kind
                };
                assert_eq!(d.kind, header);
            }
        }
    }
}

#[test]
fn absurd_lengths_are_damage() {
    let mut data = pcap(&three()[..1], 1, false, false);
    data.extend(0u64.to_le_bytes());
    data.extend(0xFFFF_FFF0u32.to_le_bytes());
    data.extend(0xFFFF_FFF0u32.to_le_bytes());
    let r = read(&data);
    let d = r
        .cap
        .stats()
        .damage
        .clone()
        .unwrap_or_else(|| panic!("damage"));
    assert_eq!(d.frame, 2);
    assert_eq!(
        d.kind,
        DamageKind::RecordTooLarge {
            caplen: 0xFFFF_FFF0,
            snaplen: 262_144
        }
    );

    let mut ng = Ng::section(false);
    ng.idb(1, 0, &[]);
    ng.epb(0, 1, &segment(b"a", 1), 0);
    let good = ng.out.len();
    ng.out.extend(6u32.to_le_bytes());
    ng.out.extend(13u32.to_le_bytes());
    ng.out.extend([0u8; 8]);
    let r = read(&ng.out);
    let d = r
        .cap
        .stats()
        .damage
        .clone()
        .unwrap_or_else(|| panic!("damage"));
    assert_eq!((d.frame, d.offset as usize), (2, good));
    assert_eq!(
        d.kind,
        DamageKind::BadBlockLength {
            block_type: 6,
            length: 13
        }
    );
}

#[test]
fn pcapng_block_faults() {
    let head = |ng: &mut Ng| ng.idb(1, 0, &[]);
    // trailer mismatch
    let mut ng = Ng::section(false);
    head(&mut ng);
    ng.epb(0, 1, &segment(b"a", 1), 0);
    let n = ng.out.len();
    ng.out[n - 4..].copy_from_slice(&8u32.to_le_bytes());
    let d = read(&ng.out)
        .cap
        .stats()
        .damage
        .clone()
        .unwrap_or_else(|| panic!("damage"));
    assert!(matches!(
        d.kind,
        DamageKind::TrailerMismatch {
            block_type: 6,
            trailer: 8,
            ..
        }
    ));
    // an undescribed interface: the block's offset
    let mut ng = Ng::section(false);
    head(&mut ng);
    let at = ng.out.len();
    ng.epb(3, 1, &segment(b"a", 1), 0);
    let d = read(&ng.out)
        .cap
        .stats()
        .damage
        .clone()
        .unwrap_or_else(|| panic!("damage"));
    assert_eq!(
        (d.kind, d.offset as usize, d.frame),
        (DamageKind::BadInterface { interface: 3 }, at, 1)
    );
    // a section header with a bad byte-order magic
    let mut ng = Ng::section(false);
    ng.out[8] = 0;
    let d = read(&ng.out)
        .cap
        .stats()
        .damage
        .clone()
        .unwrap_or_else(|| panic!("damage"));
    assert_eq!(d.kind, DamageKind::BadByteOrder);
    // a block too short for its fixed fields
    let mut ng = Ng::section(false);
    ng.block(6, &[0u8; 8]);
    let d = read(&ng.out)
        .cap
        .stats()
        .damage
        .clone()
        .unwrap_or_else(|| panic!("damage"));
    assert_eq!(
        d.kind,
        DamageKind::BlockTooShort {
            block_type: 6,
            length: 20
        }
    );
}

#[test]
fn every_cut_of_a_gzipped_capture() {
    let plain = pcap(&three(), 1, false, false);
    let gz = gzip(&plain);
    let whole = read_gz(&gz).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(payloads(&whole), PAYLOADS.map(<[u8]>::to_vec));
    assert!(whole.cap.stats().compressed && whole.cap.stats().damage.is_none());
    for cut in 2..gz.len() {
        match read_gz(&gz[..cut]) {
            Err(OpenError::BadGzip { .. }) => {}
            Err(e) => panic!("{cut}: {e:?}"),
            Ok(r) => {
                let st = r.cap.stats();
                let d = st
                    .damage
                    .clone()
                    .unwrap_or_else(|| panic!("{cut}: no damage"));
                assert!(d.stream.is_some(), "{cut}");
                assert!(payloads(&r).iter().zip(PAYLOADS).all(|(a, b)| a == b));
            }
        }
    }
    let mut bad_crc = gz.clone();
    let n = bad_crc.len();
    bad_crc[n - 8] ^= 1;
    let r = read_gz(&bad_crc).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(r.packets.len(), 3, "the data before a bad CRC is read");
    let d = r
        .cap
        .stats()
        .damage
        .clone()
        .unwrap_or_else(|| panic!("damage"));
    assert!(matches!(d.stream, Some(StreamFault::CheckFailed { .. })));
}

fn read_gz(data: &[u8]) -> Result<Read, OpenError> {
    let dir = std::env::temp_dir().join(format!("pktflow-capture-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_default();
    let path = dir.join(format!("{}.gz", data.len()));
    std::fs::write(&path, data).unwrap_or_default();
    let r = Capture::open(&path).map(read_cap);
    std::fs::remove_file(&path).unwrap_or_default();
    r
}

/// A reader handing out one byte per read, as a slow pipe would.
struct Trickle(std::io::Cursor<Vec<u8>>);

impl std::io::Read for Trickle {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(1);
        self.0.read(&mut buf[..n])
    }
}

#[test]
fn gzip_members_padding_and_trickled_input() {
    let a: Vec<u8> = (0..300_000u32)
        .map(|i| (i % 251) as u8 ^ (i / 977) as u8)
        .collect();
    let mut data = gzip(&a);
    let mut named = gzip(b"tail");
    named[3] |= 0x08 | 0x10 | 0x04; // FNAME, FCOMMENT, FEXTRA
    let fields = b"\x03\x00xyzcapture.pcap\x00a comment\x00";
    named.splice(10..10, fields.iter().copied());
    data.extend(named);
    data.extend(gzip(b""));
    data.extend([0u8; 9]);
    let mut want = a.clone();
    want.extend(b"tail");
    for trickle in [false, true] {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 7919];
        let cursor = std::io::Cursor::new(data.clone());
        let fault = if trickle {
            drain(&mut GzipStream::new(Trickle(cursor)), &mut buf, &mut out)
        } else {
            drain(&mut GzipStream::new(cursor), &mut buf, &mut out)
        };
        assert_eq!((fault, out.len()), (None, want.len()));
        assert!(out == want);
    }
    let mut garbage = gzip(b"abc");
    garbage.extend(b"PK\x03\x04");
    let (mut out, mut buf) = (Vec::new(), vec![0u8; 100]);
    let fault = drain(
        &mut GzipStream::new(std::io::Cursor::new(garbage.clone())),
        &mut buf,
        &mut out,
    );
    assert_eq!(
        (fault, out),
        (
            Some(StreamFault::NoMember {
                at: garbage.len() as u64 - 4
            }),
            b"abc".to_vec()
        )
    );
}

fn drain<R: std::io::Read>(
    g: &mut GzipStream<R>,
    buf: &mut [u8],
    out: &mut Vec<u8>,
) -> Option<StreamFault> {
    loop {
        match g.read_some(buf) {
            Ok(0) => return None,
            Ok(k) => out.extend(&buf[..k]),
            Err(f) => return Some(f),
        }
    }
}

// -- opening -------------------------------------------------------------------------------------

#[test]
fn not_a_capture() {
    assert_eq!(Capture::from_bytes(b"").err(), Some(OpenError::Empty));
    assert_eq!(
        Capture::from_bytes(b"GET / HTTP/1.1").err(),
        Some(OpenError::UnknownMagic {
            head: b"GET ".to_vec()
        })
    );
    assert_eq!(
        Capture::from_bytes(b"\xd4\xc3").err(),
        Some(OpenError::UnknownMagic {
            head: vec![0xd4, 0xc3]
        })
    );
    let dir = std::env::temp_dir();
    assert!(matches!(
        Capture::open(&dir),
        Err(OpenError::NoFile {
            why: super::NoFileWhy::Directory,
            ..
        })
    ));
    let missing = dir.join("pktflow-no-such-capture.pcap");
    assert!(matches!(
        Capture::open(&missing),
        Err(OpenError::NoFile {
            why: super::NoFileWhy::Missing,
            ..
        })
    ));
    assert!(matches!(
        read_gz(&[0x1f, 0x8b, 8, 0]),
        Err(OpenError::BadGzip {
            fault: StreamFault::HeaderCut
        })
    ));
    let empty_member = gzip(b"");
    assert!(matches!(read_gz(&empty_member), Err(OpenError::Empty)));
}

#[test]
fn pcap_header_cut_is_damage_at_offset_4() {
    let whole = pcap(&[], 1, false, false);
    let r = read(&whole[..10]);
    let d = r
        .cap
        .stats()
        .damage
        .clone()
        .unwrap_or_else(|| panic!("damage"));
    assert_eq!(
        (d.frame, d.offset, d.kind),
        (1, 4, DamageKind::FileHeaderCut)
    );
}

#[test]
fn facts_serialise_internally_tagged() {
    let r = read(&pcap(&three(), 1, false, false)[..100]);
    let v = serde_json::to_value(r.cap.stats()).unwrap_or_default();
    assert_eq!(
        v["damage"],
        serde_json::json!({"frame": 1, "offset": 24, "kind": "record_cut", "caplen": 69, "present": 60, "stream": null})
    );
    assert_eq!(v["format"], "pcap");
    let e = serde_json::to_value(OpenError::BadGzip {
        fault: StreamFault::Corrupt { start: 10, end: 20 },
    })
    .unwrap_or_default();
    assert_eq!(
        e,
        serde_json::json!({"kind": "bad_gzip", "fault": {"kind": "corrupt", "start": 10, "end": 20}})
    );
}

#[test]
fn random_damage_never_panics() {
    let mut ng = Ng::section(false);
    ng.idb(1, 0, &[]);
    for p in PAYLOADS {
        ng.epb(0, 1, &segment(p, 1), 0);
    }
    let sources = [pcap(&three(), 1, false, false), ng.out];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for src in &sources {
        for _ in 0..3000 {
            let mut d = src.clone();
            for _ in 0..1 + next() % 4 {
                let at = (next() as usize) % d.len();
                d[at] = next() as u8;
            }
            let cut = d.len() - (next() as usize % 8).min(d.len());
            if let Ok(cap) = Capture::from_bytes(&d[..cut]) {
                let r = read_cap(cap);
                let st = r.cap.stats();
                assert_eq!(st.tcp_packets as usize, r.packets.len());
            }
        }
    }
}

#[test]
fn a_capture_can_move_between_threads() {
    fn send<T: Send>() {}
    send::<Capture>();
}
