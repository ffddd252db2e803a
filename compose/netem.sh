#!/bin/sh
# The native lab's network conditions (pktflow lab record --delay, --delay-back, --loss,
# --rate), applied in one container's network namespace before its program starts. Each
# service of compose.yaml runs it as root with NET_ADMIN:
#
#   netem.sh client|pooler|server
#
# Environment, named as the native flags: DELAY and DELAY_BACK (milliseconds), LOSS (percent),
# RATE (a tc rate such as 20mbit); the client also needs VIA (the service it talks to) and
# PORT. DRY_RUN=1 prints the commands instead of running them (ROUTES and PEER then stand in
# for the routes and VIA's address); tests/test_lab_compose.py compares them with the native
# lab's.
#
# Where Docker's kernel has netem, the delay is netem on the client's egress: it holds the
# client's ACKs and requests, as the native lab's delay line does (the sender's own data is
# not held, so TCP small queues do not cap it). --delay-back is netem on the pooler's egress to
# PostgreSQL's port only. Loss is not netem: netem drops at the sender's egress, before
# tcpdump (in the sender's namespace) sees the segment, so the capture would show
# retransmissions without their originals. It is iptables statistic in the client's INPUT,
# after the capture point, exactly as natively. Congestion control is pinned to cubic on every
# route, as natively (a namespace cannot change its default by sysctl). Receive buffers are
# compose's `sysctls`, the slow reader the client's LD_PRELOAD (compose.yaml).
set -eu
role=$1
dev=eth0

run() {
    echo "$*"
    [ "${DRY_RUN:-0}" = 1 ] || "$@"
}

routes=${ROUTES:-$(ip route show)}
echo "$routes" | while read -r route; do
    [ -n "$route" ] && run ip route change $route congctl cubic
done

# a rate limit is the root qdisc, whatever else there is hangs below it
parent=root
if [ -n "${RATE:-}" ]; then
    run tc qdisc add dev $dev root handle 1: tbf rate "$RATE" burst 64kb latency 100ms
    parent="parent 1:1"
fi

case "$role" in
client)
    if [ -n "${DELAY:-}" ]; then
        run tc qdisc add dev $dev $parent handle 10: netem delay "${DELAY}ms" limit 100000
    fi
    if [ -n "${LOSS:-}" ]; then
        peer=${PEER:-$(getent hosts "$VIA" | awk '{print $1; exit}')}
        p=$(awk -v pct="$LOSS" 'BEGIN { printf "%.6f", pct / 100 }')
        run iptables -A INPUT -p tcp -s "$peer" --sport "$PORT" -m statistic --mode random \
            --probability "$p" -j DROP
        run iptables -A INPUT -p tcp -s "$peer" --sport "$PORT"
    fi
    ;;
pooler)
    if [ -n "${DELAY_BACK:-}" ]; then
        # only what goes to PostgreSQL waits: band 3 of a prio qdisc, chosen by port
        run tc qdisc add dev $dev $parent handle 10: prio
        run tc qdisc add dev $dev parent 10:3 handle 30: netem delay "${DELAY_BACK}ms" limit 100000
        run tc filter add dev $dev parent 10: protocol ip prio 1 u32 match ip dport 5432 0xffff \
            flowid 10:3
    fi
    ;;
server) ;;
*)
    echo "netem.sh: role must be client, pooler or server, not '$role'" >&2
    exit 2
    ;;
esac
