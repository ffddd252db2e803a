/* Transfer dynamics per direction of data: the twin of pktflow.transfer.analyzer (Flow,
 * TransferAnalyzer) and pktflow.transfer.verdict (direction_json, verdict, pattern, _goodput,
 * direction_findings). See those modules for what the numbers mean; this file keeps their
 * rules, their arithmetic order and their texts, so that both write the same report. */
#include "core.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define DELAYED_ACK_S 0.040
#define CONTINUOUS_S 0.001
#define ACK_CLOCK_S 0.0005
#define IDLE_S 0.010
#define MAX_OUTSTANDING 4096 /* a power of two: the ring below relies on it */
#define MAX_IDLE_KEPT 20
#define MAX_BINS 200000
#define MIN_BYTES (64 * 1024)
#define MIN_SEGMENTS 20

enum { R_WINDOW_FULL, R_ACK_ARRIVED, R_CWND_WAIT, R_SENDER_IDLE, N_REASONS };
static const char *const REASON[N_REASONS] = {"window_full", "ack_arrived", "cwnd_wait",
                                              "sender_idle"};

enum { W_ZERO, W_NOTHING, W_OUTSTANDING };

/* One of Flow.idle's dicts; waiting_for is rebuilt from `waiting` and `outstanding`. */
typedef struct {
    double start_ts, seconds;
    i64 from_frame, to_frame, outstanding;
    int waiting;
} Idle;

/* An unacknowledged new segment: its end and send time (Flow.out_end, Flow.out_ts). */
typedef struct {
    i64 end;
    double ts;
} Out;

typedef struct {
    i64 data_bytes, segments, retrans;
    Hist seg_sizes;
    int has_first;
    double first_ts, last_ts;
    i64 first_frame, last_frame, high, acked;
    /* The Python queue's live part (out_end[out_head:]) as a ring: at most MAX_OUTSTANDING
     * entries, so the same segments are dropped and acknowledged in the same order. */
    Out *q;
    i64 q_cap, q_head, q_n;
    i64 karn_upto;
    Hist ack_hist, segs_hist;
    i64 every_second, window_updates, quick_acks, delayed_timer, duplicates, acks;
    int has_win;
    i64 win, win_min, win_max, win_prev;
    int zero_open; /* zero_since is not None */
    double zero_since;
    i64 zero_periods;
    double zero_total;
    Ev zero_frames; /* zero_frames, full_frames, end_frames: Python lists of at most 20 */
    Quant inflight;
    i64 inflight_max, inflight_max_frame;
    double ratio_max;
    i64 fl_bytes, fl_segs;
    int fl_full;
    i64 fl_first_frame;
    i64 pend_bytes, pend_segs;
    int pend_full;
    double pend_data_ts, pend_ack_ts;
    i64 pend_frame;
    i64 flights;
    Quant fl_bytes_hist, fl_segs_hist;
    i64 end_reasons[N_REASONS];
    Ev end_frames[N_REASONS];
    Quant rtt; /* microseconds */
    int has_rtt_min;
    double rtt_min;
    Idle *idle; /* MAX_IDLE_KEPT of them, made at the first idle period: many flows have none */
    int n_idle;
    i64 idle_count;
    double idle_total;
    Bins bins;
    i64 bin_cur, bin_new;
    i64 maxseg;
    int scale_known;
    double last_ack_ts;
    Ev full_frames;
    double idle_waiting;
} Flow;

struct Transfer {
    const DirView *view;
    Flow flows[2]; /* flows[d]'s windows are advertised by side 1 - d */
    int has_syn[3]; /* syn_ts: 0 SYN, 1 SYN-ACK, 2 the client's ACK */
    double syn_ts[3];
    int await_hs_ack;
    int has_handshake;
    double syn_to_synack_ms;
    int has_info;
    DirInfo info[2];
};

/* ---- arithmetic as Python's ints and floats do it ------------------------------------------ */

/* Python ints do not overflow; these wrap (never undefined) where hostile numbers would. */
static inline i64 isub(i64 a, i64 b) { return (i64)((uint64_t)a - (uint64_t)b); }
static inline i64 iadd(i64 a, i64 b) { return (i64)((uint64_t)a + (uint64_t)b); }

/* int(x) of a float: toward zero; saturated past int64 (a timestamp jump of 292,000 years,
 * where Python's int would keep growing). */
static i64 trunc_i64(double x)
{
    if (x != x)
        return 0;
    if (x >= 9223372036854775808.0)
        return INT64_MAX;
    if (x <= -9223372036854775808.0)
        return INT64_MIN;
    return (i64)x;
}

#define EXACT53 ((i64)1 << 53)

/* a / b of Python ints (b != 0): the correctly rounded quotient. Both exact as doubles, one
 * IEEE division is that (CPython's own fast path); otherwise Python does it (numbers no real
 * capture has). */
static int int_div(i64 a, i64 b, double *out)
{
    if (a >= -EXACT53 && a <= EXACT53 && b >= -EXACT53 && b <= EXACT53) {
        *out = (double)a / (double)b;
        return 0;
    }
    PyObject *x = PyLong_FromLongLong(a), *y = PyLong_FromLongLong(b), *r = NULL;
    if (x != NULL && y != NULL)
        r = PyNumber_TrueDivide(x, y);
    Py_XDECREF(x);
    Py_XDECREF(y);
    if (r == NULL)
        return -1;
    *out = PyFloat_AsDouble(r);
    Py_DECREF(r);
    return 0;
}

/* Python's max(a, b) of floats: b only if it is larger. */
static inline double fmax_py(double a, double b) { return b > a ? b : a; }

/* ---- per flow ---------------------------------------------------------------------------- */

static void flow_init(Flow *f, int scale_known)
{
    memset(f, 0, sizeof *f);
    hist_init(&f->seg_sizes, 4096);
    hist_init(&f->ack_hist, 4096);
    hist_init(&f->segs_hist, 4096);
    quant_init(&f->inflight);
    quant_init(&f->fl_bytes_hist);
    quant_init(&f->fl_segs_hist);
    quant_init(&f->rtt);
    bins_init(&f->bins);
    f->acked = -1;
    f->karn_upto = -1;
    f->win_prev = -1;
    f->bin_cur = -1;
    f->scale_known = scale_known;
}

static void flow_free(Flow *f)
{
    hist_free(&f->seg_sizes);
    hist_free(&f->ack_hist);
    hist_free(&f->segs_hist);
    quant_free(&f->inflight);
    quant_free(&f->fl_bytes_hist);
    quant_free(&f->fl_segs_hist);
    quant_free(&f->rtt);
    bins_free(&f->bins);
    PyMem_Free(f->q);
    f->q = NULL;
    PyMem_Free(f->idle);
    f->idle = NULL;
}

/* Flow.end_flight */
static void end_flight(Flow *f, double ack_ts, i64 frame)
{
    f->pend_bytes = f->fl_bytes;
    f->pend_segs = f->fl_segs;
    f->pend_full = f->fl_full;
    f->pend_data_ts = f->last_ts;
    f->pend_ack_ts = ack_ts;
    f->pend_frame = frame;
    f->fl_bytes = f->fl_segs = 0;
}

static int flush_bin(Flow *f)
{
    if (f->bin_new) {
        if (bins_add(&f->bins, f->bin_cur, f->bin_new) < 0)
            return -1;
        f->bin_new = 0;
    }
    return 0;
}

/* Append to the outstanding ring, dropping the oldest past MAX_OUTSTANDING. */
static int q_push(Flow *f, i64 end, double ts)
{
    if (f->q_n >= MAX_OUTSTANDING) {
        f->q_head = (f->q_head + 1) & (f->q_cap - 1);
        f->q_n--;
    }
    if (f->q_n == f->q_cap) { /* grown by doubling up to MAX_OUTSTANDING: amortised */
        i64 cap = f->q_cap ? 2 * f->q_cap : 16;
        Out *q = PyMem_Malloc(sizeof(Out) * (size_t)cap);
        if (q == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (i64 i = 0; i < f->q_n; i++)
            q[i] = f->q[(f->q_head + i) & (f->q_cap - 1)];
        PyMem_Free(f->q);
        f->q = q;
        f->q_cap = cap;
        f->q_head = 0;
    }
    Out *o = &f->q[(f->q_head + f->q_n) & (f->q_cap - 1)];
    o->end = end;
    o->ts = ts;
    f->q_n++;
    return 0;
}

/* TransferAnalyzer._close_flight; has_next 0 is next_ts None (the capture ended). */
static int close_flight(Flow *f, int has_next, double next_ts)
{
    i64 nbytes = f->pend_bytes, segs = f->pend_segs, frame = f->pend_frame;
    double last_data = f->pend_data_ts, ack_ts = f->pend_ack_ts;
    f->pend_segs = 0;
    int reason;
    if (f->pend_full) {
        reason = R_WINDOW_FULL;
    } else if (!has_next) {
        reason = R_SENDER_IDLE;
    } else if (next_ts - last_data <= CONTINUOUS_S) {
        reason = R_ACK_ARRIVED;
    } else {
        /* f.rtt_min or 0.0: None and zeros alike */
        double rmin = f->has_rtt_min && f->rtt_min != 0.0 ? f->rtt_min : 0.0;
        if (next_ts - ack_ts <= fmax_py(ACK_CLOCK_S, 0.25 * rmin))
            reason = R_CWND_WAIT;
        else
            reason = R_SENDER_IDLE;
    }
    f->flights++;
    if (quant_add(&f->fl_bytes_hist, nbytes) < 0 || quant_add(&f->fl_segs_hist, segs) < 0)
        return -1;
    f->end_reasons[reason]++;
    ev_note(&f->end_frames[reason], frame);
    return 0;
}

/* TransferAnalyzer._idle */
static int idle(Flow *f, double ts, i64 frame)
{
    double gap = ts - f->last_ts;
    f->idle_count++;
    f->idle_total += gap;
    i64 outstanding = f->acked >= 0 ? isub(f->high, f->acked) : 0;
    int zero = f->has_win && f->win == 0;
    if (zero || outstanding > 0)
        f->idle_waiting += gap;
    if (f->idle == NULL) {
        f->idle = PyMem_Malloc(sizeof(Idle) * MAX_IDLE_KEPT);
        if (f->idle == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    if (f->n_idle < MAX_IDLE_KEPT) {
        Idle *p = &f->idle[f->n_idle++];
        p->start_ts = f->last_ts;
        p->seconds = py_round(gap, 6);
        p->from_frame = f->last_frame;
        p->to_frame = frame;
        p->outstanding = outstanding;
        p->waiting = zero ? W_ZERO : outstanding <= 0 ? W_NOTHING : W_OUTSTANDING;
    }
    return 0;
}

/* TransferAnalyzer._data */
static int data(Transfer *t, Flow *f, i64 frame, double ts, i64 seq, i64 end, int kind)
{
    i64 n = isub(end, seq);
    if (!f->has_first) {
        f->has_first = 1;
        f->first_ts = ts;
        f->first_frame = frame;
        if (t->has_syn[1] && !t->has_handshake && t->has_syn[0]) {
            t->has_handshake = 1;
            t->syn_to_synack_ms = (t->syn_ts[1] - t->syn_ts[0]) * 1e3;
        }
    } else if (ts - f->last_ts > IDLE_S && idle(f, ts, frame) < 0) {
        return -1;
    }
    if (f->pend_segs && close_flight(f, 1, ts) < 0)
        return -1;
    f->segments++;
    if (hist_add(&f->seg_sizes, n) < 0)
        return -1;
    if (n > f->maxseg)
        f->maxseg = n;
    if (kind & K_RETRANS) {
        f->retrans++;
        if (end > f->karn_upto)
            f->karn_upto = end;
    }
    if (kind & K_NEW && end > f->high) {
        i64 nw = isub(end, seq > f->high ? seq : f->high);
        f->data_bytes = iadd(f->data_bytes, nw);
        f->high = end;
        double x = (ts - f->first_ts) * 10;
        if (x < MAX_BINS) { /* int(x) < MAX_BINS exactly when x is */
            i64 b = trunc_i64(x);
            if (b != f->bin_cur) { /* thousands of segments share a bin: one update each */
                if (flush_bin(f) < 0)
                    return -1;
                f->bin_cur = b;
            }
            f->bin_new = iadd(f->bin_new, nw);
        }
        if (q_push(f, end, ts) < 0)
            return -1;
    }
    if (f->fl_segs == 0)
        f->fl_first_frame = frame;
    f->fl_bytes = iadd(f->fl_bytes, n);
    f->fl_segs++;
    if (f->acked >= 0) {
        i64 inflight = isub(f->high, f->acked);
        if (quant_add(&f->inflight, inflight) < 0)
            return -1;
        if (inflight > f->inflight_max) {
            f->inflight_max = inflight;
            f->inflight_max_frame = frame;
        }
        if (f->has_win && f->scale_known) {
            i64 win = f->win;
            if (win) {
                double ratio;
                if (int_div(inflight, win, &ratio) < 0)
                    return -1;
                if (ratio > f->ratio_max)
                    f->ratio_max = ratio;
            }
            if (inflight >= isub(win, f->maxseg)) {
                f->fl_full = 1;
                ev_note(&f->full_frames, frame);
            }
        }
    }
    f->last_ts = ts;
    f->last_frame = frame;
    return 0;
}

/* TransferAnalyzer._advance */
static int advance(Flow *f, i64 frame, double ts, i64 ack)
{
    i64 nbytes = isub(ack, f->acked);
    i64 segs = 0;
    double sent = 0.0;
    while (f->q_n > 0) {
        Out *o = &f->q[f->q_head];
        if (o->end > ack)
            break;
        sent = o->ts;
        segs++;
        if (o->end > f->karn_upto) { /* Karn: no sample from retransmitted data */
            double rtt = ts - sent;
            if (quant_add(&f->rtt, trunc_i64(rtt * 1e6)) < 0)
                return -1;
            if (!f->has_rtt_min || rtt < f->rtt_min) {
                f->rtt_min = rtt;
                f->has_rtt_min = 1;
            }
        }
        f->q_head = (f->q_head + 1) & (f->q_cap - 1);
        f->q_n--;
    }
    if (f->q_n == 0)
        f->q_head = 0;
    f->acks++;
    if (hist_add(&f->ack_hist, nbytes) < 0 || hist_add(&f->segs_hist, segs) < 0)
        return -1;
    if (segs >= 2 || nbytes > f->maxseg)
        f->every_second++;
    else if (segs && ts - sent >= DELAYED_ACK_S)
        f->delayed_timer++;
    else
        f->quick_acks++;
    f->last_ack_ts = ts;
    if (f->fl_segs) {
        end_flight(f, ts, frame);
        f->fl_full = f->has_win && f->win == 0;
    }
    return 0;
}

/* TransferAnalyzer._ack: this packet's window and ACK, about flow f's data. */
static int ack_(Flow *f, i64 frame, double ts, i64 ack, i64 win, int flags, int has_data)
{
    if (win == 0) {
        if (!f->zero_open && !(flags & (F_RST | F_FIN))) {
            f->zero_open = 1;
            f->zero_since = ts;
            f->zero_periods++;
            f->fl_full = 1;
            ev_note(&f->zero_frames, frame);
        }
    } else if (f->zero_open) {
        f->zero_total += ts - f->zero_since;
        f->zero_open = 0;
    }
    if (!(flags & F_RST)) {
        /* win, win_min and win_max are set together: None until this first time */
        if (!f->has_win || win < f->win_min)
            f->win_min = win;
        if (!f->has_win || win > f->win_max)
            f->win_max = win;
        f->has_win = 1;
        f->win = win;
    }
    if (ack > f->acked) {
        if (f->acked >= 0 && advance(f, frame, ts, ack) < 0)
            return -1;
        f->acked = ack;
    } else if (ack == f->acked && !has_data && !(flags & (F_SYN | F_FIN | F_RST))) {
        if (win > f->win_prev && f->win_prev >= 0)
            f->window_updates++;
        else if (win == f->win_prev && f->high > ack)
            f->duplicates++;
    }
    f->win_prev = win;
    return 0;
}

/* ---- the analyzer -------------------------------------------------------------------------- */

/* The Python class's scale_known(side); without a view, its default (always known). */
static int scale_known(const Transfer *t, int side)
{
    return t->view == NULL || t->view[side].wscale_known;
}

Transfer *tr_new(const DirView *view)
{
    Transfer *t = PyMem_Calloc(1, sizeof *t);
    if (t == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    t->view = view;
    flow_init(&t->flows[0], scale_known(t, 1));
    flow_init(&t->flows[1], scale_known(t, 0));
    return t;
}

void tr_free(Transfer *t)
{
    if (t == NULL)
        return;
    flow_free(&t->flows[0]);
    flow_free(&t->flows[1]);
    PyMem_Free(t);
}

/* TransferAnalyzer._syn */
static void syn(Transfer *t, double ts, int flags)
{
    if (!(flags & F_ACK)) {
        t->syn_ts[0] = ts;
        t->has_syn[0] = 1;
    } else if (t->has_syn[0]) {
        t->syn_ts[1] = ts;
        t->has_syn[1] = 1;
        t->await_hs_ack = !t->has_syn[2];
    }
    for (int i = 0; i < 2; i++)
        t->flows[i].scale_known = scale_known(t, 1 - i);
}

int tr_packet(Transfer *t, int d, i64 frame, double ts, i64 seq, i64 end, i64 ack, i64 win,
              int flags, int kind)
{
    if (d != 0 && d != 1) {
        PyErr_SetString(PyExc_ValueError, "direction must be 0 or 1");
        return -1;
    }
    if (flags & F_SYN) {
        syn(t, ts, flags);
        return 0;
    }
    if (t->await_hs_ack && d == 0 && flags & F_ACK) {
        t->syn_ts[2] = ts; /* the client's ACK completing the handshake */
        t->has_syn[2] = 1;
        t->await_hs_ack = 0;
    }
    /* this packet's window and ACK speak about the other direction's data */
    if (ack >= 0 && ack_(&t->flows[1 - d], frame, ts, ack, win, flags, end > seq) < 0)
        return -1;
    if (end > seq && data(t, &t->flows[d], frame, ts, seq, end, kind) < 0)
        return -1;
    return 0;
}

int tr_finish(Transfer *t, const DirInfo info[2])
{
    t->has_info = 1;
    t->info[0] = info[0];
    t->info[1] = info[1];
    for (int d = 0; d < 2; d++) {
        Flow *f = &t->flows[d];
        if (flush_bin(f) < 0)
            return -1;
        if (f->fl_segs && !f->pend_segs) /* the last flight: data simply ended */
            end_flight(f, f->last_ts, f->last_frame);
        if (f->pend_segs && close_flight(f, 0, 0.0) < 0)
            return -1;
        if (f->zero_open)
            f->zero_total += f->last_ts > f->zero_since ? f->last_ts - f->zero_since : 0.0;
        f->scale_known = info[1 - d].window_scale_known;
    }
    return 0;
}

/* ---- the report (verdict.py) ------------------------------------------------------------- */

/* _ms: round(us / 1000, 3) */
static int ms(i64 us, double *out)
{
    double x;
    if (int_div(us, 1000, &x) < 0)
        return -1;
    *out = py_round(x, 3);
    return 0;
}

static void jw_opt_int(JsonW *w, int has, i64 v)
{
    if (has)
        jw_int(w, v);
    else
        jw_null(w);
}

/* f"{x}" of an int that may be None */
static void sb_opt_int(StrB *b, int has, i64 v, int commas)
{
    if (has)
        sb_int(b, v, commas);
    else
        sb_add(b, "None");
}

/* pattern(f) */
static int pattern(Flow *f, StrB *b)
{
    if (!f->acks) {
        sb_add(b, "no ACKs advanced");
        return 0;
    }
    i64 segs = 0, nbytes = 0;
    int has_segs = hist_mode(&f->segs_hist, &segs);
    int has_bytes = hist_mode(&f->ack_hist, &nbytes);
    double share;
    if (int_div(has_bytes ? hist_get(&f->ack_hist, nbytes) : 0, f->acks, &share) < 0)
        return -1;
    sb_add(b, "1 ACK per ");
    sb_opt_int(b, has_segs, segs, 0);
    sb_add(b, has_segs && segs == 1 ? " segment, " : " segments, ");
    sb_opt_int(b, has_bytes, nbytes, 1);
    sb_add(b, " B (");
    sb_pct(b, share, 0);
    sb_add(b, " of ACKs)");
    return 0;
}

typedef struct {
    int has;
    i64 bps;
    double start_ts;
} Window100;

/* _goodput(f) */
static int goodput(Flow *f, double *rate, Window100 *best, Window100 *worst)
{
    best->has = worst->has = 0;
    *rate = 0.0;
    if (!f->has_first)
        return 0;
    double span = f->last_ts - f->first_ts;
    *rate = span > 0 ? (double)f->data_bytes / span : 0.0;
    if (!bins_len(&f->bins) || span < 0.2)
        return 0;
    i64 bi, bc;
    bins_most(&f->bins, &bi, &bc);
    i64 wi = bins_least(&f->bins, trunc_i64(span * 10)); /* an empty one if there is one */
    double qb, qw;
    if (int_div(bi, 10, &qb) < 0 || int_div(wi, 10, &qw) < 0)
        return -1;
    best->has = worst->has = 1;
    best->bps = (i64)((uint64_t)bc * 10);
    best->start_ts = f->first_ts + qb;
    worst->bps = (i64)((uint64_t)bins_get(&f->bins, wi) * 10);
    worst->start_ts = f->first_ts + qw;
    return 0;
}

enum { V_NONE, V_LOSS, V_RECEIVER_WINDOW, V_LATENCY, V_SENDER };
static const char *const LIMIT[] = {"none", "loss", "receiver_window", "latency", "sender"};

typedef struct {
    int limit;
    i64 ev[16];
    int n_ev;
} Verdict;

/* list(dict.fromkeys(...)): each frame once, in first-seen order */
static void ev_unique(Verdict *v, i64 frame)
{
    for (int i = 0; i < v->n_ev; i++)
        if (v->ev[i] == frame)
            return;
    if (v->n_ev < 16)
        v->ev[v->n_ev++] = frame;
}

/* verdict(f): its limit and evidence, and its summary into `s` unless NULL */
static int verdict(Flow *f, Verdict *v, StrB *s)
{
    const i64 *reasons = f->end_reasons;
    i64 flights = f->flights > 1 ? f->flights : 1;
    v->n_ev = 0;
    if (f->data_bytes < MIN_BYTES || f->segments < MIN_SEGMENTS) {
        v->limit = V_NONE;
        if (s) {
            sb_add(s, "too little data to judge (");
            sb_int(s, f->data_bytes, 1);
            sb_add(s, " bytes in ");
            sb_int(s, f->segments, 0);
            sb_add(s, " segments)");
        }
        return 0;
    }
    StrB pat;
    sb_init(&pat);
    if (s && pattern(f, &pat) < 0) {
        sb_free(&pat);
        return -1;
    }
    double loss;
    if (int_div(f->retrans, f->segments, &loss) < 0)
        goto fail;
    if (loss > 0.01) {
        v->limit = V_LOSS;
        v->ev[0] = f->first_frame;
        v->ev[1] = f->last_frame;
        v->n_ev = 2;
        if (s) {
            sb_int(s, f->retrans, 1);
            sb_add(s, " of ");
            sb_int(s, f->segments, 1);
            sb_add(s, " segments were retransmitted (");
            sb_pct(s, loss, 1);
            sb_add(s, "): loss recovery sets the pace");
        }
        sb_free(&pat);
        return 0;
    }
    i64 full = reasons[R_WINDOW_FULL];
    /* f.first_ts or f.last_ts: a first timestamp of 0.0 counts as none */
    double first = f->has_first && f->first_ts != 0.0 ? f->first_ts : f->last_ts;
    double span = fmax_py(f->last_ts - first, 1e-9);
    /* a brief zero window now and then is not what sets the pace; a real share of the time is */
    if (f->zero_total >= 0.05 * span || (double)full >= 0.3 * (double)flights) {
        v->limit = V_RECEIVER_WINDOW;
        /* a frame can both shut the window and fill it: listed once */
        for (int i = 0; i < f->zero_frames.n && i < 5; i++)
            ev_unique(v, f->zero_frames.frames[i]);
        for (int i = 0; i < f->full_frames.n && i < 5; i++)
            ev_unique(v, f->full_frames.frames[i]);
        if (!v->n_ev)
            ev_unique(v, f->first_frame);
        if (s) {
            sb_add(s, "the receiver's window limited the sender (");
            if (!f->scale_known) {
                sb_add(s, "judged by zero windows only: the window scale is unknown");
            } else {
                sb_int(s, full, 0);
                sb_add(s, " of ");
                sb_int(s, f->flights, 0);
                sb_add(s, " flights ended with the window full");
            }
            sb_add(s, ")");
            if (f->zero_periods) {
                sb_add(s, " and fell to zero ");
                sb_int(s, f->zero_periods, 0);
                sb_add(s, " time(s) for ");
                sb_fixed(s, f->zero_total * 1e3, 1, 1);
                sb_add(s, " ms in all");
            }
            sb_add(s, ": the receiving application did not read as fast as data arrived. If "
                      "the receiver is psql, it was busy printing; if it is a pooler, its "
                      "buffer settings (PgBouncer pkt_buf, tcp_socket_buffer) set how much it "
                      "takes per read.");
        }
        sb_free(&pat);
        return 0;
    }
    if ((double)reasons[R_CWND_WAIT] >= 0.3 * (double)flights) {
        v->limit = V_LATENCY;
        const Ev *e = &f->end_frames[R_CWND_WAIT];
        for (int i = 0; i < e->n && i < 5; i++)
            v->ev[v->n_ev++] = e->frames[i];
        if (s) {
            i64 us = 0, med = 0;
            int has_rtt = quant_median(&f->rtt, &us);
            int has_med = quant_median(&f->fl_bytes_hist, &med);
            sb_add(s, "the sender waited for ACKs with the receive window open in ");
            sb_int(s, reasons[R_CWND_WAIT], 0);
            sb_add(s, " of ");
            sb_int(s, f->flights, 0);
            sb_add(s, " flights (median flight ");
            sb_int(s, has_med ? med : 0, 1);
            sb_add(s, " B, RTT median ");
            if (has_rtt) {
                double r;
                char buf[40];
                if (ms(us, &r) < 0)
                    goto fail;
                sb_add(s, fmt_repr(buf, r));
            } else {
                sb_add(s, "None");
            }
            sb_add(s, " ms): the congestion window and the round-trip time set the pace");
        }
        sb_free(&pat);
        return 0;
    }
    v->limit = V_SENDER;
    /* the most in flight can be at the first or the last segment: each frame once */
    ev_unique(v, f->first_frame);
    ev_unique(v, f->inflight_max_frame);
    ev_unique(v, f->last_frame);
    if (s) {
        sb_add(s, "the window never limited it: at most ");
        sb_int(s, f->inflight_max, 1);
        sb_add(s, " bytes in flight");
        if (f->scale_known && f->ratio_max != 0.0) {
            sb_add(s, " (");
            sb_pct(s, f->ratio_max, 0);
            sb_add(s, " of the window)");
        }
        if (f->zero_periods) {
            sb_add(s, "; the window fell to zero ");
            sb_int(s, f->zero_periods, 0);
            sb_add(s, " time(s), ");
            sb_fixed(s, f->zero_total * 1e3, 2, 1);
            sb_add(s, " ms in all, too briefly to set the pace");
        }
        sb_add(s, ". Flights ended with an ACK arriving while the sender was still sending (");
        sb_int(s, reasons[R_ACK_ARRIVED], 0);
        sb_add(s, ") or with the sender idle (");
        sb_int(s, reasons[R_SENDER_IDLE], 0);
        sb_add(s, "), so the sender set the pace (for a server: producing the rows). The ACK "
                  "pattern (");
        sb_addn(s, pat.p ? pat.p : "", pat.len);
        if (pat.failed)
            s->failed = 1;
        sb_add(s, ") is delayed-ACK pacing, not a round-trip limit.");
    }
    sb_free(&pat);
    return 0;
fail:
    sb_free(&pat);
    return -1;
}

/* A float rounded as the report rounds it, written. */
static void jw_round(JsonW *w, double x, int ndigits) { jw_float(w, py_round(x, ndigits)); }

/* round(x) of a float as the int json.dumps writes (any size: a double holds an integer
 * exactly and %.0f writes all its digits). */
static void jw_round_int(JsonW *w, double x)
{
    double r = py_round_int(x);
    if (!isfinite(r)) {
        jw_float(w, r); /* Python raises here; no real capture gets here */
    } else if (fabs(r) < 9.2e18) {
        jw_int(w, (i64)r);
    } else {
        char buf[400];
        int n = snprintf(buf, sizeof buf, "%.0f", r);
        jw_raw(w, buf, n);
    }
}

static void jw_window100(JsonW *w, const Window100 *x, double start)
{
    if (!x->has) {
        jw_null(w);
        return;
    }
    jw_obj(w);
    jw_kint(w, "bps", x->bps);
    jw_key(w, "start_s");
    jw_round(w, x->start_ts - start, 6);
    jw_obj_end(w);
}

static void jw_reasons(JsonW *w, const i64 *counts)
{
    jw_obj(w);
    for (int r = 0; r < N_REASONS; r++) {
        jw_key(w, REASON[r]);
        jw_int(w, counts[r]);
    }
    jw_obj_end(w);
}

static void jw_sb(JsonW *w, StrB *b)
{
    if (b->failed)
        w->failed = 1;
    jw_str(w, b->p ? b->p : "", b->len);
}

/* direction_json and TransferAnalyzer.result's own keys */
int tr_result(Transfer *t, int d, double start, JsonW *w)
{
    if (d != 0 && d != 1) {
        PyErr_SetString(PyExc_ValueError, "direction must be 0 or 1");
        return -1;
    }
    Flow *f = &t->flows[d];
    const DirInfo *info = t->has_info ? &t->info[1 - d] : NULL;
    double rate;
    Window100 best, worst;
    i64 v;
    int has;
    StrB b;
    if (goodput(f, &rate, &best, &worst) < 0)
        return -1;

    jw_key(w, "acks");
    jw_obj(w);
    jw_kint(w, "count", f->acks);
    jw_key(w, "bytes_acked_median");
    has = hist_median(&f->ack_hist, &v);
    jw_opt_int(w, has, v);
    jw_key(w, "bytes_acked_histogram");
    hist_top_json(&f->ack_hist, 12, w);
    jw_key(w, "segments_per_ack_median");
    has = hist_median(&f->segs_hist, &v);
    jw_opt_int(w, has, v);
    jw_key(w, "causes");
    jw_obj(w);
    jw_kint(w, "every_second_segment", f->every_second);
    jw_kint(w, "window_update", f->window_updates);
    jw_kint(w, "quick_ack", f->quick_acks);
    jw_kint(w, "delayed_timer", f->delayed_timer);
    jw_kint(w, "duplicate", f->duplicates);
    jw_obj_end(w);
    jw_obj_end(w);

    jw_key(w, "pattern");
    sb_init(&b);
    if (pattern(f, &b) < 0) {
        sb_free(&b);
        return -1;
    }
    jw_sb(w, &b);
    sb_free(&b);

    jw_key(w, "segment_size_median");
    has = hist_median(&f->seg_sizes, &v);
    jw_opt_int(w, has, v);
    jw_key(w, "segment_size_histogram");
    hist_top_json(&f->seg_sizes, 12, w);

    jw_key(w, "window");
    jw_obj(w);
    jw_key(w, "min");
    jw_opt_int(w, f->has_win, f->win_min);
    jw_key(w, "max");
    jw_opt_int(w, f->has_win, f->win_max);
    jw_key(w, "scaled");
    jw_bool(w, f->scale_known);
    jw_key(w, "scale_lower_bound");
    if (f->scale_known || info == NULL)
        jw_null(w);
    else
        jw_opt_int(w, info->has_lower_bound, info->lower_bound);
    jw_kint(w, "zero_window_periods", f->zero_periods);
    jw_key(w, "zero_window_total_s");
    jw_round(w, f->zero_total, 6);
    jw_obj_end(w);

    jw_key(w, "in_flight");
    jw_obj(w);
    jw_kint(w, "max", f->inflight_max);
    jw_key(w, "median");
    has = quant_median(&f->inflight, &v);
    jw_opt_int(w, has, v);
    jw_kint(w, "max_frame", f->inflight_max_frame);
    jw_key(w, "max_ratio_to_window");
    if (f->scale_known)
        jw_round(w, f->ratio_max, 3);
    else
        jw_null(w);
    jw_obj_end(w);

    jw_key(w, "flights");
    jw_obj(w);
    jw_kint(w, "count", f->flights);
    jw_key(w, "bytes_median");
    has = quant_median(&f->fl_bytes_hist, &v);
    jw_opt_int(w, has, v);
    jw_key(w, "segments_median");
    has = quant_median(&f->fl_segs_hist, &v);
    jw_opt_int(w, has, v);
    jw_key(w, "end_reasons");
    jw_reasons(w, f->end_reasons);
    jw_obj_end(w);

    jw_key(w, "rtt_ms");
    if (quant_n(&f->rtt)) {
        double x;
        jw_obj(w);
        jw_kint(w, "samples", quant_n(&f->rtt));
        jw_key(w, "min");
        /* (f.rtt_min or 0) * 1e3: a zero of either sign is the int 0, so 0.0 */
        jw_round(w, f->rtt_min != 0.0 ? f->rtt_min * 1e3 : 0.0, 3);
        jw_key(w, "median");
        if (quant_median(&f->rtt, &v)) {
            if (ms(v, &x) < 0)
                return -1;
            jw_float(w, x);
        } else {
            jw_null(w);
        }
        jw_key(w, "p95");
        if (quant_quantile(&f->rtt, 0.95, &v)) {
            if (ms(v, &x) < 0)
                return -1;
            jw_float(w, x);
        } else {
            jw_null(w);
        }
        jw_obj_end(w);
    } else {
        jw_null(w);
    }

    jw_key(w, "goodput_bps");
    jw_round_int(w, rate);
    jw_key(w, "best_100ms");
    jw_window100(w, &best, start);
    jw_key(w, "worst_100ms");
    jw_window100(w, &worst, start);

    jw_key(w, "idle_periods");
    jw_obj(w);
    jw_kint(w, "count", f->idle_count);
    jw_key(w, "total_s");
    jw_round(w, f->idle_total, 6);
    jw_key(w, "first");
    jw_arr(w);
    for (int i = 0; i < f->n_idle; i++) {
        const Idle *p = &f->idle[i];
        /* dict(p, start_s=...) after p.pop("start_ts"): start_s comes last */
        jw_obj(w);
        jw_kfloat(w, "seconds", p->seconds);
        jw_kint(w, "from_frame", p->from_frame);
        jw_kint(w, "to_frame", p->to_frame);
        jw_key(w, "waiting_for");
        if (p->waiting == W_ZERO) {
            jw_cstr(w, "the sender waited for the receiver to open its window (zero window)");
        } else if (p->waiting == W_NOTHING) {
            jw_cstr(w, "everything was acknowledged: the sender had nothing to send");
        } else {
            char buf[160], num[40];
            snprintf(buf, sizeof buf, "the sender waited with %s bytes unacknowledged",
                     fmt_int(num, p->outstanding, 1));
            jw_cstr(w, buf);
        }
        jw_key(w, "start_s");
        jw_round(w, p->start_ts - start, 6);
        jw_obj_end(w);
    }
    jw_arr_end(w);
    jw_obj_end(w);

    Verdict vd;
    sb_init(&b);
    if (verdict(f, &vd, &b) < 0) {
        sb_free(&b);
        return -1;
    }
    jw_key(w, "verdict");
    jw_obj(w);
    jw_key(w, "limit");
    jw_cstr(w, LIMIT[vd.limit]);
    jw_key(w, "summary");
    jw_sb(w, &b);
    sb_free(&b);
    jw_key(w, "evidence_frames");
    jw_arr(w);
    for (int i = 0; i < vd.n_ev; i++)
        jw_int(w, vd.ev[i]);
    jw_arr_end(w);
    jw_obj_end(w);

    if (t->has_handshake && d == 0) {
        jw_key(w, "handshake_rtt_ms");
        jw_round(w, t->syn_to_synack_ms, 3);
    }
    if (d == 0 && t->has_syn[0] && t->has_syn[1] && t->has_syn[2]) {
        /* SYN -> SYN-ACK is the round trip seen from the client's side of the capture point,
         * SYN-ACK -> ACK the one on the server's side: where the capture sits. */
        jw_key(w, "handshake_ms");
        jw_obj(w);
        jw_key(w, "syn_to_synack");
        jw_round(w, (t->syn_ts[1] - t->syn_ts[0]) * 1e3, 3);
        jw_key(w, "synack_to_ack");
        jw_round(w, (t->syn_ts[2] - t->syn_ts[1]) * 1e3, 3);
        jw_obj_end(w);
    }
    /* the counting structures' reads report a failure (out of memory) only this way */
    return PyErr_Occurred() ? -1 : 0;
}

/* ---- findings and what relay matching reads ------------------------------------------------ */

int tr_findings(Transfer *t, const char *conn_id, const char *const names[2], Findings *out)
{
    for (int d = 0; d < 2; d++) {
        Flow *f = &t->flows[d];
        i64 timer = f->delayed_timer;
        StrB b;
        if (f->acks >= 10 && (double)timer >= 0.1 * (double)f->acks) {
            sb_init(&b);
            sb_add(&b, names[d]);
            sb_add(&b, ": ");
            sb_int(&b, timer, 0);
            sb_add(&b, " of ");
            sb_int(&b, f->acks, 0);
            sb_add(&b, " ACKs came from the delayed-ACK timer (>= 40 ms after the data): each "
                       "is a stall of at least 40 ms");
            if (b.failed) {
                sb_free(&b);
                PyErr_NoMemory();
                return -1;
            }
            fnd_add(out, "warning", "delayed-ack-stalls", &b, NULL, 0);
            sb_free(&b);
        }
        double span = f->has_first ? f->last_ts - f->first_ts : 0.0;
        if (span > 0 && f->idle_waiting > 0.2 * span) {
            i64 frames[10];
            int n = 0;
            for (int i = 0; i < f->n_idle && i < 10; i++)
                frames[n++] = f->idle[i].to_frame;
            sb_init(&b);
            sb_add(&b, names[d]);
            sb_add(&b, ": the sender stalled for ");
            sb_fixed(&b, f->idle_waiting, 3, 0);
            sb_add(&b, " s of ");
            sb_fixed(&b, span, 3, 0);
            sb_add(&b, " s (pauses over 10 ms with data unacknowledged or the window shut)");
            if (b.failed) {
                sb_free(&b);
                PyErr_NoMemory();
                return -1;
            }
            fnd_add(out, "warning", "stalls", &b, frames, n);
            sb_free(&b);
        }
    }
    return 0;
}

int tr_leg_view(Transfer *t, int d, TrLegView *out)
{
    memset(out, 0, sizeof *out);
    if (d != 0 && d != 1) {
        PyErr_SetString(PyExc_ValueError, "direction must be 0 or 1");
        return -1;
    }
    Flow *f = &t->flows[d];
    out->zero_window_periods = f->zero_periods;
    out->zero_window_total_s = py_round(f->zero_total, 6);
    Verdict v;
    if (verdict(f, &v, NULL) < 0)
        return -1;
    memcpy(out->evidence_frames, v.ev, sizeof(i64) * v.n_ev);
    out->n_evidence = v.n_ev;
    out->has_bytes_acked_median = hist_median(&f->ack_hist, &out->bytes_acked_median);
    out->has_flight_bytes_median = quant_median(&f->fl_bytes_hist, &out->flight_bytes_median);
    i64 us;
    if (quant_n(&f->rtt) && quant_median(&f->rtt, &us)) {
        if (ms(us, &out->rtt_median_ms) < 0)
            return -1;
        out->has_rtt_median = 1;
    }
    if (d == 0 && t->has_syn[0] && t->has_syn[1] && t->has_syn[2]) {
        out->has_handshake_ms = 1;
        out->syn_to_synack_ms = py_round((t->syn_ts[1] - t->syn_ts[0]) * 1e3, 3);
        out->synack_to_ack_ms = py_round((t->syn_ts[2] - t->syn_ts[1]) * 1e3, 3);
    }
    return PyErr_Occurred() ? -1 : 0;
}
