"""The lone wake-up of the pure-Python rounds, in a fresh interpreter: run as a script.

``_run_once`` takes its plain rounds (and so the lone wake-up, ``virtualtime/_engine/_cycle.py``)
only when no other thread is alive, so a test process where earlier tests left threads behind
never gets there.  ``tests/test_fast_path.py`` runs this file in an interpreter of its own,
with ``VIRTUALTIME_PURE_PYTHON=1``; each scenario below asserts what it checks, and the script
prints the name of each one that passed.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import linecache
import sys
import threading
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import virtualtime
from virtualtime._engine import _compiled, _cycle
from virtualtime._engine._handles import _Soon, set_result_unless_cancelled
from virtualtime._engine._loop import VirtualEventLoop

Sleep = Callable[..., Awaitable[None]]


def a_lone_wake_up_resumes_its_task_as_the_ready_queue_would() -> None:
    # The pure rounds run the one callback of a lone due sleep's future themselves (the
    # compiled core through the ready queue): the woken task runs in its own context, as the
    # current task, at its instant, and same-instant sleeps still wake first-come first-served.
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="none")
    log: list[tuple[str, float, str, bool]] = []

    async def sleeper(name: str, delays: list[float], sleep: Sleep) -> None:
        var.set(name)
        me = asyncio.current_task()
        for delay in delays:
            await sleep(delay)
            now = asyncio.get_running_loop().time()
            log.append((name, now, var.get(), me is asyncio.current_task()))

    async def main() -> int:
        async with asyncio.TaskGroup() as group:
            group.create_task(sleeper("a", [1, 1, 0.5], virtualtime.sleep))
            group.create_task(sleeper("b", [1, 1.25], asyncio.sleep))
            group.create_task(sleeper("c", [1.5, 0.75], virtualtime.sleep))
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualEventLoop)
        return loop.timers_fired

    assert virtualtime.run(main()) == 7
    assert log == [
        ("a", 1.0, "a", True),
        ("b", 1.0, "b", True),
        ("c", 1.5, "c", True),
        ("a", 2.0, "a", True),
        ("b", 2.25, "b", True),
        ("c", 2.25, "c", True),
        ("a", 2.5, "a", True),
    ]


def a_lone_timers_future_callbacks_run_and_fail_as_scheduled_ones_do() -> None:
    # A lone due timer whose future has one callback that is not a task's wake-up, one that
    # fails, or two: each runs once, in order, at the timer's instant, and a failure is
    # reported as a failing scheduled callback is.
    reports: list[dict[str, Any]] = []
    seen: list[tuple[str, float]] = []

    def boom(future: asyncio.Future[str]) -> None:
        raise ValueError(f"boom {future.result()}")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: reports.append(context))
        one = loop.create_future()
        one.add_done_callback(lambda f: seen.append((f.result(), loop.time())))
        loop.call_later(1, set_result_unless_cancelled, one, "one")
        failing = loop.create_future()
        failing.add_done_callback(boom)
        loop.call_later(2, set_result_unless_cancelled, failing, "two")
        two = loop.create_future()
        two.add_done_callback(lambda f: seen.append(("first of " + f.result(), loop.time())))
        two.add_done_callback(lambda f: seen.append(("second of " + f.result(), loop.time())))
        loop.call_later(3, set_result_unless_cancelled, two, "three")
        await virtualtime.sleep(4)

    virtualtime.run(main())
    assert seen == [("one", 1.0), ("first of three", 3.0), ("second of three", 3.0)]
    (report,) = reports
    assert report["message"].startswith("Exception in callback ")
    assert "boom" in report["message"]
    assert str(report["exception"]) == "boom two"
    assert type(report["handle"]) is _Soon  # as the pure ready queue reports one


def lone_wake_ups_spinning_at_one_instant_are_a_runaway_that_strands_no_task() -> None:
    # A task that sleeps for no time over and over is woken alone at the same instant each
    # time: the round count still reaches the limit, and the round that reports it has woken
    # the task the general way, so the task can still be cancelled and finish afterwards.
    loop = virtualtime.new_event_loop(max_rounds_per_instant=50)
    spins = 0

    async def spin() -> None:
        nonlocal spins
        while True:
            spins += 1
            await virtualtime.sleep(0)

    try:
        task = loop.create_task(spin())
        with pytest.raises(virtualtime.RunawayError, match="max_rounds_per_instant=50"):
            loop.run_until_complete(task)
        assert 45 <= spins <= 55
        assert loop.time() == 0.0
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            loop.run_until_complete(task)
        assert task.cancelled()
    finally:
        loop.close()


def a_task_cancelled_inside_its_lone_wake_up_still_wakes_cancelled(
    where: str, sleep: Sleep
) -> None:
    # Ctrl-C under asyncio.run cancels the main task from a signal handler, which Python runs
    # between any two lines: here, as the pure round's lone wake-up is about to take the
    # callback off the sleep's future, or to resolve it.  Either way the task wakes, cancelled,
    # at its instant (a lost wake-up would leave it stranded: a deadlock).
    loop = virtualtime.new_event_loop()
    injected: list[float] = []
    lane = f"awaited.{where}("  # the lane's own line (the first rounds of a run are general)

    async def main() -> str:
        try:
            for _ in range(3):
                await sleep(1)
        except asyncio.CancelledError:
            return f"cancelled at {loop.time()}"
        return "not cancelled"

    task = loop.create_task(main())

    def line(frame: Any, event: str, _arg: Any) -> Any:
        source = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
        if event == "line" and not injected and lane in source:
            injected.append(loop.time())
            task.cancel()  # what asyncio.Runner's SIGINT handler does
        return line

    def calls(frame: Any, _event: str, _arg: Any) -> Any:
        return line if frame.f_code is _cycle.CycleMixin._run_once.__code__ else None

    before = sys.gettrace()
    sys.settrace(calls)
    try:
        result = loop.run_until_complete(task)
    finally:
        sys.settrace(before)
        loop.close()
    assert len(injected) == 1
    assert result == f"cancelled at {injected[0]}"


def the_lone_wake_up_leaves_a_patched_call_soon_and_a_foreign_future_alone() -> None:
    # Code that wraps call_soon on the instance sees every callback a future schedules, as on
    # a stock loop; a timer that resolves another loop's future leaves its callbacks to that
    # loop.  In the pure rounds, where the lone wake-up runs callbacks itself.
    seen: list[object] = []

    async def main() -> float:
        for _ in range(3):
            await virtualtime.sleep(1)
            await asyncio.sleep(1)
        return asyncio.get_running_loop().time()

    loop = virtualtime.new_event_loop()
    own = loop.call_soon

    def spy(callback: Any, *args: Any, context: Any = None) -> asyncio.Handle:
        seen.append(callback)
        return own(callback, *args, context=context)

    loop.call_soon = spy  # type: ignore[method-assign]
    try:
        assert loop.run_until_complete(main()) == 6.0
    finally:
        loop.close()
    # The task's first step, its six wake-ups, and run_until_complete's done callback.
    assert len(seen) == 8

    other = asyncio.new_event_loop()
    loop = virtualtime.new_event_loop()
    try:
        theirs = other.create_future()
        ran: list[str] = []
        theirs.add_done_callback(lambda f: ran.append(f.result()))
        loop.call_later(1, set_result_unless_cancelled, theirs, "done")
        loop.run_until_complete(virtualtime.sleep(2))
        assert theirs.result() == "done"
        assert ran == []  # scheduled on its own loop, which has not run
        other.run_until_complete(asyncio.sleep(0))
        assert ran == ["done"]
    finally:
        loop.close()
        other.close()


def a_task_woken_alone_is_not_kept_alive_by_the_round() -> None:
    # What the lone wake-up ran (the task's wake-up, its context, the future) is not held by
    # the round once it has run: a task that finished there, which nobody keeps, is freed
    # with its result at once, as when the ready queue ran its last step.
    class Result:
        pass

    refs: list[weakref.ref[Result]] = []
    alive: list[bool] = []

    async def short() -> Result:
        await virtualtime.sleep(1)
        await virtualtime.sleep(1)
        result = Result()
        refs.append(weakref.ref(result))
        return result

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.create_task(short())  # noqa: RUF006 - kept by nobody once it has finished, at t=2
        loop.call_at(2.5, lambda: alive.append(refs[0]() is not None))
        await virtualtime.sleep(3)

    virtualtime.run(main())
    assert alive == [False]


def main() -> None:
    # The premises: the pure path, no other thread, and a loop that takes the lone wake-up.
    assert not _compiled.COMPILED, "run with VIRTUALTIME_PURE_PYTHON=1"
    assert threading.active_count() == 1
    loop = virtualtime.new_event_loop()
    assert loop._vt_lone is not None
    assert loop.call_soon is loop._vt_lone
    loop.close()
    scenarios: list[tuple[str, Callable[[], None]]] = [
        ("resumes", a_lone_wake_up_resumes_its_task_as_the_ready_queue_would),
        ("callbacks", a_lone_timers_future_callbacks_run_and_fail_as_scheduled_ones_do),
        ("runaway", lone_wake_ups_spinning_at_one_instant_are_a_runaway_that_strands_no_task),
        ("patched", the_lone_wake_up_leaves_a_patched_call_soon_and_a_foreign_future_alone),
        ("freed", a_task_woken_alone_is_not_kept_alive_by_the_round),
    ]
    for where in ("remove_done_callback", "set_result"):
        for kind, sleep in (("native", virtualtime.sleep), ("asyncio", asyncio.sleep)):
            cancelled = functools.partial(
                a_task_cancelled_inside_its_lone_wake_up_still_wakes_cancelled, where, sleep
            )
            scenarios.append((f"cancelled-{kind}-{where}", cancelled))
    for name, scenario in scenarios:
        scenario()
        print(name, "ok", flush=True)


if __name__ == "__main__":
    main()
