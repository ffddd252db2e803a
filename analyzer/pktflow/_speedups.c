/* Optional native speedups for the two loops that run once per packet and once per message,
 * and for writing reports' JSON (_jsontext.c).
 *
 * Each function here has a pure-Python twin that gives identical results (capture/ip.py,
 * capture/link.py, capture/formats.py, pgwire/conversation.py); pktflow.accel picks this
 * module when it was built and PKTFLOW_PURE is unset, and the tests run both and compare.
 *
 *   decode(linktype, frame, frame_no, ts) -> packet tuple | 1 (not TCP) | 2 (IP fragment)
 *                                            | 3 (undecodable)
 *   scan_pcap(buf, pos, big_endian, nano, linktype, frame, limit)
 *       -> (pos, frame, packets, first_ts, last_ts, truncated, non_tcp, fragments, undecodable)
 *      Decodes every whole pcap record in buf from pos on, stopping before a record that is
 *      cut by the end of buf or claims more than `limit` captured bytes (the caller decides
 *      whether that is damage or just the end of this read).
 *   scan_pcapng(buf, pos, big_endian, interfaces, frame, max_block)
 *       -> (pos, frame, packets, first_ts, last_ts, truncated, non_tcp, fragments, undecodable,
 *           link types seen)
 *      The same for a run of pcapng Enhanced Packet Blocks; any other block, or any doubt
 *      about one, ends the run and is left to the Python code.
 *   message_run(buf, pos, max_message) -> (count, pos, bad_length | -1)
 *      Walks a run of messages of the type at buf[pos] (DataRow, CopyData), as the Python loop
 *      in Conversation._typed does.
 *   dumps(value, indent, level, limit) -> str | None
 *      json.dumps's exact text, or None to have the caller use it (see _jsontext.c).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_jsontext.h"
#include "native/decode.h"

/* Recently seen addresses: a connection's packets share two addresses, so returning the same
 * bytes object saves an allocation and, as bytes cache their hash, the flow-table lookup's
 * hashing. Direct-mapped, keyed by the address's last bytes. */
#define ADDR_SLOTS 64
static PyObject *addr_cache[ADDR_SLOTS];

static PyObject *address(const uint8_t *a, Py_ssize_t len)
{
    unsigned slot = (a[len - 1] ^ (a[len - 2] << 3) ^ (a[len - 3] << 1)) & (ADDR_SLOTS - 1);
    PyObject *hit = addr_cache[slot];
    if (hit != NULL && PyBytes_GET_SIZE(hit) == len && memcmp(PyBytes_AS_STRING(hit), a, len) == 0) {
        Py_INCREF(hit);
        return hit;
    }
    PyObject *obj = PyBytes_FromStringAndSize((const char *)a, len);
    if (obj == NULL)
        return NULL;
    Py_XSETREF(addr_cache[slot], obj);
    Py_INCREF(obj);
    return obj;
}

/* Ports, windows and lengths repeat packet after packet: one int object for each 16-bit value
 * seen, made on first use and kept, instead of an allocation per field per packet (CPython
 * keeps only -5..256). */
static PyObject *u16_cache[1 << 16];

static PyObject *u16(unsigned long v)
{
    if (v >= (1 << 16))
        return PyLong_FromUnsignedLong(v);
    PyObject *o = u16_cache[v];
    if (o == NULL) {
        o = PyLong_FromUnsignedLong(v);
        if (o == NULL)
            return NULL;
        u16_cache[v] = o;
    }
    Py_INCREF(o);
    return o;
}

static PyObject *code(long c) { return PyLong_FromLong(c); }

/* A frame decoded (native/decode.h) as a packet tuple, or its code. */
static PyObject *decode_frame(int linktype, const uint8_t *f, Py_ssize_t n, long long frame_no,
                              double ts)
{
    DecodedTcp p;
    int c = decode_frame_tcp(linktype, f, n, &p);
    if (c != DECODED_TCP) return code(c);
    PyObject *tup = PyTuple_New(13);
    if (tup == NULL) return NULL;
    PyObject *items[13] = {
        PyLong_FromLongLong(frame_no),
        PyFloat_FromDouble(ts),
        address(p.src, p.alen),
        address(p.dst, p.alen),
        u16(p.sport),
        u16(p.dport),
        PyLong_FromUnsignedLong(p.seq),
        PyLong_FromUnsignedLong(p.ack),
        PyLong_FromLong(p.flags),
        u16(p.win),
        u16((unsigned long)p.plen),
        PyBytes_FromStringAndSize((const char *)p.payload, p.caplen),
        PyBytes_FromStringAndSize((const char *)p.options, p.optlen),
    };
    for (int i = 0; i < 13; i++) {
        if (items[i] == NULL) {
            for (int j = i; j < 13; j++) Py_XDECREF(items[j]);
            Py_DECREF(tup);
            return NULL;
        }
        PyTuple_SET_ITEM(tup, i, items[i]);
    }
    return tup;
}

static PyObject *py_decode(PyObject *self, PyObject *args)
{
    int linktype;
    Py_buffer frame;
    long long frame_no;
    double ts;
    if (!PyArg_ParseTuple(args, "iy*Ld:decode", &linktype, &frame, &frame_no, &ts))
        return NULL;
    PyObject *r = decode_frame(linktype, frame.buf, frame.len, frame_no, ts);
    PyBuffer_Release(&frame);
    return r;
}

struct tally { long non_tcp, fragments, undecodable; };

typedef struct {
    PyObject *packets;
    struct tally t;
} Tuples;

/* A decoded frame: a packet tuple goes to `packets`, a code is counted. -1 on error. */
static int keep(void *ctx, int linktype, const uint8_t *f, long long caplen, long long frame,
                double ts)
{
    Tuples *out = ctx;
    PyObject *r = decode_frame(linktype, f, caplen, frame, ts);
    if (r == NULL) return -1;
    if (PyTuple_CheckExact(r)) {
        int bad = PyList_Append(out->packets, r);
        Py_DECREF(r);
        return bad;
    }
    long c = PyLong_AsLong(r);
    Py_DECREF(r);
    if (c == NOT_TCP) out->t.non_tcp++;
    else if (c == FRAGMENT) out->t.fragments++;
    else out->t.undecodable++;
    return 0;
}

static PyObject *py_scan_pcap(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, limit;
    int big, nano, linktype;
    long long frame;
    if (!PyArg_ParseTuple(args, "y*nppiLn:scan_pcap", &view, &pos, &big, &nano, &linktype,
                          &frame, &limit))
        return NULL;
    Tuples out = {PyList_New(0), {0, 0, 0}};
    ScanState st = {frame, 0, 0.0, 0.0, 0};
    if (out.packets == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    pos = scan_pcap_records(view.buf, view.len, pos, big, nano, linktype, limit, &st, keep, &out);
    PyBuffer_Release(&view);
    if (pos < 0) {
        Py_DECREF(out.packets);
        return NULL;
    }
    return Py_BuildValue("(nLNNNllll)", pos, st.frame, out.packets, scan_ts(&st, st.first_ts),
                         scan_ts(&st, st.last_ts), st.truncated, out.t.non_tcp,
                         out.t.fragments, out.t.undecodable);
}

static PyObject *py_scan_pcapng(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, max_block;
    int big;
    PyObject *list;
    long long frame;
    Ifaces ifs;
    if (!PyArg_ParseTuple(args, "y*npO!Ln:scan_pcapng", &view, &pos, &big, &PyList_Type,
                          &list, &frame, &max_block))
        return NULL;
    if (scan_ifaces(list, &ifs) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    Tuples out = {PyList_New(0), {0, 0, 0}};
    ScanState st = {frame, 0, 0.0, 0.0, 0};
    if (out.packets == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    pos = scan_pcapng_blocks(view.buf, view.len, pos, big, max_block, &ifs, &st, keep, &out);
    PyBuffer_Release(&view);
    PyObject *seen = pos < 0 ? NULL : scan_links_seen(&ifs);
    if (seen == NULL) {
        Py_DECREF(out.packets);
        return NULL;
    }
    return Py_BuildValue("(nLNNNllllN)", pos, st.frame, out.packets,
                         scan_ts(&st, st.first_ts), scan_ts(&st, st.last_ts),
                         st.truncated, out.t.non_tcp, out.t.fragments, out.t.undecodable, seen);
}

/* Called once per segment of a bulk transfer: fast-call arguments, bytes read in place. */
static PyObject *py_message_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "message_run(buf, pos, max_message)");
        return NULL;
    }
    Py_buffer view;
    int viewed = 0;
    const uint8_t *buf;
    Py_ssize_t n;
    if (PyBytes_CheckExact(args[0])) {
        buf = (const uint8_t *)PyBytes_AS_STRING(args[0]);
        n = PyBytes_GET_SIZE(args[0]);
    } else {
        if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
            return NULL;
        viewed = 1;
        buf = view.buf;
        n = view.len;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    long long max_message = PyLong_AsLongLong(args[2]);
    long long count = 0, bad = -1;
    if (PyErr_Occurred() || pos < 0 || n - pos < 5) {
        if (viewed)
            PyBuffer_Release(&view);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "message_run needs a whole header at pos");
        return NULL;
    }
    uint8_t t = buf[pos];
    for (;;) {
        long long ln = dec_be32(buf + pos + 1);
        if (ln < 4 || ln > max_message) { bad = ln; break; }
        count++;
        pos += 1 + (Py_ssize_t)ln;
        if (n - pos < 5 || buf[pos] != t) break;
    }
    if (viewed)
        PyBuffer_Release(&view);
    return Py_BuildValue("(LnL)", count, pos, bad);
}

static PyMethodDef methods[] = {
    {"decode", py_decode, METH_VARARGS, "Decode one captured frame to a packet tuple or a code."},
    {"scan_pcap", py_scan_pcap, METH_VARARGS, "Decode the whole pcap records in a buffer."},
    {"scan_pcapng", py_scan_pcapng, METH_VARARGS, "Decode the whole pcapng EPBs in a buffer."},
    {"message_run", (PyCFunction)(void (*)(void))py_message_run, METH_FASTCALL, "Walk a run of same-type messages."},
    {"dumps", (PyCFunction)(void (*)(void))jsontext_dumps, METH_FASTCALL, "json.dumps's text, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "pktflow._speedups", "Native twins of pktflow's per-packet loops.",
    -1, methods,
};

PyMODINIT_FUNC PyInit__speedups(void) { return PyModule_Create(&module); }
