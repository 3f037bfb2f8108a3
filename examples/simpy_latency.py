"""Event latency: a cable that delays every message (SimPy's "Event Latency" example, ported).

Covers:

- Stores: ``sim.Store`` as the far end of a cable
- A process per message in flight (``sim.start(cable.carry(value))``)
- ``order="simpy"``: a port of a SimPy program runs in SimPy's event order; here the
  run stops *before* events at exactly ``until``, so the message due at t=100 is not
  printed

Scenario:
  A sender puts a message on a cable every 5 time units; the cable delivers each one 10
  units later into a store the receiver reads from.  Keeping the delay in the cable keeps
  it out of both sender and receiver.  The run stops at t=100.
"""

from __future__ import annotations

from virtualtime import sim

SIM_DURATION = 100


class Cable:
    """Carries each value for ``delay`` before the far end can read it."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.far_end = sim.Store()

    async def carry(self, value: str) -> None:
        await sim.sleep(self.delay)
        await self.far_end.put(value)

    def send(self, value: str) -> None:
        sim.start(self.carry(value))

    async def receive(self) -> str:
        message: str = await self.far_end.get()
        return message


async def sender(cable: Cable) -> None:
    """Send a message every 5 time units."""
    while True:
        await sim.sleep(5)
        cable.send(f"Sender sent this at {sim.now():g}")


async def receiver(cable: Cable) -> None:
    """Print every message as it arrives."""
    while True:
        message = await cable.receive()
        print(f"Received this at {sim.now():g} while {message}")


async def main() -> None:
    cable = Cable(10)
    sim.start(sender(cable))
    sim.start(receiver(cable))


if __name__ == "__main__":
    print("Event Latency")
    sim.simulate(main, until=SIM_DURATION, order="simpy")
