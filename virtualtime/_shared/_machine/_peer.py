"""The other end of a connection: its socket, its queues, and the processes that hold it.

For a TCP connection whose other end is on this machine, or a Unix socket, these find the
peer's socket (through sock_diag netlink, or procfs as the fallback) and the processes that
hold it open.  What is queued in *our* end is :mod:`._sockets`'s.

* :func:`tcp_peer` -- for a TCP connection whose other end is on this machine (loopback, or
  any local address in this network namespace), the other end's socket: its inode, its owner,
  and its queues -- ``unread`` is what we sent that the peer program has not read yet.  Asked
  through the kernel's socket-diagnostics netlink (one exact lookup, about 45 us); where that
  is unavailable, by reading ``/proc/net/tcp`` or ``/proc/net/tcp6``, for which the kernel
  walks its whole connection hash table however few sockets there are: 4 to 14 ms per read
  here.  ``None`` when the peer is on another machine.
* :func:`unix_peer_inode` -- the other end of a connected Unix socket, from the same netlink
  family (``UNIX_DIAG_PEER``; ``/proc/net/unix`` lists each socket, not its peer).  About
  45 us.
* :func:`unix_peer_pid` -- ``SO_PEERCRED``: the pid of the process that *connected* (or, for
  a ``socketpair``, created) the other end -- about 1 us, but only as true as that moment:
  after a ``fork`` the end may live in another process.  Use :func:`peer_pids` for the truth.
* :func:`pids_holding` -- the processes that have a socket inode open, found by reading every
  ``/proc/<pid>/fd`` link we are allowed to read: expensive (9 to 20 ms with 80 to 90
  processes, growing with processes and their descriptors), so compute it once per connection
  and keep it; processes of other users are not visible to an unprivileged caller.
* :func:`peer_pids` -- the two above combined; :func:`both_ends_ours` -- whether the other end
  is one of this process's own descriptors (the peer lookup, then a scan of
  ``/proc/self/fd`` only: about 0.4 ms with 20 descriptors).

Part of ``shared``: imports nothing of virtualtime's (see tests/layout.py).
"""

from __future__ import annotations

import os
import socket
import stat
import struct
from dataclasses import dataclass
from typing import Final

from . import _common
from ._common import FileLike, _check_id, _fd, _proc
from ._netlink import _diag
from ._sockets import _getsockopt


def socket_inode(sock: FileLike) -> int | None:
    """The inode of a socket, as ``/proc/<pid>/fd`` links (``socket:[N]``) and ``ss`` show it.

    ``None`` if the file is not a socket.
    """
    try:
        info = os.fstat(_fd(sock))
    except OSError:
        return None
    return info.st_ino if stat.S_ISSOCK(info.st_mode) else None


@dataclass(frozen=True, slots=True)
class TcpPeer:
    """The other end of a TCP connection on this machine, as the kernel sees it."""

    inode: int
    """Its socket inode (0 while no process holds it, e.g. before ``accept``)."""
    uid: int
    """The user that owns it."""
    unread: int
    """Bytes in its receive queue: what we sent that the peer program has not read yet."""
    unacknowledged: int
    """Bytes in its send queue: what it wrote that our kernel has not acknowledged."""
    state: int
    """Its TCP state (1 ESTABLISHED, ...; see :attr:`TcpInfo.state`)."""


_NOCOOKIE: Final = 0xFFFFFFFF
_UDIAG_SHOW_PEER: Final = 4
_UNIX_DIAG_PEER: Final = 2


def _addr_bytes(family: int, host: str) -> bytes:
    raw = socket.inet_pton(family, host)
    return raw.ljust(16, b"\0")


def _tcp_peer_netlink(
    family: int, ours: tuple[str, int], theirs: tuple[str, int]
) -> TcpPeer | None:
    # struct inet_diag_req_v2 with the peer's view of the connection as its id: its source is
    # our destination.  All states (the lookup is exact; a listener must not match).
    request = (
        struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF)
        + struct.pack("!HH", theirs[1], ours[1])
        + _addr_bytes(family, theirs[0])
        + _addr_bytes(family, ours[0])
        + struct.pack("=I2I", 0, _NOCOOKIE, _NOCOOKIE)
    )
    reply = _diag(request)
    if reply is None or len(reply) < 72:
        return None
    # struct inet_diag_msg: family, state, timer, retrans, id (48 bytes), expires, rqueue,
    # wqueue, uid, inode.
    state = reply[1]
    sport, dport = struct.unpack_from("!HH", reply, 4)
    if (sport, dport) != (theirs[1], ours[1]) or state == 10:
        return None
    rqueue, wqueue, uid, inode = struct.unpack_from("=IIII", reply, 56)
    return TcpPeer(inode=inode, uid=uid, unread=rqueue, unacknowledged=wqueue, state=state)


def _proc_net_address(family: int, host: str, port: int) -> str:
    # /proc/net/tcp prints each address as the kernel's 32-bit words in host byte order.
    raw = socket.inet_pton(family, host)
    words = struct.unpack(f"={len(raw) // 4}I", raw)
    return "".join(f"{word:08X}" for word in words) + f":{port:04X}"


def _tcp_peer_proc(family: int, ours: tuple[str, int], theirs: tuple[str, int]) -> TcpPeer | None:
    local = _proc_net_address(family, theirs[0], theirs[1])
    remote = _proc_net_address(family, ours[0], ours[1])
    table = "tcp6" if family == socket.AF_INET6 else "tcp"
    try:
        with open(f"{_common._PROC}/net/{table}", "rb") as listing:
            key = f" {local} {remote} ".encode()
            for line in listing:
                if key in line:
                    fields = line.split()
                    state = int(fields[3], 16)
                    if state == 10:
                        continue
                    tx, rx = (int(part, 16) for part in fields[4].split(b":"))
                    return TcpPeer(
                        inode=int(fields[9]),
                        uid=int(fields[7]),
                        unread=rx,
                        unacknowledged=tx,
                        state=state,
                    )
    except OSError:
        return None
    return None


def _endpoints(sock: socket.socket) -> tuple[int, tuple[str, int], tuple[str, int]] | None:
    try:
        ours = sock.getsockname()
        theirs = sock.getpeername()
    except OSError:  # not connected
        return None
    return sock.family, (ours[0], ours[1]), (theirs[0], theirs[1])


def _as_socket(sock: FileLike) -> tuple[socket.socket, bool]:
    if isinstance(sock, socket.socket):
        return sock, False
    return socket.socket(fileno=_fd(sock)), True


def tcp_peer(sock: FileLike) -> TcpPeer | None:
    """The other end of a connected TCP socket, when it is on this machine (see :class:`TcpPeer`).

    ``None`` when the socket is not a connected TCP socket, when the peer is elsewhere, or
    without both netlink and procfs.  The peer's ``unread`` count is the fact a model wants:
    bytes still on their way into the peer *program*.
    """
    if _common._TCP_INFO is None:
        return None
    try:
        probe, borrowed = _as_socket(sock)
    except OSError:
        return None
    try:
        if probe.type != socket.SOCK_STREAM or probe.family not in (
            socket.AF_INET,
            socket.AF_INET6,
        ):
            return None
        ends = _endpoints(probe)
    finally:
        if borrowed:
            probe.detach()
    if ends is None:
        return None
    family, ours, theirs = ends
    ours = (ours[0].partition("%")[0], ours[1])
    theirs = (theirs[0].partition("%")[0], theirs[1])
    if family == socket.AF_INET6 and ours[0].startswith("::ffff:") and "." in ours[0]:
        v4 = (
            socket.AF_INET,
            (ours[0][7:], ours[1]),
            (theirs[0][7:], theirs[1]),
        )
        found = _tcp_peer_netlink(*v4) or _tcp_peer_netlink(family, ours, theirs)
        if found is None and _proc():
            found = _tcp_peer_proc(*v4) or _tcp_peer_proc(family, ours, theirs)
        return found
    found = _tcp_peer_netlink(family, ours, theirs)
    if found is None and _proc():
        found = _tcp_peer_proc(family, ours, theirs)
    return found


def unix_peer_pid(sock: FileLike) -> int | None:
    """``SO_PEERCRED``: the pid that connected (or created, for a pair) the other end.

    Cheap, but true only of that moment (a ``fork`` may have moved the end since); ``None``
    for other sockets or when the kernel does not know.
    """
    fd = _fd(sock)
    if _common._SO_PEERCRED is None:
        return None
    data = _getsockopt(sock, fd, socket.SOL_SOCKET, _common._SO_PEERCRED, 12)
    if data is None:
        return None
    pid = int(struct.unpack("3i", data)[0])  # 0 for a socket that is not a Unix one
    return pid if pid > 0 else None


def unix_peer_inode(sock: FileLike) -> int | None:
    """The inode of the other end of a connected Unix socket (netlink ``UNIX_DIAG_PEER``).

    ``None`` for an unconnected or non-Unix socket, or where unix_diag is unavailable.
    """
    inode = socket_inode(sock)
    if inode is None:
        return None
    request = struct.pack(
        "=BBHIII2I", socket.AF_UNIX, 0, 0, 0xFFFFFFFF, inode, _UDIAG_SHOW_PEER, _NOCOOKIE, _NOCOOKIE
    )
    reply = _diag(request)
    if reply is None or len(reply) < 16 or reply[0] != socket.AF_UNIX:
        return None
    offset = 16  # struct unix_diag_msg, then attributes (struct rtattr: length, type)
    while offset + 4 <= len(reply):
        length, kind = struct.unpack_from("=HH", reply, offset)
        if length < 4:
            break
        if kind == _UNIX_DIAG_PEER and length >= 8:
            peer = int(struct.unpack_from("=I", reply, offset + 4)[0])
            return peer or None
        offset += (length + 3) & ~3
    return None


def _holds(pid: str, target: str) -> bool:
    folder = f"{_common._PROC}/{pid}/fd"
    try:
        names = os.listdir(folder)
    except OSError:  # gone, or another user's
        return False
    for name in names:
        try:
            if os.readlink(f"{folder}/{name}") == target:
                return True
        except OSError:
            continue
    return False


def pids_holding(inode: int) -> frozenset[int] | None:
    """The processes that have the socket with this inode open (every one we may look into).

    Expensive -- it reads every descriptor link of every process (9 to 20 ms with ~90
    processes): compute it once per connection and keep the answer.  Processes of other
    users are not visible unless we are privileged.  ``None`` without procfs.
    """
    inode = _check_id("inode", inode)
    if not _proc():
        return None
    target = f"socket:[{inode}]"
    try:
        entries = os.listdir(_common._PROC)
    except OSError:
        return None
    return frozenset(int(name) for name in entries if name.isdigit() and _holds(name, target))


def _peer_inode(sock: FileLike) -> int | None:
    probe, borrowed = _as_socket(sock)
    try:
        family = probe.family
    finally:
        if borrowed:
            probe.detach()
    if family == socket.AF_UNIX:
        return unix_peer_inode(sock)
    peer = tcp_peer(sock)
    return peer.inode if peer is not None and peer.inode else None


def peer_pids(sock: FileLike) -> frozenset[int] | None:
    """The processes holding the other end of a TCP (on this machine) or Unix connection.

    As expensive as :func:`pids_holding`: once per connection.  For a Unix socket where
    unix_diag is unavailable, falls back to :func:`unix_peer_pid` (as of connect time).
    ``None`` when the peer cannot be found (another machine, no procfs).
    """
    _fd(sock)
    try:
        inode = _peer_inode(sock)
    except OSError:
        return None
    if inode is None:
        pid = unix_peer_pid(sock)
        return frozenset({pid}) if pid is not None else None
    return pids_holding(inode)


def both_ends_ours(sock: FileLike) -> bool | None:
    """Whether this process also holds the other end of the connection (an in-process peer).

    Reads only ``/proc/self/fd``.  ``None`` when the other end cannot be found (another
    machine, no procfs, no sock_diag for a Unix socket).
    """
    _fd(sock)
    try:
        inode = _peer_inode(sock)
    except OSError:
        return None
    if inode is None or not _proc():
        return None
    return _holds("self", f"socket:[{inode}]")
