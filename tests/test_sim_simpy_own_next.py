"""``order="simpy"``: a process whose own event is the next one goes on without suspending.

When the event a process waits on is at the head of SimPy's heap (its own timeout, usually)
and nothing is left of the current step, the core pops it and the process carries on at once
(the clock moved in place on the virtual asyncio loop) instead of handing the turn through
the loop.  These scenarios put that shortcut next to what must still come first -- an urgent
interrupt at the same instant, a timeout made earlier for the same instant, a zero delay, a
step hook, a timeout awaited after it was made -- and check the trace against SimPy's own,
on asyncio and on virtualtime's trio clock.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import pytest
import simpy

from virtualtime import sim

Trace = list[Any]


@pytest.fixture(params=["asyncio", "trio"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def simpy_trace(build: Callable[[simpy.Environment, Trace], None], until: float) -> Trace:
    trace: Trace = []
    env = simpy.Environment()
    build(env, trace)
    env.run(until=until)
    return trace


def test_a_lone_sleeper_ends_where_simpy_does(backend: str) -> None:
    delays = [0.5, 0.0, 1.25, 3.0, 0.0, 0.75] * 50

    def build(env: simpy.Environment, trace: Trace) -> None:
        def walker() -> Generator[Any, Any, None]:
            for delay in delays:
                yield env.timeout(delay)
                trace.append(env.now)

        env.process(walker())

    async def walker(trace: Trace) -> None:
        for delay in delays:
            await sim.sleep(delay)
            trace.append(sim.now())

    async def model(trace: Trace) -> None:
        sim.start(walker(trace))

    trace: Trace = []
    sim.simulate(model, trace, order="simpy", backend=backend, until=10_000)
    assert trace == simpy_trace(build, 10_000)


def test_same_instant_interrupts_and_timeouts_come_first(backend: str) -> None:
    """A sleeper whose timeout is due at 5 meets, at 5, another process's earlier timeout
    (made first, so processed first) that interrupts it: SimPy resumes it with the
    interrupt, not the timeout."""

    def build(env: simpy.Environment, trace: Trace) -> None:
        def sleeper() -> Generator[Any, Any, None]:
            for _ in range(3):
                try:
                    yield env.timeout(5)
                    trace.append(("woke", env.now))
                except simpy.Interrupt as exc:
                    trace.append(("interrupted", env.now, exc.cause))

        def poker(target: simpy.Process) -> Generator[Any, Any, None]:
            yield env.timeout(5)
            target.interrupt("poke")
            trace.append(("poked", env.now))
            yield env.timeout(0)
            trace.append(("after", env.now))

        target = env.process(sleeper())
        env.process(poker(target))

    async def sleeper(trace: Trace) -> None:
        for _ in range(3):
            try:
                await sim.sleep(5)
                trace.append(("woke", sim.now()))
            except sim.Interrupt as exc:
                trace.append(("interrupted", sim.now(), exc.cause))

    async def poker(trace: Trace, target: sim.Process[None]) -> None:
        await sim.sleep(5)
        target.interrupt("poke")
        trace.append(("poked", sim.now()))
        await sim.sleep(0)
        trace.append(("after", sim.now()))

    async def model(trace: Trace) -> None:
        target = sim.start(sleeper(trace))
        sim.start(poker(trace, target))

    trace: Trace = []
    sim.simulate(model, trace, order="simpy", backend=backend, until=100)
    assert trace == simpy_trace(build, 100)


def test_a_timeout_awaited_after_it_was_made(backend: str) -> None:
    """``t = sleep(3)`` made early and awaited after other waits: it is the process's own
    event at the heap's head only once the other waits are over."""

    def build(env: simpy.Environment, trace: Trace) -> None:
        def proc(name: str, first: float) -> Generator[Any, Any, None]:
            late = env.timeout(3, value=name)
            yield env.timeout(first)
            trace.append((name, "first", env.now))
            got = yield late
            trace.append((name, got, env.now))
            yield env.timeout(1)
            trace.append((name, "end", env.now))

        env.process(proc("a", 1))
        env.process(proc("b", 3))
        env.process(proc("c", 5))

    async def proc(trace: Trace, name: str, first: float) -> None:
        late = sim.sleep(3, name)
        await sim.sleep(first)
        trace.append((name, "first", sim.now()))
        got = await late
        trace.append((name, got, sim.now()))
        await sim.sleep(1)
        trace.append((name, "end", sim.now()))

    async def model(trace: Trace) -> None:
        sim.start(proc(trace, "a", 1))
        sim.start(proc(trace, "b", 3))
        sim.start(proc(trace, "c", 5))

    trace: Trace = []
    sim.simulate(model, trace, order="simpy", backend=backend, until=100)
    assert trace == simpy_trace(build, 100)


def test_a_step_hook_still_sees_every_event(backend: str) -> None:
    """With a step hook (the differential test's invariant checker) the shortcut steps
    aside: the hook is called once per event, after the process has run to its next wait."""
    seen: list[tuple[str, float]] = []

    async def walker(trace: Trace) -> None:
        for _ in range(4):
            await sim.sleep(2)
            trace.append(sim.now())

    async def model(trace: Trace) -> None:
        sim.start(walker(trace))

    trace: Trace = []
    env = sim.Simulation(order="simpy")
    env._on_step = lambda: seen.append(("step", sim.now()))
    env.simulate(model, trace, until=100, backend=backend)
    assert trace == [2, 4, 6, 8]
    # the model's own process (start, end), the walker's start, its four timeouts, its end
    assert [when for _, when in seen] == [0, 0, 0, 2, 4, 6, 8, 8]
