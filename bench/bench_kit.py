"""The modelling kit against SimPy 4.1, workload by workload, in one invocation (issue 38).

Run by hand (never by CI or pytest), from the project root::

    .venv/bin/python bench/bench_kit.py                        # everything, 5 repeats
    .venv/bin/python bench/bench_kit.py --quick                # small sizes, 1 repeat
    .venv/bin/python bench/bench_kit.py --only mm4,fixed --repeats 3 --output kit.md
    .venv/bin/python bench/bench_kit.py --only examples --backends asyncio
    .venv/bin/python bench/bench_kit.py --only shop --order virtualtime,simpy

What is measured
----------------
* ``mm4`` -- M/M/4 at rho = 0.9 (arrival rate 3.6, service rate 1, ``sim.Resource(4)``),
  50,000 customers (``--customers``): ``sim.simulate(source, backend=...)`` against the same
  model as SimPy processes on a ``simpy.Resource``.  Check: customers served, how many
  queued, their mean wait.
* ``shop`` -- a large preemptive shop: the Machine Shop model (examples/simpy_machine_shop.py)
  with 100 machines, 5 repairmen (a ``PreemptiveResource(5)``, one "other jobs" process per
  repairman) and 4 weeks (``--weeks``), written here for the kit and for SimPy, both drawing
  from one ``random.Random`` per run in the same order.  Check: parts made per machine.
* ``examples`` -- SimPy's seven examples as ported in examples/simpy_*.py: each port's
  ``__main__`` block (as written: ``order="simpy"``), its ``sim.simulate`` bound to the
  backend, against a SimPy program written here that makes the same draws and prints the same
  lines.  Check: the stdout, which must also equal the port's ``.out`` file.  Most of them
  run in about a millisecond or less (the Machine Shop, four weeks, about 0.1 s on SimPy), so
  each child repeats the run until ``--min-time`` CPU seconds have passed and reports the time
  per run; at this size the ratio mostly measures the fixed cost of a run (setting up and
  closing a loop or an environment), not the cost of an event.
* ``bank`` -- the bank with reneging (examples/simpy_bank_renege.py) at 100,000 customers
  (``--bank-customers``), no printing.  Check: served, queued, reneged, mean wait.
* ``fixed`` -- the fixed cost of one run of an empty model: ``asyncio.run``,
  ``virtualtime.run``, ``virtualtime.anyio_run`` on asyncio and on trio, ``sim.simulate`` on
  asyncio and on trio, ``trio.run`` and SimPy's ``Environment().run()``; µs per run (many runs
  per child), as a ratio to ``asyncio.run``.  Check: the value the run returned.

The kit runs on ``backend="asyncio"`` and ``backend="trio"`` (``--backends``), in the default
order (``--order virtualtime,simpy`` adds ``order="simpy"`` rows to mm4, shop, bank and fixed;
the ports always run as written).

How
---
Every measurement is a fresh child process (this file re-run with ``--child``): it imports
what it needs, makes one untimed warm-up run (a small size, or one run of the example), then
times the run with ``time.process_time()`` (CPU time, the main figure: what the run costs,
whatever else the shared machine is doing) and ``time.perf_counter()`` (wall time, beside it).
The systems of one workload are interleaved round-robin, the order rotated every round, so a
neighbour's load falls on all of them alike; each figure is the median of ``--repeats``
children (default 5) with their min - max.  Every child reports a check value; the SimPy row,
kit-asyncio and kit-trio must agree, and a disagreement is printed as MISMATCH (and the exit
status is 1).  The report (Markdown, stdout and ``--output``) ends with issue 38's targets:
kit on asyncio at most 1.2x SimPy on mm4 and shop, kit on trio at most 2.0x there, each
example at most 1.5x SimPy on asyncio, and each virtualtime entry point's fixed cost at most
3x ``asyncio.run``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import functools
import gc
import hashlib
import io
import itertools
import json
import os
import platform
import random
import shlex
import statistics
import subprocess
import sys
import textwrap
import time
import types
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, cast

import simpy

import virtualtime
from virtualtime import sim

HERE: Final = Path(__file__).resolve()
EXAMPLES: Final = HERE.parent.parent / "examples"

Steps = Generator[simpy.Event, Any, None]
Outcome = tuple[int, str]
"""What one run gives: units of work done, and the check text that must agree across systems."""
Run = Callable[[], Outcome]

SEED: Final = 38
DEFAULT_CUSTOMERS: Final = 50_000
DEFAULT_WEEKS: Final = 4
DEFAULT_BANK_CUSTOMERS: Final = 100_000
QUICK_CUSTOMERS: Final = 5_000
QUICK_WEEKS: Final = 1
QUICK_BANK_CUSTOMERS: Final = 10_000
MIN_TIME: Final = 0.2
QUICK_MIN_TIME: Final = 0.05

GROUPS: Final = ("mm4", "shop", "examples", "bank", "fixed")
BACKENDS: Final = ("asyncio", "trio")
ORDERS: Final = ("virtualtime", "simpy")


class WaitTally:
    """Customers served, how many queued first, reneged, and the sum of their waits."""

    __slots__ = ("queued", "reneged", "served", "total_wait")

    def __init__(self) -> None:
        self.served = 0
        self.queued = 0
        self.reneged = 0
        self.total_wait = 0.0

    def served_after(self, wait: float) -> None:
        self.served += 1
        self.total_wait += wait
        if wait > 0:
            self.queued += 1

    def check(self) -> str:
        mean = self.total_wait / self.served if self.served else 0.0
        reneged = f", reneged {self.reneged}" if self.reneged else ""
        return f"served {self.served}, queued {self.queued}{reneged}, mean wait {mean:.4f}"


# --------------------------------------------------------------------------- 1. M/M/4

MM4_SERVERS: Final = 4
MM4_ARRIVAL: Final = 3.6
MM4_SERVICE: Final = 1.0


def mm4_kit(n: int, backend: str, order: str) -> Outcome:
    rng = random.Random(SEED)
    tally = WaitTally()

    async def customer(server: sim.Resource, service: float) -> None:
        arrive = sim.now()
        async with server.request():
            tally.served_after(sim.now() - arrive)
            await sim.sleep(service)

    async def source() -> None:
        server = sim.Resource(MM4_SERVERS)
        for _ in range(n):
            sim.start(customer(server, rng.expovariate(MM4_SERVICE)))
            await sim.sleep(rng.expovariate(MM4_ARRIVAL))

    sim.simulate(source, backend=backend, order=order)
    return n, tally.check()


def mm4_simpy(n: int) -> Outcome:
    rng = random.Random(SEED)
    tally = WaitTally()
    env = simpy.Environment()

    def customer(server: simpy.Resource, service: float) -> Steps:
        arrive = env.now
        with server.request() as turn:
            yield turn
            tally.served_after(env.now - arrive)
            yield env.timeout(service)

    def source() -> Steps:
        server = simpy.Resource(env, MM4_SERVERS)
        for _ in range(n):
            env.process(customer(server, rng.expovariate(MM4_SERVICE)))
            yield env.timeout(rng.expovariate(MM4_ARRIVAL))

    env.process(source())
    env.run()
    return n, tally.check()


# --------------------------------------------------------------------------- 2. large shop

SHOP_MACHINES: Final = 100
SHOP_REPAIRMEN: Final = 5
MINUTES_PER_WEEK: Final = 7 * 24 * 60
PT_MEAN: Final = 10.0
PT_SIGMA: Final = 2.0
MTTF: Final = 300.0
REPAIR_TIME: Final = 30.0
JOB_DURATION: Final = 30.0


class ShopDraws:
    """The shop's random draws, from one generator per run (the same calls on both sides);
    without a seed, from the ``random`` module itself (the example, which seeds it)."""

    def __init__(self, seed: int | None) -> None:
        # (the module has the same functions as an instance: it is one, behind the scenes)
        self.rng = cast("random.Random", random) if seed is None else random.Random(seed)

    def time_per_part(self) -> float:
        t = self.rng.normalvariate(PT_MEAN, PT_SIGMA)
        while t <= 0:
            t = self.rng.normalvariate(PT_MEAN, PT_SIGMA)
        return t

    def time_to_failure(self) -> float:
        return self.rng.expovariate(1 / MTTF)


class KitMachine:
    """The port's machine, with its draws passed in."""

    def __init__(self, repairmen: sim.PreemptiveResource, draws: ShopDraws) -> None:
        self.parts_made = 0
        self.broken = False
        self.process = sim.start(self.working(repairmen, draws))
        sim.start(self.breaking(draws))

    async def working(self, repairmen: sim.PreemptiveResource, draws: ShopDraws) -> None:
        while True:
            left = draws.time_per_part()
            while left:
                start = sim.now()
                try:
                    await sim.sleep(left)
                    left = 0
                except sim.Interrupt:
                    self.broken = True
                    left -= sim.now() - start
                    async with repairmen.request(priority=1):
                        await sim.sleep(REPAIR_TIME)
                    self.broken = False
            self.parts_made += 1

    async def breaking(self, draws: ShopDraws) -> None:
        while True:
            await sim.sleep(draws.time_to_failure())
            if not self.broken:
                self.process.interrupt()


async def kit_other_jobs(repairmen: sim.PreemptiveResource) -> None:
    while True:
        left = JOB_DURATION
        while left:
            async with repairmen.request(priority=2):
                start = sim.now()
                try:
                    await sim.sleep(left)
                    left = 0
                except sim.Interrupt:
                    left -= sim.now() - start


async def kit_shop(machines: int, draws: ShopDraws) -> list[KitMachine]:
    repairmen = sim.PreemptiveResource(SHOP_REPAIRMEN)
    shop = [KitMachine(repairmen, draws) for _ in range(machines)]
    for _ in range(SHOP_REPAIRMEN):
        sim.start(kit_other_jobs(repairmen))
    return shop


def shop_kit(minutes: int, backend: str, order: str) -> Outcome:
    shop = sim.simulate(
        kit_shop, SHOP_MACHINES, ShopDraws(SEED), until=minutes, backend=backend, order=order
    )
    assert shop is not None
    parts = [machine.parts_made for machine in shop]
    return sum(parts), repr(parts)


class SimPyMachine:
    """The same machine as SimPy processes."""

    def __init__(
        self,
        env: simpy.Environment,
        repairmen: simpy.PreemptiveResource,
        draws: ShopDraws,
        name: str = "",
    ) -> None:
        self.env = env
        self.name = name
        self.parts_made = 0
        self.broken = False
        self.process = env.process(self.working(repairmen, draws))
        env.process(self.breaking(draws))

    def working(self, repairmen: simpy.PreemptiveResource, draws: ShopDraws) -> Steps:
        env = self.env
        while True:
            left = draws.time_per_part()
            while left:
                start = env.now
                try:
                    yield env.timeout(left)
                    left = 0
                except simpy.Interrupt:
                    self.broken = True
                    left -= env.now - start
                    with repairmen.request(priority=1) as repair:
                        yield repair
                        yield env.timeout(REPAIR_TIME)
                    self.broken = False
            self.parts_made += 1

    def breaking(self, draws: ShopDraws) -> Steps:
        while True:
            yield self.env.timeout(draws.time_to_failure())
            if not self.broken:
                self.process.interrupt()


def simpy_other_jobs(env: simpy.Environment, repairmen: simpy.PreemptiveResource) -> Steps:
    while True:
        left = JOB_DURATION
        while left:
            with repairmen.request(priority=2) as job:
                yield job
                start = env.now
                try:
                    yield env.timeout(left)
                    left = 0
                except simpy.Interrupt:
                    left -= env.now - start


def shop_simpy(minutes: int) -> Outcome:
    env = simpy.Environment()
    draws = ShopDraws(SEED)
    repairmen = simpy.PreemptiveResource(env, capacity=SHOP_REPAIRMEN)
    shop = [SimPyMachine(env, repairmen, draws) for _ in range(SHOP_MACHINES)]
    for _ in range(SHOP_REPAIRMEN):
        env.process(simpy_other_jobs(env, repairmen))
    env.run(until=minutes)
    parts = [machine.parts_made for machine in shop]
    return sum(parts), repr(parts)


# --------------------------------------------------------------------------- 4. bank, reneging

BANK_INTERVAL: Final = 10.0
BANK_TIME_IN_BANK: Final = 12.0
BANK_PATIENCE: Final = (1.0, 3.0)


def bank_kit(n: int, backend: str, order: str) -> Outcome:
    rng = random.Random(SEED)
    tally = WaitTally()

    async def customer(counter: sim.Resource) -> None:
        arrive = sim.now()
        with counter.request() as req:
            patience = rng.uniform(*BANK_PATIENCE)
            which, _ = await sim.first_of(req, sim.sleep(patience))
            if which is req:
                tally.served_after(sim.now() - arrive)
                await sim.sleep(rng.expovariate(1.0 / BANK_TIME_IN_BANK))
            else:
                tally.reneged += 1

    async def source() -> None:
        counter = sim.Resource(1)
        for _ in range(n):
            sim.start(customer(counter))
            await sim.sleep(rng.expovariate(1.0 / BANK_INTERVAL))

    sim.simulate(source, backend=backend, order=order)
    return n, tally.check()


def bank_simpy(n: int) -> Outcome:
    rng = random.Random(SEED)
    tally = WaitTally()
    env = simpy.Environment()

    def customer(counter: simpy.Resource) -> Steps:
        arrive = env.now
        with counter.request() as req:
            patience = rng.uniform(*BANK_PATIENCE)
            happened = yield req | env.timeout(patience)
            if req in happened:
                tally.served_after(env.now - arrive)
                yield env.timeout(rng.expovariate(1.0 / BANK_TIME_IN_BANK))
            else:
                tally.reneged += 1

    def source() -> Steps:
        counter = simpy.Resource(env, 1)
        for _ in range(n):
            env.process(customer(counter))
            yield env.timeout(rng.expovariate(1.0 / BANK_INTERVAL))

    env.process(source())
    env.run()
    return n, tally.check()


# --------------------------------------------------------------------------- 3. the seven examples
#
# SimPy programs that make the ports' draws in the ports' order and print the ports' lines
# (which are SimPy's published output for seed 42: the check compares with the .out files).
# Definitions live at module level, as the ports' do; what is timed is one "main" each.

EXAMPLE_SEED: Final = 42


def ex_bank_source(env: simpy.Environment, counter: simpy.Resource) -> Steps:
    for i in range(5):
        env.process(ex_bank_customer(env, f"Customer{i:02d}", counter, 12.0))
        yield env.timeout(random.expovariate(1.0 / 10.0))


def ex_bank_customer(
    env: simpy.Environment, name: str, counter: simpy.Resource, time_in_bank: float
) -> Steps:
    arrive = env.now
    print(f"{arrive:7.4f} {name}: Here I am")
    with counter.request() as req:
        patience = random.uniform(1, 3)
        happened = yield req | env.timeout(patience)
        wait = env.now - arrive
        if req in happened:
            print(f"{env.now:7.4f} {name}: Waited {wait:6.3f}")
            yield env.timeout(random.expovariate(1.0 / time_in_bank))
            print(f"{env.now:7.4f} {name}: Finished")
        else:
            print(f"{env.now:7.4f} {name}: RENEGED after {wait:6.3f}")


def simpy_bank_renege() -> None:
    print("Bank renege")
    random.seed(EXAMPLE_SEED)
    env = simpy.Environment()
    env.process(ex_bank_source(env, simpy.Resource(env, capacity=1)))
    env.run()


class ExCarwash:
    def __init__(self, env: simpy.Environment, machines: int, washtime: float) -> None:
        self.env = env
        self.machines = simpy.Resource(env, machines)
        self.washtime = washtime

    def wash(self, car: str) -> Steps:
        yield self.env.timeout(self.washtime)
        print(f"Carwash removed {random.randint(50, 99)}% of {car}'s dirt.")


def ex_car(env: simpy.Environment, name: str, carwash: ExCarwash) -> Steps:
    print(f"{name} arrives at the carwash at {env.now:.2f}.")
    with carwash.machines.request() as machine:
        yield machine
        print(f"{name} enters the carwash at {env.now:.2f}.")
        yield env.process(carwash.wash(name))
        print(f"{name} leaves the carwash at {env.now:.2f}.")


def ex_carwash_setup(env: simpy.Environment, machines: int, washtime: float, t_inter: int) -> Steps:
    carwash = ExCarwash(env, machines, washtime)
    numbers = itertools.count()
    for _ in range(4):
        env.process(ex_car(env, f"Car {next(numbers)}", carwash))
    while True:
        yield env.timeout(random.randint(t_inter - 2, t_inter + 2))
        env.process(ex_car(env, f"Car {next(numbers)}", carwash))


def simpy_carwash() -> None:
    print("Carwash")
    print("Check out http://youtu.be/fXXmeP9TvBg while simulating ... ;-)")
    random.seed(EXAMPLE_SEED)
    env = simpy.Environment()
    env.process(ex_carwash_setup(env, 2, 5, 7))
    env.run(until=20)


def ex_gas_car(
    env: simpy.Environment, name: str, pumps: simpy.Resource, tank: simpy.Container
) -> Steps:
    level = random.randint(5, 25)
    print(f"{env.now:6.1f} s: {name} arrived at gas station")
    with pumps.request() as pump:
        yield pump
        required = 50 - level
        yield tank.get(required)
        yield env.timeout(required / 2)
        print(f"{env.now:6.1f} s: {name} refueled with {required:.1f}L")


def ex_gas_control(env: simpy.Environment, tank: simpy.Container) -> Steps:
    while True:
        if tank.level / tank.capacity * 100 < 25:
            print(f"{env.now:6.1f} s: Calling tank truck")
            yield env.process(ex_gas_truck(env, tank))
        yield env.timeout(10)


def ex_gas_truck(env: simpy.Environment, tank: simpy.Container) -> Steps:
    yield env.timeout(300)
    amount = tank.capacity - tank.level
    tank.put(amount)
    print(f"{env.now:6.1f} s: Tank truck arrived and refuelled station with {amount:.1f}L")


def ex_gas_cars(env: simpy.Environment, pumps: simpy.Resource, tank: simpy.Container) -> Steps:
    for i in itertools.count():
        yield env.timeout(random.randint(30, 300))
        env.process(ex_gas_car(env, f"Car {i}", pumps, tank))


def simpy_gas_station() -> None:
    print("Gas Station refuelling")
    random.seed(EXAMPLE_SEED)
    env = simpy.Environment()
    pumps = simpy.Resource(env, 2)
    tank = simpy.Container(env, 200, init=200)
    env.process(ex_gas_control(env, tank))
    env.process(ex_gas_cars(env, pumps, tank))
    env.run(until=1000)


class ExCable:
    def __init__(self, env: simpy.Environment, delay: float) -> None:
        self.env = env
        self.delay = delay
        self.far_end = simpy.Store(env)

    def carry(self, value: str) -> Steps:
        yield self.env.timeout(self.delay)
        yield self.far_end.put(value)

    def send(self, value: str) -> None:
        self.env.process(self.carry(value))


def ex_sender(env: simpy.Environment, cable: ExCable) -> Steps:
    while True:
        yield env.timeout(5)
        cable.send(f"Sender sent this at {env.now:g}")


def ex_receiver(env: simpy.Environment, cable: ExCable) -> Steps:
    while True:
        message = yield cable.far_end.get()
        print(f"Received this at {env.now:g} while {message}")


def simpy_latency() -> None:
    print("Event Latency")
    env = simpy.Environment()
    cable = ExCable(env, 10)
    env.process(ex_sender(env, cable))
    env.process(ex_receiver(env, cable))
    env.run(until=100)


def simpy_machine_shop() -> None:
    print("Machine shop")
    random.seed(EXAMPLE_SEED)
    env = simpy.Environment()
    repairman = simpy.PreemptiveResource(env, capacity=1)
    draws = ShopDraws(None)
    shop = [SimPyMachine(env, repairman, draws, f"Machine {i}") for i in range(10)]
    env.process(simpy_other_jobs(env, repairman))
    env.run(until=4 * MINUTES_PER_WEEK)
    print("Machine shop results after 4 weeks")
    for machine in shop:
        print(f"{machine.name} made {machine.parts_made} parts.")


MOVIES: Final = ("Python Unchained", "Kill Process", "Pulp Implementation")


class ExTheater:
    def __init__(self, env: simpy.Environment) -> None:
        self.counter = simpy.Resource(env, 1)
        self.available = dict.fromkeys(MOVIES, 50)
        self.sold_out = {movie: env.event() for movie in MOVIES}
        self.when_sold_out: dict[str, float] = {}
        self.renegers = dict.fromkeys(MOVIES, 0)


def ex_moviegoer(env: simpy.Environment, movie: str, tickets: int, theater: ExTheater) -> Steps:
    with theater.counter.request() as my_turn:
        happened = yield my_turn | theater.sold_out[movie]
        if my_turn not in happened:
            theater.renegers[movie] += 1
            return
        if theater.available[movie] < tickets:
            yield env.timeout(0.5)
            return
        theater.available[movie] -= tickets
        if theater.available[movie] < 2:
            theater.sold_out[movie].succeed()
            theater.when_sold_out[movie] = env.now
            theater.available[movie] = 0
        yield env.timeout(1)


def ex_movie_arrivals(env: simpy.Environment, theater: ExTheater) -> Steps:
    while True:
        yield env.timeout(random.expovariate(1 / 0.5))
        movie = random.choice(MOVIES)
        tickets = random.randint(1, 6)
        if theater.available[movie]:
            env.process(ex_moviegoer(env, movie, tickets, theater))


def simpy_movie_renege() -> None:
    print("Movie renege")
    random.seed(EXAMPLE_SEED)
    env = simpy.Environment()
    theater = ExTheater(env)
    env.process(ex_movie_arrivals(env, theater))
    env.run(until=120)
    for movie in MOVIES:
        if theater.sold_out[movie].triggered:
            print(
                f'Movie "{movie}" sold out {theater.when_sold_out[movie]:.1f} minutes '
                "after ticket counter opening."
            )
            print(f"  Number of people leaving queue when film sold out: {theater.renegers[movie]}")


class ExBroadcast:
    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.pipes: list[simpy.Store] = []

    def put(self, value: tuple[float, str]) -> simpy.Event:
        if not self.pipes:
            raise RuntimeError("There are no output pipes.")
        return self.env.all_of([pipe.put(value) for pipe in self.pipes])

    def output(self) -> simpy.Store:
        pipe = simpy.Store(self.env)
        self.pipes.append(pipe)
        return pipe


def ex_generator(env: simpy.Environment, name: str, out: simpy.Store | ExBroadcast) -> Steps:
    while True:
        yield env.timeout(random.randint(6, 10))
        out.put((env.now, f"{name} says hello at {env.now:g}"))


def ex_consumer(env: simpy.Environment, name: str, source: simpy.Store) -> Steps:
    while True:
        sent, text = yield source.get()
        if sent < env.now:
            print(f"LATE Getting Message: at time {env.now:g}: {name} received message: {text}")
        else:
            print(f"at time {env.now:g}: {name} received message: {text}.")
        yield env.timeout(random.randint(4, 8))


def simpy_process_communication() -> None:
    print("Process communication")
    random.seed(EXAMPLE_SEED)
    print("\nOne-to-one pipe communication\n")
    env = simpy.Environment()
    pipe = simpy.Store(env)
    env.process(ex_generator(env, "Generator A", pipe))
    env.process(ex_consumer(env, "Consumer A", pipe))
    env.run(until=100)
    print("\nOne-to-many pipe communication\n")
    env = simpy.Environment()
    broadcast = ExBroadcast(env)
    env.process(ex_generator(env, "Generator A", broadcast))
    env.process(ex_consumer(env, "Consumer A", broadcast.output()))
    env.process(ex_consumer(env, "Consumer B", broadcast.output()))
    env.run(until=100)


EXAMPLES_SIMPY: Final[dict[str, Callable[[], None]]] = {
    "bank_renege": simpy_bank_renege,
    "carwash": simpy_carwash,
    "gas_station": simpy_gas_station,
    "latency": simpy_latency,
    "machine_shop": simpy_machine_shop,
    "movie_renege": simpy_movie_renege,
    "process_communication": simpy_process_communication,
}

MAIN_GUARD: Final = '\nif __name__ == "__main__":\n'


def load_port(name: str, backend: str) -> Callable[[], None]:
    """One run of ``examples/simpy_NAME.py``'s ``__main__`` block, on ``backend``.

    The module body (imports, constants, the model's functions and classes) is executed once,
    into a module of its own; its global ``sim`` is then a copy of ``virtualtime.sim`` whose
    ``simulate`` is bound to ``backend`` (``virtualtime.sim`` itself is not touched).  What is
    returned executes the dedented ``__main__`` block in that module's namespace.
    """
    path = EXAMPLES / f"simpy_{name}.py"
    source = path.read_text(encoding="utf-8")
    body, guard, main = source.partition(MAIN_GUARD)
    if not guard:
        raise SystemExit(f"{path}: no `if __name__ == '__main__':` block")
    module = types.ModuleType(f"_bench_kit_port_{name}")
    module.__file__ = str(path)
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(body, str(path), "exec"), module.__dict__)
    kit = types.ModuleType(sim.__name__)
    kit.__dict__.update(vars(sim))
    kit.__dict__["simulate"] = functools.partial(sim.simulate, backend=backend)
    module.__dict__["sim"] = kit
    padding = "\n" * (body.count("\n") + guard.count("\n"))  # tracebacks keep the file's lines
    code = compile(padding + textwrap.dedent(main), str(path), "exec")

    def run() -> None:
        exec(code, module.__dict__)

    return run


def captured(main: Callable[[], None]) -> Run:
    """One run of ``main`` with its stdout captured as the check."""

    def run() -> Outcome:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            main()
        return 1, out.getvalue()

    return run


# --------------------------------------------------------------------------- 5. fixed cost


async def empty() -> int:
    return 0


def fixed_simpy() -> Outcome:
    env = simpy.Environment()
    env.run()
    return 1, str(int(env.now))


def fixed_runner(system: str) -> Run:
    """One run of an empty model by ``system`` (a key of :data:`FIXED_LABELS` or a kit key)."""
    if system == "asyncio.run":
        return lambda: (1, str(asyncio.run(empty())))
    if system == "virtualtime.run":
        return lambda: (1, str(virtualtime.run(empty())))
    if system.startswith("anyio_run:"):
        backend = system.partition(":")[2]
        return lambda: (1, str(virtualtime.anyio_run(empty, backend=backend)))
    if system == "trio.run":
        import trio

        return lambda: (1, str(trio.run(empty)))
    if system == "simpy":
        return fixed_simpy
    backend, order = parse_kit(system)
    return lambda: (1, str(sim.simulate(empty, backend=backend, order=order)))


FIXED_LABELS: Final = {
    "asyncio.run": "`asyncio.run(empty())` (reference)",
    "virtualtime.run": "`virtualtime.run(empty())`",
    "anyio_run:asyncio": '`virtualtime.anyio_run(empty, backend="asyncio")`',
    "anyio_run:trio": '`virtualtime.anyio_run(empty, backend="trio")`',
    "trio.run": "`trio.run(empty)` (trio alone)",
    "simpy": "SimPy `Environment().run()`",
}


# --------------------------------------------------------------------------- cases


def kit_key(backend: str, order: str) -> str:
    return f"kit:{backend}:{order}"


def parse_kit(key: str) -> tuple[str, str]:
    _, backend, order = key.split(":")
    return backend, order


def system_label(case: Case, key: str) -> str:
    if key == "simpy":
        return "SimPy" if case.group != "fixed" else FIXED_LABELS[key]
    if key.startswith("port:"):
        return f'port, {key.partition(":")[2]} (order="simpy", as written)'
    if key.startswith("kit:"):
        backend, order = parse_kit(key)
        suffix = "" if order == "virtualtime" else ', order="simpy"'
        if case.group == "fixed":
            return f'`sim.simulate(empty, backend="{backend}"{suffix})`'
        return f"kit, {backend}{suffix}"
    return FIXED_LABELS[key]


@dataclass(frozen=True)
class Case:
    """One workload: its systems are measured against each other."""

    name: str  # the child's --child value
    group: str  # the --only name
    title: str
    unit: str  # what "units" count, for the per-unit column
    size: int  # customers, minutes, or 0 (many runs per child)
    warm_size: int
    systems: tuple[str, ...]
    reference: str = "simpy"

    @property
    def repeated(self) -> bool:
        """Many runs per child, reported per run (the examples and the fixed cost)."""
        return self.size == 0


def runner(case_name: str, system: str, size: int) -> Run:
    """One run of ``system`` on the workload ``case_name`` at ``size`` (in the child)."""
    if case_name.startswith("example:"):
        name = case_name.partition(":")[2]
        if system == "simpy":
            return captured(EXAMPLES_SIMPY[name])
        return captured(load_port(name, system.partition(":")[2]))
    if case_name == "fixed":
        return fixed_runner(system)
    workloads: dict[str, tuple[Callable[[int], Outcome], Callable[[int, str, str], Outcome]]] = {
        "mm4": (mm4_simpy, mm4_kit),
        "shop": (shop_simpy, shop_kit),
        "bank": (bank_simpy, bank_kit),
    }
    simpy_model, kit_model = workloads[case_name]
    if system == "simpy":
        return functools.partial(simpy_model, size)
    backend, order = parse_kit(system)
    return functools.partial(kit_model, size, backend, order)


def build_cases(args: argparse.Namespace) -> list[Case]:
    kits = tuple(kit_key(b, o) for o in args.order for b in args.backends)
    ports = tuple(f"port:{b}" for b in args.backends)
    cases: list[Case] = []
    if "mm4" in args.only:
        cases.append(
            Case(
                "mm4",
                "mm4",
                f"M/M/4, rho = 0.9, {args.customers:,} customers",
                "customer",
                args.customers,
                200,
                ("simpy", *kits),
            )
        )
    if "shop" in args.only:
        weeks = args.weeks
        cases.append(
            Case(
                "shop",
                "shop",
                f"Preemptive shop, {SHOP_MACHINES} machines, {SHOP_REPAIRMEN} repairmen, "
                f"{weeks:g} week{'' if weeks == 1 else 's'}",
                "part",
                round(weeks * MINUTES_PER_WEEK),
                300,
                ("simpy", *kits),
            )
        )
    if "examples" in args.only:
        for name in EXAMPLES_SIMPY:
            cases.append(
                Case(
                    f"example:{name}",
                    "examples",
                    f"Example `simpy_{name}.py`",
                    "run",
                    0,
                    0,
                    ("simpy", *ports),
                )
            )
    if "bank" in args.only:
        cases.append(
            Case(
                "bank",
                "bank",
                f"Bank with reneging, {args.bank_customers:,} customers",
                "customer",
                args.bank_customers,
                200,
                ("simpy", *kits),
            )
        )
    if "fixed" in args.only:
        fixed: list[str] = ["asyncio.run"]
        if "asyncio" in args.backends:
            fixed += ["virtualtime.run", "anyio_run:asyncio"]
        if "trio" in args.backends:
            fixed += ["anyio_run:trio"]
        fixed += kits
        if "trio" in args.backends:
            fixed += ["trio.run"]
        fixed += ["simpy"]
        cases.append(
            Case(
                "fixed",
                "fixed",
                "Fixed cost of one run of an empty model",
                "run",
                0,
                0,
                tuple(fixed),
                reference="asyncio.run",
            )
        )
    return cases


# --------------------------------------------------------------------------- child side


def summarise(check: str) -> str:
    """A short form of a check text for the table: itself if short, else lines and a digest."""
    digest = hashlib.sha256(check.encode()).hexdigest()[:10]
    if "\n" in check:
        return f"{check.count(chr(10))} lines, sha256 {digest}"
    if len(check) <= 60:
        return check
    return f"{check[:36]}... sha256 {digest}"


def child_main(args: argparse.Namespace) -> int:
    """Time one system on one workload; print one JSON line."""
    case_name: str = args.child
    system: str = args.system
    size: int = args.size
    if size:
        warm_size = args.warm_size
        runner(case_name, system, warm_size)()  # imports and first-run set-up, untimed
        run = runner(case_name, system, size)
        gc.collect()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        units, check = run()
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        runs, stable = 1, True
    else:
        run = runner(case_name, system, 0)
        run()  # warm-up
        gc.collect()
        runs, stable = 0, True
        cpu0, wall0 = time.process_time(), time.perf_counter()
        units, check = run()
        while True:
            runs += 1
            cpu = time.process_time() - cpu0
            if cpu >= args.min_time:
                break
            _, again = run()
            stable = stable and again == check
        wall = time.perf_counter() - wall0
    golden: bool | None = None
    if case_name.startswith("example:"):
        out = EXAMPLES / f"simpy_{case_name.partition(':')[2]}.out"
        golden = check == out.read_text(encoding="utf-8")
    compiled = sys.modules.get("virtualtime._engine._compiled")
    result = {
        "status": "ok",
        "cpu": cpu / runs,
        "wall": wall / runs,
        "runs": runs,
        "units": units,
        "digest": hashlib.sha256(check.encode()).hexdigest(),
        "summary": summarise(check),
        "stable": stable,
        "golden": golden,
        "compiled": None if compiled is None else bool(compiled.COMPILED),
    }
    print(json.dumps(result))
    return 0


# --------------------------------------------------------------------------- parent side


@dataclass
class Cell:
    """Every measurement of one system on one workload."""

    case: Case
    system: str
    cpu: list[float] = field(default_factory=list)  # seconds per run
    wall: list[float] = field(default_factory=list)
    runs: list[int] = field(default_factory=list)
    units: int = 0
    digests: set[str] = field(default_factory=set)
    summary: str = ""
    stable: bool = True
    golden: set[bool | None] = field(default_factory=set)
    compiled: set[bool | None] = field(default_factory=set)
    error: str = ""

    @property
    def label(self) -> str:
        return system_label(self.case, self.system)

    @property
    def ok(self) -> bool:
        return not self.error and bool(self.cpu)

    def median_cpu(self) -> float:
        return statistics.median(self.cpu)

    def median_wall(self) -> float:
        return statistics.median(self.wall)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_child(cell: Cell, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [
        sys.executable,
        str(HERE),
        "--child",
        cell.case.name,
        "--system",
        cell.system,
        "--size",
        str(cell.case.size),
        "--warm-size",
        str(cell.case.warm_size),
        "--min-time",
        str(args.min_time),
    ]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=args.timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return {"status": "error", "note": f"took more than {args.timeout:g} s"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        err = proc.stderr.strip().splitlines()
        return {"status": "error", "note": err[-1] if err else f"exit status {proc.returncode}"}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def measure(cell: Cell, args: argparse.Namespace) -> None:
    result = run_child(cell, args)
    if result["status"] != "ok":
        cell.error = str(result["note"])
        log(f"    {cell.case.name} / {cell.system}: ERROR {cell.error}")
        return
    cell.cpu.append(result["cpu"])
    cell.wall.append(result["wall"])
    cell.runs.append(result["runs"])
    cell.units = result["units"]
    cell.digests.add(result["digest"])
    cell.summary = result["summary"]
    cell.stable = cell.stable and result["stable"]
    cell.golden.add(result["golden"])
    cell.compiled.add(result["compiled"])


def run_all(cases: Sequence[Case], args: argparse.Namespace) -> dict[str, list[Cell]]:
    """Every cell, ``--repeats`` rounds; in each round every workload's systems in a row,
    their order rotated by one each round."""
    cells = {case.name: [Cell(case, key) for key in case.systems] for case in cases}
    for rnd in range(args.repeats):
        for case in cases:
            row = cells[case.name]
            shift = rnd % len(row)
            for cell in row[shift:] + row[:shift]:
                if cell.error:
                    continue
                measure(cell, args)
                if cell.cpu and not cell.error:
                    log(
                        f"  [{rnd + 1}/{args.repeats}] {case.name} / {cell.system}: "
                        f"{fmt_seconds(cell.cpu[-1])} CPU per run"
                    )
    return cells


# --------------------------------------------------------------------------- report


def fmt_seconds(seconds: float, unit: str | None = None) -> str:
    unit = unit or pick_unit(seconds)
    scale = {"s": 1.0, "ms": 1e3, "µs": 1e6}[unit]
    value = seconds * scale
    digits = 3 if value < 10 else 2 if value < 100 else 1
    return f"{value:.{digits}f} {unit}"


def pick_unit(seconds: float) -> str:
    return "s" if seconds >= 1 else "ms" if seconds >= 1e-3 else "µs"


def same_result(cell: Cell, reference: Cell | None) -> tuple[str, bool]:
    """The check column, and whether it shows a mismatch."""
    notes: list[str] = []
    if not cell.stable:
        notes.append("runs of one child disagreed")
    if len(cell.digests) > 1:
        notes.append("children disagreed")
    if False in cell.golden:
        notes.append("≠ .out")
    bad = bool(notes)
    if reference is None or reference is cell:
        text = cell.summary
        if True in cell.golden and not bad:
            text += " (= .out)"
    elif reference.ok and cell.digests != reference.digests:
        bad = True
        text = f"**MISMATCH**: {cell.summary}"
    else:
        text = "same"
    if notes:
        text = "**MISMATCH** (" + "; ".join(notes) + "): " + text
    return text, bad


@dataclass(frozen=True)
class Target:
    case: str
    system: str
    limit: float
    what: str


def targets(cases: Sequence[Case]) -> list[Target]:
    out: list[Target] = []
    for case in cases:
        for key in case.systems:
            if key.startswith("kit:") and parse_kit(key)[1] != "virtualtime":
                continue  # the targets are the default order's
            if case.group in ("mm4", "shop") and key.startswith("kit:"):
                backend, _ = parse_kit(key)
                limit = 1.2 if backend == "asyncio" else 2.0
                out.append(Target(case.name, key, limit, "SimPy"))
            elif case.group == "examples" and key == "port:asyncio":
                out.append(Target(case.name, key, 1.5, "SimPy"))
            elif case.group == "fixed" and key not in ("asyncio.run", "trio.run", "simpy"):
                out.append(Target(case.name, key, 3.0, "`asyncio.run`"))
    return out


def report(
    cases: Sequence[Case],
    cells: dict[str, list[Cell]],
    args: argparse.Namespace,
    header: list[str],
) -> tuple[list[str], bool]:
    """The Markdown report, and whether any check mismatched (or a child failed)."""
    lines = list(header)
    trouble = False
    mismatches: list[str] = []
    for case in cases:
        row = cells[case.name]
        ref = next((c for c in row if c.system == case.reference), None)
        ref_ok = ref is not None and ref.ok
        lines += ["", f"### {case.title}", ""]
        versus = "SimPy" if case.reference == "simpy" else "ref"
        extra = "runs / child" if case.repeated else f"CPU / {case.unit}"
        lines.append(
            "| system | CPU / run (median) | min - max | wall / run (median) | "
            f"{extra} | CPU vs {versus} | wall vs {versus} | check |"
        )
        lines.append("|---|--:|--:|--:|--:|--:|--:|---|")
        for cell in row:
            if not cell.ok:
                trouble = True
                error = (cell.error or "no result").replace("|", "/")
                lines.append(f"| {cell.label} | error: {error} | | | | | | |")
                continue
            cpu, wall = cell.median_cpu(), cell.median_wall()
            unit = pick_unit(cpu)
            if case.repeated:
                extra = f"{min(cell.runs):,} - {max(cell.runs):,}"
            else:
                extra = fmt_seconds(cpu / max(cell.units, 1), "µs")
            ratio = wall_ratio = ""
            if ref is not None and ref_ok and cell is not ref:
                ratio = f"{cpu / ref.median_cpu():.2f}x"
                wall_ratio = f"{wall / ref.median_wall():.2f}x"
            check, bad = same_result(cell, ref)
            if bad:
                trouble = True
                mismatches.append(f"{case.title} / {cell.label}: {check}")
                log(f"MISMATCH: {case.title} / {cell.label}: {check}")
            lines.append(
                f"| {cell.label} | {fmt_seconds(cpu, unit)} | "
                f"{fmt_seconds(min(cell.cpu), unit)} - {fmt_seconds(max(cell.cpu), unit)} | "
                f"{fmt_seconds(wall)} | {extra} | {ratio} | {wall_ratio} | {check} |"
            )
    lines += ["", "## Targets (issue 38)", ""]
    if mismatches:
        lines += ["**MISMATCH: the systems did not compute the same thing:**", ""]
        lines += [f"- {m}" for m in mismatches]
        lines.append("")
    by_name = {case.name: case for case in cases}
    goals = targets(cases)
    if not goals:
        lines.append("(no targeted row was measured)")
    for goal in goals:
        case = by_name[goal.case]
        row = cells[case.name]
        cell = next(c for c in row if c.system == goal.system)
        ref = next((c for c in row if c.system == case.reference), None)
        name = f"{case.title}, {cell.label}"
        if ref is None or not ref.ok or not cell.ok:
            lines.append(f"- {name}: ≤ {goal.limit:g}x {goal.what}: not measured (error)")
            continue
        times = cell.median_cpu() / ref.median_cpu()
        verdict = "met" if times <= goal.limit else "NOT met"
        lines.append(f"- {name}: {times:.2f}x {goal.what} (≤ {goal.limit:g}x): {verdict}")
    lines += [
        "",
        "Ratios are of median CPU time per run; the targets are the default order's.  An "
        "example whose run takes a millisecond or less measures mostly the fixed cost of a run "
        "(setting up and closing the loop or environment: the last table), not the cost of "
        "its events.",
    ]
    return lines, trouble


def make_header(args: argparse.Namespace, load: tuple[float, float, float]) -> list[str]:
    import trio

    from virtualtime._engine import _compiled

    nproc = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    command = shlex.join(["python", *sys.argv])
    built = "yes" if _compiled.COMPILED else "no (pure-Python path)"
    return [
        "## Modelling kit vs SimPy (bench/bench_kit.py, issue 38)",
        "",
        f"- date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"- command: `{command}`",
        f"- nproc: {nproc}; load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
        f"- Python {platform.python_version()}, simpy {simpy.__version__}, trio "
        f"{trio.__version__}, virtualtime {virtualtime.__version__}",
        f"- compiled core built (`virtualtime._engine._compiled.COMPILED`): {built}",
        f"- CPU time (`time.process_time()` of the run alone, in a fresh child) is the main "
        f"figure, wall time beside it; median of {args.repeats} child"
        f"{'' if args.repeats == 1 else 'ren'}, min - max of CPU; "
        f"the systems of a workload interleaved round-robin, order rotated every round",
        f"- many-run workloads: each child repeats the run for ≥ {args.min_time:g} s of CPU "
        "after one warm-up run, time per run",
    ]


# --------------------------------------------------------------------------- main


def comma_list(choices: Sequence[str]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        items = [item.strip() for item in text.split(",") if item.strip()]
        unknown = [item for item in items if item not in choices]
        if unknown or not items:
            raise argparse.ArgumentTypeError(
                f"unknown {unknown!r}; choose from {', '.join(choices)}"
            )
        return list(dict.fromkeys(items))

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--only",
        type=comma_list(GROUPS),
        default=list(GROUPS),
        help=f"workloads, comma-separated (default: all of {','.join(GROUPS)})",
    )
    parser.add_argument("--repeats", type=int, default=5, help="children per system (median)")
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat")
    parser.add_argument("--output", type=Path, help="also write the Markdown report here")
    parser.add_argument(
        "--backends",
        type=comma_list(BACKENDS),
        default=list(BACKENDS),
        help="kit backends (default: asyncio,trio)",
    )
    parser.add_argument(
        "--order",
        type=comma_list(ORDERS),
        default=["virtualtime"],
        help="kit orders for mm4, shop, bank and fixed (default: virtualtime; "
        'virtualtime,simpy adds order="simpy" rows)',
    )
    parser.add_argument(
        "--customers", type=int, help=f"M/M/4 customers (default {DEFAULT_CUSTOMERS:,})"
    )
    parser.add_argument("--weeks", type=float, help=f"shop weeks (default {DEFAULT_WEEKS})")
    parser.add_argument(
        "--bank-customers",
        type=int,
        help=f"bank customers (default {DEFAULT_BANK_CUSTOMERS:,})",
    )
    parser.add_argument(
        "--min-time",
        type=float,
        help=f"CPU seconds each child repeats a small run for (default {MIN_TIME})",
    )
    parser.add_argument(
        "--timeout", type=float, default=900.0, help="seconds one child may take (default 900)"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--system", help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--warm-size", type=int, default=0, help=argparse.SUPPRESS)
    return parser


def resolve(args: argparse.Namespace) -> None:
    """Fill the defaults that depend on ``--quick``."""
    quick = args.quick
    if quick:
        args.repeats = 1
    if args.customers is None:
        args.customers = QUICK_CUSTOMERS if quick else DEFAULT_CUSTOMERS
    if args.weeks is None:
        args.weeks = QUICK_WEEKS if quick else DEFAULT_WEEKS
    if args.bank_customers is None:
        args.bank_customers = QUICK_BANK_CUSTOMERS if quick else DEFAULT_BANK_CUSTOMERS
    if args.min_time is None:
        args.min_time = QUICK_MIN_TIME if quick else MIN_TIME


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    resolve(args)
    if args.child is not None:
        return child_main(args)
    load = os.getloadavg()
    header = make_header(args, load)
    cases = build_cases(args)
    cells = run_all(cases, args)
    lines, trouble = report(cases, cells, args, header)
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.output is not None:
        args.output.write_text(text, encoding="utf-8")
    if trouble:
        log("MISMATCH or error: see the report")
    return 1 if trouble else 0


if __name__ == "__main__":
    raise SystemExit(main())
