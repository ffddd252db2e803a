//! A relay as the report shows it (`relays[]`), what Python reads to word its verdict (a
//! RelayJudgement: the legs' limits, the writes, the matched pairs' numbers), and the words it
//! hands back.

use serde::{Deserialize, Serialize, Serializer};

use super::forwarding::{Forwarding, Gathered};
use super::legs::id;
use super::matching::Relay;
use super::measure::{Coupling, ForwardChunk, LegsSeen, Pair, PerLeg};
use super::pairs::Pairs;
use super::store::Legs;
use crate::report::direction::LimitsRecord;
use crate::report::values::Maybe;
use crate::report::words::{Finding, Limit, Verdict};
use crate::report::ReportError;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OwnQuery {
    pub connection: String,
    pub query_index: usize,
    pub sql: String,
}

/// Which part of the path through the relay set the pace, as Python judged it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Component {
    Client,
    Network,
    Pooler,
    ServerNetwork,
    Server,
    #[default]
    None,
}

/// Python's verdict on the relay.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RelayVerdict {
    pub summary: String,
    pub setting: Option<String>,
    pub limit: Component,
    pub legs: PerLeg<Limit>,
    pub relay_ms: Option<f64>,
    pub front_leg_ms: Option<f64>,
    pub evidence_frames: Vec<u64>,
    /// What going direct would save (seconds): all the relay added; absent without a matched
    /// query (`without` says why).
    #[serde(default)]
    pub saving_s: Maybe<f64>,
    /// What "without" means, or why there is no saving.
    #[serde(default)]
    pub without: Maybe<String>,
}

impl Default for PerLeg<Limit> {
    fn default() -> Self {
        PerLeg {
            front: Limit::None,
            back: Limit::None,
        }
    }
}

/// The pooler's own statements listed at most.
const MAX_OWN: usize = 100;

/// Connections by number, written as their ids ("c<number>").
#[derive(Clone, Debug, Default)]
pub struct Ids(pub Vec<u64>);

impl Serialize for Ids {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|&n| id(n)))
    }
}

#[derive(Debug, Serialize)]
pub struct RelayRecord {
    pub host: String,
    pub front_port: u16,
    pub back_ports: Vec<u16>,
    pub front_connections: Ids,
    pub back_connections: Ids,
    pub matched_queries: usize,
    pub unmatched_front_queries: usize,
    pub unmatched_back_queries: usize,
    pub pooler_own_queries: Vec<OwnQuery>,
    pub max_forward_chunk: Option<i64>,
    pub server_write: Option<i64>,
    pub forward_write: Option<i64>,
    /// Spooled (pairs.rs).
    pub queries: Pairs,
    pub coupling: Coupling,
    /// How it forwarded the bulk responses, from both legs side by side.
    pub forwarding: Forwarding,
    pub verdict: RelayVerdict,
}

/// The longest request wait and where it shows.
#[derive(Clone, Debug, Serialize)]
pub struct WorstWait {
    pub request_delay_ms: f64,
    pub front_sent: u64,
    pub back_sent: u64,
}

/// The largest cost a relay added to a matched query, and its parts.
#[derive(Clone, Debug, Serialize)]
pub struct WorstCost {
    pub relay_cost_ms: f64,
    pub through_relay_ms: Option<f64>,
    pub back_leg_ms: Option<f64>,
}

/// The bulk responses (BULK_SEGMENTS or more segments on the back leg).
#[derive(Clone, Debug, Serialize)]
pub struct BulkPairs {
    pub count: usize,
    /// Medians over the bulk pairs of each one's median segment size in and out, and of
    /// segments out per segment in.
    pub segment_median_in: Option<i64>,
    pub segment_median_out: Option<i64>,
    pub segments_out_per_in: Option<f64>,
    /// The first three's request, first byte in and last byte out, where known.
    pub frames: Vec<u64>,
}

/// How long requests waited before the relay forwarded them.
#[derive(Clone, Debug, Serialize)]
pub struct Waits {
    pub count: usize,
    pub median: Option<f64>,
    /// The value one in ten waits reached (sorted, at index count * 0.9).
    pub p90: Option<f64>,
    /// The last of the longest.
    pub worst: Option<WorstWait>,
}

/// What the relay added to the matched queries' time at the client.
#[derive(Clone, Debug, Serialize)]
pub struct Costs {
    /// Pairs whose cost is known.
    pub count: usize,
    pub total_ms: f64,
    /// Of the total, what the relay did itself: forward each request and its first response
    /// byte (the rest is the front leg draining slower than the back leg).
    pub own_ms: f64,
    /// The first of the largest.
    pub worst: Option<WorstCost>,
}

#[derive(Clone, Debug, Serialize)]
pub struct UnmatchedFront {
    pub count: usize,
    pub first: Option<UnmatchedQuery>,
}

#[derive(Clone, Debug, Serialize)]
pub struct UnmatchedQuery {
    pub connection: String,
    pub query_index: usize,
    pub sent_frame: u64,
}

/// What Python reads to word a relay's verdict.
#[derive(Clone, Debug, Serialize)]
pub struct RelayJudgement {
    pub host: String,
    pub front_port: u16,
    pub front_connections: usize,
    pub back_connections: usize,
    /// What limited the front legs' and the back legs' server -> client directions (the
    /// legs that carried the most).
    pub legs: PerLeg<Limit>,
    /// The server's and the relay's habitual write sizes.
    pub server_write: Option<i64>,
    pub forward_write: Option<i64>,
    pub bulk: BulkPairs,
    pub coupling: Coupling,
    pub forwarding: Forwarding,
    pub waits: Waits,
    pub costs: Costs,
    pub unmatched_front: UnmatchedFront,
    /// The front legs whose server -> client transfer was judged, with where its time went:
    /// a relay that forwarded at once passed the back leg's pace on to them.
    pub fronts: Vec<FrontLeg>,
    /// The back legs whose receiver's window (the pooler's) limited them, with that verdict:
    /// a pooler waiting on its own client shuts the window as a slow reader does.
    pub backs: Vec<BackLeg>,
}

#[derive(Clone, Debug, Serialize)]
pub struct FrontLeg {
    pub connection: String,
    pub limit: Limit,
    pub limits: LimitsRecord,
    pub window_ceiling: Option<i64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct BackLeg {
    pub connection: String,
    pub verdict: Verdict,
    pub limits: LimitsRecord,
    pub window_ceiling: Option<i64>,
}

/// A leg's verdict judged again as the relay's: it takes the place of the one its own
/// packets gave.
#[derive(Clone, Debug, Deserialize)]
pub struct LegVerdict {
    pub connection: String,
    pub verdict: Verdict,
}

/// Python's words for a relay.
#[derive(Clone, Debug, Deserialize)]
pub struct RelayWords {
    pub coupling: String,
    pub verdict: RelayVerdict,
    pub findings: Vec<Finding>,
    #[serde(default)]
    pub front_verdicts: Vec<LegVerdict>,
    #[serde(default)]
    pub back_verdicts: Vec<LegVerdict>,
}

/// The median of the known values (the upper one of an even count), as is.
fn median<T: PartialOrd + Copy>(values: impl Iterator<Item = Option<T>>) -> Option<T> {
    let mut known: Vec<T> = values.flatten().collect();
    known.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    known.get(known.len() / 2).copied()
}

impl RelayRecord {
    /// The relay's record (its words to come) and what Python reads to judge it: each leg's
    /// detail and each matched pair's queries read back once, the pairs spooled as they are
    /// measured.
    pub fn of(relay: &Relay, legs: &Legs) -> Result<(RelayJudgement, RelayRecord), ReportError> {
        let mut read = legs.reader();
        let (mut fronts, mut backs) = (LegsSeen::default(), LegsSeen::default());
        let mut judged_fronts = Vec::new();
        for &l in &relay.front {
            let leg = read.leg(l)?;
            fronts.add(&leg);
            if let Some(limits) = leg.limits {
                judged_fronts.push(FrontLeg {
                    connection: id(legs.head(l).number),
                    limit: leg.limit,
                    limits,
                    window_ceiling: leg.window_ceiling,
                });
            }
        }
        let mut judged_backs = Vec::new();
        for &l in &relay.back {
            let leg = read.leg(l)?;
            backs.add(&leg);
            if let (Some(verdict), Some(limits)) = (leg.window_verdict, leg.limits) {
                judged_backs.push(BackLeg {
                    connection: id(legs.head(l).number),
                    verdict,
                    limits,
                    window_ceiling: leg.window_ceiling,
                });
            }
        }
        let coupling = Coupling::of(&mut backs, &fronts);
        let mut queries = Pairs::default();
        let mut gathered = Gathered::default();
        let mut chunk = ForwardChunk::default();
        let mut seen = PairsSeen::default();
        for &(f, b) in &relay.pairs {
            let (fq, bq) = (read.query(f)?, read.query(b)?);
            let (fl, bl) = (legs.head(f.0).number, legs.head(b.0).number);
            let pair = Pair::of((fl, f.1, &fq), (bl, b.1, &bq));
            if Gathered::measures(&fq, &bq) {
                let (front, back) = (read.leg(f.0)?, read.leg(b.0)?);
                gathered.add((&fq, &front.zero_spans), (&bq, &back.zero_spans));
            }
            chunk.add(&fq);
            seen.add(&pair);
            queries.push(&pair)?;
        }
        let forwarding = gathered.facts();
        let (server_write, forward_write) = (backs.write_unit(), fronts.write_unit());
        let mut own = Vec::new();
        for &(l, q) in relay.own.iter().take(MAX_OWN) {
            own.push(OwnQuery {
                connection: id(legs.head(l).number),
                query_index: q,
                sql: read.query((l, q))?.sql,
            });
        }
        let numbers = |places: &[usize]| Ids(places.iter().map(|&l| legs.head(l).number).collect());
        let judgement = RelayJudgement {
            host: relay.host.clone(),
            front_port: relay.front_port,
            front_connections: relay.front.len(),
            back_connections: relay.back.len(),
            legs: PerLeg {
                front: fronts.bulk_limit(),
                back: backs.bulk_limit(),
            },
            server_write,
            forward_write,
            bulk: seen.bulk(),
            coupling: coupling.clone(),
            forwarding: forwarding.clone(),
            waits: seen.waits(),
            costs: seen.costs,
            unmatched_front: UnmatchedFront {
                count: relay.unmatched_front.len(),
                first: relay.unmatched_front.first().map(|&(l, q)| UnmatchedQuery {
                    connection: id(legs.head(l).number),
                    query_index: q,
                    sent_frame: legs.query((l, q)).sent.1,
                }),
            },
            fronts: judged_fronts,
            backs: judged_backs,
        };
        let record = RelayRecord {
            host: relay.host.clone(),
            front_port: relay.front_port,
            back_ports: relay.back_ports.clone(),
            front_connections: numbers(&relay.front),
            back_connections: numbers(&relay.back),
            matched_queries: queries.len(),
            unmatched_front_queries: relay.unmatched_front.len(),
            unmatched_back_queries: relay.unmatched_back.len(),
            pooler_own_queries: own,
            max_forward_chunk: chunk.size(),
            server_write,
            forward_write,
            queries,
            coupling,
            forwarding,
            verdict: RelayVerdict::default(),
        };
        Ok((judgement, record))
    }
}

/// A bulk pair's numbers the judgement reads.
struct BulkPair {
    segment_median_in: Option<i64>,
    segment_median_out: Option<i64>,
    segments_out_per_in: Option<f64>,
}

/// What the judgement reads of the matched pairs, gathered one pair at a time.
struct PairsSeen {
    bulk: Vec<BulkPair>,
    /// The first three bulk pairs' request, first byte in and last byte out, where known.
    bulk_frames: Vec<u64>,
    delays: Vec<f64>,
    worst_wait: Option<WorstWait>,
    costs: Costs,
}

impl Default for PairsSeen {
    fn default() -> Self {
        PairsSeen {
            bulk: Vec::new(),
            bulk_frames: Vec::new(),
            delays: Vec::new(),
            worst_wait: None,
            costs: Costs {
                count: 0,
                total_ms: 0.0,
                own_ms: 0.0,
                worst: None,
            },
        }
    }
}

impl PairsSeen {
    fn add(&mut self, p: &Pair) {
        if p.bulk() {
            if self.bulk.len() < 3 {
                let f = &p.frames;
                let frames = [Some(f.front_sent), f.back_first, f.front_last];
                (self.bulk_frames).extend(frames.into_iter().flatten().filter(|&x| x != 0));
            }
            self.bulk.push(BulkPair {
                segment_median_in: p.segment_median_in,
                segment_median_out: p.segment_median_out,
                segments_out_per_in: p.segments_out_per_in,
            });
        }
        // the last of the longest waits
        if (self.worst_wait.as_ref()).is_none_or(|w| p.request_delay_ms >= w.request_delay_ms) {
            self.worst_wait = Some(WorstWait {
                request_delay_ms: p.request_delay_ms,
                front_sent: p.frames.front_sent,
                back_sent: p.frames.back_sent,
            });
        }
        self.delays.push(p.request_delay_ms);
        if let Some(cost) = p.relay_cost_ms {
            let c = &mut self.costs;
            c.count += 1;
            c.total_ms += cost;
            c.own_ms += p.relay_own_ms.unwrap_or(cost);
            // the first of the largest
            if c.worst.as_ref().is_none_or(|w| cost > w.relay_cost_ms) {
                c.worst = Some(WorstCost {
                    relay_cost_ms: cost,
                    through_relay_ms: p.through_relay_ms,
                    back_leg_ms: p.back_leg_ms,
                });
            }
        }
    }

    fn bulk(&self) -> BulkPairs {
        BulkPairs {
            count: self.bulk.len(),
            segment_median_in: median(self.bulk.iter().map(|p| p.segment_median_in)),
            segment_median_out: median(self.bulk.iter().map(|p| p.segment_median_out)),
            segments_out_per_in: median(self.bulk.iter().map(|p| p.segments_out_per_in)),
            frames: self.bulk_frames.clone(),
        }
    }

    fn waits(&mut self) -> Waits {
        let all = &mut self.delays;
        all.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        let at = |q: f64| all.get((all.len() as f64 * q) as usize).copied();
        Waits {
            count: all.len(),
            median: all.get(all.len() / 2).copied(),
            p90: at(0.9),
            worst: self.worst_wait.take(),
        }
    }
}

impl RelayWords {
    /// Into the relay's record; the legs' verdicts judged again are returned, by connection
    /// number.
    pub fn apply(self, record: &mut RelayRecord) -> Vec<(u64, Verdict)> {
        record.coupling.summary = self.coupling;
        record.verdict = self.verdict;
        (self.front_verdicts.into_iter())
            .chain(self.back_verdicts)
            .filter_map(|f| Some((f.connection.strip_prefix('c')?.parse().ok()?, f.verdict)))
            .collect()
    }
}
