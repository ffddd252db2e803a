/* The PostgreSQL conversation on one connection: the twin of pktflow.pgwire.conversation
 * (Conversation, _Side), with pgwire.messages' parsers and pgwire.query's Query; the framing
 * (message runs, the boundary search, the ClientHello) is in pgframe.c. See core.h.
 *
 * The Python code is the reference: each function here is named after the method it mirrors
 * and keeps its order of tests and effects, since the report must come out byte for byte the
 * same. DataRow and CopyData runs are counted in place, never copied or turned into objects;
 * a message cut by a segment boundary waits in the side's reusable buffer. Strings the report
 * shows (SQL, tags, error fields, names) are Python str objects decoded as the Python decodes
 * them, made per query or control message, never per bulk message. */
#include "pgframe.h"

#include <math.h>
#include <string.h>

/* ---- constants (pgwire.conversation, .framing, .query) ------------------------------------- */

#define MAX_QUERIES 10000
#define MAX_NAMES 10000
#define MAX_ERROR_FINDINGS 20
#define ARCHIVE_AT 128
#define SYNC_WINDOW (256 * 1024)
#define KEEP_CAP ((i64)1 << 20)
#define MAX_CLIENT_HELLO (1 << 15)
#define SQL_CAP (64 * 1024)
#define MAX_PARAMETERS 64

#define SSL_REQUEST 80877103
#define GSSENC_REQUEST 80877104
#define CANCEL_REQUEST 80877102

enum { FRONTEND = 0, BACKEND = 1 };
enum { ST_START, ST_TYPED, ST_SYNC, ST_STOPPED };
enum { P_UNKNOWN, P_PG, P_TLS, P_GSS };
enum { ENC_NONE, ENC_TLS, ENC_GSS };
enum { K_SIMPLE, K_EXTENDED, K_COPY, K_FUNCTION };
enum { AT_NONE, AT_STARTUP, AT_MID };

static const char *const ROLE[2] = {"frontend", "backend"};
static const char *const PROTOCOL[4] = {"unknown", "postgresql", "postgresql-tls",
                                        "postgresql-gss"};
static const char *const ENCRYPTION[3] = {"none", "tls", "gss"};
static const char *const KIND[4] = {"simple", "extended", "copy", "function"};

/* Message names, as pgwire.messages names them; counts are kept by these numbers. */
enum {
    N_NONE, /* an Authentication request of a code without a name: "Authentication<code>" */
    N_QUERY, N_PARSE, N_BIND, N_EXECUTE, N_DESCRIBE, N_SYNC, N_FLUSH, N_CLOSE, N_COPYDATA,
    N_COPYDONE, N_COPYFAIL, N_FUNCTIONCALL, N_TERMINATE, N_PASSWORD, N_GSSRESPONSE,
    N_SASLINITIAL, N_SASLRESPONSE,
    N_AUTH, N_BACKENDKEY, N_PARAMSTATUS, N_READY, N_ROWDESC, N_DATAROW, N_CMDCOMPLETE,
    N_EMPTYQUERY, N_ERROR, N_NOTICE, N_NOTIFICATION, N_PARSECOMPLETE, N_BINDCOMPLETE,
    N_CLOSECOMPLETE, N_PARAMDESC, N_NODATA, N_PORTALSUSPENDED, N_COPYIN, N_COPYOUT,
    N_COPYBOTH, N_FCRESPONSE, N_NEGOTIATE,
    N_AUTH_OK, N_AUTH_KRB5, N_AUTH_CLEAR, N_AUTH_MD5, N_AUTH_GSS, N_AUTH_GSSCONT, N_AUTH_SSPI,
    N_AUTH_SASL, N_AUTH_SASLCONT, N_AUTH_SASLFINAL,
    N_ENC_REFUSED, N_SSLREQ, N_GSSENCREQ, N_CANCEL, N_STARTUP,
    N_COUNT
};

static const char *const NAME[N_COUNT] = {
    NULL,
    "Query", "Parse", "Bind", "Execute", "Describe", "Sync", "Flush", "Close", "CopyData",
    "CopyDone", "CopyFail", "FunctionCall", "Terminate", "PasswordMessage", "GSSResponse",
    "SASLInitialResponse", "SASLResponse",
    "Authentication", "BackendKeyData", "ParameterStatus", "ReadyForQuery", "RowDescription",
    "DataRow", "CommandComplete", "EmptyQueryResponse", "ErrorResponse", "NoticeResponse",
    "NotificationResponse", "ParseComplete", "BindComplete", "CloseComplete",
    "ParameterDescription", "NoData", "PortalSuspended", "CopyInResponse", "CopyOutResponse",
    "CopyBothResponse", "FunctionCallResponse", "NegotiateProtocolVersion",
    "AuthenticationOk", "AuthenticationKerberosV5", "AuthenticationCleartextPassword",
    "AuthenticationMD5Password", "AuthenticationGSS", "AuthenticationGSSContinue",
    "AuthenticationSSPI", "AuthenticationSASL", "AuthenticationSASLContinue",
    "AuthenticationSASLFinal",
    "EncryptionRefused", "SSLRequest", "GSSENCRequest", "CancelRequest", "StartupMessage",
};

/* type byte -> name, per side (0: not a message of that side) */
static unsigned char type_name[2][256];
static int type_names_ready;

static void type_names(void)
{
    static const struct {
        char t;
        unsigned char name;
    } front[] = {{'Q', N_QUERY}, {'P', N_PARSE}, {'B', N_BIND}, {'E', N_EXECUTE},
                 {'D', N_DESCRIBE}, {'S', N_SYNC}, {'H', N_FLUSH}, {'C', N_CLOSE},
                 {'d', N_COPYDATA}, {'c', N_COPYDONE}, {'f', N_COPYFAIL},
                 {'F', N_FUNCTIONCALL}, {'X', N_TERMINATE}, {'p', N_PASSWORD}},
      back[] = {{'R', N_AUTH}, {'K', N_BACKENDKEY}, {'S', N_PARAMSTATUS}, {'Z', N_READY},
                {'T', N_ROWDESC}, {'D', N_DATAROW}, {'C', N_CMDCOMPLETE},
                {'I', N_EMPTYQUERY}, {'E', N_ERROR}, {'N', N_NOTICE}, {'A', N_NOTIFICATION},
                {'1', N_PARSECOMPLETE}, {'2', N_BINDCOMPLETE}, {'3', N_CLOSECOMPLETE},
                {'t', N_PARAMDESC}, {'n', N_NODATA}, {'s', N_PORTALSUSPENDED},
                {'G', N_COPYIN}, {'H', N_COPYOUT}, {'W', N_COPYBOTH}, {'d', N_COPYDATA},
                {'c', N_COPYDONE}, {'V', N_FCRESPONSE}, {'v', N_NEGOTIATE}};
    if (type_names_ready)
        return;
    for (size_t i = 0; i < sizeof front / sizeof front[0]; i++)
        type_name[FRONTEND][(unsigned char)front[i].t] = front[i].name;
    for (size_t i = 0; i < sizeof back / sizeof back[0]; i++)
        type_name[BACKEND][(unsigned char)back[i].t] = back[i].name;
    type_names_ready = 1;
}

/* messages.AUTH_NAMES; N_NONE for a code it does not name */
static int auth_name(uint32_t code)
{
    switch (code) {
    case 0: return N_AUTH_OK;
    case 2: return N_AUTH_KRB5;
    case 3: return N_AUTH_CLEAR;
    case 5: return N_AUTH_MD5;
    case 7: return N_AUTH_GSS;
    case 8: return N_AUTH_GSSCONT;
    case 9: return N_AUTH_SSPI;
    case 10: return N_AUTH_SASL;
    case 11: return N_AUTH_SASLCONT;
    case 12: return N_AUTH_SASLFINAL;
    }
    return N_NONE;
}

/* messages.PASSWORD_REPLY.get(auth, "PasswordMessage") */
static int password_reply(uint32_t auth)
{
    switch (auth) {
    case 7: case 8: case 9: return N_GSSRESPONSE;
    case 10: return N_SASLINITIAL;
    case 11: return N_SASLRESPONSE;
    }
    return N_PASSWORD;
}

static inline i64 be32(const uint8_t *p)
{
    return ((i64)p[0] << 24) | ((i64)p[1] << 16) | ((i64)p[2] << 8) | (i64)p[3];
}

/* bytes.decode("utf-8", "replace") */
static inline PyObject *dec(const uint8_t *p, Py_ssize_t n)
{
    return PyUnicode_DecodeUTF8((const char *)p, n, "replace");
}

/* The length of b up to its first NUL (all of it without one). */
static inline Py_ssize_t upto_nul(const uint8_t *b, Py_ssize_t n)
{
    const uint8_t *z = n > 0 ? memchr(b, 0, (size_t)n) : NULL;
    return z ? z - b : n;
}

/* ---- message counts by name, in first-seen order (_Side._counts) ---------------------------- */

typedef struct {
    int name; /* N_*; N_NONE: "Authentication<code>" */
    uint32_t code;
    i64 n;
} CEntry;

typedef struct {
    CEntry *e;
    Py_ssize_t n, cap;
    Py_ssize_t at[N_COUNT]; /* entry index + 1 of each name, 0: not seen */
    Py_ssize_t *slots; /* codes without a name: entry index + 1 by open addressing */
    Py_ssize_t nslots, ncodes;
} Counts;

static void counts_free(Counts *k)
{
    PyMem_Free(k->e);
    PyMem_Free(k->slots);
    memset(k, 0, sizeof *k);
}

static CEntry *counts_append(Counts *k, int name, uint32_t code)
{
    if (k->n == k->cap) {
        Py_ssize_t cap = k->cap ? 2 * k->cap : 16;
        CEntry *e = PyMem_Realloc(k->e, sizeof(CEntry) * (size_t)cap);
        if (e == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        k->e = e;
        k->cap = cap;
    }
    CEntry *e = &k->e[k->n++];
    e->name = name;
    e->code = code;
    e->n = 0;
    return e;
}

static inline size_t code_slot(uint32_t code, Py_ssize_t nslots)
{
    return (size_t)((code * 0x9E3779B1u) ^ (code >> 16)) & (size_t)(nslots - 1);
}

/* The entry of a name (appended at 0 when new), NULL out of memory. */
static CEntry *counts_entry(Counts *k, int name, uint32_t code)
{
    if (name != N_NONE) {
        if (k->at[name])
            return &k->e[k->at[name] - 1];
        CEntry *e = counts_append(k, name, 0);
        if (e != NULL)
            k->at[name] = k->n;
        return e;
    }
    if (k->nslots) {
        for (size_t s = code_slot(code, k->nslots);; s = (s + 1) & (size_t)(k->nslots - 1)) {
            Py_ssize_t i = k->slots[s];
            if (!i)
                break;
            if (k->e[i - 1].code == code && k->e[i - 1].name == N_NONE)
                return &k->e[i - 1];
        }
    }
    if (2 * (k->ncodes + 1) > k->nslots) { /* grow the table first: the entry goes in after */
        Py_ssize_t ns = k->nslots ? 2 * k->nslots : 16;
        Py_ssize_t *slots = PyMem_Calloc((size_t)ns, sizeof(Py_ssize_t));
        if (slots == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        for (Py_ssize_t i = 0; i < k->n; i++) {
            if (k->e[i].name != N_NONE)
                continue;
            size_t s = code_slot(k->e[i].code, ns);
            while (slots[s])
                s = (s + 1) & (size_t)(ns - 1);
            slots[s] = i + 1;
        }
        PyMem_Free(k->slots);
        k->slots = slots;
        k->nslots = ns;
    }
    CEntry *e = counts_append(k, N_NONE, code);
    if (e == NULL)
        return NULL;
    size_t s = code_slot(code, k->nslots);
    while (k->slots[s])
        s = (s + 1) & (size_t)(k->nslots - 1);
    k->slots[s] = k->n;
    k->ncodes++;
    return e;
}

/* ---- queries (pgwire.query.Query) --------------------------------------------------------- */

typedef struct Query {
    int refs; /* held by: the listed queries, pending, last_query, last_done */
    int in_pending;
    int done, incomplete, kind, sql_truncated;
    PyObject *sql; /* str */
    PyObject *tag; /* str, NULL: None */
    int has_tags_rows;
    i64 tags_rows;
    PyObject *tags_rows_big; /* the sum once past 64 bits (Python ints have no bound) */
    i64 data_rows, copy_data, resp_bytes, resp_msgs;
    double sent_ts;
    i64 sent_frame;
    int responded; /* first_ts and last_ts are not None */
    double first_ts, last_ts;
    i64 first_frame, last_frame;
    int has_error;
    PyObject *err[6]; /* code, message, severity, detail, hint, position; NULL: None */
    Hist segments;
} Query;

static const char *const ERR_KEY[6] = {"code", "message", "severity", "detail", "hint",
                                       "position"};
static const char ERR_FIELD[6] = {'C', 'M', 'V', 'D', 'H', 'P'};

/* Query(sql, kind, ts, frame), holding no reference yet; steals `sql`. */
static Query *q_new(PyObject *sql, int kind, double ts, i64 frame)
{
    if (sql == NULL)
        return NULL;
    Query *q = PyMem_Calloc(1, sizeof *q);
    if (q == NULL) {
        Py_DECREF(sql);
        PyErr_NoMemory();
        return NULL;
    }
    if (PyUnicode_GET_LENGTH(sql) > SQL_CAP) {
        PyObject *cut = PyUnicode_Substring(sql, 0, SQL_CAP);
        Py_DECREF(sql);
        if (cut == NULL) {
            PyMem_Free(q);
            return NULL;
        }
        sql = cut;
        q->sql_truncated = 1;
    }
    q->sql = sql;
    q->kind = kind;
    q->sent_ts = ts;
    q->sent_frame = frame;
    hist_init(&q->segments, 256);
    return q;
}

static void q_destroy(Query *q)
{
    Py_XDECREF(q->sql);
    Py_XDECREF(q->tag);
    Py_XDECREF(q->tags_rows_big);
    for (int i = 0; i < 6; i++)
        Py_XDECREF(q->err[i]);
    hist_free(&q->segments);
    PyMem_Free(q);
}

static inline Query *q_ref(Query *q)
{
    if (q != NULL)
        q->refs++;
    return q;
}

static inline void q_unref(Query *q)
{
    if (q != NULL && --q->refs <= 0)
        q_destroy(q);
}

/* holder = q, with the references counted */
static inline void q_set(Query **holder, Query *q)
{
    Query *old = *holder;
    *holder = q_ref(q);
    q_unref(old);
}

static inline void respond(Query *q, i64 nbytes, i64 nmsgs, double ts, i64 frame)
{
    if (!q->responded) {
        q->responded = 1;
        q->first_ts = ts;
        q->first_frame = frame;
    }
    q->resp_bytes += nbytes;
    q->resp_msgs += nmsgs;
    q->last_ts = ts;
    q->last_frame = frame;
}

/* Python's whitespace in an ASCII str (str.split() without arguments) */
static inline int ascii_space(char ch)
{
    return ch == ' ' || (ch >= '\t' && ch <= '\r') || (ch >= 0x1C && ch <= 0x1F);
}

static const char *const ROW_COMMANDS[] = {"SELECT", "COPY", "INSERT", "UPDATE", "DELETE",
                                           "MERGE", "FETCH", "MOVE"};

static int row_command(const char *s, Py_ssize_t n)
{
    for (size_t i = 0; i < sizeof ROW_COMMANDS / sizeof ROW_COMMANDS[0]; i++)
        if ((Py_ssize_t)strlen(ROW_COMMANDS[i]) == n && !memcmp(ROW_COMMANDS[i], s, (size_t)n))
            return 1;
    return 0;
}

/* messages.command_rows(tag): 0 for None, 1 with the count in *v or, past 64 bits, in *big
 * (a new reference); -1 with an exception (out of memory). */
static int command_rows(PyObject *tag, i64 *v, PyObject **big)
{
    PyObject *num = NULL;
    *big = NULL;
    if (PyUnicode_IS_ASCII(tag)) {
        const char *s = (const char *)PyUnicode_DATA(tag);
        Py_ssize_t n = PyUnicode_GET_LENGTH(tag), i = 0, tokens = 0;
        Py_ssize_t f0 = 0, f1 = 0, l0 = 0, l1 = 0;
        while (i < n) {
            while (i < n && ascii_space(s[i]))
                i++;
            if (i == n)
                break;
            Py_ssize_t a = i;
            while (i < n && !ascii_space(s[i]))
                i++;
            if (tokens++ == 0) {
                f0 = a;
                f1 = i;
            }
            l0 = a;
            l1 = i;
        }
        if (tokens < 2)
            return 0;
        for (Py_ssize_t j = l0; j < l1; j++)
            if (s[j] < '0' || s[j] > '9')
                return 0;
        if (!row_command(s + f0, f1 - f0))
            return 0;
        if (l1 - l0 <= 18) {
            i64 x = 0;
            for (Py_ssize_t j = l0; j < l1; j++)
                x = x * 10 + (s[j] - '0');
            *v = x;
            return 1;
        }
        PyObject *digits = PyUnicode_Substring(tag, l0, l1);
        if (digits == NULL)
            return -1;
        num = PyLong_FromUnicodeObject(digits, 10);
        Py_DECREF(digits);
    } else { /* any other text: as the Python reads it */
        PyObject *parts = PyUnicode_Split(tag, NULL, -1);
        if (parts == NULL)
            return -1;
        Py_ssize_t np = PyList_GET_SIZE(parts);
        int ok = 0;
        if (np >= 2) {
            PyObject *last = PyList_GET_ITEM(parts, np - 1), *first = PyList_GET_ITEM(parts, 0);
            /* ASCII digits only, as messages.command_rows takes them */
            ok = PyUnicode_IS_ASCII(last) && PyUnicode_GET_LENGTH(last) > 0;
            const char *digits = ok ? (const char *)PyUnicode_DATA(last) : "";
            for (Py_ssize_t i = 0; ok && i < PyUnicode_GET_LENGTH(last); i++)
                ok = digits[i] >= '0' && digits[i] <= '9';
            if (ok) {
                ok = 0;
                for (size_t i = 0; i < sizeof ROW_COMMANDS / sizeof ROW_COMMANDS[0]; i++)
                    if (PyUnicode_CompareWithASCIIString(first, ROW_COMMANDS[i]) == 0)
                        ok = 1;
            }
            if (ok)
                num = PyLong_FromUnicodeObject(last, 10);
        }
        Py_DECREF(parts);
        if (!ok)
            return 0;
    }
    if (num == NULL)
        return -1;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(num, &overflow);
    if (x == -1 && PyErr_Occurred()) {
        Py_DECREF(num);
        return -1;
    }
    if (overflow) {
        *big = num;
        return 1;
    }
    Py_DECREF(num);
    *v = x;
    return 1;
}

/* Query.command_complete; steals `tag`. */
static int command_complete(Query *q, PyObject *tag)
{
    if (tag == NULL)
        return -1;
    Py_XSETREF(q->tag, tag);
    i64 v = 0;
    PyObject *big = NULL;
    int r = command_rows(tag, &v, &big);
    if (r <= 0)
        return r;
    /* tags_rows = (tags_rows or 0) + rows */
    if (q->tags_rows_big == NULL && big == NULL) {
        i64 sum;
        if (!__builtin_add_overflow(q->has_tags_rows ? q->tags_rows : 0, v, &sum)) {
            q->tags_rows = sum;
            q->has_tags_rows = 1;
            return 0;
        }
    }
    PyObject *a = q->tags_rows_big;
    if (a == NULL) {
        a = PyLong_FromLongLong(q->has_tags_rows ? q->tags_rows : 0);
        if (a == NULL) {
            Py_XDECREF(big);
            return -1;
        }
    }
    if (big == NULL) {
        big = PyLong_FromLongLong(v);
        if (big == NULL) {
            if (a != q->tags_rows_big)
                Py_DECREF(a);
            return -1;
        }
    }
    PyObject *sum = PyNumber_Add(a, big);
    if (a != q->tags_rows_big)
        Py_DECREF(a);
    Py_DECREF(big);
    if (sum == NULL)
        return -1;
    Py_XSETREF(q->tags_rows_big, sum);
    q->has_tags_rows = 1;
    return 0;
}

/* ---- ParameterStatus texts, decoded once for all connections (_PARAMETER_TEXT) -------------- */

#define PCACHE_SLOTS 8192
#define PCACHE_MAX 4096
#define PCACHE_BODY 256 /* longer bodies are decoded each time: a cache of 1 MB keys is none */

typedef struct {
    uint64_t h;
    uint8_t *body;
    Py_ssize_t len;
    PyObject *name, *value;
} PEntry;

static PEntry pcache[PCACHE_SLOTS];
static int pcache_n;

static uint64_t fnv(const uint8_t *p, Py_ssize_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (Py_ssize_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

/* The (name, value) of a body with a NUL (new references), 0 without one, -1 on error. */
static int parameter_text(const uint8_t *b, Py_ssize_t n, PyObject **name, PyObject **value)
{
    uint64_t h = 0;
    size_t slot = 0;
    if (n <= PCACHE_BODY) {
        h = fnv(b, n);
        for (slot = h & (PCACHE_SLOTS - 1); pcache[slot].body != NULL;
             slot = (slot + 1) & (PCACHE_SLOTS - 1)) {
            PEntry *e = &pcache[slot];
            if (e->h == h && e->len == n && !memcmp(e->body, b, (size_t)n)) {
                Py_INCREF(e->name);
                Py_INCREF(e->value);
                *name = e->name;
                *value = e->value;
                return 1;
            }
        }
    }
    Py_ssize_t a = upto_nul(b, n);
    if (a == n)
        return 0; /* cstrings(body, 2) has fewer than 2 parts */
    Py_ssize_t vlen = upto_nul(b + a + 1, n - a - 1);
    PyObject *k = dec(b, a);
    if (k == NULL)
        return -1;
    PyObject *v = dec(b + a + 1, vlen);
    if (v == NULL) {
        Py_DECREF(k);
        return -1;
    }
    if (n <= PCACHE_BODY && pcache_n < PCACHE_MAX) {
        uint8_t *copy = PyMem_Malloc((size_t)n + 1);
        if (copy != NULL) { /* else simply not cached */
            memcpy(copy, b, (size_t)n);
            PEntry *e = &pcache[slot];
            e->h = h;
            e->body = copy;
            e->len = n;
            Py_INCREF(k);
            Py_INCREF(v);
            e->name = k;
            e->value = v;
            pcache_n++;
        }
    }
    *name = k;
    *value = v;
    return 1;
}

/* ---- the conversation ------------------------------------------------------------------- */

typedef struct {
    int role, state;
    uint8_t *buf; /* bytes not consumed yet; base is the stream offset of buf[0] */
    Py_ssize_t len, cap;
    i64 base, skip;
    Counts counts;
    i64 rows, copies, lost;
    int decoded;
    PgScan *scan; /* kept once made; scan_active is the Python side's `scan is not None` */
    int scan_active, scan_sides, scan_proof;
} Side;

struct Conv {
    ConvConfig cfg;
    Side sides[2];
    int roles_known, protocol, encryption;
    int has_startup;
    PyObject *su_user, *su_db, *su_app; /* NULL: None */
    int started_at;
    int stopped; /* decode_stopped is not None */
    int st_role, st_frame_null;
    i64 st_off, st_frame;
    StrB st_reason;
    Findings findings;
    Query **qs; /* the listed queries still in memory */
    Py_ssize_t nq, capq;
    i64 queries_total;
    i64 *archived; /* where the first listed queries went in the archive */
    Py_ssize_t narch, caparch;
    Query *last_query, *last_done;
    Query **pend; /* pending[ph:ph + pn] */
    Py_ssize_t ph, pn, capp;
    PyObject *statements, *portals, *parameters; /* dicts, made when first needed */
    int has_pid;
    uint32_t backend_pid;
    uint32_t auth;
    int enc_asked; /* 0, N_SSLREQ or N_GSSENCREQ */
    int batch_error;
    i64 query_errors;
    PyObject *append_name;
};

static PyObject *empty_str(void) { return PyUnicode_FromStringAndSize("", 0); }

static inline int start_seen(Conv *c, int d)
{
    return c->cfg.view != NULL && c->cfg.view[d].isn_seen;
}

static int add_finding(Conv *c, const char *severity, const char *code, StrB *msg,
                       const i64 *frames, int nframes)
{
    if (msg->failed) {
        sb_free(msg);
        PyErr_NoMemory();
        return -1;
    }
    fnd_add(&c->findings, severity, code, msg, frames, nframes);
    sb_free(msg);
    return 0;
}

Conv *pg_new(const ConvConfig *cfg)
{
    type_names();
    Conv *c = PyMem_Calloc(1, sizeof *c);
    if (c == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    c->cfg = *cfg;
    c->sides[0].role = FRONTEND;
    c->sides[1].role = BACKEND;
    c->sides[0].state = c->sides[1].state = ST_START;
    sb_init(&c->st_reason);
    fnd_init(&c->findings);
    return c;
}

void pg_free(Conv *c)
{
    if (c == NULL)
        return;
    for (int d = 0; d < 2; d++) {
        Side *s = &c->sides[d];
        PyMem_Free(s->buf);
        counts_free(&s->counts);
        pgf_scan_free(s->scan);
    }
    Py_XDECREF(c->su_user);
    Py_XDECREF(c->su_db);
    Py_XDECREF(c->su_app);
    sb_free(&c->st_reason);
    fnd_free(&c->findings);
    for (Py_ssize_t i = 0; i < c->nq; i++)
        q_unref(c->qs[i]);
    PyMem_Free(c->qs);
    PyMem_Free(c->archived);
    for (Py_ssize_t i = 0; i < c->pn; i++)
        q_unref(c->pend[c->ph + i]);
    PyMem_Free(c->pend);
    q_unref(c->last_query);
    q_unref(c->last_done);
    Py_XDECREF(c->statements);
    Py_XDECREF(c->portals);
    Py_XDECREF(c->parameters);
    Py_XDECREF(c->append_name);
    PyMem_Free(c);
}

static int count(Side *s, int name, uint32_t code)
{
    CEntry *e = counts_entry(&s->counts, name, code);
    if (e == NULL)
        return -1;
    e->n++;
    return 0;
}

/* _head: the oldest pending query not done */
static inline Query *head(Conv *c)
{
    for (Py_ssize_t i = 0; i < c->pn; i++) {
        Query *q = c->pend[c->ph + i];
        if (!q->done)
            return q;
    }
    return NULL;
}

static void pending_incomplete(Conv *c)
{
    for (Py_ssize_t i = 0; i < c->pn; i++)
        c->pend[c->ph + i]->incomplete = 1;
}

/* ---- state changes ------------------------------------------------------------------------ */

static int not_postgres(Conv *c, int d, i64 off, i64 frame, const char *reason,
                        Py_ssize_t rlen, int stop)
{
    c->protocol = P_UNKNOWN;
    int role = c->sides[d].role;
    c->stopped = 1;
    c->st_role = role;
    c->st_off = off;
    c->st_frame = frame;
    c->st_frame_null = frame == 0;
    c->st_reason.len = 0;
    sb_addn(&c->st_reason, reason, rlen);
    if (c->st_reason.failed) {
        PyErr_NoMemory();
        return -1;
    }
    if (stop)
        c->sides[0].state = c->sides[1].state = ST_STOPPED;
    StrB m;
    sb_init(&m);
    sb_add(&m, ROLE[role]);
    sb_add(&m, " stream at offset ");
    sb_int(&m, off, 1);
    sb_add(&m, ": ");
    sb_addn(&m, reason, rlen);
    sb_add(&m, "; the connection is not PostgreSQL as far as the capture shows, so only its "
               "TCP transfer is analysed");
    return add_finding(c, "warning", "not-postgresql", &m, &frame, frame ? 1 : 0);
}

static int encrypted(Conv *c, int kind, i64 frame, const char *how)
{
    c->protocol = kind == ENC_TLS ? P_TLS : P_GSS;
    c->encryption = kind;
    c->sides[0].state = c->sides[1].state = ST_STOPPED;
    StrB m;
    sb_init(&m);
    if (how != NULL) {
        sb_add(&m, how);
    } else {
        sb_add(&m, "the server accepted ");
        sb_add(&m, c->enc_asked ? NAME[c->enc_asked] : "None");
    }
    sb_add(&m, ": the rest of the connection is ");
    sb_add(&m, kind == ENC_TLS ? "TLS" : "GSS");
    sb_add(&m, "-encrypted, so only its TCP transfer is analysed");
    return add_finding(c, "info", "encrypted", &m, &frame, 1);
}

static int malformed(Conv *c, int d, Side *s, int t, i64 ln, i64 at, i64 frame)
{
    StrB r;
    sb_init(&r);
    if (ln < 4) {
        sb_add(&r, "length ");
        sb_int(&r, ln, 0);
        sb_add(&r, " is under 4");
    } else if (ln > MAX_MESSAGE) {
        sb_add(&r, "length ");
        sb_int(&r, ln, 1);
        sb_add(&r, " is absurd");
    } else {
        sb_addf(&r, "type byte 0x%02x is not a %s message", t & 0xFF, ROLE[s->role]);
    }
    if (r.failed) {
        sb_free(&r);
        PyErr_NoMemory();
        return -1;
    }
    s->state = ST_STOPPED;
    c->stopped = 1;
    c->st_role = s->role;
    c->st_off = at;
    c->st_frame = frame;
    c->st_frame_null = 0;
    c->st_reason.len = 0;
    sb_addn(&c->st_reason, r.p, r.len);
    if (c->st_reason.failed) {
        sb_free(&r);
        PyErr_NoMemory();
        return -1;
    }
    if (!c->sides[0].decoded && !c->sides[1].decoded && !c->queries_total) {
        c->protocol = P_UNKNOWN;
        sb_free(&r);
        return 0;
    }
    StrB m;
    sb_init(&m);
    sb_add(&m, ROLE[s->role]);
    sb_add(&m, " stream at offset ");
    sb_int(&m, at, 1);
    sb_add(&m, ": ");
    sb_addn(&m, r.p, r.len);
    sb_add(&m, "; this direction is not decoded past that point");
    sb_free(&r);
    return add_finding(c, "error", "pgwire-malformed", &m, &frame, 1);
}

static int synced(Conv *c, int d, Side *s, int side, i64 off, i64 pos, i64 frame)
{
    if (!c->roles_known) {
        if (side != s->role) {
            int r = c->sides[0].role;
            c->sides[0].role = c->sides[1].role;
            c->sides[1].role = r;
        }
        c->roles_known = 1;
    }
    s->lost += pos;
    s->state = ST_TYPED;
    if (c->protocol == P_UNKNOWN)
        c->protocol = P_PG;
    if (c->started_at == AT_NONE) {
        c->started_at = AT_MID;
        StrB m;
        sb_init(&m);
        sb_add(&m, "the connection began before the capture: ");
        sb_add(&m, ROLE[s->role]);
        sb_add(&m, " decoding starts at stream offset ");
        sb_int(&m, off + pos, 1);
        sb_add(&m, " (frame ");
        sb_int(&m, frame, 0);
        sb_add(&m, ")");
        if (add_finding(c, "info", "pgwire-mid-stream", &m, &frame, 1) < 0)
            return -1;
    }
    Side *other = &c->sides[1 - d];
    if (other->state == ST_START)
        other->state = ST_SYNC;
    return 0;
}

/* ---- queries: adding, archiving -------------------------------------------------------------- */

static int grow_ptrs(Query ***a, Py_ssize_t *cap, Py_ssize_t need)
{
    if (need <= *cap)
        return 0;
    Py_ssize_t c = *cap ? *cap : 16;
    while (c < need)
        c *= 2;
    Query **p = PyMem_Realloc(*a, sizeof(Query *) * (size_t)c);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *a = p;
    *cap = c;
    return 0;
}

static int pending_append(Conv *c, Query *q)
{
    if (c->ph + c->pn == c->capp) {
        if (c->ph > 0) {
            memmove(c->pend, c->pend + c->ph, sizeof(Query *) * (size_t)c->pn);
            c->ph = 0;
        } else if (grow_ptrs(&c->pend, &c->capp, c->pn + 1) < 0) {
            return -1;
        }
    }
    c->pend[c->ph + c->pn++] = q_ref(q);
    q->in_pending = 1;
    return 0;
}

/* What Query.to_json() shows of a query, times relative to the capture's start: taken from a
 * live Query (q_vals) or read back from its archived record (arch_read), and written by one
 * writer (qv_write). Strings are UTF-8 (NULL for None); numbers past 64 bits (a sum of command
 * tags, an absurd goodput) are kept as their decimal text. */
enum { V_NONE, V_INT, V_BIG };
enum { S_SQL, S_TAG, S_ERR, S_ROWS_BIG = S_ERR + 6, S_GOODPUT_BIG, N_STRINGS };

typedef struct {
    const char *s[N_STRINGS];
    Py_ssize_t len[N_STRINGS];
    int sql_truncated, kind, rows_kind, responded, has_error, incomplete, has_median, has_hi;
    int goodput_kind, ntop;
    i64 rows, data_rows, copy_data, resp_bytes, resp_msgs, sent_frame, first_frame, last_frame;
    i64 seg_n, median, hi, goodput;
    double sent_s, first_s, last_s;
    i64 top_v[6], top_c[6]; /* Histogram.top(6) */
} QVals;

static int q_vals(Conv *c, Query *q, QVals *v, PyObject *keep[2]);
static PyObject *arch_record(QVals *v);


/* _archive_answered: the head of the list that nothing can change any more goes out. */
static int archive_answered(Conv *c)
{
    PyObject *archive = c->cfg.archive;
    Py_ssize_t n = 0;
    int r = 0;
    if (c->append_name == NULL) {
        c->append_name = PyUnicode_InternFromString("append");
        if (c->append_name == NULL)
            return -1;
    }
    for (; n < c->nq; n++) {
        Query *q = c->qs[n];
        if (q == c->last_done || q->in_pending)
            break;
        Py_ssize_t at = PyObject_Size(archive);
        if (at < 0) {
            r = -1;
            break;
        }
        if (c->narch == c->caparch) {
            Py_ssize_t cap = c->caparch ? 2 * c->caparch : 256;
            i64 *a = PyMem_Realloc(c->archived, sizeof(i64) * (size_t)cap);
            if (a == NULL) {
                PyErr_NoMemory();
                r = -1;
                break;
            }
            c->archived = a;
            c->caparch = cap;
        }
        c->archived[c->narch++] = at;
        QVals v;
        PyObject *keep[2];
        PyObject *text = q_vals(c, q, &v, keep) < 0 ? NULL : arch_record(&v);
        Py_XDECREF(keep[0]);
        Py_XDECREF(keep[1]);
        if (text == NULL) {
            r = -1;
            break;
        }
        PyObject *res = PyObject_CallMethodOneArg(archive, c->append_name, text);
        Py_DECREF(text);
        if (res == NULL) {
            r = -1;
            break;
        }
        Py_DECREF(res);
    }
    /* del queries[:n] */
    for (Py_ssize_t i = 0; i < n; i++)
        q_unref(c->qs[i]);
    memmove(c->qs, c->qs + n, sizeof(Query *) * (size_t)(c->nq - n));
    c->nq -= n;
    return r;
}

/* _add_query; q holds no reference yet (freed here on failure). */
static int add_query(Conv *c, Query *q, i64 frame)
{
    if (q == NULL)
        return -1;
    q_ref(q); /* ours while we add it */
    c->queries_total++;
    q_set(&c->last_query, q);
    if (pending_append(c, q) < 0)
        goto fail;
    if (c->nq + c->narch < MAX_QUERIES) {
        if (grow_ptrs(&c->qs, &c->capq, c->nq + 1) < 0)
            goto fail;
        c->qs[c->nq++] = q_ref(q);
        if (c->nq >= ARCHIVE_AT && c->cfg.archive != NULL && archive_answered(c) < 0)
            goto fail;
    } else if (c->queries_total == MAX_QUERIES + 1) {
        StrB m;
        sb_init(&m);
        sb_add(&m, "more than 10,000 queries on this connection: the first 10,000 are listed, "
                   "the message counts cover all of them (from frame ");
        sb_int(&m, frame, 0);
        sb_add(&m, ")");
        if (add_finding(c, "info", "queries-capped", &m, &frame, 1) < 0)
            goto fail;
    }
    q_unref(q);
    return 0;
fail:
    q_unref(q);
    return -1;
}

/* ---- names of statements and portals (_bounded_put) ----------------------------------------- */

static int bounded_put(PyObject **names, PyObject *key, PyObject *value)
{
    if (*names == NULL) {
        *names = PyDict_New();
        if (*names == NULL)
            return -1;
    }
    PyObject *d = *names;
    PyObject *had = PyDict_GetItemWithError(d, key);
    if (had != NULL) {
        if (PyDict_DelItem(d, key) < 0)
            return -1;
    } else if (PyErr_Occurred()) {
        return -1;
    }
    if (PyDict_GET_SIZE(d) >= MAX_NAMES) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        if (PyDict_Next(d, &pos, &k, &v)) {
            Py_INCREF(k);
            int r = PyDict_DelItem(d, k);
            Py_DECREF(k);
            if (r < 0)
                return -1;
        }
    }
    return PyDict_SetItem(d, key, value);
}

/* names.get(key, ""), a new reference */
static PyObject *name_get(PyObject *names, PyObject *key)
{
    PyObject *v = names != NULL ? PyDict_GetItemWithError(names, key) : NULL;
    if (v != NULL) {
        Py_INCREF(v);
        return v;
    }
    if (PyErr_Occurred())
        return NULL;
    return empty_str();
}

/* cstrings(body, 2) when it has 2 parts: the first two, decoded */
static int two_cstrings(const uint8_t *b, Py_ssize_t n, PyObject **a, PyObject **z)
{
    Py_ssize_t i = upto_nul(b, n);
    if (i == n)
        return 0;
    Py_ssize_t j = upto_nul(b + i + 1, n - i - 1);
    *a = dec(b, i);
    if (*a == NULL)
        return -1;
    *z = dec(b + i + 1, j);
    if (*z == NULL) {
        Py_CLEAR(*a);
        return -1;
    }
    return 1;
}

/* ---- messages ---------------------------------------------------------------------------- */

static int frontend_message(Conv *c, Side *s, int t, const uint8_t *b, Py_ssize_t n, i64 frame,
                            double ts)
{
    int name = type_name[FRONTEND][t];
    if (t == 'p')
        name = password_reply(c->auth);
    if (count(s, name, 0) < 0)
        return -1;
    if (t == 'Q') {
        Py_ssize_t m = n;
        while (m > 0 && b[m - 1] == 0)
            m--;
        return add_query(c, q_new(dec(b, m), K_SIMPLE, ts, frame), frame);
    }
    if (t == 'P' || t == 'B') {
        PyObject *a, *z;
        int r = two_cstrings(b, n, &a, &z);
        if (r <= 0)
            return r;
        if (t == 'P') {
            r = bounded_put(&c->statements, a, z);
        } else {
            PyObject *sql = name_get(c->statements, z);
            r = sql == NULL ? -1 : bounded_put(&c->portals, a, sql);
            Py_XDECREF(sql);
        }
        Py_DECREF(a);
        Py_DECREF(z);
        return r;
    }
    if (t == 'E') {
        PyObject *portal = dec(b, upto_nul(b, n));
        if (portal == NULL)
            return -1;
        PyObject *sql = name_get(c->portals, portal);
        Py_DECREF(portal);
        return add_query(c, q_new(sql, K_EXTENDED, ts, frame), frame);
    }
    if (t == 'F' && n >= 4) {
        char text[48];
        snprintf(text, sizeof text, "FunctionCall oid %u", (unsigned)be32(b));
        return add_query(c, q_new(PyUnicode_FromString(text), K_FUNCTION, ts, frame), frame);
    }
    return 0;
}

/* messages.error_fields, the fields a report reads: the last of each letter */
static void error_fields(const uint8_t *b, Py_ssize_t n, const uint8_t *at[6], Py_ssize_t len[6])
{
    for (int k = 0; k < 6; k++)
        at[k] = NULL;
    Py_ssize_t i = 0;
    while (i <= n) {
        Py_ssize_t m = upto_nul(b + i, n - i);
        if (m > 0) {
            for (int k = 0; k < 6; k++) {
                if (b[i] == (uint8_t)ERR_FIELD[k]) {
                    at[k] = b + i + 1;
                    len[k] = m - 1;
                }
            }
        }
        i += m + 1;
    }
}

/* " ".join(sql.split())[:60] + "…" when longer, added to m */
static int add_sql_excerpt(StrB *m, PyObject *sql)
{
    PyObject *parts = PyUnicode_Split(sql, NULL, -1);
    if (parts == NULL)
        return -1;
    PyObject *sep = PyUnicode_FromStringAndSize(" ", 1);
    if (sep == NULL) {
        Py_DECREF(parts);
        return -1;
    }
    PyObject *joined = PyUnicode_Join(sep, parts);
    Py_DECREF(sep);
    Py_DECREF(parts);
    if (joined == NULL)
        return -1;
    Py_ssize_t n = PyUnicode_GET_LENGTH(joined);
    PyObject *cut = PyUnicode_Substring(joined, 0, n > 60 ? 60 : n);
    Py_DECREF(joined);
    if (cut == NULL)
        return -1;
    sb_str_obj(m, cut);
    Py_DECREF(cut);
    if (n > 60)
        sb_add(m, "\xe2\x80\xa6");
    return 0;
}

static int backend_message(Conv *c, Side *s, int t, const uint8_t *b, Py_ssize_t n, i64 ln,
                           i64 frame, double ts)
{
    int name = type_name[BACKEND][t];
    uint32_t code = 0;
    if (t == 'R' && n >= 4) {
        c->auth = (uint32_t)be32(b);
        name = auth_name(c->auth);
        code = c->auth;
    }
    if (count(s, name, code) < 0)
        return -1;
    if (t == 'R')
        return 0;
    Query *q = head(c);
    if (t == 'Z') {
        Query *target = q != NULL && q->responded ? q : c->last_done;
        if (target != NULL)
            respond(target, ln + 1, 1, ts, frame);
        Py_ssize_t keep = 0;
        for (Py_ssize_t i = 0; i < c->pn; i++) {
            Query *p = c->pend[c->ph + i];
            if (p->responded || (c->batch_error && p->kind == K_EXTENDED)) {
                p->done = 1;
                q_set(&c->last_done, p);
                p->in_pending = 0;
                q_unref(p);
            } else {
                c->pend[c->ph + keep++] = p;
            }
        }
        c->pn = keep;
        if (!keep)
            c->ph = 0;
        c->batch_error = 0;
        return 0;
    }
    if (t == 'S' && n > 0) {
        PyObject *k, *v;
        int r = parameter_text(b, n, &k, &v);
        if (r <= 0)
            return r;
        if (c->parameters == NULL && (c->parameters = PyDict_New()) == NULL)
            r = -1;
        else if (PyDict_GET_SIZE(c->parameters) < MAX_PARAMETERS)
            r = PyDict_SetItem(c->parameters, k, v);
        else
            r = 0;
        Py_DECREF(k);
        Py_DECREF(v);
        return r;
    }
    if (t == 'K' && n >= 4) {
        c->has_pid = 1;
        c->backend_pid = (uint32_t)be32(b);
        return 0;
    }
    if (q == NULL) {
        if (t == 'E') { /* an error outside any query: authentication, startup */
            const uint8_t *at[6];
            Py_ssize_t len[6];
            error_fields(b, n, at, len);
            StrB m;
            sb_init(&m);
            sb_add(&m, "server error ");
            for (int k = 0; k < 2; k++) {
                if (at[k] != NULL) {
                    PyObject *x = dec(at[k], len[k]);
                    if (x == NULL) {
                        sb_free(&m);
                        return -1;
                    }
                    sb_str_obj(&m, x);
                    Py_DECREF(x);
                }
                if (k == 0)
                    sb_add(&m, ": ");
            }
            return add_finding(c, "warning", "server-error", &m, &frame, 1);
        }
        return 0;
    }
    respond(q, ln + 1, 1, ts, frame);
    if (t == 'C' || t == 'I') {
        PyObject *tag;
        if (t == 'C') {
            Py_ssize_t m = n;
            while (m > 0 && b[m - 1] == 0)
                m--;
            tag = dec(b, m);
        } else {
            tag = empty_str();
        }
        if (command_complete(q, tag) < 0)
            return -1;
        if (q->kind != K_SIMPLE) {
            q->done = 1;
            q_set(&c->last_done, q);
        }
    } else if (t == 'E') {
        const uint8_t *at[6];
        Py_ssize_t len[6];
        error_fields(b, n, at, len);
        PyObject *err[6];
        for (int k = 0; k < 6; k++) {
            err[k] = NULL;
            if (at[k] != NULL && (err[k] = dec(at[k], len[k])) == NULL) {
                while (k-- > 0)
                    Py_XDECREF(err[k]);
                return -1;
            }
        }
        for (int k = 0; k < 6; k++)
            Py_XSETREF(q->err[k], err[k]);
        q->has_error = 1;
        q->done = 1;
        q_set(&c->last_done, q);
        c->query_errors++;
        if (c->query_errors <= MAX_ERROR_FINDINGS) {
            StrB m;
            sb_init(&m);
            sb_add(&m, "a query failed with ");
            if (q->err[0] != NULL)
                sb_str_obj(&m, q->err[0]);
            else
                sb_add(&m, "?");
            sb_add(&m, " (");
            if (q->err[1] != NULL)
                sb_str_obj(&m, q->err[1]);
            sb_add(&m, "): ");
            if (add_sql_excerpt(&m, q->sql) < 0) {
                sb_free(&m);
                return -1;
            }
            i64 frames[2] = {q->sent_frame, frame};
            if (add_finding(c, "info", "query-error", &m, frames, 2) < 0)
                return -1;
        }
        c->batch_error = 1;
    } else if (t == 's') { /* PortalSuspended: row limit reached */
        if (q->tag == NULL || PyUnicode_GET_LENGTH(q->tag) == 0) {
            PyObject *tag = PyUnicode_FromString("PortalSuspended");
            if (tag == NULL)
                return -1;
            Py_XSETREF(q->tag, tag);
        }
        q->done = 1;
        q_set(&c->last_done, q);
    } else if (t == 'G' || t == 'H' || t == 'W') {
        q->kind = K_COPY;
    }
    return 0;
}

static inline int message(Conv *c, Side *s, int t, const uint8_t *b, Py_ssize_t n, i64 ln,
                          i64 frame, double ts)
{
    s->decoded = 1;
    if (s->role == FRONTEND)
        return frontend_message(c, s, t, b, n, frame, ts);
    return backend_message(c, s, t, b, n, ln, frame, ts);
}

static int bulk(Conv *c, Side *s, i64 rows, i64 copies, i64 nbytes, i64 frame, double ts)
{
    s->decoded = 1;
    if (rows) {
        if (!s->rows && counts_entry(&s->counts, N_DATAROW, 0) == NULL)
            return -1;
        s->rows += rows;
    }
    if (copies) {
        if (!s->copies && counts_entry(&s->counts, N_COPYDATA, 0) == NULL)
            return -1;
        s->copies += copies;
    }
    if (s->role == FRONTEND) { /* COPY FROM STDIN: rows follow the query that asked for them */
        if (c->last_query != NULL)
            c->last_query->copy_data += copies;
        return 0;
    }
    Query *q = head(c);
    if (q == NULL)
        return 0;
    q->data_rows += rows;
    q->copy_data += copies;
    respond(q, nbytes, rows + copies, ts, frame);
    return 0;
}

/* ---- consuming bytes ---------------------------------------------------------------------- */

/* DataRow and CopyData counted since the last control message, not yet charged (_bulk). */
typedef struct {
    i64 rows, copies, nbytes;
} Bulk;

/* _typed: the message walk from pos; the position reached, -1 on error. The walk starts with
 * what `bk` holds and, unless `last`, leaves its run uncharged in `bk` for the walk that goes
 * on where this one stops (pg_feed's seam: as if one walk). */
static Py_ssize_t typed_walk(Conv *c, int d, Side *s, const uint8_t *b, Py_ssize_t n,
                             Py_ssize_t pos, i64 off, i64 frame, double ts, Bulk *bk,
                             int last)
{
    const unsigned char *types = type_name[s->role];
    int big_d = s->role == BACKEND ? 'D' : -1;
    i64 rows = bk->rows, copies = bk->copies, nbytes = bk->nbytes;
    bk->rows = bk->copies = bk->nbytes = 0;
    while (n - pos >= 5) {
        int t = b[pos];
        if (t == 'd' || t == big_d) {
            /* the hot path: a run of DataRow or CopyData, counted, never parsed */
            i64 k, end, bad;
            pgf_message_run(b, n, pos, &k, &end, &bad);
            nbytes += end - pos;
            if (t == 'D')
                rows += k;
            else
                copies += k;
            if (bad >= 0) {
                if ((rows || copies) && bulk(c, s, rows, copies, nbytes, frame, ts) < 0)
                    return -1;
                if (malformed(c, d, s, t, bad, off + end, frame) < 0)
                    return -1;
                return n;
            }
            if (end > n) { /* the last one continues in the next segment */
                s->skip = end - n;
                pos = n;
                break;
            }
            pos = (Py_ssize_t)end;
            continue;
        }
        i64 ln = be32(b + pos + 1);
        if (rows || copies) {
            if (bulk(c, s, rows, copies, nbytes, frame, ts) < 0)
                return -1;
            rows = copies = nbytes = 0;
        }
        i64 end = pos + 1 + ln;
        if (!types[t] || ln < 4 || ln > MAX_MESSAGE) {
            if (malformed(c, d, s, t, ln, off + pos, frame) < 0)
                return -1;
            return n;
        }
        if (end > n) {
            if (ln <= KEEP_CAP)
                break;
            Py_ssize_t have = n - (pos + 5);
            if (have > KEEP_CAP)
                have = (Py_ssize_t)KEEP_CAP;
            if (message(c, s, t, b + pos + 5, have, ln, frame, ts) < 0)
                return -1;
            s->skip = end - n;
            pos = n;
            break;
        }
        if (message(c, s, t, b + pos + 5, (Py_ssize_t)ln - 4, ln, frame, ts) < 0)
            return -1;
        pos = (Py_ssize_t)end;
        if (s->state == ST_STOPPED)
            return n;
    }
    if (!last) {
        bk->rows = rows;
        bk->copies = copies;
        bk->nbytes = nbytes;
    } else if ((rows || copies) && bulk(c, s, rows, copies, nbytes, frame, ts) < 0) {
        return -1;
    }
    return pos;
}

static Py_ssize_t typed(Conv *c, int d, Side *s, const uint8_t *b, Py_ssize_t n,
                        Py_ssize_t pos, i64 off, i64 frame, double ts)
{
    Bulk bk = {0, 0, 0};
    return typed_walk(c, d, s, b, n, pos, off, frame, ts, &bk, 1);
}

static const char NOT_STARTUP[] = "the first message is not a PostgreSQL startup, SSL or "
                                  "cancel request";

/* _direct_tls: PostgreSQL 17's direct TLS, a ClientHello offering ALPN "postgresql" */
static Py_ssize_t direct_tls(Conv *c, int d, Side *s, const uint8_t *b, Py_ssize_t n, i64 off,
                             i64 frame)
{
    i64 j, stop, hs_end;
    int r = pgf_client_hello(b, n, &j, &stop, &hs_end);
    if (r == ALPN_NEED_MORE && n <= MAX_CLIENT_HELLO)
        return 0;
    int pg = 0, names = 0;
    if (r == ALPN_LIST) {
        for (i64 k = j; k < stop; k += 1 + b[k]) {
            i64 a = k + 1, z = k + 1 + b[k] < hs_end ? k + 1 + b[k] : hs_end;
            if (z - a == 10 && !memcmp(b + a, "postgresql", 10))
                pg = 1;
            names++;
        }
    }
    if (pg) {
        c->roles_known = 1;
        s->decoded = 1;
        if (c->started_at == AT_NONE)
            c->started_at = AT_STARTUP;
        if (encrypted(c, ENC_TLS, frame, "the client started TLS directly (PostgreSQL 17 "
                                         "sslnegotiation=direct, ALPN \"postgresql\")") < 0)
            return -1;
        return n;
    }
    if (start_seen(c, d)) {
        StrB m;
        sb_init(&m);
        sb_add(&m, "the first message is a TLS ClientHello without ALPN \"postgresql\" "
                   "(offered: ");
        if (names) { /* ", ".join of the names decoded as ASCII with replacement */
            for (i64 k = j; k < stop; k += 1 + b[k]) {
                i64 a = k + 1, z = k + 1 + b[k] < hs_end ? k + 1 + b[k] : hs_end;
                if (k != j)
                    sb_add(&m, ", ");
                for (i64 x = a; x < z; x++) {
                    if (b[x] < 0x80)
                        sb_addn(&m, (const char *)b + x, 1);
                    else
                        sb_add(&m, "\xef\xbf\xbd");
                }
            }
        } else {
            sb_add(&m, "none");
        }
        sb_add(&m, "), which PostgreSQL's direct TLS requires");
        if (m.failed) {
            sb_free(&m);
            PyErr_NoMemory();
            return -1;
        }
        int e = not_postgres(c, d, off, frame, m.p, m.len, 1);
        sb_free(&m);
        if (e < 0)
            return -1;
    } else {
        s->state = ST_SYNC;
    }
    return 0;
}

/* startup_params(body).get(key) for user, database, application_name: the last of each */
static int startup_values(Conv *c, const uint8_t *b, Py_ssize_t n)
{
    Py_ssize_t st[65], ln[65];
    int items = 0;
    Py_ssize_t p = 0;
    /* body.split(b"\0", 64): items 0..63 are what lies between NULs (item 64, the rest, is
     * never a key or a value) */
    for (;;) {
        Py_ssize_t m = upto_nul(b + p, n - p);
        st[items] = p;
        ln[items] = m;
        items++;
        if (p + m == n || items == 65)
            break;
        p += m + 1;
    }
    static const char *const keys[3] = {"user", "database", "application_name"};
    int found[3] = {-1, -1, -1};
    for (int i = 0; i + 1 < items; i += 2) {
        for (int k = 0; k < 3; k++)
            if (ln[i] == (Py_ssize_t)strlen(keys[k]) && !memcmp(b + st[i], keys[k], (size_t)ln[i]))
                found[k] = i + 1;
    }
    PyObject **out[3] = {&c->su_user, &c->su_db, &c->su_app};
    for (int k = 0; k < 3; k++) {
        PyObject *v = NULL;
        if (found[k] >= 0 && (v = dec(b + st[found[k]], ln[found[k]])) == NULL)
            return -1;
        Py_XSETREF(*out[k], v);
    }
    return 0;
}

/* _start: the first bytes of a direction (untyped startup messages, or an SSL answer); the
 * bytes used, -1 on error. */
static Py_ssize_t start_(Conv *c, int d, Side *s, const uint8_t *b, Py_ssize_t n, i64 off,
                         i64 frame)
{
    if (s->role == BACKEND) {
        if (c->enc_asked) {
            if (n == 0)
                return 0;
            if (b[0] == 'S' || b[0] == 'G')
                return encrypted(c, b[0] == 'S' ? ENC_TLS : ENC_GSS, frame, NULL) < 0 ? -1 : n;
            if (b[0] == 'N') { /* refused: plaintext goes on, startup follows */
                c->enc_asked = 0;
                return count(s, N_ENC_REFUSED, 0) < 0 ? -1 : 1;
            }
        }
        /* the frontend speaks first; with its start seen, the backend's is typed framing */
        s->state = c->has_startup || start_seen(c, d) ? ST_TYPED : ST_SYNC;
        return 0;
    }
    if (n >= 1 && b[0] == 0x16) /* a TLS record, where a startup length would be >= 369 MB */
        return direct_tls(c, d, s, b, n, off, frame);
    if (n < 8)
        return 0;
    i64 ln = be32(b), code = be32(b + 4);
    int known = code == SSL_REQUEST || code == GSSENC_REQUEST || code == CANCEL_REQUEST
                || code >> 16 == 3;
    if (!known || ln < 8 || ln > 10000) {
        if (start_seen(c, d)) {
            if (not_postgres(c, d, off, frame, NOT_STARTUP, (Py_ssize_t)strlen(NOT_STARTUP), 1)
                < 0)
                return -1;
        } else {
            s->state = ST_SYNC;
        }
        return 0;
    }
    if (n < ln)
        return 0;
    c->roles_known = 1;
    s->decoded = 1;
    if (c->started_at == AT_NONE)
        c->started_at = AT_STARTUP;
    if (c->protocol == P_UNKNOWN)
        c->protocol = P_PG;
    if (code == SSL_REQUEST || code == GSSENC_REQUEST) {
        int name = code == SSL_REQUEST ? N_SSLREQ : N_GSSENCREQ;
        if (count(s, name, 0) < 0)
            return -1;
        c->enc_asked = name;
        return (Py_ssize_t)ln;
    }
    if (code == CANCEL_REQUEST) {
        if (count(s, N_CANCEL, 0) < 0)
            return -1;
        s->state = ST_TYPED;
        return (Py_ssize_t)ln;
    }
    if (count(s, N_STARTUP, 0) < 0 || startup_values(c, b + 8, (Py_ssize_t)ln - 8) < 0)
        return -1;
    c->has_startup = 1;
    s->state = ST_TYPED;
    Side *other = &c->sides[1 - d];
    if (other->state == ST_START && !c->enc_asked)
        other->state = ST_TYPED;
    return (Py_ssize_t)ln;
}

/* _consume: bytes of a side not in the steady state; the position reached, -1 on error. */
static Py_ssize_t consume(Conv *c, int d, Side *s, const uint8_t *b, Py_ssize_t n, i64 off,
                          i64 frame, double ts)
{
    Py_ssize_t pos = 0;
    while (s->state == ST_START) {
        Py_ssize_t used = start_(c, d, s, b + pos, n - pos, off + pos, frame);
        if (used < 0)
            return -1;
        pos += used;
        if (s->state == ST_STOPPED || (s->state == ST_START && !used))
            return pos;
    }
    if (s->state == ST_STOPPED)
        return pos;
    if (s->state == ST_SYNC) {
        int sides = c->roles_known ? s->role : 2, proof = !c->roles_known;
        if (s->scan == NULL && (s->scan = pgf_scan_new()) == NULL)
            return -1;
        if (!s->scan_active || s->scan_sides != sides || s->scan_proof != proof) {
            pgf_scan_reset(s->scan, sides, proof);
            s->scan_active = 1;
            s->scan_sides = sides;
            s->scan_proof = proof;
        }
        Py_ssize_t at;
        int side;
        int hit = pgf_scan_find(s->scan, b + pos, n - pos, off + pos, 1, &at, &side);
        if (hit < 0)
            return -1;
        if (!hit)
            return pos; /* keep buffering (bounded by SYNC_WINDOW) */
        s->scan_active = 0;
        pos += at;
        if (synced(c, d, s, side, off, pos, frame) < 0)
            return -1;
    }
    return typed(c, d, s, b, n, pos, off, frame, ts);
}

static int buf_reserve(Side *s, Py_ssize_t need)
{
    if (need <= s->cap)
        return 0;
    Py_ssize_t cap = s->cap ? s->cap : 256;
    while (cap < need)
        cap *= 2;
    uint8_t *p = PyMem_Realloc(s->buf, (size_t)cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    s->buf = p;
    s->cap = cap;
    return 0;
}

/* An empty buffer gives back what a large message or a sync window made it take. */
static void buf_trim(Side *s)
{
    if (s->len == 0 && s->cap > (1 << 16)) {
        PyMem_Free(s->buf);
        s->buf = NULL;
        s->cap = 0;
    }
}

/* _settle_sync: no boundary with proof in a full window: accept one without, or give up. */
static int settle_sync(Conv *c, int d, Side *s, i64 frame, double ts)
{
    s->scan_active = 0;
    Py_ssize_t at;
    if (!pgf_find_boundary(s->buf, s->len, s->role, 0, &at)) {
        s->lost += s->len;
        s->len = 0;
        buf_trim(s);
        if (!c->sides[0].decoded && !c->sides[1].decoded && c->protocol == P_UNKNOWN) {
            s->state = ST_STOPPED;
            if (!c->stopped) {
                char reason[96];
                char num[40];
                snprintf(reason, sizeof reason, "no PostgreSQL message framing in %s bytes",
                         fmt_int(num, s->lost, 1));
                return not_postgres(c, d, s->base, frame, reason, (Py_ssize_t)strlen(reason),
                                    0);
            }
        }
        return 0;
    }
    if (synced(c, d, s, s->role, s->base, at, frame) < 0)
        return -1;
    Py_ssize_t len = s->len;
    i64 base = s->base;
    Py_ssize_t done = typed(c, d, s, s->buf, len, at, base, frame, ts);
    if (done < 0)
        return -1;
    if (done < len)
        memmove(s->buf, s->buf + done, (size_t)(len - done));
    s->len = len - done;
    s->base = base + done;
    buf_trim(s);
    return 0;
}

static int buf_append(Side *s, const uint8_t *p, Py_ssize_t n)
{
    if (n <= 0)
        return 0;
    if (buf_reserve(s, s->len + n) < 0)
        return -1;
    memcpy(s->buf + s->len, p, (size_t)n);
    s->len += n;
    return 0;
}

/* How many bytes of p[0:n] the message begun in a TYPED side's buffer takes, so that walking
 * the buffer alone does what walking s.buf + data does up to that message's end: the rest of
 * its header; then, for a control message, its body up to its end (or what _typed reads of
 * an oversized one that is not all here); nothing more for a DataRow or CopyData, whose body
 * the walk skips. What the buffer holds is what a walk left: a cut header, or a control
 * message of at most KEEP_CAP; -1 if it were anything else (then the caller joins it all). */
static Py_ssize_t first_need(const Side *s, const uint8_t *p, Py_ssize_t n)
{
    Py_ssize_t have = s->len, take = 0;
    if (have < 5) {
        take = 5 - have < n ? 5 - have : n;
        if (have + take < 5)
            return take;
    }
    uint8_t head[5];
    for (int i = 0; i < 5; i++)
        head[i] = i < have ? s->buf[i] : p[i - have];
    int t = head[0];
    i64 ln = be32(head + 1);
    if (!type_name[s->role][t] || ln < 4 || ln > MAX_MESSAGE)
        return take; /* malformed: the walk stops at the header */
    i64 whole = 1 + ln, here = (i64)have + (i64)n, want;
    if (whole <= have)
        return -1; /* a whole message waiting: not what a walk leaves */
    if (t == 'd' || (t == 'D' && s->role == BACKEND))
        return take; /* counted from its header, its body skipped */
    if (whole <= here)
        want = whole; /* all here: read to its end, however long */
    else if (ln <= KEEP_CAP)
        want = here; /* incomplete: it waits, with everything after it */
    else
        want = here < 5 + KEEP_CAP ? here : 5 + KEEP_CAP; /* read up to KEEP_CAP, skipped */
    return (Py_ssize_t)(want - have);
}

int pg_feed(Conv *c, int d, const uint8_t *data, Py_ssize_t n, i64 offset, i64 frame, double ts)
{
    Side *s = &c->sides[d];
    if (s->state == ST_STOPPED) {
        if (s->buf != NULL) { /* nothing reads it any more */
            PyMem_Free(s->buf);
            s->buf = NULL;
            s->len = s->cap = 0;
        }
        return 0;
    }
    if (c->pn && s->role == BACKEND) {
        Query *q = head(c);
        if (q != NULL && hist_add(&q->segments, n) < 0)
            return -1;
    }
    Bulk carry = {0, 0, 0}; /* a run begun in the buffered message, across the seam */
    for (;;) {
        Py_ssize_t start = 0; /* where the next message starts in data */
        if (s->skip) {
            start = s->skip < n ? (Py_ssize_t)s->skip : n;
            s->skip -= start;
            if (start == n) {
                if ((carry.rows || carry.copies)
                    && bulk(c, s, carry.rows, carry.copies, carry.nbytes, frame, ts) < 0)
                    return -1;
                return 0;
            }
        }
        Py_ssize_t take = s->len > 0 && s->state == ST_TYPED
                              ? first_need(s, data + start, n - start) : -1;
        if (take >= 0) {
            /* The Python walks s.buf + data[start:]. A copy of each segment that follows a
             * cut message is avoided: the buffered message gets only the bytes it needs and
             * is walked alone, then the walk goes on in data itself, as a segment of its own
             * (bulk messages flushed at the seam add up to the same counts). */
            i64 base = s->base;
            i64 off_rest = base + s->len - start; /* the stream offset of data[0] */
            if (buf_append(s, data + start, take) < 0)
                return -1;
            start += take;
            Py_ssize_t pos = typed_walk(c, d, s, s->buf, s->len, 0, base, frame, ts, &carry,
                                        start == n);
            if (pos < 0)
                return -1;
            if (s->state == ST_STOPPED) {
                s->len = 0;
                buf_trim(s);
                return 0;
            }
            if (pos < s->len) { /* still incomplete: all of data is in the buffer */
                if (pos > 0)
                    memmove(s->buf, s->buf + pos, (size_t)(s->len - pos));
                s->len -= pos;
                s->base = base + pos;
                return 0;
            }
            s->len = 0;
            s->base = base + pos;
            buf_trim(s);
            if (start == n)
                return 0; /* the walk was the last: charged */
            data += start;
            n -= start;
            offset = off_rest + start;
            continue;
        }
        const uint8_t *b = data;
        Py_ssize_t bn = n;
        i64 off = offset;
        int joined = s->len > 0;
        if (joined) { /* s.buf + data[start:]: the state is not the steady one */
            if (buf_append(s, data + start, n - start) < 0)
                return -1;
            b = s->buf;
            bn = s->len;
            off = s->base;
            start = 0;
        }
        Py_ssize_t pos;
        if (s->state == ST_TYPED) { /* the steady state: straight to the message walk */
            pos = typed_walk(c, d, s, b, bn, start, off, frame, ts, &carry, 1);
        } else {
            b += start;
            bn -= start;
            off += start;
            pos = consume(c, d, s, b, bn, off, frame, ts);
        }
        if (pos < 0)
            return -1;
        /* s.buf = data[pos:] */
        if (joined) {
            Py_ssize_t rest = bn - pos;
            if (rest > 0 && pos > 0)
                memmove(s->buf, s->buf + pos, (size_t)rest);
            s->len = rest > 0 ? rest : 0;
        } else {
            s->len = 0;
            if (pos < bn && buf_append(s, b + pos, bn - pos) < 0)
                return -1;
        }
        s->base = off + pos;
        if (s->state == ST_SYNC && s->len > SYNC_WINDOW)
            return settle_sync(c, d, s, frame, ts);
        if (s->state == ST_STOPPED)
            s->len = 0;
        buf_trim(s);
        return 0;
    }
}

int pg_gap(Conv *c, int d, i64 offset, i64 length, i64 frame, double ts)
{
    Side *s = &c->sides[d];
    if (s->state == ST_STOPPED)
        return 0;
    if (s->skip >= length && s->len == 0) {
        s->skip -= length; /* inside a counted body: no boundary was lost */
        return 0;
    }
    s->lost += length + s->len + s->skip;
    s->len = 0;
    s->skip = 0;
    s->base = offset + length;
    s->scan_active = 0;
    buf_trim(s);
    if (s->state != ST_START)
        s->state = ST_SYNC;
    pending_incomplete(c);
    StrB m;
    sb_init(&m);
    sb_add(&m, ROLE[s->role]);
    sb_add(&m, " stream: a capture gap of ");
    sb_int(&m, length, 1);
    sb_add(&m, " bytes at offset ");
    sb_int(&m, offset, 1);
    sb_add(&m, " cut a message; decoding resumes at the next provable message boundary");
    return add_finding(c, "warning", "pgwire-resync", &m, &frame, 1);
}

int pg_finish(Conv *c)
{
    if (c->query_errors > MAX_ERROR_FINDINGS) {
        StrB m;
        sb_init(&m);
        sb_int(&m, c->query_errors, 1);
        sb_add(&m, " queries failed in all (the first 20 are listed)");
        if (add_finding(c, "info", "query-error", &m, NULL, 0) < 0)
            return -1;
    }
    for (int d = 0; d < 2; d++) {
        Side *s = &c->sides[d];
        if (s->state == ST_SYNC && s->len && settle_sync(c, d, s, 0, 0.0) < 0)
            return -1;
    }
    pending_incomplete(c);
    return 0;
}

/* ---- report ------------------------------------------------------------------------------ */

int pg_frontend_direction(const Conv *c)
{
    if (c->protocol == P_UNKNOWN)
        return -1;
    return c->sides[0].role == FRONTEND ? 0 : 1;
}

int pg_is_postgres(const Conv *c) { return c->protocol != P_UNKNOWN; }

i64 pg_listed(const Conv *c) { return (i64)c->narch + (i64)c->nq; }

/* a time as the report shows it: round(ts - start, 6) */
static inline double rel(const Conv *c, double ts) { return py_round(ts - c->cfg.start, 6); }

/* ---- a listed query's report: its values, their writer, their archived record ----------- */

static int utf8_of(PyObject *o, QVals *v, int k)
{
    v->s[k] = NULL;
    v->len[k] = 0;
    if (o == NULL || o == Py_None)
        return 0;
    v->s[k] = PyUnicode_AsUTF8AndSize(o, &v->len[k]);
    return v->s[k] == NULL ? -1 : 0;
}

/* The values of a live query. Numbers past 64 bits go to text held in keep[0..1] (new
 * references, NULL when none), for the caller to release once they are written. */
static int q_vals(Conv *c, Query *q, QVals *v, PyObject *keep[2])
{
    memset(v, 0, sizeof *v);
    keep[0] = keep[1] = NULL;
    if (utf8_of(q->sql, v, S_SQL) < 0 || utf8_of(q->tag, v, S_TAG) < 0)
        return -1;
    for (int k = 0; k < 6; k++)
        if (utf8_of(q->has_error ? q->err[k] : NULL, v, S_ERR + k) < 0)
            return -1;
    v->sql_truncated = q->sql_truncated;
    v->kind = q->kind;
    /* Query.rows */
    if (q->tags_rows_big != NULL) {
        v->rows_kind = V_BIG;
        keep[0] = PyObject_Str(q->tags_rows_big);
        if (keep[0] == NULL || utf8_of(keep[0], v, S_ROWS_BIG) < 0)
            return -1;
    } else if (q->has_tags_rows || q->data_rows || (q->tag && PyUnicode_GET_LENGTH(q->tag))) {
        v->rows_kind = V_INT;
        v->rows = q->has_tags_rows ? q->tags_rows : q->data_rows;
    }
    v->data_rows = q->data_rows;
    v->copy_data = q->copy_data;
    v->resp_bytes = q->resp_bytes;
    v->resp_msgs = q->resp_msgs;
    v->sent_s = rel(c, q->sent_ts);
    v->sent_frame = q->sent_frame;
    v->responded = q->responded;
    if (q->responded) {
        v->first_s = rel(c, q->first_ts);
        v->last_s = rel(c, q->last_ts);
        v->first_frame = q->first_frame;
        v->last_frame = q->last_frame;
    }
    v->has_error = q->has_error;
    v->incomplete = q->incomplete;
    v->seg_n = hist_n(&q->segments);
    v->has_median = hist_median(&q->segments, &v->median);
    v->has_hi = hist_hi(&q->segments, &v->hi);
    v->ntop = hist_top(&q->segments, 6, v->top_v, v->top_c);
    /* Query.goodput(): response bytes per second, first response byte to last */
    if (q->responded && q->last_ts > q->first_ts) {
        double g = py_round_int((double)q->resp_bytes / (q->last_ts - q->first_ts));
        if (isfinite(g) && g > -9.2e18 && g < 9.2e18) {
            v->goodput_kind = V_INT;
            v->goodput = (i64)g;
        } else {
            PyObject *big = PyLong_FromDouble(g);
            keep[1] = big == NULL ? NULL : PyObject_Str(big);
            Py_XDECREF(big);
            if (keep[1] == NULL || utf8_of(keep[1], v, S_GOODPUT_BIG) < 0)
                return -1;
            v->goodput_kind = V_BIG;
        }
    }
    return 0;
}

static void opt_int_json(JsonW *w, int has, i64 x)
{
    if (has)
        jw_int(w, x);
    else
        jw_null(w);
}

/* A number kept as an int or as decimal text (past 64 bits), or None. */
static void num_json(JsonW *w, int kind, i64 x, const char *text, Py_ssize_t len)
{
    if (kind == V_INT)
        jw_int(w, x);
    else if (kind == V_BIG)
        jw_raw(w, text, len);
    else
        jw_null(w);
}

static void str_json(JsonW *w, const QVals *v, int k)
{
    if (v->s[k] == NULL)
        jw_null(w);
    else
        jw_str(w, v->s[k], v->len[k]);
}

/* Query.to_json() as a value */
static void qv_write(const QVals *v, JsonW *w)
{
    char key[32];
    jw_obj(w);
    jw_key(w, "sql");
    str_json(w, v, S_SQL);
    jw_key(w, "sql_truncated");
    jw_bool(w, v->sql_truncated);
    jw_key(w, "kind");
    jw_cstr(w, KIND[v->kind]);
    jw_key(w, "command_tag");
    str_json(w, v, S_TAG);
    jw_key(w, "rows");
    num_json(w, v->rows_kind, v->rows, v->s[S_ROWS_BIG], v->len[S_ROWS_BIG]);
    jw_kint(w, "data_rows", v->data_rows);
    jw_kint(w, "copy_data", v->copy_data);
    jw_kint(w, "response_bytes", v->resp_bytes);
    jw_kint(w, "response_messages", v->resp_msgs);
    jw_kfloat(w, "sent_s", v->sent_s);
    jw_key(w, "first_response_s");
    if (v->responded)
        jw_float(w, v->first_s);
    else
        jw_null(w);
    jw_key(w, "last_response_s");
    if (v->responded)
        jw_float(w, v->last_s);
    else
        jw_null(w);
    jw_kint(w, "sent_frame", v->sent_frame);
    jw_key(w, "first_frame");
    opt_int_json(w, v->responded, v->first_frame);
    jw_key(w, "last_frame");
    opt_int_json(w, v->responded, v->last_frame);
    jw_key(w, "error");
    if (v->has_error) {
        jw_obj(w);
        for (int k = 0; k < 6; k++) {
            jw_key(w, ERR_KEY[k]);
            str_json(w, v, S_ERR + k);
        }
        jw_obj_end(w);
    } else {
        jw_null(w);
    }
    jw_key(w, "incomplete");
    jw_bool(w, v->incomplete);
    jw_kint(w, "response_segments", v->seg_n);
    jw_key(w, "response_segment_median");
    opt_int_json(w, v->has_median, v->median);
    jw_key(w, "response_segment_max");
    opt_int_json(w, v->has_hi, v->hi);
    jw_key(w, "response_segment_sizes");
    jw_obj(w);
    for (int i = 0; i < v->ntop; i++) {
        jw_key(w, fmt_int(key, v->top_v[i], 0));
        jw_int(w, v->top_c[i]);
    }
    jw_obj_end(w);
    jw_key(w, "goodput_bps");
    num_json(w, v->goodput_kind, v->goodput, v->s[S_GOODPUT_BIG], v->len[S_GOODPUT_BIG]);
    jw_obj_end(w);
}

/* Query.to_json(), its times relative to the capture's start, written as a value. */
static int q_write(Conv *c, Query *q, JsonW *w)
{
    QVals v;
    PyObject *keep[2];
    int r = q_vals(c, q, &v, keep);
    if (r == 0)
        qv_write(&v, w);
    Py_XDECREF(keep[0]);
    Py_XDECREF(keep[1]);
    return r;
}

/* An archived query is its values in a record (as the Python marshals them), about 150 bytes
 * where its JSON text is 500-900: flags, then integers as zigzag varints, the three times as
 * 8 bytes each, then the strings' lengths (+1; 0 for None) and bytes. */
static uint8_t *put_varint(uint8_t *o, i64 x)
{
    uint64_t u = ((uint64_t)x << 1) ^ (uint64_t)(x >> 63);
    while (u >= 0x80) {
        *o++ = (uint8_t)(u | 0x80);
        u >>= 7;
    }
    *o++ = (uint8_t)u;
    return o;
}

static int get_varint(const uint8_t **p, const uint8_t *end, i64 *x)
{
    uint64_t u = 0;
    for (int shift = 0; *p < end && shift < 64; shift += 7) {
        uint8_t b = *(*p)++;
        u |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *x = (i64)(u >> 1) ^ -(i64)(u & 1);
            return 0;
        }
    }
    return -1;
}

#define ARCH_INTS 18

/* the integers of a record, in order */
static void arch_ints(QVals *v, i64 **out)
{
    i64 *ints[ARCH_INTS] = {&v->rows, &v->data_rows, &v->copy_data, &v->resp_bytes,
                            &v->resp_msgs, &v->sent_frame, &v->first_frame, &v->last_frame,
                            &v->seg_n, &v->median, &v->hi, &v->goodput,
                            &v->top_v[0], &v->top_c[0], &v->top_v[1], &v->top_c[1],
                            &v->top_v[2], &v->top_c[2]};
    memcpy(out, ints, sizeof ints);
}

static PyObject *arch_record(QVals *v)
{
    Py_ssize_t size = 16 + ARCH_INTS * 10 + 8 * 10 + 24 + 3 * 20 + N_STRINGS * 10;
    for (int k = 0; k < N_STRINGS; k++)
        size += v->len[k];
    PyObject *rec = PyBytes_FromStringAndSize(NULL, size);
    if (rec == NULL)
        return NULL;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(rec);
    uint8_t flags[] = {v->sql_truncated, v->kind, v->rows_kind, v->responded, v->has_error,
                       v->incomplete, v->has_median, v->has_hi, v->goodput_kind, v->ntop};
    memcpy(o, flags, sizeof flags);
    o += sizeof flags;
    i64 *ints[ARCH_INTS];
    arch_ints(v, ints);
    for (int i = 0; i < ARCH_INTS; i++)
        o = put_varint(o, *ints[i]);
    for (int i = 3; i < 6; i++) { /* the rest of the top sizes */
        o = put_varint(o, v->top_v[i]);
        o = put_varint(o, v->top_c[i]);
    }
    double times[3] = {v->sent_s, v->first_s, v->last_s};
    memcpy(o, times, sizeof times);
    o += sizeof times;
    for (int k = 0; k < N_STRINGS; k++)
        o = put_varint(o, v->s[k] == NULL ? 0 : v->len[k] + 1);
    for (int k = 0; k < N_STRINGS; k++) {
        if (v->s[k] != NULL) {
            memcpy(o, v->s[k], v->len[k]);
            o += v->len[k];
        }
    }
    if (_PyBytes_Resize(&rec, (Py_ssize_t)(o - (uint8_t *)PyBytes_AS_STRING(rec))) < 0)
        return NULL;
    return rec;
}

/* A record's values (strings pointing into rec, which must outlive them). */
static int arch_read(PyObject *rec, QVals *v)
{
    memset(v, 0, sizeof *v);
    const uint8_t *p = (const uint8_t *)PyBytes_AS_STRING(rec);
    const uint8_t *end = p + PyBytes_GET_SIZE(rec);
    if (end - p < 10)
        goto bad;
    int *flags[] = {&v->sql_truncated, &v->kind, &v->rows_kind, &v->responded, &v->has_error,
                    &v->incomplete, &v->has_median, &v->has_hi, &v->goodput_kind, &v->ntop};
    for (int i = 0; i < 10; i++)
        *flags[i] = *p++;
    i64 *ints[ARCH_INTS];
    arch_ints(v, ints);
    for (int i = 0; i < ARCH_INTS; i++)
        if (get_varint(&p, end, ints[i]) < 0)
            goto bad;
    for (int i = 3; i < 6; i++)
        if (get_varint(&p, end, &v->top_v[i]) < 0 || get_varint(&p, end, &v->top_c[i]) < 0)
            goto bad;
    double times[3];
    if (end - p < (Py_ssize_t)sizeof times)
        goto bad;
    memcpy(times, p, sizeof times);
    p += sizeof times;
    v->sent_s = times[0];
    v->first_s = times[1];
    v->last_s = times[2];
    i64 lens[N_STRINGS];
    for (int k = 0; k < N_STRINGS; k++)
        if (get_varint(&p, end, &lens[k]) < 0)
            goto bad;
    for (int k = 0; k < N_STRINGS; k++) {
        if (lens[k] == 0)
            continue;
        if (lens[k] < 1 || end - p < lens[k] - 1)
            goto bad;
        v->s[k] = (const char *)p;
        v->len[k] = (Py_ssize_t)(lens[k] - 1);
        p += v->len[k];
    }
    if (v->kind < 0 || v->kind > 3 || v->ntop > 6)
        goto bad;
    return 0;
bad: /* our own file, read back: only a bug or a damaged temporary file gets here */
    PyErr_SetString(PyExc_RuntimeError, "an archived query's record is damaged");
    return -1;
}

static void counts_write(const Side *s, JsonW *w)
{
    const Counts *k = &s->counts;
    jw_obj(w);
    for (Py_ssize_t i = 0; i < k->n; i++) {
        const CEntry *e = &k->e[i];
        if (e->name == N_NONE) {
            char key[40];
            snprintf(key, sizeof key, "Authentication%u", (unsigned)e->code);
            jw_key(w, key);
        } else {
            jw_key(w, NAME[e->name]);
        }
        jw_int(w, e->name == N_DATAROW ? s->rows : e->name == N_COPYDATA ? s->copies : e->n);
    }
    jw_obj_end(w);
}

int pg_json(Conv *c, JsonW *w)
{
    const Side *front = c->sides[0].role == FRONTEND ? &c->sides[0] : &c->sides[1];
    const Side *back = c->sides[0].role == FRONTEND ? &c->sides[1] : &c->sides[0];
    jw_key(w, "protocol");
    jw_cstr(w, PROTOCOL[c->protocol]);
    jw_key(w, "startup");
    if (c->has_startup) {
        jw_obj(w);
        jw_key(w, "user");
        jw_str_obj(w, c->su_user);
        jw_key(w, "database");
        jw_str_obj(w, c->su_db);
        jw_key(w, "application_name");
        jw_str_obj(w, c->su_app);
        jw_key(w, "encryption");
        jw_cstr(w, ENCRYPTION[c->encryption]);
        jw_obj_end(w);
    } else {
        jw_null(w);
    }
    jw_key(w, "decode_started_at");
    if (c->protocol != P_UNKNOWN && c->started_at != AT_NONE)
        jw_cstr(w, c->started_at == AT_STARTUP ? "startup" : "mid-stream");
    else
        jw_null(w);
    jw_key(w, "decode_stopped");
    if (c->stopped) {
        jw_obj(w);
        jw_key(w, "direction");
        jw_cstr(w, ROLE[c->st_role]);
        jw_kint(w, "offset", c->st_off);
        jw_key(w, "frame");
        if (c->st_frame_null)
            jw_null(w);
        else
            jw_int(w, c->st_frame);
        jw_key(w, "reason");
        jw_str(w, c->st_reason.p ? c->st_reason.p : "", c->st_reason.len);
        jw_obj_end(w);
    } else {
        jw_null(w);
    }
    jw_key(w, "lost_bytes");
    jw_obj(w);
    jw_kint(w, "frontend", front->lost);
    jw_kint(w, "backend", back->lost);
    jw_obj_end(w);
    jw_key(w, "backend_pid");
    if (c->has_pid)
        jw_int(w, c->backend_pid);
    else
        jw_null(w);
    jw_key(w, "server_parameters");
    if (c->parameters != NULL) {
        jw_value(w, c->parameters);
    } else {
        jw_obj(w);
        jw_obj_end(w);
    }
    jw_key(w, "messages");
    jw_obj(w);
    jw_key(w, "frontend");
    counts_write(front, w);
    jw_key(w, "backend");
    counts_write(back, w);
    jw_obj_end(w);
    jw_key(w, "queries");
    jw_arr(w);
    for (Py_ssize_t i = 0; i < c->narch; i++) {
        PyObject *rec = PySequence_GetItem(c->cfg.archive, (Py_ssize_t)c->archived[i]);
        QVals v;
        if (rec == NULL || !PyBytes_Check(rec) || arch_read(rec, &v) < 0) {
            if (rec != NULL && !PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "an archived query is not a record");
            Py_XDECREF(rec);
            return -1;
        }
        qv_write(&v, w);
        Py_DECREF(rec);
    }
    for (Py_ssize_t i = 0; i < c->nq; i++)
        if (q_write(c, c->qs[i], w) < 0)
            return -1;
    jw_arr_end(w);
    jw_kint(w, "queries_total", c->queries_total);
    return 0;
}

int pg_findings(Conv *c, Findings *out)
{
    for (int i = 0; i < c->findings.n; i++) {
        const NFinding *f = &c->findings.items[i];
        StrB m;
        sb_init(&m);
        sb_addn(&m, f->message ? f->message : "", f->message ? f->message_len : 0);
        if (m.failed) {
            sb_free(&m);
            PyErr_NoMemory();
            return -1;
        }
        fnd_add(out, f->severity, f->code, &m, f->frames, f->nframes);
        sb_free(&m);
    }
    return 0;
}

/* ---- what relay matching reads (relay.topology.LegQuery) ----------------------------------- */

/* LegQuery keeps a query's segment sizes only for a bulk response (relay.topology's
 * BULK_SEGMENTS): the dict is not made for the others. */
#define BULK_SEGMENTS 4

/* relay.topology.LEG_QUERY_KEYS: a query's values are handed over in this order */
static const char *const LEG_KEYS[] = {
    "sql", "rows", "response_bytes", "sent_s", "first_response_s", "last_response_s",
    "sent_frame", "first_frame", "last_frame", "response_segments", "response_segment_median",
    "response_segment_max", "response_segment_sizes"};
#define N_LEG_KEYS (sizeof LEG_KEYS / sizeof LEG_KEYS[0])

/* What relay matching reads of a query (LEG_QUERY_KEYS' values); sql given as an object when
 * the caller holds one (a live query), else decoded from the values. */
static PyObject *leg_values(const QVals *v, PyObject *sql)
{
    PyObject *x[N_LEG_KEYS];
    if (sql != NULL)
        x[0] = Py_NewRef(sql);
    else if (v->s[S_SQL] == NULL)
        x[0] = Py_NewRef(Py_None);
    else
        x[0] = PyUnicode_DecodeUTF8(v->s[S_SQL], v->len[S_SQL], "strict");
    x[1] = v->rows_kind == V_INT ? PyLong_FromLongLong(v->rows)
         : v->rows_kind == V_BIG ? PyLong_FromString(v->s[S_ROWS_BIG], NULL, 10)
                                 : Py_NewRef(Py_None);
    x[2] = PyLong_FromLongLong(v->resp_bytes);
    x[3] = PyFloat_FromDouble(v->sent_s);
    x[4] = v->responded ? PyFloat_FromDouble(v->first_s) : Py_NewRef(Py_None);
    x[5] = v->responded ? PyFloat_FromDouble(v->last_s) : Py_NewRef(Py_None);
    x[6] = PyLong_FromLongLong(v->sent_frame);
    x[7] = v->responded ? PyLong_FromLongLong(v->first_frame) : Py_NewRef(Py_None);
    x[8] = v->responded ? PyLong_FromLongLong(v->last_frame) : Py_NewRef(Py_None);
    x[9] = PyLong_FromLongLong(v->seg_n);
    x[10] = v->has_median ? PyLong_FromLongLong(v->median) : Py_NewRef(Py_None);
    x[11] = v->has_hi ? PyLong_FromLongLong(v->hi) : Py_NewRef(Py_None);
    x[12] = v->seg_n >= BULK_SEGMENTS ? PyDict_New() : Py_NewRef(Py_None);
    for (int i = 0; x[12] != NULL && x[12] != Py_None && i < v->ntop; i++) {
        char key[32];
        PyObject *count = PyLong_FromLongLong(v->top_c[i]);
        if (count == NULL || PyDict_SetItemString(x[12], fmt_int(key, v->top_v[i], 0), count) < 0)
            Py_CLEAR(x[12]);
        Py_XDECREF(count);
    }
    PyObject *out = PyTuple_New(N_LEG_KEYS);
    int failed = out == NULL;
    for (size_t i = 0; i < N_LEG_KEYS; i++) {
        failed |= x[i] == NULL;
        if (out != NULL)
            PyTuple_SET_ITEM(out, i, x[i] ? x[i] : Py_NewRef(Py_None));
        else
            Py_XDECREF(x[i]);
    }
    if (failed)
        Py_CLEAR(out);
    return out;
}

/* The i-th listed query's leg values: read back from the archive, or from the live query. */
static PyObject *leg_query(Conv *c, Py_ssize_t i)
{
    QVals v;
    if (i >= c->narch) {
        Query *q = c->qs[i - c->narch];
        PyObject *keep[2];
        PyObject *out = q_vals(c, q, &v, keep) < 0 ? NULL : leg_values(&v, q->sql);
        Py_XDECREF(keep[0]);
        Py_XDECREF(keep[1]);
        return out;
    }
    PyObject *rec = PySequence_GetItem(c->cfg.archive, (Py_ssize_t)c->archived[i]);
    if (rec == NULL)
        return NULL;
    PyObject *out = arch_read(rec, &v) < 0 ? NULL : leg_values(&v, NULL);
    Py_DECREF(rec);
    return out;
}

PyObject *pg_leg_queries(Conv *c, i64 most)
{
    if (pg_listed(c) >= most)
        Py_RETURN_NONE;
    Py_ssize_t n = c->narch + c->nq;
    PyObject *out = PyTuple_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *q = leg_query(c, i);
        if (q == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, q);
    }
    return out;
}
