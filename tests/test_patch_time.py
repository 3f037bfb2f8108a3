"""``patch_time=True``: the stdlib clocks follow virtual time while the loop runs.

Expected values are computed independently of the implementation: attempt schedules from
tenacity's and backoff's documented rules, wall-clock values from the epoch the test chose,
local-time conversions through the real stdlib functions bound before any patch existed.
"""

from __future__ import annotations

import asyncio
import copyreg
import ctypes
import datetime
import logging
import math
import os
import pickle
import sys
import threading
import time
import types
import warnings
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import backoff
import pytest
import tenacity

import virtualtime
from virtualtime import wall_time
from virtualtime._clocks import _hook, _patch
from virtualtime._clocks._patch import TimePatch
from virtualtime._clocks._patch import _real_monotonic as real_monotonic  # unpatched copies: real
from virtualtime._clocks._patch import _real_time as real_time

_T = TypeVar("_T")

UTC = datetime.UTC
REAL_DATETIME = datetime.datetime
REAL_DATE = datetime.date
EPOCH = REAL_DATETIME(1970, 1, 1, tzinfo=UTC)
MICROSECOND = datetime.timedelta(microseconds=1)
SECOND = datetime.timedelta(seconds=1)

# Every module attribute the patch may replace, as it is before any patch.
_TIME_NAMES = (
    "monotonic",
    "monotonic_ns",
    "perf_counter",
    "perf_counter_ns",
    "time",
    "time_ns",
    "localtime",
    "gmtime",
    "ctime",
    "asctime",
    "strftime",
    "clock_gettime",
    "clock_gettime_ns",
)
ORIGINALS: dict[tuple[types.ModuleType, str], object] = {
    **{(time, name): getattr(time, name) for name in _TIME_NAMES if hasattr(time, name)},
    (datetime, "datetime"): REAL_DATETIME,
    (datetime, "date"): REAL_DATE,
}

UTCNOW_DEPRECATED = r"utcnow\(\) is deprecated"
REDUCERS_BEFORE = {cls: copyreg.dispatch_table.get(cls) for cls in (REAL_DATETIME, REAL_DATE)}

WALL = REAL_DATETIME(2024, 2, 29, 23, 59, 59, 500_000, tzinfo=UTC)
WALL_NS = (WALL - EPOCH) // MICROSECOND * 1000


def assert_all_original() -> None:
    """Every patchable attribute is the very object it was before any patch."""
    changed = [
        f"{module.__name__}.{name}"
        for (module, name), original in ORIGINALS.items()
        if getattr(module, name) is not original
    ]
    assert changed == []
    assert {cls: copyreg.dispatch_table.get(cls) for cls in REDUCERS_BEFORE} == REDUCERS_BEFORE
    # The C objects themselves: the same definition and self pointers, the same class methods.
    assert not _patch.installed()
    assert c_fields() == C_FIELDS_BEFORE


def c_fields() -> dict[str, object]:
    fields: dict[str, object] = {
        name: (_hook._slot(func, 0).value, _hook._slot(func, 1).value)
        for (module, name), func in ORIGINALS.items()
        if module is time
    }
    fields.update({f"datetime.{n}": vars(REAL_DATETIME).get(n) for n in ("now", "utcnow")})
    fields["date.today"] = vars(REAL_DATE)["today"]
    fields["Thread.start"] = vars(threading.Thread)["start"]
    return fields


C_FIELDS_BEFORE = c_fields()


def run(coro: Coroutine[Any, Any, _T], **options: Any) -> _T:
    result = virtualtime.run(coro, **options)
    assert_all_original()
    return result


def run_real(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` on a stock asyncio loop (through a loop factory: no policy involved)."""
    with asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as runner:
        return runner.run(coro)


def ns_of(moment: datetime.datetime) -> int:
    """Nanoseconds since 1970 of an aware datetime, by integer arithmetic."""
    return (moment - EPOCH) // MICROSECOND * 1000


# ----------------------------------------------------------------- the clocks


def test_monotonic_and_perf_counter_read_loop_time_exactly() -> None:
    async def main() -> list[tuple[float, float, int, int]]:
        loop = asyncio.get_running_loop()
        reads = []
        for _ in range(3):
            assert time.monotonic() == loop.time()
            reads.append(
                (time.monotonic(), time.perf_counter(), time.monotonic_ns(), time.perf_counter_ns())
            )
            for _ in range(10):
                await asyncio.sleep(0.1)
        return reads

    assert run(main(), patch_time=True, start=5.0) == [
        (5.0, 5.0, 5_000_000_000, 5_000_000_000),
        (6.0, 6.0, 6_000_000_000, 6_000_000_000),
        (7.0, 7.0, 7_000_000_000, 7_000_000_000),
    ]


def test_wall_clock_starts_at_an_aware_wall_start_and_advances_with_loop_time() -> None:
    india = datetime.timezone(datetime.timedelta(hours=5, minutes=30))

    async def main() -> list[tuple[Any, ...]]:
        reads = []
        for _ in range(2):
            reads.append(
                (
                    time.time_ns(),
                    time.time(),
                    datetime.datetime.now(UTC),
                    datetime.datetime.now(india),
                    datetime.datetime.now(),
                    datetime.datetime.today(),
                    datetime.date.today(),
                )
            )
            await asyncio.sleep(0.75)
        return reads

    reads = run(main(), patch_time=True, start=100.0, wall_start=WALL)
    for (t_ns, t, now_utc, now_india, now_local, today_dt, today), elapsed in zip(
        reads, (0, 750_000), strict=True
    ):
        expected = WALL + datetime.timedelta(microseconds=elapsed)
        assert t_ns == ns_of(expected)
        assert t == ns_of(expected) / 1_000_000_000  # the float nearest to it
        assert now_utc == expected
        assert now_utc.tzinfo is UTC
        assert now_india == expected.astimezone(india)
        assert now_india.utcoffset() == datetime.timedelta(hours=5, minutes=30)
        local = expected.astimezone().replace(tzinfo=None)
        assert now_local == today_dt == local
        assert now_local.tzinfo is None
        assert today == local.date()
    # 23:59:59.5 + 0.75 s crosses midnight UTC into March 1st of a leap year.
    assert reads[1][2].date() == REAL_DATE(2024, 3, 1)


def test_time_module_calendar_functions_use_the_virtual_wall_clock() -> None:
    secs = WALL_NS // 1_000_000_000 + 3600

    async def main() -> tuple[Any, ...]:
        await asyncio.sleep(3600)
        reads: tuple[Any, ...] = (
            time.gmtime(),
            time.localtime(),
            time.ctime(),
            time.asctime(),
            time.strftime("%Y-%m-%d %H:%M:%S"),
            time.gmtime(0),  # an explicit time passes straight through
            time.strftime("%Y", ORIGINALS[time, "gmtime"](0)),  # type: ignore[operator]
        )
        if hasattr(time, "clock_gettime"):
            loop = asyncio.get_running_loop()
            assert time.clock_gettime(time.CLOCK_REALTIME) == time.time()
            assert time.clock_gettime_ns(time.CLOCK_REALTIME) == time.time_ns()
            assert time.clock_gettime(time.CLOCK_MONOTONIC) == loop.time()
            assert time.clock_gettime_ns(time.CLOCK_MONOTONIC) == time.monotonic_ns()
        return reads

    real_gmtime: Callable[..., time.struct_time] = ORIGINALS[time, "gmtime"]  # type: ignore[assignment]
    real_localtime: Callable[..., time.struct_time] = ORIGINALS[time, "localtime"]  # type: ignore[assignment]
    local = real_localtime(secs)
    assert run(main(), patch_time=True, wall_start=WALL) == (
        real_gmtime(secs),
        local,
        time.asctime(local),
        time.asctime(local),
        time.strftime("%Y-%m-%d %H:%M:%S", local),
        real_gmtime(0),
        "1970",
    )


def test_naive_wall_start_is_local_time_so_datetime_now_starts_at_it() -> None:
    naive = REAL_DATETIME(2024, 7, 1, 12, 30, 15, 250_000)

    async def main() -> tuple[datetime.datetime, float]:
        return datetime.datetime.now(), time.time()

    now, stamp = run(main(), patch_time=True, wall_start=naive)
    assert now == naive
    assert stamp == naive.timestamp()


def test_timestamp_wall_start_and_sub_microsecond_agreement() -> None:
    async def main() -> tuple[int, float, datetime.datetime, datetime.datetime]:
        await asyncio.sleep(1e-7)  # 100 ns: moves time_ns(), not the microsecond
        return time.time_ns(), time.time(), datetime.datetime.now(UTC), wall_time()

    t_ns, t, now, wall = run(main(), patch_time=True, wall_start=1_700_000_000.25)
    assert t_ns == 1_700_000_000_250_000_100
    assert t == t_ns / 1_000_000_000
    # datetime.now() is time_ns() truncated to its resolution: they agree within one tick.
    assert (now - EPOCH) // MICROSECOND == t_ns // 1000
    assert now == wall == REAL_DATETIME(2023, 11, 14, 22, 13, 20, 250_000, tzinfo=UTC)


def test_default_wall_start_is_the_real_time_when_the_loop_is_created() -> None:
    async def main() -> tuple[int, int]:
        first = time.time_ns()
        await asyncio.sleep(86_400)
        return first, time.time_ns()

    before = real_time()
    loop = virtualtime.new_event_loop(patch_time=True)
    after = real_time()
    try:
        first, second = loop.run_until_complete(main())
    finally:
        loop.close()
    assert_all_original()
    assert before <= first / 1e9 <= after
    assert second - first == 86_400 * 1_000_000_000


@pytest.mark.parametrize(
    ("bad", "error", "rule"),
    [
        ("2024-01-01", TypeError, "a POSIX timestamp"),
        (True, TypeError, "a POSIX timestamp"),
        (REAL_DATE(2024, 1, 1), TypeError, "got the date"),
        (math.nan, ValueError, "finite"),
        (math.inf, ValueError, "finite"),
        (1e20, ValueError, "datetime's range"),
        (-1e12, ValueError, "datetime's range"),
    ],
)
def test_bad_wall_start_is_a_clear_error(bad: object, error: type[Exception], rule: str) -> None:
    with pytest.raises(error, match="wall_start") as info:
        virtualtime.new_event_loop(patch_time=True, wall_start=bad)  # type: ignore[arg-type]
    assert rule in str(info.value)
    assert repr(bad) in str(info.value)
    with pytest.raises(error, match="wall_start"):
        TimePatch.check_wall_start(bad)
    assert_all_original()


def test_utcnow_warns_only_as_python_itself_does() -> None:
    async def main() -> tuple[datetime.datetime, datetime.datetime]:
        return datetime.datetime.utcnow(), datetime.datetime.now(UTC)

    if sys.version_info >= (3, 12):
        with pytest.warns(DeprecationWarning, match=UTCNOW_DEPRECATED) as real_warnings:
            REAL_DATETIME.utcnow()
        with pytest.warns(
            DeprecationWarning, match=r"utcnow\(\) is deprecated"
        ) as patched_warnings:
            naive, aware = run(main(), patch_time=True, wall_start=WALL)
        assert len(patched_warnings) == 1
        assert str(patched_warnings[0].message) == str(real_warnings[0].message)
        assert patched_warnings[0].filename == __file__  # attributed to the caller
    else:  # no warning at all (filterwarnings=error would turn one into a failure)
        naive, aware = run(main(), patch_time=True, wall_start=WALL)
    assert naive == aware.replace(tzinfo=None) == WALL.replace(tzinfo=None)
    assert naive.tzinfo is None


def test_time_and_datetime_follow_evolve_and_fast_forward() -> None:
    def read() -> tuple[int, datetime.datetime]:
        t_ns, now = time.time_ns(), datetime.datetime.now(UTC)
        assert (now - EPOCH) // MICROSECOND == t_ns // 1000  # agree within one tick
        return t_ns, now

    async def main() -> list[tuple[int, datetime.datetime]]:
        reads = [read()]
        await virtualtime.evolve(5)
        reads.append(read())
        await virtualtime.fast_forward(2.5)
        reads.append(read())
        return reads

    loop = virtualtime.new_event_loop(patch_time=True, autojump=False, wall_start=WALL)
    try:
        reads = loop.run_until_complete(main())
        assert [t for t, _ in reads] == [WALL_NS, WALL_NS + 5_000_000_000, WALL_NS + 7_500_000_000]
        assert [now - WALL for _, now in reads] == [
            datetime.timedelta(0),
            datetime.timedelta(seconds=5),
            datetime.timedelta(seconds=7.5),
        ]
        # The verbs from outside: the wall clock moves with them, the patch only while running.
        loop.evolve(10)
        assert_all_original()
        assert wall_time(loop) == WALL + datetime.timedelta(seconds=17.5)
        loop.fast_forward(0.5)

        async def read_inside() -> tuple[int, datetime.datetime]:
            return read()

        assert loop.run_until_complete(read_inside()) == (
            WALL_NS + 18_000_000_000,
            WALL + datetime.timedelta(seconds=18),
        )
    finally:
        loop.close()
    assert_all_original()


def test_log_records_carry_virtual_timestamps() -> None:
    async def main() -> tuple[float, float]:
        await asyncio.sleep(42)
        record = logging.LogRecord("virtual", logging.INFO, __file__, 1, "hello", None, None)
        return record.created, time.time()

    created, stamp = run(main(), patch_time=True, wall_start=WALL)
    assert stamp == (WALL_NS + 42_000_000_000) / 1_000_000_000
    assert created == pytest.approx(stamp, abs=1e-6)  # 3.13+ rounds time_ns() its own way


# -------------------------------------------------------------- wall_time()


def test_wall_time_without_patching() -> None:
    async def main() -> list[datetime.datetime]:
        assert_all_original()  # no patch_time: nothing is replaced
        moments = [wall_time()]
        await asyncio.sleep(90)
        moments.append(wall_time())
        await virtualtime.fast_forward(0.000_001)
        moments.append(wall_time())
        return moments

    assert run(main(), start=1000.0, wall_start=WALL) == [
        WALL,
        WALL + datetime.timedelta(seconds=90),
        WALL + datetime.timedelta(seconds=90, microseconds=1),
    ]


def test_wall_time_needs_a_virtual_loop() -> None:
    with pytest.raises(virtualtime.VirtualTimeError, match="wall_time"):
        wall_time()

    async def on_a_real_loop() -> None:
        with pytest.raises(virtualtime.VirtualTimeError, match="SelectorEventLoop"):
            wall_time()

    run_real(on_a_real_loop())
    with pytest.raises(TypeError, match="loop must be"):
        wall_time(object())  # type: ignore[arg-type]


# ------------------------------------------------------ retry libraries, exactly


def tenacity_schedule(max_delay: float, multiplier: float, maximum: float) -> list[float]:
    """Attempt instants predicted by tenacity's documentation.

    ``wait_exponential``: after attempt n (from 1) wait ``multiplier * 2 ** (n - 1)``, capped
    at ``max``.  ``stop_after_delay(d)``: after a failed attempt, stop when the time since the
    first attempt is ``>= d`` (so the last attempt lands past ``d``).
    """
    t, attempt, instants = 0.0, 1, []
    while True:
        instants.append(t)
        if t >= max_delay:
            return instants
        t += min(multiplier * 2 ** (attempt - 1), maximum)
        attempt += 1


def backoff_schedule(max_time: float, base: float = 2, factor: float = 1) -> list[float]:
    """Attempt instants predicted by backoff's documentation (``jitter=None``).

    ``expo`` yields ``factor * base ** n`` for n = 0, 1, 2, ...; each wait is capped at the
    time left before ``max_time``; before retrying, backoff gives up when the time elapsed at
    the start of the failed attempt is ``>= max_time``.
    """
    t, n, instants = 0.0, 0, []
    while True:
        instants.append(t)
        if t >= max_time:
            return instants
        t += min(factor * base**n, max_time - t)
        n += 1


def test_tenacity_stops_after_the_attempts_its_schedule_predicts() -> None:
    async def main() -> tuple[list[float], float]:
        loop = asyncio.get_running_loop()
        instants: list[float] = []

        async def flaky() -> None:
            assert time.monotonic() == loop.time()
            instants.append(loop.time() - 1000.0)
            raise ConnectionError("down")

        retrying = tenacity.AsyncRetrying(
            stop=tenacity.stop_after_delay(60),
            wait=tenacity.wait_exponential(multiplier=0.5, max=20),
            retry=tenacity.retry_if_exception_type(ConnectionError),
        )
        with pytest.raises(tenacity.RetryError):
            await retrying(flaky)
        return instants, loop.time()

    started = real_monotonic()
    instants, end = run(main(), patch_time=True, start=1000.0)
    expected = tenacity_schedule(60, 0.5, 20)
    assert expected == [0.0, 0.5, 1.5, 3.5, 7.5, 15.5, 31.5, 51.5, 71.5]  # the model, spelled out
    assert instants == expected
    assert end == 1000.0 + expected[-1]
    assert real_monotonic() - started < 1.0


def test_tenacity_without_patch_time_never_sees_its_delay_pass() -> None:
    async def main() -> tuple[int, float]:
        attempts = 0

        async def flaky() -> None:
            nonlocal attempts
            attempts += 1
            raise ConnectionError("down")

        retrying = tenacity.AsyncRetrying(
            stop=tenacity.stop_after_delay(60) | tenacity.stop_after_attempt(30),
            wait=tenacity.wait_exponential(multiplier=0.5, max=20),
        )
        with pytest.raises(tenacity.RetryError):
            await retrying(flaky)
        return attempts, asyncio.get_running_loop().time()

    attempts, end = run(main())
    # Its stopwatch is real: 60 s never pass, so only the attempt cap stops it, far later.
    assert attempts == 30
    assert end == sum(min(0.5 * 2**n, 20) for n in range(29))


@pytest.mark.filterwarnings(
    # backoff 2.2 calls asyncio.iscoroutinefunction, deprecated by Python 3.14: its warning.
    "ignore:'asyncio.iscoroutinefunction' is deprecated:DeprecationWarning"
)
def test_backoff_stops_after_the_attempts_its_schedule_predicts() -> None:
    async def main() -> tuple[list[float], list[float], float]:
        loop = asyncio.get_running_loop()
        instants: list[float] = []
        elapsed: list[float] = []

        def on_backoff(details: Any) -> None:
            elapsed.append(details["elapsed"])

        @backoff.on_exception(
            backoff.expo, ConnectionError, max_time=60, jitter=None, on_backoff=on_backoff
        )
        async def flaky() -> None:
            instants.append(time.monotonic())
            raise ConnectionError("down")

        with pytest.raises(ConnectionError):
            await flaky()
        return instants, elapsed, loop.time()

    started = real_monotonic()
    instants, elapsed, end = run(main(), patch_time=True)
    expected = backoff_schedule(60)
    assert expected == [0.0, 1.0, 3.0, 7.0, 15.0, 31.0, 60.0]  # the model, spelled out
    assert instants == expected
    assert elapsed == expected[:-1]  # its datetime.now() stopwatch read virtual time
    assert end == expected[-1]
    assert real_monotonic() - started < 1.0


# ---------------------------------------------------- threads and other loops


def test_other_threads_and_a_real_loop_there_see_real_time() -> None:
    seen: dict[str, Any] = {}

    def other_thread() -> None:
        async def real_main() -> None:
            loop = asyncio.get_running_loop()
            seen["patched"] = _patch.installed()
            r0, t0 = real_monotonic(), real_time()
            m0, l0, w0, d0 = time.monotonic(), loop.time(), time.time(), datetime.datetime.now()
            r1, t1 = real_monotonic(), real_time()
            seen["monotonic_is_real"] = r0 <= m0 <= r1 and r0 <= l0 <= r1
            seen["time_is_real"] = t0 <= w0 <= t1
            seen["datetime_is_real"] = t0 - 1e-6 <= d0.timestamp() <= t1
            await asyncio.sleep(0.02)  # real-time: a real loop's timer in another thread
            seen["slept"] = time.monotonic() - m0

        run_real(real_main())

    async def main() -> tuple[float, float]:
        # A worker thread (started by the executor: real clocks) runs a real loop, ~20 ms;
        # virtual time holds while the job runs.
        await asyncio.to_thread(other_thread)
        before = time.monotonic()
        await asyncio.sleep(10)
        return before, time.monotonic()

    assert run(main(), patch_time=True, start=1e9) == (1e9, 1e9 + 10)
    assert seen == {
        "patched": True,
        "monotonic_is_real": True,
        "time_is_real": True,
        "datetime_is_real": True,
        "slept": pytest.approx(0.02, abs=0.5),
    }
    assert seen["slept"] >= 0.02


def test_executor_threads_and_the_loops_own_pacing_use_real_time() -> None:
    async def main() -> tuple[bool, float]:
        r0 = real_monotonic()
        in_worker = await asyncio.to_thread(time.monotonic)
        worker_is_real = r0 <= in_worker <= real_monotonic()
        await asyncio.sleep(1.0)
        return worker_is_real, time.monotonic()

    started = real_monotonic()
    # real-time: rate=50 paces 1 virtual second over 20 real ms, timed by the loop's own
    # (unpatched) clock; a patched clock there would never advance and the run would hang.
    assert run(main(), patch_time=True, rate=50.0) == (True, 1.0)
    assert 0.015 <= real_monotonic() - started < 1.0


def test_two_patched_loops_in_two_threads_each_see_their_own_time() -> None:
    barrier = threading.Barrier(2, timeout=5)
    first_done = threading.Event()
    results: dict[str, Any] = {}
    errors: list[BaseException] = []

    def sample() -> tuple[float, int, datetime.datetime]:
        return time.monotonic(), time.time_ns(), datetime.datetime.now(UTC)

    def worker(name: str, start: float, wall: datetime.datetime, pause: float) -> None:
        async def main() -> list[tuple[float, int, datetime.datetime]]:
            # real-time: meets the other thread's loop; both loops now run, both patched.
            await asyncio.to_thread(barrier.wait)  # real-time: as above
            samples = [sample()]
            await asyncio.sleep(pause)
            samples.append(sample())
            await asyncio.to_thread(barrier.wait)  # real-time: as above
            if name == "second":
                # real-time: until the other thread's run (and its patch) has ended.
                await asyncio.to_thread(first_done.wait, 5)
                await asyncio.sleep(pause)
                samples.append(sample())
            return samples

        try:
            results[name] = virtualtime.run(main(), patch_time=True, start=start, wall_start=wall)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            if name == "first":
                first_done.set()

    other_wall = REAL_DATETIME(1999, 12, 31, 23, 0, tzinfo=UTC)
    threads = [
        threading.Thread(target=worker, args=("first", 0.0, WALL, 3.0)),
        threading.Thread(target=worker, args=("second", 5e8, other_wall, 7.0)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)  # real-time: the two runs above take milliseconds
    assert errors == []
    assert_all_original()

    def expected(
        start: float, wall: datetime.datetime, elapsed: list[float]
    ) -> list[tuple[float, int, datetime.datetime]]:
        return [
            (start + e, ns_of(wall) + int(e * 1e9), wall + datetime.timedelta(seconds=e))
            for e in elapsed
        ]

    assert results["first"] == expected(0.0, WALL, [0.0, 3.0])
    assert results["second"] == expected(5e8, other_wall, [0.0, 7.0, 14.0])


def test_patched_loop_in_a_thread_while_the_main_thread_runs_a_real_loop() -> None:
    async def real_main() -> float:
        inside, release = threading.Event(), threading.Event()

        def virtual_side() -> float:
            async def vmain() -> float:
                inside.set()
                # real-time: held until the main thread has looked at its clocks.
                await asyncio.to_thread(release.wait, 5)
                await asyncio.sleep(3600)
                return time.monotonic()

            return virtualtime.run(vmain(), patch_time=True, start=1e9)

        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(None, virtual_side)
        try:
            await asyncio.to_thread(inside.wait, 5)  # real-time: the thread's loop starting
            assert _patch.installed()  # the patch is live
            r0 = real_monotonic()
            mono, loop_now = time.monotonic(), loop.time()
            r1 = real_monotonic()
            assert r0 <= mono <= r1
            assert r0 <= loop_now <= r1
            await asyncio.sleep(0.01)  # real-time: the real loop's timers keep real time
            assert loop.time() - loop_now >= 0.01
        finally:
            release.set()
        return await future

    assert run_real(real_main()) == 1e9 + 3600
    assert_all_original()


def test_a_second_patched_loop_refused_in_the_same_thread_leaves_the_first_in_charge() -> None:
    async def main() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        other = virtualtime.new_event_loop(patch_time=True, start=5e8)
        try:
            with pytest.raises(RuntimeError):
                other.run_forever()  # another loop is running in this thread
        finally:
            other.close()
        await asyncio.sleep(2)
        return time.monotonic(), loop.time()

    assert run(main(), patch_time=True, start=10.0) == (12.0, 12.0)


# --------------------------------------------------------- restoring, no cost


def test_every_clock_is_restored_after_an_exception() -> None:
    async def fails() -> None:
        await asyncio.sleep(1)
        assert _patch.installed()
        raise LookupError("boom")

    with pytest.raises(LookupError, match="boom"):
        virtualtime.run(fails(), patch_time=True)
    assert_all_original()


def test_every_clock_is_restored_after_a_deadlock() -> None:
    async def stuck() -> None:
        await asyncio.Event().wait()

    # real-time: deadlock_timeout is the loop's own 10 ms real wait before reporting.
    with pytest.raises(virtualtime.DeadlockError):
        virtualtime.run(stuck(), patch_time=True, deadlock_timeout=0.01)
    assert_all_original()


def test_nothing_is_patched_without_the_option() -> None:
    async def main() -> bool:
        assert_all_original()
        await asyncio.sleep(100)
        assert_all_original()
        r0 = real_monotonic()
        return r0 <= time.monotonic() <= real_monotonic()

    loop = virtualtime.new_event_loop(wall_start=WALL)
    try:
        assert loop._vt_patch is None
        assert loop.run_until_complete(main()) is True
        loop.evolve(5)
        assert_all_original()
    finally:
        loop.close()


def test_names_bound_before_the_run_follow_it_and_are_real_again_after() -> None:
    early = types.ModuleType("bound_early")
    exec("from time import monotonic\nfrom datetime import datetime", early.__dict__)
    during = types.ModuleType("bound_during")

    async def main() -> tuple[float, float, datetime.datetime]:
        await asyncio.sleep(1e6)
        exec("from time import monotonic\nfrom datetime import datetime", during.__dict__)
        return early.monotonic(), during.monotonic(), early.datetime.now(UTC)

    assert run(main(), patch_time=True, wall_start=WALL) == (1e6, 1e6, WALL + 1e6 * SECOND)
    assert early.datetime is REAL_DATETIME is during.datetime
    assert early.monotonic is ORIGINALS[time, "monotonic"] is during.monotonic
    r0, t0 = real_monotonic(), REAL_DATETIME.now()
    mono, now = during.monotonic(), during.datetime.now()  # type: ignore[operator]
    assert r0 <= mono <= real_monotonic()
    assert t0 <= now <= REAL_DATETIME.now()


def test_the_datetime_classes_stay_themselves_and_subclasses_follow() -> None:
    async def main() -> tuple[type[datetime.datetime], type[datetime.date]]:
        assert datetime.datetime is REAL_DATETIME
        assert type(datetime.datetime.now()) is REAL_DATETIME
        assert type(datetime.date.today()) is REAL_DATE
        assert type(datetime.datetime.today()) is REAL_DATETIME

        class Stamp(datetime.datetime):
            pass

        class Day(datetime.date):
            pass

        stamp, day = Stamp.now(UTC), Day.today()
        assert type(stamp) is Stamp
        assert stamp == WALL
        assert type(day) is Day
        assert day == WALL.astimezone().date()
        return Stamp, Day

    stamp_cls, day_cls = run(main(), patch_time=True, wall_start=WALL)
    before = REAL_DATETIME.now(UTC)
    later = stamp_cls.now(UTC)
    assert type(later) is stamp_cls
    assert before <= later <= REAL_DATETIME.now(UTC)
    assert type(day_cls.today()) is day_cls


def test_dates_pickle_to_the_same_bytes_while_patched() -> None:
    values = (
        REAL_DATETIME(2024, 2, 29, 12, 0, 0, 5, tzinfo=UTC),
        REAL_DATETIME(2021, 11, 7, 1, 30, fold=1),
        REAL_DATE(2024, 2, 29),
    )
    unpatched = {
        protocol: pickle.dumps(values, protocol) for protocol in range(pickle.HIGHEST_PROTOCOL + 1)
    }

    async def main() -> dict[int, bytes]:
        dumped = {protocol: pickle.dumps(values, protocol) for protocol in unpatched}
        assert all(pickle.loads(data) == values for data in dumped.values())
        assert type(pickle.loads(dumped[4])[0]) is REAL_DATETIME
        now = datetime.datetime.now(UTC)
        assert pickle.loads(pickle.dumps(now)) == now == WALL
        return dumped

    patched = run(main(), patch_time=True, wall_start=WALL)
    for protocol, data in patched.items():
        assert pickle.loads(data) == values
        if protocol >= 4:  # below 4 the stdlib drops the fold bit, which ours keeps
            assert data == unpatched[protocol]


# ------------------------------------------------ clocks the program replaces itself
#
# monkeypatch and freezegun put their own function on the module (time.time = ...) and
# restore what they found when they are done.  virtualtime redirects the C objects, never
# the module attributes: the program's replacement answers through the module while it is
# there, every other reference to the clock follows the run, and virtualtime restores only
# what it changed itself -- the replacement stays until its owner undoes it.


@pytest.mark.parametrize("name", ["time", "monotonic", "perf_counter"])
def test_a_clock_replaced_during_the_run_stays_the_programs_and_the_result_is_kept(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    clock: Callable[[], float] = getattr(time, name)  # the C object, bound before the run
    real = _patch._real[name]

    def replacement() -> float:
        return 42.0

    async def main() -> tuple[str, float, float]:
        await asyncio.sleep(10)
        monkeypatch.setattr(time, name, replacement)
        await asyncio.sleep(5)
        return "result", getattr(time, name)(), clock()

    # main() returns, then the run goes on (async generators, executor): each part patched.
    result = virtualtime.run(main(), patch_time=True, wall_start=WALL)
    virtual = (WALL_NS + 15 * 10**9) / 10**9 if name == "time" else 15.0
    assert result == ("result", 42.0, virtual)
    assert getattr(time, name) is replacement  # left for monkeypatch to undo
    assert not _patch.installed()
    assert c_fields() == C_FIELDS_BEFORE  # what virtualtime changed is restored
    before = real()
    assert before <= clock() <= real()
    monkeypatch.undo()
    assert_all_original()


def test_clocks_replaced_before_the_run_answer_through_the_module_and_the_rest_follow(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    c_time, c_monotonic = time.time, time.monotonic  # the C objects, bound before the run
    monkeypatch.setattr(time, "time", lambda: 42.0)
    monkeypatch.setattr(time, "monotonic", lambda: 7.0)

    async def main() -> tuple[float, ...]:
        await asyncio.sleep(3)
        return time.time(), time.monotonic(), c_time(), c_monotonic()

    result = virtualtime.run(main(), patch_time=True, wall_start=WALL)
    assert result == (42.0, 7.0, (WALL_NS + 3 * 10**9) / 10**9, 3.0)
    assert not _patch.installed()
    assert c_fields() == C_FIELDS_BEFORE
    monkeypatch.undo()
    assert_all_original()


def test_replacements_made_between_evolve_steps_are_respected(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    millennium = REAL_DATETIME(2000, 1, 1, tzinfo=UTC)

    class Frozen(REAL_DATETIME):  # what a freezing library puts in place of the class
        @classmethod
        def now(cls, tz: datetime.tzinfo | None = None) -> Frozen:
            return cls.fromtimestamp(millennium.timestamp(), tz)

    readings: list[tuple[object, ...]] = []

    def replace() -> None:
        monkeypatch.setattr(datetime, "datetime", Frozen)
        monkeypatch.setattr(time, "time", lambda: 42.0)
        monkeypatch.setattr(time, "perf_counter", lambda: 7.0)

    c_time, c_perf_counter = time.time, time.perf_counter  # the C objects

    def read() -> None:
        readings.append(
            (datetime.datetime.now(UTC), time.time(), time.perf_counter(), c_perf_counter())
        )
        readings.append((REAL_DATETIME.now(UTC), c_time()))

    loop = virtualtime.new_event_loop(patch_time=True, wall_start=WALL)
    try:
        loop.call_later(1, replace)
        loop.call_later(2, read)
        loop.evolve(1)  # the replacements are made in this step...
        loop.evolve(1)  # ...and are in place while the clocks are redirected for this one
    finally:
        loop.close()
    assert readings == [
        (millennium, 42.0, 7.0, 2.0),
        (WALL + 2 * SECOND, (WALL_NS + 2 * 10**9) / 10**9),
    ]
    assert datetime.datetime is Frozen
    assert c_fields() == C_FIELDS_BEFORE
    monkeypatch.undo()
    assert_all_original()


def test_thread_start_replaced_during_the_run_is_left_to_the_program(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []

    def start(thread: threading.Thread) -> None:  # records, starts nothing
        asked.append(thread.name)

    async def main() -> str:
        await asyncio.sleep(1)
        monkeypatch.setattr(threading.Thread, "start", start)
        threading.Thread(name="recorded").start()
        return "result"

    assert virtualtime.run(main(), patch_time=True) == "result"
    assert asked == ["recorded"]
    assert vars(threading.Thread)["start"] is start
    # monkeypatch puts back what it found, virtualtime's own replacement (harmless outside a
    # run: it starts threads as the real method does); the next patched run puts the real
    # method back when it ends.
    monkeypatch.undo()
    run(asyncio.sleep(1), patch_time=True)


def test_undo_leaves_a_c_definition_another_tool_rewrote_after_it() -> None:
    # The compiled path points datetime.now's C definition at its trampoline; a C hook such
    # as time-machine's writes the same field.  A class method of our own on a definition of
    # our own (never called: its function pointer is a made-up number) stands in for it.
    name = ctypes.create_string_buffer(b"now")
    definition = _hook._MethodDef(ctypes.addressof(name), 0x1000, 0x0010 | 0x0082, None)

    class Host:
        pass

    Host.now = _hook._new_class_method(Host, ctypes.addressof(definition))  # type: ignore[attr-defined]
    try:
        ours = _hook.Redirections()
        ours.redirect_definition(Host, "now", 0x2000)
        ours.undo()
        assert definition.ml_meth == 0x1000  # alone, everything is put back
        ours.redirect_definition(Host, "now", 0x2000)
        definition.ml_meth = 0x3000  # the other tool, after us
        ours.undo()
        assert definition.ml_meth == 0x3000  # theirs to restore
        assert not ours
    finally:
        del Host.now  # type: ignore[attr-defined]


def test_time_patch_repr_names_its_loop() -> None:
    loop = virtualtime.new_event_loop(patch_time=True, wall_start=0.0)
    try:
        assert isinstance(loop._vt_patch, TimePatch)
        assert repr(loop._vt_patch).startswith("<TimePatch loop=<VirtualEventLoop")
        assert "wall_start=0.0" in repr(loop._vt_patch)
    finally:
        loop.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_process_forked_from_the_loop_thread_sees_real_clocks() -> None:
    async def main() -> tuple[float, float]:
        await asyncio.sleep(10)
        read, write = os.pipe()
        with warnings.catch_warnings():
            # 3.12+ warns about fork() in a process that has threads (the suite's own);
            # the child below only reads clocks and writes to a pipe.
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # the child: report how far its monotonic clock moves in real time
            try:
                start = time.monotonic()
                time.sleep(0.05)  # real-time: the child's clock must really move
                os.write(write, repr(time.monotonic() - start).encode())
            finally:
                os._exit(0)
        os.close(write)
        data = b""
        while chunk := os.read(read, 100):
            data += chunk
        os.close(read)
        os.waitpid(pid, 0)  # noqa: ASYNC222 - the child has already written and exited
        return float(data), time.monotonic()

    child_elapsed, parent_monotonic = virtualtime.run(main(), patch_time=True)
    assert child_elapsed >= 0.04
    assert parent_monotonic == 10.0
