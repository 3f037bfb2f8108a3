"""Outside work: what the world outside the loop may still deliver, and when time may move.

The virtual loop asks this module one question whenever it is idle -- nothing ready, the next
timer in the future: *may virtual time move to that timer now?*  The answer depends on what is
still going on outside the loop, which this module models explicitly.

What is outside work
--------------------
Outside work is what the outside may still **answer**, not everything that is open:

* **thread jobs** -- ``run_in_executor`` / ``asyncio.to_thread``, anyio's ``to_thread`` workers,
  and any executor job whose future was wrapped into this loop (``asyncio.wrap_future(
  pool.submit(...))``), while they run; a job that is itself blocked waiting for *this* loop
  (``run_coroutine_threadsafe(...).result()``, anyio's ``from_thread.run``) is not, or neither
  side could go on; a job blocked on another pool's future, a process pool's future or
  another loop still is, and so is one blocked on a plain future while another thread works
  (it may be the one that completes it);
* **a thread that has handed the loop a callback** (``call_soon_threadsafe`` from another
  thread: aiosqlite's worker, a driver's thread, the far side of a portal), *while the
  machine says it is working* -- runnable, running, or burning CPU, read from the kernel
  (:class:`~virtualtime._shared._threads.Speakers`); blocked on its queue, an event or the
  loop, it owes nothing.  Where the machine cannot tell (not Linux, no procfs), for
  :data:`POKE_GRACE` real seconds after it last spoke.  ``call_soon_threadsafe`` from the
  loop's own thread (APScheduler 3, aiocron) is nobody outside;
* **a thread that has just started**, for the same :data:`POKE_GRACE` from when the loop first
  sees it, and after that while it keeps working, until the loop first sees it idle: a plain
  ``threading.Thread`` the program starts is usually about to speak to the loop (a client
  connecting to the loop's server, a producer filling a queue); pool workers, anyio's
  workers, asyncio's ``waitpid`` threads and the loop's own thread are left to the rules for
  jobs and children;
* **child processes** started through the loop that are still running while something waits
  for them: their exit (``proc.wait()``, ``communicate()``) or their output -- under every
  child watcher (a pidfd, a watcher thread, or a plain ``waitpid`` thread);
* **connections to peers outside this loop** (a server in another thread or process, a real
  redis): while a connect is in progress, while bytes wait to be sent, while a TLS handshake or
  shutdown is in progress, and while the kernel says the peer may still answer -- bytes in
  flight, the peer working, an answer owed that it may still wake up to give
  (:class:`~virtualtime._shared._peers.Connections`, which the trio clock asks too); for a peer
  on another machine, while a request is unanswered and for :data:`GRACE` after data arrived;
* **a pseudo-terminal** with bytes on their way to our side, or while another thread works;
* **data in the kernel between two sockets of this loop** (both ends ours) that has not been
  delivered yet -- a small TLS record held back by Nagle's algorithm, for example;
* **a pending real alarm** (``signal.alarm`` / ``setitimer(ITIMER_REAL)``) while the loop has a
  handler for ``SIGALRM``.

What is *not* outside work: idle connections (a keep-alive HTTP connection, a subscribed
pub/sub channel -- answered, and quiet), sockets whose both ends belong to this loop (an
in-process server and its client), listening sockets, the loop's self-pipe.

The rule while outside work is pending
--------------------------------------
Virtual time may not overtake real work.  While outside work is pending the loop does not jump:
the clock stands still, and a timer fires only once as much *real* time has passed as the
timer's virtual delay, counted from when that timer was set or when the outside work began,
whichever is later (one allowance per timer: :class:`Allowances`) -- then time steps to
exactly that timer's instant.  So a quick answer arrives at the same virtual instant on every
machine, however slow the machine; a peer that never answers still lets a timeout fire, after
about as much real time as the timeout says; and a timer set while a thread works still fires.
With no outside work, time jumps at once, as in a closed world.

Deadlocks
---------
When no timer is pending and no outside work is pending, the loop may still be *kept alive* by
something outside that could speak at any time without owing us anything: an idle connection
to an outside peer, a running child, a registered pipe or other file descriptor, a signal
handler.  Then it waits, using no CPU.  Otherwise it is a deadlock -- including when the only
thing left is a listening socket nobody connects to, or sockets whose both ends are ours: in a
test that is almost always a bug, and a hang would hide it.  (A server meant to wait for
clients from outside runs with ``deadlock_timeout=math.inf``, or under ``run_forever()``.)
A program run as a service is the other case: ``virtualtime run`` calls
:func:`wait_for_clients` on the loops it runs, and then a listening socket keeps the loop
alive like an idle connection does -- it waits, in real time, for a client from outside.

The interface the loop uses is small: :meth:`OutsideWork.quiet` (is there nothing at all
outside? the loop's fast path) and :meth:`OutsideWork.calm` (the same answer, from a count of
what was added since it was last given -- the loop's plain round),
:meth:`OutsideWork.wait_before` (how long, in real seconds, before time may move to a tick),
:meth:`OutsideWork.keeps_alive` and :meth:`OutsideWork.describe` (for the deadlock decision
and its report), plus the registration calls for jobs, holds and
children.

Where the pieces live: this module holds the model (:class:`OutsideWork`, the rules and the
decisions); what it reads of the world is in modules of its own -- :mod:`._sockets` (the
loop's counting selector and what each registered descriptor is), :mod:`._thread_jobs` (what
a thread working for the loop is blocked on), :mod:`._children` (whether a child process is
still awaited) and :mod:`._allowances` (when each timer's real-time allowance began).

Part of ``engine``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import selectors
import signal
import sys
import threading
import time as _time_module
import weakref
from collections.abc import Callable
from types import FrameType
from typing import Any, Final

from .._shared._machine import WORKING_STATES as _WORKING_STATES
from .._shared._machine import tcp_info as _tcp_info
from .._shared._machine import terminal_unread_bytes as _terminal_unread_bytes
from .._shared._machine import thread_state as _thread_state
from .._shared._peers import GRACE as _PEER_GRACE
from .._shared._peers import Connections
from .._shared._threads import (
    ANYIO_ASYNCIO,
    THREAD_GRACE,
    NewThreads,
    Speakers,
    thread_table_size,
)
from .._shared._threads import threads as _threads
from .._shared._threads import worker_threads as _worker_threads
from .._shared._time import TICKS_PER_SECOND
from ._allowances import Allowances
from ._children import _child_awaited, _child_live
from ._foreign import calls_in_flight
from ._seeding import timer_number
from ._sockets import CountingSelector, _Socket, classify
from ._thread_jobs import (
    _DELIVERIES,
    _blocked_on,
    _chain_callbacks,
    _in_process_pool,
    _other_threads_frames,
    _work_item_future,
    completed_by,
    wrapped_into,
)

__all__ = [
    "GRACE",
    "POKE_GRACE",
    "OutsideWork",
    "wait_for_clients",
]

GRACE: Final = _PEER_GRACE
"""Real seconds after data arrived from a peer on another machine during which more may still
follow (a peer on this machine is asked instead: see :mod:`virtualtime._shared._peers`)."""

POKE_GRACE: Final = THREAD_GRACE
"""Real seconds a thread that just called ``call_soon_threadsafe`` may still speak again."""

_TIE_WALK_MAX: Final = 4096
"""Most heap entries looked at to find the newest timer due at one instant."""

_RECHECK_MIN: Final = 0.0005
_RECHECK_MAX: Final = 0.05
"""Real-time re-check interval bounds while outside work cannot wake the loop by itself."""

_real_monotonic: Final = _time_module.monotonic
_thread_table_size: Final = thread_table_size  # every round of the fast path (see _threads)
_modules: Final = sys.modules
_thread_table: Final[dict[int, threading.Thread]] = threading._active  # type: ignore[attr-defined]
_UNSEEN: Final = object()
_ANYIO_ASYNCIO: Final = ANYIO_ASYNCIO

_INFLIGHT_MAX: Final = 0.25
"""Longest real time bytes between two sockets of this loop may hold time still."""

_PENDING_TLS: Final = frozenset({"DO_HANDSHAKE", "FLUSHING", "SHUTDOWN"})


class OutsideWork:
    """The model of outside work for one :class:`~virtualtime.VirtualEventLoop`.

    ``selector`` is the loop's own selector (its registrations are the descriptors the loop
    watches), ``self_pipe`` the loop's wake-up descriptor, ``signals`` the loop's dict of
    signal handlers (empty where the loop has none).
    """

    # The two counts every round of the loop compares are slots: the compiled core reads them
    # at their offsets (_cwake.c, setup_loop).  Everything else lives in the instance dict.
    __slots__ = ("__dict__", "__weakref__", "calm_at", "changes")

    def __init__(self, loop: asyncio.AbstractEventLoop, selector: CountingSelector) -> None:
        self._loop = loop
        self._selector = selector
        self.jobs: set[concurrent.futures.Future[Any]] = set()
        """Executor jobs submitted through ``run_in_executor`` and not finished yet."""
        self.job_threads: set[int] = set()
        """Idents of the threads running those jobs right now."""
        self.holds = 0
        """Explicit holds (the default executor shutting down)."""
        self.children: weakref.WeakSet[Any] = weakref.WeakSet()
        """Subprocess transports started through the loop."""
        self.signals: dict[int, Any] = {}
        self.self_pipe: int = -1
        self.allowances = Allowances()
        """When each pending timer's real-time allowance began (see :meth:`wait_before`)."""
        self._seq_counter: object = None
        self._poked = -1.0
        self._recheck = _RECHECK_MIN
        self.changes = 0
        """Bumped by everything that can make the outside busy: a job, a child, a
        registration, a signal handler, a hold, a poke from another thread.  Nothing else
        can, so while it is unchanged since :meth:`quiet` last said yes (and no other thread
        exists), the outside is still quiet: :meth:`calm` answers in two comparisons."""
        self.calm_at = -1
        """The value of :attr:`changes` when :meth:`quiet` last found nothing outside."""
        self._new_threads = NewThreads()  # the threads alive now are not new
        self._speakers = Speakers()
        """The threads that have handed this loop a callback (see :meth:`poked`)."""
        self._fresh: dict[int, threading.Thread] = {}
        """New threads (native id -> thread) not yet seen idle after their grace."""
        self._busy: frozenset[int] | object | None = _UNSEEN
        """This round's look at the other threads (:meth:`_busy_now`)."""
        # Weakly: the model is then no cycle of its own (see VirtualEventLoop._vt_let_go).
        self.connections = Connections(_weak_call(self._others_working))
        """What is known of each connection to a peer outside the loop (may it still answer?)."""
        self.listeners_wait = False
        """Whether a listening socket keeps the loop alive (see :func:`wait_for_clients`)."""
        selector.world = self

    # ------------------------------------------------------------ registration

    def track_job(self, job: concurrent.futures.Future[Any]) -> None:
        """A job was submitted to an executor on the loop's behalf."""
        self.jobs.add(job)
        self.changes += 1

    def job_done(self, job: concurrent.futures.Future[Any]) -> None:
        """Called (in any thread) once the job's result has been handed to the loop."""
        self.jobs.discard(job)

    def poked(self, callback: Callable[..., object]) -> None:
        """A thread handed the loop a callback (``call_soon_threadsafe``); runs in that thread.

        A thread that spoke to the loop is likely to speak again -- anyio's ``BlockingPortal``
        starts a task, then cancels it; aiosqlite's worker answers every query -- so from now
        on it is outside work while the machine says it is working (see :class:`Speakers`;
        where the machine cannot tell, for :data:`POKE_GRACE` real seconds after it spoke).
        Not counted: the loop's own thread (a library that calls ``call_soon_threadsafe`` from
        inside the loop: nothing outside is involved), a thread running a job of the loop, and
        a pool worker delivering a job's result (its job is over; the job rules covered it).
        """
        ident = threading.get_ident()
        if ident == getattr(self._loop, "_thread_id", None):  # asyncio-private, read only
            return
        if ident in self.job_threads:
            return
        if (
            getattr(callback, "__name__", "") in _DELIVERIES
            and _thread_table.get(ident) in _worker_threads()
        ):
            return
        self._speakers.note()
        # After the note, never before: quiet() reads changes first and the speakers second,
        # so a poke it missed always leaves changes different from the calm_at it records.
        self.changes += 1

    def thread_started(self, *, refresh: bool = True) -> bool:
        """Has a thread started since the loop last looked?  If so, it counts as a poke.

        A plain thread the program starts while the loop runs -- a blocking client that will
        connect to the loop's server, a producer that will ``call_soon_threadsafe`` -- has not
        spoken yet when the loop next goes idle: the loop cannot know it is about to, and
        would jump to the next timer (the client's ``wait_for`` deadline) first.  So a thread
        seen for the first time holds time for :data:`POKE_GRACE`, as a thread that just
        poked does; from then on only what it does (a connect, a call, a job) holds time.
        Which threads count is :class:`NewThreads`' rule; ``refresh=False`` right after
        :meth:`_foreign_workers` (see :meth:`NewThreads.look`).
        """
        new_threads = self._new_threads
        if not new_threads.look(self._loop, refresh=refresh):
            return False
        for thread in new_threads.new:
            if thread.native_id is not None:
                self._fresh[thread.native_id] = thread
        self._poked = new_threads.seen_at
        self.changes += 1  # after _poked, as in poked()
        return True

    def track_child(self, transport: Any) -> None:
        """A child process was started through the loop."""
        self.children.add(transport)
        self.changes += 1

    # ------------------------------------------------------------------ queries

    def calm(self) -> bool:
        """:meth:`quiet`, answered from what has changed since it last said yes.

        For a caller that asks often (the loop's general round, the sim kit's in-place jumps);
        the plain round inlines the first half, where a method call would cost more than the
        test.
        """
        return (self.calm_at == self.changes and _thread_table_size() == 1) or self.quiet()

    def quiet(self) -> bool:
        """Is there nothing at all outside the loop?  (Decided in full; see :meth:`calm`.)"""
        changes = self.changes  # read before the state it stands for (see poked())
        if (
            self._selector.registered <= 1
            and not self.jobs
            and not self.holds
            and not self.signals
            # weakref-private: the WeakSet's own set of references (len() of a WeakSet is a
            # Python method, on every round).  A reference whose child just died may linger
            # there a moment; that only sends the loop down its general path, which asks the
            # full model.  A canary test pins the attribute.
            and not self.children.data  # type: ignore[attr-defined]
            and (
                _thread_table_size() == 1
                or not (self._foreign_workers() or self.thread_started(refresh=False))
            )
            # A thread that just started may be about to speak (see thread_started()); one
            # that spoke may speak again while it works: the general path asks (see poked()).
            and self._poked < 0
            and not self._speakers
            and not self._fresh
        ):
            self.calm_at = changes
            return True
        return False

    def _foreign_workers(self) -> bool:
        """Is any worker thread alive besides the loop's own thread (see _worker_threads)?"""
        own = getattr(self._loop, "_thread_id", None)  # asyncio-private: the running thread
        return any(thread.ident != own for thread in _worker_threads())

    def threads_busy(self) -> bool:
        """Is a thread doing real work whose answer this loop will wait for?"""
        if self.holds:
            return True
        idents: list[int] = []
        if self.jobs:
            if len(self.jobs) > len(self.job_threads):
                return True  # submitted and not started yet, or finishing
            idents.extend(self.job_threads)
        if _thread_table_size() > 1 and self._foreign_workers():
            idents.extend(self._other_worker_threads(idents))
        if self._speakers:
            busy = self._busy_now()
            if busy is not None and self._speakers.working(busy):
                return True  # a thread that spoke to the loop is working: it may speak again
        if not idents:
            return False
        frames = _other_threads_frames()
        loop = self._loop
        for ident in idents:
            waited = _blocked_on(frames.get(ident))
            if waited is None or waited.done():
                return True  # working, or about to wake up with the answer it waited for
            if not completed_by(waited, loop) and not self._is_free(waited, frames, ident):
                return True  # waiting on another pool or another loop: still outside work
        return False

    def _fresh_working(self, real_now: float) -> bool:
        """Is a thread that started during the run still working on its way to speak?

        A new thread holds time for :data:`POKE_GRACE` from when the loop first saw it (see
        :meth:`thread_started`); where the machine can tell, it goes on holding time after
        that for as long as it works -- a producer doing 60 ms of work before its first
        answer -- and stops counting the first time it is seen idle (a heartbeat, a thread
        blocked on a queue).  From then on only what it does holds time.
        """
        if self._new_threads.seen_at + POKE_GRACE > real_now:
            return False  # still in the grace (see pending)
        fresh = self._fresh
        busy = self._busy_now()
        if busy is None:
            fresh.clear()  # nothing to go on but the grace, which is over
            return False
        working = False
        for tid, thread in list(fresh.items()):
            # Working *now*: runnable or running at this look (the look's own reads woke it if
            # it waits for the GIL).  Its clock having moved since the last look is not enough
            # here -- a heartbeat that beats between two looks has not started to speak.
            if tid in busy and _thread_state(tid) in _WORKING_STATES:
                working = True  # counted this round even if it has just spoken
            else:
                del fresh[tid]
                continue
            if self._speakers.spoke(tid) or not thread.is_alive():
                del fresh[tid]  # from now on the rule for threads that spoke covers it
        return working

    def _handed_over(self) -> bool:
        """Has another thread put a callback in the loop's ready queue since it went idle?

        The loop goes idle only with nothing ready, so anything there now came from outside
        (``call_soon_threadsafe``).  A thread that spoke and at once blocked again (aiosqlite's
        worker back on its queue) is not working any more, but what it said is waiting: time
        must not move before the loop has run it.  asyncio-private: the loop's ``_ready``
        deque, read only.
        """
        return bool(getattr(self._loop, "_ready", None))

    def _busy_now(self) -> frozenset[int] | None:
        """The other threads of the process working now (native ids; None: unknown).

        Looked at once per round (see :meth:`pending`), and only when a rule needs it.
        """
        busy = self._busy
        if busy is _UNSEEN:
            busy = self._busy = self._speakers.look(self._fresh)
        return busy  # type: ignore[return-value]

    def _is_free(
        self,
        future: concurrent.futures.Future[Any],
        frames: dict[int, FrameType],
        waiter: int,
    ) -> bool:
        """Will nothing but this loop complete ``future``, which a job thread waits on?

        A plain Future that no executor runs (anyio's run_sync_from_thread, a portal's task)
        is set by the loop -- unless a process pool runs it, or another thread is working: a
        plain thread may be about to complete it.  (Where the machine cannot tell whether a
        thread works, the loop is assumed to.)
        """
        if any(
            getattr(cb, "__name__", "") in ("_call_check_cancel", "_call_set_state")
            for cb in _chain_callbacks(future)
        ):
            return False
        if any(_work_item_future(frame) is future for frame in frames.values()):
            return False
        if _in_process_pool(future):
            return False
        busy = self._busy_now()
        if busy:
            thread = _thread_table.get(waiter)
            own = getattr(thread, "native_id", None)
            if any(tid != own for tid in busy):
                return False
        return True

    def _other_worker_threads(self, known: list[int]) -> list[int]:
        """anyio workers of this loop, and pool threads running a job wrapped into it."""
        found: list[int] = []
        loop = self._loop
        anyio_loaded = _ANYIO_ASYNCIO in _modules
        frames = _other_threads_frames()
        for thread in _worker_threads():
            ident = thread.ident
            if ident is None or ident in known:
                continue
            idle = getattr(thread, "idle_workers", None) if anyio_loaded else None
            if idle is not None:
                # anyio runs to_thread.run_sync jobs on its own worker threads (not an
                # executor): a worker belongs to a loop (``.loop``) and is busy while it is
                # not in its pool's idle deque.  Duck-typed; a canary test pins it.
                if (
                    getattr(thread, "loop", None) is loop
                    and not getattr(thread, "stopping", False)
                    and thread.is_alive()
                    and thread not in idle
                ):
                    found.append(ident)
                continue
            job = _work_item_future(frames.get(ident))
            if job is not None and wrapped_into(job, loop):
                found.append(ident)
        return found

    def children_pending(self) -> bool:
        """Is a running child awaited (its exit or its output)?"""
        return any(_child_awaited(child) for child in self.children_running())

    def children_running(self) -> list[Any]:
        """Running children; finished ones are forgotten."""
        running = []
        for child in list(self.children):
            if _child_live(child):
                running.append(child)
            else:
                self.children.discard(child)
        return running

    def alarm_pending(self) -> bool:
        """Is a real alarm pending that this loop will handle?"""
        if signal.SIGALRM not in self.signals:
            return False
        return signal.getitimer(signal.ITIMER_REAL)[0] > 0

    def _kind(self, key: selectors.SelectorKey) -> _Socket:
        kinds = self._selector.kinds
        entry = kinds.get(key.fd)
        if entry is None or entry.kind == "connecting":
            entry = kinds[key.fd] = classify(key, self._selector, self._loop)
        return entry

    def _sockets_now(self) -> list[tuple[int, _Socket]]:
        """Every registered descriptor but the self-pipe, classified (once per registration)."""
        return [
            (key.fd, self._kind(key))
            for key in list(self._selector.get_map().values())
            if key.fd != self.self_pipe
        ]

    def saw_events(self, events: list[tuple[selectors.SelectorKey, int]]) -> None:
        """The loop's selector reported these events: note answers from outside peers.

        Data arriving from an outside peer answers what we sent before it: the connection
        model notes that now (:meth:`~virtualtime._shared._peers.Connections.answered`), in
        the order the kernel cannot give it a look later.
        """
        for key, mask in events:
            if not mask & selectors.EVENT_READ or key.fd == self.self_pipe:
                continue
            if self._kind(key).peer is None:
                continue
            self.connections.answered(key.fd)  # (and acknowledged at once)

    def _tls_pending(self, fd: int) -> bool:
        transports = getattr(self._loop, "_transports", None)
        if transports is None:
            return False
        transport = transports.get(fd)
        protocol = getattr(transport, "_protocol", None)
        # asyncio-private: sslproto.SSLProtocol keeps its state in _state (3.11+).
        state = getattr(protocol, "_state", None)
        return getattr(state, "name", None) in _PENDING_TLS

    def sockets_pending(self, real_now: float) -> float | None:
        """Is socket I/O with an outside peer (or in the kernel) pending?

        Returns None if not; else how long (real seconds) before it is worth looking again
        without an event (``inf``: only an event can change it).
        """
        recheck: float | None = None
        for fd, entry in self._sockets_now():
            kind = entry.kind
            if kind in ("listening", "other"):
                continue
            if kind == "tty":
                # Bytes written to a pseudo-terminal reach the other side a moment later,
                # through a kernel work queue; the count pushes them through first.
                if _terminal_unread_bytes(fd) or self._any_thread_working():
                    # Or another thread of ours works, and may be writing to the other side
                    # (a terminal has no peer the kernel can name).
                    recheck = _RECHECK_MIN
                continue
            if kind == "unix":
                key = self._selector.get_map().get(fd)
                if self._tls_pending(fd) or (
                    key is not None and key.events & selectors.EVENT_WRITE
                ):
                    return float("inf")
                wait = self.connections.pending(fd, client=True, real_now=real_now)
                if wait is not None:
                    recheck = wait if recheck is None else min(recheck, wait)
                continue
            key = self._selector.get_map().get(fd)
            if kind == "connecting":
                return _RECHECK_MAX
            if kind == "inside":
                # Bytes in the kernel between two sockets of ours (a record held back by
                # Nagle's algorithm until the peer's delayed ACK): they will be delivered by
                # themselves, soon -- unless the receiver is full, so hold at most briefly.
                info = _tcp_info(fd)
                if info is not None and info.notsent_bytes:
                    if entry.inflight_since < 0:
                        entry.inflight_since = real_now
                    if real_now - entry.inflight_since < _INFLIGHT_MAX:
                        recheck = _RECHECK_MIN
                else:
                    entry.inflight_since = -1.0
                continue
            peer = entry.peer
            assert peer is not None
            if key is not None and key.events & selectors.EVENT_WRITE:
                return float("inf")  # bytes wait to be sent, or a connect completes
            if self._tls_pending(fd):
                return float("inf")
            wait = self.connections.pending(fd, client=not peer.accepted, real_now=real_now)
            if wait is not None:
                recheck = wait if recheck is None else min(recheck, wait)
        return recheck

    def _any_thread_working(self) -> bool:
        """Is any other thread of this process working now (every one looked at)?"""
        if _thread_table_size() == 1:
            return False
        own = threading.get_native_id()
        tids = [t.native_id for t in _threads() if t.native_id is not None and t.native_id != own]
        return bool(self._speakers.look(tids))

    def _others_working(self) -> bool | None:
        """Is another thread of this process working (a peer in another thread)?"""
        busy = self._busy_now()
        return None if busy is None else bool(busy)

    # ------------------------------------------------------------- decisions

    def pending(self, real_now: float) -> float | None:
        """Real seconds before outside work should be looked at again, or None if none.

        ``inf`` means: only an event (I/O, a thread's wake-up) can change it.
        """
        changes = self.changes
        if self._handed_over():
            return _RECHECK_MIN
        recheck = self._pending(real_now)
        if recheck is None and (self.changes != changes or self._handed_over()):
            # A thread spoke while the rules were being asked (and may have blocked again
            # before a rule looked at it): what it said comes first.
            return _RECHECK_MIN
        return recheck

    def _pending(self, real_now: float) -> float | None:
        self._busy = _UNSEEN  # a new round: look at the threads afresh (once, if needed)
        if self.threads_busy() or (self._fresh and self._fresh_working(real_now)):
            # The thread may also be about to block on this loop instead (it just called
            # run_coroutine_threadsafe), which sends no wake-up: so look again after a short,
            # growing real wait rather than sleeping until it answers.
            recheck = self._recheck
            self._recheck = min(recheck * 2, _RECHECK_MAX)
            return recheck
        self._recheck = _RECHECK_MIN
        if _thread_table_size() > 1:
            self.thread_started(refresh=False)  # threads_busy() has just read the threads
        if self._poked >= 0:
            left = self._poked + POKE_GRACE - real_now
            if left > 0:
                return left
            self._poked = -1.0
        if self._speakers and self._busy_now() is None:
            # The machine cannot say what the threads that spoke are doing: guess, from the
            # last time one spoke.
            left = self._speakers.spoke_at + POKE_GRACE - real_now
            if left > 0:
                return left
        if self.children and self.children_pending():
            return _RECHECK_MAX  # a watcher thread or pidfd wakes us; recheck for safety
        if calls_in_flight(self._loop):
            return _RECHECK_MAX  # a library's own thread answers (see _foreign)
        if self.signals and self.alarm_pending():
            return signal.getitimer(signal.ITIMER_REAL)[0] + _RECHECK_MIN
        if self._selector.registered > 1:
            return self.sockets_pending(real_now)
        return None

    def wait_before(self, target: int, now: int) -> float:
        """Real seconds to wait before virtual time may move from tick ``now`` to ``target``.

        0 when time may move now.  While outside work is pending, the timer at ``target`` may
        fire only once as much real time has passed as its virtual delay, counted from when
        that timer was set or when the outside work began, whichever is later (its
        *allowance*, see :class:`Allowances`); once no work is pending, the rounds are
        forgotten and time may jump.
        """
        real_now = _real_monotonic()
        recheck = self.pending(real_now)
        if recheck is None:
            if self.allowances:
                self.allowances.clear()
            return 0.0
        allowances = self.allowances
        real_at, tick_at = allowances.anchor(
            self._next_seq(), real_now, now, self._newest_seq(target)
        )
        if allowances.crowded():
            heap: list[tuple[int, int, int, Any]] = getattr(self._loop, "_vt_heap", [])
            drives: list[tuple[int, int, Any]] = getattr(self._loop, "_vt_drives", [])
            allowances.keep_for(
                [timer_number(entry[2]) for entry in heap]
                + [timer_number(entry[1]) for entry in drives]
            )
        due = real_at + (target - tick_at) / TICKS_PER_SECOND - real_now
        if due <= 0:
            # The allowance is spent -- unless an answer is already waiting to be run.
            return _RECHECK_MIN if self._handed_over() else 0.0
        return min(due, recheck)

    def _next_seq(self) -> int:
        """The number the loop's next timer will get (read, not taken).

        A seeded loop's sequence numbers carry random high bits above the timer's number
        (see :func:`~virtualtime._engine._seeding.timer_number`): its Chooser counts them.
        """
        chooser = getattr(self._loop, "_vt_chooser", None)
        if chooser is not None:
            return int(chooser.timers_made)
        counter = self._seq_counter
        if counter is None:
            # The loop numbers its timers and drives with one itertools.count (TimerQueue's
            # next_seq, a bound __next__): its repr shows the next number without taking it.
            queue = getattr(self._loop, "_vt_timers", None)
            counter = self._seq_counter = getattr(getattr(queue, "next_seq", None), "__self__", 0)
        text = repr(counter)
        if not text.startswith("count("):
            return 0  # not a counter: every timer counts from the start of the outside work
        return int(text[6:-1])

    def _newest_seq(self, target: int) -> int:
        """The newest sequence number among the timers and drives due at tick ``target``.

        Several timers may share an instant -- timeouts set during one pending stretch, while
        virtual time stands still, all land on the same tick -- and time reaching it fires
        them all: the one set last decides.  A heap's entries equal to its head are found by
        walking down from the root while the tick matches (bounded, for a huge tie).
        """
        newest = -1
        heap: list[tuple[int, int, int, Any]] = getattr(self._loop, "_vt_heap", [])
        if heap and heap[0][0] == target:
            stack = [0]
            size = len(heap)
            visited = 0
            while stack and visited < _TIE_WALK_MAX:
                index = stack.pop()
                entry = heap[index]
                visited += 1
                if entry[0] != target:
                    continue
                number = timer_number(entry[2])
                if number > newest:
                    newest = number
                child = 2 * index + 1
                if child < size:
                    stack.append(child)
                    if child + 1 < size:
                        stack.append(child + 1)
        drives: list[tuple[int, int, Any]] = getattr(self._loop, "_vt_drives", [])
        if drives and drives[0][0] == target and timer_number(drives[0][1]) > newest:
            newest = timer_number(drives[0][1])
        return newest

    def close(self) -> None:
        """The loop closed: let go of what the model keeps open (procfs files)."""
        self._speakers.close()
        self.connections.close()

    def let_go(self) -> None:
        """The loop closed and is to be freed by reference counting: hold it weakly, and let
        the selector (closed too) forget this model."""
        if self._selector.world is self:  # (once: a proxy cannot be proxied again)
            self._loop = weakref.proxy(self._loop)
            self._selector.world = None

    def forget(self) -> None:
        """Outside work ended (or the loop stopped): the next pending stretch re-anchors."""
        self.allowances.clear()

    def keeps_alive(self) -> bool:
        """With nothing pending, could something outside still wake the loop by itself?"""
        if self.signals or self.children_running():
            return True
        alive = _LIVE_WITH_LISTENERS if self.listeners_wait else _LIVE
        return any(entry.kind in alive for _, entry in self._sockets_now())

    def describe(self) -> list[str]:
        """What outside work is registered, for a deadlock report."""
        lines: list[str] = []
        for _, entry in self._sockets_now():
            if entry.kind == "listening":
                lines.append(f"{entry.label} (nobody outside is connected)")
            elif entry.kind == "inside":
                lines.append(f"{entry.label} (both ends in this loop)")
            else:
                lines.append(entry.label)
        for child in self.children_running():
            lines.append(f"child process {child.get_pid()} (running, not awaited)")
        if self.signals:
            names = ", ".join(sorted(signal.Signals(n).name for n in self.signals))
            lines.append(f"signal handlers: {names}")
        return lines


def _weak_call(method: Callable[[], bool | None]) -> Callable[[], bool | None]:
    """``method`` (a bound method), held weakly: None once its object is gone."""
    ref = weakref.WeakMethod(method)

    def call() -> bool | None:
        bound = ref()
        return None if bound is None else bound()

    return call


_LIVE: Final = frozenset({"outside", "other", "unix", "tty"})
"""Kinds of descriptor through which something outside may speak by itself, unasked."""
_LIVE_WITH_LISTENERS: Final = _LIVE | {"listening"}


def wait_for_clients(loop: asyncio.AbstractEventLoop) -> None:
    """Make ``loop`` wait for clients from outside while it listens, instead of deadlocking.

    By default a listening socket nobody is connected to counts for nothing in the deadlock
    decision: in a test, a server whose only pending thing is its own listener is a bug, and
    a report beats a hang.  A program *run as a service* is different -- ``virtualtime run
    server.py`` means "serve whoever connects" -- so the command calls this on every loop it
    runs: while the loop has a listening socket and nothing else can happen, it blocks in
    real time (using no CPU) until a client connects, as the stock loop would.  Everything
    else about deadlocks is unchanged; a loop that is not a virtual loop is left alone.
    """
    world = getattr(loop, "_vt_world", None)  # the loop's OutsideWork (virtual loops only)
    if isinstance(world, OutsideWork):
        world.listeners_wait = True
