//! A relay as the report shows it (`relays[]`), what Python reads to word its verdict (a
//! RelayJudgement: the legs' limits, the writes, the matched pairs' numbers), and the words it
//! hands back.

use serde::{Deserialize, Serialize};

use super::forwarding::{Forwarding, Gathered};
use super::legs::Leg;
use super::matching::Relay;
use super::measure::{bulk_limit, forward_chunk, write_unit, Coupling, Pair, PerLeg};
use crate::report::direction::LimitsRecord;
use crate::report::words::{Finding, Limit, Verdict};

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

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RelayRecord {
    pub host: String,
    pub front_port: u16,
    pub back_ports: Vec<u16>,
    pub front_connections: Vec<String>,
    pub back_connections: Vec<String>,
    pub matched_queries: usize,
    pub unmatched_front_queries: usize,
    pub unmatched_back_queries: usize,
    pub pooler_own_queries: Vec<OwnQuery>,
    pub max_forward_chunk: Option<i64>,
    pub server_write: Option<i64>,
    pub forward_write: Option<i64>,
    pub queries: Vec<Pair>,
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
}

#[derive(Clone, Debug, Serialize)]
pub struct FrontLeg {
    pub connection: String,
    pub limit: Limit,
    pub limits: LimitsRecord,
}

/// A front leg's verdict judged again as the relay's: it takes the place of the one its own
/// packets gave.
#[derive(Clone, Debug, Deserialize)]
pub struct FrontVerdict {
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
    pub front_verdicts: Vec<FrontVerdict>,
}

/// The median of the known values (the upper one of an even count), as is.
fn median<T: PartialOrd + Copy>(values: impl Iterator<Item = Option<T>>) -> Option<T> {
    let mut known: Vec<T> = values.flatten().collect();
    known.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    known.get(known.len() / 2).copied()
}

impl RelayRecord {
    /// The relay's record (its words to come) and what Python reads to judge it.
    pub fn of(relay: &Relay, legs: &[Leg]) -> (RelayJudgement, RelayRecord) {
        let fronts: Vec<&Leg> = relay.front.iter().map(|&i| &legs[i]).collect();
        let backs: Vec<&Leg> = relay.back.iter().map(|&i| &legs[i]).collect();
        let pairs: Vec<Pair> = (relay.pairs.iter())
            .map(|&(f, b)| Pair::of(legs, f, b))
            .collect();
        let coupling = Coupling::of(&backs, &fronts);
        let mut gathered = Gathered::default();
        for &(f, b) in &relay.pairs {
            gathered.add(legs, f, b);
        }
        let forwarding = gathered.facts();
        let server_write = write_unit(backs.iter().copied());
        let forward_write = write_unit(fronts.iter().copied());
        let query = |(l, q): (usize, usize)| &legs[l].queries[q];
        let judgement = RelayJudgement {
            host: relay.host.clone(),
            front_port: relay.front_port,
            front_connections: fronts.len(),
            back_connections: backs.len(),
            legs: PerLeg {
                front: bulk_limit(fronts.iter().copied()),
                back: bulk_limit(backs.iter().copied()),
            },
            server_write,
            forward_write,
            bulk: bulk_pairs(&pairs),
            coupling: coupling.clone(),
            forwarding: forwarding.clone(),
            waits: waits(&pairs),
            costs: costs(&pairs),
            unmatched_front: UnmatchedFront {
                count: relay.unmatched_front.len(),
                first: relay.unmatched_front.first().map(|&(l, q)| UnmatchedQuery {
                    connection: legs[l].id(),
                    query_index: q,
                    sent_frame: legs[l].queries[q].sent_frame,
                }),
            },
            fronts: (fronts.iter())
                .filter_map(|l| {
                    Some(FrontLeg {
                        connection: l.id(),
                        limit: l.limit,
                        limits: (**l.limits.as_ref()?).clone(),
                    })
                })
                .collect(),
        };
        let record = RelayRecord {
            host: relay.host.clone(),
            front_port: relay.front_port,
            back_ports: relay.back_ports.clone(),
            front_connections: fronts.iter().map(|l| l.id()).collect(),
            back_connections: backs.iter().map(|l| l.id()).collect(),
            matched_queries: pairs.len(),
            unmatched_front_queries: relay.unmatched_front.len(),
            unmatched_back_queries: relay.unmatched_back.len(),
            pooler_own_queries: (relay.own.iter().take(MAX_OWN))
                .map(|&(l, q)| OwnQuery {
                    connection: legs[l].id(),
                    query_index: q,
                    sql: query((l, q)).sql.to_string(),
                })
                .collect(),
            max_forward_chunk: forward_chunk(relay.pairs.iter().map(|&(f, _)| query(f))),
            server_write,
            forward_write,
            queries: pairs,
            coupling,
            forwarding,
            verdict: RelayVerdict::default(),
        };
        (judgement, record)
    }
}

impl RelayWords {
    /// Into the relay's record; the front legs' verdicts judged again are returned, by
    /// connection number.
    pub fn apply(self, record: &mut RelayRecord) -> Vec<(u64, Verdict)> {
        record.coupling.summary = self.coupling;
        record.verdict = self.verdict;
        (self.front_verdicts.into_iter())
            .filter_map(|f| Some((f.connection.strip_prefix('c')?.parse().ok()?, f.verdict)))
            .collect()
    }
}

fn bulk_pairs(pairs: &[Pair]) -> BulkPairs {
    let bulk: Vec<&Pair> = pairs.iter().filter(|p| p.bulk()).collect();
    BulkPairs {
        count: bulk.len(),
        segment_median_in: median(bulk.iter().map(|p| p.segment_median_in)),
        segment_median_out: median(bulk.iter().map(|p| p.segment_median_out)),
        segments_out_per_in: median(bulk.iter().map(|p| p.segments_out_per_in)),
        frames: (bulk.iter().take(3))
            .flat_map(|p| {
                let f = &p.frames;
                [Some(f.front_sent), f.back_first, f.front_last]
            })
            .flatten()
            .filter(|&x| x != 0)
            .collect(),
    }
}

fn waits(pairs: &[Pair]) -> Waits {
    let mut worst: Option<&Pair> = None;
    let mut all: Vec<f64> = Vec::with_capacity(pairs.len());
    for p in pairs {
        if worst.is_none_or(|w| p.request_delay_ms >= w.request_delay_ms) {
            worst = Some(p);
        }
        all.push(p.request_delay_ms);
    }
    all.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let at = |q: f64| all.get((all.len() as f64 * q) as usize).copied();
    Waits {
        count: all.len(),
        median: all.get(all.len() / 2).copied(),
        p90: at(0.9),
        worst: worst.map(|p| WorstWait {
            request_delay_ms: p.request_delay_ms,
            front_sent: p.frames.front_sent,
            back_sent: p.frames.back_sent,
        }),
    }
}

fn costs(pairs: &[Pair]) -> Costs {
    let (mut count, mut total, mut own) = (0, 0.0, 0.0);
    let mut worst: Option<(&Pair, f64)> = None;
    for p in pairs {
        let Some(cost) = p.relay_cost_ms else {
            continue;
        };
        count += 1;
        total += cost;
        own += p.relay_own_ms.unwrap_or(cost);
        if worst.is_none_or(|(_, w)| cost > w) {
            worst = Some((p, cost));
        }
    }
    Costs {
        count,
        total_ms: total,
        own_ms: own,
        worst: worst.map(|(p, cost)| WorstCost {
            relay_cost_ms: cost,
            through_relay_ms: p.through_relay_ms,
            back_leg_ms: p.back_leg_ms,
        }),
    }
}
