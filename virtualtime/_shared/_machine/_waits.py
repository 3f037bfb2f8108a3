"""What a sleeping process or thread waits for, read from the system call it sleeps in.

A thread that sleeps does so in a system call, and procfs shows which one and its arguments
(``/proc/<pid>/task/<tid>/syscall``).  From that, :func:`wakes_by_itself` and
:func:`threads_wake_by_themselves` tell a sleep with a timeout (it will act by itself) from one
that waits for somebody else; :func:`threads_waiting_on` finds the threads of this process
blocked on a descriptor (directly, or through an epoll set); :func:`awaits_others` asks
whether a process waits on a TCP exchange of its own (a query to its database); and
:func:`own_descriptor` finds which of our descriptors is a socket.  The system call numbers
are known for x86-64 and AArch64; elsewhere the answers are None.

Part of ``shared``: imports nothing of virtualtime's (see tests/layout.py).
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Iterable
from typing import Final

from . import _common
from ._common import _check_id, _proc, _read
from ._netlink import _diag_dump
from ._sockets import _TCPI_LAST_DATA_RECV, _TCPI_LAST_DATA_SENT, _field

# System calls a thread may sleep in, by architecture: number -> (index of the argument that
# says how long, how it says it).  "ms": an int of milliseconds, -1 for ever; "ptr": a pointer
# to a timeout structure, NULL for ever; "always": sleeps for a time by definition; "never":
# blocks until something else acts (data, a child, a signal).  Numbers from the kernel's
# syscall tables (arch/x86/entry/syscalls/syscall_64.tbl, include/uapi/asm-generic/unistd.h).
_SLEEPS: Final[dict[str, dict[int, tuple[int, str]]]] = {
    "x86_64": {
        7: (2, "ms"),  # poll
        232: (3, "ms"),  # epoll_wait
        281: (3, "ms"),  # epoll_pwait
        441: (3, "ptr"),  # epoll_pwait2
        271: (2, "ptr"),  # ppoll
        23: (4, "ptr"),  # select
        270: (4, "ptr"),  # pselect6
        202: (3, "ptr"),  # futex (wait operations)
        449: (3, "ptr"),  # futex_waitv
        128: (2, "ptr"),  # rt_sigtimedwait
        35: (0, "always"),  # nanosleep
        230: (0, "always"),  # clock_nanosleep
        0: (0, "never"),  # read
        17: (0, "never"),  # pread64
        19: (0, "never"),  # readv
        45: (0, "never"),  # recvfrom
        47: (0, "never"),  # recvmsg
        43: (0, "never"),  # accept
        288: (0, "never"),  # accept4
        34: (0, "never"),  # pause
        61: (0, "never"),  # wait4
        247: (0, "never"),  # waitid
    },
    "aarch64": {
        22: (3, "ms"),  # epoll_pwait
        441: (3, "ptr"),  # epoll_pwait2
        73: (2, "ptr"),  # ppoll
        72: (4, "ptr"),  # pselect6
        98: (3, "ptr"),  # futex
        449: (3, "ptr"),  # futex_waitv
        137: (2, "ptr"),  # rt_sigtimedwait
        101: (0, "always"),  # nanosleep
        115: (0, "always"),  # clock_nanosleep
        63: (0, "never"),  # read
        67: (0, "never"),  # pread64
        65: (0, "never"),  # readv
        207: (0, "never"),  # recvfrom
        212: (0, "never"),  # recvmsg
        202: (0, "never"),  # accept
        242: (0, "never"),  # accept4
        260: (0, "never"),  # wait4
        95: (0, "never"),  # waitid
    },
}
_MACHINE: Final = os.uname().machine if hasattr(os, "uname") else ""


def _wakes_by_itself(line: bytes, table: dict[int, tuple[int, str]]) -> bool:
    """From one ``/proc/.../syscall`` line: may this thread wake up without anybody acting?"""
    fields = line.split()
    if not fields or fields[0] == b"running" or fields[0] == b"-1":
        return True  # running, or blocked outside a system call (a page fault): working
    try:
        number = int(fields[0])
        args = [int(field, 16) for field in fields[1:7]]
    except ValueError:
        return True
    known = table.get(number)
    if known is None or len(args) < 6:
        return True  # a call this table does not know: the safe answer
    index, how = known
    if how == "always":
        return True
    if how == "never":
        return False
    value = args[index]
    if how == "ms":
        return value not in (0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF)  # -1 as int: for ever
    return value != 0  # a timeout structure, or NULL


def wakes_by_itself(pid: int, ignore: Iterable[int] = ()) -> bool | None:
    """May process ``pid`` act without anybody acting on it first?

    ``True`` if any of its threads runs, or sleeps with a timeout (``epoll_wait`` with a
    finite timeout -- an event loop with a timer pending, redis's 100 ms tick --, ``time.sleep``,
    a lock wait with a timeout); ``False`` if every thread blocks until something else happens
    (data on a socket, a child's exit, a lock another thread releases, a signal).  Read from
    ``/proc/<pid>/task/<tid>/syscall``: the system call each thread sleeps in and its
    arguments, which the kernel shows to whoever may trace the process (the same user, unless
    a security module forbids it).  ``None`` when that cannot be read, off Linux, or on an
    architecture whose system call numbers this module does not know (x86-64 and AArch64 are
    known).  About 15 us per thread.  ``ignore``: thread ids not to count (the asker's own,
    which is always running, when ``pid`` is this process).
    """
    pid = _check_id("pid", pid)
    skip = {str(_check_id("tid", tid)) for tid in ignore}
    table = _SLEEPS.get(_MACHINE)
    if table is None or not _proc():
        return None
    try:
        tids = os.listdir(f"{_common._PROC}/{pid}/task")
    except OSError:
        return None
    return _any_wakes(
        (f"{_common._PROC}/{pid}/task/{tid}/syscall" for tid in tids if tid not in skip), table
    )


def _any_wakes(paths: Iterable[str], table: dict[int, tuple[int, str]]) -> bool | None:
    """Whether any thread whose ``syscall`` file is in ``paths`` may wake by itself."""
    seen = False
    for path in paths:
        line = _read(path)
        if line is None:
            continue  # exited meanwhile
        if not line.strip():
            return None  # not allowed to see it
        seen = True
        if _wakes_by_itself(line, table):
            return True
    return False if seen else None


_INET_DIAG_INFO: Final = 2
_TCP_ESTABLISHED: Final = 1
_TCP_LISTEN_STATE: Final = 10


def _socket_inodes(pid: int) -> set[int] | None:
    folder = f"{_common._PROC}/{pid}/fd"
    try:
        names = os.listdir(folder)
    except OSError:
        return None
    inodes: set[int] = set()
    for name in names:
        try:
            link = os.readlink(f"{folder}/{name}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(int(link[8:-1]))
    return inodes


def awaits_others(pid: int, ignore: Iterable[int] = ()) -> bool | None:
    """Is process ``pid`` waiting on a TCP exchange of its own (a query to its database)?

    True when one of its TCP connections -- other than those whose socket inodes are in
    ``ignore`` -- has bytes it has not read yet, or is a connection it *made* (not one its
    server accepted) on which it sent more recently than it received: a question still out.
    A server that waits on its database before answering us looks asleep; this is how to tell
    it from a server that is done.  Reads the process's descriptor links and one sock_diag
    dump of the machine's TCP connections: about 0.1 to 1 ms, so ask it rarely.  ``None``
    when it cannot be told (no procfs, no sock_diag, another user's process).
    """
    pid = _check_id("pid", pid)
    if not _proc():
        return None
    inodes = _socket_inodes(pid)
    if inodes is None:
        return None
    inodes.difference_update(ignore)
    if not inodes:
        return False
    states = (1 << _TCP_ESTABLISHED) | (1 << _TCP_LISTEN_STATE)
    rows: list[tuple[int, int, int, int, bytes]] = []  # state, local port, rqueue, inode, info
    for family in (socket.AF_INET, socket.AF_INET6):
        request = struct.pack(
            "=BBBBI", family, socket.IPPROTO_TCP, 1 << (_INET_DIAG_INFO - 1), 0, states
        ) + bytes(48)
        replies = _diag_dump(request)
        if replies is None:
            return None
        for payload in replies:
            if len(payload) < 72:
                continue
            rqueue, _, _, inode = struct.unpack_from("=IIII", payload, 56)
            if inode not in inodes:
                continue
            (sport,) = struct.unpack_from("!H", payload, 4)
            info = b""
            offset = 72
            while offset + 4 <= len(payload):
                length, kind = struct.unpack_from("=HH", payload, offset)
                if length < 4:
                    break
                if kind == _INET_DIAG_INFO:
                    info = payload[offset + 4 : offset + length]
                offset += (length + 3) & ~3
            rows.append((payload[1], sport, rqueue, inode, info))
    listening = {sport for state, sport, _, _, _ in rows if state == _TCP_LISTEN_STATE}
    for state, sport, rqueue, _, info in rows:
        if state != _TCP_ESTABLISHED:
            continue
        if rqueue:
            return True  # bytes it has yet to read: it has work coming
        if sport in listening or len(info) < 56:
            continue  # its server's side of a connection: answering is its part, not waiting
        sent_ago = _field(info, _TCPI_LAST_DATA_SENT)
        received_ago = _field(info, _TCPI_LAST_DATA_RECV)
        if sent_ago is not None and received_ago is not None and sent_ago <= received_ago:
            # Sent at least as recently as it received (a tie: the safe side).  A connection
            # it never received on has received_ago as old as the connection.
            return True
    return False


# System calls whose first argument is the descriptor a thread blocks on (read, recv*,
# accept*), and those whose first argument is an epoll descriptor: by architecture.
_ON_FD: Final[dict[str, frozenset[int]]] = {
    "x86_64": frozenset({0, 17, 19, 45, 47, 43, 288}),
    "aarch64": frozenset({63, 67, 65, 207, 212, 202, 242}),
}
_ON_EPOLL: Final[dict[str, frozenset[int]]] = {
    "x86_64": frozenset({232, 281, 441}),
    "aarch64": frozenset({22, 441}),
}


def own_descriptor(inode: int) -> int | None:
    """The descriptor number under which this process holds the socket ``inode`` (or None)."""
    inode = _check_id("inode", inode)
    if not _proc():
        return None
    target = f"socket:[{inode}]"
    folder = f"{_common._PROC}/self/fd"
    try:
        names = os.listdir(folder)
    except OSError:
        return None
    for name in names:
        try:
            if os.readlink(f"{folder}/{name}") == target:
                return int(name)
        except OSError:
            continue
    return None


def threads_waiting_on(fd: int) -> tuple[int, ...] | None:
    """The threads of this process blocked on descriptor ``fd`` (native ids).

    Blocked reading it, or in ``epoll_wait`` on an epoll set that watches it (an event
    loop in another thread serving that socket): read from each thread's
    ``/proc/self/task/<tid>/syscall`` and the epoll set's ``fdinfo``.  ``None`` when that
    cannot be read; an empty tuple when no thread waits on it in a way seen here (``poll`` and
    ``select`` keep their descriptors in memory this does not read).
    """
    fd = _check_id("fd", fd)
    on_fd = _ON_FD.get(_MACHINE)
    on_epoll = _ON_EPOLL.get(_MACHINE)
    if on_fd is None or on_epoll is None or not _proc():
        return None
    try:
        tids = os.listdir(f"{_common._PROC}/self/task")
    except OSError:
        return None
    found = []
    watches: dict[int, bool] = {}
    needle = f"tfd: {fd:8d} ".encode()
    for tid in tids:
        line = _read(f"{_common._PROC}/self/task/{tid}/syscall")
        if not line:
            continue
        fields = line.split()
        try:
            number, first = int(fields[0]), int(fields[1], 16)
        except (ValueError, IndexError):
            continue
        if number in on_fd and first == fd:
            found.append(int(tid))
        elif number in on_epoll:
            watched = watches.get(first)
            if watched is None:
                info = _read(f"{_common._PROC}/self/fdinfo/{first}") or b""
                watched = watches[first] = needle in info
            if watched:
                found.append(int(tid))
    return tuple(found)


def threads_wake_by_themselves(tids: Iterable[int]) -> bool | None:
    """May any of these threads of this process wake without anybody acting (see
    :func:`wakes_by_itself`)?  ``None`` when it cannot be told."""
    wanted = [_check_id("tid", tid) for tid in tids]
    table = _SLEEPS.get(_MACHINE)
    if table is None or not _proc():
        return None
    return _any_wakes((f"{_common._PROC}/self/task/{tid}/syscall" for tid in wanted), table)
