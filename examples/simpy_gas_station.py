"""Gas station refuelling: pumps, a shared tank and a tank truck (SimPy's "Gas Station
Refueling" example, ported).

Covers:

- Resources: ``sim.Resource`` (the pumps)
- Containers: ``sim.Container`` (the station's tank), served strictly in order
- Waiting for another process: the control process awaits the tank truck
- ``order="simpy"``: a port of a SimPy program runs in SimPy's event order, so it prints
  what SimPy prints

Scenario:
  A gas station has two pumps sharing one 200 l tank.  Cars arrive every 30-300 s, take a
  pump and fill up from the tank.  A control process checks the tank every 10 s and, when
  it is below 25 %, calls a tank truck that arrives 300 s later and refills it.  Cars that
  find the tank empty wait for the truck.  The run stops at 1000 s.
"""

from __future__ import annotations

import itertools
import random

from virtualtime import sim

RANDOM_SEED = 42
STATION_TANK_SIZE = 200  # size of the station's tank (litres)
THRESHOLD = 25  # call the truck below this level (% of full)
CAR_TANK_SIZE = 50  # size of a car's tank (litres)
CAR_TANK_LEVEL = (5, 25)  # min/max fuel left in an arriving car (litres)
REFUELING_SPEED = 2  # litres / second
TANK_TRUCK_TIME = 300  # seconds for the truck to arrive
T_INTER = (30, 300)  # seconds between cars, min and max
SIM_TIME = 1000  # seconds simulated


async def car(name: str, pumps: sim.Resource, tank: sim.Container) -> None:
    """Arrive, take a pump, draw what the car's tank lacks, fill up, leave."""
    level = random.randint(*CAR_TANK_LEVEL)
    print(f"{sim.now():6.1f} s: {name} arrived at gas station")
    async with pumps.request():
        required = CAR_TANK_SIZE - level
        await tank.get(required)
        await sim.sleep(required / REFUELING_SPEED)
        print(f"{sim.now():6.1f} s: {name} refueled with {required:.1f}L")


async def control(tank: sim.Container) -> None:
    """Every 10 s, call the tank truck (and wait for it) if the tank runs low."""
    while True:
        if tank.level / tank.capacity * 100 < THRESHOLD:
            print(f"{sim.now():6.1f} s: Calling tank truck")
            await sim.start(tank_truck(tank))
        await sim.sleep(10)


async def tank_truck(tank: sim.Container) -> None:
    """Drive to the station, then fill its tank up."""
    await sim.sleep(TANK_TRUCK_TIME)
    amount = tank.capacity - tank.level
    tank.put(amount)
    print(f"{sim.now():6.1f} s: Tank truck arrived and refuelled station with {amount:.1f}L")


async def car_generator(pumps: sim.Resource, tank: sim.Container) -> None:
    """Send a car every 30-300 s."""
    for i in itertools.count():
        await sim.sleep(random.randint(*T_INTER))
        sim.start(car(f"Car {i}", pumps, tank))


async def main() -> None:
    pumps = sim.Resource(2)
    tank = sim.Container(STATION_TANK_SIZE, init=STATION_TANK_SIZE)
    sim.start(control(tank))
    sim.start(car_generator(pumps, tank))


if __name__ == "__main__":
    print("Gas Station refuelling")
    random.seed(RANDOM_SEED)
    sim.simulate(main, until=SIM_TIME, order="simpy")
