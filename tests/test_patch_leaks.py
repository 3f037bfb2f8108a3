"""``patch_time`` costs no memory per install: many runs, many ``evolve()`` steps, flat.

The clocks are redirected when a patched run starts and restored when it stops -- three
times per ``virtualtime.run()`` (``main``, then the async generators and the executor are
shut down on the same loop) and once per ``evolve()`` of a patched manual loop.  Whatever an
install allocates must therefore come back, or be made once and reused, or a long test suite
or a simulation driven step by step grows without bound (it did: about 7 KiB per run and
2.3 KiB per step, kept method definitions that were copied anew on every install).

Measured after a warm-up (first-use caches, the pure path's first search of the heap).  Runs
with :mod:`tracemalloc`, in two ways: everything still allocated by code in
``virtualtime/_clocks`` (which should not grow at all), and all memory still traced (which
other caches in the interpreter may nudge, so it gets a per-run allowance far below what one
leaked definition per clock costs).  The many ``evolve()`` steps by the interpreter's count
of allocated blocks, which is free to keep.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import virtualtime
from virtualtime._clocks import _patch

CLOCKS_CODE = str(Path(_patch.__file__).parent / "*")
WALL = 1_900_000_000.0  # a fixed wall_start: the real time now would be a new cache entry


class Growth:
    """Bytes still allocated after a measured block, beyond what was allocated before it."""

    total = 0
    clocks = 0


def _clocks_bytes(snapshot: tracemalloc.Snapshot) -> int:
    kept = snapshot.filter_traces([tracemalloc.Filter(True, CLOCKS_CODE)])
    return sum(stat.size for stat in kept.statistics("filename"))


@contextmanager
def measured() -> Iterator[Growth]:
    growth = Growth()
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        gc.collect()
        total_before = tracemalloc.get_traced_memory()[0]
        clocks_before = _clocks_bytes(tracemalloc.take_snapshot())
        yield growth
        gc.collect()
        growth.total = tracemalloc.get_traced_memory()[0] - total_before
        growth.clocks = _clocks_bytes(tracemalloc.take_snapshot()) - clocks_before
    finally:
        if not was_tracing:
            tracemalloc.stop()


def repeat(action: Callable[[], object], count: int) -> None:
    for _ in range(count):
        action()


async def tick() -> float:
    await asyncio.sleep(1)
    return 1.0


def patched_run() -> None:
    assert virtualtime.run(tick(), patch_time=True, wall_start=WALL) == 1.0
    assert not _patch.installed()


def test_many_patched_runs_keep_no_memory() -> None:
    repeat(patched_run, 30)  # warm-up: first-use caches fill here
    runs = 300
    with measured() as growth:
        repeat(patched_run, runs)
    # A leak of one definition per clock per install is ~7 KiB per run: 2 MiB here.
    assert growth.clocks < 2048, f"{growth.clocks} bytes kept by virtualtime._clocks"
    assert growth.total < runs * 512, f"{growth.total / runs:.0f} bytes kept per run"


def test_twenty_thousand_evolve_steps_of_a_patched_manual_loop_keep_no_memory() -> None:
    loop = virtualtime.new_event_loop(patch_time=True, wall_start=WALL)
    try:
        seen = [0.0]  # the last reading only: a growing list would be growth of our own

        def read_clock() -> None:  # a timer each step: the loop really runs, patched
            seen[0] = time.monotonic()
            loop.call_later(1, read_clock)

        loop.call_later(1, read_clock)
        repeat(lambda: loop.evolve(1), 100)  # warm-up
        steps = 20_000
        # Counted in blocks (sys.getallocatedblocks), which costs nothing per allocation:
        # tracemalloc would make this many steps slow.
        gc.collect()
        blocks_before = sys.getallocatedblocks()
        repeat(lambda: loop.evolve(1), steps)
        gc.collect()
        blocks = sys.getallocatedblocks() - blocks_before
        # Each step's timer read the patched clock: virtual time, one second a step.
        assert seen == [float(100 + steps)]
    finally:
        loop.close()
    # A leak of one definition per clock per install is 26 blocks a step: 520,000 here.
    assert blocks < steps // 10, f"{blocks} blocks still allocated after {steps} steps"
