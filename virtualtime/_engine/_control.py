"""Driving verbs from inside a running virtual loop, and priority sleeps.

These are the awaitable twins of the loop methods ``step``, ``evolve``, ``run_until``,
``fast_forward``, ``settle`` and ``peek``: the same meaning, used from a task (a test body, a
simulation driver) while the loop runs.  Each acts on the running
:class:`~virtualtime.VirtualEventLoop` and raises :class:`~virtualtime.UsageError` when
the running loop is not virtual.

The verbs (and ``now``/``peek``) work on trio too: called from a trio run whose clock is a
:class:`virtualtime.trio.VirtualClock` (``virtualtime.trio.run``, ``anyio_run(...,
backend="trio")``, the pytest plugin), they drive that clock with the same meaning, so one
driver runs on both backends.  trio is never imported here; it is looked for only when no
asyncio loop is running.

A driver that awaits ``evolve(dt)`` is woken only when the loop is idle at ``now + dt``: every
timer due in the window has fired at its own instant and everything it started has settled.
This holds in autojump mode too -- time stops at the driver's target even when other timers
lie beyond it.

Sync or async, one rule for the whole package: a function is a coroutine exactly when it must
be called from inside a running loop (these verbs, ``sleep``); a ``run...`` function or method
that drives a loop or clock from outside is synchronous (``virtualtime.run``,
``loop.run_until(t)``, ``virtualtime.trio.run``).  ``now()`` and ``peek()`` only read, so they
are plain functions.

The contract with the loop: each asyncio verb finds the running virtual loop and awaits
:meth:`VirtualEventLoop.drive <virtualtime.VirtualEventLoop.drive>`; it reads nothing else of
the loop's (the native ``sleep_until`` schedules through the loop's own ``call_at`` path).
"""

from __future__ import annotations

import asyncio
import collections.abc
import datetime
import heapq
import math
import sys
import typing
from typing import TYPE_CHECKING, Final

from .._clocks._patch import wall_datetime
from .._shared._errors import InvalidTypeError, UsageError
from .._shared._time import TICKS_PER_SECOND as _TICKS_PER_SECOND
from .._shared._time import check_delay, check_finite, to_ticks
from ._loop import RUNNING_HERE as _running_here
from ._loop import VirtualEventLoop, running_virtual_loop, set_result_unless_cancelled
from ._loop import core as _core

_Future: Final = asyncio.Future
_heappush: Final = heapq.heappush
_FAR: Final = 1e18
"""Longest delay (seconds) :func:`sleep` schedules inline (as the loop's ``call_later``)."""

if TYPE_CHECKING:
    from ..trio import VirtualClock

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


def _trio_clock(what: str) -> VirtualClock | None:
    """The running trio run's VirtualClock; None when no trio run is running here.

    Looked for only when no asyncio loop runs in this thread (then the asyncio branch decides,
    unchanged), and only if trio is imported at all.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        return None
    trio = sys.modules.get("trio")
    if trio is None:
        return None
    try:
        clock = trio.lowlevel.current_clock()
    except RuntimeError:
        return None
    virtual_trio = sys.modules.get("virtualtime.trio")
    if virtual_trio is not None and isinstance(clock, virtual_trio.VirtualClock):
        found: VirtualClock = clock
        return found
    raise UsageError(
        f"{what} needs virtual time, but trio runs with {type(clock).__name__}; run it with "
        "virtualtime.trio.run(...) or trio.run(..., clock=virtualtime.trio.VirtualClock())"
    )


def _trio_verbs() -> typing.Any:
    return sys.modules["virtualtime.trio"]


def now() -> float:
    """The running virtual loop's time, in seconds."""
    clock = _trio_clock("virtualtime.now()")
    if clock is not None:
        return clock.current_time()
    return running_virtual_loop("virtualtime.now()").time()


def peek() -> float:
    """Time of the running virtual loop's next pending timer, or ``math.inf``."""
    clock = _trio_clock("virtualtime.peek()")
    if clock is not None:
        result: float = _trio_verbs()._peek(clock)
        return result
    return running_virtual_loop("virtualtime.peek()").peek()


async def settle() -> float:
    """Let everything that is ready (and every timer due now) run; time does not move."""
    clock = _trio_clock("virtualtime.settle()")
    if clock is not None:
        result: float = await _trio_verbs()._settle(clock)
        return result
    return await running_virtual_loop("virtualtime.settle()").drive("settle")


async def step() -> float | None:
    """Settle, then fire the next timer instant and let it settle.

    Returns the new time, or None (time unchanged) when nothing else is scheduled.  In
    autojump mode other tasks' timers are what "next" means here, so use this in manual mode
    or when you know what is pending.
    """
    clock = _trio_clock("virtualtime.step()")
    if clock is not None:
        result: float | None = await _trio_verbs()._step(clock)
        return result
    return await running_virtual_loop("virtualtime.step()").drive("step")


async def evolve(dt: float) -> float:
    """Fire every timer due in ``[now, now + dt]`` at its own instant; return ``now + dt``."""
    seconds = check_delay("dt", dt)
    clock = _trio_clock("virtualtime.evolve()")
    if clock is not None:
        result: float = await _trio_verbs()._evolve(clock, seconds)
        return result
    return await running_virtual_loop("virtualtime.evolve()").drive("evolve", dt)


async def run_until(t: float) -> float:
    """:func:`evolve` up to the absolute virtual time ``t`` (not in the past)."""
    clock = _trio_clock("virtualtime.run_until()")
    if clock is not None:
        verbs = _trio_verbs()
        result: float = await verbs._run_until(
            clock, verbs._check_target(clock, check_finite("t", t))
        )
        return result
    return await running_virtual_loop("virtualtime.run_until()").drive("run_until", t)


async def fast_forward(dt: float) -> float:
    """Leap ``dt`` at once; timers the leap made overdue fire in order, seeing the new time."""
    seconds = check_delay("dt", dt)
    clock = _trio_clock("virtualtime.fast_forward()")
    if clock is not None:
        result: float = await _trio_verbs()._fast_forward(clock, seconds)
        return result
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
    needs a timer handle and a callback -- and the one to use when the order of same-instant
    wake-ups matters (a sensor that must read before the controller acts).  Within one
    priority, first to sleep is first to wake.  ``delay`` must be >= 0 (``math.inf`` sleeps
    until cancelled).  Cancellation, ``asyncio.timeout``, ``wait_for`` and anyio's cancel
    scopes act on it exactly as on ``asyncio.sleep``.  With the compiled core this name is a
    compiled function whose result asyncio treats as a coroutine (without a Python frame), so
    ``inspect.iscoroutinefunction(virtualtime.sleep)`` is False there.
    """
    # The common case costs two checks; anything unusual gets the full validation.
    if (type(delay) not in _NUMBERS or not delay >= 0) and delay != math.inf:
        delay = check_delay("delay", delay)
    if type(priority) is not int:
        priority = _check_priority(priority)
    loop = _running_here.loop
    if loop is None:  # raises when no virtual loop runs here
        loop = running_virtual_loop("virtualtime.sleep()")
    future: asyncio.Future[None] = _Future(loop=loop)
    if 0 < delay < _FAR and loop._vt_history is None:
        # No timer handle: the future itself waits in the loop's heap, and the loop resolves
        # it in timer order (VirtualEventLoop._vt_wake_after, inlined for the common case).
        step = round(delay * _TICKS_PER_SECOND)
        _heappush(
            loop._vt_heap,
            (loop._vt_ticks + (step if step > 0 else 1), priority, loop._vt_seq(), future),
        )
    else:
        loop._vt_wake_after(delay, future, priority)
    # A cancellation leaves the entry dead in the heap; the loop finds it (see _timers).
    await future


pure_sleep: Final = sleep
"""The pure-Python :func:`sleep`: the reference the compiled one follows, and its fallback."""

if _core is not None:
    # The compiled core's sleep (virtualtime/_engine/_cwake.c): the same entry in the same heap,
    # the same future, with no Python frame and a few dozen bytes per pending sleep instead of
    # a coroutine frame.  It hands whatever is unusual (no virtual loop, history kept, a zero,
    # infinite or bad delay) to pure_sleep.  What it returns is a coroutine to asyncio
    # (registered below: create_task, wait_for and gather take it).  Bound through globals()
    # so that type checkers and the API docs keep reading the async def above.
    _core.setup_sleep(_running_here, pure_sleep)
    collections.abc.Coroutine.register(_core.Sleep)
    globals()["sleep"] = _core.sleep


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
