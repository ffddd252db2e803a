"""Link layers: where the IP header starts in a captured frame, for each supported link type.

Each decoder takes the frame and returns (ip_version, offset) or None for non-IP traffic.
"""

from __future__ import annotations

from collections.abc import Callable

LinkDecoder = Callable[[bytes], "tuple[int, int] | None"]

ETH_IPV4, ETH_IPV6 = 0x0800, 0x86DD
_VLAN_TAGS = (0x8100, 0x88A8, 0x9100)

# Link type numbers (tcpdump.org/linktypes) and the names tcpdump prints for them.
LINKTYPE_NAMES = {0: "NULL", 1: "EN10MB", 101: "RAW", 12: "RAW", 14: "RAW", 108: "LOOP",
                  113: "LINUX_SLL", 228: "IPV4", 229: "IPV6", 276: "LINUX_SLL2"}


def _ethertype(etype: int, off: int) -> tuple[int, int] | None:
    if etype == ETH_IPV4:
        return 4, off
    if etype == ETH_IPV6:
        return 6, off
    return None


def ethernet(frame: bytes) -> tuple[int, int] | None:
    if len(frame) < 14:
        return None
    etype = frame[12] << 8 | frame[13]
    off = 14
    while etype in _VLAN_TAGS:  # 802.1Q, 802.1ad and QinQ stacks
        if len(frame) < off + 4:
            return None
        etype = frame[off + 2] << 8 | frame[off + 3]
        off += 4
    return _ethertype(etype, off)


def linux_sll(frame: bytes) -> tuple[int, int] | None:
    # 16-byte header, protocol in the last two bytes
    if len(frame) < 16:
        return None
    return _ethertype(frame[14] << 8 | frame[15], 16)


def linux_sll2(frame: bytes) -> tuple[int, int] | None:
    # 20-byte header, protocol first
    if len(frame) < 20:
        return None
    return _ethertype(frame[0] << 8 | frame[1], 20)


_AF_INET6 = (24, 28, 30)  # BSDs disagree on AF_INET6


def bsd_null(frame: bytes) -> tuple[int, int] | None:
    # 4-byte address family in the capturing host's byte order: accept either.
    if len(frame) < 4:
        return None
    fam = int.from_bytes(frame[:4], "little")
    if fam > 0xFFFF:
        fam = int.from_bytes(frame[:4], "big")
    if fam == 2:
        return 4, 4
    if fam in _AF_INET6:
        return 6, 4
    return None


def raw_ip(frame: bytes) -> tuple[int, int] | None:
    if not frame:
        return None
    v = frame[0] >> 4
    return (v, 0) if v in (4, 6) else None


def raw_ipv4(frame: bytes) -> tuple[int, int] | None:
    return (4, 0) if frame else None


def raw_ipv6(frame: bytes) -> tuple[int, int] | None:
    return (6, 0) if frame else None


DECODERS: dict[int, LinkDecoder] = {
    0: bsd_null, 108: bsd_null, 1: ethernet, 12: raw_ip, 14: raw_ip, 101: raw_ip,
    113: linux_sll, 228: raw_ipv4, 229: raw_ipv6, 276: linux_sll2,
}


def link_name(linktype: int) -> str:
    return LINKTYPE_NAMES.get(linktype, f"LINKTYPE_{linktype}")
