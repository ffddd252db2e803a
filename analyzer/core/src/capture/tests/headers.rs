use super::*;

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
fn link_type_field_with_fcs_bits_is_its_low_16_bits() {
    // Ethernet frames ending in a 4-byte FCS: the field says so in its upper bits (present,
    // length 2 x 16 bits), as libpcap writes it; the FCS is not payload
    let mut frame = segment(b"abc", 1);
    frame.extend([0xde, 0xad, 0xbe, 0xef]);
    for link in [0x0400_0001, 0x2400_0001] {
        let r = read(&pcap(&[rec(frame.clone())], link, false, false));
        assert_eq!(payloads(&r), [b"abc".to_vec()], "{link:#x}");
        assert_eq!(r.cap.stats().link_types, ["EN10MB"]);
        assert_eq!(r.cap.outcome(), Ok(()));
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
    // a UDP fragment may be a piece of a tunnel's datagram: a fragment too
    assert_eq!(
        (st.ip_fragments, st.non_tcp_packets, st.undecodable_packets),
        (3, 0, 3)
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

#[test]
fn a_tcp_header_cut_inside_its_options_is_still_the_packet() {
    // MSS, SACK permitted, timestamps, NOP, window scale: 20 option bytes, cut after 14
    let opts = [
        2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
    ];
    let syn = ether(&ipv4(&tcp(b"", 1, &opts), 6, [0, 0], &[]), 0x0800, &[]);
    let whole = syn.len() as u32;
    let recs = [
        Rec {
            frame: syn[..68].to_vec(),
            orig: whole,
        },
        Rec {
            frame: syn[..54].to_vec(),
            orig: whole,
        },
        Rec {
            frame: syn[..53].to_vec(),
            orig: whole,
        },
    ];
    let mut cap =
        Capture::from_bytes(&pcap(&recs, 1, false, false)).unwrap_or_else(|e| panic!("{e:?}"));
    let mut got = Vec::new();
    while let Some(p) = cap.next_packet() {
        got.push((
            p.options.to_vec(),
            p.options_cut,
            p.payload.len(),
            p.plen,
            p.seq,
        ));
    }
    assert_eq!(
        got,
        [
            (opts[..14].to_vec(), true, 0, 0, 1),
            (Vec::new(), true, 0, 0, 1)
        ]
    );
    let st = cap.stats();
    assert_eq!(
        (st.tcp_packets, st.undecodable_packets, st.truncated_packets),
        (2, 1, 3)
    );
}

fn udp(payload: &[u8], dport: u16) -> Vec<u8> {
    let mut u = 50000u16.to_be_bytes().to_vec();
    u.extend(dport.to_be_bytes());
    u.extend(((8 + payload.len()) as u16).to_be_bytes());
    u.extend([0, 0]);
    u.extend(payload);
    u
}

#[test]
fn tunnels_are_taken_off() {
    use crate::capture::tunnel::Tunnel;
    let inner_ip = ipv4(&tcp(b"hello", 1, &[]), 6, [0, 0], &[]);
    let inner_eth = ether(&inner_ip, 0x0800, &[0x8100]);
    let inner_v6 = ipv6(&tcp(b"hello", 1, &[]), &[]);
    let outer = |proto: u8, l4: Vec<u8>| ether(&ipv4(&l4, proto, [0, 0], &[]), 0x0800, &[]);
    let vxlan = [&[0x08u8, 0, 0, 0, 0, 0, 42, 0][..], &inner_eth].concat();
    let geneve = [&[0u8, 0, 0x65, 0x58, 0, 0, 7, 0][..], &inner_eth].concat();
    let gre_key = [&[0x20u8, 0, 0x08, 0x00, 0, 0, 0, 9][..], &inner_ip].concat();
    let erspan = [
        &[
            0x10u8, 0, 0x88, 0xBE, 0, 0, 0, 1, 0x10, 0, 0x00, 0x05, 0, 0, 0, 0,
        ][..],
        &inner_eth,
    ]
    .concat();
    let cases: [(Vec<u8>, Tunnel); 7] = [
        (outer(17, udp(&vxlan, 4789)), Tunnel::Vxlan { vni: 42 }),
        (outer(17, udp(&geneve, 6081)), Tunnel::Geneve { vni: 7 }),
        (outer(47, gre_key), Tunnel::Gre { key: Some(9) }),
        (
            outer(47, erspan),
            Tunnel::Erspan {
                version: 1,
                session: Some(5),
            },
        ),
        (
            outer(4, inner_ip.clone()),
            Tunnel::Ipip { inner: 4, outer: 4 },
        ),
        (
            outer(41, inner_v6.clone()),
            Tunnel::Ipip { inner: 6, outer: 4 },
        ),
        // VXLAN carried in GRE (a mirror of an overlay): the innermost tunnel is the packet's
        (
            outer(
                47,
                [
                    &[0u8, 0, 0x08, 0x00][..],
                    &ipv4(&udp(&vxlan, 4789), 17, [0, 0], &[]),
                ]
                .concat(),
            ),
            Tunnel::Vxlan { vni: 42 },
        ),
    ];
    for (frame, want) in cases {
        let mut cap = Capture::from_bytes(&pcap(&[rec(frame)], 1, false, false))
            .unwrap_or_else(|e| panic!("{e:?}"));
        let p = cap
            .next_packet()
            .unwrap_or_else(|| panic!("{want:?}: no packet"));
        assert_eq!(
            (p.payload, p.plen, p.tunnel),
            (&b"hello"[..], 5, Some(want))
        );
        let st = cap.stats();
        assert_eq!((st.tunnelled_packets, st.tunnels.len()), (1, 1), "{want:?}");
    }
    // UDP to other ports, and VXLAN without its VNI flag, are not tunnels
    for frame in [
        outer(17, udp(&vxlan, 53)),
        outer(17, udp(&[&[0u8; 8][..], &inner_eth].concat(), 4789)),
    ] {
        let r = read(&pcap(&[rec(frame)], 1, false, false));
        assert!(r.packets.is_empty());
        assert_eq!(r.cap.stats().non_tcp_packets, 1);
    }
}
