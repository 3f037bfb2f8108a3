"""Journeys: what a vehicle's command returns, and how each of its waiters learns the end.

A :class:`Journey` is what ``vehicle.travel_to(place)`` and ``vehicle.resume()`` return: a
handle any number of tasks may await for its :class:`JourneyOutcome` (a
:class:`JourneyStatus`, where and when it ended, the ground covered).  The vehicle
(:mod:`._movement`) drives it -- starts it, finishes it, wakes its waiters -- and while a trace
is being recorded each finished journey becomes a span on its vehicle's row, drawn by the
categories registered here.

How each waiter learns how a journey ended (where KSL strands them)
-------------------------------------------------------------------
Every :class:`Journey` ends exactly once, with a :class:`JourneyOutcome`:

* ``ARRIVED`` -- the vehicle is at the destination;
* ``HALTED`` -- ``halt()``, a continuation gate or the fleet closing stopped it short;
* ``REDIRECTED`` -- another ``travel_to`` replaced it.  The outcome is delivered when the
  redirect takes effect (the end of the step in flight), says where the vehicle was then, and
  carries the replacing journey in ``redirected_to``; ``await journey.follow()`` waits through
  any chain of redirects to the final outcome;
* ``RESET`` -- ``reset()`` forgot it.

``on_journey_ended(vehicle, outcome)`` is told of arrivals and halts (a redirected vehicle has not
stopped), *before* any waiter is woken.  ``vehicle.journeys`` keeps every ended journey
(arrived, halted, redirected) as a span -- start, end, origin, destination -- for traces.

Part of ``sim``: may import ``shared``, ``engine``, ``trace``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

import enum
from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio

from .._shared._time import check_bool, to_seconds
from ..trace import Category, record_span, recording, register_category
from ..trace._text import _short_repr

if TYPE_CHECKING:
    from ._movement import Vehicle

__all__ = ["Journey", "JourneyOutcome", "JourneyStatus"]


# How traces and timelines draw a journey, by its outcome (the span's category; see Journey).
for _category in (
    Category("arrived", "#59a14f", "journey: arrived"),
    Category("halted", "#e15759", "journey: halted", layer="front", edges=False,
             until_next=("stopped", "halted, standing"), carry=("position",)),
    Category("stopped", "#f4a6a7", "halted: standing until it moves again", layer="front",
             hatch="////"),
    Category("redirected", "#edc948", "journey: redirected"),
    Category("reset", "#9c9c9c", "journey: reset"),
):  # fmt: skip
    register_category(_category)

P = TypeVar("P")


class JourneyStatus(enum.Enum):
    """How a journey ended: the status every waiter of a :class:`Journey` receives."""

    ARRIVED = "arrived"
    """The vehicle reached the destination."""
    HALTED = "halted"
    """The vehicle was stopped short: ``halt()``, a continuation gate, or its fleet closing."""
    REDIRECTED = "redirected"
    """Another ``travel_to`` replaced this journey; see ``JourneyOutcome.redirected_to``."""
    RESET = "reset"
    """``reset()`` forgot the journey while it was under way."""


@dataclass(frozen=True, slots=True, eq=False)
class JourneyOutcome(Generic[P]):
    """How, where and when one journey ended, and what it covered.

    ``started`` is when the vehicle began working on the journey (for a journey that replaced
    another, when the redirect took effect), ``origin`` where it was then; ``position`` is where
    it was at ``ended``; ``distance`` the ground covered in between.  Times are virtual seconds.
    """

    status: JourneyStatus
    vehicle: Vehicle[P]
    origin: P
    destination: P
    position: P
    started: float
    ended: float
    distance: float
    redirected_to: Journey[P] | None = None

    @property
    def arrived(self) -> bool:
        """True when the vehicle reached the destination."""
        return self.status is JourneyStatus.ARRIVED

    @property
    def duration(self) -> float:
        """``ended - started``, in virtual seconds."""
        return self.ended - self.started

    def __repr__(self) -> str:
        return (
            f"JourneyOutcome({self.status.value}, {self.vehicle.name!r}, {self.origin!r} -> "
            f"{self.destination!r}, at {self.position!r}, t={self.started:g}..{self.ended:g}, "
            f"distance={self.distance:g})"
        )


class Journey(Generic[P]):
    """One commanded journey: await it for its :class:`JourneyOutcome`.

    Returned at once by :meth:`Vehicle.travel_to` and :meth:`Vehicle.resume`.  Any number of
    tasks may ``await journey`` (or ``await journey.wait()``); each gets the same outcome, and
    awaiting a finished journey returns it at once.  Cancelling a waiter never stops the
    vehicle -- use :meth:`Vehicle.halt` for that.  ``await journey.follow()`` is the waiter
    that does not care about redirects: it follows ``redirected_to`` to the journey that
    finally arrived or halted.
    """

    __slots__ = (
        "_commanded",
        "_continued",
        "_continued_as",
        "_destination",
        "_event",
        "_odometer_at_start",
        "_origin",
        "_outcome",
        "_redirected_to",
        "_started",
        "_vehicle",
    )

    def __init__(self, vehicle: Vehicle[P], destination: P, commanded: int) -> None:
        self._vehicle = vehicle
        self._destination = destination
        self._commanded = commanded
        self._started: int | None = None
        self._origin: P | None = None
        self._odometer_at_start = 0.0
        self._outcome: JourneyOutcome[P] | None = None
        self._event: anyio.Event | None = None
        self._redirected_to: Journey[P] | None = None
        # After a halt: the journey the vehicle took up next (resume, travel_to), once it has
        # (_continued set), or None if it never will (reset, out of service).
        self._continued_as: Journey[P] | None = None
        self._continued: anyio.Event | bool = False

    @property
    def vehicle(self) -> Vehicle[P]:
        """The vehicle making the journey."""
        return self._vehicle

    @property
    def destination(self) -> P:
        """Where the journey goes."""
        return self._destination

    @property
    def commanded_at(self) -> float:
        """Virtual time of the ``travel_to`` (or ``resume``) that created it."""
        return to_seconds(self._commanded)

    @property
    def redirected_to(self) -> Journey[P] | None:
        """The journey that replaced this one, as soon as the redirect is commanded."""
        return self._redirected_to

    @property
    def outcome(self) -> JourneyOutcome[P] | None:
        """The outcome once the journey has ended, else ``None``."""
        return self._outcome

    def done(self) -> bool:
        """True once the journey has ended (its outcome is known)."""
        return self._outcome is not None

    async def wait(self) -> JourneyOutcome[P]:
        """Wait until the journey ends and return its outcome (at once if it has ended)."""
        if self._outcome is None:
            if self._event is None:
                self._event = anyio.Event()
            await self._event.wait()
        assert self._outcome is not None
        return self._outcome

    def __await__(self) -> Generator[Any, None, JourneyOutcome[P]]:
        return self.wait().__await__()

    async def follow(self, *, through_halts: bool = False) -> JourneyOutcome[P]:
        """Wait through any redirects and return the outcome of the journey that stopped.

        With ``through_halts=True`` a halt does not end the wait either: after a ``HALTED``
        outcome it waits for whatever the vehicle is commanded next -- :meth:`Vehicle.resume`
        or a new ``travel_to`` -- and follows that journey, until one arrives (``ARRIVED``)
        or the vehicle can never go on: it is :meth:`~Vehicle.reset` (the ``HALTED`` outcome is
        returned) or leaves service with its fleet.  Use it for "tell me when the van is
        really there", whoever halts and resumes it meanwhile.
        """
        check_bool("through_halts", through_halts)
        journey: Journey[P] = self
        while True:
            outcome = await journey.wait()
            if outcome.redirected_to is not None:
                journey = outcome.redirected_to
                continue
            if through_halts and outcome.status is JourneyStatus.HALTED:
                following = await journey._next()
                if following is not None:
                    journey = following
                    continue
            return outcome

    async def _next(self) -> Journey[P] | None:
        """After a halt: the journey taken up next, once there is one (None: never)."""
        if self._continued is False:
            self._continued = anyio.Event()
        if isinstance(self._continued, anyio.Event):
            await self._continued.wait()
        return self._continued_as

    def _continue_as(self, journey: Journey[P] | None) -> None:
        """The vehicle, halted after this journey, took up ``journey`` (None: never will)."""
        self._continued_as = journey
        event, self._continued = self._continued, True
        if isinstance(event, anyio.Event):
            event.set()

    # -- driven by the vehicle

    def _start(self, now: int, origin: P, odometer: float) -> None:
        self._started = now
        self._origin = origin
        self._odometer_at_start = odometer

    def _finish(
        self, status: JourneyStatus, now: int, position: P, odometer: float
    ) -> JourneyOutcome[P]:
        if self._started is None:
            self._start(now, position, odometer)
        assert self._started is not None
        origin: P = self._origin  # type: ignore[assignment]
        self._outcome = JourneyOutcome(
            status=status,
            vehicle=self._vehicle,
            origin=origin,
            destination=self._destination,
            position=position,
            started=to_seconds(self._started),
            ended=to_seconds(now),
            distance=max(0.0, odometer - self._odometer_at_start),
            redirected_to=self._redirected_to if status is JourneyStatus.REDIRECTED else None,
        )
        if recording():  # `virtualtime run --trace`: journeys appear as spans on their row
            outcome = self._outcome
            record_span(
                f"vehicle {outcome.vehicle.name}",
                f"{_short_repr(outcome.origin)} -> {_short_repr(outcome.destination)}",
                outcome.started,
                outcome.ended,
                category=outcome.status.value,
                distance=outcome.distance,
                position=repr(outcome.position),
                origin=repr(outcome.origin),  # the exact places: the name is rounded
                destination=repr(outcome.destination),
            )
        return self._outcome

    def _wake(self) -> None:
        if self._event is not None:
            self._event.set()

    def __repr__(self) -> str:
        state = "under way" if self._outcome is None else self._outcome.status.value
        return f"<Journey {self._vehicle.name!r} -> {self._destination!r}: {state}>"
