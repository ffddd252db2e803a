//! Classification, reassembly, windows and roles (the reference's test_tcp_engine.py).

use super::flow::*;
use crate::packet::{ACK, SYN};
use crate::tcp::observe::{FILLS_HOLE, KEEPALIVE, NEW, OUT_OF_ORDER, PARTIAL_RETRANS, RETRANS};
use crate::tcp::{ClosedBy, RoleSource};

#[test]
fn handshake_options_and_scaled_window() {
    let mut f = Flow::new();
    f.handshake_scaled(Some(7), Some(9));
    f.send_with(
        0,
        &[b'Q'; 10],
        E {
            win: 100,
            ..E::default()
        },
    );
    f.send_with(
        1,
        &[b'x'; 3000],
        E {
            win: 50,
            ..E::default()
        },
    );
    f.fin(0);
    f.fin(1);
    let ran = run(&f.packets);
    let c = ran.only();
    let facts = c.facts();
    assert!(facts.handshake_seen);
    assert_eq!(facts.closed_by, Some(ClosedBy::Fin));
    assert_eq!(facts.role_source, RoleSource::Handshake);
    assert_eq!(facts.syn_frames, vec![1, 2]);
    let [c2s, s2c] = &facts.directions;
    assert_eq!(
        (c2s.mss, c2s.window_scale, c2s.window_scale_known),
        (Some(1460), Some(7), true)
    );
    assert_eq!(
        (s2c.window_scale, s2c.window_scale_lower_bound),
        (Some(9), None)
    );
    // the data packets' windows reach observers scaled by the sender's own shift
    let rec = c.analyses();
    let wins: Vec<i64> = rec
        .packets
        .iter()
        .filter(|p| p.end > p.seq)
        .map(|p| p.win)
        .collect();
    assert_eq!(wins, vec![100 << 7, 50 << 9]);
    // SYN windows are never scaled; scale_known as known at each packet
    assert_eq!(rec.packets[0].win, 64240);
    assert_eq!(rec.packets[0].scale_known, [false, false]);
    assert_eq!(rec.packets[1].scale_known, [true, true]);
    assert_eq!(rec.data[0], vec![b'Q'; 10]);
    assert_eq!(rec.data[1].len(), 3000);
    assert!(rec.start_seen.iter().all(|&s| s));
    let info = rec.info.expect("finished");
    assert_eq!(info[1].window_scale, Some(9));
}

#[test]
fn retransmission_counted_once_delivered_once() {
    let mut f = Flow::new();
    f.handshake();
    let p = f.send(1, &[b'a'; 100]);
    f.send_with(
        1,
        &[b'a'; 100],
        E {
            seq: Some(p.seq),
            dt: 0.3,
            ..E::default()
        },
    );
    f.send(1, &[b'b'; 50]);
    let ran = run(&f.packets);
    let c = ran.only();
    let s2c = &c.facts().directions[1];
    assert_eq!(
        (s2c.retransmitted_segments, s2c.retransmitted_bytes),
        (1, 100)
    );
    assert_eq!((s2c.payload_bytes, s2c.data_segments), (150, 2));
    assert_eq!(s2c.ev_retrans, vec![5]);
    let mut want = vec![b'a'; 100];
    want.extend_from_slice(&[b'b'; 50]);
    assert_eq!(c.analyses().data[1], want);
    assert_eq!(c.analyses().kinds(1), vec![NEW, RETRANS, NEW]);
}

/// A copy of bytes the receiver had not acknowledged is the one it took: the sink hears of
/// them and of every byte fed after them (TCP hands bytes over in order). A copy of bytes
/// acknowledged already is spurious, and not told.
#[test]
fn a_copy_of_unacknowledged_bytes_is_told_with_the_bytes_after_them() {
    let mut f = Flow::new();
    f.handshake();
    let lost = f.send(1, &[b'a'; 100]); // frame 4, lost past the capture point
    f.send(1, &[b'b'; 50]); // 5, waits at the receiver for 4's bytes
    f.emit(
        0,
        ACK,
        b"",
        E {
            ack: Some(lost.seq),
            ..E::default()
        },
    ); // 6: a duplicate ACK
    f.send_with(
        1,
        &[b'a'; 100],
        E {
            seq: Some(lost.seq),
            dt: 0.2,
            ..E::default()
        },
    ); // 7: the copy the receiver takes
    f.ack(0); // 8
    f.send_with(
        1,
        &[b'b'; 50],
        E {
            seq: Some(lost.seq.wrapping_add(100)),
            dt: 0.2,
            ..E::default()
        },
    ); // 9: spurious
    let ran = run(&f.packets);
    let rec = ran.only().analyses();
    assert_eq!(rec.kinds(1), vec![NEW, NEW, RETRANS, RETRANS]);
    assert_eq!(rec.resent, vec![(1, 0, 150, 7)]);
}

/// The receiver's answer to a copy says whether it had the first one: a D-SACK of the copy,
/// or an ACK echoing a timestamp older than the copy's (made before the copy came), and the
/// copy was spurious; an ACK that echoes the copy's own, and it took the copy.
#[test]
fn a_copy_the_receiver_reports_or_answered_before_it_came_is_spurious() {
    let ts = |val: u32, ecr: u32| {
        let mut o = vec![1, 1, 8, 10];
        o.extend_from_slice(&val.to_be_bytes());
        o.extend_from_slice(&ecr.to_be_bytes());
        o
    };
    let dsack = |left: u32, right: u32| {
        let mut o = vec![1, 1, 5, 10];
        o.extend_from_slice(&left.to_be_bytes());
        o.extend_from_slice(&right.to_be_bytes());
        o
    };
    // (the ACK's options, whether the copy is told)
    for (case, told) in [
        ("dsack", false),
        ("older echo", false),
        ("copy's echo", true),
    ] {
        let mut f = Flow::new();
        f.handshake();
        let first = f.send_with(
            1,
            &[b'a'; 100],
            E {
                options: ts(10, 1),
                ..E::default()
            },
        );
        f.send_with(
            1,
            &[b'a'; 100],
            E {
                seq: Some(first.seq),
                dt: 0.01,
                options: ts(20, 1),
                ..E::default()
            },
        ); // frame 5
        let options = match case {
            "dsack" => [ts(2, 20), dsack(first.seq, first.seq.wrapping_add(100))].concat(),
            "older echo" => ts(2, 10),
            _ => ts(2, 20),
        };
        f.emit(
            0,
            ACK,
            b"",
            E {
                options,
                ..E::default()
            },
        );
        let ran = run(&f.packets);
        let rec = ran.only().analyses();
        let want = if told {
            vec![(1, 0, 100, 5)]
        } else {
            Vec::new()
        };
        assert_eq!(rec.resent, want, "{case}");
    }
}

/// A hole filled within 3 ms is reordering (tshark's rule); later, a retransmission.
#[test]
fn reordering_within_3ms_is_out_of_order_later_a_retransmission() {
    for (dt, ooo) in [(0.001, true), (0.0029, true), (0.0031, false), (0.3, false)] {
        let mut f = Flow::new();
        f.handshake();
        let base = f.seq[1];
        f.send_with(
            1,
            &[b'2'; 10],
            E {
                seq: Some(base + 10),
                ..E::default()
            },
        );
        f.send_with(
            1,
            &[b'1'; 10],
            E {
                seq: Some(base),
                dt,
                ..E::default()
            },
        );
        f.seq[1] = base + 20;
        f.send(1, &[b'3'; 10]);
        let ran = run(&f.packets);
        let c = ran.only();
        let s2c = &c.facts().directions[1];
        assert_eq!(s2c.out_of_order_segments, u64::from(ooo), "dt {dt}");
        assert_eq!(s2c.retransmitted_segments, u64::from(!ooo));
        assert_eq!((s2c.gaps, s2c.payload_bytes, s2c.data_segments), (0, 30, 3));
        assert_eq!(
            c.analyses().data[1],
            b"111111111122222222223333333333".to_vec()
        );
        let fill = if ooo {
            FILLS_HOLE
        } else {
            FILLS_HOLE | RETRANS
        };
        assert_eq!(c.analyses().kinds(1), vec![NEW | OUT_OF_ORDER, fill, NEW]);
    }
}

#[test]
fn a_segment_over_a_hole_and_past_the_highest_byte_is_a_partial_retransmission() {
    let mut f = Flow::new();
    f.handshake();
    let base = f.seq[0];
    f.send_with(
        0,
        &[b'b'; 50],
        E {
            seq: Some(base + 100),
            ..E::default()
        },
    );
    f.send_with(
        0,
        &[b'a'; 200],
        E {
            seq: Some(base),
            dt: 0.5,
            ..E::default()
        },
    );
    let ran = run(&f.packets);
    let c = ran.only();
    let c2s = &c.facts().directions[0];
    // 100 bytes new in the hole, 50 beyond the highest; 50 seen before
    assert_eq!(
        (
            c2s.payload_bytes,
            c2s.retransmitted_segments,
            c2s.retransmitted_bytes
        ),
        (200, 1, 50)
    );
    assert_eq!(
        c.analyses().kinds(0),
        vec![NEW | OUT_OF_ORDER, NEW | PARTIAL_RETRANS]
    );
    assert_eq!(c.analyses().data[0].len(), 200);
    assert_eq!(c.analyses().gaps, vec![]);
}

#[test]
fn capture_gap_acked_by_receiver() {
    let mut f = Flow::new();
    f.handshake();
    f.send(1, &[b'a'; 100]);
    f.seq[1] += 200; // 200 bytes the capture never saw
    f.send(1, &[b'c'; 100]);
    f.ack(0);
    let ran = run(&f.packets);
    let c = ran.only();
    let s2c = &c.facts().directions[1];
    assert_eq!(
        (s2c.gaps, s2c.missing_bytes, s2c.ev_gap.clone()),
        (1, 200, vec![6])
    );
    assert_eq!(c.analyses().gaps, vec![(1, 100, 200)]);
    assert_eq!(c.analyses().data[1][300..], [b'c'; 100]);
    // the gap was declared when the ACK came, not at the end
    assert_eq!(c.analyses().kinds(1), vec![NEW, NEW | OUT_OF_ORDER]);
}

#[test]
fn tail_gap_at_end_of_capture() {
    let mut f = Flow::new();
    f.handshake();
    f.send(1, &[b'a'; 100]);
    let ack = f.seq[1] + 400;
    f.emit(
        0,
        ACK,
        b"",
        E {
            ack: Some(ack),
            ..E::default()
        },
    );
    let ran = run(&f.packets);
    let s2c = &ran.only().facts().directions[1];
    assert_eq!((s2c.gaps, s2c.missing_bytes), (1, 400));
    assert_eq!(ran.only().analyses().gaps, vec![(1, 100, 400)]);
}

#[test]
fn sequence_wraparound() {
    let mut f = Flow::with(1000, 0xFFFF_FFFF - 150, T0);
    f.handshake();
    for i in 0..5u8 {
        f.send(1, &[65 + i; 100]);
        f.ack(0);
    }
    let ran = run(&f.packets);
    let c = ran.only();
    let s2c = &c.facts().directions[1];
    assert_eq!(
        (s2c.payload_bytes, s2c.retransmitted_segments, s2c.gaps),
        (500, 0, 0)
    );
    let want: Vec<u8> = (0..5u8).flat_map(|i| [65 + i; 100]).collect();
    assert_eq!(c.analyses().data[1], want);
    let seqs: Vec<i64> = c
        .analyses()
        .packets
        .iter()
        .filter(|p| p.d == 1 && p.end > p.seq)
        .map(|p| p.seq)
        .collect();
    assert_eq!(seqs, vec![0, 100, 200, 300, 400]);
    // the client's ACKs speak of the server's stream in the same numbering
    let acks: Vec<i64> = c
        .analyses()
        .packets
        .iter()
        .filter(|p| p.d == 0)
        .map(|p| p.ack)
        .collect();
    assert_eq!(acks, vec![-1, 0, 100, 200, 300, 400, 500]);
}

#[test]
fn port_reuse_after_close_starts_new_connection() {
    let mut f = Flow::new();
    f.handshake();
    f.send(0, b"x");
    f.fin(0);
    f.fin(1);
    let mut g = Flow::with(9_000_000, 77, f.t + 1.0);
    g.handshake();
    g.send(0, b"yy");
    let ran = run(&renumber([f.packets, g.packets].concat()));
    let got: Vec<(u64, i64)> = ran
        .conns
        .iter()
        .map(|c| (c.number(), c.facts().directions[0].payload_bytes))
        .collect();
    assert_eq!(got, vec![(1, 1), (2, 2)]); // the first retired when its 4-tuple was reused
}

#[test]
fn retransmitted_syn_stays_in_connection() {
    let mut f = Flow::new();
    f.handshake();
    let mut syn = f.packets[0].clone();
    syn.ts += 1.0;
    f.packets.insert(1, syn);
    let ran = run(&renumber(f.packets));
    assert_eq!(ran.only().facts().syn_frames, vec![1, 2, 3]);
}

#[test]
fn missing_handshake_lower_port_server_and_scale_lower_bound() {
    let mut f = Flow::new();
    // no handshake: the server sends 4 x 1000 bytes while the client advertises raw window 10
    f.emit(
        0,
        ACK,
        b"",
        E {
            win: 10,
            ..E::default()
        },
    );
    for _ in 0..4 {
        f.send(1, &[b'z'; 1000]);
    }
    let ran = run(&f.packets);
    let facts = ran.only().facts();
    assert!(!facts.handshake_seen);
    assert_eq!(facts.role_source, RoleSource::Port);
    assert_eq!(facts.server.1, 5432);
    let c2s = &facts.directions[0];
    assert_eq!((c2s.window_scale, c2s.window_scale_known), (None, false));
    // 4000 bytes in flight against a raw window of 10: scale >= 9 (10 << 9 = 5120)
    assert_eq!(c2s.window_scale_lower_bound, Some(9));
    // the stream starts where the capture did: not its true start
    assert!(ran.only().analyses().start_seen.iter().all(|&s| !s));
}

#[test]
fn roles_from_a_syn_ack_and_from_ports_either_way() {
    let mut f = Flow::new();
    f.emit(
        1,
        SYN | ACK,
        b"",
        E {
            options: syn_options(1460, None),
            ..E::default()
        },
    );
    let facts = run(&f.packets).only().facts();
    assert_eq!(
        (facts.role_source, facts.client.1, facts.handshake_seen),
        (RoleSource::SynAck, 40000, false)
    );
    // a SYN-ACK without the option proves scaling off both ways
    assert_eq!(facts.directions[0].window_scale, Some(0));
    assert!(facts.directions[0].window_scale_known);
    // the lower port is the server, whichever sends first
    for side in [0, 1] {
        let mut f = Flow::new();
        f.send(side, b"hello");
        let facts = run(&f.packets).only().facts();
        assert_eq!((facts.client.1, facts.server.1), (40000, 5432));
    }
}

#[test]
fn snaplen_truncated_payload_is_counted_not_invented() {
    let mut f = Flow::new();
    f.handshake();
    f.send_with(
        1,
        &[b't'; 60],
        E {
            plen: Some(1000),
            ..E::default()
        },
    );
    f.send(1, &[b'u'; 10]);
    let ran = run(&f.packets);
    let c = ran.only();
    let s2c = &c.facts().directions[1];
    assert_eq!(
        (
            s2c.truncated_bytes,
            s2c.truncated_segments,
            s2c.payload_bytes
        ),
        (940, 1, 1010)
    );
    assert_eq!(s2c.ev_trunc, vec![4]);
    assert_eq!(s2c.gaps, 0); // a cut is not a capture gap
    assert_eq!(c.analyses().gaps, vec![(1, 60, 940)]);
    assert_eq!(c.analyses().data[1][1000..], [b'u'; 10]);
}

#[test]
fn zero_window_window_update_keepalive_rst() {
    let mut f = Flow::new();
    f.handshake();
    f.send(1, &[b'd'; 100]);
    f.emit(
        0,
        ACK,
        b"",
        E {
            win: 0,
            ..E::default()
        },
    );
    f.emit(
        0,
        ACK,
        b"",
        E {
            win: 300,
            ..E::default()
        },
    ); // same ack, bigger window: an update
    let probe = f.seq[1] - 1;
    f.send_with(
        1,
        b"k",
        E {
            seq: Some(probe),
            dt: 5.0,
            ..E::default()
        },
    ); // keep-alive probe
    f.rst(0);
    let ran = run(&f.packets);
    let c = ran.only();
    let facts = c.facts();
    let [c2s, s2c] = &facts.directions;
    assert_eq!(
        (
            c2s.zero_window_events,
            c2s.window_updates,
            c2s.ev_zero.clone()
        ),
        (1, 1, vec![5])
    );
    assert_eq!((s2c.keepalives, s2c.retransmitted_segments), (1, 0));
    assert_eq!(facts.closed_by, Some(ClosedBy::Rst));
    assert!(c.analyses().packets.iter().any(|p| p.kind == KEEPALIVE));
    assert_eq!(c.analyses().data[1].len(), 100); // the probe's byte is not delivered again
}

#[test]
fn random_reordering_always_reassembles_exactly() {
    let mut rng = Rng(7);
    for trial in 0..30 {
        let mut f = Flow::with(1000, rng.next() as u32, T0);
        f.handshake();
        let chunks: Vec<Vec<u8>> = (0..40)
            .map(|_| vec![rng.below(256) as u8; 1 + rng.below(299) as usize])
            .collect();
        for c in &chunks {
            f.send(1, c);
        }
        let mut data = f.packets.split_off(3);
        rng.shuffle(&mut data);
        let ran = run(&renumber([f.packets, data].concat()));
        let c = ran.only();
        assert_eq!(c.analyses().data[1], chunks.concat(), "trial {trial}");
        assert_eq!(
            c.facts().directions[1].payload_bytes,
            chunks.concat().len() as i64
        );
    }
}

/// One stream cut into random segments, some sent twice or overlapping, some reordered:
/// whatever the cut, the consumer gets the stream once, in order.
#[test]
fn random_splits_with_duplicates_reassemble_exactly() {
    let mut rng = Rng(99);
    let stream: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
    for trial in 0..50 {
        let mut f = Flow::with(1000, 0xFFFF_E000 + rng.below(4096) as u32, T0);
        f.handshake();
        let base = f.seq[1];
        let mut cuts = vec![0usize];
        while *cuts.last().unwrap() < stream.len() {
            let step = if trial % 5 == 0 {
                1
            } else {
                1 + rng.below(700) as usize
            };
            cuts.push((cuts.last().unwrap() + step).min(stream.len()));
        }
        let mut segs: Vec<(usize, usize)> = cuts.windows(2).map(|w| (w[0], w[1])).collect();
        for _ in 0..segs.len() / 4 {
            let (a, b) = segs[rng.below(segs.len() as u64) as usize];
            let extra = rng.below(300) as usize;
            segs.push((a.saturating_sub(extra), (b + extra).min(stream.len())));
        }
        let n = segs.len();
        for _ in 0..n / 10 {
            // reordered within 100 segments: the reassembly buffer stays within its bounds
            let i = rng.below(n as u64) as usize;
            segs.swap(i, (i + rng.below(100) as usize).min(n - 1));
        }
        for (a, b) in segs {
            let e = E {
                seq: Some(base.wrapping_add(a as u32)),
                ..E::default()
            };
            f.send_with(1, &stream[a..b], e);
        }
        let ran = run(&f.packets);
        let c = ran.only();
        assert!(c.analyses().data[1] == stream, "trial {trial}");
        assert_eq!(c.analyses().gaps, vec![], "trial {trial}");
        // unique bytes counted exactly while the holes are remembered (past MAX_HOLES, late
        // bytes count as retransmitted)
        let s2c = &c.facts().directions[1];
        assert!(s2c.payload_bytes == 5000 || s2c.holes_forgotten > 0 && s2c.payload_bytes < 5000);
    }
}

#[test]
fn a_syn_carrying_data_counts_it_but_delivers_nothing() {
    let mut f = Flow::new();
    f.emit(0, SYN, b"hello", E::default());
    let ran = run(&f.packets);
    let c = ran.only();
    assert_eq!(c.facts().directions[0].payload_bytes, 5);
    assert_eq!(c.analyses().data[0].len(), 0);
    assert_eq!(c.analyses().packets[0].kind, NEW);
}
