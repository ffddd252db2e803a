//! Replays recorded stream-sink calls into the PostgreSQL decoder and prints its facts: the
//! Rust half of the comparison with the reference decoder (its calls recorded by wrapping
//! it). Input, one JSON object a line: {"n": id, "calls": [call, ...]} where a call is
//! ["f", d, hex, offset, frame, ts_bits, start_seen], ["g", d, offset, length, frame, ts_bits],
//! ["x"] (finish) or ["s", ...] (take the facts here). Output, a line per input line:
//! {"n": id, "facts": [facts at each "s", ...]}.
//!
//! `--bench N`: replay every input N times without output, then print the time the decoder
//! took and the bytes it was fed.

use std::io::{BufRead, Write};

use pktflow_core::pgwire::Conversation;
use pktflow_core::tcp::observe::StreamSink;
use serde_json::Value;

fn unhex(s: &str) -> Vec<u8> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => 0,
    };
    s.as_bytes()
        .chunks(2)
        .map(|p| (digit(p[0]) << 4) | p.get(1).map_or(0, |&c| digit(c)))
        .collect()
}

/// A recorded call, decoded.
enum Call {
    Feed(usize, Vec<u8>, i64, u64, f64, bool),
    Gap(usize, i64, i64, u64, f64),
    Finish,
    Facts,
}

fn calls(rec: &Value) -> Vec<Call> {
    let int = |v: &Value| v.as_i64().unwrap_or(0);
    let uint = |v: &Value| v.as_u64().unwrap_or(0);
    let mut out = Vec::new();
    for call in rec["calls"].as_array().expect("calls") {
        let c = call.as_array().expect("call");
        out.push(match c[0].as_str() {
            Some("f") => Call::Feed(
                uint(&c[1]) as usize,
                unhex(c[2].as_str().unwrap_or("")),
                int(&c[3]),
                uint(&c[4]),
                f64::from_bits(uint(&c[5])),
                c[6].as_bool().unwrap_or(false),
            ),
            Some("g") => Call::Gap(
                uint(&c[1]) as usize,
                int(&c[2]),
                int(&c[3]),
                uint(&c[4]),
                f64::from_bits(uint(&c[5])),
            ),
            Some("x") => Call::Finish,
            _ => Call::Facts,
        });
    }
    out
}

fn bench(rounds: usize) {
    let recs: Vec<Vec<Call>> = std::io::stdin()
        .lock()
        .lines()
        .map(|l| calls(&serde_json::from_str(&l.expect("read")).expect("json")))
        .collect();
    let bytes: usize = recs
        .iter()
        .flatten()
        .map(|c| {
            if let Call::Feed(_, d, ..) = c {
                d.len()
            } else {
                0
            }
        })
        .sum();
    let t = std::time::Instant::now();
    let mut queries = 0;
    for _ in 0..rounds {
        for rec in &recs {
            let mut conv = Conversation::new();
            for c in rec {
                match c {
                    Call::Feed(d, data, off, frame, ts, seen) => {
                        conv.feed(*d, data, *off, *frame, *ts, *seen)
                    }
                    Call::Gap(d, off, len, frame, ts) => conv.gap(*d, *off, *len, *frame, *ts),
                    Call::Finish => conv.finish(),
                    Call::Facts => {}
                }
            }
            queries += conv.facts().queries.len();
        }
    }
    let secs = t.elapsed().as_secs_f64() / rounds as f64;
    println!(
        "{} connections, {} bytes fed, {} queries: {:.4} s per round, {:.0} MB/s",
        recs.len(),
        bytes,
        queries / rounds,
        secs,
        bytes as f64 / secs / 1e6
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--bench") {
        bench(args.get(i + 1).and_then(|n| n.parse().ok()).unwrap_or(10));
        return;
    }
    let stdin = std::io::stdin();
    let mut out = std::io::BufWriter::new(std::io::stdout());
    for line in stdin.lock().lines() {
        let line = line.expect("read");
        if line.trim().is_empty() {
            continue;
        }
        let rec: Value = serde_json::from_str(&line).expect("json");
        let mut conv = Conversation::new();
        let mut facts = Vec::new();
        let int = |v: &Value| v.as_i64().unwrap_or(0);
        let uint = |v: &Value| v.as_u64().unwrap_or(0);
        for call in rec["calls"].as_array().expect("calls") {
            let c = call.as_array().expect("call");
            match c[0].as_str() {
                Some("f") => conv.feed(
                    uint(&c[1]) as usize,
                    &unhex(c[2].as_str().unwrap_or("")),
                    int(&c[3]),
                    uint(&c[4]),
                    f64::from_bits(uint(&c[5])),
                    c[6].as_bool().unwrap_or(false),
                ),
                Some("g") => conv.gap(
                    uint(&c[1]) as usize,
                    int(&c[2]),
                    int(&c[3]),
                    uint(&c[4]),
                    f64::from_bits(uint(&c[5])),
                ),
                Some("x") => conv.finish(),
                Some("s") => facts.push(serde_json::to_string(&conv.facts()).expect("facts")),
                _ => {}
            }
        }
        // written as text: a serde_json::Value would sort the facts' keys
        writeln!(
            out,
            "{{\"n\": {}, \"facts\": [{}]}}",
            rec["n"],
            facts.join(", ")
        )
        .expect("write");
    }
}
