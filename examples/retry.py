"""Covers: a plain asyncio service run unmodified under ``virtualtime run`` -- retries with
exponential backoff and jitter, ``asyncio.timeout`` around every call, a token-bucket rate
limiter (``asyncio.Lock``), ``asyncio.TaskGroup`` and ``asyncio.run``.

Scenario: three workers sync orders from a flaky warehouse API for 24 hours; on every whole
minute each worker fetches 3 orders.  A call usually takes 0.2 to 1.5 s, one in twenty hangs
until the 5 s timeout cuts it off, one in ten fails with a 503, and from 02:00 to 02:20 and
14:00 to 14:05 the API is down.  A failed call is retried, 6 attempts in all, with exponential
backoff (2, 4, 8, 16, 32 s, capped at 60 s, +-20 % jitter); all calls share a token bucket of
2 calls per second (burst 4).  Each hour the service prints a report, and it notes when the
upstream goes down and comes back.

Run it with ``virtualtime run examples/retry.py``: the whole day takes a fraction of a second
and prints ``examples/retry.out`` exactly, every time.  Plain ``python examples/retry.py
--hours 0.05`` runs three real minutes of the same service (real time, so the numbers vary).
Add ``--trace retry.json`` before the script and ``virtualtime plot retry.json`` to see it.
"""

from __future__ import annotations

import argparse
import asyncio
import random
from dataclasses import dataclass, fields

WORKERS = 3
ORDERS_PER_MINUTE = 3
CALL_TIMEOUT = 5.0
MAX_ATTEMPTS = 6
BACKOFF_BASE = 2.0
BACKOFF_CAP = 60.0
RATE = 2.0  # calls per second
BURST = 4
OUTAGES = [(2 * 3600, 2 * 3600 + 20 * 60), (14 * 3600, 14 * 3600 + 5 * 60)]


def clock(seconds: float) -> str:
    """HH:MM:SS since the service started."""
    whole = int(seconds)
    return f"{whole // 3600:02d}:{whole // 60 % 60:02d}:{whole % 60:02d}"


class ServiceUnavailable(Exception):
    """The warehouse answered 503."""


class GaveUp(Exception):
    """Every attempt failed; ``last`` says how the last one did."""

    def __init__(self, order: int, last: str) -> None:
        super().__init__(f"order {order}: {MAX_ATTEMPTS} attempts failed, the last by {last}")
        self.last = last


@dataclass
class Stats:
    calls: int = 0
    ok: int = 0
    errors: int = 0
    timeouts: int = 0
    retries: int = 0
    gave_up: int = 0
    throttled: int = 0
    throttled_for: float = 0.0


class WarehouseAPI:
    """A stand-in for the real HTTP client: slow, flaky, sometimes down."""

    def __init__(self, rng: random.Random, started: float) -> None:
        self.rng = rng
        self.started = started

    async def fetch(self, order: int) -> dict[str, int]:
        now = asyncio.get_running_loop().time() - self.started
        if any(start <= now < end for start, end in OUTAGES):
            await asyncio.sleep(0.05)
            raise ServiceUnavailable("503 Service Unavailable")
        roll = self.rng.random()
        if roll < 0.05:
            await asyncio.sleep(3600)  # hangs; the caller's timeout cuts it off
        await asyncio.sleep(self.rng.uniform(0.2, 1.5))
        if roll < 0.15:
            raise ServiceUnavailable("503 Service Unavailable")
        return {"order": order, "items": 1 + order % 4}


class TokenBucket:
    """At most ``rate`` calls per second on average, ``burst`` at once."""

    def __init__(self, rate: float, burst: int, stats: Stats) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = float(burst)
        self.updated = asyncio.get_running_loop().time()
        self.lock = asyncio.Lock()
        self.stats = stats

    async def acquire(self) -> None:
        async with self.lock:
            loop = asyncio.get_running_loop()
            now = loop.time()
            self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
            self.updated = now
            if self.tokens < 1:
                wait = (1 - self.tokens) / self.rate
                self.stats.throttled += 1
                self.stats.throttled_for += wait
                await asyncio.sleep(wait)
                self.tokens, self.updated = 1.0, loop.time()
            self.tokens -= 1


class Health:
    """Logs orders that gave up, and notices when the upstream is down and comes back."""

    DOWN_AFTER = 3  # give-ups in a row

    def __init__(self, started: float) -> None:
        self.started = started
        self.failures = 0
        self.down_since: float | None = None

    def now(self) -> str:
        return clock(asyncio.get_running_loop().time() - self.started)

    def gave_up(self, worker: str, order: int, last: str) -> None:
        self.failures += 1
        if self.down_since is not None:
            return
        if self.failures < self.DOWN_AFTER:
            print(
                f"{self.now()}  {worker}: order {order} gave up after {MAX_ATTEMPTS} "
                f"attempts (last: {last})"
            )
            return
        self.down_since = asyncio.get_running_loop().time()
        print(
            f"{self.now()}  {worker}: {self.failures} orders in a row gave up: upstream looks down"
        )

    def succeeded(self, worker: str) -> None:
        self.failures = 0
        if self.down_since is not None:
            down = asyncio.get_running_loop().time() - self.down_since
            print(f"{self.now()}  {worker}: upstream is back after {clock(down)}")
            self.down_since = None


async def fetch_with_retries(
    api: WarehouseAPI, limiter: TokenBucket, order: int, stats: Stats, rng: random.Random
) -> dict[str, int]:
    last = ""
    for attempt in range(1, MAX_ATTEMPTS + 1):
        await limiter.acquire()
        stats.calls += 1
        try:
            async with asyncio.timeout(CALL_TIMEOUT):
                result = await api.fetch(order)
        except TimeoutError:
            stats.timeouts += 1
            last = "timeout"
        except ServiceUnavailable:
            stats.errors += 1
            last = "503"
        else:
            stats.ok += 1
            return result
        if attempt == MAX_ATTEMPTS:
            break
        stats.retries += 1
        backoff = min(BACKOFF_CAP, BACKOFF_BASE * 2 ** (attempt - 1))
        await asyncio.sleep(backoff * rng.uniform(0.8, 1.2))
    stats.gave_up += 1
    raise GaveUp(order, last)


async def worker(
    name: str,
    first_order: int,
    api: WarehouseAPI,
    limiter: TokenBucket,
    health: Health,
    stats: Stats,
    rng: random.Random,
) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    order = first_order
    while True:
        for _ in range(ORDERS_PER_MINUTE):
            order += WORKERS
            try:
                await fetch_with_retries(api, limiter, order, stats, rng)
            except GaveUp as error:
                health.gave_up(name, order, error.last)
            else:
                health.succeeded(name)
        # Like a cron job: the next batch starts on the next whole minute.
        minute = int((loop.time() - started) // 60) + 1
        await asyncio.sleep(started + 60 * minute - loop.time())


async def reporter(started: float, hours: float, stats: Stats) -> None:
    """Print a report every hour (and at the end), then return: the day is over."""
    end = hours * 3600
    marks = [3600.0 * h for h in range(1, int(hours) + 1)]
    if not marks or marks[-1] < end:
        marks.append(end)
    previous = Stats()
    for mark in marks:
        await asyncio.sleep(started + mark - asyncio.get_running_loop().time())
        now = Stats(**{f.name: getattr(stats, f.name) for f in fields(Stats)})
        d = {f.name: getattr(now, f.name) - getattr(previous, f.name) for f in fields(Stats)}
        previous = now
        print(
            f"{clock(mark)}  calls {d['calls']:4d}  ok {d['ok']:4d}  "
            f"503s {d['errors']:3d}  timeouts {d['timeouts']:3d}  retries {d['retries']:3d}  "
            f"gave up {d['gave_up']:3d}  throttled {d['throttled']:3d} "
            f"({d['throttled_for']:5.1f} s)"
        )


async def main(hours: float) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    rng = random.Random(2024)
    stats = Stats()
    api = WarehouseAPI(rng, started)
    limiter = TokenBucket(RATE, BURST, stats)
    health = Health(started)
    print(
        f"order sync: {WORKERS} workers x {ORDERS_PER_MINUTE} orders/min for {hours:g} h, "
        f"timeout {CALL_TIMEOUT:g} s, up to {MAX_ATTEMPTS} attempts, {RATE:g} calls/s"
    )
    async with asyncio.TaskGroup() as tg:
        workers = [
            tg.create_task(
                worker(f"worker-{i + 1}", i, api, limiter, health, stats, rng),
                name=f"worker-{i + 1}",
            )
            for i in range(WORKERS)
        ]
        await reporter(started, hours, stats)
        for task in workers:
            task.cancel()
    print(
        f"day done at {clock(loop.time() - started)}: {stats.calls} calls, {stats.ok} orders "
        f"synced, {stats.retries} retries, {stats.gave_up} gave up, "
        f"{stats.throttled_for / 60:.1f} min spent waiting for the rate limiter"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="A day of an order-sync service that retries.")
    parser.add_argument("--hours", type=float, default=24.0, help="how long to run (24)")
    asyncio.run(main(parser.parse_args().hours))
