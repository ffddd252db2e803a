//! How a ladder folds: runs of a repeating block of rows become a group (drawn once, with its
//! count), and a bulk transfer (rows moving DataRow, CopyData or TLS data one way, with the
//! ACKs coming back) becomes a phase, drawn as its most repeated block with its totals; and
//! the totals a folded span shows.

use super::Map;

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

use super::rows::{Kind, Row, Rows};

/// The longest repeating block looked for, in rows.
pub const MAX_PERIOD: usize = 12;
/// A bulk transfer spans this many rows at least.
pub const MIN_PHASE_ROWS: usize = 8;
/// Messages that make a segment part of a bulk transfer.
const BULK: [&str; 3] = ["DataRow", "CopyData", "TLSApplicationData"];

/// `reps` consecutive repetitions of the block rows[start..start + period].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Group {
    pub start: usize,
    pub period: usize,
    pub reps: usize,
}

impl Group {
    pub fn end(&self) -> usize {
        self.start + self.period * self.reps
    }
}

/// A row on its own, or a group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Item {
    Row(usize),
    Group(Group),
}

impl Item {
    fn size(&self) -> usize {
        match self {
            Item::Row(_) => 1,
            Item::Group(g) => g.period * g.reps,
        }
    }
}

/// An item, or a bulk transfer: rows[start..end], its most repeated group if it has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Folded {
    Item(Item),
    Phase {
        start: usize,
        end: usize,
        dominant: Option<Group>,
    },
}

/// A row's lanes, kind, bytes, messages' names (numbered), partial, marks and a pooler's
/// marks (numbered).
type Signature = (u16, u16, Kind, i64, u32, bool, u8, u32);

/// A row carries messages of a request or its answer (not only rows of a result).
fn exchanges(rows: &Rows, r: &Row) -> bool {
    r.kind == Kind::Data && !bulk_only(rows, r)
}

fn bulk_only(rows: &Rows, r: &Row) -> bool {
    rows.label(r)
        .iter()
        .all(|(n, _)| BULK.contains(&n.as_str()))
}

/// What makes two rows "the same step": the lanes, the kind, the messages' names (their counts
/// may differ), whether it ends inside a message, the marks (windows may differ); and the
/// bytes, but of a request or its answer, whose sizes collapse compares apart (`alike`: a
/// parameter's digits change a request's size; group_sizes says where they differ). Each
/// distinct one numbered.
pub fn signatures(rows: &Rows) -> Vec<u32> {
    let mut names: Map<Vec<&str>, u32> = Map::default();
    let mut owners: Map<&[String], u32> = Map::default();
    let mut seen: Map<Signature, u32> = Map::default();
    rows.rows
        .iter()
        .map(|r| {
            let these: Vec<&str> = rows.label(r).iter().map(|(n, _)| n.as_str()).collect();
            let next = u32::try_from(names.len()).unwrap_or(u32::MAX);
            let msgs = *names.entry(these).or_insert(next);
            // a pooler's marks by what they say ("for c5"), not by the frame they are on
            let next = u32::try_from(owners.len()).unwrap_or(u32::MAX);
            let marked = *owners.entry(rows.owners_of(r)).or_insert(next);
            let bytes = if exchanges(rows, r) {
                i64::MIN
            } else {
                r.nbytes
            };
            let key = (
                r.src, r.dst, r.kind, bytes, msgs, r.partial, r.marks, marked,
            );
            let next = u32::try_from(seen.len()).unwrap_or(u32::MAX);
            *seen.entry(key).or_insert(next)
        })
        .collect()
}

/// Two sizes of a request or answer that make it the same step: a parameter's digits, an
/// identifier's, not another statement (a difference within an eighth, or SIZE_SLACK bytes).
const SIZE_SLACK: u64 = 8;

fn alike(a: i64, b: i64) -> bool {
    let slack = u64::try_from(a.max(b) / 8).unwrap_or(0).max(SIZE_SLACK);
    a.abs_diff(b) <= slack
}

/// Each row's bytes where signatures leave them out (a request or its answer), else None.
pub fn sizes(rows: &Rows) -> Vec<Option<i64>> {
    (rows.rows.iter())
        .map(|r| exchanges(rows, r).then_some(r.nbytes))
        .collect()
}

/// Which rows open an exchange: a request (a segment toward the server carrying messages)
/// sent from one of `lanes` (the clients', or the pooler's when no client is drawn: a
/// pooler's forward of a client's request is part of that client's exchange).
pub fn openers(rows: &Rows, lanes: &[u16]) -> Vec<bool> {
    rows.rows
        .iter()
        .map(|r| {
            r.kind == Kind::Data
                && r.to_server
                && !rows.label(r).is_empty()
                && lanes.contains(&r.src)
        })
        .collect()
}

/// Runs of a repeating block (period 1..MAX_PERIOD; three repetitions, or two of a block of
/// two rows or more) as groups; greedy from the top, the block that covers the most rows.
/// A block holding a request starts with one (`openers`): whole exchanges fold, each request
/// before its answer. A repetition's requests and answers are within `alike` of the first
/// repetition's (`sizes`: signatures leave their bytes out).
pub fn collapse(sigs: &[u32], sizes: &[Option<i64>], openers: &[bool]) -> Vec<Item> {
    let n = sigs.len();
    let size = |j: usize| sizes.get(j).copied().flatten();
    let same = |a: usize, b: usize, k: usize| {
        sigs.get(a..a + k) == sigs.get(b..b + k)
            && (0..k).all(|o| match (size(a + o), size(b + o)) {
                (Some(x), Some(y)) => alike(x, y),
                _ => true,
            })
    };
    let mut items = Vec::new();
    let mut i = 0;
    while i < n {
        let mut best: Option<(usize, usize)> = None; // (rows covered, period)
        for k in 1..=MAX_PERIOD {
            if i + 2 * k > n {
                break;
            }
            let opens = |j: usize| openers.get(j).copied().unwrap_or(false);
            if !opens(i) && (i..i + k).any(opens) {
                continue; // it would start inside an exchange
            }
            let mut reps = 1;
            while i + (reps + 1) * k <= n && same(i, i + reps * k, k) {
                reps += 1;
            }
            if reps >= 3 || (reps == 2 && k >= 2) {
                let covered = reps * k;
                if best.is_none_or(|(c, _)| covered > c) {
                    best = Some((covered, k));
                }
            }
        }
        match best {
            None => {
                items.push(Item::Row(i));
                i += 1;
            }
            Some((covered, k)) => {
                items.push(Item::Group(Group {
                    start: i,
                    period: k,
                    reps: covered / k,
                }));
                i += covered;
            }
        }
    }
    items
}

/// A step of a group whose rows are not all one size (requests or answers alike but for
/// their bytes): the size most of them have, and the others.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Sizes {
    /// The step (0: the block's first row).
    pub step: usize,
    pub bytes: i64,
    /// How many of the repetitions have `bytes`.
    pub alike: usize,
    /// The others' frames and sizes, the first `listed`.
    pub others: Vec<(u64, i64)>,
    pub other_count: usize,
}

/// Where the rows of a group's steps differ in size.
pub fn group_sizes(rows: &Rows, g: &Group, listed: usize) -> Vec<Sizes> {
    let mut out = Vec::new();
    for step in 0..g.period {
        let these: Vec<&Row> = (0..g.reps)
            .filter_map(|k| rows.rows.get(g.start + k * g.period + step))
            .collect();
        let mut counts: Vec<(i64, usize)> = Vec::new();
        for r in &these {
            match counts.iter_mut().find(|(b, _)| *b == r.nbytes) {
                Some((_, n)) => *n += 1,
                None => counts.push((r.nbytes, 1)),
            }
        }
        if counts.len() < 2 {
            continue;
        }
        let mut common = counts[0];
        for &c in &counts {
            if c.1 > common.1 {
                common = c;
            }
        }
        let others: Vec<(u64, i64)> = (these.iter())
            .filter(|r| r.nbytes != common.0)
            .map(|r| (r.frame, r.nbytes))
            .collect();
        out.push(Sizes {
            step,
            bytes: common.0,
            alike: common.1,
            other_count: others.len(),
            others: others.into_iter().take(listed).collect(),
        });
    }
    out
}

/// For a row that can be part of a bulk transfer: Some(the way of its data: toward a lower
/// lane, as responses flow), or Some(None) for an ACK; None when it cannot.
fn bulk_way(rows: &Rows, r: &Row) -> Option<Option<bool>> {
    match r.kind {
        Kind::Data => bulk_only(rows, r).then_some(Some(r.dst < r.src)),
        Kind::Ack | Kind::Window | Kind::Dupack | Kind::Keepalive | Kind::Probe => Some(None),
        _ => None,
    }
}

/// The items with bulk transfers folded: runs of items whose rows move bulk data one way
/// (with the ACKs of it), MIN_PHASE_ROWS rows at least.
pub fn phases(rows: &Rows, items: &[Item]) -> Vec<Folded> {
    let mut out = Vec::new();
    let mut run: Vec<Item> = Vec::new();
    let mut run_start = 0;
    let mut way: Option<bool> = None;
    let mut pos = 0; // the first row of the current item
    let flush = |out: &mut Vec<Folded>,
                 run: &mut Vec<Item>,
                 way: &mut Option<bool>,
                 run_start,
                 end| {
        // a transfer moves data: a run of ACKs alone (a round trip late) is not one
        if !run.is_empty() && end - run_start >= MIN_PHASE_ROWS && run.len() >= 2 && way.is_some() {
            let mut dominant: Option<Group> = None;
            for it in run.iter() {
                if let Item::Group(g) = it {
                    if dominant.is_none_or(|d| g.reps * g.period > d.reps * d.period) {
                        dominant = Some(*g);
                    }
                }
            }
            out.push(Folded::Phase {
                start: run_start,
                end,
                dominant,
            });
        } else {
            out.extend(run.iter().map(|it| Folded::Item(*it)));
        }
        run.clear();
        *way = None;
    };
    for it in items {
        let size = it.size();
        let span = rows.rows.get(pos..pos + size).unwrap_or_default();
        let ways: Option<Vec<Option<bool>>> = span.iter().map(|r| bulk_way(rows, r)).collect();
        let Some(ways) = ways else {
            flush(&mut out, &mut run, &mut way, run_start, pos);
            out.push(Folded::Item(*it));
            pos += size;
            continue;
        };
        let (down, up) = (ways.contains(&Some(true)), ways.contains(&Some(false)));
        let both = down && up;
        let this = if up {
            Some(false)
        } else if down {
            Some(true)
        } else {
            None
        };
        if both || (this.is_some() && way.is_some() && this != way) {
            flush(&mut out, &mut run, &mut way, run_start, pos);
        }
        if run.is_empty() {
            run_start = pos;
        }
        if this.is_some() {
            way = this;
        }
        run.push(*it);
        pos += size;
    }
    flush(&mut out, &mut run, &mut way, run_start, pos);
    out
}

/// Names and counts, in the order first met (serialised as a map).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts(pub Vec<(String, u64)>);

impl Counts {
    pub fn add(&mut self, name: &str, n: u64) {
        match self.0.iter_mut().find(|(k, _)| k == name) {
            Some((_, c)) => *c += n,
            None => self.0.push((name.to_string(), n)),
        }
    }
}

impl Serialize for Counts {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// The messages of a span carried one way between two lanes (a leg of a relay, one way): a
/// relayed row counts on each leg, never twice on one.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Leg {
    pub from: u16,
    pub to: u16,
    pub messages: Counts,
}

/// What a folded span holds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Totals {
    pub rows: usize,
    pub segments: usize,
    pub bytes: i64,
    pub acks: usize,
    pub messages: Counts,
    pub legs: Vec<Leg>,
    pub first_frame: u64,
    pub last_frame: u64,
    pub t0: f64,
    pub t1: f64,
}

/// Per arrow direction of a span: its segments and their median size, the ACKs coming back
/// and their median bytes (on a relay, the re-split shows: 8,192 B in, ~4 KB out).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Breakdown {
    pub from: u16,
    pub to: u16,
    pub segments: usize,
    pub bytes: i64,
    pub segment_median: i64,
    pub acks: usize,
    pub ack_median: Option<i64>,
    pub messages: Counts,
}

fn span(rows: &Rows, start: usize, end: usize) -> &[Row] {
    rows.rows
        .get(start..end.min(rows.rows.len()))
        .unwrap_or_default()
}

/// The messages of rows[start..end] per arrow direction, in the order first met.
pub fn legs(rows: &Rows, start: usize, end: usize) -> Vec<Leg> {
    let mut out: Vec<Leg> = Vec::new();
    for r in span(rows, start, end) {
        let label = rows.label(r);
        if r.kind != Kind::Data || label.is_empty() {
            continue;
        }
        let leg = match out.iter().position(|l| (l.from, l.to) == (r.src, r.dst)) {
            Some(i) => &mut out[i],
            None => {
                out.push(Leg {
                    from: r.src,
                    to: r.dst,
                    messages: Counts::default(),
                });
                let last = out.len() - 1;
                &mut out[last]
            }
        };
        for (name, n) in label {
            leg.messages.add(name, *n);
        }
    }
    out
}

/// The totals of rows[start..end] (None for an empty span).
pub fn totals(rows: &Rows, start: usize, end: usize) -> Option<Totals> {
    let s = span(rows, start, end);
    let (first, last) = (s.first()?, s.last()?);
    let mut messages = Counts::default();
    let (mut segments, mut bytes, mut acks) = (0, 0, 0);
    for r in s {
        match r.kind {
            Kind::Data => {
                segments += 1;
                bytes += r.nbytes;
                for (name, n) in rows.label(r) {
                    messages.add(name, *n);
                }
            }
            Kind::Ack => acks += 1,
            _ => {}
        }
    }
    Some(Totals {
        rows: s.len(),
        segments,
        bytes,
        acks,
        messages,
        legs: legs(rows, start, end),
        first_frame: first.frame,
        last_frame: last.frame,
        t0: first.t,
        t1: last.t,
    })
}

/// Per arrow direction with data in rows[start..end], in the order first met.
pub fn breakdown(rows: &Rows, start: usize, end: usize) -> Vec<Breakdown> {
    let mut data: Vec<((u16, u16), Vec<i64>)> = Vec::new();
    let mut acks: Map<(u16, u16), Vec<i64>> = Map::default();
    for r in span(rows, start, end) {
        match r.kind {
            Kind::Data => match data.iter_mut().find(|(k, _)| *k == (r.src, r.dst)) {
                Some((_, sizes)) => sizes.push(r.nbytes),
                None => data.push(((r.src, r.dst), vec![r.nbytes])),
            },
            // keyed by the way of the data it acknowledges
            Kind::Ack => acks.entry((r.dst, r.src)).or_default().push(r.nbytes),
            _ => {}
        }
    }
    let legs = legs(rows, start, end);
    data.into_iter()
        .map(|((from, to), mut sizes)| {
            sizes.sort_unstable();
            let mut back = acks.remove(&(from, to)).unwrap_or_default();
            back.sort_unstable();
            Breakdown {
                from,
                to,
                segments: sizes.len(),
                bytes: sizes.iter().sum(),
                segment_median: sizes.get(sizes.len() / 2).copied().unwrap_or(0),
                acks: back.len(),
                ack_median: back.get(back.len() / 2).copied(),
                messages: legs
                    .iter()
                    .find(|l| (l.from, l.to) == (from, to))
                    .map(|l| l.messages.clone())
                    .unwrap_or_default(),
            }
        })
        .collect()
}

/// The rows of rows[start..end] with a mark (retransmission, zero window, a pooler's...):
/// the first `limit`, and how many there are.
pub fn marked(rows: &Rows, start: usize, end: usize, limit: usize) -> (Vec<usize>, usize) {
    let mut first = Vec::new();
    let mut n = 0;
    for (i, r) in span(rows, start, end).iter().enumerate() {
        if r.marks != 0 || r.owners != 0 {
            if first.len() < limit {
                first.push(start + i);
            }
            n += 1;
        }
    }
    (first, n)
}

/// The legend's keys of an ACK without data: of a SYN-ACK, of a FIN, bare, or of bytes.
fn ack_key(r: &Row) -> &'static str {
    if r.nbytes != 0 {
        return "ack";
    }
    match r.acks.name() {
        "SYN-ACK" | "SYN" => "ack-syn",
        "FIN" => "ack-fin",
        _ => "ack-only",
    }
}

/// What the legend explains, in the order first drawn: each message by sender ((toward the
/// server, name)), and each kind of packet and mark.
pub fn symbols(rows: &Rows) -> (Vec<(bool, String)>, Vec<String>) {
    let mut used: Vec<(bool, String)> = Vec::new();
    let mut kinds: Vec<String> = Vec::new();
    let add = |kinds: &mut Vec<String>, k: &str| {
        if !kinds.iter().any(|x| x == k) {
            kinds.push(k.to_string());
        }
    };
    for r in &rows.rows {
        for (name, _) in rows.label(r) {
            if !used.iter().any(|(t, n)| *t == r.to_server && n == name) {
                used.push((r.to_server, name.clone()));
            }
        }
        add(
            &mut kinds,
            if r.kind == Kind::Ack {
                ack_key(r)
            } else {
                r.kind.name()
            },
        );
        for m in r.mark_words(rows) {
            add(&mut kinds, if m.starts_with("for ") { "for" } else { m });
        }
        if r.win_raw && matches!(r.kind, Kind::Ack | Kind::Window) {
            add(&mut kinds, "raw");
        }
    }
    (used, kinds)
}

/// The kinds of row drawn, in the order first drawn.
pub fn kinds(rows: &Rows) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for r in &rows.rows {
        let k = r.kind.name();
        if !out.contains(&k) {
            out.push(k);
        }
    }
    out
}

/// Where a row's time is earlier than the row before it (rows keep the capture's order):
/// its frame and by how many microseconds.
pub fn times_back(rows: &Rows) -> Vec<(u64, i64)> {
    rows.rows
        .windows(2)
        .filter_map(|w| match w {
            [p, r] if r.t < p.t => Some((r.frame, ((p.t - r.t) * 1e6).round_ties_even() as i64)),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_repeated_becomes_a_group_of_the_most_rows() {
        let sigs = [9, 1, 2, 3, 1, 2, 3, 1, 2, 3, 4, 4, 4, 5];
        assert_eq!(
            collapse(&sigs, &[], &[false; 14]),
            vec![
                Item::Row(0),
                Item::Group(Group {
                    start: 1,
                    period: 3,
                    reps: 3
                }),
                Item::Group(Group {
                    start: 10,
                    period: 1,
                    reps: 3
                }),
                Item::Row(13),
            ]
        );
        // two of one row is not a group; two of a block of two is
        assert_eq!(
            collapse(&[1, 1], &[], &[]),
            vec![Item::Row(0), Item::Row(1)]
        );
        assert_eq!(
            collapse(&[1, 2, 1, 2], &[], &[]),
            vec![Item::Group(Group {
                start: 0,
                period: 2,
                reps: 2
            })]
        );
    }

    #[test]
    fn a_group_starts_with_its_request() {
        // 1 a request, 2 its answer; an odd request (3) once: the block after it does not
        // start with an answer (2, 1, 2, 1...) but at the next request
        let sigs = [1, 2, 1, 2, 1, 2, 3, 2, 1, 2, 1, 2, 1, 2];
        let opens: Vec<bool> = sigs.iter().map(|&s| s != 2).collect();
        let groups: Vec<(usize, usize, usize)> = collapse(&sigs, &[], &opens)
            .iter()
            .map(|it| match it {
                Item::Row(i) => (*i, 1, 1),
                Item::Group(g) => (g.start, g.period, g.reps),
            })
            .collect();
        assert_eq!(groups, vec![(0, 2, 3), (6, 1, 1), (7, 1, 1), (8, 2, 3)]);
        // without the rule the odd one's answer led the second block
        let g = |start, period, reps| {
            Item::Group(Group {
                start,
                period,
                reps,
            })
        };
        assert_eq!(
            collapse(&sigs, &[], &[]),
            vec![g(0, 2, 3), Item::Row(6), g(7, 2, 3), Item::Row(13)]
        );
    }

    #[test]
    fn a_request_alike_but_for_a_parameters_digits_is_the_same_step() {
        // a request (1) and its answer (2), four times; the third request a byte shorter
        let sigs = [1, 2, 1, 2, 1, 2, 1, 2];
        let near = [108, 76, 108, 76, 107, 76, 108, 76].map(Some);
        let whole = Item::Group(Group {
            start: 0,
            period: 2,
            reps: 4,
        });
        assert_eq!(collapse(&sigs, &near, &[]), vec![whole]);
        // another statement, 488 B against 43 B, is not a repetition
        let far = [43, 63, 488, 120].map(Some);
        assert_eq!(
            collapse(&sigs[..4], &far, &[]),
            (0..4).map(Item::Row).collect::<Vec<_>>()
        );
        assert!(alike(108, 107) && alike(40, 48) && !alike(43, 488) && !alike(1000, 1200));
    }
}
