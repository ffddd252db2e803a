//! A selection's packets as the ladder's rows: each packet between its sender's and its
//! receiver's lanes, named for what it is (data, an ACK of n new bytes, a window update, a
//! duplicate ACK, a keep-alive or window probe, SYN, SYN-ACK, FIN, RST) with its marks
//! (retransmission, reordering, zero window, SACK, a pooler's request and whose it is).

use super::Map;

use super::record::{Detail, Drawn, Label, Packet};
use crate::packet::{ACK, FIN, PSH, RST, SYN};
use crate::tcp::observe::{
    FILLS_HOLE, KEEPALIVE, OUT_OF_ORDER, PARTIAL_RETRANS, RETRANS, SACK_ABOVE,
};

/// What a row is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Data,
    /// An ACK without data: of new bytes, of the peer's SYN-ACK or FIN, or of nothing new.
    Ack,
    /// Nothing new acknowledged, a different window.
    Window,
    /// Nothing new acknowledged, the same window, data outstanding.
    Dupack,
    Keepalive,
    /// A keep-alive-shaped segment while the peer's window is zero.
    Probe,
    Syn,
    SynAck,
    Fin,
    Rst,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Data => "data",
            Kind::Ack => "ack",
            Kind::Window => "window",
            Kind::Dupack => "dupack",
            Kind::Keepalive => "keepalive",
            Kind::Probe => "probe",
            Kind::Syn => "syn",
            Kind::SynAck => "syn-ack",
            Kind::Fin => "fin",
            Kind::Rst => "rst",
        }
    }
}

/// Marks, in the order a row says them (a pooler's marks follow them).
pub const ZERO_WINDOW: u8 = 0x01;
pub const SACK: u8 = 0x02;
pub const DSACK: u8 = 0x04;
pub const RETRANSMISSION: u8 = 0x08;
pub const OUT_OF_ORDER_MARK: u8 = 0x10;
pub const AFTER_HOLE: u8 = 0x20;
pub const FIN_MARK: u8 = 0x40;
const MARKS: [(u8, &str); 7] = [
    (ZERO_WINDOW, "zero window"),
    (SACK, "SACK"),
    (DSACK, "D-SACK"),
    (RETRANSMISSION, "retransmission"),
    (OUT_OF_ORDER_MARK, "out of order"),
    (AFTER_HOLE, "after a hole"),
    (FIN_MARK, "FIN"),
];

/// What an ACK without data acknowledges besides bytes: the peer's SYN-ACK (the handshake's
/// last step; "SYN" when the server's ACK is drawn so), its FIN.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Acks {
    Nothing,
    SynAck,
    Syn,
    Fin,
}

impl Acks {
    pub fn name(self) -> &'static str {
        match self {
            Acks::Nothing => "",
            Acks::SynAck => "SYN-ACK",
            Acks::Syn => "SYN",
            Acks::Fin => "FIN",
        }
    }
}

/// One arrow of the ladder.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Row {
    /// Seconds from the capture's first packet, to the microsecond.
    pub t: f64,
    pub frame: u64,
    pub conn: u64,
    /// Lanes: the sender's and the receiver's.
    pub src: u16,
    pub dst: u16,
    pub kind: Kind,
    /// Payload bytes (data), or bytes newly acknowledged (an ACK; 0: nothing new).
    pub nbytes: i64,
    pub win: i64,
    /// The messages the segment completed (an index of `Rows::labels`; 0: none).
    pub msgs: u32,
    /// The segment ends inside a message.
    pub partial: bool,
    /// Bits of the marks above.
    pub marks: u8,
    /// A pooler's marks on its request (an index of `Rows::owners`; 0: none).
    pub owners: u32,
    /// The sender's window scale is unknown: `win` is the raw field.
    pub win_raw: bool,
    /// Details of the messages completed (an index of `Rows::details`; 0: none).
    pub details: u32,
    /// Sent toward the server: frontend messages.
    pub to_server: bool,
    pub acks: Acks,
    /// PSH: Linux sets it on the last segment of each write.
    pub push: bool,
    /// Where the payload starts in its direction's stream, and the next byte the sender
    /// expects of the other direction's (-1: no ACK).
    pub seq: i64,
    pub ack: i64,
}

impl Row {
    /// The marks' words, in order (a pooler's after the others).
    pub fn mark_words<'a>(&self, rows: &'a Rows) -> impl Iterator<Item = &'a str> + 'a {
        let bits = self.marks;
        MARKS
            .iter()
            .filter(move |(b, _)| bits & b != 0)
            .map(|(_, w)| *w)
            .chain(rows.owners_of(self).iter().map(String::as_str))
    }
}

/// How a connection is drawn: its client's and server's lanes, and whether each side's
/// window scale is unknown (its windows then drawn raw).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lanes {
    pub client: u16,
    pub server: u16,
    pub client_raw: bool,
    pub server_raw: bool,
}

/// The rows of a drawing, and the tables their indexes point into (index 0: empty).
#[derive(Debug, Default)]
pub struct Rows {
    pub rows: Vec<Row>,
    pub labels: Vec<Label>,
    pub details: Vec<Vec<Detail>>,
    pub owners: Vec<Vec<String>>,
}

impl Rows {
    pub fn label(&self, r: &Row) -> &[(String, u64)] {
        self.labels.get(r.msgs as usize).map_or(&[], Vec::as_slice)
    }

    pub fn details_of(&self, r: &Row) -> &[Detail] {
        self.details
            .get(r.details as usize)
            .map_or(&[], Vec::as_slice)
    }

    pub fn owners_of(&self, r: &Row) -> &[String] {
        self.owners
            .get(r.owners as usize)
            .map_or(&[], Vec::as_slice)
    }
}

/// `x` to the microsecond as Python's round(x, 6) gives it: the nearest decimal, the exact
/// binary value's ties to even (the shortest decimal formatting rounds so).
pub fn round6(x: f64) -> f64 {
    let y = x * 1e6;
    let frac = y - y.floor();
    if (frac - 0.5).abs() > 1e-6 && y.abs() < 1e15 {
        // far from a tie the product's rounding cannot change the nearest integer, and the
        // quotient of two exact integers is the float nearest the decimal
        return y.round() / 1e6;
    }
    format!("{x:.6}").parse().unwrap_or(x)
}

/// Values kept once each, numbered by their place in a table whose first entry is empty.
struct Interner<T> {
    table: Vec<T>,
    index: Map<T, u32>,
}

impl<T: Default + Clone + Eq + std::hash::Hash> Interner<T> {
    fn new() -> Self {
        Interner {
            table: vec![T::default()],
            index: Map::default(),
        }
    }

    /// The number of `value` (0 for none).
    fn of(&mut self, value: Option<&T>) -> u32 {
        let Some(v) = value else {
            return 0;
        };
        if let Some(&i) = self.index.get(v) {
            return i;
        }
        self.table.push(v.clone());
        let i = u32::try_from(self.table.len() - 1).unwrap_or(0);
        self.index.insert(v.clone(), i);
        i
    }
}

/// Per (connection, engine direction): what the rows so far have seen of it.
#[derive(Default)]
struct Way {
    /// The highest data byte the peer acknowledged.
    last_ack: Option<i64>,
    /// Where the drawn data begins.
    first_seq: Option<i64>,
    sent_end: Option<i64>,
    last_win: Option<i64>,
    /// Its FIN's sequence number.
    fin_at: Option<i64>,
    fin_acked: bool,
    syn_acked: bool,
    syn_seen: bool,
}

/// The rows of `drawn`'s packets, of the connections in `lanes`; `owners`: (connection,
/// frame) -> a pooler's marks on the request it sent; `start`: the capture's first packet's
/// time.
pub fn rows(
    drawn: &Drawn,
    lanes: &Map<u64, Lanes>,
    owners: &Map<(u64, u64), Vec<String>>,
    start: f64,
) -> Rows {
    let mut out = Rows {
        rows: Vec::with_capacity(drawn.packets.len()),
        ..Rows::default()
    };
    let mut details: Interner<Vec<Detail>> = Interner::new();
    let mut marks_of: Interner<Vec<String>> = Interner::new();
    let mut ways: Map<(u64, u8), Way> = Map::default();
    for &(conn, p) in &drawn.packets {
        let Some(lane) = lanes.get(&conn) else {
            continue;
        };
        let swapped = drawn.swapped.get(&conn).copied().unwrap_or(false);
        let from_client = (p.d == 0) != swapped;
        let (src, dst) = if from_client {
            (lane.client, lane.server)
        } else {
            (lane.server, lane.client)
        };
        let here = (conn, p.d);
        let peer = (conn, 1 - p.d.min(1));
        let mut row = Row {
            t: round6(p.ts - start),
            frame: p.frame,
            conn,
            src,
            dst,
            kind: Kind::Ack,
            nbytes: 0,
            win: p.win,
            msgs: 0,
            partial: false,
            marks: 0,
            owners: 0,
            win_raw: if from_client {
                lane.client_raw
            } else {
                lane.server_raw
            },
            details: 0,
            to_server: from_client,
            acks: Acks::Nothing,
            push: false,
            seq: p.seq,
            ack: p.ack,
        };
        if p.win == 0 && p.flags & (SYN | RST) == 0 {
            row.marks |= ZERO_WINDOW;
        }
        if p.sack != 0 {
            row.marks |= if p.sack == SACK_ABOVE { SACK } else { DSACK };
        }
        if p.flags & SYN != 0 {
            ways.entry(here).or_default().syn_seen = true;
            row.kind = if p.flags & ACK != 0 {
                Kind::SynAck
            } else {
                Kind::Syn
            };
            out.rows.push(row);
            continue;
        }
        if p.flags & RST != 0 {
            row.marks = 0;
            row.kind = Kind::Rst;
            out.rows.push(row);
            continue;
        }
        let (acked, of) = acknowledged(&p, &mut ways, here, peer, from_client);
        let peer_zero = ways.get(&peer).and_then(|w| w.last_win) == Some(0);
        let (peer_sent, peer_acked) = ways.get(&peer).map_or((0, 0), |pw| {
            (pw.sent_end.unwrap_or(0), pw.last_ack.unwrap_or(0))
        });
        let w = ways.entry(here).or_default();
        if p.end > p.seq && p.kind & KEEPALIVE == 0 {
            if p.kind & (RETRANS | PARTIAL_RETRANS) != 0 {
                row.marks |= RETRANSMISSION;
            }
            if p.kind & FILLS_HOLE != 0 {
                row.marks |= OUT_OF_ORDER_MARK;
            } else if p.kind & OUT_OF_ORDER != 0 {
                row.marks |= AFTER_HOLE;
            }
            if p.flags & FIN != 0 {
                row.marks |= FIN_MARK;
                w.fin_at = Some(p.end);
            }
            let key = (conn, p.frame);
            w.first_seq.get_or_insert(p.seq);
            w.sent_end = Some(w.sent_end.map_or(p.end, |e| e.max(p.end)).max(0));
            row.kind = Kind::Data;
            row.nbytes = p.end - p.seq;
            row.owners = marks_of.of(owners.get(&key));
            row.msgs = drawn.labels.get(&key).copied().unwrap_or(0);
            row.details = details.of(drawn.details.get(&key));
            row.partial = drawn.partial.contains(&key);
            row.push = p.flags & PSH != 0;
        } else if p.kind & KEEPALIVE != 0
            || (p.end == p.seq && p.seq == w.sent_end.unwrap_or(0) - 1 && p.flags & FIN == 0)
        {
            // one sequence number back, empty or one byte: a keep-alive (tshark's rule), or
            // while the peer's window is zero the sender's window probe
            row.kind = if peer_zero {
                Kind::Probe
            } else {
                Kind::Keepalive
            };
        } else if p.flags & FIN != 0 {
            w.fin_at = Some(p.seq);
            row.kind = Kind::Fin;
        } else if acked != 0 || of != Acks::Nothing {
            row.kind = Kind::Ack;
            row.nbytes = acked;
            row.acks = of;
        } else if w.last_win.is_some_and(|l| l != p.win) {
            row.kind = Kind::Window;
        } else if peer_sent > peer_acked {
            row.kind = Kind::Dupack;
        }
        w.last_win = Some(p.win);
        out.rows.push(row);
    }
    out.labels = drawn.label_table.clone();
    out.details = details.table;
    out.owners = marks_of.table;
    out
}

/// What packet `p`'s ACK acknowledges: new bytes of the peer's data, the peer's SYN-ACK (the
/// handshake's last step) or its FIN (one sequence number each, not bytes).
fn acknowledged(
    p: &Packet,
    ways: &mut Map<(u64, u8), Way>,
    here: (u64, u8),
    peer: (u64, u8),
    from_client: bool,
) -> (i64, Acks) {
    if p.flags & ACK == 0 || p.ack < 0 {
        return (0, Acks::Nothing);
    }
    let syn_seen = ways.get(&peer).is_some_and(|w| w.syn_seen);
    let theirs = ways.entry(peer).or_default();
    let fin = theirs.fin_at;
    let data_ack = match fin {
        Some(f) if p.ack > f => p.ack - 1,
        _ => p.ack,
    };
    let prev = theirs.last_ack.or(theirs.first_seq);
    let mut acked = 0;
    if let Some(prev) = prev {
        if data_ack > prev {
            acked = data_ack - prev;
        }
    }
    if prev.is_none_or(|prev| data_ack > prev) {
        theirs.last_ack = Some(data_ack);
    }
    let mine = ways.entry(here).or_default();
    let mut of = Acks::Nothing;
    if fin.is_some_and(|f| p.ack == f + 1) && !mine.fin_acked {
        mine.fin_acked = true;
        of = Acks::Fin;
    } else if p.ack == 0 && syn_seen && !mine.syn_acked {
        mine.syn_acked = true;
        of = if from_client { Acks::SynAck } else { Acks::Syn };
    }
    (acked, of)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_to_the_microsecond_as_python_does() {
        // Python: round(0.0078125, 6) == 0.007812 (a tie, to even); round(1.0000005, 6)
        assert_eq!(round6(0.0078125), 0.007812);
        assert_eq!(round6(0.0234375), 0.023438);
        assert_eq!(round6(1.234_567_49), 1.234567);
        assert_eq!(round6(-0.000_000_4), -0.0);
    }
}
