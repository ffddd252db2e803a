//! The PostgreSQL decoder on arbitrary bytes, cut arbitrarily, with gaps: it never panics,
//! and what it says holds together. The input is a script: a first byte of flags (bit d:
//! direction d's start was seen), then steps of [op, length] followed by that many bytes for
//! a feed: op bit 0 the direction, bit 1 a gap instead (of `length` bytes), bit 2 an offset
//! jump (the engine never does it; the decoder must survive it).
#![no_main]

use libfuzzer_sys::fuzz_target;
use pktflow_core::pgwire::facts::Protocol;
use pktflow_core::pgwire::Conversation;
use pktflow_core::tcp::observe::StreamSink;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, mut rest)) = data.split_first() else {
        return;
    };
    let mut conv = Conversation::new();
    let mut off = [0i64; 2];
    let mut frame = 0u64;
    while let [op, len, tail @ ..] = rest {
        let (d, n) = (usize::from(op & 1), usize::from(*len));
        frame += 1;
        if op & 4 != 0 {
            off[d] += i64::from(*len) << 20;
        }
        if op & 2 != 0 {
            conv.gap(d, off[d], n as i64, frame, frame as f64);
            off[d] += n as i64;
            rest = tail;
            continue;
        }
        let n = n.min(tail.len());
        let (chunk, after) = tail.split_at(n);
        conv.feed(d, chunk, off[d], frame, frame as f64, flags & (1 << d) != 0);
        off[d] += n as i64;
        rest = after;
    }
    conv.finish();
    let facts = conv.facts();
    assert_eq!(facts.frontend_direction.is_none(), facts.protocol == Protocol::Unknown);
    if facts.protocol == Protocol::Unknown {
        assert!(facts.queries.is_empty());
    }
    assert!(facts.queries.len() as u64 <= facts.queries_total);
});
