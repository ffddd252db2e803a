"""The walk's TCP and TLS steps, told from the frames: each connection's handshake, its TLS
handshake (what each hello asked and chose, what TLS 1.3 encrypts), and how it closed (who sent
FIN first, whether a RST answered data sent after a FIN)."""

from __future__ import annotations

from pktflow.flow.ladder import Ladder, Row, Run
from pktflow.flow.walk import Step

# PostgreSQL's ssl_ecdh_curve picks the server's key exchange group; prime256v1 by default
SERVER_GROUP_DEFAULT = "secp256r1"
# TLS 1.3's AEAD ciphers whose tag is 16 bytes (RFC 8446 B.4; CCM_8's is 8)
TAG16 = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
         "TLS_AES_128_CCM_SHA256")


def _role(ladder: Ladder, r: Row) -> str:
    return ladder.lanes[r.src].split()[0]


def _handshake(frames: list[int]) -> str:
    return ("SYN, SYN-ACK, ACK: each side picks its first sequence number and announces its "
            "TCP options (MSS, window scale…) in its SYN; the connection is open after the "
            "third step" if len(frames) == 3 else
            "the part of the handshake drawn (SYN, SYN-ACK, ACK): each side announces its "
            "TCP options in its SYN")


def hellos(rows: list[Row]) -> list[tuple[str, list[str], int]]:
    """(handshake message, what it chose, frame) of a connection's plaintext TLS handshake
    messages: ("ServerHello", ["TLS 1.3", "TLS_AES_256_GCM_SHA384", "secp256r1"], 11)."""
    out = []
    for r in rows:
        for d in r.details:
            if d.name == "TLSHandshake":
                name, *chose = d.text.split(", ")
                out.append((name, chose, r.frame))
    return out


def tls13(rows: list[Row]) -> list[str] | None:
    """What the ServerHello chose, when it chose TLS 1.3."""
    for name, chose, _ in hellos(rows):
        if name == "ServerHello" and chose[:1] == ["TLS 1.3"]:
            return chose
    return None


def _tls(ladder: Ladder, rows: list[Row]) -> str:
    said: list[str] = []
    hs = hellos(rows)
    for name, chose, frame in hs:
        if name == "ClientHello":
            sender = _role(ladder, next(r for r in rows if r.frame == frame))
            said.append(f"ClientHello from the {sender} (frame {frame})" if not said
                        else f"a second ClientHello (frame {frame})")
        elif name == "HelloRetryRequest":
            group = chose[2] if len(chose) > 2 else ""
            text = f"a HelloRetryRequest (frame {frame}): the server asks for a key share "
            text += f"of {group}" if group else "of another group"
            if group == SERVER_GROUP_DEFAULT:
                text += " (PostgreSQL's ssl_ecdh_curve, prime256v1 by default)"
            said.append(text + ", which the ClientHello did not carry: one round trip more")
        elif name == "ServerHello":
            said.append(f"the ServerHello (frame {frame}) picks {', '.join(chose[:2])}")
        else:
            said.append(f"{name} (frame {frame})")
    out = "TLS handshake: " + "; ".join(said) if said else "TLS handshake"
    if tls13(rows) is not None:
        out += ("; from the ServerHello on, TLS 1.3 encrypts the handshake too: the server's "
                "certificate, its verification and both Finished messages travel inside "
                "application_data records, like everything after them")
        if any(n == "TLSChangeCipherSpec" for r in rows for n, _ in r.msgs):
            out += " (the ChangeCipherSpec records are only for middleboxes' sake)"
    return out + ("; the PostgreSQL messages travel in encrypted records the capture cannot "
                  "read: only their sizes and timing show")


def _close(ladder: Ladder, rows: list[Row]) -> tuple[str, list[int]]:
    """Who closed and how, from a connection's rows from its first FIN or RST on."""
    fins = [r for r in rows if r.kind == "fin" or "FIN" in r.marks]
    rst = next((r for r in rows if r.kind == "rst"), None)
    frames = [r.frame for r in fins] + [r.frame for r in rows if r.acks == "FIN"]
    parts = []
    if fins:
        first = fins[0]
        parts.append(f"the {_role(ladder, first)} sends FIN first (frame {first.frame}): it has "
                     f"nothing more to send")
        other = next((r for r in fins[1:] if r.src != first.src), None)
        if other is not None:
            parts.append(f"the {_role(ladder, other)} sends its own (frame {other.frame})")
        acked = [r.frame for r in rows if r.acks == "FIN"]
        if other is not None and len(acked) >= 2:
            parts.append("each FIN is acknowledged: an orderly close")
        elif other is None and rst is None:
            parts.append("the other side's FIN is not in the drawn span")
    if rst is not None:
        frames.append(rst.frame)
        late = next((r for r in rows if r.kind == "data" and r.frame < rst.frame and fins
                     and r.frame > fins[0].frame and r.src != fins[0].src
                     and fins[0].src == rst.src), None)
        if late is not None:
            frames.append(late.frame)
            parts.append(f"the {_role(ladder, late)} still sends {late.nbytes:,} B (frame "
                         f"{late.frame}) after that FIN, to a socket already closed: the "
                         f"{_role(ladder, rst)}'s kernel answers with RST (frame {rst.frame}), "
                         f"which aborts the connection")
        else:
            parts.append(f"the {_role(ladder, rst)} aborts the connection with RST (frame "
                         f"{rst.frame})")
    return "; ".join(parts), sorted(set(frames))


def tcp_steps(ladder: Ladder, view: list[Row | Run]) -> list[Step]:
    """The handshakes, TLS sessions and closes: one step each per connection (`view`: the
    rows the walk reads, Ladder.walk)."""
    opened: dict[str, list[int]] = {}
    tls: dict[str, list[Row]] = {}
    tls_frames: dict[str, list[int]] = {}
    closing: dict[str, list[Row]] = {}
    for r in view:
        if isinstance(r, Run):  # bulk segments past their run's first: TLS records' frames
            if any(n.startswith("TLS") for n in r.messages):
                tls_frames.setdefault(r.conn, []).extend(
                    r.frames + ([r.last_frame] if r.last_frame not in r.frames else []))
            continue
        if r.kind in ("syn", "syn-ack") or (r.kind == "ack" and r.acks in ("SYN-ACK", "SYN")):
            opened.setdefault(r.conn, []).append(r.frame)
        if r.conn in closing or r.kind in ("fin", "rst") or "FIN" in r.marks:
            closing.setdefault(r.conn, []).append(r)
        if any(n.startswith("TLS") for n, _ in r.msgs):
            tls.setdefault(r.conn, []).append(r)
            tls_frames.setdefault(r.conn, []).append(r.frame)
    out = [Step("TCP handshake", c, _handshake(f), f) for c, f in opened.items()]
    out += [Step("TLS", c, _tls(ladder, rows), tls_frames[c]) for c, rows in tls.items()]
    for c, rows in closing.items():
        said, frames = _close(ladder, rows)
        if said:
            out.append(Step("TCP close", c, said, frames))
    return out
