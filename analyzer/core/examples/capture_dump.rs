//! Dump what the capture reader hands out, as JSON lines (for debugging the reader):
//! `capture_dump FILE...` prints, per file, a `file` line, then a line per TCP packet
//! ([frame, ts, src, dst, sport, dport, seq, ack, flags, win, plen, payload length, payload
//! CRC-32, options hex]) and per batch end ({"batch": ts}), then the stats and the outcome.
//! `--quiet` prints only the stats lines (for timing); `-` reads more paths from stdin.

use std::path::Path;

use pktflow_core::capture::{Capture, Item};

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn main() {
    let mut quiet = false;
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-") {
        // paths one per line on standard input
        args.retain(|a| a != "-");
        args.extend(std::io::stdin().lines().map_while(Result::ok));
    }
    for arg in args {
        if arg == "--quiet" {
            quiet = true;
            continue;
        }
        if !quiet {
            println!("{}", serde_json::json!({ "file": arg }));
        }
        let mut cap = match Capture::open(Path::new(&arg)) {
            Ok(c) => c,
            Err(e) => {
                println!("{}", serde_json::json!({ "open_error": e }));
                continue;
            }
        };
        while let Some(item) = cap.next_item() {
            if quiet {
                continue;
            }
            match item {
                Item::Packet(p) => {
                    let mut crc = flate2::Crc::new();
                    crc.update(p.payload);
                    let line = serde_json::json!([
                        p.frame,
                        p.ts,
                        hex(p.src.octets()),
                        hex(p.dst.octets()),
                        p.sport,
                        p.dport,
                        p.seq,
                        p.ack,
                        p.flags,
                        p.win,
                        p.plen,
                        p.payload.len(),
                        crc.sum(),
                        hex(p.options)
                    ]);
                    println!("{line}");
                }
                Item::BatchEnd { ts } => println!("{}", serde_json::json!({ "batch": ts })),
            }
        }
        let outcome = cap.outcome().err();
        println!(
            "{}",
            serde_json::json!({ "stats": cap.stats(), "outcome": outcome })
        );
    }
}
