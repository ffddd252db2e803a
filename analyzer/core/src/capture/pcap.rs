//! The classic pcap format: a 24-byte file header, then records of a 16-byte header and the
//! captured bytes. Four magics: microsecond or nanosecond timestamps, either byte order.

use super::error::{Damage, DamageKind};
use super::window::Window;
use super::Record;

/// The largest frame any capture tool writes is 262,144 bytes.
pub const MAX_FRAME: usize = 1 << 18;
/// Whatever a (corrupt) snaplen says, no record above this is read.
pub const MAX_RECORD: usize = 16 << 20;

/// The link type is the low 16 bits of the header's field, as libpcap reads it (LT_LINKTYPE):
/// the bits above carry whether frames end in a frame check sequence and its length (a pcap
/// written with 0x04000001 is Ethernet with FCS). Frames are read by their IP lengths, so
/// trailing FCS bytes are never taken for payload.
const LINKTYPE_MASK: u32 = 0x0000_FFFF;

pub const MAGICS: [[u8; 4]; 4] = [
    [0xd4, 0xc3, 0xb2, 0xa1],
    [0xa1, 0xb2, 0xc3, 0xd4],
    [0x4d, 0x3c, 0xb2, 0xa1],
    [0xa1, 0xb2, 0x3c, 0x4d],
];

pub(crate) struct Pcap {
    big: bool,
    pub(crate) nano: bool,
    snaplen: u32,
    pub(crate) link: u32,
    /// Records claiming more captured bytes are damage.
    limit: usize,
}

pub(crate) fn damage(win: &Window, frame: u64, kind: DamageKind) -> Damage {
    Damage {
        frame,
        offset: win.offset(),
        kind,
        stream: win.fault.clone(),
    }
}

fn u32_at(b: &[u8], at: usize, big: bool) -> u32 {
    let mut x = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        x.copy_from_slice(s);
    }
    if big {
        u32::from_be_bytes(x)
    } else {
        u32::from_le_bytes(x)
    }
}

impl Pcap {
    /// The rest of the file header (after the magic `head`), read from the window.
    pub(crate) fn open(head: [u8; 4], win: &mut Window) -> Result<Pcap, Damage> {
        if !win.need(20) {
            return Err(damage(win, 1, DamageKind::FileHeaderCut));
        }
        let big = !(head == MAGICS[0] || head == MAGICS[2]);
        let nano = head == MAGICS[2] || head == MAGICS[3];
        let h = win.at(0, 20);
        let snaplen = u32_at(h, 12, big);
        let link = u32_at(h, 16, big) & LINKTYPE_MASK;
        win.pos += 20;
        let limit = (snaplen as usize).clamp(MAX_FRAME, MAX_RECORD);
        Ok(Pcap {
            big,
            nano,
            snaplen,
            link,
            limit,
        })
    }

    /// Record `frame` + 1: None at the end of the file, Err at damage.
    pub(crate) fn next(&self, win: &mut Window, frame: u64) -> Result<Option<Record>, Damage> {
        let refills = win.refills;
        if !win.need(16) {
            if win.available() > 0 || win.fault.is_some() {
                return Err(damage(win, frame + 1, DamageKind::RecordHeaderCut));
            }
            return Ok(None);
        }
        let h = win.at(0, 16);
        let (sec, frac) = (u32_at(h, 0, self.big), u32_at(h, 4, self.big));
        let (caplen, orig) = (u32_at(h, 8, self.big), u32_at(h, 12, self.big));
        if caplen as usize > self.limit {
            let kind = DamageKind::RecordTooLarge {
                caplen,
                snaplen: self.snaplen,
            };
            return Err(damage(win, frame + 1, kind));
        }
        let len = caplen as usize;
        if !win.need(16 + len) {
            let present = win.available().saturating_sub(16) as u64;
            return Err(damage(
                win,
                frame + 1,
                DamageKind::RecordCut { caplen, present },
            ));
        }
        let scale = if self.nano { 1e-9 } else { 1e-6 };
        let start = win.pos + 16;
        win.pos = start + len;
        Ok(Some(Record {
            link: self.link,
            ts: f64::from(sec) + f64::from(frac) * scale,
            start,
            caplen: len,
            orig,
            batch_cut: win.refills != refills,
            ts_valid: f64::from(frac) * scale < 1.0,
        }))
    }
}
