"""Statistics: hand-computed values on small scenarios, queueing theory on long runs.

The long runs are M/M/1 and M/M/c with a fixed seed; the kit's utilisation and mean wait
must fall inside 99 % batch-means confidence intervals around the theoretical values
(utilisation rho, and Erlang C's mean wait in queue), after deleting a warm-up.
"""

from __future__ import annotations

import math
import random
import statistics
from typing import Any

import pytest

from virtualtime import sim


@pytest.fixture(params=["asyncio", "trio"])
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


# --------------------------------------------------------------------------- by hand


def test_time_series_and_tally_by_hand() -> None:
    clock = [0.0]
    series = sim.TimeSeries(lambda: clock[0])
    for t, value in ((1.0, 2.0), (3.0, 1.0), (3.0, 4.0), (6.0, 0.0)):
        clock[0] = t
        series.record(value)
    clock[0] = 10.0
    # 0 on [0,1), 2 on [1,3), 4 on [3,6) (1 held for no time), 0 on [6,10]
    assert series.mean() == pytest.approx((0 * 1 + 2 * 2 + 4 * 3 + 0 * 4) / 10)
    assert series.mean(start=2, end=5) == pytest.approx((2 * 1 + 4 * 2) / 3)
    assert series.maximum() == 4.0
    assert series.minimum(start=1, end=6) == 2.0
    assert series.value_at(3.0) == 4.0
    assert math.isnan(series.mean(start=10, end=10))
    with pytest.raises(ValueError, match="before start"):
        series.mean(start=5, end=4)

    tally = sim.Tally()
    for t, value in ((1.0, 4.0), (2.0, 6.0), (5.0, 11.0)):
        tally.add(t, value)
    assert tally.summary() == sim.Summary(3, 7.0, statistics.stdev([4, 6, 11]), 4.0, 11.0)
    assert tally.mean(start=2) == 8.5
    assert tally.count(end=2) == 2
    assert tally.summary(start=9).count == 0
    for bad_t, bad_value in ((math.nan, 1.0), (6.0, math.inf), (6.0, "7"), (True, 1.0)):
        with pytest.raises((ValueError, TypeError), match="finite real number"):
            tally.add(bad_t, bad_value)  # type: ignore[arg-type]
    assert tally.count() == 3  # refused values left nothing behind


def test_resource_statistics_by_hand(backend: str) -> None:
    async def customer(counter: sim.Resource, arrive: float, service: float) -> None:
        await sim.sleep(arrive)
        async with counter.request():
            await sim.sleep(service)

    async def impatient(counter: sim.Resource) -> None:
        await sim.sleep(1.5)
        with counter.request() as req:
            await sim.first_of(req, sim.sleep(0.25))

    async def main() -> sim.Resource:
        counter = sim.Resource(1)
        sim.start(customer(counter, 0, 2))
        sim.start(customer(counter, 1, 1))
        sim.start(impatient(counter))
        await sim.sleep(4)
        return counter

    counter = sim.simulate(main, backend=backend)
    assert counter is not None
    stats = counter.stats
    # busy on [0, 3] of [0, 4]; waiting: 1 on [1, 1.5), 2 on [1.5, 1.75), 1 on [1.75, 2)
    assert stats.utilisation() == pytest.approx(3 / 4)
    assert stats.mean_queue_length() == pytest.approx((0.5 + 2 * 0.25 + 0.25) / 4)
    assert stats.served() == 2
    assert stats.renege_count() == 1
    assert stats.reneged.values() == [pytest.approx(0.25)]
    assert stats.waits.values() == [0.0, 1.0]
    assert stats.mean_wait() == 0.5
    # a window after the warm-up: from t=2 on
    assert stats.mean_wait(start=2) == 1.0
    assert stats.utilisation(start=2) == pytest.approx(1 / 2)
    assert stats.served(start=2) == 1
    assert stats.queue_length.maximum() == 2


def test_container_and_store_statistics_by_hand(backend: str) -> None:
    async def main() -> tuple[sim.Container, sim.Store]:
        tank = sim.Container(10, init=4)
        store = sim.Store()

        async def late_get() -> None:
            await tank.get(6)  # waits from 1 until the put at 3

        await sim.sleep(1)
        sim.start(late_get())
        await store.put("a")
        await sim.sleep(2)
        await tank.put(6)  # level 10, then 4 once the get is served
        await sim.sleep(2)
        await store.get()
        await sim.sleep(1)
        return tank, store

    result = sim.simulate(main, backend=backend)
    assert result is not None
    tank, store = result
    # level 4 on [0, 3] (the put and the get at 3 net out), 4 on [3, 6]
    assert tank.stats.mean_level() == pytest.approx(4.0)
    assert tank.stats.get_waits.values() == [2.0]
    assert tank.stats.put_waits.values() == [0.0]
    # one item on [1, 5] of [0, 6]
    assert store.stats.mean_level() == pytest.approx(4 / 6)


# --------------------------------------------------------------------------- theory


def _mmc(
    backend: str, servers: int, arrival: float, service: float, customers: int, seed: int
) -> sim.Resource:
    rng = random.Random(seed)

    async def customer(counter: sim.Resource, duration: float) -> None:
        async with counter.request():
            await sim.sleep(duration)

    async def source() -> sim.Resource:
        counter = sim.Resource(servers)
        for _ in range(customers):
            sim.start(customer(counter, rng.expovariate(service)))
            await sim.sleep(rng.expovariate(arrival))
        return counter

    counter = sim.simulate(source, backend=backend)
    assert counter is not None
    return counter


def _erlang_c_wait(servers: int, arrival: float, service: float) -> float:
    """Mean wait in queue of M/M/c (Erlang C)."""
    a = arrival / service
    rho = a / servers
    head = a**servers / math.factorial(servers) / (1 - rho)
    c = head / (sum(a**k / math.factorial(k) for k in range(servers)) + head)
    return c / (servers * service - arrival)


def _batch_interval(values: list[float], batches: int = 30) -> tuple[float, float]:
    """99 % confidence interval of the mean by batch means (normal quantile)."""
    size = len(values) // batches
    means = [statistics.fmean(values[k * size : (k + 1) * size]) for k in range(batches)]
    centre = statistics.fmean(means)
    half = 2.576 * statistics.stdev(means) / math.sqrt(batches)
    return centre - half, centre + half


def _time_batches(
    series: sim.TimeSeries, start: float, end: float, batches: int = 30
) -> tuple[float, float]:
    width = (end - start) / batches
    means = [series.mean(start + k * width, start + (k + 1) * width) for k in range(batches)]
    centre = statistics.fmean(means)
    half = 2.576 * statistics.stdev(means) / math.sqrt(batches)
    return centre - half, centre + half


@pytest.mark.parametrize(("servers", "arrival"), [(1, 0.7), (3, 2.4)], ids=["M/M/1", "M/M/3"])
def test_long_runs_agree_with_queueing_theory(backend: str, servers: int, arrival: float) -> None:
    customers = 20_000 if backend == "asyncio" else 5_000
    counter = _mmc(backend, servers, arrival, 1.0, customers, seed=11)
    stats = counter.stats
    end = stats.users.now
    warmup = end * 0.1
    rho = arrival / servers
    low, high = _time_batches(stats.users, warmup, end)
    assert low / servers <= rho <= high / servers
    waits = stats.waits.values(start=warmup)
    expected_wait = _erlang_c_wait(servers, arrival, 1.0)
    low, high = _batch_interval(waits)
    assert low <= expected_wait <= high
    # the whole-run figures are close too, and the warm-up window really is a window
    assert stats.utilisation(start=warmup) == pytest.approx(rho, rel=0.05)
    assert stats.served(start=warmup) < stats.served() == customers


def test_windows_see_only_their_part_of_the_run(backend: str) -> None:
    async def main() -> sim.Resource:
        counter = sim.Resource(1)
        await sim.sleep(10)  # idle warm-up
        for _ in range(2):
            async with counter.request():
                await sim.sleep(5)
        return counter

    counter: Any = sim.simulate(main, backend=backend)
    assert counter.stats.utilisation() == pytest.approx(10 / 20)
    assert counter.stats.utilisation(start=10) == 1.0
    assert counter.stats.utilisation(end=10) == 0.0
