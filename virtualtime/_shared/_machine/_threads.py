"""The threads of this process: each one's scheduler state and CPU clock, and a watch.

:func:`thread_state` and :func:`thread_cpu_ns` are single reads; :func:`threads_of` lists a
process's threads; :class:`ThreadWatch` answers "is any of these threads working?" look after
look, threads waiting for the GIL included.  The notes below say why the reads can be trusted.

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

Part of ``shared``: imports nothing of virtualtime's (see tests/layout.py).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterable

from . import _common
from ._common import (
    _CPUCLOCK_THREAD,
    _LINUX,
    WORKING_STATES,
    _check_id,
    _clock_gettime_ns,
    _cpu_ns,
    _proc,
    _read,
    _state_of,
    _TaskFiles,
)


def thread_state(tid: int) -> str | None:
    """The scheduler state letter of a thread of this process (``R``, ``S``, ``D``, ...).

    ``tid`` is the thread's native id.  :data:`GONE` (``X``) once the thread has exited;
    ``None`` without procfs.  A single read says what the thread is doing *now*; to ask "is it
    working", including threads that wait for the GIL, use :class:`ThreadWatch`.
    """
    tid = _check_id("tid", tid)
    if not _proc():
        return None
    return _state_of(_read(f"{_common._PROC}/self/task/{tid}/stat"))


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
        return tuple(int(name) for name in os.listdir(f"{_common._PROC}/{where}/task"))
    except OSError:
        return None


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
            [files.state((0, tid), f"{_common._PROC}/self/task/{tid}/stat") for tid in wanted]
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
