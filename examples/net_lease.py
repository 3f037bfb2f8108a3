"""A leader lease that breaks under clock skew, found by exploring seeds.

Covers: virtualtime.net -- a lock service and three nodes on simulated hosts, each node with
its own clock (a rate drawn from the seed), a partition that cuts the leader off, and
``net.explore`` running the scenario under 100 seeds, naming the failing ones with the line
that replays each, and finding none once the node allows for drift.

Scenario: the lock service grants a 10 s lease and times it by its own clock.  A node that
holds the lease renews it every 2 s and believes it leads until its lease runs out *by its
own clock*.  At t=20 s the leader is cut off; the service lets the lease expire and grants it
to another node.  If the cut-off leader's clock runs slow, it still believes it leads when
the new leader starts: two leaders.  Each node's clock rate is drawn from the seed (up to
10 % off).  The fixed node counts its lease from the moment it asked and gives up 10 % early,
the most its clock may be off.
"""

from __future__ import annotations

import asyncio
import random

from virtualtime import net

LEASE = 10.0
RENEW_EVERY = 2.0
MAX_DRIFT = 0.10


class Leaders:
    """The nodes that believe they lead right now: never more than one."""

    def __init__(self) -> None:
        self.now: set[str] = set()

    def enter(self, name: str) -> None:
        self.now.add(name)
        if len(self.now) > 1:
            leaders = ", ".join(sorted(self.now))
            at = asyncio.get_running_loop().time()
            raise AssertionError(f"two leaders ({leaders}) at t={at:.3f} on {name}'s clock")

    def leave(self, name: str) -> None:
        self.now.discard(name)


async def lock_service() -> None:
    holder: str | None = None
    expires = 0.0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal holder, expires
        try:
            while line := await reader.readline():
                name = line.decode().strip()
                now = asyncio.get_running_loop().time()
                if holder in (None, name) or now >= expires:
                    holder, expires = name, now + LEASE
                    writer.write(b"GRANTED\n")
                else:
                    writer.write(b"HELD\n")
        finally:
            writer.close()

    server = await asyncio.start_server(handle, None, 7000)
    await server.serve_forever()


# --8<-- [start:node]
async def node(name: str, leaders: Leaders, *, careful: bool) -> None:
    loop = asyncio.get_running_loop()
    reader, writer = await asyncio.open_connection("lock", 7000)
    leading_until = 0.0
    try:
        while True:
            asked = loop.time()
            try:
                async with asyncio.timeout(1.0):
                    writer.write(name.encode() + b"\n")
                    granted = await reader.readline() == b"GRANTED\n"
            except TimeoutError:
                granted = False
            if granted:
                # The careless node counts from the answer and trusts its clock; the careful
                # one counts from the question and allows for the most its clock may drift.
                start = asked if careful else loop.time()
                leading_until = start + LEASE * ((1 - MAX_DRIFT) if careful else 1)
                leaders.enter(name)
            while loop.time() < leading_until:
                if leading_until - loop.time() <= LEASE - RENEW_EVERY:
                    break  # time to renew
                await asyncio.sleep(min(RENEW_EVERY, leading_until - loop.time()))
            if loop.time() >= leading_until:
                leaders.leave(name)
                await asyncio.sleep(1.0)
    finally:
        writer.close()


# --8<-- [end:node]
async def run_cluster(*, careful: bool) -> None:
    world = net.Network(latency=0.002)
    world.host("lock").run(lock_service())
    leaders = Leaders()
    nodes = []
    for name in ("n1", "n2", "n3"):
        host = world.host(name, clock_rate=random.uniform(1 - MAX_DRIFT, 1 + MAX_DRIFT))
        nodes.append(host.run(node(name, leaders, careful=careful), name=name))
    loop = asyncio.get_running_loop()
    await asyncio.sleep(20)
    # Cut the leader off from the lock service for the rest of the run.
    (leader,) = leaders.now
    world.partition(leader, "lock")
    stop = loop.create_future()
    loop.call_later(40, stop.set_result, None)
    # A node's failure (two leaders) ends the run at once.
    await asyncio.wait([stop, *nodes], return_when=asyncio.FIRST_COMPLETED)
    for task in nodes:
        task.cancel()
    # Let the nodes close their connections, and the service see them go.
    results = await asyncio.gather(*nodes, return_exceptions=True)
    world.heal()
    await asyncio.sleep(1)
    for result in results:
        if isinstance(result, AssertionError):
            raise result


async def careless() -> None:
    await run_cluster(careful=False)


async def careful() -> None:
    await run_cluster(careful=True)


# --8<-- [start:explore]
if __name__ == "__main__":
    for scenario in (careless, careful):
        found = net.explore(scenario, seeds=range(100))
        print(f"{scenario.__name__}: {len(found.failures)} of 100 seeds fail")
        for failure in found.failures[:3]:
            print(f"  seed {failure.seed}: {failure.message}")
            print(f"    replay: {failure.replay}")
# --8<-- [end:explore]
