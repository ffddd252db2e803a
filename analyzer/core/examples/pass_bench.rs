//! Time the whole pass on a capture, without Python: `cargo run --release --example
//! pass_bench -- CAPTURE [tcp|pgwire|transfer|all]`. Prints CPU-bound wall time, connections
//! and the facts' JSON size (what the binding converts).
use std::path::Path;
use std::time::Instant;

use pktflow_core::pass::{Pass, PassOptions};

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        eprintln!("usage: pass_bench CAPTURE [tcp|pgwire|transfer|all]");
        std::process::exit(2);
    };
    let what = args.next().unwrap_or_else(|| "all".into());
    let options = PassOptions {
        decode_postgres: matches!(what.as_str(), "pgwire" | "all"),
        transfer: matches!(what.as_str(), "transfer" | "all"),
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
    loop {
        let more = pass.step(&mut done);
        conns += done.len();
        if measure_json {
            for c in &done {
                json += serde_json::to_vec(c).map_or(0, |v| v.len());
            }
        }
        done.clear();
        if !more {
            break;
        }
    }
    println!(
        "{what}: {:.3} s, {conns} connections, {} packets, facts JSON {json} bytes",
        t.elapsed().as_secs_f64(),
        pass.records()
    );
}
