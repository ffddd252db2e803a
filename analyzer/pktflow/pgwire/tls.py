"""A TLS ClientHello as a connection's first bytes: PostgreSQL 17's direct TLS.

With `sslnegotiation=direct` a PostgreSQL 17 client skips the SSLRequest and starts TLS at
once, offering ALPN "postgresql" (the server requires it). Seen from the wire, the connection
opens with a TLS handshake record holding a ClientHello; its ALPN list says whether it is
PostgreSQL. Only the record's plaintext header and the ClientHello are read, never anything
encrypted.
"""

from __future__ import annotations

import struct

NEED_MORE = "need-more"
NOT_TLS = "not-tls"
_HANDSHAKE, _CLIENT_HELLO, _ALPN = 0x16, 0x01, 0x0010


def looks_like_tls(buf: bytes) -> bool:
    """A TLS handshake record header (content type 22, version 3.x)."""
    return len(buf) >= 3 and buf[0] == _HANDSHAKE and buf[1] == 3 and buf[2] <= 4


def client_hello_alpn(buf: bytes) -> list[str] | str:
    """The ALPN protocol names a ClientHello at buf[0] offers ([] when none), NEED_MORE while
    the record is incomplete, NOT_TLS when the bytes are not a ClientHello record."""
    if len(buf) < 3:
        return NEED_MORE if buf[:1] in (b"", b"\x16") else NOT_TLS
    if not looks_like_tls(buf):
        return NOT_TLS
    if len(buf) < 5:
        return NEED_MORE
    (reclen,) = struct.unpack_from(">H", buf, 3)
    if len(buf) < 5 + reclen:
        return NEED_MORE
    hs = buf[5:5 + reclen]
    if len(hs) < 4 or hs[0] != _CLIENT_HELLO:
        return NOT_TLS
    # version(2) random(32), then session id, cipher suites, compression methods
    i = 4 + 2 + 32
    try:
        i += 1 + hs[i]
        i += 2 + struct.unpack_from(">H", hs, i)[0]
        i += 1 + hs[i]
        if i == len(hs):
            return []  # no extensions
        (ext_len,) = struct.unpack_from(">H", hs, i)
        i += 2
        end = min(len(hs), i + ext_len)
        while i + 4 <= end:
            etype, elen = struct.unpack_from(">HH", hs, i)
            i += 4
            if etype == _ALPN:
                names, j, stop = [], i + 2, min(end, i + elen)
                while j < stop:
                    n = hs[j]
                    names.append(hs[j + 1:j + 1 + n].decode("ascii", "replace"))
                    j += 1 + n
                return names
            i += elen
    except (IndexError, struct.error):
        return NOT_TLS
    return []
