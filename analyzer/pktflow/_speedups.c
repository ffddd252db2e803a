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

enum { NOT_TCP = 1, FRAGMENT = 2, UNDECODABLE = 3 };

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

static inline unsigned be16(const uint8_t *p) { return (unsigned)p[0] << 8 | p[1]; }
static inline uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

/* Where IP starts, as capture/link.py decides: 0 for "not IP", else sets *version, *off. */
static int ethertype(unsigned etype, Py_ssize_t off, int *version, Py_ssize_t *ip_off)
{
    if (etype == 0x0800) { *version = 4; *ip_off = off; return 1; }
    if (etype == 0x86DD) { *version = 6; *ip_off = off; return 1; }
    return 0;
}

static int link_ip(int linktype, const uint8_t *f, Py_ssize_t n, int *version, Py_ssize_t *off)
{
    switch (linktype) {
    case 1: { /* Ethernet, with any stack of VLAN tags */
        if (n < 14) return 0;
        unsigned etype = be16(f + 12);
        Py_ssize_t o = 14;
        while (etype == 0x8100 || etype == 0x88A8 || etype == 0x9100) {
            if (n < o + 4) return 0;
            etype = be16(f + o + 2);
            o += 4;
        }
        return ethertype(etype, o, version, off);
    }
    case 113: /* Linux cooked */
        if (n < 16) return 0;
        return ethertype(be16(f + 14), 16, version, off);
    case 276: /* Linux cooked v2 */
        if (n < 20) return 0;
        return ethertype(be16(f), 20, version, off);
    case 0: case 108: { /* BSD loopback: family in the capturing host's byte order */
        if (n < 4) return 0;
        uint32_t fam = le32(f);
        if (fam > 0xFFFF) fam = be32(f);
        if (fam == 2) { *version = 4; *off = 4; return 1; }
        if (fam == 24 || fam == 28 || fam == 30) { *version = 6; *off = 4; return 1; }
        return 0;
    }
    case 12: case 14: case 101: {
        if (n == 0) return 0;
        int v = f[0] >> 4;
        if (v != 4 && v != 6) return 0;
        *version = v; *off = 0;
        return 1;
    }
    case 228:
        if (n == 0) return 0;
        *version = 4; *off = 0;
        return 1;
    case 229:
        if (n == 0) return 0;
        *version = 6; *off = 0;
        return 1;
    default:
        return 0;
    }
}

static PyObject *code(long c) { return PyLong_FromLong(c); }

static PyObject *tcp(const uint8_t *f, Py_ssize_t n, Py_ssize_t t, Py_ssize_t ip_end,
                     const uint8_t *src, const uint8_t *dst, Py_ssize_t alen,
                     long long frame_no, double ts)
{
    if (n < t + 20) return code(UNDECODABLE);
    Py_ssize_t thl = (f[t + 12] >> 4) * 4;
    if (thl < 20 || n < t + thl) return code(UNDECODABLE);
    Py_ssize_t plen = ip_end - t - thl;
    if (plen < 0) return code(UNDECODABLE);
    Py_ssize_t p0 = t + thl;
    Py_ssize_t p1 = p0 + plen < n ? p0 + plen : n;
    PyObject *tup = PyTuple_New(13);
    if (tup == NULL) return NULL;
    PyObject *items[13] = {
        PyLong_FromLongLong(frame_no),
        PyFloat_FromDouble(ts),
        address(src, alen),
        address(dst, alen),
        u16(be16(f + t)),
        u16(be16(f + t + 2)),
        PyLong_FromUnsignedLong(be32(f + t + 4)),
        PyLong_FromUnsignedLong(be32(f + t + 8)),
        PyLong_FromLong(f[t + 13]),
        u16(be16(f + t + 14)),
        u16((unsigned long)plen),
        PyBytes_FromStringAndSize((const char *)f + p0, p1 - p0),
        PyBytes_FromStringAndSize((const char *)f + t + 20, thl - 20),
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

/* capture/ip.py's decode, after the link layer. */
static PyObject *decode_ip(const uint8_t *f, Py_ssize_t n, int version, Py_ssize_t off,
                           long long frame_no, double ts)
{
    if (version == 4) {
        if (n < off + 20) return code(UNDECODABLE);
        unsigned vihl = f[off];
        Py_ssize_t ihl = (vihl & 0x0F) * 4;
        if (vihl >> 4 != 4 || ihl < 20) return code(UNDECODABLE);
        if (f[off + 9] != 6) return code(NOT_TCP);
        if ((f[off + 6] & 0x3F) || f[off + 7]) return code(FRAGMENT);
        Py_ssize_t total = be16(f + off + 2);
        if (total == 0) total = n - off; /* TSO on the capturing host */
        return tcp(f, n, off + ihl, off + total, f + off + 12, f + off + 16, 4, frame_no, ts);
    }
    if (version != 6) return code(NOT_TCP);
    if (n < off + 40) return code(UNDECODABLE);
    Py_ssize_t ip_end = off + 40 + be16(f + off + 4);
    Py_ssize_t t = off + 40;
    unsigned nxt = f[off + 6];
    while (nxt != 6) { /* extension headers before TCP */
        if (nxt == 44) return code(FRAGMENT);
        if (nxt != 0 && nxt != 43 && nxt != 60 && nxt != 51) return code(NOT_TCP);
        if (n < t + 2) return code(UNDECODABLE);
        Py_ssize_t hlen = f[t + 1];
        unsigned nxt_hdr = f[t];
        t += nxt == 51 ? (hlen + 2) * 4 : (hlen + 1) * 8;
        nxt = nxt_hdr;
    }
    return tcp(f, n, t, ip_end, f + off + 8, f + off + 24, 16, frame_no, ts);
}

static PyObject *decode_frame(int linktype, const uint8_t *f, Py_ssize_t n, long long frame_no,
                              double ts)
{
    int version;
    Py_ssize_t off;
    if (!link_ip(linktype, f, n, &version, &off)) return code(NOT_TCP);
    return decode_ip(f, n, version, off, frame_no, ts);
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

struct tally { long truncated, non_tcp, fragments, undecodable; };

/* A decoded frame: a packet tuple goes to `packets`, a code is counted. -1 on error. */
static int keep(PyObject *r, PyObject *packets, struct tally *t)
{
    if (r == NULL) return -1;
    if (PyTuple_CheckExact(r)) {
        int bad = PyList_Append(packets, r);
        Py_DECREF(r);
        return bad;
    }
    long c = PyLong_AsLong(r);
    Py_DECREF(r);
    if (c == NOT_TCP) t->non_tcp++;
    else if (c == FRAGMENT) t->fragments++;
    else t->undecodable++;
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
    const uint8_t *buf = view.buf;
    Py_ssize_t len = view.len;
    double scale = nano ? 1e-9 : 1e-6;
    struct tally tally = {0, 0, 0, 0};
    int any = 0;
    double first_ts = 0.0, last_ts = 0.0;
    PyObject *packets = PyList_New(0);
    if (packets == NULL) goto fail;
    if (pos < 0) pos = 0;
    while (len - pos >= 16) {
        const uint8_t *h = buf + pos;
        uint32_t sec, frac, caplen, orig;
        if (big) { sec = be32(h); frac = be32(h + 4); caplen = be32(h + 8); orig = be32(h + 12); }
        else { sec = le32(h); frac = le32(h + 4); caplen = le32(h + 8); orig = le32(h + 12); }
        if ((Py_ssize_t)caplen > limit || len - pos - 16 < (Py_ssize_t)caplen)
            break;
        frame++;
        double ts = (double)sec + (double)frac * scale;
        if (!any) { first_ts = ts; any = 1; }
        last_ts = ts;
        if (caplen < orig) tally.truncated++;
        if (keep(decode_frame(linktype, h + 16, caplen, frame, ts), packets, &tally)) goto fail;
        pos += 16 + caplen;
    }
    PyBuffer_Release(&view);
    PyObject *first = any ? PyFloat_FromDouble(first_ts) : (Py_INCREF(Py_None), Py_None);
    PyObject *last = any ? PyFloat_FromDouble(last_ts) : (Py_INCREF(Py_None), Py_None);
    return Py_BuildValue("(nLNNNllll)", pos, frame, packets, first, last, tally.truncated,
                         tally.non_tcp, tally.fragments, tally.undecodable);
fail:
    PyBuffer_Release(&view);
    Py_XDECREF(packets);
    return NULL;
}

#define MAX_IFACES 256

/* pcapng's Enhanced Packet Blocks, as pcapng_records reads them: every whole, well-formed EPB
 * from pos on, stopping at any other block or any doubt, which the Python code then handles. */
static PyObject *py_scan_pcapng(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, max_block;
    int big;
    PyObject *ifaces;
    long long frame;
    if (!PyArg_ParseTuple(args, "y*npO!Ln:scan_pcapng", &view, &pos, &big, &PyList_Type,
                          &ifaces, &frame, &max_block))
        return NULL;
    int links[MAX_IFACES];
    double res[MAX_IFACES], offs[MAX_IFACES];
    Py_ssize_t nif = PyList_GET_SIZE(ifaces);
    if (nif > MAX_IFACES) nif = MAX_IFACES; /* the rest are left to the Python code */
    for (Py_ssize_t i = 0; i < nif; i++) {
        PyObject *it = PyList_GET_ITEM(ifaces, i);
        PyObject *snap;
        if (!PyArg_ParseTuple(it, "iddO", &links[i], &res[i], &offs[i], &snap)) {
            PyBuffer_Release(&view);
            return NULL;
        }
    }
    const uint8_t *buf = view.buf;
    Py_ssize_t len = view.len;
    struct tally tally = {0, 0, 0, 0};
    int any = 0, seen_n = 0, seen[MAX_IFACES];
    double first_ts = 0.0, last_ts = 0.0;
    PyObject *packets = PyList_New(0), *seen_list = NULL;
    if (packets == NULL) goto fail;
    if (pos < 0) pos = 0;
    while (len - pos >= 12) {
        const uint8_t *h = buf + pos;
        uint32_t (*rd)(const uint8_t *) = big ? be32 : le32;
        uint32_t btype = rd(h), blen = rd(h + 4);
        if (btype != 6 || blen < 32 || blen % 4 || (Py_ssize_t)blen > max_block
            || len - pos < (Py_ssize_t)blen || rd(h + blen - 4) != blen)
            break;
        const uint8_t *body = h + 8;
        uint32_t iface = rd(body), hi = rd(body + 4), lo = rd(body + 8);
        uint32_t caplen = rd(body + 12), orig = rd(body + 16);
        if ((Py_ssize_t)iface >= nif || 20 + (uint64_t)caplen > blen - 12)
            break;
        frame++;
        double ts = (double)((uint64_t)hi << 32 | lo) * res[iface] + offs[iface];
        if (!any) { first_ts = ts; any = 1; }
        last_ts = ts;
        if (caplen < orig) tally.truncated++;
        int k = 0;
        while (k < seen_n && seen[k] != links[iface]) k++;
        if (k == seen_n) seen[seen_n++] = links[iface];
        if (keep(decode_frame(links[iface], body + 20, caplen, frame, ts), packets, &tally))
            goto fail;
        pos += blen;
    }
    PyBuffer_Release(&view);
    seen_list = PyList_New(seen_n);
    if (seen_list == NULL) { Py_DECREF(packets); return NULL; }
    for (int k = 0; k < seen_n; k++) {
        PyObject *v = PyLong_FromLong(seen[k]);
        if (v == NULL) { Py_DECREF(packets); Py_DECREF(seen_list); return NULL; }
        PyList_SET_ITEM(seen_list, k, v);
    }
    PyObject *first = any ? PyFloat_FromDouble(first_ts) : (Py_INCREF(Py_None), Py_None);
    PyObject *last = any ? PyFloat_FromDouble(last_ts) : (Py_INCREF(Py_None), Py_None);
    return Py_BuildValue("(nLNNNllllN)", pos, frame, packets, first, last, tally.truncated,
                         tally.non_tcp, tally.fragments, tally.undecodable, seen_list);
fail:
    PyBuffer_Release(&view);
    Py_XDECREF(packets);
    return NULL;
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
        long long ln = be32(buf + pos + 1);
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
