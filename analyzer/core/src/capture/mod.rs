//! Open a capture (pcap or pcapng, either gzipped) and hand out its TCP packets one at a
//! time, borrowed from the read buffer (a lending iteration: the next call reuses it).
//!
//! Damage part-way (a cut record, a corrupt block, a broken gzip stream) ends the packets
//! normally with `stats().damage` set, so everything before it is still analysed.
//!
//! Batches: the reference pass sweeps its TCP engine after each batch of packets, with the
//! batch's last TCP packet time, and which packets come "late" depends on where batches end.
//! `next_item` hands out `Item::BatchEnd` exactly where the reference's native pass
//! (Capture.feed with pktflow._core, what every CLI command runs) sweeps:
//! - pcap: a batch is every record whole in the read-ahead window; it ends where the
//!   window is refilled (see window.rs: 256 KiB from the first record not yet read, more for
//!   a record larger than 128 KiB; a gzipped file's window ends where a 32 KiB step of
//!   compressed bytes ends, when that comes first).
//! - pcapng: a batch is a run of consecutive Enhanced Packet Blocks whole in the window (of a
//!   described interface, well formed); any other packet block (a Simple or obsolete Packet
//!   Block, an EPB cut by the window's end) is a batch of its own.
//! - the end of the file (or damage) ends the last batch.
//!
//! A batch without TCP packets has no end: the reference sweeps only after TCP packets.
//!
//! Records and headers are decoded by hand, not with pcap-parser and etherparse: on the
//! real captures and their conversions those crates differ from the reference (obsolete
//! Packet Blocks skipped, big-endian pcapng timestamps, IPv6 extension headers classified
//! otherwise), their errors do not give the reference's damage offsets, and the batch ends
//! need the reference's own window.

mod clock;
mod duplicates;
pub mod error;
mod gzip;
pub mod ip;
pub mod link;
mod pcap;
mod pcapng;
pub mod stats;
pub mod stream;
pub mod tunnel;
mod window;

#[cfg(test)]
mod tests;

use std::fs::File;
use std::io::{Cursor, ErrorKind, Read, Seek, SeekFrom};
use std::path::Path;

pub use clock::{TimeJump, Timeline, JITTER_S};
pub use duplicates::{Duplicates, DUP_WINDOW_S};
pub use error::{Damage, DamageKind, NoFileWhy, OpenError, StreamFault};
pub use stats::{CaptureStats, Format};
pub use stream::Stream;
pub use window::BLOCK;

use crate::packet::TcpPacket;
use clock::Clock;
use duplicates::Recent;
use gzip::{read_full, GzipStream};
use ip::{Decoded, Skip};
use pcap::Pcap;
use pcapng::Pcapng;
use tunnel::Tunnel;
use window::{ReadAhead, Source, Window};

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// The first (up to) 4 decompressed bytes of a gzipped capture, into `head`: how many.
fn gzip_head<R: Read>(gz: &mut GzipStream<R>, head: &mut [u8; 4]) -> Result<usize, OpenError> {
    let mut got = 0;
    while got < 4 {
        match gz.read_some(head.get_mut(got..).unwrap_or(&mut [])) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(fault) => return Err(OpenError::BadGzip { fault }),
        }
    }
    Ok(got)
}

/// One record of the file: its frame is win[start..start + caplen].
pub(crate) struct Record {
    link: u32,
    ts: f64,
    start: usize,
    caplen: usize,
    orig: u32,
    /// The reference ends a batch before this record.
    batch_cut: bool,
    /// The timestamp is one a clock can give (a pcap's fraction below a second).
    ts_valid: bool,
}

/// What `next_item` hands out.
#[derive(Clone, Copy, Debug)]
pub enum Item<'a> {
    Packet(TcpPacket<'a>),
    /// The reference sweeps its engine here: `ts` is the batch's last TCP packet's time.
    BatchEnd {
        ts: f64,
    },
}

enum Reader {
    Pcap(Pcap),
    Pcapng(Pcapng),
}

pub struct Capture {
    stats: CaptureStats,
    win: Window,
    reader: Option<Reader>,
    /// Link types of the records read, first-seen order (their names are in stats).
    seen: Vec<u32>,
    /// A record read but held back behind a batch end.
    held: Option<Record>,
    /// TCP packets handed out since the last batch end, and the last one's time.
    unswept: u64,
    unswept_ts: f64,
    /// The last TCP packet handed out (its bytes are still in the window).
    last: Option<Last>,
    ended: bool,
    /// The timeline the records' times are handed on in.
    clock: Clock,
    /// The TCP packets just handed on, to tell a copy of one.
    recent: Recent,
}

#[derive(Clone, Copy)]
struct Last {
    frame: u64,
    ts: f64,
    start: usize,
    caplen: usize,
    tcp: ip::Tcp,
    tunnel: Option<Tunnel>,
}

impl Capture {
    /// Open the capture at `path`: its format is detected by content.
    pub fn open(path: &Path) -> Result<Capture, OpenError> {
        if path.is_dir() {
            return Err(OpenError::NoFile {
                why: NoFileWhy::Directory,
                errno: None,
            });
        }
        let mut file = File::open(path).map_err(|e| {
            let why = match e.kind() {
                ErrorKind::NotFound => NoFileWhy::Missing,
                ErrorKind::PermissionDenied => NoFileWhy::PermissionDenied,
                _ => NoFileWhy::Os,
            };
            OpenError::NoFile {
                why,
                errno: e.raw_os_error(),
            }
        })?;
        let failed = |e: std::io::Error| OpenError::ReadFailed {
            errno: e.raw_os_error(),
        };
        let mut head = [0u8; 4];
        let mut got = read_full(&mut file, &mut head).map_err(failed)?;
        let compressed = got >= 2 && head[..2] == GZIP_MAGIC;
        let src = if compressed {
            file.seek(SeekFrom::Start(0)).map_err(failed)?;
            let mut gz = Box::new(GzipStream::new(file));
            got = gzip_head(&mut gz, &mut head)?;
            Source::Gzip(gz)
        } else {
            // the fd is shared: the reader thread goes on from the head's end
            match file.try_clone().and_then(ReadAhead::spawn) {
                Ok(ahead) => Source::Ahead(ahead),
                Err(_) => Source::Plain(file),
            }
        };
        Self::start(
            path.to_string_lossy().into_owned(),
            src,
            head,
            got,
            compressed,
        )
    }

    /// A capture read from a pipe (`name` is what the report calls it, `-` for standard
    /// input); its format and compression detected by content, as for a file.
    pub fn open_stream(name: &str, mut stream: Stream) -> Result<Capture, OpenError> {
        let failed = |e: std::io::Error| OpenError::ReadFailed {
            errno: e.raw_os_error(),
        };
        let mut head = [0u8; 4];
        let mut got = read_full(&mut stream, &mut head).map_err(failed)?;
        let compressed = got >= 2 && head[..2] == GZIP_MAGIC;
        let src = if compressed {
            stream.unread(head.get(..got).unwrap_or(&[]));
            let mut gz = Box::new(GzipStream::new(stream));
            got = gzip_head(&mut gz, &mut head)?;
            Source::GzipStream(gz)
        } else {
            Source::Stream(Box::new(stream))
        };
        Self::start(name.to_string(), src, head, got, compressed)
    }

    /// A capture held in memory, read exactly as the same bytes in a file would be (gzip
    /// detected by content too); its stats name the file "mem". For tests and fuzzing.
    pub fn from_bytes(data: &[u8]) -> Result<Capture, OpenError> {
        let mut head = [0u8; 4];
        let compressed = data.starts_with(&GZIP_MAGIC);
        let (src, got) = if compressed {
            let mut gz = Box::new(GzipStream::new(Cursor::new(data.to_vec())));
            let got = gzip_head(&mut gz, &mut head)?;
            (Source::GzipBytes(gz), got)
        } else {
            let got = data.len().min(4);
            if let (Some(h), Some(d)) = (head.get_mut(..got), data.get(..got)) {
                h.copy_from_slice(d);
            }
            let rest = data.get(got..).unwrap_or(&[]);
            (Source::Bytes(Cursor::new(rest.to_vec())), got)
        };
        Self::start("mem".into(), src, head, got, compressed)
    }

    fn start(
        file: String,
        src: Source,
        head: [u8; 4],
        got: usize,
        compressed: bool,
    ) -> Result<Capture, OpenError> {
        if got == 0 {
            return Err(OpenError::Empty);
        }
        let format = if got == 4 && head == pcapng::MAGIC {
            Format::Pcapng
        } else if got == 4 && pcap::MAGICS.contains(&head) {
            Format::Pcap
        } else {
            return Err(OpenError::UnknownMagic {
                head: head[..got].to_vec(),
            });
        };
        let (base, kept) = match format {
            Format::Pcapng => (0, &head[..]),
            Format::Pcap => (4, &[][..]),
        };
        let mut cap = Capture {
            stats: CaptureStats::new(file, format, compressed),
            win: Window::new(src, base, kept),
            reader: None,
            seen: Vec::new(),
            held: None,
            unswept: 0,
            unswept_ts: 0.0,
            last: None,
            ended: false,
            clock: Clock::default(),
            recent: Recent::default(),
        };
        match format {
            Format::Pcapng => cap.reader = Some(Reader::Pcapng(Pcapng::new())),
            Format::Pcap => match Pcap::open(head, &mut cap.win) {
                Ok(p) => {
                    cap.stats.nanosecond = p.nano;
                    cap.reader = Some(Reader::Pcap(p));
                }
                Err(d) => cap.finish(Some(d)),
            },
        }
        Ok(cap)
    }

    pub fn stats(&self) -> &CaptureStats {
        &self.stats
    }

    pub fn into_stats(self) -> CaptureStats {
        self.stats
    }

    /// After the last item: the reference's error for a capture with records but nothing
    /// it could decode (only link types it does not read).
    pub fn outcome(&self) -> Result<(), OpenError> {
        let st = &self.stats;
        if self.ended
            && st.packets > 0
            && st.tcp_packets == 0
            && !self.seen.iter().any(|&l| link::supported(l))
        {
            return Err(OpenError::Unsupported {
                link_types: st.link_types.clone(),
            });
        }
        Ok(())
    }

    /// The next TCP packet, batch ends skipped (for callers that do not sweep).
    pub fn next_packet(&mut self) -> Option<TcpPacket<'_>> {
        // the packet is re-borrowed after the loop: returning it from inside would hold the
        // borrow across the next call
        while let Item::BatchEnd { .. } = self.next_item()? {}
        self.last_packet()
    }

    /// The next TCP packet or batch end; None once the records (or the file) ended.
    pub fn next_item(&mut self) -> Option<Item<'_>> {
        loop {
            let rec = match self.held.take() {
                Some(r) => r,
                None => {
                    if self.ended {
                        return self.sweep();
                    }
                    match self.read_record() {
                        Ok(Some(r)) if r.batch_cut && self.unswept > 0 => {
                            self.held = Some(r);
                            return self.sweep();
                        }
                        Ok(Some(r)) => r,
                        Ok(None) => {
                            self.finish(None);
                            return self.sweep();
                        }
                        Err(d) => {
                            // a pipe told to stop (SIGINT) ends where it stands, undamaged
                            let stopped = self.win.stopped();
                            self.finish((!stopped).then_some(d));
                            return self.sweep();
                        }
                    }
                }
            };
            if let Some((tcp, tunnel, ts)) = self.account(&rec) {
                self.unswept += 1;
                self.unswept_ts = ts;
                let frame = self.stats.packets;
                self.last = Some(Last {
                    frame,
                    ts,
                    start: rec.start,
                    caplen: rec.caplen,
                    tcp,
                    tunnel,
                });
                return self.last_packet().map(Item::Packet);
            }
        }
    }

    /// The packet `last` describes, borrowed from the window.
    fn last_packet(&self) -> Option<TcpPacket<'_>> {
        let l = self.last?;
        let frame = self.win.abs(l.start, l.start + l.caplen);
        let t = &l.tcp;
        Some(TcpPacket {
            frame: l.frame,
            ts: l.ts,
            src: t.src,
            dst: t.dst,
            sport: t.sport,
            dport: t.dport,
            seq: t.seq,
            ack: t.ack,
            flags: t.flags,
            win: t.win,
            plen: t.plen,
            payload: frame.get(t.payload.0..t.payload.1).unwrap_or(&[]),
            options: frame.get(t.options.0..t.options.1).unwrap_or(&[]),
            options_cut: t.options_cut,
            tunnel: l.tunnel,
        })
    }

    fn read_record(&mut self) -> Result<Option<Record>, Damage> {
        let (frame, last_ts) = (self.stats.packets, self.clock.last_raw());
        match &mut self.reader {
            Some(Reader::Pcap(p)) => p.next(&mut self.win, frame),
            Some(Reader::Pcapng(p)) => p.next(&mut self.win, frame, last_ts),
            None => Ok(None),
        }
    }

    /// Count a record in the stats and decode it: its TCP header, the tunnel that carried it
    /// and its time on the capture's timeline; None when not TCP, or a copy of a packet just
    /// handed on.
    fn account(&mut self, rec: &Record) -> Option<(ip::Tcp, Option<Tunnel>, f64)> {
        let st = &mut self.stats;
        st.packets += 1;
        let ts = self.clock.time(rec.ts, st.packets, rec.ts_valid);
        if !self.seen.contains(&rec.link) {
            self.seen.push(rec.link);
            let name = link::link_name(rec.link);
            if !st.link_types.contains(&name) {
                st.link_types.push(name);
            }
        }
        if st.first_ts.is_none() {
            st.first_ts = Some(ts);
        }
        st.last_ts = Some(ts);
        if (rec.caplen as u64) < u64::from(rec.orig) {
            st.truncated_packets += 1;
        }
        let data = self.win.abs(rec.start, rec.start + rec.caplen);
        let mut start = link::ip_start(rec.link, data);
        let mut tunnel = None;
        let mut depth = 0;
        let decoded = loop {
            let Some((version, off)) = start else {
                break Err(Skip::NotTcp);
            };
            match ip::decode(data, version, off) {
                Ok(Decoded::Tunnel(t, inner)) if depth < tunnel::MAX_DEPTH => {
                    tunnel = Some(t);
                    start = Some(inner);
                    depth += 1;
                }
                Ok(Decoded::Tunnel(..)) => break Err(Skip::NotTcp),
                Ok(Decoded::Tcp(tcp)) => break Ok((tcp, off)),
                Err(skip) => break Err(skip),
            }
        };
        match decoded {
            Ok((tcp, ip_at)) => {
                let ip = data.get(ip_at..).unwrap_or(&[]);
                let tag = tunnel.map_or(0, Tunnel::tag);
                if self.recent.copy(ts, ip, tag, st.packets) {
                    return None;
                }
                st.tcp_packets += 1;
                if let Some(t) = tunnel {
                    st.tunnelled(t);
                }
                return Some((tcp, tunnel, ts));
            }
            Err(Skip::NotTcp) => st.non_tcp_packets += 1,
            Err(Skip::Fragment) => st.ip_fragments += 1,
            Err(Skip::Undecodable) => st.undecodable_packets += 1,
        }
        None
    }

    /// A batch end when TCP packets were handed out since the last one.
    fn sweep(&mut self) -> Option<Item<'static>> {
        if self.unswept == 0 {
            return None;
        }
        self.unswept = 0;
        Some(Item::BatchEnd {
            ts: self.unswept_ts,
        })
    }

    /// The records ended, at the end of the file or at damage.
    fn finish(&mut self, damage: Option<Damage>) {
        self.ended = true;
        self.stats.damage = damage;
        self.stats.timeline = std::mem::take(&mut self.clock.timeline);
        self.stats.duplicates = std::mem::take(&mut self.recent.duplicates);
        if let Some(Reader::Pcapng(p)) = &self.reader {
            self.stats.if_drops = p.drops();
        }
    }
}
