"""anyio's sleep takes virtualtime.sleep on the virtual loop and tells the same story.

On a virtual loop ``anyio.sleep(delay)`` awaits :func:`virtualtime.sleep` instead of
``AsyncIOBackend.sleep`` -> ``asyncio.sleep`` (``virtualtime/_engine/_anyio_sleep.py``).  The
oracle is anyio's own path, which the loop below forces: every random program of anyio
sleeps, cancel scopes, ``move_on_after``, ``fail_after``, ``sleep_until``, ``asyncio.timeout``
and plain asyncio and virtualtime sleeps must give the same log -- instants, same-instant
order, timers fired and live timers -- either way, on the fast path and on the general path
(and, with ``VIRTUALTIME_PURE_PYTHON=1``, without the compiled core).  Live timers, not the
heap's length or its count of cancelled timers: a dead native entry is never counted and
waits in the heap until the loop finds it, while a cancelled ``asyncio.sleep`` timer is
counted and purged, so the two leave the heap at different rounds.
"""

from __future__ import annotations

import asyncio
import math
import random
import threading
import types
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import anyio._backends._asyncio as anyio_asyncio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import virtualtime
from virtualtime._engine import _anyio_sleep, _compiled, _control
from virtualtime._engine._loop import VirtualEventLoop


class StockAnyioSleepLoop(VirtualEventLoop):
    """The oracle: anyio's sleep takes anyio's own path (asyncio.sleep) on this loop."""

    def _vt_update_fast(self) -> None:
        super()._vt_update_fast()
        self._vt_native_sleep = False


class GeneralPathLoop(VirtualEventLoop):
    """Never the fast path: every idle moment asks the outside-work model."""

    def _vt_update_fast(self) -> None:
        super()._vt_update_fast()
        self._vt_fast = False
        self._vt_plain = False


class GeneralPathStockAnyioSleepLoop(GeneralPathLoop, StockAnyioSleepLoop):
    """The general path and anyio's own sleep."""


LOOPS: dict[tuple[str, bool], type[VirtualEventLoop]] = {
    ("fast", True): VirtualEventLoop,
    ("fast", False): StockAnyioSleepLoop,
    ("general", True): GeneralPathLoop,
    ("general", False): GeneralPathStockAnyioSleepLoop,
}


def run_anyio(
    program: Callable[[], Coroutine[Any, Any, Any]], loop_class: type[VirtualEventLoop]
) -> Any:
    return anyio.run(program, backend="asyncio", backend_options={"loop_factory": loop_class})


def chain(coro: Any) -> list[object]:
    """What a suspended coroutine awaits, level by level: code objects, then the future's type."""
    levels: list[object] = []
    while coro is not None:
        code = getattr(coro, "cr_code", None)
        levels.append(code if code is not None else type(coro))
        coro = getattr(coro, "cr_await", None)
    return levels


_BACKEND_SLEEP = vars(anyio_asyncio.AsyncIOBackend)["sleep"].__func__
ANYIOS_PATH: list[object] = [
    getattr(_BACKEND_SLEEP, "__wrapped__", _BACKEND_SLEEP).__code__,  # anyio's own method
    asyncio.sleep.__code__,
]
"""The last two levels of a sleep that took anyio's own path, above its future."""


ANYIO_SLEEP: object = anyio.sleep.__code__


def takes_native_sleep(levels: list[object]) -> bool:
    """Did the chain take virtualtime.sleep?  The compiled core's Sleep stands just above its
    future; the pure-Python one keeps no level of its own, so anyio's ``sleep`` awaits the
    future's iterator directly."""
    if _compiled.core is not None:
        return levels[-2] is _compiled.core.Sleep
    return levels[-2] is ANYIO_SLEEP and getattr(levels[-1], "__name__", "") == "FutureIter"


def random_anyio_program(seed: int) -> Callable[[], Coroutine[Any, Any, list[Any]]]:
    async def program() -> list[Any]:
        rng = random.Random(seed)
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualEventLoop)
        log: list[Any] = []

        async def one_wait(i: int, step: int) -> None:
            delay = rng.choice([0, 0, 0.001, 0.25, 1 / 3, 1.0, 7, 1e-12])
            how = rng.random()
            if how < 0.15:
                with anyio.move_on_after(rng.choice([0, 0.25, 0.5, 2])) as scope:
                    await anyio.sleep(rng.choice([delay, math.inf]))
                log.append((i, step, "moved on", scope.cancelled_caught, loop.time()))
            elif how < 0.25:
                try:
                    with anyio.fail_after(rng.choice([0.25, 0.5, 2])):
                        await anyio.sleep(delay)
                except TimeoutError:
                    log.append((i, step, "failed", loop.time()))
            elif how < 0.32:
                await anyio.sleep_until(anyio.current_time() + delay)
            elif how < 0.38:
                try:
                    async with asyncio.timeout(rng.choice([0, 0.25, 2])):
                        await anyio.sleep(delay)
                except TimeoutError:
                    log.append((i, step, "timeout", loop.time()))
            elif how < 0.44:
                await asyncio.sleep(delay)
            elif how < 0.5:
                await virtualtime.sleep(delay, priority=rng.choice([0, 0, -1, 2]))
            else:
                await anyio.sleep(delay)

        async def worker(i: int, scope: anyio.CancelScope) -> None:
            with scope:
                for step in range(rng.randint(1, 10)):
                    await one_wait(i, step)
                    log.append((i, step, loop.time(), len(loop._vt_timers.live())))
            log.append((i, "done", scope.cancelled_caught, loop.time()))

        scopes = [anyio.CancelScope() for _ in range(10)]
        async with anyio.create_task_group() as group:
            for i, scope in enumerate(scopes):
                group.start_soon(worker, i, scope, name=f"w{i}")
            for scope in rng.sample(scopes, 3):
                loop.call_later(rng.choice([0, 0.25, 1.0, 3.0]), scope.cancel)
        log.append(("end", loop.time(), loop.timers_fired, len(loop._vt_timers.live())))
        return log

    return program


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 100_000))
def test_random_anyio_programs_tell_the_same_story_either_way(seed: int) -> None:
    stories = {key: run_anyio(random_anyio_program(seed), cls) for key, cls in LOOPS.items()}
    oracle = stories[("fast", False)]
    for key, story in stories.items():
        assert story == oracle, key


def test_anyio_sleep_awaits_the_native_sleep_on_a_virtual_loop_only() -> None:
    seen: dict[str, list[object]] = {}

    async def napper() -> None:
        await anyio.sleep(5)

    async def main() -> float:
        async with anyio.create_task_group() as group:
            group.start_soon(napper, name="napper")
            await anyio.sleep(1)
            (task,) = [t for t in asyncio.all_tasks() if t.get_name() == "napper"]
            seen[type(asyncio.get_running_loop()).__name__] = chain(task.get_coro())
        return anyio.current_time()

    assert run_anyio(main, VirtualEventLoop) == 5.0
    assert run_anyio(main, StockAnyioSleepLoop) == 5.0
    assert _anyio_sleep.installed()
    native, stock = seen["VirtualEventLoop"], seen["StockAnyioSleepLoop"]
    assert takes_native_sleep(native), native
    assert ANYIOS_PATH[0] not in native
    assert not takes_native_sleep(stock), stock
    assert stock[-3:-1] == ANYIOS_PATH
    # A stock loop, in another thread while a virtual loop runs here, keeps anyio's path.
    on_stock: list[list[object]] = []

    async def stock_main() -> None:
        task = asyncio.create_task(anyio.sleep(0.001))
        await asyncio.sleep(0)
        on_stock.append(chain(task.get_coro()))
        await task

    async def virtual_main() -> float:
        thread = threading.Thread(target=anyio.run, args=(stock_main,))
        thread.start()
        await anyio.to_thread.run_sync(thread.join)
        await anyio.sleep(2)
        return anyio.current_time()

    assert run_anyio(virtual_main, VirtualEventLoop) >= 2.0
    assert on_stock[0][-3:-1] == ANYIOS_PATH


@pytest.mark.parametrize("why", ["history", "debug", "own call_later", "own create_future"])
def test_anyio_sleep_keeps_its_own_path_where_asyncio_sleep_must_stay_visible(why: str) -> None:
    calls: list[float] = []

    class OwnTimers(VirtualEventLoop):
        def call_later(  # type: ignore[override]
            self, delay: float, *args: Any, **kwargs: Any
        ) -> asyncio.TimerHandle:
            calls.append(delay)
            return super().call_later(delay, *args, **kwargs)

    class OwnFutures(VirtualEventLoop):
        def create_future(self) -> asyncio.Future[Any]:
            calls.append(-1.0)
            return super().create_future()

    def factory() -> VirtualEventLoop:
        if why == "history":
            return virtualtime.new_event_loop(history=100)
        if why == "debug":
            loop = virtualtime.new_event_loop()
            loop.set_debug(True)
            return loop
        return OwnTimers() if why == "own call_later" else OwnFutures()

    async def main() -> tuple[bool, list[object], list[str]]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualEventLoop)
        task = asyncio.create_task(anyio.sleep(1.5), name="sleeper")
        await asyncio.sleep(0)
        names = chain(task.get_coro())
        await task
        history = [r.what for r in loop.history]
        return loop._vt_native_sleep, names, history

    native, names, history = anyio.run(
        main, backend="asyncio", backend_options={"loop_factory": factory}
    )
    assert not native
    assert names[-3:-1] == ANYIOS_PATH
    if why == "history":
        assert "task sleeper" in history
    if why == "own call_later":
        assert 1.5 in calls
    if why == "own create_future":
        assert -1.0 in calls


def test_anyio_sleep_edge_delays_keep_anyios_meaning() -> None:
    async def main() -> list[Any]:
        loop = asyncio.get_running_loop()
        out: list[Any] = []
        await anyio.sleep(0)  # noqa: ASYNC115 - anyio's checkpoint, through anyio.sleep
        out.append(loop.time())
        await anyio.sleep(True)  # not a plain number: anyio's own path, one second
        out.append(loop.time())
        await anyio.sleep(1e-12)  # shorter than a tick: still moves time one nanosecond
        out.append(round((loop.time() - 1) * 1e9))
        with anyio.move_on_after(3):
            await anyio.sleep_forever()
        out.append(loop.time())
        with anyio.move_on_after(1):
            await anyio.sleep(1e300)  # noqa: ASYNC116 - beyond the horizon: never fires
        out.append(loop.time())
        for bad in (-1, math.nan):
            with pytest.raises(ValueError):
                await anyio.sleep(bad)
        out.append(loop.time())
        return out

    assert run_anyio(main, VirtualEventLoop) == run_anyio(main, StockAnyioSleepLoop)
    assert run_anyio(main, VirtualEventLoop) == [0.0, 1.0, 1, 4.000000001, *[5.000000001] * 2]


def test_the_patch_is_made_only_over_the_method_it_knows() -> None:
    async def known(cls: type, delay: float) -> None:
        await asyncio.sleep(delay)

    def not_a_coroutine(cls: type, delay: float) -> None:
        return None

    async def other_signature(cls: type, delay: float, result: object = None) -> None:
        await asyncio.sleep(delay)

    method: object
    for method in (
        staticmethod(known),
        classmethod(not_a_coroutine),
        classmethod(other_signature),
        None,
    ):
        backend = type("AsyncIOBackend", (), {} if method is None else {"sleep": method})
        before = dict(vars(backend))
        assert not _anyio_sleep._install(types.SimpleNamespace(AsyncIOBackend=backend))
        assert dict(vars(backend)) == before
    assert not _anyio_sleep._install(types.SimpleNamespace())
    # A backend of the known shape is patched, and its sleep dispatches as anyio's does.
    saved = dict(_anyio_sleep._state)
    try:
        backend = type("AsyncIOBackend", (), {"sleep": classmethod(known)})
        assert _anyio_sleep._install(types.SimpleNamespace(AsyncIOBackend=backend))
        assert backend.sleep.__wrapped__ is known  # type: ignore[attr-defined]

        async def main() -> tuple[bool, str]:
            on_virtual = backend.sleep(1)  # type: ignore[attr-defined]
            odd = backend.sleep(0)  # type: ignore[attr-defined]
            native = _control.sleep(1)
            kinds = (type(on_virtual) is type(native), odd.cr_code.co_name)
            await asyncio.gather(on_virtual, odd, native)
            return kinds

        assert virtualtime.run(main()) == (True, "known")
    finally:
        _anyio_sleep._state.update(saved)


def test_installing_twice_changes_nothing() -> None:
    assert _anyio_sleep.install()
    method = anyio_asyncio.AsyncIOBackend.__dict__["sleep"]
    assert _anyio_sleep.install()
    assert anyio_asyncio.AsyncIOBackend.__dict__["sleep"] is method


def test_a_fresh_copy_of_the_installer_takes_anyios_patched_class_as_it_is() -> None:
    # A test runner that restores sys.modules (pytester in process) can import this module
    # afresh while anyio's class keeps the patch an earlier copy made: the new copy must see
    # the fast path installed, and wrap nothing twice.
    assert _anyio_sleep.install()
    sleep = anyio_asyncio.AsyncIOBackend.__dict__["sleep"]
    init = anyio_asyncio.CancelScope.__dict__["__init__"]
    saved = dict(_anyio_sleep._state)
    try:
        _anyio_sleep._state.update(backend=None, stock=None, scope_init=None)
        assert _anyio_sleep.install()
        assert _anyio_sleep.installed()
        assert _anyio_sleep.scopes_ordered()
        assert anyio_asyncio.AsyncIOBackend.__dict__["sleep"] is sleep
        assert anyio_asyncio.CancelScope.__dict__["__init__"] is init
        assert _anyio_sleep._state["stock"] is saved["stock"]
        assert _anyio_sleep._state["scope_init"] is saved["scope_init"]
    finally:
        _anyio_sleep._state.update(saved)
