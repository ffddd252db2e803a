"""`pktflow lab record`: record a scenario with real PostgreSQL, PgBouncer and tcpdump."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    from pktflow.lab.conditions import Conditions

from pktflow.lab.scenarios import PGBOUNCER_DEFAULTS, SCENARIOS


def _path(arg: str) -> Path:
    """argparse type: pathlib loads only when a command takes a path (not for analyze)."""
    from pathlib import Path

    return Path(arg)


def add_subparser(sub: Any) -> None:
    lab = sub.add_parser("lab", help="record reference captures (root)")
    labsub = lab.add_subparsers(dest="lab_command", required=True)
    rec = labsub.add_parser("record", help="run one scenario and capture it")
    rec.add_argument("--scenario", required=True, choices=sorted(SCENARIOS))
    rec.add_argument("--via", default="direct", choices=("direct", "pgbouncer", "pgpool"))
    rec.add_argument("--network", default="loopback", choices=("loopback", "bridge"),
                     help="loopback: all on 127.0.0.1 (MTU 65,536); bridge: client, pooler and "
                          "server in network namespaces of their own on a Linux bridge "
                          "(MTU 1500)")
    rec.add_argument("--offloads", choices=("on", "off"),
                     help="bridge only: TSO/GSO/GRO on every interface (default off)")
    rec.add_argument("--rate", help="bridge only: tc tbf rate on each namespace's eth0, "
                                    "e.g. 20mbit (default: unshaped)")
    rec.add_argument("--rate-at", choices=("client", "pooler", "server"),
                     help="shape only this role's egress with --rate (e.g. server: a "
                          "throttled server path behind a pooler)")
    cond = rec.add_argument_group(
        "network conditions", "all but --slow-reader need --network bridge; congestion "
        "control there is cubic, pinned per route")
    cond.add_argument("--delay", type=float, metavar="MS",
                      help="added round trip on the client's link (a delay line holding the "
                           "client's packets)")
    cond.add_argument("--delay-back", type=float, metavar="MS",
                      help="added round trip on the pooler's link to the server")
    cond.add_argument("--loss", type=float, metavar="PCT",
                      help="random loss of the segments the client receives, after the "
                           "capture point")
    cond.add_argument("--loss-back", type=float, metavar="PCT",
                      help="random loss of the segments the pooler receives from the server, "
                           "after the capture point")
    cond.add_argument("--client-rcvbuf", type=int, metavar="BYTES",
                      help="the client's TCP receive buffer (net.ipv4.tcp_rmem max)")
    cond.add_argument("--pooler-rcvbuf", type=int, metavar="BYTES",
                      help="the pooler's TCP receive buffer (net.ipv4.tcp_rmem max)")
    cond.add_argument("--slow-reader", type=int, metavar="BYTES_PER_S",
                      help="the client reads its socket at this rate")
    rec.add_argument("--rows", type=int, help="table size (default: the scenario's)")
    rec.add_argument("--pool-mode", default=PGBOUNCER_DEFAULTS["pool_mode"],
                     choices=("session", "transaction", "statement"))
    rec.add_argument("--pkt-buf", type=int, default=PGBOUNCER_DEFAULTS["pkt_buf"])
    rec.add_argument("--sbuf-loopcnt", type=int, default=PGBOUNCER_DEFAULTS["sbuf_loopcnt"])
    rec.add_argument("--pool-size", type=int,
                     help="PgBouncer's default_pool_size: server connections per database/user "
                          "(fewer than clients makes transaction pooling multiplex)")
    rec.add_argument("--cold-pool", action="store_true",
                     help="do not open the pooled server connection before capturing")
    rec.add_argument("-o", "--output", required=True, type=_path)


def conditions_from(args: argparse.Namespace) -> Conditions:
    """The network conditions the flags ask for (compose's variables map onto the same)."""
    from pktflow.lab.conditions import Conditions

    return Conditions(delay_ms=args.delay, delay_back_ms=args.delay_back, loss_pct=args.loss,
                      loss_back_pct=args.loss_back, client_rcvbuf=args.client_rcvbuf,
                      pooler_rcvbuf=args.pooler_rcvbuf, slow_reader=args.slow_reader)


def run(args: argparse.Namespace) -> int:
    from pktflow.lab.record import Recording, metadata_path, record

    rec = Recording(scenario=args.scenario, via=args.via, network=args.network, rows=args.rows,
                    pgbouncer={"pool_mode": args.pool_mode, "pkt_buf": args.pkt_buf,
                               "sbuf_loopcnt": args.sbuf_loopcnt} | (
                        {"default_pool_size": args.pool_size} if args.pool_size else {}),
                    warm_pool=not args.cold_pool,
                    offloads=None if args.offloads is None else args.offloads == "on",
                    rate=args.rate, rate_at=args.rate_at, conditions=conditions_from(args))
    meta = record(rec, args.output)
    print("\n".join(summary(meta, str(args.output), str(metadata_path(args.output)))))
    return 0


def summary(meta: dict[str, Any], capture: str, metadata: str) -> list[str]:
    """What a recording did in a few lines, however many connections it made (a storm makes
    20,000): the handshakes' round trips, the loss achieved, and per direction the kernel's
    account of the sending sockets. Each handshake and socket is in the metadata file."""
    from collections import Counter
    from statistics import median

    lines = [f"recorded {capture} ({meta['client_seconds']} s client time, tcpdump dropped "
             f"{meta['tcpdump_dropped']}); metadata in {metadata}"]
    shakes = meta["handshakes"]
    if len(shakes) == 1:
        h = shakes[0]
        lines.append(f"  handshake {h['client']} -> {h['server']}: round trip "
                     f"{h['rtt_ms']:.3f} ms")
    elif shakes:
        rtts = [h["rtt_ms"] for h in shakes]
        lines.append(f"  {len(shakes):,} handshakes: round trip min {min(rtts):.3f} ms, median "
                     f"{median(rtts):.3f} ms, max {max(rtts):.3f} ms")
    for key, where in (("loss", "loss"), ("loss_back", "loss, server to pooler")):
        loss = meta["conditions"].get(key)
        if loss:
            lines.append(f"  {where}: {loss['dropped']} of {loss['dropped'] + loss['passed']} "
                         f"segments dropped ({loss['achieved_pct']}%)")
    kern = meta["kernel"]
    by_direction: dict[str, list[dict[str, Any]]] = {}
    for s in kern["sockets"]:
        by_direction.setdefault(s["direction"], []).append(s)
    for direction, socks in by_direction.items():
        if len(socks) == 1:
            s = socks[0]
            lines.append(f"  {direction:15} busy {s['busy_ms']} ms, rwnd_limited "
                         f"{s['rwnd_limited_ms']} ms, sndbuf_limited {s['sndbuf_limited_ms']} "
                         f"ms, retrans {s['retrans']}, {s['congestion_control']}: "
                         f"{s['dominant_limit']} ({s['dominant_rule']})")
            continue
        limits = Counter(s["dominant_limit"] for s in socks)

        def total(key: str) -> str:
            return f"{sum(s[key] or 0 for s in socks):,.0f}"
        lines.append(f"  {direction:15} {len(socks)} sockets: busy {total('busy_ms')} ms, "
                     f"rwnd_limited {total('rwnd_limited_ms')} ms, sndbuf_limited "
                     f"{total('sndbuf_limited_ms')} ms, retrans {total('retrans')} in all; "
                     + ", ".join(f"{k} {n}" for k, n in limits.most_common()))
    seen = kern.get("sockets_seen", len(kern["sockets"]))
    if seen > len(kern["sockets"]):
        lines.append(f"  ({seen:,} sending sockets; the metadata describes the "
                     f"{len(kern['sockets'])} that sent most)")
    return lines
