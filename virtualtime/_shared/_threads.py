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
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Final

__all__ = [
    "ANYIO_ASYNCIO",
    "THREAD_GRACE",
    "NewThreads",
    "forget",
    "thread_table_size",
    "threads",
    "worker_threads",
]

THREAD_GRACE: Final = 0.05
"""Real seconds a thread that just started (or just spoke to a run) may still speak again."""

ANYIO_ASYNCIO: Final = "anyio._backends._asyncio"
"""anyio's asyncio backend, by module name: its worker threads are looked for only once it is
imported (the model never imports anyio itself)."""

thread_table_size: Final = threading._active.__len__  # type: ignore[attr-defined]
"""How many threads are running (threading's own table, read without its lock): a tenth of the
cost of ``active_count()``, which takes a lock.  Read on every round of the fast paths."""

_thread_table: Final[dict[int, threading.Thread]] = threading._active  # type: ignore[attr-defined]
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

    __slots__ = ("_known", "_view", "seen_at")

    def __init__(self) -> None:
        self._view = threads()
        self._known = set(self._view)
        self.seen_at = -1.0
        """Real time (monotonic) a new thread was last seen; -1 if never."""

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
        for thread in current:
            if (
                thread not in known
                and thread.ident != own
                and thread not in workers
                and getattr(getattr(thread, "_target", None), "__qualname__", "")
                not in _COVERED_TARGETS
            ):
                self.seen_at = _real_monotonic()
                return True
        return False

    def grace_left(self, real_now: float) -> float:
        """Real seconds the newest thread still holds time (0 once its grace is over)."""
        if self.seen_at < 0:
            return 0.0
        return max(0.0, self.seen_at + THREAD_GRACE - real_now)
