"""A BGP-4 speaker of the lab's own (RFC 4271 framing), for the detection corpus: the server
listens, the client connects; each sends OPEN and KEEPALIVE, the client announces routes in
UPDATE messages and keeps the session alive, then sends a NOTIFICATION (Cease) and closes.
Run as `bgp.py listen|connect HOST PORT`."""

from __future__ import annotations

import socket
import struct
import sys
import time

MARKER = b"\xff" * 16
AS, HOLD = 64512, 90


def message(kind: int, body: bytes = b"") -> bytes:
    return MARKER + struct.pack(">HB", 19 + len(body), kind) + body


def open_msg(router_id: str) -> bytes:
    return message(1, struct.pack(">BHH4sB", 4, AS, HOLD, socket.inet_aton(router_id), 0))


def update(i: int) -> bytes:
    """One route: 10.<i>.0.0/16, ORIGIN IGP, AS_PATH (our AS), NEXT_HOP."""
    attrs = (b"\x40\x01\x01\x00" + b"\x40\x02\x04\x02\x01" + struct.pack(">H", AS)
             + b"\x40\x03\x04" + socket.inet_aton("10.214.0.1"))
    nlri = bytes([16, 10, i % 256])
    return message(2, struct.pack(">H", 0) + struct.pack(">H", len(attrs)) + attrs + nlri)


def read_all(sock: socket.socket) -> None:
    while sock.recv(65536):
        pass


def main() -> None:
    role, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if role == "listen":
        srv = socket.create_server((host, port))
        while True:
            conn, _ = srv.accept()
            with conn:
                try:
                    first = conn.recv(19)
                    if not first:
                        continue  # a readiness probe
                    conn.sendall(open_msg("10.214.0.2") + message(4))
                    for _ in range(3):
                        time.sleep(0.05)
                        conn.sendall(message(4))
                    read_all(conn)
                except OSError:
                    continue
    with socket.create_connection((host, port)) as sock:
        sock.sendall(open_msg("10.214.0.1") + message(4))
        for batch in range(5):
            sock.sendall(b"".join(update(batch * 40 + i) for i in range(40)))
            time.sleep(0.03)
            sock.sendall(message(4))
        sock.sendall(message(3, b"\x06\x02"))  # Cease, administrative shutdown
        sock.shutdown(socket.SHUT_WR)
        read_all(sock)


if __name__ == "__main__":
    main()
