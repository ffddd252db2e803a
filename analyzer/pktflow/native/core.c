/* The whole pass in C, as pktflow.native_pass drives it: records scanned from the reader's
 * buffers straight into the engine (no packet objects), connections reported to a Python
 * callback as they finish, each as its JSON text, its findings, its payload bytes and what
 * relay matching reads of it.
 *
 *   Core(layout, decode_postgres, linger, settled_linger, on_report, archive=None)
 *      layout "compact" or "indented" (report.stored's: a connection nested 2 levels deep);
 *      on_report(number, text, payload_bytes, leg, findings) for each connection reported,
 *      leg None for one relay matching cannot use, findings None when it has none.
 *   scan_pcap(...), scan_pcapng(...)   as pktflow._speedups's, but the third item of the
 *      result is the count of TCP packets fed rather than their list; a batch's packets are
 *      swept after (TcpEngine.sweep) as pipeline.feed_capture does.
 *   decode(linktype, frame, frame_no, ts) -> 0 when fed, else _speedups.decode's code;
 *   sweep_pending(): the end of a batch of records decoded one at a time.
 *   finish(): engine.finish() and the report of the connections still open.
 *   late_packets, late_frames, settled_linger: as TcpEngine's.
 */
#include "report.h"

#include <math.h>
#include <string.h>

#define CONNECTION_DEPTH 2 /* report.stored: report -> "connections" -> a connection */
#define REREAD_QUERIES 16 /* relay.topology: legs with more read their queries again */

typedef struct {
    PyObject_HEAD
    Engine e;
    int ready;
    PyObject *on_report, *archive;
    JsonW w;
    int have_start; /* the first record's time: the report's times are relative to it */
    double start;
    i64 unswept; /* TCP packets fed since the last sweep, and the last one's time */
    double unswept_ts;
    /* scan counts */
    long non_tcp, fragments, undecodable;
} Core;

static int report_conn(Engine *e, Conn *c)
{
    Core *self = e->owner;
    Findings f;
    fnd_init(&f);
    i64 payload = 0;
    jw_reset(&self->w);
    if (conn_report(c, self->have_start ? self->start : 0.0, &self->w, &f, &payload) < 0) {
        fnd_free(&f);
        return -1;
    }
    PyObject *text = jw_take(&self->w);
    PyObject *findings = text == NULL ? NULL : f.n ? fnd_to_list(&f, c->id) : Py_NewRef(Py_None);
    fnd_free(&f);
    PyObject *leg = findings == NULL ? NULL : conn_leg(c, REREAD_QUERIES);
    if (leg == NULL) {
        Py_XDECREF(text);
        Py_XDECREF(findings);
        return -1;
    }
    PyObject *r = PyObject_CallFunction(self->on_report, "LNLNN", (long long)c->number, text,
                                        (long long)payload, leg, findings);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

static int core_init(Core *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"layout", "decode_postgres", "linger", "settled_linger",
                            "on_report", "archive", NULL};
    const char *layout;
    int postgres;
    double linger, settled;
    PyObject *on_report, *archive = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "spddO|O:Core", names, &layout, &postgres,
                                     &linger, &settled, &on_report, &archive))
        return -1;
    if (self->ready) {
        PyErr_SetString(PyExc_RuntimeError, "Core is initialised once");
        return -1;
    }
    int indented = !strcmp(layout, "indented");
    if (!indented && strcmp(layout, "compact")) {
        PyErr_SetString(PyExc_ValueError, "layout is 'compact' or 'indented'");
        return -1;
    }
    if (engine_init(&self->e, 1, linger, 1, settled) < 0)
        return -1;
    self->ready = 1;
    self->e.retired = report_conn;
    self->e.owner = self;
    self->e.decode_postgres = postgres;
    Py_INCREF(on_report);
    self->on_report = on_report;
    if (archive != Py_None) {
        Py_INCREF(archive);
        self->archive = archive;
    }
    int indent = indented ? 2 : -1;
    jw_init(&self->w, indent, indented ? CONNECTION_DEPTH : 0);
    ConvConfig cfg = {NULL, NULL, 0.0, self->archive, indent,
                      indented ? CONNECTION_DEPTH + 2 : 0};
    self->e.conv_cfg = cfg;
    return 0;
}

static void core_dealloc(Core *self)
{
    if (self->ready) {
        engine_free(&self->e);
        jw_free(&self->w);
    }
    Py_XDECREF(self->on_report);
    Py_XDECREF(self->archive);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static void note_start(Core *self, double ts)
{
    if (!self->have_start) {
        self->have_start = 1;
        self->start = ts;
        self->e.conv_cfg.start = ts;
    }
}

/* One record's frame: decoded and fed, or counted. */
static int on_frame(void *ctx, int linktype, const uint8_t *f, long long caplen,
                    long long frame, double ts)
{
    Core *self = ctx;
    note_start(self, ts);
    Pkt p;
    int code = decode_frame_tcp(linktype, f, caplen, &p.t);
    if (code == NOT_TCP) {
        self->non_tcp++;
        return 0;
    }
    if (code == FRAGMENT) {
        self->fragments++;
        return 0;
    }
    if (code == UNDECODABLE) {
        self->undecodable++;
        return 0;
    }
    p.frame = frame;
    p.ts = ts;
    self->unswept++;
    self->unswept_ts = ts;
    return engine_feed(&self->e, &p);
}

static int sweep(Core *self)
{
    if (!self->unswept)
        return 0;
    self->unswept = 0;
    return engine_sweep(&self->e, self->unswept_ts);
}

static int ready(Core *self)
{
    if (!self->ready) {
        PyErr_SetString(PyExc_RuntimeError, "Core not initialised");
        return 0;
    }
    if (self->e.failed) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "the native pass failed earlier");
        return 0;
    }
    return 1;
}

static PyObject *core_scan_pcap(Core *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, limit;
    int big, nano, linktype;
    long long frame;
    if (!ready(self))
        return NULL;
    if (!PyArg_ParseTuple(args, "y*nppiLn:scan_pcap", &view, &pos, &big, &nano, &linktype,
                          &frame, &limit))
        return NULL;
    ScanState st = {frame, 0, 0.0, 0.0, 0};
    self->non_tcp = self->fragments = self->undecodable = 0;
    long long before = self->unswept;
    pos = scan_pcap_records(view.buf, view.len, pos, big, nano, linktype, limit, &st, on_frame,
                            self);
    PyBuffer_Release(&view);
    i64 fed = self->unswept - before;
    if (pos < 0 || sweep(self) < 0)
        return NULL;
    return Py_BuildValue("(nLLNNllll)", pos, st.frame, (long long)fed,
                         scan_ts(&st, st.first_ts), scan_ts(&st, st.last_ts),
                         st.truncated, self->non_tcp, self->fragments, self->undecodable);
}

static PyObject *core_scan_pcapng(Core *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, max_block;
    int big;
    PyObject *list;
    long long frame;
    Ifaces ifs;
    if (!ready(self))
        return NULL;
    if (!PyArg_ParseTuple(args, "y*npO!Ln:scan_pcapng", &view, &pos, &big, &PyList_Type,
                          &list, &frame, &max_block))
        return NULL;
    if (scan_ifaces(list, &ifs) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    /* packets decoded one at a time before this run are a batch of their own */
    if (sweep(self) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    ScanState st = {frame, 0, 0.0, 0.0, 0};
    self->non_tcp = self->fragments = self->undecodable = 0;
    pos = scan_pcapng_blocks(view.buf, view.len, pos, big, max_block, &ifs, &st, on_frame,
                             self);
    PyBuffer_Release(&view);
    i64 fed = self->unswept;
    if (pos < 0 || sweep(self) < 0)
        return NULL;
    PyObject *seen = scan_links_seen(&ifs);
    if (seen == NULL)
        return NULL;
    return Py_BuildValue("(nLLNNllllN)", pos, st.frame, (long long)fed,
                         scan_ts(&st, st.first_ts), scan_ts(&st, st.last_ts),
                         st.truncated, self->non_tcp, self->fragments, self->undecodable, seen);
}

static PyObject *core_decode(Core *self, PyObject *args)
{
    int linktype;
    Py_buffer frame;
    long long frame_no;
    double ts;
    if (!ready(self))
        return NULL;
    if (!PyArg_ParseTuple(args, "iy*Ld:decode", &linktype, &frame, &frame_no, &ts))
        return NULL;
    self->non_tcp = self->fragments = self->undecodable = 0;
    long long before = self->unswept;
    int r = on_frame(self, linktype, frame.buf, frame.len, frame_no, ts);
    PyBuffer_Release(&frame);
    if (r < 0)
        return NULL;
    if (self->unswept > before)
        return PyLong_FromLong(0);
    return PyLong_FromLong(self->non_tcp ? NOT_TCP : self->fragments ? FRAGMENT : UNDECODABLE);
}

static PyObject *core_sweep_pending(Core *self, PyObject *unused)
{
    if (!ready(self) || sweep(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *core_finish(Core *self, PyObject *unused)
{
    if (!ready(self))
        return NULL;
    if (engine_finish(&self->e) < 0 || engine_report_live(&self->e) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *core_late_packets(Core *self, void *unused)
{
    return PyLong_FromLongLong(self->e.late_packets);
}

static PyObject *core_late_frames(Core *self, void *unused)
{
    PyObject *out = PyList_New(self->e.n_late_frames);
    if (out == NULL)
        return NULL;
    for (int i = 0; i < self->e.n_late_frames; i++)
        PyList_SET_ITEM(out, i, PyLong_FromLongLong(self->e.late_frames[i]));
    return out;
}

static PyObject *core_settled_linger(Core *self, void *unused)
{
    return PyFloat_FromDouble(self->e.settled_linger);
}

static PyMethodDef core_methods[] = {
    {"scan_pcap", (PyCFunction)core_scan_pcap, METH_VARARGS,
     "scan_pcap(buf, pos, big_endian, nano, linktype, frame, limit)"},
    {"scan_pcapng", (PyCFunction)core_scan_pcapng, METH_VARARGS,
     "scan_pcapng(buf, pos, big_endian, interfaces, frame, max_block)"},
    {"decode", (PyCFunction)core_decode, METH_VARARGS, "decode(linktype, frame, frame_no, ts)"},
    {"sweep_pending", (PyCFunction)core_sweep_pending, METH_NOARGS,
     "the end of a batch of records decoded one at a time"},
    {"finish", (PyCFunction)core_finish, METH_NOARGS,
     "the end of the capture: every connection left is reported"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef core_getset[] = {
    {"late_packets", (getter)core_late_packets, NULL, "packets after their connection", NULL},
    {"late_frames", (getter)core_late_frames, NULL, "the first of them", NULL},
    {"settled_linger", (getter)core_settled_linger, NULL, "the settled linger in effect", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pktflow._core.Core",
    .tp_basicsize = sizeof(Core),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)core_init,
    .tp_dealloc = (destructor)core_dealloc,
    .tp_methods = core_methods,
    .tp_getset = core_getset,
    .tp_doc = "The native analysis pass (see pktflow.native_pass).",
};

int core_add_types(PyObject *m)
{
    if (PyType_Ready(&CoreType) < 0)
        return -1;
    Py_INCREF(&CoreType);
    return PyModule_AddObject(m, "Core", (PyObject *)&CoreType);
}
