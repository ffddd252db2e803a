//! The memory bounds hold, and hostile input never panics.

use super::flow::*;
use crate::packet::{Addr, ACK, FIN, PSH, RST, SYN};
use crate::tcp::direction::{MAX_BUFFERED_BYTES, MAX_BUFFERED_SEGMENTS, MAX_EVIDENCE, MAX_HOLES};
use crate::tcp::{MAX_LATE_FRAMES, MAX_WAITING};

#[test]
fn more_segments_waiting_than_the_bound_declare_the_oldest_hole_a_gap() {
    let mut f = Flow::new();
    f.handshake();
    let base = f.seq[1];
    for i in 0..=MAX_BUFFERED_SEGMENTS as u32 {
        f.send_with(
            1,
            b"abc",
            E {
                seq: Some(base + 10 + 4 * i),
                dt: 1e-6,
                ..E::default()
            },
        );
    }
    let ran = run(&f.packets);
    let s2c = ran.only().facts().directions[1].clone();
    assert_eq!(s2c.bound_gaps, 1);
    // then one gap per hole: the first declared by the bound, the rest at the end
    assert_eq!(ran.only().analyses().gaps[0], (1, 0, 10));
    assert_eq!(
        s2c.holes_forgotten,
        (MAX_BUFFERED_SEGMENTS + 1 - MAX_HOLES) as u64
    );
    assert_eq!(s2c.ev_gap.len(), MAX_EVIDENCE);
}

#[test]
fn more_bytes_waiting_than_the_bound_declare_the_oldest_hole_a_gap() {
    let mut f = Flow::new();
    f.handshake();
    let base = f.seq[1];
    let seg = vec![b'B'; 65000];
    let n = MAX_BUFFERED_BYTES / seg.len() + 1;
    for i in 0..n as u32 {
        f.send_with(
            1,
            &seg,
            E {
                seq: Some(base + 1000 + 65000 * i),
                dt: 1e-5,
                ..E::default()
            },
        );
    }
    let ran = run(&f.packets);
    let c = ran.only();
    assert_eq!(c.facts().directions[1].bound_gaps, 1);
    assert_eq!(c.analyses().gaps, vec![(1, 0, 1000)]);
    assert_eq!(c.analyses().data[1].len(), 1000 + n * 65000);
}

#[test]
fn holes_past_the_bound_are_forgotten_and_late_bytes_there_are_retransmissions() {
    let mut f = Flow::new();
    f.handshake();
    let base = f.seq[1];
    for i in 0..(MAX_HOLES as u32 + 6) {
        f.send_with(
            1,
            &[b'h'; 10],
            E {
                seq: Some(base + 20 * i + 10),
                ..E::default()
            },
        );
    }
    // the last hole opened past the bound is filled at once: not remembered, a retransmission
    let last = MAX_HOLES as u32 + 5;
    f.send_with(
        1,
        &[b'f'; 10],
        E {
            seq: Some(base + 20 * last),
            dt: 1e-5,
            ..E::default()
        },
    );
    let ran = run(&f.packets);
    let c = ran.only();
    let s2c = c.facts().directions[1].clone();
    assert_eq!(s2c.holes_forgotten, 6);
    assert_eq!(
        (s2c.retransmitted_segments, s2c.out_of_order_segments),
        (1, 0)
    );
    assert_eq!(s2c.payload_bytes, 10 * (i64::from(MAX_HOLES as u32) + 6));
}

#[test]
fn evidence_and_late_frames_are_capped() {
    let mut f = Flow::new();
    f.handshake();
    let p = f.send(1, &[b'a'; 10]);
    for _ in 0..50 {
        f.send_with(
            1,
            &[b'a'; 10],
            E {
                seq: Some(p.seq),
                dt: 0.1,
                ..E::default()
            },
        );
    }
    f.fin(0);
    f.fin(1);
    f.ack(0);
    let mut late = f.packets.last().unwrap().clone();
    // another connection's packet later on: the sweep after it retires the first
    let mut other = Flow::with(1, 2, late.ts + 50.0).port(40001);
    other.send(0, b"x");
    f.packets.extend(other.packets);
    // after the sweep, and within the time a retired 4-tuple is remembered (table::GONE_S)
    late.ts += 59.0;
    for _ in 0..30 {
        late.frame += 1;
        late.ts += 1.0;
        f.packets.push(late.clone());
    }
    let ran = run(&f.packets);
    let s2c = ran.conns[0].facts().directions[1].clone();
    assert_eq!(
        (s2c.retransmitted_segments, s2c.ev_retrans.len()),
        (50, MAX_EVIDENCE)
    );
    assert_eq!(
        (ran.engine.late_packets, ran.engine.late_frames.len()),
        (30, MAX_LATE_FRAMES)
    );
}

#[test]
fn a_syn_more_than_max_waiting_times_makes_the_connection() {
    let mut f = Flow::new();
    for _ in 0..MAX_WAITING + 3 {
        f.emit(
            0,
            SYN,
            b"",
            E {
                ack: Some(0),
                ..E::default()
            },
        );
    }
    let mut eng = Engine::new(Recording::default(), Some(30.0), Some(2.0));
    for (i, p) in f.packets.iter().enumerate() {
        eng.feed(&p.packet());
        assert_eq!(
            eng.live().count(),
            usize::from(i >= MAX_WAITING),
            "packet {i}"
        );
    }
    eng.finish();
    let conns: Vec<_> = eng.take_retired().collect();
    assert_eq!(conns.len(), 1);
    assert_eq!(conns[0].packets(), (MAX_WAITING + 3) as u64);
}

/// Random packets on a few 4-tuples: random flags, sequence numbers, sizes, cut payloads,
/// options, times going back and forth. Nothing panics, the streams stay contiguous (the
/// recorder asserts it), every connection is handed out once.
#[test]
fn hostile_packets_never_panic() {
    let addrs = [
        Addr::v4([10, 0, 0, 1]),
        Addr::v4([10, 0, 0, 2]),
        Addr::v6([0xfd; 16]),
    ];
    let ports = [5432, 40000, 40001, 6432];
    let flag_choices = [
        ACK,
        ACK | PSH,
        SYN,
        SYN | ACK,
        FIN | ACK,
        RST,
        RST | ACK,
        FIN,
        SYN | FIN,
        0,
        0xFF,
    ];
    let options: [&[u8]; 7] = [
        &[],
        &[2, 4, 5, 0xb4, 1, 3, 3, 7],
        &[3, 3, 14],
        &[3, 3, 200],
        &[2, 4],
        &[3],
        &[1, 0, 2, 1],
    ];
    for seed in 1..200u64 {
        let mut rng = Rng(seed * 0x9E37_79B9);
        let bases: Vec<u32> = (0..3).map(|_| rng.next() as u32).collect();
        let mut t = 1000.0;
        let mut pkts = Vec::new();
        for i in 0..(20 + rng.below(300)) {
            t += [0.0, 1e-4, 0.002, 0.004, 0.5, 3.0, 40.0, -0.001][rng.below(8) as usize];
            let src = addrs[rng.below(3) as usize];
            let dst = if rng.below(20) == 0 {
                src
            } else {
                addrs[rng.below(3) as usize]
            };
            let plen = [0u32, 0, 1, 10, 100, 1448, 65000, 3, u32::MAX][rng.below(9) as usize];
            let cap = if rng.below(6) == 0 {
                rng.below(u64::from(plen.min(70_000)) + 1) as usize
            } else {
                plen.min(70_000) as usize
            };
            let seq = bases[rng.below(3) as usize]
                .wrapping_add(rng.below(300_000) as u32)
                .wrapping_sub(2000);
            let ack = bases[rng.below(3) as usize]
                .wrapping_add(rng.below(300_000) as u32)
                .wrapping_sub(2000);
            pkts.push(Pkt {
                frame: i + 1,
                ts: t,
                src,
                dst,
                sport: ports[rng.below(4) as usize],
                dport: ports[rng.below(4) as usize],
                seq,
                ack,
                flags: flag_choices[rng.below(flag_choices.len() as u64) as usize],
                win: [0, 1, 10, 512, 65535][rng.below(5) as usize],
                plen,
                payload: vec![rng.below(256) as u8; cap],
                options: options[rng.below(options.len() as u64) as usize].to_vec(),
                options_cut: false,
            });
        }
        let sweep = seed % 2 == 0;
        let ran = run_with(
            &pkts,
            Some(if sweep { 1.0 } else { f64::INFINITY }),
            Some(0.5),
            sweep,
        );
        let mut numbers: Vec<u64> = ran.conns.iter().map(|c| c.number()).collect();
        numbers.sort_unstable();
        assert_eq!(
            numbers,
            (1..=ran.engine.opened).collect::<Vec<_>>(),
            "seed {seed}"
        );
        assert!(ran
            .conns
            .iter()
            .all(|c| c.is_finished() && c.analyses().info.is_some()));
    }
}
