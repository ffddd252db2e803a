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

/// What one side's SYN (or SYN-ACK) offered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SynOptions {
    pub mss: Option<u16>,
    pub window_scale: Option<u8>,
    pub sack_permitted: bool,
    pub timestamps: bool,
}

/// Read the options a SYN or SYN-ACK offers; a malformed tail ends the reading, it is not an
/// error (what came before it stands).
pub fn parse_syn_options(raw: &[u8]) -> SynOptions {
    let mut out = SynOptions::default();
    let mut i = 0usize;
    while let Some(&kind) = raw.get(i) {
        if kind == EOL {
            break;
        }
        if kind == NOP {
            i += 1;
            continue;
        }
        let Some(&length) = raw.get(i + 1) else { break };
        let length = usize::from(length);
        if length < 2 || i + length > raw.len() {
            break;
        }
        let body = raw.get(i + 2..i + length).unwrap_or_default();
        match (kind, body) {
            (MSS, &[a, b]) => out.mss = Some(u16::from_be_bytes([a, b])),
            (WSCALE, &[s]) => out.window_scale = Some(s.min(MAX_WINDOW_SCALE)),
            (SACK_OK, &[]) => out.sack_permitted = true,
            (TIMESTAMP, b) if b.len() == 8 => out.timestamps = true,
            _ => {}
        }
        i += length;
    }
    out
}

const SACK: u8 = 5;

/// The first SACK block (left, right edges as raw sequence numbers) of a packet's options,
/// None without one; malformed options end the reading as above.
pub fn first_sack_block(raw: &[u8]) -> Option<(u32, u32)> {
    let mut i = 0usize;
    while let Some(&kind) = raw.get(i) {
        if kind == EOL {
            break;
        }
        if kind == NOP {
            i += 1;
            continue;
        }
        let length = usize::from(*raw.get(i + 1)?);
        if length < 2 || i + length > raw.len() {
            break;
        }
        if kind == SACK {
            let b = raw.get(i + 2..i + 10)?;
            let (l, r) = b.split_at(4);
            return Some((
                u32::from_be_bytes(l.try_into().ok()?),
                u32::from_be_bytes(r.try_into().ok()?),
            ));
        }
        i += length;
    }
    None
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
    }

    fn linux(mss: u16, wscale: u8) -> Vec<u8> {
        let mut v = vec![2, 4];
        v.extend_from_slice(&mss.to_be_bytes());
        v.extend_from_slice(&[4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, wscale]);
        v
    }

    #[test]
    fn reads_what_linux_offers() {
        let o = parse_syn_options(&linux(1460, 7));
        assert_eq!(o.mss, Some(1460));
        assert_eq!(o.window_scale, Some(7));
        assert!(o.sack_permitted && o.timestamps);
    }

    #[test]
    fn shift_above_14_is_14() {
        assert_eq!(parse_syn_options(&[3, 3, 200]).window_scale, Some(14));
    }

    #[test]
    fn wrong_lengths_are_skipped_and_cut_tails_end_the_reading() {
        // an MSS of length 3 is skipped; the window scale after it is read
        assert_eq!(
            parse_syn_options(&[2, 3, 5, 3, 3, 2]),
            SynOptions {
                window_scale: Some(2),
                ..SynOptions::default()
            }
        );
        let full = linux(1460, 7);
        for cut in 0..full.len() {
            let o = parse_syn_options(&full[..cut]);
            assert_eq!(o.mss.is_some(), cut >= 4);
            assert_eq!(o.window_scale.is_some(), cut == full.len());
        }
        // a length below 2 or past the end stops it; EOL stops it
        assert_eq!(
            parse_syn_options(&[1, 1, 8, 1, 2, 4, 5, 0]),
            SynOptions::default()
        );
        assert_eq!(parse_syn_options(&[0, 2, 4, 5, 180]), SynOptions::default());
        assert_eq!(parse_syn_options(&[4]), SynOptions::default());
    }
}
