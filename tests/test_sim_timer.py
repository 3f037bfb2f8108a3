"""virtualtime.sim.Timer / PeriodicAction: TerraME's timer (checklist E).

Most E items are written once as an async *scenario* and run three ways: with no loop at all
(``run_sync``; the scenario coroutine completes without ever suspending), and with
``await timer.run`` on asyncio and on trio.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol, TypeVar

import anyio
import pytest
from conftest import Runner

from virtualtime import VirtualTimeError, anyio_run
from virtualtime.sim import PRIORITIES, PeriodicAction, Timer

T = TypeVar("T")

RunTimer = Callable[[Timer, float], Awaitable[None]]
Scenario = Callable[[RunTimer], Coroutine[Any, Any, T]]


class Simulate(Protocol):
    def __call__(self, scenario: Scenario[T]) -> T: ...


def _run_on(backend: str, main: Callable[[], Awaitable[T]]) -> T:
    return anyio_run(main, backend=backend)


@pytest.fixture(params=["sync", "asyncio", "trio"])
def simulate(request: pytest.FixtureRequest) -> Simulate:
    """Run a timer scenario with ``run_sync`` (no loop), or ``await run`` on a backend."""
    mode: str = request.param

    def simulate(scenario: Scenario[T]) -> T:
        if mode == "sync":

            async def run_sync(timer: Timer, until: float) -> None:
                timer.run_sync(until)

            coroutine = scenario(run_sync)
            try:
                coroutine.send(None)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            coroutine.close()
            raise AssertionError("a sync scenario suspended")

        async def run_async(timer: Timer, until: float) -> None:
            await timer.run(until)
            assert anyio.current_time() >= timer.time  # never ahead of the loop

        async def main() -> T:
            return await scenario(run_async)

        return _run_on(mode, main)

    return simulate


def counter() -> tuple[list[float], Callable[[PeriodicAction, Timer], None]]:
    """An action that records the timer's time at each run."""
    log: list[float] = []

    def action(event: PeriodicAction, timer: Timer) -> None:
        log.append(timer.time)

    return log, action


def nothing(event: PeriodicAction, timer: Timer) -> None:
    """An action that does nothing (and keeps its event going)."""


# ---------------------------------------------------------------------------- E1


def test_E1_event_defaults() -> None:
    event = PeriodicAction(nothing)
    assert (event.time, event.period, event.priority) == (1.0, 1.0, 0)
    assert event.action is nothing
    assert event.timer is None
    assert PeriodicAction(action=nothing).time == 1.0


def test_E1_named_priorities() -> None:
    assert dict(PRIORITIES) == {"verylow": 10, "low": 5, "medium": 0, "high": -5, "veryhigh": -10}
    for name, value in PRIORITIES.items():
        assert PeriodicAction(nothing, priority=name).priority == value
    assert PeriodicAction(nothing, priority=-3).priority == -3


@pytest.mark.parametrize("period", [0, -1, -0.5])
def test_E1_period_must_be_positive(period: float) -> None:
    with pytest.raises(ValueError, match=r"period must be > 0"):
        PeriodicAction(nothing, period=period)


@pytest.mark.parametrize("period", [math.nan, math.inf])
def test_E1_period_must_be_finite(period: float) -> None:
    with pytest.raises(ValueError, match="period"):
        PeriodicAction(nothing, period=period)


def test_E1_action_is_required_and_called_with_event_and_timer(simulate: Simulate) -> None:
    seen: list[tuple[PeriodicAction, Timer]] = []
    event = PeriodicAction(lambda e, t: seen.append((e, t)), start=2)
    timer = Timer(event)

    async def scenario(run: RunTimer) -> None:
        await run(timer, 2)

    simulate(scenario)
    assert seen == [(event, timer)]
    with pytest.raises(TypeError, match="action"):
        PeriodicAction()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="action must be callable"):
        PeriodicAction("print")  # type: ignore[arg-type]


def test_E1_unknown_argument_has_a_did_you_mean_hint() -> None:
    with pytest.raises(TypeError, match=r"argument 'perod'; did you mean 'period'\?"):
        PeriodicAction(nothing, perod=2)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"'colour'$"):
        PeriodicAction(nothing, colour="red")  # type: ignore[arg-type]


def test_E1_unknown_priority_name_has_a_did_you_mean_hint() -> None:
    with pytest.raises(ValueError, match=r"'hihg' is not a known name.*did you mean 'high'"):
        PeriodicAction(nothing, priority="hihg")
    with pytest.raises(ValueError, match=r"did you mean 'veryhigh'"):
        PeriodicAction(nothing, priority="VeryHigh")
    with pytest.raises(TypeError, match="priority must be an int"):
        PeriodicAction(nothing, priority=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="priority must be an int"):
        PeriodicAction(nothing, priority=True)


def test_E1_explicit_default_is_accepted_silently() -> None:
    """Deliberate deviation: TerraME warns about an explicit default; Python code spells
    defaults freely, and the project runs with warnings as errors, so no warning here."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        event = PeriodicAction(nothing, start=1, period=1, priority=0)
    assert (event.time, event.period, event.priority) == (1.0, 1.0, 0)


# ---------------------------------------------------------------------------- E2 - E4


def test_E2_new_timer_time_is_minus_inf() -> None:
    timer = Timer()
    assert timer.time == -math.inf
    assert len(timer) == 0
    assert timer.events == []


def test_E2_events_are_added_in_the_given_order() -> None:
    first, second, third = PeriodicAction(nothing), PeriodicAction(nothing), PeriodicAction(nothing)
    timer = Timer(first, second, third)
    assert timer.events == [first, second, third]
    assert all(event.timer is timer for event in (first, second, third))


def test_E2_non_event_entries_are_rejected_with_nothing_added() -> None:
    event = PeriodicAction(nothing)
    with pytest.raises(TypeError, match=r"events\[1\] must be a PeriodicAction"):
        Timer(event, nothing)  # type: ignore[arg-type]
    assert event.timer is None
    with pytest.raises(ValueError, match=r"events\[1\].*given twice"):
        Timer(event, event)
    assert event.timer is None


def test_E3_add_is_fifo_among_equal_time_and_priority() -> None:
    timer = Timer()
    late = timer.add(PeriodicAction(nothing, start=2))
    a = timer.add(PeriodicAction(nothing, start=1, priority=1))
    b = timer.add(PeriodicAction(nothing, start=1))
    c = timer.add(PeriodicAction(nothing, start=1, priority=1))
    d = timer.add(PeriodicAction(nothing, start=1))
    assert timer.events == [b, d, a, c, late]
    assert all(event.timer is timer for event in timer.events)
    assert len(timer) == 5


def test_E3_an_event_belongs_to_one_timer() -> None:
    event = PeriodicAction(nothing)
    first, second = Timer(event), Timer()
    with pytest.raises(ValueError, match="already in this timer"):
        first.add(event)
    with pytest.raises(ValueError, match="another Timer"):
        second.add(event)
    with pytest.raises(TypeError, match="must be a PeriodicAction"):
        second.add(nothing)  # type: ignore[arg-type]
    assert (len(first), len(second), event.timer) == (1, 0, first)


def test_E4_run_loop(simulate: Simulate) -> None:
    ran: list[tuple[str, float]] = []

    def once(event: PeriodicAction, timer: Timer) -> bool:
        ran.append(("once", timer.time))
        return False

    def keep(event: PeriodicAction, timer: Timer) -> None:
        ran.append(("keep", timer.time))

    empty = Timer()
    stop = PeriodicAction(once, start=2)
    go = PeriodicAction(keep, start=2, period=3)
    timer = Timer(stop, go)

    async def scenario(run: RunTimer) -> list[float]:
        await run(empty, 5)  # no events: return with time unchanged
        times = [empty.time]
        await run(timer, 1)  # first event after T: time = T
        times.append(timer.time)
        await run(timer, 6)
        times.append(timer.time)
        return times

    assert simulate(scenario) == [-math.inf, 1.0, 6.0]
    assert ran == [("once", 2.0), ("keep", 2.0), ("keep", 5.0)]
    assert stop.timer is None  # returned exactly False: dropped
    assert go.timer is timer
    assert go.time == 8.0
    assert timer.events == [go]


def test_E4_only_exactly_false_ends_an_event(simulate: Simulate) -> None:
    results: list[object] = [None, 0, "", [], False, "never reached"]
    calls: list[object] = []

    def action(event: PeriodicAction, timer: Timer) -> object:
        result = results[len(calls)]
        calls.append(result)
        return result

    timer = Timer(PeriodicAction(action, start=0))

    async def scenario(run: RunTimer) -> int:
        await run(timer, 100)
        return len(timer)

    assert simulate(scenario) == 0
    assert calls == [None, 0, "", [], False]


def test_E4_periods_accumulate_exactly_without_snapping(simulate: Simulate) -> None:
    tenth_log, tenth = counter()
    micro_log, micro = counter()
    timer = Timer(PeriodicAction(tenth, start=1, period=0.1))
    micro_timer = Timer(PeriodicAction(micro, start=0.99999, period=1e-6))

    async def scenario(run: RunTimer) -> None:
        await run(timer, 2)
        await run(micro_timer, 1.00001)

    simulate(scenario)
    assert tenth_log == [1 + k / 10 for k in range(11)]  # 1.0, 1.1, ... 2.0 exactly
    # TerraME's default snapping (round=1e-5) would pull 0.999991 onto 1.0 and lose periods.
    assert micro_log == [round(0.99999 + k * 1e-6, 9) for k in range(21)]
    assert micro_log[10] == 1.0


def test_E4_snap_option_rounds_near_integers(simulate: Simulate) -> None:
    third_log, third = counter()
    whole_log, whole = counter()
    timer = Timer(
        PeriodicAction(third, start=0, period=1 / 3), PeriodicAction(whole, start=1), snap=1e-5
    )

    async def scenario(run: RunTimer) -> None:
        await run(timer, 1)

    simulate(scenario)
    assert third_log == [0.0, 0.333333333, 0.666666666, 1.0]  # 0.999999999 snapped to 1.0
    assert whole_log == [1.0]
    with pytest.raises(ValueError, match="snap"):
        Timer(snap=-1)


# ---------------------------------------------------------------------------- E5 - E10


def test_E5_the_boundary_is_inclusive(simulate: Simulate) -> None:
    every_log, every = counter()
    fifth_log, fifth = counter()
    every_event = PeriodicAction(every, start=0)
    timer = Timer(every_event, PeriodicAction(fifth, start=0, period=5))

    async def scenario(run: RunTimer) -> None:
        await run(timer, 10)
        timer.remove(every_event)
        await run(timer, 100)

    simulate(scenario)
    assert every_log == [float(t) for t in range(11)]
    assert fifth_log == [float(t) for t in range(0, 101, 5)]
    assert len(fifth_log) == 21


def test_E6_two_defaults_one_returns_false(simulate: Simulate) -> None:
    count = [0]

    def once(event: PeriodicAction, timer: Timer) -> bool:
        count[0] += 1
        return False

    def always(event: PeriodicAction, timer: Timer) -> None:
        count[0] += 1

    timer = Timer(PeriodicAction(once), PeriodicAction(always))

    async def scenario(run: RunTimer) -> float:
        await run(timer, 6)
        return timer.time

    assert simulate(scenario) == 6.0
    assert count == [7]


def test_E7_default_start_is_one(simulate: Simulate) -> None:
    logs = [counter() for _ in range(3)]
    timer = Timer(
        *(
            PeriodicAction(action, start=start)
            for start, (_, action) in zip((1, 2, 3), logs, strict=True)
        )
    )

    async def scenario(run: RunTimer) -> None:
        await run(timer, 4)

    simulate(scenario)
    assert [len(log) for log, _ in logs] == [4, 3, 2]


def test_E8_priority_zero_runs_before_priority_one(simulate: Simulate) -> None:
    order: list[str] = []
    timer = Timer(
        PeriodicAction(lambda e, t: order.append("one"), priority=1),
        PeriodicAction(lambda e, t: order.append("zero"), priority=0),
        PeriodicAction(lambda e, t: order.append("high"), priority="high"),
    )

    async def scenario(run: RunTimer) -> None:
        await run(timer, 2)

    simulate(scenario)
    assert order == ["high", "zero", "one"] * 2


def test_E9_reset_keeps_the_queue(simulate: Simulate) -> None:
    old_log, old = counter()
    new_log, new = counter()
    old_event = PeriodicAction(old)
    timer = Timer(old_event)

    async def scenario(run: RunTimer) -> list[float]:
        await run(timer, 6)
        timer.reset()
        times = [timer.time]
        await run(timer, 4)  # the old event is at 7: nothing runs
        times.append(timer.time)
        timer.reset()
        timer.add(PeriodicAction(new))  # start 1: fine after a reset
        await run(timer, 12)
        times.append(timer.time)
        return times

    assert simulate(scenario) == [-math.inf, 4.0, 12.0]
    assert old_log == [float(t) for t in range(1, 13)]
    assert new_log == [float(t) for t in range(1, 13)]
    assert old_event.time == 13.0


def test_E10_negative_time(simulate: Simulate) -> None:
    log, action = counter()
    timer = Timer(PeriodicAction(action, start=-10))

    async def scenario(run: RunTimer) -> None:
        await run(timer, -5)

    simulate(scenario)
    assert log == [-10.0, -9.0, -8.0, -7.0, -6.0, -5.0]
    assert timer.time == -5.0


def test_E10_fractional_periods_are_exact(simulate: Simulate) -> None:
    log, action = counter()
    timer = Timer(PeriodicAction(action, start=0.1, period=0.1))

    async def scenario(run: RunTimer) -> None:
        await run(timer, 10)
        assert timer.time == 10.0
        await run(timer, 1000)

    simulate(scenario)
    assert len(log) == 10_000
    assert log[99] == 10.0
    assert log[-1] == 1000.0  # exactly, not within 1e-10
    assert timer.events[0].time == 1000.1


# ---------------------------------------------------------------------------- E11 - E13


def test_E11_config_inside_the_action_applies_at_rescheduling(simulate: Simulate) -> None:
    runs: list[float] = []

    def grow(event: PeriodicAction, timer: Timer) -> None:
        runs.append(timer.time)
        event.config(time=event.time + 1, period=event.period + 1, priority=event.priority + 1)

    event = PeriodicAction(grow)
    timer = Timer(event)

    async def scenario(run: RunTimer) -> None:
        await run(timer, 15)

    simulate(scenario)
    assert runs == [1.0, 4.0, 8.0, 13.0]
    assert (event.time, event.period, event.priority) == (19.0, 5.0, 4)


def test_E11_config_outside_an_action_requeues(simulate: Simulate) -> None:
    """Improvement on TerraME, whose queue stays unsorted after such a config."""
    order: list[tuple[str, float]] = []
    a = PeriodicAction(lambda e, t: order.append(("a", t.time)), start=1)
    b = PeriodicAction(lambda e, t: order.append(("b", t.time)), start=2)
    timer = Timer(a, b)
    a.config(time=3)
    b.config(priority="low")
    assert timer.events == [b, a]

    async def scenario(run: RunTimer) -> None:
        await run(timer, 3)

    simulate(scenario)
    assert order == [("b", 2.0), ("a", 3.0), ("b", 3.0)]


def test_E11_config_validates_everything_first() -> None:
    event = PeriodicAction(nothing, start=5, period=2, priority=1)
    with pytest.raises(ValueError, match="period"):
        event.config(time=7, period=0)
    with pytest.raises(ValueError, match="did you mean 'low'"):
        event.config(time=7, priority="lo")
    with pytest.raises(ValueError, match="time"):
        event.config(time=math.nan)
    assert (event.time, event.period, event.priority) == (5.0, 2.0, 1)


def test_E12_clear_events_len_and_notify(simulate: Simulate) -> None:
    a, b = PeriodicAction(nothing, start=2), PeriodicAction(nothing, start=1)
    timer = Timer(a, b)
    assert timer.events == [b, a]
    assert len(timer) == 2
    seen: list[float] = []
    timer.observe(seen.append)
    timer.notify()
    timer.add(PeriodicAction(lambda e, t: t.notify(), start=3, period=2))

    async def scenario(run: RunTimer) -> None:
        await run(timer, 5)

    simulate(scenario)
    assert seen == [-math.inf, 3.0, 5.0]
    timer.clear()
    assert (len(timer), timer.events, a.timer, b.timer) == (0, [], None, None)
    timer.unobserve(seen.append)
    timer.notify()
    assert seen == [-math.inf, 3.0, 5.0]
    with pytest.raises(ValueError, match="not observing"):
        timer.unobserve(seen.append)
    with pytest.raises(TypeError, match="callback must be callable"):
        timer.observe(42)  # type: ignore[arg-type]


def test_E12_clear_inside_an_action_keeps_the_running_event(simulate: Simulate) -> None:
    ran: list[str] = []

    def clearing(event: PeriodicAction, timer: Timer) -> None:
        ran.append("clearing")
        timer.clear()

    other = PeriodicAction(lambda e, t: ran.append("other"), start=1, priority=1)
    timer = Timer(PeriodicAction(clearing), other)

    async def scenario(run: RunTimer) -> None:
        await run(timer, 3)

    simulate(scenario)
    assert ran == ["clearing"] * 3  # `other` was cleared before it ever ran
    assert other.timer is None
    assert len(timer) == 1


class Boom(Exception):
    pass


def test_E12_an_action_error_propagates_and_leaves_the_timer_intact(simulate: Simulate) -> None:
    fail = [True]
    ran: list[float] = []

    def flaky(event: PeriodicAction, timer: Timer) -> None:
        event.config(period=10, priority=7)
        if fail[0] and timer.time == 3:
            raise Boom("at 3")
        ran.append(timer.time)

    flaky_event = PeriodicAction(flaky, start=3, period=1)
    steady_log, steady = counter()
    steady_event = PeriodicAction(steady, start=3, priority=1)
    timer = Timer(flaky_event, steady_event)

    async def scenario(run: RunTimer) -> list[Any]:
        with pytest.raises(Boom):
            await run(timer, 5)
        state = [timer.time, len(timer), timer.events, flaky_event.time]
        state.append((flaky_event.period, flaky_event.priority))
        fail[0] = False
        await run(timer, 5)
        return state

    state = simulate(scenario)
    assert state == [3.0, 2, [flaky_event, steady_event], 3.0, (1.0, 0)]
    assert ran == [3.0]  # retried at 3 once fixed, then rescheduled with the new period
    assert steady_log == [3.0, 4.0, 5.0]
    assert flaky_event.time == 13.0


def test_E13_run_into_the_past_raises(simulate: Simulate) -> None:
    log, action = counter()
    timer = Timer(PeriodicAction(action))

    async def scenario(run: RunTimer) -> None:
        await run(timer, 5)
        with pytest.raises(ValueError, match=r"until=4 is before the timer's current time 5\.0"):
            await run(timer, 4)

    simulate(scenario)
    assert timer.time == 5.0
    assert log == [1.0, 2.0, 3.0, 4.0, 5.0]
    with pytest.raises(ValueError, match="until"):
        timer.run_sync(math.nan)
    with pytest.raises(TypeError, match="until"):
        timer.run_sync("6")  # type: ignore[arg-type]
    assert timer.time == 5.0


def test_E13_adding_an_event_in_the_past_raises(simulate: Simulate) -> None:
    timer = Timer(PeriodicAction(nothing))

    async def scenario(run: RunTimer) -> None:
        await run(timer, 5)

    simulate(scenario)
    late = PeriodicAction(nothing, start=4)
    with pytest.raises(ValueError, match="before the timer's current time"):
        timer.add(late)
    assert late.timer is None
    assert len(timer) == 1
    queued = timer.events[0]
    with pytest.raises(ValueError, match="time never goes backwards"):
        queued.config(time=4.5)
    assert queued.time == 6.0
    timer.add(PeriodicAction(nothing, start=5))  # the current instant itself is fine
    assert len(timer) == 2


# ---------------------------------------------------------------------------- on a loop


def test_events_run_at_their_loop_instants(run: Runner) -> None:
    async def main() -> tuple[list[tuple[str, float, float]], float]:
        seen: list[tuple[str, float, float]] = []

        def record(name: str) -> Callable[[PeriodicAction, Timer], None]:
            return lambda e, t: seen.append((name, t.time, anyio.current_time()))

        timer = Timer(
            PeriodicAction(record("sense"), period=2),
            PeriodicAction(record("report"), start=0, period=5, priority="high"),
        )
        await timer.run(10)
        return seen, anyio.current_time()

    seen, end = run(main)
    assert end == 10.0
    assert all(timer_time == loop_time for _, timer_time, loop_time in seen)
    assert [(name, t) for name, t, _ in seen] == [
        ("report", 0.0), ("sense", 1.0), ("sense", 3.0), ("report", 5.0), ("sense", 5.0),
        ("sense", 7.0), ("sense", 9.0), ("report", 10.0),
    ]  # fmt: skip


def test_a_timer_behind_the_loop_catches_up_at_once(run: Runner) -> None:
    async def main() -> list[tuple[float, float]]:
        seen: list[tuple[float, float]] = []
        await anyio.sleep(50)
        timer = Timer(
            PeriodicAction(lambda e, t: seen.append((t.time, anyio.current_time())), start=48)
        )
        await timer.run(52)
        return seen

    assert run(main) == [(48.0, 50.0), (49.0, 50.0), (50.0, 50.0), (51.0, 51.0), (52.0, 52.0)]


def test_async_actions_are_awaited(run: Runner) -> None:
    async def main() -> tuple[list[float], float]:
        seen: list[float] = []

        async def slow(event: PeriodicAction, timer: Timer) -> bool:
            seen.append(anyio.current_time())
            await anyio.sleep(0.5)
            return len(seen) < 3

        timer = Timer(PeriodicAction(slow, start=1))
        await timer.run(10)
        return seen, anyio.current_time()

    assert run(main) == ([1.0, 2.0, 3.0], 3.5)


def test_events_added_by_another_task_wake_the_run(run: Runner) -> None:
    async def main() -> list[tuple[str, float]]:
        seen: list[tuple[str, float]] = []
        timer = Timer(
            PeriodicAction(lambda e, t: seen.append(("slow", anyio.current_time())), start=10)
        )

        async def producer() -> None:
            await anyio.sleep(2)
            timer.add(
                PeriodicAction(lambda e, t: seen.append(("late", anyio.current_time())), start=3)
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(producer)
            await timer.run(10)
        return seen

    late = [("late", float(t)) for t in range(3, 10)]
    # At 10, "slow" entered the queue first (at creation), "late" only when rescheduled at 9.
    assert run(main) == [*late, ("slow", 10.0), ("late", 10.0)]


def test_run_is_not_reentrant(run: Runner) -> None:
    async def main() -> int:
        errors: list[str] = []

        async def nested(event: PeriodicAction, timer: Timer) -> bool:
            with pytest.raises(VirtualTimeError, match="already running") as info:
                await timer.run(5)
            errors.append(str(info.value))
            with pytest.raises(VirtualTimeError, match="already running"):
                timer.run_sync(5)
            return False

        timer = Timer(PeriodicAction(nested))
        await timer.run(5)
        return len(errors)

    assert run(main) == 1


def test_a_cancelled_run_leaves_the_timer_intact(run: Runner) -> None:
    async def main() -> list[Any]:
        async def slow(event: PeriodicAction, timer: Timer) -> None:
            await anyio.sleep(10)

        event = PeriodicAction(slow, start=1)
        timer = Timer(event)
        with anyio.move_on_after(3):
            await timer.run(100)
        state = [timer.time, len(timer), event.time, event.timer is timer]
        with anyio.move_on_after(0.5):
            await timer.run(100)  # cancelled while sleeping towards the next event
        return [*state, timer.time, len(timer), anyio.current_time()]

    assert run(main) == [1.0, 1, 1.0, True, 1.0, 1, 3.5]


def test_run_sync_rejects_async_actions_and_stays_intact() -> None:
    async def action(event: PeriodicAction, timer: Timer) -> None:
        raise AssertionError("never awaited")

    event = PeriodicAction(action, start=2)
    timer = Timer(event)
    with pytest.raises(TypeError, match="returned an awaitable"):
        timer.run_sync(5)
    assert (timer.time, len(timer), event.time) == (2.0, 1, 2.0)


def test_remove_inside_and_outside_actions(simulate: Simulate) -> None:
    ran: list[str] = []

    def quitter(event: PeriodicAction, timer: Timer) -> None:
        ran.append("quitter")
        timer.remove(event)

    quit_event, gone = PeriodicAction(quitter), PeriodicAction(lambda e, t: ran.append("gone"))
    timer = Timer(quit_event, gone)
    timer.remove(gone)
    with pytest.raises(ValueError, match="not in this timer"):
        timer.remove(gone)

    async def scenario(run: RunTimer) -> None:
        await run(timer, 3)

    simulate(scenario)
    assert ran == ["quitter"]
    assert (len(timer), quit_event.timer, gone.timer) == (0, None, None)


def test_reprs() -> None:
    event = PeriodicAction(nothing, start=2, period=0.5, priority="low")
    timer = Timer(event)
    assert repr(event) == "<PeriodicAction nothing time=2.0 period=0.5 priority=5>"
    assert repr(timer) == "<Timer time=-inf events=1>"


def test_E12_an_action_that_removes_and_re_adds_itself_is_queued_once() -> None:
    def readd(event: PeriodicAction, timer: Timer) -> None:
        timer.remove(event)
        timer.add(event)

    def readd_then_fail(event: PeriodicAction, timer: Timer) -> None:
        readd(event, timer)
        raise KeyError("after re-adding")

    timer = Timer(PeriodicAction(action=readd))
    timer.run_sync(3)
    assert len(timer) == 1
    assert [e.time for e in timer.events] == [4.0]

    failing = Timer(PeriodicAction(action=readd_then_fail))
    with pytest.raises(KeyError):
        failing.run_sync(3)
    assert len(failing) == 1
    assert [e.time for e in failing.events] == [1.0]
