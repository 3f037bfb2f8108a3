"""Covers: virtualtime.sim Vehicle, Fleet, GuidePath - awaitable journeys, redirects, halt/resume.

Scenario: a courier depot for one 8-hour shift.  Five vans work a 6 x 6 grid of streets
(500 m blocks, junctions A1..F6) from a depot at C3.  Orders (collect a parcel at one junction,
deliver it to another) arrive at random -- a seeded Poisson stream, about 12 an hour.  A
dispatcher task owns the decisions: it gives the oldest waiting order to the nearest free van,
and a free van is one standing at the depot *or on its way back there*, so it is often turned
round mid-journey (a redirect, taken at the next junction).  Each order is carried out by its
own task, which only awaits journeys.  A van drives at 10 m/s empty and 8 m/s loaded; the
speed is asked at every junction.  From 03:10 a mechanic task waits for a van carrying a
parcel, breaks it down (a halt, part way along a street) and repairs it 45 minutes later (a
resume); the order task awaiting that van's journey is woken by the halt and waits for the repair.
At 08:00 no more orders are taken; the vans finish their deliveries and drive home, and the
report gives deliveries, distance, driving time and utilisation per van.  The whole day is
simulated in virtual time, in a fraction of a second, and prints the same every run.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass

import anyio
import anyio.abc

import virtualtime
from virtualtime.sim import Between, Fleet, GuidePath, Vehicle

SEED = 16
BLOCK = 500.0  # metres between junctions
ROWS = COLUMNS = 6
DEPOT = (2, 2)  # C3
EMPTY_SPEED, LOADED_SPEED = 10.0, 8.0  # metres per second
ORDERS_PER_HOUR = 12
SHIFT = 8 * 3600  # seconds
BREAKDOWN_AT, REPAIR_TIME = 3 * 3600 + 10 * 60, 45 * 60
HOUR = 3600
NARRATED = 30 * 60  # the first half hour is told event by event


def where(place: Hashable) -> str:
    """A junction as a street-map label ("C3"), or a point part way along a street."""
    if isinstance(place, Between):
        return f"between {where(place.start)} and {where(place.end)}"
    assert isinstance(place, tuple)
    row, column = place
    return f"{'ABCDEF'[row]}{column + 1}"


def clock(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def minutes(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s"


def say(text: str) -> None:
    print(f"  {clock(anyio.current_time())}  {text}")


@dataclass
class Order:
    number: int
    placed: float
    pickup: Hashable
    dropoff: Hashable
    load_time: int
    unload_time: int
    picked_up: float | None = None
    delivered: float | None = None


class Crew:
    """A van and what its crew knows: is it loaded, is it broken, what has it done."""

    def __init__(self, name: str, streets: GuidePath) -> None:
        self.loaded = False
        self.broken = False
        self.order: Order | None = None
        self.deliveries = 0
        self.busy = 0.0
        self.repaired = anyio.Event()
        # The van asks its crew for its speed at every junction: slower with a parcel on board.
        self.van = Vehicle(streets, position=DEPOT, velocity=self.speed, name=name)

    def speed(self) -> float:
        return LOADED_SPEED if self.loaded else EMPTY_SPEED

    @property
    def free(self) -> bool:
        return self.order is None and not self.broken


class Depot:
    """The dispatcher's world: the vans, the waiting orders and the log."""

    def __init__(self, streets: GuidePath, group: anyio.abc.TaskGroup) -> None:
        self.streets = streets
        self.group = group
        self.crews = [Crew(f"van-{number}", streets) for number in range(1, 6)]
        self.waiting: deque[Order] = deque()
        self.orders: list[Order] = []
        self.redirects = 0
        self.followed: set[int] = set()  # orders whose story is told after the first half hour
        self.news = anyio.Event()

    def tell(self, order: Order, text: str) -> None:
        if anyio.current_time() < NARRATED or order.number in self.followed:
            say(f"order {order.number:>2}  {text}")

    # -- the dispatcher task: the only place decisions are made

    async def dispatcher(self, closing: anyio.Event) -> None:
        while True:
            self.dispatch()
            if closing.is_set() and not self.waiting and all(c.free for c in self.crews):
                return
            self.news = anyio.Event()
            await self.news.wait()

    def dispatch(self) -> None:
        """The oldest order goes to the nearest free van; free vans with nothing to do go home."""
        while self.waiting and any(c.free for c in self.crews):
            order = self.waiting.popleft()
            crew = min(
                (c for c in self.crews if c.free), key=lambda c: c.van.distance_to(order.pickup)
            )
            van = crew.van
            distance = van.distance_to(order.pickup)
            if van.is_moving:  # on its way home: a redirect, taken at the next junction
                self.redirects += 1
                how = f"{van.name}, heading home past {where(van.position)}, turns round"
            elif van.position == DEPOT:
                how = f"{van.name} leaves the depot"
            elif distance == 0:
                how = f"{van.name} is already there"
            else:
                how = f"{van.name} goes straight on from {where(van.position)}"
            waited = anyio.current_time() - order.placed
            note = f"{distance / 1000:.1f} km" if distance else ""
            if waited:
                note += f"{', ' if note else ''}waited {minutes(waited)}"
            self.tell(
                order,
                f"{where(order.pickup)} -> {where(order.dropoff)}  {how}"
                + (f" ({note})" if note else ""),
            )
            crew.order = order
            self.group.start_soon(self.deliver, crew, order)
        for crew in self.crews:
            if crew.free and not crew.van.is_travelling and crew.van.position != DEPOT:
                crew.van.travel_to(DEPOT)

    def poke(self) -> None:
        self.news.set()

    # -- one task per order: it awaits journeys, the vans are driven by their own tasks

    async def drive(self, crew: Crew, destination: Hashable) -> None:
        journey = crew.van.travel_to(destination)
        while True:
            outcome = await journey.follow()
            if outcome.arrived:
                return
            await crew.repaired.wait()  # halted by a breakdown: wait for the mechanic
            resumed = crew.van.journey
            assert resumed is not None
            journey = resumed

    async def deliver(self, crew: Crew, order: Order) -> None:
        started = anyio.current_time()
        await self.drive(crew, order.pickup)
        await anyio.sleep(order.load_time)
        crew.loaded = True
        order.picked_up = anyio.current_time()
        self.tell(order, f"collected at {where(order.pickup)} by {crew.van.name}")
        await self.drive(crew, order.dropoff)
        await anyio.sleep(order.unload_time)
        crew.loaded = False
        order.delivered = anyio.current_time()
        crew.deliveries += 1
        crew.busy += order.delivered - started
        took = minutes(order.delivered - order.placed)
        self.tell(order, f"delivered at {where(order.dropoff)}, {took} after it was placed")
        crew.order = None  # free: the dispatcher sends it on, or home
        self.poke()

    # -- the world outside: customers, a mechanic, the clock on the wall

    async def customers(self, rng: random.Random) -> None:
        zones = [z for z in self.streets.zones if z != DEPOT]
        while True:
            gap = max(1, round(rng.expovariate(ORDERS_PER_HOUR / HOUR)))
            if anyio.current_time() + gap >= SHIFT:
                return
            await anyio.sleep(gap)
            pickup, dropoff = rng.sample(zones, 2)
            order = Order(
                number=len(self.orders) + 1,
                placed=anyio.current_time(),
                pickup=pickup,
                dropoff=dropoff,
                load_time=rng.randint(120, 300),
                unload_time=rng.randint(60, 240),
            )
            self.orders.append(order)
            self.waiting.append(order)
            self.poke()

    async def mechanic(self) -> None:
        await anyio.sleep(BREAKDOWN_AT)
        while not any(c.loaded and c.van.is_moving for c in self.crews):
            await anyio.sleep(60)
        crew = next(c for c in self.crews if c.loaded and c.van.is_moving)
        crew.broken = True
        crew.repaired = anyio.Event()
        outcome = crew.van.halt()
        assert outcome is not None
        order = crew.order
        assert order is not None
        self.followed.add(order.number)
        say(
            f"{crew.van.name} breaks down {where(crew.van.position)}, order {order.number} on board"
        )
        await anyio.sleep(REPAIR_TIME)
        crew.van.resume()
        crew.broken = False
        crew.repaired.set()
        say(f"{crew.van.name} is repaired and drives on to {where(crew.van.destination)}")
        self.poke()

    async def hourly(self, closing: anyio.Event) -> None:
        for hour in range(1, SHIFT // HOUR + 1):
            await anyio.sleep(HOUR)
            if hour == 1:
                print()
                print("Hour by hour, with anything out of the ordinary:")
                print("  time   orders  delivered  waiting  vans out  km driven")
            out = sum(not c.free or c.van.is_moving for c in self.crews)
            delivered = sum(o.delivered is not None for o in self.orders)
            km = sum(c.van.distance_travelled for c in self.crews) / 1000
            print(
                f"  {clock(anyio.current_time())[:5]}  {len(self.orders):>6}  {delivered:>9}  "
                f"{len(self.waiting):>7}  {out:>8}  {km:>9.1f}"
            )
        closing.set()
        self.poke()


async def main() -> None:
    streets = GuidePath.grid(ROWS, COLUMNS, spacing=BLOCK)
    print("Courier depot: 5 vans, a 6 x 6 street grid (500 m blocks), depot at C3.")
    print(f"Orders arrive at random, about {ORDERS_PER_HOUR} an hour (seed {SEED}), for 8 hours.")
    print()
    print("The first half hour, event by event:")
    closing = anyio.Event()
    async with Fleet() as fleet, anyio.create_task_group() as group:
        depot = Depot(streets, group)
        for crew in depot.crews:
            fleet.add(crew.van)
        group.start_soon(depot.dispatcher, closing)
        group.start_soon(depot.customers, random.Random(SEED))
        group.start_soon(depot.mechanic)
        await depot.hourly(closing)
        # The task group now waits for the deliveries in progress; leaving the Fleet then waits
        # for the vans' last journeys home.
    day = anyio.current_time()
    last = max(o.delivered or 0.0 for o in depot.orders)
    print(f"  {clock(last)}  the last parcel is delivered")
    print(f"  {clock(day)}  every van is back at the depot")
    report(depot, day)


def hours(seconds: float) -> str:
    m = round(seconds / 60)
    return f"{m // 60}:{m % 60:02d}"


def report(depot: Depot, day: float) -> None:
    crews = depot.crews
    print()
    print(f"Report for the day (00:00 to {clock(day)}):")
    print()
    print(
        f"  {'van':<7}{'deliveries':>11}{'distance':>12}{'driving':>10}{'busy':>7}"
        f"{'utilisation':>14}"
    )
    for crew in crews:
        van = crew.van
        print(
            f"  {van.name:<7}{crew.deliveries:>11}{van.distance_travelled / 1000:>9.1f} km"
            f"{hours(van.operating_time):>10}{hours(crew.busy):>7}{crew.busy / day:>14.0%}"
        )
    km = sum(c.van.distance_travelled for c in crews) / 1000
    driving = sum(c.van.operating_time for c in crews)
    busy = sum(c.busy for c in crews)
    print(
        f"  {'all':<7}{sum(c.deliveries for c in crews):>11}{km:>9.1f} km"
        f"{hours(driving):>10}{hours(busy):>7}{busy / (day * len(crews)):>14.0%}"
    )
    print("  (busy: from taking an order to delivering it; utilisation: busy / the day)")
    waits = [o.picked_up - o.placed for o in depot.orders if o.picked_up is not None]
    journeys = sum(len(c.van.journeys) for c in crews)
    print()
    print(f"  {len(depot.orders)} orders, all delivered, in {journeys} journeys;")
    print(f"  {depot.redirects} journeys began by turning round a van on its way home.")
    print(
        f"  From order to collection: {minutes(sum(waits) / len(waits))} on average, "
        f"{minutes(max(waits))} at worst."
    )


if __name__ == "__main__":
    virtualtime.run(main())
