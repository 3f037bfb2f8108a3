"""Bank renege: customers who give up waiting (SimPy's "Bank Renege" example, ported).

Covers:

- Resources: ``sim.Resource`` held with ``with counter.request() as req``
- Conditions: ``sim.first_of(req, sim.sleep(patience))`` -- served, or reneged
- ``order="simpy"``: a port of a SimPy program runs in SimPy's event order, so it prints
  what SimPy prints

Scenario:
  A counter with a random service time and customers who renege.  Five customers arrive
  roughly every 10 s; each waits at most 1-3 s for the counter, then leaves.  Prints the
  same lines as SimPy's published output for the same seed.
"""

from __future__ import annotations

import random

from virtualtime import sim

RANDOM_SEED = 42
NEW_CUSTOMERS = 5  # total number of customers
INTERVAL_CUSTOMERS = 10.0  # a new customer roughly every x seconds
MIN_PATIENCE = 1  # min. customer patience
MAX_PATIENCE = 3  # max. customer patience


async def source(number: int, interval: float, counter: sim.Resource) -> None:
    """Send ``number`` customers to the counter, one every ``interval`` on average."""
    for i in range(number):
        sim.start(customer(f"Customer{i:02d}", counter, time_in_bank=12.0))
        await sim.sleep(random.expovariate(1.0 / interval))


async def customer(name: str, counter: sim.Resource, time_in_bank: float) -> None:
    """Arrive, wait for the counter or give up, be served, leave."""
    arrive = sim.now()
    print(f"{arrive:7.4f} {name}: Here I am")
    with counter.request() as req:
        patience = random.uniform(MIN_PATIENCE, MAX_PATIENCE)
        which, _ = await sim.first_of(req, sim.sleep(patience))
        wait = sim.now() - arrive
        if which is req:
            print(f"{sim.now():7.4f} {name}: Waited {wait:6.3f}")
            await sim.sleep(random.expovariate(1.0 / time_in_bank))
            print(f"{sim.now():7.4f} {name}: Finished")
        else:
            print(f"{sim.now():7.4f} {name}: RENEGED after {wait:6.3f}")


async def main() -> None:
    counter = sim.Resource(capacity=1)
    sim.start(source(NEW_CUSTOMERS, INTERVAL_CUSTOMERS, counter))


if __name__ == "__main__":
    print("Bank renege")
    random.seed(RANDOM_SEED)
    sim.simulate(main, order="simpy")
