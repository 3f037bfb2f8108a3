"""A short run leaves nothing to the cyclic garbage collector (issue 38: no fixed cost per run).

``asyncio.run`` of a small coroutine leaves no reference cycle behind: everything it made is
freed by reference counting the moment it ends.  A run that leaves cycles makes the collector
run every few runs, and now and then over the whole heap -- a tenth or more of the cost of a
short run (a SimPy port, a test).  So a virtual loop lets go of what refers back to it when it
closes, and a kit process of its task when it ends; these tests pin that.  (Some of the kit's
objects still make cycles -- a granted request and its waiter; in ``order="simpy"`` each event
and the kit object it stands for, and the simulation and its core -- which the collector
frees; the model here uses none of them.)
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import math
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import virtualtime
from virtualtime import sim


@pytest.fixture
def no_collector() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _garbage_of(run: Callable[[], object]) -> list[Any]:
    """The run's objects (virtualtime's, asyncio's) that ``run()`` left as cyclic garbage.

    Only those: a thread left over by an earlier test of this process may be making garbage
    of its own meanwhile.
    """
    run()  # the first run may fill caches
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        run()
        gc.collect()
        return [obj for obj in gc.garbage if type(obj).__module__.startswith(_OURS)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


_OURS = ("virtualtime", "asyncio", "_asyncio", "anyio")


async def _empty() -> None:
    pass


async def _model() -> int:
    async def worker(delay: float) -> float:
        await sim.sleep(delay)
        return delay

    first = sim.start(worker(1))
    for delay in (2, 3):
        sim.start(worker(delay))
    return int(await first)


def _with_runner() -> None:
    with asyncio.Runner(loop_factory=virtualtime.new_event_loop) as runner:
        runner.run(_empty())


RUNS = {
    "virtualtime.run": lambda: virtualtime.run(_empty()),
    "anyio_run-asyncio": lambda: virtualtime.anyio_run(_empty),
    "Runner": _with_runner,
    "new_event_loop-close": lambda: virtualtime.new_event_loop().close(),
    "simulate-empty": lambda: sim.simulate(_empty),
    "simulate-model": lambda: sim.simulate(_model),
}


@pytest.mark.parametrize("name", list(RUNS))
def test_a_short_run_on_asyncio_leaves_no_cyclic_garbage(name: str) -> None:
    garbage = _garbage_of(RUNS[name])
    kinds = sorted({type(obj).__qualname__ for obj in garbage})
    assert not garbage, f"{len(garbage)} objects left to the collector: {kinds}"


def test_the_loop_is_freed_as_its_run_ends(no_collector: None) -> None:
    refs: list[weakref.ref[asyncio.AbstractEventLoop]] = []

    async def main() -> None:
        refs.append(weakref.ref(asyncio.get_running_loop()))

    virtualtime.run(main())
    assert refs[0]() is None


def test_a_closed_loop_still_answers_as_a_closed_loop() -> None:
    loop = virtualtime.new_event_loop()
    loop.set_debug(True)
    loop.close()
    assert loop.get_debug() is True
    assert loop.is_closed()
    assert isinstance(loop.create_future(), asyncio.Future)
    with pytest.raises(RuntimeError, match="closed"):
        loop.call_soon(print)
    with pytest.raises(RuntimeError, match="closed"):
        loop.call_later(1, print)
    with pytest.raises(RuntimeError, match="closed"):
        loop.call_soon_threadsafe(print)
    loop.close()  # twice is fine, as on a stock loop


def test_options_checked_once_are_not_checked_again_but_others_are() -> None:
    from virtualtime import trio as virtual_trio

    checked = virtualtime.LoopOptions.of({"start": 5})
    loop = virtualtime.new_event_loop(checked)  # (taken as it is)
    assert loop.time() == 5.0
    loop.close()
    assert checked == virtualtime.LoopOptions(start=5.0)  # the mark is no field
    assert repr(checked) == repr(virtualtime.LoopOptions(start=5.0))
    # Made directly, or replaced field by field: checked when used, as before.
    with pytest.raises(ValueError, match="start"):
        virtualtime.new_event_loop(virtualtime.LoopOptions(start=math.nan))
    with pytest.raises(ValueError, match="start"):
        virtual_trio.VirtualClock(dataclasses.replace(checked, start=math.nan))
    with pytest.raises(TypeError, match="history"):
        virtual_trio.VirtualClock(virtualtime.LoopOptions.of({"history": 3}))
