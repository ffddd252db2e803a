//! TCP options as negotiated in SYN and SYN-ACK (RFC 9293, RFC 7323, RFC 2018).

use serde::Serialize;

const EOL: u8 = 0;
const NOP: u8 = 1;
const MSS: u8 = 2;
const WSCALE: u8 = 3;
const SACK_OK: u8 = 4;
const TIMESTAMP: u8 = 8;

/// RFC 7323: a shift above 14 is treated as 14.
pub const MAX_WINDOW_SCALE: u8 = 14;

/// Without the handshake the window scale is unknown, but data in flight beyond the raw
/// window shifted by a scale proves the scale larger: the least scale consistent with
/// `in_flight` bytes against a raw window `win` (> 0), raised from `known`.
pub fn proved_scale(known: u8, win: i64, in_flight: i64) -> u8 {
    let mut scale = known;
    while scale < MAX_WINDOW_SCALE && in_flight > win << scale {
        scale += 1;
    }
    scale
}

/// What one side's SYN (or SYN-ACK) offered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SynOptions {
    pub mss: Option<u16>,
    pub window_scale: Option<u8>,
    pub sack_permitted: bool,
    pub timestamps: bool,
    /// The snapshot length cut the options: an option not read may have been offered.
    pub cut: bool,
}

/// A packet's options as (kind, body), in order. Malformed options end the reading, they are
/// not an error (what came before them stands): a length below 2 or past the end, a kind
/// without its length byte; EOL ends the list.
struct Options<'a> {
    raw: &'a [u8],
    i: usize,
}

impl<'a> Iterator for Options<'a> {
    type Item = (u8, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let kind = *self.raw.get(self.i)?;
            if kind == EOL {
                return None;
            }
            if kind == NOP {
                self.i += 1;
                continue;
            }
            let length = usize::from(*self.raw.get(self.i + 1)?);
            let body = self.raw.get(self.i + 2..self.i + length.max(2))?;
            if length < 2 {
                return None;
            }
            self.i += length;
            return Some((kind, body));
        }
    }
}

fn options(raw: &[u8]) -> Options<'_> {
    Options { raw, i: 0 }
}

/// Read the options a SYN or SYN-ACK offers (malformed ones end the reading); `cut`: the
/// snapshot length cut them, `raw` is their start.
pub fn parse_syn_options(raw: &[u8], cut: bool) -> SynOptions {
    let mut out = SynOptions {
        cut,
        ..SynOptions::default()
    };
    for (kind, body) in options(raw) {
        match (kind, body) {
            (MSS, &[a, b]) => out.mss = Some(u16::from_be_bytes([a, b])),
            (WSCALE, &[s]) => out.window_scale = Some(s.min(MAX_WINDOW_SCALE)),
            (SACK_OK, &[]) => out.sack_permitted = true,
            (TIMESTAMP, b) if b.len() == 8 => out.timestamps = true,
            _ => {}
        }
    }
    out
}

const SACK: u8 = 5;

/// A packet's timestamps option: (TSval, TSecr).
pub fn timestamps(raw: &[u8]) -> Option<(u32, u32)> {
    let (_, body) = options(raw).find(|&(kind, _)| kind == TIMESTAMP)?;
    let (val, rest) = body.split_first_chunk::<4>()?;
    let (ecr, _) = rest.split_first_chunk::<4>()?;
    Some((u32::from_be_bytes(*val), u32::from_be_bytes(*ecr)))
}

/// The first SACK block (left, right edges as raw sequence numbers) of a packet's options,
/// None without one (or with a SACK option too short for a block).
pub fn first_sack_block(raw: &[u8]) -> Option<(u32, u32)> {
    let (_, body) = options(raw).find(|&(kind, _)| kind == SACK)?;
    let (l, rest) = body.split_first_chunk::<4>()?;
    let (r, _) = rest.split_first_chunk::<4>()?;
    Some((u32::from_be_bytes(*l), u32::from_be_bytes(*r)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The options Linux offers: MSS, SACK permitted, timestamps, NOP, window scale.
    #[test]
    fn sack_blocks() {
        // NOP NOP TS(10) NOP NOP SACK(10): one block
        let mut raw = vec![1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2, 1, 1, 5, 10];
        raw.extend_from_slice(&100u32.to_be_bytes());
        raw.extend_from_slice(&200u32.to_be_bytes());
        assert_eq!(first_sack_block(&raw), Some((100, 200)));
        for cut in 0..raw.len() {
            assert_eq!(first_sack_block(&raw[..cut]), None);
        }
        assert_eq!(first_sack_block(&[5, 2]), None);
        assert_eq!(timestamps(&raw), Some((1, 2)));
        assert_eq!(timestamps(&raw[..11]), None);
    }

    fn linux(mss: u16, wscale: u8) -> Vec<u8> {
        let mut v = vec![2, 4];
        v.extend_from_slice(&mss.to_be_bytes());
        v.extend_from_slice(&[4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, wscale]);
        v
    }

    #[test]
    fn reads_what_linux_offers() {
        let o = parse_syn_options(&linux(1460, 7), false);
        assert_eq!(o.mss, Some(1460));
        assert_eq!(o.window_scale, Some(7));
        assert!(o.sack_permitted && o.timestamps);
    }

    #[test]
    fn shift_above_14_is_14() {
        assert_eq!(
            parse_syn_options(&[3, 3, 200], false).window_scale,
            Some(14)
        );
    }

    #[test]
    fn wrong_lengths_are_skipped_and_cut_tails_end_the_reading() {
        // an MSS of length 3 is skipped; the window scale after it is read
        assert_eq!(
            parse_syn_options(&[2, 3, 5, 3, 3, 2], false),
            SynOptions {
                window_scale: Some(2),
                ..SynOptions::default()
            }
        );
        let full = linux(1460, 7);
        for cut in 0..full.len() {
            let o = parse_syn_options(&full[..cut], false);
            assert_eq!(o.mss.is_some(), cut >= 4);
            assert_eq!(o.window_scale.is_some(), cut == full.len());
        }
        // a length below 2 or past the end stops it; EOL stops it
        assert_eq!(
            parse_syn_options(&[1, 1, 8, 1, 2, 4, 5, 0], false),
            SynOptions::default()
        );
        assert_eq!(
            parse_syn_options(&[0, 2, 4, 5, 180], false),
            SynOptions::default()
        );
        assert_eq!(parse_syn_options(&[4], false), SynOptions::default());
    }
}
