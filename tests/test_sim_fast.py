"""The toolkit's fast paths (virtualtime/sim/_fast.py): waits that skip a loop round.

A kit wait whose instant is the next thing the virtual loop would do anyway moves the clock in
place instead of taking a loop round.  These tests pin the loop state the decision reads (a
canary: if the loop is reorganised they fail by name instead of the fast path silently
switching off), prove each refusal, and prove the same model gives the same run with the
shortcut and without it (``history=`` turns it off, since a kept history must see every timer).
"""

from __future__ import annotations

import asyncio
import importlib.util
import random
import sys
from typing import Any

import pytest

import virtualtime
from virtualtime import sim
from virtualtime._engine import _loop, _outside, _waits
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
        jumped, _ = virtualtime.run(_jump(2_500_000_000)())
    assert jumped is False


def test_canary_the_loop_method_the_jump_calls() -> None:
    loop = virtualtime.new_event_loop()
    try:
        missing = [
            name
            for name in ("_vt_jump_to", "_vt_jump_by")
            if not callable(getattr(loop, name, None))
        ]
        assert not missing, (
            f"VirtualEventLoop no longer has {missing}: sim/_fast.py:jump_to/jump_by call them "
            "to decide whether a wait can skip its loop round; update them to the loop's new API"
        )
        assert loop._vt_skipped == 0  # the one-in-JUMP_ROUND_EVERY count is the loop's own
    finally:
        loop.close()


def test_the_round_count_is_per_loop() -> None:
    async def main(waits: int) -> int:
        loop = asyncio.get_running_loop()
        return sum(_fast.jump_to(loop, k * 1000, None) for k in range(1, waits + 1))

    every = _waits.JUMP_ROUND_EVERY
    # Another loop's waits do not bring this loop's round forward: each fresh loop jumps
    # every-1 times in a row before it takes its round.
    assert virtualtime.run(main(every - 1)) == every - 1
    assert virtualtime.run(main(every)) == every - 1


def test_jump_by_is_jump_to_the_instant_call_later_would_fire_at() -> None:
    async def main() -> tuple[bool, float, bool, bool]:
        loop = asyncio.get_running_loop()
        jumped = _fast.jump_by(loop, 0.25, None)
        now = loop.time()
        return jumped, now, _fast.jump_by(loop, 0, None), _fast.jump_by(loop, 1e18, None)

    assert virtualtime.run(main()) == (True, 0.25, False, False)


def _jump(ticks: int) -> Any:
    async def main() -> tuple[bool, float]:
        loop = asyncio.get_running_loop()
        return _fast.jump_to(loop, ticks, None), loop.time()

    return main


def test_a_wait_with_nothing_before_it_moves_the_clock_in_place() -> None:
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

    assert virtualtime.run(main()) == (False, 0.0)


@pytest.mark.parametrize("options", [{"history": 10}, {"debug": True}, {"autojump": False}])
def test_no_jump_when_the_loop_must_see_every_timer(options: dict[str, Any]) -> None:
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
        for k in range(1, 2 * _waits.JUMP_ROUND_EVERY + 1):
            jumps += _fast.jump_to(loop, k * 1000, None)
        return jumps

    assert virtualtime.run(main()) == 2 * _waits.JUMP_ROUND_EVERY - 2


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


def test_the_same_model_runs_the_same_with_and_without_skipped_rounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    skipped = 0
    jump_to = _loop.VirtualEventLoop._vt_jump_to

    def counting(self: _loop.VirtualEventLoop, ticks: int, task: Any) -> bool:
        nonlocal skipped
        jumped = jump_to(self, ticks, task)
        skipped += jumped
        return jumped

    monkeypatch.setattr(_loop.VirtualEventLoop, "_vt_jump_to", counting)
    fast = _model()
    assert skipped > 10  # waits that took no loop round
    assert len(fast) > 30
    assert {(2.5, "interrupted boo"), (3.33333333, "van arrived")} <= set(fast)
    before = skipped
    assert fast == _model(history=100_000)
    assert skipped == before  # with a history kept, no wait skipped its round


def test_the_kit_fails_loudly_when_the_loop_module_it_takes_the_waker_from_is_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The kit's waits schedule the loop's own waker, which the loop resolves in timer order;
    # a stand-in the loop does not recognise would silently cost every wake-up a trip through
    # the ready queue.  So a reorganised engine must break the kit's import, not be papered
    # over: run _fast.py afresh with the waker's home module gone.
    home = _fast.set_result.__module__
    assert home.startswith("virtualtime._engine.")
    monkeypatch.setitem(sys.modules, home, None)
    spec = importlib.util.spec_from_file_location("virtualtime.sim._fast_again", _fast.__file__)
    assert spec is not None
    assert spec.loader is not None
    again = importlib.util.module_from_spec(spec)
    with pytest.raises(ImportError, match=home):
        spec.loader.exec_module(again)
