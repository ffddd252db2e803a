use super::*;

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
    let offset = ng.option(14, &1i64.to_le_bytes());
    ng.idb(276, 0, &[nine, offset]);
    let mut sll2 = vec![0x08, 0x00];
    sll2.extend([0u8; 18]);
    sll2.extend(ipv4(&tcp(b"two", 5, &[]), 6, [0, 0], &[]));
    // times that follow on (a capture's timeline: see clock.rs for jumps)
    ng.epb(0, 1_000_000, &segment(b"one", 1), 60);
    ng.epb(1, 2_000_000_123, &sll2, sll2.len() as u32);
    ng.isb(0, 7);
    ng.isb(1, 5);
    ng.isb(0, 9); // the last counter of an interface counts
                  // a second section, big-endian: interfaces start again
    ng.big = true;
    ng.append_section();
    let binary = ng.option(9, &[0x80 | 10]);
    ng.idb(0, 0, &[binary]);
    // three packets, not one three times (that would be a copy: duplicates.rs)
    let null = |seq: u32| {
        let mut null = 2u32.to_le_bytes().to_vec();
        null.extend(ipv4(&tcp(b"three", seq, &[]), 6, [0, 0], &[]));
        null
    };
    ng.epb(0, 3 * 1024, &null(9), null(9).len() as u32);
    ng.spb(&null(10));
    ng.pb(0, 4 * 1024, &null(11));
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
    assert_eq!(r.packets[0].1, 1.0);
    assert_eq!(r.packets[1].1, 2_000_000_123_f64 * 1e-9 + 1.0);
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
    let per = (2 * crate::capture::BLOCK - 20) / (16 + recs[0].frame.len());
    assert_eq!(r.batch_ends, [r.packets[per - 1].1, r.packets[39].1]);
}
