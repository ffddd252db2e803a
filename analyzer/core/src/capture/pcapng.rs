//! pcapng: blocks of (type, length, body, length). Sections (each with its byte order and
//! interfaces), Interface Description Blocks (link type, snaplen, timestamp resolution and
//! offset options), Enhanced, Simple and obsolete Packet Blocks, and the drop counters of
//! Interface Statistics Blocks. Other blocks are skipped.

use std::collections::BTreeMap;

use super::error::{Damage, DamageKind};
use super::pcap::damage;
use super::window::Window;
use super::Record;

pub const MAGIC: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];
/// A block above this is damage.
pub const MAX_BLOCK: usize = 16 << 20;
/// The reference's native scan reads at most this many interfaces per section.
const SCAN_MAX_IFACES: usize = 256;

const IDB: u32 = 1;
const PB: u32 = 2;
const SPB: u32 = 3;
const ISB: u32 = 5;
const EPB: u32 = 6;

/// Fixed fields each block type's body holds before its data and options.
fn min_body(btype: u32) -> usize {
    match btype {
        IDB => 8,
        PB => 20,
        SPB => 4,
        ISB => 12,
        EPB => 20,
        _ => 0,
    }
}

struct Iface {
    link: u32,
    /// Seconds per timestamp unit, and seconds added.
    res: f64,
    off: f64,
    snap: u32,
}

pub(crate) struct Pcapng {
    big: bool,
    ifaces: Vec<Iface>,
    /// The last drop counter of each interface number (over all sections).
    drops: BTreeMap<u32, u64>,
    /// The previous block was one the reference's native scan read: a run of them is one
    /// batch, every other packet block a batch of its own.
    prev_scanned: bool,
}

/// 2^-n or 10^-n seconds, as an if_tsresol option value says.
fn tsresol(v: u8) -> f64 {
    if v & 0x80 != 0 {
        // exact: a power of two
        1.0 / (1u128 << (v & 0x7F)) as f64
    } else {
        10f64.powf(-f64::from(v))
    }
}

impl Pcapng {
    pub(crate) fn new() -> Self {
        Pcapng {
            big: false,
            ifaces: Vec::new(),
            drops: BTreeMap::new(),
            prev_scanned: false,
        }
    }

    /// Sum of the interfaces' drop counters, None when no block gave one.
    pub(crate) fn drops(&self) -> Option<u128> {
        (!self.drops.is_empty()).then(|| self.drops.values().map(|&v| u128::from(v)).sum())
    }

    fn u16_at(&self, b: &[u8], at: usize) -> u16 {
        let x = b.get(at..at + 2).map_or([0; 2], |s| [s[0], s[1]]);
        if self.big {
            u16::from_be_bytes(x)
        } else {
            u16::from_le_bytes(x)
        }
    }

    fn u32_at(&self, b: &[u8], at: usize) -> u32 {
        let x = b
            .get(at..at + 4)
            .map_or([0; 4], |s| [s[0], s[1], s[2], s[3]]);
        if self.big {
            u32::from_be_bytes(x)
        } else {
            u32::from_le_bytes(x)
        }
    }

    fn u64_at(&self, b: &[u8], at: usize) -> u64 {
        let mut x = [0u8; 8];
        if let Some(s) = b.get(at..at + 8) {
            x.copy_from_slice(s);
        }
        if self.big {
            u64::from_be_bytes(x)
        } else {
            u64::from_le_bytes(x)
        }
    }

    /// Whether the reference's native scan would read the block at pos: a whole, well-formed
    /// Enhanced Packet Block already in the window, of a described interface.
    fn scannable(&self, win: &Window) -> bool {
        let h = win.rest();
        if self.ifaces.is_empty() || h.len() < 12 {
            return false;
        }
        let (btype, blen) = (self.u32_at(h, 0), self.u32_at(h, 4));
        let n = blen as usize;
        if btype != EPB || blen < 32 || blen % 4 != 0 || n > MAX_BLOCK || h.len() < n {
            return false;
        }
        if self.u32_at(h, n - 4) != blen {
            return false;
        }
        let (iface, caplen) = (self.u32_at(h, 8), self.u32_at(h, 20));
        (iface as usize) < self.ifaces.len().min(SCAN_MAX_IFACES)
            && 20 + u64::from(caplen) <= u64::from(blen - 12)
    }

    /// The next packet record after `frame` records: None at the end, Err at damage.
    /// `last_ts`: the previous record's time (a Simple Packet Block has none of its own).
    pub(crate) fn next(
        &mut self,
        win: &mut Window,
        frame: u64,
        last_ts: Option<f64>,
    ) -> Result<Option<Record>, Damage> {
        let mut batch_cut = false;
        loop {
            let scanned = self.scannable(win);
            if !(scanned && self.prev_scanned) {
                batch_cut = true;
            }
            self.prev_scanned = scanned;
            let cut = |win: &Window, kind| Err(damage(win, frame + 1, kind));
            if !win.need(12) {
                if win.available() > 0 || win.fault.is_some() {
                    return cut(win, DamageKind::BlockHeaderCut);
                }
                return Ok(None);
            }
            if win.at(0, 4) == MAGIC {
                // a Section Header Block: its byte-order magic decides
                match win.at(8, 12) {
                    [0x4d, 0x3c, 0x2b, 0x1a] => self.big = false,
                    [0x1a, 0x2b, 0x3c, 0x4d] => self.big = true,
                    _ => return cut(win, DamageKind::BadByteOrder),
                }
                self.ifaces.clear();
            }
            let h = win.at(0, 8);
            let (btype, blen) = (self.u32_at(h, 0), self.u32_at(h, 4));
            let n = blen as usize;
            if blen < 12 || blen % 4 != 0 || n > MAX_BLOCK {
                let kind = DamageKind::BadBlockLength {
                    block_type: btype,
                    length: blen,
                };
                return cut(win, kind);
            }
            if !win.need(n) {
                return cut(
                    win,
                    DamageKind::BlockCut {
                        block_type: btype,
                        length: blen,
                    },
                );
            }
            if n - 12 < min_body(btype) {
                return cut(
                    win,
                    DamageKind::BlockTooShort {
                        block_type: btype,
                        length: blen,
                    },
                );
            }
            let trailer = self.u32_at(win.at(n - 4, n), 0);
            if trailer != blen {
                let kind = DamageKind::TrailerMismatch {
                    block_type: btype,
                    length: blen,
                    trailer,
                };
                return cut(win, kind);
            }
            let body_at = win.pos + 8;
            let body_len = n - 12;
            let body = win.at(8, n - 4);
            match btype {
                EPB | PB => {
                    let (iface, hi, lo, caplen, orig) = if btype == EPB {
                        let f = |i| self.u32_at(body, i);
                        (f(0), f(4), f(8), f(12), f(16))
                    } else {
                        let f = |i| self.u32_at(body, i);
                        (u32::from(self.u16_at(body, 0)), f(4), f(8), f(12), f(16))
                    };
                    let Some(i) = self.ifaces.get(iface as usize) else {
                        return cut(win, DamageKind::BadInterface { interface: iface });
                    };
                    if 20 + caplen as usize > body_len {
                        return cut(win, DamageKind::BadInterface { interface: iface });
                    }
                    let units = (u64::from(hi) << 32) | u64::from(lo);
                    let record = Record {
                        link: i.link,
                        ts: units as f64 * i.res + i.off,
                        start: body_at + 20,
                        caplen: caplen as usize,
                        orig,
                        batch_cut,
                        ts_valid: true,
                    };
                    win.pos += n;
                    return Ok(Some(record));
                }
                SPB => {
                    let Some(i) = self.ifaces.first() else {
                        win.pos += n;
                        continue;
                    };
                    let orig = self.u32_at(body, 0);
                    let snap = if i.snap == 0 { orig } else { i.snap };
                    let caplen = (orig as usize).min(body_len - 4).min(snap as usize);
                    let record = Record {
                        link: i.link,
                        // Python's `st.last_ts or 0.0`
                        ts: last_ts.filter(|&t| t != 0.0).unwrap_or(0.0),
                        start: body_at + 4,
                        caplen,
                        orig,
                        batch_cut,
                        ts_valid: true,
                    };
                    win.pos += n;
                    return Ok(Some(record));
                }
                IDB => {
                    let link = u32::from(self.u16_at(body, 0));
                    let snap = self.u32_at(body, 4);
                    let (mut res, mut off) = (1e-6, 0.0);
                    for (code, val) in self.options(body, 8) {
                        if code == 9 && !val.is_empty() {
                            res = tsresol(val[0]);
                        } else if code == 14 && val.len() == 8 {
                            off = self.u64_at(val, 0) as i64 as f64;
                        }
                    }
                    self.ifaces.push(Iface {
                        link,
                        res,
                        off,
                        snap,
                    });
                }
                ISB => {
                    let iface = self.u32_at(body, 0);
                    let mut last = None;
                    for (code, val) in self.options(body, 12) {
                        if code == 5 && val.len() == 8 {
                            last = Some(self.u64_at(val, 0));
                        }
                    }
                    if let Some(v) = last {
                        self.drops.insert(iface, v);
                    }
                }
                _ => {}
            }
            win.pos += n;
        }
    }

    /// A block's options from `start` on: (code, value), the value cut where the body ends.
    fn options<'b>(&self, body: &'b [u8], start: usize) -> Vec<(u16, &'b [u8])> {
        let mut out = Vec::new();
        let mut i = start;
        while i + 4 <= body.len() {
            let (code, length) = (self.u16_at(body, i), usize::from(self.u16_at(body, i + 2)));
            if code == 0 {
                break;
            }
            let end = body.len().min(i + 4 + length);
            out.push((code, body.get(i + 4..end).unwrap_or(&[])));
            i += 4 + ((length + 3) & !3);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::tsresol;

    #[test]
    fn resolutions() {
        assert_eq!(tsresol(6), 1e-6);
        assert_eq!(tsresol(9), 1e-9);
        assert_eq!(tsresol(0), 1.0);
        assert_eq!(tsresol(0x80 | 10), 1.0 / 1024.0);
        assert_eq!(tsresol(0xFF), 2f64.powi(-127));
    }
}
