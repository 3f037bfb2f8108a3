"""anyio code behaves the same in virtual time on asyncio (the virtual loop) and on trio.

Every test here runs on both backends: most through :func:`virtualtime.anyio_run`, a few
through anyio's own pytest plugin with an ``anyio_backend`` fixture that supplies the loop
factory or the clock.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import virtualtime
from virtualtime import anyio_run
from virtualtime.trio import VirtualClock

YEAR = 365 * 24 * 3600
BACKENDS = ["asyncio", "trio"]

backends = pytest.mark.parametrize("backend", BACKENDS)


def run_on(backend: str, fn: Callable[..., Awaitable[Any]], *args: Any, **options: Any) -> Any:
    return anyio_run(fn, *args, backend=backend, **options)


def both(fn: Callable[..., Awaitable[Any]], *args: Any, **options: Any) -> Any:
    """Run ``fn`` on both backends, check they agree, return the common result."""
    on_asyncio = run_on("asyncio", fn, *args, **options)
    on_trio = run_on("trio", fn, *args, **options)
    assert on_asyncio == on_trio
    return on_asyncio


# ----------------------------------------------------------- sleeping


async def _sleep_an_hour() -> float:
    await anyio.sleep(3600)
    return anyio.current_time()


@backends
def test_an_hour_is_instant_and_exact(backend: str) -> None:
    t0 = time.perf_counter()
    assert run_on(backend, _sleep_an_hour) == 3600.0
    assert time.perf_counter() - t0 < 0.5


@backends
def test_start_option_sets_current_time(backend: str) -> None:
    async def main() -> float:
        return anyio.current_time()

    assert run_on(backend, main, start=250.0) == 250.0
    assert run_on(backend, _sleep_an_hour, start=250.0) == 3850.0


async def _tenths() -> list[float]:
    seen = []
    for _ in range(10):
        await anyio.sleep(0.1)
        seen.append(anyio.current_time())
    return seen


@backends
def test_ten_sleeps_of_a_tenth_end_at_exactly_one(backend: str) -> None:
    seen = run_on(backend, _tenths)
    assert seen[-1] == 1.0
    # trio adds deadlines in floats (0.2 + 0.1 == 0.30000000000000004) and a clock must not
    # report less than a deadline that fired; so an instant may show one ulp high on trio.
    for k, t in enumerate(seen, start=1):
        assert k / 10 <= t <= math.nextafter(k / 10, math.inf)


async def _sleep_until() -> list[float]:
    seen = []
    await anyio.sleep_until(100.0)
    seen.append(anyio.current_time())
    await anyio.sleep_until(50.0)  # in the past: returns at once, time unchanged
    seen.append(anyio.current_time())
    await anyio.sleep_until(100.5)
    seen.append(anyio.current_time())
    return seen


def test_sleep_until() -> None:
    assert both(_sleep_until) == [100.0, 100.0, 100.5]


async def _a_year() -> list[float]:
    await anyio.sleep(YEAR)
    seen = [anyio.current_time()]
    for _ in range(1000):
        await anyio.sleep(3600)
    seen.append(anyio.current_time())
    await anyio.sleep(0.5)
    seen.append(anyio.current_time())
    return seen


def test_a_year_and_a_thousand_hours() -> None:
    t0 = time.perf_counter()
    assert both(_a_year) == [YEAR, YEAR + 3_600_000, YEAR + 3_600_000.5]
    assert time.perf_counter() - t0 < 2.0


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=5_000), min_size=1, max_size=12))
def test_random_sleeps_land_on_the_same_instants(millis: list[int]) -> None:
    async def main() -> list[float]:
        seen = []
        for ms in millis:
            await anyio.sleep(ms / 1000)
            seen.append(anyio.current_time())
        return seen

    on_asyncio = run_on("asyncio", main)
    on_trio = run_on("trio", main)
    exact = 0
    for ms, a, t in zip(millis, on_asyncio, on_trio, strict=True):
        exact += ms * 1_000_000  # nanoseconds
        assert a == exact / 1e9  # the asyncio loop adds integer nanoseconds
        assert a <= t <= a + 4 * math.ulp(a)  # trio: at most float noise above, never below


# ----------------------------------------------------------- timeouts


async def _timeouts() -> list[tuple[str, float]]:
    log: list[tuple[str, float]] = []
    with anyio.move_on_after(5) as scope:
        await anyio.sleep(10)
    log.append((f"moved on {scope.cancelled_caught}", anyio.current_time()))
    try:
        with anyio.fail_after(2.5):
            await anyio.sleep_forever()
    except TimeoutError:
        log.append(("timed out", anyio.current_time()))
    with anyio.fail_after(10):
        await anyio.sleep(1)
    log.append(("in time", anyio.current_time()))
    with anyio.CancelScope(deadline=anyio.current_time() + 4) as scope:
        log.append(("deadline", anyio.current_effective_deadline()))
        await anyio.sleep_forever()
    log.append(("scope", anyio.current_time()))
    return log


def test_timeouts_fire_at_exact_virtual_instants() -> None:
    assert both(_timeouts) == [
        ("moved on True", 5.0),
        ("timed out", 7.5),
        ("in time", 8.5),
        ("deadline", 12.5),
        ("scope", 12.5),
    ]


async def _fail_after_off_the_tick_grid() -> tuple[bool, bool]:
    await anyio.sleep(0.2)
    timed_out = False
    # 0.2 + 0.1 is 0.30000000000000004 in floats, one ulp above the 0.3 nanosecond tick;
    # anyio raises TimeoutError only if current_time() >= deadline afterwards.
    try:
        with anyio.fail_after(0.1) as scope:
            await anyio.sleep_forever()
    except TimeoutError:
        timed_out = True
    return timed_out, anyio.current_time() >= scope.deadline


@backends
def test_fail_after_with_a_deadline_between_ticks(backend: str) -> None:
    assert run_on(backend, _fail_after_off_the_tick_grid) == (True, True)


async def _after_an_off_grid_deadline() -> float:
    await anyio.sleep(0.2)
    with anyio.move_on_after(0.1):  # deadline 0.30000000000000004: between ticks
        await anyio.sleep_forever()
    await anyio.sleep(0.7)
    return anyio.current_time()


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_off_grid_deadline_does_not_shift_later_instants(backend: str) -> None:
    assert run_on(backend, _after_an_off_grid_deadline) == 1.0


# ----------------------------------------------------------- tasks and streams


async def _task_group() -> list[tuple[str, float]]:
    log: list[tuple[str, float]] = []

    async def sleeper(name: str, delay: float) -> None:
        await anyio.sleep(delay)
        log.append((name, anyio.current_time()))

    async with anyio.create_task_group() as tg:
        tg.start_soon(sleeper, "c", 3.0)
        tg.start_soon(sleeper, "a", 1.0)
        tg.start_soon(sleeper, "b", 2.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(sleeper, "never", 100.0)
        await anyio.sleep(10)
        tg.cancel_scope.cancel()
    log.append(("cancelled", anyio.current_time()))
    return log


def test_task_groups() -> None:
    assert both(_task_group) == [("a", 1.0), ("b", 2.0), ("c", 3.0), ("cancelled", 13.0)]


async def _started_task() -> list[tuple[str, float]]:
    log: list[tuple[str, float]] = []

    async def service(*, task_status: anyio.abc.TaskStatus[float]) -> None:
        await anyio.sleep(2)
        task_status.started(anyio.current_time())
        await anyio.sleep(3)
        log.append(("service done", anyio.current_time()))

    async with anyio.create_task_group() as tg:
        ready_at = await tg.start(service)
        log.append(("started", ready_at))
    return log


def test_task_group_start() -> None:
    assert both(_started_task) == [("started", 2.0), ("service done", 5.0)]


async def _streams() -> list[tuple[int, float]]:
    send, receive = anyio.create_memory_object_stream[int](1)
    got: list[tuple[int, float]] = []

    async def producer() -> None:
        async with send:
            for i in range(4):
                await anyio.sleep(0.25)
                await send.send(i)

    async with anyio.create_task_group() as tg:
        tg.start_soon(producer)
        async with receive:
            async for item in receive:
                got.append((item, anyio.current_time()))
                await anyio.sleep(1)  # slow consumer: the buffer of 1 applies back-pressure
    return got


def test_memory_object_streams() -> None:
    assert both(_streams) == [(0, 0.25), (1, 1.25), (2, 2.25), (3, 3.25)]


async def _event_with_timeout() -> list[tuple[str, float]]:
    log: list[tuple[str, float]] = []
    event = anyio.Event()

    async def setter() -> None:
        await anyio.sleep(7)
        event.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(setter)
        with anyio.move_on_after(5):
            await event.wait()
        log.append((f"gave up {event.is_set()}", anyio.current_time()))
        await event.wait()
        log.append(("set", anyio.current_time()))
    return log


def test_events_and_timeouts() -> None:
    assert both(_event_with_timeout) == [("gave up False", 5.0), ("set", 7.0)]


# ----------------------------------------------------------- worker threads


async def _thread_job() -> list[tuple[str, float]]:
    log: list[tuple[str, float]] = []

    async def ticker() -> None:
        await anyio.sleep(0.5)
        log.append(("ticker", anyio.current_time()))

    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        with anyio.fail_after(0.1):
            # real-time: the thread really takes 50 ms; virtual time must stand still, so
            # the 0.1 s virtual timeout (and the 0.5 s ticker) cannot overtake it.
            result = await anyio.to_thread.run_sync(_slow_square, 7)
        log.append((f"thread {result}", anyio.current_time()))
    return log


def _slow_square(x: int) -> int:
    time.sleep(0.05)  # real-time: see _thread_job
    return x * x


def test_time_stands_still_while_a_worker_thread_runs() -> None:
    assert both(_thread_job) == [("thread 49", 0.0), ("ticker", 0.5)]


async def _thread_calls_back() -> float:
    await anyio.to_thread.run_sync(anyio.from_thread.run, anyio.sleep, 5.0)
    return anyio.current_time()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_thread_waiting_on_an_anyio_sleep_lets_time_move(backend: str) -> None:
    assert run_on(backend, _thread_calls_back) == 5.0


async def _sleep_beside_a_new_silent_thread() -> tuple[float, float]:
    release = threading.Event()
    quiet = threading.Thread(target=release.wait)
    quiet.start()
    try:
        real = time.monotonic()
        await anyio.sleep(3600)
        return anyio.current_time(), time.monotonic() - real
    finally:
        release.set()
        quiet.join()


@backends
def test_a_new_thread_that_never_speaks_holds_time_only_for_the_grace(backend: str) -> None:
    # A thread that starts during the run may be about to speak (a client about to connect):
    # time stands still for THREAD_GRACE real seconds, then the timer fires at its instant.
    from virtualtime._shared._threads import THREAD_GRACE

    virtual, real = run_on(backend, _sleep_beside_a_new_silent_thread)
    assert virtual == 3600.0
    assert real >= THREAD_GRACE * 0.9


# ----------------------------------------------------------- deadlocks and errors


async def _deadlocked() -> None:
    await anyio.sleep(1)
    await anyio.Event().wait()


@backends
def test_a_deadlock_raises_instead_of_hanging(backend: str) -> None:
    t0 = time.perf_counter()
    with pytest.raises(virtualtime.DeadlockError, match=r"t=1\.0") as info:
        run_on(backend, _deadlocked, deadlock_timeout=0)
    assert time.perf_counter() - t0 < 1.0
    assert any(
        "_deadlocked" in name or "_deadlocked" in where for name, where in info.value.blocked
    )


async def _add_later(a: int, b: int) -> int:
    await anyio.sleep(1)
    return a + b


async def _fail_later() -> None:
    await anyio.sleep(1)
    raise LookupError("from main")


@backends
def test_arguments_results_and_exceptions_pass_through(backend: str) -> None:
    assert run_on(backend, _add_later, 20, 22) == 42
    with pytest.raises(LookupError, match="from main"):
        run_on(backend, _fail_later)


def test_unknown_backend_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="backend must be 'asyncio' or 'trio', got 'curio'"):
        anyio_run(_sleep_an_hour, backend="curio")


@pytest.mark.parametrize(
    ("option", "value"),
    [("history", 10), ("max_rounds_per_instant", 10)],
)
def test_asyncio_only_options_are_refused_on_trio(option: str, value: object) -> None:
    with pytest.raises(TypeError, match=f"option {option} exists only on the asyncio loop"):
        anyio_run(_sleep_an_hour, backend="trio", **{option: value})


@backends
def test_unknown_options_are_type_errors(backend: str) -> None:
    with pytest.raises(TypeError, match="speed"):
        anyio_run(_sleep_an_hour, backend=backend, speed=2)


@backends
def test_bad_option_values_name_the_option(backend: str) -> None:
    with pytest.raises(ValueError, match="rate must be >= 0"):
        anyio_run(_sleep_an_hour, backend=backend, rate=-1)
    with pytest.raises(ValueError, match="start must be finite"):
        anyio_run(_sleep_an_hour, backend=backend, start=math.nan)


def test_asyncio_only_options_work_on_asyncio() -> None:
    assert anyio_run(_sleep_an_hour, backend="asyncio", history=5) == 3600.0


# ----------------------------------------------------------- anyio's pytest plugin


@pytest.fixture(params=BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """Both backends in virtual time, for anyio's pytest plugin; a fresh clock per test."""
    if request.param == "asyncio":
        return ("asyncio", {"loop_factory": virtualtime.new_event_loop})
    return ("trio", {"clock": VirtualClock()})


@pytest.mark.anyio
async def test_plugin_runs_tests_in_virtual_time() -> None:
    start = anyio.current_time()
    t0 = time.perf_counter()
    await anyio.sleep(YEAR)
    assert anyio.current_time() - start == YEAR
    assert time.perf_counter() - t0 < 0.5


@pytest.mark.anyio
async def test_plugin_timeouts_and_threads() -> None:
    start = anyio.current_time()
    with anyio.move_on_after(30) as scope:
        await anyio.sleep_forever()
    assert scope.cancelled_caught
    assert anyio.current_time() - start == 30
    with anyio.fail_after(1):
        # real-time: a 20 ms thread job must not lose to a 1 s virtual timeout.
        await anyio.to_thread.run_sync(time.sleep, 0.02)
    assert anyio.current_time() - start == 30
