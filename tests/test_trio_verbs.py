"""The driving verbs are backend-neutral: one driver, the same (time, event) story on both.

``virtualtime.step/evolve/run_until/fast_forward/settle/peek/now`` act on whichever virtual
clock runs the calling task: the asyncio loop, or a trio ``VirtualClock`` (plain trio, anyio on
trio, the pytest plugin).  The scenario below avoids same-instant wake-ups, whose order is
FIFO on asyncio and deliberately random on trio.
"""

from __future__ import annotations

import math

import anyio
import pytest
import trio

import virtualtime
import virtualtime.trio


async def _scenario() -> list[tuple[float, str]]:
    log: list[tuple[float, str]] = []

    def note(event: str) -> None:
        log.append((virtualtime.now(), event))

    async def worker() -> None:
        for delay in (0.5, 1.25, 2.0, 10.0):
            await anyio.sleep(delay)
            note(f"worker slept {delay}")

    async with anyio.create_task_group() as group:
        group.start_soon(worker)
        note(f"settled at {await virtualtime.settle()}")
        note(f"peek {virtualtime.peek()}")
        note(f"step to {await virtualtime.step()}")
        note(f"evolve to {await virtualtime.evolve(1.0)}")
        note(f"peek {virtualtime.peek()}")
        note(f"run_until {await virtualtime.run_until(3.75)}")
        note(f"fast_forward to {await virtualtime.fast_forward(20.0)}")
        note(f"step to {await virtualtime.step()}")
    note(f"peek {virtualtime.peek()}")
    return log


EXPECTED = [
    (0.0, "settled at 0.0"),
    (0.0, "peek 0.5"),
    (0.5, "worker slept 0.5"),
    (0.5, "step to 0.5"),
    (1.5, "evolve to 1.5"),
    (1.5, "peek 1.75"),
    (1.75, "worker slept 1.25"),
    (3.75, "worker slept 2.0"),
    (3.75, "run_until 3.75"),
    (23.75, "worker slept 10.0"),
    (23.75, "fast_forward to 23.75"),
    (23.75, "step to None"),
    (23.75, "peek inf"),
]


@pytest.mark.parametrize("autojump", [False, True])
def test_one_driver_tells_the_same_story_on_asyncio_and_trio(autojump: bool) -> None:
    on_asyncio = virtualtime.anyio_run(_scenario, backend="asyncio", autojump=autojump)
    on_trio = virtualtime.anyio_run(_scenario, backend="trio", autojump=autojump)
    if autojump:
        # With autojump the worker's timers fire on their own; only manual mode pins the
        # whole story, but both backends must still agree with each other.
        assert on_trio == on_asyncio
    else:
        assert on_asyncio == EXPECTED
        assert on_trio == EXPECTED


async def _plain_trio_driver() -> list[float]:
    seen = []

    async def ticker() -> None:
        while True:
            await trio.sleep(1)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        seen.append(await virtualtime.evolve(2.5))
        seen.append(virtualtime.peek())
        seen.append(await virtualtime.step() or math.nan)
        seen.append(await virtualtime.run_until(10.0))
        nursery.cancel_scope.cancel()
    return seen


def test_the_verbs_work_under_plain_virtualtime_trio_run() -> None:
    assert virtualtime.trio.run(_plain_trio_driver, autojump=False) == [2.5, 3.0, 3.0, 10.0]


def test_bad_input_is_refused_on_trio_and_leaves_time_alone() -> None:
    async def main() -> float:
        await trio.sleep(5)
        with pytest.raises(ValueError, match="dt must be >= 0"):
            await virtualtime.evolve(-1)
        with pytest.raises(ValueError, match="t must not be in the past"):
            await virtualtime.run_until(1.0)
        with pytest.raises(ValueError, match="finite"):
            await virtualtime.fast_forward(math.inf)
        return virtualtime.now()

    assert virtualtime.trio.run(main) == 5.0


def test_the_verbs_refuse_a_trio_run_without_a_virtual_clock() -> None:
    async def main() -> None:
        with pytest.raises(virtualtime.VirtualTimeError, match="MockClock"):
            virtualtime.now()
        with pytest.raises(virtualtime.VirtualTimeError, match="MockClock"):
            await virtualtime.settle()

    trio.run(main, clock=trio.testing.MockClock())


def test_outside_any_run_the_verbs_still_say_what_they_need() -> None:
    with pytest.raises(virtualtime.VirtualTimeError, match="needs a running virtual"):
        virtualtime.now()
