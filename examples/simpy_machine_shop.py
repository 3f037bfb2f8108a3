"""Machine shop: machines that break down and a repairman with other work (SimPy's "Machine
Shop" example, ported).

Covers:

- Interrupts: ``process.interrupt()`` and ``except sim.Interrupt`` -- a breakdown in the
  middle of a part, which the machine survives
- Resources: ``sim.PreemptiveResource`` -- a repair preempts the repairman's other job
- ``order="simpy"``: a port of a SimPy program runs in SimPy's event order, so it prints
  what SimPy prints

Scenario:
  A workshop has ten identical machines and a stream of jobs that keeps them busy.  Each
  machine breaks down every 300 minutes on average; one repairman repairs machines (30
  minutes each) and, in between, does less important 30-minute jobs, which repairs
  preempt and which he resumes afterwards.  After four weeks, how many parts has each
  machine made?
"""

from __future__ import annotations

import random

from virtualtime import sim

RANDOM_SEED = 42
PT_MEAN = 10.0  # mean processing time (minutes)
PT_SIGMA = 2.0  # sigma of processing time
MTTF = 300.0  # mean time to failure (minutes)
BREAK_MEAN = 1 / MTTF  # parameter of the exponential distribution
REPAIR_TIME = 30.0  # minutes to repair a machine
JOB_DURATION = 30.0  # minutes of an other job
NUM_MACHINES = 10  # machines in the shop
WEEKS = 4  # weeks simulated
SIM_TIME = WEEKS * 7 * 24 * 60  # minutes simulated


def time_per_part() -> float:
    """A positive processing time for one part."""
    t = random.normalvariate(PT_MEAN, PT_SIGMA)
    while t <= 0:
        t = random.normalvariate(PT_MEAN, PT_SIGMA)
    return t


def time_to_failure() -> float:
    """Time until the machine's next failure."""
    return random.expovariate(BREAK_MEAN)


class Machine:
    """Makes parts one after another; breaks now and then and calls the repairman."""

    def __init__(self, name: str, repairman: sim.PreemptiveResource) -> None:
        self.name = name
        self.parts_made = 0
        self.broken = False
        self.process = sim.start(self.working(repairman))
        sim.start(self.break_machine())

    async def working(self, repairman: sim.PreemptiveResource) -> None:
        """Make parts for ever; a breakdown pauses the part until it is repaired."""
        while True:
            left = time_per_part()
            while left:
                start = sim.now()
                try:
                    await sim.sleep(left)
                    left = 0
                except sim.Interrupt:
                    self.broken = True
                    left -= sim.now() - start
                    async with repairman.request(priority=1):
                        await sim.sleep(REPAIR_TIME)
                    self.broken = False
            self.parts_made += 1

    async def break_machine(self) -> None:
        """Break the machine every now and then (only while it is working)."""
        while True:
            await sim.sleep(time_to_failure())
            if not self.broken:
                self.process.interrupt()


async def other_jobs(repairman: sim.PreemptiveResource) -> None:
    """The repairman's unimportant work: repairs preempt it; he resumes where he stopped."""
    while True:
        left = JOB_DURATION
        while left:
            async with repairman.request(priority=2):
                start = sim.now()
                try:
                    await sim.sleep(left)
                    left = 0
                except sim.Interrupt:
                    left -= sim.now() - start


async def main(machines: int) -> list[Machine]:
    repairman = sim.PreemptiveResource(1)
    shop = [Machine(f"Machine {i}", repairman) for i in range(machines)]
    sim.start(other_jobs(repairman))
    return shop


if __name__ == "__main__":
    print("Machine shop")
    random.seed(RANDOM_SEED)
    shop = sim.simulate(main, NUM_MACHINES, until=SIM_TIME, order="simpy")
    assert shop is not None
    print(f"Machine shop results after {WEEKS} weeks")
    for machine in shop:
        print(f"{machine.name} made {machine.parts_made} parts.")
