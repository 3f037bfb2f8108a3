"""Kit waits on trio (virtualtime/trio/_park.py): how sim.Timer and sim.Fleet sleep on a
VirtualClock -- parked on the clock, or no wait at all when nothing else can happen first.

Each behaviour is checked through the toolkit (a Timer, a Fleet) and, where it matters, on
both of its paths: the in-place jump (the waiting task alone) and the parked wait (other
tasks around).  The same scenarios on trio's MockClock take the old CancelScope path.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

import virtualtime
import virtualtime.trio
from virtualtime import sim
from virtualtime.trio import VirtualClock

Log = list[tuple[float, str]]


def _logger(log: Log, name: str) -> Callable[[sim.PeriodicAction, sim.Timer], None]:
    def action(event: sim.PeriodicAction, timer: sim.Timer) -> None:
        log.append((trio.current_time(), name))

    return action


def _run(main: Callable[[], Awaitable[Any]], clock: trio.abc.Clock | None = None) -> Any:
    if clock is None or isinstance(clock, VirtualClock):
        return virtualtime.trio.run(main, clock=clock)
    return trio.run(main, clock=clock)


# ----------------------------------------------------------- the in-place path


def test_a_lone_timer_jumps_in_place_and_still_lets_the_loop_turn() -> None:
    clock = VirtualClock()
    count = [0]

    def action(event: sim.PeriodicAction, timer: sim.Timer) -> None:
        count[0] += 1

    async def main() -> int:
        timer = sim.Timer(
            *(sim.PeriodicAction(action, start=1 + k / 10, period=1) for k in range(10))
        )
        rounds = clock._rounds
        await timer.run(1000)
        return clock._rounds - rounds

    rounds = _run(main, clock)
    assert count[0] == 1000 + 9 * 999  # event k runs at 1 + k/10, 2 + k/10, ... <= 1000
    assert clock.current_time() == 1000.0
    # ~10,000 waits: nearly all jump in place, one in 256 takes the loop round.
    assert 10_000 // 256 <= rounds < 10_000 // 100


def test_a_timer_beside_a_trio_sleeper_keeps_exact_interleaving() -> None:
    # The other task's deadlines fall between the timer's instants: no in-place jump may pass
    # them, and the log is the same on trio as it is in time order.
    log: Log = []

    async def sleeper() -> None:
        for _ in range(5):
            await trio.sleep(0.75)
            log.append((trio.current_time(), "sleep"))

    async def main() -> None:
        timer = sim.Timer(sim.PeriodicAction(_logger(log, "tick"), start=1, period=1))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sleeper)
            await timer.run(4)

    _run(main)
    assert log == sorted(log)
    assert [t for t, _ in log] == [0.75, 1.0, 1.5, 2.0, 2.25, 3.0, 3.0, 3.75, 4.0]
    assert log[5:7] == [(3.0, "sleep"), (3.0, "tick")]  # trio's deadline first at a tie


def test_a_timeout_around_a_timer_fires_at_its_instant() -> None:
    # The fail_after is entered in the same loop round as the first wait: the in-place jump
    # must still see it.
    log: Log = []

    async def main() -> float:
        timer = sim.Timer(sim.PeriodicAction(_logger(log, "tick"), start=1, period=1))
        await timer.run(2)  # in place: the loop round has not turned since
        with pytest.raises(trio.TooSlowError):
            with trio.fail_after(3.5):
                await timer.run(100)
        return trio.current_time()

    assert _run(main) == 5.5
    assert [t for t, _ in log] == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_cancelling_from_an_action_stops_the_timer_at_once() -> None:
    log: Log = []

    async def main() -> float:
        with trio.CancelScope() as scope:

            def stop(event: sim.PeriodicAction, timer: sim.Timer) -> None:
                log.append((trio.current_time(), "stop"))
                if trio.current_time() == 3:
                    scope.cancel()

            await sim.Timer(sim.PeriodicAction(stop, start=1, period=1)).run(100)
        assert scope.cancelled_caught
        return trio.current_time()

    assert _run(main) == 3.0
    assert [t for t, _ in log] == [1.0, 2.0, 3.0]


# ----------------------------------------------------------- the parked path


def test_a_parked_wait_is_cancelled_cleanly() -> None:
    clock = VirtualClock()
    log: Log = []

    async def main() -> float:
        timer = sim.Timer(sim.PeriodicAction(_logger(log, "tick"), start=10, period=10))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(timer.run, 100)
            await trio.sleep(25)  # the timer is parked (two tasks: no in-place jump)
            assert len(clock._kit) == 1
            nursery.cancel_scope.cancel()
        assert virtualtime.peek() == float("inf")  # the parked entry is gone
        return trio.current_time()

    assert _run(main, clock) == 25.0
    assert [t for t, _ in log] == [10.0, 20.0]
    assert not [entry for entry in clock._kit if entry[2].task is not None]


async def _three_timers(log: Log) -> None:
    timers = [
        sim.Timer(sim.PeriodicAction(_logger(log, name), start=1, period=1)) for name in "abc"
    ]
    async with trio.open_nursery() as nursery:
        for timer in timers:
            nursery.start_soon(timer.run, 5)
            await trio.testing.wait_all_tasks_blocked()  # parks in this order


def test_same_instant_kit_waits_wake_first_come_first_served() -> None:
    # Three timers in three tasks, all due at the same instants: trio would shuffle tasks
    # woken in one round; kit waits are woken one at a time, in the order they parked.
    for _ in range(20):
        log: Log = []
        _run(functools.partial(_three_timers, log))
        assert [name for _, name in log] == list("abc") * 5
        assert [t for t, _ in log] == [float(t) for t in range(1, 6) for _ in "abc"]


async def _tie(log: Log) -> None:
    async def sleeper() -> None:
        await trio.sleep(2)
        log.append((trio.current_time(), "sleep"))

    timer = sim.Timer(sim.PeriodicAction(_logger(log, "tick"), start=2, period=5))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(timer.run, 2)
        nursery.start_soon(sleeper)


def test_a_kit_wait_and_a_trio_sleep_at_one_instant_wake_trio_first() -> None:
    for _ in range(20):
        log: Log = []
        _run(functools.partial(_tie, log))
        assert log == [(2.0, "sleep"), (2.0, "tick")]


def test_a_deadlock_while_parked_names_the_task() -> None:
    async def main() -> None:
        timer = sim.Timer(sim.PeriodicAction(lambda e, t: None, start=5, period=5))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(timer.run, 50), name="the-timer")

    with pytest.raises(virtualtime.DeadlockError) as info:
        virtualtime.trio.run(main, autojump=False, deadlock_timeout=0)
    names = [name for name, _ in info.value.blocked]
    assert "the-timer" in names
    where = dict(info.value.blocked)["the-timer"]
    assert "Timer.run()" in where


def test_manual_time_wakes_parked_waits_it_passes() -> None:
    log: Log = []

    async def main() -> None:
        timer = sim.Timer(sim.PeriodicAction(_logger(log, "tick"), start=1, period=1))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(timer.run, 3)
            await trio.testing.wait_all_tasks_blocked()
            assert virtualtime.peek() == 1.0
            assert await virtualtime.step() == 1.0
            assert log == [(1.0, "tick")]
            await virtualtime.fast_forward(1.5)
            assert log == [(1.0, "tick"), (2.5, "tick")]  # due at 2, seen when time passed it
            await virtualtime.run_until(10)

    virtualtime.trio.run(main, autojump=False)
    assert [t for t, _ in log] == [1.0, 2.5, 3.0]


def test_outside_work_still_holds_a_parked_wait() -> None:
    # A thread job runs until the timer's action (at virtual 0.1) releases it: the wait must
    # fire after about 0.1 s of real time, neither at once nor never.
    release = threading.Event()

    def act(event: sim.PeriodicAction, timer: sim.Timer) -> bool:
        release.set()
        return False

    async def main() -> float:
        timer = sim.Timer(sim.PeriodicAction(act, start=0.1, period=1))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(trio.to_thread.run_sync, release.wait))
            await trio.testing.wait_all_tasks_blocked(0.001)
            await timer.run(10)
        return trio.current_time()

    t0 = time.perf_counter()
    assert virtualtime.trio.run(main) == 0.1
    assert 0.09 <= time.perf_counter() - t0 < 1.0  # real-time: the delay's own length


def _three_vans(
    fleet: sim.Fleet,
    step_size: float,
    ended: Callable[[sim.Vehicle[Any], sim.JourneyOutcome[Any]], None],
    *,
    first_only: bool = False,
) -> list[sim.Vehicle[Any]]:
    """Three vans at speed 1 on lanes y = 0, 1, 2, each calling ``ended`` when a journey ends
    (only the first, with ``first_only``)."""
    return [
        fleet.add(
            sim.Vehicle(
                sim.Euclidean(),
                position=(0.0, float(k)),
                velocity=1.0,
                step_size=step_size,
                on_journey_ended=ended if k == 0 or not first_only else None,
            )
        )
        for k in range(3)
    ]


def test_outside_work_still_holds_driving_vehicles() -> None:
    # The clock skips reading the await chain of a vehicle's own driver while it is parked;
    # a thread job in another task must still hold time: the vans' steps (every 0.02 virtual
    # s) then go at real-time pace until the arrival at 0.1 releases the job.
    release = threading.Event()

    def ended(van: sim.Vehicle[Any], outcome: sim.JourneyOutcome[Any]) -> None:
        release.set()

    async def main() -> float:
        fleet = sim.Fleet()
        vans = _three_vans(fleet, 0.02, ended, first_only=True)
        async with fleet, trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(trio.to_thread.run_sync, release.wait))
            await trio.testing.wait_all_tasks_blocked(0.001)
            for k, van in enumerate(vans):
                van.travel_to((0.1 * (k + 1), float(k)))
        return trio.current_time()

    t0 = time.perf_counter()
    assert virtualtime.trio.run(main) == pytest.approx(0.3)
    assert 0.09 <= time.perf_counter() - t0 < 1.0  # real-time: the first arrival's 0.1 s


# ----------------------------------------------------------- vehicles, and other clocks


async def _shuttle_log(log: Log) -> None:
    def ended(van: sim.Vehicle[Any], outcome: sim.JourneyOutcome[Any]) -> None:
        log.append((trio.current_time(), str(outcome.status.name)))

    fleet = sim.Fleet()
    vans = _three_vans(fleet, 2.0, ended)
    async with fleet:
        for k, van in enumerate(vans):
            van.travel_to((7.0, float(k)))
        await trio.sleep(3)
        vans[0].halt()


@pytest.mark.parametrize(
    "clock", ["virtual", "mock"], ids=["VirtualClock (kit waits)", "MockClock (cancel scopes)"]
)
def test_vehicles_on_both_trio_paths(clock: str) -> None:
    log: Log = []
    the_clock = (
        VirtualClock() if clock == "virtual" else trio.testing.MockClock(autojump_threshold=0)
    )
    _run(functools.partial(_shuttle_log, log), the_clock)
    assert sorted(log) == [(3.0, "HALTED"), (7.0, "ARRIVED"), (7.0, "ARRIVED")]


@pytest.mark.parametrize("clock", ["virtual", "mock"])
def test_timer_on_both_trio_paths(clock: str) -> None:
    log: Log = []

    async def main() -> None:
        timer = sim.Timer(
            sim.PeriodicAction(_logger(log, "a"), start=1, period=2),
            sim.PeriodicAction(_logger(log, "b"), start=2, period=3),
        )
        await timer.run(8)

    the_clock = (
        VirtualClock() if clock == "virtual" else trio.testing.MockClock(autojump_threshold=0)
    )
    _run(main, the_clock)
    assert log == [
        (1.0, "a"),
        (2.0, "b"),
        (3.0, "a"),
        (5.0, "b"),
        (5.0, "a"),
        (7.0, "a"),
        (8.0, "b"),
    ]


def test_same_instant_order_is_the_same_on_asyncio_and_trio() -> None:
    # Timers in several tasks and vehicles sharing instants: one (time, event) log on both.
    import anyio

    async def scenario() -> Log:
        log: Log = []

        def logger(name: str) -> Callable[[sim.PeriodicAction, sim.Timer], None]:
            def action(event: sim.PeriodicAction, timer: sim.Timer) -> None:
                log.append((anyio.current_time(), name))

            return action

        timers = [
            sim.Timer(
                sim.PeriodicAction(logger(f"{name}1"), start=1, period=1),
                sim.PeriodicAction(logger(f"{name}2"), start=1.5, period=0.5),
            )
            for name in "xyz"
        ]
        async with anyio.create_task_group() as group:
            for timer in timers:
                group.start_soon(timer.run, 4)
                await anyio.wait_all_tasks_blocked()
        return log

    on_asyncio = virtualtime.anyio_run(scenario, backend="asyncio")
    for _ in range(5):
        assert virtualtime.anyio_run(scenario, backend="trio") == on_asyncio
    assert len(on_asyncio) == 3 * (4 + 6)


async def _fleet_log() -> Log:
    import anyio

    log: Log = []

    def ended(van: sim.Vehicle[Any], outcome: sim.JourneyOutcome[Any]) -> None:
        log.append((anyio.current_time(), f"{van.name} {outcome.status.name}"))

    fleet = sim.Fleet()
    vans = [
        fleet.add(
            sim.Vehicle(
                sim.Euclidean(),
                position=(0.0, 0.0),
                velocity=1.0,
                step_size=1.0,
                on_journey_ended=ended,
                name=f"van{k}",
            )
        )
        for k in range(4)
    ]
    async with fleet:
        for round_ in range(3):  # every van arrives at the same instants, or is halted
            for k, van in enumerate(reversed(vans) if round_ % 2 else vans):
                van.travel_to((2.0 * (round_ + 1), 1.0) if k % 2 else (1.0 - round_, 0.0))
            await anyio.sleep(2.5)
            vans[round_].halt()
    return log


def test_a_fleet_logs_the_same_on_asyncio_and_trio() -> None:
    on_asyncio = virtualtime.anyio_run(_fleet_log, backend="asyncio")
    for _ in range(5):
        assert virtualtime.anyio_run(_fleet_log, backend="trio") == on_asyncio
    assert len(on_asyncio) == 10
    assert on_asyncio[4:6] == [(4.736067977, "van3 ARRIVED"), (4.736067977, "van1 ARRIVED")]


async def _gated_fleet_log(use_gate: bool) -> Log:
    # Steps whose end runs user code (a continuation gate, a velocity function) are woken
    # one at a time, so that code sees the same order on both backends.
    import anyio

    log: Log = []

    def gate(van: sim.Vehicle[Any]) -> bool:
        log.append((anyio.current_time(), f"gate {van.name} at {van.position}"))
        return True

    def speed() -> float:
        log.append((anyio.current_time(), "speed"))
        return 1.0

    vans = [
        sim.Vehicle(
            sim.Euclidean(),
            position=(0.0, float(k)),
            velocity=1.0 if use_gate else speed,
            step_size=1.0,
            continuation_gate=gate if use_gate else None,
            name=f"van{k}",
        )
        for k in range(3)
    ]
    async with sim.Fleet(*vans):
        for van in reversed(vans):
            van.travel_to((4.0, van.position[1]))
    return log


@pytest.mark.parametrize("use_gate", [True, False], ids=["gate", "velocity function"])
def test_steps_running_user_code_keep_their_order_on_trio(use_gate: bool) -> None:
    on_asyncio = virtualtime.anyio_run(_gated_fleet_log, use_gate, backend="asyncio")
    for _ in range(5):
        assert virtualtime.anyio_run(_gated_fleet_log, use_gate, backend="trio") == on_asyncio
    assert len(on_asyncio) >= 9


def test_quiet_steps_at_one_instant_share_a_loop_turn() -> None:
    clock = VirtualClock()

    async def main() -> tuple[int, list[float]]:
        vans = [
            sim.Vehicle(sim.Euclidean(), position=(0.0, float(k)), velocity=1.0, step_size=1.0)
            for k in range(20)
        ]
        rounds = clock._rounds
        async with sim.Fleet(*vans):
            journeys = [van.travel_to((50.0, van.position[1])) for van in vans]
        outcomes = [journey.outcome for journey in journeys]
        return clock._rounds - rounds, [o.ended if o is not None else -1.0 for o in outcomes]

    rounds, ended = virtualtime.trio.run(main, clock=clock)
    assert ended == [50.0] * 20
    # 20 vans x 50 steps: each instant's 49 quiet steps share one turn (the arrivals at 50
    # take a turn each) -- far fewer turns than the 1,000 steps.
    assert rounds < 200


@pytest.mark.parametrize("mode", ["threshold", "rate"])
def test_kit_waits_under_the_other_clock_modes(mode: str) -> None:
    # The parked path only (no in-place jump outside pure virtual time).  real-time: the
    # threshold run takes ~5 ms, the rate run 0.2 s (virtual 0.1 s at half speed).
    log: Log = []

    async def main() -> None:
        timer = sim.Timer(sim.PeriodicAction(_logger(log, "tick"), start=0.02, period=0.02))
        await timer.run(0.1)

    clock = VirtualClock(rate=0.5) if mode == "rate" else VirtualClock(autojump_threshold=0.001)
    virtualtime.trio.run(main, clock=clock)
    times = [t for t, _ in log]
    expected = [0.02, 0.04, 0.06, 0.08, 0.1]
    if mode == "rate":  # real time flows: each instant is reached, late by less than a period
        assert all(e <= t < e + 0.02 for t, e in zip(times, expected, strict=True))
    else:
        assert times == pytest.approx(expected, abs=1e-12)


def test_a_timer_changed_many_times_while_parked_keeps_the_heap_small() -> None:
    clock = VirtualClock()
    log: Log = []

    async def main() -> int:
        event = sim.PeriodicAction(_logger(log, "far"), start=1000, period=1000)
        timer = sim.Timer(event)
        nearer = sim.Timer(sim.PeriodicAction(_logger(log, "near"), start=500, period=1000))
        largest = 0
        async with trio.open_nursery() as nursery:
            nursery.start_soon(nearer.run, 500)  # its wait heads the heap all along
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(timer.run, 1000)
            for k in range(2000):
                await trio.testing.wait_all_tasks_blocked()  # the timer is parked again
                event.config(priority=k % 3)  # wakes it early; it parks anew
                largest = max(largest, len(clock._kit))
        return largest

    largest = virtualtime.trio.run(main, clock=clock)
    assert log == [(500.0, "near"), (1000.0, "far")]
    assert largest < 600  # not 2,000: the entries of the woken waits are pruned
