//! The PostgreSQL decoder on arbitrary bytes, cut arbitrarily, with gaps and offset jumps:
//! the input is a script of feeds (see `pgwire` in src/lib.rs, which checks the facts).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| pktflow_core_fuzz::pgwire(data));
