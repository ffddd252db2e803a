/* pktflow's native analysis core: what its parts share.
 *
 * The core is the whole single pass in C: record scanning, the TCP engine (engine.c), the
 * transfer analysis (transfer.c, histogram.c), the PostgreSQL decoder (pgwire.c, pgframe.c),
 * and each connection's report written as JSON text (jsonw.c) the moment it is finished. Its
 * twin, and its reference, is the Python code under pktflow/ (tcp/, transfer/, pgwire/,
 * pipeline.py): for any capture both write the same report, byte for byte, and the tests run
 * both and compare. A rule changed in one is changed in the other.
 *
 * Conventions:
 * - Stream offsets, sequence numbers, frames and counters are int64_t; times are doubles, the
 *   capture's own seconds (reports subtract the capture's first timestamp).
 * - Functions that can fail (out of memory, a Python call that raised) return -1 with a Python
 *   exception set, else 0. Writers (JsonW, StrB) instead remember a failure and report it once
 *   at the end (jw_take, sb_take).
 * - Each part keeps its per-connection state in a struct it allocates (PyMem_*) and frees.
 */
#ifndef PKTFLOW_NATIVE_CORE_H
#define PKTFLOW_NATIVE_CORE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef int64_t i64;

/* TCP flags (pktflow.capture.packet) */
enum { F_FIN = 0x01, F_SYN = 0x02, F_RST = 0x04, F_PSH = 0x08, F_ACK = 0x10 };

/* Classification of a packet's payload (pktflow.tcp.observe): bits of `kind` */
enum { K_NEW = 0x01, K_RETRANS = 0x02, K_PARTIAL_RETRANS = 0x04, K_OUT_OF_ORDER = 0x08,
       K_FILLS_HOLE = 0x10, K_KEEPALIVE = 0x20 };

/* ---- text: JSON writer and Python's number formats (jsonw.c) ------------------------------ */

/* Writes JSON as json.dumps does with ensure_ascii: compact (separators "," and ":") or
 * indented (indent=2, as report.jsontext.indented writes a value nested `level` deep).
 * Separators, newlines and indentation are the writer's business: callers only open, key,
 * write values and close. Keys are ASCII without characters that need escaping. */
#define JW_MAX_LEVEL 64
typedef struct {
    char *p;
    Py_ssize_t len, cap;
    int indent; /* -1: compact; else spaces per level */
    int base; /* the level of the value written (it is nested `base` levels deep) */
    int level; /* nesting level of the container being written (base outside any) */
    int after_key; /* a key was just written: the value follows on its line */
    unsigned char items[JW_MAX_LEVEL]; /* per level above base: the container has an item */
    int failed; /* out of memory (or nesting too deep): the text is void */
} JsonW;

void jw_init(JsonW *w, int indent, int level);
void jw_free(JsonW *w);
void jw_reset(JsonW *w); /* empty again, same layout and base level */
PyObject *jw_take(JsonW *w); /* the text as a str (NULL with an exception on failure); resets */
void jw_obj(JsonW *w);
void jw_obj_end(JsonW *w);
void jw_arr(JsonW *w);
void jw_arr_end(JsonW *w);
void jw_keyn(JsonW *w, const char *key, Py_ssize_t n);
/* keys are mostly literals: their length is then known at compile time */
#define jw_key(w, key) jw_keyn((w), (key), (Py_ssize_t)__builtin_strlen(key))
#define jw_kint(w, key, v) (jw_key((w), (key)), jw_int((w), (v))) /* a key and its int */
#define jw_kfloat(w, key, v) (jw_key((w), (key)), jw_float((w), (v))) /* and its float */
void jw_int(JsonW *w, i64 v);
void jw_float(JsonW *w, double v); /* float.__repr__; NaN, Infinity, -Infinity as json.dumps */
void jw_null(JsonW *w);
void jw_bool(JsonW *w, int b);
void jw_str(JsonW *w, const char *utf8, Py_ssize_t n); /* UTF-8 text (valid), escaped */
#define jw_cstr(w, s) jw_str((w), (s), (Py_ssize_t)__builtin_strlen(s)) /* NUL-terminated */
void jw_str_obj(JsonW *w, PyObject *s); /* a str; NULL or None writes null */
void jw_value(JsonW *w, PyObject *v); /* str, int, float, bool, None, list, tuple, dict of those */
/* A value already rendered as JSON (a number past 64 bits as its digits): copied. */
void jw_raw(JsonW *w, const char *text, Py_ssize_t n);

/* A growing UTF-8 text (finding and verdict sentences). */
typedef struct {
    char *p;
    Py_ssize_t len, cap;
    int failed;
} StrB;

void sb_init(StrB *b);
void sb_free(StrB *b);
void sb_addn(StrB *b, const char *s, Py_ssize_t n);
#define sb_add(b, s) sb_addn((b), (s), (Py_ssize_t)__builtin_strlen(s))
void sb_addf(StrB *b, const char *fmt, ...); /* printf: only for ints and plain %s */
void sb_int(StrB *b, i64 v, int commas); /* f"{v}" or f"{v:,}" */
void sb_fixed(StrB *b, double x, int prec, int commas); /* f"{x:.3f}", f"{x:,.1f}" */
void sb_pct(StrB *b, double x, int prec); /* f"{x:.0%}", f"{x:.1%}" */
void sb_str_obj(StrB *b, PyObject *s); /* str(s) of a str object, as UTF-8 */
/* Python's `repr(float)`-free formats, for text built outside a StrB (buf >= 32 bytes): */
char *fmt_int(char *buf, i64 v, int commas);
char *fmt_repr(char *buf, double x); /* repr(x) (as str(x) of a float in an f-string) */

double py_round(double x, int ndigits); /* round(x, ndigits) of a float, exactly */
double py_round_int(double x); /* round(x) of a float: half to even (as a double) */

/* ---- findings (pktflow.findings.Finding), collected per connection ------------------------ */

#define MAX_EVIDENCE 20 /* frames kept per evidence list (tcp.direction.MAX_EVIDENCE) */

typedef struct {
    i64 frames[MAX_EVIDENCE];
    int n;
} Ev;

static inline void ev_note(Ev *e, i64 frame)
{
    if (e->n < MAX_EVIDENCE)
        e->frames[e->n++] = frame;
}

typedef struct {
    const char *severity; /* "info" | "warning" | "error" (static strings) */
    const char *code; /* static string */
    char *message; /* UTF-8, owned (it may hold NULs: SQL text can) */
    Py_ssize_t message_len;
    i64 *frames; /* owned; all the frames given (Finding.to_json keeps the first 20) */
    int nframes;
} NFinding;

typedef struct {
    NFinding *items;
    int n, cap;
} Findings;

void fnd_init(Findings *f);
void fnd_free(Findings *f);
/* Append a finding; takes the message text out of `msg` (which is left empty). */
void fnd_add(Findings *f, const char *severity, const char *code, StrB *msg, const i64 *frames,
             int nframes);
/* The findings as pktflow.findings.Finding objects for connection `conn_id` (a str). */
PyObject *fnd_to_list(const Findings *f, PyObject *conn_id);

/* ---- counts of integer values (histogram.c; pktflow.transfer.histogram) ------------------- */

/* Histogram: counts by value in first-counted order, exact up to `cap` distinct values, then
 * new values rounded to 4 significant bits (_coarse). Reads as the Python class's. */
typedef struct {
    i64 *keys;
    i64 *counts; /* in the order each key was first counted */
    i64 n_keys, cap_keys; /* used, allocated */
    int32_t *slots; /* open addressing: index + 1 into keys, 0 = empty */
    i64 n_slots;
    i64 cap; /* Histogram(cap=...) */
    i64 last, run; /* the run not yet counted (the Python class's _Runs) */
} Hist;

void hist_init(Hist *h, i64 cap);
void hist_free(Hist *h);
int hist_add(Hist *h, i64 v); /* -1 on out of memory (exception set) */
i64 hist_n(Hist *h); /* .n */
int hist_median(Hist *h, i64 *out); /* .median(): 0 = None */
int hist_quantile(Hist *h, double q, i64 *out); /* .quantile(q): 0 = None */
int hist_hi(Hist *h, i64 *out); /* .hi: 0 = None */
int hist_mode(Hist *h, i64 *out); /* .mode(): 0 = None */
i64 hist_get(Hist *h, i64 v); /* .counts.get(v, 0) */
/* .top(k): the k most frequent values and their counts, largest count first (then value);
 * how many (k at most) */
int hist_top(Hist *h, int k, i64 *values, i64 *counts);
void hist_top_json(Hist *h, int k, JsonW *w); /* .top(k) as a JSON object (k <= 32) */

/* Quantiles: exact counts while at most 1,024 distinct values, then log-linear buckets. */
typedef struct {
    Hist exact; /* valid while !bucketed (cap unused: never coarsened) */
    int bucketed;
    i64 *bcounts, *bleast; /* by bucket */
    i64 nb;
    Hist neg; /* negative values once bucketed */
    i64 n;
    int has_hi;
    i64 hi;
    i64 last, run;
} Quant;

void quant_init(Quant *q);
void quant_free(Quant *q);
int quant_add(Quant *q, i64 v);
i64 quant_n(Quant *q);
int quant_median(Quant *q, i64 *out);
int quant_quantile(Quant *q, double p, i64 *out);
int quant_hi(Quant *q, i64 *out);

/* Bins: counts by a small index (bytes per 100 ms of a flow). */
typedef struct {
    i64 *dense; /* indexes 0..size-1 */
    i64 size;
    Hist sparse; /* negative indexes and, while few, all (keys are the indexes) */
    int is_dense;
    i64 count; /* indexes with a count */
    i64 hi; /* largest index with a count, -1 */
} Bins;

void bins_init(Bins *b);
void bins_free(Bins *b);
int bins_add(Bins *b, i64 i, i64 n);
i64 bins_len(Bins *b);
i64 bins_get(Bins *b, i64 i);
void bins_most(Bins *b, i64 *index, i64 *count); /* .most() */
i64 bins_least(Bins *b, i64 end); /* .least(end) */

/* ---- the engine's view of a direction, as the analyses may read it (engine.c) -------------- */

typedef struct {
    int present; /* a SYN (or SYN-ACK) of this side was seen */
    int has_mss, mss;
    int has_wscale, wscale;
    int sack, timestamps;
} SynOpt;

/* What an observer's finish() is told of a direction (tcp.observe.DirectionInfo). */
typedef struct {
    int has_mss;
    i64 mss;
    int has_window_scale; /* window_scale is not None */
    int window_scale;
    int window_scale_known;
    int has_lower_bound; /* window_scale_lower_bound is not None */
    int lower_bound;
} DirInfo;

/* The fields the analyses read of the engine's directions; engine.c holds the rest. */
typedef struct {
    int isn_seen; /* read by the PostgreSQL decoder: start_seen(d) */
    int wscale_known; /* read by the transfer analysis: scale_known(side) */
} DirView;

/* ---- transfer analysis (transfer.c; pktflow.transfer.analyzer, .verdict) ------------------ */

typedef struct Transfer Transfer;

/* `view[side].wscale_known` is read where the Python class calls scale_known(side). */
Transfer *tr_new(const DirView *view);
void tr_free(Transfer *t);
/* TransferAnalyzer.on_packet */
int tr_packet(Transfer *t, int d, i64 frame, double ts, i64 seq, i64 end, i64 ack, i64 win,
              int flags, int kind);
/* TransferAnalyzer.finish */
int tr_finish(Transfer *t, const DirInfo info[2]);
/* The keys of TransferAnalyzer.result(d, start), written into the open direction object. */
int tr_result(Transfer *t, int d, double start, JsonW *w);
/* TransferAnalyzer.direction_findings, names[d] = direction_name(conn, d) ("client->server"). */
int tr_findings(Transfer *t, const char *conn_id, const char *const names[2], Findings *out);

/* What relay matching (relay.topology.Leg) and capture_point read of direction d's result. */
typedef struct {
    i64 zero_window_periods;
    double zero_window_total_s; /* as in the report: rounded to 6 digits */
    i64 evidence_frames[16];
    int n_evidence; /* verdict's evidence_frames */
    int has_bytes_acked_median;
    i64 bytes_acked_median;
    int has_flight_bytes_median;
    i64 flight_bytes_median;
    int has_rtt_median; /* rtt_ms is not None (samples): its median, in ms as reported */
    double rtt_median_ms;
    int has_handshake_ms; /* "handshake_ms" is in the result (d == 0 only) */
    double syn_to_synack_ms, synack_to_ack_ms;
} TrLegView;

int tr_leg_view(Transfer *t, int d, TrLegView *out);

/* ---- PostgreSQL decoder (pgwire.c, pgframe.c; pktflow.pgwire) ------------------------------ */

typedef struct Conv Conv;

typedef struct {
    PyObject *conn_id; /* str, borrowed for the conversation's life */
    const DirView *view; /* start_seen(d) is view[d].isn_seen */
    double start; /* the capture's first timestamp: reported times are relative to it */
    PyObject *archive; /* a report.stored.Spill (append(bytes), len, [i] -> bytes), or NULL */
    int indent, query_level; /* how an archived query's JSON is written (JsonW) */
} ConvConfig;

Conv *pg_new(const ConvConfig *cfg);
void pg_free(Conv *c);
int pg_feed(Conv *c, int d, const uint8_t *data, Py_ssize_t n, i64 offset, i64 frame, double ts);
int pg_gap(Conv *c, int d, i64 offset, i64 length, i64 frame, double ts);
int pg_finish(Conv *c);
int pg_frontend_direction(const Conv *c); /* Conversation.frontend_direction; -1 for None */
/* The keys of Conversation.to_json(), with the queries' times relative to cfg->start and
 * rounded as pipeline.Run.connection_json does, written into the open connection object. */
int pg_json(Conv *c, JsonW *w);
/* Conversation.findings, in order. */
int pg_findings(Conv *c, Findings *out);
/* Whether the conversation is PostgreSQL (relay.topology.is_postgres of its report). */
int pg_is_postgres(const Conv *c);
/* Queries listed (queries shown in the report), and, when fewer than `most`, what relay
 * matching reads of each (the values of relay.topology.LEG_QUERY_KEYS, a tuple each, the
 * segment sizes None where LegQuery drops them) as a tuple; else None. */
i64 pg_listed(const Conv *c);
PyObject *pg_leg_queries(Conv *c, i64 most);

#endif
