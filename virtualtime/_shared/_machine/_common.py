"""What every reader of the machine shares: what this machine offers, and how to read it.

Whether this is Linux and has procfs, which ioctls, socket options and netlink this kernel
offers, the CPU clock ids, and the small readers the others build on: a procfs file read
whole, a state letter picked out of a ``stat`` line, a checked id or descriptor, procfs files
kept open and re-read.  What the machine offers is a set of module variables here
(``_PROC``, ``_FIONREAD``, ``_OUTQ``, ``_TCP_INFO``, ``_SO_PEERCRED``, ``_AF_NETLINK``), and
the other modules read them as ``_common.<name>`` at each call, so a test that takes one away
(sets it to None, or ``_PROC`` to a folder that does not exist) takes it away everywhere.

Part of ``shared``: imports nothing of virtualtime's (see tests/layout.py).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Final, Protocol

from .._errors import InvalidTypeError, InvalidValueError

try:
    import termios
except ImportError:  # pragma: no cover - not POSIX
    termios = None  # type: ignore[assignment]

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
