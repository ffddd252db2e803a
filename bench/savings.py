#!/usr/bin/env python3
"""Check pktflow's predicted savings against paired lab recordings: the same workload with a
condition and without it (the unshaped recording of the same scenario and path).

    python3 bench/savings.py DIR [DIR ...] [--markdown FILE]

Record the pairs with bench/verdicts.py --record (its matrix holds each condition and the
unshaped baseline, for select and pg_dump, direct and through PgBouncer).

Measured and predicted savings of a pair, and the tolerance, are
pktflow.transfer.saving_pairs's (its docstring says how each is taken).

Within tolerance: |predicted - measured| <= max(25% of measured, 10 ms). The last column
names the what-if the prediction takes in both recordings (pktflow.transfer.saving_pairs.removed:
the client leg's limit, the server leg's, or the relay's own small buffer), besides the
conversation's round trips.

    python3 bench/savings.py --direct DIR [DIR ...]

checks the relay's own what-if instead, going direct: each capture through PgBouncer against
the direct one of the same workload and condition. Predicted: what the relay's verdict says the
relay itself added (`relay_ms`, which `saving_s` is where no small buffer of the pooler's set
the pace); measured: the client's time through the pooler less its time direct.

    python3 bench/savings.py --median DIR DIR DIR [...]

holds each condition's median prediction over repeated runs (the DIRs, each a run of the
matrix, or --repeat's numbered runs) to the median client time with it less the median without.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "analyzer"))

SHARE, FLOOR_S = 0.25, 0.010  # as pktflow.transfer.saving_pairs
MIN_RUNS = 3  # --median: fewer runs of a pair make no median
# the capture name's parts: <scenario>-<path>[-<settings>][-bridge]-<condition>[-<n>]
NAME = re.compile(r"(?P<scen>seqscan-10k|select19mb|pgdump(-\d+k)?)-(?P<path>direct|pgbouncer)"
                  r"(?P<rest>-.+?)(?P<rep>-\d+)?$")


def stem(p: Path) -> str:
    return p.name.removesuffix(".gz").removesuffix(".pcap")


def pair_of(name: str) -> tuple[str, str, str] | None:
    """(baseline name, condition, path) for a condition's capture; None for a baseline or a
    name the matrix does not make. A snaplen-cut duplicate (-snap128) is left out."""
    m = NAME.fullmatch(name)
    if m is None or "snap" in name:
        return None
    rest = m["rest"]
    network = "-bridge" if "-bridge" in rest else ""
    cond = rest.replace("-bridge", "").lstrip("-")
    if cond == "unshaped":
        return None
    base = f"{m['scen']}-{m['path']}{network}-unshaped{m['rep'] or ''}"
    return base, f"{m['scen']} {cond}", m["path"]


def captures(d: Path) -> dict[str, Path]:
    """The recordings in `d`, by name (less .pcap and .gz)."""
    return {stem(p): p for p in sorted(d.glob("*.pcap*")) if p.name.endswith((".pcap", ".pcap.gz"))}


def report(path: Path) -> dict[str, Any]:
    from pktflow.pipeline import analyze

    return analyze(str(path))


def rows(dirs: list[Path]) -> list[dict[str, Any]]:
    from pktflow.transfer.saving_pairs import client_connection, client_time_s, pair, removed

    out = []
    for d in dirs:
        caps = captures(d)
        cache: dict[str, dict[str, Any]] = {}

        def get(name: str) -> dict[str, Any]:
            if name not in cache:
                cache[name] = report(caps[name])
            return cache[name]

        for name in caps:
            names = pair_of(name)
            if names is None or names[0] not in caps:
                continue
            got = pair(get(name), get(names[0]))
            if got is None:
                continue
            pred, meas = got
            cond = get(name)
            conn = client_connection(cond)
            base = client_connection(get(names[0]))
            what = removed(cond, conn) if conn is not None else None
            out.append({"set": d.name, "capture": name, "condition": names[1],
                        "path": names[2], "predicted_s": pred, "measured_s": meas,
                        "ok": within(pred, meas),
                        "removes": removes(what),
                        # the client's times (pair() found both connections)
                        "condition_s": client_time_s(conn) if conn else None,
                        "baseline_s": client_time_s(base) if base else None})
    return out


def median_rows(rs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pairs of each condition and path over repeated runs (the DIRs given, or --repeat's
    numbered runs in one): the median prediction against the median client time with the
    condition less the median without it. The baseline's own run-to-run spread (tens of ms for
    a 19 MB select on two shared cores) goes into every single pair's measured saving; a
    median over runs is what a prediction from one capture can be held to."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rs:
        if r["condition_s"] is not None and r["baseline_s"] is not None:
            groups.setdefault((r["condition"], r["path"]), []).append(r)
    out = []
    for (condition, path), runs in sorted(groups.items()):
        if len(runs) < MIN_RUNS:
            continue
        pred = statistics.median(r["predicted_s"] for r in runs)
        meas = (statistics.median(r["condition_s"] for r in runs)
                - statistics.median(r["baseline_s"] for r in runs))
        removes_most = max({r["removes"] for r in runs},
                           key=lambda w: sum(r["removes"] == w for r in runs))
        out.append({"set": f"median of {len(runs)}", "capture": condition,
                    "condition": condition, "path": path, "predicted_s": pred,
                    "measured_s": meas, "ok": within(pred, meas), "removes": removes_most})
    return out


def direct_rows(dirs: list[Path]) -> list[dict[str, Any]]:
    """Each pooled capture against the direct one of the same workload and condition."""
    from pktflow.transfer.saving_pairs import client_connection, client_time_s

    out = []
    for d in dirs:
        caps = captures(d)
        for name, path in caps.items():
            m = NAME.fullmatch(name)
            if m is None or "snap" in name or m["path"] != "pgbouncer":
                continue
            twin = f"{m['scen']}-direct{m['rest']}{m['rep'] or ''}"
            if twin not in caps:
                continue  # a condition on the server leg has no direct run
            pooled, direct = report(path), report(caps[twin])
            c, dc = client_connection(pooled), client_connection(direct)
            if c is None or dc is None:
                continue
            own = [r["verdict"].get("relay_ms") for r in pooled.get("relays") or []
                   if c["id"] in r["front_connections"]]
            if not own or None in own:
                continue  # no query matched leg to leg: the relay says no saving
            pred, meas = sum(own) / 1e3, client_time_s(c) - client_time_s(dc)
            cond = m["rest"].replace("-bridge", "").lstrip("-")
            out.append({"set": d.name, "capture": name, "condition": f"{m['scen']} {cond}",
                        "path": "pgbouncer -> direct", "predicted_s": pred,
                        "measured_s": meas, "ok": within(pred, meas),
                        "removes": "the relay"})
    return out


def removes(what: Any) -> str:
    """The what-if in words: the leg and its limit, or the pooler's own buffer."""
    if what is None or what.limit in (None, "sender", "none"):
        return "-"
    if what.leg == "relay":
        return "the pooler's own buffer"
    return f"{what.leg} leg's {what.limit.replace('_', ' ')}"


def within(pred: float, meas: float) -> bool:
    from pktflow.transfer.saving_pairs import within as ok

    return ok(pred, meas)


def table(rs: list[dict[str, Any]]) -> str:
    lines = ["| set | condition | path | predicted ms | measured ms | within | the model removes |",
             "|---|---|---|---:|---:|---|---|"]
    for r in rs:
        lines.append(f"| {r['set']} | {r['condition']} | {r['path']} | "
                     f"{r['predicted_s'] * 1e3:,.1f} | {r['measured_s'] * 1e3:,.1f} | "
                     f"{'yes' if r['ok'] else 'NO'} | {r['removes']} |")
    ok = sum(r["ok"] for r in rs)
    lines += ["", f"{ok} of {len(rs)} pairs within max({SHARE:.0%}, {FLOOR_S * 1e3:.0f} ms)"
              + (f" ({ok / len(rs):.0%})" if rs else "")]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--markdown", type=Path)
    ap.add_argument("--direct", action="store_true",
                    help="the relay's what-if: each pooled capture against its direct twin")
    ap.add_argument("--median", action="store_true",
                    help=f"each condition's pairs over the runs given ({MIN_RUNS} or more): "
                    "median prediction against the medians' difference")
    args = ap.parse_args()
    if args.direct:
        text = table(direct_rows(args.dirs))
    else:
        got = rows(args.dirs)
        text = table(median_rows(got) if args.median else got)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
