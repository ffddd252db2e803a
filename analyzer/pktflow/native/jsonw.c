/* Text for the native core: JSON written as json.dumps writes it, Python's number formats, and
 * findings (see core.h). Floats go through PyOS_double_to_string, the routine float.__repr__,
 * format() and round() use, so every digit is Python's. */
#include "core.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- growing buffers ------------------------------------------------------------------------ */

static int grow(char **p, Py_ssize_t *cap, Py_ssize_t need)
{
    Py_ssize_t c = *cap ? *cap : 1024;
    while (c < need) {
        if (c > PY_SSIZE_T_MAX / 2)
            return -1;
        c *= 2;
    }
    char *q = PyMem_Realloc(*p, c);
    if (q == NULL)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

static inline int w_reserve(JsonW *w, Py_ssize_t n)
{
    if (w->failed)
        return -1;
    if (w->len + n <= w->cap)
        return 0;
    if (grow(&w->p, &w->cap, w->len + n) < 0) {
        w->failed = 1;
        return -1;
    }
    return 0;
}

static inline void w_put(JsonW *w, const char *s, Py_ssize_t n)
{
    if (w_reserve(w, n) < 0)
        return;
    memcpy(w->p + w->len, s, n);
    w->len += n;
}

static inline void w_ch(JsonW *w, char c)
{
    if (w_reserve(w, 1) < 0)
        return;
    w->p[w->len++] = c;
}

static void w_newline(JsonW *w, int level)
{
    Py_ssize_t n = 1 + (Py_ssize_t)w->indent * level;
    if (w_reserve(w, n) < 0)
        return;
    w->p[w->len] = '\n';
    memset(w->p + w->len + 1, ' ', n - 1);
    w->len += n;
}

/* ---- fast exact paths for the numbers a report is made of ---------------------------------- */

static const double POW10[16] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7,
                                 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};

/* The integer nearest to x * 10**k (exactly: fma gives the product's rounding error), ties to
 * even; 0 when |x * 10**k| is 2**52 or more (or x is not finite). */
static int nearest_scaled(double x, int k, double *n)
{
    double s = POW10[k], p = x * s;
    if (!(fabs(p) < 4503599627370496.0))
        return 0;
    double err = fma(x, s, -p); /* x * s == p + err, exactly */
    double r = nearbyint(p); /* ties to even; p - r is exact */
    double d = p - r;
    if (d == 0.5 && err >= 0) /* p was a tie rounded down to even: err decides */
        r += err > 0 ? 1.0 : 0.0;
    else if (d == -0.5 && err <= 0)
        r -= err < 0 ? 1.0 : 0.0;
    *n = r;
    return 1;
}

/* Write |n| (an integral double below 2**53) with k decimals: "12.345", "12.0" for k = 0. */
static int fixed_digits(double n, int k, int negative, char *out)
{
    char digits[24];
    unsigned long long u = (unsigned long long)fabs(n);
    int nd = 0;
    do {
        digits[nd++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    while (nd <= k)
        digits[nd++] = '0'; /* at least one digit before the point */
    char *o = out;
    if (negative)
        *o++ = '-';
    for (int i = nd - 1; i >= k; i--)
        *o++ = digits[i];
    *o++ = '.';
    if (k == 0)
        *o++ = '0';
    for (int i = k - 1; i >= 0; i--)
        *o++ = digits[i];
    *o = 0;
    return (int)(o - out);
}

/* format(x, f".{k}f") when |x * 10**k| < 2**52: the exactly rounded scaled value's digits with
 * k places (the sign kept for a negative x rounding to zero, as Python keeps it); else 0. */
static int fixed_short(double x, int k, char *out)
{
    double n;
    if (k < 0 || k > 15 || !nearest_scaled(x, k, &n))
        return 0;
    int len = fixed_digits(n, k, signbit(x), out);
    if (k == 0) /* fixed_digits writes "12.0" for no places: "12" */
        out[len -= 2] = 0;
    return len;
}

/* repr(v) when it is a short decimal (at most 6 places, 1e-4 <= |v| < 2**32: the unit in the
 * last place is then under 1e-6, so the decimal with the fewest places that reads back as v is
 * the one shortest string that does, which is repr's), else 0. */
static int repr_short(double v, char *out)
{
    if (v == 0.0) {
        strcpy(out, signbit(v) ? "-0.0" : "0.0");
        return signbit(v) ? 4 : 3;
    }
    double a = fabs(v);
    if (!(a >= 1e-4 && a < 4294967296.0))
        return 0;
    for (int k = 0; k <= 6; k++) {
        double n;
        if (!nearest_scaled(v, k, &n))
            return 0;
        if (n / POW10[k] == v)
            return fixed_digits(n, k, v < 0, out);
    }
    return 0;
}

/* v in decimal, with thousands separators if asked, NUL-terminated (out: 32 bytes); the
 * length written. */
static int int_text(char *out, i64 v, int commas)
{
    char digits[24];
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    int n = 0;
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    char *o = out;
    if (v < 0)
        *o++ = '-';
    for (int i = n - 1; i >= 0; i--) {
        *o++ = digits[i];
        if (commas && i && i % 3 == 0)
            *o++ = ',';
    }
    *o = 0;
    return (int)(o - out);
}

/* ---- the JSON writer -------------------------------------------------------------------- */

void jw_init(JsonW *w, int indent, int level)
{
    memset(w, 0, sizeof *w);
    w->indent = indent;
    w->base = w->level = level;
}

void jw_free(JsonW *w)
{
    PyMem_Free(w->p);
    w->p = NULL;
    w->len = w->cap = 0;
}

void jw_reset(JsonW *w)
{
    int indent = w->indent, level = w->base;
    char *p = w->p;
    Py_ssize_t cap = w->cap;
    jw_init(w, indent, level);
    w->p = p;
    w->cap = cap;
}

PyObject *jw_take(JsonW *w)
{
    PyObject *s = NULL;
    if (w->failed) {
        PyErr_NoMemory();
    } else { /* ASCII by construction (ensure_ascii): copied, not decoded */
        s = PyUnicode_New(w->len, 127);
        if (s != NULL && w->len)
            memcpy(PyUnicode_DATA(s), w->p, w->len);
    }
    jw_reset(w);
    return s;
}

/* Before a value or a key: the separator and line of an item, unless a key precedes it. */
static void item(JsonW *w)
{
    if (w->after_key) {
        w->after_key = 0;
        return;
    }
    if (w->level <= w->base)
        return; /* the top-level value */
    int rel = w->level - w->base;
    if (w->items[rel])
        w_ch(w, ',');
    w->items[rel] = 1;
    if (w->indent >= 0)
        w_newline(w, w->level);
}

static void open_(JsonW *w, char c)
{
    item(w);
    w_ch(w, c);
    int rel = w->level + 1 - w->base;
    if (rel >= JW_MAX_LEVEL) {
        w->failed = 1;
        return;
    }
    w->level++;
    w->items[rel] = 0;
}

static void close_(JsonW *w, char c)
{
    int rel = w->level - w->base;
    if (rel <= 0) {
        w->failed = 1;
        return;
    }
    if (w->items[rel] && w->indent >= 0)
        w_newline(w, w->level - 1);
    w->level--;
    w_ch(w, c);
}

void jw_obj(JsonW *w) { open_(w, '{'); }
void jw_obj_end(JsonW *w) { close_(w, '}'); }
void jw_arr(JsonW *w) { open_(w, '['); }
void jw_arr_end(JsonW *w) { close_(w, ']'); }

void jw_keyn(JsonW *w, const char *key, Py_ssize_t n)
{
    int rel = w->level - w->base;
    if (rel <= 0 || w->after_key) { /* not where a key goes: the general path */
        item(w);
    } else {
        Py_ssize_t pad = w->indent >= 0 ? 1 + (Py_ssize_t)w->indent * w->level : 0;
        if (w_reserve(w, 1 + pad + n + 4) < 0)
            return;
        char *o = w->p + w->len;
        if (w->items[rel])
            *o++ = ',';
        w->items[rel] = 1;
        if (pad) {
            *o++ = '\n';
            memset(o, ' ', pad - 1);
            o += pad - 1;
        }
        *o++ = '"';
        memcpy(o, key, n);
        o += n;
        *o++ = '"';
        *o++ = ':';
        if (w->indent >= 0)
            *o++ = ' ';
        w->len = o - w->p;
        w->after_key = 1;
        return;
    }
    w_ch(w, '"');
    w_put(w, key, n);
    if (w->indent >= 0)
        w_put(w, "\": ", 3);
    else
        w_put(w, "\":", 2);
    w->after_key = 1;
}

void jw_int(JsonW *w, i64 v)
{
    if (w->after_key) /* most values follow their key: no separator to write */
        w->after_key = 0;
    else
        item(w);
    if (w_reserve(w, 32) < 0)
        return;
    w->len += int_text(w->p + w->len, v, 0);
}

void jw_float(JsonW *w, double v)
{
    item(w);
    if (isnan(v)) {
        w_put(w, "NaN", 3);
        return;
    }
    if (isinf(v)) {
        if (v > 0)
            w_put(w, "Infinity", 8);
        else
            w_put(w, "-Infinity", 9);
        return;
    }
    char buf[40];
    int n = repr_short(v, buf);
    if (n) {
        w_put(w, buf, n);
        return;
    }
    char *s = PyOS_double_to_string(v, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (s == NULL) {
        PyErr_Clear();
        w->failed = 1;
        return;
    }
    w_put(w, s, (Py_ssize_t)strlen(s));
    PyMem_Free(s);
}

void jw_null(JsonW *w)
{
    item(w);
    w_put(w, "null", 4);
}

void jw_bool(JsonW *w, int b)
{
    item(w);
    if (b)
        w_put(w, "true", 4);
    else
        w_put(w, "false", 5);
}

static const char HEX[] = "0123456789abcdef";

static inline int plain(Py_UCS4 c) { return c >= ' ' && c <= '~' && c != '\\' && c != '"'; }

/* As json's ensure_ascii escaping of a str. */
static void w_unicode(JsonW *w, PyObject *s)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    if (w_reserve(w, 2 + n * 12) < 0)
        return;
    char *o = w->p + w->len;
    *o++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (plain(c)) {
            *o++ = (char)c;
            continue;
        }
        *o++ = '\\';
        switch (c) {
        case '\\': *o++ = '\\'; continue;
        case '"': *o++ = '"'; continue;
        case '\b': *o++ = 'b'; continue;
        case '\f': *o++ = 'f'; continue;
        case '\n': *o++ = 'n'; continue;
        case '\r': *o++ = 'r'; continue;
        case '\t': *o++ = 't'; continue;
        }
        if (c >= 0x10000) { /* a surrogate pair */
            Py_UCS4 v = c - 0x10000;
            Py_UCS4 hi = 0xD800 | ((v >> 10) & 0x3FF), lo = 0xDC00 | (v & 0x3FF);
            *o++ = 'u';
            *o++ = HEX[(hi >> 12) & 0xF]; *o++ = HEX[(hi >> 8) & 0xF];
            *o++ = HEX[(hi >> 4) & 0xF]; *o++ = HEX[hi & 0xF];
            *o++ = '\\';
            c = lo;
        }
        *o++ = 'u';
        *o++ = HEX[(c >> 12) & 0xF]; *o++ = HEX[(c >> 8) & 0xF];
        *o++ = HEX[(c >> 4) & 0xF]; *o++ = HEX[c & 0xF];
    }
    *o++ = '"';
    w->len = o - w->p;
}

void jw_str(JsonW *w, const char *utf8, Py_ssize_t n)
{
    item(w);
    Py_ssize_t i = 0;
    const unsigned char *a = (const unsigned char *)utf8;
    while (i < n && plain(a[i]))
        i++;
    if (i == n) { /* nothing to escape: most of a report */
        if (w_reserve(w, n + 2) < 0)
            return;
        w->p[w->len] = '"';
        memcpy(w->p + w->len + 1, utf8, n);
        w->p[w->len + 1 + n] = '"';
        w->len += n + 2;
        return;
    }
    PyObject *s = PyUnicode_DecodeUTF8(utf8, n, "replace");
    if (s == NULL) {
        PyErr_Clear();
        w->failed = 1;
        return;
    }
    w_unicode(w, s);
    Py_DECREF(s);
}

void jw_str_obj(JsonW *w, PyObject *s)
{
    if (s == NULL || s == Py_None) {
        jw_null(w);
        return;
    }
    item(w);
    if (!PyUnicode_Check(s)) {
        w->failed = 1;
        return;
    }
    if (PyUnicode_IS_ASCII(s)) {
        const char *a = (const char *)PyUnicode_DATA(s);
        Py_ssize_t n = PyUnicode_GET_LENGTH(s), i = 0;
        while (i < n && plain((unsigned char)a[i]))
            i++;
        if (i == n) {
            if (w_reserve(w, n + 2) < 0)
                return;
            w->p[w->len] = '"';
            memcpy(w->p + w->len + 1, a, n);
            w->p[w->len + 1 + n] = '"';
            w->len += n + 2;
            return;
        }
    }
    w_unicode(w, s);
}

void jw_value(JsonW *w, PyObject *v)
{
    if (v == Py_None) {
        jw_null(w);
    } else if (v == Py_True || v == Py_False) {
        jw_bool(w, v == Py_True);
    } else if (PyUnicode_Check(v)) {
        jw_str_obj(w, v);
    } else if (PyLong_Check(v)) {
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow) { /* as int.__repr__ writes it */
            PyObject *r = PyObject_Repr(v);
            if (r == NULL) {
                PyErr_Clear();
                w->failed = 1;
                return;
            }
            item(w);
            w_put(w, PyUnicode_AsUTF8(r), PyUnicode_GET_LENGTH(r));
            Py_DECREF(r);
        } else {
            jw_int(w, x);
        }
    } else if (PyFloat_Check(v)) {
        jw_float(w, PyFloat_AS_DOUBLE(v));
    } else if (PyDict_Check(v)) {
        PyObject *k, *x;
        Py_ssize_t pos = 0;
        jw_obj(w);
        while (PyDict_Next(v, &pos, &k, &x)) {
            if (!PyUnicode_Check(k)) {
                w->failed = 1;
                return;
            }
            /* a key may need escaping: written as a string, then the separator */
            item(w);
            w->after_key = 1;
            jw_str_obj(w, k);
            if (w->indent >= 0)
                w_put(w, ": ", 2);
            else
                w_ch(w, ':');
            w->after_key = 1;
            jw_value(w, x);
        }
        jw_obj_end(w);
    } else if (PyList_Check(v) || PyTuple_Check(v)) {
        PyObject *seq = v;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        jw_arr(w);
        for (Py_ssize_t i = 0; i < n; i++)
            jw_value(w, PySequence_Fast_GET_ITEM(seq, i));
        jw_arr_end(w);
    } else {
        w->failed = 1;
    }
}

void jw_raw(JsonW *w, const char *text, Py_ssize_t n)
{
    item(w);
    w_put(w, text, n);
}

/* ---- Python's number formats -------------------------------------------------------------- */

char *fmt_int(char *buf, i64 v, int commas)
{
    int_text(buf, v, commas);
    return buf;
}

char *fmt_repr(char *buf, double x)
{
    if (repr_short(x, buf))
        return buf;
    char *s = PyOS_double_to_string(x, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (s == NULL) {
        PyErr_Clear();
        strcpy(buf, "nan");
        return buf;
    }
    snprintf(buf, 32, "%s", s);
    PyMem_Free(s);
    return buf;
}

double py_round(double x, int ndigits)
{
    if (!isfinite(x) || x == 0.0)
        return x;
    double n;
    if (ndigits >= 0 && ndigits <= 15 && nearest_scaled(x, ndigits, &n))
        return n / POW10[ndigits]; /* both exact: the quotient is strtod's of the decimal */
    /* 'f' with a precision is _Py_dg_dtoa's mode 3, as float.__round__; read back exactly */
    char *s = PyOS_double_to_string(x, 'f', ndigits, 0, NULL);
    if (s == NULL) {
        PyErr_Clear();
        return x;
    }
    double r = PyOS_string_to_double(s, NULL, NULL);
    PyMem_Free(s);
    if (r == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return x;
    }
    return r;
}

double py_round_int(double x)
{
    double r = round(x);
    if (fabs(x - r) == 0.5) /* a tie: to even */
        r = 2.0 * round(x / 2.0);
    return r;
}

/* ---- StrB ------------------------------------------------------------------------------- */

void sb_init(StrB *b) { memset(b, 0, sizeof *b); }

void sb_free(StrB *b)
{
    PyMem_Free(b->p);
    memset(b, 0, sizeof *b);
}

void sb_addn(StrB *b, const char *s, Py_ssize_t n)
{
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap && grow(&b->p, &b->cap, b->len + n + 1) < 0) {
        b->failed = 1;
        return;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void sb_addf(StrB *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = 1;
        return;
    }
    if ((size_t)n < sizeof small) {
        sb_addn(b, small, n);
        return;
    }
    char *big = PyMem_Malloc((size_t)n + 1);
    if (big == NULL) {
        b->failed = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb_addn(b, big, n);
    PyMem_Free(big);
}

void sb_int(StrB *b, i64 v, int commas)
{
    char buf[40];
    sb_add(b, fmt_int(buf, v, commas));
}

/* format(x, f"{',' if commas else ''}.{prec}f") */
void sb_fixed(StrB *b, double x, int prec, int commas)
{
    char quick[48];
    int n = !commas ? fixed_short(x, prec, quick) : 0;
    if (n) {
        sb_addn(b, quick, n);
        return;
    }
    char *s = PyOS_double_to_string(x, 'f', prec, 0, NULL);
    if (s == NULL) {
        PyErr_Clear();
        b->failed = 1;
        return;
    }
    if (!commas || !isfinite(x)) {
        sb_add(b, s);
        PyMem_Free(s);
        return;
    }
    const char *digits = s[0] == '-' ? s + 1 : s;
    if (s[0] == '-')
        sb_add(b, "-");
    size_t whole = strcspn(digits, ".");
    for (size_t i = 0; i < whole; i++) {
        sb_addn(b, digits + i, 1);
        size_t left = whole - i - 1;
        if (left && left % 3 == 0)
            sb_add(b, ",");
    }
    sb_add(b, digits + whole);
    PyMem_Free(s);
}

void sb_pct(StrB *b, double x, int prec)
{
    sb_fixed(b, x * 100.0, prec, 0);
    sb_add(b, "%");
}

void sb_str_obj(StrB *b, PyObject *s)
{
    Py_ssize_t n;
    const char *u = s != NULL && PyUnicode_Check(s) ? PyUnicode_AsUTF8AndSize(s, &n) : NULL;
    if (u == NULL) {
        PyErr_Clear();
        b->failed = 1;
        return;
    }
    sb_addn(b, u, n);
}

/* ---- findings ------------------------------------------------------------------------- */

void fnd_init(Findings *f) { memset(f, 0, sizeof *f); }

void fnd_free(Findings *f)
{
    for (int i = 0; i < f->n; i++) {
        PyMem_Free(f->items[i].message);
        PyMem_Free(f->items[i].frames);
    }
    PyMem_Free(f->items);
    memset(f, 0, sizeof *f);
}

void fnd_add(Findings *f, const char *severity, const char *code, StrB *msg, const i64 *frames,
             int nframes)
{
    if (f->n == f->cap) {
        int cap = f->cap ? 2 * f->cap : 4;
        NFinding *items = PyMem_Realloc(f->items, sizeof(NFinding) * cap);
        if (items == NULL) {
            sb_free(msg);
            return; /* lost; the writer of the report notices nothing: rare enough */
        }
        f->items = items;
        f->cap = cap;
    }
    NFinding *it = &f->items[f->n++];
    it->severity = severity;
    it->code = code;
    it->message = msg->p;
    it->message_len = msg->len;
    if (it->message == NULL) {
        it->message = PyMem_Malloc(1);
        it->message_len = 0;
        if (it->message)
            it->message[0] = 0;
    }
    msg->p = NULL;
    msg->len = msg->cap = 0;
    it->frames = NULL;
    it->nframes = 0;
    if (nframes > 0) {
        it->frames = PyMem_Malloc(sizeof(i64) * nframes);
        if (it->frames != NULL) {
            memcpy(it->frames, frames, sizeof(i64) * nframes);
            it->nframes = nframes;
        }
    }
}

static PyObject *finding_class;

PyObject *fnd_to_list(const Findings *f, PyObject *conn_id)
{
    if (finding_class == NULL) {
        PyObject *mod = PyImport_ImportModule("pktflow.findings");
        if (mod == NULL)
            return NULL;
        finding_class = PyObject_GetAttrString(mod, "Finding");
        Py_DECREF(mod);
        if (finding_class == NULL)
            return NULL;
    }
    PyObject *out = PyList_New(f->n);
    if (out == NULL)
        return NULL;
    for (int i = 0; i < f->n; i++) {
        const NFinding *it = &f->items[i];
        PyObject *frames = PyList_New(it->nframes);
        if (frames == NULL)
            goto fail;
        for (int j = 0; j < it->nframes; j++) {
            PyObject *v = PyLong_FromLongLong(it->frames[j]);
            if (v == NULL) {
                Py_DECREF(frames);
                goto fail;
            }
            PyList_SET_ITEM(frames, j, v);
        }
        PyObject *msg = PyUnicode_DecodeUTF8(it->message, it->message_len, "replace");
        if (msg == NULL) {
            Py_DECREF(frames);
            goto fail;
        }
        PyObject *fi = PyObject_CallFunction(finding_class, "ssNON", it->severity, it->code, msg,
                                             conn_id, frames);
        if (fi == NULL)
            goto fail;
        PyList_SET_ITEM(out, i, fi);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}
