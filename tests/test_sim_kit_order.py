"""The table of ordering differences from SimPy (docs/coming-from-simpy.md), row by row.

Each row is a tiny scenario run three times: in SimPy itself, in the kit's default order and
in ``order="simpy"``.  The SimPy order must reproduce SimPy's trace exactly; the default order
must give the trace the table documents.  Each runs on asyncio and on virtualtime's trio
clock, whose queue keeps the kit's same-instant order (trio itself shuffles same-instant
wake-ups by design; ``order="simpy"`` on another trio clock is an error, tested last).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Generator
from typing import Any

import pytest
import simpy

import virtualtime
from virtualtime import sim

Trace = list[Any]


Model = Callable[[Trace], Coroutine[Any, Any, None]]
Kit = Callable[..., Trace]


@pytest.fixture(params=["asyncio", "trio"])
def kit(request: pytest.FixtureRequest) -> Kit:
    """``kit(order, model, **options)``: the model's trace in the kit, on the backend."""

    def run(order: str, model: Model, **kw: Any) -> Trace:
        trace: Trace = []
        sim.simulate(model, trace, order=order, backend=request.param, **kw)
        return trace

    return run


# --------------------------------------------------------------------------- row 1


def simpy_new_process(trace: Trace) -> None:
    env = simpy.Environment()

    def child() -> Generator[Any, Any, None]:
        trace.append(("child", env.now))
        yield env.timeout(0)

    def parent() -> Generator[Any, Any, None]:
        yield env.timeout(1)
        env.process(child())
        trace.append(("parent", env.now))

    def other() -> Generator[Any, Any, None]:
        yield env.timeout(1)
        trace.append(("other", env.now))

    env.process(parent())
    env.process(other())
    env.run()


async def kit_new_process(trace: Trace) -> None:
    async def child() -> None:
        trace.append(("child", sim.now()))

    async def parent() -> None:
        await sim.sleep(1)
        sim.start(child())
        trace.append(("parent", sim.now()))

    async def other() -> None:
        await sim.sleep(1)
        trace.append(("other", sim.now()))

    sim.start(parent())
    sim.start(other())


def test_row_1_a_new_process_runs_first_at_its_instant_in_simpy_order(kit: Kit) -> None:
    expected: Trace = []
    simpy_new_process(expected)
    assert expected == [("parent", 1), ("child", 1), ("other", 1)]
    assert kit("simpy", kit_new_process) == expected
    assert kit("virtualtime", kit_new_process) == [("parent", 1), ("other", 1), ("child", 1)]


# --------------------------------------------------------------------------- row 2


def simpy_immediate(trace: Trace) -> None:
    env = simpy.Environment()
    counter = simpy.Resource(env, 1)

    def a() -> Generator[Any, Any, None]:
        with counter.request() as req:
            yield req
            trace.append("a granted")

    def b() -> Generator[Any, Any, None]:
        trace.append("b runs")
        yield env.timeout(0)

    env.process(a())
    env.process(b())
    env.run()


async def kit_immediate(trace: Trace) -> None:
    counter = sim.Resource(1)

    async def a() -> None:
        async with counter.request():
            trace.append("a granted")

    async def b() -> None:
        trace.append("b runs")

    sim.start(a())
    sim.start(b())


def test_row_2_an_operation_that_completes_at_once_still_suspends_in_simpy_order(kit: Kit) -> None:
    expected: Trace = []
    simpy_immediate(expected)
    assert expected == ["b runs", "a granted"]
    assert kit("simpy", kit_immediate) == expected
    assert kit("virtualtime", kit_immediate) == ["a granted", "b runs"]


# --------------------------------------------------------------------------- row 3


def simpy_put(trace: Trace) -> None:
    env = simpy.Environment()
    store = simpy.Store(env)

    def getter() -> Generator[Any, Any, None]:
        item = yield store.get()
        trace.append(("got", item))

    def putter() -> Generator[Any, Any, None]:
        yield env.timeout(1)
        store.put("x")

    def watcher() -> Generator[Any, Any, None]:
        yield env.timeout(1)
        trace.append(("items seen", len(store.items)))

    env.process(getter())
    env.process(putter())
    env.process(watcher())
    env.run()


async def kit_put(trace: Trace) -> None:
    store = sim.Store()

    async def getter() -> None:
        trace.append(("got", await store.get()))

    async def putter() -> None:
        await sim.sleep(1)
        store.put("x")

    async def watcher() -> None:
        await sim.sleep(1)
        trace.append(("items seen", len(store.items)))

    sim.start(getter())
    sim.start(putter())
    sim.start(watcher())


def test_row_3_a_put_serves_waiting_getters_one_step_later_in_simpy_order(kit: Kit) -> None:
    expected: Trace = []
    simpy_put(expected)
    assert expected == [("items seen", 1), ("got", "x")]
    assert kit("simpy", kit_put) == expected
    assert kit("virtualtime", kit_put) == [("items seen", 0), ("got", "x")]


def simpy_release(trace: Trace) -> None:
    env = simpy.Environment()
    counter = simpy.Resource(env, 1)

    def holder() -> Generator[Any, Any, None]:
        with counter.request() as req:
            yield req
            yield env.timeout(1)

    def waiter() -> Generator[Any, Any, None]:
        with counter.request() as req:
            yield req
            trace.append(("granted", env.now))

    def watcher() -> Generator[Any, Any, None]:
        yield env.timeout(0.5)
        yield env.timeout(0.5)  # due at 1, behind the holder's timeout
        trace.append(("users", counter.count, "queued", len(counter.queue)))

    env.process(holder())
    env.process(waiter())
    env.process(watcher())
    env.run()


async def kit_release(trace: Trace) -> None:
    counter = sim.Resource(1)

    async def holder() -> None:
        async with counter.request():
            await sim.sleep(1)

    async def waiter() -> None:
        async with counter.request():
            trace.append(("granted", sim.now()))

    async def watcher() -> None:
        await sim.sleep(0.5)
        await sim.sleep(0.5)  # due at 1, behind the holder's sleep
        trace.append(("users", counter.count, "queued", len(counter.queue)))

    sim.start(holder())
    sim.start(waiter())
    sim.start(watcher())


def test_row_3_a_release_serves_the_queue_one_step_later_in_simpy_order(kit: Kit) -> None:
    expected: Trace = []
    simpy_release(expected)
    assert expected == [("users", 0, "queued", 1), ("granted", 1)]
    assert kit("simpy", kit_release) == expected
    assert kit("virtualtime", kit_release) == [("users", 1, "queued", 0), ("granted", 1)]


# --------------------------------------------------------------------------- row 4


def simpy_until(trace: Trace) -> None:
    env = simpy.Environment()

    def ticker() -> Generator[Any, Any, None]:
        while True:
            yield env.timeout(5)
            trace.append(env.now)

    env.process(ticker())
    env.run(until=15)
    trace.append(("now", env.now))


async def kit_until(trace: Trace) -> None:
    while True:
        await sim.sleep(5)
        trace.append(sim.now())


def test_row_4_until_excludes_its_instant_in_simpy_order(kit: Kit) -> None:
    expected: Trace = []
    simpy_until(expected)
    assert expected == [5, 10, ("now", 15)]
    assert kit("simpy", kit_until, until=15) == expected[:-1]
    assert kit("virtualtime", kit_until, until=15) == [5, 10, 15]


# --------------------------------------------------------------------------- row 5


def test_row_5_nothing_left_to_happen_ends_the_run_only_when_asked(kit: Kit) -> None:
    env = simpy.Environment()
    store = simpy.Store(env)

    def stuck() -> Generator[Any, Any, None]:
        yield store.get()

    env.process(stuck())
    env.run()  # SimPy returns

    async def kit_stuck(trace: Trace) -> None:
        trace.append(await sim.Store().get())

    for order in sim.ORDERS:
        assert kit(order, kit_stuck, end_when_idle=True) == []
        with pytest.raises(virtualtime.DeadlockError):
            kit(order, kit_stuck, deadlock_timeout=0)


# --------------------------------------------------------------------------- row 6


def test_row_6_losers_of_first_of_leave_the_queue_at_once(kit: Kit) -> None:
    env = simpy.Environment()
    counter = simpy.Resource(env, 1)
    seen: Trace = []

    def holder() -> Generator[Any, Any, None]:
        with counter.request() as req:
            yield req
            yield env.timeout(10)

    def impatient() -> Generator[Any, Any, None]:
        with counter.request() as req:
            yield req | env.timeout(1)
            seen.append(len(counter.queue))  # still queued until the with block ends
        seen.append(len(counter.queue))

    env.process(holder())
    env.process(impatient())
    env.run()
    assert seen == [1, 0]

    async def kit_impatient(trace: Trace) -> None:
        counter = sim.Resource(1)

        async def holder() -> None:
            async with counter.request():
                await sim.sleep(10)

        sim.start(holder())
        await sim.sleep(0)
        with counter.request() as req:
            await sim.first_of(req, sim.sleep(1))
            trace.append(len(counter.queue))
        trace.append(len(counter.queue))

    for order in sim.ORDERS:
        assert kit(order, kit_impatient) == [0, 0]


# --------------------------------------------------------------------------- row 7


def test_row_7_time_is_exact_where_simpy_adds_floats(kit: Kit) -> None:
    env = simpy.Environment()

    def steps() -> Generator[Any, Any, None]:
        for _ in range(3):
            yield env.timeout(0.1)

    env.process(steps())
    env.run()
    assert env.now == 0.30000000000000004

    async def kit_steps(trace: Trace) -> None:
        for _ in range(3):
            await sim.sleep(0.1)
        trace.append(sim.now())

    for order in sim.ORDERS:
        assert kit(order, kit_steps) == [0.3]


# --------------------------------------------------------------------------- row 8


def test_row_8_a_wait_due_at_the_instant_of_an_interrupt_still_completes(kit: Kit) -> None:
    env = simpy.Environment()
    seen: Trace = []

    def interrupter(procs: list[Any]) -> Generator[Any, Any, None]:
        yield env.timeout(1)  # scheduled first, so it runs first at t=1
        procs[0].interrupt()

    def sleeper() -> Generator[Any, Any, None]:
        try:
            yield env.timeout(1)
            seen.append("woke")
            yield env.timeout(1)
        except simpy.Interrupt:
            seen.append(("interrupted", env.now))

    procs: list[Any] = []
    env.process(interrupter(procs))
    procs.append(env.process(sleeper()))
    env.run()
    assert seen == [("interrupted", 1)]  # SimPy: the sleep due at 1 never completes

    async def kit_race(trace: Trace) -> None:
        procs: list[sim.Process[None]] = []

        async def interrupter() -> None:
            await sim.sleep(1)
            procs[0].interrupt()

        async def sleeper() -> None:
            try:
                await sim.sleep(1)
                trace.append("woke")
                await sim.sleep(1)
            except sim.Interrupt:
                trace.append(("interrupted", sim.now()))

        sim.start(interrupter())
        procs.append(sim.start(sleeper()))

    # order="simpy": SimPy's -- the interruption is urgent, the timeout due at 1 is discarded.
    assert kit("simpy", kit_race) == [("interrupted", 1.0)]
    # The default order: the sleep had completed (its timer fired at 1 with the
    # interrupter's); the interrupt is kept and raised at the next await, at the same instant.
    assert kit("virtualtime", kit_race) == ["woke", ("interrupted", 1.0)]


def test_simpy_order_runs_on_any_trio_clock() -> None:
    """The turn, not a clock's queue, makes SimPy's order: it holds on trio's MockClock too
    (row 1's model: the new process runs before the sleeper woken at the same instant)."""
    import trio
    import trio.testing

    expected: Trace = []
    simpy_new_process(expected)
    trace: Trace = []

    async def main() -> None:
        async with sim.Simulation(order="simpy") as env:
            sim.start(kit_new_process(trace))
            await env.run()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert trace == expected
