"""How virtual time moves, besides the loop's own jump to the next timer.

:class:`DrivingMixin` holds the clock's one setter (:meth:`~DrivingMixin._vt_set_ticks`,
through which every move of time goes), the watched horizon of the pytest plugin's
``max_time``, the creep that lets a re-armed past deadline out, the *drives* (a target
instant with somebody waiting for the loop to be idle there: the machinery behind the driving
verbs ``settle``/``step``/``evolve``/``run_until``/``fast_forward``, from outside the loop
or from a task inside it).  The public verbs themselves are methods of
:class:`~virtualtime._engine._loop.VirtualEventLoop`; the waits that move time in place are
in :mod:`._waits`.

Part of ``engine``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

import asyncio
import heapq
from asyncio import events as _asyncio_events
from collections.abc import Callable
from typing import Final, Literal

from .._shared._errors import InvalidValueError, UsageError
from .._shared._time import TICKS_PER_SECOND, check_finite, ticks_at_or_after
from ._checks import _HORIZON, _NEVER, _check_span
from ._handles import set_result_unless_cancelled
from ._history import HistoryMixin

__all__ = ["DriveVerb", "DrivingMixin"]

DriveVerb = Literal["settle", "step", "evolve", "run_until", "fast_forward"]

_current_task: Final = asyncio.current_task

_CREEP_AFTER: Final = 8
"""Rounds at one instant that may fire ``call_at`` timers re-armed at that very instant,
after which time creeps forward one tick (see ``VirtualEventLoop._vt_rearmed_round``)."""


class _Drive:
    """Somebody waiting for the loop to be idle at a target instant (the heap key)."""

    __slots__ = ("future",)

    def __init__(self, future: asyncio.Future[float] | None) -> None:
        self.future = future  # None: an outside verb, which stops the loop instead


class DrivingMixin(HistoryMixin):
    """Moving the clock: its setter, the horizon watch, creeping, and drives."""

    _vt_drives: list[tuple[int, int, _Drive]]
    """Pending drives, a heap of ``(target tick, sequence, drive)``."""

    def _vt_set_ticks(self, ticks: int) -> None:
        self._vt_ticks = ticks
        now = ticks / TICKS_PER_SECOND
        if now > self._vt_now:  # never below a deadline already read (see call_at)
            self._vt_now = now
        self._vt_instant_count = 0
        if ticks >= self._vt_beyond:
            self._vt_past_horizon()

    def _vt_watch_horizon(self, ticks: int | None, told: Callable[[], object] | None) -> None:
        """Call ``told()`` whenever virtual time moves to ``ticks`` or past it (None: stop).

        The pytest plugin's ``max_time``: every way time moves -- a timer of any kind
        (``call_later``, ``asyncio.sleep``, ``virtualtime.sleep``, anyio's sleep, the sim
        kit's waits), a jump, a driving verb -- goes through :meth:`_vt_set_ticks`, and the
        plain round steps aside for a head at or past ``ticks``.  ``told`` runs before the
        timers of that instant fire, each time time moves while past it; it must not raise.
        """
        self._vt_beyond = _NEVER if ticks is None else min(ticks, _NEVER)
        self._vt_at_horizon = told

    def _vt_past_horizon(self) -> None:
        told = self._vt_at_horizon
        if told is not None:
            told()

    def _vt_rearmed_round(self, now: int) -> int:
        """A round fires timers after ``call_at`` was asked for a deadline already reached.

        Returns the tick the round fires at: ``now``, or one tick later once this has
        happened :data:`_CREEP_AFTER` times at one instant.  On a real clock time moves by
        itself between two rounds, and code that computes its next deadline from
        ``time()`` gets out: aiolimiter's wake-up deadline ``last_check + needed / rate``
        can round to a float equal to now, so it re-arms ``call_at(now)`` until the clock
        moves.  Creeping one tick is the least change that lets it out, and it is not
        progress for the runaway guard (its round count is kept), so a genuine spin still
        ends in :class:`RunawayError`.  Zero *delays* (``call_later(0)``, ``sleep(0,
        priority=p)``) ask for the current instant on purpose and never creep: only a
        deadline that keeps landing on the current instant does.
        """
        self._vt_rearmed = False
        if self._vt_rearm_tick != now:
            self._vt_rearm_tick = now
            self._vt_rearm_rounds = 1
            return now
        rounds = self._vt_rearm_rounds + 1
        if rounds <= _CREEP_AFTER:
            self._vt_rearm_rounds = rounds
            return now
        ticks = now + 1
        self._vt_ticks = ticks
        seconds = ticks / TICKS_PER_SECOND
        if seconds > self._vt_now:
            self._vt_now = seconds
        if ticks >= self._vt_beyond:
            self._vt_past_horizon()
        start, count = self._vt_creeping
        self._vt_creeping = (start, count + 1) if start + count == now else (now, 1)
        self._vt_rearm_tick = ticks
        self._vt_rearm_rounds = 0
        return ticks

    async def _vt_await_drive(self, target: int) -> float:
        future = self._vt_drive_inside(target)
        try:
            return await future
        finally:
            if not future.done():
                self._vt_cancel_drive(future)

    def _vt_next_ticks(self) -> int | None:
        """The tick of the next pending (live, finite) timer, or None."""
        ticks = self._vt_timers.peek()
        return None if ticks is None else max(ticks, self._vt_ticks)

    def _vt_check_target(self, t: float) -> int:
        t = check_finite("t", t)
        target = ticks_at_or_after(t) if t < _HORIZON else _NEVER
        if target >= _NEVER:
            raise InvalidValueError(
                f"t must be before the horizon of virtual time ({_HORIZON:.4g} s), got {t!r}"
            )
        if target < self._vt_ticks:
            raise InvalidValueError(
                f"t must not be in the past: t={t!r} < now={self._vt_now!r} "
                "(virtual time never goes backwards)"
            )
        return target

    def _vt_span_ticks(self, dt: object) -> int:
        """Ticks of a driving verb's ``dt`` (finite, >= 0, not past the horizon)."""
        return _check_span("dt", dt, self._vt_ticks)

    def _vt_leap(self, ticks: int) -> None:
        self._vt_set_ticks(self._vt_ticks + ticks)
        self._vt_anchor.rebase(self._vt_now)

    def _vt_outside(self, verb: str, inside: str) -> None:
        if self.is_running() or _asyncio_events._get_running_loop() is not None:
            raise UsageError(
                f"loop.{verb}() drives a loop that is not running; this one is running "
                f"(or another loop is). From a coroutine use `{inside}`; from another thread "
                f"use asyncio.run_coroutine_threadsafe({inside.removeprefix('await ')}, loop)"
            )
        self._check_closed()  # asyncio-private: the stock "Event loop is closed" check.

    def _vt_drive_outside(self, target: int) -> None:
        drive = _Drive(None)
        heapq.heappush(self._vt_drives, (target, self._vt_seq(), drive))
        self._vt_instant_count = 0
        try:
            self.run_forever()
        finally:
            self._vt_drives[:] = [e for e in self._vt_drives if e[2] is not drive]
            heapq.heapify(self._vt_drives)

    def _vt_drive_inside(self, target: int) -> asyncio.Future[float]:
        future: asyncio.Future[float] = self.create_future()
        heapq.heappush(self._vt_drives, (target, self._vt_seq(), _Drive(future)))
        self._vt_instant_count = 0
        return future

    def _vt_cancel_drive(self, future: asyncio.Future[float]) -> None:
        self._vt_drives[:] = [e for e in self._vt_drives if e[2].future is not future]
        heapq.heapify(self._vt_drives)

    def _vt_finish_drives(self) -> None:
        drives = self._vt_drives
        now = self._vt_ticks
        while drives and drives[0][0] <= now:
            drive = heapq.heappop(drives)[2]
            if drive.future is None:
                self.stop()
            else:
                set_result_unless_cancelled(drive.future, self._vt_now)
