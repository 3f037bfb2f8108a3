"""The kernel's socket-diagnostics netlink (sock_diag): one exact lookup, or a dump.

:func:`_diag` sends one request and returns the payload of its one reply (a socket's other
end); :func:`_diag_dump` asks for every matching socket (the machine's TCP connections).  Both
answer None where netlink is unavailable or forbidden, and callers fall back or say
"unknown".  The requests themselves (which family, which fields) are built by the callers,
:mod:`._peer` and :mod:`._waits`.

Part of ``shared``: imports nothing of virtualtime's (see tests/layout.py).
"""

from __future__ import annotations

import socket
import struct
from typing import Final

from . import _common

_NETLINK_SOCK_DIAG: Final = 4
_SOCK_DIAG_BY_FAMILY: Final = 20
_NLM_F_REQUEST: Final = 1
_NLMSG_ERROR: Final = 2
_NETLINK_HEADER: Final = struct.Struct("=IHHII")
_NLM_F_DUMP: Final = 0x300
_NLMSG_DONE: Final = 3


def _diag(request: bytes) -> bytes | None:
    """One exact sock_diag request; the reply's payload, or None (not found, not available).

    A socket per request: no state to share between threads or across a fork, nothing left
    open; the kernel answers during the send, so the receive never waits.
    """
    if _common._AF_NETLINK is None:
        return None
    header = _NETLINK_HEADER.pack(
        _NETLINK_HEADER.size + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, 1, 0
    )
    try:
        with socket.socket(_common._AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as channel:
            channel.send(header + request)
            reply = channel.recv(8192, socket.MSG_DONTWAIT)
    except OSError:  # no netlink here, not permitted, or no answer
        return None
    if len(reply) < _NETLINK_HEADER.size:
        return None
    length, kind = _NETLINK_HEADER.unpack_from(reply)[:2]
    if kind == _NLMSG_ERROR:
        return None
    return reply[_NETLINK_HEADER.size : length]


def _diag_dump(request: bytes) -> list[bytes] | None:
    """A sock_diag dump request; each reply message's payload, or None (not available)."""
    if _common._AF_NETLINK is None:
        return None
    header = _NETLINK_HEADER.pack(
        _NETLINK_HEADER.size + len(request),
        _SOCK_DIAG_BY_FAMILY,
        _NLM_F_REQUEST | _NLM_F_DUMP,
        1,
        0,
    )
    found: list[bytes] = []
    try:
        with socket.socket(_common._AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as channel:
            channel.send(header + request)
            while True:
                reply = channel.recv(65536)
                offset = 0
                while offset + _NETLINK_HEADER.size <= len(reply):
                    length, kind = _NETLINK_HEADER.unpack_from(reply, offset)[:2]
                    if length < _NETLINK_HEADER.size:
                        return found
                    if kind == _NLMSG_DONE:
                        return found
                    if kind == _NLMSG_ERROR:
                        return None
                    found.append(reply[offset + _NETLINK_HEADER.size : offset + length])
                    offset += (length + 3) & ~3
    except OSError:
        return None
