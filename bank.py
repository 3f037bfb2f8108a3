import asyncio


async def bank(params, rng):
    """M/M/1: customers arrive at `rate` and one teller serves each in an exponential minute."""
    n = params["customers"]
    gaps = rng.exponential(1 / params["rate"], n)
    work = rng.exponential(1.0, n)
    loop = asyncio.get_running_loop()
    line, waits = asyncio.Queue(), []

    async def arrivals():
        for gap in gaps:
            await asyncio.sleep(gap)
            line.put_nowait(loop.time())

    async def teller():
        for minutes in work:
            arrived = await line.get()
            waits.append(loop.time() - arrived)
            await asyncio.sleep(minutes)

    await asyncio.gather(arrivals(), teller())
    return {"wait": sum(waits) / n, "longest": max(waits)}
