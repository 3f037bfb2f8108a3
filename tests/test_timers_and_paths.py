"""The timer kernel on its own, and the loop's two paths to the same decision.

:class:`virtualtime._engine._timers.TimerQueue` is tested here without any loop.  The loop decides
"may time move?" on a fast path (nothing at all outside) and a general path (asking the
outside-work model); every scenario below runs through both and must give the same story.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import virtualtime
from virtualtime._engine._loop import VirtualEventLoop
from virtualtime._engine._timers import COMPACT_MIN, NEVER, SCAN_MIN, TimerQueue

# ------------------------------------------------------------------ TimerQueue


class Item:
    def __init__(self, name: str) -> None:
        self.name = name
        self._cancelled = False
        self._scheduled = True


def test_entries_come_out_by_tick_then_priority_then_push_order() -> None:
    queue = TimerQueue()
    for ticks, priority, name in [(5, 0, "c"), (1, 0, "a"), (5, -1, "b"), (5, 0, "d"), (9, 0, "e")]:
        queue.push(ticks, priority, Item(name))
    assert queue.peek() == 1
    assert [entry[3].name for entry in queue.pop_due(5)] == ["a", "b", "c", "d"]
    assert queue.peek() == 9
    assert len(queue) == 1


def test_cancelled_entries_are_skipped_counted_and_forgotten() -> None:
    forgotten: list[int] = []
    queue = TimerQueue(on_discard=forgotten.append)
    items = [Item(str(i)) for i in range(4)]
    seqs = [queue.push(10 + i, 0, item) for i, item in enumerate(items)]
    items[0]._cancelled = True
    queue.note_cancelled()
    items[2]._cancelled = True
    queue.note_cancelled()
    assert queue.peek() == 11  # the cancelled head was dropped
    assert forgotten == [seqs[0]]
    assert items[0]._scheduled is False
    assert [entry[3].name for entry in queue.pop_due(100)] == ["1", "3"]
    assert forgotten == [seqs[0], seqs[2]]
    assert queue.cancelled == 0
    assert queue.peek() is None


def test_many_cancellations_compact_the_heap_in_place() -> None:
    queue = TimerQueue()
    heap = queue.heap
    items = [Item(str(i)) for i in range(4 * COMPACT_MIN)]
    for i, item in enumerate(items):
        queue.push(i + 1, 0, item)
    for item in items[1 : 2 * COMPACT_MIN]:
        item._cancelled = True
        queue.note_cancelled()
    queue.purge()
    assert queue.heap is heap  # the loop's reference stays valid
    assert len(queue) == 4 * COMPACT_MIN - (2 * COMPACT_MIN - 1)
    assert queue.cancelled == 0
    assert [e[3].name for e in queue.pop_due(3)] == ["0"]


def test_dead_waiters_are_never_counted_but_dropped_at_the_head_and_by_the_growth_scan() -> None:
    # A waiter (a stock future) dies when it is done, and nobody reports it: the queue finds
    # it at the head, and by a scan once the heap has grown to scan_at.
    loop = asyncio.new_event_loop()
    try:
        queue = TimerQueue()
        heap = queue.heap
        waiters = [loop.create_future() for _ in range(SCAN_MIN - 1)]
        for i, future in enumerate(waiters):
            queue.push(i + 1, 0, future)
        for future in waiters[:3] + waiters[10:]:
            future.cancel()
        queue.purge()  # below scan_at: only the dead entries at the head go
        assert (len(queue), queue.cancelled, queue.peek()) == (SCAN_MIN - 4, 0, 4)
        assert [entry[3] for entry in queue.pop_due(4)] == [waiters[3]]
        handles = [Item(str(i)) for i in range(5)]
        for item in handles:
            queue.push(10 * SCAN_MIN, 0, item)
        assert len(queue) == queue.scan_at == SCAN_MIN
        queue.purge()  # at scan_at: the scan drops every dead waiter, wherever it is
        assert queue.heap is heap  # in place: the loop's reference stays valid
        assert sorted(map(id, (entry[3] for entry in heap))) == sorted(
            map(id, [*waiters[4:10], *handles])
        )
        assert (queue.cancelled, queue.scan_at) == (0, SCAN_MIN)  # 2 x 11 live, at least MIN
        got = [entry[3] for entry in queue.pop_due(NEVER - 1)]
        assert got == [*waiters[4:10], *handles]
    finally:
        loop.close()


def test_the_growth_scan_waits_for_twice_the_live_entries() -> None:
    queue = TimerQueue()
    items = [Item(str(i)) for i in range(2 * SCAN_MIN)]
    for i, item in enumerate(items[:SCAN_MIN]):
        queue.push(i, 0, item)
    queue.purge()  # all live: nothing dropped, the next scan at twice as many
    assert (len(queue), queue.scan_at) == (SCAN_MIN, 2 * SCAN_MIN)
    for i, item in enumerate(items[SCAN_MIN:-1], start=SCAN_MIN):
        queue.push(i, 0, item)
    queue.purge()  # one short: no scan
    assert (len(queue), queue.scan_at) == (2 * SCAN_MIN - 1, 2 * SCAN_MIN)
    queue.push(2 * SCAN_MIN, 0, items[-1])
    queue.purge()
    assert (len(queue), queue.scan_at) == (2 * SCAN_MIN, 4 * SCAN_MIN)


def test_never_entries_are_not_next() -> None:
    queue = TimerQueue()
    queue.push(NEVER, 0, Item("never"))
    assert queue.peek() is None
    assert len(queue.live()) == 1
    queue.clear()
    assert len(queue) == 0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(-3, 3), st.booleans()), max_size=60))
def test_the_queue_matches_a_sorted_list(entries: list[tuple[int, int, bool]]) -> None:
    queue = TimerQueue()
    expected = []
    for ticks, priority, cancel in entries:
        item = Item(f"{ticks}/{priority}")
        seq = queue.push(ticks, priority, item)
        if cancel:
            item._cancelled = True
            queue.note_cancelled()
        else:
            expected.append((ticks, priority, seq))
    got = [entry[:3] for entry in queue.pop_due(NEVER - 1)]
    assert got == sorted(expected)


# ------------------------------------------------------- fast path vs general path


class GeneralPathLoop(VirtualEventLoop):
    """A virtual loop that never takes the fast path: every idle moment asks the model."""

    def _vt_update_fast(self) -> None:
        self._vt_fast = False


def run_on(path: str, main: Coroutine[Any, Any, Any], **options: Any) -> Any:
    factory: Callable[[], VirtualEventLoop]
    if path == "fast":

        def factory() -> VirtualEventLoop:
            return virtualtime.new_event_loop(history=10_000, **options)
    else:

        def factory() -> VirtualEventLoop:
            return GeneralPathLoop(history=10_000, **options)

    with asyncio.Runner(loop_factory=factory) as runner:
        result = runner.run(main)
        loop = runner.get_loop()
        assert isinstance(loop, VirtualEventLoop)
        assert loop._vt_fast is (path == "fast" and not options.get("rate"))
        history = [(r.time, r.priority, r.scheduled) for r in loop.history]
    return result, history


async def _fifo_priorities_and_cancels() -> list[tuple[str, float]]:
    log: list[tuple[str, float]] = []
    loop = asyncio.get_running_loop()

    async def sleeper(name: str, delay: float, priority: int = 0) -> None:
        await virtualtime.sleep(delay, priority=priority)
        log.append((name, loop.time()))

    tasks = [
        asyncio.create_task(sleeper(f"s{i}", 0.1 * (i % 4), priority=-(i % 3))) for i in range(30)
    ]
    doomed = loop.call_later(0.2, log.append, ("never", -1.0))
    loop.call_soon(doomed.cancel)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.25):
            await asyncio.sleep(10)
    log.append(("timeout", loop.time()))
    await asyncio.gather(*tasks)
    for _ in range(10_000):
        await asyncio.sleep(0.1)
    log.append(("sum", loop.time()))
    return log


async def _random_sleepers(seed: int) -> list[tuple[int, float]]:
    rng = random.Random(seed)
    log: list[tuple[int, float]] = []
    loop = asyncio.get_running_loop()

    async def worker(i: int) -> None:
        for _ in range(20):
            await asyncio.sleep(rng.choice([0, 0.001, 0.5, 1 / 3, 7]))
            log.append((i, loop.time()))

    await asyncio.gather(*(worker(i) for i in range(20)))
    return log


@pytest.mark.parametrize("path", ["fast", "general"])
def test_order_cancellation_timeouts_and_sums_on_both_paths(path: str) -> None:
    (log, history) = run_on(path, _fifo_priorities_and_cancels())
    fast_log, fast_history = run_on("fast", _fifo_priorities_and_cancels())
    assert log == fast_log
    assert history == fast_history
    assert ("never", -1.0) not in log
    assert log[-1] == ("sum", 1000.3)  # the last sleeper woke at 0.3, then 10,000 sleeps of 0.1
    assert ("timeout", 0.25) in log


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000))
def test_random_programs_tell_the_same_story_on_both_paths(seed: int) -> None:
    assert run_on("general", _random_sleepers(seed)) == run_on("fast", _random_sleepers(seed))


def test_manual_driving_and_rate_take_the_general_path_and_agree() -> None:
    async def main() -> list[float]:
        seen = []
        for _ in range(5):
            await asyncio.sleep(0.01)
            seen.append(asyncio.get_running_loop().time())
        return seen

    paced, _ = run_on("fast", main(), rate=1000)
    general, _ = run_on("general", main())
    assert paced == general == [0.01, 0.02, 0.03, 0.04, 0.05]


def test_deadlocks_are_reported_alike_on_both_paths() -> None:
    messages = []
    for path in ("fast", "general"):
        with pytest.raises(virtualtime.DeadlockError) as caught:
            run_on(path, asyncio.Event().wait())
        messages.append(str(caught.value).split("\n")[0])
    assert messages[0] == messages[1]


# The canaries for the engine's private assumptions live in tests/test_canaries.py.


def test_a_debug_call_soon_threadsafe_handle_names_its_caller() -> None:
    # The loop overrides call_soon_threadsafe (the outside-work model notes the poke): a
    # debug handle must still point at the caller, as on stock (CPython HandleTests).
    import sys

    loop = virtualtime.new_event_loop()
    loop.set_debug(True)
    try:
        handle = loop.call_soon_threadsafe(print)
        line = sys._getframe().f_lineno - 1
        source = handle._source_traceback[-1]  # type: ignore[attr-defined]
        assert (source.filename, source.lineno) == (__file__, line)
    finally:
        loop.close()


# ----------------------------------------------------------- the plain round's calm


def test_every_kind_of_outside_work_ends_the_calm_the_plain_round_trusts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The plain round skips the outside-work model while nothing has been added since the
    # model last said "quiet"; each kind of addition must end that, and its removal must let
    # the model say "quiet" again.  Worker threads other tests left idle (anyio keeps its own
    # for a while) are not what this is about: the model is told there are none.
    import signal
    import socket
    import threading

    from virtualtime._engine._outside import OutsideWork

    monkeypatch.setattr(OutsideWork, "_foreign_workers", lambda self: False)
    loop = virtualtime.new_event_loop()
    world = loop._vt_world
    try:
        assert world.calm()
        assert world.calm_at == world.changes

        reader, writer = socket.socketpair()
        try:
            loop.add_reader(reader, lambda: None)
            assert world.calm_at != world.changes
            assert not world.calm()
            loop.remove_reader(reader)
            assert world.calm()
        finally:
            reader.close()
            writer.close()

        loop.add_signal_handler(signal.SIGUSR1, lambda: None)
        assert world.calm_at != world.changes
        assert not world.calm()
        loop.remove_signal_handler(signal.SIGUSR1)
        assert world.calm()

        async def job() -> None:
            gate = threading.Event()
            future = loop.run_in_executor(None, gate.wait, 5)
            assert world.calm_at != world.changes
            assert not world.calm()
            gate.set()
            assert await future

        loop.run_until_complete(job())

        before = world.changes
        poker = threading.Thread(target=loop.call_soon_threadsafe, args=(int, "7"))
        poker.start()
        poker.join()
        assert world.changes != before
        assert not world.calm()  # another thread spoke: the model holds time for a grace
        loop._ready.clear()
    finally:
        loop.close()


def test_the_plain_round_waits_for_a_thread_that_starts_mid_run() -> None:
    # Many plain rounds, then a job in a thread: time must stand still until it answers,
    # however long the virtual timers around it are.
    import threading

    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        seen = []
        for _ in range(200):
            await virtualtime.sleep(0.5)
        gate = threading.Event()

        def slow() -> float:
            gate.wait(5)
            return loop.time()

        ticker = asyncio.ensure_future(asyncio.sleep(3600))
        job = loop.run_in_executor(None, slow)
        loop.call_soon(gate.set)
        seen.append(await job)
        seen.append(loop.time())
        ticker.cancel()
        return seen

    for _ in range(50):
        at_job, after = virtualtime.run(main())
        assert at_job == after == 100.0


def test_a_sleep_timer_runs_in_no_context_and_every_other_timer_keeps_its_own() -> None:
    import contextvars

    from virtualtime._engine import _handles
    from virtualtime._engine._timers import SleepTimer

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    seen: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        var.set("task")
        future = loop.create_future()
        sets: Any = asyncio.futures._set_result_unless_cancelled  # type: ignore[attr-defined]
        waker: Any = loop.call_later(1, sets, future, 5)
        plain: Any = loop.call_later(1, lambda: seen.append(var.get()))
        mine = contextvars.copy_context()
        given: Any = loop.call_later(1, sets, loop.create_future(), 6, context=mine)
        # asyncio.sleep's timer is a SleepTimer: a future and a value, no context to run in.
        assert type(waker) is SleepTimer
        assert not hasattr(waker, "_context")
        assert (waker.when(), waker.cancelled()) == (1.0, False)
        assert plain._context is not _handles._WAKE_CONTEXT
        assert given._context is mine  # a context asked for: a real handle
        assert await future == 5
        await asyncio.sleep(1)
        seen.append(var.get())  # the task's own context, untouched by its sleeps

    virtualtime.run(main())
    assert seen == ["task", "task"]
    assert len(_handles._WAKE_CONTEXT) == 0
