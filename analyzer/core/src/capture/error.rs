//! What can go wrong reading a capture, as facts: Python (pktflow/capture/problems.py) words
//! them, picks the exit code and the hint.
//!
//! Every enum serialises internally tagged: a unit variant is `{"kind": "empty"}`, a struct
//! variant `{"kind": "record_cut", "caplen": 100, "present": 40}`.

use serde::Serialize;

/// Why a capture could not be read at all (nothing was analysed).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum OpenError {
    /// The path names no readable file.
    NoFile {
        why: NoFileWhy,
        /// The OS error number when `why` is `Os` (Python's os.strerror words it).
        errno: Option<i32>,
    },
    /// Zero bytes (after decompression, when gzipped).
    Empty,
    /// Gzip magic, but the stream broke before 4 decompressed bytes.
    BadGzip { fault: StreamFault },
    /// Neither pcap nor pcapng magic: the first (up to 4) bytes.
    UnknownMagic { head: Vec<u8> },
    /// Records were read, none was TCP and none had a link type pktflow decodes.
    /// Raised by `Capture::outcome` once the records are exhausted.
    Unsupported { link_types: Vec<String> },
    /// Reading the first bytes of an opened file failed (the reference lets this escape as
    /// an internal error).
    ReadFailed { errno: Option<i32> },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NoFileWhy {
    Directory,
    Missing,
    PermissionDenied,
    /// Any other failure to open: see `errno`.
    Os,
}

/// A fault of the compressed stream (capture/gz.py's errors). Offsets count compressed
/// bytes from the start of the file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StreamFault {
    /// Bytes that are neither zero padding nor a gzip member header.
    NoMember {
        at: u64,
    },
    HeaderCut,
    /// The file ends inside a member's deflate data.
    DataCut,
    /// The inflater rejected the compressed bytes [start, end).
    Corrupt {
        start: u64,
        end: u64,
    },
    /// The member ending at `at` fails its CRC or length check.
    CheckFailed {
        at: u64,
    },
    TrailerCut,
    /// Reading the file failed.
    Io {
        errno: Option<i32>,
    },
}

/// Damage part-way: where reading stopped and why. Everything before `offset` was read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Damage {
    /// The record being read (1-based; one past the last record delivered).
    pub frame: u64,
    /// File offset (of the decompressed stream when gzipped) of the record or block.
    pub offset: u64,
    /// What the reader found wrong there.
    #[serde(flatten)]
    pub kind: DamageKind,
    /// Set when the compressed stream broke: the reason the reference gives is then this
    /// fault, whatever `kind` says.
    pub stream: Option<StreamFault>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DamageKind {
    /// pcap: fewer than 20 bytes after the magic.
    FileHeaderCut,
    /// pcap: fewer than 16 bytes of a record header.
    RecordHeaderCut,
    /// pcap: a record claims more captured bytes than any capture holds.
    RecordTooLarge { caplen: u32, snaplen: u32 },
    /// pcap: the file ends inside a record's data.
    RecordCut { caplen: u32, present: u64 },
    /// pcapng: fewer than 12 bytes of a block header.
    BlockHeaderCut,
    /// pcapng: a section header whose byte-order magic is neither order.
    BadByteOrder,
    /// pcapng: a block length below 12, not a multiple of 4, or above 16 MiB.
    BadBlockLength { block_type: u32, length: u32 },
    /// pcapng: the file ends inside a block.
    BlockCut { block_type: u32, length: u32 },
    /// pcapng: a block too short for its type's fixed fields.
    BlockTooShort { block_type: u32, length: u32 },
    /// pcapng: the trailing length differs from the leading one.
    TrailerMismatch {
        block_type: u32,
        length: u32,
        trailer: u32,
    },
    /// pcapng: a packet block names an interface not described, or its data overruns it.
    BadInterface { interface: u32 },
}

impl StreamFault {
    pub(crate) fn io(e: &std::io::Error) -> Self {
        StreamFault::Io {
            errno: e.raw_os_error(),
        }
    }
}
