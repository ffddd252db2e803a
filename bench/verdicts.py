#!/usr/bin/env python3
"""Check pktflow's verdicts against the kernel on fresh lab recordings, socket by socket.

    python3 bench/verdicts.py --record DIR [--only SUBSTRING ...] [--repeat N]
    python3 bench/verdicts.py DIR [DIR ...] [--markdown FILE]

--record runs the lab (root) over the conditions matrix below, into DIR (skipping captures
already there, so a run stopped part-way resumes; a recording that fails is tried once more,
then left out): each capture with its
metadata, which holds the kernel's own account of every sending socket (pktflow.lab.kernel:
tcp_info sampled every 2 ms, each sample classed by the sender's state). Without it, every
capture in the DIRs is analysed and each sending socket's verdict is set against the kernel's
class of most samples and against what the recording imposed where (`construction`), and the
agreement is printed per condition and leg.

The recordings stay outside the repository: a rule is checked on runs it was not tuned on.
The tests read the corpus in captures/conditions/ (tests/test_limits_corpus.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "analyzer"))

ABBREV = {"send_buffer": "sndbuf"}
# name -> (lab record flags as a Recording's fields)
SELECT_BIG = 170_000  # rows: a 19 MB result
MATRIX: dict[str, dict[str, Any]] = {}


def _add(name: str, **kw: Any) -> None:
    MATRIX[name] = kw


for via in ("direct", "pgbouncer"):
    for scen, rows in (("seqscan-10k", None), ("seqscan-10k", SELECT_BIG), ("pgdump", 100_000)):
        stem = f"{'select19mb' if rows == SELECT_BIG else scen}-{via}"
        base = {"scenario": scen, "via": via, "rows": rows}
        _add(f"{stem}-unshaped", **base)
        _add(f"{stem}-server20mbit", **base, rate="20mbit", rate_at="server")
        _add(f"{stem}-rtt2ms", **base, delay_ms=2.0)
        _add(f"{stem}-rtt10ms", **base, delay_ms=10.0)
        _add(f"{stem}-loss2pct", **base, loss_pct=2.0)
        _add(f"{stem}-rcvbuf16384", **base, client_rcvbuf=16384)
        _add(f"{stem}-slowreader", **base, slow_reader=2_000_000 if rows else 200_000)
        if via == "pgbouncer":
            _add(f"{stem}-poolerrcvbuf16384", **base, pooler_rcvbuf=16384)
            _add(f"{stem}-pktbuf65536-rtt10ms", **base, delay_ms=10.0, pkt_buf=65536)
            # the back leg's conditions: the server's path to the pooler
            _add(f"{stem}-backrtt10ms", **base, delay_back_ms=10.0)
            _add(f"{stem}-backloss2pct", **base, loss_back_pct=2.0)
            _add(f"{stem}-backrtt10ms-backloss2pct", **base, delay_back_ms=10.0,
                 loss_back_pct=2.0)


def record(out: Path, only: list[str], repeat: int) -> None:
    from pktflow.errors import LabError
    from pktflow.lab.conditions import Conditions
    from pktflow.lab.record import Recording, metadata_path
    from pktflow.lab.record import record as run
    from pktflow.lab.scenarios import PGBOUNCER_DEFAULTS

    out.mkdir(parents=True, exist_ok=True)
    for name, kw in MATRIX.items():
        if only and not any(o in name for o in only):
            continue
        for i in range(repeat):
            cond = Conditions(**{k: kw[k] for k in ("delay_ms", "delay_back_ms", "loss_pct",
                                                   "loss_back_pct", "client_rcvbuf",
                                                   "pooler_rcvbuf", "slow_reader") if k in kw})
            pgb = dict(PGBOUNCER_DEFAULTS) | ({"pkt_buf": kw["pkt_buf"]} if "pkt_buf" in kw
                                             else {})
            rec = Recording(scenario=kw["scenario"], via=kw["via"], network="bridge",
                            rows=kw.get("rows"), pgbouncer=pgb, offloads=False,
                            rate=kw.get("rate"), rate_at=kw.get("rate_at"), conditions=cond)
            path = out / f"{name}{'' if repeat == 1 else f'-{i + 1}'}.pcap.gz"
            if metadata_path(path).exists():
                continue  # recorded by an earlier run of the matrix: it resumes
            for attempt in (1, 2):
                print(f"recording {path.name}", file=sys.stderr, flush=True)
                try:
                    run(rec, path)
                    break
                except LabError as exc:  # e.g. a server slow to start on a busy machine
                    print(f"  failed ({attempt} of 2): {exc.one_line()}", file=sys.stderr,
                          flush=True)


def construction(meta: dict[str, Any], direction: str) -> set[str] | None:
    """The limits what the recording imposed allows for a sending socket, where it says:
    None where the construction alone does not decide (the kernel does)."""
    cond = meta["conditions"]
    rec = meta["recording"]
    front = direction in ("server->client", "pooler->client")
    if cond.get("slow_reader") or (cond.get("client_rcvbuf") and front):
        return {"receiver_window"} if front else None
    if cond.get("pooler_rcvbuf") and direction == "server->pooler":
        return {"receiver_window"}
    if rec.get("rate") and rec.get("rate_at") == "server":
        return {"network"} if direction.startswith("server->") else {"sender"}
    if cond.get("loss_pct") and front:
        return {"loss", "network", "latency"}
    if cond.get("loss_back_pct") and cond.get("delay_back_ms"):
        # the server's segments lost on their way to the pooler over a path of some delay:
        # its leg recovers and waits round trips, and the pooler, forwarding at once, has
        # nothing more to send. (On a path of microseconds a recovery costs as much, and the
        # server producing its rows may well be what its leg waits on: the kernel's samples
        # said sender 95% at 2% loss.)
        return {"loss", "network", "latency"} if direction == "server->pooler" else {"sender"}
    return None


def receiver_built(meta: dict[str, Any], direction: str) -> str | None:
    """The receiver's sub-class what the recording imposed makes, where it says: a reader
    paced slow stops reading (`application`), a buffer made small fills (`buffer`), and a
    pooler behind either waits on its client (`application`)."""
    cond = meta["conditions"]
    front = direction in ("server->client", "pooler->client")
    if cond.get("slow_reader"):
        return "application" if front or direction == "server->pooler" else None
    if cond.get("pooler_rcvbuf") and direction == "server->pooler":
        return "buffer"
    if cond.get("client_rcvbuf"):
        return "buffer" if front else "application" if direction == "server->pooler" else None
    return None


def verdicts(path: Path) -> list[dict[str, Any]]:
    from pktflow.lab.kernel import direction_of
    from pktflow.lab.record import kernel_sockets, metadata_path
    from pktflow.pipeline import analyze

    meta = json.loads(metadata_path(path).read_text())
    # read with what the recording built (pktflow.lab.record.kernel_sockets)
    meta["kernel"]["sockets"] = kernel_sockets(path)
    rep = analyze(str(path))
    rows = []
    for sock in meta["kernel"]["sockets"]:
        d = direction_of(rep, sock)
        v = d["verdict"] if d else {"limit": "none", "shares": None}
        rows.append({"capture": path.name.removesuffix(".pcap.gz").removesuffix(".pcap"),
                     "direction": sock["direction"], "kernel": sock["dominant_limit"],
                     "basis": sock["dominant_basis"], "kernel_shares": sock.get("sample_shares"),
                     "ours": v["limit"], "mixed_with": v.get("mixed_with"),
                     "receiver": v.get("receiver"),
                     "receiver_built": receiver_built(meta, sock["direction"]),
                     "shares": v.get("shares"),
                     "sock": sock,
                     "construction": construction(meta, sock["direction"])})
    return rows


def agrees(row: dict[str, Any]) -> bool:
    from pktflow.lab.kernel import verdict_agrees

    return verdict_agrees(row["ours"], row.get("mixed_with"), row["sock"])


def condition(capture: str) -> str:
    """The capture's name less its repeat number."""
    head, _, tail = capture.rpartition("-")
    return head if tail.isdigit() else capture


def report(dirs: list[Path], markdown: Path | None) -> int:
    from pktflow.lab.record import metadata_path

    rows = [r for d in dirs for p in sorted(d.glob("*.pcap*"))
            if p.name.endswith((".pcap", ".pcap.gz")) and metadata_path(p).exists()
            for r in verdicts(p)]
    lines = ["| capture | socket | kernel (basis) | kernel shares | pktflow | pktflow shares "
             "| construction | agree |", "|---|---|---|---|---|---|---|---|"]

    def fmt(sh: dict[str, float] | None) -> str:
        return " ".join(f"{ABBREV.get(k, k[:3])} {v:.2f}" for k, v in sh.items() if v >= 0.01) if sh else ""

    tally: dict[tuple[str, str], list[bool]] = defaultdict(list)
    firm_ok = firm = weak = cons_bad = sub = sub_ok = 0
    for r in rows:
        ok = agrees(r)
        is_weak = r["basis"].startswith("weak")
        cons = r["construction"]
        cons_ok = cons is None or r["ours"] in cons
        if is_weak:
            weak += 1
        else:
            firm += 1
            firm_ok += ok
            tally[(condition(r["capture"]), r["direction"])].append(ok)
        cons_bad += not cons_ok
        # the receiver's sub-class, where pktflow names the window and the recording says whose
        built = r["receiver_built"] if r["ours"] == "receiver_window" else None
        if built is not None:
            sub += 1
            sub_ok += r["receiver"] == built
        shown = f" ({r['receiver']}{'' if built in (None, r['receiver']) else ' ✗ ' + built})" \
            if r["ours"] == "receiver_window" else ""
        lines.append(f"| {r['capture']} | {r['direction']} | {r['kernel']} ({r['basis']}) | "
                     f"{fmt(r['kernel_shares'])} | {r['ours']}"
                     f"{'+' + r['mixed_with'] if r.get('mixed_with') else ''}{shown} | "
                     f"{fmt(r['shares'])} | "
                     f"{'/'.join(sorted(cons)) if cons else ''}{'' if cons_ok else ' ✗'} | "
                     f"{'yes' if ok else 'NO'}{' (weak)' if is_weak else ''} |")
    summary = (f"{firm_ok} of {firm} sending sockets agree with the kernel "
               f"({firm_ok / firm:.0%})" if firm else "no firm kernel calls")
    summary += f"; {weak} weak calls left out; {cons_bad} against the construction"
    summary += f"; {sub_ok} of {sub} receiver sub-classes as the recording built them"
    # per condition (the capture's name less its repeat number) and leg, over the DIRs given
    per = ["| condition | socket | agree |", "|---|---|---|"] + [
        f"| {cond} | {direction} | {sum(oks)} of {len(oks)} |"
        for (cond, direction), oks in sorted(tally.items())]
    text = "\n".join(lines + [""] + per + ["", summary])
    print(text)
    if markdown:
        markdown.write_text(text + "\n")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="*", type=Path)
    ap.add_argument("--record", type=Path, metavar="DIR")
    ap.add_argument("--only", nargs="*", default=[])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--markdown", type=Path)
    args = ap.parse_args()
    if args.record:
        record(args.record, args.only, args.repeat)
        return 0
    return report(args.dirs, args.markdown)


if __name__ == "__main__":
    sys.exit(main())
