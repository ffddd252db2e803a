//! The fuzz targets' checks on stable `cargo test`: every file in tests/regressions/ (inputs
//! that once broke pktflow, fuzz crashes among them) through each target's logic (capture
//! reader, whole pass and diagram, PostgreSQL decoder script), so known crashes stay fixed
//! without a nightly toolchain; the crafted captures and the real captures' heads (the seeds)
//! through the capture targets. The checks are the fuzz crate's own source, compiled in here.

use std::fs;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

#[path = "../fuzz/src/lib.rs"]
mod checks;

/// The repository's root, from analyzer/core.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    out.sort();
    out
}

/// A fuzz target's name and checks.
type Target = (&'static str, fn(&[u8]));

const CAPTURE: Target = ("capture", checks::capture);
const PASS: Target = ("pass", checks::pass);
const PGWIRE: Target = ("pgwire", checks::pgwire);

/// Each target's checks on each file; every failure named, not only the first.
fn replay(paths: &[PathBuf], targets: &[Target]) {
    let mut failed = Vec::new();
    for path in paths {
        let data = fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for &(name, target) in targets {
            if catch_unwind(AssertUnwindSafe(|| target(&data))).is_err() {
                failed.push(format!("{name} on {}", path.display()));
            }
        }
    }
    assert!(failed.is_empty(), "failed: {failed:#?}");
}

#[test]
fn regressions_pass_every_fuzz_target() {
    let paths = files(&root().join("tests/regressions"));
    assert!(!paths.is_empty());
    replay(&paths, &[CAPTURE, PASS, PGWIRE]);
}

#[test]
fn crafted_captures_pass_the_capture_fuzz_targets() {
    let paths = files(&root().join("tests/golden/crafted"));
    assert!(!paths.is_empty());
    replay(&paths, &[CAPTURE, PASS]);
}

/// The fuzz seeds: the real captures' first 64 KiB (cut mid-record, as damage).
#[test]
fn real_capture_heads_pass_the_pass_fuzz_target() {
    let dir = root().join("captures");
    let mut failed = Vec::new();
    for path in files(&dir) {
        if path.extension().is_none_or(|e| e != "pcap") {
            continue;
        }
        let data = fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let head = data.get(..data.len().min(1 << 16)).unwrap_or(&data);
        if catch_unwind(AssertUnwindSafe(|| checks::pass(head))).is_err() {
            failed.push(path.display().to_string());
        }
    }
    assert!(failed.is_empty(), "failed: {failed:#?}");
}
