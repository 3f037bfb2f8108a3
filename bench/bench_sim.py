"""The modelling kit's speed against SimPy: one invocation, every workload, ratios to SimPy.

Run by hand (never by CI or pytest), from the project root::

    .venv/bin/python bench/bench_sim.py                 # every workload, 3 repeats
    .venv/bin/python bench/bench_sim.py --quick         # smaller sizes, 1 repeat
    .venv/bin/python bench/bench_sim.py --only mm1,shop --repeats 5

What is measured (CPU time of the run, median of ``--repeats``; the systems of one workload
are interleaved round-robin, so machine noise hits them alike):

* ``mm1`` -- M/M/1 (arrival rate 0.9, service rate 1) for N customers with
  ``sim.Resource``, against the same model in SimPy; µs per customer.  A reference row runs
  the model as plain asyncio (``Lock``, ``asyncio.sleep``) on the same virtual loop: the
  floor the loop sets, against which the kit's own overhead reads.
* ``shop`` -- the Machine Shop example at 10x its simulated time (40 weeks), the kit's port
  (examples/simpy_machine_shop.py) against SimPy's model of it; the parts counts are
  compared, so the two runs are checked to be the same simulation.
* ``timer`` -- a ``sim.Timer`` with 100 events of periods 1, 2, 5 and 10 for 10,000 time
  units, against SimPy with one process per event (``yield env.timeout(period)`` then the
  action); µs per dispatch.  Dispatches at one instant share one loop wake-up (the timer's
  point); a second row gives every event its own instant (periods 1 + k/1000), where each
  dispatch is a wait of its own (which skips its loop round when nothing else is due first,
  see virtualtime/sim/_fast.py).
* ``vehicle`` -- a ``sim.Fleet`` of 100 vehicles doing round trips on a line for a
  simulated day (``step_size`` 10, speed 1), against SimPy with one process per vehicle
  planning the same steps on the same ``sim.Euclidean`` geometry; µs per step.

The kit rows run on the virtual asyncio loop (the fast path) and, with ``(trio)``, on trio.
The summary gives trio / asyncio for every workload; a target (at most 2x) is set only for the
``sim.Timer`` dispatch and the ``Fleet`` step (issues 14 and 16), the others say "no target".
"""

from __future__ import annotations

import argparse
import gc
import importlib
import math
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

import simpy  # noqa: E402

from virtualtime import sim  # noqa: E402

Result = tuple[float, int, object]
"""(cpu seconds, units of work, a check value that must agree across systems)"""


def _cpu(run: Callable[[], tuple[int, object]]) -> Result:
    gc.collect()
    start = time.process_time()
    units, check = run()
    return time.process_time() - start, units, check


# --------------------------------------------------------------------------- M/M/1

ARRIVAL = 0.9
SERVICE = 1.0


def mm1_kit(n: int, backend: str = "asyncio", order: str = "virtualtime") -> Result:
    def run() -> tuple[int, object]:
        rng = random.Random(1)
        done = [0]

        async def customer(server: sim.Resource, service: float) -> None:
            async with server.request():
                await sim.sleep(service)
            done[0] += 1

        async def source() -> None:
            server = sim.Resource(1)
            for _ in range(n):
                sim.start(customer(server, rng.expovariate(SERVICE)))
                await sim.sleep(rng.expovariate(ARRIVAL))

        sim.simulate(source, backend=backend, order=order)
        return n, done[0]

    return _cpu(run)


def mm1_plain_asyncio(n: int) -> Result:
    """The same model as plain asyncio on the virtual loop: tasks, ``Lock``, ``sleep``.

    Not a target: the floor the loop itself sets, to read the kit's own overhead against.
    """
    import asyncio

    import virtualtime

    def run() -> tuple[int, object]:
        rng = random.Random(1)
        done = [0]

        async def customer(lock: asyncio.Lock, service: float) -> None:
            async with lock:
                await asyncio.sleep(service)
            done[0] += 1

        async def source() -> None:
            lock = asyncio.Lock()
            tasks = set()
            for _ in range(n):
                task = asyncio.ensure_future(customer(lock, rng.expovariate(SERVICE)))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                await asyncio.sleep(rng.expovariate(ARRIVAL))
            while tasks:
                await asyncio.wait(set(tasks))

        virtualtime.run(source())
        return n, done[0]

    return _cpu(run)


def mm1_simpy(n: int) -> Result:
    def run() -> tuple[int, object]:
        rng = random.Random(1)
        env = simpy.Environment()
        server = simpy.Resource(env, 1)
        done = [0]

        def customer(service: float) -> Generator[Any, Any, None]:
            with server.request() as req:
                yield req
                yield env.timeout(service)
            done[0] += 1

        def source() -> Generator[Any, Any, None]:
            for _ in range(n):
                env.process(customer(rng.expovariate(SERVICE)))
                yield env.timeout(rng.expovariate(ARRIVAL))

        env.process(source())
        env.run()
        return n, done[0]

    return _cpu(run)


# --------------------------------------------------------------------------- machine shop

SHOP_SCALE = 10


def shop_kit(scale: int, backend: str = "asyncio", order: str = "virtualtime") -> Result:
    shop: Any = importlib.import_module("simpy_machine_shop")

    def run() -> tuple[int, object]:
        random.seed(shop.RANDOM_SEED)
        machines = sim.simulate(
            shop.main, shop.NUM_MACHINES, until=shop.SIM_TIME * scale, backend=backend, order=order
        )
        assert machines is not None
        parts = [m.parts_made for m in machines]
        return sum(parts), parts

    return _cpu(run)


def shop_simpy(scale: int) -> Result:
    """SimPy's Machine Shop model (same constants and random draws as the port)."""
    shop: Any = importlib.import_module("simpy_machine_shop")

    def run() -> tuple[int, object]:
        random.seed(shop.RANDOM_SEED)
        env = simpy.Environment()
        repairman = simpy.PreemptiveResource(env, capacity=1)

        class Machine:
            def __init__(self) -> None:
                self.parts_made = 0
                self.broken = False
                self.process = env.process(self.working())
                env.process(self.breaking())

            def working(self) -> Generator[Any, Any, None]:
                while True:
                    left = shop.time_per_part()
                    while left:
                        start = env.now
                        try:
                            yield env.timeout(left)
                            left = 0
                        except simpy.Interrupt:
                            self.broken = True
                            left -= env.now - start
                            with repairman.request(priority=1) as req:
                                yield req
                                yield env.timeout(shop.REPAIR_TIME)
                            self.broken = False
                    self.parts_made += 1

            def breaking(self) -> Generator[Any, Any, None]:
                while True:
                    yield env.timeout(shop.time_to_failure())
                    if not self.broken:
                        self.process.interrupt()

        def other() -> Generator[Any, Any, None]:
            while True:
                left = shop.JOB_DURATION
                while left:
                    with repairman.request(priority=2) as req:
                        yield req
                        start = env.now
                        try:
                            yield env.timeout(left)
                            left = 0
                        except simpy.Interrupt:
                            left -= env.now - start

        machines = [Machine() for _ in range(shop.NUM_MACHINES)]
        env.process(other())
        env.run(until=shop.SIM_TIME * scale)
        parts = [m.parts_made for m in machines]
        return sum(parts), parts

    return _cpu(run)


# --------------------------------------------------------------------------- timer

TIMER_EVENTS = 100
TIMER_PERIODS = (1, 2, 5, 10)


def _periods(distinct: bool) -> list[float]:
    if distinct:
        return [1 + k / 1000 for k in range(TIMER_EVENTS)]
    return [TIMER_PERIODS[k % len(TIMER_PERIODS)] for k in range(TIMER_EVENTS)]


def timer_kit(horizon: float, distinct: bool, backend: str = "asyncio") -> Result:
    import virtualtime

    def run() -> tuple[int, object]:
        count = [0]

        def action(event: sim.PeriodicAction, timer: sim.Timer) -> None:
            count[0] += 1

        timer = sim.Timer(
            *(sim.PeriodicAction(action, start=p, period=p) for p in _periods(distinct))
        )

        async def main() -> None:
            await timer.run(horizon)

        virtualtime.anyio_run(main, backend=backend)
        return count[0], count[0]

    return _cpu(run)


def timer_simpy(horizon: float, distinct: bool) -> Result:
    def run() -> tuple[int, object]:
        env = simpy.Environment()
        count = [0]

        def event(period: float) -> Generator[Any, Any, None]:
            while True:
                yield env.timeout(period)
                count[0] += 1

        for period in _periods(distinct):
            env.process(event(period))
        env.run(until=horizon + 1e-9)
        return count[0], count[0]

    return _cpu(run)


# --------------------------------------------------------------------------- vehicles

VEHICLES = 100
LINE = 1000.0
STEP = 10.0
DAY = 86_400.0


def vehicle_kit(horizon: float, backend: str = "asyncio") -> Result:
    import virtualtime

    def run() -> tuple[int, object]:
        fleet = sim.Fleet()
        vans = [
            fleet.add(
                sim.Vehicle(sim.Euclidean(), position=(0.0, float(k)), velocity=1.0, step_size=STEP)
            )
            for k in range(VEHICLES)
        ]
        trips = [0]

        async def shuttle(van: sim.Vehicle[Any], k: int) -> None:
            while True:
                await van.travel_to((LINE, float(k)))
                await van.travel_to((0.0, float(k)))
                trips[0] += 1

        async def main() -> None:
            import anyio

            async with fleet:
                with anyio.move_on_after(horizon):
                    async with anyio.create_task_group() as group:
                        for k, van in enumerate(vans):
                            group.start_soon(shuttle, van, k)
                for van in vans:
                    van.halt()

        virtualtime.anyio_run(main, backend=backend)
        distance = sum(van.distance_travelled for van in vans)
        return round(distance / STEP), trips[0]

    return _cpu(run)


def vehicle_simpy(horizon: float) -> Result:
    """One SimPy process per vehicle doing the same step planning on the same geometry.

    Each step: ``distance`` to the target, a step of ``min(STEP, remaining)``, the point
    that far along (``Euclidean.position_along``), sleep ``step / speed``, move there.
    """

    def run() -> tuple[int, object]:
        env = simpy.Environment()
        geometry = sim.Euclidean()
        trips = [0]
        distance = [0.0]

        def shuttle(k: int) -> Generator[Any, Any, None]:
            here: tuple[float, ...] = (0.0, float(k))
            while True:
                for target in ((LINE, float(k)), (0.0, float(k))):
                    origin, done = here, 0.0
                    length = geometry.distance(origin, target)
                    while length - done > sim.ARRIVAL_TOLERANCE:
                        step = (
                            STEP if length - done - STEP > sim.ARRIVAL_TOLERANCE else length - done
                        )
                        yield env.timeout(step / 1.0)
                        done += step
                        point = geometry.position_along(origin, target, done)
                        here = target if point is None or done >= length else point
                        distance[0] += step
                    here = target
                trips[0] += 1

        for k in range(VEHICLES):
            env.process(shuttle(k))
        env.run(until=horizon)
        return round(distance[0] / STEP), trips[0]

    return _cpu(run)


# --------------------------------------------------------------------------- the table


@dataclass
class Row:
    workload: str
    system: str
    unit: str
    run: Callable[[], Result]
    reference: str | None = None  # the SimPy row this row is compared with
    target: float | None = None
    trio_target: float | None = None  # on a trio row: the target for trio / asyncio
    times: list[float] = field(default_factory=list)
    units: int = 0
    check: object = None

    def per_unit_us(self) -> float:
        return statistics.median(self.times) / self.units * 1e6


def build(args: argparse.Namespace) -> list[Row]:
    quick = args.quick
    n = 20_000 if quick else 100_000
    scale = 2 if quick else SHOP_SCALE
    horizon = 2_000.0 if quick else 10_000.0
    day = DAY / 10 if quick else DAY
    rows: list[Row] = []
    want = set(args.only.split(",")) if args.only else {"mm1", "shop", "timer", "vehicle"}
    if "mm1" in want:
        label = f"M/M/1, {n:,} customers"
        rows += [
            Row(label, "SimPy", "customer", lambda: mm1_simpy(n)),
            Row(label, "kit, asyncio", "customer", lambda: mm1_kit(n), "SimPy", 2.0),
            Row(
                label,
                "plain asyncio Lock (floor)",
                "customer",
                lambda: mm1_plain_asyncio(n),
                "SimPy",
            ),
            Row(label, "kit, trio", "customer", lambda: mm1_kit(n, "trio"), "SimPy"),
            Row(
                label,
                'kit, asyncio, order="simpy"',
                "customer",
                lambda: mm1_kit(n, "asyncio", "simpy"),
                "SimPy",
            ),
            Row(
                label,
                'kit, trio, order="simpy"',
                "customer",
                lambda: mm1_kit(n, "trio", "simpy"),
                "SimPy",
            ),
        ]
    if "shop" in want:
        label = f"Machine Shop x{scale} ({4 * scale} weeks)"
        rows += [
            Row(label, "SimPy", "part", lambda: shop_simpy(scale)),
            Row(label, "kit, asyncio", "part", lambda: shop_kit(scale), "SimPy", 2.0),
            Row(label, "kit, trio", "part", lambda: shop_kit(scale, "trio"), "SimPy"),
            Row(
                label,
                'kit, asyncio, order="simpy"',
                "part",
                lambda: shop_kit(scale, "asyncio", "simpy"),
                "SimPy",
            ),
            Row(
                label,
                'kit, trio, order="simpy"',
                "part",
                lambda: shop_kit(scale, "trio", "simpy"),
                "SimPy",
            ),
        ]
    if "timer" in want:
        for distinct in (False, True):
            kind = "every event its own instant" if distinct else "periods 1/2/5/10"
            label = f"Timer, {TIMER_EVENTS} events, {kind}"
            rows += [
                Row(label, "SimPy", "dispatch", lambda d=distinct: timer_simpy(horizon, d)),  # type: ignore[misc]
                Row(
                    label,
                    "sim.Timer, asyncio",
                    "dispatch",
                    lambda d=distinct: timer_kit(horizon, d),  # type: ignore[misc]
                    "SimPy",
                    2.0,
                ),
                Row(
                    label,
                    "sim.Timer, trio",
                    "dispatch",
                    lambda d=distinct: timer_kit(horizon, d, "trio"),  # type: ignore[misc]
                    "SimPy",
                    trio_target=2.0,
                ),
            ]
    if "vehicle" in want:
        label = f"Fleet, {VEHICLES} vehicles, {day / 3600:g} h"
        rows += [
            Row(label, "SimPy", "step", lambda: vehicle_simpy(day)),
            Row(label, "sim.Fleet, asyncio", "step", lambda: vehicle_kit(day), "SimPy", 3.0),
            Row(
                label,
                "sim.Fleet, trio",
                "step",
                lambda: vehicle_kit(day, "trio"),
                "SimPy",
                trio_target=2.0,
            ),
        ]
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, one repeat")
    parser.add_argument("--only", default="", help="comma-separated: mm1,shop,timer,vehicle")
    args = parser.parse_args(argv)
    repeats = 1 if args.quick else args.repeats
    rows = build(args)
    workloads = list(dict.fromkeys(row.workload for row in rows))
    for rep in range(repeats):
        for name in workloads:
            group = [row for row in rows if row.workload == name]
            shift = rep % len(group)
            for row in group[shift:] + group[:shift]:
                cpu, units, check = row.run()
                row.times.append(cpu)
                row.units = units
                row.check = check
                print(
                    f"  [{rep + 1}/{repeats}] {name} / {row.system}: {cpu:.3f} s", file=sys.stderr
                )
    load = os.getloadavg() if hasattr(os, "getloadavg") else (math.nan,) * 3
    print("## Modelling kit benchmark\n")
    print(f"- command: `{' '.join([Path(sys.executable).name, *sys.argv])}`")
    print(f"- Python {platform.python_version()}, simpy {simpy.__version__}, {os.cpu_count()} CPUs")
    print(f"- load average at start of table: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"- CPU time, median of {repeats}; systems interleaved round-robin\n")
    print(
        "| workload | system | µs / unit (median) | min - max s | vs SimPy | target | same result |"
    )
    print("|---|---|--:|--:|--:|--:|---|")
    by_key = {(row.workload, row.system): row for row in rows}
    verdicts: list[str] = []
    for row in rows:
        ref = by_key.get((row.workload, row.reference)) if row.reference else None
        ratio = row.per_unit_us() / ref.per_unit_us() if ref else None
        same = "" if ref is None else ("yes" if ref.check == row.check else "NO")
        target = ""
        if row.target is not None and ratio is not None:
            ok = ratio <= row.target
            target = f"≤ {row.target:g}x: {'met' if ok else 'NOT met'}"
            verdicts.append(f"- {row.workload}, {row.system}: {ratio:.2f}x SimPy ({target})")
        print(
            f"| {row.workload} | {row.system} | {row.per_unit_us():.2f} / {row.unit} | "
            f"{min(row.times):.3f} - {max(row.times):.3f} | "
            f"{'' if ratio is None else f'{ratio:.2f}x'} | {target} | {same} |"
        )
    print()
    for name in workloads:
        aio = [r for r in rows if r.workload == name and r.system.endswith(", asyncio")]
        tri = [r for r in rows if r.workload == name and r.system.endswith("trio")]
        if aio and tri:
            ratio = tri[0].per_unit_us() / aio[0].per_unit_us()
            goal = tri[0].trio_target  # issues 14 and 16 set one for the Timer and the Fleet
            if goal is None:
                verdict = "no target"
            else:
                verdict = f"target ≤ {goal:g}x: {'met' if ratio <= goal else 'NOT met'}"
            verdicts.append(f"- {name}: trio / asyncio = {ratio:.2f}x ({verdict})")
    print("\n".join(verdicts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
