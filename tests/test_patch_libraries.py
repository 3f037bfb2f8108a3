"""Real libraries under ``patch_time``, each imported at the top of this module (before any run).

Every library here holds its clock in a way that module-attribute patching cannot reach:
cachetools binds ``timer=time.monotonic`` as a default argument, APScheduler 4 does ``from
datetime import datetime`` and stores ``partial(datetime.now, UTC)`` as attrs defaults,
pyrate-limiter does ``from time import monotonic_ns`` and leaks its buckets from a thread of
its own.  freezegun is the other way round: it replaces the clocks on the modules itself, and
must stay in charge of what it replaced.  Expected values come from each library's documented
rule applied to the virtual schedule, never from running the library.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import anyio
import cachetools
import cachetools.func
import freezegun
import pytest
import tenacity
import trio
from apscheduler import AsyncScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger
from pyrate_limiter import Duration, InMemoryBucket, Limiter, Rate

import virtualtime
import virtualtime.trio
from virtualtime._clocks import _patch

UTC = datetime.UTC
WALL = datetime.datetime(2030, 1, 1, tzinfo=UTC)
WEEK = 7 * 24 * 3600

pytest_plugins = ["pytester"]


# ------------------------------------------------------------------------- cachetools


def test_cachetools_ttl_cache_expires_after_simulated_minutes() -> None:
    async def main() -> list[tuple[float, bool]]:
        cache: cachetools.TTLCache[str, int] = cachetools.TTLCache(maxsize=10, ttl=300)
        cache["token"] = 1
        seen = []
        for delay in (60, 239, 0.5, 0.5):  # t = 60, 299, 299.5, 300
            await asyncio.sleep(delay)
            seen.append((asyncio.get_running_loop().time(), "token" in cache))
        return seen

    # TTLCache: an item expires once timer() >= insertion time + ttl.
    assert virtualtime.run(main(), patch_time=True) == [
        (60.0, True),
        (299.0, True),
        (299.5, True),
        (300.0, False),
    ]


def test_cachetools_ttl_cache_decorator_recomputes_after_its_ttl() -> None:
    calls: list[float] = []

    @cachetools.func.ttl_cache(maxsize=4, ttl=600)
    def lookup(key: str) -> str:
        calls.append(asyncio.get_running_loop().time())
        return key.upper()

    async def main() -> None:
        for _ in range(25):  # every minute for 25 minutes
            assert lookup("a") == "A"
            await asyncio.sleep(60)

    virtualtime.run(main(), patch_time=True)
    assert calls == [0.0, 600.0, 1200.0]


# ------------------------------------------------------------------------ APScheduler 4

fires: dict[str, list[datetime.datetime]] = {"hourly": [], "cron": []}


async def _hourly() -> None:
    fires["hourly"].append(datetime.datetime.now(UTC))


async def _six_hourly() -> None:
    fires["cron"].append(datetime.datetime.now(UTC))


def test_apscheduler4_interval_and_cron_over_a_simulated_week() -> None:
    fires["hourly"].clear()
    fires["cron"].clear()
    # Local midnight: APScheduler reads cron fields in the local zone (its default), and
    # both triggers take their start from datetime.now() -- attrs factories bound at import.
    midnight = datetime.datetime(2030, 1, 1)

    async def main() -> None:
        async with AsyncScheduler() as scheduler:
            await scheduler.add_schedule(_hourly, IntervalTrigger(hours=1), id="hourly")
            await scheduler.add_schedule(_six_hourly, CronTrigger(hour="*/6"), id="cron")
            await scheduler.start_in_background()
            await asyncio.sleep(WEEK + 1)

    virtualtime.run(main(), patch_time=True, wall_start=midnight)
    # Interval: at the start and every hour after, through 168 h.  Cron */6: 00, 06, 12, 18.
    start, hour = midnight.astimezone(UTC), datetime.timedelta(hours=1)
    assert fires["hourly"] == [start + n * hour for n in range(169)]
    assert fires["cron"] == [start + 6 * n * hour for n in range(29)]
    assert all(moment.astimezone().minute == 0 for moment in fires["hourly"] + fires["cron"])


# ----------------------------------------------------------------------- APScheduler 3

APSCHEDULER3 = os.environ.get("VIRTUALTIME_APSCHEDULER3")
APSCHEDULER3_SCRIPT = """
import asyncio, datetime
import apscheduler
from apscheduler.schedulers.asyncio import AsyncIOScheduler
import virtualtime

assert apscheduler.__version__.startswith("3."), apscheduler.__version__
UTC = datetime.UTC
fires = {"interval": [], "cron": []}

async def hourly():
    fires["interval"].append(datetime.datetime.now(UTC))

async def six_hourly():
    fires["cron"].append(datetime.datetime.now(UTC))

async def main():
    scheduler = AsyncIOScheduler(timezone=UTC)
    scheduler.add_job(hourly, "interval", hours=1)
    scheduler.add_job(six_hourly, "cron", hour="*/6")
    scheduler.start()
    await asyncio.sleep(7 * 24 * 3600 + 1)
    scheduler.shutdown(wait=False)

wall = datetime.datetime(2030, 1, 1, tzinfo=UTC)
virtualtime.run(main(), patch_time=True, wall_start=wall)
hour = datetime.timedelta(hours=1)
# APScheduler 3: an interval job first fires one interval after it is added.
assert fires["interval"] == [wall + n * hour for n in range(1, 169)], fires["interval"][:3]
assert fires["cron"] == [wall + 6 * n * hour for n in range(29)], fires["cron"][:3]
print("ok")
"""


@pytest.mark.skipif(
    APSCHEDULER3 is None,
    reason="APScheduler 3 and 4 share the import name 'apscheduler', so the test extra holds 4; "
    ".ci/run installs 3.11 aside and points VIRTUALTIME_APSCHEDULER3 at it",
)
def test_apscheduler3_asyncio_scheduler_over_a_simulated_week() -> None:
    assert APSCHEDULER3 is not None
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([APSCHEDULER3, *sys.path])}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(APSCHEDULER3_SCRIPT)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.stdout == "ok\n", result.stderr


# ----------------------------------------------------------------------- pyrate-limiter


def test_pyrate_limiter_imported_at_module_top_allows_exactly_its_rate() -> None:
    limit, window, step = 2, 10.0, 3.0  # 2 per 10 s; attempts every 3 s (never on an edge)
    attempts = [n * step for n in range(15)]
    allowed_times: list[float] = []
    for t in attempts:  # the sliding-window rule, by hand
        if sum(1 for a in allowed_times if t - a < window) < limit:
            allowed_times.append(t)

    async def main() -> list[float]:
        bucket = InMemoryBucket([Rate(limit, Duration.SECOND * int(window))])
        limiter = Limiter(bucket)  # made in the run: its own leak thread shares the clock
        now: Any = bucket.now  # untyped in pyrate-limiter

        def leak_outdated() -> None:
            bucket.leak(now())

        allowed = []
        for _ in attempts:
            if limiter.try_acquire("client", blocking=False):
                allowed.append(asyncio.get_running_loop().time())
            # What pyrate-limiter's leak thread does every 10 real seconds, done after every
            # attempt from a thread started here: drop the items older than the window.
            leak = threading.Thread(target=leak_outdated)
            leak.start()
            await asyncio.to_thread(leak.join, 5)  # real-time: joins a short thread
            await asyncio.sleep(step)
        return allowed

    assert virtualtime.run(main(), patch_time=True) == allowed_times
    assert len(allowed_times) == 8


# ----------------------------------------------------------------- tenacity on trio


MARKED_TENACITY_TEST = """
import datetime

import anyio
import pytest
import tenacity

WALL = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request):
    return request.param


@pytest.mark.anyio
@pytest.mark.virtualtime(patch_time=True, wall_start=WALL)
async def test_stop_after_delay(anyio_backend):
    attempts = []

    @tenacity.retry(
        stop=tenacity.stop_after_delay(60),
        wait=tenacity.wait_fixed(7),
        sleep=anyio.sleep,
        reraise=True,
    )
    async def flaky():
        attempts.append(anyio.current_time())
        raise ConnectionError("down")

    with pytest.raises(ConnectionError):
        await flaky()
    # tenacity stops once the delay since the first attempt reaches 60 s: 0, 7, ..., 63.
    assert attempts == [7.0 * n for n in range(10)]
    assert datetime.datetime.now(datetime.UTC) == WALL + datetime.timedelta(seconds=63)
"""


def test_tenacity_stop_after_delay_under_the_marker_on_both_backends(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\nfilterwarnings = error\n")
    pytester.makepyfile(test_marked_tenacity=MARKED_TENACITY_TEST)
    result = pytester.runpytest(
        *("-p", "no:cacheprovider", "-p", "no:asyncio", "-p", "no:hypothesispytest"),
        *("-p", "no:looptime_plugin", "-p", "no:looptime_chronometers"),
        *("-p", "no:looptime_timeproxies", "--strict-markers"),
    )
    result.assert_outcomes(passed=2)


def test_tenacity_stop_after_delay_on_trio_directly() -> None:
    async def main() -> list[float]:
        attempts: list[float] = []
        retrying = tenacity.AsyncRetrying(
            stop=tenacity.stop_after_delay(30),
            wait=tenacity.wait_exponential(multiplier=1, max=16),
            sleep=trio.sleep,
        )

        async def call() -> None:
            async for attempt in retrying:
                with attempt:
                    attempts.append(trio.current_time())
                    raise TimeoutError

        with pytest.raises(tenacity.RetryError):
            await call()
        return attempts

    # wait_exponential(1, max=16): 1, 2, 4, 8, 16 s; the attempt at 31 s is past 30: last.
    assert virtualtime.trio.run(main, patch_time=True) == [0.0, 1.0, 3.0, 7.0, 15.0, 31.0]


# ------------------------------------------------------------------------------ logging


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_logging_formatter_timestamps_follow_wall_start(backend: str) -> None:
    handler = _Collect()
    formatter = logging.Formatter("%(asctime)s %(message)s")
    formatter.converter = time.gmtime  # UTC in the output, whatever the machine's zone
    handler.setFormatter(formatter)
    log = logging.getLogger(f"virtualtime.tests.{backend}")
    log.addHandler(handler)
    log.propagate = False
    log.setLevel(logging.INFO)

    async def main() -> None:
        for _ in range(3):
            await anyio.sleep(90.25)
            log.info("tick")

    try:
        virtualtime.anyio_run(main, backend=backend, patch_time=True, wall_start=WALL)
    finally:
        log.removeHandler(handler)
    assert handler.lines == [
        "2030-01-01 00:01:30,250 tick",
        "2030-01-01 00:03:00,500 tick",
        "2030-01-01 00:04:30,750 tick",
    ]


# ---------------------------------------------------------------------------- freezegun
#
# freezegun puts its own functions and classes on the modules (time.time, datetime.datetime,
# and every module attribute bound to them) and puts back what it found when it stops.
# virtualtime redirects the C objects instead, so the two meet only where freezegun's fakes
# call the real clocks: each keeps what it changed.

FROZEN = datetime.datetime(2020, 1, 1, tzinfo=UTC)


def test_freezegun_started_during_a_patched_run_keeps_its_clocks_and_the_run_its_result() -> None:
    c_time, c_monotonic = time.time, time.monotonic  # the C objects, bound before the run
    freezer = freezegun.freeze_time(FROZEN)

    async def main() -> tuple[object, ...]:
        await asyncio.sleep(10)
        freezer.start()
        await asyncio.sleep(5)
        return time.time(), datetime.datetime.now(UTC), c_time(), c_monotonic()

    try:
        result = virtualtime.run(main(), patch_time=True, wall_start=WALL)
        after = time.time(), datetime.datetime.now(UTC)  # still frozen: freezegun's to stop
    finally:
        freezer.stop()
    assert result == (FROZEN.timestamp(), FROZEN, WALL.timestamp() + 15, 15.0)
    assert after == (FROZEN.timestamp(), FROZEN)
    assert time.time is c_time
    assert time.monotonic is c_monotonic
    assert FROZEN < datetime.datetime.now(UTC) < WALL  # real again
    assert not _patch.installed()


def test_a_patched_run_inside_freezegun_sees_its_frozen_clocks_through_the_modules() -> None:
    c_time, c_monotonic = time.time, time.monotonic

    async def main() -> tuple[object, ...]:
        frozen_monotonic = time.monotonic()
        await asyncio.sleep(3)
        return (
            time.time(),
            datetime.datetime.now(UTC),
            time.monotonic() - frozen_monotonic,
            c_time(),
            c_monotonic(),
        )

    with freezegun.freeze_time(FROZEN):
        result = virtualtime.run(main(), patch_time=True, wall_start=WALL)
        assert time.time() == FROZEN.timestamp()
    assert result == (FROZEN.timestamp(), FROZEN, 0.0, WALL.timestamp() + 3, 3.0)
    assert time.time is c_time
    assert time.monotonic is c_monotonic
    assert not _patch.installed()
