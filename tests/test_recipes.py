"""The README's "Testing" recipes, run as they are printed there.

Covers: the three short recipes (pytest-asyncio, anyio on asyncio and trio, a plain
``asyncio.Runner``), then the worked example -- a retry with exponential back-off whose pauses
add up to an hour -- tested the same three ways.  Each test asserts exact virtual times and
takes milliseconds of real time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import pytest

import virtualtime
from virtualtime.pytest_plugin import VirtualTime

T = TypeVar("T")


# --- the three short recipes, as printed ----------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.virtualtime
async def test_wait_for_gives_up_after_exactly_30_seconds() -> None:
    loop = asyncio.get_running_loop()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(asyncio.sleep(3600), timeout=30)
    assert loop.time() == 30.0


@pytest.mark.anyio
@pytest.mark.virtualtime
async def test_move_on_after_gives_up_after_exactly_30_seconds(anyio_backend_name: str) -> None:
    with anyio.move_on_after(30) as scope:
        await anyio.sleep(3600)
    assert scope.cancelled_caught
    assert anyio.current_time() == 30.0


def test_timeout_without_the_plugin() -> None:
    async def main() -> float | None:
        try:
            async with asyncio.timeout(30):
                await asyncio.sleep(3600)
        except TimeoutError:
            return asyncio.get_running_loop().time()
        return None  # not in the README: mypy wants every path to return

    with asyncio.Runner(loop_factory=virtualtime.new_event_loop) as runner:
        assert runner.run(main()) == 30.0


# --- the code under test (README: "A worked example") ---------------------------------------


async def retry(
    operation: Callable[[], Awaitable[T]],
    *,
    attempts: int = 5,
    first_pause: float = 240.0,
    factor: float = 2.0,
) -> T:
    """Await ``operation()`` until it succeeds, pausing longer after each failure.

    With the defaults the pauses are 4, 8, 16 and 32 minutes: an hour in all.
    """
    pause = first_pause
    for attempt in range(1, attempts + 1):
        try:
            return await operation()
        except ConnectionError:
            if attempt == attempts:
                raise
            await asyncio.sleep(pause)
            pause *= factor
    raise AssertionError("unreachable")  # pragma: no cover


# --- recipe 1: pytest-asyncio -----------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.virtualtime
async def test_retry_backs_off_for_an_hour() -> None:
    loop = asyncio.get_running_loop()
    attempts: list[float] = []

    async def flaky() -> str:
        attempts.append(loop.time())
        if len(attempts) < 5:
            raise ConnectionError("service unavailable")
        return "ok"

    started = time.perf_counter()
    assert await retry(flaky) == "ok"
    assert attempts == [0.0, 240.0, 720.0, 1680.0, 3600.0]
    assert time.perf_counter() - started < 1.0  # an hour of back-off, in real milliseconds


@pytest.mark.asyncio
@pytest.mark.virtualtime(start=1000.0)
async def test_retry_gives_up_after_the_last_attempt(virtual_time: VirtualTime) -> None:
    calls = 0

    async def down() -> str:
        nonlocal calls
        calls += 1
        raise ConnectionError("still down")

    with pytest.raises(ConnectionError, match="still down"):
        await retry(down)
    assert calls == 5
    assert virtual_time.now() == 1000.0 + 3600.0


@pytest.mark.asyncio
@pytest.mark.virtualtime(autojump=False)
async def test_no_attempt_before_its_pause_is_over(virtual_time: VirtualTime) -> None:
    attempts: list[float] = []

    async def flaky() -> str:
        attempts.append(virtual_time.now())
        if len(attempts) < 3:
            raise ConnectionError("service unavailable")
        return "ok"

    task = asyncio.create_task(retry(flaky))
    await virtual_time.settle()
    assert attempts == [0.0]
    await virtual_time.evolve(239.999)  # a millisecond early: no second attempt yet
    assert attempts == [0.0]
    await virtual_time.evolve(0.001)
    assert attempts == [0.0, 240.0]
    await virtual_time.run_until(720.0)
    assert await task == "ok"
    assert attempts == [0.0, 240.0, 720.0]


# --- recipe 2: anyio, on both backends ------------------------------------------------------


async def anyio_retry(
    operation: Callable[[], Awaitable[T]], *, attempts: int = 5, first_pause: float = 240.0
) -> T:
    """The same back-off written against anyio, so it runs on asyncio and on trio."""
    pause = first_pause
    for attempt in range(1, attempts + 1):
        try:
            return await operation()
        except ConnectionError:
            if attempt == attempts:
                raise
            await anyio.sleep(pause)
            pause *= 2
    raise AssertionError("unreachable")  # pragma: no cover


@pytest.mark.anyio
@pytest.mark.virtualtime
async def test_retry_backs_off_for_an_hour_on_any_backend(anyio_backend_name: str) -> None:
    attempts: list[float] = []

    async def flaky() -> str:
        attempts.append(anyio.current_time())
        if len(attempts) < 5:
            raise ConnectionError("service unavailable")
        return "ok"

    assert await anyio_retry(flaky) == "ok"
    assert attempts == [0.0, 240.0, 720.0, 1680.0, 3600.0]


# --- recipe 3: a plain asyncio.Runner, no plugin needed -------------------------------------


def test_retry_with_a_plain_runner() -> None:
    attempts: list[float] = []

    async def flaky() -> str:
        attempts.append(asyncio.get_running_loop().time())
        if len(attempts) < 5:
            raise ConnectionError("service unavailable")
        return "ok"

    with asyncio.Runner(loop_factory=virtualtime.new_event_loop) as runner:
        assert runner.run(retry(flaky)) == "ok"
    assert attempts == [0.0, 240.0, 720.0, 1680.0, 3600.0]
