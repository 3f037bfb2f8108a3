"""``patch_time``: what ``time.monotonic()``, ``time.time()``, ``datetime.now()`` read, for whom.

Replacing ``loop.time()`` virtualises everything that asks the loop for the time, but much
real code keeps its own stopwatch: tenacity measures ``stop_after_delay`` with
``time.monotonic()``, cachetools' ``TTLCache`` binds ``timer=time.monotonic`` as a default
argument, APScheduler stores ``functools.partial(datetime.now, UTC)`` as attrs defaults,
pyrate-limiter does ``from time import monotonic_ns``.  Under virtual time their sleeps are
instant while their stopwatch is real.  ``patch_time=True`` makes those clocks follow the loop
(or the trio clock).  This module decides what they read, where, and for whom; how the C
objects are redirected is :mod:`virtualtime._clocks._hook`.

What is reached, and how
------------------------
Every reference to the clock objects, however it was obtained -- module attribute, ``from
time import monotonic``, a default argument, an attribute of an object made before the run,
``from datetime import datetime`` and ``datetime.now()`` on that name, a bound
``datetime.now`` stored before the run -- because the C objects themselves are redirected
(see :mod:`virtualtime._clocks._hook`); no module attribute is replaced and no module is scanned, so
the result does not depend on import order.  Reached: ``time.monotonic``, ``perf_counter``,
``time`` and their ``_ns`` forms; ``clock_gettime``/``clock_gettime_ns`` for
``CLOCK_MONOTONIC`` and ``CLOCK_REALTIME``; ``localtime``, ``gmtime``, ``ctime``,
``asctime`` and ``strftime`` without an explicit time; ``datetime.datetime.now``,
``utcnow``, ``today`` and ``datetime.date.today`` (on subclasses too); ``logging`` record
timestamps (they read ``time.time``/``time_ns``).

What they read
--------------
* ``time.monotonic()`` and ``time.perf_counter()`` return the loop's ``time()`` itself, their
  ``_ns`` forms its integer nanosecond tick.  Python leaves the reference point of these
  clocks undefined, so reading loop time directly is allowed, and it keeps differences
  *exact*: an offset such as "real value at start + virtual elapsed" would be a large float,
  and ``(R + 60.0) - R`` is not always ``60.0`` -- one retry more or less.
* ``time.time()``/``time_ns()`` read a virtual wall clock: ``wall_start`` plus the virtual
  time elapsed since the loop's ``start``, kept in integer nanoseconds; the ``datetime``
  methods are that clock truncated to the microsecond, as the real ones are.
  ``utcnow()`` warns exactly as Python's own does (deprecated since 3.12).

Who sees virtual time
---------------------
*The patched loop's own thread, while it runs*, and nothing else -- with two refinements:

* **The stdlib's own waits stay real even there.**  ``queue.Queue.get(timeout=0.2)``,
  ``threading.Condition.wait_for``, ``subprocess.Popen.wait(timeout)``,
  ``concurrent.futures.wait/as_completed`` and asyncio's internals time their real blocking
  waits with ``time.monotonic``; with a virtual clock that never moves while they block they
  would wait for ever.  So each redirected clock looks at its *caller's module*: calls made
  directly from the modules in :data:`REAL_TIME_MODULES` (and from virtualtime's own engine)
  get the real clock.  One frame lookup, cached per module name.
* **A library's own background thread started during the run shares the run's clock.**  A
  thread started (``threading.Thread.start``) from the loop's thread while it runs, by any
  code except the stdlib and the async libraries' worker pools (``asyncio.to_thread``,
  executors, ``trio.to_thread``, anyio's workers), reads the same virtual clocks (it cannot
  move them) until that run ends.  pyrate-limiter's leak thread is the case in point: it
  deletes bucket items older than "now" minus the window, and items stamped in virtual time
  by the loop thread must be judged by the same clock, or they vanish and the limiter lets
  too much through.  Worker-pool threads run real blocking work, measured in real time, and
  the loop waits for them; they keep real clocks.  Threads that already existed keep real
  clocks too.

Everywhere else the real clocks answer: other threads, code before and after the run, and a
process forked from the loop's thread (the child restores everything at once).

Install, restore, cost
----------------------
The redirections are put in place when the first patched run in the process starts and
undone, exactly, when the last one stops -- also after an exception, a deadlock, Ctrl-C.
A manual loop is patched around each ``evolve()``, ``virtualtime.run()`` around ``main`` and
the shutdown steps after it, so installing must be cheap and keep nothing: a few dozen
pointer writes, checked once per object and read back each time after, to copies of the C
definitions made once; on the pure-Python path (no compiled helper, or
``VIRTUALTIME_PURE_PYTHON=1``) also one ``gc.get_referrers`` over the date classes, repeated
only after new imports, to find bound ``datetime.now`` methods stored before the run.

A program may replace a clock itself meanwhile -- ``time.time = ...`` on the module, as
``monkeypatch`` and freezegun do, ``datetime.datetime`` swapped for a subclass, even
``threading.Thread.start``.  That replacement is the program's: it answers through the
module while it is there, every other reference to the clock still follows the run, the
clocks are redirected again with it in place (the C objects are taken once, at import,
never looked up on the module again), and undoing restores only what virtualtime itself
changed and still finds as it left it -- the program restores its own.

A redirected clock checks its thread with one dict lookup and, on a patched thread, the
caller's module with one frame lookup, cached per module name.  With the optional compiled
helper (``virtualtime._clocks._cclocks``, built by ``pip install`` when a C compiler is present) the
clocks programs call in loops -- ``monotonic``, ``perf_counter``, ``time`` and their ``_ns``
forms, ``datetime.now(UTC)`` -- do all of it in C and add tens of nanoseconds per call; the
pure-Python replacements add a few hundred (``datetime.now()`` at a new instant about as much
as a ``fromtimestamp`` call).  Both paths give the same answers; both are tested.  Measured in
``bench/bench_patch_time.py``.

One room: The routing table (which thread reads which patch), the per-module verdicts, the last
``datetime`` made, the count of runs using the patch and the redirections in place are module
state that the patches (which route threads), the replacements (which read the routes on every
clock call, the hot path) and install/uninstall (which put the replacements in place) all share
-- and the compiled helper is handed the same objects once, at import.  Split into modules, each
replacement would reach that state through another module's attribute on every call, or the
state would have two owners; so the three stay together, in the order the dividers below mark.
The C side of redirecting an object is :mod:`virtualtime._clocks._hook`.

Part of ``clocks``: may import ``shared`` (see tests/layout.py).
"""

from __future__ import annotations

import datetime as _dt
import functools
import os
import sys
import sysconfig
import threading
import time as _time
import types
import warnings
import weakref
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from numbers import Real
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

from .._shared._errors import InvalidTypeError, InvalidValueError, UnsupportedError
from .._shared._time import TICKS_PER_SECOND, check_finite, to_ticks
from . import _hook

if TYPE_CHECKING:  # the loop module imports this one: for annotations only, never at run time
    from .._engine._loop import VirtualEventLoop

__all__ = [
    "COMPILED",
    "REAL_TIME_MODULES",
    "ClockPatch",
    "TimePatch",
    "check_wall_start",
    "wall_datetime",
]

_REAL_DATETIME: Final = _dt.datetime
_REAL_DATE: Final = _dt.date
_UTC: Final = _dt.UTC
_EPOCH_UTC: Final = _REAL_DATETIME(1970, 1, 1, tzinfo=_UTC)

# The clocks, as objects: redirecting these reaches every reference to them.
_CLOCKS: Final[tuple[str, ...]] = tuple(
    name
    for name in (
        "monotonic",
        "monotonic_ns",
        "perf_counter",
        "perf_counter_ns",
        "time",
        "time_ns",
        "localtime",
        "gmtime",
        "ctime",
        "asctime",
        "strftime",
        "clock_gettime",
        "clock_gettime_ns",
    )
    if hasattr(_time, name)
)
# The clock objects themselves, taken once: they are what gets redirected, wherever a program
# holds them.  Never looked up on the module again -- a program (monkeypatch, freezegun) may
# put something else there, during a run or between runs, and that is its business: its
# replacement answers through the module, every other reference to the clock follows the run.
_CLOCK_OBJECTS: Final[dict[str, types.BuiltinFunctionType]] = {
    name: getattr(_time, name) for name in _CLOCKS
}
# Unpatched copies (new builtin function objects on the same C code): the real clocks for ever.
_real: Final[dict[str, Any]] = {
    name: _hook.real_copy(clock) for name, clock in _CLOCK_OBJECTS.items()
}
_real_monotonic: Final[Callable[[], float]] = _real["monotonic"]
_real_monotonic_ns: Final[Callable[[], int]] = _real["monotonic_ns"]
_real_perf_counter: Final[Callable[[], float]] = _real["perf_counter"]
_real_perf_counter_ns: Final[Callable[[], int]] = _real["perf_counter_ns"]
_real_time: Final[Callable[[], float]] = _real["time"]
_real_time_ns: Final[Callable[[], int]] = _real["time_ns"]
_real_localtime: Final = _real["localtime"]
_real_gmtime: Final = _real["gmtime"]
_real_ctime: Final = _real["ctime"]
_real_asctime: Final = _real["asctime"]
_real_strftime: Final = _real["strftime"]
_CLOCK_REALTIME: Final = getattr(_time, "CLOCK_REALTIME", None)
_CLOCK_MONOTONIC: Final = getattr(_time, "CLOCK_MONOTONIC", None)

# The original class methods (descriptor objects), taken out of the classes while patched.
# Descriptors on copies of the C definitions, taken now: the real class methods for ever,
# whichever way the classes' own are redirected.
_REAL_NOW: Final = _hook.real_class_method(_REAL_DATETIME, "now")
_REAL_UTCNOW: Final = (
    _hook.real_class_method(_REAL_DATETIME, "utcnow") if "utcnow" in vars(_REAL_DATETIME) else None
)
_REAL_TODAY: Final = _hook.real_class_method(_REAL_DATE, "today")
_real_datetime_now: Final = _REAL_NOW.__get__(None, _REAL_DATETIME)

# The optional compiled helper (setup.py builds it when it can): the hot path of the redirected
# clocks and the entry points for datetime's class methods.  Without it, or with
# VIRTUALTIME_PURE_PYTHON=1, the pure-Python path (see virtualtime._clocks._hook) is used.
_cclocks: types.ModuleType | None = None
if not os.environ.get("VIRTUALTIME_PURE_PYTHON"):
    try:
        from . import _cclocks
    except ImportError:
        _cclocks = None

_UTCNOW_WARNS: Final = sys.version_info >= (3, 12)
# Python's own wording (3.12+), so filters written against the real warning match ours.
_UTCNOW_MESSAGE: Final = (
    "datetime.datetime.utcnow() is deprecated and scheduled for removal in a future "
    "version. Use timezone-aware objects to represent datetimes in UTC: "
    "datetime.datetime.now(datetime.UTC)."
)

REAL_TIME_MODULES: Final = frozenset(
    {
        "threading",
        "queue",
        "selectors",
        "subprocess",
        "socketserver",
        "sched",
        "asyncio",
        "concurrent",
        "multiprocessing",
        "virtualtime",
        "trio._core",
        "anyio._backends",
        # grpc.aio turns a call's timeout= into a deadline with time.time() on the loop's
        # thread; its C core keeps deadlines on the real clock, so the deadline must be real.
        "grpc",
    }
)
"""Callers that keep the real clocks even on the patched thread (a name covers its submodules).

The stdlib modules that time real blocking waits with ``time.monotonic`` (``queue.get(timeout=)``
would otherwise never time out), asyncio's and the async libraries' run-loop internals, and
virtualtime's own engine (which paces ``rate=`` and waits for threads in real time).  Threads
started from these modules (worker pools) keep real clocks as well.  ``sched`` is here
because its default ``delayfunc`` is the blocking ``time.sleep``.
"""


# --------------------------------------------------------------------------- routing

_routes: Final[dict[int, ClockPatch]] = {}  # thread ident -> the patch whose clock it reads
_route: Final = _routes.get
_ident: Final = threading.get_ident
_frame: Final = sys._getframe
_verdicts: Final[dict[object, bool]] = {}


def _keeps_real_time(name: object) -> bool:
    verdict = _verdicts.get(name)
    if verdict is None:
        verdict = False
        if isinstance(name, str):
            parts = name.split(".")
            verdict = any(
                ".".join(parts[:n]) in REAL_TIME_MODULES for n in range(1, len(parts) + 1)
            )
        _verdicts[name] = verdict
    return verdict


def _caller_keeps_real_time(depth: int = 2) -> bool:
    """True when the code that called the clock (``depth`` frames up) keeps real time."""
    try:
        name = _frame(depth).f_globals.get("__name__")
    except ValueError:  # pragma: no cover - called from C with no Python frame
        return True
    verdict = _verdicts.get(name)
    return _keeps_real_time(name) if verdict is None else verdict


@functools.lru_cache(maxsize=64)
def _epoch_ns(wall: float) -> int:
    """Nanoseconds since 1970 for the POSIX timestamp ``wall``, read as the decimal it prints as.

    ``datetime(..., 123456 µs).timestamp()`` is a float near, not at, ``.123456``; taking the
    shortest decimal that round-trips (``repr``) recovers the intended microseconds, so the
    wall clock starts exactly at the datetime the user gave.
    """
    return int(Decimal(repr(wall)).scaleb(9).to_integral_value())


_last_datetime: list[Any] = [None, None, None, None]  # cls, tz, wall_ns -> the value
_FLOAT_EXACT_MICROS: Final = 2**32 * 1_000_000
"""Below this many microseconds since 1970 (the year 2106), ``micros / 1e6`` rounds back exactly."""


def _datetime_at(cls: type[_dt.datetime], tz: _dt.tzinfo | None, wall_ns: int) -> Any:
    # Virtual time stands still while code runs, so many reads in a row ask for the same
    # instant: the last answer is kept (datetimes are immutable).
    last = _last_datetime
    if last[2] == wall_ns and last[0] is cls and last[1] is tz:
        return last[3]
    micros = wall_ns // 1000  # truncated, like the real clock
    value: Any
    if 0 <= micros < _FLOAT_EXACT_MICROS:
        # One C call: a whole number of microseconds divided by 1e6 is a float within a
        # quarter of a microsecond of the exact value (below 2**32 s), and fromtimestamp
        # rounds to the nearest microsecond, so it gets exactly these microseconds back --
        # local time and DST folds as the real now() does.
        value = cls.fromtimestamp(micros / 1_000_000, tz)
    elif cls is _REAL_DATETIME and tz is _UTC:
        value = _EPOCH_UTC + _dt.timedelta(microseconds=micros)
    else:
        secs, rest = divmod(micros, 1_000_000)
        value = cls.fromtimestamp(secs, tz).replace(microsecond=rest)
    last[:] = (cls, tz, wall_ns, value)
    return value


# --------------------------------------------------------------- the patches


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
            raise InvalidValueError(
                f"wall_start must be a datetime the platform can convert to a POSIX "
                f"timestamp, got {wall_start!r} ({exc})"
            ) from None
    elif isinstance(wall_start, _REAL_DATE):
        raise InvalidTypeError(
            f"wall_start must be a POSIX timestamp or a datetime.datetime, got the date "
            f"{wall_start!r}; pass datetime.datetime({wall_start.year}, "
            f"{wall_start.month}, {wall_start.day}, tzinfo=...) for midnight"
        )
    elif isinstance(wall_start, bool) or not isinstance(wall_start, Real):
        raise InvalidTypeError(
            f"wall_start must be None, a POSIX timestamp (a real number) or a "
            f"datetime.datetime, got {wall_start!r} ({type(wall_start).__name__})"
        )
    else:
        stamp = check_finite("wall_start", wall_start)
    try:
        _EPOCH_UTC + _dt.timedelta(microseconds=_epoch_ns(stamp) // 1000)
    except (OverflowError, InvalidOperation):
        raise InvalidValueError(
            f"wall_start must lie within datetime's range (years 1 to 9999), got {wall_start!r}"
        ) from None
    return stamp


class ClockPatch:
    """Makes the stdlib clocks follow one virtual clock while it runs, in its thread.

    The base of :class:`TimePatch` (asyncio) and of the trio clock's patch; subclasses say how
    to read the clock (:meth:`seconds`, :meth:`ticks`).  Enter it around the run, in the
    run's thread.  Entering is re-entrant and thread-safe: two patched runs may go on at once
    in two threads, each thread seeing its own clock, and everything is restored (by
    identity) when the last one stops -- also when the run ends with an exception.
    """

    __slots__ = ("_offset_ns", "_outer", "_pid", "_source", "_threads", "seconds", "wall_start")

    def __init__(self, seconds: Any, start_ticks: int, wall_start: float) -> None:
        self.seconds = seconds  # the clock's time() as a float: monotonic()/perf_counter()
        # A virtual loop whose tick counter the compiled clocks may read directly (its
        # ``_vt_ticks``/``_vt_now`` attributes equal ticks()/seconds()), or None: call them.
        self._source: VirtualEventLoop | None = None
        self.wall_start = wall_start
        self._offset_ns = _epoch_ns(wall_start) - start_ticks
        self._outer: list[tuple[int, ClockPatch | None]] = []
        self._threads: set[int] = set()  # threads started during the run (see module doc)
        self._pid = 0

    check_wall_start = staticmethod(check_wall_start)

    def ticks(self) -> int:
        """The clock's time in integer nanoseconds: ``monotonic_ns()``."""
        raise NotImplementedError  # pragma: no cover

    def wall_ns(self) -> int:
        """The virtual wall clock now, in nanoseconds since 1970-01-01 UTC."""
        return self._offset_ns + self.ticks()

    @property
    def active(self) -> bool:
        """Whether a run of this clock is patched right now (in the process that entered it)."""
        return bool(self._outer) and self._pid == os.getpid()

    def __enter__(self) -> None:
        _install()
        ident = _ident()
        self._pid = os.getpid()
        self._outer.append((ident, _routes.get(ident)))
        _routes[ident] = self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._pid != os.getpid():  # entered before a fork: the child already let go
            self._outer.clear()
            return
        try:
            ident, outer = self._outer.pop()
            if outer is None:
                _routes.pop(ident, None)
            else:
                _routes[ident] = outer
            if not self._outer:
                for thread in self._threads:
                    if _routes.get(thread) is self:
                        del _routes[thread]
                self._threads.clear()
        finally:
            _uninstall()

    def _share_with_thread(self, thread: threading.Thread) -> None:
        """Let ``thread`` (about to start) read this clock while this run lasts."""
        run = thread.run

        def run_in_virtual_time() -> None:
            ident = _ident()
            if self.active:
                self._threads.add(ident)
                _routes[ident] = self
            try:
                run()
            finally:
                if _routes.get(ident) is self:
                    del _routes[ident]

        thread.run = run_in_virtual_time  # type: ignore[method-assign]

    def __repr__(self) -> str:
        return f"<{type(self).__name__} wall_start={self.wall_start!r}>"


class TimePatch(ClockPatch):
    """The patch of one :class:`~virtualtime.VirtualEventLoop` (``patch_time=True``).

    The loop creates one and enters it around each ``run_forever()``; users never touch it.
    """

    __slots__ = ("loop", "view")

    def __init__(self, loop: VirtualEventLoop, wall_start: float, *, direct: bool) -> None:
        super().__init__(loop.time, to_ticks(loop.start_time), wall_start)
        self.loop = loop
        # ``direct``: the loop's time() is its own (a subclass may override it), so its tick
        # attributes may be read in place of calling it (the compiled path does).
        if direct:
            self._source = loop
        # A simulated network with per-host clocks (virtualtime.net) sets a view: the tick
        # count the calling code's host reads when the loop's is ``ticks`` (and clears
        # _source, so the compiled clocks call seconds() and ticks() instead of reading the
        # loop's fields).
        self.view: Callable[[int], int] | None = None

    def ticks(self) -> int:
        view = self.view
        return self.loop.ticks if view is None else view(self.loop.ticks)

    def __repr__(self) -> str:
        return f"<TimePatch loop={self.loop!r} wall_start={self.wall_start!r}>"


class TrioClockPatch(ClockPatch):
    """The patch of one :class:`virtualtime.trio.VirtualClock` (``patch_time=True``).

    The clock enters it when trio starts the run (``start_clock``) and leaves it when the run
    ends (the ``after_run`` instrument hook, which trio calls however the run ends).
    """

    __slots__ = ("clock",)

    def __init__(self, clock: Any, start_ticks: int, wall_start: float) -> None:
        super().__init__(clock.current_time, start_ticks, wall_start)
        self.clock = clock

    def ticks(self) -> int:
        clock = self.clock
        if clock._rate:
            return to_ticks(clock.current_time())
        return clock._ticks  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return f"<TrioClockPatch clock={self.clock!r} wall_start={self.wall_start!r}>"


def wall_datetime(wall_start: float, elapsed_ticks: int) -> _dt.datetime:
    """The wall clock ``elapsed_ticks`` after ``wall_start``, as a UTC datetime (to the µs).

    This is :func:`virtualtime.wall_time`'s arithmetic, kept with the other wall clocks; the
    engine passes its own tick count (exact nanoseconds even where ``loop.time()`` as a float
    no longer is), so this module never needs the loop.
    """
    wall_ns = _epoch_ns(wall_start) + elapsed_ticks
    return _EPOCH_UTC + _dt.timedelta(microseconds=wall_ns // 1000)


# ------------------------------------------------------------------- the replacements
#
# Each one: which patch routes this thread?  None, or a caller in REAL_TIME_MODULES: the real
# clock.  Otherwise the patch's clock.  They are called in place of the C clocks with exactly
# the C clocks' arguments (see _hook).


def _seconds_clock(real: Callable[[], float]) -> Callable[[], float]:
    """``monotonic``/``perf_counter``: the loop's time() on a patched thread."""

    def clock() -> float:
        patch = _route(_ident())
        if patch is None or _caller_keeps_real_time():
            return real()
        return patch.seconds()  # type: ignore[no-any-return]

    return clock


def _ticks_clock(real: Callable[[], int]) -> Callable[[], int]:
    """``monotonic_ns``/``perf_counter_ns``: the loop's integer nanoseconds."""

    def clock() -> int:
        patch = _route(_ident())
        if patch is None or _caller_keeps_real_time():
            return real()
        return patch.ticks()

    return clock


_monotonic: Final = _seconds_clock(_real_monotonic)
_perf_counter: Final = _seconds_clock(_real_perf_counter)
_monotonic_ns: Final = _ticks_clock(_real_monotonic_ns)
_perf_counter_ns: Final = _ticks_clock(_real_perf_counter_ns)


def _time_now() -> float:
    patch = _route(_ident())
    if patch is None or _caller_keeps_real_time():
        return _real_time()
    return patch.wall_ns() / TICKS_PER_SECOND


def _time_ns() -> int:
    patch = _route(_ident())
    if patch is None or _caller_keeps_real_time():
        return _real_time_ns()
    return patch.wall_ns()


def _wall_seconds() -> int | None:
    """The virtual wall clock in whole seconds for the caller's caller, or None (real)."""
    patch = _route(_ident())
    if patch is None or _caller_keeps_real_time(3):
        return None
    return patch.wall_ns() // TICKS_PER_SECOND


def _localtime(*args: Any) -> Any:
    if args and args[0] is not None:
        return _real_localtime(*args)
    return _real_localtime(_wall_seconds(), *args[1:])


def _gmtime(*args: Any) -> Any:
    if args and args[0] is not None:
        return _real_gmtime(*args)
    return _real_gmtime(_wall_seconds(), *args[1:])


def _ctime(*args: Any) -> Any:
    if args and args[0] is not None:
        return _real_ctime(*args)
    return _real_ctime(_wall_seconds(), *args[1:])


def _asctime(*args: Any) -> Any:
    if args:
        return _real_asctime(*args)
    secs = _wall_seconds()
    return _real_asctime() if secs is None else _real_asctime(_real_localtime(secs))


def _strftime(*args: Any) -> Any:
    if len(args) != 1:
        return _real_strftime(*args)
    secs = _wall_seconds()
    if secs is None:
        return _real_strftime(*args)
    return _real_strftime(args[0], _real_localtime(secs))


def _clock_gettime(*args: Any) -> Any:
    patch = _route(_ident())
    if patch is not None and len(args) == 1 and not _caller_keeps_real_time():
        if args[0] == _CLOCK_REALTIME:
            return patch.wall_ns() / TICKS_PER_SECOND
        if args[0] == _CLOCK_MONOTONIC:
            return patch.seconds()
    return _real["clock_gettime"](*args)


def _clock_gettime_ns(*args: Any) -> Any:
    patch = _route(_ident())
    if patch is not None and len(args) == 1 and not _caller_keeps_real_time():
        if args[0] == _CLOCK_REALTIME:
            return patch.wall_ns()
        if args[0] == _CLOCK_MONOTONIC:
            return patch.ticks()
    return _real["clock_gettime_ns"](*args)


_REPLACEMENTS: Final[dict[str, Any]] = {
    "monotonic": _monotonic,
    "monotonic_ns": _monotonic_ns,
    "perf_counter": _perf_counter,
    "perf_counter_ns": _perf_counter_ns,
    "time": _time_now,
    "time_ns": _time_ns,
    "localtime": _localtime,
    "gmtime": _gmtime,
    "ctime": _ctime,
    "asctime": _asctime,
    "strftime": _strftime,
    "clock_gettime": _clock_gettime,
    "clock_gettime_ns": _clock_gettime_ns,
}


def _now(cls: type[_dt.datetime], tz: _dt.tzinfo | None = None) -> Any:
    """``cls.now(tz)``: the virtual wall clock on a patched thread, else the real one."""
    patch = _route(_ident())
    if patch is not None:
        # The caller check and wall_ns(), inlined: the most expensive clock to read, and on
        # the pure-Python path (the compiled one answers now(UTC) itself) every call counts.
        name = _frame(1).f_globals.get("__name__")
        verdict = _verdicts.get(name)
        if not (_keeps_real_time(name) if verdict is None else verdict):
            source = patch._source
            ticks = patch.ticks() if source is None else source._vt_ticks
            return _datetime_at(cls, tz, patch._offset_ns + ticks)
    if cls is _REAL_DATETIME:
        return _real_datetime_now(tz)
    return _REAL_NOW.__get__(None, cls)(tz)


def _utcnow(cls: type[_dt.datetime]) -> Any:
    """``cls.utcnow()``, warning as Python's own does from 3.12 (attributed to the caller)."""
    if _UTCNOW_WARNS:
        warnings.warn(_UTCNOW_MESSAGE, DeprecationWarning, stacklevel=2)
    patch = _route(_ident())
    if patch is None or _caller_keeps_real_time():
        aware = _REAL_NOW.__get__(None, cls)(_UTC)
    else:
        aware = _datetime_at(cls, _UTC, patch.wall_ns())
    return aware.replace(tzinfo=None)


def _today(cls: type[_dt.date]) -> Any:
    """``cls.today()`` (``date.today()``, and ``datetime.today()`` which inherits it)."""
    patch = _route(_ident())
    if patch is None or _caller_keeps_real_time():
        return _REAL_TODAY.__get__(None, cls)()
    if issubclass(cls, _REAL_DATETIME):
        return _datetime_at(cls, None, patch.wall_ns())
    return cls.fromtimestamp(patch.wall_ns() // TICKS_PER_SECOND)


_CLASS_METHODS: Final[dict[str, tuple[type, Any]]] = {
    "now": (_REAL_DATETIME, _now),
    "today": (_REAL_DATE, _today),
}
if _REAL_UTCNOW is not None:
    _CLASS_METHODS["utcnow"] = (_REAL_DATETIME, _utcnow)

# The compiled path needs each class method to have the convention its trampoline expects.
_EXPECTED_CONVENTIONS: Final = {"now": 0x0082, "utcnow": 0x0004, "today": 0x0004}
if _cclocks is not None and any(
    _hook.class_method_convention(cls, name) != _EXPECTED_CONVENTIONS[name]
    for name, (cls, _) in _CLASS_METHODS.items()
):  # pragma: no cover - a CPython whose datetime changed its calling conventions
    _cclocks = None
if _cclocks is not None:
    # The C hot path shares the routing state and rule; what it does not answer itself it
    # hands to the Python replacements above.
    _cclocks.configure(
        _routes,
        _verdicts,
        _keeps_real_time,
        _UTC,
        (
            _real_monotonic,
            _real_perf_counter,
            _real_time,
            _real_time_ns,
            _real_monotonic_ns,
            _real_perf_counter_ns,
        ),
        _now,
        _utcnow,
        _today,
    )
    for _name in (
        "monotonic",
        "monotonic_ns",
        "perf_counter",
        "perf_counter_ns",
        "time",
        "time_ns",
    ):
        _REPLACEMENTS[_name] = getattr(_cclocks, _name)

COMPILED: Final = _cclocks is not None
"""Whether the compiled helper is in use (else the pure-Python path)."""


_METHOD_NAMES: Final = frozenset(_CLASS_METHODS)
_real_thread_start: Final = threading.Thread.start


def _thread_start(thread: threading.Thread) -> None:
    """``Thread.start`` while patched: a thread started from a patched run shares its clock."""
    patch = _route(_ident())
    # The caller's module decides (a subclass's start() calling super().start() is the caller).
    if patch is not None and not _caller_keeps_real_time():
        patch._share_with_thread(thread)
    _real_thread_start(thread)


# ------------------------------------------------------------ install / uninstall

_FREE_THREADED: Final = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
_lock = threading.Lock()
_users = 0
_applied = _hook.Redirections()


def _all_subclasses(cls: type) -> list[type]:
    found, todo = [cls], [cls]
    while todo:
        sub: type
        for sub in todo.pop().__subclasses__():
            if sub not in found:
                found.append(sub)
                todo.append(sub)
    return found


_scanned: list[weakref.ref[Any]] = []
_scanned_with: tuple[int, int] = (-1, -1)  # (len(sys.modules), number of date classes)


def _bound_methods() -> list[Any]:
    """Bound builtin ``now``/``utcnow``/``today`` methods of the date classes someone holds.

    Such objects are made when a program reads ``datetime.now`` without calling it -- nearly
    always while a module is imported (attrs defaults, partials at module level) or a class
    is defined.  So the heap is searched again (``gc.get_referrers`` on the date classes)
    only when a module was imported or a date subclass defined since the last search;
    otherwise the methods found then (those still alive) are reused, which keeps installing
    cheap in a test suite or a loop driven by many ``evolve()`` calls.  The one case this
    misses: ``partial(datetime.now, ...)`` made at run time, outside any run, after the last
    search, with no import in between -- it reads the real clock until the next search.
    """
    global _scanned_with
    classes = tuple(_all_subclasses(_REAL_DATE))
    key = (len(sys.modules), len(classes))
    if key != _scanned_with:
        found = _hook.bound_methods(classes, _METHOD_NAMES)
        # Not our own unpatched copy: it must keep calling the C clock.
        _scanned[:] = [weakref.ref(m) for m in found if m is not _real_datetime_now]
        _scanned_with = key
    alive = [method() for method in _scanned]
    return [method for method in alive if method is not None]


def _install() -> None:
    """Redirect the clocks (first user) and count one more user."""
    global _users
    if _FREE_THREADED:
        raise UnsupportedError(
            "patch_time=True is not supported on a free-threaded (no-GIL) Python build: it "
            "redirects the clock objects in place, which is safe only under the GIL"
        )
    with _lock:
        if _users == 0:
            applied = _applied
            try:
                for name, clock in _CLOCK_OBJECTS.items():  # clock_gettime: Unix only
                    applied.redirect_function(clock, _REPLACEMENTS[name])
                if _cclocks is not None:
                    # The C definitions themselves: every lookup and bound method follows.
                    addresses = _cclocks.addresses()
                    for name, (cls, _) in _CLASS_METHODS.items():
                        applied.redirect_definition(cls, name, addresses[name])
                else:
                    for name, (cls, function) in _CLASS_METHODS.items():
                        applied.replace_class_attribute(cls, name, classmethod(function))
                    # Bound methods stored before the run: attrs factories,
                    # functools.partial(datetime.now, UTC), defaults.
                    for method in _bound_methods():
                        function = _CLASS_METHODS[method.__name__][1]
                        applied.redirect_function(
                            method, functools.partial(function, method.__self__)
                        )
                if vars(threading.Thread).get("start") is _thread_start:
                    # Left behind by a program that replaced Thread.start during a run and
                    # put back what it had found, our replacement (monkeypatch's undo): the
                    # real method is what belongs there between runs.
                    threading.Thread.start = _real_thread_start  # type: ignore[method-assign]
                applied.replace_class_attribute(threading.Thread, "start", _thread_start)
            except BaseException:
                applied.undo()
                raise
        _users += 1


def _uninstall() -> None:
    """Count one user less; the last one restores every clock."""
    global _users
    with _lock:
        _users -= 1
        if _users == 0:
            _applied.undo()


def installed() -> bool:
    """Whether the clocks are redirected right now (for tests and diagnostics)."""
    return bool(_applied)


def _forget_in_child() -> None:
    # A process forked from the loop's thread inherits the redirections, but not the running
    # loop: restore everything at once; the patches entered before the fork notice (pid).
    global _users, _lock
    _lock = threading.Lock()
    _routes.clear()
    _users = 0
    _applied.undo()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
