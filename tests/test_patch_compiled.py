"""The compiled clocks (``virtualtime._clocks._cclocks``) answer what the Python path answers.

The C hot path reads the loop's tick counter itself and builds ``datetime.now(UTC)`` from a
civil-date computation of its own, so it gets its own oracle: :func:`virtualtime.wall_time`,
which takes the Python route (``epoch + timedelta``).  The suite runs twice in CI, once with
``VIRTUALTIME_PURE_PYTHON=1``; there these tests check the pure path against the same oracle.
"""

from __future__ import annotations

import asyncio
import datetime
import importlib.util
import os
import random
import time

import pytest

import virtualtime
from virtualtime._clocks import _patch

UTC = datetime.UTC
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=UTC)
FIRST = datetime.datetime(1, 1, 1, tzinfo=UTC)


def test_the_compiled_helper_is_used_whenever_it_was_built() -> None:
    built = importlib.util.find_spec("virtualtime._clocks._cclocks") is not None
    forced_pure = bool(os.environ.get("VIRTUALTIME_PURE_PYTHON"))
    assert _patch.COMPILED is (built and not forced_pure)


def _instants() -> list[datetime.datetime]:
    """Seeded instants over the whole datetime range, plus the calendar's hard cases."""
    rng = random.Random(20261202)
    span = (datetime.datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC) - FIRST).total_seconds()
    found = {FIRST + datetime.timedelta(seconds=rng.uniform(0, span)) for _ in range(3000)}
    for year in (1, 4, 100, 400, 1582, 1900, 1969, 1970, 2000, 2024, 2100, 9999):
        for month, day in ((1, 1), (2, 28), (3, 1), (12, 31)):
            found.add(datetime.datetime(year, month, day, tzinfo=UTC))
        if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0):
            found.add(datetime.datetime(year, 2, 29, 23, 59, 59, 999_999, tzinfo=UTC))
    found.add(EPOCH - datetime.timedelta(microseconds=1))
    found.add(datetime.datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC))  # float sleeps: ulp ~60 µs
    return sorted(found)


def test_now_utc_matches_the_python_route_over_the_whole_calendar() -> None:
    instants = _instants()

    async def main() -> list[tuple[object, ...]]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, virtualtime.VirtualEventLoop)
        mismatches: list[tuple[object, ...]] = []
        for instant in instants:
            delay = (instant - FIRST) / datetime.timedelta(microseconds=1) * 1e-6
            await virtualtime.sleep_until(loop.start_time + delay)
            expected = virtualtime.wall_time()
            now = datetime.datetime.now(UTC)
            seconds, nanos = time.time(), time.time_ns()
            if (now, type(now), now.tzinfo) != (expected, datetime.datetime, UTC):
                mismatches.append((instant, now, expected))
            if seconds != nanos / 10**9:  # correctly rounded, like int / int
                mismatches.append((instant, seconds, nanos))
        return mismatches

    assert virtualtime.run(main(), patch_time=True, wall_start=FIRST) == []


def test_past_the_calendar_now_raises_as_the_python_route_does() -> None:
    async def main() -> None:
        await asyncio.sleep(2 * 86400)  # from 9999-12-31: past datetime.max
        with pytest.raises(OverflowError):
            datetime.datetime.now(UTC)
        assert time.time() == time.time_ns() / 10**9  # the float clocks have no such limit

    last_day = datetime.datetime(9999, 12, 31, tzinfo=UTC)
    virtualtime.run(main(), patch_time=True, wall_start=last_day)


def test_a_loop_subclass_with_its_own_time_is_asked_not_read() -> None:
    class Shifted(virtualtime.VirtualEventLoop):
        def time(self) -> float:
            return super().time() + 0.5

    async def main() -> tuple[float, float, int, int]:
        await asyncio.sleep(10)
        loop = asyncio.get_running_loop()
        assert isinstance(loop, virtualtime.VirtualEventLoop)
        return time.monotonic(), loop.time(), time.monotonic_ns(), loop._vt_ticks

    loop = Shifted(patch_time=True)
    try:
        mono, loop_time, mono_ns, ticks = loop.run_until_complete(main())
    finally:
        loop.close()
    assert (mono, loop_time) == (10.5, 10.5)
    assert mono_ns == ticks == 10 * 10**9


@pytest.mark.parametrize("name", ["monotonic", "perf_counter", "time"])
def test_each_compiled_clock_keeps_real_time_for_the_stdlib(name: str) -> None:
    clock = getattr(time, name)
    real = {"monotonic": _patch._real_monotonic, "perf_counter": _patch._real_perf_counter}.get(
        name, _patch._real_time
    )
    # Code compiled as if it were the stdlib's queue module: the caller rule says real time.
    stdlib_like = compile("def read(clock):\n    return clock()\n", "<queue>", "exec")
    namespace: dict[str, object] = {"__name__": "queue"}
    exec(stdlib_like, namespace)
    read = namespace["read"]
    assert callable(read)

    async def main() -> tuple[float, float, float, float]:
        await asyncio.sleep(1000)
        before = real()
        seen = read(clock)
        after = real()
        return before, seen, after, clock()

    before, seen, after, virtual = virtualtime.run(main(), patch_time=True, wall_start=0)
    assert before <= seen <= after
    assert virtual == 1000.0
