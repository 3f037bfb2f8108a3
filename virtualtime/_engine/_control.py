"""Driving verbs from inside a running virtual loop, and priority sleeps.

These are the awaitable twins of the loop methods ``step``, ``evolve``, ``run_until``,
``fast_forward``, ``settle`` and ``peek``: the same meaning, used from a task (a test body, a
simulation driver) while the loop runs.  Each acts on the running
:class:`~virtualtime.VirtualEventLoop` and raises :class:`~virtualtime.UsageError` when
the running loop is not virtual.

The verbs (and ``now``/``peek``) work on other backends' virtual clocks too, with the same
meaning, so one driver runs on every backend.  This module knows no other backend: when no
asyncio loop runs in the calling thread, each verb asks the registry of drivers
(:mod:`virtualtime._shared._drivers`), where a backend registers, when it is imported, how to
find its running virtual clock; the driver found is driven instead of a loop.

A driver that awaits ``evolve(dt)`` is woken only when the loop is idle at ``now + dt``: every
timer due in the window has fired at its own instant and everything it started has settled.
This holds in autojump mode too -- time stops at the driver's target even when other timers
lie beyond it.

Sync or async, one rule for the whole package: a function is a coroutine exactly when it must
be called from inside a running loop (these verbs, ``sleep``); a ``run...`` function or method
that drives a loop or clock from outside is synchronous (``virtualtime.run``,
``loop.run_until(t)``, and the same for other backends' clocks).  ``now()`` and ``peek()``
only read, so they are plain functions.

The contract with the loop: each asyncio verb finds the running virtual loop and awaits
:meth:`VirtualEventLoop.drive <virtualtime.VirtualEventLoop.drive>`; it reads nothing else of
the loop's (the native ``sleep_until`` schedules through the loop's own ``call_at`` path).

Part of ``engine``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

import asyncio
import collections.abc
import datetime
import heapq
import math
import typing
import warnings
from collections.abc import Generator
from typing import Any, Final

from .._clocks._patch import wall_datetime
from .._shared import _drivers
from .._shared._errors import InvalidTypeError
from .._shared._time import TICKS_PER_SECOND as _TICKS_PER_SECOND
from .._shared._time import check_delay, check_finite, to_ticks
from ._compiled import core as _core
from ._handles import set_result_unless_cancelled
from ._loop import VirtualEventLoop, running_virtual_loop
from ._running import RUNNING_HERE as _running_here

_Future: Final = asyncio.Future
_heappush: Final = heapq.heappush
_iter: Final = iter
_FAR: Final = 1e18
"""Longest delay (seconds) :func:`sleep` schedules inline (as the loop's ``call_later``)."""

__all__ = [
    "evolve",
    "fast_forward",
    "now",
    "peek",
    "run_until",
    "settle",
    "sleep",
    "sleep_until",
    "step",
    "wall_time",
]


def _other_driver(what: str) -> _drivers.Driver | None:
    """Another backend's running virtual clock; None when none runs here (or asyncio does).

    Looked for only when no asyncio loop runs in this thread (then the asyncio branch decides,
    unchanged).  A backend running here with a clock that is not virtual raises its own
    :class:`~virtualtime.UsageError`, naming ``what``.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _drivers.find(what)
    return None


def now() -> float:
    """The running virtual loop's time, in seconds."""
    driver = _other_driver("virtualtime.now()")
    if driver is not None:
        return driver.now()
    return running_virtual_loop("virtualtime.now()").time()


def peek() -> float:
    """Time of the running virtual loop's next pending timer, or ``math.inf``."""
    driver = _other_driver("virtualtime.peek()")
    if driver is not None:
        return driver.peek()
    return running_virtual_loop("virtualtime.peek()").peek()


async def settle() -> float:
    """Let everything that is ready (and every timer due now) run; time does not move."""
    driver = _other_driver("virtualtime.settle()")
    if driver is not None:
        return await driver.settle()
    return await running_virtual_loop("virtualtime.settle()").drive("settle")


async def step() -> float | None:
    """Settle, then fire the next timer instant and let it settle.

    Returns the new time, or None (time unchanged) when nothing else is scheduled.  In
    autojump mode other tasks' timers are what "next" means here, so use this in manual mode
    or when you know what is pending.
    """
    driver = _other_driver("virtualtime.step()")
    if driver is not None:
        return await driver.step()
    return await running_virtual_loop("virtualtime.step()").drive("step")


async def evolve(dt: float) -> float:
    """Fire every timer due in ``[now, now + dt]`` at its own instant; return ``now + dt``."""
    seconds = check_delay("dt", dt)
    driver = _other_driver("virtualtime.evolve()")
    if driver is not None:
        return await driver.evolve(seconds)
    return await running_virtual_loop("virtualtime.evolve()").drive("evolve", dt)


async def run_until(t: float) -> float:
    """:func:`evolve` up to the absolute virtual time ``t`` (not in the past)."""
    driver = _other_driver("virtualtime.run_until()")
    if driver is not None:
        return await driver.run_until(check_finite("t", t))
    return await running_virtual_loop("virtualtime.run_until()").drive("run_until", t)


async def fast_forward(dt: float) -> float:
    """Leap ``dt`` at once; timers the leap made overdue fire in order, seeing the new time."""
    seconds = check_delay("dt", dt)
    driver = _other_driver("virtualtime.fast_forward()")
    if driver is not None:
        return await driver.fast_forward(seconds)
    loop = running_virtual_loop("virtualtime.fast_forward()")
    return await loop.drive("fast_forward", dt)


_NUMBERS = (float, int)


def _check_priority(priority: object) -> int:
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidTypeError(f"priority must be an int, got {priority!r}")
    return priority


async def sleep(delay: float, *, priority: int = 0) -> None:
    """Sleep ``delay`` virtual seconds; at one instant smaller ``priority`` wakes first.

    The fastest way to wait on the virtual loop -- cheaper than :func:`asyncio.sleep`, which
    needs a timer handle and a callback, and about 300 bytes lighter per pending sleep -- and
    the one to use when the order of same-instant wake-ups matters (a sensor that must read
    before the controller acts).  Within one priority, first to sleep is first to wake.
    ``delay`` must be >= 0 (``math.inf`` sleeps until cancelled).  Cancellation,
    ``asyncio.timeout``, ``wait_for`` and anyio's cancel scopes act on it exactly as on
    ``asyncio.sleep``.

    What it returns behaves as a coroutine in every way asyncio and anyio look at
    (``create_task``, ``gather``, ``wait_for``, ``send``/``throw``/``close``, a warning when
    it is never awaited), but it is not a Python coroutine object: awaited, it puts its
    future straight into the loop's timer heap and keeps no frame while it waits.  So
    ``inspect.iscoroutinefunction(virtualtime.sleep)`` is False, and a task blocked in it
    shows the future itself as what it awaits.
    """
    # The general way, for what the frame-free sleeps below hand over: a delay that is zero,
    # infinite, far or not a plain number, a bad priority, a loop keeping history, or no
    # virtual loop at all.  The common case never gets here.
    if (type(delay) not in _NUMBERS or not delay >= 0) and delay != math.inf:
        delay = check_delay("delay", delay)
    if type(priority) is not int:
        priority = _check_priority(priority)
    loop = _running_here.loop
    if loop is None:  # raises when no virtual loop runs here
        loop = running_virtual_loop("virtualtime.sleep()")
    future: asyncio.Future[None] = _Future(loop=loop)
    loop._vt_wake_after(delay, future, priority)
    # A cancellation leaves the entry dead in the heap; the loop finds it (see _timers).
    await future


general_sleep: Final = sleep
"""The coroutine both frame-free sleeps (:class:`PureSleep` and the compiled core's) hand
whatever is unusual to: the reference for their checks, errors and behaviour."""

_ENDED: Final[Any] = general_sleep(0)
_ENDED.close()
"""What a finished :class:`PureSleep` hands ``send``/``throw``/``close`` to: a closed coroutine,
which answers them exactly as a finished coroutine does."""


class PureSleep:
    """A :func:`virtualtime.sleep` on the pure-Python path: a coroutine with no frame.

    An ``async def`` sleep would keep its coroutine frame (about 260 bytes) and a future
    iterator alive for as long as it waits; a pending sleep is otherwise a task, the user's
    coroutine, a future and a heap entry, so the frame was a fifth of the whole.  This object
    holds the arguments until it is awaited, and ``__await__`` does what the coroutine's
    first step did: it pushes the future straight into the loop's timer heap and hands the
    awaiter the future's own iterator, so nothing of the sleep's is left but the future and
    its entry.  The compiled core's ``Sleep`` (``_cwake.c``) is the same idea in C.

    A sleep's cancellation needs no report: its entry is dead from then on, and the loop finds
    it (see :mod:`virtualtime._engine._timers`).  Anything unusual is handed, at the same
    moment, to :data:`general_sleep`.  ``send``, ``throw`` and ``close`` make it a coroutine
    for a task that wraps it (``create_task(virtualtime.sleep(1))``, ``gather``, ``wait_for``).

    Its state is its class: :func:`pure_sleep` makes an ``_Unawaited``, which warns when it is
    dropped never awaited (as a forgotten coroutine does) and becomes a ``_Started`` the
    moment it is awaited, started or closed.  Changing the class costs less than a
    ``__del__`` that every sleep would run, since only the forgotten ones need one.
    """

    __slots__ = ("_delay", "_inner", "_priority")
    __name__ = "sleep"  # what asyncio's task repr shows: ``coro=<sleep()>``
    _delay: Any
    _priority: Any
    _inner: Any
    """What ``send``/``throw``/``close`` go to: None until a task or a driver starts the sleep."""

    def __await__(self) -> Generator[Any, None, None]:
        # Only a started sleep gets here (_Unawaited has its own): awaited twice, it raises
        # the finished coroutine's own RuntimeError.
        return typing.cast("Generator[Any, None, None]", _ENDED.__await__())

    # A task driving the sleep itself (create_task, gather, wait_for) or a hand-written driver:
    # each call goes to what __await__ returned, and a finished sleep answers as a finished
    # coroutine does.

    def send(self, value: Any) -> Any:
        """As ``coroutine.send()``."""
        inner = self._inner
        if inner is None:
            if value is not None and type(self) is _Unawaited:
                # Refused before anything starts, with a just-started coroutine's TypeError.
                probe = general_sleep(0)
                try:
                    return probe.send(value)
                finally:
                    probe.close()
            inner = self._inner = self.__await__()
        try:
            return inner.send(value)
        except BaseException:
            self._inner = _ENDED
            raise

    def throw(self, *args: Any) -> Any:
        """As ``coroutine.throw()``: before the sleep starts, the exception ends it at once."""
        inner = self._inner
        if inner is None:
            self.__class__ = _Started
            inner = general_sleep(0)  # a coroutine not started: throw() raises at its start
        try:
            return inner.throw(*args)
        except BaseException:
            self._inner = _ENDED
            raise

    def close(self) -> None:
        """As ``coroutine.close()``: a sleep closed before it started warns of nothing."""
        inner = self._inner
        self.__class__ = _Started
        self._inner = _ENDED
        if inner is not None:
            inner.close()

    @property
    def cr_await(self) -> Any:
        """What the sleep waits on while a task drives it, else None."""
        inner = self._inner
        return None if inner is None or inner is _ENDED else inner

    cr_running = False
    cr_frame = None
    cr_code = None

    def __repr__(self) -> str:
        return f"<virtualtime.sleep object at {id(self):#x}>"


class _Started(PureSleep):
    """A sleep that was awaited, started or closed."""

    __slots__ = ()


class _Unawaited(PureSleep):
    """A sleep not awaited yet: what :func:`pure_sleep` returns."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        self.__class__ = _Started  # type: ignore[assignment]  # the state change (see PureSleep)
        delay = self._delay
        loop = _running_here.loop
        if (
            type(delay) in _NUMBERS
            and 0 < delay < _FAR
            and loop is not None
            and loop._vt_history is None
            and type(self._priority) is int
        ):
            # VirtualEventLoop._vt_wake_after, inlined for the common case.
            future: asyncio.Future[None] = _Future(loop=loop)
            step = round(delay * _TICKS_PER_SECOND)
            _heappush(
                loop._vt_heap,
                (loop._vt_ticks + (step or 1), self._priority, loop._vt_seq(), future),
            )
            return _iter(future)  # what ``await future`` awaits: the future's C iterator
        return general_sleep(delay, priority=self._priority).__await__()

    def __del__(self, _warn: Any = warnings.warn) -> None:
        # A default, not a global: a sleep dropped at interpreter shutdown still finds it.
        _warn("coroutine 'virtualtime.sleep' was never awaited", RuntimeWarning, 2)


collections.abc.Coroutine.register(PureSleep)
_new_sleep: Final = _Unawaited


def pure_sleep(delay: float, *, priority: int = 0) -> PureSleep:
    """The pure-Python :func:`sleep`: what ``virtualtime.sleep`` is without the compiled core."""
    made = _new_sleep()
    made._delay = delay
    made._priority = priority
    made._inner = None
    return made


if _core is not None:
    # The compiled core's sleep (virtualtime/_engine/_cwake.c): the same entry in the same heap,
    # the same future, and a few dozen bytes per pending sleep.  It hands whatever is unusual
    # (no virtual loop, history kept, a zero, infinite or bad delay) to general_sleep.  What
    # it returns is a coroutine to asyncio (registered below: create_task, wait_for and gather
    # take it).  Bound through globals() so that type checkers and the API docs keep reading
    # the async def above.
    _core.setup_sleep(_running_here, general_sleep)
    collections.abc.Coroutine.register(_core.Sleep)
    globals()["sleep"] = _core.sleep
else:
    globals()["sleep"] = pure_sleep


async def sleep_until(when: float, *, priority: int = 0) -> None:
    """Sleep until virtual time ``when`` (at once if it is already past), with a ``priority``."""
    when = check_finite("when", when)
    priority = _check_priority(priority)
    loop = running_virtual_loop("virtualtime.sleep_until()")
    future: asyncio.Future[None] = loop.create_future()
    # Not loop.call_at: a deadline already reached is a zero delay here (same-instant order
    # by priority), which must never make time creep.
    handle = loop._vt_call_at(
        when, set_result_unless_cancelled, (future, None), None, priority, deadline=False
    )
    try:
        await future
    finally:
        handle.cancel()


def wall_time(loop: VirtualEventLoop | None = None) -> datetime.datetime:
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
        raise InvalidTypeError(
            f"loop must be a virtualtime.VirtualEventLoop or None, got {loop!r} "
            f"({type(loop).__name__})"
        )
    # The loop's own tick counter, read as the verbs above read it: exact nanoseconds.
    return wall_datetime(loop.wall_start, loop.ticks - to_ticks(loop.start_time))
