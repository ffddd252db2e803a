//! Find relays (PgBouncer, Pgpool-II, any pooler) from the capture alone, and pair queries.
//!
//! A relay is an address that is the server of PostgreSQL connections on one port (front legs)
//! and the client of PostgreSQL connections to another endpoint (back legs), where the back
//! legs carry the same statements shortly after the front legs do. No port numbers or product
//! names are assumed: on loopback every address is 127.0.0.1, so only the matching content
//! proves a relay.

use std::collections::{BTreeSet, HashMap, HashSet};

use super::legs::{sql_key, Leg};

/// How many same-SQL candidates to consider per front query (transaction pooling, pgbench).
const SCAN_LIMIT: usize = 64;

/// A query of a leg: the leg's place among the legs, the query's index in it.
pub type QueryRef = (usize, usize);

/// How a back-leg candidate ranks for a front query, lowest first: not the back leg the front
/// leg used last, not the same response size, sent later.
type Score = (u8, u8, (f64, u64));

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
pub fn find_relays(legs: &[Leg]) -> Vec<Relay> {
    let mut servers: Vec<(&str, u16)> = Vec::new();
    let mut by_server: HashMap<(&str, u16), Vec<usize>> = HashMap::new();
    for (i, leg) in legs.iter().enumerate() {
        let key = (leg.server.0.as_str(), leg.server.1);
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
        let (ip, port) = key;
        let backs: Vec<usize> = (0..legs.len())
            .filter(|&i| {
                let leg = &legs[i];
                leg.client.0 == ip
                    && fronts.binary_search(&i).is_err()
                    && (leg.server.0.as_str(), leg.server.1) != key
            })
            .collect();
        if !backs.is_empty() {
            let relay = match_legs(legs, ip, port, fronts, &backs);
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
fn refs(all: &[Leg], legs: &[usize]) -> Vec<QueryRef> {
    let mut out: Vec<QueryRef> = legs
        .iter()
        .flat_map(|&l| (0..all[l].queries.len()).map(move |q| (l, q)))
        .collect();
    out.sort_by(|a, b| {
        sent(all, *a)
            .partial_cmp(&sent(all, *b))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    out
}

fn sent(legs: &[Leg], (l, q): QueryRef) -> (f64, u64) {
    legs[l].queries[q].sent()
}

/// Pair each front query with the back-leg execution that served it.
///
/// Same SQL text, sent on the back leg after it arrived on the front leg and before the front
/// leg's first response byte (a relay cannot forward what it has not received; in one capture
/// time and frame order are the same clock, so no slack is allowed: with slack, the mirror
/// image of a loopback relay would match too). Among candidates: the back connection this
/// front connection used last (session pooling keeps the pair for life), then equal response
/// size, then the earliest.
fn match_legs(legs: &[Leg], ip: &str, port: u16, fronts: &[usize], backs: &[usize]) -> Relay {
    let mut relay = Relay {
        host: ip.to_string(),
        front_port: port,
        ..Relay::default()
    };
    let mut back_q: HashMap<String, Vec<QueryRef>> = HashMap::new();
    for r in refs(legs, backs) {
        let key = sql_key(&legs[r.0].queries[r.1].sql);
        back_q.entry(key).or_default().push(r);
    }
    let mut used: HashSet<QueryRef> = HashSet::new();
    // front leg -> the back leg it was last served by
    let mut bound: HashMap<usize, usize> = HashMap::new();
    let mut front_keys: HashSet<String> = HashSet::new();
    for f in refs(legs, fronts) {
        let fq = &legs[f.0].queries[f.1];
        let key = sql_key(&fq.sql);
        let Some(cands) = back_q.get(&key) else {
            front_keys.insert(key);
            relay.unmatched_front.push(f);
            continue;
        };
        let f_sent = fq.sent();
        let start = cands.partition_point(|b| sent(legs, *b) <= f_sent);
        let latest = match fq.first_response_s {
            Some(first) => (first, fq.first_frame.unwrap_or(0)),
            None => (f64::INFINITY, 0),
        };
        let mut best: Option<(QueryRef, Score)> = None;
        for &b in cands.iter().skip(start).take(SCAN_LIMIT) {
            let b_sent = sent(legs, b);
            if b_sent > latest {
                break;
            }
            if used.contains(&b) {
                continue;
            }
            let bq = &legs[b.0].queries[b.1];
            let score = (
                u8::from(bound.get(&f.0) != Some(&b.0)),
                u8::from(bq.response_bytes != fq.response_bytes),
                b_sent,
            );
            if best.as_ref().is_none_or(|(_, s)| score < *s) {
                best = Some((b, score));
            }
        }
        front_keys.insert(key);
        let Some((b, _)) = best else {
            relay.unmatched_front.push(f);
            continue;
        };
        used.insert(b);
        bound.insert(f.0, b.0);
        relay.pairs.push((f, b));
    }
    let served: BTreeSet<usize> = relay.pairs.iter().map(|(_, b)| b.0).collect();
    for &c in backs {
        if !served.contains(&c) {
            continue;
        }
        for (i, q) in legs[c].queries.iter().enumerate() {
            if used.contains(&(c, i)) {
                continue;
            }
            if front_keys.contains(&sql_key(&q.sql)) {
                relay.unmatched_back.push((c, i));
            } else {
                relay.own.push((c, i));
            }
        }
    }
    // legs are in connection order, so their places sort as their numbers
    relay.front = fronts.to_vec();
    relay.front.sort_by_key(|&i| legs[i].number);
    relay.back = served.into_iter().collect();
    relay.back.sort_by_key(|&i| legs[i].number);
    let ports: BTreeSet<u16> = relay.back.iter().map(|&i| legs[i].server.1).collect();
    relay.back_ports = ports.into_iter().collect();
    relay
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::legs::LegQuery;
    use crate::report::words::Limit;

    const POOLER: &str = "10.0.0.2";
    const DB: &str = "10.0.0.3";

    fn q(sql: &str, sent: f64, first: f64, last: f64, frame: u64) -> LegQuery {
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
            series: None,
        }
    }

    fn leg(number: u64, client: (&str, u16), server: (&str, u16), queries: Vec<LegQuery>) -> Leg {
        Leg {
            number,
            client: (client.0.into(), client.1),
            server: (server.0.into(), server.1),
            queries,
            zero_window_periods: 0,
            zero_window_total_s: 0.0,
            evidence_frames: vec![],
            bytes_acked_median: None,
            flight_bytes_median: None,
            write_sizes: vec![],
            limit: Limit::None,
            limits: None,
            payload_bytes: 0,
            zero_spans: vec![],
        }
    }

    fn ids(legs: &[Leg], places: &[usize]) -> Vec<u64> {
        places.iter().map(|&i| legs[i].number).collect()
    }

    #[test]
    fn transaction_pooling_pairs_by_time() {
        // three clients share two server connections; the same statement everywhere
        let sql = "UPDATE t SET v = v + 1";
        let mut legs: Vec<Leg> = (0..3u64)
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
        legs.push(leg(
            10,
            (POOLER, 50000),
            (DB, 7777),
            vec![q(sql, 1.01, 1.04, 1.05, 11), q(sql, 1.21, 1.24, 1.25, 31)],
        ));
        legs.push(leg(
            11,
            (POOLER, 50001),
            (DB, 7777),
            vec![
                q(sql, 1.11, 1.14, 1.15, 21),
                q("SELECT 1", 2.0, 2.01, 2.01, 90),
            ],
        ));
        let relays = find_relays(&legs);
        assert_eq!(relays.len(), 1);
        let r = &relays[0];
        assert_eq!(
            (ids(&legs, &r.front), ids(&legs, &r.back)),
            (vec![0, 1, 2], vec![10, 11])
        );
        assert_eq!((r.front_port, r.back_ports.clone()), (7000, vec![7777]));
        let pairs: Vec<(u64, (u64, usize))> = (r.pairs.iter())
            .map(|(f, b)| (legs[f.0].number, (legs[b.0].number, b.1)))
            .collect();
        assert_eq!(pairs, vec![(0, (10, 0)), (1, (11, 0)), (2, (10, 1))]);
        assert_eq!(r.own, vec![(4, 1)]); // c11's SELECT 1: no client sent it
    }

    #[test]
    fn a_back_request_before_the_front_one_is_no_relay() {
        // the mirror image of a relay: the "back" statement left before the "front" one came
        let legs = [
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
        ];
        assert!(find_relays(&legs).is_empty());
    }

    #[test]
    fn a_back_request_after_the_front_response_is_no_match() {
        let legs = [
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
        ];
        assert!(find_relays(&legs).is_empty());
    }

    #[test]
    fn an_unrelated_server_connection_from_the_same_host_is_not_a_back_leg() {
        let legs = [
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
        ];
        let relays = find_relays(&legs);
        assert_eq!(
            (ids(&legs, &relays[0].front), ids(&legs, &relays[0].back)),
            (vec![1], vec![2])
        );
    }
}
