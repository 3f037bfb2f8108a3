"""The toolkit's fast paths (virtualtime/sim/_fast.py): waits that skip a loop round.

A kit wait whose instant is the next thing the virtual loop would do anyway moves the clock in
place instead of taking a loop round.  These tests pin the loop state the decision reads (a
canary: if the loop is reorganised they fail by name instead of the fast path silently
switching off), prove each refusal, and prove the same model gives the same run with the
shortcut and without it (``history=`` turns it off, since a kept history must see every timer).
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

import virtualtime
from virtualtime import sim
from virtualtime._engine import _outside
from virtualtime.sim import _fast


@pytest.fixture(autouse=True)
def _no_foreign_worker_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about the jump's own rule, in a process with no other worker threads.

    An earlier test may leave a pool's idle worker alive (Dask keeps one); the loop then,
    rightly, never calls its world quiet, and no wait would skip its round.  That refusal has
    its own test below.
    """
    monkeypatch.setattr(_outside, "_worker_threads", lambda: ())


def test_a_live_pool_worker_of_another_pool_turns_the_shortcut_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.undo()  # the real thread table
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(lambda: None).result()  # the worker now idles in the pool, alive
        _fast._skipped = 0
        jumped, _ = virtualtime.run(_jump(2_500_000_000)())
    assert jumped is False


def test_canary_the_loop_state_the_jump_reads() -> None:
    loop = virtualtime.new_event_loop()
    try:
        loop.call_later(1.0, lambda: None)
        missing = [
            name
            for name in (
                "_ready",
                "_vt_heap",
                "_vt_ticks",
                "_vt_drives",
                "_vt_fast",
                "_stopping",
                "_debug",
                "_vt_history",
                "_vt_world",
                "_vt_set_ticks",
            )
            if not hasattr(loop, name)
        ]
        assert not missing, (
            f"VirtualEventLoop no longer has {missing}: sim/_fast.py:jump_to reads them to "
            "decide whether a wait can skip its loop round; update it to the loop's new state"
        )
        ticks, _priority, _seq, handle = loop._vt_heap[0]
        layout = "VirtualEventLoop._vt_heap entries are (ticks, priority, seq, handle): see jump_to"
        assert ticks == 1_000_000_000, layout
        assert isinstance(handle, asyncio.TimerHandle), layout
        assert callable(loop._vt_world.quiet)
    finally:
        loop.close()


def _jump(ticks: int) -> Any:
    async def main() -> tuple[bool, float]:
        loop = asyncio.get_running_loop()
        return _fast.jump_to(loop, ticks, None), loop.time()

    return main


def test_a_wait_with_nothing_before_it_moves_the_clock_in_place() -> None:
    _fast._skipped = 0
    assert virtualtime.run(_jump(2_500_000_000)()) == (True, 2.5)


@pytest.mark.parametrize(
    "setup",
    ["timer before", "timer at the same instant", "ready callback", "same instant"],
)
def test_a_wait_does_not_jump_over_anything_else(setup: str) -> None:
    async def main() -> tuple[bool, float]:
        loop = asyncio.get_running_loop()
        if setup == "timer before":
            loop.call_later(1.0, lambda: None)
        elif setup == "timer at the same instant":
            loop.call_later(2.0, lambda: None)
        elif setup == "ready callback":
            loop.call_soon(lambda: None)
        ticks = 0 if setup == "same instant" else 2_000_000_000
        return _fast.jump_to(loop, ticks, None), loop.time()

    _fast._skipped = 0
    assert virtualtime.run(main()) == (False, 0.0)


@pytest.mark.parametrize("options", [{"history": 10}, {"debug": True}, {"autojump": False}])
def test_no_jump_when_the_loop_must_see_every_timer(options: dict[str, Any]) -> None:
    _fast._skipped = 0
    debug = options.pop("debug", False)
    loop = virtualtime.new_event_loop(**options)
    loop.set_debug(debug)
    try:
        jumped, now = loop.run_until_complete(_jump(2_000_000_000)())
    finally:
        loop.close()
    assert (jumped, now) == (False, 0.0)


def test_no_jump_on_a_stock_loop_or_for_a_task_being_cancelled() -> None:
    assert asyncio.run(_jump(2_000_000_000)())[0] is False

    async def cancelled() -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        await sim.sleep(1)  # the cancellation is delivered here, not skipped over

    async def main() -> None:
        async with sim.Simulation():
            with pytest.raises(asyncio.CancelledError):
                await cancelled()

    virtualtime.run(main())


def test_one_wait_in_a_while_takes_the_round_anyway() -> None:
    async def main() -> int:
        loop = asyncio.get_running_loop()
        jumps = 0
        for k in range(1, 2 * _fast._ROUND_EVERY + 1):
            jumps += _fast.jump_to(loop, k * 1000, None)
        return jumps

    _fast._skipped = 0
    assert virtualtime.run(main()) == 2 * _fast._ROUND_EVERY - 2


def _model(**options: Any) -> list[tuple[float, str]]:
    """Timers at their own instants, a queue, interrupts, vehicles: a log of what happened."""
    log: list[tuple[float, str]] = []
    rng = random.Random(7)

    async def customer(name: str, counter: sim.Resource) -> None:
        async with counter.request():
            log.append((sim.now(), f"{name} served"))
            await sim.sleep(rng.expovariate(1.0))

    async def pest(victim: sim.Process[Any]) -> None:
        await sim.sleep(2.5)
        victim.interrupt("boo")

    async def sleeper() -> None:
        try:
            await sim.sleep(100)
        except sim.Interrupt as exc:
            log.append((sim.now(), f"interrupted {exc.cause}"))

    async def main() -> None:
        counter = sim.Resource(1)
        sim.start(pest(sim.start(sleeper())))

        def tick(action: sim.PeriodicAction, timer: sim.Timer) -> None:
            log.append((timer.time, f"tick {action.period}"))

        timer = sim.Timer(
            *(sim.PeriodicAction(tick, start=1 + k / 7, period=3 + k / 10) for k in range(3))
        )
        sim.start(timer.run(12))
        van = sim.Vehicle(sim.Euclidean(), position=(0.0, 0.0), velocity=3.0, step_size=1.0)
        async with sim.Fleet(van):
            journey = van.travel_to((10.0, 0.0))
            for k in range(20):
                sim.start(customer(f"c{k}", counter))
                await sim.sleep(rng.expovariate(1.2))
            outcome = await journey
            log.append((outcome.ended, f"van {outcome.status.value}"))

    sim.simulate(main, **options)
    return log


def test_the_same_model_runs_the_same_with_and_without_skipped_rounds() -> None:
    _fast._skipped = 0
    fast = _model()
    skipped = _fast._skipped
    assert skipped > 10  # waits that took no loop round
    assert len(fast) > 30
    assert {(2.5, "interrupted boo"), (3.33333333, "van arrived")} <= set(fast)
    assert fast == _model(history=100_000)
    assert _fast._skipped == skipped  # with a history kept, no wait skipped its round
