/* A finished connection's report (report.c), for core.c. */
#ifndef PKTFLOW_NATIVE_REPORT_H
#define PKTFLOW_NATIVE_REPORT_H

#include "engine.h"

void format_ip(const uint8_t *a, int alen, char *out); /* out: 46 bytes */
const char *roles_name(int role_source);
/* The connection's report as one JSON object (in w's layout, at its level), its findings
 * appended to f (tcp, PostgreSQL, transfer, in that order), and its payload bytes, both ways.
 * Settles the roles first, as Run.settle_roles does. */
int conn_report(Conn *c, double start, JsonW *w, Findings *f, i64 *payload);
/* What relay matching reads of a PostgreSQL connection's report, or None (see report.c). */
PyObject *conn_leg(Conn *c, i64 most);

#endif
