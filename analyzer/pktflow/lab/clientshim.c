/* clientshim.so: an LD_PRELOAD shim for the lab's clients (psql, pg_dump). Two jobs:
 *
 * 1. PKTFLOW_SLOW_READER=BYTES_PER_S: pace the program's reads from its TCP sockets.
 * 2. PKTFLOW_LINGER_MS=MS: hold libpq's Terminate message ('X', length 4) at least MS
 *    milliseconds before sending it, so the connection stays open, idle, after the last
 *    result. The lab samples the senders' tcp_info every 50 ms and needs a sample taken after
 *    the transfer and before the close (the server closes its socket as soon as Terminate
 *    arrives, and a closed socket's counters are gone). With PKTFLOW_LINGER_TICKS=F1:F2...
 *    (files each sampler touches after every round) it then holds until every sampler has
 *    finished two more rounds, so at least one whole round ran on the idle sockets however
 *    late a busy machine runs the samplers (at most 10 s more). Nothing else on the wire
 *    changes: the Terminate is later.
 *
 * `pktflow lab record --slow-reader BYTES_PER_S` runs the real client with
 *
 *     LD_PRELOAD=clientshim.so PKTFLOW_SLOW_READER=BYTES_PER_S
 *
 * psql collects a whole result before printing it, so slowing its output does not slow the
 * transfer; what a slow application does to TCP is read its socket late. This shim wraps
 * recv() (libpq reads with recv, see pqsecure_raw_read) and read() on TCP sockets: no call
 * returns more than a tenth of a second's worth of bytes, and each waits until the bytes
 * already returned are due at BYTES_PER_S since the first read. Meanwhile the kernel keeps
 * receiving into the socket buffer until the advertised window closes: a slow reader as the
 * wire sees it (zero windows, window updates when it reads). Other file descriptors are left
 * alone.
 *
 * Built by the lab at each run: gcc -O2 -shared -fPIC clientshim.c -o clientshim.so -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>

static ssize_t (*real_recv)(int, void *, size_t, int);
static ssize_t (*real_read)(int, void *, size_t);
static ssize_t (*real_send)(int, const void *, size_t, int);
static double linger_s;        /* seconds to hold a Terminate; 0: send it at once */
static double rate;            /* bytes per second; 0: not pacing */
static double started;         /* time of the first paced read */
static uint64_t total;         /* bytes returned by paced reads */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Resolved here and, in case a program reads before this library's constructor has run,
 * again on first use. */
static void resolve(void) {
    if (!real_recv)
        real_recv = (ssize_t (*)(int, void *, size_t, int))dlsym(RTLD_NEXT, "recv");
    if (!real_read)
        real_read = (ssize_t (*)(int, void *, size_t))dlsym(RTLD_NEXT, "read");
    if (!real_send)
        real_send = (ssize_t (*)(int, const void *, size_t, int))dlsym(RTLD_NEXT, "send");
}

__attribute__((constructor)) static void init(void) {
    resolve();
    const char *r = getenv("PKTFLOW_SLOW_READER");
    rate = r ? strtod(r, NULL) : 0.0;
    const char *l = getenv("PKTFLOW_LINGER_MS");
    linger_s = l ? strtod(l, NULL) / 1e3 : 0.0;
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static int is_tcp(int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode))
        return 0;
    int type = 0, proto = 0;
    socklen_t len = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM)
        return 0;
    len = sizeof proto;
    return getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &len) == 0 && proto == IPPROTO_TCP;
}

/* wait until the bytes returned so far are due, and cap this read at 0.1 s of bytes */
static size_t pace(size_t len) {
    double t = now();
    if (started == 0.0)
        started = t;
    double due = started + (double)total / rate;
    if (due > t)
        sleep_s(due - t);
    size_t cap = (size_t)(rate / 10.0);
    if (cap < 1)
        cap = 1;
    return len < cap ? len : cap;
}

ssize_t recv(int fd, void *buf, size_t len, int flags) {
    resolve();
    if (rate <= 0.0 || (flags & MSG_PEEK) || !is_tcp(fd))
        return real_recv(fd, buf, len, flags);
    ssize_t n = real_recv(fd, buf, pace(len), flags);
    if (n > 0)
        total += (uint64_t)n;
    return n;
}

ssize_t read(int fd, void *buf, size_t len) {
    resolve();
    if (rate <= 0.0 || !is_tcp(fd))
        return real_read(fd, buf, len);
    ssize_t n = real_read(fd, buf, pace(len));
    if (n > 0)
        total += (uint64_t)n;
    return n;
}

static double mtime(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0)
        return 0.0;
    return (double)st.st_mtim.tv_sec + (double)st.st_mtim.tv_nsec / 1e9;
}

/* Wait until each tick file changed twice after now (or 10 s passed). */
static void wait_ticks(const char *list) {
    char paths[16][512];
    double last[16];
    int changes[16], n = 0;
    const char *p = list;
    while (*p && n < 16) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > 0 && len < sizeof paths[0]) {
            memcpy(paths[n], p, len);
            paths[n][len] = 0;
            last[n] = mtime(paths[n]);
            changes[n] = 0;
            n++;
        }
        if (!end)
            break;
        p = end + 1;
    }
    double give_up = now() + 10.0;
    for (;;) {
        int done = 1;
        for (int i = 0; i < n; i++) {
            double m = mtime(paths[i]);
            if (m != last[i]) {
                last[i] = m;
                changes[i]++;
            }
            if (changes[i] < 2)
                done = 0;
        }
        if (done || now() > give_up)
            return;
        sleep_s(0.005);
    }
}

/* libpq's Terminate: 'X' and a length of 4, alone in one send() (pqsecure_raw_write) */
ssize_t send(int fd, const void *buf, size_t len, int flags) {
    resolve();
    const unsigned char *b = buf;
    if (linger_s > 0.0 && len == 5 && b[0] == 'X' && b[1] == 0 && b[2] == 0 && b[3] == 0 &&
        b[4] == 4 && is_tcp(fd)) {
        /* first the last ACKs reach the senders (delayed ACKs, a delay line), then the
         * samplers run whole rounds over the idle sockets */
        sleep_s(linger_s);
        const char *ticks = getenv("PKTFLOW_LINGER_TICKS");
        if (ticks)
            wait_ticks(ticks);
    }
    return real_send(fd, buf, len, flags);
}
