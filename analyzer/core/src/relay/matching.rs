//! Find relays (PgBouncer, Pgpool-II, any pooler) from the capture alone, and pair queries.
//!
//! A relay is an address that is the server of PostgreSQL connections on one port (front legs)
//! and the client of PostgreSQL connections to another endpoint (back legs), where the back
//! legs carry the same statements shortly after the front legs do. No port numbers or product
//! names are assumed: on loopback every address is 127.0.0.1, so only the matching content
//! proves a relay.

use std::collections::{BTreeSet, HashMap, HashSet};

use super::store::Legs;

/// How many same-SQL candidates to consider per front query (transaction pooling, pgbench).
const SCAN_LIMIT: usize = 64;

/// A query of a leg: the leg's place among the legs, the query's index in it.
pub type QueryRef = (usize, usize);

/// How a back-leg candidate ranks for a front query, lowest first: not the back leg the front
/// leg used last, not the same response size, sent later.
type Score = (u8, u8, (f64, u64));

/// No back leg yet.
const UNBOUND: usize = usize::MAX;

/// A relay found: its legs (by their place among the legs) and its queries' pairing.
#[derive(Clone, Debug, Default)]
pub struct Relay {
    pub host: String,
    pub front_port: u16,
    /// Every connection to the relay's front endpoint, in connection order.
    pub front: Vec<usize>,
    /// The back legs that served a matched query, in connection order.
    pub back: Vec<usize>,
    pub back_ports: Vec<u16>,
    /// (front query, back query), in the order the front queries were sent.
    pub pairs: Vec<(QueryRef, QueryRef)>,
    pub unmatched_front: Vec<QueryRef>,
    pub unmatched_back: Vec<QueryRef>,
    /// The relay's own statements on its back legs (`SET application_name`, `DISCARD ALL`).
    pub own: Vec<QueryRef>,
}

/// The relays among `legs` (in connection order). A connection plays one part: on one host
/// every address is the same, so the mirror image of a relay (its back legs as fronts) is a
/// candidate too; statements that repeat verbatim (BEGIN, END) can pair by chance there, but
/// far fewer than in the real direction. The best-supported candidates are kept first, and
/// those that reuse a connection dropped.
pub fn find_relays(legs: &Legs) -> Vec<Relay> {
    let mut servers: Vec<(usize, u16)> = Vec::new();
    let mut by_server: HashMap<(usize, u16), Vec<usize>> = HashMap::new();
    for i in 0..legs.len() {
        let key = legs.head(i).server;
        by_server
            .entry(key)
            .or_insert_with(|| {
                servers.push(key);
                Vec::new()
            })
            .push(i);
    }
    let mut candidates = Vec::new();
    for key in servers {
        let Some(fronts) = by_server.get(&key) else {
            continue;
        };
        let ip = key.0;
        let backs: Vec<usize> = (0..legs.len())
            .filter(|&i| {
                let leg = legs.head(i);
                leg.client.0 == ip && fronts.binary_search(&i).is_err() && leg.server != key
            })
            .collect();
        if !backs.is_empty() {
            let relay = match_legs(legs, key, fronts, &backs);
            if !relay.pairs.is_empty() {
                candidates.push(relay);
            }
        }
    }
    candidates.sort_by_key(|r| std::cmp::Reverse(r.pairs.len()));
    let mut taken: HashSet<usize> = HashSet::new();
    let mut relays = Vec::new();
    for relay in candidates {
        if relay
            .front
            .iter()
            .chain(&relay.back)
            .any(|i| taken.contains(i))
        {
            continue;
        }
        taken.extend(relay.front.iter().chain(&relay.back));
        relays.push(relay);
    }
    relays
}

/// The queries of `legs` (by place), sorted by when they were sent.
fn refs(all: &Legs, legs: &[usize]) -> Vec<QueryRef> {
    let mut out: Vec<QueryRef> = legs
        .iter()
        .flat_map(|&l| (0..all.queries(l).len()).map(move |q| (l, q)))
        .collect();
    out.sort_by(|a, b| {
        sent(all, *a)
            .partial_cmp(&sent(all, *b))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    out
}

fn sent(legs: &Legs, r: QueryRef) -> (f64, u64) {
    legs.query(r).sent
}

/// Pair each front query with the back-leg execution that served it.
///
/// Same SQL text, sent on the back leg after it arrived on the front leg and before the front
/// leg's first response byte (a relay cannot forward what it has not received; in one capture
/// time and frame order are the same clock, so no slack is allowed: with slack, the mirror
/// image of a loopback relay would match too). Among candidates: the back connection this
/// front connection used last (session pooling keeps the pair for life), then equal response
/// size, then the earliest.
fn match_legs(legs: &Legs, (ip, port): (usize, u16), fronts: &[usize], backs: &[usize]) -> Relay {
    let mut relay = Relay {
        host: legs.address(ip).to_string(),
        front_port: port,
        ..Relay::default()
    };
    // the back queries by statement, each statement's in the order they were sent
    let mut back_q: Vec<(u64, QueryRef)> = (refs(legs, backs).into_iter())
        .map(|r| (legs.query(r).key, r))
        .collect();
    back_q.sort_by_key(|&(key, _)| key); // stable: sent order kept within a statement
    let mut used = vec![false; back_q.len()];
    // per front leg (by its place in `fronts`, which is sorted): the back leg it was last
    // served by
    let mut bound = vec![UNBOUND; fronts.len()];
    let mut front_keys: Vec<u64> = Vec::new();
    for f in refs(legs, fronts) {
        let fq = legs.query(f);
        let key = fq.key;
        front_keys.push(key);
        let from = back_q.partition_point(|&(k, _)| k < key);
        let to = back_q.partition_point(|&(k, _)| k <= key);
        let cands = back_q.get(from..to).unwrap_or_default();
        let start = cands.partition_point(|&(_, b)| sent(legs, b) <= fq.sent);
        let front_place = fronts.binary_search(&f.0).ok();
        let last = front_place.and_then(|p| bound.get(p).copied());
        let mut best: Option<(usize, Score)> = None;
        for (at, &(_, b)) in cands.iter().enumerate().skip(start).take(SCAN_LIMIT) {
            let b_sent = sent(legs, b);
            if b_sent > fq.answered {
                break;
            }
            if used.get(from + at).copied().unwrap_or(true) {
                continue;
            }
            let score = (
                u8::from(last != Some(b.0)),
                u8::from(legs.query(b).response_bytes != fq.response_bytes),
                b_sent,
            );
            if best.as_ref().is_none_or(|(_, s)| score < *s) {
                best = Some((from + at, score));
            }
        }
        let Some(&(_, b)) = best.and_then(|(at, _)| back_q.get(at)) else {
            relay.unmatched_front.push(f);
            continue;
        };
        if let Some(u) = best.and_then(|(at, _)| used.get_mut(at)) {
            *u = true;
        }
        if let Some(slot) = front_place.and_then(|p| bound.get_mut(p)) {
            *slot = b.0;
        }
        relay.pairs.push((f, b));
    }
    drop(back_q);
    drop(used);
    front_keys.sort_unstable();
    front_keys.dedup();
    let mut matched: Vec<QueryRef> = relay.pairs.iter().map(|&(_, b)| b).collect();
    matched.sort_unstable();
    let served: BTreeSet<usize> = matched.iter().map(|b| b.0).collect();
    for &c in backs {
        if !served.contains(&c) {
            continue;
        }
        for (i, q) in legs.queries(c).iter().enumerate() {
            if matched.binary_search(&(c, i)).is_ok() {
                continue;
            }
            if front_keys.binary_search(&q.key).is_ok() {
                relay.unmatched_back.push((c, i));
            } else {
                relay.own.push((c, i));
            }
        }
    }
    // legs are in connection order, so their places sort as their numbers
    relay.front = fronts.to_vec();
    relay.front.sort_by_key(|&i| legs.head(i).number);
    relay.back = served.into_iter().collect();
    relay.back.sort_by_key(|&i| legs.head(i).number);
    let ports: BTreeSet<u16> = relay.back.iter().map(|&i| legs.head(i).server.1).collect();
    relay.back_ports = ports.into_iter().collect();
    relay
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::relay::legs::{LegDetail, LegQuery};

    const POOLER: &str = "10.0.0.2";
    const DB: &str = "10.0.0.3";

    /// A leg's query answered in one segment, its frames from `frame` on.
    pub(crate) fn q(sql: &str, sent: f64, first: f64, last: f64, frame: u64) -> LegQuery {
        LegQuery {
            sql: sql.into(),
            rows: None,
            response_bytes: 100,
            sent_s: sent,
            first_response_s: Some(first),
            last_response_s: Some(last),
            sent_frame: frame,
            first_frame: Some(frame + 2),
            last_frame: Some(frame + 3),
            response_segments: 1,
            response_segment_median: Some(100),
            response_segment_max: Some(100),
            response_segment_sizes: None,
            delivered: None,
            series: None,
        }
    }

    type Spec = (u64, (String, u16), (String, u16), Vec<LegQuery>);

    fn leg(number: u64, client: (&str, u16), server: (&str, u16), queries: Vec<LegQuery>) -> Spec {
        (
            number,
            (client.0.into(), client.1),
            (server.0.into(), server.1),
            queries,
        )
    }

    /// The legs kept as the relay stage keeps them, in connection order.
    fn store(specs: &[Spec]) -> Legs {
        let mut legs = Legs::default();
        for (number, client, server, queries) in specs {
            let (c, s) = ((client.0.as_str(), client.1), (server.0.as_str(), server.1));
            let detail = LegDetail::default();
            legs.push(*number, c, s, &detail, queries.iter().cloned())
                .unwrap();
        }
        legs.sort();
        legs
    }

    fn ids(legs: &Legs, places: &[usize]) -> Vec<u64> {
        places.iter().map(|&i| legs.head(i).number).collect()
    }

    #[test]
    fn transaction_pooling_pairs_by_time() {
        // three clients share two server connections; the same statement everywhere
        let sql = "UPDATE t SET v = v + 1";
        let mut specs: Vec<Spec> = (0..3u64)
            .map(|i| {
                let t = 1.0 + i as f64 * 0.1;
                let ip = format!("10.0.0.{}", 10 + i);
                leg(
                    i,
                    (&ip, 40000),
                    (POOLER, 7000),
                    vec![q(sql, t, t + 0.05, t + 0.06, 10 + i * 10)],
                )
            })
            .collect();
        specs.push(leg(
            10,
            (POOLER, 50000),
            (DB, 7777),
            vec![q(sql, 1.01, 1.04, 1.05, 11), q(sql, 1.21, 1.24, 1.25, 31)],
        ));
        specs.push(leg(
            11,
            (POOLER, 50001),
            (DB, 7777),
            vec![
                q(sql, 1.11, 1.14, 1.15, 21),
                q("SELECT 1", 2.0, 2.01, 2.01, 90),
            ],
        ));
        let legs = store(&specs);
        let relays = find_relays(&legs);
        assert_eq!(relays.len(), 1);
        let r = &relays[0];
        assert_eq!(
            (ids(&legs, &r.front), ids(&legs, &r.back)),
            (vec![0, 1, 2], vec![10, 11])
        );
        assert_eq!((r.front_port, r.back_ports.clone()), (7000, vec![7777]));
        let pairs: Vec<(u64, (u64, usize))> = (r.pairs.iter())
            .map(|(f, b)| (legs.head(f.0).number, (legs.head(b.0).number, b.1)))
            .collect();
        assert_eq!(pairs, vec![(0, (10, 0)), (1, (11, 0)), (2, (10, 1))]);
        assert_eq!(r.own, vec![(4, 1)]); // c11's SELECT 1: no client sent it
    }

    #[test]
    fn a_back_request_before_the_front_one_is_no_relay() {
        // the mirror image of a relay: the "back" statement left before the "front" one came
        let legs = store(&[
            leg(
                1,
                ("10.0.0.9", 40000),
                (POOLER, 7000),
                vec![q("SELECT 42", 1.0, 1.1, 1.2, 5)],
            ),
            leg(
                2,
                (POOLER, 50000),
                (DB, 7777),
                vec![q("SELECT 42", 0.99, 1.0, 1.05, 4)],
            ),
        ]);
        assert!(find_relays(&legs).is_empty());
    }

    #[test]
    fn a_back_request_after_the_front_response_is_no_match() {
        let legs = store(&[
            leg(
                1,
                ("10.0.0.9", 40000),
                (POOLER, 7000),
                vec![q("SELECT 42", 1.0, 1.1, 1.2, 5)],
            ),
            leg(
                2,
                (POOLER, 50000),
                (DB, 7777),
                vec![q("SELECT 42", 1.15, 1.16, 1.17, 8)],
            ),
        ]);
        assert!(find_relays(&legs).is_empty());
    }

    #[test]
    fn an_unrelated_server_connection_from_the_same_host_is_not_a_back_leg() {
        let legs = store(&[
            leg(
                1,
                ("10.0.0.9", 40000),
                (POOLER, 7000),
                vec![q("SELECT 42", 1.0, 1.1, 1.2, 5)],
            ),
            leg(
                2,
                (POOLER, 50000),
                (DB, 7777),
                vec![q("SELECT 42", 1.01, 1.02, 1.05, 6)],
            ),
            leg(
                3,
                (POOLER, 50002),
                (DB, 7777),
                vec![q("SELECT now()", 1.3, 1.31, 1.32, 9)],
            ),
        ]);
        let relays = find_relays(&legs);
        assert_eq!(
            (ids(&legs, &relays[0].front), ids(&legs, &relays[0].back)),
            (vec![1], vec![2])
        );
    }
}
