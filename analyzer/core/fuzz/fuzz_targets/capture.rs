//! The capture reader alone on arbitrary bytes as a capture file (pcap, pcapng, gzipped):
//! every item read, the stats agree with what was handed out. Checks in src/lib.rs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| pktflow_core_fuzz::capture(data));
