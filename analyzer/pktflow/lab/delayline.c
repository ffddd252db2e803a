/* delayline: hold every packet of one NFQUEUE for a fixed time, then accept it, in order.
 *
 * The lab's network delay on a kernel without netem (network.py starts it inside a namespace
 * and points `iptables -j NFQUEUE --queue-num N --queue-bypass` at it):
 *
 *     delayline QUEUE_NUM DELAY_US
 *
 * It prints "ready" once the queue is bound, then holds each packet DELAY_US from the moment it
 * reads it and accepts it. The delay is the same for every packet, so releasing in arrival
 * order releases in due order: a FIFO of packet ids, and one batch verdict (accept every id up
 * to this one) for each run of packets that fell due together. Packets are queued as metadata
 * only (NFQNL_COPY_META): the payload never crosses into user space.
 *
 * On SIGTERM or SIGINT it accepts whatever it still holds, and prints one JSON line: packets
 * held, how late each release was against its due time (median, 99th percentile, max, in
 * microseconds), the most packets held at once, and receive errors (ENOBUFS: the kernel could
 * not hand a packet over; that packet then waits for a verdict that never comes, so any
 * nonzero count means the run is suspect).
 *
 * Built by the lab at each run (gcc -O2 delayline.c -lnetfilter_queue; Debian:
 * libnetfilter-queue-dev).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <linux/netfilter.h>  /* NF_ACCEPT */
#include <libnetfilter_queue/libnetfilter_queue.h>

#define RING (1u << 20)        /* packets held at once; 10 ms at 10^7 packets/s */
#define LATE_BUCKETS 100000    /* lateness histogram, 1 us buckets up to 100 ms */

static uint32_t ids[RING];
static uint64_t due[RING];
static uint64_t head, tail;    /* ring indices: tail - head packets held */
static uint64_t held_max, packets, enobufs;
static uint64_t late_hist[LATE_BUCKETS + 1];
static uint64_t late_max;
static volatile sig_atomic_t stop;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t delay_ns;

static int on_packet(struct nfq_q_handle *qh, struct nfgenmsg *msg, struct nfq_data *nfa,
                     void *data) {
    (void)msg; (void)data;
    struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
    if (!ph)
        return 0;
    uint32_t id = ntohl(ph->packet_id);
    if (tail - head >= RING) {  /* cannot hold more: let it through now rather than lose it */
        nfq_set_verdict(qh, id, NF_ACCEPT, 0, NULL);
        return 0;
    }
    ids[tail % RING] = id;
    due[tail % RING] = now_ns() + delay_ns;
    tail++;
    packets++;
    if (tail - head > held_max)
        held_max = tail - head;
    return 0;
}

/* accept every held packet due by `now`: one batch verdict covers the run */
static void release(struct nfq_q_handle *qh, uint64_t now, int all) {
    uint64_t last = head;
    while (head < tail && (all || due[head % RING] <= now)) {
        uint64_t late = now > due[head % RING] ? (now - due[head % RING]) / 1000 : 0;
        late_hist[late < LATE_BUCKETS ? late : LATE_BUCKETS]++;
        if (late > late_max)
            late_max = late;
        head++;
    }
    if (head != last)
        nfq_set_verdict_batch(qh, ids[(head - 1) % RING], NF_ACCEPT);
}

static uint64_t percentile(double p) {
    uint64_t n = 0, want = (uint64_t)(p * (double)packets);
    for (uint64_t i = 0; i <= LATE_BUCKETS; i++) {
        n += late_hist[i];
        if (n > want)
            return i;
    }
    return late_max;
}

static void on_signal(int sig) { (void)sig; stop = 1; }

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: delayline QUEUE_NUM DELAY_US\n");
        return 2;
    }
    uint16_t qnum = (uint16_t)atoi(argv[1]);
    delay_ns = (uint64_t)strtoull(argv[2], NULL, 10) * 1000u;

    /* a wire is never descheduled: run ahead of everything else on a busy machine (the
     * lab's other processes, a compiler beside it), and sleep to the microsecond */
    struct sched_param sp = {.sched_priority = 10};
    int realtime = sched_setscheduler(0, SCHED_FIFO, &sp) == 0;
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);

    struct nfq_handle *h = nfq_open();
    if (!h) { perror("nfq_open"); return 1; }
    struct nfq_q_handle *qh = nfq_create_queue(h, qnum, on_packet, NULL);
    if (!qh) { perror("nfq_create_queue"); return 1; }
    if (nfq_set_mode(qh, NFQNL_COPY_META, 0) < 0) { perror("nfq_set_mode"); return 1; }
    nfq_set_queue_maxlen(qh, RING);
    int fd = nfq_fd(h);
    int rcvbuf = 64 << 20;  /* a burst of queued packets must never overflow the socket */
    setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);

    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGHUP);
    sigprocmask(SIG_BLOCK, &block, NULL);  /* delivered only inside ppoll: no lost wake-up */

    printf("ready\n");
    fflush(stdout);

    static char buf[1 << 16];
    while (!stop) {
        struct timespec ts, *timeout = NULL;
        if (head < tail) {
            uint64_t now = now_ns(), d = due[head % RING];
            uint64_t wait = d > now ? d - now : 0;
            ts.tv_sec = (time_t)(wait / 1000000000u);
            ts.tv_nsec = (long)(wait % 1000000000u);
            timeout = &ts;
        }
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = ppoll(&pfd, 1, timeout, &none);
        if (r < 0 && errno != EINTR) { perror("ppoll"); break; }
        if (r > 0) {
            for (;;) {
                ssize_t n = recv(fd, buf, sizeof buf, 0);
                if (n < 0) {
                    if (errno == ENOBUFS) { enobufs++; continue; }
                    break;  /* EAGAIN: drained */
                }
                nfq_handle_packet(h, buf, (int)n);
            }
        }
        release(qh, now_ns(), 0);
    }
    release(qh, now_ns(), 1);
    printf("{\"packets\": %llu, \"late_us_median\": %llu, \"late_us_p99\": %llu, "
           "\"late_us_max\": %llu, \"held_max\": %llu, \"enobufs\": %llu, "
           "\"realtime\": %s}\n",
           (unsigned long long)packets, (unsigned long long)percentile(0.5),
           (unsigned long long)percentile(0.99), (unsigned long long)late_max,
           (unsigned long long)held_max, (unsigned long long)enobufs,
           realtime ? "true" : "false");
    fflush(stdout);
    nfq_destroy_queue(qh);
    nfq_close(h);
    return 0;
}
