"""A simulated service and a real redis-server, one client library, one run.

Covers: virtualtime.net -- redis-py (``redis.asyncio``) unmodified against a small
redis-protocol service on a simulated host, and the same library against a real
``redis-server`` on 127.0.0.1 in the same run (outside work: real time, which the virtual
clock waits for); a partition of the simulated host and a client timeout at its exact instant.

Scenario: an app on host "app" keeps page views in a cache on host "cache" (a simulated
service: you can cut it off) and its sessions in a real redis-server.  It counts a view every
second for a minute.  From t=20 s to t=30 s the cache is cut off: each count times out after
0.5 s and the app writes the missed views to the real redis, to replay later.  The cache ends
with 51 views, not 50: the first count that timed out had already left the app, waited in the
cut link, and was counted when the link healed -- the duplicate a retry-and-record scheme
must expect.  Needs
``redis-server`` on the PATH (``apt install redis-server``) and redis-py (the test extra).
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import sys
from typing import Any

import redis.asyncio as redis

from virtualtime import net


class TinyRedis:
    """Enough of redis's protocol (RESP2) for the app: INCR, GET, and the client's hello."""

    def __init__(self) -> None:
        self.data: dict[bytes, int] = {}

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                count = int(line[1:])
                args = []
                for _ in range(count):
                    size = int((await reader.readline())[1:])
                    args.append((await reader.readexactly(size + 2))[:-2])
                writer.write(self.answer(args))
        finally:
            writer.close()

    def answer(self, args: list[bytes]) -> bytes:
        command = args[0].upper()
        if command == b"INCRBY":
            value = self.data[args[1]] = self.data.get(args[1], 0) + int(args[2])
            return b":%d\r\n" % value
        if command == b"GET":
            found = self.data.get(args[1])
            return b"$-1\r\n" if found is None else b"$%d\r\n%d\r\n" % (len(str(found)), found)
        if command == b"CLIENT":
            return b"+OK\r\n"
        return b"-ERR unknown command\r\n"


async def serve_cache() -> None:
    server = await asyncio.start_server(TinyRedis().handle, None, 6379)
    await server.serve_forever()


# --8<-- [start:app]
async def app(real_port: int) -> None:
    loop = asyncio.get_running_loop()
    cache = redis.Redis(host="cache", port=6379, socket_timeout=0.5)
    # The real redis-server (typed Any: redis-py's list commands are typed for its sync client too).
    sessions: Any = redis.Redis(host="127.0.0.1", port=real_port)
    await sessions.delete("missed")
    try:
        for second in range(60):
            await asyncio.sleep(max(0.0, second - loop.time()))
            try:
                await cache.incr("views")
            except redis.TimeoutError:
                missed = await sessions.rpush("missed", second)
                print(
                    f"t={loop.time():6.3f}  cache timed out; missed views kept in redis: {missed}"
                )
        views = await cache.get("views")
        missed = await sessions.lrange("missed", 0, -1)
        print(f"t={loop.time():6.3f}  cache counted {int(views or 0)} views")
        first = missed[0].decode()
        print(f"t={loop.time():6.3f}  real redis kept {len(missed)} missed, from t={first}")
    finally:
        await cache.aclose()
        await sessions.aclose()


# --8<-- [end:app]
async def main(real_port: int) -> None:
    world = net.Network(latency=0.001)
    world.host("cache").run(serve_cache())
    loop = asyncio.get_running_loop()
    loop.call_at(20, world.partition, "app", "cache")
    loop.call_at(30, world.heal, "app", "cache")
    async with world.host("app"):
        await app(real_port)
    await asyncio.sleep(1)  # the app's connections close before the run ends


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


if __name__ == "__main__":
    if shutil.which("redis-server") is None:
        sys.exit("this example needs redis-server on the PATH (apt install redis-server)")
    port = free_port()
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    real = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert real.stdout is not None
        for line in real.stdout:  # its log says when it accepts connections
            if "Ready to accept connections" in line:
                break
        real.stdout.close()
        asyncio.run(main(port))
    finally:
        real.terminate()
        real.wait()
