"""Vehicles whose journeys you can await: step-planned movement (KSL's InterpolatedMovement).

What a journey is
-----------------
``van.travel_to(dock)`` is synchronous: it commands the vehicle and returns a :class:`Journey`
at once.  Whoever wants to know how it ended awaits the journey (any number of tasks may); the
vehicle itself is driven by a task it owns, not by the coroutine that commanded it.  That is
what lets a fleet controller in one task send, redirect, halt and resume vehicles that other
tasks are waiting on -- the two ends of a wait never disagree about who will wake whom.

Why the vehicle owns a task, and where that task lives
------------------------------------------------------
Under anyio the only way to make something happen later is a task that sleeps, and a task
must belong to a task group (structured concurrency: nothing outlives the block that started
it).  So a vehicle is *in service* only inside a :class:`Fleet` (an async context manager
holding the task group its vehicles' journeys run in) or inside ``async with vehicle:`` (a
one-vehicle fleet).  Each journey is driven by one short-lived task, started from the
synchronous ``travel_to`` with ``start_soon`` and ended when the journey ends, so an idle fleet
has no tasks at all.  Leaving the ``async with`` block normally waits for journeys in progress
to end, as a task group waits for its tasks; leaving it by an exception or a cancellation halts
every moving vehicle where it stands (their waiters are woken with ``HALTED``).

Step planning (the part that is KSL's)
--------------------------------------
A journey advances in steps.  A step's direction and distance are fixed when it is *planned*
and applied when it *ends*: the vehicle covers the ground the elapsed time paid for.  The
velocity is asked once per step, when it is planned, so a vehicle whose speed depends on its
load answers for itself.  A step is ``min(step_size, remaining)`` on a geometry that
interpolates, the whole leg on one that cannot, and one zone-to-zone edge on a guide path.  A
redirect does not interrupt the step in flight: it is observed when that step ends, at most
``step_size / velocity`` later (something between two places cannot stop and turn), and the
odometer is continuous across it.  ``halt()`` does stop the vehicle now: it credits the part of
the step the elapsed time paid for (``min(planned, elapsed * velocity)``) and places the vehicle
there.

Time is kept in integer nanosecond ticks (:mod:`virtualtime._shared._time`): a step that starts at
tick ``s`` ends at ``s + delay_ticks(distance / velocity)``, the next step starts exactly there, and
operating time is the sum of those exact durations -- equal to the elapsed time, whatever the
velocity does mid-step (KSL recomputes it with the velocity at step end and drifts).

Velocity zero
-------------
A step planned with a velocity that is not a finite number > 0 raises ``ValueError``: from
``travel_to``/``resume`` (state unchanged) or, mid-journey, from the vehicle's task after the
vehicle has been halted at the step boundary, so the fleet's ``async with`` block raises.
Waiting for a positive velocity is not offered: the velocity is only asked when a step is
planned, so a stopped vehicle could notice a change only by polling, and a poll in virtual time
either spins forever or invents an interval.  To stop a vehicle, ``halt()`` it.

One room: :class:`Vehicle` is one class whose methods share the invariants above (the step in
flight, the journey it serves, the odometer and operating time kept in exact ticks) and whose
driving methods are the per-step hot path; and :class:`Fleet` and ``Vehicle`` use each other at
run time (``async with vehicle:`` makes a one-vehicle fleet, a fleet binds its vehicles' task
group and checks that what it is given is a vehicle).  Splitting either would cut through one of
those, so they stay together; the journey a vehicle returns lives in :mod:`._journey`.

Part of ``sim``: may import ``shared``, ``engine``, ``trace``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from numbers import Real
from types import TracebackType
from typing import Any, Final, Generic, TypeVar

import anyio
import anyio.abc

from .._shared._errors import InvalidTypeError, InvalidValueError, UsageError
from .._shared._time import check_delay, delay_ticks, to_seconds, to_ticks
from ._check import check_span, short
from ._fast import asyncio_loop, jump_by, set_result, trio_module
from ._geometry import ARRIVAL_TOLERANCE, Geometry
from ._journey import Journey, JourneyOutcome, JourneyStatus

_GEOMETRY_MODULE: Final = Geometry.__module__

__all__ = ["Fleet", "Vehicle"]

P = TypeVar("P")
V = TypeVar("V", bound="Vehicle[Any]")

_FRACTION_DONE: Final = 1.0 - 1e-12


@dataclass(slots=True)
class _Leg(Generic[P]):
    """A straight run of steps from ``origin`` to ``target``; remade at every redirect/resume."""

    origin: P
    target: P
    length: float
    done: float
    interpolates: bool
    boundaries: Sequence[float] | None


class _Step(Generic[P]):
    """A planned step: fixed when planned, applied when it ends (never changed after).

    A plain slotted class: one is made per step, and a frozen dataclass's ``__init__``
    (``object.__setattr__`` per field) was a visible part of a step's cost.
    """

    __slots__ = ("distance", "done_after", "end", "start", "target", "velocity")

    def __init__(
        self, start: int, end: int, distance: float, velocity: float, done_after: float, target: P
    ) -> None:
        self.start = start
        self.end = end
        self.distance = distance
        self.velocity = velocity
        self.done_after = done_after
        self.target = target


class Vehicle(Generic[P]):
    """Something that travels through a :class:`~virtualtime.sim.Geometry` in planned steps.

    Create it anywhere; put it in service inside ``async with Fleet(...)`` (several vehicles,
    one task group) or ``async with vehicle:`` (just this one).  Then, from any task:

    * ``journey = van.travel_to(dest)`` commands a journey and returns at once; a second call
      while moving is a redirect (taken at the end of the step in flight); sending the vehicle
      where it already is (within :data:`ARRIVAL_TOLERANCE`) returns a journey that has already
      arrived.  ``await journey`` for the :class:`JourneyOutcome`.
    * ``van.halt()`` stops it now, where the elapsed time has brought it; ``van.resume()``
      re-plans from there toward the kept destination and returns the new journey.
    * ``van.position``, ``van.destination``, ``van.is_travelling`` (under way or halted),
      ``van.is_moving``, ``van.is_halted``, ``van.distance_travelled`` and
      ``van.operating_time`` (never decrease), ``van.journeys`` (ended journeys, for traces).

    The knobs:

    ``velocity``
        A number, or a function of no arguments asked once per step when the step is planned
        (so a vehicle whose speed depends on its load answers for itself).  Must give a finite
        number > 0 each time (see the module docs for why 0 raises rather than waits).  May be
        reassigned; the step in flight keeps the speed it was planned with.
    ``step_size``
        Distance between decision points on a geometry that interpolates: smaller means a
        fresher ``position``, quicker redirects and gates asked more often, at the cost of more
        timers.  ``None`` (the default) makes each leg one step, like a free-path move: cheapest,
        but the vehicle is seen only where it set off and where it arrives.  Ignored by
        geometries with their own decision points (:class:`~virtualtime.sim.GuidePath`) or
        none (:class:`~virtualtime.sim.DistanceTable`).
    ``on_journey_ended(vehicle, outcome)``
        Called when a journey stops by arrival or halt, before anyone awaiting it is woken; it
        may command the next journey.  An exception from it propagates (from ``halt()`` to its
        caller, or out of the fleet's ``async with``), after the waiters are woken.
    ``continuation_gate(vehicle) -> bool``
        Asked at every decision point where the vehicle would go on (not on arrival); ``False``
        halts it there.  A breakdown, a flat battery or a blocked zone found part way.
    ``history``
        How many ended journeys :attr:`journeys` keeps (``None``: all, ``0``: none).
    ``name``
        For reprs, task names, traces and messages.  Default: ``vehicle-N`` from its place in
        the first fleet it joins (see :attr:`name`).
    """

    def __init__(
        self,
        geometry: Geometry[P],
        *,
        position: P,
        velocity: float | Callable[[], float],
        step_size: float | None = None,
        on_journey_ended: Callable[[Vehicle[P], JourneyOutcome[P]], object] | None = None,
        continuation_gate: Callable[[Vehicle[P]], bool] | None = None,
        name: str | None = None,
        history: int | None = None,
    ) -> None:
        if not isinstance(geometry, Geometry):
            raise InvalidTypeError(
                "geometry must provide check_position, distance, is_reachable, position_along "
                f"and boundaries (the Geometry protocol), got {geometry!r}"
            )
        self._geometry: Geometry[P] = geometry
        start = geometry.check_position(position, name="position")
        self._velocity = _check_velocity_setting(velocity)
        self._step_size = _check_step_size(step_size)
        for label, callback in (
            ("on_journey_ended", on_journey_ended),
            ("continuation_gate", continuation_gate),
        ):
            if callback is not None and not callable(callback):
                raise InvalidTypeError(f"{label} must be callable or None, got {callback!r}")
        if name is not None and not isinstance(name, str):
            raise InvalidTypeError(f"name must be a str or None, got {name!r}")
        if history is not None:
            if isinstance(history, bool) or not isinstance(history, int):
                raise InvalidTypeError(f"history must be an int >= 0 or None, got {history!r}")
            if history < 0:
                raise InvalidValueError(f"history must be >= 0 or None, got {history!r}")
        self._name: str | None = name
        self._on_journey_ended = on_journey_ended
        self._gate = continuation_gate
        self._initial: P = start
        self._position: P = start
        self._destination: P | None = None
        self._journey: Journey[P] | None = None
        self._superseded: list[Journey[P]] = []
        self._halted = False
        self._stopped: Journey[P] | None = None  # the journey that ended in the current halt
        self._leg: _Leg[P] | None = None
        self._step: _Step[P] | None = None
        self._driver: object | None = None
        self._sleep_scope: Any = None  # while a step sleeps on trio: a kit wait or CancelScope
        self._sleep_future: asyncio.Future[None] | None = None
        self._fleet: Fleet | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        self._own_fleet: Fleet | None = None
        self._odometer = 0.0
        self._operating_ticks = 0
        self._journeys: deque[JourneyOutcome[P]] = deque(maxlen=history)
        self._busy = False
        self._closing = False

    # ------------------------------------------------------------------ properties

    @property
    def name(self) -> str:
        """The vehicle's name (used in reprs, task names, traces and messages).

        An unnamed vehicle is named when it first joins a fleet: ``vehicle-N``, ``N`` its
        place in that fleet (1 for ``async with vehicle:``), so names do not depend on what
        else the process has created.  Until then it reads ``"vehicle"``.
        """
        return "vehicle" if self._name is None else self._name

    @property
    def geometry(self) -> Geometry[P]:
        """The geometry the vehicle moves through."""
        return self._geometry

    @property
    def position(self) -> P:
        """Where the vehicle is: its last decision point, the place a halt left it, or where
        it arrived.  Never more than one step behind the truth."""
        return self._position

    @property
    def destination(self) -> P | None:
        """Where the journey under way (or halted) is going; ``None`` when idle."""
        return self._destination

    @property
    def journey(self) -> Journey[P] | None:
        """The journey under way (not yet ended), or ``None`` when idle or halted."""
        return self._journey

    @property
    def is_travelling(self) -> bool:
        """True while a journey is under way *or halted* (a destination is kept)."""
        return self._destination is not None

    @property
    def is_moving(self) -> bool:
        """True while a step is in flight (travelling and not halted)."""
        return self._step is not None

    @property
    def is_halted(self) -> bool:
        """True while stopped short of the destination, with nothing scheduled."""
        return self._halted

    @property
    def distance_travelled(self) -> float:
        """Distance covered since construction or :meth:`reset`. Never decreases."""
        return self._odometer

    @property
    def operating_time(self) -> float:
        """Virtual seconds spent moving since construction or :meth:`reset`. Never decreases."""
        return to_seconds(self._operating_ticks)

    @property
    def remaining_distance(self) -> float:
        """Distance from :attr:`position` to :attr:`destination` (0 when idle)."""
        if self._destination is None:
            return 0.0
        return self._geometry.distance(self._position, self._destination)

    @property
    def journeys(self) -> tuple[JourneyOutcome[P], ...]:
        """Ended journeys (arrived, halted, redirected), oldest first: spans for a trace."""
        return tuple(self._journeys)

    @property
    def fleet(self) -> Fleet | None:
        """The open fleet the vehicle serves in (``async with vehicle:`` makes one), if any."""
        return self._fleet

    @property
    def velocity(self) -> float | Callable[[], float]:
        """The velocity setting: a number or a function asked once per step."""
        return self._velocity

    @velocity.setter
    def velocity(self, value: float | Callable[[], float]) -> None:
        self._velocity = _check_velocity_setting(value)

    @property
    def step_size(self) -> float | None:
        """Distance between decision points (``None``: each leg is one step)."""
        return self._step_size

    @step_size.setter
    def step_size(self, value: float | None) -> None:
        self._step_size = _check_step_size(value)

    def distance_to(self, place: object) -> float:
        """Distance along the route from :attr:`position` to ``place``."""
        target = self._geometry.check_position(place, name="place", like=self._position)
        return self._geometry.distance(self._position, target)

    # ------------------------------------------------------------------ commands

    def travel_to(self, destination: P) -> Journey[P]:
        """Send the vehicle to ``destination``; returns the :class:`Journey` at once.

        While the vehicle is moving this is a redirect: the step in flight is completed, then a
        new leg starts from where it ended (the replaced journey ends ``REDIRECTED``).  The
        same destination as the journey under way returns that journey.  A vehicle that is
        idle or halted and already there gets a journey that has already arrived (a halted one
        becomes idle).  ``ValueError`` for a destination that is not reachable or not valid,
        or a velocity that is not > 0; :class:`~virtualtime.UsageError` (a ``RuntimeError``)
        when the vehicle is not in service.
        In every error case the vehicle is left as it was.
        """
        self._check_not_busy("travel_to")
        geometry = self._geometry
        dest = geometry.check_position(destination, name="destination", like=self._position)
        step = self._step
        origin = self._position if step is None else step.target
        if not geometry.is_reachable(origin, dest):
            raise InvalidValueError(
                f"destination {dest!r} cannot be reached from {origin!r} by {self.name!r} "
                f"in {geometry!r}"
            )
        if step is not None:
            current = self._journey
            assert current is not None
            assert self._destination is not None
            if geometry.distance(self._destination, dest) <= ARRIVAL_TOLERANCE:
                return current
            now = self._now()
            journey = Journey(self, dest, now)
            current._redirected_to = journey
            self._superseded.append(current)
            self._journey = journey
            self._destination = dest
            return journey
        if geometry.distance(origin, dest) <= ARRIVAL_TOLERANCE:
            now = self._now()
            if self._halted:
                self._halted = False
                self._destination = None
                self._leg = None
            journey = Journey(self, dest, now)
            journey._finish(JourneyStatus.ARRIVED, now, self._position, self._odometer)
            self._went_on(journey)
            return journey
        return self._depart(dest)

    def resume(self) -> Journey[P] | None:
        """Start a halted vehicle again toward its kept destination; ``None`` unless halted.

        Re-plans a leg from where the vehicle stands and returns the new :class:`Journey`
        (the halted one already ended ``HALTED``).  A velocity that is not > 0 raises and the
        vehicle stays halted.
        """
        self._check_not_busy("resume")
        if not self._halted:
            return None
        assert self._destination is not None
        return self._depart(self._destination)

    def halt(self) -> JourneyOutcome[P] | None:
        """Stop the vehicle now, where the elapsed time has brought it; return the outcome.

        Credits the part of the step in flight that the elapsed time paid for (at the velocity
        the step was planned with) to the odometer and operating time and places the vehicle
        there; keeps the destination (so :attr:`is_travelling` stays true), marks it halted,
        calls ``on_journey_ended`` and then wakes the journey's waiters with ``HALTED``.  A halt
        that finds the vehicle at its destination is an arrival.  A no-op (``None``) when the
        vehicle is not moving.
        """
        self._check_not_busy("halt")
        step = self._step
        if step is None:
            return None
        leg = self._leg
        assert leg is not None
        now = self._now()
        geometry = self._geometry
        elapsed = min(max(now - step.start, 0), step.end - step.start)
        position = self._position
        if elapsed >= step.end - step.start:
            covered, done, position = step.distance, step.done_after, step.target
        else:
            covered = min(step.distance, to_seconds(elapsed) * step.velocity)
            done = leg.done + covered
            if covered > 0:
                placed = geometry.position_along(leg.origin, leg.target, done)
                if placed is not None:
                    position = placed
        self._stop_driver()
        leg.done = done
        self._odometer += covered
        self._operating_ticks += elapsed
        self._position = position
        return self._stop(now)

    def reset(self, position: P | None = None) -> None:
        """Start a new replication: forget the journey, zero the odometers, clear the log.

        Cancels the step in flight (if any), ends the journey under way with ``RESET`` (its
        waiters are woken; ``on_journey_ended`` is not called) and puts the vehicle back at its
        starting position, or at ``position`` when given.
        """
        place = (
            self._initial
            if position is None
            else self._geometry.check_position(position, name="position", like=self._initial)
        )
        self._check_not_busy("reset")
        pending = [*self._superseded, *([self._journey] if self._journey is not None else [])]
        now = self._now() if pending else 0
        self._stop_driver()
        for journey in pending:
            journey._finish(JourneyStatus.RESET, now, self._position, self._odometer)
        self._superseded.clear()
        self._journey = None
        self._destination = None
        self._halted = False
        self._went_on(None)
        self._leg = None
        self._odometer = 0.0
        self._operating_ticks = 0
        self._journeys.clear()
        self._position = place
        for journey in pending:
            journey._wake()

    def record_external_move(self, distance: float, duration: float) -> None:
        """Add a move made by other means (a ferry, a tow, a free-path delay) to the odometers.

        ``distance`` and ``duration`` (virtual seconds) must be finite and >= 0.  The position
        is not changed.
        """
        d = check_delay("distance", distance)
        t = check_span("duration", duration)
        self._odometer += d
        self._operating_ticks += to_ticks(t)

    # ------------------------------------------------------------------ service

    async def __aenter__(self) -> Vehicle[P]:
        fleet = Fleet(self, name=self._name)
        await fleet.__aenter__()
        self._own_fleet = fleet
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        fleet, self._own_fleet = self._own_fleet, None
        assert fleet is not None
        return await fleet.__aexit__(exc_type, exc, tb)

    # ------------------------------------------------------------------ internals

    def _now(self) -> int:
        try:
            return to_ticks(anyio.current_time())
        except RuntimeError as error:  # anyio's "no event loop" is a RuntimeError
            raise UsageError(
                f"{self.name!r} can only be commanded from inside a running event loop "
                "(asyncio or trio, through anyio)"
            ) from error

    def _velocity_now(self) -> float:
        setting = self._velocity
        value: object = setting() if callable(setting) else setting
        if type(value) is float and 0 < value < math.inf:
            return value  # the common case, without the ABC check below
        if isinstance(value, bool) or not isinstance(value, Real):
            raise InvalidTypeError(
                f"velocity of {self.name!r} must be a real number, got {value!r} "
                f"({type(value).__name__})"
            )
        v = float(value)
        if not (v > 0 and math.isfinite(v)):
            raise InvalidValueError(
                f"velocity of {self.name!r} must be finite and > 0 when a step is planned, "
                f"got {value!r} (to stop a vehicle, halt() it)"
            )
        return v

    def _make_leg(self, origin: P, target: P) -> _Leg[P]:
        geometry = self._geometry
        length = geometry.distance(origin, target)
        if not math.isfinite(length):
            raise InvalidValueError(
                f"destination {target!r} cannot be reached from {origin!r} by {self.name!r}"
            )
        boundaries = geometry.boundaries(origin, target)
        interpolates = boundaries is not None or (
            length > ARRIVAL_TOLERANCE
            and geometry.position_along(origin, target, length / 2) is not None
        )
        return _Leg(origin, target, length, 0.0, interpolates, boundaries)

    def _make_step(self, leg: _Leg[P], now: int) -> _Step[P]:
        remaining = leg.length - leg.done
        if leg.boundaries is not None:
            edge = next((b for b in leg.boundaries if b > leg.done + ARRIVAL_TOLERANCE), leg.length)
            distance = edge - leg.done
        elif not leg.interpolates or self._step_size is None:
            distance = remaining
        else:
            distance = (
                self._step_size if remaining - self._step_size > ARRIVAL_TOLERANCE else remaining
            )
        setting = self._velocity
        if type(setting) is float:  # a fixed speed, checked when it was set
            velocity = setting
        else:
            self._busy = True
            try:
                velocity = self._velocity_now()
            finally:
                self._busy = False
        done_after = leg.done + distance
        target: P | None
        if (
            done_after >= leg.length * _FRACTION_DONE
            or leg.length - done_after <= ARRIVAL_TOLERANCE
        ):
            done_after, target = leg.length, leg.target
        else:
            target = self._geometry.position_along(leg.origin, leg.target, done_after)
            if target is None:
                target = self._position
        return _Step(
            now, now + delay_ticks(distance / velocity), distance, velocity, done_after, target
        )

    def _check_not_busy(self, command: str) -> None:
        if self._busy:
            raise UsageError(
                f"{command}() called on {self.name!r} from its own velocity function or "
                "continuation gate; a gate says no by returning False"
            )

    def _require_service(self) -> anyio.abc.TaskGroup:
        group = self._task_group
        if group is None:
            raise UsageError(
                f"{self.name!r} is not in service: command it inside `async with vehicle:` or "
                "after `fleet.add(vehicle)` inside `async with Fleet() as fleet:`"
            )
        return group

    def _depart(self, dest: P) -> Journey[P]:
        group = self._require_service()
        now = self._now()
        if self._closing:
            # Commanded (by on_journey_ended) while the fleet is being cancelled: a driver
            # started now would be cancelled at once, halt, call back, be commanded again...
            # Instead the vehicle stays halted, bound for the new destination.
            journey = Journey(self, dest, now)
            self._destination = dest
            self._halted = True
            self._leg = None
            journey._finish(JourneyStatus.HALTED, now, self._position, self._odometer)
            self._went_on(journey)
            self._stopped = journey
            return journey
        leg = self._make_leg(self._position, dest)
        step = self._make_step(leg, now)  # asks the velocity; may raise, nothing changed yet
        journey = Journey(self, dest, now)
        journey._start(now, self._position, self._odometer)
        self._went_on(journey)
        self._destination = dest
        self._journey = journey
        self._halted = False
        self._leg = leg
        self._step = step
        token = object()
        self._driver = token
        order = 0
        if asyncio_loop() is None:
            # trio starts the tasks of one turn in random order: a virtualtime clock queues
            # the journey's first step in the order of the commands instead (as asyncio does).
            reserve = getattr(trio_module().lowlevel.current_clock(), "_vt_reserve", None)
            if reserve is not None:
                order = reserve()
        group.start_soon(self._drive, token, order, name=f"virtualtime.sim vehicle {self.name}")
        return journey

    def _stop_driver(self) -> None:
        self._driver = None
        self._step = None
        scope, self._sleep_scope = self._sleep_scope, None
        if scope is not None:
            scope.cancel()
        future, self._sleep_future = self._sleep_future, None
        if future is not None and not future.done():
            future.set_result(None)

    async def _drive(self, token: object, order: int = 0) -> None:
        """The vehicle's own task for one journey: sleep to each step end, apply it, re-plan."""
        loop = asyncio_loop()
        trio: Any = trio_module() if loop is None else None
        kit_sleep: Any = None
        if trio is not None:
            # A virtualtime trio clock's kit waits (virtualtime/trio/_park.py), if it is one.
            running = trio.lowlevel.current_clock()
            kit_sleep = getattr(running, "_vt_sleep", None)
            if kit_sleep is not None:
                running._vt_fresh()
                task = trio.lowlevel.current_task()
                if_cancelled = trio.lowlevel.checkpoint_if_cancelled
                arrive = running._vt_arrive
                quiet = self._quiet_step_end
        try:
            while self._driver is token:
                step = self._step
                assert step is not None
                if loop is not None:
                    # The fast path: a future and a loop timer; _stop_driver resolves it.
                    delay = step.end - to_ticks(loop.time())
                    seconds = to_seconds(delay)
                    if delay > 0 and not jump_by(loop, seconds, None):
                        future: asyncio.Future[None] = loop.create_future()
                        handle = loop.call_later(seconds, set_result, future, None)
                        self._sleep_future = future
                        try:
                            await future
                        except BaseException:
                            handle.cancel()
                            if self._sleep_future is future:
                                self._sleep_future = None
                            raise
                        if self._sleep_future is future:
                            self._sleep_future = None  # the timer fired: nothing to cancel
                        else:
                            handle.cancel()  # woken early by _stop_driver
                    if self._driver is not token or self._step is not step:
                        return
                    self._step_ended(step)
                    continue
                if kit_sleep is not None:
                    # A kit wait that _stop_driver ends early, or no wait at all when the
                    # step has ended already or nothing else can happen before its end.
                    parked = kit_sleep(step.end, task, order, quiet)
                    if parked is None:
                        order = 0
                        await if_cancelled()  # a cancelled task moves no time
                        arrive(step.end)  # in place, or the step has ended already
                    else:
                        self._sleep_scope = parked
                        try:
                            await parked.wait()
                        finally:
                            if self._sleep_scope is parked:
                                self._sleep_scope = None
                        order = parked.order  # our place for the next step (see _park.py)
                    if self._driver is not token or self._step is not step:
                        return
                    self._step_ended(step)
                    continue
                # Another trio clock: one cancel scope whose deadline is the step's end;
                # _stop_driver cancels it to wake the driver early.
                scope = trio.CancelScope(deadline=to_seconds(step.end))
                self._sleep_scope = scope
                with scope:
                    if step.end > to_ticks(trio.current_time()):
                        await trio.sleep_forever()
                if self._sleep_scope is scope:
                    self._sleep_scope = None
                if self._driver is not token or self._step is not step:
                    return
                self._step_ended(step)
        except anyio.get_cancelled_exc_class():
            if self._driver is token:  # the fleet is closing under us: stop where we stand
                self._closing = True
                try:
                    self.halt()
                finally:
                    self._closing = False
            raise

    def _quiet_step_end(self) -> bool:
        """Whether ending the current step will touch nothing but this vehicle: not the last
        step of the leg, no redirect pending, no continuation gate, a fixed speed, one of the
        toolkit's geometries (no user code runs), so it may share a trio loop turn with other
        such steps (asked by a virtualtime trio clock when the step's kit wait comes due)."""
        step = self._step
        leg = self._leg
        return (
            step is not None
            and leg is not None
            and not self._superseded
            and self._gate is None
            and type(self._velocity) is float
            and step.done_after < leg.length - ARRIVAL_TOLERANCE
            and type(self._geometry).__module__ == _GEOMETRY_MODULE
        )

    def _step_ended(self, step: _Step[P]) -> None:
        leg = self._leg
        assert leg is not None
        leg.done = step.done_after
        self._odometer += step.distance
        self._operating_ticks += step.end - step.start
        self._position = step.target
        self._step = None
        now = step.end
        redirected = bool(self._superseded)
        if redirected:
            self._resolve_superseded(now)
        elif leg.done >= leg.length - ARRIVAL_TOLERANCE:
            self._arrive(now)
            return
        token = self._driver
        try:
            if redirected:
                assert self._destination is not None
                leg = self._make_leg(self._position, self._destination)
                if leg.length <= ARRIVAL_TOLERANCE:
                    self._arrive(now)
                    return
            gate = self._gate
            if gate is not None:
                self._busy = True
                try:
                    go_on = gate(self)
                finally:
                    self._busy = False
                if not go_on:
                    self._stop(now)
                    return
            new_step = self._make_step(leg, now)
        except BaseException:
            if self._driver is token and not self._halted and self._journey is not None:
                self._stop(now)
            raise
        self._leg = leg
        self._step = new_step

    def _resolve_superseded(self, now: int) -> None:
        superseded, self._superseded = self._superseded, []
        if not superseded:
            return
        for journey in superseded:
            outcome = journey._finish(JourneyStatus.REDIRECTED, now, self._position, self._odometer)
            self._journeys.append(outcome)
        if self._journey is not None:
            self._journey._start(now, self._position, self._odometer)
        for journey in superseded:
            journey._wake()

    def _stop(self, now: int) -> JourneyOutcome[P]:
        """End the current journey here, now: an arrival if at the destination, else a halt."""
        self._stop_driver()
        self._resolve_superseded(now)
        dest = self._destination
        assert dest is not None
        if self._geometry.distance(self._position, dest) <= ARRIVAL_TOLERANCE:
            return self._arrive(now)
        self._halted = True
        self._leg = None
        journey = self._journey
        assert journey is not None
        self._journey = None
        self._stopped = journey
        outcome = journey._finish(JourneyStatus.HALTED, now, self._position, self._odometer)
        self._journeys.append(outcome)
        self._tell(journey, outcome)
        return outcome

    def _arrive(self, now: int) -> JourneyOutcome[P]:
        dest = self._destination
        journey = self._journey
        assert dest is not None
        assert journey is not None
        self._stop_driver()
        self._position = dest
        self._destination = None
        self._journey = None
        self._halted = False
        self._leg = None
        outcome = journey._finish(JourneyStatus.ARRIVED, now, dest, self._odometer)
        self._journeys.append(outcome)
        self._tell(journey, outcome)
        return outcome

    def _went_on(self, journey: Journey[P] | None) -> None:
        """The halt is over: ``journey`` takes up from it (None: nothing ever will)."""
        stopped, self._stopped = self._stopped, None
        if stopped is not None:
            stopped._continue_as(journey)

    def _tell(self, journey: Journey[P], outcome: JourneyOutcome[P]) -> None:
        """``on_journey_ended`` first, then the waiters -- even if the callback raises."""
        try:
            if self._on_journey_ended is not None:
                self._on_journey_ended(self, outcome)
        finally:
            journey._wake()

    def __repr__(self) -> str:
        if self._destination is None:
            state = "idle"
        elif self._halted:
            state = f"halted, bound for {self._destination!r}"
        else:
            state = f"travelling to {self._destination!r}"
        return f"<Vehicle {self.name!r} at {self._position!r}, {state}>"


class Fleet:
    """The vehicles that share one task group: where their journeys run.

    ``async with Fleet(van1, van2) as fleet:`` puts the vehicles in service for the block;
    ``fleet.add(van)`` adds more, before or inside it.  Any task may then command any of them.
    A vehicle serves in at most one open fleet at a time (``ValueError`` otherwise); after the
    block it serves in none, and can join another (for the next replication, after
    :meth:`Vehicle.reset`).  A fleet can be entered again once closed.

    Leaving the block normally waits until every journey in progress has ended (like a task
    group waiting for its tasks; a halted vehicle is not waited for).  Leaving it by an
    exception or a cancellation halts every moving vehicle where it stands, which wakes their
    waiters with ``HALTED`` and calls ``on_journey_ended``; a journey that callback commands
    while the fleet closes ends ``HALTED`` at once, leaving the vehicle halted and bound for
    it (``resume()`` it in the next fleet).
    """

    def __init__(self, *vehicles: Vehicle[Any], name: str | None = None) -> None:
        if name is not None and not isinstance(name, str):
            raise InvalidTypeError(f"name must be a str or None, got {name!r}")
        self._name = name
        self._vehicles: list[Vehicle[Any]] = []
        self._task_group: anyio.abc.TaskGroup | None = None
        for vehicle in vehicles:
            self.add(vehicle)

    @property
    def vehicles(self) -> tuple[Vehicle[Any], ...]:
        """The fleet's vehicles, in the order they were added."""
        return tuple(self._vehicles)

    @property
    def is_open(self) -> bool:
        """True inside the ``async with`` block."""
        return self._task_group is not None

    def add(self, vehicle: V) -> V:
        """Add ``vehicle`` and return it; it is in service from now if the fleet is open,
        else from when it opens."""
        if not isinstance(vehicle, Vehicle):
            raise InvalidTypeError(f"vehicle must be a Vehicle, got {vehicle!r}")
        if self._task_group is not None:
            self._claim(vehicle)
            vehicle._task_group = self._task_group
        if vehicle not in self._vehicles:
            self._vehicles.append(vehicle)
            if vehicle._name is None:
                vehicle._name = f"vehicle-{len(self._vehicles)}"
        return vehicle

    def _claim(self, vehicle: Vehicle[Any]) -> None:
        if vehicle._fleet is not None and vehicle._fleet is not self:
            raise InvalidValueError(
                f"vehicle {vehicle.name!r} already serves in {vehicle._fleet!r}; a vehicle "
                "serves one fleet at a time"
            )
        vehicle._fleet = self

    async def __aenter__(self) -> Fleet:
        if self._task_group is not None:
            raise UsageError(f"{self!r} is already open")
        for vehicle in self._vehicles:
            if vehicle._fleet is not None and vehicle._fleet is not self:
                self._claim(vehicle)  # raises
        group = anyio.create_task_group()
        await group.__aenter__()
        self._task_group = group
        for vehicle in self._vehicles:
            self._claim(vehicle)
            vehicle._task_group = group
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        group = self._task_group
        assert group is not None
        try:
            return await group.__aexit__(exc_type, exc, tb)
        finally:
            self._task_group = None
            for vehicle in self._vehicles:
                if vehicle._fleet is self:
                    vehicle._fleet = None
                    vehicle._task_group = None
                    vehicle._went_on(None)  # out of service: a halt here is final

    def __repr__(self) -> str:
        label = f" {self._name!r}" if self._name else ""
        state = "open" if self._task_group is not None else "closed"
        return f"<Fleet{label} of {len(self._vehicles)} vehicles, {state}>"


def _check_velocity_setting(value: object) -> float | Callable[[], float]:
    if callable(value):
        return value
    if isinstance(value, bool) or not isinstance(value, Real):
        raise InvalidTypeError(
            f"velocity must be a number or a function returning one, got {value!r} "
            f"({type(value).__name__})"
        )
    try:
        v = float(value)
    except OverflowError:
        v = math.inf
    if not (v > 0 and math.isfinite(v)):
        raise InvalidValueError(
            f"velocity must be finite and > 0, got {short(value)} (to stop a vehicle, halt() it)"
        )
    return v


def _check_step_size(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, Real):
        raise InvalidTypeError(f"step_size must be a number or None, got {value!r}")
    try:
        v = float(value)
    except OverflowError:
        v = math.inf
    if not (v > 0 and math.isfinite(v)):
        raise InvalidValueError(f"step_size must be finite and > 0, got {short(value)}")
    return v
