"""A closed virtual loop is garbage like any other: nothing the run touched keeps it alive.

anyio's own suite checks this of asyncio (``test_asyncio_run_does_not_leak_event_loop``): after
a run that used a worker thread, the loop must be collectable once the program drops it.  The
threads module (``virtualtime/_shared/_threads.py``) caches the threads it last saw, and an
anyio worker thread holds its loop; a closed loop forgets that cache.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import threading
import weakref
from collections.abc import Callable

import anyio
import anyio.to_thread
import pytest

import virtualtime


def _blocking() -> int:
    return 42


async def _anyio_job() -> int:
    return await anyio.to_thread.run_sync(_blocking)


async def _asyncio_to_thread() -> int:
    return await asyncio.to_thread(_blocking)


async def _run_in_executor() -> int:
    return await asyncio.get_running_loop().run_in_executor(None, _blocking)


def _remembering(
    job: Callable[[], object], refs: list[weakref.ref[asyncio.AbstractEventLoop]]
) -> Callable[[], object]:
    async def main() -> object:
        refs.append(weakref.ref(asyncio.get_running_loop()))
        return await job()  # type: ignore[misc]

    return main


def _with_anyio_run(main: Callable[[], object]) -> object:
    return anyio.run(
        main,  # type: ignore[arg-type]
        backend="asyncio",
        backend_options={"loop_factory": virtualtime.new_event_loop},
    )


def _with_virtualtime_run(main: Callable[[], object]) -> object:
    return virtualtime.run(main())  # type: ignore[arg-type]


def _with_anyio_run_helper(main: Callable[[], object]) -> object:
    return virtualtime.anyio_run(main, backend="asyncio")  # type: ignore[arg-type]


def _with_runner(main: Callable[[], object]) -> object:
    with asyncio.Runner(loop_factory=functools.partial(virtualtime.new_event_loop)) as runner:
        return runner.run(main())  # type: ignore[arg-type]


def _join_all(threads: set[threading.Thread]) -> None:
    # A function of its own: a loop variable left in the test's frame would hold the last
    # thread, and an anyio worker holds its loop.
    for thread in threads:
        thread.join()


@pytest.mark.parametrize(
    ("runner", "job"),
    [
        pytest.param(_with_anyio_run, _anyio_job, id="anyio.run-anyio.to_thread"),
        pytest.param(_with_anyio_run_helper, _anyio_job, id="virtualtime.anyio_run-to_thread"),
        pytest.param(_with_virtualtime_run, _anyio_job, id="virtualtime.run-anyio.to_thread"),
        pytest.param(_with_virtualtime_run, _asyncio_to_thread, id="virtualtime.run-to_thread"),
        pytest.param(_with_runner, _run_in_executor, id="Runner-run_in_executor"),
    ],
)
def test_closed_loop_is_collected_after_a_thread_job(
    runner: Callable[[Callable[[], object]], object], job: Callable[[], object]
) -> None:
    before = set(threading.enumerate())
    refs: list[weakref.ref[asyncio.AbstractEventLoop]] = []
    assert runner(_remembering(job, refs)) == 42
    # The run's worker threads were told to stop as it ended; wait for them to be gone (an
    # anyio worker holds its loop while it lives, on a stock loop too).
    _join_all(set(threading.enumerate()) - before)
    gc.collect()
    (ref,) = refs
    loop = ref()
    assert loop is None, f"the closed loop is still referenced by {gc.get_referrers(loop)!r}"
