"""Periodic actions with priorities, run by a timer (TerraME's Timer and Event).

The ordering guarantee
----------------------
A :class:`Timer` runs its events in order of ``(time, priority, arrival)``: earlier first;
at the same time, smaller priority first; at the same time and priority, the event that
entered the queue first (FIFO).  An event re-enters the queue each time it is rescheduled,
so two events with the same period and priority keep alternating in a stable order.

Exact periods
-------------
Times are integer nanosecond ticks and a period is added in ticks, so ``start=0.1,
period=0.1`` lands on exactly ``1000.0`` after 10,000 periods.  TerraME snaps times to the
nearest integer within ``round=1e-5`` to hide float drift; with exact ticks there is no drift
to hide, and snapping would corrupt short periods (``period=1e-6`` would collapse onto whole
numbers), so it is off unless asked for (``Timer(..., snap=1e-5)``, useful for periods such
as 1/3 that no decimal spells exactly).

Timer time and loop time
------------------------
Action times are instants of the running event loop's clock (``anyio.current_time()``):
``PeriodicAction(start=5)`` runs when the loop reads 5.  :meth:`Timer.run` sleeps the loop from one
event to the next, and the timer's :attr:`~Timer.time` is the instant of the last dispatch
(``-inf`` before the first).  If an event's instant is already behind the loop — a negative
start, a timer made late, a :meth:`~Timer.reset`, an action that slept — it runs at once,
with ``timer.time`` set to the event's own instant: the timer catches up without sleeping.
So ``timer.time`` never goes backwards, never runs ahead of the loop, and after
``await timer.run(T)`` with events pending, ``timer.time == T`` and the loop reads ``T``
(or later, if the loop was already past ``T``).  ``run(T)`` with ``T`` behind
``timer.time``, and adding an event whose time is behind it, are errors (TerraME only warns,
and then lets time run backwards).

:meth:`Timer.run_sync` runs the same queue with no event loop at all, for models whose
actions are plain functions.

Part of ``sim``: may import ``shared``, ``engine``, ``trace``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

import asyncio
import difflib
import heapq
import inspect
import itertools
import math
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final, Never, TypeAlias

from .._shared._errors import InvalidTypeError, InvalidValueError, UsageError
from .._shared._time import (
    TICKS_PER_SECOND,
    delay_ticks,
    to_seconds,
    to_ticks,
)
from ._check import check_number, check_span, instant_ticks
from ._fast import asyncio_loop, jump_to, trio_module
from ._fast import set_result as _set_result

__all__ = ["PRIORITIES", "PeriodicAction", "Timer"]

PRIORITIES: Final[Mapping[str, int]] = MappingProxyType(
    {"verylow": 10, "low": 5, "medium": 0, "high": -5, "veryhigh": -10}
)
"""TerraME's named priorities.  Smaller runs first."""

Action: TypeAlias = "Callable[[PeriodicAction, Timer], object]"
"""``action(event, timer)``: sync or async; returning exactly ``False`` ends the event."""

_sequence = itertools.count()
_isawaitable: Final = inspect.isawaitable
_current_task: Final = asyncio.current_task
heappop: Final = heapq.heappop
heappush: Final = heapq.heappush


def _hint(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word.lower(), list(choices), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _check_priority(value: object) -> int:
    if isinstance(value, str):
        try:
            return PRIORITIES[value]
        except KeyError:
            names = ", ".join(repr(name) for name in PRIORITIES)
            raise InvalidValueError(
                f"priority {value!r} is not a known name (use an int or one of {names})"
                + _hint(value, PRIORITIES)
            ) from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(
            f"priority must be an int or a name such as 'high', got {value!r} "
            f"({type(value).__name__})"
        )
    return value


def _check_period(value: object) -> int:
    period = check_number("period", value)
    if period <= 0:
        raise InvalidValueError(f"period must be > 0, got {value!r}")
    return delay_ticks(check_span("period", period))


def _check_action(value: object) -> Action:
    if not callable(value):
        raise InvalidTypeError(
            f"action must be callable as action(event, timer), got {value!r} "
            f"({type(value).__name__})"
        )
    return value


def _time_repr(ticks: int | None) -> str:
    return "-inf" if ticks is None else repr(to_seconds(ticks))


class PeriodicAction:
    """Something that happens at ``start`` and then every ``period``, until it says stop.

    Use it for the regular processes of a model — sense every 2 s, report every 5 s, update
    the world every step — and let a :class:`Timer` interleave them in a fixed, documented
    order.  ``action(event, timer)`` may be a plain function or a coroutine function; it runs
    at each of the event's instants, and returning exactly ``False`` ends the event (any other
    result, including None, keeps it going).

    Args:
        action: Called as ``action(event, timer)``.
        start: The first instant, in the event loop's time (default 1, as in TerraME).
        period: Time between runs, > 0 (default 1).
        priority: Among events at the same instant, smaller runs first (default 0).  An int,
            or one of :data:`PRIORITIES`: ``"veryhigh"`` (-10), ``"high"`` (-5),
            ``"medium"`` (0), ``"low"`` (5), ``"verylow"`` (10).

    Unknown keyword arguments are a ``TypeError`` with a "did you mean" hint.
    """

    __slots__ = ("_action", "_entry", "_period", "_priority", "_time", "_timer")

    def __init__(
        self,
        action: Action,
        *,
        start: float = 1,
        period: float = 1,
        priority: int | str = 0,
        **unknown: Never,
    ) -> None:
        if unknown:
            name = next(iter(unknown))
            raise InvalidTypeError(
                f"PeriodicAction() got an unexpected keyword argument {name!r}"
                + _hint(name, ("action", "start", "period", "priority"))
            )
        self._action = _check_action(action)
        self._time = instant_ticks("start", start)
        self._period = _check_period(period)
        self._priority = _check_priority(priority)
        self._timer: Timer | None = None
        self._entry = -1

    @property
    def action(self) -> Action:
        """The callable run at each of the event's instants."""
        return self._action

    @property
    def time(self) -> float:
        """The event's next instant (during its action: the instant being run)."""
        return to_seconds(self._time)

    @property
    def period(self) -> float:
        """Time between two runs."""
        return to_seconds(self._period)

    @property
    def priority(self) -> int:
        """Order among events at the same instant; smaller first."""
        return self._priority

    @property
    def timer(self) -> Timer | None:
        """The timer this event belongs to (TerraME's ``parent``), or None."""
        return self._timer

    def config(
        self,
        *,
        time: float | None = None,
        period: float | None = None,
        priority: int | str | None = None,
    ) -> None:
        """Change the event's time, period and/or priority.

        Inside its own action, the change takes effect when the event is rescheduled: the
        next instant is the (possibly new) ``time`` plus the (possibly new) ``period``.
        Anywhere else, an event waiting in a timer moves to its new place in the queue at
        once (TerraME leaves the queue unsorted; here it stays right).  A ``time`` behind
        the timer's current time is a ``ValueError``: time never goes backwards.
        """
        new_time = None if time is None else instant_ticks("time", time)
        new_period = None if period is None else _check_period(period)
        new_priority = None if priority is None else _check_priority(priority)
        timer = self._timer
        if (
            new_time is not None
            and timer is not None
            and timer._time is not None
            and new_time < timer._time
        ):
            raise InvalidValueError(
                f"time={time!r} is before the timer's current time "
                f"{to_seconds(timer._time)!r}; time never goes backwards"
            )
        if new_time is not None:
            self._time = new_time
        if new_period is not None:
            self._period = new_period
        if new_priority is not None:
            self._priority = new_priority
        if timer is not None and timer._current is not self:
            timer._requeue(self)

    def __repr__(self) -> str:
        name = getattr(self._action, "__qualname__", None) or repr(self._action)
        return (
            f"<PeriodicAction {name} time={_time_repr(self._time)} period={self.period!r} "
            f"priority={self._priority!r}>"
        )


class Timer:
    """Runs :class:`PeriodicAction` s in time order, in the loop's virtual time (TerraME's Timer).

    Use a timer when a model is a set of periodic processes with a fixed order among
    simultaneous ones: it is the ``for t in range(...)`` loop of a simulation, but with
    per-process periods, priorities and the ability to stop or reconfigure a process from
    inside it.  See the module notes for how its time relates to the loop's.

    ``await timer.run(until)`` runs every event due at or before ``until`` (inclusive) at its
    instant; ``timer.run_sync(until)`` does the same without a loop.  An exception raised by
    an action propagates out of ``run`` and leaves the timer intact: the event is back at the
    head of the queue with its time, period and priority as they were when it was
    dispatched, and ``timer.time`` is that instant — fix the cause and run again.

    Args:
        *events: Added in the given order (FIFO among equal time and priority).
        snap: Snap a rescheduled time to the nearest integer when within ``snap`` of it
            (TerraME's ``round``); 0 (default) keeps exact periods.
    """

    __slots__ = (
        "_count",
        "_current",
        "_heap",
        "_observers",
        "_running",
        "_sleep_future",
        "_sleep_scope",
        "_snap",
        "_time",
    )

    def __init__(self, *events: PeriodicAction, snap: float = 0.0) -> None:
        snap_value = check_span("snap", snap)
        seen: set[int] = set()
        for index, event in enumerate(events):
            if not isinstance(event, PeriodicAction):
                raise InvalidTypeError(
                    f"events[{index}] must be a PeriodicAction, got {event!r} "
                    f"({type(event).__name__})"
                )
            if id(event) in seen:
                raise InvalidValueError(f"events[{index}] ({event!r}) is given twice")
            seen.add(id(event))
            if event._timer is not None:
                raise InvalidValueError(
                    f"events[{index}] ({event!r}) already belongs to another Timer; "
                    "remove it there first"
                )
        self._snap = to_ticks(snap_value)
        self._time: int | None = None
        self._heap: list[tuple[int, int, int, PeriodicAction]] = []
        self._count = 0
        self._current: PeriodicAction | None = None
        self._running = False
        self._sleep_scope: Any = None  # while sleeping on trio: a kit wait or a CancelScope
        self._sleep_future: asyncio.Future[bool] | None = None
        self._observers: list[Callable[[float], object]] = []
        for event in events:
            self._push(event)
            event._timer = self

    # ------------------------------------------------------------------ queue

    def _push(self, event: PeriodicAction) -> None:
        seq = next(_sequence)
        event._entry = seq
        heapq.heappush(self._heap, (event._time, event._priority, seq, event))
        self._count += 1

    def _head(self) -> tuple[int, int, int, PeriodicAction] | None:
        heap = self._heap
        while heap:
            entry = heap[0]
            event = entry[3]
            if event._timer is self and event._entry == entry[2]:
                return entry
            heapq.heappop(heap)
        return None

    def _requeue(self, event: PeriodicAction) -> None:
        self._count -= 1
        self._push(event)
        self._interrupt()

    def _interrupt(self) -> None:
        scope = self._sleep_scope
        if scope is not None:
            self._sleep_scope = None  # tells _sleep_until it was woken early
            scope.cancel()
        future = self._sleep_future
        if future is not None and not future.done():
            future.set_result(False)

    @property
    def time(self) -> float:
        """The instant of the last dispatch (or the ``until`` of the last run); -inf at first."""
        return -math.inf if self._time is None else to_seconds(self._time)

    @property
    def events(self) -> list[PeriodicAction]:
        """The queued events in the order they will run (a new list)."""
        entries = sorted(
            entry for entry in self._heap if entry[3]._timer is self and entry[3]._entry == entry[2]
        )
        return [entry[3] for entry in entries]

    def __len__(self) -> int:
        """How many events are queued (an event whose action is running is not counted)."""
        return self._count

    def add(self, event: PeriodicAction) -> PeriodicAction:
        """Queue ``event`` (behind events at the same time and priority) and return it.

        An event belongs to one timer at a time, and its time may not be behind the timer's
        time (that would make time run backwards): both are a ``ValueError``.
        """
        if not isinstance(event, PeriodicAction):
            raise InvalidTypeError(
                f"event must be a PeriodicAction, got {event!r} ({type(event).__name__})"
            )
        if event._timer is self:
            raise InvalidValueError(f"event {event!r} is already in this timer")
        if event._timer is not None:
            raise InvalidValueError(
                f"event {event!r} already belongs to another Timer; remove it there first"
            )
        if self._time is not None and event._time < self._time:
            raise InvalidValueError(
                f"event time {event.time!r} is before the timer's current time "
                f"{self.time!r}; time never goes backwards (give the event a later start)"
            )
        event._timer = self
        if event is self._current:
            return event  # removed and re-added by its own action: re-queued when it returns
        self._push(event)
        self._interrupt()
        return event

    def remove(self, event: PeriodicAction) -> None:
        """Take ``event`` out of this timer (inside its own action: it will not come back)."""
        if not isinstance(event, PeriodicAction):
            raise InvalidTypeError(
                f"event must be a PeriodicAction, got {event!r} ({type(event).__name__})"
            )
        if event._timer is not self:
            raise InvalidValueError(f"event {event!r} is not in this timer")
        event._timer = None
        if event is not self._current:
            self._count -= 1
            self._interrupt()

    def clear(self) -> None:
        """Remove every queued event.

        As in TerraME, an event whose action is running is not queued: unless its action
        returns ``False``, it is rescheduled after the clear.
        """
        for event in self.events:
            event._timer = None
        self._heap.clear()
        self._count = 0
        self._interrupt()

    def reset(self) -> None:
        """Set :attr:`time` back to -inf, keeping the queue and each event's next time.

        Use it to run a queue again from a fresh start, for instance after re-configuring
        its events; the next run catches up with the loop as described in the module notes.
        """
        self._time = None

    # ------------------------------------------------------------------ observers

    def observe(self, callback: Callable[[float], object]) -> Callable[[float], object]:
        """Register ``callback(time)`` to be called by :meth:`notify`; returns ``callback``.

        Notification is explicit, as in TerraME: call :meth:`notify` where a snapshot is
        wanted, typically from an event (``PeriodicAction(action=lambda e, t: t.notify())``).
        """
        if not callable(callback):
            raise InvalidTypeError(f"callback must be callable, got {callback!r}")
        self._observers.append(callback)
        return callback

    def unobserve(self, callback: Callable[[float], object]) -> None:
        """Stop notifying ``callback``."""
        try:
            self._observers.remove(callback)
        except ValueError:
            raise InvalidValueError(f"callback {callback!r} is not observing this timer") from None

    def notify(self) -> None:
        """Call every observer with the current :attr:`time`."""
        now = self.time
        for callback in list(self._observers):
            callback(now)

    # ------------------------------------------------------------------ running

    def _check_run(self, until: float) -> int:
        limit = instant_ticks("until", until)
        if self._time is not None and limit < self._time:
            raise InvalidValueError(
                f"until={until!r} is before the timer's current time {self.time!r}; "
                "time never goes backwards (use reset() to start the timer afresh)"
            )
        if self._running:
            raise UsageError(
                "this timer is already running (run() and run_sync() are not re-entrant; "
                "to change the queue from an action, use add(), remove() or config())"
            )
        return limit

    def _begin(self, entry: tuple[int, int, int, PeriodicAction]) -> PeriodicAction:
        heapq.heappop(self._heap)
        event = entry[3]
        self._count -= 1
        self._time = entry[0]
        self._current = event
        return event

    def _finish(self, event: PeriodicAction, result: object) -> None:
        self._current = None
        if event._timer is not self:  # removed by its own action
            return
        if result is False:
            event._timer = None
            return
        event._time += event._period
        if self._snap:
            nearest = (event._time + TICKS_PER_SECOND // 2) // TICKS_PER_SECOND * TICKS_PER_SECOND
            if abs(event._time - nearest) < self._snap:
                event._time = nearest
        self._push(event)

    def _restore(
        self, event: PeriodicAction, entry: tuple[int, int, int, PeriodicAction], period: int
    ) -> None:
        """An action failed: put the event back exactly as it was dispatched."""
        self._current = None
        if event._timer is not self:
            return
        event._time, event._priority, event._period = entry[0], entry[1], period
        event._entry = entry[2]
        heapq.heappush(self._heap, entry)
        self._count += 1

    async def run(self, until: float) -> None:
        """Run every event due at or before ``until``, each at its instant of loop time.

        Returns with ``time == until`` and the loop at ``until`` (or later if it was already
        past it).  When the queue is empty, or becomes empty because every event ended, it
        returns at once and leaves :attr:`time` at the last dispatch, as in TerraME.  Events
        added by other tasks while it sleeps are taken into account.
        ``until`` behind :attr:`time` is a ``ValueError``.
        """
        limit = self._check_run(until)
        self._running = True
        loop = asyncio_loop()  # on asyncio, the fast path: a future and a loop timer
        kit_sleep: Any = None  # on a virtualtime trio clock: its kit waits
        trio_task: Any = None
        if loop is not None:
            clock = loop.time
            task = _current_task()
        else:
            trio = trio_module()
            clock = trio.current_time
            task = None
            # A virtualtime trio clock's kit waits (virtualtime/trio/_park.py), if it is one.
            running = trio.lowlevel.current_clock()
            kit_sleep = getattr(running, "_vt_sleep", None)
            if kit_sleep is not None:
                running._vt_fresh()  # the caller may just have entered a fail_after
                trio_task = trio.lowlevel.current_task()
                if_cancelled = trio.lowlevel.checkpoint_if_cancelled
                arrive = running._vt_arrive
        heap = self._heap
        try:
            now = to_ticks(clock())
            while True:
                entry = self._head()
                if entry is None:
                    return
                at = entry[0]
                due = at if at < limit else limit
                slept = False
                if due > now:
                    # Events due now (or overdue) run without a trip through the loop; so
                    # does the next instant when nothing else could run before it.
                    if loop is not None and jump_to(loop, due, task):
                        now = due
                    elif kit_sleep is not None and (parked := kit_sleep(due, trio_task)) is None:
                        await if_cancelled()  # a cancelled task moves no time
                        arrive(due)  # in place (nothing else can happen first), or due already
                        now = due
                    else:
                        if loop is not None:
                            awake = await self._sleep_asyncio(loop, due)
                        elif kit_sleep is not None:
                            awake = await self._sleep_parked(parked)
                        else:
                            awake = await self._sleep_until(due)
                        now = to_ticks(clock())
                        if not awake:
                            continue  # the queue changed while we slept: look again
                        slept = True
                if at > limit:
                    self._time = limit
                    return
                if slept and self._head() is not entry:
                    continue
                heappop(heap)  # _begin, inlined
                event = entry[3]
                self._count -= 1
                self._time = at
                self._current = event
                period = event._period
                try:
                    result = event._action(event, self)
                    if result is not None and result is not False and _isawaitable(result):
                        result = await result
                        now = to_ticks(clock())
                except BaseException:
                    self._restore(event, entry, period)
                    raise
                if result is not False and event._timer is self and not self._snap:
                    # _finish and _push, inlined for the common case: back in the queue.
                    self._current = None
                    time = event._time + event._period
                    event._time = time
                    seq = next(_sequence)
                    event._entry = seq
                    heappush(heap, (time, event._priority, seq, event))
                    self._count += 1
                else:
                    self._finish(event, result)
        finally:
            self._running = False

    async def _sleep_asyncio(self, loop: asyncio.AbstractEventLoop, ticks: int) -> bool:
        """:meth:`_sleep_until` on asyncio: a future the queue's changes resolve early."""
        future: asyncio.Future[bool] = loop.create_future()
        handle = loop.call_at(to_seconds(ticks), _set_result, future, True)
        self._sleep_future = future
        try:
            return await future
        finally:
            handle.cancel()
            self._sleep_future = None

    async def _sleep_parked(self, parked: Any) -> bool:
        """:meth:`_sleep_until` on a virtualtime trio clock: a kit wait (parked on the
        clock, see virtualtime/trio/_park.py) that a change of the queue ends early."""
        self._sleep_scope = parked
        try:
            awake: bool = await parked.wait()
            return awake
        finally:
            if self._sleep_scope is parked:
                self._sleep_scope = None

    async def _sleep_until(self, ticks: int) -> bool:
        """Sleep until loop time ``ticks`` on trio; False if the queue changed meanwhile.

        On another trio clock (MockClock, real time): one trio cancel scope whose deadline is
        the wake-up (what ``trio.sleep_until`` does inside), cancelled early by a change of
        the queue.
        """
        trio = trio_module()
        scope = trio.CancelScope(deadline=to_seconds(ticks))
        self._sleep_scope = scope
        try:
            with scope:
                await trio.sleep_forever()
        finally:
            woken = self._sleep_scope is not scope
            if not woken:
                self._sleep_scope = None
        return not woken

    def run_sync(self, until: float) -> None:
        """:meth:`run` without an event loop: the model time simply jumps.

        For queues whose actions are plain functions (an action that returns an awaitable is
        a ``TypeError``, and the timer stays intact).  Nothing sleeps, so it can be used
        anywhere, including inside a running loop when virtual time should not move.
        """
        limit = self._check_run(until)
        self._running = True
        try:
            while True:
                entry = self._head()
                if entry is None:
                    return
                if entry[0] > limit:
                    self._time = limit
                    return
                event = self._begin(entry)
                period = event._period
                try:
                    result = event._action(event, self)
                    if inspect.isawaitable(result):
                        close = getattr(result, "close", None)
                        if close is not None:
                            close()
                        raise InvalidTypeError(
                            f"the action of {event!r} returned an awaitable; run timers with "
                            "async actions with 'await timer.run(until)'"
                        )
                except BaseException:
                    self._restore(event, entry, period)
                    raise
                self._finish(event, result)
        finally:
            self._running = False

    def __repr__(self) -> str:
        return f"<Timer time={_time_repr(self._time)} events={self._count}>"
