use super::*;

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

/// Capture::from_bytes reads what Capture::open reads of the same bytes in a file: gzip
/// detected by content, the same packets, batch ends, stats and faults, cut anywhere.
#[test]
fn bytes_in_memory_read_as_the_file() {
    let plain = pcap(&three(), 1, false, false);
    let gz = gzip(&plain);
    for data in [&plain, &gz] {
        for cut in 0..=data.len() {
            let bytes = &data[..cut];
            let file = read_gz(bytes);
            let mem = Capture::from_bytes(bytes).map(read_cap);
            match (file, mem) {
                (Err(a), Err(b)) => assert_eq!(a, b, "{cut}"),
                (Ok(a), Ok(b)) => {
                    assert_eq!((a.packets, a.batch_ends), (b.packets, b.batch_ends));
                    let (mut sa, sb) = (a.cap.stats().clone(), b.cap.stats().clone());
                    sa.file = sb.file.clone();
                    assert_eq!(sa, sb, "{cut}");
                }
                (a, b) => panic!("{cut}: {:?} / {:?}", a.err(), b.err()),
            }
        }
    }
}

pub(super) fn read_gz(data: &[u8]) -> Result<Read, OpenError> {
    // tests run on several threads of one process: a file name of each call's own
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("pktflow-capture-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_default();
    let path = dir.join(format!("{call}-{}.gz", data.len()));
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
