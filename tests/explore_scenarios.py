"""Small scenarios for the exploration tests: importable, so worker processes can load them.

``ordering_bug`` is correct only in the loop's default (FIFO) order of same-instant timers;
``clean`` is correct in every order; ``leaky`` keeps state between runs (a module-level
counter), ``real_clock`` reads a real clock, so two runs of one seed differ; ``draws`` returns
what it drew from ``random``, ``os.urandom``, ``uuid4`` and ``secrets``; ``always_fails``
fails in every order and ``deadlocks`` never ends.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import secrets
import time
import uuid
from typing import Any


async def ordering_bug() -> None:
    """A consumer that assumes the producer, due at the same instant, has already run."""
    items: list[str] = []

    async def producer() -> None:
        await asyncio.sleep(1)
        items.append("job")

    async def consumer() -> None:
        await asyncio.sleep(1)
        if not items:
            raise AssertionError("the consumer woke before the producer: nothing to take")
        items.pop()

    async def bystander(n: int) -> None:  # more same-instant timers: more deviations
        await asyncio.sleep(1)
        await asyncio.sleep(n / 10)

    await asyncio.gather(producer(), *(bystander(n) for n in range(6)), consumer())


async def clean() -> int:
    """Same-instant tasks that do not depend on each other's order."""
    total = 0

    async def add(n: int) -> None:
        nonlocal total
        await asyncio.sleep(1)
        total += n

    await asyncio.gather(*(add(n) for n in range(5)))
    return total


_RUNS = itertools.count()


async def leaky() -> None:
    """Sleeps for longer on every other run: a counter that outlives the run."""
    await asyncio.sleep(1 + next(_RUNS) % 2)


async def real_clock() -> None:
    """Sleeps for a duration read from the real clock.

    The reading's nanoseconds within its second: two runs read the same only if they are a
    whole number of seconds apart (``% 1000`` of them, as before, matched once in a thousand).
    """
    await asyncio.sleep(1 + time.perf_counter_ns() % 10**9 / 10**9)


async def draws() -> tuple[Any, ...]:
    """What the run drew from each source of entropy."""
    await asyncio.sleep(0.5)
    return (
        [random.random() for _ in range(3)],
        random.randint(0, 10**9),
        os.urandom(4),
        uuid.uuid4(),
        secrets.token_hex(4),
    )


async def always_fails() -> None:
    """Fails in every order, the unseeded one included."""
    await asyncio.gather(asyncio.sleep(1), asyncio.sleep(1))
    raise RuntimeError("always")


async def deadlocks() -> None:
    """Waits for an event nobody sets."""
    await asyncio.sleep(1)
    await asyncio.Event().wait()
