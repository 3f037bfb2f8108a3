"""A client with retries and a circuit breaker, against a server across a flaky link.

Covers: virtualtime.net -- two simulated hosts, asyncio streams between them unmodified,
a partition and its heal, a latency spike on the link, a crash and a restart of the server,
all at exact virtual instants.

Scenario: host "web" asks host "api" for a quote once a second for two minutes.  Each try has
a 300 ms timeout and up to three tries with doubling backoff; five failed requests in a row
open a circuit breaker, which fails fast for 10 s and then lets one request probe the server.
The link is 20 ms each way, cut from t=20 s to t=35 s, slowed to 400 ms each way from
t=60 s to t=70 s, and the server crashes at t=90 s and comes back at t=100 s.  The log shows
what the client saw and when; the run takes milliseconds, and every run prints the same log.
"""

from __future__ import annotations

import asyncio

from virtualtime import net

TIMEOUT = 0.3
TRIES = 3
BREAK_AFTER = 5
OPEN_FOR = 10.0


async def quote_server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while line := await reader.readline():
            writer.write(b"42.0 " + line)
    finally:
        writer.close()


async def serve() -> None:
    server = await asyncio.start_server(quote_server, None, 8000)
    await server.serve_forever()


class Breaker:
    """Opens after BREAK_AFTER failures in a row; half-open after OPEN_FOR seconds."""

    def __init__(self) -> None:
        self.failures = 0
        self.open_until = 0.0

    def allows(self, now: float) -> bool:
        return now >= self.open_until

    def record(self, ok: bool, now: float) -> str | None:
        if ok:
            was_open = self.failures >= BREAK_AFTER
            self.failures = 0
            return "breaker closed" if was_open else None
        self.failures += 1
        if self.failures >= BREAK_AFTER:
            self.open_until = now + OPEN_FOR
            return f"breaker open until t={self.open_until:g}"
        return None


async def ask(n: int) -> str:
    """One request on a fresh connection, with retries and backoff."""
    delay = 0.1
    for attempt in range(1, TRIES + 1):
        try:
            async with asyncio.timeout(TIMEOUT):
                reader, writer = await asyncio.open_connection("api", 8000)
                try:
                    writer.write(b"%d\n" % n)
                    return (await reader.readline()).decode().split()[0]
                finally:
                    writer.close()
        except (TimeoutError, OSError) as exc:
            if attempt == TRIES:
                raise ConnectionError(f"{TRIES} tries failed ({type(exc).__name__})") from exc
            await asyncio.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")


async def client(log: list[str]) -> None:
    loop = asyncio.get_running_loop()
    breaker = Breaker()
    state = ""
    for n in range(120):
        await asyncio.sleep(max(0.0, n - loop.time()))
        now = loop.time()
        note = None
        if not breaker.allows(now):
            outcome = "fail fast"
        else:
            try:
                price = await ask(n)
                outcome = f"ok {price} in {loop.time() - now:.2f} s"
                note = breaker.record(True, loop.time())
            except ConnectionError as exc:
                outcome = f"error: {exc}"
                note = breaker.record(False, loop.time())
        kind = outcome.split(" in ")[0]
        if kind != state:  # log changes only
            log.append(f"t={now:7.3f}  request {n:3d}: {outcome}")
            state = kind
        if note:
            log.append(f"t={loop.time():7.3f}  {note}")


async def main() -> None:
    world = net.Network(latency=0.020)
    web, api = world.host("web"), world.host("api")
    loop = asyncio.get_running_loop()
    api.run(serve())
    loop.call_at(20, world.partition, web, api)
    loop.call_at(35, world.heal, web, api)
    loop.call_at(60, lambda: world.link(web, api, latency=0.4))
    loop.call_at(70, lambda: world.link(web, api, latency=0.02))
    loop.call_at(90, api.crash)
    loop.call_at(100, api.restart, serve())
    log: list[str] = []
    async with web:
        await client(log)
    await asyncio.sleep(1)  # the last connection's close reaches the server
    print("\n".join(log))


if __name__ == "__main__":
    asyncio.run(main())
