"""The virtual-time asyncio loop: exact, instant, ordered, safe to jump, never hanging."""

from __future__ import annotations

import asyncio
import inspect
import math
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import virtualtime
from virtualtime._options import LoopOptions

YEAR = 365 * 24 * 3600


def vrun(main: Awaitable[Any], **options: Any) -> Any:
    async def wrapper() -> Any:
        return await main

    return virtualtime.run(wrapper(), **options)


def now() -> float:
    return asyncio.get_running_loop().time()


def virtualtime_loop() -> virtualtime.VirtualEventLoop:
    loop = asyncio.get_running_loop()
    assert isinstance(loop, virtualtime.VirtualEventLoop)
    return loop


# --------------------------------------------------------------- entry points


async def _a_year() -> float:
    await asyncio.sleep(YEAR)
    return now()


def test_run_returns_result_after_a_year_in_milliseconds() -> None:
    t0 = time.perf_counter()
    assert virtualtime.run(_a_year()) == 31_536_000.0
    assert time.perf_counter() - t0 < 0.5


def test_runner_with_loop_factory() -> None:
    with asyncio.Runner(loop_factory=virtualtime.new_event_loop) as runner:
        assert runner.run(_a_year()) == 31_536_000.0
        assert isinstance(runner.get_loop(), virtualtime.VirtualEventLoop)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="asyncio.run(loop_factory=) is 3.12+")
def test_asyncio_run_with_loop_factory() -> None:
    run: Callable[..., float] = asyncio.run
    assert run(_a_year(), loop_factory=virtualtime.new_event_loop) == 31_536_000.0


def test_anyio_run_with_loop_factory() -> None:
    async def main() -> float:
        await anyio.sleep(YEAR)
        return anyio.current_time()

    result = anyio.run(
        main, backend="asyncio", backend_options={"loop_factory": virtualtime.new_event_loop}
    )
    assert result == 31_536_000.0


def test_start_option() -> None:
    async def main() -> tuple[float, float]:
        t0 = now()
        await asyncio.sleep(2.5)
        return t0, now()

    assert virtualtime.run(main(), start=100.0) == (100.0, 102.5)


# ------------------------------------------------------------ instant and exact


def test_ten_sleeps_of_a_tenth_end_at_exactly_one() -> None:
    async def main() -> float:
        for _ in range(10):
            await asyncio.sleep(0.1)
        return now()

    assert virtualtime.run(main()) == 1.0


def test_ten_thousand_sleeps_of_a_tenth_end_at_exactly_a_thousand() -> None:
    async def main() -> float:
        for _ in range(10_000):
            await asyncio.sleep(0.1)
        return now()

    assert virtualtime.run(main()) == 1000.0


def test_exact_sums_from_a_large_start() -> None:
    async def main() -> float:
        for _ in range(10):
            await asyncio.sleep(0.1)
        return now()

    assert virtualtime.run(main(), start=3e7) == 30_000_001.0


@given(st.lists(st.integers(min_value=0, max_value=10**12), min_size=1, max_size=40))
@settings(max_examples=60, deadline=None)
def test_sleeps_of_whole_nanoseconds_sum_exactly(delays_ns: list[int]) -> None:
    async def main() -> float:
        for ns in delays_ns:
            await asyncio.sleep(ns / 1e9)
        return now()

    assert virtualtime.run(main()) == sum(delays_ns) / 1e9


def test_tiny_sleep_still_advances() -> None:
    async def main() -> list[float]:
        seen = []
        for _ in range(3):
            await asyncio.sleep(1e-7)
            seen.append(now())
        await asyncio.sleep(1e-15)  # below one tick: still moves
        seen.append(now())
        return seen

    assert virtualtime.run(main()) == [1e-7, 2e-7, 3e-7, 3.01e-7]


def test_day_and_decade_sleeps_jump_directly() -> None:
    async def main() -> tuple[float, float, int]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, virtualtime.VirtualEventLoop)
        await asyncio.sleep(86_400)
        day = now()
        await asyncio.sleep(10 * YEAR)
        return day, now(), loop.timers_fired

    day, decade, fired = virtualtime.run(main())
    assert (day, decade) == (86_400.0, 86_400.0 + 10 * YEAR)
    assert fired == 2  # one timer each: no intermediate wake-ups


@pytest.mark.parametrize("when", [3e7, 1.7e7 + 0.1, 3e9, 3e9 + 0.5])
def test_timers_fire_at_huge_times(when: float) -> None:
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        fired: list[float] = []
        loop.call_at(when, lambda: fired.append(loop.time()))
        await asyncio.sleep(when - now() + 1)
        loop.call_at(loop.time(), lambda: fired.append(loop.time()))  # due "now"
        await asyncio.sleep(0.5)
        return fired

    fired = virtualtime.run(main())
    assert len(fired) == 2
    assert fired[0] == pytest.approx(when, abs=1e-6)


def test_time_never_goes_backwards_with_past_call_at() -> None:
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        seen: list[float] = []
        await asyncio.sleep(10)
        done = asyncio.Event()

        def late() -> None:
            seen.append(loop.time())
            done.set()

        loop.call_at(5.0, late)
        await done.wait()
        seen.append(loop.time())
        return seen

    assert virtualtime.run(main()) == [10.0, 10.0]


def test_asyncio_timeout_primitives_use_virtual_time() -> None:
    async def main() -> list[Any]:
        out: list[Any] = []
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.sleep(10), timeout=3)
        out.append(now())
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(2):
                await asyncio.Event().wait()
        out.append(now())
        queue: asyncio.Queue[int] = asyncio.Queue()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(queue.get(), 1.5)
        out.append(now())
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[str] = loop.create_future()
        loop.call_later(4, fut.set_result, "later")
        out.append(await fut)
        out.append(now())
        async with asyncio.TaskGroup() as tg:
            a = tg.create_task(asyncio.sleep(7, "a"))
            b = tg.create_task(asyncio.sleep(3, "b"))
        out.extend([a.result(), b.result(), now()])
        return out

    assert virtualtime.run(main()) == [3.0, 5.0, 6.5, "later", 10.5, "a", "b", 17.5]


def test_anyio_primitives_use_virtual_time() -> None:
    async def main() -> list[float]:
        out = []
        await anyio.sleep(2)
        out.append(anyio.current_time())
        with anyio.move_on_after(5):
            await anyio.sleep(100)
        out.append(anyio.current_time())
        with pytest.raises(TimeoutError), anyio.fail_after(1):
            await anyio.sleep_forever()
        out.append(anyio.current_time())
        await anyio.sleep_until(100.25)
        out.append(anyio.current_time())
        return out

    result = anyio.run(
        main, backend="asyncio", backend_options={"loop_factory": virtualtime.new_event_loop}
    )
    assert result == [2.0, 7.0, 8.0, 100.25]


# ------------------------------------------------------------ deterministic order


def test_thousand_same_instant_sleepers_wake_in_creation_order() -> None:
    async def main() -> list[int]:
        woke: list[int] = []

        async def sleeper(i: int) -> None:
            await asyncio.sleep(1)
            woke.append(i)

        async with asyncio.TaskGroup() as tg:
            for i in range(1000):
                tg.create_task(sleeper(i))
        return woke

    assert virtualtime.run(main()) == list(range(1000))


def test_call_later_same_instant_is_fifo_even_when_scheduled_in_different_orders() -> None:
    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        order: list[str] = []
        loop.call_later(2.0, order.append, "a")  # due at 2.0
        await asyncio.sleep(1.0)
        loop.call_later(1.0, order.append, "b")  # also due at 2.0, scheduled later
        loop.call_at(2.0, order.append, "c")
        await asyncio.sleep(5)
        return order

    assert virtualtime.run(main()) == ["a", "b", "c"]


def test_priority_orders_same_instant_wakeups_then_fifo() -> None:
    async def main() -> list[tuple[int, int]]:
        woke: list[tuple[int, int]] = []

        async def sleeper(i: int, priority: int) -> None:
            await virtualtime.sleep(1, priority=priority)
            woke.append((priority, i))

        async with asyncio.TaskGroup() as tg:
            for i, priority in enumerate([5, 0, -5, 5, 0, -5, 10]):
                tg.create_task(sleeper(i, priority))
        return woke

    assert virtualtime.run(main()) == [(-5, 2), (-5, 5), (0, 1), (0, 4), (5, 0), (5, 3), (10, 6)]


def test_call_later_priority_keyword() -> None:
    async def main() -> list[str]:
        loop = virtualtime_loop()
        order: list[str] = []
        loop.call_later(1, order.append, "default")
        loop.call_later(1, order.append, "urgent", priority=-1)
        loop.call_later(1, order.append, "late", priority=1)
        await asyncio.sleep(2)
        return order

    assert virtualtime.run(main()) == ["urgent", "default", "late"]


def test_sleep_until_with_priority() -> None:
    async def main() -> list[tuple[str, float]]:
        order: list[tuple[str, float]] = []

        async def at(name: str, priority: int) -> None:
            await virtualtime.sleep_until(4.5, priority=priority)
            order.append((name, now()))

        async with asyncio.TaskGroup() as tg:
            tg.create_task(at("low", 1))
            tg.create_task(at("high", -1))
        await virtualtime.sleep_until(1.0)  # in the past: returns at once
        order.append(("past", now()))
        return order

    assert virtualtime.run(main()) == [("high", 4.5), ("low", 4.5), ("past", 4.5)]


def _wakeup_trace() -> list[tuple[float, str]]:
    import random

    rng = random.Random(7)
    trace: list[tuple[float, str]] = []

    async def worker(name: str, delays: list[float]) -> None:
        for d in delays:
            await asyncio.sleep(d)
            trace.append((now(), name))

    async def main() -> None:
        async with asyncio.TaskGroup() as tg:
            for i in range(50):
                tg.create_task(worker(f"w{i}", [rng.choice([0.5, 1.0, 1.5]) for _ in range(20)]))

    virtualtime.run(main())
    return trace


def test_two_runs_produce_the_same_wakeup_sequence() -> None:
    first, second = _wakeup_trace(), _wakeup_trace()
    assert len(first) == 1000
    assert first == second
    # Same-instant wake-ups happen: the order among them is what is being pinned down.
    assert len({t for t, _ in first}) < len(first)


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(-3, 3)), min_size=1, max_size=60))
@settings(max_examples=60, deadline=None)
def test_wakeup_order_is_time_then_priority_then_fifo(spec: list[tuple[int, int]]) -> None:
    async def main() -> list[int]:
        woke: list[int] = []

        async def sleeper(i: int, delay: int, priority: int) -> None:
            await virtualtime.sleep(delay / 4, priority=priority)
            woke.append(i)

        async with asyncio.TaskGroup() as tg:
            for i, (delay, priority) in enumerate(spec):
                tg.create_task(sleeper(i, delay, priority))
        return woke

    expected = sorted(range(len(spec)), key=lambda i: (spec[i][0], spec[i][1], i))
    assert virtualtime.run(main()) == expected


# ------------------------------------------------------------ deadlock


def test_deadlock_raises_naming_blocked_tasks_quickly() -> None:
    async def stuck_worker(event: asyncio.Event) -> None:
        await event.wait()

    async def main() -> None:
        event = asyncio.Event()
        task = asyncio.create_task(stuck_worker(event), name="the-stuck-worker")
        await task

    t0 = time.perf_counter()
    with pytest.raises(virtualtime.DeadlockError) as info:
        virtualtime.run(main())
    assert time.perf_counter() - t0 < 1.0
    message = str(info.value)
    assert "deadlock at virtual time t=0.0" in message
    assert "the-stuck-worker" in message
    assert "stuck_worker()" in message
    names = [name for name, _ in info.value.blocked]
    assert "the-stuck-worker" in names
    assert isinstance(info.value, virtualtime.VirtualTimeError)


def test_deadlock_after_time_has_moved_reports_the_time() -> None:
    async def main() -> None:
        await asyncio.sleep(12.5)
        await asyncio.Event().wait()

    with pytest.raises(virtualtime.DeadlockError, match=r"t=12\.5"):
        virtualtime.run(main())


def test_deadlock_does_not_spin_the_cpu() -> None:
    # The CPU of the thread that waits (the process's would count threads earlier tests left
    # behind, a gRPC server's among them).
    cpu0 = time.thread_time()
    with pytest.raises(virtualtime.DeadlockError):
        virtualtime.run(asyncio.Event().wait(), deadlock_timeout=0.3)
    assert time.thread_time() - cpu0 < 0.2


def test_sleep_forever_is_a_deadlock_not_a_hang() -> None:
    async def main() -> None:
        await virtualtime.sleep(math.inf)

    with pytest.raises(virtualtime.DeadlockError, match="only timers at infinity"):
        virtualtime.run(main())


def test_call_soon_threadsafe_from_a_thread_within_the_grace_is_not_a_deadlock() -> None:
    import threading

    async def main() -> str:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[str] = loop.create_future()

        def later() -> None:
            time.sleep(0.05)  # real-time: a foreign thread answering after a short while
            loop.call_soon_threadsafe(fut.set_result, "answer")

        thread = threading.Thread(target=later)
        thread.start()
        try:
            return await fut
        finally:
            thread.join()

    assert virtualtime.run(main(), deadlock_timeout=0.5) == "answer"


# ------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("options", "error", "fragment"),
    [
        ({"start": -1.0}, ValueError, "start must be >= 0"),
        ({"start": math.nan}, ValueError, "start must be finite"),
        ({"start": math.inf}, ValueError, "start must be finite"),
        ({"start": "0"}, TypeError, "start must be a real number"),
        ({"autojump_threshold": -0.1}, ValueError, "autojump_threshold must be >= 0"),
        ({"autojump_threshold": math.nan}, ValueError, "autojump_threshold must be finite"),
        ({"autojump_threshold": math.inf}, ValueError, "autojump_threshold must be finite"),
        ({"autojump": 1}, TypeError, "autojump must be True or False"),
        ({"rate": -2}, ValueError, "rate must be >= 0"),
        ({"history": -1}, ValueError, "history must be >= 0"),
        ({"history": 2.5}, TypeError, "history must be None or an int"),
        ({"deadlock_timeout": -1}, ValueError, "deadlock_timeout must be >= 0"),
        ({"max_rounds_per_instant": 0}, ValueError, "max_rounds_per_instant"),
        ({"bogus": 1}, TypeError, "bogus"),
    ],
)
def test_bad_options_are_rejected_by_name(
    options: dict[str, Any], error: type[Exception], fragment: str
) -> None:
    with pytest.raises(error, match=fragment):
        virtualtime.new_event_loop(**options)
    with pytest.raises(error, match=fragment):  # the same verdict, without building a loop
        LoopOptions.of(options)
    coro = _a_year()
    with pytest.raises(error, match=fragment):
        virtualtime.run(coro, **options)
    # run() closed the coroutine it never started (no "never awaited" warning).
    assert inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED


def test_options_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        virtualtime.VirtualEventLoop(5.0)  # type: ignore[arg-type]


def test_negative_asyncio_sleep_returns_at_once() -> None:
    async def main() -> float:
        await asyncio.sleep(-1)
        return now()

    assert virtualtime.run(main()) == 0.0


@pytest.mark.parametrize("delay", [math.nan, -1.0, "1"])
def test_virtualtime_sleep_rejects_bad_delays(delay: Any) -> None:
    async def main() -> float:
        with pytest.raises((ValueError, TypeError), match="delay"):
            await virtualtime.sleep(delay)
        with pytest.raises(TypeError, match="priority must be an int"):
            await virtualtime.sleep(1, priority=1.5)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="when must be finite"):
            await virtualtime.sleep_until(math.nan)
        return now()

    assert virtualtime.run(main()) == 0.0


def test_call_at_nan_is_rejected(loop: virtualtime.VirtualEventLoop) -> None:
    with pytest.raises(ValueError, match="when must not be NaN"):
        loop.call_at(math.nan, print)
    with pytest.raises(ValueError, match="delay must not be NaN"):
        loop.call_later(math.nan, print)
    assert loop.peek() == math.inf


def test_sleep_outside_a_virtual_loop_is_a_clear_error() -> None:
    async def main() -> None:
        await virtualtime.sleep(1)

    with (
        asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as runner,
        pytest.raises(virtualtime.VirtualTimeError, match="running loop is"),
    ):
        runner.run(main())


def test_callback_exceptions_reach_the_handler_and_the_loop_goes_on() -> None:
    async def main() -> tuple[list[str], float]:
        loop = asyncio.get_running_loop()
        seen: list[str] = []
        loop.set_exception_handler(lambda _loop, ctx: seen.append(str(ctx["exception"])))

        def boom() -> None:
            raise RuntimeError("boom at 1")

        loop.call_later(1, boom)
        await asyncio.sleep(2)
        return seen, now()

    assert virtualtime.run(main()) == (["boom at 1"], 2.0)


def test_task_exceptions_reach_the_awaiter() -> None:
    async def fail() -> None:
        await asyncio.sleep(3)
        raise KeyError("late")

    async def main() -> float:
        with pytest.raises(KeyError):
            await fail()
        return now()

    assert virtualtime.run(main()) == 3.0


# ------------------------------------------------------------ housekeeping


def test_cancelled_timers_are_dropped() -> None:
    async def main() -> tuple[int, float]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, virtualtime.VirtualEventLoop)
        handles = [loop.call_later(i + 1, print) for i in range(2000)]
        for h in handles:
            h.cancel()
        await asyncio.sleep(0.5)
        return loop.timers_fired, loop.peek()

    fired, nxt = virtualtime.run(main())
    assert fired == 1  # only our own sleep
    assert nxt == math.inf


def test_closed_loop_refuses_timers(loop: virtualtime.VirtualEventLoop) -> None:
    loop.close()
    with pytest.raises(RuntimeError, match="closed"):
        loop.call_later(1, print)


def test_repr_shows_time_and_mode() -> None:
    vloop = virtualtime.new_event_loop(start=5.0, autojump=False)
    try:
        assert "time=5.0" in repr(vloop)
        assert "mode=manual" in repr(vloop)
    finally:
        vloop.close()


def test_handle_when_is_the_exact_virtual_instant(loop: virtualtime.VirtualEventLoop) -> None:
    handle = loop.call_later(0.1 + 0.2, print)
    assert handle.when() == 0.3
    assert loop.call_later(math.inf, print).when() == math.inf
    assert loop.peek() == 0.3


def test_float_deadlines_never_fire_early() -> None:
    # 0.2 + 0.2 + 0.2 == 0.6000000000000001: a timer for that deadline must not fire at 0.6,
    # or code that re-checks time() >= deadline re-arms it at the same instant for ever.
    async def main() -> list[float]:
        seen = []
        for _ in range(5):
            with anyio.move_on_after(0.2):
                await anyio.sleep_forever()
            seen.append(anyio.current_time())
        return seen

    seen = anyio.run(
        main, backend="asyncio", backend_options={"loop_factory": virtualtime.new_event_loop}
    )
    assert len(seen) == 5
    assert seen[-1] == pytest.approx(1.0, abs=1e-8)


@given(st.floats(min_value=0, max_value=4e9, allow_nan=False))
@settings(max_examples=300, deadline=None)
def test_call_at_never_fires_before_its_deadline(when: float) -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[float] = loop.create_future()
        loop.call_at(when, lambda: fut.set_result(loop.time()))
        return await fut

    fired = virtualtime.run(main())
    assert fired >= when
    assert fired - when <= max(2e-9, when * 4e-16)


def test_huge_integer_options_are_a_value_error_naming_the_option() -> None:
    with pytest.raises(ValueError, match="start must be finite"):
        virtualtime.new_event_loop(start=10**400)


def test_a_watched_horizon_is_told_whenever_time_moves_past_it_however_it_moves() -> None:
    # The pytest plugin's max_time (_vt_watch_horizon): every way time moves is seen --
    # timers, asyncio.sleep, virtualtime.sleep, anyio's sleep, the sim kit's jumps, a verb --
    # and a timer past the horizon that is cancelled in time changes nothing.
    from virtualtime import sim

    loop = virtualtime.new_event_loop()
    told: list[float] = []
    loop._vt_watch_horizon(10 * 10**9 + 1, lambda: told.append(loop.time()))

    async def kit() -> None:
        async with sim.Simulation():
            await sim.sleep(0.25)

    async def main() -> None:
        loop.call_later(50, told.append, -1.0).cancel()  # never reached: nothing is told
        await asyncio.sleep(4)
        await virtualtime.sleep(6)  # exactly at the horizon: not past it
        assert told == []
        await asyncio.sleep(0.5)
        await virtualtime.sleep(0.5)
        await anyio.sleep(0.5)
        await kit()

    try:
        loop.run_until_complete(main())
        assert told == [10.5, 11.0, 11.5, 11.75]
        loop.evolve(1)
        assert told[-1] == 12.75
        loop._vt_watch_horizon(None, None)
        loop.run_until_complete(virtualtime.sleep(1))
        loop.evolve(1)
        assert told == [10.5, 11.0, 11.5, 11.75, 12.75]
    finally:
        loop.close()
