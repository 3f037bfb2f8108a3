"""When each timer's real-time allowance began, while outside work is pending.

:class:`Allowances` is the bookkeeping behind the rule "virtual time may not overtake real
work": while outside work is pending, a timer fires only once as much real time has passed
as its virtual delay, counted from when it was set or when the outside work began.  The
outside-work model of the asyncio loop (:meth:`OutsideWork.wait_before
<virtualtime._engine._outside.OutsideWork.wait_before>`) keeps one; it uses no asyncio.

Part of ``engine``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from typing import Final

__all__ = ["Allowances"]

_ROUNDS_MIN: Final = 256
"""Rounds :class:`Allowances` keeps before it looks for those no timer needs."""


class Allowances:
    """When each timer's real-time allowance began, in one stretch of pending outside work.

    While outside work is pending a timer with virtual delay *d* may fire only once *d* real
    seconds have passed since it was set -- or since the outside work began, if that is later.
    Never since an earlier burst: thirty ``wait_for(to_thread(job), 1)`` in a row, each job
    taking 0.1 s, each get their own second.

    The run numbers its timers in the order they are set (any counter that only grows); this
    class does not see a timer being set -- that would cost the closed world something on every
    timer -- but it is told of every idle *round* while work is pending, with the counter's
    value then.  A timer numbered *n* was set after the last round whose counter was at most
    *n*, and before the next one: that next round, the first that could see it, is where its
    allowance begins.  That is a little after the real moment it was set (by the time the
    loop's callbacks took between the two rounds), so a timer may fire a little late, never
    early.  The first round of a stretch is the start of the outside work: every timer set
    before it counts from there.  No asyncio here; a trio clock can keep one too.
    """

    __slots__ = ("_limit", "_rounds")

    def __init__(self) -> None:
        self._rounds: list[tuple[int, float, int]] = []
        """``(counter, real time, virtual tick)`` of each round that saw a new counter value."""
        self._limit = _ROUNDS_MIN

    def __bool__(self) -> bool:
        return bool(self._rounds)

    def __len__(self) -> int:
        return len(self._rounds)

    def clear(self) -> None:
        """The outside work ended: the next stretch starts afresh."""
        self._rounds.clear()
        self._limit = _ROUNDS_MIN

    def anchor(self, counter: int, real_now: float, tick_now: int, seq: int) -> tuple[float, int]:
        """Note this round; return ``(real time, tick)`` from which timer ``seq`` counts.

        ``counter`` is the number the next timer will get, ``seq`` the number of the timer
        time would move to (``-1``: unknown, or a target that is not a timer -- it counts from
        the start of the stretch).  The timer's due real time is then ``real + (target - tick)``
        in seconds.
        """
        rounds = self._rounds
        if not rounds or rounds[-1][0] < counter:
            rounds.append((counter, real_now, tick_now))
        if seq < 0:
            first = rounds[0]
            return first[1], first[2]
        index = bisect.bisect_right(rounds, (seq, math.inf, math.inf))
        if index >= len(rounds):  # numbered after this round's counter: a counter not ours
            index = len(rounds) - 1
        found = rounds[index]
        return found[1], found[2]

    def crowded(self) -> bool:
        """Are there enough rounds noted that :meth:`keep_for` should thin them out?"""
        return len(self._rounds) > self._limit

    def keep_for(self, seqs: Iterable[int]) -> None:
        """Forget the rounds no live timer counts from (``seqs``: the live timers' numbers).

        Rounds are noted only when the counter moved, but a long stretch of outside work with
        timers set between every two rounds would otherwise keep them all.
        """
        rounds = self._rounds
        needed = {0, len(rounds) - 1}
        for seq in seqs:
            needed.add(min(bisect.bisect_right(rounds, (seq, math.inf, math.inf)), len(rounds) - 1))
        self._rounds = [rounds[index] for index in sorted(needed)]
        self._limit = max(_ROUNDS_MIN, 2 * len(self._rounds))
