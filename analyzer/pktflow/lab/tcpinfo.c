/* tcpinfo: the kernel's own account of the lab's sending sockets, sampled every few ms.
 *
 *     tcpinfo INTERVAL_US PARENT_PID TICK_FILE PORT...
 *
 * Each round asks the kernel (NETLINK_SOCK_DIAG, the interface ss uses, without a process per
 * round) for every IPv4 TCP socket whose local port is one of PORT, established or closed by
 * the peer only, and prints one line per socket, then "@@ <CLOCK_MONOTONIC ns>". It touches
 * TICK_FILE after each round (the client's shim waits for two rounds before it closes, so the
 * last round sees each socket's final counters), and stops when PARENT_PID is gone.
 *
 * A socket's line is "state local peer" and then key:value numbers straight from struct
 * tcp_info (<linux/tcp.h>): the sender chronographs in microseconds (busy_us, rwnd_us,
 * sndbuf_us: tcp_chrono), the congestion state (ca_state: 0 open, 1 disorder, 2 CWR,
 * 3 recovery, 4 loss), bytes sent, retransmitted and acknowledged, D-SACKed duplicates
 * (dsack_dups: retransmissions the receiver already had), bytes written but not yet sent
 * (notsent), segments in flight (unacked), cwnd, ssthresh, srtt and min_rtt (us), the
 * delivery rate (bytes/s) and whether it was application-limited, the peer's window, and the
 * send buffer's size and what it holds (sndbuf, wmem_queued: INET_DIAG_SKMEMINFO).
 *
 * Rounds run on a fixed cadence. At a few ms the ss(8) loop the lab ran before could not keep up: forking ss costs about 10 ms.
 * Built by the lab at each run (gcc -O2 tcpinfo.c).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <sched.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_PORTS 8
#define TCPF_ESTABLISHED (1 << 1)
#define TCPF_CLOSE_WAIT (1 << 8)

static int ports[MAX_PORTS];
static int nports;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int wanted(int port) {
    for (int i = 0; i < nports; i++)
        if (ports[i] == port)
            return 1;
    return 0;
}

static void print_socket(const struct inet_diag_msg *m, const struct tcp_info *t,
                         const char *cc, const __u32 *mem) {
    char lo[INET_ADDRSTRLEN], pe[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, m->id.idiag_src, lo, sizeof lo);
    inet_ntop(AF_INET, m->id.idiag_dst, pe, sizeof pe);
    printf("%s %s:%u %s:%u cc:%s busy_us:%llu rwnd_us:%llu sndbuf_us:%llu ca_state:%u "
           "bytes_sent:%llu bytes_retrans:%llu bytes_acked:%llu dsack_dups:%u "
           "retrans:%u total_retrans:%u lost:%u sacked:%u notsent:%u unacked:%u cwnd:%u "
           "ssthresh:%u srtt_us:%u rttvar_us:%u minrtt_us:%u delivery_rate:%llu "
           "app_limited:%u snd_wnd:%u mss:%u reord_seen:%u bytes_received:%llu "
           "sndbuf:%u wmem_queued:%u\n",
           m->idiag_state == 1 ? "ESTAB" : "CLOSE-WAIT", lo, ntohs(m->id.idiag_sport), pe,
           ntohs(m->id.idiag_dport), cc, (unsigned long long)t->tcpi_busy_time,
           (unsigned long long)t->tcpi_rwnd_limited,
           (unsigned long long)t->tcpi_sndbuf_limited, t->tcpi_ca_state,
           (unsigned long long)t->tcpi_bytes_sent, (unsigned long long)t->tcpi_bytes_retrans,
           (unsigned long long)t->tcpi_bytes_acked, t->tcpi_dsack_dups, t->tcpi_retrans,
           t->tcpi_total_retrans, t->tcpi_lost, t->tcpi_sacked, t->tcpi_notsent_bytes,
           t->tcpi_unacked, t->tcpi_snd_cwnd, t->tcpi_snd_ssthresh, t->tcpi_rtt,
           t->tcpi_rttvar, t->tcpi_min_rtt, (unsigned long long)t->tcpi_delivery_rate,
           t->tcpi_delivery_rate_app_limited, t->tcpi_snd_wnd, t->tcpi_snd_mss,
           t->tcpi_reord_seen, (unsigned long long)t->tcpi_bytes_received,
           mem[SK_MEMINFO_SNDBUF], mem[SK_MEMINFO_WMEM_QUEUED]);
}

/* One dump of the kernel's TCP sockets; 0, or -1 when the netlink socket failed. */
static int round_once(int fd) {
    struct {
        struct nlmsghdr nlh;
        struct inet_diag_req_v2 req;
    } q;
    memset(&q, 0, sizeof q);
    q.nlh.nlmsg_len = sizeof q;
    q.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    q.nlh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    q.req.sdiag_family = AF_INET;
    q.req.sdiag_protocol = IPPROTO_TCP;
    q.req.idiag_states = TCPF_ESTABLISHED | TCPF_CLOSE_WAIT;
    q.req.idiag_ext = (1 << (INET_DIAG_INFO - 1)) | (1 << (INET_DIAG_CONG - 1)) |
                      (1 << (INET_DIAG_SKMEMINFO - 1));
    if (send(fd, &q, sizeof q, 0) < 0)
        return -1;
    static char buf[1 << 16];
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n);
             h = NLMSG_NEXT(h, n)) {
            if (h->nlmsg_type == NLMSG_DONE)
                return 0;
            if (h->nlmsg_type == NLMSG_ERROR)
                return -1;
            struct inet_diag_msg *m = NLMSG_DATA(h);
            if (!wanted(ntohs(m->id.idiag_sport)))
                continue;
            int len = (int)(h->nlmsg_len - NLMSG_LENGTH(sizeof *m));
            /* an older kernel's shorter struct: the missing tail reads as zero */
            struct tcp_info t;
            memset(&t, 0, sizeof t);
            char cc[16] = "unknown";
            __u32 mem[SK_MEMINFO_VARS] = {0};
            int have = 0;
            for (struct rtattr *a = (struct rtattr *)(m + 1); RTA_OK(a, len);
                 a = RTA_NEXT(a, len)) {
                size_t got = RTA_PAYLOAD(a);
                if (a->rta_type == INET_DIAG_INFO) {
                    memcpy(&t, RTA_DATA(a), got < sizeof t ? got : sizeof t);
                    have = 1;
                } else if (a->rta_type == INET_DIAG_SKMEMINFO) {
                    memcpy(mem, RTA_DATA(a), got < sizeof mem ? got : sizeof mem);
                } else if (a->rta_type == INET_DIAG_CONG && got > 0) {
                    size_t n = got < sizeof cc - 1 ? got : sizeof cc - 1;
                    memcpy(cc, RTA_DATA(a), n);
                    cc[n] = 0;
                }
            }
            if (have)
                print_socket(m, &t, cc, mem);
        }
    }
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: tcpinfo INTERVAL_US PARENT_PID TICK_FILE PORT...\n");
        return 2;
    }
    long interval_us = strtol(argv[1], NULL, 10);
    pid_t parent = (pid_t)strtol(argv[2], NULL, 10);
    const char *tick = argv[3];
    for (int i = 4; i < argc && nports < MAX_PORTS; i++)
        ports[nports++] = (int)strtol(argv[i], NULL, 10);
    int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (fd < 0) {
        perror("tcpinfo: netlink socket");
        return 1;
    }
    /* rounds on a fixed cadence (absolute times), whatever a round costs; wake on time, not
     * up to the default 50 us of timer slack later; and ahead of busy programs where
     * real-time priority is allowed (a round takes tens of microseconds; a container may
     * refuse, and then rounds slip under load, which the samples' own times show) */
    prctl(PR_SET_TIMERSLACK, 1UL);
    struct sched_param rt = {.sched_priority = 10};
    sched_setscheduler(0, SCHED_FIFO, &rt);
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    while (kill(parent, 0) == 0) {
        if (round_once(fd) < 0) {
            perror("tcpinfo: sock_diag dump");
            return 1;
        }
        printf("@@ %llu\n", (unsigned long long)now_ns());
        fflush(stdout);
        int t = open(tick, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (t >= 0)
            close(t);
        next.tv_nsec += interval_us * 1000;
        while (next.tv_nsec >= 1000000000) {
            next.tv_nsec -= 1000000000;
            next.tv_sec++;
        }
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > next.tv_sec || (now.tv_sec == next.tv_sec && now.tv_nsec > next.tv_nsec))
            next = now; /* a round overran: start again from now rather than burst */
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
    }
    return 0;
}
