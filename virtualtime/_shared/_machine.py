"""What the machine can tell about the outside world: threads, sockets, peers, processes, ttys.

The outside-work model has to decide whether something outside the loop may still answer.  It
can guess from real time ("data arrived less than 20 ms ago"), or it can ask the kernel, which
knows.  This module asks.  Every function is a pure question -- it changes nothing the program
can see -- and every one answers ``None`` for *unknown*: not Linux, no procfs (some
containers), an ioctl this kind of file does not have, a kernel too old for the field.  A caller
that gets ``None`` falls back to whatever it did before (a real-time grace).  Nothing here
imports asyncio or trio.  The costs below were measured on a 2-core x86-64 VM under Linux
6.18 and CPython 3.11, best of five runs, while other work kept the load average at 5 to 6:
a system call costs about 1 us there, and reading a procfs file 7 to 30 us -- procfs, not
Python, is what the per-look questions spend their time on.

Threads of this process
-----------------------
A thread is known by its *native id* (``threading.Thread.native_id``,
``threading.get_native_id()``; a thread a C library started has one too: see
:func:`threads_of`).  Two facts, both from the kernel:

* its **scheduler state** (:func:`thread_state`), the letter procfs shows in
  ``/proc/self/task/<tid>/stat``: ``R`` running or runnable (it has a CPU, or waits for one),
  ``S`` sleeping until something wakes it (a lock, a queue, ``select``, ``time.sleep``),
  ``D`` uninterruptible sleep (disk I/O, page faults: working, only slowly), ``T``/``t``
  stopped, ``Z`` zombie, ``X`` dead.  This module also answers ``X`` for a thread that no
  longer exists.  About 25 us (``open``/``read``/``close``; a kept file re-read with
  ``pread``, as :class:`ThreadWatch` does, costs about a third of that).  The comm field
  before the state is in parentheses and may hold spaces and parentheses itself, so the line
  is split at its *last* ``)``.
* its **CPU clock** (:func:`thread_cpu_ns`): the nanoseconds of CPU it has used, from the
  kernel's per-thread CPU clock (the id glibc's ``pthread_getcpuclockid`` builds from the tid;
  readable only for threads of this process).  About 0.6 us.  It advances in nanoseconds, so
  a thread that ran at all between two reads -- even for the microseconds of waking up to find
  its lock still taken -- shows it.

**Threads waiting for the GIL.**  A thread that has Python code to run but not the GIL waits
in ``take_gil`` on a condition variable, with a timeout of the switch interval (5 ms): in the
kernel that is a futex sleep, state ``S``, and its CPU clock stands still -- exactly what a
thread blocked on ``threading.Event.wait()`` or ``queue.SimpleQueue.get()`` looks like.  So
while the asking thread *holds* the GIL, a thread in a pure-Python busy loop looks idle.  What
rescues the question is that the asker cannot read procfs without releasing the GIL: every
``os.open``/``os.read`` drops it, and dropping it signals the condition variable, which makes
a waiting thread runnable (``R``) at once -- before the read's system call even starts -- and
it stays ``R`` (woken, or running with the GIL) until the asker takes the GIL back, which is
after the read.  So the state read *is* the brief release the question needs: measured, a
lone GIL waiter reads ``R`` in 100 % of looks (pure-Python loop; ``hashlib`` on big data and a
long ``sqlite3`` query hold no GIL at all and read ``R`` too), while threads in
``Event.wait()``, ``SimpleQueue.get()`` and ``time.sleep()`` read ``S`` with a still clock.
With *several* GIL waiters one release wakes only one of them, and it may not be the one being
read; :class:`ThreadWatch` therefore also reads every CPU clock before and after the state
reads, and a thread that was woken during the look -- and so ran, if only to find the GIL
taken -- has a clock that moved.  The case left is a watched GIL waiter that is not woken
because the release woke an *unwatched* waiter instead: measured with three pure-Python
threads, one of them watched alone is missed in about 5 % of looks, while the three watched
together are never missed.  So watch every thread that may want the GIL (all the process's
other threads, :func:`threads_of`, when in doubt).  (The cost: a woken waiter may take the
GIL during the look, and then the asker waits up to one switch interval to get it back --
only when some thread is busy, when the answer is "working" anyway.)  On a free-threaded build
there is no GIL, and a busy thread is simply ``R``.  What does *not* work: releasing the GIL on
purpose (``os.sched_yield()``, ``time.sleep(0)``, a 100 us ``select``) and comparing CPU clocks
before and after -- under load the woken waiter has often not been given a CPU yet, so it was
seen in 1 % to 60 % of tries, at up to a switch interval each; the state letter is set at the
wake-up itself, before any CPU is given.  A look costs about 25 us for one thread and 20 us more
per thread.

A thread in ``time.sleep`` is ``S`` with a still clock: it is not working, it is *waiting for
real time*.  Whether that counts as outside work is the model's decision, not a fact here.
Never include the asking thread in a watch: it is always ``R``.  And a thread that
``Thread.join()`` saw finish may still exist for a moment, running its exit (``R``):
``join`` returns when the Python side is done, before the kernel has torn the thread down.

Sockets
-------
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

The peer of a connection
------------------------
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

Processes
---------
* :func:`process_state` -- the main thread's state letter (``Z`` once it has exited and
  nobody has reaped it, ``X`` when gone).  A process's *other* threads may be busy while its
  main thread sleeps: :class:`ProcessWatch` reads them all.
* :func:`process_cpu_ns` -- the whole process's CPU time in nanoseconds, from its process CPU
  clock (the kernel lets anyone read it; about 0.6 us).  ``/proc/<pid>/stat``'s utime and stime
  count in clock ticks (10 ms), too coarse to see a short answer; ``/proc/<pid>/schedstat`` has
  nanoseconds but per thread; the process clock sums all threads, exited ones included.
* :func:`process_exit` -- how a process ended, once it has: for a child of ours, ``waitid``
  with ``WNOWAIT`` (the child stays unreaped for its owner); for another process, the exit
  status procfs shows while it is a zombie.  A killed process turns into a zombie a moment
  after the signal (the kernel tears it down asynchronously): poll, bounded.
* :class:`ProcessWatch` -- "is any of these processes working?": any thread ``R`` or ``D``,
  or the process CPU clock moved since the last look.  About 50 us for a one-thread process,
  plus about 20 us per further thread.

Pipes and terminals
-------------------
A pipe's unread bytes are :func:`unread_bytes` of either end.  A pseudo-terminal is subtler:
bytes written to one side reach the other side's input buffer through a kernel work queue, a
moment later, and ``FIONREAD`` does not count them while they are on the way (measured: 4 %
of writes to a pty's slave read 0 at the master right after).  :func:`terminal_unread_bytes`
first polls the descriptor -- the terminal's poll pushes pending bytes through before it
answers -- and then counts, and never misses them.

What is unavailable where
-------------------------
Everything answers ``None`` off Linux.  On Linux: without procfs, thread and process states,
:func:`threads_of`, :func:`pids_holding`, :func:`both_ends_ours` and the procfs fallback of
:func:`tcp_peer` are ``None`` (the CPU clocks still work); without the sock_diag netlink
modules (``inet_diag``/``unix_diag``, or a sandbox that forbids netlink) :func:`tcp_peer` falls
back to procfs and :func:`unix_peer_inode` is ``None``; ``TCP_INFO`` fields arrive with the
kernel versions :class:`TcpInfo` lists.
"""

from __future__ import annotations

import array
import os
import select
import socket
import stat
import struct
import sys
import time
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Protocol

from ._errors import InvalidTypeError, InvalidValueError

try:
    import fcntl
    import termios
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]
    termios = None  # type: ignore[assignment]

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

GONE: Final = "X"
"""The state letter for a thread or process that is dead or no longer exists."""

WORKING_STATES: Final = frozenset("RD")
"""Scheduler states of a task that is doing work: runnable/running, or in uninterruptible sleep."""

_LINUX: Final = sys.platform.startswith("linux")
_PROC = "/proc"  # a variable so the tests can take procfs away
_proc_seen: dict[str, bool] = {}
_FIONREAD: Final = getattr(termios, "FIONREAD", None) if _LINUX else None
_OUTQ: Final = getattr(termios, "TIOCOUTQ", None) if _LINUX else None
_TCP_INFO: Final = getattr(socket, "TCP_INFO", None) if _LINUX else None
_SO_PEERCRED: Final = getattr(socket, "SO_PEERCRED", None) if _LINUX else None
_AF_NETLINK: Final = getattr(socket, "AF_NETLINK", None) if _LINUX else None
_clock_gettime_ns: Final = getattr(time, "clock_gettime_ns", None)

# The kernel's CPU clock ids (include/linux/posix-timers.h): (~pid << 3) | type, where type 2
# is the scheduler's runtime (CPUCLOCK_SCHED) and bit 4 marks a per-thread clock.
_CPUCLOCK_PROCESS: Final = 2
_CPUCLOCK_THREAD: Final = 6


class _HasFileno(Protocol):
    def fileno(self) -> int: ...


FileLike = int | _HasFileno


def _proc() -> bool:
    present = _proc_seen.get(_PROC)
    if present is None:
        present = _proc_seen[_PROC] = _LINUX and os.path.exists(f"{_PROC}/self/stat")
    return present


# Asked once, at import: a loop asks on its idle path, and a stat there is a blocking call on
# the loop's thread -- which anyio's test suite (blockbuster) turns into an error that kills
# the loop.
_proc()


def _check_id(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(f"{name} must be an int, got {value!r}")
    if value <= 0:
        raise InvalidValueError(f"{name} must be a positive id, got {value!r}")
    return value


def _fd(file: object) -> int:
    if isinstance(file, int) and not isinstance(file, bool):
        fd = file
    else:
        fileno = getattr(file, "fileno", None)
        if fileno is None:
            raise InvalidTypeError(
                f"file must be a file descriptor (an int) or have a fileno() method, got {file!r}"
            )
        fd = fileno()
        if isinstance(fd, bool) or not isinstance(fd, int):
            raise InvalidTypeError(f"file's fileno() must return an int, got {fd!r}")
    if fd < 0:
        raise InvalidValueError(f"file must be an open descriptor (>= 0), got {fd!r}")
    return fd


def _read(path: str) -> bytes | None:
    """The contents of a procfs file, or None when it does not exist (or may not be read)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 4096)
    except OSError:  # the task died between open and read
        return None
    finally:
        os.close(fd)


def _state_of(data: bytes | None) -> str:
    if not data:
        return GONE
    end = data.rfind(b")")
    return chr(data[end + 2]) if end >= 0 and len(data) > end + 2 else GONE


def _cpu_ns(clock: int) -> int | None:
    try:
        return _clock_gettime_ns(clock)  # type: ignore[misc, no-any-return]
    except OSError:  # the thread or process is gone
        return None


# --------------------------------------------------------------------------------------------
# Threads of this process


def thread_state(tid: int) -> str | None:
    """The scheduler state letter of a thread of this process (``R``, ``S``, ``D``, ...).

    ``tid`` is the thread's native id.  :data:`GONE` (``X``) once the thread has exited;
    ``None`` without procfs.  A single read says what the thread is doing *now*; to ask "is it
    working", including threads that wait for the GIL, use :class:`ThreadWatch`.
    """
    tid = _check_id("tid", tid)
    if not _proc():
        return None
    return _state_of(_read(f"{_PROC}/self/task/{tid}/stat"))


def thread_cpu_ns(tid: int) -> int | None:
    """The CPU time, in nanoseconds, a thread of this process has used so far.

    ``tid`` is the thread's native id.  ``None`` once the thread has exited (or off Linux).
    Compare two readings to see whether the thread ran in between.
    """
    tid = _check_id("tid", tid)
    if not _LINUX or _clock_gettime_ns is None:
        return None
    return _cpu_ns((~tid << 3) | _CPUCLOCK_THREAD)


def threads_of(pid: int | None = None) -> tuple[int, ...] | None:
    """The native ids of the threads of a process (this one by default), from procfs.

    Includes threads that C libraries started, which ``threading`` does not know.  ``None``
    without procfs or when the process is gone.  About 40 us.
    """
    where = "self" if pid is None else str(_check_id("pid", pid))
    if not _proc():
        return None
    try:
        return tuple(int(name) for name in os.listdir(f"{_PROC}/{where}/task"))
    except OSError:
        return None


class _TaskFiles:
    """Open procfs ``stat`` files of tasks, re-read with ``pread`` (half the cost of opening).

    A kept file follows its task, not its number: once the task is gone a read fails, even if
    the number is reused.  Files opened before a ``fork`` are dropped in the child.
    """

    __slots__ = ("fds", "pid")

    def __init__(self) -> None:
        self.fds: dict[tuple[int, int], int] = {}
        self.pid = os.getpid()

    def state(self, key: tuple[int, int], path: str) -> str:
        if self.pid != os.getpid():
            self.close()
            self.pid = os.getpid()
        fd = self.fds.get(key)
        if fd is None:
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                return GONE
            self.fds[key] = fd
        try:
            return _state_of(os.pread(fd, 512, 0))
        except OSError:  # the task has exited
            self.drop(key)
            return GONE

    def drop(self, key: tuple[int, int]) -> None:
        fd = self.fds.pop(key, None)
        if fd is not None:
            os.close(fd)

    def keep_only(self, keys: set[tuple[int, int]]) -> None:
        for key in [key for key in self.fds if key not in keys]:
            self.drop(key)

    def close(self) -> None:
        fds = list(self.fds.values())
        self.fds.clear()
        if self.pid == os.getpid():
            for fd in fds:
                os.close(fd)


class ThreadWatch:
    """Answers "is any of these threads of this process working?", look after look.

    A thread is *working* when it is runnable or running (``R``), in uninterruptible sleep
    (``D``), or its CPU clock moved since this watch last looked at it (or during the look).
    That covers a thread waiting for the GIL (see the module's notes), a thread in a C call
    that released the GIL (hashing, a database query), and a thread that ran briefly between
    two looks.  A thread blocked on a lock, a queue, an event, ``select`` or ``time.sleep`` is
    not working.

    Use one watch per question (a loop's own watch); it keeps each thread's last CPU reading
    and an open procfs file per thread, and forgets threads that are not in the latest look.
    Call :meth:`close` when done (or let it be collected).  Not thread-safe: one asker.
    """

    __slots__ = ("__weakref__", "_files", "_last")

    def __init__(self) -> None:
        self._last: dict[int, int] = {}
        self._files = _TaskFiles()
        weakref.finalize(self, _TaskFiles.close, self._files)

    def busy(self, tids: Iterable[int]) -> tuple[int, ...] | None:
        """The ids among ``tids`` (native thread ids) that are working; ``None`` if unknown.

        Never pass the asking thread's own id: it is always running.  Without procfs only the
        CPU clocks answer: a thread whose clock moved is working, but a still clock may be a
        thread waiting for the GIL, so "none is working" becomes ``None``.
        """
        wanted = tuple(_check_id("tid", tid) for tid in tids)
        use_proc = _proc()
        if not _LINUX or (_clock_gettime_ns is None and not use_proc):
            return None
        before = [_cpu_ns((~tid << 3) | _CPUCLOCK_THREAD) for tid in wanted]
        files = self._files
        states = (
            [files.state((0, tid), f"{_PROC}/self/task/{tid}/stat") for tid in wanted]
            if use_proc
            else [""] * len(wanted)
        )
        last = self._last
        found = []
        for tid, start, state in zip(wanted, before, states, strict=True):
            now = _cpu_ns((~tid << 3) | _CPUCLOCK_THREAD)
            previous = last.get(tid)
            if now is None:
                last.pop(tid, None)
                files.drop((0, tid))
                continue
            last[tid] = now
            if (
                state in WORKING_STATES
                or (start is not None and now > start)
                or (previous is not None and now > previous)
            ):
                found.append(tid)
        if len(last) > len(wanted):
            keep = set(wanted)
            for tid in [tid for tid in last if tid not in keep]:
                del last[tid]
            files.keep_only({(0, tid) for tid in keep})
        if not found and not use_proc and last:
            # Without the state read nothing woke a thread waiting for the GIL, and a still
            # clock cannot tell it from a blocked one: only "working" is known for sure.
            return None
        return tuple(found)

    def working(self, tids: Iterable[int]) -> bool | None:
        """Whether any of ``tids`` is working (see :meth:`busy`); ``None`` if unknown."""
        found = self.busy(tids)
        return None if found is None else bool(found)

    def close(self) -> None:
        """Close the procfs files this watch keeps open."""
        self._files.close()
        self._last.clear()


# --------------------------------------------------------------------------------------------
# Processes


def process_state(pid: int) -> str | None:
    """The state letter of a process's main thread: ``Z`` once it exited unreaped, ``X`` gone.

    ``None`` without procfs.  A process whose main thread sleeps (``S``) may still have busy
    threads: ask :class:`ProcessWatch` whether it is working.
    """
    pid = _check_id("pid", pid)
    if not _proc():
        return None
    return _state_of(_read(f"{_PROC}/{pid}/stat"))


def process_cpu_ns(pid: int) -> int | None:
    """The CPU time, in nanoseconds, all threads of a process have used so far (any process).

    ``None`` once the process has been reaped (a zombie still answers), or off Linux.
    """
    pid = _check_id("pid", pid)
    if not _LINUX or _clock_gettime_ns is None:
        return None
    return _cpu_ns((~pid << 3) | _CPUCLOCK_PROCESS)


@dataclass(frozen=True, slots=True)
class ProcessExit:
    """How a process ended.

    ``returncode`` follows :mod:`subprocess`: the exit code, or minus the signal number when a
    signal killed it; ``None`` when the process is gone and its fate is no longer known
    (somebody reaped it).
    """

    pid: int
    returncode: int | None

    @property
    def killed_by(self) -> int | None:
        """The signal that killed the process, or ``None`` if it exited (or is unknown)."""
        code = self.returncode
        return -code if code is not None and code < 0 else None


def _returncode(raw: int) -> int:
    return -(raw & 0x7F) if raw & 0x7F else (raw >> 8) & 0xFF


def process_exit(pid: int) -> ProcessExit | None:
    """``None`` while the process runs; once it has ended, how (see :class:`ProcessExit`).

    Reaps nothing: a child of ours stays a zombie for its owner (``Popen.wait``, asyncio's
    child watcher).  Between a kill and the zombie the kernel needs a moment; a process still
    being torn down reads as running.  ``None`` too when it cannot be told (no procfs and not
    our child).
    """
    pid = _check_id("pid", pid)
    if not _LINUX:
        return None
    try:
        result = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # not our child (or already reaped): ask procfs
        pass
    else:
        if result is None:
            return None
        if result.si_code == os.CLD_EXITED:
            return ProcessExit(pid, result.si_status)
        return ProcessExit(pid, -result.si_status)
    if not _proc():
        return None
    data = _read(f"{_PROC}/{pid}/stat")
    if data is None:
        return ProcessExit(pid, None)
    fields = data[data.rfind(b")") + 2 :].split()
    if fields[0] not in (b"Z", b"X"):
        return None
    # Field 52 of stat (the 50th after the comm), Linux 3.5+; shown only to who may ptrace.
    raw = int(fields[49]) if len(fields) > 49 else 0
    return ProcessExit(pid, _returncode(raw) if len(fields) > 49 else None)


class ProcessWatch:
    """Answers "is any of these processes working?", look after look.

    A process is working when any of its threads is runnable (``R``) or in uninterruptible
    sleep (``D``), or its CPU clock moved since this watch last looked at it (or during the
    look).  A zombie or a reaped process is not working (ask :func:`process_exit` how it
    ended).  Keeps an open procfs file per thread it has seen; :meth:`close` them when done.
    Never include the asking process: its asking thread is always running.  Not thread-safe:
    one asker.
    """

    __slots__ = ("__weakref__", "_files", "_last")

    def __init__(self) -> None:
        self._last: dict[int, int] = {}
        self._files = _TaskFiles()
        weakref.finalize(self, _TaskFiles.close, self._files)

    def busy(self, pids: Iterable[int], *, since_last: bool = True) -> tuple[int, ...] | None:
        """The ids among ``pids`` that are working; ``None`` if unknown (no procfs).

        ``since_last=False`` leaves out "its CPU clock moved since the last look": working
        means working *now* (a thread runnable or in disk wait, or the clock moved during the
        look).  For a peer that has just answered us -- its clock moved because it did --
        and whose other threads cannot be waiting for a GIL we hold.
        """
        wanted = tuple(_check_id("pid", pid) for pid in pids)
        if not _proc() or _clock_gettime_ns is None:
            return None
        files = self._files
        last = self._last
        found = []
        keys: set[tuple[int, int]] = set()
        for pid in wanted:
            clock = (~pid << 3) | _CPUCLOCK_PROCESS
            start = _cpu_ns(clock)
            try:
                tids = os.listdir(f"{_PROC}/{pid}/task")
            except OSError:
                tids = []
            states = []
            for name in tids:
                key = (pid, int(name))
                keys.add(key)
                states.append(files.state(key, f"{_PROC}/{pid}/task/{name}/stat"))
            now = _cpu_ns(clock)
            previous = last.get(pid)
            if now is None or all(state in "ZX" for state in states):  # ended (or no tasks)
                last.pop(pid, None)
                continue
            last[pid] = now
            if (
                not WORKING_STATES.isdisjoint(states)
                or (start is not None and now > start)
                or (since_last and previous is not None and now > previous)
            ):
                found.append(pid)
        files.keep_only(keys)
        if len(last) > len(wanted):
            keep = set(wanted)
            for pid in [pid for pid in last if pid not in keep]:
                del last[pid]
        return tuple(found)

    def working(self, pids: Iterable[int], *, since_last: bool = True) -> bool | None:
        """Whether any of ``pids`` is working (see :meth:`busy`); ``None`` if unknown."""
        found = self.busy(pids, since_last=since_last)
        return None if found is None else bool(found)

    def close(self) -> None:
        """Close the procfs files this watch keeps open."""
        self._files.close()
        self._last.clear()


# --------------------------------------------------------------------------------------------
# Sockets, pipes and terminals: queues


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
    return _ioctl_int(_fd(file), _FIONREAD)


def unacknowledged_bytes(file: FileLike) -> int | None:
    """What we sent on a socket that the other side has not yet taken.

    ``SIOCOUTQ``.  TCP: bytes the peer's kernel has not acknowledged (on loopback, almost
    always 0 a moment after the write).  Unix sockets: the memory our sent messages occupy
    until the peer has read each completely (0 exactly when it has read everything; not a
    byte count).  ``None`` for a listening socket, a pipe, or off Linux.
    """
    return _ioctl_int(_fd(file), _OUTQ)


def terminal_unread_bytes(file: FileLike) -> int | None:
    """Bytes waiting to be read from a terminal (a pty's master or slave), those on the way too.

    Bytes written to the other side of a pty reach this side's input buffer through a kernel
    work queue; a zero-timeout poll of this side makes the kernel finish that work first, so
    the count that follows includes them.  Reads nothing.  ``None`` if not a terminal.
    """
    fd = _fd(file)
    if _FIONREAD is None or not os.isatty(fd):
        return None
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    poller.poll(0)
    return _ioctl_int(fd, _FIONREAD)


# --------------------------------------------------------------------------------------------
# TCP_INFO


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
    if _TCP_INFO is None:
        return None
    data = _getsockopt(sock, fd, socket.IPPROTO_TCP, _TCP_INFO, _TCP_INFO_ASK)
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


# --------------------------------------------------------------------------------------------
# Peers


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


_NETLINK_SOCK_DIAG: Final = 4
_SOCK_DIAG_BY_FAMILY: Final = 20
_NLM_F_REQUEST: Final = 1
_NLMSG_ERROR: Final = 2
_NOCOOKIE: Final = 0xFFFFFFFF
_UDIAG_SHOW_PEER: Final = 4
_UNIX_DIAG_PEER: Final = 2
_NETLINK_HEADER: Final = struct.Struct("=IHHII")


def _diag(request: bytes) -> bytes | None:
    """One exact sock_diag request; the reply's payload, or None (not found, not available).

    A socket per request: no state to share between threads or across a fork, nothing left
    open; the kernel answers during the send, so the receive never waits.
    """
    if _AF_NETLINK is None:
        return None
    header = _NETLINK_HEADER.pack(
        _NETLINK_HEADER.size + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, 1, 0
    )
    try:
        with socket.socket(_AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as channel:
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
        with open(f"{_PROC}/net/{table}", "rb") as listing:
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
    if _TCP_INFO is None:
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
    if _SO_PEERCRED is None:
        return None
    data = _getsockopt(sock, fd, socket.SOL_SOCKET, _SO_PEERCRED, 12)
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
    folder = f"{_PROC}/{pid}/fd"
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
        entries = os.listdir(_PROC)
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


# --------------------------------------------------------------------------------------------
# What a sleeping process waits for


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
        tids = os.listdir(f"{_PROC}/{pid}/task")
    except OSError:
        return None
    return _any_wakes(
        (f"{_PROC}/{pid}/task/{tid}/syscall" for tid in tids if tid not in skip), table
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


_NLM_F_DUMP: Final = 0x300
_NLMSG_DONE: Final = 3
_INET_DIAG_INFO: Final = 2
_TCP_ESTABLISHED: Final = 1
_TCP_LISTEN_STATE: Final = 10


def _diag_dump(request: bytes) -> list[bytes] | None:
    """A sock_diag dump request; each reply message's payload, or None (not available)."""
    if _AF_NETLINK is None:
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
        with socket.socket(_AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as channel:
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


def _socket_inodes(pid: int) -> set[int] | None:
    folder = f"{_PROC}/{pid}/fd"
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
    folder = f"{_PROC}/self/fd"
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
        tids = os.listdir(f"{_PROC}/self/task")
    except OSError:
        return None
    found = []
    watches: dict[int, bool] = {}
    needle = f"tfd: {fd:8d} ".encode()
    for tid in tids:
        line = _read(f"{_PROC}/self/task/{tid}/syscall")
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
                info = _read(f"{_PROC}/self/fdinfo/{first}") or b""
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
    return _any_wakes((f"{_PROC}/self/task/{tid}/syscall" for tid in wanted), table)
