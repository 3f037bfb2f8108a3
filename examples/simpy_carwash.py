"""Carwash: cars queue for a limited number of washing machines (SimPy's "Carwash", ported).

Covers:

- Waiting for another process: ``await sim.start(carwash.wash(name))``
- Resources: ``async with machines.request():``
- ``order="simpy"``: a port of a SimPy program runs in SimPy's event order; here a
  granted request still lets the other cars of the instant arrive first, as in SimPy

Scenario:
  A carwash has two machines and a wash takes 5 minutes.  Four cars are there at the
  start and another arrives every 5-9 minutes; a car waits for a free machine, is washed,
  and leaves.  The run stops at minute 20 (events at exactly 20 do not run, SimPy's rule).
"""

from __future__ import annotations

import itertools
import random

from virtualtime import sim

RANDOM_SEED = 42
NUM_MACHINES = 2  # machines in the carwash
WASHTIME = 5  # minutes a wash takes
T_INTER = 7  # a new car roughly every 7 minutes
SIM_TIME = 20  # minutes simulated


class Carwash:
    """``machines`` washing machines, each cleaning one car in ``washtime`` minutes."""

    def __init__(self, machines: int, washtime: float) -> None:
        self.machines = sim.Resource(machines)
        self.washtime = washtime

    async def wash(self, car: str) -> None:
        """Wash ``car``: it takes ``washtime`` and removes a random part of the dirt."""
        await sim.sleep(self.washtime)
        print(f"Carwash removed {random.randint(50, 99)}% of {car}'s dirt.")


async def car(name: str, carwash: Carwash) -> None:
    """Arrive, wait for a machine, get washed, leave."""
    print(f"{name} arrives at the carwash at {sim.now():.2f}.")
    async with carwash.machines.request():
        print(f"{name} enters the carwash at {sim.now():.2f}.")
        await sim.start(carwash.wash(name))
        print(f"{name} leaves the carwash at {sim.now():.2f}.")


async def setup(machines: int, washtime: float, t_inter: int) -> None:
    """Open the carwash with four cars waiting, then send a car every ``t_inter`` +- 2."""
    carwash = Carwash(machines, washtime)
    numbers = itertools.count()
    for _ in range(4):
        sim.start(car(f"Car {next(numbers)}", carwash))
    while True:
        await sim.sleep(random.randint(t_inter - 2, t_inter + 2))
        sim.start(car(f"Car {next(numbers)}", carwash))


if __name__ == "__main__":
    print("Carwash")
    print("Check out http://youtu.be/fXXmeP9TvBg while simulating ... ;-)")
    random.seed(RANDOM_SEED)
    sim.simulate(setup, NUM_MACHINES, WASHTIME, T_INTER, until=SIM_TIME, order="simpy")
