//! Crafted packets: two endpoints exchanging segments (the reference's tests/tcpfeed.py), a
//! consumer recording what the engine told it, and a small random generator.

use crate::packet::{Addr, TcpPacket, ACK, FIN, PSH, RST, SYN};
use crate::tcp::observe::{DirectionInfo, Observed, PacketObserver, StreamSink};
use crate::tcp::{Connection, ConnectionMeta, EngineFacts, Handler, TcpEngine};

pub const T0: f64 = 1_700_000_000.0;

/// A packet owning its bytes.
#[derive(Clone, Debug)]
pub struct Pkt {
    pub frame: u64,
    pub ts: f64,
    pub src: Addr,
    pub dst: Addr,
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub win: u16,
    pub plen: u32,
    pub payload: Vec<u8>,
    pub options: Vec<u8>,
    pub options_cut: bool,
}

impl Pkt {
    pub fn packet(&self) -> TcpPacket<'_> {
        TcpPacket {
            frame: self.frame,
            ts: self.ts,
            src: self.src,
            dst: self.dst,
            sport: self.sport,
            dport: self.dport,
            seq: self.seq,
            ack: self.ack,
            flags: self.flags,
            win: self.win,
            plen: self.plen,
            payload: &self.payload,
            options: &self.options,
            options_cut: self.options_cut,
            tunnel: None,
        }
    }
}

pub fn client() -> (Addr, u16) {
    (Addr::v4([10, 0, 0, 1]), 40000)
}

pub fn server() -> (Addr, u16) {
    (Addr::v4([10, 0, 0, 2]), 5432)
}

/// The options Linux offers in a SYN: MSS, SACK permitted, timestamps, window scale.
pub fn syn_options(mss: u16, wscale: Option<u8>) -> Vec<u8> {
    let mut v = vec![2, 4];
    v.extend_from_slice(&mss.to_be_bytes());
    v.extend_from_slice(&[4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0]);
    if let Some(s) = wscale {
        v.extend_from_slice(&[1, 3, 3, s]);
    }
    v
}

/// How to emit one packet (defaults: the side's next sequence number, the peer's as ack,
/// window 512, 0.1 ms after the previous packet, no options, the payload's own length).
pub struct E {
    pub seq: Option<u32>,
    pub ack: Option<u32>,
    pub win: u16,
    pub dt: f64,
    pub options: Vec<u8>,
    pub plen: Option<u32>,
}

impl Default for E {
    fn default() -> Self {
        E {
            seq: None,
            ack: None,
            win: 512,
            dt: 0.0001,
            options: Vec::new(),
            plen: None,
        }
    }
}

/// A client and a server with their own sequence counters; methods append packets.
pub struct Flow {
    pub seq: [u32; 2],
    pub t: f64,
    pub ends: [(Addr, u16); 2],
    pub packets: Vec<Pkt>,
}

impl Flow {
    pub fn new() -> Self {
        Flow::with(1000, 5000, T0)
    }

    pub fn with(isn_c: u32, isn_s: u32, t: f64) -> Self {
        Flow {
            seq: [isn_c, isn_s],
            t,
            ends: [client(), server()],
            packets: Vec::new(),
        }
    }

    /// The client on another port.
    pub fn port(mut self, port: u16) -> Self {
        self.ends[0].1 = port;
        self
    }

    pub fn emit(&mut self, side: usize, flags: u8, payload: &[u8], e: E) -> Pkt {
        self.t += e.dt;
        let (src, dst) = (self.ends[side], self.ends[1 - side]);
        let p = Pkt {
            frame: self.packets.len() as u64 + 1,
            ts: self.t,
            src: src.0,
            dst: dst.0,
            sport: src.1,
            dport: dst.1,
            seq: e.seq.unwrap_or(self.seq[side]),
            ack: e.ack.unwrap_or(self.seq[1 - side]),
            flags,
            win: e.win,
            plen: e.plen.unwrap_or(payload.len() as u32),
            payload: payload.to_vec(),
            options: e.options,
            options_cut: false,
        };
        self.packets.push(p.clone());
        p
    }

    pub fn handshake_scaled(&mut self, wscale_c: Option<u8>, wscale_s: Option<u8>) {
        let options = syn_options(1460, wscale_c);
        self.emit(
            0,
            SYN,
            b"",
            E {
                ack: Some(0),
                win: 64240,
                options,
                ..E::default()
            },
        );
        self.seq[0] = self.seq[0].wrapping_add(1);
        let options = syn_options(1460, wscale_s);
        self.emit(
            1,
            SYN | ACK,
            b"",
            E {
                win: 65160,
                options,
                ..E::default()
            },
        );
        self.seq[1] = self.seq[1].wrapping_add(1);
        self.emit(0, ACK, b"", E::default());
    }

    pub fn handshake(&mut self) {
        self.handshake_scaled(Some(7), Some(7));
    }

    pub fn send(&mut self, side: usize, payload: &[u8]) -> Pkt {
        self.send_with(side, payload, E::default())
    }

    /// Data; the side's sequence number moves past it unless `e.seq` placed it elsewhere.
    pub fn send_with(&mut self, side: usize, payload: &[u8], e: E) -> Pkt {
        let placed = e.seq.is_some();
        let p = self.emit(side, ACK | PSH, payload, e);
        if !placed {
            self.seq[side] = p.seq.wrapping_add(p.plen);
        }
        p
    }

    pub fn ack(&mut self, side: usize) -> Pkt {
        self.emit(side, ACK, b"", E::default())
    }

    pub fn fin(&mut self, side: usize) {
        self.emit(side, FIN | ACK, b"", E::default());
        self.seq[side] = self.seq[side].wrapping_add(1);
    }

    pub fn rst(&mut self, side: usize) {
        self.emit(side, RST | ACK, b"", E::default());
    }
}

/// A stream consumer and packet observer that checks contiguity and keeps what it was told.
#[derive(Debug, Default)]
pub struct Rec {
    pub data: [Vec<u8>; 2],
    /// Next offset expected per direction (data holds placeholders for small gaps only).
    pub next: [i64; 2],
    pub gaps: Vec<(usize, i64, i64)>,
    /// (direction, offset, length, frame) of each resent range.
    pub resent: Vec<(usize, i64, i64, u64)>,
    pub packets: Vec<Observed>,
    pub start_seen: Vec<bool>,
    pub sink_finished: bool,
    pub info: Option<[DirectionInfo; 2]>,
}

impl StreamSink for Rec {
    fn feed(
        &mut self,
        d: usize,
        data: &[u8],
        offset: i64,
        _frame: u64,
        _ts: f64,
        start_seen: bool,
    ) {
        assert_eq!(offset, self.next[d], "feed of direction {d} not contiguous");
        self.next[d] += data.len() as i64;
        self.data[d].extend_from_slice(data);
        self.start_seen.push(start_seen);
    }
    fn gap(&mut self, d: usize, offset: i64, length: i64, _frame: u64, _ts: f64) {
        assert_eq!(offset, self.next[d], "gap of direction {d} not contiguous");
        assert!(length > 0);
        self.next[d] += length;
        self.gaps.push((d, offset, length));
        if length < 1 << 20 {
            // placeholder bytes, only to keep offsets in step here
            self.data[d].resize(self.data[d].len() + length as usize, 0);
        }
    }
    fn resent(&mut self, d: usize, offset: i64, length: i64, frame: u64, _ts: f64) {
        assert!(
            length > 0 && offset + length <= self.next[d],
            "resent bytes were fed"
        );
        self.resent.push((d, offset, length, frame));
    }
    fn finish(&mut self) {
        assert!(
            !self.sink_finished && self.info.is_none(),
            "the sink finishes first, once"
        );
        self.sink_finished = true;
    }
}

impl PacketObserver for Rec {
    fn on_packet(&mut self, p: &Observed) {
        assert!(!self.sink_finished, "no packet after finish");
        self.packets.push(*p);
    }
    fn finish(&mut self, info: &[DirectionInfo; 2]) {
        assert!(self.sink_finished && self.info.is_none());
        self.info = Some(*info);
    }
}

impl Rec {
    /// The kinds of direction d's packets with payload.
    pub fn kinds(&self, d: usize) -> Vec<u8> {
        self.packets
            .iter()
            .filter(|p| p.d == d && p.end > p.seq)
            .map(|p| p.kind)
            .collect()
    }
}

/// Makes a Rec per connection and counts those made and not yet retired.
#[derive(Default)]
pub struct Recording {
    pub opened: Vec<ConnectionMeta>,
}

impl Handler for Recording {
    type Analyses = Rec;
    fn open(&mut self, meta: &ConnectionMeta) -> Rec {
        self.opened.push(*meta);
        Rec::default()
    }
}

pub type Engine = TcpEngine<Recording>;

/// What a pass gave: the connections in the order retired, and the engine's facts.
pub struct Ran {
    pub conns: Vec<Connection<Rec>>,
    pub engine: EngineFacts,
}

impl Ran {
    pub fn by_number(&self) -> Vec<&Connection<Rec>> {
        let mut v: Vec<_> = self.conns.iter().collect();
        v.sort_by_key(|c| c.number());
        v
    }

    pub fn only(&self) -> &Connection<Rec> {
        assert_eq!(self.conns.len(), 1);
        &self.conns[0]
    }
}

/// Feed every packet (sweeping after each when `sweep`), then finish.
pub fn run_with(packets: &[Pkt], linger: Option<f64>, settled: Option<f64>, sweep: bool) -> Ran {
    let mut eng = Engine::new(Recording::default(), linger, settled);
    let mut conns = Vec::new();
    for p in packets {
        eng.feed(&p.packet());
        if sweep {
            eng.sweep(p.ts);
        }
        conns.extend(eng.take_retired().map(|c| *c));
    }
    eng.finish();
    conns.extend(eng.take_retired().map(|c| *c));
    Ran {
        conns,
        engine: eng.facts(),
    }
}

/// As the pass runs it: linger 30 s, settled linger 2 s, a sweep after each packet.
pub fn run(packets: &[Pkt]) -> Ran {
    run_with(packets, Some(30.0), Some(2.0), true)
}

/// Frames numbered again from 1, in this order.
pub fn renumber(mut packets: Vec<Pkt>) -> Vec<Pkt> {
    for (i, p) in packets.iter_mut().enumerate() {
        p.frame = i as u64 + 1;
    }
    packets
}

/// xorshift64*: reproducible randomness without a crate.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}
