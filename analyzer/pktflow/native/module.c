/* pktflow._core: the native analysis core as Python sees it.
 *
 *   Core(...)                  the whole pass (core.c): see pktflow.native_pass
 *   TransferProbe()            one connection's transfer analysis, fed by hand: the tests drive
 *   ConversationProbe(...)     it and its Python twin from the same events and compare
 *   write_json(value, indent, level) -> str     the JSON writer on a Python value
 *   histogram(values, cap), quantiles(values, qs), bins(adds, end)
 *                              the counting structures' reads, for the tests
 */
#include "core.h"

#include <structmember.h>

int core_add_types(PyObject *m); /* core.c */

/* ---- shared argument helpers ----------------------------------------------------------------- */

static int layout_args(int indent, int level)
{
    if (indent < -1 || indent > 8 || level < 0 || level > 32) {
        PyErr_SetString(PyExc_ValueError, "indent must be -1..8 and level 0..32");
        return -1;
    }
    return 0;
}

/* set_view(side, isn_seen, wscale_known): what the engine's direction `side` shows */
static PyObject *set_view(DirView *view, PyObject *args)
{
    int side, isn_seen, known;
    if (!PyArg_ParseTuple(args, "ipp", &side, &isn_seen, &known))
        return NULL;
    if (side < 0 || side > 1)
        return PyErr_Format(PyExc_ValueError, "side must be 0 or 1");
    view[side].isn_seen = isn_seen;
    view[side].wscale_known = known;
    Py_RETURN_NONE;
}

/* ---- TransferProbe ---------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    Transfer *t;
    DirView view[2];
} TransferProbe;

/* Probes made with __new__ and never initialised hold nothing to call. */
static int initialised(const void *part)
{
    if (part == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the probe was not initialised");
        return 0;
    }
    return 1;
}

static int tp_init(TransferProbe *self, PyObject *args, PyObject *kw)
{
    if (!PyArg_ParseTuple(args, ":TransferProbe"))
        return -1;
    if (self->t == NULL)
        self->t = tr_new(self->view);
    return self->t == NULL ? -1 : 0;
}

static void tp_dealloc(TransferProbe *self)
{
    if (self->t)
        tr_free(self->t);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *tp_set_view(TransferProbe *self, PyObject *args)
{
    return set_view(self->view, args);
}

static PyObject *tp_on_packet(TransferProbe *self, PyObject *args)
{
    if (!initialised(self->t))
        return NULL;
    int d, flags, kind;
    long long frame, seq, end, ack, win;
    double ts;
    if (!PyArg_ParseTuple(args, "iLdLLLLii", &d, &frame, &ts, &seq, &end, &ack, &win, &flags,
                          &kind))
        return NULL;
    if (tr_packet(self->t, d, frame, ts, seq, end, ack, win, flags, kind) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* A DirectionInfo (mss, window_scale, window_scale_known, window_scale_lower_bound). */
static int dir_info(PyObject *o, DirInfo *out)
{
    PyObject *mss, *scale, *lb;
    int known;
    if (!PyArg_ParseTuple(o, "OOpO", &mss, &scale, &known, &lb))
        return -1;
    memset(out, 0, sizeof *out);
    if (mss != Py_None) {
        out->has_mss = 1;
        out->mss = PyLong_AsLongLong(mss);
    }
    if (scale != Py_None) {
        out->has_window_scale = 1;
        out->window_scale = (int)PyLong_AsLong(scale);
    }
    out->window_scale_known = known;
    if (lb != Py_None) {
        out->has_lower_bound = 1;
        out->lower_bound = (int)PyLong_AsLong(lb);
    }
    return PyErr_Occurred() ? -1 : 0;
}

static PyObject *tp_finish(TransferProbe *self, PyObject *args)
{
    if (!initialised(self->t))
        return NULL;
    PyObject *a, *b;
    DirInfo info[2];
    if (!PyArg_ParseTuple(args, "(OO)", &a, &b))
        return NULL;
    if (dir_info(a, &info[0]) < 0 || dir_info(b, &info[1]) < 0)
        return NULL;
    if (tr_finish(self->t, info) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *tp_result(TransferProbe *self, PyObject *args)
{
    if (!initialised(self->t))
        return NULL;
    int d, indent = -1, level = 0;
    double start = 0.0;
    if (!PyArg_ParseTuple(args, "i|dii", &d, &start, &indent, &level))
        return NULL;
    if (layout_args(indent, level) < 0)
        return NULL;
    JsonW w;
    jw_init(&w, indent, level);
    jw_obj(&w);
    if (tr_result(self->t, d, start, &w) < 0) {
        jw_free(&w);
        return NULL;
    }
    jw_obj_end(&w);
    PyObject *s = jw_take(&w);
    jw_free(&w);
    return s;
}

static PyObject *tp_findings(TransferProbe *self, PyObject *args)
{
    if (!initialised(self->t))
        return NULL;
    PyObject *cid;
    const char *names[2];
    if (!PyArg_ParseTuple(args, "Uss", &cid, &names[0], &names[1]))
        return NULL;
    Findings f;
    fnd_init(&f);
    if (tr_findings(self->t, PyUnicode_AsUTF8(cid), names, &f) < 0) {
        fnd_free(&f);
        return NULL;
    }
    PyObject *out = fnd_to_list(&f, cid);
    fnd_free(&f);
    return out;
}

static PyObject *opt_int(int has, i64 v)
{
    if (!has)
        Py_RETURN_NONE;
    return PyLong_FromLongLong(v);
}

static PyObject *opt_float(int has, double v)
{
    if (!has)
        Py_RETURN_NONE;
    return PyFloat_FromDouble(v);
}

static PyObject *tp_leg_view(TransferProbe *self, PyObject *args)
{
    if (!initialised(self->t))
        return NULL;
    int d;
    if (!PyArg_ParseTuple(args, "i", &d))
        return NULL;
    TrLegView v;
    if (tr_leg_view(self->t, d, &v) < 0)
        return NULL;
    PyObject *frames = PyList_New(v.n_evidence);
    if (frames == NULL)
        return NULL;
    for (int i = 0; i < v.n_evidence; i++)
        PyList_SET_ITEM(frames, i, PyLong_FromLongLong(v.evidence_frames[i]));
    return Py_BuildValue(
        "{s:L,s:d,s:N,s:N,s:N,s:N,s:N,s:N}", "zero_window_periods", (long long)v.zero_window_periods,
        "zero_window_total_s", v.zero_window_total_s, "evidence_frames", frames,
        "bytes_acked_median", opt_int(v.has_bytes_acked_median, v.bytes_acked_median),
        "flight_bytes_median", opt_int(v.has_flight_bytes_median, v.flight_bytes_median),
        "rtt_median_ms", opt_float(v.has_rtt_median, v.rtt_median_ms),
        "syn_to_synack_ms", opt_float(v.has_handshake_ms, v.syn_to_synack_ms),
        "synack_to_ack_ms", opt_float(v.has_handshake_ms, v.synack_to_ack_ms));
}

static PyMethodDef tp_methods[] = {
    {"set_view", (PyCFunction)tp_set_view, METH_VARARGS,
     "set_view(side, isn_seen, wscale_known): what the engine's direction `side` shows"},
    {"on_packet", (PyCFunction)tp_on_packet, METH_VARARGS,
     "on_packet(d, frame, ts, seq, end, ack, win, flags, kind)"},
    {"finish", (PyCFunction)tp_finish, METH_VARARGS, "finish((info0, info1))"},
    {"result", (PyCFunction)tp_result, METH_VARARGS,
     "result(d, start=0.0, indent=-1, level=0) -> the JSON text of result(d, start)"},
    {"findings", (PyCFunction)tp_findings, METH_VARARGS,
     "findings(conn_id, name0, name1) -> [Finding]"},
    {"leg_view", (PyCFunction)tp_leg_view, METH_VARARGS, "leg_view(d) -> dict"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject TransferProbeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pktflow._core.TransferProbe",
    .tp_basicsize = sizeof(TransferProbe),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)tp_init,
    .tp_dealloc = (destructor)tp_dealloc,
    .tp_methods = tp_methods,
    .tp_doc = "One connection's native transfer analysis, fed by hand (tests).",
};

/* ---- ConversationProbe -------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    Conv *c;
    DirView view[2];
    PyObject *conn_id, *archive;
} ConvProbe;

static int cp_init(ConvProbe *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"conn_id", "start", "indent", "query_level", "archive", NULL};
    PyObject *cid, *archive = Py_None;
    double start = 0.0;
    int indent = -1, level = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "U|diiO", names, &cid, &start, &indent, &level,
                                     &archive))
        return -1;
    if (self->c != NULL || layout_args(indent, level) < 0)
        return -1;
    Py_INCREF(cid);
    self->conn_id = cid;
    Py_INCREF(archive);
    self->archive = archive;
    ConvConfig cfg = {cid, self->view, start, archive == Py_None ? NULL : archive, indent,
                      level};
    self->c = pg_new(&cfg);
    return self->c == NULL ? -1 : 0;
}

static void cp_dealloc(ConvProbe *self)
{
    if (self->c)
        pg_free(self->c);
    Py_XDECREF(self->conn_id);
    Py_XDECREF(self->archive);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *cp_set_view(ConvProbe *self, PyObject *args)
{
    return set_view(self->view, args);
}

static PyObject *cp_feed(ConvProbe *self, PyObject *args)
{
    if (!initialised(self->c))
        return NULL;
    int d;
    Py_buffer data;
    long long offset, frame;
    double ts;
    if (!PyArg_ParseTuple(args, "iy*LLd", &d, &data, &offset, &frame, &ts))
        return NULL;
    int r = pg_feed(self->c, d, data.buf, data.len, offset, frame, ts);
    PyBuffer_Release(&data);
    if (r < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *cp_gap(ConvProbe *self, PyObject *args)
{
    if (!initialised(self->c))
        return NULL;
    int d;
    long long offset, length, frame;
    double ts;
    if (!PyArg_ParseTuple(args, "iLLLd", &d, &offset, &length, &frame, &ts))
        return NULL;
    if (pg_gap(self->c, d, offset, length, frame, ts) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *cp_finish(ConvProbe *self, PyObject *unused)
{
    if (!initialised(self->c))
        return NULL;
    if (pg_finish(self->c) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *cp_frontend_direction(ConvProbe *self, void *unused)
{
    if (!initialised(self->c))
        return NULL;
    int d = pg_frontend_direction(self->c);
    if (d < 0)
        Py_RETURN_NONE;
    return PyLong_FromLong(d);
}

static PyObject *cp_to_json(ConvProbe *self, PyObject *args)
{
    if (!initialised(self->c))
        return NULL;
    int indent = -1, level = 0;
    if (!PyArg_ParseTuple(args, "|ii", &indent, &level))
        return NULL;
    if (layout_args(indent, level) < 0)
        return NULL;
    JsonW w;
    jw_init(&w, indent, level);
    jw_obj(&w);
    if (pg_json(self->c, &w) < 0) {
        jw_free(&w);
        return NULL;
    }
    jw_obj_end(&w);
    PyObject *s = jw_take(&w);
    jw_free(&w);
    return s;
}

static PyObject *cp_findings(ConvProbe *self, PyObject *unused)
{
    if (!initialised(self->c))
        return NULL;
    Findings f;
    fnd_init(&f);
    if (pg_findings(self->c, &f) < 0) {
        fnd_free(&f);
        return NULL;
    }
    PyObject *out = fnd_to_list(&f, self->conn_id);
    fnd_free(&f);
    return out;
}

static PyObject *cp_is_postgres(ConvProbe *self, void *unused)
{
    if (!initialised(self->c))
        return NULL;
    return PyBool_FromLong(pg_is_postgres(self->c));
}

static PyObject *cp_listed(ConvProbe *self, void *unused)
{
    if (!initialised(self->c))
        return NULL;
    return PyLong_FromLongLong(pg_listed(self->c));
}

static PyObject *cp_leg_queries(ConvProbe *self, PyObject *args)
{
    if (!initialised(self->c))
        return NULL;
    long long most;
    if (!PyArg_ParseTuple(args, "L", &most))
        return NULL;
    return pg_leg_queries(self->c, most);
}

static PyMethodDef cp_methods[] = {
    {"set_view", (PyCFunction)cp_set_view, METH_VARARGS,
     "set_view(side, isn_seen, wscale_known): what the engine's direction `side` shows"},
    {"feed", (PyCFunction)cp_feed, METH_VARARGS, "feed(d, data, offset, frame, ts)"},
    {"gap", (PyCFunction)cp_gap, METH_VARARGS, "gap(d, offset, length, frame, ts)"},
    {"finish", (PyCFunction)cp_finish, METH_NOARGS, "finish()"},
    {"to_json", (PyCFunction)cp_to_json, METH_VARARGS,
     "to_json(indent=-1, level=0) -> the JSON text of the conversation's report keys"},
    {"findings", (PyCFunction)cp_findings, METH_NOARGS, "findings() -> [Finding]"},
    {"leg_queries", (PyCFunction)cp_leg_queries, METH_VARARGS,
     "leg_queries(most) -> [dict] | None"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef cp_getset[] = {
    {"frontend_direction", (getter)cp_frontend_direction, NULL, "0, 1 or None", NULL},
    {"is_postgres", (getter)cp_is_postgres, NULL, "protocol starts with postgresql", NULL},
    {"listed", (getter)cp_listed, NULL, "queries listed", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ConvProbeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pktflow._core.ConversationProbe",
    .tp_basicsize = sizeof(ConvProbe),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)cp_init,
    .tp_dealloc = (destructor)cp_dealloc,
    .tp_methods = cp_methods,
    .tp_getset = cp_getset,
    .tp_doc = "One connection's native PostgreSQL decoder, fed by hand (tests).",
};

/* ---- checks of the text and counting parts ------------------------------------------------ */

static PyObject *py_write_json(PyObject *self, PyObject *args)
{
    PyObject *v;
    int indent = -1, level = 0;
    if (!PyArg_ParseTuple(args, "O|ii", &v, &indent, &level))
        return NULL;
    if (layout_args(indent, level) < 0)
        return NULL;
    JsonW w;
    jw_init(&w, indent, level);
    jw_value(&w, v);
    if (w.failed) {
        jw_free(&w);
        PyErr_SetString(PyExc_ValueError, "not writable");
        return NULL;
    }
    PyObject *s = jw_take(&w);
    jw_free(&w);
    return s;
}

static PyObject *py_format(PyObject *self, PyObject *args)
{
    const char *spec;
    double x;
    int prec = 0;
    if (!PyArg_ParseTuple(args, "sd|i", &spec, &x, &prec))
        return NULL;
    StrB b;
    sb_init(&b);
    char buf[40];
    if (!strcmp(spec, "fixed"))
        sb_fixed(&b, x, prec, 0);
    else if (!strcmp(spec, "fixed,"))
        sb_fixed(&b, x, prec, 1);
    else if (!strcmp(spec, "pct"))
        sb_pct(&b, x, prec);
    else if (!strcmp(spec, "int,"))
        sb_int(&b, (i64)x, 1);
    else if (!strcmp(spec, "repr"))
        sb_add(&b, fmt_repr(buf, x));
    else if (!strcmp(spec, "round"))
        sb_add(&b, fmt_repr(buf, py_round(x, prec)));
    else if (!strcmp(spec, "round0"))
        sb_add(&b, fmt_repr(buf, py_round_int(x)));
    else {
        sb_free(&b);
        return PyErr_Format(PyExc_ValueError, "unknown spec %s", spec);
    }
    PyObject *s = b.failed ? PyErr_NoMemory() : PyUnicode_FromStringAndSize(b.p, b.len);
    sb_free(&b);
    return s;
}

static int ints(PyObject *seq, i64 **out, Py_ssize_t *n)
{
    PyObject *fast = PySequence_Fast(seq, "a sequence of ints");
    if (fast == NULL)
        return -1;
    *n = PySequence_Fast_GET_SIZE(fast);
    *out = PyMem_Malloc(sizeof(i64) * (*n + 1));
    for (Py_ssize_t i = 0; i < *n; i++)
        (*out)[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
    Py_DECREF(fast);
    return PyErr_Occurred() ? -1 : 0;
}

static PyObject *py_histogram(PyObject *self, PyObject *args)
{
    PyObject *seq;
    long long cap = 4096;
    int k = 12;
    if (!PyArg_ParseTuple(args, "O|Li", &seq, &cap, &k))
        return NULL;
    i64 *v;
    Py_ssize_t n;
    if (ints(seq, &v, &n) < 0)
        return NULL;
    Hist h;
    hist_init(&h, cap);
    for (Py_ssize_t i = 0; i < n; i++)
        if (hist_add(&h, v[i]) < 0)
            goto fail;
    i64 med, hi, mode, q95;
    int has_med = hist_median(&h, &med), has_hi = hist_hi(&h, &hi),
        has_mode = hist_mode(&h, &mode), has_q = hist_quantile(&h, 0.95, &q95);
    JsonW w;
    jw_init(&w, -1, 0);
    hist_top_json(&h, k, &w);
    PyObject *top = jw_take(&w);
    jw_free(&w);
    PyObject *r = Py_BuildValue("{s:L,s:N,s:N,s:N,s:N,s:N}", "n", (long long)hist_n(&h),
                                "median", opt_int(has_med, med), "hi", opt_int(has_hi, hi),
                                "mode", opt_int(has_mode, mode), "q95", opt_int(has_q, q95),
                                "top", top);
    hist_free(&h);
    PyMem_Free(v);
    return r;
fail:
    hist_free(&h);
    PyMem_Free(v);
    return NULL;
}

static PyObject *py_quantiles(PyObject *self, PyObject *args)
{
    PyObject *seq, *qs;
    if (!PyArg_ParseTuple(args, "OO", &seq, &qs))
        return NULL;
    i64 *v;
    Py_ssize_t n;
    if (ints(seq, &v, &n) < 0)
        return NULL;
    Quant q;
    quant_init(&q);
    for (Py_ssize_t i = 0; i < n; i++)
        if (quant_add(&q, v[i]) < 0) {
            quant_free(&q);
            PyMem_Free(v);
            return NULL;
        }
    PyMem_Free(v);
    PyObject *fast = PySequence_Fast(qs, "quantiles");
    if (fast == NULL) {
        quant_free(&q);
        return NULL;
    }
    Py_ssize_t m = PySequence_Fast_GET_SIZE(fast);
    PyObject *out = PyList_New(m);
    for (Py_ssize_t i = 0; i < m; i++) {
        i64 x;
        int has = quant_quantile(&q, PyFloat_AsDouble(PySequence_Fast_GET_ITEM(fast, i)), &x);
        PyList_SET_ITEM(out, i, opt_int(has, x));
    }
    Py_DECREF(fast);
    i64 hi;
    int has_hi = quant_hi(&q, &hi);
    PyObject *r = Py_BuildValue("(NLN)", out, (long long)quant_n(&q), opt_int(has_hi, hi));
    quant_free(&q);
    return r;
}

static PyObject *py_bins(PyObject *self, PyObject *args)
{
    PyObject *adds;
    long long end;
    if (!PyArg_ParseTuple(args, "OL", &adds, &end))
        return NULL;
    PyObject *fast = PySequence_Fast(adds, "(index, n) pairs");
    if (fast == NULL)
        return NULL;
    Bins b;
    bins_init(&b);
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast); i++) {
        long long idx, cnt;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "LL", &idx, &cnt)
            || bins_add(&b, idx, cnt) < 0) {
            Py_DECREF(fast);
            bins_free(&b);
            return NULL;
        }
    }
    Py_DECREF(fast);
    i64 mi, mc;
    bins_most(&b, &mi, &mc);
    PyObject *r = Py_BuildValue("(L(LL)LL)", (long long)bins_len(&b), (long long)mi,
                                (long long)mc, (long long)bins_least(&b, end),
                                (long long)bins_get(&b, end / 2));
    bins_free(&b);
    return r;
}

static PyMethodDef methods[] = {
    {"write_json", py_write_json, METH_VARARGS,
     "write_json(value, indent=-1, level=0) -> str: the native JSON writer's text"},
    {"format", py_format, METH_VARARGS,
     "format(spec, x, prec=0) -> str: fixed, 'fixed,', pct, 'int,', repr, round, round0"},
    {"histogram", py_histogram, METH_VARARGS,
     "histogram(values, cap=4096, k=12) -> dict of its reads"},
    {"quantiles", py_quantiles, METH_VARARGS,
     "quantiles(values, qs) -> ([quantile(q) for q in qs], n, hi)"},
    {"bins", py_bins, METH_VARARGS,
     "bins([(index, n)], end) -> (len, most(), least(end), get(end // 2))"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "pktflow._core",
    "pktflow's native analysis core (the twin of the Python pass; see native/core.h).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__core(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyType_Ready(&TransferProbeType) < 0 || PyType_Ready(&ConvProbeType) < 0)
        goto fail;
    Py_INCREF(&TransferProbeType);
    if (PyModule_AddObject(m, "TransferProbe", (PyObject *)&TransferProbeType) < 0)
        goto fail;
    Py_INCREF(&ConvProbeType);
    if (PyModule_AddObject(m, "ConversationProbe", (PyObject *)&ConvProbeType) < 0)
        goto fail;
    if (core_add_types(m) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
