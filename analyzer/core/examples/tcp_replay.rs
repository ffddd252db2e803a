//! Replay recorded TCP packets into the engine and print what it made of them, for comparing
//! with the Python reference (a harness, not part of the library).
//!
//! Input (stdin), one JSON object a line:
//!   {"config": [linger_bits | null, settled_linger_bits | null]}   first
//!   {"p": [frame, ts_bits, src_hex, dst_hex, sport, dport, seq, ack, flags, win, plen,
//!          payload_hex, options_hex]}                               a packet
//!   {"sweep": ts_bits}                                              sweep(ts)
//! Times are f64 bit patterns (exact). Output (stdout), one line per connection as it is
//! retired: {"facts": ..., "calls": [...]}, then {"engine": ...}. Calls are what the
//! analyses were told: ["feed", d, offset, len, frame, ts, crc32, start_seen],
//! ["gap", d, offset, length, frame, ts], ["sink-finish"],
//! ["packet", d, frame, ts, seq, end, ack, win, flags, kind, known0, known1],
//! ["observer-finish", [[mss, scale, known, lower_bound], ...]].

use std::io::{BufRead, Write};

use pktflow_core::packet::{Addr, TcpPacket};
use pktflow_core::tcp::observe::{DirectionInfo, Observed, PacketObserver, StreamSink};
use pktflow_core::tcp::{ConnectionMeta, Handler, TcpEngine};
use serde_json::{json, Value};

#[derive(Default)]
struct Recorder {
    calls: Vec<Value>,
    quiet: bool,
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

impl StreamSink for Recorder {
    fn feed(&mut self, d: usize, data: &[u8], offset: i64, frame: u64, ts: f64, start_seen: bool) {
        if self.quiet {
            return;
        }
        self.calls.push(json!([
            "feed",
            d,
            offset,
            data.len(),
            frame,
            ts,
            crc32(data),
            start_seen
        ]));
    }
    fn gap(&mut self, d: usize, offset: i64, length: i64, frame: u64, ts: f64) {
        if self.quiet {
            return;
        }
        self.calls
            .push(json!(["gap", d, offset, length, frame, ts]));
    }
    fn finish(&mut self) {
        self.calls.push(json!(["sink-finish"]));
    }
}

impl PacketObserver for Recorder {
    fn on_packet(&mut self, p: &Observed) {
        if self.quiet {
            return;
        }
        self.calls.push(json!([
            "packet",
            p.d,
            p.frame,
            p.ts,
            p.seq,
            p.end,
            p.ack,
            p.win,
            p.flags,
            p.kind,
            p.scale_known[0],
            p.scale_known[1]
        ]));
    }
    fn finish(&mut self, info: &[DirectionInfo; 2]) {
        let one = |i: &DirectionInfo| {
            json!([
                i.mss,
                i.window_scale,
                i.window_scale_known,
                i.window_scale_lower_bound
            ])
        };
        self.calls
            .push(json!(["observer-finish", [one(&info[0]), one(&info[1])]]));
    }
}

struct Recording {
    quiet: bool,
}

impl Handler for Recording {
    type Analyses = Recorder;
    fn open(&mut self, _meta: &ConnectionMeta) -> Recorder {
        Recorder {
            calls: Vec::new(),
            quiet: self.quiet,
        }
    }
}

fn hex(v: &Value) -> Vec<u8> {
    let s = v.as_str().unwrap_or("");
    (0..s.len() / 2)
        .filter_map(|i| u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok())
        .collect()
}

fn addr(v: &Value) -> Addr {
    let b = hex(v);
    match (
        <[u8; 4]>::try_from(b.as_slice()),
        <[u8; 16]>::try_from(b.as_slice()),
    ) {
        (Ok(a), _) => Addr::v4(a),
        (_, Ok(a)) => Addr::v6(a),
        _ => Addr::v4([0; 4]),
    }
}

fn bits(v: &Value) -> Option<f64> {
    v.as_u64().map(f64::from_bits)
}

fn int(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn drain(
    engine: &mut TcpEngine<Recording>,
    out: &mut impl Write,
    quiet: bool,
) -> std::io::Result<()> {
    for conn in engine.take_retired() {
        if !quiet {
            let line = json!({"facts": conn.facts(), "calls": conn.analyses().calls});
            writeln!(out, "{line}")?;
        }
    }
    Ok(())
}

/// A packet owning its bytes.
struct Owned {
    frame: u64,
    ts: f64,
    src: Addr,
    dst: Addr,
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    win: u16,
    plen: u32,
    payload: Vec<u8>,
    options: Vec<u8>,
}

enum Step {
    Config(Option<f64>, Option<f64>),
    Packet(Owned),
    Sweep(f64),
}

fn step(v: &Value) -> Option<Step> {
    if let Some(c) = v.get("config") {
        return Some(Step::Config(bits(&c[0]), bits(&c[1])));
    }
    if let Some(ts) = v.get("sweep") {
        return Some(Step::Sweep(bits(ts).unwrap_or(0.0)));
    }
    let p = v.get("p")?;
    Some(Step::Packet(Owned {
        frame: int(&p[0]),
        ts: bits(&p[1]).unwrap_or(0.0),
        src: addr(&p[2]),
        dst: addr(&p[3]),
        sport: int(&p[4]) as u16,
        dport: int(&p[5]) as u16,
        seq: int(&p[6]) as u32,
        ack: int(&p[7]) as u32,
        flags: int(&p[8]) as u8,
        win: int(&p[9]) as u16,
        plen: int(&p[10]) as u32,
        payload: hex(&p[11]),
        options: hex(&p[12]),
    }))
}

fn main() -> std::io::Result<()> {
    // --time: no output but how long the engine took (on stderr)
    let quiet = std::env::args().any(|a| a == "--time");
    let mut steps = Vec::new();
    for line in std::io::stdin().lock().lines() {
        let v: Value = serde_json::from_str(&line?).map_err(std::io::Error::other)?;
        steps.extend(step(&v));
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let started = std::time::Instant::now();
    let mut engine = TcpEngine::new(Recording { quiet }, None, None);
    let mut packets = 0u64;
    for s in steps {
        match s {
            Step::Config(linger, settled) => {
                engine = TcpEngine::new(Recording { quiet }, linger, settled)
            }
            Step::Sweep(ts) => engine.sweep(ts),
            Step::Packet(p) => {
                engine.feed(&TcpPacket {
                    frame: p.frame,
                    ts: p.ts,
                    src: p.src,
                    dst: p.dst,
                    sport: p.sport,
                    dport: p.dport,
                    seq: p.seq,
                    ack: p.ack,
                    flags: p.flags,
                    win: p.win,
                    plen: p.plen,
                    payload: &p.payload,
                    options: &p.options,
                });
                packets += 1;
            }
        }
        drain(&mut engine, &mut out, quiet)?;
    }
    engine.finish();
    drain(&mut engine, &mut out, quiet)?;
    if quiet {
        let s = started.elapsed().as_secs_f64();
        eprintln!(
            "{packets} packets in {s:.3} s: {:.0} ns a packet",
            s * 1e9 / packets.max(1) as f64
        );
    } else {
        writeln!(out, "{}", json!({"engine": engine.facts()}))?;
    }
    out.flush()
}
