//! Time the engine alone on a synthetic storm of short connections (handshake, a query, five
//! 1,000-byte segments, both FINs): `cargo run --release --example tcp_bench -- 200000`.
use pktflow_core::packet::{Addr, TcpPacket, ACK, FIN, PSH, SYN};
use pktflow_core::tcp::observe::{DirectionInfo, Observed, PacketObserver, StreamSink};
use pktflow_core::tcp::{ConnectionMeta, Handler, TcpEngine};

struct Nop;
impl StreamSink for Nop {
    fn feed(&mut self, _: usize, _: &[u8], _: i64, _: u64, _: f64, _: bool) {}
    fn gap(&mut self, _: usize, _: i64, _: i64, _: u64, _: f64) {}
    fn resent(&mut self, _: usize, _: i64, _: i64, _: u64, _: f64) {}
    fn finish(&mut self) {}
}
impl PacketObserver for Nop {
    fn on_packet(&mut self, _: &Observed) {}
    fn finish(&mut self, _: &[DirectionInfo; 2]) {}
}
struct H;
impl Handler for H {
    type Analyses = Nop;
    fn open(&mut self, _: &ConnectionMeta) -> Nop {
        Nop
    }
}

fn main() {
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20000);
    let c = Addr::v4([10, 0, 0, 1]);
    let s = Addr::v4([10, 0, 0, 2]);
    let payload = vec![0u8; 1000];
    let mut pkts = Vec::new();
    let mut t = 1000.0;
    for i in 0..n {
        let port = 1024 + (i % 60000) as u16;
        let mut p = |from_c: bool, seq: u32, ack: u32, flags: u8, plen: u32| {
            t += 0.0001;
            let (src, dst, sp, dp) = if from_c {
                (c, s, port, 5432)
            } else {
                (s, c, 5432, port)
            };
            pkts.push((t, src, dst, sp, dp, seq, ack, flags, plen));
        };
        p(true, 100, 0, SYN, 0);
        p(false, 900, 101, SYN | ACK, 0);
        p(true, 101, 901, ACK, 0);
        p(true, 101, 901, ACK | PSH, 20);
        for k in 0..5 {
            p(false, 901 + 1000 * k, 121, ACK | PSH, 1000);
        }
        p(true, 121, 5901, ACK, 0);
        p(true, 121, 5901, FIN | ACK, 0);
        p(false, 5901, 122, FIN | ACK, 0);
        p(true, 122, 5902, ACK, 0);
    }
    let started = std::time::Instant::now();
    let mut eng = TcpEngine::new(H, Some(30.0), Some(2.0));
    let mut retired = 0;
    for (i, &(ts, src, dst, sport, dport, seq, ack, flags, plen)) in pkts.iter().enumerate() {
        eng.feed(&TcpPacket {
            frame: i as u64 + 1,
            ts,
            src,
            dst,
            sport,
            dport,
            seq,
            ack,
            flags,
            win: 512,
            plen,
            payload: &payload[..plen as usize],
            options: &[],
            options_cut: false,
            tunnel: None,
        });
        if i % 64 == 0 {
            eng.sweep(ts);
        }
        retired += eng.take_retired().count();
    }
    eng.finish();
    retired += eng.take_retired().count();
    let e = started.elapsed().as_secs_f64();
    println!("{n} connections, {} packets, {retired} retired: {e:.3} s, {:.0} ns a packet, {:.2} us a connection",
             pkts.len(), e * 1e9 / pkts.len() as f64, e * 1e6 / f64::from(n));
}
