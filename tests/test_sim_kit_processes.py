"""The modelling kit's processes: interrupts, joins, conditions, the entry point and ending.

Every behaviour runs on both backends (the ``backend`` fixture): asyncio through the kit's
fast path, trio through anyio.
"""

from __future__ import annotations

import contextvars
import gc
import inspect
import math
import time
import warnings
from typing import Any

import anyio
import pytest

import virtualtime
from virtualtime import sim


@pytest.fixture(params=["asyncio", "trio"])
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


# --------------------------------------------------------------------------- processes


def test_awaiting_a_process_gives_its_return_value(backend: str) -> None:
    async def child(x: int) -> int:
        await sim.sleep(3)
        return x * 2

    async def main() -> tuple[int, float]:
        value = await sim.start(child(21))
        return value, sim.now()

    assert sim.simulate(main, backend=backend) == (42, 3.0)


def test_many_processes_can_wait_for_one_and_late_joiners_get_the_value(backend: str) -> None:
    got: list[tuple[str, int, float]] = []

    async def child() -> int:
        await sim.sleep(2)
        return 7

    async def waiter(name: str, proc: sim.Process[int], delay: float) -> None:
        await sim.sleep(delay)
        got.append((name, await proc, sim.now()))

    async def main() -> None:
        proc = sim.start(child())
        sim.start(waiter("early", proc, 1))
        sim.start(waiter("late", proc, 5))

    sim.simulate(main, backend=backend)
    assert sorted(got) == [("early", 7, 2.0), ("late", 7, 5.0)]


def test_interrupt_raises_inside_the_process_with_its_cause_and_it_can_carry_on(
    backend: str,
) -> None:
    log: list[tuple[str, float, object]] = []

    async def worker() -> str:
        left = 10.0
        while left:
            start = sim.now()
            try:
                await sim.sleep(left)
                left = 0
            except sim.Interrupt as interrupt:
                log.append(("interrupted", sim.now(), interrupt.cause))
                left -= sim.now() - start
        return "done"

    async def main() -> str:
        proc = sim.start(worker())
        await sim.sleep(4)
        proc.interrupt("breakdown")
        await sim.sleep(1)
        proc.interrupt({"by": "me"})
        result = await proc
        log.append(("result", sim.now(), result))
        return result

    assert sim.simulate(main, backend=backend) == "done"
    assert log == [
        ("interrupted", 4.0, "breakdown"),
        ("interrupted", 5.0, {"by": "me"}),
        ("result", 10.0, "done"),
    ]


def test_cancelling_the_run_never_looks_like_an_interrupt(backend: str) -> None:
    seen: list[str] = []

    async def worker() -> None:
        while True:
            try:
                await sim.sleep(math.inf)
            except sim.Interrupt:
                seen.append("interrupt")
            except BaseException as exc:
                seen.append(type(exc).__name__)
                raise

    async def main() -> None:
        proc = sim.start(worker())
        await sim.sleep(1)
        proc.interrupt()
        await sim.sleep(100)

    sim.simulate(main, until=5, backend=backend)
    cancelled = "CancelledError" if backend == "asyncio" else "Cancelled"
    assert seen == ["interrupt", cancelled]


def test_an_interrupt_waits_for_the_next_kit_await_of_a_busy_process(backend: str) -> None:
    seen: list[float] = []

    async def worker() -> None:
        await anyio.sleep(2)  # not the kit's: the interrupt is kept
        try:
            await sim.sleep(5)
        except sim.Interrupt:
            seen.append(sim.now())

    async def main() -> None:
        proc = sim.start(worker())
        await sim.sleep(1)
        proc.interrupt()

    sim.simulate(main, backend=backend)
    assert seen == [2.0]


def test_interrupting_an_ended_process_is_an_error(backend: str) -> None:
    async def quick() -> None:
        return None

    async def main() -> str:
        proc = sim.start(quick())
        await proc
        with pytest.raises(virtualtime.VirtualTimeError, match="has ended"):
            proc.interrupt()
        return "checked"

    assert sim.simulate(main, backend=backend) == "checked"


def test_a_failing_process_nobody_awaits_fails_the_simulation(backend: str) -> None:
    async def bad() -> None:
        await sim.sleep(2)
        raise KeyError("broken")

    async def main() -> None:
        sim.start(bad())
        await sim.sleep(10)

    with pytest.raises(KeyError, match="broken"):
        sim.simulate(main, backend=backend)


def test_a_failure_delivered_to_a_waiter_is_handled(backend: str) -> None:
    async def bad() -> None:
        await sim.sleep(2)
        raise KeyError("broken")

    async def main() -> str:
        try:
            await sim.start(bad())
        except KeyError:
            return "caught"
        return "not raised"

    assert sim.simulate(main, backend=backend) == "caught"


def test_start_needs_a_coroutine_and_a_simulation() -> None:
    async def f() -> None:
        return None

    async def main() -> None:
        with pytest.raises(TypeError, match="call the async function"):
            sim.start(f)  # type: ignore[arg-type]

    sim.simulate(main)
    with pytest.raises(virtualtime.VirtualTimeError, match="running simulation"):
        sim.now()


def test_bad_arguments_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="order must be one of"):
        sim.Simulation(order="fifo")
    with pytest.raises(ValueError, match="delay"):
        sim.sleep(-1)
    with pytest.raises(ValueError, match="capacity"):
        sim.Resource(0)
    with pytest.raises(ValueError, match="init"):
        sim.Container(10, init=11)
    with pytest.raises(ValueError, match="at least one"):
        sim.first_of()
    with pytest.raises(TypeError, match="must be awaitable"):
        sim.all_of(3)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- conditions


def test_first_of_returns_the_winner_and_cancels_the_rest(backend: str) -> None:
    cancelled: list[bool] = []

    async def slow() -> str:
        try:
            await anyio.sleep(10)
        except BaseException:
            cancelled.append(True)
            raise
        return "slow"

    async def main() -> tuple[Any, ...]:
        nap = sim.sleep(2)
        which, value = await sim.first_of(nap, slow())
        await sim.sleep(20)
        return which is nap, value, sim.now()

    assert sim.simulate(main, backend=backend) == (True, None, 22.0)
    assert cancelled == [True]


def test_a_request_that_loses_first_of_leaves_the_queue(backend: str) -> None:
    async def holder(counter: sim.Resource) -> None:
        async with counter.request():
            await sim.sleep(10)

    async def main() -> tuple[Any, ...]:
        counter = sim.Resource(1)
        sim.start(holder(counter))
        await sim.sleep(1)
        with counter.request() as req:
            which, _ = await sim.first_of(req, sim.sleep(2))
            state = (which is req, len(counter.queue))
        return (*state, counter.stats.renege_count(), counter.stats.served())

    assert sim.simulate(main, backend=backend) == (False, 0, 1, 1)


def test_a_get_that_loses_first_of_gives_nothing_away(backend: str) -> None:
    async def main() -> tuple[Any, ...]:
        store = sim.Store()
        which, _ = await sim.first_of(store.get(), sim.sleep(1))
        lost = not isinstance(which, sim.Store) and store.get_queue == []
        await store.put("parcel")
        return lost, store.items, await store.get()

    assert sim.simulate(main, backend=backend) == (True, ["parcel"], "parcel")


def test_a_get_that_completed_with_the_winner_returns_its_item(backend: str) -> None:
    async def main() -> tuple[Any, ...]:
        store = sim.Store()
        await store.put("a")
        got = store.get()  # completes at once
        flag = sim.Signal()
        flag.succeed("flag")
        which, value = await sim.first_of(flag, got)
        return which is flag, value, store.items

    assert sim.simulate(main, backend=backend) == (True, "flag", ["a"])


def test_first_of_over_a_signal_and_a_process(backend: str) -> None:
    async def child() -> str:
        await sim.sleep(5)
        return "child"

    async def firer(signal: sim.Signal) -> None:
        await sim.sleep(3)
        signal.succeed("fired")

    async def main() -> tuple[Any, ...]:
        signal = sim.Signal()
        sim.start(firer(signal))
        proc = sim.start(child())
        which, value = await sim.first_of(proc, signal)
        return which is signal, value, sim.now(), await proc, sim.now()

    assert sim.simulate(main, backend=backend) == (True, "fired", 3.0, "child", 5.0)


def test_all_of_returns_every_value_in_order(backend: str) -> None:
    async def child(x: int, delay: float) -> int:
        await sim.sleep(delay)
        return x

    async def main() -> tuple[list[Any], float]:
        values = await sim.all_of(sim.start(child(1, 5)), sim.start(child(2, 1)), sim.sleep(3))
        return values, sim.now()

    assert sim.simulate(main, backend=backend) == ([1, 2, None], 5.0)


def test_all_of_fails_with_the_first_failure_and_takes_the_rest_back(backend: str) -> None:
    async def bad() -> None:
        await sim.sleep(2)
        raise ValueError("no")

    async def main() -> tuple[Any, ...]:
        counter = sim.Resource(1)
        async with counter.request():
            with pytest.raises(ValueError, match="no"):
                await sim.all_of(sim.start(bad()), counter.request())
            queued = len(counter.queue)
        return sim.now(), queued

    assert sim.simulate(main, backend=backend) == (2.0, 0)


def test_an_interrupt_during_first_of_takes_every_operand_back(backend: str) -> None:
    result: list[Any] = []

    async def waiter(counter: sim.Resource) -> None:
        with counter.request() as req:
            try:
                await sim.first_of(req, sim.sleep(100))
            except sim.Interrupt as interrupt:
                result.append((interrupt.cause, sim.now(), len(counter.queue)))

    async def holder(counter: sim.Resource) -> None:
        async with counter.request():
            await sim.sleep(50)

    async def main() -> None:
        counter = sim.Resource(1)
        sim.start(holder(counter))
        await sim.sleep(1)
        proc = sim.start(waiter(counter))
        await sim.sleep(4)
        proc.interrupt("stop")

    sim.simulate(main, backend=backend)
    assert result == [("stop", 5.0, 0)]


def test_a_signal_wakes_every_waiter_once(backend: str) -> None:
    woken: list[tuple[str, Any, float]] = []

    async def waiter(name: str, signal: sim.Signal) -> None:
        woken.append((name, await signal, sim.now()))

    async def main() -> None:
        signal = sim.Signal()
        sim.start(waiter("a", signal))
        sim.start(waiter("b", signal))
        await sim.sleep(4)
        signal.succeed(99)
        with pytest.raises(virtualtime.VirtualTimeError, match="fires once"):
            signal.succeed(100)
        await sim.sleep(1)
        woken.append(("late", await signal, sim.now()))

    sim.simulate(main, backend=backend)
    assert sorted(woken) == [("a", 99, 4.0), ("b", 99, 4.0), ("late", 99, 5.0)]


# --------------------------------------------------------------------------- ending


def test_until_is_inclusive_by_default_and_exclusive_in_simpy_order(backend: str) -> None:
    for order, expected in (("virtualtime", [5.0, 10.0]), ("simpy", [5.0])):
        ticks: list[float] = []

        async def clock(ticks: list[float] = ticks) -> None:
            while True:
                await sim.sleep(5)
                ticks.append(sim.now())

        sim.simulate(clock, until=10, backend=backend, order=order)
        assert ticks == expected, order


def test_the_run_ends_when_every_process_has_ended(backend: str) -> None:
    async def main() -> float:
        await sim.sleep(7)
        return sim.now()

    assert sim.simulate(main, backend=backend) == 7.0


def test_nothing_left_to_happen_ends_the_run_promptly_when_asked(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import virtualtime._anyio

    got: list[Any] = []
    options: list[dict[str, Any]] = []
    real_run = virtualtime._anyio.anyio_run

    def spy(main: Any, *args: Any, **kw: Any) -> Any:
        options.append(kw)
        return real_run(main, *args, **kw)

    monkeypatch.setattr(virtualtime._anyio, "anyio_run", spy)

    async def consumer(store: sim.Store) -> None:
        while True:
            got.append(await store.get())

    async def main() -> str:
        store = sim.Store()
        sim.start(consumer(store))
        await store.put("only")
        await sim.sleep(3)
        return "main ended"

    started = time.perf_counter()
    assert sim.simulate(main, backend=backend, end_when_idle=True) == "main ended"
    assert got == ["only"]
    # no real wait for the deadlock report: the run asks for a zero deadlock_timeout
    assert options == [{"backend": backend, "deadlock_timeout": 0.0}]
    assert time.perf_counter() - started < 5.0


def test_a_genuine_deadlock_is_still_an_error(backend: str) -> None:
    async def main() -> None:
        await sim.Store().get()

    with pytest.raises(virtualtime.DeadlockError):
        sim.simulate(main, backend=backend, deadlock_timeout=0)


def test_simulation_as_a_context_manager_inside_anyio_code(run: Any) -> None:
    async def main() -> tuple[float, float, int]:
        async with sim.Simulation() as env:
            counter = sim.Resource(2)

            async def user() -> None:
                async with counter.request():
                    await sim.sleep(4)

            for _ in range(3):
                env.start(user())
            await env.run(until=5)
            busy = counter.count
        return env.now, anyio.current_time(), busy

    assert run(main) == (5.0, 5.0, 1)


def test_a_simulation_cancelled_from_outside_ends_as_a_cancellation(run: Any) -> None:
    # The processes are all cancelled with the code around the simulation: what leaves the
    # simulation is that one cancellation (an outer scope catches it), never a group of them.
    async def main() -> tuple[bool, float, list[str]]:
        ended: list[str] = []

        async def worker(name: str) -> None:
            try:
                await sim.sleep(100)
            finally:
                ended.append(name)

        with anyio.move_on_after(5) as scope:
            try:
                async with sim.Simulation() as env:
                    for name in "abc":
                        env.start(worker(name))
                    await env.run()
            except anyio.get_cancelled_exc_class():
                ended.append("cancelled")
                raise
        return scope.cancelled_caught, anyio.current_time(), sorted(ended)

    assert run(main) == (True, 5.0, ["a", "b", "c", "cancelled"])


def test_cancelling_one_process_takes_its_request_back_and_tells_its_waiters(
    backend: str,
) -> None:
    seen: list[str] = []

    async def user(counter: sim.Resource) -> None:
        try:
            async with counter.request():
                await sim.sleep(100)
        except sim.Interrupt:
            seen.append("interrupt")
        except BaseException:
            seen.append("cancelled")
            raise

    async def main() -> tuple[Any, ...]:
        counter = sim.Resource(1)
        proc = sim.start(user(counter))
        await sim.sleep(1)
        busy = counter.count
        proc.cancel()
        with pytest.raises(virtualtime.VirtualTimeError, match="cancelled"):
            await proc
        return busy, counter.count, proc.is_alive, sim.now()

    assert sim.simulate(main, backend=backend) == (1, 0, False, 1.0)
    assert seen == ["cancelled"]


def test_until_means_the_same_in_simulate_run_until_and_the_cli(tmp_path: Any) -> None:
    import subprocess
    import sys
    import textwrap

    script = tmp_path / "ticks.py"
    script.write_text(
        textwrap.dedent(
            """
            from virtualtime import sim

            async def ticks():
                while True:
                    await sim.sleep(5)
                    print(sim.now(), flush=True)

            sim.simulate(ticks)
            """
        ),
        encoding="utf-8",
    )
    result = subprocess.run(
        [sys.executable, "-m", "virtualtime", "run", "--quiet", "--until", "10", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 3, result.stderr  # stopped by --until
    assert result.stdout.split() == ["5.0", "10.0"]

    printed: list[float] = []

    async def ticks() -> None:
        while True:
            await sim.sleep(5)
            printed.append(sim.now())

    sim.simulate(ticks, until=10)
    assert printed == [5.0, 10.0]

    seen: list[float] = []

    async def driver() -> None:
        async with sim.Simulation() as env:

            async def tick() -> None:
                while True:
                    await sim.sleep(5)
                    seen.append(sim.now())

            env.start(tick())
            await virtualtime.run_until(10)  # the loop's verb, from inside
            seen.append(-1.0)

    virtualtime.anyio_run(driver)
    assert seen == [5.0, 10.0, -1.0]


# --------------------------------------------------------------------------- never run


@pytest.mark.parametrize("order", sim.ORDERS)
def test_a_process_never_run_before_its_simulation_closes_is_closed_and_ended(
    run: Any, order: str
) -> None:
    """Started just before the simulation's ``async with`` ends, a process never runs: its
    coroutine is closed (no "coroutine ... was never awaited" when it goes) and the process
    has ended, cancelled."""
    ran: list[str] = []

    async def child() -> None:
        ran.append("child")  # never reached

    async def main() -> tuple[Any, Any]:
        async with sim.Simulation(order=order) as env:
            coro = child()
            proc = env.start(coro)
        return coro, proc

    gc.collect()  # garbage of earlier tests warns outside the block below
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        coro, proc = run(main)
        state = inspect.getcoroutinestate(coro)
        del coro
        gc.collect()
    assert state == inspect.CORO_CLOSED
    assert not proc.is_alive
    assert ran == []
    assert [str(w.message) for w in caught] == []


@pytest.mark.parametrize("order", sim.ORDERS)
def test_a_process_cancelled_before_it_ran_never_runs_and_tells_its_waiters(
    backend: str, order: str
) -> None:
    ran: list[str] = []

    async def child() -> int:
        ran.append("child")
        await sim.sleep(1)
        return 5

    async def main() -> tuple[Any, ...]:
        coro = child()
        proc = sim.start(coro)
        proc.cancel()  # before its first step
        with pytest.raises(virtualtime.VirtualTimeError, match="cancelled before it returned"):
            await proc
        state = inspect.getcoroutinestate(coro)
        await sim.sleep(2)
        return state, proc.is_alive, sim.now()

    gc.collect()  # garbage of earlier tests warns outside the block below
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = sim.simulate(main, backend=backend, order=order)
        gc.collect()
    assert result == (inspect.CORO_CLOSED, False, 2.0)
    assert ran == []
    assert [str(w.message) for w in caught] == []


def test_a_process_runs_in_the_context_it_was_started_in(backend: str) -> None:
    """A process sees the context variables as they were when it was started, not as its
    starter changed them before the process first ran (on trio its task is spawned only in
    its turn, from a copy of the context taken at the start)."""
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    seen: list[tuple[str, str, float]] = []

    async def child(tag: str) -> None:
        seen.append((tag, var.get(), sim.now()))
        var.set("changed by " + tag)  # its own copy: nobody else sees it

    async def main() -> None:
        var.set("a")
        sim.start(child("first"))
        var.set("b")
        sim.start(child("second"))
        var.set("c")
        await sim.sleep(1)
        seen.append(("main", var.get(), sim.now()))

    sim.simulate(main, backend=backend)
    assert seen == [("first", "a", 0.0), ("second", "b", 0.0), ("main", "c", 1.0)]
