use super::damage::read_gz;
use super::*;

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
            why: crate::capture::NoFileWhy::Directory,
            ..
        })
    ));
    let missing = dir.join("pktflow-no-such-capture.pcap");
    assert!(matches!(
        Capture::open(&missing),
        Err(OpenError::NoFile {
            why: crate::capture::NoFileWhy::Missing,
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
