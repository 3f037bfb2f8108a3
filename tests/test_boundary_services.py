"""Real services that sit idle most of the time: an idle outside world costs no real time.

A broker that takes a fire-and-forget message and never answers it (an MQTT QoS 0 publish to
a real mosquitto), and a job queue's worker polling a real redis-server: what the kernel says
of them -- asleep, nothing in flight, nothing owed -- lets virtual time move at once, while
every answer they do owe still arrives before any timeout.  Both services come from Debian's
packages (``.ci/run`` installs them with apt).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterator
from typing import Any

import _peers_helpers as peers
import pytest

import virtualtime


@pytest.fixture(scope="module")
def mosquitto() -> Iterator[int]:
    with peers.service_or_skip(peers.mosquitto()) as port:
        yield port


@pytest.fixture(scope="module")
def redis() -> Iterator[int]:
    with peers.service_or_skip(peers.redis_server()) as port:
        yield port


def test_an_mqtt_qos0_publish_then_two_virtual_minutes_costs_no_real_time(mosquitto: int) -> None:
    # Raw MQTT 3.1.1 against the real broker: CONNECT with a 60 s keep-alive, a QoS 0 PUBLISH
    # (never answered: the broker owes nothing), then a PINGREQ at each keep-alive, which it
    # does answer -- before a 5 s timeout, every time.
    async def main() -> tuple[list[bytes], float]:
        reader, writer = await asyncio.open_connection("127.0.0.1", mosquitto)
        writer.write(bytes([0x10, 13, 0, 4]) + b"MQTT" + bytes([4, 2, 0, 60, 0, 1]) + b"q")
        await writer.drain()
        async with asyncio.timeout(5):
            answers = [await reader.readexactly(4)]  # CONNACK
        writer.write(bytes([0x30, 10, 0, 3]) + b"a/bhello")
        await writer.drain()
        for _ in range(2):
            await asyncio.sleep(60)
            writer.write(bytes([0xC0, 0]))
            await writer.drain()
            async with asyncio.timeout(5):
                answers.append(await reader.readexactly(2))  # PINGRESP
        writer.close()
        await writer.wait_closed()
        return answers, asyncio.get_running_loop().time()

    start = time.perf_counter()  # real-time: the cost of two idle virtual minutes
    answers, virtual = virtualtime.run(main())
    real = time.perf_counter() - start
    assert answers == [bytes([0x20, 2, 0, 0]), bytes([0xD0, 0]), bytes([0xD0, 0])]
    assert virtual == 120.0
    assert real <= 1.0


async def double(ctx: dict[str, Any], x: int) -> int:
    """The arq job (arq finds a job's function by its qualified name)."""
    return 2 * x


# arq 0.26's Worker.close() calls redis-py's deprecated close() (arq's, not ours to fix).
@pytest.mark.filterwarnings("ignore:Call to deprecated close:DeprecationWarning")
def test_an_arq_worker_on_real_redis_idles_at_under_ten_real_seconds_a_virtual_hour(
    redis: int,
) -> None:
    from arq.connections import RedisSettings, create_pool
    from arq.worker import Worker

    async def main() -> tuple[int, float, float]:
        loop = asyncio.get_running_loop()
        real = math.inf
        settings = RedisSettings(port=redis)
        pool = await create_pool(settings)
        worker = Worker(functions=[double], redis_settings=settings, handle_signals=False)
        running = asyncio.create_task(worker.async_run())
        try:
            job = await pool.enqueue_job("double", 21)
            assert job is not None
            answer = await job.result(timeout=10)
            answered_at = loop.time()
            start = time.perf_counter()  # real-time: the cost of ten idle virtual minutes
            await asyncio.sleep(600)  # the worker polls redis every 0.5 s meanwhile
            real = time.perf_counter() - start
        finally:
            await worker.close()
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
            await pool.aclose()
        return answer, answered_at, real

    answer, answered_at, real = virtualtime.run(main())
    assert answer == 42
    assert answered_at <= 1.0  # picked up at the worker's first poll
    assert real <= 10 * 600 / 3600  # the budget: 10 real seconds per virtual hour
