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
        self.calls
            .push(json!(["gap", d, offset, length, frame, ts]));
    }
    fn finish(&mut self) {
        self.calls.push(json!(["sink-finish"]));
    }
}

impl PacketObserver for Recorder {
    fn on_packet(&mut self, p: &Observed) {
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

struct Recording;

impl Handler for Recording {
    type Analyses = Recorder;
    fn open(&mut self, _meta: &ConnectionMeta) -> Recorder {
        Recorder::default()
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

fn drain(engine: &mut TcpEngine<Recording>, out: &mut impl Write) -> std::io::Result<()> {
    for conn in engine.take_retired() {
        let line = json!({"facts": conn.facts(), "calls": conn.analyses().calls});
        writeln!(out, "{line}")?;
    }
    Ok(())
}

fn main() -> std::io::Result<()> {
    let stdin = std::io::stdin();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut engine: Option<TcpEngine<Recording>> = None;
    for line in stdin.lock().lines() {
        let v: Value = serde_json::from_str(&line?).map_err(std::io::Error::other)?;
        if let Some(c) = v.get("config") {
            engine = Some(TcpEngine::new(Recording, bits(&c[0]), bits(&c[1])));
            continue;
        }
        let eng = engine.get_or_insert_with(|| TcpEngine::new(Recording, None, None));
        if let Some(ts) = v.get("sweep") {
            eng.sweep(bits(ts).unwrap_or(0.0));
        } else if let Some(p) = v.get("p") {
            let payload = hex(&p[11]);
            let options = hex(&p[12]);
            let pkt = TcpPacket {
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
                payload: &payload,
                options: &options,
            };
            eng.feed(&pkt);
        }
        drain(eng, &mut out)?;
    }
    if let Some(eng) = engine.as_mut() {
        eng.finish();
        drain(eng, &mut out)?;
        writeln!(out, "{}", json!({"engine": eng.facts()}))?;
    }
    out.flush()
}
