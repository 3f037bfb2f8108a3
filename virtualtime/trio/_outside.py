"""The outside world as the trio clock sees it: may anything outside the run still answer?

:class:`OutsideWork` is the part of :class:`~virtualtime.trio.VirtualClock` that answers that
question (see "The outside world" in the package documentation): it classifies the tasks that
ran since the run was last idle (:meth:`~OutsideWork._absorb`), describes the descriptors they
wait on (a child, a pipe, a socket to this run or to a peer elsewhere), hears the threads that
call into the run, and asks the models shared with the asyncio loop
(:class:`~virtualtime._shared._peers.Connections`, :class:`~virtualtime._shared._threads.Speakers`)
whether a peer or a thread may still answer.  The clock asks it only when the fast path of a
jump does not apply.

It is a mixin, not a class of its own: its methods share the clock's per-run state (declared
below, set by the clock's ``__init__`` and ``start_clock``), and the clock calls them directly,
with no object in between.

Part of ``trio``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

import math
import os
import socket
import stat
import sys
import threading
import typing

import trio
import trio.lowlevel
import trio.testing

from .._shared import _machine, _peers, _threads
from . import _park
from ._tasks import (
    FD_INSIDE,
    FD_OUTSIDE,
    FD_PEER,
    W_IDLE,
    W_READ,
    W_THREAD,
    W_WRITE,
    WAKEUP_TASK,
    Wait,
    classify,
    timers_of,
)

__all__ = ["RECHECK_MIN", "OutsideWork"]

_THREAD_GRACE: typing.Final = _threads.THREAD_GRACE

RECHECK_MIN: typing.Final = 0.0005
RECHECK_MAX: typing.Final = 0.05
"""Real seconds before a thread that spoke to the run and works is looked at again: from the
first to the second, doubling while it keeps working (it may block on the run instead, which
sends no wake-up)."""

_WORKER_TARGETS: typing.Final = frozenset({"WorkerThread._work"})
"""trio's cached worker threads, by their target's ``__qualname__``: they run ``to_thread``
jobs and deliver their results, which the rules for thread jobs cover -- never speakers."""

_thread_table_size: typing.Final = _threads.thread_table_size
# threading-private, read only: the table of live threads (see _threads; a canary pins it).
_thread_table: typing.Final[dict[int, threading.Thread]] = threading._active  # type: ignore[attr-defined]


class OutsideWork:
    """The questions a :class:`~virtualtime.trio.VirtualClock` asks about the world outside its
    run: what its blocked tasks wait for, and whether a thread, a child or a peer may still
    answer (a mixin of the clock; see the module documentation)."""

    # The clock's per-run state these methods read and keep (set by VirtualClock.__init__ and
    # start_clock; what each holds is said there).
    _scheduled: list[trio.lowlevel.Task]
    _waits: dict[trio.lowlevel.Task, Wait]
    _inside_io: dict[trio.lowlevel.Task, Wait]
    _kit_own: dict[trio.lowlevel.Task, _park.Parked]
    _peer_reads: dict[trio.lowlevel.Task, int]
    _run_addresses: set[object]
    _listen_ports: set[int]
    _hold_since: float | None
    _new_threads: _threads.NewThreads
    _conns: _peers.Connections
    _speakers: _threads.Speakers
    _spoke: bool
    _said: int
    _busy: frozenset[int] | None
    _busy_round: int
    _idle_round: int
    _speak_recheck: float
    _run_ident: int | None

    # ------------------------------------------------------------ what the run waits for

    def _absorb(self) -> None:
        """Classify the tasks that ran since the last question (they are all blocked now).

        A task's wait changes only when it runs, and it runs only after being rescheduled,
        which the instrument records; so this sees every change, at a cost per task that ran.
        ``_waits`` holds what may be outside work or an idle waiter; ``_inside_io`` the tasks
        waiting on descriptors whose both ends are ours (not outside work, not a deadlock).

        It also decides when a hold on outside work restarts its real-time count (see
        :meth:`deadline_to_sleep_time`): whenever the run made progress other than a task
        going back to the same outside wait under the same timeouts (a reader of a chatty
        peer), since any such step may have set the timer that is now due.
        """
        waits = self._waits
        inside = self._inside_io
        scheduled = self._scheduled
        own = self._kit_own
        if not waits and not inside:
            # The common case: tasks that sleep, or wait on each other.
            for task in scheduled:
                if own:  # (empty unless the toolkit's vehicles run)
                    parked = own.get(task)
                    if parked is not None and parked.task is task:
                        continue  # the toolkit's own task, still in its kit wait: a sleep
                if classify(task) is not None:
                    break
            else:
                scheduled.clear()
                own.clear()
                self._hold_since = None
                return
        fresh: list[tuple[trio.lowlevel.Task, Wait]] | None = None
        progressed = False
        reads = self._peer_reads
        for task in scheduled:
            parked = own.get(task)
            wait = None if parked is not None and parked.task is task else classify(task)
            if reads:
                reads.pop(task, None)
            if wait is None:
                if waits:
                    waits.pop(task, None)
                if inside:
                    inside.pop(task, None)
                progressed = True
            elif wait.kind >= W_READ:
                if fresh is None:
                    fresh = []
                fresh.append((task, wait))
            else:
                if wait.kind != W_IDLE:
                    wait = wait._replace(timers=timers_of(task))
                previous = waits.get(task)
                if previous is None or previous.timers != wait.timers or wait.kind == W_IDLE:
                    progressed = True
                waits[task] = wait
                if inside:
                    inside.pop(task, None)
        scheduled.clear()
        own.clear()
        if fresh is not None:
            # Two passes: every socket's own address first, so that a peer seen in the same
            # batch is known to be ours.
            described = [(task, wait, self._describe_fd(task, wait)) for task, wait in fresh]
            for task, wait, (fd_class, peer, number, port) in described:
                if fd_class == FD_INSIDE and not wait.in_thread_job:
                    waits.pop(task, None)
                    if task.name != WAKEUP_TASK:
                        inside[task] = wait
                        progressed = True
                else:
                    inside.pop(task, None)
                    wait = wait._replace(
                        fd_class=fd_class,
                        peer=peer,
                        timers=timers_of(task),
                        number=number,
                        port=port,
                    )
                    previous = waits.get(task)
                    if (
                        previous is None
                        or previous.fd is not wait.fd
                        or previous.timers != wait.timers
                    ):
                        progressed = True
                    waits[task] = wait
                    if fd_class == FD_PEER and wait.kind == W_READ:
                        reads[task] = number
        if progressed:
            self._hold_since = None

    def _idle_waiters(self) -> bool:
        return bool(self._waits) and any(wait.kind == W_IDLE for wait in self._waits.values())

    def _outside_work(self, real_now: float) -> float | None:
        """May anything outside this run still answer?  ``None``: no, time may move.

        Otherwise the real seconds after which to look again without an event (``inf``: only
        an event -- I/O, a thread's result -- can change the answer).
        """
        found: float | None = None
        if self._waits:
            thread_waits = callbacks = 0
            for wait in self._waits.values():
                kind = wait.kind
                if kind == W_THREAD:
                    thread_waits += 1
                elif wait.in_thread_job:
                    callbacks += 1
                if kind >= W_READ:
                    again = self._fd_pending(wait, real_now)
                    if again is not None and (found is None or again < found):
                        found = again
            active = trio.testing.active_thread_count()
            # A thread job is working unless it is blocked calling back into trio; if the
            # clock cannot account for every job it keeps time still -- the safe side.  Its
            # result wakes trio.
            if active and (thread_waits > 0 or thread_waits + callbacks < active):
                found = math.inf if found is None else found
        if self._spoke:
            again = self._speakers_pending(real_now)
            if again is not None and (found is None or again < found):
                found = again
        # A thread that just started may be about to speak (see _threads.NewThreads).
        fresh = self._fresh_thread(real_now)
        if fresh and (found is None or fresh < found):
            found = fresh
        return found

    def _speakers_pending(self, real_now: float) -> float | None:
        """Is a thread that called into this run working (so it may call again)?

        A thread that handed the run a callback -- the far side of a portal, a
        ``trio.from_thread`` caller -- is outside work exactly while the machine says it is
        working (see :class:`~virtualtime._shared._threads.Speakers`): it may be about to
        cancel the task it just started.  Blocked, it owes nothing.  Where the machine cannot
        tell, it holds time for a grace after it last spoke.
        """
        speakers = self._speakers
        self._spoke = False  # before reading them: a thread that speaks now sets it again
        if not speakers:
            return None
        busy = self._busy_now()  # forgets the threads that have ended
        if not speakers:
            return None
        self._spoke = True
        if busy is None:
            left = speakers.spoke_at + _THREAD_GRACE - real_now
            return left if left > 0 else None
        if speakers.working(busy):
            # It may also be about to block on the run instead, which sends no wake-up: look
            # again after a short, growing real wait.
            wait = self._speak_recheck
            self._speak_recheck = min(wait * 2, RECHECK_MAX)
            return wait
        self._speak_recheck = RECHECK_MIN
        return None

    def _busy_now(self) -> frozenset[int] | None:
        """The process's other threads working now (native ids; None: unknown), looked at
        once per idle question and only when a rule needs it."""
        if self._busy_round != self._idle_round:
            self._busy_round = self._idle_round
            self._busy = self._speakers.look()
        return self._busy

    def _others_working(self) -> bool | None:
        """Is another thread of this process working (for a peer in another thread)?"""
        busy = self._busy_now()
        return None if busy is None else bool(busy)

    def _heard(self) -> None:
        """Another thread is calling ``TrioToken.run_sync_soon`` for this run (runs in it).

        Called by the run's entry queue (see :func:`listen_to`) before the call is queued.
        The run's own thread is nobody outside; trio's cached worker threads run thread jobs
        and deliver their results, which the rules for jobs cover.
        """
        ident = threading.get_ident()
        if ident == self._run_ident:
            return
        thread = _thread_table.get(ident)
        if (
            thread is not None
            and getattr(getattr(thread, "_target", None), "__qualname__", "") in _WORKER_TARGETS
        ):
            return
        self._speakers.note()
        # After the note (the idle question reads _spoke first, the speakers second), and the
        # count last: a jump planned before this call is called off (see _after_io_wait).
        self._spoke = True
        self._said += 1

    def _fresh_thread(self, real_now: float) -> float:
        """Real seconds a thread that started during the run still holds time (0: none)."""
        if _thread_table_size() > 1:
            self._new_threads.look()  # trio's own thread is never new: it was there first
        return self._new_threads.grace_left(real_now)

    def _fd_pending(self, wait: Wait, real_now: float) -> float | None:
        """May the other end of the descriptor ``wait`` is on still answer?  (As
        :meth:`_outside_work`: ``None``, or the real seconds before looking again.)"""
        fd_class = wait.fd_class
        if fd_class == FD_INSIDE:
            return None
        if fd_class == FD_OUTSIDE or wait.kind == W_WRITE:
            return math.inf  # a child, a connect in flight, bytes waiting to be sent...
        if wait.peer in self._run_addresses:
            return None  # an in-run server and its client
        # A connection: the asyncio loop's rules (virtualtime._shared._peers).  We are its
        # client unless one of this run's listeners accepted it.
        client = wait.port not in self._listen_ports
        return self._conns.pending(wait.number, client=client, real_now=real_now)

    def _note_answers(self) -> None:
        """Data arrived for a task waiting to read from an outside peer: an answer.

        Called after trio's I/O poll, before the woken tasks run: whatever we sent on that
        connection, we sent before this data arrived (asyncio's loop tells its model the same
        on each read event).  Without it the model orders a question and its answer that came
        between two looks by the kernel's millisecond timestamps, and a tie counts as an answer
        still owed.
        """
        reads = self._peer_reads
        for task, number in list(reads.items()):
            unread = _machine.unread_bytes(number)
            if unread is None or unread > 0:
                del reads[task]  # read on its next wait (or gone)
                if unread:
                    self._conns.answered(number)  # (and acknowledged at once)

    def _describe_fd(self, task: trio.lowlevel.Task, wait: Wait) -> tuple[int, object, int, int]:
        """``(fd class, peer address, descriptor number, local TCP port)`` of what ``task``
        waits on."""
        if task.name == WAKEUP_TASK:
            return FD_INSIDE, None, -1, -1
        fd = wait.fd
        sock: socket.socket | None = fd if isinstance(fd, socket.socket) else None
        try:
            number = fd if isinstance(fd, int) else fd.fileno()  # type: ignore[attr-defined]
            mode = os.fstat(number).st_mode
        except (AttributeError, OSError, TypeError, ValueError):
            return FD_OUTSIDE, None, -1, -1  # unknown: the safe side
        if stat.S_ISSOCK(mode):
            detach = sock is None
            if sock is None:
                try:
                    sock = socket.socket(fileno=number)  # wraps the descriptor, no copy
                except OSError:
                    return FD_OUTSIDE, None, number, -1
            try:
                fd_class, peer, port = self._describe_socket(sock)
                return fd_class, peer, number, port
            finally:
                if detach:
                    sock.detach()
        if stat.S_ISFIFO(mode):
            inside = _pipe_is_ours(number, os.fstat(number))
            return (FD_INSIDE if inside else FD_OUTSIDE), None, number, -1
        return FD_OUTSIDE, None, number, -1  # a child's pidfd, a terminal, a signalfd...

    def _describe_socket(self, sock: socket.socket) -> tuple[int, object, int]:
        """``(fd class, peer address, local TCP port)`` of a socket a task waits on."""
        try:
            family = sock.family
            if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                local = sock.getsockname()
                self._run_addresses.add(local)
                if family in (socket.AF_INET, socket.AF_INET6):
                    self._listen_ports.add(local[1])
                return FD_INSIDE, None, -1  # a listener: nothing is in progress
            if family == socket.AF_UNIX:
                creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
                pid = int.from_bytes(creds[:4], sys.byteorder)
                if pid in (0, os.getpid()):
                    return FD_INSIDE, None, -1  # unconnected, or both ends in this process
                if sock.type == socket.SOCK_STREAM:
                    return FD_PEER, None, -1  # a connection to another process
                return FD_OUTSIDE, None, -1
            if family not in (socket.AF_INET, socket.AF_INET6):
                return FD_OUTSIDE, None, -1
            local = sock.getsockname()
            self._run_addresses.add(local)
            try:
                peer = sock.getpeername()
            except OSError:
                return FD_OUTSIDE, None, -1  # a connect in progress
            if sock.type != socket.SOCK_STREAM:
                return FD_OUTSIDE, None, -1  # a connected datagram socket: a reply may come
            return FD_PEER, peer, local[1]
        except (AttributeError, OSError):
            return FD_OUTSIDE, None, -1

    def _io_waiting(self) -> bool:
        """Whether a task (not trio's own) waits on a file descriptor: not a deadlock."""
        return bool(self._inside_io) or any(wait.kind >= W_READ for wait in self._waits.values())


def _pipe_is_ours(number: int, info: os.stat_result) -> bool:
    """Whether the other end of the pipe ``number`` is open in this process too."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return False
    for name in names:
        other = int(name)
        if other == number:
            continue
        try:
            found = os.fstat(other)
        except OSError:
            continue
        if found.st_ino == info.st_ino and found.st_dev == info.st_dev:
            return True
    return False
