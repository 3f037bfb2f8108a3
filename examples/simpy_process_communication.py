"""Process communication: one-to-one and one-to-many pipes (SimPy's "Process Communication"
example, ported).

Covers:

- Stores: ``sim.Store`` as a pipe between processes
- Conditions: ``sim.all_of`` over the puts of a broadcast
- Two simulations one after the other in one script
- ``order="simpy"``: a port of a SimPy program runs in SimPy's event order, so it prints
  what SimPy prints

Scenario:
  A generator sends a time-stamped message every 6-10 time units; a consumer reads them
  and then works 4-8 units, so it is sometimes late for a message (it says so).  First one
  generator feeds one consumer through a store; then a broadcast pipe copies every
  message into one store per consumer, for two consumers.  Each run stops at t=100.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable
from typing import Any, Protocol

from virtualtime import sim

RANDOM_SEED = 42
SIM_TIME = 100

Message = tuple[float, str]


class Pipe(Protocol):
    def put(self, item: Message) -> Awaitable[Any]: ...


class BroadcastPipe:
    """Copies every message into one store per consumer (one-to-many)."""

    def __init__(self) -> None:
        self.pipes: list[sim.Store] = []

    def put(self, value: Message) -> Awaitable[Any]:
        if not self.pipes:
            raise RuntimeError("There are no output pipes.")
        return sim.all_of(*(pipe.put(value) for pipe in self.pipes))

    def output(self) -> sim.Store:
        """A new store that receives a copy of every message."""
        pipe = sim.Store()
        self.pipes.append(pipe)
        return pipe


async def generator(name: str, out: Pipe) -> None:
    """Send a time-stamped message every 6-10 time units."""
    while True:
        await sim.sleep(random.randint(6, 10))
        out.put((sim.now(), f"{name} says hello at {sim.now():g}"))


async def consumer(name: str, source: sim.Store) -> None:
    """Read messages, noticing the ones that waited for us; work 4-8 units after each."""
    while True:
        sent, text = await source.get()
        if sent < sim.now():
            print(f"LATE Getting Message: at time {sim.now():g}: {name} received message: {text}")
        else:
            print(f"at time {sim.now():g}: {name} received message: {text}.")
        await sim.sleep(random.randint(4, 8))


async def one_to_one() -> None:
    pipe = sim.Store()
    sim.start(generator("Generator A", pipe))
    sim.start(consumer("Consumer A", pipe))


async def one_to_many() -> None:
    broadcast = BroadcastPipe()
    sim.start(generator("Generator A", broadcast))
    sim.start(consumer("Consumer A", broadcast.output()))
    sim.start(consumer("Consumer B", broadcast.output()))


if __name__ == "__main__":
    print("Process communication")
    random.seed(RANDOM_SEED)
    print("\nOne-to-one pipe communication\n")
    sim.simulate(one_to_one, until=SIM_TIME, order="simpy")
    print("\nOne-to-many pipe communication\n")
    sim.simulate(one_to_many, until=SIM_TIME, order="simpy")
