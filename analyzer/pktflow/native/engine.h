/* The native TCP engine (engine.c): the twin of pktflow.tcp.engine, .direction, .connection
 * and .options. What core.c, which drives it and reports its connections, needs of it. */
#ifndef PKTFLOW_NATIVE_ENGINE_H
#define PKTFLOW_NATIVE_ENGINE_H

#include "core.h"
#include "decode.h"

#define MAX_BUFFERED_BYTES (4LL << 20)
#define MAX_BUFFERED_SEGMENTS 2048
#define MAX_HOLES 64
#define OOO_THRESHOLD_S 0.003
#define MAX_GONE (1 << 16)
#define MAX_LATE_FRAMES 20
#define MAX_SETTLED 2000
#define MAX_WAITING 16

/* A packet as the engine is fed it: the decoded headers and where the frame sits. */
typedef struct {
    i64 frame;
    double ts;
    DecodedTcp t;
} Pkt;

typedef struct {
    i64 start, end;
    uint8_t *payload; /* owned copy of the captured bytes */
    i64 len;
    i64 frame;
    double ts;
} Seg;

typedef struct {
    i64 start, end;
    double opened;
} Hole;

/* One direction of a connection (tcp.direction.Direction). */
typedef struct {
    i64 base; /* raw sequence number of relative byte 0; -1 until known */
    i64 high, next;
    double high_ts;
    SynOpt syn;
    int has_fin;
    i64 fin_at;
    int rst;
    Seg *buf; /* out-of-order segments waiting for `next`, sorted by start */
    int nbuf, capbuf;
    i64 buffered_bytes;
    Hole *holes;
    int nholes, capholes;
    i64 holes_forgotten, bound_gaps, max_acked;
    i64 payload_bytes, data_segments, max_segment, retrans_segments, retrans_bytes;
    i64 ooo_segments, gaps, missing_bytes, truncated_bytes, truncated_segments;
    i64 zero_window_events, window_updates, keepalives;
    i64 last_seq, last_ack, last_win;
    int wscale, wscale_lb;
    Ev ev_retrans, ev_ooo, ev_gap, ev_zero, ev_trunc;
} Dir;

typedef struct {
    uint8_t addr[16];
    unsigned port;
} End;

enum { CLOSED_NONE = 0, CLOSED_FIN = 1, CLOSED_RST = 2 };
enum { ROLES_HANDSHAKE, ROLES_SYN_ACK, ROLES_PORT, ROLES_APPLICATION };

typedef struct Conn {
    i64 number;
    PyObject *id; /* "c<number>" */
    int alen;
    End client, server;
    Dir dirs[2]; /* [0] client->server, [1] server->client (the engine's view) */
    DirView view[2]; /* what the analyses read of dirs: isn_seen, wscale_known */
    int handshake_seen;
    double start_ts, end_ts;
    i64 first_frame, last_frame, packets;
    int closed_by, swapped, role_source, finished, settled;
    Conv *conv; /* NULL when not decoding PostgreSQL, or once reported */
    Transfer *tr;
    struct Conn *prev, *next; /* the live list, in the order connections opened */
    int live; /* made and not retired */
    int queued; /* entries in the closing and settled queues that refer to it */
} Conn;

/* A hash table keyed by 4-tuple (both orientations of a connection are keys). */
typedef struct {
    int alen;
    unsigned sport, dport;
    uint8_t src[16], dst[16];
} Key;

typedef struct {
    Key key;
    void *value;
    int side;
    int used;
} Slot;

typedef struct {
    Slot *slots;
    i64 n, cap; /* used, allocated (a power of two) */
} Map;

/* Handshake segments of a connection not made yet (engine.py's _Waiting). */
typedef struct {
    i64 frame;
    double ts;
    uint8_t src[16], dst[16];
    int alen;
    unsigned sport, dport;
    uint32_t seq, ack;
    unsigned flags, win;
    uint8_t options[40];
    int optlen;
} KeptPkt;

typedef struct {
    i64 number;
    int n, cap;
    KeptPkt *pkts; /* grown as they come: a flood's attempts are one SYN each */
} Waiting;

/* 4-tuples of connections retired closed, oldest first, at most MAX_GONE (engine.py's
 * OrderedDict): a ring of the keys, found through a table of their places in it (4 bytes a
 * slot, not a Slot's 56), both grown as keys come (a capture retiring two connections must not
 * pay for 65,536). */
typedef struct {
    Key *ring;
    i64 head, n, cap; /* the ring's first key, keys, places */
    int32_t *slots; /* place + 1, 0 empty; at least four per place */
    uint64_t mask; /* slots - 1, a power of two less one */
} Gone;

/* A queue of connections (closing, settled): a ring of pointers. */
typedef struct {
    Conn **items;
    i64 head, n, cap;
} Queue;

typedef struct Engine Engine;
typedef int (*RetiredFn)(Engine *e, Conn *c);

struct Engine {
    Map table; /* 4-tuple -> (Conn, side) */
    Map waiting; /* 4-tuple -> Waiting */
    Gone gone; /* 4-tuples of connections retired closed */
    Conn *live_head, *live_tail;
    Queue closing, settled;
    i64 settled_waiting;
    i64 opened;
    int has_linger; /* retirement on: linger applies */
    double linger, settled_linger;
    int has_settled_linger;
    i64 late_packets;
    i64 late_frames[MAX_LATE_FRAMES];
    int n_late_frames;
    /* made per connection */
    int decode_postgres;
    ConvConfig conv_cfg; /* conn_id and view filled per connection */
    RetiredFn retired;
    void *owner; /* core.c's object */
    int failed; /* a Python exception is set: the pass stops */
};

int engine_init(Engine *e, int has_linger, double linger, int has_settled, double settled);
void engine_free(Engine *e);
int engine_feed(Engine *e, const Pkt *p);
int engine_sweep(Engine *e, double now);
/* engine.finish(): the waiting connections made and retired, the live ones finished. */
int engine_finish(Engine *e);
/* Report the connections still live, in the order they opened (build_report's loop). */
int engine_report_live(Engine *e);

/* Direction.window_scale: the shift direction `mine` applies, or -1 (None); *known. */
int window_scale(const Dir *mine, const Dir *peer, int *known);
DirInfo dir_info(const Conn *c, int d);

#endif
