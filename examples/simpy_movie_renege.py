"""Movie renege: a queue that dissolves when a film sells out (SimPy's "Movie Renege"
example, ported).

Covers:

- Resources: ``sim.Resource`` (the ticket counter)
- Signals: ``sim.Signal`` -- "this film is sold out", awaited by many
- Conditions: ``sim.first_of(my_turn, sold_out)``
- ``order="simpy"``: a port of a SimPy program runs in SimPy's event order, so it prints
  what SimPy prints

Scenario:
  A cinema has one ticket counter selling tickets for three films (next show only).
  Moviegoers arrive every 0.5 minutes on average and want 1-6 tickets.  When fewer than
  two tickets are left for a film it is sold out, and everybody still queueing for it
  leaves.  The run stops at minute 120; the report says when each film sold out and how
  many people left the queue then.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from virtualtime import sim

RANDOM_SEED = 42
TICKETS = 50  # tickets per film
SELLOUT_THRESHOLD = 2  # fewer tickets than this is a sellout
SIM_TIME = 120  # minutes simulated
MOVIES = ("Python Unchained", "Kill Process", "Pulp Implementation")


@dataclass
class Theater:
    """The counter and, per film, the tickets left, the sellout signal and its aftermath."""

    counter: sim.Resource = field(default_factory=lambda: sim.Resource(1))
    available: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MOVIES, TICKETS))
    sold_out: dict[str, sim.Signal] = field(
        default_factory=lambda: {movie: sim.Signal() for movie in MOVIES}
    )
    when_sold_out: dict[str, float] = field(default_factory=dict)
    renegers: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MOVIES, 0))


async def moviegoer(movie: str, tickets: int, theater: Theater) -> None:
    """Queue for ``tickets`` for ``movie``; leave if it sells out first."""
    with theater.counter.request() as my_turn:
        which, _ = await sim.first_of(my_turn, theater.sold_out[movie])
        if which is not my_turn:
            theater.renegers[movie] += 1
            return
        if theater.available[movie] < tickets:
            await sim.sleep(0.5)  # a short discussion with the clerk, then away
            return
        theater.available[movie] -= tickets
        if theater.available[movie] < SELLOUT_THRESHOLD:
            theater.sold_out[movie].succeed()
            theater.when_sold_out[movie] = sim.now()
            theater.available[movie] = 0
        await sim.sleep(1)


async def arrivals(theater: Theater) -> None:
    """A moviegoer every 0.5 minutes on average, for a film that still has tickets."""
    while True:
        await sim.sleep(random.expovariate(1 / 0.5))
        movie = random.choice(MOVIES)
        tickets = random.randint(1, 6)
        if theater.available[movie]:
            sim.start(moviegoer(movie, tickets, theater))


async def main() -> Theater:
    theater = Theater()
    sim.start(arrivals(theater))
    return theater


if __name__ == "__main__":
    print("Movie renege")
    random.seed(RANDOM_SEED)
    theater = sim.simulate(main, until=SIM_TIME, order="simpy")
    assert theater is not None
    for movie in MOVIES:
        if theater.sold_out[movie].triggered:
            print(
                f'Movie "{movie}" sold out {theater.when_sold_out[movie]:.1f} minutes '
                "after ticket counter opening."
            )
            print(f"  Number of people leaving queue when film sold out: {theater.renegers[movie]}")
