"""The contract every vehicle geometry must keep (KSL's VehicleMovementConformance, D13).

A reusable helper, not a test module: give it a :class:`Scenario` -- a way to make a fresh
vehicle, where it starts, somewhere ``near`` and somewhere ``far`` (further, and not by way of
``near``) -- and each property in :data:`PROPERTIES` runs a journey through that geometry and
raises ``AssertionError`` with an explanation when the contract is broken.  The properties are
about the *shape* of a journey, never about a plane or a network, so a new geometry joins by
writing one :class:`Scenario`.

How a scenario is driven (inside a running anyio event loop, any backend):

* a traveller task commands ``travel_to(far)`` and awaits the journey;
* a sampler task reads position, distance still to go and odometer every ``sample_every``
  virtual seconds until the journey ends;
* for a halt, a controller task calls ``halt()`` ``halt_after`` seconds after departure; the
  traveller records where the vehicle stopped, then ``resume()``\\ s and awaits arrival;
* for a redirect, the controller calls ``travel_to(near)`` ``redirect_after`` seconds after
  departure, and the traveller follows the redirect to the end.

Sample times should not coincide with decision points (trio orders same-instant wake-ups at
random); the scenarios in the test suite use offsets that avoid them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import anyio

from virtualtime.sim._journey import JourneyStatus
from virtualtime.sim._movement import Vehicle

__all__ = ["PROPERTIES", "Scenario", "Trace", "run_scenario"]

P = TypeVar("P")


@dataclass(frozen=True)
class Scenario(Generic[P]):
    """One geometry under test: a vehicle factory and three places."""

    name: str
    make: Callable[[], Vehicle[P]]
    start: P
    near: P
    far: P
    sample_every: float
    halt_after: float
    redirect_after: float


@dataclass
class Trace(Generic[P]):
    """What happened, recorded so the assertions can be made after the run."""

    positions: list[P] = field(default_factory=list)
    remaining: list[float] = field(default_factory=list)
    odometer: list[float] = field(default_factory=list)
    arrived_at: P | None = None
    halted_at: P | None = None
    distance_at_halt: float = math.nan
    final_odometer: float = math.nan
    started_already_there: bool = False
    halted_flag_at_end: bool = True
    remaining_at_end: float = math.nan


def _same_place(vehicle: Vehicle[P], a: P | None, b: P) -> bool:
    """Same place by the geometry's own reckoning -- never by name or identity."""
    return a is not None and vehicle.geometry.distance(a, b) <= 1e-9


async def run_scenario(
    scenario: Scenario[P],
    *,
    halt: bool = False,
    redirect: bool = False,
    go_nowhere: bool = False,
) -> tuple[Vehicle[P], Trace[P]]:
    """Run one journey of ``scenario`` and return the vehicle and its :class:`Trace`."""
    vehicle = scenario.make()
    trace: Trace[P] = Trace()
    async with vehicle:
        if go_nowhere:
            journey = vehicle.travel_to(scenario.start)
            trace.started_already_there = journey.done() and not vehicle.is_travelling
            outcome = await journey
            trace.arrived_at = outcome.position
            trace.final_odometer = vehicle.distance_travelled
            return vehicle, trace

        target = scenario.near if redirect else scenario.far

        def sample() -> None:
            trace.positions.append(vehicle.position)
            trace.remaining.append(vehicle.distance_to(target))
            trace.odometer.append(vehicle.distance_travelled)

        finished = anyio.Event()

        async def sampler() -> None:
            while not finished.is_set():
                sample()
                await anyio.sleep(scenario.sample_every)
            sample()

        async def controller() -> None:
            await anyio.sleep(scenario.halt_after if halt else scenario.redirect_after)
            if halt:
                vehicle.halt()
            elif redirect:
                vehicle.travel_to(scenario.near)

        async def traveller() -> None:
            journey = vehicle.travel_to(scenario.far)
            outcome = await journey
            if outcome.status is JourneyStatus.HALTED:
                trace.halted_at = outcome.position
                trace.distance_at_halt = vehicle.distance_travelled
                resumed = vehicle.resume()
                assert resumed is not None, "a halted vehicle must be resumable"
                outcome = await resumed.follow()
            elif outcome.status is JourneyStatus.REDIRECTED:
                outcome = await journey.follow()
            if outcome.arrived:
                trace.arrived_at = outcome.position
            trace.final_odometer = vehicle.distance_travelled
            trace.halted_flag_at_end = vehicle.is_halted
            trace.remaining_at_end = vehicle.distance_to(outcome.destination)
            finished.set()

        async with anyio.create_task_group() as group:
            group.start_soon(sampler)
            group.start_soon(traveller)
            if halt or redirect:
                group.start_soon(controller)
    return vehicle, trace


# ------------------------------------------------------------------------------ properties


async def it_arrives(s: Scenario[Any]) -> None:
    """A vehicle sent somewhere gets there, is not halted, and has nothing left to go."""
    v, t = await run_scenario(s)
    assert _same_place(v, t.arrived_at, s.far), (
        f"the journey ended at {t.arrived_at!r} rather than where it was sent ({s.far!r})"
    )
    assert not t.halted_flag_at_end, "a vehicle that arrived is not halted"
    assert abs(t.remaining_at_end) <= 1e-9, (
        f"having arrived, the distance still to go must be 0, not {t.remaining_at_end}"
    )


async def going_nowhere_starts_nothing(s: Scenario[Any]) -> None:
    """Asked to go where it already is, a vehicle starts no journey and nothing hangs."""
    before = anyio.current_time()
    v, t = await run_scenario(s, go_nowhere=True)
    assert t.started_already_there, (
        "travel_to(where it is) must return a journey that has already ended, not one that "
        "something must still wake"
    )
    assert anyio.current_time() == before, "going nowhere must take no time"
    assert t.final_odometer == 0.0, "going nowhere must cover no distance"
    assert v.journeys == (), "going nowhere is not a journey to record"


async def remaining_never_increases(s: Scenario[Any]) -> None:
    """The distance still to go never grows while travelling toward the target."""
    _, t = await run_scenario(s)
    r = t.remaining
    assert len(r) >= 3, "the trace is too short to say anything"
    for before, after in itertools.pairwise(r):
        assert after <= before + 1e-9, (
            f"distance to the target grew from {before} to {after}: a vehicle travelling "
            "toward somewhere must not get further from it"
        )
    assert r[0] > r[-1], "nothing moved: the trace shows the same distance throughout"


async def visible_mid_journey(s: Scenario[Any]) -> None:
    """At least one sample shows the vehicle strictly part way (not stale until arrival)."""
    _, t = await run_scenario(s)
    first, last = t.remaining[0], t.remaining[-1]
    part_way = [r for r in t.remaining if last + 1e-9 < r < first - 1e-9]
    assert part_way, (
        f"the vehicle was never observed part way: {len(t.remaining)} samples showed only "
        f"{first} and {last}. A position reported only on arrival is monotone and still stale"
    )


async def odometer_monotone(s: Scenario[Any]) -> None:
    """The odometer never decreases and ends above zero."""
    _, t = await run_scenario(s)
    for before, after in itertools.pairwise(t.odometer):
        assert after >= before - 1e-9, f"distance travelled went backwards, {before} -> {after}"
    assert t.final_odometer > 0.0, "a vehicle that travelled recorded no distance"


async def halt_visible_and_located(s: Scenario[Any]) -> None:
    """A vehicle stopped part way says so, says where, and is short of its destination."""
    v, t = await run_scenario(s, halt=True)
    assert t.halted_at is not None, (
        "the wait ended without the vehicle reporting a halt; a caller cannot tell an arrival "
        "from a stop"
    )
    assert not _same_place(v, t.halted_at, s.far), (
        "a vehicle stopped short of its destination is not at its destination"
    )
    assert t.distance_at_halt > 0.0, "the vehicle stopped without having travelled"


async def resumes_from_halt(s: Scenario[Any]) -> None:
    """Resumed, a halted vehicle reaches its destination and its odometer grows."""
    v, t = await run_scenario(s, halt=True)
    assert _same_place(v, t.arrived_at, s.far), (
        f"released, the vehicle still did not reach {s.far!r}; it ended at {t.arrived_at!r}"
    )
    assert not t.halted_flag_at_end, "it arrived, so it is no longer halted"
    assert t.final_odometer > t.distance_at_halt, "the odometer did not grow after the halt"


async def redirect_keeps_odometer(s: Scenario[Any]) -> None:
    """A redirect ends at the new target and the odometer stays continuous."""
    v, t = await run_scenario(s, redirect=True)
    assert _same_place(v, t.arrived_at, s.near), (
        f"the vehicle did not end where it was redirected to ({s.near!r}): {t.arrived_at!r}"
    )
    for before, after in itertools.pairwise(t.odometer):
        assert after >= before - 1e-9, "the odometer went backwards across a redirect"
    assert t.final_odometer > 0.0, "the redirected journey recorded no distance"


PROPERTIES: dict[str, Callable[[Scenario[Any]], Awaitable[None]]] = {
    "arrives": it_arrives,
    "going_nowhere": going_nowhere_starts_nothing,
    "remaining_never_increases": remaining_never_increases,
    "visible_mid_journey": visible_mid_journey,
    "odometer_monotone": odometer_monotone,
    "halt_visible_and_located": halt_visible_and_located,
    "resumes_from_halt": resumes_from_halt,
    "redirect_keeps_odometer": redirect_keeps_odometer,
}
"""Every D13 property, by name: ``await PROPERTIES[name](scenario)``."""
