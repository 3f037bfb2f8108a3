"""Covers: virtualtime.experiment sweep - replications, common random numbers, t-intervals.

Scenario: a bank has customers arriving at 2.4 a minute and tellers who serve one each in
an exponential minute; how long does a customer queue with 3, 4 or 5 tellers?  The M/M/c
queue has an exact answer (Erlang's C formula), so the experiment can be checked: each
scenario runs 200 replications, and each 95 % interval should contain the analytic mean
wait.  Each replication starts with an arrival that finds the bank in its steady state -- the
number of customers inside drawn from the stationary distribution -- so a short run of 40
arrivals is already an unbiased sample, with no warm-up to cut.  The tellers are a
``virtualtime.sim.Resource``; every replication runs on its own virtual loop, seeded from
one root seed, with replication *i* of every scenario on the same stream (common random
numbers), which sharpens the paired differences printed at the end.  Pass ``--executor
processes`` (or ``dask://HOST:PORT``, ``ray``) to spread the replications; the table is the
same, bit for bit.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from virtualtime import experiment, sim

ARRIVALS_PER_MINUTE = 2.4
SERVICE_PER_MINUTE = 1.0
TELLERS = [3, 4, 5]
REPLICATIONS = 200
ARRIVALS = 40  # recorded arrivals per replication
SEED = 2024


def erlang_c(servers: int, arrival: float, service: float) -> tuple[float, float]:
    """(probability an arrival waits, its mean wait in queue) for M/M/c."""
    a = arrival / service
    rho = a / servers
    top = a**servers / math.factorial(servers) / (1 - rho)
    waits = top / (sum(a**k / math.factorial(k) for k in range(servers)) + top)
    return waits, waits / (servers * service - arrival)


def initial_customers(
    servers: int, arrival: float, service: float, rng: np.random.Generator
) -> int:
    """How many customers an arrival finds inside: a draw from the steady state.

    By PASTA an arrival sees the time-stationary distribution, so a replication that starts
    with an arrival finding this many (not with a random instant, whose next arrival finds a
    queue that has drained a little) is stationary from its first customer on.
    """
    a, rho = arrival / service, arrival / (servers * service)
    p_wait, _ = erlang_c(servers, arrival, service)
    if rng.random() < p_wait:  # all tellers busy: c plus a geometric queue
        return servers + int(rng.geometric(1 - rho)) - 1
    weights = np.array([a**k / math.factorial(k) for k in range(servers)])
    return int(rng.choice(servers, p=weights / weights.sum()))


async def bank(params: Mapping[str, Any], rng: np.random.Generator) -> dict[str, float]:
    """One replication: the mean queueing wait of the next ARRIVALS customers, in minutes."""
    tellers = params["tellers"]
    arrival, service = params["arrival"], params["service"]
    counter = sim.Resource(tellers)
    waits: list[float] = []

    async def customer(work: float, recorded: bool) -> None:
        came = sim.now()
        async with counter.request():
            if recorded:
                waits.append(sim.now() - came)
            await sim.sleep(work)

    async def arrivals() -> None:
        for i in range(ARRIVALS):
            if i:  # the first arrival is at time 0, and finds the steady-state crowd
                await sim.sleep(float(rng.exponential(1 / arrival)))
            sim.start(customer(float(rng.exponential(1 / service)), True))

    async with sim.Simulation() as env:
        for _ in range(initial_customers(tellers, arrival, service, rng)):
            sim.start(customer(float(rng.exponential(1 / service)), False))  # memoryless
        sim.start(arrivals())
        await env.run()
    return {"wait": sum(waits) / len(waits), "waited": sum(w > 0 for w in waits) / len(waits)}


def main(executor: str | None = None) -> None:
    grid = {"tellers": TELLERS, "arrival": ARRIVALS_PER_MINUTE, "service": SERVICE_PER_MINUTE}
    results = experiment.sweep(bank, grid, replications=REPLICATIONS, seed=SEED, executor=executor)
    print(f"M/M/c bank: {ARRIVALS_PER_MINUTE} arrivals a minute, service rate {SERVICE_PER_MINUTE}")
    print(f"{REPLICATIONS} replications per scenario of {ARRIVALS} arrivals each, seed {SEED}")
    print()
    print("tellers  output  mean     95% interval         Erlang C  inside")
    for row in results.summary():
        p_wait, w_q = erlang_c(row.params["tellers"], ARRIVALS_PER_MINUTE, SERVICE_PER_MINUTE)
        exact = w_q if row.output == "wait" else p_wait
        inside = "yes" if row.contains(exact) else "NO"
        print(
            f"{row.params['tellers']:>7}  {row.output:<6}  {row.mean:.4f}  "
            f"[{row.low:.4f}, {row.high:.4f}]  {exact:.4f}    {inside}"
        )
    print()
    print("paired differences against 3 tellers (common random numbers):")
    for d in results.differences(baseline=0):
        print(
            f"  {d.params['tellers']} tellers, {d.output:<6}: {d.mean:+.4f} +- {d.half_width:.4f}"
            f"{'  (significant)' if d.significant else ''}"
        )
    if len(sys.argv) > 2 and sys.argv[1] == "--plot":
        wanted = {
            "wait": [erlang_c(c, ARRIVALS_PER_MINUTE, SERVICE_PER_MINUTE)[1] for c in TELLERS],
            "waited": [erlang_c(c, ARRIVALS_PER_MINUTE, SERVICE_PER_MINUTE)[0] for c in TELLERS],
        }
        results.plot(sys.argv[2], title="M/M/c bank", reference=wanted)


if __name__ == "__main__":
    main(sys.argv[2] if len(sys.argv) > 2 and sys.argv[1] == "--executor" else None)
