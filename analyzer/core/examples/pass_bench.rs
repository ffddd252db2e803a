//! Time the whole pass on a capture, without Python: `cargo run --release --example
//! pass_bench -- CAPTURE [tcp|pgwire|transfer|all|report]`. Prints CPU-bound wall time and
//! connections; `report` also builds each connection's judgement and record, spools them,
//! finds the relays and writes the report's JSON to /dev/null (no words: Python's part),
//! timing each stage.
use std::path::Path;
use std::time::Instant;

use pktflow_core::pass::{Pass, PassOptions};
use pktflow_core::report::{judge_and_record, Assembly, CaptureWords, Judged};

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        eprintln!("usage: pass_bench CAPTURE [tcp|pgwire|transfer|all]");
        std::process::exit(2);
    };
    let what = args.next().unwrap_or_else(|| "all".into());
    let options = PassOptions {
        decode_postgres: matches!(what.as_str(), "pgwire" | "all" | "report"),
        transfer: matches!(what.as_str(), "transfer" | "all" | "report"),
        linger: Some(30.0),
        settled_linger: Some(2.0),
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
        let more = pass.step(&mut done);
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
}
