"""Types of pktflow._core, the Rust core's binding (analyzer/binding): facts as plain values."""

from typing import Any

FIN: int
SYN: int
RST: int
PSH: int
ACK: int
URG: int
ECE: int
CWR: int
NEW: int
RETRANS: int
PARTIAL_RETRANS: int
OUT_OF_ORDER: int
FILLS_HOLE: int
KEEPALIVE: int
SACK_ABOVE: int
SACK_DUPLICATE: int
__version__: str

class OpenError(Exception):
    """args[0]: the problem's facts (capture.problems words them)."""

class CoreBug(Exception):
    """The core panicked: a bug (the message says where)."""

class Finished:
    """The connections one step finished: each converted when iterated to it."""
    def __len__(self) -> int: ...
    def __iter__(self) -> Finished: ...
    def __next__(self) -> dict[str, Any]: ...

class Pass:
    def __init__(self, path: str, decode_postgres: bool = ..., transfer: bool = ...,
                 linger_s: float | None = ..., settled_linger_s: float | None = ...) -> None: ...
    def step(self) -> Finished | None: ...
    def stats(self) -> dict[str, Any]: ...
    def engine(self) -> dict[str, Any]: ...
    def outcome(self) -> None: ...
    @property
    def records(self) -> int: ...

def collect(path: str, numbers: list[int], t0: float, t1: float, max_events: int,
            linger_s: float | None = ..., settled_linger_s: float | None = ...) -> dict[str, Any]: ...
def json_text(value: Any, depth: int | None = None) -> str:
    """json.dumps(value, indent=2), every line after the first indented 2 * depth spaces more;
    with depth None, json.dumps(value, separators=(",", ":"))."""
