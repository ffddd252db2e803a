/* A finished connection's report, written as the Python pass writes it: the twin of
 * pipeline.Run.report and connection_json, tcp.connection.Connection.to_json,
 * tcp.direction.Direction.to_json, tcp.findings and transfer.capture_point. */
#include "report.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

void format_ip(const uint8_t *a, int alen, char *out)
{
    if (alen == 4) {
        for (int i = 0; i < 4; i++) {
            unsigned v = a[i];
            if (v >= 100)
                *out++ = (char)('0' + v / 100);
            if (v >= 10)
                *out++ = (char)('0' + v / 10 % 10);
            *out++ = (char)('0' + v % 10);
            *out++ = i < 3 ? '.' : 0;
        }
        return;
    }
    if (inet_ntop(AF_INET6, a, out, 46) == NULL)
        strcpy(out, "::");
}

const char *roles_name(int role_source)
{
    switch (role_source) {
    case ROLES_HANDSHAKE: return "handshake";
    case ROLES_SYN_ACK: return "syn-ack";
    case ROLES_PORT: return "port";
    default: return "application";
    }
}

static void endpoint(JsonW *w, const char *key, const End *e, int alen)
{
    char ip[46];
    format_ip(e->addr, alen, ip);
    jw_key(w, key);
    jw_obj(w);
    jw_key(w, "ip");
    jw_cstr(w, ip);
    jw_kint(w, "port", e->port);
    jw_obj_end(w);
}

/* Direction.to_json(peer) */
static void dir_json(const Conn *c, int d, JsonW *w)
{
    const Dir *m = &c->dirs[d];
    int known, scale = window_scale(m, &c->dirs[1 - d], &known);
    jw_kint(w, "payload_bytes", m->payload_bytes);
    jw_kint(w, "data_segments", m->data_segments);
    jw_kint(w, "max_segment", m->max_segment);
    jw_key(w, "mss");
    if (m->syn.present && m->syn.has_mss)
        jw_int(w, m->syn.mss);
    else
        jw_null(w);
    jw_key(w, "window_scale");
    if (scale >= 0)
        jw_int(w, scale);
    else
        jw_null(w);
    jw_key(w, "window_scale_known");
    jw_bool(w, known);
    jw_key(w, "window_scale_lower_bound");
    if (known)
        jw_null(w);
    else
        jw_int(w, m->wscale_lb);
    jw_kint(w, "retransmitted_segments", m->retrans_segments);
    jw_kint(w, "retransmitted_bytes", m->retrans_bytes);
    jw_kint(w, "out_of_order_segments", m->ooo_segments);
    jw_kint(w, "gaps", m->gaps);
    jw_kint(w, "missing_bytes", m->missing_bytes);
    jw_kint(w, "truncated_bytes", m->truncated_bytes);
    jw_kint(w, "zero_window_events", m->zero_window_events);
    jw_kint(w, "window_updates", m->window_updates);
    jw_kint(w, "segments_above_mss", 0);
    jw_kint(w, "keepalives", m->keepalives);
}

/* tcp.findings.sender: who sends direction d, after any correction by the protocol. */
static const char *sender(const Conn *c, int d)
{
    return (d + c->swapped) % 2 ? "server" : "client";
}

static const char *direction_name(const Conn *c, int d)
{
    return (d + c->swapped) % 2 ? "server->client" : "client->server";
}

static void add(Findings *f, const char *sev, const char *code, StrB *b, const Ev *ev)
{
    fnd_add(f, sev, code, b, ev ? ev->frames : NULL, ev ? ev->n : 0);
}

/* tcp.findings.connection_findings */
static void tcp_findings(const Conn *c, Findings *f)
{
    StrB b;
    sb_init(&b);
    for (int d = 0; d < 2; d++) {
        const Dir *m = &c->dirs[d], *peer = &c->dirs[1 - d];
        const char *name = direction_name(c, d);
        if (m->gaps) {
            sb_addf(&b, "%s: the capture missed ", name);
            sb_int(&b, m->missing_bytes, 1);
            sb_addf(&b, " bytes in %lld gap(s) that the receiver acknowledged or that later data "
                        "skipped over; protocol decoding resynchronises after each",
                    (long long)m->gaps);
            add(f, "warning", "capture-gap", &b, &m->ev_gap);
        }
        if (m->bound_gaps || m->holes_forgotten) {
            sb_addf(&b, "%s: reordering or loss exceeded pktflow's reassembly bounds (", name);
            sb_int(&b, MAX_BUFFERED_SEGMENTS, 1);
            sb_addf(&b, " segments or %lld MiB waiting, %d holes remembered): ",
                    (long long)(MAX_BUFFERED_BYTES >> 20), MAX_HOLES);
            sb_int(&b, m->bound_gaps, 1);
            sb_add(&b, " hole(s) were declared capture gaps before they could fill and ");
            sb_int(&b, m->holes_forgotten, 1);
            sb_add(&b, " were forgotten, so late bytes there count as retransmissions");
            add(f, "warning", "reassembly-bound", &b, &m->ev_gap);
        }
        if (m->retrans_segments) {
            sb_addf(&b, "%s: %lld retransmitted segment(s), ", name,
                    (long long)m->retrans_segments);
            sb_int(&b, m->retrans_bytes, 1);
            sb_add(&b, " bytes");
            add(f, "warning", "retransmission", &b, &m->ev_retrans);
        }
        if (m->ooo_segments) {
            sb_addf(&b, "%s: %lld segment(s) arrived out of order at the capture point (filled "
                        "a hole within 3 ms)", name, (long long)m->ooo_segments);
            add(f, "info", "out-of-order", &b, &m->ev_ooo);
        }
        if (m->truncated_bytes) {
            sb_addf(&b, "%s: snaplen cut ", name);
            sb_int(&b, m->truncated_bytes, 1);
            sb_addf(&b, " payload bytes from %lld segment(s); those bytes are counted, never "
                        "invented", (long long)m->truncated_segments);
            add(f, "warning", "truncated-payload", &b, &m->ev_trunc);
        }
        if (m->zero_window_events) {
            sb_addf(&b, "%s advertised a zero receive window %lld time(s): its application was "
                        "not reading fast enough", sender(c, d), (long long)m->zero_window_events);
            add(f, "info", "zero-window", &b, &m->ev_zero);
        }
        if (peer->syn.present && peer->syn.has_mss && peer->syn.mss && m->max_segment > peer->syn.mss) {
            sb_addf(&b, "%s: segments up to ", name);
            sb_int(&b, m->max_segment, 1);
            sb_add(&b, " bytes exceed the MSS of ");
            sb_int(&b, peer->syn.mss, 1);
            sb_add(&b, ": TSO/GSO at the sender or GRO at the receiver merged wire packets before "
                       "the capture point, so captured segments are not wire packets");
            add(f, "info", "segment-above-mss", &b, NULL);
        }
        if (!c->view[d].wscale_known && (m->payload_bytes || peer->payload_bytes)) {
            sb_addf(&b, "%s's window scale is unknown (no handshake in the capture): its windows "
                        "are shown raw", sender(c, d));
            if (m->wscale_lb)
                sb_addf(&b, "; the data in flight proves a scale of at least %d", m->wscale_lb);
            add(f, "info", "window-scale-unknown", &b, NULL);
        }
    }
    sb_free(&b);
}

/* transfer.capture_point, from what the report's two directions hold */
#define SAME_HOST_MS 0.2
#define RATIO 4.0

static int loopback(const char *ip) { return !strncmp(ip, "127.", 4) || !strcmp(ip, "::1"); }

static const char *where(const char *position)
{
    if (!strcmp(position, "client"))
        return "at the client (it answered the SYN-ACK at once; the server was a round trip "
               "away): times of server data are when the client received it";
    if (!strcmp(position, "server"))
        return "at the server (it answered the SYN at once; the client was a round trip "
               "away): times of server data are when the server sent it";
    if (!strcmp(position, "between"))
        return "between the hosts (each side takes a share of the handshake's round trip)";
    if (!strcmp(position, "same host"))
        return "on the same host as both ends, or adjacent to both: round trips under 0.2 ms, "
               "so the side cannot be told";
    return "at an unknown point: the handshake is not in the capture (the data's ACK delays "
           "include each side's own delayed ACK and work, so they cannot tell)";
}

static int capture_point(const Conn *c, const int rep[2], JsonW *w)
{
    TrLegView v[2];
    for (int i = 0; i < 2; i++)
        if (tr_leg_view(c->tr, rep[i], &v[i]) < 0)
            return -1;
    StrB ev[3];
    int nev = 0;
    static const char *names[2] = {"client to server", "server to client"};
    static const char *who[2] = {"server", "client"};
    for (int i = 0; i < 2; i++) {
        if (!v[i].has_rtt_median)
            continue;
        StrB *b = &ev[nev++];
        sb_init(b);
        sb_addf(b, "the %s acknowledged %s data after ", who[i], names[i]);
        sb_fixed(b, v[i].rtt_median_ms, 3, 0);
        sb_add(b, " ms (median; includes its own delayed ACK and work)");
    }
    const char *position = "unknown";
    StrB hs;
    sb_init(&hs);
    if (v[0].has_handshake_ms) {
        double to_server = v[0].syn_to_synack_ms, to_client = v[0].synack_to_ack_ms;
        sb_add(&hs, "SYN -> SYN-ACK ");
        sb_fixed(&hs, to_server, 3, 0);
        sb_add(&hs, " ms, SYN-ACK -> ACK ");
        sb_fixed(&hs, to_client, 3, 0);
        sb_add(&hs, " ms");
        double most = to_server > to_client ? to_server : to_client;
        if (most < SAME_HOST_MS)
            position = "same host";
        else if (to_client * RATIO <= to_server)
            position = "client";
        else if (to_server * RATIO <= to_client)
            position = "server";
        else
            position = "between";
    }
    char cip[46], sip[46];
    const End *client = c->swapped ? &c->server : &c->client;
    const End *server = c->swapped ? &c->client : &c->server;
    format_ip(client->addr, c->alen, cip);
    format_ip(server->addr, c->alen, sip);
    const char *link, *limit;
    i64 a = c->dirs[rep[0]].max_segment, b = c->dirs[rep[1]].max_segment;
    if (loopback(cip) && loopback(sip)) {
        link = "loopback";
        limit = "loopback (MTU 65,536): segments are the programs' writes, and there is no "
                "network delay, so timing shows the hosts' own scheduling";
    } else if ((a > b ? a : b) > 1500) { /* (segments_above_mss is always 0) */
        link = "nic with offloads";
        limit = "segments larger than the MSS were captured: TSO/GSO or GRO merged wire "
                "packets, so segment counts and sizes are the host's view, not the wire's";
    } else {
        link = "mtu 1500";
        limit = "segments are at most one MTU: the capture shows the wire's packets";
    }
    jw_key(w, "capture_point");
    jw_obj(w);
    jw_key(w, "position");
    jw_cstr(w, position);
    jw_key(w, "link");
    jw_cstr(w, link);
    jw_key(w, "summary");
    StrB s;
    sb_init(&s);
    sb_addf(&s, "captured %s; %s", where(position), limit);
    jw_str(w, s.p, s.len);
    sb_free(&s);
    jw_key(w, "evidence");
    jw_arr(w);
    if (hs.len)
        jw_str(w, hs.p, hs.len);
    for (int i = 0; i < nev; i++) {
        jw_str(w, ev[i].p, ev[i].len);
        sb_free(&ev[i]);
    }
    jw_arr_end(w);
    jw_obj_end(w);
    sb_free(&hs);
    return 0;
}

int conn_report(Conn *c, double start, JsonW *w, Findings *f, i64 *payload)
{
    /* Run.settle_roles: the wire protocol corrects the engine's guess (no handshake) */
    if (c->conv != NULL && !c->handshake_seen) {
        int fd = pg_frontend_direction(c->conv);
        if (fd >= 0) {
            c->swapped = fd == 1;
            c->role_source = ROLES_APPLICATION;
        }
    }
    int rep[2] = {c->swapped, !c->swapped}; /* the report's client->server, server->client */
    const End *client = c->swapped ? &c->server : &c->client;
    const End *server = c->swapped ? &c->client : &c->server;
    jw_obj(w);
    jw_key(w, "id");
    jw_str_obj(w, c->id);
    endpoint(w, "client", client, c->alen);
    endpoint(w, "server", server, c->alen);
    jw_key(w, "handshake_seen");
    jw_bool(w, c->handshake_seen);
    jw_key(w, "roles_from");
    jw_cstr(w, roles_name(c->role_source));
    jw_kfloat(w, "start_s", py_round(c->start_ts - start, 6));
    jw_kfloat(w, "end_s", py_round(c->end_ts - start, 6));
    jw_kint(w, "first_frame", c->first_frame);
    jw_kint(w, "last_frame", c->last_frame);
    jw_kint(w, "packets", c->packets);
    jw_key(w, "closed_by");
    if (c->closed_by == CLOSED_FIN)
        jw_cstr(w, "fin");
    else if (c->closed_by == CLOSED_RST)
        jw_cstr(w, "rst");
    else
        jw_null(w);
    jw_key(w, "directions");
    jw_obj(w);
    static const char *dir_keys[2] = {"client_to_server", "server_to_client"};
    for (int i = 0; i < 2; i++) {
        jw_key(w, dir_keys[i]);
        jw_obj(w);
        dir_json(c, rep[i], w);
        if (tr_result(c->tr, rep[i], start, w) < 0)
            return -1;
        jw_obj_end(w);
    }
    jw_obj_end(w);
    if (c->conv != NULL && pg_json(c->conv, w) < 0)
        return -1;
    if (capture_point(c, rep, w) < 0)
        return -1;
    jw_obj_end(w);

    tcp_findings(c, f);
    if (c->conv != NULL && pg_findings(c->conv, f) < 0)
        return -1;
    const char *names[2] = {direction_name(c, 0), direction_name(c, 1)};
    if (tr_findings(c->tr, PyUnicode_AsUTF8(c->id), names, f) < 0)
        return -1;
    *payload = c->dirs[0].payload_bytes + c->dirs[1].payload_bytes;
    return 0;
}

/* What relay matching reads of a PostgreSQL connection's report (else None), as
 * relay.topology.native_leg takes it: (id, (client ip, port), (server ip, port), queries or
 * None past `most`, and of the server -> client direction: zero window periods and seconds,
 * the verdict's evidence frames, bytes per ACK and per flight medians). */
PyObject *conn_leg(Conn *c, i64 most)
{
    if (c->conv == NULL || !pg_is_postgres(c->conv))
        Py_RETURN_NONE;
    TrLegView v;
    if (tr_leg_view(c->tr, !c->swapped, &v) < 0)
        return NULL;
    PyObject *queries = pg_leg_queries(c->conv, most);
    if (queries == NULL)
        return NULL;
    char cip[46], sip[46];
    const End *client = c->swapped ? &c->server : &c->client;
    const End *server = c->swapped ? &c->client : &c->server;
    format_ip(client->addr, c->alen, cip);
    format_ip(server->addr, c->alen, sip);
    PyObject *frames = PyTuple_New(v.n_evidence);
    if (frames == NULL) {
        Py_DECREF(queries);
        return NULL;
    }
    for (int i = 0; i < v.n_evidence; i++)
        PyTuple_SET_ITEM(frames, i, PyLong_FromLongLong(v.evidence_frames[i]));
    PyObject *acked = v.has_bytes_acked_median ? PyLong_FromLongLong(v.bytes_acked_median)
                                               : Py_NewRef(Py_None);
    PyObject *flight = v.has_flight_bytes_median ? PyLong_FromLongLong(v.flight_bytes_median)
                                                 : Py_NewRef(Py_None);
    return Py_BuildValue("(O(sI)(sI)NLdNNN)", c->id, cip, client->port, sip, server->port,
                         queries, (long long)v.zero_window_periods, v.zero_window_total_s,
                         frames, acked, flight);
}
