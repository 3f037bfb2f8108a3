"""Clock trees: clocks that run at a rate relative to a parent, all in lock-step (Ruck).

Why anchors, not accumulated time
---------------------------------
Ruck's clocks each keep their own ``now`` and add ``dt * rate`` to it on every fast-forward.
That has two flaws.  A rate change rescales whatever has not been fast-forwarded yet, so the
caller must remember to fast-forward to the instant of the change first (Ruck's documented
hazard, B13).  And a parent files a child's next occurrence under a *relative* offset next to
its own *absolute* times, so the order across clocks goes wrong as soon as time has moved (B14).

Here a clock stores no running total.  It stores an **anchor**: "when my parent read
``anchor_parent``, I read ``anchor_local``", plus its rate, so
``now = anchor_local + (parent.now - anchor_parent) * rate``.  Changing the rate first
re-anchors at the present instant, so what has elapsed keeps the old rate and only the future
uses the new one; nobody has to fast-forward first.  Occurrences are stored in each clock's own
absolute units and compared, across the whole tree, by the instant they map to in the queried
clock's parent (the root's time when asked at the root) and then by a global sequence number,
so ties are first-scheduled first-served and order stays right however time and rates move.

Exactness: times are integer nanosecond ticks (:mod:`virtualtime._shared._time`); rates are kept as
exact fractions of their decimal spelling (``0.1`` is exactly one tenth), and products stay
fractions until somebody reads a float.  A root that follows the event loop reads
``anyio.current_time()``; a manual root (made outside any event loop) keeps its own base time,
moved only by :meth:`Clock.fast_forward` — the pure synchronous structure of Ruck.

Sleeping on a clock sleeps until the loop instant its deadline maps to; every sleeper registers
a cancel scope on its clock, and any change that re-times the clock (a rate change on it or an
ancestor, attaching it to a parent, a manual fast-forward) cancels those scopes so the sleepers
recompute their deadline from the remaining local time.

Part of ``sim``: may import ``shared``, ``engine``, ``trace``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Hashable, Iterator
from fractions import Fraction
from typing import TypeVar

import anyio
import anyio.lowlevel

from .._shared._errors import InvalidTypeError, InvalidValueError, UsageError, VirtualTimeError
from .._shared._time import (
    TICKS_PER_SECOND,
    check_rate,
    delay_ticks,
    to_seconds,
    to_ticks,
)
from ._check import check_instant, check_span, instant_ticks

__all__ = ["Clock", "TriggerClock"]

_C = TypeVar("_C", bound="Clock")
_ZERO = Fraction(0)
_sequence = itertools.count()
"""One counter for every clock, so equal instants keep the order they were scheduled in."""


def _exact(value: float) -> Fraction:
    """The exact fraction a float was written as: ``0.1`` is 1/10, not its binary neighbour."""
    return Fraction(repr(value))


def _seconds(ticks: Fraction) -> float:
    return float(ticks / TICKS_PER_SECOND)


def _loop_running() -> bool:
    try:
        anyio.current_time()
    except RuntimeError:
        return False
    return True


def _loop_ticks() -> Fraction:
    try:
        now = anyio.current_time()
    except RuntimeError as exc:
        raise UsageError(
            "this clock tree follows the event loop's time, but no event loop is running "
            "in this thread; read it inside the loop, or build the tree with a manual root "
            "(Clock(follow_loop=False)) to drive it with fast_forward()"
        ) from exc
    return Fraction(to_ticks(now))


class Clock:
    """A clock that runs at ``rate`` times its parent; the root follows the event loop.

    Use a clock tree when parts of a simulation keep their own time: a piece of music whose
    tempo changes, a sub-model that runs ten times faster than the world, a process you want
    to pause and resume without touching the tasks that wait on it.  Each clock tells time in
    its own units (:attr:`now`), sleeps in them (:meth:`sleep`, :meth:`sleep_until`), and
    every clock in a tree moves in lock-step: rates multiply down the tree.

    **The root.**  ``Clock()`` made inside a running event loop follows the loop
    (``anyio.current_time()``, asyncio or trio); at rate 1 its :attr:`now` *is* the loop's
    time.  Made outside any loop (or with ``follow_loop=False``) it is a *manual* root whose
    time moves only when you call :meth:`fast_forward` — Ruck's synchronous priority queue,
    useful to test scheduling logic with no loop at all.  Tasks may sleep on a manual tree;
    they wake when somebody fast-forwards it.

    **Rates.**  ``clock.rate`` is relative to the parent; ``0`` pauses the clock and its whole
    subtree.  A change takes effect at the instant it is made: time already elapsed keeps the
    old rate, and every pending sleep on the clock and its descendants keeps its remaining
    *local* time and is re-timed.  No fast-forward first, no retroactive rescaling.

    **Occurrences** (Ruck's queue): :meth:`schedule` files a hashable object at an absolute
    time in this clock's units; :meth:`next` / :meth:`unschedule_next` return the earliest
    occurrence of the whole subtree with its offset from now *in the parent's units* (at the
    root: the delay a driver should wait).  Order is by the instant each occurrence maps to,
    then first-scheduled first.  :meth:`run_one`, :meth:`run` and :meth:`run_until` drive a
    manual tree by calling the scheduled objects, like Ruck's shreduler.

    **Resolution.**  Loop time moves in whole nanoseconds.  A reading is exact whenever its
    instant falls on one (rates such as 2, 0.5 or 0.25 always do); a clock that runs ``r``
    times faster than the loop and wakes at a deadline between two nanoseconds reads at most
    ``r`` nanoseconds past it.  Count iterations rather than testing ``clock.now % 1 == 0``.
    Back-to-back ``sleep(dt)`` calls start from that reading, so the error adds up (10,000
    sleeps of 0.1 on a clock at rate 3 end about 20 µs late); a periodic process that must
    stay on its grid should ``sleep_until(start + k * dt)`` instead, which does not drift.

    Args:
        rate: Speed relative to the parent (a finite number >= 0; 0 is paused).
        start: The value :attr:`now` has at creation.  Default: the loop's time for a root
            that follows the loop, else 0.
        follow_loop: Whether a root follows the running event loop.  Default: yes when made
            inside a running loop, no otherwise.  ``True`` outside a loop is an error.
    """

    __slots__ = (
        "_anchor_local",
        "_anchor_parent",
        "_base",
        "_children",
        "_entries",
        "_follow",
        "_heap",
        "_parent",
        "_rate",
        "_rate_value",
        "_sleepers",
    )

    def __init__(
        self,
        rate: float = 1.0,
        *,
        start: float | None = None,
        follow_loop: bool | None = None,
    ) -> None:
        rate_value = check_rate("rate", rate)
        start_ticks = None if start is None else Fraction(instant_ticks("start", start))
        if follow_loop is None:
            follow_loop = _loop_running()
        elif not isinstance(follow_loop, bool):
            raise InvalidTypeError(f"follow_loop must be True, False or None, got {follow_loop!r}")
        base = _loop_ticks() if follow_loop else _ZERO
        self._parent: Clock | None = None
        self._children: list[Clock] = []
        self._follow = follow_loop
        self._base = base
        self._rate = _exact(rate_value)
        self._rate_value = rate_value
        self._anchor_parent = base
        if start_ticks is None:
            start_ticks = base if follow_loop else _ZERO
        self._anchor_local = start_ticks
        self._heap: list[tuple[Fraction, int, Hashable]] = []
        self._entries: dict[Hashable, tuple[Fraction, int]] = {}
        self._sleepers: set[anyio.CancelScope] = set()

    # ------------------------------------------------------------------ structure

    @property
    def parent(self) -> Clock | None:
        """The clock this one runs relative to, or None for a root."""
        return self._parent

    @property
    def children(self) -> tuple[Clock, ...]:
        """The child clocks, in the order they were added."""
        return tuple(self._children)

    @property
    def root(self) -> Clock:
        """The root of this clock's tree."""
        clock = self
        while clock._parent is not None:
            clock = clock._parent
        return clock

    @property
    def follows_loop(self) -> bool:
        """True if the tree's time comes from the running event loop, False if manual."""
        return self.root._follow

    def child(self, rate: float = 1.0, *, start: float = 0.0) -> Clock:
        """A new clock running at ``rate`` times this one, starting at ``start`` (default 0)."""
        clock = Clock(rate, start=start, follow_loop=False)
        return self.add_child_clock(clock)

    def add_child_clock(self, clock: _C) -> _C:
        """Make ``clock`` a child of this one and return it (Ruck's ``add_child_clock``).

        Adding a clock that is already a child of this one does nothing.  The child keeps the
        time it reads now and from then on moves with this clock.  A clock has at most one
        parent and a tree has no cycles: both are a ``ValueError``, with nothing changed.
        """
        if not isinstance(clock, Clock):
            raise InvalidTypeError(f"clock must be a Clock, got {clock!r} ({type(clock).__name__})")
        if clock._parent is self:
            return clock
        if clock._parent is not None:
            raise InvalidValueError(
                f"clock {clock!r} already has a parent ({clock._parent!r}); a clock has at "
                "most one parent"
            )
        ancestor: Clock | None = self
        while ancestor is not None:
            if ancestor is clock:
                raise InvalidValueError(
                    f"clock {clock!r} is this clock or one of its ancestors; adding it as a "
                    "child would make a cycle"
                )
            ancestor = ancestor._parent
        local = clock._now()
        parent_now = self._now()
        clock._anchor_local = local
        clock._anchor_parent = parent_now
        clock._parent = self
        clock._follow = False
        self._children.append(clock)
        clock._wake_subtree()
        return clock

    def _subtree(self) -> Iterator[Clock]:
        stack: list[Clock] = [self]
        while stack:
            clock = stack.pop()
            yield clock
            stack.extend(reversed(clock._children))

    # ------------------------------------------------------------------ time

    def _parent_now(self) -> Fraction:
        if self._parent is not None:
            return self._parent._now()
        if self._follow:
            return _loop_ticks()
        return self._base

    def _now(self) -> Fraction:
        return self._anchor_local + (self._parent_now() - self._anchor_parent) * self._rate

    def _to_parent(self, local: Fraction) -> Fraction | None:
        """The parent-time instant at which this clock reads ``local``; None if never."""
        if self._rate:
            return self._anchor_parent + (local - self._anchor_local) / self._rate
        # Paused: frozen at anchor_local.  Anything at or before it is due right now.
        return self._parent_now() if local <= self._anchor_local else None

    def _to_base(self, local: Fraction) -> Fraction | None:
        clock: Clock | None = self
        value: Fraction | None = local
        while clock is not None and value is not None:
            value = clock._to_parent(value)
            clock = clock._parent
        return value

    @property
    def now(self) -> float:
        """The current time in this clock's own units."""
        return _seconds(self._now())

    @property
    def rate(self) -> float:
        """Speed relative to the parent (for a root: relative to the loop or the manual base).

        Setting it takes effect now: the time elapsed so far keeps the old rate, and pending
        sleeps on this clock and its descendants are re-timed from this instant.  ``0``
        pauses the clock and its subtree; sleepers keep their remaining time for the resume.
        """
        return self._rate_value

    @rate.setter
    def rate(self, value: float) -> None:
        rate_value = check_rate("rate", value)
        parent_now = self._parent_now()
        self._anchor_local = self._anchor_local + (parent_now - self._anchor_parent) * self._rate
        self._anchor_parent = parent_now
        self._rate = _exact(rate_value)
        self._rate_value = rate_value
        self._wake_subtree()

    @property
    def effective_rate(self) -> float:
        """This clock's speed relative to the root's base time: the product of the rates."""
        product = Fraction(1)
        clock: Clock | None = self
        while clock is not None:
            product *= clock._rate
            clock = clock._parent
        return float(product)

    def fast_forward(self, dt: float) -> None:
        """Move a manual root's time on by ``dt`` (in its parent units); the tree follows.

        Only the root of a manual tree is fast-forwarded: children move with it (Ruck's rule,
        enforced).  A tree that follows the event loop moves with the loop instead — sleep,
        or use the loop's own ``fast_forward``.  Sleepers on the tree wake if now due.
        """
        dt_value = check_span("dt", dt)
        self._check_manual_root("fast_forward")
        self._advance(Fraction(delay_ticks(dt_value)))

    def _advance(self, delta: Fraction) -> None:
        if delta > 0:
            self._base += delta
            self._wake_subtree()

    def _check_manual_root(self, what: str) -> None:
        if self._parent is not None:
            raise UsageError(
                f"{what}() is only for the root of a clock tree; this clock is a child of "
                f"{self._parent!r} and moves with it"
            )
        if self._follow:
            raise UsageError(
                f"{what}() needs a manual root, but this clock follows the event loop; "
                "advance the loop instead (await anyio.sleep(dt), or the loop's fast_forward)"
            )

    # ------------------------------------------------------------------ sleeping

    async def sleep(self, delay: float) -> None:
        """Sleep ``delay`` units of this clock's time (a finite number >= 0).

        The sleep follows the clock: it ends sooner if the clock speeds up meanwhile, later if
        it slows down, and not at all while the clock (or an ancestor) is paused.  On a clock
        whose rate is not a power of two, a wake-up can read a few nanoseconds late (see
        *Resolution* on the class); prefer :meth:`sleep_until` for long periodic loops.
        """
        delay_value = check_span("delay", delay)
        await self._sleep_until(self._now() + delay_ticks(delay_value))

    async def sleep_until(self, deadline: float) -> None:
        """Sleep until this clock reads ``deadline`` (returns at once if it already does)."""
        deadline_value = check_instant("deadline", deadline)
        await self._sleep_until(Fraction(to_ticks(deadline_value)))

    async def _sleep_until(self, target: Fraction) -> None:
        slept = False
        while self._now() < target:
            base = self._to_base(target)
            scope = anyio.CancelScope()
            self._sleepers.add(scope)
            try:
                with scope:
                    if base is None or not self.root._follow:
                        # Paused, or a manual tree: only a re-timing can bring the deadline.
                        await anyio.sleep_forever()
                    else:
                        await anyio.sleep_until(to_seconds(math.ceil(base)))
            finally:
                self._sleepers.discard(scope)
            slept = True
            if not scope.cancel_called:
                return
        if not slept:
            await anyio.lowlevel.checkpoint()

    def _wake_subtree(self) -> None:
        for clock in self._subtree():
            for scope in clock._sleepers:
                scope.cancel()

    # ------------------------------------------------------------------ occurrences

    def schedule(self, obj: Hashable, time: float | None = None) -> None:
        """File ``obj`` at ``time``, absolute in this clock's units (default: its ``now``).

        An object is filed once per clock: scheduling it again on the same clock moves it
        (behind any occurrence already at the new instant).
        """
        ticks = self._now() if time is None else Fraction(instant_ticks("time", time))
        try:
            hash(obj)
        except TypeError:
            raise InvalidTypeError(
                f"obj must be hashable (it is the key of its occurrence), got {obj!r}"
            ) from None
        self._file(obj, ticks)

    def _file(self, obj: Hashable, ticks: Fraction) -> None:
        seq = next(_sequence)
        self._entries[obj] = (ticks, seq)
        heapq.heappush(self._heap, (ticks, seq, obj))

    def _head(self) -> tuple[Fraction, int, Hashable] | None:
        heap = self._heap
        while heap:
            _, seq, obj = heap[0]
            entry = self._entries.get(obj)
            if entry is not None and entry[1] == seq:
                return heap[0]
            heapq.heappop(heap)
        return None

    def _best(self) -> tuple[Fraction, int, Clock, Hashable] | None:
        """The subtree's earliest occurrence, keyed by (instant in the root's base time, seq).

        Keys are compared in base time, never in an intermediate clock's units: a paused
        clock makes everything overdue beneath it due at one base instant, where only the
        sequence number (first scheduled, first out) may decide (B14).
        """
        best: tuple[Fraction, int, Clock, Hashable] | None = None
        head = self._head()
        if head is not None and self._paused_path():
            # Behind a paused clock every overdue occurrence is due at the same base instant,
            # so the earliest local instant is not necessarily first: look at them all.
            for obj, (local, seq) in self._entries.items():
                base = self._to_base(local)
                if base is not None and (best is None or (base, seq) < best[:2]):
                    best = (base, seq, self, obj)
        elif head is not None:
            base = self._to_base(head[0])
            if base is not None:
                best = (base, head[1], self, head[2])
        for child in self._children:
            found = child._best()
            if found is not None and (best is None or found[:2] < best[:2]):
                best = found
        return best

    def _paused_path(self) -> bool:
        clock: Clock | None = self
        while clock is not None:
            if not clock._rate:
                return True
            clock = clock._parent
        return False

    def _peek(self) -> tuple[Fraction, Clock, Hashable] | None:
        """The next due occurrence: its instant in parent units, its clock, its object."""
        best = self._best()
        if best is None:
            return None
        clock, obj = best[2], best[3]
        # Map the occurrence's local instant up to this clock's parent units.
        value: Fraction | None = clock._entries[obj][0]
        step: Clock | None = clock
        while value is not None and step is not None:
            value = step._to_parent(value)
            if step is self:
                break
            step = step._parent
        if value is None:
            return None
        return value, clock, obj

    def next(self) -> tuple[Hashable, float] | None:
        """``(obj, rel)`` for the earliest occurrence in this clock's subtree, or None.

        ``rel`` is the offset from now in this clock's *parent* units: the local offset divided
        by every rate on the path, this clock's own included.  Occurrences on a paused clock
        that are not yet due are not "next" (they never come due until it resumes).
        """
        found = self._peek()
        if found is None:
            return None
        instant, _, obj = found
        return obj, _seconds(instant - self._parent_now())

    def unschedule_next(self) -> tuple[Hashable, float] | None:
        """:meth:`next`, and remove that occurrence."""
        found = self._peek()
        if found is None:
            return None
        instant, clock, obj = found
        rel = _seconds(instant - self._parent_now())
        del clock._entries[obj]
        return obj, rel

    def unschedule(self, obj: Hashable) -> float | None:
        """Remove ``obj`` from this clock, else from the first child subtree that has it.

        Returns the removed occurrence's offset from now in this clock's parent units
        (``inf`` if it could never come due), or None if it was not scheduled here.
        """
        found, instant = self._remove(obj)
        if not found:
            return None
        if instant is None:
            return math.inf
        return _seconds(instant - self._parent_now())

    def _remove(self, obj: Hashable) -> tuple[bool, Fraction | None]:
        """Remove ``obj``; return whether found and its instant in parent units (None: never)."""
        entry = self._entries.pop(obj, None)
        if entry is not None:
            return True, self._to_parent(entry[0])
        for child in self._children:
            found, local = child._remove(obj)
            if found:
                return True, None if local is None else self._to_parent(local)
        return False, None

    def clear(self) -> None:
        """Remove every occurrence from this clock and all its descendants."""
        for clock in self._subtree():
            clock._clear_own()

    def _clear_own(self) -> None:
        self._entries.clear()
        self._heap.clear()

    @property
    def occurrences(self) -> tuple[tuple[Hashable, float], ...]:
        """This clock's own occurrences as ``(obj, time)`` in its units, earliest first."""
        valid = sorted(
            (ticks, seq, obj)
            for ticks, seq, obj in self._heap
            if self._entries.get(obj, (None, -1))[1] == seq
        )
        return tuple((obj, _seconds(ticks)) for ticks, _, obj in valid)

    # ------------------------------------------------------------------ driving (manual root)

    def run_one(self) -> Callable[[], object] | None:
        """Run the next occurrence of a manual tree: Ruck's ``Shreduler.run_one``.

        Removes the earliest occurrence, fast-forwards the tree to it when it lies ahead,
        calls the object (scheduled objects must be callables taking no argument) and returns
        it.  Returns None when nothing is due.  A non-callable object is a ``TypeError`` and
        stays scheduled.
        """
        self._check_manual_root("run_one")
        found = self._peek()
        if found is None:
            return None
        instant, clock, obj = found
        if not callable(obj):
            raise InvalidTypeError(
                f"run_one() calls the scheduled objects, but {obj!r} is not callable; "
                "use unschedule_next() to drive a queue of plain objects"
            )
        del clock._entries[obj]
        self._advance(instant - self._base)
        obj()
        return obj

    def run(self) -> None:
        """Run occurrences until none is due (Ruck's ``Shreduler.run``)."""
        while self.run_one() is not None:
            pass

    def run_until(self, time: float) -> None:
        """Run every occurrence due at or before ``time`` (this root's units), then move there.

        As in Ruck, a ``time`` already in the past returns at once and changes nothing (time
        never moves backwards).
        """
        target = Fraction(instant_ticks("time", time))
        self._check_manual_root("run_until")
        now = self._now()
        if target < now:
            return
        if target > now and not self._rate:
            raise UsageError(
                f"run_until({time!r}): this root clock is paused (rate 0), so it can never "
                f"reach {time!r}"
            )
        while True:
            found = self._peek()
            if found is None:
                break
            local = self._anchor_local + (found[0] - self._anchor_parent) * self._rate
            if local > target:
                break
            self.run_one()
        now = self._now()
        if target > now:
            self._advance((target - now) / self._rate)

    def __repr__(self) -> str:
        try:
            now = repr(self.now)
        except VirtualTimeError:
            now = "<no running loop>"
        kind = "child" if self._parent else ("loop" if self._follow else "manual")
        return f"<{type(self).__name__} {kind} rate={self._rate_value!r} now={now}>"


class TriggerClock(Clock):
    """A clock whose objects wait for a named trigger instead of a time (Ruck's EventClock).

    :meth:`wait` parks an object under a trigger (any hashable name); :meth:`fire` releases
    everything parked under that trigger, filing it at the clock's current time, so it becomes
    due at zero offset — first come, first served — in the tree's :meth:`~Clock.next` order.
    Add it to a tree like any clock.  Inside an event loop, an ``anyio.Event`` (or a
    :class:`~virtualtime.sim.Signal` in a simulation) is usually simpler; this is for
    Ruck-style drivers of a manual tree.
    """

    __slots__ = ("_waiting",)

    def __init__(self, rate: float = 1.0, *, start: float | None = None) -> None:
        super().__init__(rate, start=start, follow_loop=False)
        self._waiting: dict[Hashable, dict[Hashable, None]] = {}

    def wait(self, obj: Hashable, trigger: Hashable) -> None:
        """Park ``obj`` until ``trigger`` fires (moving it if it was parked or filed here)."""
        try:
            hash(obj)
        except TypeError:
            raise InvalidTypeError(f"obj must be hashable, got {obj!r}") from None
        try:
            hash(trigger)
        except TypeError:
            raise InvalidTypeError(f"trigger must be hashable, got {trigger!r}") from None
        self._entries.pop(obj, None)
        self._unpark(obj)
        self._waiting.setdefault(trigger, {})[obj] = None

    def waiting(self, trigger: Hashable) -> tuple[Hashable, ...]:
        """The objects parked under ``trigger``, in the order they were parked."""
        return tuple(self._waiting.get(trigger, ()))

    def fire(self, trigger: Hashable) -> int:
        """Release every object parked under ``trigger``, due now; return how many."""
        parked = self._waiting.pop(trigger, {})
        now = self._now() if parked else _ZERO
        for obj in parked:
            self._file(obj, now)
        return len(parked)

    def schedule(self, obj: Hashable, time: float | None = None) -> None:
        """File ``obj`` at a time, as on any clock (un-parking it if it was waiting here)."""
        super().schedule(obj, time)
        self._unpark(obj)

    def _unpark(self, obj: Hashable) -> bool:
        for trigger, parked in self._waiting.items():
            if obj in parked:
                del parked[obj]
                if not parked:
                    del self._waiting[trigger]
                return True  # stop iterating: the dict just changed
        return False

    def _remove(self, obj: Hashable) -> tuple[bool, Fraction | None]:
        if self._unpark(obj):
            return True, None
        return super()._remove(obj)

    def _clear_own(self) -> None:
        super()._clear_own()
        self._waiting.clear()
