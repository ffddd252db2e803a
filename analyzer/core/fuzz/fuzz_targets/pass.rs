//! Arbitrary bytes as a capture through the whole pass (reader, TCP engine, PostgreSQL
//! decoder, transfer measurements), every connection's facts serialised and checked, then the
//! diagram's pass (events::collect) over the same bytes. Checks in src/lib.rs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| pktflow_core_fuzz::pass(data));
