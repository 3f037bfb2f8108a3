"""The driving verbs' trio side: ``virtualtime.evolve`` and friends on a trio VirtualClock.

``virtualtime.settle/step/evolve/run_until/fast_forward/now/peek`` are written once, in the
asyncio engine, which knows no other backend.  When no asyncio loop runs, the engine asks the
registry of drivers (:mod:`virtualtime._shared._drivers`); this module is what the trio package
registers there (:func:`register`, called when ``virtualtime.trio`` is imported): a finder that
answers with the running :class:`~virtualtime.trio.VirtualClock` as a driver, or refuses a trio
run whose clock is not virtual.  The verbs' trio halves below only use what any task may:
sleeping, waiting for the run to be idle, and the clock's own jump.

Part of ``trio``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

import math

import trio
import trio.lowlevel
import trio.testing

from .._shared import _drivers, _errors, _time
from . import _park
from ._clock import VirtualClock
from ._exact import HORIZON, NOISE_ULPS, span_ticks

__all__ = ["TrioDriver", "find_driver", "register"]


def _now(clock: VirtualClock) -> float:
    return clock.current_time()


def _peek(clock: VirtualClock) -> float:
    """Virtual time of the next pending deadline (or kit wait), or ``math.inf``."""
    gap = trio.lowlevel.current_statistics().seconds_to_next_deadline
    found = math.inf if gap == math.inf else clock.current_time() + gap
    head = _park.head(clock)
    return found if head is None else min(found, head / _time.TICKS_PER_SECOND)


async def _settle(clock: VirtualClock) -> float:
    """Let every task run until all are blocked; time does not move (a waiter in
    ``wait_all_tasks_blocked`` always goes before a jump)."""
    await trio.testing.wait_all_tasks_blocked()
    return clock.current_time()


async def _run_until(clock: VirtualClock, t: float) -> float:
    """Let the clock jump from deadline to deadline (even in manual mode) until this task's own
    deadline at ``t`` wakes it, then settle.  While this task waits, no jump can pass ``t``."""
    autojump = clock.autojump
    clock.autojump = True
    try:
        await trio.sleep_until(t)
    finally:
        clock.autojump = autojump
    return await _settle(clock)


async def _evolve(clock: VirtualClock, dt: float) -> float:
    now = _time.to_ticks(clock.current_time())
    target = now + span_ticks("dt", dt, now)
    return await _run_until(clock, _time.to_seconds(target))


def _check_target(clock: VirtualClock, t: float) -> float:
    t = _time.check_finite("t", t)
    if t >= HORIZON:
        raise _errors.InvalidValueError(
            f"t must be before the horizon of virtual time ({HORIZON:.4g} s), got {t!r}"
        )
    now = clock.current_time()
    # Compare in ticks: trio's float deadlines carry noise (0.1 * 3 reads 0.300...04).
    if _time.to_ticks(t) < _time.to_ticks(now):
        raise _errors.InvalidValueError(
            f"t must not be in the past: t={t!r} < now={now!r} (virtual time never goes backwards)"
        )
    return t


async def _step(clock: VirtualClock) -> float | None:
    await _settle(clock)
    before = clock.current_time()
    target = _peek(clock)
    if target == math.inf:
        return None
    if target <= before:
        return await _settle(clock)  # due now: settling fired it
    now = await _run_until(clock, target)
    # now + gap can land an ulp short of the deadline it measured: catch that deadline too.
    for _ in range(NOISE_ULPS):
        gap = trio.lowlevel.current_statistics().seconds_to_next_deadline
        if not 0 < gap <= NOISE_ULPS * math.ulp(now):
            break
        now = await _run_until(clock, max(now + gap, math.nextafter(now, math.inf)))
    return now


async def _fast_forward(clock: VirtualClock, dt: float) -> float:
    clock._leap("dt", dt)
    await trio.lowlevel.checkpoint()
    return await _settle(clock)


class TrioDriver:
    """The running trio :class:`~virtualtime.trio.VirtualClock`, as the driving verbs drive it.

    What :func:`find_driver` hands the verbs (a :class:`virtualtime._shared._drivers.Driver`);
    each method is the verb's trio half above.
    """

    __slots__ = ("clock",)

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock

    def now(self) -> float:
        return _now(self.clock)

    def peek(self) -> float:
        return _peek(self.clock)

    async def settle(self) -> float:
        return await _settle(self.clock)

    async def step(self) -> float | None:
        return await _step(self.clock)

    async def evolve(self, dt: float) -> float:
        return await _evolve(self.clock, dt)

    async def run_until(self, t: float) -> float:
        clock = self.clock
        return await _run_until(clock, _check_target(clock, t))

    async def fast_forward(self, dt: float) -> float:
        return await _fast_forward(self.clock, dt)


def find_driver(what: str) -> TrioDriver | None:
    """The running trio run's VirtualClock as a driver; None when no trio run is running here.

    The finder :func:`register` gives the registry of drivers: asked only when no asyncio loop
    runs in this thread.  A trio run with another clock is refused, naming the verb ``what``.
    """
    try:
        clock = trio.lowlevel.current_clock()
    except RuntimeError:
        return None
    if isinstance(clock, VirtualClock):
        return TrioDriver(clock)
    raise _errors.UsageError(
        f"{what} needs virtual time, but trio runs with {type(clock).__name__}; run it with "
        "virtualtime.trio.run(...) or trio.run(..., clock=virtualtime.trio.VirtualClock())"
    )


def register() -> None:
    """Let the driving verbs find a running trio VirtualClock (called when the package is
    imported: a VirtualClock can only be running if it was)."""
    _drivers.register("trio", find_driver)
