"""Vehicles you can await: KSL's InterpolatedMovement (checklist D) on both anyio backends.

Every test that runs a loop takes the ``run`` fixture, which runs a coroutine function under
anyio on the virtual asyncio loop and on trio with the virtual trio clock.  Test names carry the
checklist item they prove (``test_D8_...``).  Times avoid coinciding with step ends wherever the
outcome would depend on the order of same-instant wake-ups, which trio randomises.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

import anyio
import pytest
import vehicle_conformance as vc
from conftest import Runner

import virtualtime
from virtualtime import VirtualTimeError
from virtualtime.sim._geometry import (
    Between,
    DistanceTable,
    Euclidean,
    Geometry,
    GuidePath,
    Point,
    Polyline,
)
from virtualtime.sim._journey import Journey, JourneyOutcome, JourneyStatus
from virtualtime.sim._movement import Fleet, Vehicle

T = TypeVar("T")

ARRIVED = JourneyStatus.ARRIVED
HALTED = JourneyStatus.HALTED
REDIRECTED = JourneyStatus.REDIRECTED
RESET = JourneyStatus.RESET


def approx(x: object) -> Any:
    return pytest.approx(x, abs=1e-9)


def flags(vehicle: Vehicle[Any]) -> tuple[bool, bool, bool]:
    """(is_travelling, is_moving, is_halted), read afresh (type checkers narrow properties)."""
    return vehicle.is_travelling, vehicle.is_moving, vehicle.is_halted


def straight(**options: Any) -> Vehicle[Point]:
    """A vehicle on a plane at (0, 0), 10 units/s, steps of 5: a step every 0.5 s."""
    settings: dict[str, Any] = {"position": (0, 0), "velocity": 10.0, "step_size": 5.0}
    settings.update(options)
    return Vehicle(Euclidean(), **settings)


def recorder() -> tuple[list[JourneyOutcome[Any]], Callable[[Vehicle[Any], Any], None]]:
    ended: list[JourneyOutcome[Any]] = []

    def on_journey_ended(vehicle: Vehicle[Any], outcome: JourneyOutcome[Any]) -> None:
        ended.append(outcome)

    return ended, on_journey_ended


class GateLog:
    """A continuation gate that records every decision point and says yes."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, Any]] = []

    def __call__(self, vehicle: Vehicle[Any]) -> bool:
        self.seen.append((anyio.current_time(), vehicle.position))
        return True


# =============================================================================== D1


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf])
def test_D1_step_size_must_be_positive_and_finite(bad: float) -> None:
    with pytest.raises(ValueError, match=r"step_size must be finite and > 0"):
        straight(step_size=bad)
    van = straight()
    with pytest.raises(ValueError, match="step_size"):
        van.step_size = bad
    assert van.step_size == 5.0


@pytest.mark.parametrize("bad", ["5", True, [5]])
def test_D1_step_size_must_be_a_number(bad: object) -> None:
    with pytest.raises(TypeError, match="step_size must be a number"):
        straight(step_size=bad)


def test_D1_geometry_must_implement_the_protocol() -> None:
    not_a_geometry: Any = object()
    with pytest.raises(TypeError, match="Geometry protocol"):
        Vehicle(not_a_geometry, position=(0, 0), velocity=1.0)
    geometries: list[object] = [
        Euclidean(),
        Polyline([(0, 0), (1, 0)]),
        GuidePath([("a", "b", 1.0)]),
        DistanceTable({("a", "b"): 1.0}),
    ]
    for geometry in geometries:
        assert isinstance(geometry, Geometry)


def test_D1_start_position_is_checked_by_the_geometry() -> None:
    with pytest.raises(ValueError, match="position must have 2 or 3 coordinates"):
        straight(position=(0, 0, 0, 0))
    with pytest.raises(TypeError, match="position must be a sequence"):
        straight(position="ab")
    with pytest.raises(ValueError, match=r"position\[1\] must be finite"):
        straight(position=(0, math.nan))
    with pytest.raises(ValueError, match="not a zone"):
        Vehicle(GuidePath([("a", "b", 1.0)]), position="c", velocity=1.0)


# =============================================================================== D2


def test_D2_travel_to_commands_and_returns_at_once(run: Runner) -> None:
    van = straight()

    async def main() -> None:
        async with van:
            journey = van.travel_to((100, 0))
            assert anyio.current_time() == 0.0
            assert not journey.done()
            assert journey.outcome is None
            assert van.is_moving
            assert van.is_travelling
            assert van.destination == (100.0, 0.0)
            assert van.journey is journey
            outcome = await journey
            assert anyio.current_time() == approx(10.0)
        assert outcome.status is ARRIVED
        assert outcome.position == (100.0, 0.0)
        assert journey.done()
        assert journey.outcome is outcome

    run(main)


def test_D2_unreachable_destination_raises_and_leaves_state(run: Runner) -> None:
    roads = GuidePath([("a", "b", 10.0), ("c", "d", 10.0)])
    van = Vehicle(roads, position="a", velocity=1.0)

    async def main() -> None:
        async with van:
            with pytest.raises(ValueError, match="'c' cannot be reached from 'a'"):
                van.travel_to("c")
            assert not van.is_travelling
            assert van.position == "a"
            journey = van.travel_to("b")
            await anyio.sleep(2.5)
            with pytest.raises(ValueError, match="cannot be reached"):
                van.travel_to("d")
            assert van.journey is journey
            assert van.destination == "b"
            outcome = await journey
        assert outcome.status is ARRIVED
        assert outcome.ended == approx(10.0)
        assert van.journeys == (outcome,)

    run(main)


def test_D2_going_nowhere_returns_a_completed_journey(run: Runner) -> None:
    ended, hook = recorder()
    van = straight(on_journey_ended=hook)

    async def main() -> None:
        # Not even in service: nothing needs to be scheduled, so nothing needs a task.
        journey = van.travel_to((0, 1e-10))
        assert journey.done()
        outcome = await journey
        assert anyio.current_time() == 0.0
        assert outcome.status is ARRIVED
        assert outcome.distance == 0.0
        assert outcome.started == outcome.ended == 0.0
        async with van:
            await anyio.sleep(1.25)
            again = van.travel_to((0, 0))
            assert again.done()
            assert (await again).status is ARRIVED
        assert anyio.current_time() == approx(1.25)

    run(main)
    assert not van.is_travelling
    assert van.journeys == ()
    assert ended == []


def test_D2_travel_to_clears_halted(run: Runner) -> None:
    van = straight()

    async def main() -> None:
        async with van:
            van.travel_to((100, 0))
            await anyio.sleep(0.25)
            van.halt()
            assert flags(van) == (True, False, True)
            journey = van.travel_to((0, 50))
            assert flags(van) == (True, True, False)
            assert (await journey).position == (0.0, 50.0)

    run(main)


# =============================================================================== D3


def test_D3_zero_length_leg_arrives_at_once(run: Runner) -> None:
    van = straight()

    async def main() -> None:
        async with van:
            first = van.travel_to((100, 0))
            await anyio.sleep(0.2)
            # The step in flight ends at (5, 0): the new leg from there has length 0.
            second = van.travel_to((5, 0))
            old, new = await first, await second
        assert old.status is REDIRECTED
        assert old.ended == approx(0.5)
        assert old.redirected_to is second
        assert new.status is ARRIVED
        assert new.started == new.ended == approx(0.5)
        assert new.distance == 0.0
        assert van.distance_travelled == 5.0

    run(main)


# =============================================================================== D4


def test_D4_step_is_min_of_step_size_and_remaining(run: Runner) -> None:
    gate = GateLog()
    van = straight(continuation_gate=gate)

    async def main() -> JourneyOutcome[Point]:
        async with van:
            return await van.travel_to((12, 0))

    outcome = run(main)
    assert gate.seen == [(approx(0.5), (5.0, 0.0)), (approx(1.0), (10.0, 0.0))]
    assert outcome.ended == approx(1.2)
    assert van.operating_time == approx(1.2)


def test_D4_geometry_that_cannot_interpolate_moves_the_leg_in_one_step(run: Runner) -> None:
    table = DistanceTable({("depot", "shop"): 30.0})
    gate = GateLog()
    van = Vehicle(table, position="depot", velocity=10.0, step_size=1.0, continuation_gate=gate)
    seen: list[Hashable] = []

    async def main() -> JourneyOutcome[Hashable]:
        async with van:
            journey = van.travel_to("shop")
            for _ in range(2):
                await anyio.sleep(1.4)
                seen.append(van.position)
            return await journey

    outcome = run(main)
    assert seen == ["depot", "depot"]  # the position stays at the origin until arrival
    assert gate.seen == []  # one step: no decision point on the way
    assert outcome.ended == approx(3.0)
    assert van.position == "shop"
    assert van.distance_travelled == 30.0


def test_D4_velocity_is_asked_once_per_step_when_the_step_is_planned(run: Runner) -> None:
    speeds = iter([10.0, 5.0, 20.0, 10.0])
    asked: list[float] = []

    def velocity() -> float:
        asked.append(anyio.current_time())
        return next(speeds)

    van = straight(velocity=velocity)

    async def main() -> JourneyOutcome[Point]:
        async with van:
            return await van.travel_to((20, 0))

    outcome = run(main)
    # Steps of 5 at 10, 5, 20, 10 units/s take 0.5, 1.0, 0.25 and 0.5 s.
    assert asked == [0.0, approx(0.5), approx(1.5), approx(1.75)]
    assert outcome.ended == approx(2.25)


def test_D4_guide_path_steps_zone_to_zone_ignoring_step_size(run: Runner) -> None:
    line = GuidePath([("A", "B", 30.0), ("B", "C", 50.0), ("C", "D", 20.0)])
    gate = GateLog()
    van = Vehicle(line, position="A", velocity=10.0, step_size=7.0, continuation_gate=gate)

    async def main() -> JourneyOutcome[Hashable]:
        async with van:
            return await van.travel_to("D")

    outcome = run(main)
    assert gate.seen == [(approx(3.0), "B"), (approx(8.0), "C")]
    assert outcome.ended == approx(10.0)
    assert outcome.position == "D"


# =============================================================================== D5


def test_D5_each_step_end_credits_odometer_operating_time_and_position(run: Runner) -> None:
    van = straight()
    samples: list[tuple[Point, float, float]] = []

    async def main() -> None:
        async with van:
            van.travel_to((100, 0))
            for _ in range(3):
                await anyio.sleep(0.5 if samples else 0.25)
                samples.append((van.position, van.distance_travelled, van.operating_time))
            van.halt()

    run(main)
    assert samples == [
        ((0.0, 0.0), 0.0, 0.0),
        ((5.0, 0.0), 5.0, approx(0.5)),
        ((10.0, 0.0), 10.0, approx(1.0)),
    ]


def test_D5_arrival_places_the_vehicle_exactly_at_the_target(run: Runner) -> None:
    dest = (10 / 3, 7 / 3, 1 / 7)
    van = Vehicle(Euclidean(3), position=(0.1, 0.2, 0.3), velocity=3.0, step_size=0.7)

    async def main() -> JourneyOutcome[Point]:
        async with van:
            return await van.travel_to(dest)

    outcome = run(main)
    assert van.position == dest  # exactly, not merely close
    assert outcome.position == dest
    assert van.distance_travelled == pytest.approx(math.dist((0.1, 0.2, 0.3), dest))


def test_D5_continuation_gate_can_halt_at_a_decision_point(run: Runner) -> None:
    ended, hook = recorder()
    asked: list[Point] = []

    def gate(vehicle: Vehicle[Point]) -> bool:
        asked.append(vehicle.position)
        return vehicle.position[0] < 15

    van = straight(continuation_gate=gate, on_journey_ended=hook)

    async def main() -> JourneyOutcome[Point]:
        async with van:
            return await van.travel_to((100, 0))

    outcome = run(main)
    assert asked == [(5.0, 0.0), (10.0, 0.0), (15.0, 0.0)]
    assert outcome.status is HALTED
    assert outcome.ended == approx(1.5)
    assert van.position == (15.0, 0.0)
    assert van.is_halted
    assert van.is_travelling
    assert van.distance_travelled == 15.0
    assert ended == [outcome]


def test_D5_continuation_gate_is_not_asked_on_arrival(run: Runner) -> None:
    gate = GateLog()
    van = straight(continuation_gate=gate)

    async def main() -> None:
        async with van:
            await van.travel_to((10, 0))

    run(main)
    assert [position for _, position in gate.seen] == [(5.0, 0.0)]


def test_D5_gate_may_not_command_its_own_vehicle(run: Runner) -> None:
    def gate(vehicle: Vehicle[Point]) -> bool:
        vehicle.travel_to((0, 0))
        return True

    van = straight(continuation_gate=gate)

    async def main() -> None:
        async with van:
            await van.travel_to((100, 0))

    with pytest.RaisesGroup(pytest.RaisesExc(RuntimeError, match="continuation gate")):
        run(main)
    assert van.is_halted  # stopped at the decision point, state consistent
    assert van.position == (5.0, 0.0)


# =============================================================================== D6


def test_D6_redirect_completes_the_step_in_flight_then_replans(run: Runner) -> None:
    van = straight()
    odometer: list[float] = []

    async def main() -> tuple[JourneyOutcome[Point], JourneyOutcome[Point]]:
        async with van:
            first = van.travel_to((100, 0))
            await anyio.sleep(0.7)  # in the step (5, 0) -> (10, 0), planned at 0.5
            second = van.travel_to((10, 50))
            odometer.append(van.distance_travelled)
            assert van.destination == (10.0, 50.0)
            assert van.position == (5.0, 0.0)  # nothing turned yet
            return await first, await second

    old, new = run(main)
    assert odometer == [5.0]
    assert old.status is REDIRECTED
    assert old.ended == approx(1.0)
    assert old.position == (10.0, 0.0)  # the step in flight was completed toward (100, 0)
    assert old.distance == 10.0
    assert new.status is ARRIVED
    assert new.origin == (10.0, 0.0)
    assert new.started == approx(1.0)
    assert new.ended == approx(6.0)
    assert new.distance == 50.0
    assert van.distance_travelled == 60.0  # continuous: 10 before the turn, 50 after


@pytest.mark.parametrize("when", [0.05, 0.3, 0.45, 0.55, 1.2, 2.49])
def test_D6_redirect_is_observed_within_step_size_over_velocity(run: Runner, when: float) -> None:
    van = straight()

    async def main() -> JourneyOutcome[Point]:
        async with van:
            first = van.travel_to((100, 0))
            await anyio.sleep(when)
            van.travel_to((0, 100))
            return await first

    outcome = run(main)
    latency = outcome.ended - when
    assert 0 < latency <= 5.0 / 10.0 + 1e-9
    assert outcome.position == (outcome.distance, 0.0)


# =============================================================================== D7


def test_D7_on_journey_ended_runs_before_any_waiter_wakes(run: Runner) -> None:
    events: list[str] = []

    def hook(vehicle: Vehicle[Point], outcome: JourneyOutcome[Point]) -> None:
        # The vehicle is already where the journey left it, and the journey is cleared.
        assert vehicle.position == outcome.position
        assert vehicle.journey is None
        assert vehicle.is_travelling is (outcome.status is HALTED)
        events.append(f"ended:{outcome.status.value}")

    van = straight(on_journey_ended=hook)

    async def waiter(journey: Journey[Point], label: str) -> None:
        await journey
        events.append(label)

    async def main() -> None:
        async with van, anyio.create_task_group() as group:
            journey = van.travel_to((20, 0))
            group.start_soon(waiter, journey, "waiter-1")
            group.start_soon(waiter, journey, "waiter-2")
            await waiter(journey, "waiter-3")
            halted = van.travel_to((40, 0))
            group.start_soon(waiter, halted, "waiter-4")
            await anyio.sleep(0.25)
            van.halt()
            events.append("halt returned")

    run(main)
    assert events[0] == "ended:arrived"
    assert sorted(events[1:4]) == ["waiter-1", "waiter-2", "waiter-3"]
    assert events[4:] == ["ended:halted", "halt returned", "waiter-4"]


# =============================================================================== D8


def test_D8_halt_credits_partial_step(run: Runner) -> None:
    ended, hook = recorder()
    van = straight(on_journey_ended=hook)

    async def main() -> tuple[JourneyOutcome[Point] | None, JourneyOutcome[Point]]:
        async with van:
            journey = van.travel_to((100, 0))
            await anyio.sleep(0.73)  # 0.23 s into the step planned at 0.5 from (5, 0)
            outcome = van.halt()
            await anyio.sleep(100)  # nothing is scheduled any more
            return outcome, await journey

    outcome, awaited = run(main)
    assert outcome is awaited
    assert outcome.status is HALTED
    assert outcome.ended == approx(0.73)
    assert van.position == approx((7.3, 0.0))
    assert outcome.position == van.position
    assert van.distance_travelled == approx(7.3)
    assert van.operating_time == approx(0.73)
    assert van.is_halted
    assert van.is_travelling  # the destination is kept
    assert not van.is_moving
    assert van.destination == (100.0, 0.0)
    assert ended == [outcome]


def test_D8_halt_credits_at_the_velocity_the_step_was_planned_with(run: Runner) -> None:
    van = straight()

    async def main() -> None:
        async with van:
            van.travel_to((100, 0))
            await anyio.sleep(0.25)
            van.velocity = 1000.0  # the step in flight keeps its planned 10 units/s
            van.halt()

    run(main)
    assert van.distance_travelled == approx(2.5)  # min(5, 0.25 * 10), not min(5, 250)
    assert van.position == approx((2.5, 0.0))


def test_D8_halt_at_a_step_end_credits_the_whole_step(run: Runner) -> None:
    van = straight()

    async def main() -> None:
        async with van:
            van.travel_to((100, 0))
            await anyio.sleep(0.5)  # same instant as the step end, in either order
            van.halt()

    run(main)
    assert van.position == (5.0, 0.0)
    assert van.distance_travelled == 5.0
    assert van.operating_time == approx(0.5)


def test_D8_halt_that_finds_the_vehicle_at_its_destination_is_an_arrival(run: Runner) -> None:
    van = straight()

    async def main() -> JourneyOutcome[Point]:
        async with van:
            journey = van.travel_to((5, 0))
            await anyio.sleep(0.5)
            van.halt()
            return await journey

    outcome = run(main)
    assert outcome.status is ARRIVED
    assert not van.is_halted
    assert not van.is_travelling


def test_D8_halt_is_a_noop_unless_moving(run: Runner) -> None:
    ended, hook = recorder()
    van = straight(on_journey_ended=hook)

    async def main() -> None:
        assert van.halt() is None  # idle
        async with van:
            van.travel_to((100, 0))
            await anyio.sleep(0.25)
            assert van.halt() is not None
            position = van.position
            await anyio.sleep(1)
            assert van.halt() is None  # already halted
            assert van.position == position

    run(main)
    assert len(ended) == 1


# =============================================================================== D9


def test_D9_resume_replans_from_where_the_halt_left_it(run: Runner) -> None:
    gate = GateLog()
    van = straight(continuation_gate=gate)

    async def main() -> tuple[JourneyOutcome[Point], JourneyOutcome[Point]]:
        async with van:
            first = van.travel_to((100, 0))
            await anyio.sleep(0.73)
            van.halt()
            await anyio.sleep(1.27)
            second = van.resume()
            assert second is not None
            assert second is not first
            assert not van.is_halted
            return await first, await second

    halted, arrived = run(main)
    assert halted.status is HALTED
    assert arrived.status is ARRIVED
    assert arrived.origin == approx((7.3, 0.0))
    assert arrived.started == approx(2.0)
    # 92.7 left: eighteen steps of 5 and one of 2.7, at 10 units/s.
    assert arrived.ended == approx(2.0 + 9.27)
    assert gate.seen[1] == (approx(2.5), approx((12.3, 0.0)))
    assert van.distance_travelled == approx(100.0)
    assert van.operating_time == approx(0.73 + 9.27)


def test_D9_resume_is_a_noop_unless_halted(run: Runner) -> None:
    van = straight()

    async def main() -> None:
        assert van.resume() is None  # idle
        async with van:
            journey = van.travel_to((10, 0))
            await anyio.sleep(0.25)
            assert van.resume() is None  # moving
            assert van.journey is journey
            assert (await journey).ended == approx(1.0)

    run(main)


def test_D9_a_bad_velocity_at_resume_leaves_the_vehicle_halted(run: Runner) -> None:
    van = straight()

    async def main() -> None:
        async with van:
            van.travel_to((100, 0))
            await anyio.sleep(0.25)
            van.halt()
            van.velocity = lambda: 0.0
            with pytest.raises(ValueError, match="must be finite and > 0 when a step is planned"):
                van.resume()
            assert van.is_halted
            assert van.journey is None
            van.velocity = 10.0
            resumed = van.resume()
            assert resumed is not None
            assert (await resumed).status is ARRIVED

    run(main)


# =============================================================================== D10


def test_D10_odometer_and_operating_time_never_decrease(run: Runner) -> None:
    van = straight()
    samples: list[tuple[float, float]] = []

    async def sampler() -> None:
        while True:
            samples.append((van.distance_travelled, van.operating_time))
            await anyio.sleep(0.13)

    async def main() -> None:
        async with anyio.create_task_group() as outer:
            outer.start_soon(sampler)
            async with van:
                van.travel_to((100, 0))
                await anyio.sleep(1.1)
                van.travel_to((0, 30))  # redirect
                await anyio.sleep(1.1)
                van.halt()
                await anyio.sleep(0.6)
                resumed = van.resume()
                assert resumed is not None
                await anyio.sleep(0.9)
                await van.travel_to((-20, -20)).follow()
            outer.cancel_scope.cancel()

    run(main)
    assert len(samples) > 20
    for (d0, t0), (d1, t1) in itertools.pairwise(samples):
        assert d1 >= d0
        assert t1 >= t0
    # Every span of the log is time spent moving; together they are the operating time.
    spans = van.journeys
    assert [o.status for o in spans] == [REDIRECTED, HALTED, REDIRECTED, ARRIVED]
    assert van.operating_time == approx(sum(o.duration for o in spans))
    assert van.distance_travelled == approx(sum(o.distance for o in spans))


def test_D10_record_external_move(run: Runner) -> None:
    van = straight()

    async def main() -> None:
        async with van:
            await van.travel_to((10, 0))
        van.record_external_move(250.0, 60.5)

    run(main)
    assert van.distance_travelled == 260.0
    assert van.operating_time == approx(61.5)
    assert van.position == (10.0, 0.0)
    for distance, duration, error in [
        (-1.0, 1.0, ValueError),
        (1.0, -1.0, ValueError),
        (math.nan, 1.0, ValueError),
        (1.0, math.inf, ValueError),
        ("1", 1.0, TypeError),
    ]:
        with pytest.raises(error, match=r"distance|duration"):
            van.record_external_move(distance, duration)  # type: ignore[arg-type]
    assert van.distance_travelled == 260.0
    assert van.operating_time == approx(61.5)


# =============================================================================== D11


def test_D11_reset_cancels_the_step_and_forgets_the_journey(run: Runner) -> None:
    ended, hook = recorder()
    van = straight(on_journey_ended=hook)

    async def main() -> tuple[JourneyOutcome[Point], float]:
        async with van:
            journey = van.travel_to((100, 0))
            await anyio.sleep(0.73)
            van.reset()
            outcome = await journey
        return outcome, anyio.current_time()

    outcome, closed_at = run(main)
    assert closed_at == approx(0.73)  # the cancelled step never fired: nothing to wait for
    assert outcome.status is RESET
    assert van.position == (0.0, 0.0)
    assert van.distance_travelled == 0.0
    assert van.operating_time == 0.0
    assert van.journeys == ()
    assert not van.is_travelling
    assert not van.is_halted
    assert ended == []  # a reset is not a journey ending


def test_D11_replications_after_reset_are_identical(run: Runner) -> None:
    gate = GateLog()
    van = straight(continuation_gate=gate)

    async def replication() -> list[tuple[JourneyStatus, float, float, float]]:
        start = anyio.current_time()
        async with van:
            van.travel_to((30, 40))
            await anyio.sleep(1.2)
            van.travel_to((-10, 0))
            await anyio.sleep(0.8)
            van.halt()
            resumed = van.resume()
            assert resumed is not None
            await resumed
        return [(o.status, o.started - start, o.ended - start, o.distance) for o in van.journeys]

    async def main() -> None:
        first = await replication()
        van.reset()
        second = await replication()
        assert second == [(s, approx(a), approx(b), approx(d)) for s, a, b, d in first]

    run(main)


def test_D11_reset_to_a_given_position_is_validated(run: Runner) -> None:
    van = straight()

    async def main() -> None:
        async with van:
            await van.travel_to((10, 0))
        with pytest.raises(ValueError, match="2 coordinates"):
            van.reset(position=(1, 2, 3))
        assert van.position == (10.0, 0.0)
        assert van.distance_travelled == 10.0
        van.reset(position=(3, 4))
        assert van.position == (3.0, 4.0)
        assert van.distance_travelled == 0.0

    run(main)


# =============================================================================== D12


def test_D12_a_controller_task_commands_and_another_task_awaits(run: Runner) -> None:
    van = straight()
    log: list[tuple[str, float]] = []

    async def controller() -> None:
        van.travel_to((100, 0))
        log.append(("commanded", anyio.current_time()))
        await anyio.sleep(2.2)
        van.travel_to((20, 20))  # redirect
        await anyio.sleep(1.1)
        van.halt()
        await anyio.sleep(5)
        van.resume()
        log.append(("controller done", anyio.current_time()))

    async def traveller() -> None:
        await anyio.sleep(0.1)
        journey = van.journey
        assert journey is not None
        while True:
            outcome = await journey.follow()
            log.append((outcome.status.value, anyio.current_time()))
            if outcome.arrived:
                return
            while van.journey is None:  # halted: wait for whoever repairs it
                await anyio.sleep(0.5)
            journey = van.journey

    async def main() -> None:
        async with Fleet(van), anyio.create_task_group() as group:
            group.start_soon(controller)
            group.start_soon(traveller)

    run(main)
    assert [event for event, _ in log] == ["commanded", "halted", "controller done", "arrived"]
    assert log[1][1] == approx(3.3)
    assert van.position == (20.0, 20.0)


def test_D12_cancelling_a_waiter_does_not_stop_the_vehicle(run: Runner) -> None:
    van = straight()

    async def main() -> float:
        async with van:
            journey = van.travel_to((100, 0))
            with anyio.move_on_after(1.0):
                await journey
            assert van.is_moving
            await journey
        return anyio.current_time()

    assert run(main) == approx(10.0)
    assert van.position == (100.0, 0.0)


def test_D12_commands_need_the_vehicle_in_service(run: Runner) -> None:
    van = straight()

    async def main() -> None:
        with pytest.raises(RuntimeError, match="not in service"):
            van.travel_to((10, 0))
        assert not van.is_travelling
        fleet = Fleet(van)
        async with fleet:
            assert van.fleet is fleet
            assert repr(fleet) == "<Fleet of 1 vehicles, open>"
            van.travel_to((10, 0))
        assert repr(fleet) == "<Fleet of 1 vehicles, closed>"
        assert fleet.vehicles[0].fleet is None
        with pytest.raises(RuntimeError, match="not in service"):
            van.travel_to((0, 0))
        assert van.position == (10.0, 0.0)

    run(main)


def test_D12_leaving_a_fleet_waits_for_journeys_in_progress(run: Runner) -> None:
    a, b = straight(name="a"), straight(name="b", velocity=5.0)

    async def main() -> float:
        fleet = Fleet(a)
        async with fleet:
            fleet.add(b)
            a.travel_to((10, 0))
            b.travel_to((10, 0))
        return anyio.current_time()

    assert run(main) == approx(2.0)
    assert a.position == b.position == (10.0, 0.0)


def test_D12_a_fleet_closed_by_cancellation_halts_its_vehicles(run: Runner) -> None:
    ended, hook = recorder()
    van = straight(on_journey_ended=hook)

    async def main() -> JourneyOutcome[Point]:
        journeys: list[Journey[Point]] = []
        with anyio.move_on_after(0.73):
            async with van:
                journeys.append(van.travel_to((100, 0)))
                await anyio.sleep_forever()
        outcome = await journeys[0]
        async with Fleet(van):  # it can serve again, and carry on
            resumed = van.resume()
            assert resumed is not None
            await resumed
        return outcome

    outcome = run(main)
    assert outcome.status is HALTED
    assert outcome.position == approx((7.3, 0.0))
    assert ended[0] is outcome
    assert van.position == (100.0, 0.0)


def test_D12_a_cancelled_fleet_does_not_loop_on_a_commanding_callback(run: Runner) -> None:
    calls: list[JourneyStatus] = []

    def shuttle(vehicle: Vehicle[Point], outcome: JourneyOutcome[Point]) -> None:
        calls.append(outcome.status)
        vehicle.travel_to((0, 100) if outcome.destination == (100.0, 0.0) else (100, 0))

    van = straight(on_journey_ended=shuttle)

    async def main() -> None:
        with anyio.move_on_after(10.73):
            async with van:
                van.travel_to((100, 0))
                await anyio.sleep_forever()
        assert anyio.current_time() == approx(10.73)

    run(main)
    # Arrived at 10 and was sent on; halted by the cancellation at 10.73 and sent on again
    # while its fleet was closing: that command leaves it halted, bound for the new place.
    assert calls == [ARRIVED, HALTED]
    assert van.is_halted
    assert van.destination == (100.0, 0.0)
    assert van.position == approx((100 - 7.3 / math.sqrt(2), 7.3 / math.sqrt(2)))


def test_D12_a_vehicle_serves_one_fleet_at_a_time(run: Runner) -> None:
    van = straight()

    async def main() -> None:
        other = Fleet(van)  # membership begins when a fleet opens, so this claims nothing
        async with Fleet(van):
            with pytest.raises(ValueError, match="one fleet at a time"):
                async with other:
                    pass
            with pytest.RaisesGroup(pytest.RaisesExc(ValueError, match="one fleet at a time")):
                async with Fleet() as third:  # a Fleet is a task group: errors come grouped
                    third.add(van)
            with pytest.raises(ValueError, match="one fleet at a time"):
                async with van:
                    pass
        async with other:
            assert van.fleet is other

    run(main)
    with pytest.raises(TypeError, match="must be a Vehicle"):
        Fleet().add("van")  # type: ignore[type-var]


def test_D12_an_error_in_on_journey_ended_reaches_the_fleet_after_waking_waiters(
    run: Runner,
) -> None:
    def hook(vehicle: Vehicle[Point], outcome: JourneyOutcome[Point]) -> None:
        raise LookupError("dispatcher bug")

    van = straight(on_journey_ended=hook)
    outcomes: list[JourneyOutcome[Point]] = []

    async def main() -> None:
        async def waiter(journey: Journey[Point]) -> None:
            outcomes.append(await journey)

        async with anyio.create_task_group() as outer:
            with pytest.RaisesGroup(pytest.RaisesExc(LookupError, match="dispatcher bug")):
                async with van:
                    outer.start_soon(waiter, van.travel_to((10, 0)))
                    await anyio.sleep_forever()

    run(main)
    assert [o.status for o in outcomes] == [ARRIVED]


# =============================================================================== D13


def _euclid_2d() -> vc.Scenario[Point]:
    return vc.Scenario(
        "euclidean-2d",
        lambda: Vehicle(Euclidean(), position=(0, 0), velocity=10.0, step_size=5.0),
        start=(0.0, 0.0),
        near=(30.0, 40.0),
        far=(-120.0, 0.0),
        sample_every=0.2,
        halt_after=3.33,
        redirect_after=2.1,
    )


def _euclid_3d() -> vc.Scenario[Point]:
    return vc.Scenario(
        "euclidean-3d",
        lambda: Vehicle(Euclidean(3), position=(0, 0, 0), velocity=4.0, step_size=2.0),
        start=(0.0, 0.0, 0.0),
        near=(10.0, 20.0, 20.0),
        far=(-40.0, -40.0, -70.0),
        sample_every=0.3,
        halt_after=5.1,
        redirect_after=3.1,
    )


def _polyline() -> vc.Scenario[Point]:
    track = Polyline([(0, 0), (100, 0), (100, 100), (0, 100)])
    return vc.Scenario(
        "polyline",
        lambda: Vehicle(track, position=(100, 0), velocity=10.0, step_size=7.0),
        start=(100.0, 0.0),
        near=(40.0, 0.0),
        far=(20.0, 100.0),
        sample_every=0.3,
        halt_after=6.1,
        redirect_after=2.2,
    )


def _guide_path() -> vc.Scenario[Hashable]:
    grid = GuidePath.grid(4, 4, spacing=100.0)
    return vc.Scenario(
        "guide-path",
        lambda: Vehicle(grid, position=(1, 1), velocity=10.0),
        start=(1, 1),
        near=(0, 1),
        far=(3, 3),
        sample_every=2.5,
        halt_after=15.0,
        redirect_after=5.0,
    )


def _one_way_loop() -> vc.Scenario[Hashable]:
    loop = GuidePath([(i, (i + 1) % 6, 10.0) for i in range(6)], two_way=False)
    return vc.Scenario(
        "one-way-loop",
        lambda: Vehicle(loop, position=2, velocity=2.0),
        start=2,
        near=3,  # near is on the way to far: on a one-way loop there is no other way
        far=1,
        sample_every=1.1,
        halt_after=12.5,
        redirect_after=1.5,
    )


def _distance_table() -> vc.Scenario[Hashable]:
    table = DistanceTable({("A", "B"): 50.0, ("A", "C"): 120.0, ("B", "C"): 80.0})
    return vc.Scenario(
        "distance-table",
        lambda: Vehicle(table, position="A", velocity=10.0, step_size=5.0),
        start="A",
        near="B",
        far="C",
        sample_every=0.7,
        halt_after=5.0,
        redirect_after=3.0,
    )


_SCENARIOS: list[vc.Scenario[Any]] = [
    _euclid_2d(),
    _euclid_3d(),
    _polyline(),
    _guide_path(),
    _one_way_loop(),
]
INTERPOLATING = {s.name: s for s in _SCENARIOS}
SINGLE_STEP = _distance_table()


@pytest.mark.parametrize("prop", list(vc.PROPERTIES))
@pytest.mark.parametrize("geometry", list(INTERPOLATING))
def test_D13_conformance(run: Runner, geometry: str, prop: str) -> None:
    scenario: vc.Scenario[Any] = INTERPOLATING[geometry]
    run(lambda: vc.PROPERTIES[prop](scenario))


@pytest.mark.parametrize("prop", [p for p in vc.PROPERTIES if p != "visible_mid_journey"])
def test_D13_conformance_single_step_geometry(run: Runner, prop: str) -> None:
    run(lambda: vc.PROPERTIES[prop](SINGLE_STEP))


# =============================================================================== D14


def test_D14_a_redirect_wakes_every_earlier_waiter(run: Runner) -> None:
    van = straight()
    got: dict[str, JourneyOutcome[Point]] = {}

    async def wait(label: str, awaitable: Awaitable[JourneyOutcome[Point]]) -> None:
        got[label] = await awaitable

    async def main() -> tuple[Journey[Point], Journey[Point], Journey[Point]]:
        async with van, anyio.create_task_group() as group:
            first = van.travel_to((100, 0))
            group.start_soon(wait, "one", first)
            group.start_soon(wait, "two", first.wait())
            group.start_soon(wait, "follower", first.follow())
            await anyio.sleep(0.6)
            second = van.travel_to((10, 10))
            await anyio.sleep(0.1)
            third = van.travel_to((20, 0))  # a second redirect within the same step
            assert first.redirected_to is second
            assert second.redirected_to is third
        return first, second, third

    first, second, third = run(main)
    assert got["one"] is got["two"] is first.outcome
    assert got["one"].status is REDIRECTED
    assert got["one"].redirected_to is second
    assert got["one"].ended == approx(1.0)
    assert got["one"].position == (10.0, 0.0)
    assert second.outcome is not None
    assert second.outcome.status is REDIRECTED
    assert second.outcome.redirected_to is third
    assert second.outcome.started == second.outcome.ended == approx(1.0)
    assert got["follower"] is third.outcome
    assert got["follower"].status is ARRIVED
    assert got["follower"].ended == approx(2.0)
    spans = [(o.status, o.started, o.ended) for o in van.journeys]
    assert spans == [
        (REDIRECTED, 0.0, approx(1.0)),
        (REDIRECTED, approx(1.0), approx(1.0)),
        (ARRIVED, approx(1.0), approx(2.0)),
    ]


def test_D14_operating_time_equals_elapsed_time_despite_speed_changes(run: Runner) -> None:
    speeds = [10.0, 2.5, 40.0, 3.0, 7.0]
    calls = [0]

    def velocity() -> float:
        calls[0] += 1
        return speeds[calls[0] % len(speeds)]

    van = straight(velocity=velocity, step_size=3.0)

    async def main() -> float:
        async with van:
            await van.travel_to((50, 20))
        return anyio.current_time()

    elapsed = run(main)
    assert van.operating_time == approx(elapsed)
    assert calls[0] == math.ceil(math.dist((0, 0), (50, 20)) / 3.0)


def test_D14_a_halted_vehicle_sent_where_it_stands_becomes_idle(run: Runner) -> None:
    ended, hook = recorder()
    van = straight(on_journey_ended=hook)

    async def main() -> None:
        async with van:
            van.travel_to((100, 0))
            await anyio.sleep(0.73)
            van.halt()
            journey = van.travel_to(van.position)
            assert journey.done()
            assert (await journey).status is ARRIVED

    run(main)
    assert not van.is_halted
    assert not van.is_travelling
    assert van.destination is None
    assert len(ended) == 1  # the halt; standing still is not another journey


def test_D14_a_single_step_geometry_fails_the_mid_journey_property(run: Runner) -> None:
    with pytest.raises(AssertionError, match="never observed part way"):
        run(lambda: vc.PROPERTIES["visible_mid_journey"](SINGLE_STEP))


def test_D14_the_same_destination_again_is_the_same_journey(run: Runner) -> None:
    van = straight()

    async def main() -> None:
        async with van:
            journey = van.travel_to((100, 0))
            await anyio.sleep(0.3)
            assert van.travel_to((100.0, 0.0)) is journey
            assert (await journey).status is ARRIVED
        assert [o.status for o in van.journeys] == [ARRIVED]

    run(main)


# =========================================================================== velocity


@pytest.mark.parametrize("bad", [0, 0.0, -1.0, math.nan, math.inf])
def test_velocity_setting_must_be_positive_and_finite(bad: float) -> None:
    with pytest.raises(ValueError, match="velocity must be finite and > 0"):
        straight(velocity=bad)
    van = straight()
    with pytest.raises(ValueError, match="velocity"):
        van.velocity = bad
    assert van.velocity == 10.0
    with pytest.raises(TypeError, match="velocity must be a number or a function"):
        straight(velocity="fast")


@pytest.mark.parametrize("value", [0.0, -3.0, math.nan, math.inf])
def test_velocity_zero_at_command_raises_and_leaves_state(run: Runner, value: float) -> None:
    van = straight(velocity=lambda: value)

    async def main() -> float:
        async with van:
            with pytest.raises(ValueError, match="must be finite and > 0 when a step is planned"):
                van.travel_to((10, 0))
            assert not van.is_travelling
            assert van.journey is None
        return anyio.current_time()

    assert run(main) == 0.0  # no task was left behind to wait for
    assert van.journeys == ()


def test_velocity_of_the_wrong_type_at_command_is_a_type_error(run: Runner) -> None:
    van = straight(velocity=lambda: "fast")

    async def main() -> None:
        async with van:
            with pytest.raises(TypeError, match=r"velocity of .* must be a real number"):
                van.travel_to((10, 0))

    run(main)
    assert not van.is_travelling


def test_velocity_zero_mid_journey_halts_then_raises(run: Runner) -> None:
    speeds = iter([10.0, 10.0, 0.0])
    ended, hook = recorder()
    van = straight(velocity=lambda: next(speeds), on_journey_ended=hook)
    outcomes: list[JourneyOutcome[Point]] = []

    async def main() -> None:
        async def waiter(journey: Journey[Point]) -> None:
            outcomes.append(await journey)

        async with anyio.create_task_group() as outer:
            with pytest.RaisesGroup(pytest.RaisesExc(ValueError, match="got 0.0")):
                async with van:
                    outer.start_soon(waiter, van.travel_to((100, 0)))
                    await anyio.sleep_forever()
            assert anyio.current_time() == approx(1.0)

    run(main)
    assert van.is_halted
    assert van.position == (10.0, 0.0)
    assert [o.status for o in outcomes] == [HALTED]
    assert ended == outcomes


# ========================================================================== bad input


def test_bad_destinations_raise_and_leave_state(run: Runner) -> None:
    van = straight()

    async def main() -> None:
        async with van:
            journey = van.travel_to((100, 0))
            await anyio.sleep(0.25)
            with pytest.raises(ValueError, match="destination must have 2 coordinates"):
                van.travel_to((1, 2, 3))
            with pytest.raises(TypeError, match="destination must be a sequence"):
                van.travel_to(5)  # type: ignore[arg-type]
            with pytest.raises(ValueError, match=r"destination\[0\] must be finite"):
                van.travel_to((math.inf, 0))
            assert van.journey is journey
            assert van.destination == (100.0, 0.0)
            van.halt()

    run(main)


def test_bad_constructor_arguments() -> None:
    with pytest.raises(TypeError, match="on_journey_ended must be callable"):
        straight(on_journey_ended=5)
    with pytest.raises(TypeError, match="continuation_gate must be callable"):
        straight(continuation_gate="yes")
    with pytest.raises(TypeError, match="name must be a str"):
        straight(name=3)
    with pytest.raises(ValueError, match="history must be >= 0"):
        straight(history=-1)
    with pytest.raises(TypeError, match="history must be an int"):
        straight(history=1.5)


def test_commands_outside_an_event_loop_say_so() -> None:
    van = straight()
    with pytest.raises(RuntimeError, match="running event loop"):
        van.travel_to((0, 0))
    assert not van.is_travelling


def test_vehicle_errors_are_virtualtime_errors_and_runtime_errors(run: Runner) -> None:
    van = straight()
    with pytest.raises(VirtualTimeError, match="running event loop") as outside:
        van.travel_to((0, 0))
    assert isinstance(outside.value, RuntimeError)

    async def main() -> None:
        with pytest.raises(VirtualTimeError, match="not in service"):
            van.travel_to((10, 0))
        fleet = Fleet(van)
        async with fleet:
            with pytest.raises(VirtualTimeError, match="already open"):
                await fleet.__aenter__()

    run(main)


def test_default_names_come_from_the_fleet_not_from_process_history(run: Runner) -> None:
    for _ in range(3):
        straight()  # vehicles made earlier in the process change nothing
    loose = straight()
    assert loose.name == "vehicle"
    a, b, named = straight(), straight(), straight(name="van")
    fleet = Fleet(a, named, b)
    assert [v.name for v in fleet.vehicles] == ["vehicle-1", "van", "vehicle-3"]
    Fleet(b)  # a second fleet does not rename it
    assert b.name == "vehicle-3"

    async def main() -> str:
        async with loose:
            journey = loose.travel_to((10, 0))
            return repr(await journey)

    assert "'vehicle-1'" in run(main)
    assert loose.name == "vehicle-1"


# =================================================================== journeys and logs


def test_awaiting_a_finished_journey_returns_at_once(run: Runner) -> None:
    van = straight(name="van")

    async def main() -> None:
        async with van:
            journey = van.travel_to((10, 0))
            assert repr(journey) == "<Journey 'van' -> (10.0, 0.0): under way>"
            first = await journey
        t = anyio.current_time()
        assert await journey is first
        assert await journey.follow() is first
        assert anyio.current_time() == t
        assert repr(journey) == "<Journey 'van' -> (10.0, 0.0): arrived>"
        assert "arrived" in repr(first)
        assert first.arrived
        assert first.duration == approx(1.0)

    run(main)
    assert repr(van) == "<Vehicle 'van' at (10.0, 0.0), idle>"


def test_journeys_log_is_a_trace_of_spans_and_can_be_bounded(run: Runner) -> None:
    full = straight(name="full")
    short = straight(name="short", history=2)

    async def main() -> None:
        async with Fleet(full, short):
            for van in (full, short):
                for x in (10, 20, 30):
                    await van.travel_to((x, 0))

    run(main)
    assert [(o.origin, o.destination) for o in full.journeys] == [
        ((0.0, 0.0), (10.0, 0.0)),
        ((10.0, 0.0), (20.0, 0.0)),
        ((20.0, 0.0), (30.0, 0.0)),
    ]
    assert [o.ended for o in full.journeys] == [approx(1.0), approx(2.0), approx(3.0)]
    assert [o.destination for o in short.journeys] == [(20.0, 0.0), (30.0, 0.0)]


def test_on_journey_ended_may_command_the_next_journey(run: Runner) -> None:
    stops = iter([(10, 10), (10, 0)])

    def next_stop(vehicle: Vehicle[Point], outcome: JourneyOutcome[Point]) -> None:
        stop = next(stops, None)
        if stop is not None:
            vehicle.travel_to(stop)

    van = straight(on_journey_ended=next_stop)

    async def main() -> float:
        async with van:
            van.travel_to((0, 10))
        return anyio.current_time()

    assert run(main) == approx(3.0)
    assert van.position == (10.0, 0.0)
    assert len(van.journeys) == 3


def test_polyline_journey_turns_the_corners(run: Runner) -> None:
    gate = GateLog()
    track = Polyline([(0, 0), (10, 0), (10, 10)])
    van = Vehicle(track, position=(0, 0), velocity=4.0, step_size=4.0, continuation_gate=gate)

    async def main() -> None:
        async with van:
            await van.travel_to((10, 10))
            await van.travel_to((6, 0))

    run(main)
    assert [p for _, p in gate.seen] == [
        (4.0, 0.0),
        (8.0, 0.0),
        approx((10.0, 2.0)),
        approx((10.0, 6.0)),
        approx((10.0, 6.0)),  # and back the way it came
        approx((10.0, 2.0)),
        (8.0, 0.0),
    ]
    assert van.distance_travelled == approx(34.0)


def test_guide_path_halt_between_zones_and_resume(run: Runner) -> None:
    grid = GuidePath.grid(1, 4, spacing=100.0)
    van = Vehicle(grid, position=(0, 0), velocity=10.0)

    async def main() -> None:
        async with van:
            van.travel_to((0, 3))
            await anyio.sleep(13.0)
            van.halt()
            assert van.position == Between((0, 1), (0, 2), 30.0)
            assert van.remaining_distance == approx(170.0)
            assert van.distance_to((0, 0)) == approx(130.0)
            van.travel_to((0, 0))  # from a halt: may turn round on the edge
            await anyio.sleep(3.5)  # 30 back to (0, 1) at 10 units/s
            position: Hashable = van.position
            assert position == (0, 1)

    run(main)
    assert van.position == (0, 0)
    assert van.distance_travelled == approx(130.0 + 130.0)


# =========================================================================== geometry


def test_euclidean_geometry() -> None:
    plane = Euclidean()
    protocol: Geometry[Point] = plane
    assert plane.check_position((3, 4)) == (3.0, 4.0)
    assert plane.distance((0, 0), (3, 4)) == 5.0
    assert plane.position_along((0, 0), (3, 4), 2.5) == (1.5, 2.0)
    assert plane.position_along((0, 0), (3, 4), 99) == (3, 4)
    assert protocol.boundaries((0, 0), (3, 4)) is None
    with pytest.raises(ValueError, match="2 coordinates like"):
        plane.check_position((1, 2, 3), name="destination", like=(0.0, 0.0))
    with pytest.raises(ValueError, match="must be 2, 3 or None"):
        Euclidean(4)
    with pytest.raises(TypeError, match="must be 2, 3 or None"):
        Euclidean(2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must have 3 coordinates"):
        Euclidean(3).check_position((1, 2))
    with pytest.raises(TypeError, match="real number"):
        plane.check_position((1, "2"))


def test_polyline_geometry() -> None:
    track = Polyline([(0, 0), (10, 0), (10, 10)])
    assert track.length == 20.0
    assert track.point_at(15) == (10.0, 5.0)
    assert track.point_at(10) == (10.0, 0.0)
    assert track.point_at(-1) == (0.0, 0.0)
    assert track.arc_position((10, 5)) == 15.0
    assert track.distance((2, 0), (10, 4)) == 12.0
    assert track.position_along((10, 4), (2, 0), 5) == (9.0, 0.0)
    assert track.waypoints == ((0.0, 0.0), (10.0, 0.0), (10.0, 10.0))
    with pytest.raises(ValueError, match="is not on the path"):
        track.check_position((5, 5))
    with pytest.raises(ValueError, match="at least 2 waypoints"):
        Polyline([(0, 0)])
    with pytest.raises(ValueError, match="repeats the waypoint"):
        Polyline([(0, 0), (0, 0), (1, 1)])
    with pytest.raises(ValueError, match="coordinates like"):
        Polyline([(0, 0), (1, 1, 1)])
    crossing = Polyline([(0, 0), (10, 0), (10, 10), (5, 10), (5, -5)])
    assert crossing.arc_position((5, 0)) == 5.0  # its first passage


def test_guide_path_geometry() -> None:
    roads = GuidePath(
        [("a", "b", 4.0), ("b", "c", 4.0), ("a", "d", 3.0), ("d", "c", 6.0), ("x", "y", 1.0)]
    )
    assert roads.route("a", "c") == ("a", "b", "c")
    assert roads.distance("a", "c") == 8.0
    assert roads.boundaries("a", "c") == (4.0, 8.0)
    assert roads.position_along("a", "c", 6.0) == Between("b", "c", 2.0)
    assert roads.position_along("a", "c", 4.0) == "b"
    assert roads.distance("a", "x") == math.inf
    assert not roads.is_reachable("a", "x")
    with pytest.raises(ValueError, match="cannot be reached"):
        roads.route("a", "y")
    halfway = Between("a", "b", 1.0)
    assert roads.distance(halfway, "c") == 7.0  # ahead through b
    assert roads.distance(halfway, "d") == 4.0  # back through a
    assert roads.boundaries(halfway, "d") == (1.0, 4.0)
    assert roads.position_along(halfway, "d", 0.5) == Between("a", "b", 0.5)
    assert set(roads.zones) == {"a", "b", "c", "d", "x", "y"}
    with pytest.raises(ValueError, match="only a halt"):
        roads.check_position(halfway)
    one_way = GuidePath([("a", "b", 1.0), ("b", "c", 1.0), ("c", "a", 1.0)], two_way=False)
    assert one_way.distance("b", "a") == 2.0
    assert one_way.distance(Between("a", "b", 0.5), "a") == 2.5  # cannot back up
    assert one_way.edge_length("b", "a") is None


@pytest.mark.parametrize(
    ("edges", "error", "match"),
    [
        ([("a", "a", 1.0)], ValueError, "to itself"),
        ([("a", "b", 0.0)], ValueError, "must be > 0"),
        ([("a", "b", math.nan)], ValueError, "must be finite"),
        ([("a", "b", 1.0), ("b", "a", 2.0)], ValueError, "repeats the edge"),
        ([("a", "b")], TypeError, "must be a tuple"),
        ([(["a"], "b", 1.0)], TypeError, "hashable"),
        ([(None, "b", 1.0)], TypeError, "other than None"),
        ([], ValueError, "at least one edge"),
    ],
)
def test_guide_path_rejects_bad_edges(edges: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        GuidePath(edges)


def test_guide_path_grid() -> None:
    grid = GuidePath.grid(3, 4, spacing=2.0)
    assert len(grid.zones) == 12
    assert grid.distance((0, 0), (2, 3)) == 10.0
    assert grid.route((0, 0), (0, 2)) == ((0, 0), (0, 1), (0, 2))
    with pytest.raises(ValueError, match="at least 2 junctions"):
        GuidePath.grid(1, 1)


def test_distance_table_geometry() -> None:
    table = DistanceTable({("a", "b"): 5.0, ("b", "c"): 2.0})
    protocol: Geometry[Hashable] = table
    assert table.distance("b", "a") == 5.0
    assert table.distance("a", "a") == 0.0
    assert table.distance("a", "c") == math.inf
    assert protocol.position_along("a", "b", 1.0) is None
    assert table.places == ("a", "b", "c")
    with pytest.raises(ValueError, match="not a place"):
        table.check_position("z")
    with pytest.raises(ValueError, match="symmetric=False"):
        DistanceTable({("a", "b"): 5.0, ("b", "a"): 4.0})
    one_way = DistanceTable({("a", "b"): 5.0, ("b", "a"): 4.0}, symmetric=False)
    assert one_way.distance("b", "a") == 4.0
    with pytest.raises(ValueError, match="must be > 0"):
        DistanceTable({("a", "b"): 0.0})


def test_a_traced_journey_is_named_with_rounded_places_and_keeps_the_exact_ones() -> None:
    # Was: the span's name was the full-precision repr of both places, too long to read on a
    # timeline.  The exact places are the span's arguments.
    from virtualtime.trace import TraceRecorder

    loop = virtualtime.new_event_loop(history=100)

    async def main() -> None:
        van = Vehicle(Euclidean(), position=(0, 0), velocity=lambda: 1.0, name="van")
        async with van:
            await van.travel_to((10 / 3, 7 / 3))

    try:
        with TraceRecorder() as recorder:
            loop.run_until_complete(main())
        recorder.add_run(loop, "run", loop.history)
        trace = recorder.trace()
    finally:
        loop.close()
    [span] = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "arrived"]
    assert span["name"] == "(0.0, 0.0) -> (3.333, 2.333)"
    assert span["args"]["destination"] == repr((10 / 3, 7 / 3))
    assert span["args"]["origin"] == "(0.0, 0.0)"
