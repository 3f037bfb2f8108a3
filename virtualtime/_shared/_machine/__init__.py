"""What the machine can tell about the outside world: threads, sockets, peers, processes, ttys.

The outside-work model has to decide whether something outside the loop may still answer.  It
can guess from real time ("data arrived less than 20 ms ago"), or it can ask the kernel, which
knows.  This package asks.  Every function is a pure question -- it changes nothing the program
can see -- and every one answers ``None`` for *unknown*: not Linux, no procfs (some
containers), an ioctl this kind of file does not have, a kernel too old for the field.  A caller
that gets ``None`` falls back to whatever it did before (a real-time grace).  Nothing here
imports asyncio or trio.  The costs its modules quote were measured on a 2-core x86-64 VM
under Linux 6.18 and CPython 3.11, best of five runs, while other work kept the load average
at 5 to 6: a system call costs about 1 us there, and reading a procfs file 7 to 30 us --
procfs, not Python, is what the per-look questions spend their time on.

Where each fact lives
---------------------
* ``_threads`` -- the threads of this process: :func:`thread_state`, :func:`thread_cpu_ns`,
  :func:`threads_of`, :class:`ThreadWatch` (and why a thread waiting for the GIL is seen).
* ``_processes`` -- any process: :func:`process_state`, :func:`process_cpu_ns`,
  :func:`process_exit`, :class:`ProcessWatch`.
* ``_sockets`` -- our own descriptors' queues (:func:`unread_bytes`,
  :func:`unacknowledged_bytes`, :func:`terminal_unread_bytes`) and :func:`tcp_info`.
* ``_peer`` -- the other end of a connection: :func:`tcp_peer`, :func:`unix_peer_inode`,
  :func:`unix_peer_pid`, :func:`pids_holding`, :func:`peer_pids`, :func:`both_ends_ours`.
* ``_waits`` -- what a sleeping thread waits for, from its system call:
  :func:`wakes_by_itself`, :func:`threads_wake_by_themselves`, :func:`threads_waiting_on`,
  :func:`awaits_others`, :func:`own_descriptor`.
* ``_netlink`` -- the sock_diag requests ``_peer`` and ``_waits`` send; ``_common`` -- what
  this machine offers (procfs, the ioctls, netlink) and the small readers all of them share.

What is unavailable where
-------------------------
Everything answers ``None`` off Linux.  On Linux: without procfs, thread and process states,
:func:`threads_of`, :func:`pids_holding`, :func:`both_ends_ours` and the procfs fallback of
:func:`tcp_peer` are ``None`` (the CPU clocks still work); without the sock_diag netlink
modules (``inet_diag``/``unix_diag``, or a sandbox that forbids netlink) :func:`tcp_peer` falls
back to procfs and :func:`unix_peer_inode` is ``None``; ``TCP_INFO`` fields arrive with the
kernel versions :class:`TcpInfo` lists.

Part of ``shared``: imports nothing of virtualtime's (see tests/layout.py).
"""

from ._common import GONE, WORKING_STATES
from ._peer import (
    TcpPeer,
    both_ends_ours,
    peer_pids,
    pids_holding,
    socket_inode,
    tcp_peer,
    unix_peer_inode,
    unix_peer_pid,
)
from ._processes import ProcessExit, ProcessWatch, process_cpu_ns, process_exit, process_state
from ._sockets import TcpInfo, tcp_info, terminal_unread_bytes, unacknowledged_bytes, unread_bytes
from ._threads import ThreadWatch, thread_cpu_ns, thread_state, threads_of
from ._waits import (
    awaits_others,
    own_descriptor,
    threads_waiting_on,
    threads_wake_by_themselves,
    wakes_by_itself,
)

__all__ = [
    "GONE",
    "WORKING_STATES",
    "awaits_others",
    "ProcessExit",
    "ProcessWatch",
    "TcpInfo",
    "TcpPeer",
    "ThreadWatch",
    "both_ends_ours",
    "peer_pids",
    "pids_holding",
    "process_cpu_ns",
    "process_exit",
    "own_descriptor",
    "process_state",
    "socket_inode",
    "tcp_info",
    "tcp_peer",
    "terminal_unread_bytes",
    "thread_cpu_ns",
    "thread_state",
    "threads_of",
    "threads_waiting_on",
    "threads_wake_by_themselves",
    "unacknowledged_bytes",
    "unix_peer_inode",
    "unix_peer_pid",
    "unread_bytes",
    "wakes_by_itself",
]
