"""Things with a start and a duration on a timeline, polled frame by frame (Nit's event queue).

When to use it
--------------
A :class:`~virtualtime.sim.Timer` *calls* things at instants.  A :class:`Timeline` is for
the other style of model, the game-loop or frame style: things *last* (a truck loading for 5
minutes, a light that is on from 10 to 40), and every step you ask "what is going on now, how
far along is each, what just finished?".  :meth:`Timeline.update` answers that for a step of
``dt``; :meth:`Timeline.steps` does it every ``dt`` of the event loop's virtual time.

Rules (Nit's, with its loose ends tied)
---------------------------------------
``update(dt)`` adds ``dt`` to :attr:`Timeline.time`, drops the events that had expired at
the previous update, activates every queued event whose start is at or before the new time
(unless it was :meth:`~TimelineEntry.expire` d before starting), then refreshes each active event:
``time`` = time since its start, expired once that reaches its duration, ``dt`` = the step or
the time since its start if shorter, ``completion`` = ``time / duration``, and ``occurrences``
+1.  It returns the active events — those that expired during this step included, flagged
``has_expired``; they are never returned again.  Order: events already active keep their
order; newly active ones follow by start, and events with equal starts by insertion (FIFO).

Two edges Nit leaves open are decided here:

* **Completion of an instant event** (duration 0) returned exactly at its start is ``1.0``
  (Nit computes 0/0 = NaN); after its start it is ``inf``, as in Nit.  For an event that never
  expires (duration ``inf``) it is ``0.0``.
* **occurrences** counts the updates that returned the event, so every event an update
  returns has ``occurrences >= 1`` — including an event that started and ended within one
  step.  An event has ``has_expired`` with ``occurrences == 0`` only when :meth:`expire` was
  called before any update returned it.

Times are exact: integer nanosecond ticks, as everywhere in virtualtime.

Part of ``sim``: may import ``shared``, ``engine``, ``trace``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import AsyncIterator
from typing import Generic, TypeVar

import anyio

from .._shared._errors import InvalidValueError
from .._shared._time import delay_ticks, to_seconds, to_ticks
from ._check import check_span, instant_ticks, span_ticks

__all__ = ["TimelineEntry", "Timeline"]

E = TypeVar("E")

_sequence = itertools.count()


def _check_duration(duration: float | None) -> int | None:
    """Ticks of a duration: None and 0 make an instant event (0 ticks); ``inf`` gives None,
    which means the entry never expires."""
    if duration is None:
        return 0
    if isinstance(duration, float) and duration == math.inf:
        return None
    return span_ticks("duration", duration)


def _finite_duration(duration: float | None, what: str) -> int:
    ticks = _check_duration(duration)
    if ticks is None:
        raise InvalidValueError(f"duration must be finite for {what}, got {duration!r}")
    return ticks


class TimelineEntry(Generic[E]):
    """What the timeline knows about one registered item, refreshed by each update.

    Returned by :meth:`Timeline.add` and friends, and by :meth:`Timeline.update`.  Read
    its fields after an update; chain :meth:`add_after` / :meth:`add_sync` /
    :meth:`add_before` to build a schedule relative to it; call :meth:`expire` to end it early.
    """

    __slots__ = (
        "_dt",
        "_duration",
        "_elapsed",
        "_expired",
        "_occurrences",
        "_start",
        "item",
        "timeline",
    )

    def __init__(self, item: E, timeline: Timeline[E], start: int, duration: int | None) -> None:
        self.item = item
        """The registered object."""
        self.timeline = timeline
        """The timeline it belongs to."""
        self._start = start
        self._duration = duration
        self._elapsed: int | None = None
        self._dt: int | None = None
        self._occurrences = 0
        self._expired = False

    @property
    def start(self) -> float:
        """Absolute start, in the timeline's time."""
        return to_seconds(self._start)

    @property
    def duration(self) -> float:
        """Registered duration: 0 for an instant event, ``inf`` for one that never expires."""
        return math.inf if self._duration is None else to_seconds(self._duration)

    @property
    def time(self) -> float:
        """Time since the start, as of the last update that returned it (NaN before)."""
        return math.nan if self._elapsed is None else to_seconds(self._elapsed)

    @property
    def dt(self) -> float:
        """The last step, or the time since the start if shorter (NaN before any update)."""
        return math.nan if self._dt is None else to_seconds(self._dt)

    @property
    def completion(self) -> float:
        """``time / duration``: 0 at the start, 1 at the end, above 1 if it ended mid-step.

        An instant event reads 1.0 when returned exactly at its start and ``inf`` after it;
        an event that never expires reads 0.0.  0.0 before the first update.
        """
        elapsed, duration = self._elapsed, self._duration
        if elapsed is None or duration is None:
            return 0.0
        if duration == 0:
            return 1.0 if elapsed == 0 else math.inf
        return elapsed / duration

    @property
    def occurrences(self) -> int:
        """How many updates have returned this event (1 the first time it is returned)."""
        return self._occurrences

    @property
    def has_expired(self) -> bool:
        """True once it reached its duration or :meth:`expire` was called.

        An update may return an event that has just expired (once, flagged); later updates
        do not.
        """
        return self._expired

    def expire(self) -> None:
        """End the event now: it is not returned by the next update (nor ever activated)."""
        self._expired = True

    def _refresh(self, time: int, dt: int) -> None:
        elapsed = time - self._start
        if self._duration is not None and elapsed >= self._duration:
            self._expired = True
        self._elapsed = elapsed
        self._dt = min(dt, elapsed)
        self._occurrences += 1

    def add_after(self, item: E, delay: float, duration: float | None = None) -> TimelineEntry[E]:
        """Add ``item`` starting ``delay`` after this one ends (0: back to back)."""
        delay_ticks_ = span_ticks("delay", delay)
        new_duration = _check_duration(duration)
        if self._duration is None:
            raise InvalidValueError(
                f"{self!r} never ends (its duration is inf), so nothing can start after it"
            )
        return self.timeline._insert(
            item, self._start + self._duration + delay_ticks_, new_duration
        )

    def add_sync(self, item: E, delay: float, duration: float | None = None) -> TimelineEntry[E]:
        """Add ``item`` starting ``delay`` after this one starts (0: together)."""
        delay_ticks_ = span_ticks("delay", delay)
        return self.timeline._insert(item, self._start + delay_ticks_, _check_duration(duration))

    def add_before(self, item: E, delay: float, duration: float | None = None) -> TimelineEntry[E]:
        """Add ``item`` ending ``delay`` before this one starts (0: back to back).

        Its ``duration`` must be finite (None means an instant event).  The new start may lie
        before the timeline's time; it then activates at the next update, already under way.
        """
        delay_ticks_ = span_ticks("delay", delay)
        new_duration = _finite_duration(duration, "add_before")
        return self.timeline._insert(item, self._start - delay_ticks_ - new_duration, new_duration)

    def __repr__(self) -> str:
        return f"<TimelineEntry {self.item!r}@{self.start!r}+{self.duration!r}>"


class Timeline(Generic[E]):
    """Things that last, on a timeline: :meth:`update` says which are active now.

    Use it for frame-style models: register what happens when and for how long, then step
    through time asking what is active.  Works with no event loop at all (``update``); inside
    one, ``async for active in timeline.steps(dt)`` steps it in lock-step with virtual time.
    See the module notes for the exact rules.
    """

    __slots__ = ("_active", "_queue", "_time")

    def __init__(self) -> None:
        self._time = 0
        self._queue: list[tuple[int, int, TimelineEntry[E]]] = []
        self._active: list[TimelineEntry[E]] = []

    @property
    def time(self) -> float:
        """The timeline's time: 0 at creation, plus every ``dt`` given to :meth:`update`."""
        return to_seconds(self._time)

    @property
    def active(self) -> tuple[TimelineEntry[E], ...]:
        """What the last update returned."""
        return tuple(self._active)

    def __len__(self) -> int:
        """How many events a future update may still return (queued or still active)."""
        waiting = sum(1 for _, _, info in self._queue if not info._expired)
        return waiting + sum(1 for info in self._active if not info._expired)

    def add(self, item: E, delay: float, duration: float | None = None) -> TimelineEntry[E]:
        """Register ``item`` to start ``delay`` from now and last ``duration``.

        ``duration`` None or 0 makes an instant event (returned by one update, expired);
        ``math.inf`` makes one that never expires.  ``delay`` and ``duration`` must be >= 0.
        """
        delay_ticks_ = span_ticks("delay", delay)
        return self._insert(item, self._time + delay_ticks_, _check_duration(duration))

    def add_at(self, item: E, start: float, duration: float | None = None) -> TimelineEntry[E]:
        """Register ``item`` at an absolute ``start`` (which may be in the past)."""
        start_ticks = instant_ticks("start", start)
        return self._insert(item, start_ticks, _check_duration(duration))

    def _insert(self, item: E, start: int, duration: int | None) -> TimelineEntry[E]:
        info = TimelineEntry(item, self, start, duration)
        heapq.heappush(self._queue, (start, next(_sequence), info))
        return info

    def update(self, dt: float) -> list[TimelineEntry[E]]:
        """Advance the timeline by ``dt`` (>= 0) and return the active events (see module notes)."""
        return self._update(delay_ticks(check_span("dt", dt)))

    def _update(self, dt: int) -> list[TimelineEntry[E]]:
        time = self._time + dt
        self._time = time
        active = [info for info in self._active if not info._expired]
        queue = self._queue
        while queue and queue[0][0] <= time:
            info = heapq.heappop(queue)[2]
            if not info._expired:
                active.append(info)
        for info in active:
            info._refresh(time, dt)
        self._active = active
        return list(active)

    def steps(self, dt: float) -> AsyncIterator[list[TimelineEntry[E]]]:
        """Every ``dt`` of the event loop's virtual time, :meth:`update` by ``dt``; yield it.

        Step ``k`` happens at loop time ``t0 + k * dt`` (``t0``: when iteration begins), so the
        timeline's time and the loop's move together.  If the loop body awaits past the next
        step, the missed steps follow at once.  Iteration ends when the timeline holds nothing
        a future update could return (check :func:`len`); break out of it to stop earlier.
        """
        value = check_span("dt", dt)
        if value <= 0:
            raise InvalidValueError(f"dt must be > 0 (time must move between updates), got {dt!r}")
        return _Steps(self, delay_ticks(value))

    def __repr__(self) -> str:
        return f"<Timeline time={self.time!r} events={len(self)}>"


class _Steps(Generic[E]):
    """The iterator behind :meth:`Timeline.steps` (a class, so no async-generator cleanup)."""

    __slots__ = ("_dt", "_origin", "_queue", "_step")

    def __init__(self, timeline: Timeline[E], dt: int) -> None:
        self._queue = timeline
        self._dt = dt
        self._origin: int | None = None
        self._step = 0

    def __aiter__(self) -> _Steps[E]:
        return self

    async def __anext__(self) -> list[TimelineEntry[E]]:
        if not len(self._queue):
            raise StopAsyncIteration
        if self._origin is None:
            self._origin = to_ticks(anyio.current_time())
        self._step += 1
        await anyio.sleep_until(to_seconds(self._origin + self._step * self._dt))
        return self._queue._update(self._dt)
