"""virtualtime.trio.VirtualClock: exact, instant trio time built on trio's public API only."""

from __future__ import annotations

import math
import random
import socket
import threading
import time
import types
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

import virtualtime
import virtualtime.trio
from virtualtime.trio import VirtualClock

YEAR = 365 * 24 * 3600


class FakeRealClock:
    """A real clock that only moves when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def trio_run(fn: Callable[..., Awaitable[Any]], *args: Any, **options: Any) -> Any:
    """Plain ``trio.run`` with a fresh VirtualClock."""
    return trio.run(fn, *args, clock=VirtualClock(**options))


# ----------------------------------------------------------- the clock without a loop


def test_public_namespace_is_exactly_all() -> None:
    public = {
        name
        for name, value in vars(virtualtime.trio).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert virtualtime.trio.__all__ == ("RunGuard", "VirtualClock", "run")
    assert public == set(virtualtime.trio.__all__)
    for name in virtualtime.trio.__all__:
        assert len((getattr(virtualtime.trio, name).__doc__ or "").strip()) > 100


def test_defaults_and_repr() -> None:
    clock = VirtualClock()
    assert clock.current_time() == 0.0
    assert (clock.rate, clock.autojump, clock.autojump_threshold) == (0.0, True, 0.0)
    assert clock.deadlock_timeout == 0.25
    text = repr(clock)
    assert "VirtualClock" in text
    assert "time=0.0" in text
    assert "rate=0.0" in text
    assert "autojump=True" in text


def test_start_option() -> None:
    assert VirtualClock(start=12.5).current_time() == 12.5
    assert "time=12.5" in repr(VirtualClock(start=12.5))


@pytest.mark.parametrize(
    ("option", "value", "error", "needle"),
    [
        ("start", -1.0, ValueError, "start must be >= 0"),
        ("start", math.nan, ValueError, "start must be finite"),
        ("start", math.inf, ValueError, "start must be finite"),
        ("start", "0", TypeError, "start must be a real number"),
        ("start", True, TypeError, "start must be a real number"),
        ("autojump", 1, TypeError, "autojump must be True or False"),
        ("autojump_threshold", -0.5, ValueError, "autojump_threshold must be >= 0"),
        ("autojump_threshold", math.inf, ValueError, "autojump_threshold must be finite"),
        ("rate", -1.0, ValueError, "rate must be >= 0"),
        ("rate", math.nan, ValueError, "rate must be finite"),
        ("deadlock_timeout", -1.0, ValueError, "deadlock_timeout must be >= 0"),
    ],
)
def test_bad_options_are_refused_by_name(
    option: str, value: object, error: type[Exception], needle: str
) -> None:
    with pytest.raises(error, match=needle):
        VirtualClock(**{option: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("attribute", "value", "error"),
    [
        ("rate", -2.0, ValueError),
        ("autojump", "yes", TypeError),
        ("autojump_threshold", math.nan, ValueError),
        ("deadlock_timeout", -0.1, ValueError),
    ],
)
def test_bad_settings_leave_the_clock_unchanged(
    attribute: str, value: object, error: type[Exception]
) -> None:
    clock = VirtualClock(start=3.0)
    before = (clock.rate, clock.autojump, clock.autojump_threshold, clock.deadlock_timeout)
    with pytest.raises(error, match=attribute):
        setattr(clock, attribute, value)
    after = (clock.rate, clock.autojump, clock.autojump_threshold, clock.deadlock_timeout)
    assert after == before
    assert clock.current_time() == 3.0


@pytest.mark.parametrize(
    ("seconds", "error"),
    [(-1.0, ValueError), (math.nan, ValueError), (math.inf, ValueError), ("1", TypeError)],
)
def test_jump_refuses_backwards_and_non_finite(seconds: object, error: type[Exception]) -> None:
    clock = VirtualClock(start=5.0)
    with pytest.raises(error, match="seconds"):
        clock.jump(seconds)  # type: ignore[arg-type]
    with pytest.raises(error, match="seconds"):
        clock.fast_forward(seconds)  # type: ignore[arg-type]
    assert clock.current_time() == 5.0


def test_jumps_add_up_exactly() -> None:
    clock = VirtualClock()
    for _ in range(10):
        clock.jump(0.1)
    assert clock.current_time() == 1.0
    clock.fast_forward(0.0)
    assert clock.current_time() == 1.0
    for _ in range(10_000):
        clock.jump(0.1)
    assert clock.current_time() == 1001.0


def test_a_jump_shorter_than_a_tick_still_moves_time() -> None:
    clock = VirtualClock()
    clock.jump(1e-12)
    assert clock.current_time() == virtualtime.RESOLUTION


def test_rate_arithmetic_with_a_fake_real_clock() -> None:
    real = FakeRealClock()
    clock = VirtualClock(start=10.0)
    clock._use_real_clock(real)
    real.now += 5.0
    assert clock.current_time() == 10.0  # rate 0: real time does not matter

    clock.rate = 2.0
    assert clock.current_time() == 10.0  # a rate change never jumps
    real.now += 1.5
    assert clock.current_time() == 13.0
    clock.jump(7.0)
    assert clock.current_time() == 20.0

    clock.rate = 0.5  # re-anchored at 20.0
    assert clock.current_time() == 20.0
    real.now += 4.0
    assert clock.current_time() == 22.0

    clock.rate = 0.0  # back to pure virtual time, frozen where it was
    assert clock.current_time() == 22.0
    real.now += 100.0
    assert clock.current_time() == 22.0
    clock.jump(0.5)
    assert clock.current_time() == 22.5


def test_leaving_rate_mode_never_steps_back() -> None:
    real = FakeRealClock()
    clock = VirtualClock()
    clock._use_real_clock(real)
    clock.rate = 3.0
    real.now += 0.1234567891234  # not a whole number of nanoseconds of virtual time
    during = clock.current_time()
    clock.rate = 0.0
    assert clock.current_time() >= during
    assert clock.current_time() - during < 2 * virtualtime.RESOLUTION


def test_deadline_to_sleep_time_in_rate_mode() -> None:
    real = FakeRealClock()
    clock = VirtualClock()
    clock._use_real_clock(real)
    clock.rate = 4.0
    assert clock.deadline_to_sleep_time(8.0) == 2.0
    assert clock.deadline_to_sleep_time(0.0) == 0.0
    real.now += 1.0
    assert clock.deadline_to_sleep_time(8.0) == 1.0
    assert clock.deadline_to_sleep_time(3.0) == 0.0


# ----------------------------------------------------------- trio.run in virtual time


async def _sleep_an_hour() -> float:
    await trio.sleep(3600)
    return trio.current_time()


def test_an_hour_passes_instantly_and_exactly() -> None:
    t0 = time.perf_counter()
    assert trio_run(_sleep_an_hour) == 3600.0
    assert time.perf_counter() - t0 < 0.5


async def _ten_tenths() -> list[float]:
    seen = []
    for _ in range(10):
        await trio.sleep(0.1)
        seen.append(trio.current_time())
    return seen


def test_ten_sleeps_of_a_tenth_end_at_exactly_one() -> None:
    seen = trio_run(_ten_tenths)
    assert seen[-1] == 1.0
    assert seen == sorted(seen)
    # Each instant is the tenth it means, at worst a float ulp above (never below).
    for i, t in enumerate(seen, start=1):
        assert i / 10 <= t <= math.nextafter(i / 10, math.inf)


def test_start_shifts_the_clock() -> None:
    assert trio_run(_sleep_an_hour, start=100.0) == 3700.0


async def _tiny_sleeps() -> tuple[float, float]:
    await trio.sleep(1e-7)
    after_tenth_of_a_microsecond = trio.current_time()
    await trio.sleep(1e-12)
    return after_tenth_of_a_microsecond, trio.current_time()


def test_tiny_sleeps_advance_time() -> None:
    first, second = trio_run(_tiny_sleeps)
    assert first == 1e-7
    assert second > first  # shorter than a tick, still moves: time never freezes


async def _a_year_then_hours() -> list[float]:
    await trio.sleep(YEAR)
    seen = [trio.current_time()]
    for _ in range(1000):
        await trio.sleep(3600)
    seen.append(trio.current_time())
    return seen


def test_long_horizons_stay_exact() -> None:
    t0 = time.perf_counter()
    assert trio_run(_a_year_then_hours) == [YEAR, YEAR + 3_600_000]
    assert time.perf_counter() - t0 < 1.0


async def _far_then_small_sleeps(delay: float, count: int) -> float:
    await trio.sleep(100 * YEAR)
    for _ in range(count):
        await trio.sleep(delay)
    return trio.current_time()


@pytest.mark.parametrize(("delay", "count"), [(0.1, 10), (0.01, 100), (0.25, 4)])
def test_far_horizons_never_report_early_and_barely_late(delay: float, count: int) -> None:
    # Near 3e9 s floats are ~0.5 us apart and trio adds deadlines in floats, so the time it
    # is handed can sit a few ulps above the exact instant.  The clock never reports earlier
    # than the exact instant (nor than a deadline that fired), and no later than that noise.
    exact = 100 * YEAR + 1.0
    reached = trio_run(_far_then_small_sleeps, delay, count)
    assert exact <= reached <= exact + count * math.ulp(exact)


async def _sleep_almost_forever() -> float:
    await trio.sleep(1e300)  # noqa: ASYNC116 - a finite, astronomically long sleep on purpose
    return trio.current_time()


def test_an_astronomical_sleep_is_one_jump() -> None:
    assert trio_run(_sleep_almost_forever) == 1e300


async def _timeouts() -> list[tuple[str, float]]:
    log: list[tuple[str, float]] = []
    with trio.move_on_after(5):
        await trio.sleep(10)
    log.append(("moved on", trio.current_time()))
    try:
        with trio.fail_after(2.5):
            await trio.sleep_forever()
    except trio.TooSlowError:
        log.append(("too slow", trio.current_time()))
    await trio.sleep_until(100.0)
    log.append(("until", trio.current_time()))
    return log


def test_timeouts_fire_at_their_virtual_instant() -> None:
    assert trio_run(_timeouts) == [("moved on", 5.0), ("too slow", 7.5), ("until", 100.0)]


async def _fail_after_off_the_tick_grid() -> float:
    await trio.sleep(0.2)
    # 0.2 + 0.1 is 0.30000000000000004 in floats: one ulp above the 0.3 tick.
    with trio.move_on_after(0.1) as scope:
        await trio.sleep_forever()
    assert scope.cancelled_caught
    assert trio.current_time() >= scope.deadline
    await trio.sleep(0.7)
    return trio.current_time()


def test_float_noise_in_deadlines_neither_hangs_nor_drifts() -> None:
    assert trio_run(_fail_after_off_the_tick_grid) == 1.0


async def _sleepers() -> list[tuple[str, float]]:
    log: list[tuple[str, float]] = []

    async def sleeper(name: str, delay: float) -> None:
        await trio.sleep(delay)
        log.append((name, trio.current_time()))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sleeper, "c", 3.0)
        nursery.start_soon(sleeper, "a", 1.0)
        nursery.start_soon(sleeper, "b", 2.0)
    return log


def test_concurrent_sleepers_wake_in_order_at_their_instants() -> None:
    assert trio_run(_sleepers) == [("a", 1.0), ("b", 2.0), ("c", 3.0)]


async def _memory_channel_pipeline() -> list[tuple[int, float]]:
    send, receive = trio.open_memory_channel[int](0)
    got: list[tuple[int, float]] = []

    async def producer() -> None:
        async with send:
            for i in range(3):
                await trio.sleep(10)
                await send.send(i)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(producer)
        async with receive:
            async for item in receive:
                got.append((item, trio.current_time()))
    return got


def test_channels_and_timers_together() -> None:
    assert trio_run(_memory_channel_pipeline) == [(0, 10.0), (1, 20.0), (2, 30.0)]


def test_the_clock_keeps_its_time_across_runs() -> None:
    clock = VirtualClock()
    trio.run(_sleep_an_hour, clock=clock)
    assert trio.run(_sleep_an_hour, clock=clock) == 7200.0
    assert clock.current_time() == 7200.0
    assert clock.jumps == 2


# ----------------------------------------------------------- worker threads (trio #456)


async def _thread_against_timeout() -> list[tuple[str, float]]:
    log: list[tuple[str, float]] = []

    async def ticker() -> None:
        await trio.sleep(0.5)
        log.append(("ticker", trio.current_time()))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        with trio.fail_after(0.1):
            # real-time: the worker thread must really take real time (50 ms) for the test
            # to show that virtual time stands still meanwhile.
            await trio.to_thread.run_sync(time.sleep, 0.05)
        log.append(("thread done", trio.current_time()))
    return log


def test_a_worker_thread_is_not_overtaken_by_a_virtual_timeout() -> None:
    # MockClock(autojump_threshold=0) raises TooSlowError here (trio issue #456).
    assert trio_run(_thread_against_timeout) == [("thread done", 0.0), ("ticker", 0.5)]


async def _thread_with_custom_limiter() -> float:
    limiter = trio.CapacityLimiter(1)
    with trio.fail_after(1):
        # real-time: a real thread job of 20 ms, through a non-default limiter.
        await trio.to_thread.run_sync(time.sleep, 0.02, limiter=limiter)
    return trio.current_time()


def test_thread_jobs_are_seen_whatever_their_limiter() -> None:
    assert trio_run(_thread_with_custom_limiter) == 0.0


async def _thread_calling_back_into_trio() -> float:
    await trio.to_thread.run_sync(trio.from_thread.run, trio.sleep, 5.0)
    return trio.current_time()


def test_a_thread_waiting_on_a_trio_sleep_lets_time_move() -> None:
    # The thread is blocked on trio itself; freezing time would hang for ever.
    assert trio_run(_thread_calling_back_into_trio) == 5.0


# ----------------------------------------------------------- wait_all_tasks_blocked


async def _idle_waiter() -> list[tuple[str, float]]:
    log: list[tuple[str, float]] = []

    async def sleeper() -> None:
        await trio.sleep(10)
        log.append(("sleeper", trio.current_time()))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sleeper)
        await trio.testing.wait_all_tasks_blocked()
        log.append(("idle", trio.current_time()))
    return log


def test_wait_all_tasks_blocked_wakes_before_time_jumps() -> None:
    assert trio_run(_idle_waiter) == [("idle", 0.0), ("sleeper", 10.0)]


async def _idle_waiter_with_cushion() -> list[tuple[str, float]]:
    log: list[tuple[str, float]] = []

    async def sleeper() -> None:
        await trio.sleep(10)
        log.append(("sleeper", trio.current_time()))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sleeper)
        # real-time: the cushion is real seconds by trio's definition (10 ms here).
        await trio.testing.wait_all_tasks_blocked(cushion=0.01)
        log.append(("idle", trio.current_time()))
    return log


def test_a_cushioned_wait_all_tasks_blocked_also_wakes_first() -> None:
    assert trio_run(_idle_waiter_with_cushion) == [("idle", 0.0), ("sleeper", 10.0)]


async def _driven_by_hand(clock: VirtualClock) -> list[tuple[str, float]]:
    log: list[tuple[str, float]] = []

    async def sleeper() -> None:
        await trio.sleep(1)
        log.append(("woke", trio.current_time()))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sleeper)
        await trio.testing.wait_all_tasks_blocked()
        log.append(("blocked", trio.current_time()))
        clock.jump(0.5)
        await trio.testing.wait_all_tasks_blocked()
        log.append(("half way", trio.current_time()))
        clock.jump(0.5)
        await trio.testing.wait_all_tasks_blocked()
    return log


def test_manual_mode_moves_only_when_jumped() -> None:
    clock = VirtualClock(autojump=False)
    log = trio.run(_driven_by_hand, clock, clock=clock)
    assert log == [("blocked", 0.0), ("half way", 0.5), ("woke", 1.0)]
    assert clock.jumps == 0


async def _switch_autojump_on(clock: VirtualClock) -> float:
    await trio.testing.wait_all_tasks_blocked()
    clock.autojump = True
    await trio.sleep(30)
    return trio.current_time()


def test_autojump_can_be_switched_on_while_running() -> None:
    clock = VirtualClock(autojump=False)
    assert trio.run(_switch_autojump_on, clock, clock=clock) == 30.0


# ----------------------------------------------------------- deadlocks


async def _blocked_forever() -> None:
    event = trio.Event()

    async def child() -> None:
        await event.wait()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(child, name="the-child")
        await trio.sleep(2)
        await event.wait()


def test_a_deadlock_raises_with_a_report() -> None:
    t0 = time.perf_counter()
    with pytest.raises(virtualtime.DeadlockError) as info:
        virtualtime.trio.run(_blocked_forever, deadlock_timeout=0)
    assert time.perf_counter() - t0 < 0.5
    names = [name for name, _ in info.value.blocked]
    assert names == ["_blocked_forever", "the-child"]
    for _, where in info.value.blocked:
        assert "Event.wait()" in where
        assert "test_trio.py" in where
    assert "t=2.0" in str(info.value)
    assert "the-child" in str(info.value)


async def _sleep_without_driver() -> None:
    await trio.sleep(1)


def test_a_deadlock_in_rate_mode_raises_too() -> None:
    # real-time: at 1000x the two virtual seconds before the deadlock take 2 ms.
    with pytest.raises(virtualtime.DeadlockError, match="the-child"):
        virtualtime.trio.run(_blocked_forever, rate=1000.0, deadlock_timeout=0)


def test_manual_mode_with_nobody_driving_is_a_deadlock() -> None:
    with pytest.raises(virtualtime.DeadlockError):
        virtualtime.trio.run(_sleep_without_driver, autojump=False, deadlock_timeout=0)


def test_a_deadlock_does_not_spin_a_core() -> None:
    # With a bare trio.run the clock cannot raise (trio offers no public way to), so it
    # sleeps instead; another thread can still wake the run, and the CPU stays idle meanwhile.
    box: dict[str, Any] = {}
    ready = threading.Event()

    async def main() -> float:
        box["token"] = trio.lowlevel.current_trio_token()
        box["event"] = event = trio.Event()
        ready.set()
        await event.wait()
        return trio.current_time()

    worker = threading.Thread(
        target=lambda: box.setdefault("result", trio_run(main, deadlock_timeout=0))
    )
    worker.start()
    try:
        assert ready.wait(5)
        # The worker's own CPU clock: the process's would count other threads too.
        assert worker.ident is not None
        clock = time.pthread_getcpuclockid(worker.ident)
        cpu0 = time.clock_gettime(clock)
        time.sleep(0.2)  # real-time: measure the CPU a deadlocked run burns in 200 ms
        burnt = time.clock_gettime(clock) - cpu0
    finally:
        trio.from_thread.run_sync(box["event"].set, trio_token=box["token"])
        worker.join(5)
    assert burnt < 0.05
    assert box["result"] == 0.0


def test_an_outside_thread_can_rescue_within_the_deadlock_timeout() -> None:
    box: dict[str, Any] = {}

    async def main() -> float:
        event = trio.Event()
        token = trio.lowlevel.current_trio_token()
        # real-time: a plain thread (unknown to trio) answers after 20 ms, inside the
        # 0.5 s deadlock_timeout; it must win against the deadlock verdict.
        timer = threading.Timer(
            0.02, trio.from_thread.run_sync, (event.set,), {"trio_token": token}
        )
        box["timer"] = timer
        timer.start()
        await event.wait()
        return trio.current_time()

    assert virtualtime.trio.run(main, deadlock_timeout=0.5) == 0.0
    box["timer"].join()


async def _wait_for_socket() -> bytes:
    a, b = socket.socketpair()
    with a, b:
        a.setblocking(False)
        b.setblocking(False)
        # real-time: a plain thread sends after 20 ms; a task waiting on a socket is not a
        # deadlock, even with deadlock_timeout=0.
        timer = threading.Timer(0.02, b.send, (b"hi",))
        timer.start()
        try:
            await trio.lowlevel.wait_readable(a)
            return a.recv(2)
        finally:
            timer.join()


def test_waiting_on_a_socket_is_not_a_deadlock() -> None:
    assert virtualtime.trio.run(_wait_for_socket, deadlock_timeout=0) == b"hi"


# ----------------------------------------------------------- threshold and rate


async def _real_peer_against_virtual_timeout() -> tuple[bytes, float]:
    a, b = socket.socketpair()
    with a, b:
        a.setblocking(False)
        # real-time: the peer answers after 20 ms of real time; with a 0.3 s threshold the
        # clock must not jump to the 1 s virtual timeout meanwhile.
        timer = threading.Timer(0.02, b.send, (b"pong",))
        timer.start()
        try:
            with trio.fail_after(1):
                await trio.lowlevel.wait_readable(a)
            return a.recv(4), trio.current_time()
        finally:
            timer.join()


def test_autojump_threshold_gives_a_real_peer_time_to_answer() -> None:
    data, when = trio_run(_real_peer_against_virtual_timeout, autojump_threshold=0.3)
    assert data == b"pong"
    assert when == 0.0


async def _sleep_100() -> float:
    await trio.sleep(100)
    return trio.current_time()


def test_autojump_threshold_still_jumps_after_the_quiet_period() -> None:
    t0 = time.perf_counter()
    assert trio_run(_sleep_100, autojump_threshold=0.02) == 100.0
    elapsed = time.perf_counter() - t0
    assert 0.015 < elapsed < 0.5  # real-time: one 20 ms quiet period before the jump


def test_rate_mode_follows_real_time() -> None:
    t0 = time.perf_counter()
    # real-time: at 200x, five virtual seconds take 25 ms of real time.
    reached = trio_run(_sleep_5_at_rate)
    elapsed = time.perf_counter() - t0
    assert reached >= 5.0
    assert elapsed >= 0.02


async def _sleep_5_at_rate() -> float:
    clock = trio.lowlevel.current_clock()
    assert isinstance(clock, VirtualClock)
    await trio.sleep(1)  # rate 0: a jump
    real = time.perf_counter()
    clock.rate = 200.0
    before = trio.current_time()
    real = time.perf_counter() - real
    # No jump at the change: time flows on from 1.0, at most 200 times the real time between
    # setting the rate and reading the clock (half a millisecond of a loaded machine's
    # hiccup there is already 0.1 virtual seconds).
    assert 1.0 <= before <= 1.0 + 200 * real + 1e-9
    await trio.sleep(4)
    clock.rate = 0.0
    return trio.current_time()


# ----------------------------------------------------------- virtualtime.trio.run


async def _add(a: int, b: int) -> int:
    await trio.sleep(1)
    return a + b


def test_run_helper_returns_the_result() -> None:
    assert virtualtime.trio.run(_add, 2, 3) == 5


def test_run_helper_with_a_clock_to_keep() -> None:
    clock = VirtualClock(start=50.0)
    assert virtualtime.trio.run(_add, 1, 1, clock=clock) == 2
    assert clock.current_time() == 51.0


def test_run_helper_refuses_clock_and_options_together() -> None:
    with pytest.raises(TypeError, match="not both"):
        virtualtime.trio.run(_add, 1, 1, clock=VirtualClock(), start=1.0)
    with pytest.raises(TypeError, match="VirtualClock"):
        virtualtime.trio.run(_add, 1, 1, clock=trio.testing.MockClock())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rate"):
        virtualtime.trio.run(_add, 1, 1, rate=-1.0)


def test_exceptions_from_main_pass_through() -> None:
    async def boom() -> None:
        await trio.sleep(3)
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        virtualtime.trio.run(boom)


def test_a_second_deadlock_in_one_run_is_detected_too() -> None:
    from virtualtime.trio import RunGuard

    async def main() -> list[int]:
        clock = trio.lowlevel.current_clock()
        assert isinstance(clock, VirtualClock)
        caught = []
        for attempt in range(2):
            with pytest.raises(virtualtime.DeadlockError):
                await RunGuard(clock, trio.Event().wait).guarded_main()
            caught.append(attempt)
        return caught

    assert trio.run(main, clock=VirtualClock(deadlock_timeout=0.05)) == [0, 1]


def test_the_shared_option_names_are_the_clocks_own() -> None:
    import inspect

    from virtualtime._options import OPTION_NAMES, TRIO_OPTION_NAMES, ClockKwargs, LoopKwargs

    # The catalogue's trio subset is what the clock's keywords are typed as, and the loop's.
    assert set(TRIO_OPTION_NAMES) == set(ClockKwargs.__annotations__)
    assert set(OPTION_NAMES) == set(LoopKwargs.__annotations__) | set(ClockKwargs.__annotations__)
    assert set(TRIO_OPTION_NAMES) < set(OPTION_NAMES)
    assert list(inspect.signature(VirtualClock.__init__).parameters) == [
        "self",
        "options",
        "kwargs",
    ]


# ----------------------------------------------------------- no bias of the clock's own


def _exact_sum(start: float, delays: list[float]) -> float:
    """The float nearest the exact sum (math.fsum is correctly rounded)."""
    return math.fsum([start, *delays])


async def _sleep_each(delays: list[float]) -> float:
    for delay in delays:
        await trio.sleep(delay)
    return trio.current_time()


def _mock_run(start: float, delays: list[float]) -> float:
    mock = trio.testing.MockClock(autojump_threshold=0)
    if start:
        mock.jump(start)
    result: float = trio.run(_sleep_each, delays, clock=mock)
    return result


@pytest.mark.parametrize("start", [0.0, 86400.0])
@pytest.mark.parametrize("kind", ["third", "pi", "exponential"])
def test_long_runs_of_sleeps_carry_no_bias(start: float, kind: str) -> None:
    # The clock rounds each delay to the nearest tick and carries the rest: 10,000 sleeps end
    # within 1e-6 s of the exact sum (the old round-up rule ended 3.8e-6 to 7.4e-6 s high),
    # and no further from it than MockClock's own float sums (what trio's deadlines force),
    # give or take a tick.
    if kind == "third":
        delays = [1 / 3] * 10_000
    elif kind == "pi":
        delays = [math.pi * 1e-4] * 3_000
    else:
        rng = random.Random(20241201)
        delays = [rng.expovariate(1.0) for _ in range(3_000)]
    exact = _exact_sum(start, delays)
    error = abs(trio_run(_sleep_each, delays, start=start) - exact)
    assert error < 1e-6
    mock_error = abs(_mock_run(start, delays) - exact)
    assert error <= mock_error + 2e-9


async def _expired_deadlines() -> list[bool]:
    seen = []
    for _ in range(200):
        with trio.move_on_after(1 / 3) as scope:
            await trio.sleep_forever()
        seen.append(scope.cancelled_caught and trio.current_time() >= scope.deadline)
    return seen


def test_every_expired_deadline_reads_as_expired() -> None:
    # trio's expiry and anyio's fail_after re-check current_time() >= deadline: the reported
    # time reaches every deadline that fired, even off the tick grid.
    assert all(trio_run(_expired_deadlines))


def test_anyio_fail_after_off_the_tick_grid_neither_hangs_nor_fires_early() -> None:
    import anyio

    async def main() -> list[float]:
        seen = []
        for _ in range(100):
            with pytest.raises(TimeoutError):
                with anyio.fail_after(1 / 3):
                    await anyio.sleep_forever()
            seen.append(anyio.current_time())
        return seen

    seen = virtualtime.anyio_run(main, backend="trio")
    assert seen == sorted(seen)
    assert abs(seen[-1] - 100 / 3) < 1e-6


@pytest.mark.parametrize("delay", [0.1, 1 / 3])
def test_at_a_year_the_clock_adds_nothing_to_the_float_error(delay: float) -> None:
    # Near one year floats are 3.7 ns apart and trio adds now + delay in floats; what that
    # forces is MockClock's error.  The clock must not add to it beyond a few ulps.
    delays = [delay] * 1000
    exact = _exact_sum(YEAR, delays)
    error = abs(trio_run(_sleep_each, delays, start=float(YEAR)) - exact)
    mock_error = abs(_mock_run(float(YEAR), delays) - exact)
    assert error <= mock_error + 4 * math.ulp(float(YEAR))


# ----------------------------------------------------------- deadlocks always raise


async def _deadlock_in_a_shield() -> None:
    with trio.CancelScope(shield=True):
        await trio.Event().wait()


async def _deadlock_in_nested_nurseries() -> None:
    async def inner() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_deadlock_in_a_shield, name="deep")
            await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(inner, name="inner")
        await trio.sleep(3)
        with trio.CancelScope(shield=True):
            await trio.Event().wait()


async def _deadlock_through_a_portal() -> None:
    event = trio.Event()
    await trio.to_thread.run_sync(trio.from_thread.run, event.wait)


@pytest.mark.parametrize(
    ("main", "names", "when"),
    [
        (_deadlock_in_a_shield, ["_deadlock_in_a_shield"], 0.0),
        (_deadlock_in_nested_nurseries, ["_deadlock_in_nested_nurseries", "inner", "deep"], 3.0),
        (_deadlock_through_a_portal, ["_deadlock_through_a_portal"], 0.0),
    ],
)
def test_deadlocks_raise_in_shields_nested_nurseries_and_portals(
    main: Callable[[], Awaitable[None]], names: list[str], when: float
) -> None:
    t0 = time.perf_counter()
    with pytest.raises(virtualtime.DeadlockError) as info:
        virtualtime.trio.run(main, deadlock_timeout=0.05)
    assert time.perf_counter() - t0 < 1.0
    assert [name for name, _ in info.value.blocked] == names
    text = str(info.value)
    assert text.startswith(f"deadlock at virtual time t={when!r}: ")
    assert "\nBlocked tasks:\n  - " in text
    for name in names:
        assert f"  - {name}: " in text


def test_a_shielded_deadlock_raises_under_anyio_on_trio_too() -> None:
    import anyio

    async def main() -> None:
        with anyio.CancelScope(shield=True):
            await anyio.Event().wait()

    with pytest.raises(virtualtime.DeadlockError, match="main"):
        virtualtime.anyio_run(main, backend="trio", deadlock_timeout=0.05)
