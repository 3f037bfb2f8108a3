"""The queues of a socket, pipe or terminal, and a TCP connection's ``TCP_INFO``.

What is waiting in our own descriptors: bytes not yet read, bytes sent and not yet taken,
and the counters of a TCP connection.  The other end of a connection is :mod:`._peer`'s.

For a socket (or any file descriptor):

* :func:`unread_bytes` -- ``FIONREAD``/``SIOCINQ``: bytes in our receive queue that the
  program has not read (TCP: readable bytes; UDP and Unix datagrams: the size of the next
  datagram; Unix streams: all queued bytes; a pipe, either end: the bytes in the pipe; a
  terminal: its input buffer, but see :func:`terminal_unread_bytes`).  ``None`` for a
  listening socket.  About 1 us.
* :func:`unacknowledged_bytes` -- ``SIOCOUTQ``/``TIOCOUTQ``: for TCP, the bytes we wrote that
  the peer's *kernel* has not acknowledged (sent or not); on loopback an acknowledgement comes
  within microseconds of the write and says nothing about whether the peer *program* read
  them -- :func:`tcp_peer` tells that.  For a Unix socket, the memory our sent messages still
  occupy (payload plus per-message overhead, so not a byte count) until the peer has read
  each one *completely*: zero exactly when the peer has taken everything we sent.  About 1 us.
* :func:`tcp_info` -- ``TCP_INFO``: the connection's state and counters (see
  :class:`TcpInfo` for which kernel brought each field; a field the running kernel does not
  return is ``None``).  ``bytes_received`` and ``bytes_acked`` are byte counters that only
  grow, so "did the peer send anything since I last looked" is an integer comparison instead
  of a millisecond timestamp.  About 10 us (most of it building the answer).

Pipes and terminals
-------------------
A pipe's unread bytes are :func:`unread_bytes` of either end.  A pseudo-terminal is subtler:
bytes written to one side reach the other side's input buffer through a kernel work queue, a
moment later, and ``FIONREAD`` does not count them while they are on the way (measured: 4 %
of writes to a pty's slave read 0 at the master right after).  :func:`terminal_unread_bytes`
first polls the descriptor -- the terminal's poll pushes pending bytes through before it
answers -- and then counts, and never misses them.

Part of ``shared``: imports nothing of virtualtime's (see tests/layout.py).
"""

from __future__ import annotations

import array
import os
import select
import socket
import struct
from dataclasses import dataclass
from typing import Final

from . import _common
from ._common import FileLike, _fd

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]


def _ioctl_int(fd: int, request: int | None) -> int | None:
    if request is None or fcntl is None:
        return None
    buffer = array.array("i", [0])
    try:
        fcntl.ioctl(fd, request, buffer, True)
    except OSError:  # not this kind of file, or a listening socket
        return None
    return buffer[0]


def unread_bytes(file: FileLike) -> int | None:
    """Bytes waiting to be read from a socket, a pipe (either end) or a terminal.

    ``FIONREAD``/``SIOCINQ``.  ``None`` where the file has no such count (a listening socket,
    a regular file on some filesystems) or off Linux.
    """
    return _ioctl_int(_fd(file), _common._FIONREAD)


def unacknowledged_bytes(file: FileLike) -> int | None:
    """What we sent on a socket that the other side has not yet taken.

    ``SIOCOUTQ``.  TCP: bytes the peer's kernel has not acknowledged (on loopback, almost
    always 0 a moment after the write).  Unix sockets: the memory our sent messages occupy
    until the peer has read each completely (0 exactly when it has read everything; not a
    byte count).  ``None`` for a listening socket, a pipe, or off Linux.
    """
    return _ioctl_int(_fd(file), _common._OUTQ)


def terminal_unread_bytes(file: FileLike) -> int | None:
    """Bytes waiting to be read from a terminal (a pty's master or slave), those on the way too.

    Bytes written to the other side of a pty reach this side's input buffer through a kernel
    work queue; a zero-timeout poll of this side makes the kernel finish that work first, so
    the count that follows includes them.  Reads nothing.  ``None`` if not a terminal.
    """
    fd = _fd(file)
    if _common._FIONREAD is None or not os.isatty(fd):
        return None
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    poller.poll(0)
    return _ioctl_int(fd, _common._FIONREAD)


_TCP_STATES: Final = {
    1: "ESTABLISHED",
    2: "SYN_SENT",
    3: "SYN_RECV",
    4: "FIN_WAIT1",
    5: "FIN_WAIT2",
    6: "TIME_WAIT",
    7: "CLOSE",
    8: "CLOSE_WAIT",
    9: "LAST_ACK",
    10: "LISTEN",
    11: "CLOSING",
}

# struct tcp_info (include/uapi/linux/tcp.h): offset, format, and the kernel that added it.
# The kernel copies min(its struct size, the buffer) and returns the length it filled, so a
# field is present exactly when the returned length covers it.
_TCPI_UNACKED: Final = (24, "I")  # 2.6
_TCPI_LAST_DATA_SENT: Final = (44, "I")  # 2.6
_TCPI_LAST_DATA_RECV: Final = (52, "I")  # 2.6
_TCPI_LAST_ACK_RECV: Final = (56, "I")  # 2.6
_TCPI_BYTES_ACKED: Final = (120, "Q")  # 4.1
_TCPI_BYTES_RECEIVED: Final = (128, "Q")  # 4.1
_TCPI_NOTSENT_BYTES: Final = (144, "I")  # 4.6
_TCPI_BYTES_SENT: Final = (200, "Q")  # 4.19
_TCP_INFO_ASK: Final = 256


@dataclass(frozen=True, slots=True)
class TcpInfo:
    """A TCP connection's state and counters, from ``TCP_INFO`` (``struct tcp_info``).

    Byte counters only grow; compare two readings to learn what moved in between.  A field is
    ``None`` when the running kernel predates it: ``bytes_acked``/``bytes_received`` need
    Linux 4.1, ``notsent_bytes`` 4.6, ``bytes_sent`` 4.19; the rest are in every 2.6+ kernel.
    """

    state: int
    """``tcpi_state``: 1 ESTABLISHED, 8 CLOSE_WAIT (the peer closed), 10 LISTEN, ..."""
    unacked_segments: int
    """``tcpi_unacked``: segments sent and not yet acknowledged."""
    last_data_sent_ms: int
    """``tcpi_last_data_sent``: milliseconds since we last sent data."""
    last_data_received_ms: int
    """``tcpi_last_data_recv``: milliseconds since data last arrived."""
    last_ack_received_ms: int
    """``tcpi_last_ack_recv``: milliseconds since an acknowledgement last arrived."""
    bytes_acked: int | None
    """``tcpi_bytes_acked`` (4.1): bytes of ours the peer's kernel acknowledged, in total."""
    bytes_received: int | None
    """``tcpi_bytes_received`` (4.1): bytes received from the peer, in total."""
    notsent_bytes: int | None
    """``tcpi_notsent_bytes`` (4.6): bytes written by the program and not yet sent."""
    bytes_sent: int | None
    """``tcpi_bytes_sent`` (4.19): bytes sent, retransmissions included, in total."""
    size: int
    """How many bytes of ``struct tcp_info`` the kernel returned (232 on 6.1, 280 on 6.18)."""

    @property
    def state_name(self) -> str:
        """The state's name as in ``ss``'s output (``ESTABLISHED``, ``CLOSE_WAIT``, ...)."""
        return _TCP_STATES.get(self.state, str(self.state))


def _field(data: bytes, spec: tuple[int, str]) -> int | None:
    offset, form = spec
    if len(data) < offset + struct.calcsize(form):
        return None
    return int(struct.unpack_from(form, data, offset)[0])


def _getsockopt(sock: object, fd: int, level: int, option: int, size: int) -> bytes | None:
    """A socket option's bytes, or None when the file is not a socket or has no such option."""
    if isinstance(sock, socket.socket):
        probe, borrowed = sock, False
    else:
        # Family, type and protocol given, so the constructor asks the kernel less; the
        # option does not depend on them.
        try:
            probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 0, fileno=fd)
        except OSError:  # not a socket
            return None
        borrowed = True
    try:
        return probe.getsockopt(level, option, size)
    except OSError:
        return None
    finally:
        if borrowed:
            probe.detach()


def tcp_info(sock: FileLike) -> TcpInfo | None:
    """The ``TCP_INFO`` of a TCP socket (see :class:`TcpInfo`); ``None`` for any other file.

    Accepts a socket object or its descriptor.
    """
    fd = _fd(sock)
    if _common._TCP_INFO is None:
        return None
    data = _getsockopt(sock, fd, socket.IPPROTO_TCP, _common._TCP_INFO, _TCP_INFO_ASK)
    if data is None or len(data) < 60:
        return None
    return TcpInfo(
        state=data[0],
        unacked_segments=_field(data, _TCPI_UNACKED) or 0,
        last_data_sent_ms=_field(data, _TCPI_LAST_DATA_SENT) or 0,
        last_data_received_ms=_field(data, _TCPI_LAST_DATA_RECV) or 0,
        last_ack_received_ms=_field(data, _TCPI_LAST_ACK_RECV) or 0,
        bytes_acked=_field(data, _TCPI_BYTES_ACKED),
        bytes_received=_field(data, _TCPI_BYTES_RECEIVED),
        notsent_bytes=_field(data, _TCPI_NOTSENT_BYTES),
        bytes_sent=_field(data, _TCPI_BYTES_SENT),
        size=len(data),
    )
