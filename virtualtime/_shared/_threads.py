"""The other threads of the process, as both backends' models of outside work see them.

The asyncio loop's model (:mod:`virtualtime._engine._outside`) and trio's clock
(:mod:`virtualtime.trio`) ask the same questions about threads on every idle turn: is there
any other thread at all (:data:`thread_table_size`, the cheap test), which of them are
workers that may run a job for some run (:func:`worker_threads`), and has a thread just started
that may be about to speak to this run (:class:`NewThreads`).  The answers are cached and
recomputed only when the set of threads changes, so a process with many threads pays for them
only then.

threading-private: the table of live threads (``threading._active``; ``enumerate()`` copies it
under a lock every call) and a thread's ``_target``.  Canary tests pin both.

Part of ``shared``: imports nothing of virtualtime's (see tests/layout.py).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterable
from typing import Any, Final, Protocol

from ._machine import ThreadWatch, thread_cpu_ns

__all__ = [
    "ANYIO_ASYNCIO",
    "THREAD_GRACE",
    "THREAD_TABLE",
    "NewThreads",
    "Speakers",
    "forget",
    "thread_table_size",
    "threads",
    "worker_threads",
]

THREAD_GRACE: Final = 0.05
"""Real seconds a thread that just started (or just spoke to a run) may still speak again."""

_RECENT: Final = 0.02
"""Real seconds after its CPU clock last moved that a thread may still be waiting for the GIL
(see :class:`Speakers`): at least two switch intervals, which are 5 ms by default."""

ANYIO_ASYNCIO: Final = "anyio._backends._asyncio"
"""anyio's asyncio backend, by module name: its worker threads are looked for only once it is
imported (the model never imports anyio itself)."""

thread_table_size: Final = threading._active.__len__  # type: ignore[attr-defined]
"""How many threads are running (threading's own table, read without its lock): a tenth of the
cost of ``active_count()``, which takes a lock.  Read on every round of the fast paths."""

_thread_table: Final[dict[int, threading.Thread]] = threading._active  # type: ignore[attr-defined]
THREAD_TABLE: Final = _thread_table
"""threading's table of live threads itself (read, never written): the compiled core's plain
rounds check its size as :data:`thread_table_size` does."""
_cache: list[Any] = [(), ()]  # [the threads last seen, the worker threads among them]
_modules: Final = sys.modules
_real_monotonic: Final = time.monotonic


def worker_threads() -> tuple[threading.Thread, ...]:
    """The threads that may run a job for some loop: pool workers and anyio workers.

    Only these can hold work a loop must wait for without having handed it out itself (a job
    of another executor wrapped into the loop, an anyio ``to_thread`` job).  Every other
    thread -- the main thread of a process that runs the loop elsewhere, a library's monitor
    or I/O thread, a Dask worker's own machinery -- is not looked at here.  A pool worker is
    known by its target, a function named ``_worker`` (``concurrent.futures.thread`` and the
    pools built on it); an anyio worker by its ``idle_workers`` attribute.
    """
    try:
        current = tuple(_thread_table.values())
    except RuntimeError:  # changed while read (possible only without a GIL): the safe way
        current = tuple(threading.enumerate())
    seen, workers = _cache
    if current != seen:
        anyio_loaded = ANYIO_ASYNCIO in _modules
        workers = tuple(
            thread
            for thread in current
            if getattr(getattr(thread, "_target", None), "__name__", "") == "_worker"
            or (anyio_loaded and getattr(thread, "idle_workers", None) is not None)
        )
        _cache[:] = (current, workers)
    return workers  # type: ignore[no-any-return]


def forget() -> None:
    """Drop the cached view of the threads; the next call reads the table afresh.

    The cache holds the threads it last saw, and a thread object holds whatever its target
    or its attributes hold -- an anyio worker thread holds its event loop.  Once those threads
    have ended, nothing refreshes the cache until somebody asks again, so without this a
    finished run's worker (and through it the closed loop, its tasks and their results) would
    stay alive for the life of the process.  The loop calls this when it closes.  Harmless at
    any time: the next look is merely one full read of the table.
    """
    _cache[:] = ((), ())


def threads() -> tuple[threading.Thread, ...]:
    """Every running thread: the tuple :func:`worker_threads` last saw (the same object until
    the set of threads changes, so a caller can tell a change by identity)."""
    worker_threads()
    return _cache[0]  # type: ignore[no-any-return]


_COVERED_TARGETS: Final = frozenset(
    {
        "ThreadedChildWatcher._do_waitpid",  # asyncio's waitpid threads (children), to 3.13
        "_ThreadedChildWatcher._do_waitpid",  # the same, 3.14+
        "WorkerThread._work",  # trio's thread cache (to_thread jobs)
    }
)
"""Threads that other rules cover, by their target's ``__qualname__`` (see :class:`NewThreads`)."""


class _Watch(Protocol):
    def busy(self, tids: Iterable[int]) -> tuple[int, ...] | None: ...


class Speakers:
    """The threads that have spoken to one run, and what the machine says they are doing.

    A thread that has handed a run a callback or a result -- aiosqlite's worker, a database
    driver's thread, the thread on the other side of a portal -- is likely to speak again, and
    while it works, what it will say is still coming: the run must not let a virtual timeout
    overtake it.  While it is blocked (on its queue, on an event, waiting for the run itself)
    it owes nothing.  So a thread that spoke is outside work exactly while it is *working* --
    runnable, running, in uninterruptible sleep, or burning CPU -- as
    :class:`~virtualtime._shared._machine.ThreadWatch` reads it from the kernel.  A thread that
    never spoke (a heartbeat sleeping in real time, a library's monitor) is nobody's outside
    work, whatever it does.

    Where the machine cannot tell (not Linux, no procfs) :meth:`look` answers ``None`` and the
    caller falls back to a grace after the last word (:attr:`spoke_at`).

    One look watches more than the threads that spoke: a thread waiting for the GIL reads as
    working only while the look's reads hand the GIL round, and with several waiters the one
    woken may be any of them (see the notes of :mod:`virtualtime._shared._machine._threads`),
    so every thread that may want the GIL is watched together.  Which may: one whose CPU clock moved
    within the last :data:`_RECENT` real seconds (or two switch intervals, if longer) -- a
    thread waiting for the GIL wakes at every switch interval to ask for it, so its clock
    never stands still that long, while a thread parked on a queue costs one clock read per
    look instead of a procfs read.  No asyncio here: any run (a loop, a trio clock) may keep
    one.  ``watch`` is for tests (anything with ``ThreadWatch.busy``).
    """

    __slots__ = ("_clocks", "_spoke", "_watch", "spoke_at")

    def __init__(self, watch: _Watch | None = None) -> None:
        self._spoke: dict[int, threading.Thread | None] = {}
        """Native id of each thread that spoke -> its ``threading`` object (None: a thread
        ``threading`` does not know, started by a C library)."""
        # Made at the first look (most runs never look: no thread ever speaks to them), so a
        # run that ends without one opens nothing and registers no finalizer.
        self._watch: _Watch | None = watch
        self.spoke_at = -1.0
        """Real time (monotonic) a thread last spoke; -1 if none ever did."""
        self._clocks: dict[int, tuple[int, float]] = {}
        """Native id -> (CPU clock at the last look, real time it last moved)."""

    def __bool__(self) -> bool:
        """Has any thread still alive spoken?  (Dead ones are forgotten by :meth:`look`.)"""
        return bool(self._spoke)

    def note(self) -> None:
        """The calling thread is speaking to the run (call this in that thread)."""
        tid = threading.get_native_id()
        if tid not in self._spoke:
            # A read, not threading.current_thread(): that would register a dummy thread for
            # a thread threading does not know.
            self._spoke[tid] = _thread_table.get(threading.get_ident())
        self.spoke_at = _real_monotonic()

    def close(self) -> None:
        """Close what the machine's watch keeps open (procfs files); the run has ended.

        Looks made after this open what they need again, so a closed set still answers.
        """
        close = getattr(self._watch, "close", None)  # (None: never looked, nothing open)
        if close is not None:
            close()
        self._spoke.clear()
        self._clocks.clear()

    def spoke(self, tid: int) -> bool:
        """Has the thread with native id ``tid`` spoken (and not been forgotten)?"""
        return tid in self._spoke

    def look(self, also: Iterable[int] = ()) -> frozenset[int] | None:
        """The native ids of the process's other threads that are working now.

        "Other": every thread but the caller's.  Always watched: the threads that spoke and
        those in ``also`` (native ids); the rest when they may want the GIL (see the class's
        notes) -- one that is not watched is not in the answer, so the answer is sure about
        these and about any thread that ran lately.  ``None`` where the machine cannot tell.
        Threads that spoke and have since ended are forgotten here.
        """
        own = threading.get_native_id()
        spoke = self._spoke
        # The asker's own thread is never outside work (it may have spoken before the run
        # began: call_soon_threadsafe before run_until_complete, from the same thread).
        spoke.pop(own, None)
        for tid, thread in list(spoke.items()):
            if (thread is not None and not thread.is_alive()) or thread_cpu_ns(tid) is None:
                del spoke[tid]
        watched = set(spoke)
        watched.update(also)
        clocks = self._clocks
        seen: dict[int, tuple[int, float]] = {}
        real_now = _real_monotonic()
        window = max(_RECENT, 2 * sys.getswitchinterval())
        ran: list[int] = []
        for thread in threads():
            native = thread.native_id
            if native is None or native == own or native in watched:
                continue
            clock = thread_cpu_ns(native)
            if clock is None:
                continue  # ended
            last = clocks.get(native)
            if last is None or last[0] != clock:
                seen[native] = (clock, real_now)
                watched.add(native)
                if last is not None:
                    ran.append(native)
            else:
                seen[native] = last
                if real_now - last[1] < window:
                    watched.add(native)
        self._clocks = seen
        watched.discard(own)
        watch = self._watch
        if watch is None:
            watch = self._watch = ThreadWatch()
        busy = watch.busy(watched)
        if busy is None:
            return frozenset(ran) if ran else None
        # A thread that ran since the last look is working, as the watch says of the threads
        # it keeps; the watch forgot this one while it was not watched, so it would judge by
        # the look alone -- and a thread waiting for the GIL we hold may not run during it.
        return frozenset(busy).union(ran)

    def working(self, busy: Iterable[int]) -> bool:
        """Is any thread that spoke among ``busy`` (what :meth:`look` returned)?"""
        spoke = self._spoke
        return any(tid in spoke for tid in busy)


class NewThreads:
    """Notices the threads that start while a run goes on.

    A plain thread the program starts while a run goes on -- a blocking client that will
    connect to the run's server, a producer that will hand the run a callback -- has not
    spoken yet when the run next goes idle, and a listening socket is not outside work: the
    run would jump to its next timer (the client's timeout) before the connect lands.  So a
    thread seen for the first time holds time for :data:`THREAD_GRACE`; from then on only what
    it does (a connect, a call, a job) holds time.

    Threads alive when this object is made are known from the start.  Not counted, because
    other rules cover what they do: pool and anyio workers (jobs), asyncio's ``waitpid``
    threads (children), trio's cached worker threads (``to_thread`` jobs), and the run's own
    thread.
    """

    __slots__ = ("_known", "_view", "new", "seen_at")

    def __init__(self) -> None:
        self._view = threads()
        self._known = set(self._view)
        self.seen_at = -1.0
        """Real time (monotonic) a new thread was last seen; -1 if never."""
        self.new: tuple[threading.Thread, ...] = ()
        """The threads the last look that found any saw for the first time."""

    def look(self, loop: object = None, *, refresh: bool = True) -> bool:
        """Has a thread (other than ``loop``'s running thread) started since the last look?

        One identity test while the set of threads is unchanged.  Threads that started and
        ended between two looks are not seen: whatever they did is visible by itself.
        ``refresh=False`` is for a caller that has just called :func:`worker_threads` (which
        reads the table of threads): it saves reading the table twice in one turn.
        """
        # An empty view is a forgotten one (forget(): a process always has a thread).
        current = _cache[0] if not refresh and _cache[0] else threads()
        if current is self._view:
            return False
        self._view = current
        known = self._known
        self._known = set(current)  # the dead are forgotten
        # asyncio-private: the thread an event loop runs in (read only when threads changed;
        # a trio run passes no loop: its thread was running when this object was made).
        own = getattr(loop, "_thread_id", None)
        workers = _cache[1]
        new = tuple(
            thread
            for thread in current
            if thread not in known
            and thread.ident != own
            and thread not in workers
            and getattr(getattr(thread, "_target", None), "__qualname__", "")
            not in _COVERED_TARGETS
        )
        if not new:
            return False
        self.new = new
        self.seen_at = _real_monotonic()
        return True

    def grace_left(self, real_now: float) -> float:
        """Real seconds the newest thread still holds time (0 once its grace is over)."""
        if self.seen_at < 0:
            return 0.0
        return max(0.0, self.seen_at + THREAD_GRACE - real_now)
