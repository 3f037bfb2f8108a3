"""The loop's cheapest waits: the native wait, and the jump that skips a loop round.

:class:`WaitsMixin` is the loop's contract with its fastest callers.
:meth:`~WaitsMixin._vt_wake_after` puts a future itself in the timer heap (no handle, no
callback): :func:`virtualtime.sleep` and the sim kit's sleeps are made of it.
:meth:`~WaitsMixin._vt_jump_to` (and :meth:`~WaitsMixin._vt_jump_by`) let a task that is
about to wait go on at once, the clock moved in place, when the loop's next round would do
nothing else: the sim kit's waits (``virtualtime.sim._fast``) call it.  Their docstrings state
the contracts; ``docs/loop.md`` explains them, and ``tests/test_sim_fast.py`` pins the jump.

Part of ``engine``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

import asyncio
import heapq
from typing import Any, Final

from .._shared._time import TICKS_PER_SECOND, delay_ticks
from ._checks import _FAR, _HORIZON, _NEVER, _seconds
from ._driving import DrivingMixin

__all__ = ["JUMP_ROUND_EVERY", "WaitsMixin"]

_heappush: Final = heapq.heappush
_current_task: Final = asyncio.current_task

JUMP_ROUND_EVERY: Final = 256
"""At most this many waits in a row skip their loop round (``_vt_jump_to``; a power of two)."""


class WaitsMixin(DrivingMixin):
    """The native wait (a future in the timer heap) and the in-place jump of a wait."""

    def _vt_wake_after(self, delay: float, future: asyncio.Future[Any], priority: int = 0) -> None:
        """Resolve ``future`` (with None) once ``delay`` virtual seconds have passed.

        The cheapest wait the loop offers, and the one :func:`virtualtime.sleep` is made of:
        the future itself goes into the timer heap, ordered like every timer (instant, then
        ``priority``, then first scheduled first), with no handle and no callback.  For code
        that sleeps in a hot loop on the virtual loop (the sim kit); everything else should
        call ``virtualtime.sleep``.

        The contract: ``future`` is a plain ``loop.create_future()`` of this loop, and
        ``delay`` a checked float or int >= 0 (``math.inf``: never).  Whoever makes the future
        done *before* the loop does -- cancels it, or resolves it early -- need tell nobody:
        the entry is dead from then on, and the loop finds it (see
        :mod:`virtualtime._engine._timers`).  History and traces see the wake-up like a
        sleep's.
        """
        ticks = self._vt_ticks
        if delay > 0:
            if delay < _FAR:
                step = round(delay * TICKS_PER_SECOND)
                ticks += step if step > 0 else 1
            else:
                seconds = _seconds("delay", delay)  # an int beyond any float is refused
                far = seconds >= _HORIZON
                ticks = _NEVER if far else min(ticks + delay_ticks(seconds), _NEVER)
        seq = self._vt_seq()
        _heappush(self._vt_heap, (ticks, priority, seq, future))
        if self._vt_history is not None:
            self._vt_scheduled_at[seq] = (self._vt_ticks, _current_task(self))

    def _vt_jump_to(self, ticks: int, task: asyncio.Task[Any] | None) -> bool:
        """Move the clock to tick ``ticks`` in place, if the next round would do only that.

        The loop's contract with a wait that may skip its loop round; the sim kit's waits
        (``virtualtime.sim._fast.jump_to`` and ``jump_by``) are its callers, and
        ``tests/test_sim_fast.py`` pins it.

        When to call it: from ``task`` (None: the task running now on this loop), in this
        loop's thread while that task runs, just before the task would suspend until tick
        ``ticks`` -- an integer below the horizon -- and before anything of that wait is
        scheduled.  Not from a callback, another thread or another task.

        What the answer means.  True: the clock now reads ``ticks`` (:attr:`ticks`,
        ``time()``; the watched horizon is told and the runaway count restarts, exactly as
        when the round moves time), and the caller goes on at once -- it must not suspend,
        and must not schedule a timer for this wait.  The skipped wake-up is not a timer: it
        is not counted in :attr:`timers_fired` (and history, which would record it, is off
        whenever a jump happens).  False: nothing changed; wait the ordinary way (a timer or
        :meth:`_vt_wake_after` at ``ticks``), and the loop's round wakes the task.

        Ordering: it answers True only when the round it replaces would have done nothing
        but jump to ``ticks`` and wake this task, so a run with the shortcut is the same run
        as without it.  It refuses (False) when

        * something is ready (callbacks, woken tasks): they run first;
        * ``ticks`` is not after the current tick: a zero wait must yield to the others;
        * any timer entry -- live or cancelled -- is due at or before ``ticks``: a timer at
          the same instant was scheduled first (or has a smaller priority) and fires first;
        * a drive (a driving verb's target) is due at or before ``ticks``;
        * time is not on the plain fast path: manual mode, ``rate > 0``,
          ``autojump_threshold > 0``, history kept, debug mode, or a closed loop;
        * ``stop()`` was called, or anything outside the loop may deliver (outside work,
          another thread: the loop must poll first);
        * the task is missing or being cancelled (``task.cancelling()``): the cancellation
          is delivered by suspending;
        * and, whatever else holds, on one call in :data:`JUMP_ROUND_EVERY` (counted per
          loop), so that a model that never needs the loop still lets it take a round and
          deliver ``Ctrl-C``, ``call_soon_threadsafe`` callbacks and cancellations.
        """
        if self._ready or ticks <= self._vt_ticks:
            return False
        heap = self._vt_heap
        if heap and heap[0][0] <= ticks:
            return False
        drives = self._vt_drives
        if (
            (drives and drives[0][0] <= ticks)
            or not self._vt_plain
            or self._stopping
            or not self._vt_world.calm()
        ):
            return False
        if task is None:
            task = _current_task(self)
        if task is None or task.cancelling():
            return False
        skipped = self._vt_skipped + 1
        self._vt_skipped = skipped
        if not skipped & (JUMP_ROUND_EVERY - 1):
            return False
        self._vt_set_ticks(ticks)
        return True

    def _vt_jump_by(self, delay: float, task: asyncio.Task[Any] | None) -> bool:
        """:meth:`_vt_jump_to` the tick ``call_later(delay, ...)`` would fire at (delay > 0)."""
        if self._ready or not 0 < delay < _FAR:
            return False
        step = round(delay * TICKS_PER_SECOND)
        return self._vt_jump_to(self._vt_ticks + (step if step > 0 else 1), task)
