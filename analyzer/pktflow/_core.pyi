"""Types of pktflow._core, the Rust core's binding (analyzer/binding): every value that crosses
it, as the core's serde structs write it (tests/test_core_types.py checks these against what
crosses). Keys a struct leaves out when it has nothing to say are NotRequired."""

from collections.abc import Callable
from typing import Any, Generic, Literal, NotRequired, Protocol, TypedDict, TypeVar

T = TypeVar("T")

FIN: int
SYN: int
RST: int
PSH: int
ACK: int
URG: int
ECE: int
CWR: int
NEW: int
RETRANS: int
PARTIAL_RETRANS: int
OUT_OF_ORDER: int
FILLS_HOLE: int
KEEPALIVE: int
SACK_ABOVE: int
SACK_DUPLICATE: int
__version__: str
SCHEMA: str
# the engine's reassembly bounds
MAX_BUFFERED_BYTES: int
MAX_BUFFERED_SEGMENTS: int
MAX_HOLES: int
# how close in time two copies of a packet are taken to be
DUP_WINDOW_S: float
# a step back in time smaller than this is the jitter of CPUs stamping packets
JITTER_S: float

LimitName = Literal["receiver_window", "network", "loss", "latency", "sender"]
VerdictLimit = Literal["receiver_window", "network", "loss", "latency", "sender", "none"]
Role = Literal["frontend", "backend"]

# -- the judgement: what Python reads to judge a connection (report/judgement.rs) ------------

class ByLimit(TypedDict, Generic[T]):
    receiver_window: T
    network: T
    loss: T
    latency: T
    sender: T

class Stretch(TypedDict):
    from_frame: int
    to_frame: int
    start_ts: float
    seconds: float

class LimitFacts(TypedDict):
    transfer_s: float
    turns: int
    turns_s: float
    seconds: ByLimit[float]
    sender_idle_s: float
    ack_tail_s: float
    after_loss_s: float
    low_window_s: float
    first: ByLimit[Stretch | None]
    longest: ByLimit[Stretch | None]
    recoveries: int
    recovery_by_retransmission: int
    recovery_by_duplicate_ack: int
    recovery_by_hole: int

class AckJudgement(TypedDict):
    count: int
    segments_mode: int | None
    bytes_mode: int | None
    bytes_mode_count: int
    segments_median: int | None
    bytes_median: int | None
    delayed_timer: int

class WindowJudgement(TypedDict):
    max: int | None
    scaled: bool
    zero_window_periods: int
    zero_window_total_s: float

class IdleJudged(TypedDict):
    zero_window: bool
    outstanding: int
    to_frame: int

class IdleJudgement(TypedDict):
    waiting_s: float
    periods: list[IdleJudged]

class TransferJudgement(TypedDict):
    data_bytes: int
    segments: int
    retransmitted_segments: int
    span_s: float
    acks: AckJudgement
    window: WindowJudgement
    rtt_median_ms: float | None
    rtt_min_ms: float | None
    idle: IdleJudgement
    # for a transfer the judge judges (its min_bytes, min_segments), else None
    limits: LimitFacts | None

class DirectionJudgement(TypedDict):
    """A direction's engine counters (what the findings read) and its transfer; evidence
    frames None where there are none."""
    payload_bytes: int
    max_segment: int
    mss: int | None
    segments_above_mss: int
    window_scale_known: bool
    window_scale_lower_bound: int | None
    syn_options_cut_frame: int | None
    gaps: int
    missing_bytes: int
    bound_gaps: int
    holes_forgotten: int
    retransmitted_segments: int
    retransmitted_bytes: int
    out_of_order_segments: int
    truncated_bytes: int
    truncated_segments: int
    zero_window_events: int
    ev_gap: list[int] | None
    ev_retrans: list[int] | None
    ev_ooo: list[int] | None
    ev_trunc: list[int] | None
    ev_zero: list[int] | None
    transfer: TransferJudgement | None

class JudgedDirections(TypedDict):
    client_to_server: DirectionJudgement
    server_to_client: DirectionJudgement

class HandshakeMs(TypedDict):
    syn_to_synack: float
    synack_to_ack: float

class StopReason(TypedDict):
    """Why a direction is not decoded past some point (pgwire/facts.rs), by kind."""
    kind: Literal["length_under_4", "length_absurd", "not_role_type", "wrong_length",
                  "not_startup", "tls_without_alpn", "no_framing", "other_protocol", "misfit",
                  "unproven", "nothing_captured"]
    length: NotRequired[int]
    type_byte: NotRequired[int]
    role: NotRequired[Role]
    min: NotRequired[int]
    max: NotRequired[int]
    offered: NotRequired[list[str]]
    lost: NotRequired[int]
    protocol: NotRequired[Literal["TLS", "HTTP", "BGP", "SSH"]]
    seen: NotRequired[str]
    frontend_messages: NotRequired[int]
    backend_messages: NotRequired[int]
    exchanges: NotRequired[int]
    misfits: NotRequired[int]
    bytes: NotRequired[int]

class Proof(TypedDict):
    """Why a connection seen mid-stream is PostgreSQL (pgwire/detect.rs)."""
    request: str
    request_frame: int
    response: str
    response_frame: int
    exchanges: int
    closed_frame: int | None

class Event(TypedDict):
    """What happened on a connection, in order (pgwire/facts.rs Event), by kind."""
    kind: Literal["resync", "mid_stream", "startup_cut", "encrypted", "not_postgresql",
                  "malformed", "server_error", "query_error", "query_errors_total",
                  "queries_capped"]
    role: NotRequired[Role]
    start_seen: NotRequired[bool]
    proof: NotRequired[Proof]
    captured: NotRequired[int]
    length: NotRequired[int]
    offset: NotRequired[int]
    frame: NotRequired[int]
    encryption: NotRequired[Literal["none", "tls", "gss"]]
    request: NotRequired[Literal["SSLRequest", "GSSENCRequest"] | None]
    reason: NotRequired[StopReason]
    code: NotRequired[str | None]
    message: NotRequired[str | None]
    sql: NotRequired[str]
    sent_frame: NotRequired[int]
    count: NotRequired[int]
    listed: NotRequired[int]

class LateCopy(TypedDict):
    seconds: float
    query_index: int
    seen_frame: int
    taken_frame: int

class LateCopies(TypedDict):
    """Requests and responses the receiver took only from a later copy (report/judgement.rs)."""
    requests: int
    responses: int
    added_s: float
    longest: LateCopy
    frames: list[int]

class PgJudgement(TypedDict):
    events: list[Event]
    decode_stopped: StopReason | None
    late: LateCopies | None

class RoundTrips(TypedDict):
    queries: int
    rtt_ms: float | None
    rtt_from: Literal["handshake", "rtt samples"] | None
    round_trips_ms: float | None
    span_ms: float
    responses_ms: float
    bulk_ms: float
    share: float | None
    summary: str
    saving_s: NotRequired[float]
    pipelined_saving_s: NotRequired[float]
    without: NotRequired[str]

class ConversationSaving(TypedDict):
    saving_s: float | None
    pipelined_saving_s: float | None
    without: str

class Judgement(TypedDict):
    id: str
    swapped: bool
    loopback: bool
    handshake_ms: HandshakeMs | None
    directions: JudgedDirections
    postgres: PgJudgement | None
    round_trips: RoundTrips | None
    query_frames: tuple[int, int] | None

# -- the words: what Python hands back (report/words.rs) --------------------------------------

class Verdict(TypedDict):
    limit: VerdictLimit
    mixed_with: NotRequired[LimitName]
    shares: ByLimit[float] | None
    receiver: NotRequired[Literal["buffer", "application"]]
    summary: str
    evidence_frames: list[int]
    saving_s: NotRequired[float]
    without: NotRequired[str]
    saving_model: NotRequired[str]

class CapturePoint(TypedDict):
    position: str
    link: str
    summary: str
    evidence: list[str]

class Finding(TypedDict):
    severity: Literal["error", "warning", "info"]
    code: str
    message: str
    connection: str | None
    frames: list[int]

class DirectionWords(TypedDict):
    pattern: str
    verdict: Verdict
    waiting_for: list[str]

class DirectionsWords(TypedDict):
    client_to_server: DirectionWords
    server_to_client: DirectionWords

class Words(TypedDict):
    directions: DirectionsWords | None
    capture_point: CapturePoint | None
    round_trips: str | None
    round_trips_saving: NotRequired[ConversationSaving | None]
    decode_stopped: str | None
    findings: list[Finding]

class Judge(Protocol):
    def __call__(self, judgement: Judgement, /) -> Words: ...
    # (optional) the least a transfer carries for the judge to read its limits
    min_bytes: int
    min_segments: int

# -- a connection's record: the report's layout (report/connection.rs and the modules beside) --

class Endpoint(TypedDict):
    ip: str
    port: int

class Causes(TypedDict):
    every_second_segment: int
    window_update: int
    quick_ack: int
    delayed_timer: int
    duplicate: int

class Acks(TypedDict):
    count: int
    bytes_acked_median: int | None
    bytes_acked_histogram: dict[str, int]
    segments_per_ack_median: int | None
    causes: Causes

class Window(TypedDict):
    min: int | None
    max: int | None
    scaled: bool
    scale_lower_bound: int | None
    zero_window_periods: int
    zero_window_total_s: float

class InFlight(TypedDict):
    max: int
    median: int | None
    max_frame: int
    max_ratio_to_window: float | None

class EndReasons(TypedDict):
    window_full: int
    ack_arrived: int
    cwnd_wait: int
    sender_idle: int

class Flights(TypedDict):
    count: int
    bytes_median: int | None
    segments_median: int | None
    end_reasons: EndReasons

class Rtt(TypedDict):
    samples: int
    min: float
    median: float | None
    p95: float | None

class Bin(TypedDict):
    bps: int
    start_s: float

class IdlePeriod(TypedDict):
    seconds: float
    from_frame: int
    to_frame: int
    waiting_for: str
    start_s: float

class Idle(TypedDict):
    count: int
    total_s: float
    first: list[IdlePeriod]

class Writes(TypedDict):
    count: int
    size_p10_by_bytes: int | None
    size_median_by_bytes: int | None
    size_p90_by_bytes: int | None
    sizes_by_bytes: dict[str, int]
    unended_bytes: int

class Run(TypedDict):
    from_frame: int
    to_frame: int
    seconds: float

class Limits(TypedDict):
    transfer_s: float
    seconds: ByLimit[float]
    sender_idle_s: float
    ack_tail_s: float
    after_loss_s: float
    low_window_s: float
    turns: int
    turns_s: float
    recoveries: int
    longest: ByLimit[Run | None]

class Direction(TypedDict):
    payload_bytes: int
    data_segments: int
    max_segment: int
    mss: int | None
    window_scale: int | None
    window_scale_known: bool
    window_scale_lower_bound: int | None
    syn_options_cut_frame: NotRequired[int]
    retransmitted_segments: int
    retransmitted_bytes: int
    out_of_order_segments: int
    gaps: int
    missing_bytes: int
    truncated_bytes: int
    zero_window_events: int
    window_updates: int
    segments_above_mss: int
    keepalives: int
    # the transfer analysis's part
    acks: NotRequired[Acks]
    pattern: NotRequired[str]
    segment_size_median: NotRequired[int | None]
    segment_size_histogram: NotRequired[dict[str, int]]
    window: NotRequired[Window]
    in_flight: NotRequired[InFlight]
    flights: NotRequired[Flights]
    rtt_ms: NotRequired[Rtt | None]
    goodput_bps: NotRequired[int | None]
    best_100ms: NotRequired[Bin | None]
    worst_100ms: NotRequired[Bin | None]
    idle_periods: NotRequired[Idle]
    writes: NotRequired[Writes]
    limits: NotRequired[Limits]
    verdict: NotRequired[Verdict]
    # the handshake's timings, on client_to_server when seen
    handshake_rtt_ms: NotRequired[float]
    handshake_ms: NotRequired[HandshakeMs]

class Directions(TypedDict):
    client_to_server: Direction
    server_to_client: Direction

class Startup(TypedDict):
    user: str | None
    database: str | None
    application_name: str | None
    encryption: Literal["none", "tls", "gss"]
    protocol_version: str
    parameters: dict[str, str]
    # only when the snapshot length cut the StartupMessage
    captured_bytes: NotRequired[int]

class CancelTarget(TypedDict):
    connection: str
    query_index: int | None

class CancelRequest(TypedDict):
    """A CancelRequest and what it stopped (report/conversation.rs CancelRecord)."""
    backend_pid: int
    frame: int
    sent_s: float
    target: CancelTarget | None
    cancel_to_error_ms: float | None

class Delivered(TypedDict):
    """A query's moments as the receiver's reader had them, where a copy the capture saw was
    lost past the capture point (report/conversation.rs DeliveredRecord)."""
    sent_s: float
    sent_frame: int
    first_response_s: float | None
    first_frame: int | None
    last_response_s: float | None
    last_frame: int | None

class CancelledBy(TypedDict):
    connection: str
    frame: int
    cancel_to_error_ms: float

class Authentication(TypedDict):
    """How the client proved who it is (report/conversation.rs AuthenticationRecord)."""
    method: str | None
    mechanisms: list[str]
    mechanism: str | None
    outcome: Literal["ok", "failed", "unfinished"]
    round_trips: int
    ms: float | None
    first_frame: int
    last_frame: int | None

class DecodeStopped(TypedDict):
    direction: Role
    offset: int
    frame: int | None
    reason: str

class PerRole(TypedDict, Generic[T]):
    frontend: T
    backend: T

class ServerMessage(TypedDict):
    """An ErrorResponse or NoticeResponse (report/conversation.rs ServerMessageRecord): the
    fields every report has (null when not sent), the others where the server sent them."""
    code: str | None
    message: str | None
    severity: str | None
    detail: str | None
    hint: str | None
    position: str | None
    localized_severity: NotRequired[str]
    internal_position: NotRequired[str]
    internal_query: NotRequired[str]
    where: NotRequired[str]
    schema: NotRequired[str]
    table: NotRequired[str]
    column: NotRequired[str]
    data_type: NotRequired[str]
    constraint: NotRequired[str]
    file: NotRequired[str]
    line: NotRequired[str]
    routine: NotRequired[str]
    frame: int
    at_s: float

class Query(TypedDict):
    sql: str
    sql_truncated: bool
    kind: Literal["simple", "extended", "copy", "function"]
    command_tag: str | None
    rows: int | None
    data_rows: int
    copy_data: int
    response_bytes: int
    response_messages: int
    sent_s: float
    first_response_s: float | None
    last_response_s: float | None
    sent_frame: int
    first_frame: int | None
    last_frame: int | None
    delivered: NotRequired[Delivered]
    error: ServerMessage | None
    notices: list[ServerMessage]
    notices_total: int
    columns: list[str] | None
    column_count: int | None
    data_row_bytes: int
    cancelled_by: CancelledBy | None
    incomplete: bool
    response_segments: int
    response_segment_median: int | None
    response_segment_max: int | None
    response_segment_sizes: dict[str, int]
    goodput_bps: int | None

class Connection(TypedDict):
    id: str
    client: Endpoint
    server: Endpoint
    tunnel: NotRequired[TunnelRecord]
    handshake_seen: bool
    roles_from: Literal["handshake", "syn-ack", "port"]
    start_s: float
    end_s: float
    first_frame: int
    last_frame: int
    packets: int
    closed_by: Literal["fin", "rst"] | None
    directions: Directions
    # the PostgreSQL decoder's part
    protocol: NotRequired[Literal["unknown", "postgresql", "postgresql-tls", "postgresql-gss"]]
    startup: NotRequired[Startup | None]
    authentication: NotRequired[Authentication | None]
    decode_started_at: NotRequired[Literal["startup", "mid-stream"] | None]
    decode_stopped: NotRequired[DecodeStopped | None]
    lost_bytes: NotRequired[PerRole[int]]
    backend_pid: NotRequired[int | None]
    cancel_request: NotRequired[CancelRequest | None]
    server_parameters: NotRequired[dict[str, str]]
    messages: NotRequired[PerRole[dict[str, int]]]
    notices: NotRequired[list[ServerMessage]]
    notices_total: NotRequired[int]
    errors: NotRequired[list[ServerMessage]]
    queries: NotRequired[list[Query]]
    queries_total: NotRequired[int]
    capture_point: NotRequired[CapturePoint]
    round_trips: NotRequired[RoundTrips]
    role: NotRequired[Literal["direct", "front", "back"]]

# -- relays: what Python reads to word one, what it says, the record (core/src/relay/) ---------

class PerLeg(TypedDict, Generic[T]):
    front: T
    back: T

class Coupling(TypedDict):
    back_window_zero_events: int
    back_window_zero_s: float
    back_bytes_per_ack_median: int | None
    front_bytes_per_ack_median: int | None
    back_bytes_per_flight_median: int | None
    summary: str
    evidence_frames: list[int]

class Quantiles(TypedDict):
    median: float | None
    p90: float | None
    max: float | None

class Forwarding(TypedDict):
    """How a relay forwarded its bulk responses, from both legs side by side
    (relay/forwarding.rs)."""
    responses: int
    delay_ms: Quantiles
    held_bytes: Quantiles
    few_segments_bytes: int | None
    held_over_few_s: float
    span_s: float
    first_closed: Literal["client", "relay"] | None
    client_closed: int
    relay_closed: int

class BulkPairs(TypedDict):
    count: int
    segment_median_in: int | None
    segment_median_out: int | None
    segments_out_per_in: float | None
    frames: list[int]

class WorstWait(TypedDict):
    request_delay_ms: float
    front_sent: int
    back_sent: int

class Waits(TypedDict):
    count: int
    median: float | None
    p90: float | None
    worst: WorstWait | None

class WorstCost(TypedDict):
    relay_cost_ms: float
    through_relay_ms: float | None
    back_leg_ms: float | None

class Costs(TypedDict):
    count: int
    total_ms: float
    own_ms: float
    worst: WorstCost | None

class UnmatchedQuery(TypedDict):
    connection: str
    query_index: int
    sent_frame: int

class UnmatchedFront(TypedDict):
    count: int
    first: UnmatchedQuery | None

class RelayJudgement(TypedDict):
    host: str
    front_port: int
    front_connections: int
    back_connections: int
    legs: PerLeg[VerdictLimit]
    server_write: int | None
    forward_write: int | None
    bulk: BulkPairs
    coupling: Coupling
    forwarding: Forwarding
    waits: Waits
    costs: Costs
    unmatched_front: UnmatchedFront
    fronts: list[FrontLeg]
    backs: list[BackLeg]

class FrontLeg(TypedDict):
    connection: str
    limit: VerdictLimit
    limits: Limits
    window_ceiling: int | None

class BackLeg(TypedDict):
    connection: str
    verdict: Verdict
    limits: Limits
    window_ceiling: int | None

class LegVerdict(TypedDict):
    connection: str
    verdict: Verdict

Component = Literal["client", "network", "pooler", "server_network", "server", "none"]

class RelayVerdict(TypedDict):
    summary: str
    setting: str | None
    limit: Component
    legs: PerLeg[VerdictLimit]
    relay_ms: float | None
    front_leg_ms: float | None
    evidence_frames: list[int]
    saving_s: NotRequired[float]
    without: NotRequired[str]

class RelayWords(TypedDict):
    coupling: str
    verdict: RelayVerdict
    findings: list[Finding]
    front_verdicts: NotRequired[list[LegVerdict]]
    back_verdicts: NotRequired[list[LegVerdict]]

class RelayJudge(Protocol):
    def __call__(self, judgement: RelayJudgement, /) -> RelayWords: ...

class QueryAt(TypedDict):
    connection: str
    query_index: int

class PairFrames(TypedDict):
    front_sent: int
    back_sent: int
    back_first: int | None
    front_first: int | None
    back_last: int | None
    front_last: int | None

class Pair(TypedDict):
    front: QueryAt
    back: QueryAt
    sql: str
    rows: int | None
    response_bytes: PerLeg[int]
    request_delay_ms: float
    first_byte_delay_ms: float | None
    last_byte_delay_ms: float | None
    through_relay_ms: float | None
    back_leg_ms: float | None
    relay_cost_ms: float | None
    relay_own_ms: float | None
    segments_in: int
    segments_out: int
    segments_out_per_in: float | None
    segment_median_in: int | None
    segment_median_out: int | None
    segment_max_in: int | None
    segment_max_out: int | None
    frames: PairFrames

class OwnQuery(TypedDict):
    connection: str
    query_index: int
    sql: str

class Relay(TypedDict):
    host: str
    front_port: int
    back_ports: list[int]
    front_connections: list[str]
    back_connections: list[str]
    matched_queries: int
    unmatched_front_queries: int
    unmatched_back_queries: int
    pooler_own_queries: list[OwnQuery]
    max_forward_chunk: int | None
    server_write: int | None
    forward_write: int | None
    queries: list[Pair]
    coupling: Coupling
    forwarding: Forwarding
    verdict: RelayVerdict

# -- the pass ---------------------------------------------------------------------------------

class StreamFault(TypedDict):
    """A fault of a gzip stream (capture/error.rs), by kind."""
    kind: Literal["no_member", "header_cut", "data_cut", "corrupt", "check_failed",
                  "trailer_cut", "io"]
    at: NotRequired[int]
    start: NotRequired[int]
    end: NotRequired[int]
    errno: NotRequired[int | None]

class DamageFacts(TypedDict):
    """Where reading stopped and why (capture/error.rs Damage, its kind's fields beside)."""
    frame: int
    offset: int
    kind: Literal["file_header_cut", "record_header_cut", "record_too_large", "record_cut",
                  "block_header_cut", "bad_byte_order", "bad_block_length", "block_cut",
                  "block_too_short", "trailer_mismatch", "bad_interface"]
    stream: StreamFault | None
    caplen: NotRequired[int]
    snaplen: NotRequired[int]
    present: NotRequired[int]
    block_type: NotRequired[int]
    length: NotRequired[int]
    trailer: NotRequired[int]
    interface: NotRequired[int]

class TunnelCount(TypedDict):
    """A tunnel (capture/tunnel.rs, by kind) and the TCP packets it carried."""
    kind: Literal["vxlan", "geneve", "gre", "erspan", "ipip"]
    vni: NotRequired[int]
    key: NotRequired[int | None]
    version: NotRequired[int]
    session: NotRequired[int | None]
    inner: NotRequired[int]
    outer: NotRequired[int]
    packets: int

class TunnelRecord(TypedDict):
    """The tunnel that carried a connection (report/connection.rs)."""
    kind: Literal["vxlan", "geneve", "gre", "erspan", "ipip"]
    vni: NotRequired[int]
    key: NotRequired[int]
    version: NotRequired[int]
    session: NotRequired[int]
    inner: NotRequired[int]
    outer: NotRequired[int]

class Duplicates(TypedDict):
    """TCP packets captured twice (capture/duplicates.rs): the copies dropped, and the first
    (copy's frame, frame it copies)."""
    packets: int
    frames: list[tuple[int, int]]

class TimeJump(TypedDict):
    frame: int
    step_s: float
    returns: bool

class Timeline(TypedDict):
    """Where the records' times jumped or stepped back (capture/clock.rs)."""
    jumps: list[TimeJump]
    jumps_total: int
    backward_steps: int
    backward_max_s: float
    backward_first_frame: int | None

class CaptureStats(TypedDict):
    """Counters about the capture file as a whole (capture/stats.rs)."""
    file: str
    format: Literal["pcap", "pcapng"]
    compressed: bool
    nanosecond: bool
    link_types: list[str]
    packets: int
    tcp_packets: int
    non_tcp_packets: int
    truncated_packets: int
    undecodable_packets: int
    ip_fragments: int
    first_ts: float | None
    last_ts: float | None
    if_drops: int | None
    damage: DamageFacts | None
    tunnelled_packets: int
    tunnels: list[TunnelCount]
    duplicates: Duplicates
    timeline: Timeline

class EngineFacts(TypedDict):
    late_packets: int
    late_frames: list[int]
    settled_linger: float | None
    opened: int

class OpenError(Exception):
    """The capture could not be opened: a subclass says how (capture.problems words it)."""

class NoFile(OpenError):
    why: Literal["directory", "missing", "permission_denied", "os"]
    errno: int | None

class EmptyCapture(OpenError): ...

class BadGzip(OpenError):
    fault: StreamFault

class UnknownMagic(OpenError):
    head: bytes

class Unsupported(OpenError):
    link_types: list[str]

class ReadFailed(OpenError):
    errno: int | None

class CoreBug(Exception):
    """The core panicked: a bug (the message says where)."""

class SpoolError(Exception):
    """args[0]: where the report's temporary file could not be written, and why."""

class CaptureWords(TypedDict):
    file: str
    version: str
    damage_reason: str | None
    findings: list[Finding]

class Damage(TypedDict):
    frame: int
    offset: int
    reason: str

class Capture(TypedDict):
    file: str
    format: Literal["pcap", "pcapng"]
    compressed: bool
    link_types: list[str]
    packets: int
    tcp_packets: int
    non_tcp_packets: int
    truncated_packets: int
    undecodable_packets: int
    ip_fragments: int
    if_drops: int | None
    first_ts: float | None
    duration_s: float
    damage: Damage | None
    tunnelled_packets: int
    tunnels: list[TunnelCount]
    duplicates: Duplicates
    timeline: Timeline

class RelayHead(TypedDict):
    """A relay, its matched pairs' list empty (Report.pairs reads them)."""
    host: str
    front_port: int
    back_ports: list[int]
    front_connections: list[str]
    back_connections: list[str]
    matched_queries: int
    unmatched_front_queries: int
    unmatched_back_queries: int
    pooler_own_queries: list[OwnQuery]
    max_forward_chunk: int | None
    server_write: int | None
    forward_write: int | None
    queries: list[Pair]
    coupling: Coupling
    forwarding: Forwarding
    verdict: RelayVerdict

class TextSink(Protocol):
    def write(self, text: str, /) -> object: ...

class Report:
    """A finished report: the core writes its JSON and reads out its parts."""
    def write_json(self, stream: TextSink, indented: bool = ...) -> None: ...
    def capture(self) -> Capture: ...
    def findings(self) -> list[Finding]: ...
    def relays(self) -> list[RelayHead]: ...
    def pairs(self, relay: int, indices: list[int]) -> list[Pair]: ...
    def pair_count(self, relay: int) -> int: ...
    def pair_keys(self, relay: int, start: int, stop: int) -> list[tuple[int, float | None, int]]: ...
    def __len__(self) -> int: ...
    def numbers(self) -> list[int]: ...
    def payload(self) -> list[int]: ...
    def connection(self, i: int, queries: bool = ...) -> Connection: ...
    def query_sizes(self, i: int) -> list[int]: ...
    def queries(self, i: int, indexes: list[int]) -> list[Query]: ...
    def drawing(self, numbers: list[int], t0: float, t1: float, max_rows: int,
                lanes: list[tuple[int, int, int, bool, bool]],
                owners: list[tuple[int, int, str]], openers: list[int],
                plots: bool = ...) -> Drawing: ...
    def packets(self, numbers: list[int], t0: float, t1: float, max_rows: int) -> Packets: ...
    def plot(self, numbers: list[int], t0: float, t1: float, max_rows: int,
             lanes: list[tuple[int, int, int, bool, bool]]) -> Plot: ...
    def write_tables(self, sink: Callable[[ArrowBatch], object]) -> None: ...

class LiveQuery(TypedDict):
    """A query said once final, following a stream (report/live.rs)."""
    schema: str
    event: str
    connection: str
    query: Query
    response_limits: ByLimit[float] | None

class LiveConnection(TypedDict):
    """A connection said once judged, following a stream (report/live.rs)."""
    schema: str
    event: str
    connection: Connection

class Stopper:
    """Ends a pass over a pipe where it stands (SIGINT)."""
    def __init__(self) -> None: ...
    def stop(self) -> None: ...
    @property
    def stopped(self) -> bool: ...

class ArrowBatch:
    """One table of a report as an Arrow record batch (the PyCapsule protocol)."""
    @property
    def name(self) -> str: ...
    @property
    def rows(self) -> int: ...
    def __arrow_c_array__(self, requested_schema: object = ...) -> tuple[object, object]: ...

TABLES_SCHEMA: str
FOLLOW_SCHEMA: str

def table_schema() -> list[tuple[str, list[tuple[str, str, str, str]]]]:
    """Every table's columns as declared: (table, [(column, path, kind, unit)])."""

class Pass:
    def __init__(self, path: str, decode_postgres: bool = ..., transfer: bool = ...,
                 linger_s: float | None = ..., settled_linger_s: float | None = ...,
                 record: bool = ..., live: bool = ..., stop: Stopper | None = ...,
                 follow: str | None = ...) -> None: ...
    def take_live(self) -> list[tuple[str, Any]]: ...
    def step(self, judge: Judge) -> list[int] | None: ...
    def relays(self, judge: RelayJudge) -> int: ...
    def finish(self, words: CaptureWords) -> Report: ...
    def stats(self) -> CaptureStats: ...
    def engine(self) -> EngineFacts: ...
    def outcome(self) -> None: ...
    @property
    def records(self) -> int: ...

# a packet as a diagram draws it (drawing/record.rs Packet): connection number, engine
# direction, frame, time, sequence, end, ack, window, flags, kind, first SACK block's place
DiagramEvent = tuple[int, int, int, float, int, int, int, int, int, int, int]

class Detail(TypedDict):
    name: str
    severity: str | None
    code: str | None
    text: str

class Packets(TypedDict):
    """The packets the pass kept of the connections chosen (Report.packets)."""
    events: list[DiagramEvent]
    labels: list[tuple[int, int, list[tuple[str, int]]]]
    details: list[tuple[int, int, list[Detail]]]
    partial: list[tuple[int, int]]
    swapped: list[tuple[int, bool]]
    cut: bool

# a ladder row (flow.ladder.Row's fields): t, frame, connection, from lane, to lane, kind,
# bytes, window, messages, partial, marks, window raw, details (name, SQLSTATE, text,
# severity: legend.Detail), toward the server, what an ACK acknowledges, PSH, seq, ack
DrawnRow = tuple[float, int, str, int, int, str, int, int, tuple[tuple[str, int], ...], bool,
                 tuple[str, ...], bool, tuple[tuple[str, str | None, str, str | None], ...],
                 bool, str, bool, int, int]

# a span's messages carried one way between two lanes (drawing/fold.rs); "from" is a
# keyword, hence the call form
Leg = TypedDict("Leg", {"from": int, "to": int, "messages": dict[str, int]})

class Totals(TypedDict):
    """What a folded span of rows holds."""
    rows: int
    segments: int
    bytes: int
    acks: int
    messages: dict[str, int]
    legs: list[Leg]
    first_frame: int
    last_frame: int
    t0: float
    t1: float

class GroupSizes(TypedDict):
    """A step of a folded group whose rows differ in size: the size most have, the others
    (frame, bytes; the first few) and how many."""
    step: int
    bytes: int
    alike: int
    others: list[tuple[int, int]]
    other_count: int

# per arrow direction of a span: its segments, the ACKs coming back
Breakdown = TypedDict("Breakdown", {"from": int, "to": int, "segments": int, "bytes": int,
                                    "segment_median": int, "acks": int,
                                    "ack_median": int | None, "messages": dict[str, int]})

class PlotSeries(TypedDict):
    """A direction carrying data as the plots draw it (drawing/plot.rs), each series cut to
    what a pixel column shows; times in ms from the capture's first packet."""
    conn: int
    from_client: bool
    base: int
    raw_window: bool
    segments: list[tuple[float, int, int]]
    seg_ends: list[tuple[float, int]]
    retransmissions: list[tuple[float, int, int]]
    retrans_ends: list[tuple[float, int]]
    acks: list[tuple[float, int]]
    windows: list[tuple[float, int]]
    zero_windows: list[tuple[float, int]]
    in_flight: list[tuple[float, int]]
    advertised: list[tuple[float, int]]
    throughput: list[tuple[float, float]]
    rtt: list[tuple[float, float]]
    ack_sizes: list[tuple[int, int]]
    progress: list[tuple[float, int]]

class Plot(TypedDict):
    series: list[PlotSeries]
    span: tuple[float, float] | None
    packets: int

class BulkRun(TypedDict):
    """Plain bulk segments past the first rows of their run, summed up (drawing/teach.rs)."""
    conn: int
    src: int
    dst: int
    to_server: bool
    rows: int
    frames: list[int]
    last_frame: int
    messages: dict[str, int]
    partial_datarow: bool
    partial_empty: bool

class Held(TypedDict):
    frame: int
    bytes: int
    segments: int
    win_before: int
    win: int
    raw: bool
    update: tuple[int, float] | None

class Coalesced(TypedDict):
    frame: int
    bytes: int
    opened: int

class Way(TypedDict):
    """A direction carrying data, as teaching mode's TCP notes read it."""
    conn: int
    src: int
    dst: int
    to_server: bool
    segments: int
    common: int
    acks: int
    pairs: int
    pair_frames: list[int]
    held: Held | None
    write: tuple[list[int], int] | None
    coalesced: Coalesced | None
    copy_data: bool
    tls_size: int
    tls_runs: int

class Hole(TypedDict):
    frame: int
    fill_frame: int
    us: float
    sack: int | None

class LossExample(TypedDict):
    frame: int
    original: int
    dups: int
    dup_frames: list[int]
    ms: float

class Losses(TypedDict):
    resent: int
    counts: list[int]
    delays: list[float]
    example: LossExample | None

class Delayed(TypedDict):
    frame: int
    bytes: int
    ms: float
    data_frame: int

class TcpFacts(TypedDict):
    """What teaching mode's TCP notes read (drawing/teach.rs)."""
    ways: list[Way]
    acks: bool
    zero_windows: int
    zero_frames: list[int]
    zero_lanes: list[tuple[int, int]]
    window_updates: bool
    dupacks: bool
    raw_windows: bool
    hole: Hole | None
    losses: Losses
    delayed: Delayed | None

class Drawing:
    """A selection's ladder, held by the core: its rows, how they fold, their totals."""
    def __len__(self) -> int: ...
    def rows(self, start: int, end: int) -> list[DrawnRow]: ...
    def marked(self, start: int, end: int, limit: int) -> tuple[list[DrawnRow], int]: ...
    def items(self) -> list[tuple[int, int, int]]: ...
    def phases(self) -> list[tuple[str, int, int, int | tuple[int, int, int] | None]]: ...
    def totals(self, start: int, end: int) -> Totals | None: ...
    def group_sizes(self, start: int, period: int, reps: int,
                    listed: int) -> list[GroupSizes]: ...
    def breakdown(self, start: int, end: int) -> list[Breakdown]: ...
    def legs(self, start: int, end: int) -> list[Leg]: ...
    def symbols(self) -> tuple[list[tuple[bool, str]], list[str]]: ...
    def times_back(self) -> list[tuple[int, int]]: ...
    def kinds(self) -> list[str]: ...
    def plot(self) -> Plot | None: ...
    def walk_view(self, keep: int, cap: int) -> list[tuple[str, Any]]: ...
    def tcp_facts(self, max_ways: int, min_segments: int, max_losses: int, held_factor: int,
                  coalesced_factor: int, delayed_s: tuple[float, float],
                  frames: int) -> TcpFacts: ...
    def rounds(self, conn: int, src: int, dst: int, gap_ms: float) -> list[tuple[int, int]]: ...
    @property
    def cut(self) -> bool: ...

def sql_key(sql: str) -> str:
    """A statement as relay matching compares it."""
