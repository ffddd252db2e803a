/* Link, IP and TCP headers of a captured frame, as capture/link.py and capture/ip.py decode
 * them: shared by pktflow._speedups (which makes packet tuples of them) and the native core
 * (which feeds them to its engine). Header-only: each includer gets its own static copy. */
#ifndef PKTFLOW_NATIVE_DECODE_H
#define PKTFLOW_NATIVE_DECODE_H

#include <stdint.h>
#include <string.h>

enum { DECODED_TCP = 0, NOT_TCP = 1, FRAGMENT = 2, UNDECODABLE = 3 };

/* A TCP packet, pointing into the frame it was decoded from (pktflow.capture.packet). */
typedef struct {
    const uint8_t *src, *dst; /* addresses, alen bytes each */
    int alen; /* 4 or 16 */
    unsigned sport, dport;
    uint32_t seq, ack;
    unsigned flags, win;
    long long plen; /* payload length on the wire (IP's view) */
    const uint8_t *payload;
    long long caplen; /* payload bytes captured: min(plen, what the frame holds) */
    const uint8_t *options;
    int optlen;
} DecodedTcp;

static inline unsigned dec_be16(const uint8_t *p) { return (unsigned)p[0] << 8 | p[1]; }
static inline uint32_t dec_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline uint32_t dec_le32(const uint8_t *p)
{
    return (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

/* Where IP starts, as capture/link.py decides: 0 for "not IP", else sets *version, *off. */
static inline int dec_ethertype(unsigned etype, long long off, int *version, long long *ip_off)
{
    if (etype == 0x0800) { *version = 4; *ip_off = off; return 1; }
    if (etype == 0x86DD) { *version = 6; *ip_off = off; return 1; }
    return 0;
}

static inline int dec_link(int linktype, const uint8_t *f, long long n, int *version,
                           long long *off)
{
    switch (linktype) {
    case 1: { /* Ethernet, with any stack of VLAN tags */
        if (n < 14) return 0;
        unsigned etype = dec_be16(f + 12);
        long long o = 14;
        while (etype == 0x8100 || etype == 0x88A8 || etype == 0x9100) {
            if (n < o + 4) return 0;
            etype = dec_be16(f + o + 2);
            o += 4;
        }
        return dec_ethertype(etype, o, version, off);
    }
    case 113: /* Linux cooked */
        if (n < 16) return 0;
        return dec_ethertype(dec_be16(f + 14), 16, version, off);
    case 276: /* Linux cooked v2 */
        if (n < 20) return 0;
        return dec_ethertype(dec_be16(f), 20, version, off);
    case 0: case 108: { /* BSD loopback: family in the capturing host's byte order */
        if (n < 4) return 0;
        uint32_t fam = dec_le32(f);
        if (fam > 0xFFFF) fam = dec_be32(f);
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

static inline int dec_tcp(const uint8_t *f, long long n, long long t, long long ip_end,
                          const uint8_t *src, const uint8_t *dst, int alen, DecodedTcp *p)
{
    if (n < t + 20) return UNDECODABLE;
    long long thl = (f[t + 12] >> 4) * 4;
    if (thl < 20 || n < t + thl) return UNDECODABLE;
    long long plen = ip_end - t - thl;
    if (plen < 0) return UNDECODABLE;
    long long p0 = t + thl;
    long long p1 = p0 + plen < n ? p0 + plen : n;
    p->src = src;
    p->dst = dst;
    p->alen = alen;
    p->sport = dec_be16(f + t);
    p->dport = dec_be16(f + t + 2);
    p->seq = dec_be32(f + t + 4);
    p->ack = dec_be32(f + t + 8);
    p->flags = f[t + 13];
    p->win = dec_be16(f + t + 14);
    p->plen = plen;
    p->payload = f + p0;
    p->caplen = p1 - p0;
    p->options = f + t + 20;
    p->optlen = (int)(thl - 20);
    return DECODED_TCP;
}

/* capture/ip.py's decode, after the link layer. */
static inline int dec_ip(const uint8_t *f, long long n, int version, long long off,
                         DecodedTcp *p)
{
    if (version == 4) {
        if (n < off + 20) return UNDECODABLE;
        unsigned vihl = f[off];
        long long ihl = (vihl & 0x0F) * 4;
        if (vihl >> 4 != 4 || ihl < 20) return UNDECODABLE;
        if (f[off + 9] != 6) return NOT_TCP;
        if ((f[off + 6] & 0x3F) || f[off + 7]) return FRAGMENT;
        long long total = dec_be16(f + off + 2);
        if (total == 0) total = n - off; /* TSO on the capturing host */
        return dec_tcp(f, n, off + ihl, off + total, f + off + 12, f + off + 16, 4, p);
    }
    if (version != 6) return NOT_TCP;
    if (n < off + 40) return UNDECODABLE;
    long long ip_end = off + 40 + dec_be16(f + off + 4);
    long long t = off + 40;
    unsigned nxt = f[off + 6];
    while (nxt != 6) { /* extension headers before TCP */
        if (nxt == 44) return FRAGMENT;
        if (nxt != 0 && nxt != 43 && nxt != 60 && nxt != 51) return NOT_TCP;
        if (n < t + 2) return UNDECODABLE;
        long long hlen = f[t + 1];
        unsigned nxt_hdr = f[t];
        t += nxt == 51 ? (hlen + 2) * 4 : (hlen + 1) * 8;
        nxt = nxt_hdr;
    }
    return dec_tcp(f, n, t, ip_end, f + off + 8, f + off + 24, 16, p);
}

/* A whole frame: DECODED_TCP (p filled) or NOT_TCP, FRAGMENT, UNDECODABLE. */
static inline int decode_frame_tcp(int linktype, const uint8_t *f, long long n, DecodedTcp *p)
{
    int version;
    long long off;
    if (!dec_link(linktype, f, n, &version, &off)) return NOT_TCP;
    return dec_ip(f, n, version, off, p);
}

/* ---- record scanning: every whole record of a buffer, each frame handed to `on_frame` ---- */

typedef int (*FrameFn)(void *ctx, int linktype, const uint8_t *f, long long caplen,
                       long long frame, double ts);

typedef struct {
    long long frame; /* frames read so far (the last one's number) */
    int any; /* a record was read */
    double first_ts, last_ts;
    long truncated;
} ScanState;

/* pcap records from pos on, stopping before a record this buffer cuts or that claims more
 * than `limit` captured bytes: the new position, or -1 when on_frame failed. */
static inline long long scan_pcap_records(const uint8_t *buf, long long len, long long pos,
                                          int big, int nano, int linktype, long long limit,
                                          ScanState *st, FrameFn on_frame, void *ctx)
{
    double scale = nano ? 1e-9 : 1e-6;
    if (pos < 0) pos = 0;
    while (len - pos >= 16) {
        const uint8_t *h = buf + pos;
        uint32_t sec, frac, caplen, orig;
        if (big) {
            sec = dec_be32(h); frac = dec_be32(h + 4); caplen = dec_be32(h + 8);
            orig = dec_be32(h + 12);
        } else {
            sec = dec_le32(h); frac = dec_le32(h + 4); caplen = dec_le32(h + 8);
            orig = dec_le32(h + 12);
        }
        if ((long long)caplen > limit || len - pos - 16 < (long long)caplen)
            break;
        st->frame++;
        double ts = (double)sec + (double)frac * scale;
        if (!st->any) { st->first_ts = ts; st->any = 1; }
        st->last_ts = ts;
        if (caplen < orig) st->truncated++;
        if (on_frame(ctx, linktype, h + 16, caplen, st->frame, ts) < 0) return -1;
        pos += 16 + caplen;
    }
    return pos;
}

#define SCAN_MAX_IFACES 256

typedef struct {
    int n;
    int links[SCAN_MAX_IFACES];
    double res[SCAN_MAX_IFACES], offs[SCAN_MAX_IFACES];
    int seen_n, seen[SCAN_MAX_IFACES]; /* link types of the blocks read, first-seen order */
} Ifaces;

/* pcapng's Enhanced Packet Blocks, as pcapng_records reads them: every whole, well-formed EPB
 * from pos on, stopping at any other block or any doubt (left to the Python code). */
static inline long long scan_pcapng_blocks(const uint8_t *buf, long long len, long long pos,
                                           int big, long long max_block, Ifaces *ifs,
                                           ScanState *st, FrameFn on_frame, void *ctx)
{
    if (pos < 0) pos = 0;
    while (len - pos >= 12) {
        const uint8_t *h = buf + pos;
        uint32_t (*rd)(const uint8_t *) = big ? dec_be32 : dec_le32;
        uint32_t btype = rd(h), blen = rd(h + 4);
        if (btype != 6 || blen < 32 || blen % 4 || (long long)blen > max_block
            || len - pos < (long long)blen || rd(h + blen - 4) != blen)
            break;
        const uint8_t *body = h + 8;
        uint32_t iface = rd(body), hi = rd(body + 4), lo = rd(body + 8);
        uint32_t caplen = rd(body + 12), orig = rd(body + 16);
        if ((long long)iface >= ifs->n || 20 + (uint64_t)caplen > blen - 12)
            break;
        st->frame++;
        double ts = (double)((uint64_t)hi << 32 | lo) * ifs->res[iface] + ifs->offs[iface];
        if (!st->any) { st->first_ts = ts; st->any = 1; }
        st->last_ts = ts;
        if (caplen < orig) st->truncated++;
        int k = 0, link = ifs->links[iface];
        while (k < ifs->seen_n && ifs->seen[k] != link) k++;
        if (k == ifs->seen_n) ifs->seen[ifs->seen_n++] = link;
        if (on_frame(ctx, link, body + 20, caplen, st->frame, ts) < 0) return -1;
        pos += blen;
    }
    return pos;
}

/* ---- the scanners' Python side (for includers of Python.h) ----------------------------------- */
#ifdef Py_PYTHON_H

/* The interfaces pcapng_records described: (linktype, resolution, offset, snaplen) each; past
 * SCAN_MAX_IFACES they are left to the Python code. -1 with an exception. */
static inline int scan_ifaces(PyObject *list, Ifaces *ifs)
{
    Py_ssize_t n = PyList_GET_SIZE(list);
    ifs->n = n > SCAN_MAX_IFACES ? SCAN_MAX_IFACES : (int)n;
    ifs->seen_n = 0;
    for (int i = 0; i < ifs->n; i++) {
        PyObject *snap;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(list, i), "iddO", &ifs->links[i], &ifs->res[i],
                              &ifs->offs[i], &snap))
            return -1;
    }
    return 0;
}

/* The link types the blocks read had, as a list. */
static inline PyObject *scan_links_seen(const Ifaces *ifs)
{
    PyObject *seen = PyList_New(ifs->seen_n);
    if (seen == NULL) return NULL;
    for (int k = 0; k < ifs->seen_n; k++) {
        PyObject *v = PyLong_FromLong(ifs->seen[k]);
        if (v == NULL) {
            Py_DECREF(seen);
            return NULL;
        }
        PyList_SET_ITEM(seen, k, v);
    }
    return seen;
}

/* The first or last record's time, None when the scan read no record. */
static inline PyObject *scan_ts(const ScanState *st, double ts)
{
    if (!st->any) Py_RETURN_NONE;
    return PyFloat_FromDouble(ts);
}

#endif
#endif
