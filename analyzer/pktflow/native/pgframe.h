/* The PostgreSQL framing (pgframe.c), for the decoder (pgwire.c): message runs, the search for
 * a provable message boundary, a ClientHello's ALPN list. */
#ifndef PKTFLOW_NATIVE_PGFRAME_H
#define PKTFLOW_NATIVE_PGFRAME_H

#include "core.h"

/* PostgreSQL caps a message near 1 GiB: a longer one is not PostgreSQL framing */
#define MAX_MESSAGE (((i64)1 << 30) + 64)

typedef struct PgScan PgScan;
void pgf_message_run(const uint8_t *b, Py_ssize_t n, Py_ssize_t pos, i64 *count, i64 *end,
                     i64 *bad);
PgScan *pgf_scan_new(void);
void pgf_scan_reset(PgScan *sc, int sides, int need_proof);
void pgf_scan_free(PgScan *sc);
int pgf_scan_find(PgScan *sc, const uint8_t *b, Py_ssize_t n, i64 base, int record,
                  Py_ssize_t *at, int *side);
int pgf_find_boundary(const uint8_t *b, Py_ssize_t n, int side, int need_proof, Py_ssize_t *at);
int pgf_client_hello(const uint8_t *b, Py_ssize_t n, i64 *j, i64 *stop, i64 *hs_end);
enum { ALPN_NEED_MORE = 0, ALPN_NOT_TLS = 1, ALPN_LIST = 2 };

#endif
