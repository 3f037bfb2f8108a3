"""What ``patch_time=True`` costs: install + restore with many modules loaded, and per call.

Run by hand (never a test): ``python bench/bench_patch_time.py [--modules 1500]``.

It loads every importable top-level stdlib module plus generated modules until at least
``--modules`` modules are in ``sys.modules`` (each generated module binds clocks the ways real
libraries do: ``from time import monotonic``, a default argument, a stored
``functools.partial(datetime.now, UTC)``), then measures, in one process:

* install + restore: entering and leaving a loop's :class:`~virtualtime._clocks._patch.TimePatch`
  (what every ``run_forever``/``evolve`` from outside does), median of many;
* per call, on the patched loop's thread and (the real path) on another thread, each against
  the unpatched clock called in the same place: interleaved rounds, best of each, so load on
  the machine hits both sides alike.  Which path ran (compiled helper or pure Python) is
  printed first; ``VIRTUALTIME_PURE_PYTHON=1`` forces the pure one.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import functools
import math
import statistics
import sys
import time
import timeit
import types
from collections.abc import Callable
from typing import Any

import virtualtime
from virtualtime._clocks._patch import _real_perf_counter as real_clock


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--modules", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--calls", type=int, default=20_000, help="calls per timing round")
    parser.add_argument(
        "--stored-every", type=int, default=50, help="one generated module in N stores a partial"
    )
    options = parser.parse_args()
    loaded = load_modules(options.modules, options.stored_every)
    import gc

    from virtualtime._clocks import _hook, _patch

    tracked = len(gc.get_objects())
    utc = datetime.UTC
    stored_now = functools.partial(datetime.datetime.now, utc)  # bound before the first install
    assert stored_now.func == datetime.datetime.now

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

    loop.run_until_complete(per_call_table(options.calls))
    loop.close()


async def per_call_table(calls: int) -> None:
    """ns per call on the patched loop's thread against the real clock read in the same place.

    Interleaved rounds, best of each: the machine may be busy, and both sides see the same
    noise.  "new instant" rows move virtual time by 1 µs before each call (so nothing cached
    can answer), and their real twins do the same step.
    """
    import virtualtime._clocks._patch as patch

    loop = asyncio.get_running_loop()
    assert isinstance(loop, virtualtime.VirtualEventLoop)
    utc = datetime.UTC
    real_now = patch._real_datetime_now

    def step() -> None:
        loop._vt_ticks += 1000

    def pair(virtual: Callable[[], Any], real: Callable[[], Any]) -> tuple[Any, Any]:
        return virtual, real

    def stepped(clock: Callable[[], Any]) -> Callable[[], Any]:
        def call() -> Any:
            step()
            return clock()

        return call

    rows: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
        "time.monotonic()": pair(time.monotonic, patch._real_monotonic),
        "time.monotonic_ns()": pair(time.monotonic_ns, patch._real_monotonic_ns),
        "time.perf_counter()": pair(time.perf_counter, patch._real_perf_counter),
        "time.time(), new instant": pair(stepped(time.time), stepped(patch._real_time)),
        "datetime.now(UTC), same instant": pair(
            lambda: datetime.datetime.now(utc), lambda: real_now(utc)
        ),
        "datetime.now(UTC), new instant": pair(
            stepped(lambda: datetime.datetime.now(utc)), stepped(lambda: real_now(utc))
        ),
        "datetime.now(), new instant": pair(
            stepped(datetime.datetime.now), stepped(lambda: real_now(None))
        ),
    }
    show("loop thread", best_of(rows, calls))
    elsewhere = {
        "time.monotonic()": pair(time.monotonic, patch._real_monotonic),
        "datetime.now(UTC)": pair(lambda: datetime.datetime.now(utc), lambda: real_now(utc)),
    }
    show("another thread", await asyncio.to_thread(best_of, elsewhere, calls))


def best_of(
    rows: dict[str, tuple[Callable[[], Any], Callable[[], Any]]], calls: int
) -> dict[str, list[float]]:
    best = {name: [math.inf, math.inf] for name in rows}
    for _ in range(30):
        for name, funcs in rows.items():
            for side, func in enumerate(funcs):
                took = timeit.Timer(func, timer=real_clock).timeit(calls) / calls * 1e9
                best[name][side] = min(best[name][side], took)
    return best


def show(where: str, best: dict[str, list[float]]) -> None:
    print(f"{'ns per call, ' + where:<34} {'patched':>8} {'real':>6} {'adds':>6}")
    for name, (virtual, real) in best.items():
        print(f"{name:<34} {virtual:>8.0f} {real:>6.0f} {virtual - real:>6.0f}")


if __name__ == "__main__":
    main()
