//! Time the whole pass on a capture, without Python: `cargo run --release --example
//! pass_bench -- CAPTURE [tcp|pgwire|transfer|all|report|draw]`. Prints CPU-bound wall time
//! and connections; `draw` is `all` keeping every packet for a diagram; `report` also builds each connection's judgement and record, spools them,
//! finds the relays and writes the report's JSON to /dev/null (no words: Python's part),
//! timing each stage.
use std::path::Path;
use std::time::Instant;

use pktflow_core::pass::{Pass, PassOptions};
use pktflow_core::report::{judge_and_record, Assembly, CaptureWords, Judged};

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        eprintln!("usage: pass_bench CAPTURE [tcp|pgwire|transfer|all|report|draw]");
        std::process::exit(2);
    };
    let what = args.next().unwrap_or_else(|| "all".into());
    let options = PassOptions {
        decode_postgres: matches!(what.as_str(), "pgwire" | "all" | "report" | "draw"),
        transfer: matches!(what.as_str(), "transfer" | "all" | "report" | "draw"),
        linger: Some(30.0),
        settled_linger: Some(2.0),
        record: what == "draw",
    };
    let t = Instant::now();
    let mut pass = match Pass::open(Path::new(&path), options) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{path}: {e:?}");
            std::process::exit(1);
        }
    };
    let (mut conns, mut json) = (0usize, 0usize);
    let mut done = Vec::new();
    let measure_json = std::env::var_os("PASS_BENCH_JSON").is_some();
    let report = what == "report";
    let mut assembly = Assembly::default();
    let (mut t_record, mut t_spool) = (0.0, 0.0);
    loop {
        let more = match pass.step(&mut done) {
            Ok(more) => more,
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(1);
            }
        };
        conns += done.len();
        if measure_json {
            for c in &done {
                json += serde_json::to_vec(c).map_or(0, |v| v.len());
            }
        }
        if report {
            let start = pass.start();
            for c in done.drain(..) {
                let number = c.tcp.number;
                let t0 = Instant::now();
                let (_, record, extras) = judge_and_record(c, start, Judged::default());
                let t1 = Instant::now();
                if let Err(e) = assembly.add(number, &record, extras) {
                    eprintln!("{e}");
                    std::process::exit(1);
                }
                t_record += (t1 - t0).as_secs_f64();
                t_spool += t1.elapsed().as_secs_f64();
            }
        }
        done.clear();
        if !more {
            break;
        }
    }
    if report {
        let t_pass = t.elapsed().as_secs_f64() - t_record - t_spool;
        let t1 = Instant::now();
        let relays = match assembly.find_relays() {
            Ok(found) => found.into_iter().map(|(_, r)| r).collect(),
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(1);
            }
        };
        assembly.set_relays(relays, Vec::new());
        let t_relays = t1.elapsed().as_secs_f64();
        let words = CaptureWords {
            file: path.clone(),
            version: String::new(),
            damage_reason: None,
            findings: Vec::new(),
        };
        let doc = assembly.finish(pass.stats(), words);
        let t2 = Instant::now();
        let devnull = std::io::BufWriter::with_capacity(1 << 20, std::io::sink());
        if let Err(e) = doc.write_json(devnull, true) {
            eprintln!("{e}");
        }
        println!(
            "pass {t_pass:.3} s, records {t_record:.3} s, spool {t_spool:.3} s, relays \
             {t_relays:.3} s, JSON {:.3} s",
            t2.elapsed().as_secs_f64()
        );
    }
    println!(
        "{what}: {:.3} s, {conns} connections, {} packets, facts JSON {json} bytes",
        t.elapsed().as_secs_f64(),
        pass.records()
    );
    if let Some(recording) = pass.recording() {
        draw(&recording, conns);
    }
}

/// Every connection drawn from the packets kept: reading them back, the rows and folds, the
/// plots' series, timed.
fn draw(recording: &pktflow_core::drawing::Shared, conns: usize) {
    use pktflow_core::drawing::{Drawing, Lanes, Map};
    let Ok(recording) = recording.lock() else {
        return;
    };
    let numbers: Vec<u64> = (1..=conns as u64).collect();
    let t = Instant::now();
    let drawn = match recording.read(&numbers, f64::NEG_INFINITY, f64::INFINITY, 1_000_000) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("{e}");
            return;
        }
    };
    let t_read = t.elapsed().as_secs_f64();
    let lanes: Map<u64, Lanes> = numbers
        .iter()
        .map(|&n| {
            let l = Lanes {
                client: 0,
                server: 1,
                client_raw: false,
                server_raw: false,
            };
            (n, l)
        })
        .collect();
    let t1 = Instant::now();
    let drawing = Drawing::new(drawn, &lanes, &Map::default(), 0.0, &[0], true);
    println!(
        "drawing: read {t_read:.3} s, plots, rows and folds {:.3} s ({} rows, {} items, {} \
         series)",
        t1.elapsed().as_secs_f64(),
        drawing.rows.rows.len(),
        drawing.items.len(),
        drawing.plot.as_ref().map_or(0, |p| p.series.len()),
    );
}
