"""What ``patch_time=True`` costs: install + restore with many modules loaded, and per call.

Run by hand (never a test): ``python bench/bench_patch_time.py [--modules 1500]``.

It loads every importable top-level stdlib module plus generated modules until at least
``--modules`` modules are in ``sys.modules`` (each generated module binds clocks the ways real
libraries do: ``from time import monotonic``, a default argument, a stored
``functools.partial(datetime.now, UTC)``), then measures, in one process:

* install + restore: entering and leaving a loop's :class:`~virtualtime._patch.TimePatch`
  (what every ``run_forever``/``evolve`` from outside does), median of many;
* per call: ``time.monotonic()``, ``time.time()`` and ``datetime.now(UTC)`` unpatched, patched
  but called from another thread (the real path), and on the patched loop's thread.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import functools
import statistics
import sys
import time
import timeit
import types
from collections.abc import Callable
from typing import Any

import virtualtime
from virtualtime._patch import _real_perf_counter as real_clock


def load_modules(target: int, stored_every: int) -> int:
    for name in sorted(sys.stdlib_module_names):
        if len(sys.modules) >= target:
            break
        if name.startswith("_") or name in {"antigravity", "this", "idlelib", "turtledemo"}:
            continue
        try:
            __import__(name)
        except Exception:
            continue
    index = 0
    while len(sys.modules) < target:
        module = types.ModuleType(f"generated_{index}")
        source = (
            "import datetime, functools, time\n"
            "from time import monotonic\n"
            "from datetime import datetime as dt\n"
            "def stamp(timer=time.monotonic):\n    return timer()\n"
        )
        if index % stored_every == 0:  # some hold a bound datetime.now, as attrs defaults do
            source += "NOW = functools.partial(datetime.datetime.now, datetime.UTC)\n"
        exec(source, module.__dict__)
        sys.modules[module.__name__] = module
        index += 1
    return len(sys.modules)


def per_call(func: Callable[[], Any], number: int = 200_000) -> float:
    """Nanoseconds per call, best of 5, timed by the real clock (timeit's own is patched)."""
    timer = timeit.Timer(func, timer=real_clock)
    return min(timer.repeat(number=number, repeat=5)) / number * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--modules", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument(
        "--stored-every", type=int, default=50, help="one generated module in N stores a partial"
    )
    options = parser.parse_args()
    loaded = load_modules(options.modules, options.stored_every)
    import gc

    from virtualtime import _hook, _patch

    tracked = len(gc.get_objects())
    utc = datetime.UTC
    stored_now = functools.partial(datetime.datetime.now, utc)  # before the first install

    loop = virtualtime.new_event_loop(patch_time=True)
    patch = loop._vt_patch
    assert patch is not None
    start = real_clock()
    with patch:
        pass
    first = real_clock() - start
    stored = len(
        _hook.bound_methods(tuple(_patch._all_subclasses(datetime.date)), _patch._METHOD_NAMES)
    )
    samples = []
    for _ in range(options.rounds):
        start = real_clock()
        with patch:
            pass
        samples.append(real_clock() - start)
    mode = "compiled helper" if _patch.COMPILED else "pure Python"
    print(f"path: {mode}; modules loaded: {loaded}; gc-tracked objects: {tracked:,}")
    print(f"bound datetime methods stored before the run: {stored}")
    print(f"first install + restore after imports: {first * 1e3:.3f} ms")
    print(
        f"install + restore: median {statistics.median(samples) * 1e3:.3f} ms, "
        f"min {min(samples) * 1e3:.3f} ms over {options.rounds} rounds"
    )

    clocks: dict[str, Callable[[], Any]] = {
        "time.monotonic()": time.monotonic,
        "time.time()": time.time,
        "datetime.now(UTC)": lambda: datetime.datetime.now(utc),
        "stored partial()": stored_now,
    }
    unpatched = {name: per_call(func) for name, func in clocks.items()}
    other: dict[str, float] = {}
    virtual: dict[str, float] = {}

    def elsewhere() -> None:
        other.update({name: per_call(func) for name, func in clocks.items()})

    async def inside() -> None:
        # run by an executor worker: a thread that keeps the real clocks
        await asyncio.to_thread(elsewhere)
        virtual.update({name: per_call(func) for name, func in clocks.items()})

    loop.run_until_complete(inside())
    loop.close()
    print(f"{'ns per call':<20} {'unpatched':>10} {'other thread':>13} {'loop thread':>12}")
    for name in clocks:
        print(f"{name:<20} {unpatched[name]:>10.0f} {other[name]:>13.0f} {virtual[name]:>12.0f}")


if __name__ == "__main__":
    main()
