"""Models for the experiment tests: cheap, seeded only through their ``rng``."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import Any

import numpy as np


async def mm1(params: Mapping[str, Any], rng: np.random.Generator) -> dict[str, float]:
    """M/M/1 in virtual time: an asyncio queue, one server; the mean wait in queue."""
    n = int(params.get("customers", 50))
    gaps = rng.exponential(1.0 / params["rate"], n).tolist()
    work = rng.exponential(1.0 / params.get("service", 1.0), n).tolist()
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[float] = asyncio.Queue()
    waits: list[float] = []

    async def arrivals() -> None:
        for gap in gaps:
            await asyncio.sleep(gap)
            queue.put_nowait(loop.time())

    async def server() -> None:
        for service in work:
            arrived = await queue.get()
            waits.append(loop.time() - arrived)
            await asyncio.sleep(service)

    await asyncio.gather(arrivals(), server())
    return {"wait": sum(waits) / n, "longest": max(waits)}


def mm1_sojourn(params: Mapping[str, Any], rng: np.random.Generator) -> dict[str, float]:
    """The time in system of one arrival to a stationary M/M/1 queue (a cheap plain function).

    The arrival finds N customers with P(N = k) = (1 - rho) rho^k (PASTA) and leaves after
    their remaining work and its own service: k + 1 exponential services (memoryless), so its
    expected time in system is 1 / (mu - lambda), exactly.
    """
    rho = params["rate"] / params["service"]
    k = int(rng.geometric(1.0 - rho)) - 1
    return {"sojourn": float(rng.gamma(k + 1, 1.0 / params["service"]))}


def noisy(params: Mapping[str, Any], rng: np.random.Generator) -> dict[str, float]:
    """Normal noise around ``mean``; a plain (sync) model."""
    return {"x": float(rng.normal(params.get("mean", 0.0), params.get("sd", 1.0)))}


def fails_on(params: Mapping[str, Any], rng: np.random.Generator) -> dict[str, float]:
    """Raises on the replications whose first draw is below ``below``."""
    u = float(rng.random())
    if u < params["below"]:
        raise RuntimeError(f"unlucky draw {u!r}")
    return {"u": u}


def busy(params: Mapping[str, Any], rng: np.random.Generator) -> dict[str, float]:
    """Burns some CPU (a real computation, no sleeping), and says which process ran it."""
    x = rng.random(int(params.get("size", 20_000)))
    total = 0.0
    for _ in range(int(params.get("rounds", 10))):
        total += float(np.sort(x).cumsum()[-1])
    return {"total": total, "pid": float(os.getpid())}


async def stationary_mm1(params: Mapping[str, Any], rng: np.random.Generator) -> dict[str, float]:
    """M/M/1 in virtual time, stationary from its first arrival; mean wait of ``arrivals``.

    The first arrival (at time 0) finds N ~ (1 - rho) rho^k customers (PASTA), so every
    arrival's expected wait in queue is rho / (mu - lambda), however short the run.
    """
    lam, mu = params["rate"], params["service"]
    rho = lam / mu
    ahead = int(rng.geometric(1.0 - rho)) - 1
    free_at = float(rng.gamma(ahead, 1.0 / mu)) if ahead else 0.0  # the backlog's work
    loop = asyncio.get_running_loop()
    waits: list[float] = []
    server = asyncio.Lock()
    backlog_done = loop.time() + free_at

    async def customer(work: float) -> None:
        came = loop.time()
        async with server:
            waits.append(loop.time() - came)
            await asyncio.sleep(work)

    async def backlog() -> None:
        async with server:
            await asyncio.sleep(backlog_done - loop.time())

    tasks = [asyncio.ensure_future(backlog())] if ahead else []
    await asyncio.sleep(0)
    for i in range(int(params.get("arrivals", 5))):
        if i:
            await asyncio.sleep(float(rng.exponential(1.0 / lam)))
        tasks.append(asyncio.ensure_future(customer(float(rng.exponential(1.0 / mu)))))
    await asyncio.gather(*tasks)
    return {"wait": sum(waits) / len(waits)}


def dies_once(params: Mapping[str, Any], rng: np.random.Generator) -> dict[str, float]:
    """Kills the process it runs in, the first time any replication runs (a marker file).

    The kill is SIGKILL, as a crashed or OOM-killed worker would get; every later run
    (the re-run included) returns normally.
    """
    import signal

    value = float(rng.normal())
    try:
        fd = os.open(params["marker"], os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return {"x": value}
    os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


async def kit_queue(params: Mapping[str, Any], rng: np.random.Generator) -> dict[str, float]:
    """Customers through one server with the simulation kit, and no ``Simulation`` opened.

    ``sim.start``, ``sim.sleep``, ``sim.now`` and a ``Resource`` need a running simulation;
    the experiment opens one per replication.
    """
    from virtualtime import sim

    server = sim.Resource(1)
    waits: list[float] = []

    async def customer(work: float) -> None:
        came = sim.now()
        async with server.request():
            waits.append(sim.now() - came)
            await sim.sleep(work)

    customers = [sim.start(customer(float(w))) for w in rng.exponential(1.0, 4)]
    await sim.all_of(*customers)
    return {"wait": sum(waits) / len(waits), "end": sim.now()}
