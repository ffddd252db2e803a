/* PostgreSQL framing for the native decoder: the twins of pktflow.pgwire.framing (message_run,
 * the boundary search of a stream joined mid-way) and pktflow.pgwire.tls (the ALPN list of a
 * direct-TLS ClientHello), for pgwire.c (pgframe.h). Every read is bounded by the buffer's
 * length: the bytes are whatever a capture held. */
#include "pgframe.h"

#include <string.h>

#define MAX_CONTROL ((i64)1 << 24)
#define CHAIN 3

/* Which type bytes each side sends, and those only it sends (pgwire.messages). */
static const char FRONT_TYPES[] = "QPBEDSHCdcfFXp";
static const char BACK_TYPES[] = "RKSZTDCIENA123tnsGHWdcVv";

static unsigned char types_[2][256], only_[2][256], first_[3][256];
static int tables_ready;

static void tables(void)
{
    if (tables_ready)
        return;
    for (const char *p = FRONT_TYPES; *p; p++)
        types_[0][(unsigned char)*p] = 1;
    for (const char *p = BACK_TYPES; *p; p++)
        types_[1][(unsigned char)*p] = 1;
    for (int t = 0; t < 256; t++) {
        only_[0][t] = types_[0][t] && !types_[1][t];
        only_[1][t] = types_[1][t] && !types_[0][t];
        first_[0][t] = types_[0][t];
        first_[1][t] = types_[1][t];
        first_[2][t] = types_[0][t] || types_[1][t];
    }
    tables_ready = 1;
}

static inline i64 be32(const uint8_t *p)
{
    return ((i64)p[0] << 24) | ((i64)p[1] << 16) | ((i64)p[2] << 8) | (i64)p[3];
}

/* framing.message_run: the run of messages of b[pos]'s type from pos (a whole header there):
 * how many, where the run ends (may be past n: the last one continues), and the malformed
 * length that stopped it or -1. */
void pgf_message_run(const uint8_t *b, Py_ssize_t n, Py_ssize_t pos, i64 *count, i64 *end,
                     i64 *bad)
{
    int t = b[pos];
    i64 p = pos, k = 0;
    for (;;) {
        i64 ln = be32(b + p + 1);
        if (ln < 4 || ln > MAX_MESSAGE) {
            *count = k;
            *end = p;
            *bad = ln;
            return;
        }
        k++;
        p += 1 + ln;
        if (n - p < 5 || b[p] != t) {
            *count = k;
            *end = p;
            *bad = -1;
            return;
        }
    }
}

static inline int plausible(int t, i64 ln, int side)
{
    if (ln < 4 || ln > MAX_MESSAGE || !types_[side][t])
        return 0;
    if (t == 'Z' && ln != 5)
        return 0;
    return ln <= MAX_CONTROL || t == 'D' || t == 'd';
}

/* framing._chain: messages of a chain for `side` at pos (0: none), whether it proves the
 * side, and whether more bytes could change the answer (!*final). */
static int chain(const uint8_t *b, i64 n, i64 pos, int side, int *proof, int *final)
{
    int count = 0;
    *proof = 0;
    while (count < CHAIN) {
        if (n - pos < 5) {
            *final = 0;
            return pos == n ? count : 0;
        }
        int t = b[pos];
        i64 ln = be32(b + pos + 1);
        if (!plausible(t, ln, side)) {
            *final = 1;
            return 0;
        }
        if (only_[side][t])
            *proof = 1;
        pos += 1 + ln;
        count++;
        if (pos > n) {
            *final = 0;
            return count > 1 ? count : 0;
        }
    }
    *final = 1;
    return count;
}

/* framing.BoundaryScan. `sides`: 0 or 1 for that side alone, 2 for (frontend, backend). */
struct PgScan {
    int sides, need_proof;
    i64 done;
    i64 *pending, npending, cap; /* stream offsets still undecided, ascending */
    i64 *spare, spare_cap; /* the next pending list, built while the old one is read */
};
typedef struct PgScan PgScan;

PgScan *pgf_scan_new(void)
{
    PgScan *sc = PyMem_Calloc(1, sizeof *sc);
    if (sc == NULL)
        PyErr_NoMemory();
    return sc;
}

/* Begin a new search (a new BoundaryScan(sides, need_proof)), keeping the memory. */
void pgf_scan_reset(PgScan *sc, int sides, int need_proof)
{
    sc->sides = sides;
    sc->need_proof = need_proof;
    sc->done = 0;
    sc->npending = 0;
}

void pgf_scan_free(PgScan *sc)
{
    if (sc == NULL)
        return;
    PyMem_Free(sc->pending);
    PyMem_Free(sc->spare);
    PyMem_Free(sc);
}

static int push(i64 **a, i64 *n, i64 *cap, i64 v)
{
    if (*n == *cap) {
        i64 c = *cap ? 2 * *cap : 64;
        i64 *p = PyMem_Realloc(*a, sizeof(i64) * (size_t)c);
        if (p == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        *a = p;
        *cap = c;
    }
    (*a)[(*n)++] = v;
    return 0;
}

/* One position of BoundaryScan.find: 1 with *side on a boundary, else 0 and *undecided. */
static int judge(const PgScan *sc, const uint8_t *b, i64 n, i64 pos, int *side, int *undecided)
{
    int lo = sc->sides == 2 ? 0 : sc->sides, hi = sc->sides == 2 ? 1 : sc->sides;
    *undecided = 0;
    for (int sd = lo; sd <= hi; sd++) {
        int proof, final;
        int count = chain(b, n, pos, sd, &proof, &final);
        if (count && (proof || !sc->need_proof)) {
            *side = sd;
            return 1;
        }
        if (!final)
            *undecided = 1;
    }
    return 0;
}

/* BoundaryScan.find over b[0:n], whose first byte is at stream offset `base`: 1 with the
 * boundary's position and side, 0 for none yet, -1 out of memory. With record == 0 (a
 * one-off find_boundary) the undecided positions are not kept. */
/* One position of the search: 1 when a boundary is there, 0 when not (kept, when recording,
 * to be retried if more bytes could still decide it), -1 out of memory. */
static int consider(PgScan *sc, const uint8_t *b, i64 n, i64 pos, i64 base, int record,
                    i64 *nspare, int *side)
{
    int undecided;
    if (!first_[sc->sides][b[pos]])
        return 0;
    if (judge(sc, b, n, pos, side, &undecided))
        return 1;
    if (undecided && record && push(&sc->spare, nspare, &sc->spare_cap, pos + base) < 0)
        return -1;
    return 0;
}

int pgf_scan_find(PgScan *sc, const uint8_t *b, Py_ssize_t n, i64 base, int record,
                  Py_ssize_t *at, int *side)
{
    tables();
    i64 end = (i64)n - 4;
    i64 nspare = 0;
    /* the positions left undecided last time are retried first, as the Python does */
    for (i64 i = 0; i < sc->npending; i++) {
        i64 pos = sc->pending[i] - base;
        if (pos < 0 || pos >= n)
            continue;
        int r = consider(sc, b, n, pos, base, record, &nspare, side);
        if (r) {
            *at = (Py_ssize_t)pos;
            return r;
        }
    }
    i64 from = sc->done - base;
    if (from < 0)
        from = 0;
    for (i64 pos = from; pos < end; pos++) {
        int r = consider(sc, b, n, pos, base, record, &nspare, side);
        if (r) {
            *at = (Py_ssize_t)pos;
            return r;
        }
    }
    i64 *old = sc->pending, oldcap = sc->cap;
    sc->pending = sc->spare;
    sc->cap = sc->spare_cap;
    sc->npending = nspare;
    sc->spare = old;
    sc->spare_cap = oldcap;
    if (base + end > sc->done)
        sc->done = base + end;
    return 0;
}

/* framing.find_boundary(b, (side,), need_proof): 1 with the position, else 0. */
int pgf_find_boundary(const uint8_t *b, Py_ssize_t n, int side, int need_proof, Py_ssize_t *at)
{
    PgScan sc;
    int sd;
    memset(&sc, 0, sizeof sc);
    pgf_scan_reset(&sc, side, need_proof);
    return pgf_scan_find(&sc, b, n, 0, 0, at, &sd); /* nothing recorded: cannot fail */
}

/* ---- tls.client_hello_alpn ------------------------------------------------------------- */


static inline i64 be16(const uint8_t *p) { return ((i64)p[0] << 8) | p[1]; }

/* The ALPN list of a ClientHello at b[0]: ALPN_LIST with the names' bytes in b[*j:*stop] (each
 * a length byte and the name, cut at *hs_end as Python slices it; *j == *stop: no names),
 * ALPN_NEED_MORE while the record is incomplete, ALPN_NOT_TLS for other bytes. */
int pgf_client_hello(const uint8_t *b, Py_ssize_t n, i64 *j, i64 *stop, i64 *hs_end)
{
    *j = *stop = *hs_end = 0;
    if (n < 3)
        return (n == 0 || b[0] == 0x16) ? ALPN_NEED_MORE : ALPN_NOT_TLS;
    if (!(b[0] == 0x16 && b[1] == 3 && b[2] <= 4))
        return ALPN_NOT_TLS;
    if (n < 5)
        return ALPN_NEED_MORE;
    i64 reclen = be16(b + 3);
    if (n < 5 + reclen)
        return ALPN_NEED_MORE;
    const uint8_t *hs = b + 5;
    i64 len = reclen;
    if (len < 4 || hs[0] != 0x01)
        return ALPN_NOT_TLS;
    i64 i = 4 + 2 + 32;
    /* Python indexes hs[i] (IndexError past the end) and unpacks 2 bytes (struct.error when
     * fewer remain): both are "not TLS" */
    if (i >= len)
        return ALPN_NOT_TLS;
    i += 1 + hs[i];
    if (i + 2 > len)
        return ALPN_NOT_TLS;
    i += 2 + be16(hs + i);
    if (i >= len)
        return ALPN_NOT_TLS;
    i += 1 + hs[i];
    if (i == len)
        return ALPN_LIST; /* no extensions: [] */
    if (i + 2 > len)
        return ALPN_NOT_TLS;
    i64 ext_len = be16(hs + i);
    i += 2;
    i64 end = i + ext_len < len ? i + ext_len : len;
    while (i + 4 <= end) {
        i64 etype = be16(hs + i), elen = be16(hs + i + 2);
        i += 4;
        if (etype == 0x0010) {
            i64 st = i + elen < end ? i + elen : end;
            *j = 5 + i + 2;
            *stop = 5 + st;
            if (*j > *stop)
                *j = *stop;
            *hs_end = 5 + len;
            return ALPN_LIST;
        }
        i += elen;
    }
    return ALPN_LIST; /* no ALPN: [] */
}
