"""Every value that crosses the binding has its type in pktflow/_core.pyi: this checks each
TypedDict there against what the core's serde structs actually hand over, on every shipped
capture (a judgement and its words, a relay's, the report's parts, the pass's stats, a
diagram's packets). A key the struct has and the stub not, or the other way round, or a value
of another type, fails here."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from pktflow import _core
from pktflow.judge import Judge
from pktflow.pipeline import Options, open_pass
from pktflow.relay.measure import RelayJudge

ROOT = Path(__file__).resolve().parent.parent
STUB = ROOT / "analyzer" / "pktflow" / "_core.pyi"
CAPTURES = sorted((ROOT / "captures").glob("*.pcap"))


class Stub:
    """The stub's TypedDicts (their keys, which are NotRequired, their generic parameters)
    and type aliases, read from its source."""

    def __init__(self, text: str) -> None:
        self.dicts: dict[str, tuple[list[str], dict[str, ast.expr], set[str]]] = {}
        self.aliases: dict[str, ast.expr] = {}
        for node in ast.parse(text).body:
            if isinstance(node, ast.ClassDef) and any(
                    ast.unparse(b).startswith(("TypedDict", "Generic")) for b in node.bases):
                params = [ast.unparse(b.slice) for b in node.bases
                          if isinstance(b, ast.Subscript) and ast.unparse(b.value) == "Generic"]
                fields: dict[str, ast.expr] = {}
                optional: set[str] = set()
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        ann = item.annotation
                        if isinstance(ann, ast.Subscript) and ast.unparse(ann.value) == "NotRequired":
                            optional.add(item.target.id)
                            ann = ann.slice
                        fields[item.target.id] = ann
                self.dicts[node.name] = (params, fields, optional)
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
                    node.targets[0], ast.Name):
                value = node.value
                if isinstance(value, ast.Call) and ast.unparse(value.func) == "TypedDict" \
                        and len(value.args) == 2 and isinstance(value.args[1], ast.Dict):
                    # the call form, for keys that are keywords ("from")
                    self.dicts[node.targets[0].id] = ([], {
                        k.value: v for k, v in zip(value.args[1].keys, value.args[1].values)
                        if isinstance(k, ast.Constant)}, set())
                else:
                    self.aliases[node.targets[0].id] = value

    def check(self, value: Any, ann: ast.expr, where: str,
              bound: dict[str, ast.expr] | None = None) -> None:
        bound = bound or {}
        if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):  # X | Y
            errors = []
            for side in (ann.left, ann.right):
                try:
                    self.check(value, side, where, bound)
                    return
                except AssertionError as e:
                    errors.append(str(e))
            raise AssertionError(" / ".join(errors))
        if isinstance(ann, ast.Constant) and ann.value is None:
            assert value is None, f"{where}: {value!r} is not None"
            return
        if isinstance(ann, ast.Name):
            name = ann.id
            if name in bound:
                return self.check(value, bound[name], where)
            if name in self.aliases:
                return self.check(value, self.aliases[name], where, bound)
            if name in self.dicts:
                return self.check_dict(value, name, [], where)
            kinds = {"int": int, "float": (int, float), "str": str, "bool": bool,
                     "bytes": bytes, "Any": object}
            assert name in kinds, f"{where}: the stub names {name}, which is no type here"
            ok = isinstance(value, kinds[name]) and (name != "int" or type(value) is not bool)
            assert ok, f"{where}: {value!r} is not {name}"
            return
        assert isinstance(ann, ast.Subscript), f"{where}: cannot read {ast.unparse(ann)}"
        head = ast.unparse(ann.value)
        args = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
        if head == "Literal":
            assert value in [a.value for a in args if isinstance(a, ast.Constant)], \
                f"{where}: {value!r} not in {ast.unparse(ann)}"
        elif head == "list":
            assert isinstance(value, list), f"{where}: {type(value).__name__} is not a list"
            for i, v in enumerate(value):
                self.check(v, args[0], f"{where}[{i}]", bound)
        elif head == "tuple" and len(args) == 2 and isinstance(args[1], ast.Constant) \
                and args[1].value is Ellipsis:  # tuple[X, ...]
            assert isinstance(value, tuple), f"{where}: {value!r} is not {ast.unparse(ann)}"
            for i, v in enumerate(value):
                self.check(v, args[0], f"{where}[{i}]", bound)
        elif head == "tuple":
            assert isinstance(value, tuple) and len(value) == len(args), \
                f"{where}: {value!r} is not {ast.unparse(ann)}"
            for i, (v, a) in enumerate(zip(value, args)):
                self.check(v, a, f"{where}[{i}]", bound)
        elif head == "dict":
            assert isinstance(value, dict), f"{where}: {type(value).__name__} is not a dict"
            for k, v in value.items():
                self.check(k, args[0], f"{where} key", bound)
                self.check(v, args[1], f"{where}[{k!r}]", bound)
        elif head in self.dicts:
            self.check_dict(value, head, args, where)
        else:
            raise AssertionError(f"{where}: cannot read {ast.unparse(ann)}")

    def check_dict(self, value: Any, name: str, args: list[ast.expr], where: str) -> None:
        params, fields, optional = self.dicts[name]
        assert isinstance(value, dict), f"{where}: {type(value).__name__} is not {name}"
        missing = set(fields) - optional - set(value)
        extra = set(value) - set(fields)
        assert not missing and not extra, (f"{where} ({name}): the stub has {sorted(missing)} "
                                           f"that the core does not hand over, the core "
                                           f"{sorted(extra)} that the stub lacks")
        bound = dict(zip(params, args))
        for k, v in value.items():
            self.check(v, fields[k], f"{where}.{k}", bound)

    def name(self, value: Any, typename: str, where: str) -> None:
        self.check(value, ast.Name(typename), where)


@pytest.fixture(scope="module")
def stub() -> Stub:
    return Stub(STUB.read_text())


class Recording(Judge):
    """The judge, keeping what crossed each way."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[Any, Any]] = []

    def __call__(self, j: Any) -> Any:
        words = super().__call__(j)
        self.seen.append((j, words))
        return words


class RecordingRelays(RelayJudge):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[Any, Any]] = []

    def __call__(self, j: Any) -> Any:
        words = super().__call__(j)
        self.seen.append((j, words))
        return words


def _tunnelled(tmp: Path) -> Path:
    """A shipped capture's frames in three tunnels at once (VXLAN, ERSPAN type II, GRE
    without a key): a capture's tunnel counts and each connection's tunnel cross too."""
    from encap import OUTER_MACS, records, tunnelled
    out = [(ROOT / "captures" / "seqscan-10k-direct-bridge.pcap").read_bytes()[:24]]
    for n, (ts, frame) in enumerate(records(ROOT / "captures" / "extended-direct-loopback.pcap")):
        kind = ("vxlan", "erspan2", "erspan1")[n % 3]
        wrapped = tunnelled(frame, kind, 3, n)
        assert wrapped.startswith(OUTER_MACS)
        out.append(ts + len(wrapped).to_bytes(4, "little") * 2 + wrapped)
    path = tmp / "tunnelled.pcap"
    path.write_bytes(b"".join(out))
    return path


@pytest.mark.parametrize("capture", [*CAPTURES, Path("tunnelled")], ids=lambda p: p.stem)
def test_what_crosses_the_binding_is_what_the_stub_says(capture: Path, stub: Stub,
                                                        tmp_path: Path) -> None:
    if capture.name == "tunnelled":
        capture = _tunnelled(tmp_path)
    core = open_pass(str(capture), Options(record=True))
    judge = Recording()
    while core.step(judge) is not None:
        pass
    stub.name(core.stats(), "CaptureStats", "stats")
    stub.name(core.engine(), "EngineFacts", "engine")
    for j, words in judge.seen:
        stub.name(j, "Judgement", f"judgement {j['id']}")
        stub.name(words, "Words", f"words {j['id']}")
    relays = RecordingRelays()
    core.relays(relays)
    for j, words in relays.seen:
        stub.name(j, "RelayJudgement", "relay judgement")
        stub.name(words, "RelayWords", "relay words")
    report = core.finish({"file": str(capture), "version": "0", "damage_reason": None,
                          "findings": []})
    stub.name(report.capture(), "Capture", "capture")
    for i in range(len(report)):
        stub.name(report.connection(i), "Connection", f"connection {i}")
    for i, relay in enumerate(report.relays()):
        stub.name(relay, "RelayHead", f"relay {i}")
        pairs = report.pairs(i, list(range(report.pair_count(i))))
        for k, pair in enumerate(pairs):
            stub.name(pair, "Pair", f"relay {i} pair {k}")
    numbers = list(range(1, len(report) + 1))
    kept = report.packets(numbers, 0.0, 1e12, 5000)
    stub.name(kept, "Packets", "packets")
    drawing = report.drawing(numbers, 0.0, 1e12, 5000,
                             [(n, 0, 1, n % 2 == 0, False) for n in numbers], [], [0], True)
    for i, row in enumerate(drawing.rows(0, len(drawing))):
        stub.name(row, "DrawnRow", f"row {i}")
    stub.name(drawing.totals(0, len(drawing)), "Totals", "totals")
    for start, period, reps in drawing.items():
        for k, sizes in enumerate(drawing.group_sizes(start, period, reps, 3)):
            stub.name(sizes, "GroupSizes", f"group at {start} step {k}")
    for i, b in enumerate(drawing.breakdown(0, len(drawing))):
        stub.name(b, "Breakdown", f"breakdown {i}")
    stub.name(drawing.plot(), "Plot", "plot")
    stub.name(drawing.tcp_facts(4, 4, 500, 3, 2, (0.038, 0.25), 4), "TcpFacts", "tcp facts")
    for what, v in drawing.walk_view(2, 10):
        stub.name(v, "DrawnRow" if what == "row" else "BulkRun", f"walk {what}")


def test_the_checker_can_fail(stub: Stub) -> None:
    """A missing key, an extra key and a value of the wrong type are each caught."""
    good = {"syn_to_synack": 0.1, "synack_to_ack": 0.2}
    stub.name(good, "HandshakeMs", "good")
    for bad in ({"syn_to_synack": 0.1}, {**good, "more": 1}, {**good, "syn_to_synack": "x"}):
        with pytest.raises(AssertionError):
            stub.name(bad, "HandshakeMs", "bad")
