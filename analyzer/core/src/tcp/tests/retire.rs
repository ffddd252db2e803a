//! Connections leaving the engine while the pass goes on, late packets, connections kept as
//! their handshake segments (the reference's test_retire.py).

use super::flow::*;
use crate::packet::{Addr, ACK, FIN, PSH, RST, SYN};
use crate::tcp::{RoleSource, MAX_GONE, MAX_SETTLED};

/// One short connection from client port `port` at time t: handshake, a query, a reply of
/// 20 segments of 1,000 bytes, both FINs and the last ACK.
fn conversation(port: u16, t: f64) -> Vec<Pkt> {
    let mut f = Flow::with(1000, 5000, t).port(port);
    f.handshake();
    f.send(0, b"Q\x00\x00\x00\x0dSELECT 1\x00");
    f.ack(1);
    for _ in 0..20 {
        let mut d = vec![0u8; 1000];
        d[0] = b'D';
        f.send(1, &d);
    }
    f.ack(0);
    f.fin(0);
    f.fin(1);
    f.ack(0);
    f.packets
}

fn storm(n: u16, spacing: f64) -> Vec<Pkt> {
    renumber(
        (0..n)
            .flat_map(|i| conversation(20000 + i, 1000.0 + f64::from(i) * spacing))
            .collect(),
    )
}

fn ids(conns: &[crate::tcp::Connection<Rec>]) -> Vec<u64> {
    conns.iter().map(|c| c.number()).collect()
}

#[test]
fn closed_connections_retire_once_silent_for_the_linger() {
    let mut pkts = storm(3, 2.0);
    let mut late = pkts.last().unwrap().clone(); // c3's last ACK again, 0.5 s later
    late.frame += 1;
    late.ts += 0.5;
    pkts.push(late.clone());
    let mut eng = Engine::new(Recording::default(), Some(1.0), Some(2.0));
    let mut retired = Vec::new();
    for p in &pkts {
        eng.feed(&p.packet());
        eng.sweep(p.ts);
        retired.extend(eng.take_retired().map(|c| c.number()));
    }
    assert_eq!(retired, vec![1, 2]); // c1 and c2 closed more than a second before the end
    assert_eq!(eng.live().map(|c| c.number()).collect::<Vec<_>>(), vec![3]);
    eng.sweep(late.ts + 0.99);
    assert_eq!(
        eng.take_retired().count(),
        0,
        "silent since its late packet for less than the linger"
    );
    eng.sweep(late.ts + 1.0);
    assert_eq!(
        eng.take_retired().map(|c| c.number()).collect::<Vec<_>>(),
        vec![3]
    );
    assert_eq!(eng.live().count(), 0);
}

#[test]
fn storm_report_is_the_end_of_capture_report() {
    let pkts = storm(40, 0.5);
    let early = run_with(&pkts, Some(0.2), Some(2.0), true);
    let whole = run_with(&pkts, Some(f64::INFINITY), Some(f64::INFINITY), true);
    assert_eq!(ids(&early.conns), (1..=40).collect::<Vec<_>>());
    for (a, b) in early.conns.iter().zip(&whole.conns) {
        assert_eq!(a.facts(), b.facts());
        assert_eq!(a.analyses().data, b.analyses().data);
        assert_eq!(a.analyses().packets.len(), b.analyses().packets.len());
    }
}

#[test]
fn a_late_packet_is_counted_not_taken_for_a_new_connection() {
    let pkts = storm(2, 2.0);
    let c1: Vec<&Pkt> = pkts
        .iter()
        .filter(|p| p.sport == 20000 || p.dport == 20000)
        .collect();
    let mut late = (*c1.last().unwrap()).clone();
    late.frame = pkts.len() as u64 + 1;
    late.ts = pkts.last().unwrap().ts + 10.0;
    let mut all = pkts.clone();
    all.push(late.clone());
    for (i, mut p) in conversation(20000, 0.0).into_iter().take(3).enumerate() {
        p.frame = pkts.len() as u64 + 2 + i as u64;
        p.ts = late.ts + 1.0 + i as f64 * 1e-4;
        all.push(p); // SYN, SYN-ACK, ACK again: a new connection
    }
    let ran = run_with(&all, Some(1.0), Some(2.0), true);
    assert_eq!(ids(&ran.conns), vec![1, 2, 3]);
    assert_eq!(ran.conns[2].facts().role_source, RoleSource::Handshake);
    assert_eq!(
        (ran.engine.late_packets, ran.engine.late_frames.clone()),
        (1, vec![late.frame])
    );
    assert_eq!(ran.conns[0].packets(), c1.len() as u64); // the late ACK is not counted in c1
}

/// n connection attempts refused with a RST, from client ports 30000 up.
fn syn_rst(n: u32, spacing: f64) -> Vec<Pkt> {
    let (c, s) = (Addr::v4([10, 1, 0, 0]), Addr::v4([10, 0, 0, 2]));
    let mut out = Vec::new();
    for i in 0..n {
        let (port, ts) = (30000 + i as u16, f64::from(i) * spacing);
        let pkt = |frame, src, dst, sport, dport, seq, ack, flags| Pkt {
            frame,
            ts,
            src,
            dst,
            sport,
            dport,
            seq,
            ack,
            flags,
            win: 64240,
            plen: 0,
            payload: vec![],
            options: vec![],
            options_cut: false,
        };
        out.push(pkt(2 * u64::from(i) + 1, c, s, port, 5432, 1000, 0, SYN));
        out.push(pkt(
            2 * u64::from(i) + 2,
            s,
            c,
            5432,
            port,
            0,
            1001,
            RST | ACK,
        ));
    }
    out
}

#[test]
fn the_oldest_retired_four_tuples_are_forgotten_first() {
    let n = (MAX_GONE / 2 + 1) as u32;
    let mut eng = Engine::new(Recording::default(), Some(0.0), None);
    let mut retired = 0;
    for p in syn_rst(n, 1e-3) {
        eng.feed(&p.packet());
        eng.sweep(p.ts);
        retired += eng.take_retired().count();
    }
    assert_eq!((retired, eng.live().count()), (n as usize, 0));
    let mut frame = 2 * u64::from(n);
    for port in [30000, 30001] {
        // an ACK from the client of the first, then of the second
        frame += 1;
        let p = Pkt {
            frame,
            ts: f64::from(n) * 1e-3,
            src: Addr::v4([10, 1, 0, 0]),
            dst: Addr::v4([10, 0, 0, 2]),
            sport: port,
            dport: 5432,
            seq: 1001,
            ack: 1,
            flags: ACK,
            win: 64240,
            plen: 0,
            payload: vec![],
            options: vec![],
            options_cut: false,
        };
        eng.feed(&p.packet());
    }
    assert_eq!(
        eng.live().map(|c| c.meta().client.1).collect::<Vec<_>>(),
        vec![30000]
    );
    assert_eq!(
        (eng.facts().late_packets, eng.facts().late_frames),
        (1, vec![frame])
    );
}

#[test]
fn a_close_both_sides_acknowledged_retires_after_the_settled_linger() {
    let mut pkts = storm(4, 5.0);
    let last = pkts
        .iter()
        .rposition(|p| p.sport == 20003 || p.dport == 20003)
        .unwrap();
    pkts.remove(last); // c4's last ACK lost
    let mut eng = Engine::new(Recording::default(), Some(30.0), Some(2.0));
    let mut retired = Vec::new();
    for p in &pkts {
        eng.feed(&p.packet());
        eng.sweep(p.ts);
        retired.extend(eng.take_retired().map(|c| c.number()));
    }
    assert_eq!(retired, vec![1, 2, 3]);
    let end = pkts.last().unwrap().ts;
    eng.sweep(end + 2.0);
    assert_eq!(eng.take_retired().count(), 0); // c4's close is not acknowledged
    eng.sweep(end + 30.0);
    assert_eq!(
        eng.take_retired().map(|c| c.number()).collect::<Vec<_>>(),
        vec![4]
    );
}

#[test]
fn a_reset_connection_retires_after_the_settled_linger() {
    let mut eng = Engine::new(Recording::default(), Some(30.0), Some(2.0));
    for p in syn_rst(3, 1.0) {
        eng.feed(&p.packet());
        eng.sweep(p.ts);
    }
    eng.sweep(3.0);
    assert_eq!(
        eng.take_retired().map(|c| c.number()).collect::<Vec<_>>(),
        vec![1, 2]
    );
}

#[test]
fn settled_connections_waiting_are_bounded() {
    let mut eng = Engine::new(Recording::default(), Some(30.0), Some(2.0));
    for p in syn_rst(MAX_SETTLED as u32 + 5, 1e-5) {
        eng.feed(&p.packet());
        eng.sweep(p.ts);
    }
    assert_eq!(
        eng.take_retired().map(|c| c.number()).collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5]
    );
    assert_eq!(eng.live().count(), MAX_SETTLED);
}

#[test]
fn settled_connections_retired_by_reuse_do_not_count_as_waiting() {
    let (c, s) = (Addr::v4([10, 1, 0, 0]), Addr::v4([10, 0, 0, 2]));
    let mut pkts: Vec<Pkt> = Vec::new();
    let mut attempt = |port: u16, isn: u32, refused: bool| {
        let ts = pkts.len() as f64 * 1e-6;
        let mut p = Pkt {
            frame: pkts.len() as u64 + 1,
            ts,
            src: c,
            dst: s,
            sport: port,
            dport: 5432,
            seq: isn,
            ack: 0,
            flags: SYN,
            win: 64240,
            plen: 0,
            payload: vec![],
            options: vec![],
            options_cut: false,
        };
        pkts.push(p.clone());
        if refused {
            p = Pkt {
                frame: p.frame + 1,
                src: s,
                dst: c,
                sport: 5432,
                dport: port,
                seq: 0,
                ack: isn + 1,
                flags: RST | ACK,
                ..p
            };
            pkts.push(p);
        }
    };
    (20000..20005).for_each(|port| attempt(port, 1000, true)); // c1-c5: settled, at the head
    (30000..30010).for_each(|port| attempt(port, 1000, true)); // c6-c15: settled
    (30000..30010).for_each(|port| attempt(port, 5000, false)); // c16-c25 reuse: c6-c15 retire
    (30010..30000 + MAX_SETTLED as u16).for_each(|port| attempt(port, 1000, true));
    let mut eng = Engine::new(Recording::default(), Some(30.0), Some(2.0));
    let mut retired = Vec::new();
    for p in &pkts {
        eng.feed(&p.packet());
        eng.sweep(p.ts);
        retired.extend(eng.take_retired().map(|c| c.number()));
    }
    assert_eq!(retired, (6..16).collect::<Vec<_>>());
}

/// Connection attempts whose first packets are handshake segments, one per client port,
/// interleaved packet by packet.
fn handshake_cases() -> Vec<Pkt> {
    let (ca, sa) = (Addr::v4([10, 1, 0, 0]), Addr::v4([10, 0, 0, 2]));
    let query = b"Q\x00\x00\x00\x0dSELECT 1\x00".to_vec();
    type Seg = (bool, u16, u32, u32, u8, Vec<u8>);
    let c = |port, seq, ack, flags| (true, port, seq, ack, flags, vec![]);
    let s = |port, seq, ack, flags| (false, port, seq, ack, flags, vec![]);
    let cases: Vec<Vec<Seg>> = vec![
        vec![c(40001, 100, 0, SYN); 3], // unanswered, retransmitted
        vec![
            c(40002, 100, 0, SYN),
            s(40002, 900, 101, SYN | ACK),
            s(40002, 900, 101, SYN | ACK),
            c(40002, 101, 901, ACK),
            (true, 40002, 101, 901, ACK | PSH, query.clone()),
            s(40002, 901, 115, ACK),
            c(40002, 115, 901, FIN | ACK),
        ], // answered, late ACK
        vec![c(40003, 100, 0, SYN), s(40003, 0, 101, RST | ACK)], // refused
        vec![c(40004, 100, 0, SYN), c(40004, 7000, 0, SYN)], // the 4-tuple reused: two
        vec![
            s(40005, 900, 101, SYN | ACK),
            c(40005, 101, 901, ACK),
            (true, 40005, 101, 901, ACK | PSH, query.clone()),
        ],
        [
            vec![c(40006, 100, 0, SYN)],
            vec![s(40006, 900, 101, SYN | ACK); 4],
        ]
        .concat(), // no final ACK
        vec![c(40007, 100, 0, SYN); 20], // more than MAX_WAITING
        vec![(true, 40008, 100, 0, SYN, query.clone())], // data on the SYN
        vec![s(40009, 900, 101, SYN | ACK), c(40009, 100, 0, SYN)], // a SYN after the SYN-ACK
    ];
    let mut out = Vec::new();
    for step in 0..20 {
        for case in &cases {
            if let Some((from_client, port, seq, ack, flags, payload)) = case.get(step) {
                let (src, dst, sport, dport) = if *from_client {
                    (ca, sa, *port, 5432)
                } else {
                    (sa, ca, 5432, *port)
                };
                let n = out.len();
                out.push(Pkt {
                    frame: n as u64 + 1,
                    ts: 1000.0 + n as f64 * 0.01,
                    src,
                    dst,
                    sport,
                    dport,
                    seq: *seq,
                    ack: *ack,
                    flags: *flags,
                    win: 64240,
                    plen: payload.len() as u32,
                    payload: payload.clone(),
                    options: vec![],
                    options_cut: false,
                });
            }
        }
    }
    out
}

#[test]
fn connections_kept_as_handshake_segments_are_numbered_as_they_opened() {
    let ran = run_with(&handshake_cases(), Some(f64::INFINITY), Some(2.0), true);
    let conns = ran.by_number();
    let ports: Vec<u16> = conns.iter().map(|c| c.meta().client.1).collect();
    assert_eq!(
        ports,
        vec![40001, 40002, 40003, 40004, 40005, 40006, 40007, 40008, 40009, 40004, 40009]
    );
    let packets: Vec<u64> = conns.iter().map(|c| c.packets()).collect();
    assert_eq!(packets, vec![3, 7, 2, 1, 3, 5, 20, 1, 1, 1, 1]);
    // made from its packets as if at once: the first packet's time and frame
    assert!(conns
        .iter()
        .all(|c| c.meta().first_frame == c.analyses().packets[0].frame));
    assert_eq!(conns[4].facts().role_source, RoleSource::SynAck);
    assert!(conns[1].facts().handshake_seen);
    assert_eq!(
        conns[1].analyses().data[0],
        b"Q\x00\x00\x00\x0dSELECT 1\x00".to_vec()
    );
}

#[test]
fn unanswered_syns_hold_no_analyses() {
    let (c, s) = (Addr::v4([10, 1, 0, 0]), Addr::v4([10, 0, 0, 2]));
    let mut pkts = conversation(20000, 1000.0 + 1500.0 * 1e-3);
    for i in 0..3000u16 {
        pkts.push(Pkt {
            frame: 0,
            ts: 1000.0 + f64::from(i) * 1e-3,
            src: c,
            dst: s,
            sport: 30000 + i,
            dport: 5432,
            seq: 100,
            ack: 0,
            flags: SYN,
            win: 64240,
            plen: 0,
            payload: vec![],
            options: vec![],
            options_cut: false,
        });
    }
    pkts.sort_by(|a, b| a.ts.total_cmp(&b.ts));
    let pkts = renumber(pkts);
    let mut eng = Engine::new(Recording::default(), Some(30.0), Some(2.0));
    let mut most_open = 0;
    let mut numbers = Vec::new();
    for p in &pkts {
        eng.feed(&p.packet());
        eng.sweep(p.ts);
        numbers.extend(eng.take_retired().map(|c| c.number()));
        most_open = most_open.max(eng.handler().opened.len() - numbers.len());
    }
    assert_eq!(most_open, 1);
    eng.finish();
    numbers.extend(eng.take_retired().map(|c| c.number()));
    numbers.sort_unstable();
    assert_eq!(numbers, (1..=3001).collect::<Vec<_>>());
}
