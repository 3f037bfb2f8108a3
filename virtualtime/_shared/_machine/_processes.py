"""Other processes: their state, their CPU clock, how they ended, and a watch.

Any process on the machine may be asked about (as far as procfs lets this user see it): the
questions a model asks of a peer program that serves a connection.

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

Part of ``shared``: imports nothing of virtualtime's (see tests/layout.py).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterable
from dataclasses import dataclass

from . import _common
from ._common import (
    _CPUCLOCK_PROCESS,
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


def process_state(pid: int) -> str | None:
    """The state letter of a process's main thread: ``Z`` once it exited unreaped, ``X`` gone.

    ``None`` without procfs.  A process whose main thread sleeps (``S``) may still have busy
    threads: ask :class:`ProcessWatch` whether it is working.
    """
    pid = _check_id("pid", pid)
    if not _proc():
        return None
    return _state_of(_read(f"{_common._PROC}/{pid}/stat"))


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
    data = _read(f"{_common._PROC}/{pid}/stat")
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
                tids = os.listdir(f"{_common._PROC}/{pid}/task")
            except OSError:
                tids = []
            states = []
            for name in tids:
                key = (pid, int(name))
                keys.add(key)
                states.append(files.state(key, f"{_common._PROC}/{pid}/task/{name}/stat"))
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
