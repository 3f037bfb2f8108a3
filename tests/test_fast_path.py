"""The native sleep and the lean general path tell exactly the story the old machinery told.

``virtualtime.sleep`` puts its future straight into the loop's timer heap, with no
``TimerHandle``.  The oracle here is the implementation it replaced -- a ``call_later`` timer
whose callback resolves the future -- and every program below must give the same log and the
same dispatch history with either, on the fast path and on the general path, with the
compiled core and without it (``VIRTUALTIME_PURE_PYTHON=1`` runs the suite on the second).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import inspect
import math
import random
import re
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import virtualtime
from virtualtime._engine import _compiled
from virtualtime._engine._handles import set_result_unless_cancelled
from virtualtime._engine._loop import VirtualEventLoop
from virtualtime._engine._timers import SCAN_MIN, SleepTimer

Sleep = Callable[..., Awaitable[None]]


async def handle_sleep(delay: float, *, priority: int = 0) -> None:
    """The oracle: virtualtime.sleep as it was, a call_later timer resolving a future."""
    loop = asyncio.get_running_loop()
    assert isinstance(loop, VirtualEventLoop)
    future: asyncio.Future[None] = loop.create_future()
    handle = loop.call_later(delay, set_result_unless_cancelled, future, None, priority=priority)
    try:
        await future
    finally:
        handle.cancel()


class GeneralPathLoop(VirtualEventLoop):
    """Never the fast path: every idle moment asks the outside-work model."""

    def _vt_update_fast(self) -> None:
        self._vt_fast = False


def run_with(
    path: str,
    program: Callable[[Sleep], Coroutine[Any, Any, Any]],
    sleep: Sleep,
    history: int | None = 100_000,
) -> tuple[Any, list[tuple[float, int, int, str, float]]]:
    def factory() -> VirtualEventLoop:
        if path == "fast":
            return virtualtime.new_event_loop(history=history)
        return GeneralPathLoop(history=history)

    with asyncio.Runner(loop_factory=factory) as runner:
        result = runner.run(program(sleep))
        loop = runner.get_loop()
        assert isinstance(loop, VirtualEventLoop)
        # Unnamed tasks (wait_for's inner task on 3.11) take a process-wide counter's name.
        records = [
            (r.time, r.priority, r.seq, re.sub(r"Task-\d+", "Task-?", r.what), r.scheduled)
            for r in loop.history
        ]
        assert loop._vt_timers.cancelled >= 0
    return result, records


def same_story(program: Callable[[Sleep], Coroutine[Any, Any, Any]]) -> Any:
    stories = [
        run_with(path, program, sleep)
        for path in ("fast", "general")
        for sleep in (virtualtime.sleep, handle_sleep)
    ]
    for story in stories[1:]:
        assert story == stories[0]
    # Without a history the loop (and the compiled core) take their leanest paths, which a
    # kept history turns off: the same program must still give the same log.
    for path in ("fast", "general"):
        for sleep in (virtualtime.sleep, handle_sleep):
            assert run_with(path, program, sleep, history=None) == (stories[0][0], [])
    return stories[0][0]


def random_program(seed: int) -> Callable[[Sleep], Coroutine[Any, Any, list[Any]]]:
    async def program(sleep: Sleep) -> list[Any]:
        rng = random.Random(seed)
        loop = asyncio.get_running_loop()
        log: list[Any] = []

        async def worker(i: int) -> None:
            for step in range(rng.randint(1, 12)):
                delay = rng.choice([0, 0, 0.001, 0.25, 1 / 3, 1.0, 7])
                priority = rng.choice([0, 0, -1, 2])
                how = rng.random()
                try:
                    if how < 0.15:
                        async with asyncio.timeout(rng.choice([0, 0.25, 0.5, 2])):
                            await sleep(delay, priority=priority)
                    elif how < 0.25:
                        await asyncio.wait_for(
                            sleep(delay, priority=priority), rng.choice([0.25, 0.5, 2])
                        )
                    elif how < 0.35:
                        await asyncio.sleep(delay)
                    else:
                        await sleep(delay, priority=priority)
                except TimeoutError:
                    log.append((i, step, "timeout", loop.time()))
                else:
                    log.append((i, step, "woke", loop.time()))

        assert isinstance(loop, VirtualEventLoop)
        tasks = [asyncio.create_task(worker(i), name=f"w{i}") for i in range(12)]
        for task in rng.sample(tasks, 3):
            loop.call_later(rng.choice([0, 0.25, 1.0, 3.0]), task.cancel)
        results = await asyncio.gather(*tasks, return_exceptions=True)
        log.append(("cancelled", [isinstance(r, asyncio.CancelledError) for r in results]))
        log.append(("end", loop.time(), loop.timers_fired))
        return log

    return program


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 100_000))
def test_random_programs_tell_the_same_story_with_the_native_sleep(seed: int) -> None:
    same_story(random_program(seed))


async def _timeouts(sleep: Sleep) -> list[Any]:
    loop = asyncio.get_running_loop()
    log: list[Any] = []
    try:
        async with asyncio.timeout(1):
            await sleep(100)
    except TimeoutError:
        log.append(("timeout", loop.time()))
    try:
        await asyncio.wait_for(sleep(100), 1)
    except TimeoutError:
        log.append(("wait_for", loop.time()))
    task = asyncio.ensure_future(sleep(math.inf))
    loop.call_later(0.5, task.cancel)
    try:
        await task
    except asyncio.CancelledError:
        log.append(("cancelled", loop.time()))
    await sleep(0.5)
    log.append(("after", loop.time()))
    return log


def test_timeouts_and_cancellation_fire_at_their_own_instant() -> None:
    assert same_story(_timeouts) == [
        ("timeout", 1.0),
        ("wait_for", 2.0),
        ("cancelled", 2.5),
        ("after", 3.0),
    ]


async def _priorities(sleep: Sleep) -> list[str]:
    loop = asyncio.get_running_loop()
    order: list[str] = []

    async def one(name: str, priority: int) -> None:
        await sleep(1, priority=priority)
        order.append(name)

    async def stock(name: str) -> None:
        await asyncio.sleep(1)
        order.append(name)

    assert isinstance(loop, VirtualEventLoop)
    loop.call_later(1, order.append, "callback-p1", priority=1)
    await asyncio.gather(
        one("a0", 0), stock("s0"), one("b-1", -1), one("c1", 1), one("d0", 0), one("e-1", -1)
    )
    return order


def test_priorities_then_fifo_across_native_sleeps_timers_and_asyncio_sleep() -> None:
    assert same_story(_priorities) == ["b-1", "e-1", "a0", "s0", "d0", "callback-p1", "c1"]


def test_history_names_the_task_a_native_sleep_woke() -> None:
    async def main() -> None:
        await asyncio.create_task(virtualtime.sleep(2, priority=3), name="napper")

    loop = virtualtime.new_event_loop(history=10)
    try:
        loop.run_until_complete(main())
        (record,) = [r for r in loop.history if r.what == "task napper"]
        assert (record.time, record.priority, record.scheduled) == (2.0, 3, 0.0)
        assert record.task_id is not None
    finally:
        loop.close()


def test_anyio_cancel_scopes_cut_a_native_sleep_short() -> None:
    async def main() -> list[Any]:
        seen: list[Any] = []
        with anyio.move_on_after(1.5) as scope:
            await virtualtime.sleep(100)
        seen.append((scope.cancelled_caught, anyio.current_time()))
        with pytest.raises(TimeoutError):
            with anyio.fail_after(0.25):
                await virtualtime.sleep(10, priority=-1)
        seen.append(anyio.current_time())
        async with anyio.create_task_group() as group:
            group.start_soon(virtualtime.sleep, 50)
            await virtualtime.sleep(1)
            group.cancel_scope.cancel()
        seen.append(anyio.current_time())
        return seen

    result = anyio.run(
        main, backend="asyncio", backend_options={"loop_factory": virtualtime.new_event_loop}
    )
    assert result == [(True, 1.5), 1.75, 2.75]


def test_cancelled_native_sleeps_are_never_counted_and_the_growth_scan_drops_them() -> None:
    async def main() -> list[tuple[int, int, int]]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualEventLoop)
        seen = []
        tasks = [asyncio.create_task(virtualtime.sleep(1000 + i)) for i in range(SCAN_MIN)]
        await asyncio.sleep(0)  # they all start and push their entries
        await asyncio.sleep(0)  # a round that reaches the scan: all live, the next at twice
        seen.append((len(loop._vt_heap), loop._vt_timers.scan_at, loop._vt_timers.cancelled))
        for task in tasks[10:]:
            task.cancel()
        await asyncio.gather(*tasks[10:], return_exceptions=True)
        await asyncio.sleep(1)
        # The dead entries wait behind ten live ones: nobody counted them, none is the head.
        seen.append((len(loop._vt_heap), loop._vt_timers.scan_at, loop._vt_timers.cancelled))
        more = [asyncio.create_task(virtualtime.sleep(5000)) for _ in range(SCAN_MIN)]
        await asyncio.sleep(0)
        await asyncio.sleep(0)  # the heap has doubled: the scan drops every dead entry
        seen.append((len(loop._vt_heap), loop._vt_timers.scan_at, loop._vt_timers.cancelled))
        for task in more + tasks:
            task.cancel()
        await asyncio.gather(*more, *tasks, return_exceptions=True)
        return seen

    assert virtualtime.run(main()) == [
        (SCAN_MIN, 2 * SCAN_MIN, 0),
        (SCAN_MIN, 2 * SCAN_MIN, 0),
        (10 + SCAN_MIN, 2 * (10 + SCAN_MIN), 0),  # the scan left only the live ones
    ]


@pytest.mark.parametrize("path", ["fast", "general"])
def test_dead_native_entries_cannot_pile_up_however_long_they_would_wait(
    path: str,
) -> None:
    # A watchdog that gives up a day-long sleep every second: each leaves a dead entry due a
    # day later, behind a live one due in an hour, so none reaches the head.  The growth scan
    # keeps them to one scan's worth, not thousands.
    async def main() -> tuple[int, float]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualEventLoop)
        keeper = asyncio.create_task(virtualtime.sleep(3600))
        largest = 0
        for _ in range(3 * SCAN_MIN):
            with anyio.move_on_after(1):
                await virtualtime.sleep(86_400)
            largest = max(largest, len(loop._vt_heap))
        keeper.cancel()
        return largest, loop.time()

    factory = virtualtime.new_event_loop if path == "fast" else GeneralPathLoop
    with asyncio.Runner(loop_factory=factory) as runner:
        largest, end = runner.run(main())
    assert end == 3 * SCAN_MIN
    assert SCAN_MIN // 2 < largest <= SCAN_MIN + 1


@pytest.mark.parametrize("path", ["fast", "general"])
def test_time_never_stops_at_a_dead_native_entry(path: str) -> None:
    # A cancelled native sleep is never counted (nobody is left to count it), so the loop
    # must find its dead entry itself before it moves time to the head.  Here the dead entry
    # becomes the head in the round after 5, in which nothing else is ready (the plain round
    # on the fast path): time must not visit 10, where nothing is due, but report the
    # deadlock at 5.
    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualEventLoop)
        never = asyncio.Event()

        async def napper() -> None:
            await virtualtime.sleep(5)
            await never.wait()

        nap = asyncio.create_task(napper())
        doomed = asyncio.create_task(virtualtime.sleep(10))
        await asyncio.sleep(0)
        doomed.cancel()
        with pytest.raises(asyncio.CancelledError):
            await doomed
        # Not counted, and still in the heap behind the napper's live entry.
        assert (loop._vt_timers.cancelled, len(loop._vt_heap), loop.peek()) == (0, 2, 5.0)
        await nap

    loop = virtualtime.new_event_loop() if path == "fast" else GeneralPathLoop()
    try:
        with pytest.raises(virtualtime.DeadlockError, match=r"t=5\.0"):
            loop.run_until_complete(main())
        assert (loop.time(), loop.timers_fired, loop._vt_heap) == (5.0, 1, [])
    finally:
        for task in asyncio.all_tasks(loop):
            task.cancel()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()


def test_a_native_sleep_outside_a_virtual_loop_says_why() -> None:
    coro = virtualtime.sleep(1)
    with pytest.raises(virtualtime.VirtualTimeError, match="no event loop is running"):
        coro.send(None)

    async def on_stock() -> None:
        await virtualtime.sleep(1)

    with pytest.raises(virtualtime.VirtualTimeError, match="running loop is"):
        asyncio.run(on_stock())


def test_native_sleep_edge_delays() -> None:
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        seen = []
        await virtualtime.sleep(0)
        seen.append(loop.time())
        await virtualtime.sleep(1e-12)  # below one tick: still advances one tick
        seen.append(loop.time())
        await virtualtime.sleep(3)
        seen.append(loop.time())
        await virtualtime.sleep(2e18)  # beyond the inline path, before the horizon
        seen.append(loop.time())
        task = asyncio.create_task(virtualtime.sleep(math.inf))
        await asyncio.sleep(0)
        assert isinstance(loop, VirtualEventLoop)
        assert loop.peek() == math.inf
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return seen

    seen = virtualtime.run(main())
    assert seen[:3] == [0.0, 1e-9, 3.000000001]
    assert seen[3] == pytest.approx(2e18)


def test_a_native_sleep_is_a_coroutine_to_asyncio_on_either_path() -> None:
    async def main() -> list[Any]:
        loop = asyncio.get_running_loop()
        seen: list[Any] = []
        coro = virtualtime.sleep(0.5)
        assert asyncio.iscoroutine(coro)
        task = asyncio.create_task(coro)  # a task around the sleep itself
        await asyncio.sleep(0)
        assert "coro=<sleep()>" in repr(task)  # what asyncio shows of a coroutine
        await task
        assert task.result() is None
        seen.append(loop.time())
        seen.append(await asyncio.gather(virtualtime.sleep(1), virtualtime.sleep(0.25)))
        seen.append(loop.time())
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(virtualtime.sleep(5), 1)
        seen.append(loop.time())
        again = virtualtime.sleep(1)
        await again
        with pytest.raises(RuntimeError, match="cannot reuse already awaited coroutine"):
            await again
        never = virtualtime.sleep(1)
        never.close()  # closed before it started: nothing scheduled, nothing to warn about
        assert isinstance(loop, VirtualEventLoop)
        seen.append(loop.peek())
        return seen

    assert virtualtime.run(main()) == [0.5, [None, None], 1.5, 2.5, math.inf]


def test_a_native_sleep_never_awaited_warns_on_either_path() -> None:
    async def main() -> None:
        virtualtime.sleep(1)  # type: ignore[unused-coroutine]  # the forgotten ``await``
        gc.collect()

    with pytest.warns(RuntimeWarning, match=r"coroutine '(virtualtime\.)?sleep' was never awaited"):
        virtualtime.run(main())


def test_a_native_sleep_driven_by_hand_answers_as_a_coroutine_does() -> None:
    async def main() -> list[Any]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualEventLoop)
        seen: list[Any] = []
        coro: Any = virtualtime.sleep(5)
        future = coro.send(None)  # started: its future is in the heap, and yielded
        seen.append((type(future) is asyncio.Future, future._asyncio_future_blocking))
        seen.append(any(entry[3] is future for entry in loop._vt_heap))
        with pytest.raises(ValueError, match="given up"):
            coro.throw(ValueError("given up"))
        with pytest.raises(RuntimeError, match="cannot reuse already awaited coroutine"):
            coro.send(None)
        future.cancel()  # as a task's cancellation would: the entry is dead, never counted
        seen.append((loop._vt_timers.cancelled, loop.peek()))
        fresh: Any = virtualtime.sleep(1)
        with pytest.raises(KeyError):
            fresh.throw(KeyError("before it started"))
        with pytest.raises(RuntimeError, match="cannot reuse already awaited coroutine"):
            await fresh
        closed: Any = virtualtime.sleep(1)
        closed.close()
        closed.close()  # twice is fine, as for a coroutine
        unstarted: Any = virtualtime.sleep(1)
        with pytest.raises(TypeError, match="non-None value"):
            unstarted.send(3)
        unstarted.close()  # still not started, as a coroutine would be: closed, no warning
        return seen

    assert virtualtime.run(main()) == [(True, True), True, (0, math.inf)]


def test_whole_second_delays_are_exact_however_large() -> None:
    # An int delay is multiplied exactly (an int product), never through a float, on every path.
    big = 10**17 + 1

    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualEventLoop)
        handle = loop.call_later(big, lambda: None)
        due = [loop._vt_heap[0][0]]
        handle.cancel()
        task = asyncio.create_task(virtualtime.sleep(big))
        await asyncio.sleep(0)
        due.append(max(entry[0] for entry in loop._vt_heap))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return due

    assert virtualtime.run(main()) == [big * 10**9, big * 10**9]


# ------------------------------------------------------------ the lean general path


def test_lean_call_soon_handles_run_in_order_with_their_context() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="none")

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        seen: list[str] = []
        done = loop.create_future()
        ctx = contextvars.copy_context()
        ctx.run(var.set, "theirs")
        var.set("mine")
        loop.call_soon(lambda: seen.append("1:" + var.get()))
        loop.call_soon(lambda: seen.append("2:" + var.get()), context=ctx)
        cancelled = loop.call_soon(seen.append, "never")
        assert isinstance(cancelled, asyncio.Handle)
        cancelled.cancel()
        assert cancelled.cancelled()
        loop.call_soon(seen.append, "3:one argument")
        loop.call_soon(lambda *args: seen.append(f"4:{args}"), "a", "b")
        loop.call_soon(done.set_result, None)
        await done
        return seen

    assert virtualtime.run(main()) == [
        "1:mine",
        "2:theirs",
        "3:one argument",
        "4:('a', 'b')",
    ]


def test_a_failing_lean_callback_is_reported_like_a_stock_one() -> None:
    reports: list[dict[str, Any]] = []

    def boom(x: int) -> None:
        raise ValueError(f"boom {x}")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: reports.append(context))
        loop.call_soon(boom, 7)
        await asyncio.sleep(0)

    virtualtime.run(main())
    (report,) = reports
    assert report["message"].startswith("Exception in callback ")
    assert "boom" in report["message"]
    assert isinstance(report["exception"], ValueError)
    assert isinstance(report["handle"], asyncio.Handle)

    stock: list[dict[str, Any]] = []

    async def on_stock() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: stock.append(context))
        loop.call_soon(boom, 7)
        await asyncio.sleep(0)

    asyncio.run(on_stock())
    assert stock[0]["message"] == report["message"]


def test_the_lone_wake_up_in_a_fresh_interpreter() -> None:
    # The pure rounds' lone wake-up (one sleep due, nothing ready: the task's wake-up runs
    # from the round itself) is taken only with no other thread alive, so its scenarios run
    # in an interpreter of their own (tests/lone_wake_ups.py asserts each and names it).
    import os
    import subprocess
    import sys
    from pathlib import Path

    out = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("lone_wake_ups.py"))],
        capture_output=True,
        text=True,
        env={**os.environ, "VIRTUALTIME_PURE_PYTHON": "1"},
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    passed = [line.removesuffix(" ok") for line in out.stdout.splitlines()]
    cancelled = [
        f"cancelled-{kind}-{where}"
        for where in ("remove_done_callback", "set_result")
        for kind in ("native", "asyncio")
    ]
    assert passed == ["resumes", "callbacks", "runaway", "patched", "freed", *cancelled]


def test_get_debug_and_create_future_follow_the_loop() -> None:
    loop = virtualtime.new_event_loop()
    try:
        assert loop.get_debug() is False
        loop.set_debug(True)
        assert loop.get_debug() is True
        future = loop.create_future()
        assert type(future) is asyncio.Future
        assert future.get_loop() is loop
        handle = loop.call_soon(print)
        assert handle._source_traceback  # type: ignore[attr-defined]  # debug: recorded
        handle.cancel()
        loop.set_debug(False)
        assert loop.get_debug() is False
    finally:
        loop.close()
    del loop
    gc.collect()


def test_a_subclass_call_soon_still_schedules_every_future_callback() -> None:
    # The loop binds its own call_soon once per instance (C futures look it up on every
    # wake-up); a subclass's override must not be shadowed by that, on either path.
    scheduled: list[object] = []

    class Counting(virtualtime.VirtualEventLoop):
        def call_soon(  # type: ignore[override]
            self, callback: Any, *args: Any, context: Any = None
        ) -> asyncio.Handle:
            scheduled.append(callback)
            return super().call_soon(callback, *args, context=context)

    async def main() -> float:
        await asyncio.sleep(1)
        await virtualtime.sleep(2)
        return asyncio.get_running_loop().time()

    loop = Counting()
    try:
        assert loop.run_until_complete(main()) == 3.0
    finally:
        loop.close()
    # Both sleeps' futures woke the task through the override (and the task's first step).
    assert len(scheduled) >= 3
    plain = virtualtime.new_event_loop()
    try:
        bound: Any = plain.__dict__.get("call_soon")
        if _compiled.COMPILED:  # the compiled caller, which calls the method when unusual
            assert type(bound).__name__ == "SoonCaller"
        else:  # the method itself, bound once
            assert bound.__func__ is VirtualEventLoop.call_soon
            assert bound.__self__ is plain
        assert plain.run_until_complete(main()) == 3.0
    finally:
        plain.close()


def test_call_soon_on_a_closed_loop_refuses_as_stock() -> None:
    loop = virtualtime.new_event_loop()
    loop.close()
    with pytest.raises(RuntimeError, match="closed"):
        loop.call_soon(print)
    # call_later's lean timer is for open loops only: closing sends it to the checked path.
    with pytest.raises(RuntimeError, match="closed"):
        loop.call_later(1.5, print)
    with pytest.raises(RuntimeError, match="closed"):
        loop.call_later(0, print)


def test_a_sleep_cancelled_before_its_overdue_timer_fires_is_not_counted() -> None:
    # A task cancelled while asleep has not run since when a leap makes its timer overdue:
    # the timer then finds its future already cancelled.  It wakes nobody and does not count
    # as fired, on the direct path (no history) as on the recording one.
    for history in (None, 10):
        loop = virtualtime.new_event_loop(autojump=False, history=history)
        seen: list[str] = []

        async def sleeper(loop: asyncio.AbstractEventLoop = loop, seen: list[str] = seen) -> None:
            try:
                await asyncio.sleep(2)
                seen.append("woke")
            except asyncio.CancelledError:
                seen.append(f"cancelled at {loop.time()}")
                raise

        try:
            task = loop.create_task(sleeper())
            loop.run_until_complete(asyncio.sleep(0))  # the task sleeps, its timer at 2
            task.cancel()
            assert loop.fast_forward(5) == 5.0
            assert task.cancelled()
            assert seen == ["cancelled at 5.0"]
            assert loop.timers_fired == 0
            assert loop.peek() == math.inf
            if history is not None:
                assert loop.history == ()
        finally:
            loop.close()


def test_asyncio_sleeps_timer_is_a_sleep_timer_that_cancels_like_a_handle() -> None:
    from virtualtime._engine._timers import SleepTimer

    waker: Any = asyncio.futures._set_result_unless_cancelled  # type: ignore[attr-defined]

    async def main() -> list[object]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualEventLoop)
        seen: list[object] = []
        early, late = loop.create_future(), loop.create_future()
        kept: Any = loop.call_later(2, waker, late, "late")
        # Due at the same instant, after the live one: the round that fires that one meets
        # this one dead behind it, instead of dropping it at the head beforehand.
        dropped: Any = loop.call_later(2, waker, early, "early")
        assert type(dropped) is SleepTimer
        assert type(kept) is SleepTimer
        assert (dropped.when(), dropped.cancelled(), repr(dropped)) == (
            2.0,
            False,
            "<SleepTimer when=2.0>",
        )
        dropped.cancel()
        dropped.cancel()  # once is counted, as TimerHandle.cancel() counts once
        seen.append((dropped.cancelled(), repr(dropped), loop._vt_timers.cancelled))
        await asyncio.sleep(5)
        # The cancelled timer left its future alone and fired nothing; the other one fired.
        seen.append((early.done(), await late, kept.cancelled(), loop.timers_fired))
        kept.cancel()  # after it fired, as asyncio.sleep's finally does: nothing to count
        seen.append((kept.cancelled(), loop._vt_timers.cancelled, len(loop._vt_heap)))
        return seen

    assert virtualtime.run(main()) == [
        (True, "<SleepTimer cancelled when=2.0>", 1),
        (False, "late", False, 2),  # the timer behind "late" and asyncio.sleep(5)'s own
        (True, 0, 0),
    ]


def test_a_sleep_timer_whose_future_is_cancelled_is_dead_and_never_miscounted() -> None:
    # Cancelling the future (not the timer) kills the entry without counting it: the loop
    # drops it when it reaches the head, and a cancel() after that counts nothing either.
    waker: Any = asyncio.futures._set_result_unless_cancelled  # type: ignore[attr-defined]
    for peek_first in (True, False):
        loop = virtualtime.new_event_loop(autojump=False)
        try:
            future = loop.create_future()
            timer = loop.call_later(1, waker, future, None)
            other = loop.call_later(1.5, waker, loop.create_future(), None)
            keeper = loop.call_later(3, waker, loop.create_future(), None)
            future.cancel()
            other.cancel()  # a counted death, so that the loop purges dead heads
            assert loop._vt_timers.cancelled == 1
            if peek_first:  # peek() purges: both dead heads go, only the counted one counts
                assert loop.peek() == 3.0
                assert loop._vt_timers.cancelled == 0
            loop.evolve(2)
            assert loop.timers_fired == 0
            assert [entry[3] for entry in loop._vt_heap] == [keeper]
            timer.cancel()
            assert (timer.cancelled(), loop._vt_timers.cancelled) == (True, 0)
            assert (loop.peek(), loop._vt_timers.cancelled) == (3.0, 0)
        finally:
            loop.close()


def test_cancelled_asyncio_sleeps_are_counted_and_compacted() -> None:
    async def main() -> tuple[int, int, int, list[float]]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualEventLoop)
        woke: list[float] = []

        async def nap(delay: float) -> None:
            await asyncio.sleep(delay)
            woke.append(loop.time())

        doomed = [asyncio.create_task(asyncio.sleep(100 + i)) for i in range(600)]
        kept = [asyncio.create_task(nap(1 + i)) for i in range(3)]
        await asyncio.sleep(0)
        for task in doomed:
            task.cancel()
        await asyncio.sleep(0)  # each cancelled sleep's finally cancels its timer: counted
        counted = loop._vt_timers.cancelled
        await asyncio.sleep(0)  # the next round compacts: 600 dead of 604
        left = len(loop._vt_heap)
        await asyncio.gather(*kept)
        return counted, left, loop._vt_timers.cancelled, woke

    counted, left, after, woke = virtualtime.run(main())
    assert (counted, left, after) == (600, 3, 0)
    assert woke == [1.0, 2.0, 3.0]


def test_a_sleep_timer_made_before_debug_mode_still_wakes_its_sleeper() -> None:
    from virtualtime._engine._timers import SleepTimer

    async def main() -> list[object]:
        loop = asyncio.get_running_loop()
        seen: list[object] = []

        async def sleeper() -> None:
            await asyncio.sleep(2)
            seen.append(("woke", loop.time()))

        task = asyncio.create_task(sleeper())
        await asyncio.sleep(0)
        loop.set_debug(True)  # from now on timers are stock handles; the sleeper's is not
        waker: Any = asyncio.futures._set_result_unless_cancelled  # type: ignore[attr-defined]
        debug_timer: Any = loop.call_later(1, waker, loop.create_future(), 1)
        seen.append(type(debug_timer) is SleepTimer)
        await task
        loop.set_debug(False)
        return seen

    assert virtualtime.run(main()) == [False, ("woke", 2.0)]


def test_canary_weakset_keeps_its_references_in_a_set() -> None:
    # The fast path's "nothing outside" check reads WeakSet.data
    # (virtualtime._engine._outside.quiet).
    import weakref

    class Child:
        pass

    children: weakref.WeakSet[Child] = weakref.WeakSet()
    assert not children.data  # type: ignore[attr-defined]
    child = Child()
    children.add(child)
    assert len(children.data) == 1  # type: ignore[attr-defined]
    del child
    gc.collect()
    assert not children.data  # type: ignore[attr-defined]


# ------------------------------------------------------------- both implementations

_STORY_SCRIPT = """
import json, sys
sys.path.insert(0, {tests!r})
import virtualtime._engine._compiled
from test_fast_path import random_program, run_with
import virtualtime
stories = [run_with("fast", random_program(seed), virtualtime.sleep, history)
           for seed in (1, 2, 3) for history in (100_000, None)]
print(json.dumps([virtualtime._engine._compiled.COMPILED, stories]))
"""


def test_the_pure_path_and_the_compiled_core_tell_the_same_story() -> None:
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    import virtualtime._engine._compiled

    tests = str(Path(__file__).parent)
    here = [
        run_with("fast", random_program(seed), virtualtime.sleep, history)
        for seed in (1, 2, 3)
        for history in (100_000, None)
    ]
    env = {**os.environ, "VIRTUALTIME_PURE_PYTHON": "1"}
    out = subprocess.run(
        [sys.executable, "-c", _STORY_SCRIPT.format(tests=tests)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=60,
    )
    compiled, there = json.loads(out.stdout)
    assert compiled is False  # the variable forces the pure path
    assert json.loads(json.dumps(here)) == there
    if os.environ.get("VIRTUALTIME_PURE_PYTHON"):
        assert virtualtime._engine._compiled.COMPILED is False


def test_the_compiled_core_is_used_whenever_it_was_built() -> None:
    import importlib.util
    import os

    import virtualtime._engine._compiled

    built = importlib.util.find_spec("virtualtime._engine._cwake") is not None
    forced_pure = bool(os.environ.get("VIRTUALTIME_PURE_PYTHON"))
    assert virtualtime._engine._compiled.COMPILED is (built and not forced_pure)
    # asyncio.sleep's timer cancels itself in C with the core (a Python function without).
    cancel = SleepTimer.__dict__["cancel"]
    assert inspect.isfunction(cancel) is not virtualtime._engine._compiled.COMPILED


_THREAD_SCRIPT = """
import threading
import anyio, anyio._backends._asyncio
import virtualtime

def refuse(*_args):
    raise AssertionError("a loop round called into threading")

async def main():
    for _ in range(100):
        await anyio.sleep(0.01)
    return anyio.current_time()

assert threading.active_count() == 1  # the premise: no other thread exists
threading.active_count = threading.enumerate = refuse
print(anyio.run(main, backend="asyncio",
                backend_options={"loop_factory": virtualtime.new_event_loop}))
"""


def test_the_thread_check_calls_no_threading_function_with_anyio_loaded() -> None:
    # Issue 18: with no worker thread, a loop round asks threading nothing (anyio loaded or
    # not); the fast path reads the length of threading's own table of running threads.  In
    # a fresh interpreter, where no other test left a thread behind.
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _THREAD_SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) == pytest.approx(1.0)


def test_the_loop_running_here_is_the_running_loop_and_is_forgotten_after() -> None:
    from virtualtime._engine._running import RUNNING_HERE

    async def inner() -> bool:
        return RUNNING_HERE.loop is asyncio.get_running_loop()

    async def outer() -> tuple[bool, bool]:
        # Another thread's virtual loop has its own record; this thread's is untouched.
        import concurrent.futures

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            there = pool.submit(virtualtime.run, inner()).result()
        return there, RUNNING_HERE.loop is asyncio.get_running_loop()

    assert RUNNING_HERE.loop is None
    assert virtualtime.run(outer()) == (True, True)
    assert RUNNING_HERE.loop is None
    with pytest.raises(ZeroDivisionError):
        virtualtime.run(_divide_by_zero())
    assert RUNNING_HERE.loop is None


async def _divide_by_zero() -> None:
    await virtualtime.sleep(1)
    1 / 0  # noqa: B018


def test_a_closed_loop_is_not_kept_alive_by_the_compiled_sleep() -> None:
    import weakref

    loop = virtualtime.new_event_loop()
    loop.run_until_complete(virtualtime.sleep(1))  # the compiled sleep caches what it reads
    ref = weakref.ref(loop)
    loop.close()
    del loop
    gc.collect()
    assert ref() is None
    assert virtualtime.run(virtualtime.sleep(1)) is None  # and a new loop is read afresh


_ROUNDS_SCRIPT = """
import asyncio, json
import virtualtime
from virtualtime._engine import _compiled
from virtualtime._engine._loop import VirtualEventLoop

calls = [0]
soon = [0]
stock_soon = VirtualEventLoop.call_soon

def counting_soon(self, *args, **kwargs):
    soon[0] += 1
    return stock_soon(self, *args, **kwargs)

VirtualEventLoop.call_soon = counting_soon  # before the loop: its own stand-in binds this

class Counting(VirtualEventLoop):
    def _run_once(self):
        calls[0] += 1
        super()._run_once()

async def sleeper(i):
    for step in range(30):
        await virtualtime.sleep(1 + i / 10 + step / 1000)
        await asyncio.sleep(0.001 + i / 10000)
    return asyncio.get_running_loop().time()

async def main():
    return await asyncio.gather(*(sleeper(i) for i in range(10)))

loop = Counting()
try:
    ends = loop.run_until_complete(main())
    fired = loop.timers_fired
finally:
    loop.close()
print(json.dumps([_compiled.COMPILED, calls[0], soon[0], fired, ends]))
"""


def _run_rounds_script(*, pure: bool) -> tuple[bool, int, int]:
    """Run _ROUNDS_SCRIPT in a fresh interpreter (a thread left by another test would make
    every round look outside, as it must), on the pure-Python path if ``pure``."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "VIRTUALTIME_PURE_PYTHON": "1"} if pure else None
    out = subprocess.run(
        [sys.executable, "-c", _ROUNDS_SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=60,
    )
    compiled, calls, soon, fired, ends = json.loads(out.stdout)
    assert fired == 600
    assert ends == sorted(ends)
    assert len(set(ends)) == 10
    return compiled, calls, soon


def test_the_loop_takes_round_after_round_in_one_call() -> None:
    # The compiled core's plain_rounds reads the loop's fields by name; if one were renamed it
    # would quietly hand every round back to Python (correct, but slow); the pure-Python
    # _run_once goes on from one plain round to the next as well.  Counted here: 600 sleeps
    # at 600 instants, with tasks woken and made ready between them.
    compiled, calls, _soon = _run_rounds_script(pure=False)
    assert compiled is _compiled.COMPILED
    # The first round of each stretch, and the ones handed back: 3 compiled, 15 pure (a
    # round with callbacks made ready by the last one is a general round, taken by a call).
    assert calls < 30


def test_the_pure_rounds_wake_a_lone_sleeper_without_scheduling_a_callback() -> None:
    # A pure-Python wake-up of one sleeper alone at its instant runs the task's wake-up from
    # the round itself; before, each went through call_soon, a handle and the ready queue
    # (a sixth of the wake-up).  600 sleeps of both kinds, each alone at its instant: only
    # the tasks' first steps and gather's callbacks at the end are scheduled.
    compiled, _calls, soon = _run_rounds_script(pure=True)
    assert compiled is False
    assert soon < 40


def test_the_fields_the_compiled_rounds_read_are_slots() -> None:
    # _cwake.c's setup_loop takes each field's offset from its member descriptor (a field
    # that stopped being a slot fails there, at import); the instance dict holds none of them,
    # asyncio's own flags included, and the loop's Future keywords go at close.
    from virtualtime._engine._outside import OutsideWork
    from virtualtime._engine._timers import TimerQueue

    member = type(SleepTimer.__dict__["_future"])
    wanted: dict[type, tuple[str, ...]] = {
        VirtualEventLoop: VirtualEventLoop.__slots__,
        TimerQueue: ("cancelled", "scan_at"),
        OutsideWork: ("calm_at", "changes"),
    }
    assert {"_stopping", "_debug", "_closed", "_ready", "_vt_ticks"} <= set(
        wanted[VirtualEventLoop]
    )
    for cls, names in wanted.items():
        for name in names:
            assert type(cls.__dict__[name]) is member, (cls, name)
    loop = virtualtime.new_event_loop()
    try:
        assert not set(VirtualEventLoop.__slots__) & set(loop.__dict__)
        assert loop._vt_future_kw == {"loop": loop}
    finally:
        loop.close()
    # A closed loop lets go of the keywords that refer back to it (no cycle left behind).
    assert loop._vt_future_kw is None


def test_each_thread_sleeps_on_its_own_loop_while_another_runs() -> None:
    # The compiled sleep remembers the loop running in the thread that last started or left
    # one; a sleep in any other thread reads its own thread's record.  Two loops in two
    # threads, their sleeps interleaved in real time, each ending at its own virtual total.
    import threading

    started = threading.Barrier(2, timeout=30)

    async def sleeper(delays: list[float]) -> tuple[float, bool]:
        loop = asyncio.get_running_loop()
        started.wait()
        for delay in delays:
            await virtualtime.sleep(delay)
            await asyncio.sleep(0)
        return loop.time(), asyncio.get_running_loop() is loop

    results: list[tuple[float, bool]] = []
    worker = threading.Thread(target=lambda: results.append(virtualtime.run(sleeper([0.25] * 400))))
    worker.start()
    try:
        here = virtualtime.run(sleeper([1.0] * 400))
    finally:
        worker.join(timeout=60)
    assert here == (400.0, True)
    assert results == [(100.0, True)]


def test_a_sleep_after_the_loop_has_stopped_is_refused_not_put_on_the_old_loop() -> None:
    loop = virtualtime.new_event_loop()
    try:
        loop.run_until_complete(virtualtime.sleep(1))
        stray = virtualtime.sleep(2)
        with pytest.raises(virtualtime.UsageError, match="running virtual event loop"):
            stray.send(None)
        assert loop.time() == 1.0
        assert loop.peek() == math.inf  # nothing was pushed on the loop that has stopped
    finally:
        loop.close()


_JUMP_CASES = [
    "plain",
    "ready",
    "not_after_now",
    "timer_before",
    "timer_at",
    "history",
    "stopping",
    "cancelling",
    "horizon",
    "round_every",
]


@pytest.mark.parametrize("case", _JUMP_CASES)
def test_the_compiled_jump_answers_as_the_method(case: str) -> None:
    # loop._vt_jump_to is the compiled twin of WaitsMixin._vt_jump_to on the compiled core
    # (a stand-in on the instance); both are run here on loops in the same state, from a
    # task, and must give the same answer and leave the same clock, counts and horizon calls.
    from virtualtime._engine._waits import JUMP_ROUND_EVERY, WaitsMixin

    def run(use_method: bool) -> tuple[Any, ...]:
        told: list[float] = []
        loop = virtualtime.new_event_loop(history=10 if case == "history" else 0)

        async def main() -> tuple[Any, ...]:
            task = asyncio.current_task()
            assert task is not None

            def jump(ticks: int) -> bool:
                if use_method:
                    return WaitsMixin._vt_jump_to(loop, ticks, task)
                return loop._vt_jump_to(ticks, task)

            now = loop._vt_ticks
            target = now + 5_000_000_000
            if case == "ready":
                loop.call_soon(lambda: None)
            elif case == "not_after_now":
                target = now
            elif case in ("timer_before", "timer_at"):
                loop.call_at(loop.time() + (4.0 if case == "timer_before" else 5.0), print)
            elif case == "stopping":
                loop.stop()
            elif case == "cancelling":
                task.cancel()
            elif case == "horizon":
                loop._vt_watch_horizon(now + 1_000, lambda: told.append(loop.time()))
            answers = [jump(target)]
            if case == "round_every":
                answers += [jump(target + k) for k in range(1, JUMP_ROUND_EVERY + 1)]
            if case == "cancelling":
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.sleep(0)  # the cancellation is delivered here, and taken
                task.uncancel()
            if case == "stopping":
                loop._stopping = False
            return (answers, loop._vt_ticks, loop.time(), loop._vt_skipped, told)

        try:
            state: tuple[Any, ...] = loop.run_until_complete(main())
        finally:
            loop.close()
        return state

    compiled, method = run(False), run(True)
    assert compiled == method
    answers = compiled[0]
    assert answers[0] is (case in ("plain", "horizon", "round_every"))
    if case == "horizon":
        assert compiled[4] == [5.0]
    if case == "round_every":
        assert answers.count(False) == 1  # one wait in JUMP_ROUND_EVERY takes its round
