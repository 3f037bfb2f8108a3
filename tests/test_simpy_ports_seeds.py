"""The SimPy ports print what SimPy prints for every seed, not only for the published one.

examples/simpy_*.py are checked against their ``.out`` files for ``RANDOM_SEED = 42``
(tests/test_examples.py).  One seed can hide an order difference that no event of that run
happens to hit: in the default order the gas station differs from SimPy for six seeds in
0-99, because there an event lands exactly on ``until``.  So here the ports themselves run
(their ``__main__`` block, with ``order="simpy"``, with the seed line rewritten) next to a
SimPy 4.1 program written to make the same random draws in the same order, and the two
stdouts must be equal: the gas station for seeds 0-99 on asyncio and 0-19 on trio, the
machine shop (one week instead of four, to keep the file quick) for seeds 0-19 on asyncio
and 0-3 on trio.
"""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import random
import re
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
import simpy

from virtualtime import sim

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
Steps = Generator[simpy.Event, Any, None]


def run_port(name: str, backend: str, monkeypatch: pytest.MonkeyPatch, **constants: int) -> str:
    """The stdout of ``examples/NAME.py`` run as a script, its module constants replaced."""
    source = (EXAMPLES / f"{name}.py").read_text(encoding="utf-8")
    for constant, value in constants.items():
        source, count = re.subn(rf"^{constant} = .*$", f"{constant} = {value}", source, flags=re.M)
        assert count == 1, f"{name}.py assigns {constant} once at module level"
    out = io.StringIO()
    with monkeypatch.context() as patch, contextlib.redirect_stdout(out):
        patch.setattr(sim, "simulate", functools.partial(sim.simulate, backend=backend))
        exec(compile(source, f"{name}.py", "exec"), {"__name__": "__main__"})
    return out.getvalue()


# --------------------------------------------------------------------------- gas station


def simpy_gas_station(seed: int) -> str:
    """SimPy's program for examples/simpy_gas_station.py: its constants, draws and prints."""
    out = io.StringIO()
    env = simpy.Environment()

    def car(name: str, pumps: simpy.Resource, tank: simpy.Container) -> Steps:
        level = random.randint(5, 25)
        print(f"{env.now:6.1f} s: {name} arrived at gas station", file=out)
        with pumps.request() as turn:
            yield turn
            required = 50 - level
            yield tank.get(required)
            yield env.timeout(required / 2)
            print(f"{env.now:6.1f} s: {name} refueled with {required:.1f}L", file=out)

    def control(tank: simpy.Container) -> Steps:
        while True:
            if tank.level / tank.capacity * 100 < 25:
                print(f"{env.now:6.1f} s: Calling tank truck", file=out)
                yield env.process(tank_truck(tank))
            yield env.timeout(10)

    def tank_truck(tank: simpy.Container) -> Steps:
        yield env.timeout(300)
        amount = tank.capacity - tank.level
        tank.put(amount)
        print(
            f"{env.now:6.1f} s: Tank truck arrived and refuelled station with {amount:.1f}L",
            file=out,
        )

    def car_generator(pumps: simpy.Resource, tank: simpy.Container) -> Steps:
        for i in itertools.count():
            yield env.timeout(random.randint(30, 300))
            env.process(car(f"Car {i}", pumps, tank))

    print("Gas Station refuelling", file=out)
    random.seed(seed)
    pumps = simpy.Resource(env, 2)
    tank = simpy.Container(env, 200, init=200)
    env.process(control(tank))
    env.process(car_generator(pumps, tank))
    env.run(until=1000)
    return out.getvalue()


def test_the_simpy_gas_station_prints_the_ports_golden_file() -> None:
    # The SimPy program above is the one the port's .out file was published by.
    golden = (EXAMPLES / "simpy_gas_station.out").read_text(encoding="utf-8")
    assert simpy_gas_station(42) == golden


@pytest.mark.parametrize("seed", range(100))
def test_the_gas_station_port_matches_simpy_on_asyncio(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = run_port("simpy_gas_station", "asyncio", monkeypatch, RANDOM_SEED=seed)
    assert port == simpy_gas_station(seed)


@pytest.mark.parametrize("seed", range(20))
def test_the_gas_station_port_matches_simpy_on_trio(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = run_port("simpy_gas_station", "trio", monkeypatch, RANDOM_SEED=seed)
    assert port == simpy_gas_station(seed)


# --------------------------------------------------------------------------- machine shop

SHOP_WEEKS = 1  # the published run is four weeks; one keeps twenty seeds under a few seconds


def simpy_machine_shop(seed: int, weeks: int) -> str:
    """SimPy's program for examples/simpy_machine_shop.py: its constants, draws and prints."""
    out = io.StringIO()
    env = simpy.Environment()
    repairman = simpy.PreemptiveResource(env, capacity=1)

    def time_per_part() -> float:
        t = random.normalvariate(10.0, 2.0)
        while t <= 0:
            t = random.normalvariate(10.0, 2.0)
        return t

    class Machine:
        def __init__(self, name: str) -> None:
            self.name = name
            self.parts_made = 0
            self.broken = False
            self.process = env.process(self.working())
            env.process(self.break_machine())

        def working(self) -> Steps:
            while True:
                left = time_per_part()
                while left:
                    start = env.now
                    try:
                        yield env.timeout(left)
                        left = 0
                    except simpy.Interrupt:
                        self.broken = True
                        left -= env.now - start
                        with repairman.request(priority=1) as repair:
                            yield repair
                            yield env.timeout(30.0)
                        self.broken = False
                self.parts_made += 1

        def break_machine(self) -> Steps:
            while True:
                yield env.timeout(random.expovariate(1 / 300.0))
                if not self.broken:
                    self.process.interrupt()

    def other_jobs() -> Steps:
        while True:
            left = 30.0
            while left:
                with repairman.request(priority=2) as job:
                    yield job
                    start = env.now
                    try:
                        yield env.timeout(left)
                        left = 0
                    except simpy.Interrupt:
                        left -= env.now - start

    print("Machine shop", file=out)
    random.seed(seed)
    shop = [Machine(f"Machine {i}") for i in range(10)]
    env.process(other_jobs())
    env.run(until=weeks * 7 * 24 * 60)
    print(f"Machine shop results after {weeks} weeks", file=out)
    for machine in shop:
        print(f"{machine.name} made {machine.parts_made} parts.", file=out)
    return out.getvalue()


def test_the_simpy_machine_shop_prints_the_ports_golden_file() -> None:
    golden = (EXAMPLES / "simpy_machine_shop.out").read_text(encoding="utf-8")
    assert simpy_machine_shop(42, weeks=4) == golden


@pytest.mark.parametrize("seed", range(20))
def test_the_machine_shop_port_matches_simpy_on_asyncio(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = run_port(
        "simpy_machine_shop", "asyncio", monkeypatch, RANDOM_SEED=seed, WEEKS=SHOP_WEEKS
    )
    assert port == simpy_machine_shop(seed, SHOP_WEEKS)


@pytest.mark.parametrize("seed", range(4))
def test_the_machine_shop_port_matches_simpy_on_trio(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = run_port("simpy_machine_shop", "trio", monkeypatch, RANDOM_SEED=seed, WEEKS=SHOP_WEEKS)
    assert port == simpy_machine_shop(seed, SHOP_WEEKS)
