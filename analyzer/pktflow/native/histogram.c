/* Counts of integer values: the twins of pktflow.transfer.histogram's Histogram, Quantiles and
 * Bins (see that module for what they are for). Same results for the same values added, which
 * is all the report sees: the Python classes' dicts become an insertion-ordered table here. */
#include "core.h"

#include <stdlib.h>
#include <string.h>

#define EXACT_KEYS 1024
#define EXACT_BITS 8
#define HALF (1 << (EXACT_BITS - 1))
#define DENSE_AFTER 32
#define DENSE_RATIO 11

static int bit_length(i64 v)
{
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    return u ? 64 - __builtin_clzll(u) : 0;
}

static i64 coarse(i64 v)
{
    if (v < 16)
        return v;
    int shift = bit_length(v) - 4;
    return (v >> shift) << shift;
}

/* ---- the table: keys in first-counted order, found by open addressing ----------------------- */

void hist_init(Hist *h, i64 cap)
{
    memset(h, 0, sizeof *h);
    h->cap = cap;
    h->last = -1;
}

void hist_free(Hist *h)
{
    PyMem_Free(h->keys);
    PyMem_Free(h->counts);
    PyMem_Free(h->slots);
    i64 cap = h->cap;
    hist_init(h, cap);
}

static inline uint64_t mix(i64 v)
{
    uint64_t x = (uint64_t)v * 0x9E3779B97F4A7C15ULL;
    return x ^ (x >> 29);
}

/* The index of key v, or -1. */
static i64 find(const Hist *h, i64 v)
{
    if (h->n_keys <= 8) { /* most: a handful of values, scanned */
        for (i64 i = 0; i < h->n_keys; i++)
            if (h->keys[i] == v)
                return i;
        return -1;
    }
    uint64_t mask = (uint64_t)h->n_slots - 1;
    for (uint64_t s = mix(v) & mask;; s = (s + 1) & mask) {
        int32_t k = h->slots[s];
        if (!k)
            return -1;
        if (h->keys[k - 1] == v)
            return k - 1;
    }
}

static int rehash(Hist *h, i64 n_slots)
{
    int32_t *slots = PyMem_Calloc((size_t)n_slots, sizeof(int32_t));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    PyMem_Free(h->slots);
    h->slots = slots;
    h->n_slots = n_slots;
    uint64_t mask = (uint64_t)n_slots - 1;
    for (i64 i = 0; i < h->n_keys; i++) {
        uint64_t s = mix(h->keys[i]) & mask;
        while (slots[s])
            s = (s + 1) & mask;
        slots[s] = (int32_t)(i + 1);
    }
    return 0;
}

/* counts[v] += k, appending v as a new key if it is not one. */
static int bump(Hist *h, i64 v, i64 k)
{
    i64 i = find(h, v);
    if (i >= 0) {
        h->counts[i] += k;
        return 0;
    }
    if (h->n_keys == h->cap_keys) {
        i64 cap = h->cap_keys ? 2 * h->cap_keys : 4;
        i64 *keys = PyMem_Realloc(h->keys, sizeof(i64) * cap);
        if (keys == NULL)
            goto oom;
        h->keys = keys;
        i64 *counts = PyMem_Realloc(h->counts, sizeof(i64) * cap);
        if (counts == NULL)
            goto oom;
        h->counts = counts;
        h->cap_keys = cap;
    }
    h->keys[h->n_keys] = v;
    h->counts[h->n_keys] = k;
    h->n_keys++;
    if (h->n_keys > 8) {
        if (2 * h->n_keys > h->n_slots) {
            if (rehash(h, h->n_slots ? 2 * h->n_slots : 32) < 0)
                return -1;
        } else {
            uint64_t mask = (uint64_t)h->n_slots - 1, s = mix(v) & mask;
            while (h->slots[s])
                s = (s + 1) & mask;
            h->slots[s] = (int32_t)h->n_keys;
        }
    }
    return 0;
oom:
    PyErr_NoMemory();
    return -1;
}

/* Histogram._put */
static int hist_put(Hist *h, i64 v, i64 k)
{
    if (find(h, v) >= 0 || h->n_keys < h->cap)
        return bump(h, v, k);
    return bump(h, coarse(v), k);
}

static int hist_flush(Hist *h)
{
    if (h->run) {
        int r = hist_put(h, h->last, h->run);
        h->last = -1;
        h->run = 0;
        return r;
    }
    return 0;
}

int hist_add(Hist *h, i64 v)
{
    if (v == h->last) {
        h->run++;
        return 0;
    }
    if (h->run && hist_put(h, h->last, h->run) < 0)
        return -1;
    h->last = v;
    h->run = 1;
    return 0;
}

i64 hist_n(Hist *h)
{
    hist_flush(h);
    i64 n = 0;
    for (i64 i = 0; i < h->n_keys; i++)
        n += h->counts[i];
    return n;
}

typedef struct {
    i64 v, c;
} Pair;

static int by_value(const void *a, const void *b)
{
    i64 x = ((const Pair *)a)->v, y = ((const Pair *)b)->v;
    return (x > y) - (x < y);
}

static int by_count(const void *a, const void *b) /* (-count, value) */
{
    const Pair *x = a, *y = b;
    if (x->c != y->c)
        return (x->c < y->c) - (x->c > y->c);
    return (x->v > y->v) - (x->v < y->v);
}

/* The (value, count) pairs, sorted by `cmp`: PyMem_Malloc'd, NULL when there are none or on
 * failure (*n then -1 with an exception). */
static Pair *pairs(Hist *h, int (*cmp)(const void *, const void *), i64 *n)
{
    hist_flush(h);
    *n = h->n_keys;
    if (!h->n_keys)
        return NULL;
    Pair *p = PyMem_Malloc(sizeof(Pair) * h->n_keys);
    if (p == NULL) {
        PyErr_NoMemory();
        *n = -1;
        return NULL;
    }
    for (i64 i = 0; i < h->n_keys; i++) {
        p[i].v = h->keys[i];
        p[i].c = h->counts[i];
    }
    if (h->n_keys <= 16) { /* most of a connection's: an insertion sort, no qsort setup */
        for (i64 i = 1; i < h->n_keys; i++) {
            Pair x = p[i];
            i64 j = i;
            for (; j > 0 && cmp(&p[j - 1], &x) > 0; j--)
                p[j] = p[j - 1];
            p[j] = x;
        }
    } else {
        qsort(p, h->n_keys, sizeof(Pair), cmp);
    }
    return p;
}

/* histogram._quantile over (value, count) pairs in increasing order of value */
static int quantile_of(const Pair *p, i64 n, double q, i64 *out)
{
    if (n <= 0)
        return 0;
    i64 total = 0;
    for (i64 i = 0; i < n; i++)
        total += p[i].c;
    double target = q * (double)(total - 1);
    i64 run = 0;
    for (i64 i = 0; i < n; i++) {
        run += p[i].c;
        if ((double)run > target) {
            *out = p[i].v;
            return 1;
        }
    }
    *out = p[n - 1].v;
    return 1;
}

int hist_quantile(Hist *h, double q, i64 *out)
{
    hist_flush(h);
    if (h->n_keys == 1) {
        *out = h->keys[0];
        return 1;
    }
    i64 n;
    Pair *p = pairs(h, by_value, &n);
    int r = quantile_of(p, n, q, out);
    PyMem_Free(p);
    return r;
}

int hist_median(Hist *h, i64 *out) { return hist_quantile(h, 0.5, out); }

int hist_hi(Hist *h, i64 *out)
{
    hist_flush(h);
    if (!h->n_keys)
        return 0;
    i64 hi = h->keys[0];
    for (i64 i = 1; i < h->n_keys; i++)
        if (h->keys[i] > hi)
            hi = h->keys[i];
    *out = hi;
    return 1;
}

int hist_mode(Hist *h, i64 *out)
{
    hist_flush(h);
    i64 most = 0;
    int found = 0;
    for (i64 i = 0; i < h->n_keys; i++) {
        if (h->counts[i] > most) {
            most = h->counts[i];
            *out = h->keys[i];
            found = 1;
        }
    }
    return found;
}

i64 hist_get(Hist *h, i64 v)
{
    hist_flush(h);
    i64 i = find(h, v);
    return i < 0 ? 0 : h->counts[i];
}

int hist_top(Hist *h, int k, i64 *values, i64 *counts)
{
    hist_flush(h);
    Pair small[8], *p = small;
    i64 n = h->n_keys;
    if (n > 8) { /* sorted by (-count, value) */
        p = pairs(h, by_count, &n);
        if (n < 0) {
            PyErr_Clear();
            n = 0;
        }
    } else { /* most: a few values, sorted in place */
        for (i64 i = 0; i < n; i++) {
            Pair x = {h->keys[i], h->counts[i]};
            i64 j = i;
            for (; j > 0 && by_count(&small[j - 1], &x) > 0; j--)
                small[j] = small[j - 1];
            small[j] = x;
        }
    }
    int m = n < k ? (int)n : k;
    for (int i = 0; i < m; i++) {
        values[i] = p[i].v;
        counts[i] = p[i].c;
    }
    if (p != small)
        PyMem_Free(p);
    return m;
}

void hist_top_json(Hist *h, int k, JsonW *w)
{
    char key[32];
    i64 values[32], counts[32];
    int m = hist_top(h, k < 32 ? k : 32, values, counts);
    jw_obj(w);
    for (int i = 0; i < m; i++) {
        jw_key(w, fmt_int(key, values[i], 0));
        jw_int(w, counts[i]);
    }
    jw_obj_end(w);
}

/* ---- Quantiles ---------------------------------------------------------------------------- */

#define NO_CAP ((i64)1 << 62)

void quant_init(Quant *q)
{
    memset(q, 0, sizeof *q);
    hist_init(&q->exact, NO_CAP);
    hist_init(&q->neg, NO_CAP);
    q->last = -1;
}

void quant_free(Quant *q)
{
    hist_free(&q->exact);
    hist_free(&q->neg);
    PyMem_Free(q->bcounts);
    PyMem_Free(q->bleast);
    quant_init(q);
}

static i64 bucket(i64 v)
{
    if (v < (1 << EXACT_BITS))
        return v;
    int shift = bit_length(v) - EXACT_BITS;
    return (i64)shift * HALF + (v >> shift);
}

static int bucket_put(Quant *q, i64 v, i64 k)
{
    if (v < 0)
        return bump(&q->neg, v, k);
    i64 b = bucket(v);
    if (b >= q->nb) {
        i64 nb = b + 1;
        i64 *c = PyMem_Realloc(q->bcounts, sizeof(i64) * nb);
        if (c == NULL)
            goto oom;
        q->bcounts = c;
        i64 *l = PyMem_Realloc(q->bleast, sizeof(i64) * nb);
        if (l == NULL)
            goto oom;
        q->bleast = l;
        memset(c + q->nb, 0, sizeof(i64) * (nb - q->nb));
        memset(l + q->nb, 0, sizeof(i64) * (nb - q->nb));
        q->nb = nb;
    }
    if (q->bcounts[b] == 0 || v < q->bleast[b])
        q->bleast[b] = v;
    q->bcounts[b] += k;
    return 0;
oom:
    PyErr_NoMemory();
    return -1;
}

static int quant_put(Quant *q, i64 v, i64 k)
{
    q->n += k;
    if (!q->has_hi || v > q->hi) {
        q->hi = v;
        q->has_hi = 1;
    }
    if (q->bucketed)
        return bucket_put(q, v, k);
    if (bump(&q->exact, v, k) < 0)
        return -1;
    if (q->exact.n_keys > EXACT_KEYS) {
        q->bucketed = 1;
        for (i64 i = 0; i < q->exact.n_keys; i++)
            if (bucket_put(q, q->exact.keys[i], q->exact.counts[i]) < 0)
                return -1;
        hist_free(&q->exact);
    }
    return 0;
}

static int quant_flush(Quant *q)
{
    if (q->run) {
        int r = quant_put(q, q->last, q->run);
        q->last = -1;
        q->run = 0;
        return r;
    }
    return 0;
}

int quant_add(Quant *q, i64 v)
{
    if (v == q->last) {
        q->run++;
        return 0;
    }
    if (q->run && quant_put(q, q->last, q->run) < 0)
        return -1;
    q->last = v;
    q->run = 1;
    return 0;
}

i64 quant_n(Quant *q)
{
    quant_flush(q);
    return q->n;
}

int quant_hi(Quant *q, i64 *out)
{
    quant_flush(q);
    if (q->has_hi)
        *out = q->hi;
    return q->has_hi;
}

int quant_quantile(Quant *q, double p, i64 *out)
{
    quant_flush(q);
    i64 n;
    Pair *v;
    if (!q->bucketed) {
        v = pairs(&q->exact, by_value, &n);
    } else {
        Pair *neg = pairs(&q->neg, by_value, &n);
        if (n < 0)
            return 0;
        i64 used = 0;
        for (i64 b = 0; b < q->nb; b++)
            used += q->bcounts[b] != 0;
        v = PyMem_Realloc(neg, sizeof(Pair) * (n + used + 1));
        if (v == NULL) {
            PyMem_Free(neg);
            PyErr_NoMemory();
            return 0;
        }
        for (i64 b = 0; b < q->nb; b++) {
            if (q->bcounts[b]) {
                v[n].v = q->bleast[b];
                v[n].c = q->bcounts[b];
                n++;
            }
        }
    }
    if (n < 0) {
        PyErr_Clear();
        return 0;
    }
    int r = quantile_of(v, n, p, out);
    PyMem_Free(v);
    return r;
}

int quant_median(Quant *q, i64 *out) { return quant_quantile(q, 0.5, out); }

/* ---- Bins --------------------------------------------------------------------------------- */

void bins_init(Bins *b)
{
    memset(b, 0, sizeof *b);
    hist_init(&b->sparse, NO_CAP);
    b->hi = -1;
}

void bins_free(Bins *b)
{
    PyMem_Free(b->dense);
    hist_free(&b->sparse);
    bins_init(b);
}

int bins_add(Bins *b, i64 i, i64 n)
{
    if (i > b->hi)
        b->hi = i;
    if (b->is_dense && i >= 0) {
        if (i >= b->size) { /* grown 4,096 bins at least */
            i64 grow = i + 1 - b->size;
            if (grow < 4096)
                grow = 4096;
            i64 *d = PyMem_Realloc(b->dense, sizeof(i64) * (b->size + grow));
            if (d == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            memset(d + b->size, 0, sizeof(i64) * grow);
            b->dense = d;
            b->size += grow;
        }
        if (!b->dense[i])
            b->count++;
        b->dense[i] += n;
        return 0;
    }
    if (find(&b->sparse, i) < 0)
        b->count++;
    if (bump(&b->sparse, i, n) < 0)
        return -1;
    if (!b->is_dense && b->sparse.n_keys >= DENSE_AFTER
        && b->hi < DENSE_RATIO * b->sparse.n_keys) {
        i64 size = b->hi + 1;
        i64 *d = PyMem_Calloc((size_t)size, sizeof(i64));
        if (d == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        Hist neg;
        hist_init(&neg, NO_CAP);
        for (i64 k = 0; k < b->sparse.n_keys; k++) {
            i64 idx = b->sparse.keys[k], c = b->sparse.counts[k];
            if (idx >= 0)
                d[idx] = c;
            else if (bump(&neg, idx, c) < 0) {
                PyMem_Free(d);
                hist_free(&neg);
                return -1;
            }
        }
        hist_free(&b->sparse);
        b->sparse = neg;
        b->dense = d;
        b->size = size;
        b->is_dense = 1;
    }
    return 0;
}

i64 bins_len(Bins *b) { return b->count; }

i64 bins_get(Bins *b, i64 i)
{
    if (b->is_dense && i >= 0)
        return i < b->size ? b->dense[i] : 0;
    return hist_get(&b->sparse, i);
}

void bins_most(Bins *b, i64 *index, i64 *count)
{
    i64 best_i = 0, best = -1, n;
    Pair *p = pairs(&b->sparse, by_value, &n);
    if (n < 0)
        PyErr_Clear();
    for (i64 k = 0; k < n; k++) {
        if (p[k].c > best) {
            best_i = p[k].v;
            best = p[k].c;
        }
    }
    PyMem_Free(p);
    if (b->is_dense) {
        for (i64 i = 0; i < b->size; i++) {
            if (b->dense[i] && b->dense[i] > best) {
                best_i = i;
                best = b->dense[i];
            }
        }
    }
    *index = best_i;
    *count = best;
}

i64 bins_least(Bins *b, i64 end)
{
    if (b->count < end) { /* some index in [0, end) has no count: the first */
        if (b->is_dense) {
            i64 stop = end < b->size ? end : b->size;
            for (i64 i = 0; i < stop; i++)
                if (!b->dense[i])
                    return i;
            return b->size;
        }
        for (i64 i = 0; i < end; i++)
            if (find(&b->sparse, i) < 0)
                return i;
        return 0; /* unreachable: fewer counts than indexes */
    }
    i64 best_i = 0, best = 0;
    for (i64 i = 0; i < end; i++) {
        i64 c = bins_get(b, i);
        if (i == 0 || c < best) {
            best_i = i;
            best = c;
        }
    }
    return best_i;
}
