"""The clocks outside the loop: ``time.monotonic()``, ``time.time()``, ``datetime.now()``.

Replacing ``loop.time()`` virtualises everything that asks the loop for the time, but much
real code keeps its own stopwatch: tenacity measures ``stop_after_delay`` with
``time.monotonic()``, backoff measures ``max_time`` with ``datetime.datetime.now()``, TTL caches
stamp entries with ``time.time()``.  Under virtual time their sleeps are instant while their
stopwatch is real, so they retry thousands of times.  ``patch_time=True`` makes those clocks
follow the loop.  This module decides how; the decisions, and why:

Which clocks, and what they read
--------------------------------
While a loop with ``patch_time=True`` runs, *in that loop's thread*:

* ``time.monotonic()`` and ``time.perf_counter()`` return ``loop.time()`` itself, and their
  ``_ns`` forms the loop's integer nanosecond tick.  Python leaves the reference point of
  these clocks undefined (only differences mean anything), so reading loop time directly is
  allowed, and it is the only choice that keeps differences *exact*: an offset such as
  "real value at start + virtual elapsed" would be a large float, and ``(R + 60.0) - R`` is
  not always ``60.0`` -- one retry more or less.
* ``time.time()``/``time.time_ns()`` read a virtual wall clock: the epoch ``wall_start`` plus
  the virtual time elapsed since the loop's ``start``, kept in integer nanoseconds.
  ``time.localtime()``, ``gmtime()``, ``ctime()``, ``asctime()`` and ``strftime()`` called
  without an explicit time, and ``time.clock_gettime(CLOCK_REALTIME | CLOCK_MONOTONIC)``, agree.
* ``datetime.datetime.now()``, ``now(tz)``, ``today()``, ``utcnow()`` and
  ``datetime.date.today()`` are that wall clock, truncated to the microsecond as the real ones
  are.  ``utcnow()`` warns exactly as Python's own does (deprecated since 3.12) -- once, from
  the caller's line -- and adds no warning of its own.

Everywhere else the real clocks answer: other threads (``asyncio.to_thread`` workers, a real
asyncio loop in another thread), code running before or after the loop, and the loop's own
machinery, which waits for real things with ``time.monotonic`` bound at import time
(``_time.py``/``_loop.py``) and with selector timeouts measured by the kernel.

How -- module attributes, routed per thread
-------------------------------------------
The time functions and the datetime classes are C objects: nothing can be changed *inside*
them from Python.  So, while at least one patched loop runs anywhere in the process, the
*module attributes* ``time.monotonic``, ..., ``datetime.datetime`` and ``datetime.date`` are
replaced by stand-ins, and put back (by identity) when the last such loop stops.  Each
stand-in first asks a thread-local "which patched loop is running on this thread?"; with no
answer it calls the original at once.  The stand-ins are therefore safe to call from any
thread, at any time, even long after the patch is gone -- which matters because a module
imported *during* a patched run that does ``from time import monotonic`` keeps the stand-in.

``datetime.datetime`` cannot be given a new ``now`` (it is an immutable C type), so the
stand-in is a subclass whose ``now``/``utcnow``/``today`` consult the virtual clock.  Two
pitfalls, handled the way users of freezegun and time-machine would expect:

* ``isinstance(real_datetime, datetime.datetime)`` must stay true while the stand-in sits in
  the module: its metaclass answers ``isinstance``/``issubclass`` for the real class.
* Values must stay real: the stand-in's constructor and alternate constructors return plain
  ``datetime.datetime`` instances, never stand-in instances, so they pickle, compare, hash,
  ``type()``-check and feed sqlite/JSON adapters exactly like real ones after the run.  A class
  that *subclasses* the stand-in (defined while the patch is active) still gets instances of
  itself.  What cannot be preserved: ``type(x) is datetime.datetime`` evaluated while the
  patch is active is false for a real ``x``, because the name now means the stand-in.
* Pickle looks a class up by module and name and insists on finding the very same object, so
  with the stand-in in the module a real datetime would no longer pickle.  The stand-ins carry
  the real names, and while they are installed ``copyreg`` reduces real dates and datetimes
  through them: the bytes are the usual ``datetime.datetime`` pickle, loadable anywhere.

``datetime.date`` gets the same treatment for ``date.today()`` (up to 3.14 it reads
``time.time``, from 3.15 it reads the C clock directly).

What is not covered, on purpose
-------------------------------
Names bound *before* the run -- ``from time import monotonic``, ``from datetime import
datetime`` -- keep the real objects.  Covering them would mean scanning every module's
globals on every ``run_forever`` (each outside ``loop.evolve()`` is one) and swapping
references, which costs milliseconds per run and is unsafe: ``threading``, ``queue`` and
``subprocess`` bind ``monotonic`` that way precisely to time their *real* blocking waits, and a
frozen virtual clock there would turn ``queue.get(timeout=1)`` into a hang.  Rebind such a name
explicitly instead, while the loop runs (``monkeypatch.setattr(mod, "monotonic",
time.monotonic)`` picks up the stand-in).  ``time.sleep`` is not patched: a blocking sleep in
the loop's thread blocks in real time and virtual time does not move meanwhile.

Cost when off: none.  Without ``patch_time`` nothing here runs and every module attribute is the
original object.  When on: a few microseconds per ``run_forever`` (each outside ``evolve()`` is
one) to install and restore, and a thread-local lookup per clock read.
"""

from __future__ import annotations

import copyreg
import datetime as _dt
import functools
import os
import sys
import threading
import time as _time
import warnings
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from numbers import Real
from types import TracebackType
from typing import Any, Final, Self, cast

from ._loop import VirtualEventLoop, running_virtual_loop
from ._time import TICKS_PER_SECOND, check_finite, to_ticks

__all__ = ["TimePatch", "wall_time"]

# The originals, bound when this module is first imported (before any patch can exist).
_REAL_DATETIME: Final = _dt.datetime
_REAL_DATE: Final = _dt.date
_UTC: Final = _dt.UTC
_EPOCH_UTC: Final = _REAL_DATETIME(1970, 1, 1, tzinfo=_UTC)

_real_monotonic: Final = _time.monotonic
_real_monotonic_ns: Final = _time.monotonic_ns
_real_perf_counter: Final = _time.perf_counter
_real_perf_counter_ns: Final = _time.perf_counter_ns
_real_time: Final = _time.time
_real_time_ns: Final = _time.time_ns
_real_localtime: Final = _time.localtime
_real_gmtime: Final = _time.gmtime
_real_ctime: Final = _time.ctime
_real_asctime: Final = _time.asctime
_real_strftime: Final = _time.strftime

_UTCNOW_WARNS: Final = sys.version_info >= (3, 12)
# Python's own wording (3.12+), so filters written against the real warning match ours.
_UTCNOW_MESSAGE: Final = (
    "datetime.datetime.utcnow() is deprecated and scheduled for removal in a future "
    "version. Use timezone-aware objects to represent datetimes in UTC: "
    "datetime.datetime.now(datetime.UTC)."
)


# --------------------------------------------------------------------------- routing


class _ThreadState(threading.local):
    """Per thread: the patch whose loop is running on this thread, if any."""

    current: TimePatch | None = None
    outer: list[TimePatch | None] | None = None


_state: Final = _ThreadState()


def _forget_in_child() -> None:
    # A process forked from the loop's thread inherits this thread's state, but not the
    # running loop: its clocks must be real.  The stand-ins stay installed and fall through.
    _state.current = None
    _state.outer = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


@functools.lru_cache(maxsize=64)
def _epoch_ns(wall: float) -> int:
    """Nanoseconds since 1970 for the POSIX timestamp ``wall``, read as the decimal it prints as.

    ``datetime(..., 123456 µs).timestamp()`` is a float near, not at, ``.123456``; taking the
    shortest decimal that round-trips (``repr``) recovers the intended microseconds, so the
    wall clock starts exactly at the datetime the user gave.
    """
    return int(Decimal(repr(wall)).scaleb(9).to_integral_value())


def _wall_ns(loop: VirtualEventLoop, wall: float) -> int:
    # The loop's own tick counter (a virtualtime attribute, read as _control.py does): exact
    # nanoseconds even where loop.time() as a float no longer is.
    return _epoch_ns(wall) + loop._vt_ticks - to_ticks(loop.start_time)


def _datetime_at(cls: type[_dt.datetime], tz: _dt.tzinfo | None, wall_ns: int) -> Any:
    secs, rest = divmod(wall_ns, TICKS_PER_SECOND)
    base = _REAL_DATETIME if cls is _VirtualDatetime else cls
    # Whole seconds through fromtimestamp (local time and DST folds as the real now() does),
    # then the microseconds, truncated like the real clock.
    return base.fromtimestamp(secs, tz).replace(microsecond=rest // 1000)


# --------------------------------------------------------------- the patch itself


class TimePatch:
    """Makes the stdlib clocks follow one virtual loop while it runs, in its thread.

    The loop creates one when built with ``patch_time=True`` and enters it around each
    ``run_forever()``; users never need to touch it.  Entering is re-entrant and thread-safe:
    two patched loops may run at once in two threads, each thread seeing its own loop's time,
    and the module attributes are restored (by identity) when the last one stops -- also when
    the run ends with an exception.
    """

    __slots__ = ("_offset_ns", "loop", "wall_start")

    def __init__(self, loop: VirtualEventLoop, wall_start: float) -> None:
        self.loop = loop
        self.wall_start = wall_start
        self._offset_ns = _epoch_ns(wall_start) - to_ticks(loop.start_time)

    @staticmethod
    def check_wall_start(wall_start: object) -> float:
        """Validate ``wall_start``; return the wall-clock epoch as a POSIX timestamp.

        ``None`` means the real time now.  A number is a POSIX timestamp (seconds since
        1970-01-01 UTC).  An aware ``datetime`` is that instant; a *naive* one is read as local
        time, as ``datetime.timestamp()`` reads it -- so ``datetime.now()`` starts at exactly
        the naive value given, on every machine, while ``time.time()`` depends on the machine's
        time zone.  Pass an aware datetime when ``time.time()`` must be the same everywhere.
        """
        if wall_start is None:
            return _real_time()
        if isinstance(wall_start, _REAL_DATETIME):
            try:
                stamp = wall_start.timestamp()
            except (OverflowError, OSError, ValueError) as exc:
                raise ValueError(
                    f"wall_start must be a datetime the platform can convert to a POSIX "
                    f"timestamp, got {wall_start!r} ({exc})"
                ) from None
        elif isinstance(wall_start, _REAL_DATE):
            raise TypeError(
                f"wall_start must be a POSIX timestamp or a datetime.datetime, got the date "
                f"{wall_start!r}; pass datetime.datetime({wall_start.year}, "
                f"{wall_start.month}, {wall_start.day}, tzinfo=...) for midnight"
            )
        elif isinstance(wall_start, bool) or not isinstance(wall_start, Real):
            raise TypeError(
                f"wall_start must be None, a POSIX timestamp (a real number) or a "
                f"datetime.datetime, got {wall_start!r} ({type(wall_start).__name__})"
            )
        else:
            stamp = check_finite("wall_start", wall_start)
        try:
            _EPOCH_UTC + _dt.timedelta(microseconds=_epoch_ns(stamp) // 1000)
        except (OverflowError, InvalidOperation):
            raise ValueError(
                f"wall_start must lie within datetime's range (years 1 to 9999), got {wall_start!r}"
            ) from None
        return stamp

    def wall_ns(self) -> int:
        """The virtual wall clock now, in nanoseconds since 1970-01-01 UTC."""
        return self._offset_ns + self.loop._vt_ticks

    def __enter__(self) -> None:
        _install()
        outer = _state.outer
        if outer is None:
            outer = _state.outer = []
        outer.append(_state.current)
        _state.current = self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            outer = _state.outer
            _state.current = outer.pop() if outer else None
        finally:
            _uninstall()

    def __repr__(self) -> str:
        return f"<TimePatch loop={self.loop!r} wall_start={self.wall_start!r}>"


def wall_time(loop: VirtualEventLoop | None = None) -> _dt.datetime:
    """The virtual wall clock, as a timezone-aware UTC datetime.

    Use it when code wants to ask for "now" explicitly instead of relying on ``patch_time``:
    it works whether or not the stdlib clocks are patched, and it is what ``time.time()`` and
    ``datetime.now(UTC)`` return when they are.  The wall clock is the loop's ``wall_start``
    (default: the real time when the loop was created) plus the virtual time elapsed since its
    ``start``, truncated to the microsecond.

    Without an argument it asks the running virtual loop (a :class:`~virtualtime.VirtualTimeError`
    if there is none); pass ``loop`` to ask a loop from outside, e.g. after ``loop.evolve(60)``.
    """
    if loop is None:
        loop = running_virtual_loop("virtualtime.wall_time()")
    elif not isinstance(loop, VirtualEventLoop):
        raise TypeError(
            f"loop must be a virtualtime.VirtualEventLoop or None, got {loop!r} "
            f"({type(loop).__name__})"
        )
    wall_ns = _wall_ns(loop, loop.wall_start)
    return _EPOCH_UTC + _dt.timedelta(microseconds=wall_ns // 1000)


# ------------------------------------------------------------------- the stand-ins
#
# Each one asks the thread-local state first and calls the original when this thread runs no
# patched loop: correct from any thread, at any time, forever.


def virtual_monotonic() -> float:
    """``time.monotonic()``, or the running patched loop's ``time()`` on its thread."""
    patch = _state.current
    if patch is None:
        return _real_monotonic()
    return patch.loop.time()


def virtual_monotonic_ns() -> int:
    """``time.monotonic_ns()``, or the running patched loop's tick on its thread."""
    patch = _state.current
    if patch is None:
        return _real_monotonic_ns()
    return patch.loop._vt_ticks


def virtual_perf_counter() -> float:
    """``time.perf_counter()``, or the running patched loop's ``time()`` on its thread."""
    patch = _state.current
    if patch is None:
        return _real_perf_counter()
    return patch.loop.time()


def virtual_perf_counter_ns() -> int:
    """``time.perf_counter_ns()``, or the running patched loop's tick on its thread."""
    patch = _state.current
    if patch is None:
        return _real_perf_counter_ns()
    return patch.loop._vt_ticks


def virtual_time() -> float:
    """``time.time()``, or the running patched loop's wall clock on its thread."""
    patch = _state.current
    if patch is None:
        return _real_time()
    return patch.wall_ns() / TICKS_PER_SECOND


def virtual_time_ns() -> int:
    """``time.time_ns()``, or the running patched loop's wall clock on its thread."""
    patch = _state.current
    if patch is None:
        return _real_time_ns()
    return patch.wall_ns()


def _wall_seconds() -> int | None:
    patch = _state.current
    if patch is None:
        return None
    return patch.wall_ns() // TICKS_PER_SECOND


def virtual_localtime(secs: float | None = None) -> _time.struct_time:
    """``time.localtime()``; without ``secs``, of the virtual wall clock when patched."""
    if secs is None:
        secs = _wall_seconds()
    return _real_localtime(secs)


def virtual_gmtime(secs: float | None = None) -> _time.struct_time:
    """``time.gmtime()``; without ``secs``, of the virtual wall clock when patched."""
    if secs is None:
        secs = _wall_seconds()
    return _real_gmtime(secs)


def virtual_ctime(secs: float | None = None) -> str:
    """``time.ctime()``; without ``secs``, of the virtual wall clock when patched."""
    if secs is None:
        secs = _wall_seconds()
    return _real_ctime(secs)


def virtual_asctime(*t: Any) -> str:
    """``time.asctime()``; without a time tuple, of the virtual wall clock when patched."""
    if t:
        return _real_asctime(*t)
    secs = _wall_seconds()
    return _real_asctime() if secs is None else _real_asctime(_real_localtime(secs))


def virtual_strftime(format: str, *t: Any) -> str:
    """``time.strftime()``; without a time tuple, of the virtual wall clock when patched."""
    if t:
        return _real_strftime(format, *t)
    secs = _wall_seconds()
    if secs is None:
        return _real_strftime(format)
    return _real_strftime(format, _real_localtime(secs))


_STAND_IN_FUNCTIONS: dict[str, Any] = {
    "monotonic": virtual_monotonic,
    "monotonic_ns": virtual_monotonic_ns,
    "perf_counter": virtual_perf_counter,
    "perf_counter_ns": virtual_perf_counter_ns,
    "time": virtual_time,
    "time_ns": virtual_time_ns,
    "localtime": virtual_localtime,
    "gmtime": virtual_gmtime,
    "ctime": virtual_ctime,
    "asctime": virtual_asctime,
    "strftime": virtual_strftime,
}

if hasattr(_time, "clock_gettime"):  # Unix only
    _real_clock_gettime: Final = _time.clock_gettime
    _real_clock_gettime_ns: Final = _time.clock_gettime_ns
    _CLOCK_REALTIME: Final[int] = _time.CLOCK_REALTIME
    _CLOCK_MONOTONIC: Final[int] = _time.CLOCK_MONOTONIC

    def virtual_clock_gettime(clk_id: int, /) -> float:
        """``time.clock_gettime()``; CLOCK_REALTIME and CLOCK_MONOTONIC follow the loop."""
        patch = _state.current
        if patch is not None:
            if clk_id == _CLOCK_REALTIME:
                return patch.wall_ns() / TICKS_PER_SECOND
            if clk_id == _CLOCK_MONOTONIC:
                return patch.loop.time()
        return _real_clock_gettime(clk_id)

    def virtual_clock_gettime_ns(clk_id: int, /) -> int:
        """``time.clock_gettime_ns()``; CLOCK_REALTIME and CLOCK_MONOTONIC follow the loop."""
        patch = _state.current
        if patch is not None:
            if clk_id == _CLOCK_REALTIME:
                return patch.wall_ns()
            if clk_id == _CLOCK_MONOTONIC:
                return patch.loop._vt_ticks
        return _real_clock_gettime_ns(clk_id)

    _STAND_IN_FUNCTIONS["clock_gettime"] = virtual_clock_gettime
    _STAND_IN_FUNCTIONS["clock_gettime_ns"] = virtual_clock_gettime_ns


class _StandInMeta(type):
    """Lets the stand-in classes answer ``isinstance``/``issubclass`` for the real ones.

    Only the two stand-ins themselves are widened; a class that subclasses a stand-in keeps
    the ordinary checks (a real datetime is not an instance of a user's subclass).
    """

    def __instancecheck__(cls, instance: object) -> bool:
        real = _REAL_OF.get(cls)
        if real is not None:
            return isinstance(instance, real)
        return super().__instancecheck__(instance)

    def __subclasscheck__(cls, subclass: type) -> bool:
        real = _REAL_OF.get(cls)
        if real is not None:
            return issubclass(subclass, real)
        return super().__subclasscheck__(subclass)


class _VirtualDatetime(_dt.datetime, metaclass=_StandInMeta):
    """Stand-in for ``datetime.datetime`` while a patched loop runs somewhere.

    ``now``/``utcnow``/``today`` read the virtual wall clock on a patched loop's thread and
    the real one elsewhere.  Constructing it (directly or through ``fromtimestamp``,
    ``fromisoformat``, ``combine``, ...) returns plain ``datetime.datetime`` instances.
    """

    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is _VirtualDatetime:
            return _REAL_DATETIME(*args, **kwargs)
        return super().__new__(cls, *args, **kwargs)

    @classmethod
    def now(cls, tz: _dt.tzinfo | None = None) -> Self:
        """The current local datetime, or in ``tz`` -- virtual on a patched loop's thread."""
        patch = _state.current
        if patch is None:
            if cls is _VirtualDatetime:
                return cast(Self, _REAL_DATETIME.now(tz))
            return super().now(tz)
        return cast(Self, _datetime_at(cls, tz, patch.wall_ns()))

    @classmethod
    def today(cls) -> Self:
        """The current local datetime (naive) -- virtual on a patched loop's thread."""
        patch = _state.current
        if patch is None:
            if cls is _VirtualDatetime:
                return cast(Self, _REAL_DATETIME.today())
            return super().today()
        return cast(Self, _datetime_at(cls, None, patch.wall_ns()))

    if hasattr(_REAL_DATETIME, "utcnow"):

        @classmethod
        def utcnow(cls) -> Self:
            """The current UTC datetime, naive; deprecated by Python 3.12 as the real one."""
            if _UTCNOW_WARNS:
                # Python's own warning, attributed to the caller as the C function's is.
                warnings.warn(_UTCNOW_MESSAGE, DeprecationWarning, stacklevel=2)
            patch = _state.current
            aware: _dt.datetime
            if patch is None:
                aware = _REAL_DATETIME.now(_UTC) if cls is _VirtualDatetime else super().now(_UTC)
            else:
                aware = _datetime_at(cls, _UTC, patch.wall_ns())
            return cast(Self, aware.replace(tzinfo=None))


class _VirtualDate(_dt.date, metaclass=_StandInMeta):
    """Stand-in for ``datetime.date``: ``today()`` follows the virtual wall clock.

    Constructing it returns plain ``datetime.date`` instances.
    """

    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is _VirtualDate:
            return _REAL_DATE(*args, **kwargs)
        return super().__new__(cls, *args, **kwargs)

    @classmethod
    def today(cls) -> Self:
        """The current local date -- virtual on a patched loop's thread."""
        patch = _state.current
        if patch is None:
            if cls is _VirtualDate:
                return cast(Self, _REAL_DATE.today())
            return super().today()
        base = _REAL_DATE if cls is _VirtualDate else cls
        return cast(Self, base.fromtimestamp(patch.wall_ns() // TICKS_PER_SECOND))


_REAL_OF: Final[dict[type, type]] = {
    _VirtualDatetime: _REAL_DATETIME,
    _VirtualDate: _REAL_DATE,
}

# Pickling (see the module docstring): the stand-ins answer to the real names, and real values
# reduce through them while they are installed.
for _stand_in, _real in _REAL_OF.items():
    _stand_in.__module__ = _real.__module__
    _stand_in.__name__ = _stand_in.__qualname__ = _real.__name__


def _reduce_datetime(value: _dt.datetime) -> tuple[Any, ...]:
    return (_VirtualDatetime, value.__reduce_ex__(4)[1])


def _reduce_date(value: _dt.date) -> tuple[Any, ...]:
    return (_VirtualDate, value.__reduce_ex__(4)[1])


_REDUCERS: Final[dict[type, Callable[[Any], tuple[Any, ...]]]] = {
    _REAL_DATETIME: _reduce_datetime,
    _REAL_DATE: _reduce_date,
}

# Where each stand-in goes: (namespace dict, key, stand-in).  Module attributes are written
# straight into the module's __dict__ (what setattr on a plain module does), and the copyreg
# entries into its dispatch table, so installing is a handful of dict stores.
_TARGETS: Final[tuple[tuple[dict[Any, Any], Any, object], ...]] = (
    *((vars(_time), name, func) for name, func in _STAND_IN_FUNCTIONS.items()),
    (vars(_dt), "datetime", _VirtualDatetime),
    (vars(_dt), "date", _VirtualDate),
    *((copyreg.dispatch_table, cls, reducer) for cls, reducer in _REDUCERS.items()),
)


# ------------------------------------------------------------ install / uninstall

_lock: Final = threading.Lock()
_users = 0
_ABSENT: Final = object()
_saved: list[object] = []  # what each target held before, in _TARGETS order


def _install() -> None:
    """Put the stand-ins in place (first user) and count one more user."""
    global _users
    with _lock:
        if _users == 0:
            saved = _saved
            for namespace, key, ours in _TARGETS:
                saved.append(namespace.get(key, _ABSENT))
                namespace[key] = ours
        _users += 1


def _uninstall() -> None:
    """Count one user less; the last one puts every original back."""
    global _users
    with _lock:
        _users -= 1
        if _users == 0:
            for (namespace, key, ours), previous in zip(_TARGETS, _saved, strict=True):
                # Only where ours is still in place: if another tool (freezegun, a test's
                # monkeypatch) replaced it meanwhile, undoing that is its business.
                if namespace.get(key) is ours:
                    if previous is _ABSENT:
                        del namespace[key]
                    else:
                        namespace[key] = previous
            _saved.clear()
