/* json.dumps's exact text for report values, written straight into one buffer.
 *
 * The standard library's C encoder builds a str per key and per number and joins lists of
 * them (120-140 us for a connection's 7 KB report); with an indent it is not used at all.
 * This writes the same bytes into one growing buffer: exact dict, list, tuple, str, int,
 * float, bool and None only, with json.dumps's defaults (ensure_ascii, allow_nan). Anything
 * else (a subclass, a non-str key, deep nesting, or text past `limit`) returns None, and the
 * caller takes json.dumps or its twin in report/jsontext.py, so the text never differs.
 *
 *   dumps(value, indent, level, limit) -> str | None
 *      indent < 0: separators (",", ":"); else json.dumps(value, indent=indent) with every
 *      line after the first moved right by indent * level spaces (a value nested level deep).
 *      limit: give up (None) once the text would pass this many bytes; < 0: no limit.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

#include "_jsontext.h"

#define MAX_DEPTH 200

enum { DONE = 0, FAILED = -1, DECLINED = 1 };

typedef struct {
    char *p;
    Py_ssize_t len, cap, limit;
    int indent; /* < 0: compact */
} Out;

static int past(const Out *o)
{
    return o->limit >= 0 && o->len > o->limit ? DECLINED : DONE;
}

static int reserve(Out *o, Py_ssize_t n)
{
    if (o->len + n <= o->cap)
        return DONE;
    Py_ssize_t cap = o->cap ? o->cap : 8192;
    while (cap < o->len + n) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return FAILED;
        }
        cap *= 2;
    }
    char *p = PyMem_Realloc(o->p, cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return FAILED;
    }
    o->p = p;
    o->cap = cap;
    return DONE;
}

static int put(Out *o, const char *s, Py_ssize_t n)
{
    int r = reserve(o, n);
    if (r != DONE)
        return r;
    memcpy(o->p + o->len, s, n);
    o->len += n;
    return past(o);
}

/* The newline and indentation before an item at `level`. */
static int newline(Out *o, int level)
{
    Py_ssize_t n = 1 + (Py_ssize_t)o->indent * level;
    int r = reserve(o, n);
    if (r != DONE)
        return r;
    o->p[o->len] = '\n';
    memset(o->p + o->len + 1, ' ', n - 1);
    o->len += n;
    return past(o);
}

static const char HEX[] = "0123456789abcdef";

static char *escape4(char *w, Py_UCS4 c)
{
    *w++ = '\\';
    *w++ = 'u';
    *w++ = HEX[(c >> 12) & 0xF];
    *w++ = HEX[(c >> 8) & 0xF];
    *w++ = HEX[(c >> 4) & 0xF];
    *w++ = HEX[c & 0xF];
    return w;
}

/* As _json's ascii_escape_unicode (json.dumps's ensure_ascii=True). */
static int string(Out *o, PyObject *s)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    if (PyUnicode_IS_ASCII(s)) { /* most of a report: copied whole when nothing needs escaping */
        const unsigned char *a = data;
        Py_ssize_t i = 0;
        while (i < n && a[i] >= ' ' && a[i] <= '~' && a[i] != '\\' && a[i] != '"')
            i++;
        if (i == n) {
            int r = reserve(o, n + 2);
            if (r != DONE)
                return r;
            char *w = o->p + o->len;
            *w = '"';
            memcpy(w + 1, a, n);
            w[n + 1] = '"';
            o->len += n + 2;
            return past(o);
        }
    }
    /* at most 12 bytes a character (a surrogate pair), 6 below U+10000 */
    if (n > (PY_SSIZE_T_MAX - 2) / 12)
        return DECLINED;
    int r = reserve(o, 2 + n * (kind == PyUnicode_4BYTE_KIND ? 12 : 6));
    if (r != DONE)
        return r;
    char *w = o->p + o->len;
    *w++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c >= ' ' && c <= '~' && c != '\\' && c != '"') {
            *w++ = (char)c;
            continue;
        }
        switch (c) {
        case '\\': *w++ = '\\'; *w++ = '\\'; break;
        case '"': *w++ = '\\'; *w++ = '"'; break;
        case '\b': *w++ = '\\'; *w++ = 'b'; break;
        case '\f': *w++ = '\\'; *w++ = 'f'; break;
        case '\n': *w++ = '\\'; *w++ = 'n'; break;
        case '\r': *w++ = '\\'; *w++ = 'r'; break;
        case '\t': *w++ = '\\'; *w++ = 't'; break;
        default:
            if (c >= 0x10000) {
                Py_UCS4 v = c - 0x10000;
                w = escape4(w, 0xD800 | ((v >> 10) & 0x3FF));
                c = 0xDC00 | (v & 0x3FF);
            }
            w = escape4(w, c);
        }
    }
    *w++ = '"';
    o->len = w - o->p;
    return past(o);
}

static int integer(Out *o, PyObject *v)
{
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred())
        return FAILED;
    if (!overflow) {
        char tmp[24], *w = tmp + sizeof tmp;
        unsigned long long u = x < 0 ? 0ULL - (unsigned long long)x : (unsigned long long)x;
        do {
            *--w = (char)('0' + u % 10);
            u /= 10;
        } while (u);
        if (x < 0)
            *--w = '-';
        return put(o, w, tmp + sizeof tmp - w);
    }
    PyObject *text = PyLong_Type.tp_repr(v); /* what json.dumps writes for any int */
    if (text == NULL)
        return FAILED;
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(text, &n);
    int r = s == NULL ? FAILED : put(o, s, n);
    Py_DECREF(text);
    return r;
}

static int number(Out *o, double d)
{
    if (!isfinite(d)) {
        if (isnan(d))
            return put(o, "NaN", 3);
        return d > 0 ? put(o, "Infinity", 8) : put(o, "-Infinity", 9);
    }
    /* float.__repr__, as json.dumps writes a float */
    char *s = PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (s == NULL)
        return FAILED;
    int r = put(o, s, (Py_ssize_t)strlen(s));
    PyMem_Free(s);
    return r;
}

static int value(Out *o, PyObject *v, int level);

static int dict(Out *o, PyObject *d, int level)
{
    if (PyDict_GET_SIZE(d) == 0)
        return put(o, "{}", 2);
    int r = put(o, "{", 1);
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    int first = 1;
    /* Only exact builtins are encoded, so no Python code runs and the dict cannot change. */
    while (r == DONE && PyDict_Next(d, &pos, &k, &v)) {
        if (!PyUnicode_CheckExact(k))
            return DECLINED; /* json.dumps turns int, float, bool and None keys to strings */
        if (!first && (r = put(o, ",", 1)) != DONE)
            return r;
        first = 0;
        if (o->indent >= 0 && (r = newline(o, level + 1)) != DONE)
            return r;
        if ((r = string(o, k)) != DONE)
            return r;
        if ((r = o->indent >= 0 ? put(o, ": ", 2) : put(o, ":", 1)) != DONE)
            return r;
        r = value(o, v, level + 1);
    }
    if (r == DONE && o->indent >= 0)
        r = newline(o, level);
    return r == DONE ? put(o, "}", 1) : r;
}

static int array(Out *o, PyObject *seq, int level)
{
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n == 0)
        return put(o, "[]", 2);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    int r = put(o, "[", 1);
    for (Py_ssize_t i = 0; r == DONE && i < n; i++) {
        if (i && (r = put(o, ",", 1)) != DONE)
            return r;
        if (o->indent >= 0 && (r = newline(o, level + 1)) != DONE)
            return r;
        r = value(o, items[i], level + 1);
    }
    if (r == DONE && o->indent >= 0)
        r = newline(o, level);
    return r == DONE ? put(o, "]", 1) : r;
}

static int value(Out *o, PyObject *v, int level)
{
    if (v == Py_None)
        return put(o, "null", 4);
    if (v == Py_True)
        return put(o, "true", 4);
    if (v == Py_False)
        return put(o, "false", 5);
    if (PyUnicode_CheckExact(v))
        return string(o, v);
    if (PyLong_CheckExact(v))
        return integer(o, v);
    if (PyFloat_CheckExact(v))
        return number(o, PyFloat_AS_DOUBLE(v));
    if (level >= MAX_DEPTH)
        return DECLINED;
    if (PyDict_CheckExact(v))
        return dict(o, v, level);
    if (PyList_CheckExact(v) || PyTuple_CheckExact(v))
        return array(o, v, level);
    return DECLINED;
}

PyObject *jsontext_dumps(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "dumps(value, indent, level, limit)");
        return NULL;
    }
    long indent = PyLong_AsLong(args[1]);
    long level = PyLong_AsLong(args[2]);
    Py_ssize_t limit = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred())
        return NULL;
    if (indent > 64 || level < 0 || level > MAX_DEPTH)
        Py_RETURN_NONE;
    Out o = {NULL, 0, 0, limit, indent < 0 ? -1 : (int)indent};
    int r = value(&o, args[0], (int)level);
    PyObject *text = NULL;
    if (r == DONE) {
        text = PyUnicode_New(o.len, 127);
        if (text != NULL)
            memcpy(PyUnicode_DATA(text), o.p, o.len);
    } else if (r == DECLINED) {
        text = Py_None;
        Py_INCREF(text);
    }
    PyMem_Free(o.p);
    return text;
}
