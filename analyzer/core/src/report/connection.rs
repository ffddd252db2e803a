//! A connection as the report shows it ("pktflow.report/1"'s `connections[]`): who, when,
//! each direction, the PostgreSQL conversation, the round trips of its queries, and Python's
//! words. Built once, when the engine retires the connection, from its facts.

use serde::{Deserialize, Serialize};

use super::conversation::ConversationRecord;
use super::direction::{DirectionRecord, HandshakeMs, TransferRecord};
use super::numbers::round_to;
use super::round_trips::{path_rtt_ms, RoundTrips};
use super::values::{Inline, Maybe};
use crate::capture::tunnel::Tunnel;
use crate::pass::ConnectionReport;
use crate::tcp::facts::{ClosedBy, ConnectionFacts, Endpoint, RoleSource};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointRecord {
    pub ip: String,
    pub port: u16,
}

impl From<&Endpoint> for EndpointRecord {
    fn from(e: &Endpoint) -> Self {
        EndpointRecord {
            ip: e.0.to_string(),
            port: e.1,
        }
    }
}

/// Where the report's client and server roles come from: TCP's, never the wire protocol's
/// (the PostgreSQL decoder reads the client's bytes as a frontend's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RolesFrom {
    Handshake,
    SynAck,
    Port,
}

/// The tunnel that carried a connection, as the report names it: its kind ("vxlan",
/// "geneve", "gre", "erspan", "ipip") and what identifies it (a VNI, a GRE key, an ERSPAN
/// version and session, IP-in-IP's inner and outer IP versions).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TunnelRecord {
    pub kind: String,
    pub vni: Maybe<u32>,
    pub key: Maybe<u32>,
    pub version: Maybe<u8>,
    pub session: Maybe<u16>,
    pub inner: Maybe<u8>,
    pub outer: Maybe<u8>,
}

impl From<Tunnel> for TunnelRecord {
    fn from(t: Tunnel) -> Self {
        let kind = |k: &str| TunnelRecord {
            kind: k.to_string(),
            ..TunnelRecord::default()
        };
        match t {
            Tunnel::Vxlan { vni } => TunnelRecord {
                vni: Maybe(Some(vni)),
                ..kind("vxlan")
            },
            Tunnel::Geneve { vni } => TunnelRecord {
                vni: Maybe(Some(vni)),
                ..kind("geneve")
            },
            Tunnel::Gre { key } => TunnelRecord {
                key: Maybe(key),
                ..kind("gre")
            },
            Tunnel::Erspan { version, session } => TunnelRecord {
                version: Maybe(Some(version)),
                session: Maybe(session),
                ..kind("erspan")
            },
            Tunnel::Ipip { inner, outer } => TunnelRecord {
                inner: Maybe(Some(inner)),
                outer: Maybe(Some(outer)),
                ..kind("ipip")
            },
        }
    }
}

/// A connection's part in a relay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Direct,
    Front,
    Back,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Directions {
    pub client_to_server: DirectionRecord,
    pub server_to_client: DirectionRecord,
}

/// Where the capture was taken, as Python judged it from the handshake and the link.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CapturePoint {
    pub position: String,
    pub link: String,
    pub summary: String,
    pub evidence: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ConnectionRecord {
    pub id: String,
    pub client: EndpointRecord,
    pub server: EndpointRecord,
    /// The tunnel that carried it (absent when none did).
    pub tunnel: Maybe<TunnelRecord>,
    pub handshake_seen: bool,
    pub roles_from: RolesFrom,
    pub start_s: f64,
    pub end_s: f64,
    pub first_frame: u64,
    pub last_frame: u64,
    pub packets: u64,
    pub closed_by: Option<ClosedBy>,
    pub directions: Directions,
    /// The PostgreSQL decoder's part (absent when it did not run).
    pub postgres: Inline<ConversationRecord>,
    /// Python's words, with the transfer analysis.
    pub capture_point: Maybe<CapturePoint>,
    /// For a conversation of two timed queries or more.
    pub round_trips: Maybe<RoundTrips>,
    /// Set once relays are known.
    pub role: Maybe<Role>,
}

/// How the report orients a connection: whether it swaps the engine's client and server, and
/// where its roles come from. The roles TCP or the ports gave stand: the PostgreSQL decoder
/// reads the engine's client as the frontend, so it never swaps them.
/// `frontend`: the engine direction the wire protocol's frontend speaks on, when known.
pub fn settle_roles(tcp: &ConnectionFacts, frontend: Option<u8>) -> (bool, RolesFrom) {
    let from = match tcp.role_source {
        RoleSource::Handshake => RolesFrom::Handshake,
        RoleSource::SynAck => RolesFrom::SynAck,
        RoleSource::Port => RolesFrom::Port,
    };
    (frontend == Some(1), from)
}

impl ConnectionRecord {
    /// The record of a retired connection; times from `start` (the capture's first packet).
    /// The facts are consumed (their strings and lists move into the record).
    pub fn of(report: ConnectionReport, start: f64) -> Self {
        let (swapped, roles_from) = settle_roles(&report.tcp, report.frontend());
        let ConnectionReport {
            tcp,
            postgres,
            transfer,
        } = report;
        let mut dirs = [
            DirectionRecord::of(&tcp.directions[0]),
            DirectionRecord::of(&tcp.directions[1]),
        ];
        if let Some(tr) = &transfer {
            for (d, rec) in dirs.iter_mut().enumerate() {
                if let Some(f) = tr.directions.get(d) {
                    rec.transfer = Inline(Some(TransferRecord::of(f, start)));
                }
            }
            // the handshake's timings, on the engine's client -> server direction
            if let Some(s) = tr.handshake_syn_to_synack_s {
                dirs[0].handshake_rtt_ms = Maybe(Some(round_to(s * 1e3, 3)));
            }
            if let [Some(syn), Some(synack), Some(ack)] = tr.syn_ts {
                dirs[0].handshake_ms = Maybe(Some(HandshakeMs {
                    syn_to_synack: round_to((synack - syn) * 1e3, 3),
                    synack_to_ack: round_to((ack - synack) * 1e3, 3),
                }));
            }
        }
        let [d0, d1] = dirs;
        let (client, server, c2s, s2c) = if swapped {
            (&tcp.server, &tcp.client, d1, d0)
        } else {
            (&tcp.client, &tcp.server, d0, d1)
        };
        let mut record = ConnectionRecord {
            id: format!("c{}", tcp.number),
            client: client.into(),
            server: server.into(),
            tunnel: Maybe(tcp.tunnel.map(TunnelRecord::from)),
            handshake_seen: tcp.handshake_seen,
            roles_from,
            start_s: round_to(tcp.start_ts - start, 6),
            end_s: round_to(tcp.end_ts - start, 6),
            first_frame: tcp.first_frame,
            last_frame: tcp.last_frame,
            packets: tcp.packets,
            closed_by: tcp.closed_by,
            directions: Directions {
                client_to_server: c2s,
                server_to_client: s2c,
            },
            postgres: Inline(postgres.map(|p| ConversationRecord::of(p, start))),
            capture_point: Maybe(None),
            round_trips: Maybe(None),
            role: Maybe(None),
        };
        if let (Some(pg), Some(_)) = (&record.postgres.0, &transfer) {
            let path = path_rtt_ms(&record.directions);
            record.round_trips = Maybe(RoundTrips::of(&pg.queries, path));
        }
        record
    }

    /// Payload bytes both ways: how the text report ranks connections.
    pub fn payload_bytes(&self) -> i64 {
        let d = &self.directions;
        d.client_to_server.payload_bytes + d.server_to_client.payload_bytes
    }
}
