"""The simulation toolkit on both backends: cost per Timer dispatch and per vehicle step.

Two workloads, each run once per backend in a fresh process, rounds interleaved, median of
``--repeats`` CPU times:

* **Timer**: a :class:`virtualtime.sim.Timer` with 100 periodic events (periods 1..100 s
  spread, plain-function actions) run to ``--until``; cost per dispatch.
* **Vehicles**: a :class:`virtualtime.sim.Fleet` of 100 vehicles on a
  :class:`~virtualtime.sim.Euclidean` plane with ``step_size=1``, each driving a seeded
  tour of 10 legs; cost per planned step.

Backends: ``asyncio`` (``virtualtime.anyio_run(..., backend="asyncio")``) and ``trio``
(``backend="trio"``, a :class:`virtualtime.trio.VirtualClock`, on which the toolkit sleeps
with kit waits: virtualtime/trio/_park.py).

The figures of record for the toolkit on trio (issue 14 item 7, issue 16's trio rows) are the
``sim.Timer, trio`` and ``sim.Fleet, trio`` rows of ``bench/bench_sim.py``, whose closing lines
give trio / asyncio from one invocation.  This script is the quicker companion for working on
the trio path: other workload shapes (periods 1..7, seeded tours) and ``--profile``.  Run by
hand::

    .venv/bin/python bench/bench_sim_trio.py
    .venv/bin/python bench/bench_sim_trio.py --profile timer-trio
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import pstats
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

HERE: Final = Path(__file__).resolve()
SEED: Final = 20_241_202


def timer_workload(backend: str, until: float) -> tuple[int, float]:
    """(dispatches, final loop time) of 100 periodic events run to ``until``."""
    import anyio

    import virtualtime
    from virtualtime import sim

    count = [0]

    def action(event: sim.PeriodicAction, timer: sim.Timer) -> None:
        count[0] += 1

    async def main() -> tuple[int, float]:
        timer = sim.Timer(
            *(sim.PeriodicAction(action, start=1, period=1 + i % 7) for i in range(100))
        )
        await timer.run(until)
        return count[0], anyio.current_time()

    result: tuple[int, float] = virtualtime.anyio_run(main, backend=backend)
    return result


def vehicle_workload(backend: str, legs: int) -> tuple[int, float]:
    """(planned steps, final loop time) of 100 vehicles driving ``legs`` legs each."""
    import anyio

    import virtualtime
    from virtualtime import sim

    rng = random.Random(SEED)
    tours = [[(rng.uniform(0, 50), rng.uniform(0, 50)) for _ in range(legs)] for _ in range(100)]
    steps = sum(
        max(1, int(-(-sim.Euclidean().distance(a, b) // 1)))
        for tour in tours
        for a, b in zip([(0.0, 0.0), *tour], tour, strict=False)
    )

    async def main() -> tuple[int, float]:
        geometry = sim.Euclidean()
        vehicles = [
            sim.Vehicle(geometry, position=(0.0, 0.0), velocity=1.0, step_size=1.0)
            for _ in range(100)
        ]
        async with sim.Fleet(*vehicles), anyio.create_task_group() as group:

            async def drive(vehicle: sim.Vehicle[Any], tour: list[tuple[float, float]]) -> None:
                for stop in tour:
                    await vehicle.travel_to(stop).wait()

            for vehicle, tour in zip(vehicles, tours, strict=True):
                group.start_soon(drive, vehicle, tour)
        return steps, anyio.current_time()

    result: tuple[int, float] = virtualtime.anyio_run(main, backend=backend)
    return result


WORKLOADS: Final[dict[str, Callable[[str, argparse.Namespace], tuple[int, float]]]] = {
    "timer": lambda backend, args: timer_workload(backend, args.until),
    "vehicles": lambda backend, args: vehicle_workload(backend, args.legs),
}
BACKENDS: Final = ("asyncio", "trio")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--until", type=float, default=2000.0, help="Timer: run to this time")
    parser.add_argument("--legs", type=int, default=10, help="vehicles: legs per tour")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", help="cProfile one cell, e.g. timer-trio")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child or args.profile:
        workload, backend = (args.child or args.profile).split("-")
        profiler = cProfile.Profile() if args.profile else None
        # Imports outside the measurement: trio's import alone costs more than a whole run.
        import anyio  # noqa: F401
        import trio  # noqa: F401

        import virtualtime.trio  # noqa: F401
        from virtualtime import sim  # noqa: F401

        gc.collect()
        cpu0 = time.process_time()
        if profiler:
            profiler.enable()
        units, final = WORKLOADS[workload](backend, args)
        if profiler:
            profiler.disable()
            pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(25)
            return 0
        print(json.dumps({"cpu": time.process_time() - cpu0, "units": units, "final": final}))
        return 0

    cells = [f"{w}-{b}" for w in WORKLOADS for b in BACKENDS]
    runs: dict[str, list[dict[str, Any]]] = {cell: [] for cell in cells}
    for round_ in range(args.repeats):
        for cell in cells[round_ % len(cells) :] + cells[: round_ % len(cells)]:
            command = [sys.executable, str(HERE), "--child", cell]
            command += ["--until", str(args.until), "--legs", str(args.legs)]
            out = subprocess.run(command, capture_output=True, text=True, check=True, timeout=900)
            runs[cell].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"round {round_ + 1}: {cell} done", file=sys.stderr)
    print("| workload | unit | asyncio µs / unit | trio µs / unit | trio / asyncio | same end |")
    print("|---|---|--:|--:|--:|---|")
    for workload, unit in (("timer", "dispatch"), ("vehicles", "vehicle step")):
        per = {}
        for backend in BACKENDS:
            measured = runs[f"{workload}-{backend}"]
            per[backend] = statistics.median(r["cpu"] / r["units"] * 1e6 for r in measured)
        ends = {r["final"] for b in BACKENDS for r in runs[f"{workload}-{b}"]}
        print(
            f"| {workload} | {unit} | {per['asyncio']:.2f} | {per['trio']:.2f} "
            f"| {per['trio'] / per['asyncio']:.2f}x | {'yes' if len(ends) == 1 else ends} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
