//! Message boundaries in a stream that did not start at the beginning.
//!
//! A boundary is a position where a chain of consecutive well-formed messages of the side's
//! role starts: valid type bytes, lengths >= 4 and below a sane cap, each header where the
//! previous message ends. Random or foreign bytes (HTTP, TLS) fail the chain within a message
//! or two. The side is the one TCP gave (handshake or ports): a boundary never changes it, and
//! whether the bytes are PostgreSQL at all is proven by the conversation (detect.rs), not here.

use super::messages::{be32, expected_length, name_of, Role};

/// PostgreSQL caps a message near 1 GiB; anything claiming more is not PostgreSQL framing.
pub const MAX_MESSAGE: i64 = (1 << 30) + 64;
/// Messages other than DataRow/CopyData this long are implausible in a chain we try to trust.
pub const MAX_CONTROL: i64 = 1 << 24;
/// Messages a boundary needs behind it.
pub const CHAIN: usize = 3;

/// The type byte and length of the header at pos (5 bytes needed).
pub fn header(buf: &[u8], pos: usize) -> Option<(u8, i64)> {
    Some((*buf.get(pos)?, i64::from(be32(buf, pos.checked_add(1)?)?)))
}

/// A run of messages of one type (DataRow or CopyData), walked without reading bodies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    pub count: u64,
    /// Where the run ends: may lie beyond the buffer when the last message continues.
    pub end: usize,
    /// The malformed length that stopped the run.
    pub bad: Option<i64>,
}

/// The run of messages of buf[pos]'s type from pos (a whole header there).
pub fn message_run(buf: &[u8], pos: usize) -> Run {
    let n = buf.len();
    let t = buf.get(pos).copied();
    let mut pos = pos;
    let mut count = 0;
    loop {
        let Some((_, ln)) = header(buf, pos) else {
            return Run {
                count,
                end: pos,
                bad: None,
            };
        };
        if !(4..=MAX_MESSAGE).contains(&ln) {
            return Run {
                count,
                end: pos,
                bad: Some(ln),
            };
        }
        count += 1;
        pos = pos.saturating_add(1 + ln as usize);
        if n.saturating_sub(pos) < 5 || pos >= n || buf.get(pos).copied() != t {
            return Run {
                count,
                end: pos,
                bad: None,
            };
        }
    }
}

pub fn plausible(t: u8, ln: i64, side: Role) -> bool {
    if !(4..=MAX_MESSAGE).contains(&ln) || name_of(side, t).is_none() {
        return false;
    }
    if expected_length(side, t, None).is_some_and(|(min, max)| !(min..=max).contains(&ln)) {
        return false;
    }
    ln <= MAX_CONTROL || t == b'D' || t == b'd'
}

/// The chain of messages for `side` at pos: (messages, final). Messages 0: no chain. Not
/// final: bytes still to come could change the answer, and not before the buffer holds the
/// returned number of bytes (a chain may end exactly at the buffer's end, so a message running
/// past it is looked at again once the buffer reaches its end).
fn chain(buf: &[u8], pos: usize, side: Role) -> (usize, Option<usize>) {
    let n = buf.len();
    let mut pos = pos;
    let mut count = 0;
    while count < CHAIN {
        let Some((t, ln)) = header(buf, pos) else {
            return (
                if pos == n { count } else { 0 },
                Some(pos.saturating_add(5)),
            );
        };
        if !plausible(t, ln, side) {
            return (0, None);
        }
        pos = pos.saturating_add(1 + ln as usize);
        count += 1;
        if pos > n {
            return (if count > 1 { count } else { 0 }, Some(pos));
        }
    }
    (count, None)
}

/// If a chain of messages for `side` starts at pos: how many messages.
pub fn chain_at(buf: &[u8], pos: usize, side: Role) -> Option<usize> {
    let (count, _) = chain(buf, pos, side);
    (count > 0).then_some(count)
}

/// The boundary search over a buffer that only grows at its end, each position judged once:
/// positions whose chain could still form when more bytes arrive are kept and retried first;
/// all others are settled for good (rescanning made a side that never resynchronises
/// quadratic in the sync window).
#[derive(Clone, Debug)]
pub struct BoundaryScan {
    pub side: Role,
    done: i64, // stream offsets below this were judged (settled or pending)
    /// stream offsets still undecided, ascending, each with the stream offset the buffer must
    /// reach before its answer can change: a run of headers claiming long bodies is not judged
    /// again on every segment (that was quadratic in the sync window)
    pending: Vec<(i64, i64)>,
    /// positions judged, for the tests' bound on the work
    pub judged: u64,
}

impl BoundaryScan {
    pub fn new(side: Role) -> Self {
        BoundaryScan {
            side,
            done: 0,
            pending: Vec::new(),
            judged: 0,
        }
    }

    /// Whether a boundary is at pos; else, if the position may still become one, the buffer
    /// length it needs first.
    fn judge(&mut self, buf: &[u8], pos: usize) -> Result<(), Option<usize>> {
        self.judged += 1;
        let Some(&t) = buf.get(pos) else {
            return Err(None);
        };
        if name_of(self.side, t).is_none() {
            return Err(None);
        }
        match chain(buf, pos, self.side) {
            (0, more) => Err(more),
            _ => Ok(()),
        }
    }

    /// The first boundary in buf, whose first byte is at stream offset `base`.
    pub fn find(&mut self, buf: &[u8], base: i64) -> Option<usize> {
        let end = buf.len() as i64 - 4;
        let have = base.saturating_add(buf.len() as i64);
        let mut pending = Vec::new();
        let retry = std::mem::take(&mut self.pending);
        let from = (self.done - base).max(0);
        for &(off, need) in retry.iter().filter(|&&(off, _)| off >= base) {
            if need > have {
                pending.push((off, need)); // the same answer as last time: undecided
                continue;
            }
            let Ok(pos) = usize::try_from(off - base) else {
                continue;
            };
            match self.judge(buf, pos) {
                Ok(()) => return Some(pos),
                Err(Some(need)) => pending.push((off, base.saturating_add(need as i64))),
                Err(None) => {}
            }
        }
        for pos in (from..end.max(from)).filter_map(|p| usize::try_from(p).ok()) {
            match self.judge(buf, pos) {
                Ok(()) => return Some(pos),
                Err(Some(need)) => {
                    pending.push((pos as i64 + base, base.saturating_add(need as i64)))
                }
                Err(None) => {}
            }
        }
        self.pending = pending;
        self.done = self.done.max(base + end);
        None
    }
}

/// The first boundary of `buf` for `side` (a one-off search).
pub fn find_boundary(buf: &[u8], side: Role) -> Option<usize> {
    BoundaryScan::new(side).find(buf, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(t: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![t];
        v.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        v.extend_from_slice(body);
        v
    }

    fn rescan(buf: &[u8], side: Role) -> Option<usize> {
        (0..buf.len().saturating_sub(4)).find(|&pos| chain_at(buf, pos, side).is_some())
    }

    #[test]
    fn runs() {
        let mut b = msg(b'D', b"ab").repeat(3);
        b.extend(msg(b'C', b"x"));
        assert_eq!(
            message_run(&b, 0),
            Run {
                count: 3,
                end: 21,
                bad: None
            }
        );
        let cut = &b[..10];
        assert_eq!(
            message_run(cut, 0),
            Run {
                count: 1,
                end: 7,
                bad: None
            }
        ); // the next header is cut
        assert_eq!(
            message_run(&b[..12], 0),
            Run {
                count: 2,
                end: 14,
                bad: None
            }
        );
        let bad = [b'D', 0, 0, 0, 2, b'D'];
        assert_eq!(
            message_run(&bad, 0),
            Run {
                count: 0,
                end: 0,
                bad: Some(2)
            }
        );
    }

    #[test]
    fn chains_of_the_side_given() {
        let z = msg(b'Z', b"I");
        let c = msg(b'C', b"SELECT 1\0");
        let buf = [&b"\xee\x01"[..], &z, &z, &c].concat();
        assert_eq!(find_boundary(&buf, Role::Backend), Some(2));
        // ReadyForQuery is no frontend message: the frontend's first chain is the CommandComplete
        // read as a Close ending the buffer
        assert_eq!(find_boundary(&buf, Role::Frontend), Some(14));
        assert_eq!(find_boundary(&buf[..buf.len() - 1], Role::Frontend), None);
        // DataRows frame as Describes too: the side is TCP's to say
        let rows = msg(b'D', b"xyz").repeat(4);
        assert_eq!(find_boundary(&rows, Role::Frontend), Some(0));
        assert_eq!(find_boundary(&rows, Role::Backend), Some(0));
    }

    #[test]
    fn fixed_lengths_are_part_of_plausible_framing() {
        assert!(plausible(b'I', 4, Role::Backend) && !plausible(b'I', 10, Role::Backend));
        assert!(plausible(b'Z', 5, Role::Backend) && !plausible(b'Z', 4, Role::Backend));
        assert!(plausible(b'K', 12, Role::Backend) && !plausible(b'K', 300, Role::Backend));
        // 'S' is Sync (4 bytes) from the frontend, ParameterStatus from the backend
        assert!(!plausible(b'S', 9, Role::Frontend) && plausible(b'S', 9, Role::Backend));
    }

    #[test]
    fn long_claims_are_not_judged_again_on_every_segment() {
        // DataRow headers claiming 16 MiB each, 5 bytes apart, in 100-byte segments: every
        // position stays undecided until far past the window; each is judged about once
        let stream = b"D\x01\x00\x00\x00".repeat(256 * 1024 / 5);
        let mut scan = BoundaryScan::new(Role::Backend);
        let mut end = 0;
        while end < stream.len() {
            end = (end + 100).min(stream.len());
            assert_eq!(scan.find(&stream[..end], 0), None);
        }
        assert!(
            scan.judged < 2 * stream.len() as u64,
            "{} judged",
            scan.judged
        );
    }

    #[test]
    fn incremental_equals_rescan() {
        let mut rng = 0x9e3779b97f4a7c15u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let parts = [
            msg(b'Z', b"I"),
            msg(b'D', b"row"),
            msg(b'T', b"\0\0"),
            msg(b'Q', b"x\0"),
            b"\x00\x01\xff".to_vec(),
        ];
        for _ in 0..2000 {
            let mut stream = Vec::new();
            for _ in 0..(next() % 12) {
                stream.extend(&parts[(next() % 5) as usize]);
            }
            let side = [Role::Backend, Role::Frontend][(next() % 2) as usize];
            let mut scan = BoundaryScan::new(side);
            let mut end = 0;
            while end < stream.len() {
                end = (end + 1 + (next() % 9) as usize).min(stream.len());
                let got = scan.find(&stream[..end], 1000);
                assert_eq!(got, rescan(&stream[..end], side));
                if got.is_some() {
                    break;
                }
            }
        }
    }
}
