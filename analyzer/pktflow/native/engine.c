/* The native TCP engine: the twin of pktflow.tcp.engine (whose docstring states the rules,
 * in the order feed applies them), tcp.direction, tcp.connection and tcp.options. Fed decoded
 * packets in capture order, it tracks connections, reassembles each direction's stream for
 * the PostgreSQL decoder and tells the transfer analysis of every packet. */
#include "engine.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#define MASK32 0xFFFFFFFFLL
#define HALF32 0x80000000LL
#define MAX_WINDOW_SCALE 14

static int fail_nomem(Engine *e)
{
    PyErr_NoMemory();
    e->failed = 1;
    return -1;
}

/* ---- 4-tuple maps: open addressing, deletion by backward shift (no tombstones: a storm opens
 * and retires a connection per packet or two) ---------------------------------------------------- */

static uint64_t key_hash(const Key *k)
{
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)k->alen;
    const uint8_t *parts[2] = {k->src, k->dst};
    for (int i = 0; i < 2; i++) {
        for (int j = 0; j < k->alen; j++) {
            h ^= parts[i][j];
            h *= 1099511628211ULL;
        }
    }
    h ^= (uint64_t)k->sport << 16 | k->dport;
    h *= 0x9E3779B97F4A7C15ULL;
    return h ^ (h >> 31);
}

static int key_eq(const Key *a, const Key *b)
{
    return a->sport == b->sport && a->dport == b->dport && a->alen == b->alen
        && memcmp(a->src, b->src, a->alen) == 0 && memcmp(a->dst, b->dst, a->alen) == 0;
}

static void make_key(Key *k, const uint8_t *src, unsigned sport, const uint8_t *dst,
                     unsigned dport, int alen)
{
    memset(k, 0, sizeof *k);
    k->alen = alen;
    k->sport = sport;
    k->dport = dport;
    memcpy(k->src, src, alen);
    memcpy(k->dst, dst, alen);
}

static void reverse_key(Key *r, const Key *k)
{
    make_key(r, k->dst, k->dport, k->src, k->sport, k->alen);
}

static Slot *map_find(const Map *m, const Key *k)
{
    if (!m->n)
        return NULL;
    uint64_t mask = (uint64_t)m->cap - 1;
    for (uint64_t i = key_hash(k) & mask;; i = (i + 1) & mask) {
        Slot *s = &m->slots[i];
        if (!s->used)
            return NULL;
        if (key_eq(&s->key, k))
            return s;
    }
}

static int map_grow(Map *m)
{
    i64 cap = m->cap ? 2 * m->cap : 64;
    Slot *slots = PyMem_Calloc((size_t)cap, sizeof(Slot));
    if (slots == NULL)
        return -1;
    uint64_t mask = (uint64_t)cap - 1;
    for (i64 j = 0; j < m->cap; j++) {
        Slot *s = &m->slots[j];
        if (!s->used)
            continue;
        uint64_t i = key_hash(&s->key) & mask;
        while (slots[i].used)
            i = (i + 1) & mask;
        slots[i] = *s;
    }
    PyMem_Free(m->slots);
    m->slots = slots;
    m->cap = cap;
    return 0;
}

/* Set k -> (value, side), replacing what k had. */
static int map_put(Map *m, const Key *k, void *value, int side)
{
    Slot *s = map_find(m, k);
    if (s == NULL) {
        if (2 * (m->n + 1) > m->cap && map_grow(m) < 0)
            return -1;
        uint64_t mask = (uint64_t)m->cap - 1, i = key_hash(k) & mask;
        while (m->slots[i].used)
            i = (i + 1) & mask;
        s = &m->slots[i];
        s->key = *k;
        s->used = 1;
        m->n++;
    }
    s->value = value;
    s->side = side;
    return 0;
}

static void map_del(Map *m, const Key *k)
{
    Slot *s = map_find(m, k);
    if (s == NULL)
        return;
    uint64_t mask = (uint64_t)m->cap - 1, i = (uint64_t)(s - m->slots);
    s->used = 0;
    m->n--;
    /* shift back the entries after it that would no longer be found */
    for (uint64_t j = (i + 1) & mask; m->slots[j].used; j = (j + 1) & mask) {
        uint64_t home = key_hash(&m->slots[j].key) & mask;
        int between = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (between)
            continue;
        m->slots[i] = m->slots[j];
        m->slots[j].used = 0;
        i = j;
    }
}

static void map_free(Map *m)
{
    PyMem_Free(m->slots);
    memset(m, 0, sizeof *m);
}

/* ---- queues of connections ------------------------------------------------------------------ */

static int queue_push(Queue *q, Conn *c)
{
    if (q->n == q->cap) {
        i64 cap = q->cap ? 2 * q->cap : 64;
        Conn **items = PyMem_Malloc(sizeof(Conn *) * cap);
        if (items == NULL)
            return -1;
        for (i64 i = 0; i < q->n; i++)
            items[i] = q->items[(q->head + i) % q->cap];
        PyMem_Free(q->items);
        q->items = items;
        q->head = 0;
        q->cap = cap;
    }
    q->items[(q->head + q->n) % q->cap] = c;
    q->n++;
    c->queued++;
    return 0;
}

static void conn_free(Conn *c);

static Conn *queue_head(Queue *q) { return q->n ? q->items[q->head] : NULL; }

static void queue_pop(Queue *q)
{
    Conn *c = q->items[q->head];
    q->head = (q->head + 1) % q->cap;
    q->n--;
    if (--c->queued == 0 && !c->live)
        conn_free(c);
}

/* ---- directions ------------------------------------------------------------------------- */

static void dir_init(Dir *m)
{
    memset(m, 0, sizeof *m);
    m->base = -1;
    m->max_acked = -1;
    m->last_seq = m->last_ack = m->last_win = -1;
}

static void dir_free(Dir *m)
{
    for (int i = 0; i < m->nbuf; i++)
        PyMem_Free(m->buf[i].payload);
    PyMem_Free(m->buf);
    PyMem_Free(m->holes);
    m->buf = NULL;
    m->holes = NULL;
    m->nbuf = m->capbuf = m->nholes = m->capholes = 0;
}

/* Direction.unwrap: the relative offset of raw sequence number `raw`, in the 2**32 cycle
 * nearest `high`. */
static inline i64 unwrap(const Dir *m, i64 raw)
{
    i64 high = m->high;
    i64 delta = (i64)((uint64_t)(raw - m->base - high) & (uint64_t)MASK32);
    return high + delta - (delta >= HALF32 ? (1LL << 32) : 0);
}

/* tcp.options.parse_syn_options */
static SynOpt parse_syn(const uint8_t *raw, int n)
{
    SynOpt o;
    memset(&o, 0, sizeof o);
    o.present = 1;
    int i = 0;
    while (i < n) {
        int kind = raw[i];
        if (kind == 0)
            break;
        if (kind == 1) {
            i++;
            continue;
        }
        if (i + 1 >= n)
            break;
        int length = raw[i + 1];
        if (length < 2 || i + length > n)
            break;
        if (kind == 2 && length == 4) {
            o.has_mss = 1;
            o.mss = raw[i + 2] << 8 | raw[i + 3];
        } else if (kind == 3 && length == 3) {
            o.has_wscale = 1;
            o.wscale = raw[i + 2] < MAX_WINDOW_SCALE ? raw[i + 2] : MAX_WINDOW_SCALE;
        } else if (kind == 4 && length == 2) {
            o.sack = 1;
        } else if (kind == 8 && length == 10) {
            o.timestamps = 1;
        }
        i += length;
    }
    return o;
}

/* Direction.window_scale */
int window_scale(const Dir *mine, const Dir *peer, int *known)
{
    const SynOpt *a = &mine->syn, *b = &peer->syn;
    *known = 1;
    if (a->present && b->present) {
        if (a->has_wscale && b->has_wscale)
            return a->wscale;
        return 0; /* scaling needs both SYNs to offer it */
    }
    /* only one SYN seen: a SYN-ACK without the option proves scaling is off both ways */
    if ((a->present && !a->has_wscale) || (b->present && !b->has_wscale))
        return 0;
    *known = 0;
    return -1;
}

static void update_scale(Conn *c, int d)
{
    int known, s = window_scale(&c->dirs[d], &c->dirs[1 - d], &known);
    c->dirs[d].wscale = s < 0 ? 0 : s;
    c->view[d].wscale_known = known;
}

DirInfo dir_info(const Conn *c, int d)
{
    const Dir *mine = &c->dirs[d];
    DirInfo info;
    memset(&info, 0, sizeof info);
    int known, s = window_scale(mine, &c->dirs[1 - d], &known);
    info.has_mss = mine->syn.present && mine->syn.has_mss;
    info.mss = mine->syn.mss;
    info.has_window_scale = s >= 0;
    info.window_scale = s < 0 ? 0 : s;
    info.window_scale_known = known;
    info.has_lower_bound = !known;
    info.lower_bound = mine->wscale_lb;
    return info;
}

/* ---- connections -------------------------------------------------------------------------- */

/* A reported connection's analyses: what the report needed of them is written. */
static void drop_analyses(Conn *c)
{
    if (c->conv) {
        pg_free(c->conv);
        c->conv = NULL;
    }
    if (c->tr) {
        tr_free(c->tr);
        c->tr = NULL;
    }
    for (int d = 0; d < 2; d++)
        dir_free(&c->dirs[d]);
}

static void conn_free(Conn *c)
{
    drop_analyses(c);
    Py_XDECREF(c->id);
    PyMem_Free(c);
}

static void end_set(End *e, const uint8_t *addr, int alen, unsigned port)
{
    memset(e->addr, 0, sizeof e->addr);
    memcpy(e->addr, addr, alen);
    e->port = port;
}

static void conn_keys(const Conn *c, Key *k0, Key *k1)
{
    make_key(k0, c->client.addr, c->client.port, c->server.addr, c->server.port, c->alen);
    reverse_key(k1, k0);
}

static Conn *open_conn(Engine *e, const uint8_t *ca, unsigned cp, const uint8_t *sa,
                       unsigned sp, int alen, double ts, i64 frame, int roles, i64 number)
{
    if (!number)
        number = ++e->opened;
    Conn *c = PyMem_Calloc(1, sizeof *c);
    if (c == NULL) {
        fail_nomem(e);
        return NULL;
    }
    c->number = number;
    c->id = PyUnicode_FromFormat("c%lld", (long long)number);
    if (c->id == NULL) {
        PyMem_Free(c);
        e->failed = 1;
        return NULL;
    }
    c->alen = alen;
    end_set(&c->client, ca, alen, cp);
    end_set(&c->server, sa, alen, sp);
    dir_init(&c->dirs[0]);
    dir_init(&c->dirs[1]);
    c->start_ts = c->end_ts = ts;
    c->first_frame = c->last_frame = frame;
    c->role_source = roles;
    Key k0, k1;
    conn_keys(c, &k0, &k1);
    if (map_put(&e->table, &k0, c, 0) < 0 || map_put(&e->table, &k1, c, 1) < 0) {
        map_del(&e->table, &k0);
        conn_free(c);
        fail_nomem(e);
        return NULL;
    }
    c->live = 1;
    c->prev = e->live_tail;
    if (e->live_tail)
        e->live_tail->next = c;
    else
        e->live_head = c;
    e->live_tail = c;
    c->tr = tr_new(c->view);
    if (c->tr == NULL) {
        e->failed = 1;
        return NULL; /* linked: freed with the engine */
    }
    if (e->decode_postgres) {
        ConvConfig cfg = e->conv_cfg;
        cfg.conn_id = c->id;
        cfg.view = c->view;
        c->conv = pg_new(&cfg);
        if (c->conv == NULL) {
            e->failed = 1;
            return NULL;
        }
    }
    return c;
}

/* engine._new: the connection this packet opens, client and server as the rules say, and
 * the packet's side in it. */
static Conn *new_conn(Engine *e, const Pkt *p, i64 number, int *side)
{
    const DecodedTcp *t = &p->t;
    unsigned sa = t->flags & (F_SYN | F_ACK);
    int from_client = sa == F_SYN || (sa != (F_SYN | F_ACK) && !(t->sport < t->dport));
    int roles = sa == F_SYN ? ROLES_HANDSHAKE : sa == (F_SYN | F_ACK) ? ROLES_SYN_ACK
                                                                       : ROLES_PORT;
    *side = !from_client;
    if (from_client)
        return open_conn(e, t->src, t->sport, t->dst, t->dport, t->alen, p->ts, p->frame, roles,
                         number);
    return open_conn(e, t->dst, t->dport, t->src, t->sport, t->alen, p->ts, p->frame, roles,
                     number);
}

static int closed(const Conn *c)
{
    const Dir *a = &c->dirs[0], *b = &c->dirs[1];
    return a->rst || b->rst || (a->has_fin && b->has_fin);
}

static int finish_conn(Engine *e, Conn *c);

static void unlink_live(Engine *e, Conn *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        e->live_head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        e->live_tail = c->prev;
    c->prev = c->next = NULL;
    c->live = 0;
}

#define GONE_MOST (MAX_GONE + 2) /* a connection's two keys are added, then the oldest go */

static i64 gone_slot(const Gone *g, const Key *k)
{
    uint64_t mask = g->mask;
    for (uint64_t i = key_hash(k) & mask;; i = (i + 1) & mask) {
        int32_t v = g->slots[i];
        if (!v || key_eq(&g->ring[v - 1], k))
            return (i64)i;
    }
}

static int gone_has(const Gone *g, const Key *k)
{
    return g->n && g->slots[gone_slot(g, k)] != 0;
}

/* Forget the oldest key: out of the table (entries after it shifted back), off the ring. */
static void gone_pop(Gone *g)
{
    uint64_t mask = g->mask, i = (uint64_t)gone_slot(g, &g->ring[g->head]);
    g->slots[i] = 0;
    for (uint64_t j = (i + 1) & mask; g->slots[j]; j = (j + 1) & mask) {
        uint64_t home = key_hash(&g->ring[g->slots[j] - 1]) & mask;
        int between = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (between)
            continue;
        g->slots[i] = g->slots[j];
        g->slots[j] = 0;
        i = j;
    }
    g->head = (g->head + 1) % g->cap;
    g->n--;
}

/* Twice the places (at most GONE_MOST), the keys in order from place 0, the table rebuilt. */
static int gone_grow(Gone *g)
{
    i64 cap = g->cap ? 2 * g->cap : 64;
    if (cap > GONE_MOST)
        cap = GONE_MOST;
    uint64_t nslots = 1;
    while (nslots < (uint64_t)(4 * cap))
        nslots <<= 1;
    Key *ring = PyMem_Malloc(sizeof(Key) * cap);
    int32_t *slots = PyMem_Calloc((size_t)nslots, sizeof(int32_t));
    if (ring == NULL || slots == NULL) {
        PyMem_Free(ring);
        PyMem_Free(slots);
        return -1;
    }
    for (i64 i = 0; i < g->n; i++)
        ring[i] = g->ring[(g->head + i) % g->cap];
    PyMem_Free(g->ring);
    PyMem_Free(g->slots);
    g->ring = ring;
    g->slots = slots;
    g->head = 0;
    g->cap = cap;
    g->mask = nslots - 1;
    for (i64 i = 0; i < g->n; i++)
        g->slots[gone_slot(g, &ring[i])] = (int32_t)(i + 1);
    return 0;
}

static int gone_add(Engine *e, const Key *k)
{
    Gone *g = &e->gone;
    if (g->n && g->slots[gone_slot(g, k)])
        return 0; /* an OrderedDict keeps a key's place when it is set again */
    if (g->n == g->cap && gone_grow(g) < 0)
        return -1;
    i64 place = (g->head + g->n) % g->cap;
    g->ring[place] = *k;
    g->slots[gone_slot(g, k)] = (int32_t)(place + 1);
    g->n++;
    while (g->n > MAX_GONE)
        gone_pop(g);
    return 0;
}

/* engine._retire */
static int retire(Engine *e, Conn *c, int closed_)
{
    Key k0, k1;
    conn_keys(c, &k0, &k1);
    map_del(&e->table, &k0);
    map_del(&e->table, &k1);
    if (finish_conn(e, c) < 0)
        return -1;
    if (c->settled)
        e->settled_waiting--;
    if (closed_) {
        if (gone_add(e, &k0) < 0 || gone_add(e, &k1) < 0)
            return fail_nomem(e);
    }
    unlink_live(e, c);
    int r = e->retired(e, c);
    drop_analyses(c);
    if (!c->queued)
        conn_free(c);
    if (r < 0)
        e->failed = 1;
    return r;
}


/* ---- per packet --------------------------------------------------------------------------- */

static int feed(Engine *e, const Pkt *p);

static void keep_pkt(KeptPkt *k, const Pkt *p)
{
    const DecodedTcp *t = &p->t;
    k->frame = p->frame;
    k->ts = p->ts;
    k->alen = t->alen;
    memcpy(k->src, t->src, t->alen);
    memcpy(k->dst, t->dst, t->alen);
    k->sport = t->sport;
    k->dport = t->dport;
    k->seq = t->seq;
    k->ack = t->ack;
    k->flags = t->flags;
    k->win = t->win;
    k->optlen = t->optlen < 40 ? t->optlen : 40;
    memcpy(k->options, t->options, k->optlen);
}

static void kept_pkt(Pkt *p, const KeptPkt *k)
{
    memset(p, 0, sizeof *p);
    p->frame = k->frame;
    p->ts = k->ts;
    p->t.src = k->src;
    p->t.dst = k->dst;
    p->t.alen = k->alen;
    p->t.sport = k->sport;
    p->t.dport = k->dport;
    p->t.seq = k->seq;
    p->t.ack = k->ack;
    p->t.flags = k->flags;
    p->t.win = k->win;
    p->t.payload = k->options; /* no payload: never read */
    p->t.options = k->options;
    p->t.optlen = k->optlen;
}

static void waiting_free(Waiting *w)
{
    if (w != NULL) {
        PyMem_Free(w->pkts);
        PyMem_Free(w);
    }
}

/* Keep one more handshake segment (waiting_takes said it may). -1 out of memory. */
static int waiting_keep(Waiting *w, const Pkt *p)
{
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 1;
        KeptPkt *k = PyMem_Realloc(w->pkts, sizeof(KeptPkt) * cap);
        if (k == NULL)
            return -1;
        w->pkts = k;
        w->cap = cap;
    }
    keep_pkt(&w->pkts[w->n++], p);
    return 0;
}

/* _Waiting.takes */
static int waiting_takes(const Waiting *w, const Pkt *p)
{
    const DecodedTcp *t = &p->t;
    if (t->plen || t->flags & (F_FIN | F_RST) || !(t->flags & F_SYN) || w->n >= MAX_WAITING)
        return 0;
    if (t->flags & F_ACK)
        return 1;
    const KeptPkt *f = &w->pkts[0];
    return !(f->flags & F_ACK) && f->seq == t->seq && f->sport == t->sport
        && memcmp(f->src, t->src, t->alen) == 0;
}

/* engine._make: the connection kept as its handshake segments, made and fed them; NULL on
 * failure (e->failed) or if feeding them retired it. */
static Conn *make_waiting(Engine *e, Waiting *w)
{
    Pkt first;
    kept_pkt(&first, &w->pkts[0]);
    Key k0, k1;
    make_key(&k0, first.t.src, first.t.sport, first.t.dst, first.t.dport, first.t.alen);
    reverse_key(&k1, &k0);
    map_del(&e->waiting, &k0);
    map_del(&e->waiting, &k1);
    int side;
    Conn *c = new_conn(e, &first, w->number, &side);
    int n = w->n, r = 0;
    if (c != NULL)
        c->queued++; /* held while fed: nothing the packets do may free it under us */
    for (int i = 0; c != NULL && r == 0 && i < n; i++) {
        Pkt p;
        kept_pkt(&p, &w->pkts[i]);
        r = feed(e, &p);
    }
    waiting_free(w);
    if (c == NULL || r < 0)
        return NULL;
    if (--c->queued == 0 && !c->live) { /* its packets retired it (kept packets never do) */
        conn_free(c);
        return NULL;
    }
    return c->live ? c : NULL;
}

/* engine._lookup: the packet's connection and side; NULL for a late packet or one kept for a
 * connection not made yet (or on failure: e->failed). */
static Conn *lookup(Engine *e, const Pkt *p, int *side)
{
    const DecodedTcp *t = &p->t;
    Key k;
    make_key(&k, t->src, t->sport, t->dst, t->dport, t->alen);
    Slot *s = map_find(&e->table, &k);
    Conn *hit = s ? s->value : NULL;
    int d = s ? s->side : 0;
    if (hit == NULL && e->waiting.n) {
        Slot *ws = map_find(&e->waiting, &k);
        if (ws != NULL) {
            Waiting *w = ws->value;
            if (waiting_takes(w, p)) {
                if (waiting_keep(w, p) < 0)
                    fail_nomem(e);
                return NULL;
            }
            if (make_waiting(e, w) == NULL && e->failed)
                return NULL;
            s = map_find(&e->table, &k);
            hit = s ? s->value : NULL;
            d = s ? s->side : 0;
        }
    }
    int syn_only = (t->flags & (F_SYN | F_ACK)) == F_SYN;
    if (hit == NULL && !(t->flags & F_SYN) && gone_has(&e->gone, &k)) {
        e->late_packets++;
        if (e->n_late_frames < MAX_LATE_FRAMES)
            e->late_frames[e->n_late_frames++] = p->frame;
        return NULL;
    }
    if (hit != NULL) {
        if (!syn_only) {
            *side = d;
            return hit;
        }
        const Dir *c2s = &hit->dirs[0];
        /* a retransmitted SYN carries the same ISN; anything else reuses the 4-tuple */
        if (!hit->packets || (d == 0 && hit->view[0].isn_seen
                              && c2s->base == (((i64)t->seq + 1) & MASK32) && !closed(hit))) {
            *side = d;
            return hit;
        }
        if (retire(e, hit, 0) < 0)
            return NULL;
    }
    /* kept as packets, unless the 4-tuple is its own reverse */
    if (e->retired != NULL && t->flags & F_SYN && !(t->flags & (F_FIN | F_RST)) && !t->plen
        && (t->sport != t->dport || memcmp(t->src, t->dst, t->alen) != 0)) {
        Waiting *w = PyMem_Calloc(1, sizeof *w);
        if (w == NULL || waiting_keep(w, p) < 0) {
            waiting_free(w);
            fail_nomem(e);
            return NULL;
        }
        w->number = ++e->opened;
        Key r;
        reverse_key(&r, &k);
        if (map_put(&e->waiting, &k, w, 0) < 0 || map_put(&e->waiting, &r, w, 1) < 0) {
            map_del(&e->waiting, &k);
            waiting_free(w);
            fail_nomem(e);
        }
        return NULL;
    }
    return new_conn(e, p, 0, side);
}

static int drain(Engine *e, Conn *c, int d);

/* engine._push: hand [next, end) to the decoder; seq <= next < end. */
static int push(Engine *e, Conn *c, int d, i64 seq, i64 end, const uint8_t *payload, i64 len,
                i64 frame, double ts)
{
    Dir *m = &c->dirs[d];
    i64 skip = m->next - seq;
    i64 n = skip < len ? len - skip : 0;
    if (c->conv != NULL && n) {
        if (pg_feed(c->conv, d, payload + skip, n, m->next, frame, ts) < 0)
            return -1;
    }
    i64 got = m->next + n;
    if (got < end && c->conv != NULL) { /* snaplen cut the payload: say so, never invent it */
        if (pg_gap(c->conv, d, got, end - got, frame, ts) < 0)
            return -1;
    }
    m->next = end;
    return 0;
}

/* engine._declare_gap: the capture will not see [next, upto). */
static int declare_gap(Engine *e, Conn *c, int d, i64 upto, i64 frame, double ts)
{
    Dir *m = &c->dirs[d];
    if (upto <= m->next)
        return 0;
    i64 size = upto - m->next;
    m->gaps++;
    m->missing_bytes += size;
    ev_note(&m->ev_gap, frame);
    if (c->conv != NULL && pg_gap(c->conv, d, m->next, size, frame, ts) < 0)
        return -1;
    m->next = upto;
    /* the hole will not be filled now: forget it, so a late copy counts as a retransmission */
    int k = 0;
    for (int i = 0; i < m->nholes; i++)
        if (m->holes[i].end > upto)
            m->holes[k++] = m->holes[i];
    m->nholes = k;
    return drain(e, c, d);
}

static int drain(Engine *e, Conn *c, int d)
{
    Dir *m = &c->dirs[d];
    while (m->nbuf) {
        Seg s = m->buf[0]; /* the buffer is kept sorted: its first is min(buffer) */
        if (s.start > m->next)
            return 0;
        memmove(m->buf, m->buf + 1, sizeof(Seg) * (m->nbuf - 1));
        m->nbuf--;
        m->buffered_bytes -= s.len;
        int r = 0;
        if (s.end > m->next)
            r = push(e, c, d, s.start, s.end, s.payload, s.len, s.frame, s.ts);
        PyMem_Free(s.payload);
        if (r < 0)
            return -1;
    }
    return 0;
}

/* engine._gap_acked: the receiver acknowledged bytes of direction d past a hole. */
static int gap_acked(Engine *e, Conn *c, int d, i64 ack_rel, i64 frame, double ts)
{
    Dir *m = &c->dirs[d];
    if (m->nbuf && ack_rel >= m->buf[0].start)
        return declare_gap(e, c, d, m->buf[0].start, frame, ts);
    return 0;
}

/* The buffered segment starting at `start`, or where it would go. */
static int seg_index(const Dir *m, i64 start, int *found)
{
    int lo = 0, hi = m->nbuf;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (m->buf[mid].start < start)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = lo < m->nbuf && m->buf[lo].start == start;
    return lo;
}

/* engine._deliver */
static int deliver(Engine *e, Conn *c, int d, i64 seq, i64 end, const uint8_t *payload, i64 len,
                   i64 frame, double ts)
{
    Dir *m = &c->dirs[d];
    if (end <= m->next)
        return 0;
    if (seq > m->next) {
        int found, i = seg_index(m, seq, &found);
        if (!found || m->buf[i].end < end) {
            uint8_t *copy = PyMem_Malloc(len ? (size_t)len : 1);
            if (copy == NULL)
                return fail_nomem(e);
            memcpy(copy, payload, (size_t)len);
            if (found) {
                m->buffered_bytes -= m->buf[i].len;
                PyMem_Free(m->buf[i].payload);
            } else {
                if (m->nbuf == m->capbuf) {
                    int cap = m->capbuf ? 2 * m->capbuf : 8;
                    Seg *b = PyMem_Realloc(m->buf, sizeof(Seg) * cap);
                    if (b == NULL) {
                        PyMem_Free(copy);
                        return fail_nomem(e);
                    }
                    m->buf = b;
                    m->capbuf = cap;
                }
                memmove(m->buf + i + 1, m->buf + i, sizeof(Seg) * (m->nbuf - i));
                m->nbuf++;
            }
            Seg s = {seq, end, copy, len, frame, ts};
            m->buf[i] = s;
            m->buffered_bytes += len;
        }
        if (m->buffered_bytes > MAX_BUFFERED_BYTES || m->nbuf > MAX_BUFFERED_SEGMENTS) {
            m->bound_gaps++;
            return declare_gap(e, c, d, m->buf[0].start, frame, ts);
        }
        return 0;
    }
    if (push(e, c, d, seq, end, payload, len, frame, ts) < 0)
        return -1;
    return m->nbuf ? drain(e, c, d) : 0;
}

static int hole_append(Dir *m, i64 start, i64 end, double opened)
{
    if (m->nholes == m->capholes) {
        int cap = m->capholes ? 2 * m->capholes : 8;
        Hole *h = PyMem_Realloc(m->holes, sizeof(Hole) * cap);
        if (h == NULL)
            return -1;
        m->holes = h;
        m->capholes = cap;
    }
    Hole h = {start, end, opened};
    m->holes[m->nholes++] = h;
    return 0;
}

static int by_start(const void *a, const void *b)
{
    i64 x = ((const Hole *)a)->start, y = ((const Hole *)b)->start;
    return (x > y) - (x < y);
}

/* engine._fill_holes: remove [seq, end) from the open holes; the never-seen bytes it held. */
static i64 fill_holes(Dir *m, i64 seq, i64 end, int *oom)
{
    i64 fresh = 0;
    for (int i = m->nholes - 1; i >= 0; i--) {
        Hole h = m->holes[i];
        if (h.end <= seq || h.start >= end)
            continue;
        i64 lo = seq > h.start ? seq : h.start, hi = end < h.end ? end : h.end;
        fresh += hi - lo;
        memmove(m->holes + i, m->holes + i + 1, sizeof(Hole) * (m->nholes - i - 1));
        m->nholes--;
        if ((h.start < lo && hole_append(m, h.start, lo, h.opened) < 0)
            || (hi < h.end && hole_append(m, hi, h.end, h.opened) < 0))
            *oom = 1;
    }
    if (m->nholes > MAX_HOLES) { /* splits past the bound: forget the holes furthest back */
        qsort(m->holes, m->nholes, sizeof(Hole), by_start);
        int drop = m->nholes - MAX_HOLES;
        m->holes_forgotten += drop;
        memmove(m->holes, m->holes + drop, sizeof(Hole) * MAX_HOLES);
        m->nholes = MAX_HOLES;
    }
    return fresh;
}

/* engine._data: classify the payload, count it, deliver it; returns `kind` (or -1). */
static int data(Engine *e, Conn *c, int d, i64 seq, i64 end, i64 plen, const uint8_t *payload,
                i64 captured, i64 frame, double ts)
{
    Dir *m = &c->dirs[d];
    i64 high = m->high;
    int kind, oom = 0;
    if (plen > m->max_segment)
        m->max_segment = plen;
    if (seq >= high) {
        kind = K_NEW;
        if (seq > high) {
            kind |= K_OUT_OF_ORDER;
            if (m->nholes < MAX_HOLES) {
                if (hole_append(m, high, seq, ts) < 0)
                    return fail_nomem(e);
            } else {
                m->holes_forgotten++;
            }
        }
        m->payload_bytes += plen;
        m->data_segments++;
        m->high = end;
        m->high_ts = ts;
    } else if (end <= high) {
        if (plen <= 1 && seq == high - 1) {
            m->keepalives++;
            return K_KEEPALIVE;
        }
        i64 fresh = fill_holes(m, seq, end, &oom);
        if (fresh) {
            m->payload_bytes += fresh;
            m->data_segments++;
            kind = K_FILLS_HOLE;
            if (ts - m->high_ts < OOO_THRESHOLD_S) {
                m->ooo_segments++;
                ev_note(&m->ev_ooo, frame);
            } else {
                kind |= K_RETRANS;
                m->retrans_segments++;
                m->retrans_bytes += plen;
                ev_note(&m->ev_retrans, frame);
            }
        } else {
            kind = K_RETRANS;
            m->retrans_segments++;
            m->retrans_bytes += plen;
            ev_note(&m->ev_retrans, frame);
        }
    } else {
        kind = K_NEW | K_PARTIAL_RETRANS;
        i64 fresh = end - high + fill_holes(m, seq, high, &oom);
        m->payload_bytes += fresh;
        m->data_segments++;
        m->retrans_segments++;
        m->retrans_bytes += plen - fresh;
        ev_note(&m->ev_retrans, frame);
        m->high = end;
        m->high_ts = ts;
    }
    if (oom)
        return fail_nomem(e);
    if (captured < plen) {
        m->truncated_bytes += plen - captured;
        m->truncated_segments++;
        ev_note(&m->ev_trunc, frame);
    }
    if (deliver(e, c, d, seq, end, payload, captured, frame, ts) < 0)
        return -1;
    return kind;
}

/* engine.feed */
static int feed(Engine *e, const Pkt *p)
{
    const DecodedTcp *t = &p->t;
    int d;
    Conn *c = lookup(e, p, &d);
    if (c == NULL)
        return e->failed ? -1 : 0;
    unsigned flags = t->flags;
    i64 frame = p->frame, plen = t->plen;
    double ts = p->ts;
    c->packets++;
    c->end_ts = ts;
    c->last_frame = frame;
    Dir *mine = &c->dirs[d], *peer = &c->dirs[1 - d];
    i64 seq_rel, end;
    if (flags & F_SYN) {
        mine->syn = parse_syn(t->options, t->optlen);
        mine->base = ((i64)t->seq + 1) & MASK32;
        c->view[d].isn_seen = 1;
        if (flags & F_ACK)
            c->handshake_seen = c->view[1 - d].isn_seen;
        update_scale(c, d);
        update_scale(c, 1 - d);
        seq_rel = end = 0;
    } else {
        if (mine->base < 0)
            mine->base = t->seq;
        seq_rel = unwrap(mine, t->seq);
        end = seq_rel + plen;
    }
    /* the peer's stream: this packet acknowledges up to ack_rel */
    i64 ack_rel = -1;
    if (flags & F_ACK) {
        if (peer->base < 0)
            peer->base = t->ack;
        ack_rel = unwrap(peer, t->ack);
        if (ack_rel > peer->max_acked) {
            peer->max_acked = ack_rel;
            if (peer->nbuf && gap_acked(e, c, 1 - d, ack_rel, frame, ts) < 0)
                return -1;
        }
    }
    /* window: scaled when the handshake proves the factor; SYN windows are never scaled */
    i64 win = t->win, scaled_win = win;
    if (!(flags & F_SYN)) {
        if (mine->wscale)
            scaled_win = win << mine->wscale;
        if (win == 0 && !(flags & (F_RST | F_FIN))) {
            mine->zero_window_events++;
            ev_note(&mine->ev_zero, frame);
        } else if (plen == 0 && !(flags & (F_FIN | F_RST)) && win != mine->last_win
                   && mine->last_win >= 0 && ack_rel == mine->last_ack
                   && seq_rel == mine->last_seq) {
            mine->window_updates++;
        }
        /* data sent beyond the receiver's raw window proves a minimum scale factor */
        if (plen && !c->view[1 - d].wscale_known && peer->last_win > 0 && peer->last_ack >= 0) {
            i64 inflight = end - peer->last_ack, lim = peer->last_win;
            while (peer->wscale_lb < 14 && inflight > lim << peer->wscale_lb)
                peer->wscale_lb++;
        }
    }
    mine->last_win = win;
    mine->last_ack = ack_rel;
    mine->last_seq = seq_rel;
    int kind = 0;
    if (plen) {
        kind = data(e, c, d, seq_rel, end, plen, t->payload, t->caplen, frame, ts);
        if (kind < 0)
            return -1;
    }
    if (flags & (F_FIN | F_RST)) {
        int was_open = c->closed_by == CLOSED_NONE;
        if (flags & F_FIN) {
            mine->has_fin = 1;
            mine->fin_at = end;
            if (was_open && peer->has_fin)
                c->closed_by = CLOSED_FIN;
        }
        if (flags & F_RST) {
            mine->rst = 1;
            c->closed_by = CLOSED_RST;
        }
        if (was_open && c->closed_by != CLOSED_NONE && e->has_linger
            && queue_push(&e->closing, c) < 0)
            return fail_nomem(e);
    }
    if (c->closed_by != CLOSED_NONE && !c->settled && e->has_linger
        && (c->closed_by == CLOSED_RST
            || (mine->max_acked > (mine->has_fin ? mine->fin_at : 0)
                && peer->max_acked > (peer->has_fin ? peer->fin_at : 0)))) {
        /* a RST, or both FINs acknowledged: what can still come is what crossed the RST (a
         * round trip), or a FIN retransmitted for an ACK lost past the capture point */
        c->settled = 1;
        if (queue_push(&e->settled, c) < 0)
            return fail_nomem(e);
        e->settled_waiting++;
    }
    if (tr_packet(c->tr, d, frame, ts, seq_rel, end, ack_rel, scaled_win, (int)flags, kind) < 0)
        return -1;
    return 0;
}

int engine_feed(Engine *e, const Pkt *p)
{
    if (e->failed)
        return -1;
    if (feed(e, p) < 0) {
        e->failed = 1;
        return -1;
    }
    return 0;
}

/* engine._finish_connection */
static int finish_conn(Engine *e, Conn *c)
{
    if (c->finished)
        return 0;
    c->finished = 1;
    for (int d = 0; d < 2; d++) {
        Dir *m = &c->dirs[d];
        while (m->nbuf) {
            i64 before = m->nbuf;
            if (declare_gap(e, c, d, m->buf[0].start, c->last_frame, c->end_ts) < 0)
                return -1;
            if (m->nbuf == before && drain(e, c, d) < 0) /* (cannot happen: starts > next) */
                return -1;
        }
        /* acknowledged but never captured at the tail (a FIN takes one sequence number) */
        i64 acked = m->max_acked - (m->has_fin ? 1 : 0);
        if (acked > m->high && m->high >= m->next) {
            m->high = acked;
            if (declare_gap(e, c, d, acked, c->last_frame, c->end_ts) < 0)
                return -1;
        }
    }
    if (c->conv != NULL && pg_finish(c->conv) < 0)
        return -1;
    DirInfo info[2] = {dir_info(c, 0), dir_info(c, 1)};
    return tr_finish(c->tr, info);
}

/* engine._sweep: retire from the head of `q` those silent for `linger`, and while more than
 * `most` settled connections wait (-1: no bound) the oldest, silent or not. */
static int sweep_queue(Engine *e, Queue *q, double now, double linger, i64 most)
{
    Conn *c;
    while ((c = queue_head(q)) != NULL) {
        if (!c->finished) {
            if (now - c->end_ts < linger && !(0 <= most && most < e->settled_waiting))
                return 0;
            if (retire(e, c, 1) < 0)
                return -1;
        }
        queue_pop(q);
    }
    return 0;
}

int engine_sweep(Engine *e, double now)
{
    if (e->failed)
        return -1;
    if (!e->has_linger || !e->has_settled_linger)
        return 0;
    if (sweep_queue(e, &e->settled, now, e->settled_linger, MAX_SETTLED) < 0
        || sweep_queue(e, &e->closing, now, e->linger, -1) < 0) {
        e->failed = 1;
        return -1;
    }
    return 0;
}

static int by_number(const void *a, const void *b)
{
    i64 x = (*(Waiting *const *)a)->number, y = (*(Waiting *const *)b)->number;
    return (x > y) - (x < y);
}

int engine_finish(Engine *e)
{
    if (e->failed)
        return -1;
    /* the connections kept as handshakes: made one at a time, in the order they were kept,
     * and retired at once (a flood's unanswered SYNs stay small) */
    i64 n = 0;
    Waiting **kept = PyMem_Malloc(sizeof(Waiting *) * (e->waiting.n / 2 + 1));
    if (kept == NULL)
        return fail_nomem(e);
    for (i64 i = 0; i < e->waiting.cap; i++) {
        Slot *s = &e->waiting.slots[i];
        if (s->used && s->side == 0)
            kept[n++] = s->value;
    }
    qsort(kept, (size_t)n, sizeof(Waiting *), by_number);
    for (i64 i = 0; i < n; i++) {
        Conn *c = make_waiting(e, kept[i]);
        if ((c == NULL && e->failed) || (c != NULL && retire(e, c, 0) < 0)) {
            PyMem_Free(kept);
            e->failed = 1;
            return -1;
        }
    }
    PyMem_Free(kept);
    for (Conn *c = e->live_head; c != NULL; c = c->next)
        if (finish_conn(e, c) < 0) {
            e->failed = 1;
            return -1;
        }
    return 0;
}

int engine_report_live(Engine *e)
{
    for (Conn *c = e->live_head; c != NULL; c = c->next) {
        if (e->retired(e, c) < 0) {
            e->failed = 1;
            return -1;
        }
        drop_analyses(c);
    }
    return 0;
}

int engine_init(Engine *e, int has_linger, double linger, int has_settled, double settled)
{
    memset(e, 0, sizeof *e);
    e->has_linger = has_linger;
    e->linger = linger;
    /* the settled linger in effect: never longer than linger */
    e->has_settled_linger = has_linger;
    e->settled_linger = has_settled && settled < linger ? settled : linger;
    return 0;
}

void engine_free(Engine *e)
{
    Conn *c = e->live_head;
    while (c != NULL) {
        Conn *next = c->next;
        c->live = 0;
        if (!c->queued)
            conn_free(c);
        c = next;
    }
    e->live_head = e->live_tail = NULL;
    Queue *qs[2] = {&e->closing, &e->settled};
    for (int i = 0; i < 2; i++) {
        while (qs[i]->n)
            queue_pop(qs[i]);
        PyMem_Free(qs[i]->items);
    }
    for (i64 i = 0; i < e->waiting.cap; i++) {
        Slot *s = &e->waiting.slots[i];
        if (s->used && s->side == 0) /* each is under both orientations: freed once */
            waiting_free(s->value);
    }
    map_free(&e->table);
    map_free(&e->waiting);
    PyMem_Free(e->gone.slots);
    PyMem_Free(e->gone.ring);
    memset(&e->gone, 0, sizeof e->gone);
}
