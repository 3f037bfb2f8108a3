"""Real client libraries, unmodified, between simulated hosts of :mod:`virtualtime.net`.

aiohttp (server and client, HTTP and HTTPS, and a three-host chain), httpx on asyncio,
websockets, redis-py and asyncpg run here exactly as they would against real machines; the
only difference is that the host names they are given (``srv``, ``cache``, ``pg`` ...) are
hosts of a :class:`~virtualtime.net.Network` with 5 ms links.  Every time asserted is exact
and follows from the link latency ``L``: a TCP connect is one round trip (``2 * L``), a
TLS 1.3 handshake one more, and each request/answer exchange one more.

Two of the servers are stubs written here, speaking the real wire protocols: a small
in-memory redis server (RESP2: PING, SET, GET, INCR/INCRBY, DEL, EXPIRE, TTL and the
CLIENT SETINFO redis-py sends on connect), and a PostgreSQL *stub* (the issue allows a stub
or a real PostgreSQL; this is the stub) that answers asyncpg's SSLRequest, upgrades the
connection to TLS with ``StreamWriter.start_tls``, authenticates it, and answers
``SELECT 1`` through the extended query protocol.  The redis tests also run the same
redis-py client against the stub on a simulated host *and* a real ``redis-server`` on
127.0.0.1, in one run (Debian's package; CI installs it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import ssl
import struct
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import _peers_helpers as peers
import aiohttp
import asyncpg  # type: ignore[import-untyped]  # asyncpg ships no type hints
import httpx
import pytest
import redis
import redis.asyncio as aioredis
import trustme
from aiohttp import web
from websockets.asyncio.client import connect as ws_connect
from websockets.asyncio.server import ServerConnection
from websockets.asyncio.server import serve as ws_serve

import virtualtime
from virtualtime import net

T = TypeVar("T")
L = 0.005  # every link's latency, one way: a round trip is 0.01 s


def run(main: Callable[[], Awaitable[T]]) -> T:
    async def wrapper() -> T:
        return await main()

    return virtualtime.run(wrapper())


def now() -> float:
    """The loop's time, to the nanosecond tick (so that sums of latencies compare exactly)."""
    return round(asyncio.get_running_loop().time(), 9)


async def timed(awaitable: Awaitable[T]) -> tuple[float, T]:
    """The instant ``awaitable`` finished, and its result."""
    result = await awaitable
    return now(), result


def rounds(first: float, count: int, step: float = 2 * L) -> list[float]:
    """``count`` instants, ``first`` then one every ``step`` seconds."""
    return [round(first + i * step, 9) for i in range(count)]


@dataclasses.dataclass(frozen=True)
class Certs:
    server: ssl.SSLContext  # a certificate for every host name used here
    client: ssl.SSLContext  # trusts the CA that issued it


@pytest.fixture(scope="module")
def certs() -> Certs:
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("srv", "pg").configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return Certs(server, client)


# ----------------------------------------------------------------------------- aiohttp


async def start_app(
    app: web.Application, port: int, tls: ssl.SSLContext | None = None, **options: Any
) -> web.AppRunner:
    """Serve ``app`` on the calling host's ``port``; returns the runner (clean it up)."""
    runner = web.AppRunner(app, access_log=None, **options)
    await runner.setup()
    await web.TCPSite(runner, None, port, ssl_context=tls).start()
    return runner


def hello_app() -> web.Application:
    """``GET /?i=N`` answers ``<scheme>: hello N to <the client's address:port>``."""

    async def hello(request: web.Request) -> web.Response:
        address, port = request.transport.get_extra_info("peername")  # type: ignore[union-attr]
        text = f"{request.scheme}: hello {request.query['i']} to {address}:{port}"
        return web.Response(text=text)

    app = web.Application()
    app.router.add_get("/", hello)
    return app


async def hundred_requests(
    url: str, server_tls: ssl.SSLContext | None = None, client_tls: ssl.SSLContext | None = None
) -> tuple[list[float], list[str]]:
    """100 sequential GETs from host ``cli`` to an aiohttp app on host ``srv``, on one
    keep-alive connection: the instant each body arrived, and the bodies."""
    world = net.Network(latency=L)
    srv, cli = world.host("srv"), world.host("cli")
    runner = await srv.run(start_app(hello_app(), 8080, server_tls))
    times: list[float] = []
    bodies: list[str] = []
    try:
        async with cli:
            connector = aiohttp.TCPConnector(ssl=client_tls or False)
            async with aiohttp.ClientSession(connector=connector) as session:
                for i in range(100):
                    async with session.get(f"{url}/?i={i}") as response:
                        bodies.append(await response.text())
                        times.append(now())
    finally:
        await srv.run(runner.cleanup())
    return times, bodies


def test_aiohttp_server_and_client_on_two_hosts_100_requests() -> None:
    times, bodies = run(lambda: hundred_requests("http://srv:8080"))
    # The connect takes one round trip (0.01), then each request one more: the first body
    # arrives at 0.02, the others one round trip apart, on the same connection (the client's
    # port is the same each time: 10.0.0.2 is cli, 49152 the first ephemeral port).
    assert times == rounds(0.02, 100)
    assert bodies == [f"http: hello {i} to 10.0.0.2:49152" for i in range(100)]


def test_aiohttp_over_https_adds_one_round_trip_for_tls13(certs: Certs) -> None:
    times, bodies = run(lambda: hundred_requests("https://srv:8080", certs.server, certs.client))
    # The connect (0.01), then the TLS 1.3 handshake (one more round trip: ClientHello out,
    # the server's flight back); the first request leaves with the client's Finished, so its
    # answer is at 0.03, and every later one a round trip after the one before.
    assert times == rounds(0.03, 100)
    assert bodies == [f"https: hello {i} to 10.0.0.2:49152" for i in range(100)]


def test_aiohttp_three_hosts_client_api_db() -> None:
    async def main() -> tuple[list[tuple[float, str]], list[tuple[float, str]]]:
        world = net.Network(latency=L)
        db, api, client = world.host("db"), world.host("api"), world.host("client")
        seen_by_db: list[tuple[float, str]] = []

        async def row(request: web.Request) -> web.Response:
            seen_by_db.append((now(), request.match_info["id"]))
            return web.json_response({"id": int(request.match_info["id"]), "host": "db"})

        db_app = web.Application()
        db_app.router.add_get("/rows/{id}", row)
        db_runner = await db.run(start_app(db_app, 5000))

        api_app = web.Application()
        # api's pool of keep-alive connections to db: they leave from api, where the
        # handlers that use them run.
        to_db = aiohttp.ClientSession()

        async def item(request: web.Request) -> web.Response:
            async with to_db.get(f"http://db:5000/rows/{request.match_info['id']}") as r:
                found = await r.json()
            return web.Response(text=f"item {found['id']} via api from {found['host']}")

        api_app.router.add_get("/items/{id}", item)
        api_runner = await api.run(start_app(api_app, 8080))
        got: list[tuple[float, str]] = []
        try:
            async with client, aiohttp.ClientSession() as session:
                for i in range(10):
                    async with session.get(f"http://api:8080/items/{i}") as response:
                        got.append(await timed(response.text()))
        finally:
            await to_db.close()
            await api.run(api_runner.cleanup())
            await db.run(db_runner.cleanup())
        return got, seen_by_db

    got, seen_by_db = run(main)
    # Request 0: client->api connect (0.01), the request reaches api at 0.015; api->db
    # connect (0.025), the request reaches db at 0.03, its answer api at 0.035, and api's
    # answer the client at 0.04.  Each later request reuses both connections: 0.02 more
    # (a round trip client->api and one api->db); it reaches db two hops (0.01) after it left
    # the client, where the one before had just arrived.
    assert got == [(t, f"item {i} via api from db") for i, t in enumerate(rounds(0.04, 10, 0.02))]
    assert seen_by_db == [(t, str(i)) for i, t in enumerate([0.03, *rounds(0.05, 9, 0.02)])]


# ------------------------------------------------------------------------------- httpx


def test_httpx_async_client_against_aiohttp_over_http_and_https(certs: Certs) -> None:
    async def main() -> list[tuple[float, str, str]]:
        world = net.Network(latency=L)
        srv, cli = world.host("srv"), world.host("cli")
        plain = await srv.run(start_app(hello_app(), 8080))
        secure = await srv.run(start_app(hello_app(), 8443, certs.server))
        got: list[tuple[float, str, str]] = []
        try:
            async with cli:
                for url in ("http://srv:8080", "https://srv:8443"):
                    t0 = now()
                    async with httpx.AsyncClient(verify=certs.client) as client:
                        for i in range(3):
                            response = await client.get(f"{url}/?i={i}")
                            got.append((round(now() - t0, 9), response.http_version, response.text))
        finally:
            await srv.run(plain.cleanup())
            await srv.run(secure.cleanup())
        return got

    # Over HTTP: the connect (0.01), then a round trip per request; over HTTPS the TLS 1.3
    # handshake adds one round trip before the first.  Each client keeps its connection for
    # its three requests (one client port each: 49152, then 49153).
    assert run(main) == [
        (0.02, "HTTP/1.1", "http: hello 0 to 10.0.0.2:49152"),
        (0.03, "HTTP/1.1", "http: hello 1 to 10.0.0.2:49152"),
        (0.04, "HTTP/1.1", "http: hello 2 to 10.0.0.2:49152"),
        (0.03, "HTTP/1.1", "https: hello 0 to 10.0.0.2:49153"),
        (0.04, "HTTP/1.1", "https: hello 1 to 10.0.0.2:49153"),
        (0.05, "HTTP/1.1", "https: hello 2 to 10.0.0.2:49153"),
    ]


def test_httpx_drops_a_keep_alive_connection_the_server_closed() -> None:
    # httpcore polls an idle connection's socket before reusing it: the server's FIN must
    # make it readable, or httpx would send its next request into a closed connection.
    async def main() -> list[tuple[float, str]]:
        world = net.Network(latency=L)
        srv, cli = world.host("srv"), world.host("cli")
        runner = await srv.run(start_app(hello_app(), 8080, keepalive_timeout=30))
        got: list[tuple[float, str]] = []
        try:
            async with cli, httpx.AsyncClient() as client:
                for i, pause in enumerate((0, 10, 60)):
                    await asyncio.sleep(pause)
                    response = await client.get(f"http://srv:8080/?i={i}")
                    got.append((now(), response.text))
        finally:
            await srv.run(runner.cleanup())
        return got

    # 0.02: connect and request; 10.03: the idle connection is reused (10 s < aiohttp's 30 s
    # keep-alive); 70.05: the server closed it meanwhile, so a new connection (port 49153)
    # costs a connect and a request again.
    assert run(main) == [
        (0.02, "http: hello 0 to 10.0.0.2:49152"),
        (10.03, "http: hello 1 to 10.0.0.2:49152"),
        (70.05, "http: hello 2 to 10.0.0.2:49153"),
    ]


# -------------------------------------------------------------------------- websockets


def test_websockets_server_and_client_on_two_hosts() -> None:
    async def main() -> tuple[list[tuple[float, str]], list[tuple[float, str]], float]:
        world = net.Network(latency=L)
        srv, cli = world.host("srv"), world.host("cli")
        heard: list[tuple[float, str]] = []

        async def handler(connection: ServerConnection) -> None:
            async for message in connection:
                text = str(message)
                heard.append((now(), text))
                await connection.send(f"echo {text}")

        async def start() -> Any:
            return await ws_serve(handler, None, 8765)

        server = await srv.run(start())
        got: list[tuple[float, str]] = []
        try:
            async with cli:
                async with ws_connect("ws://srv:8765") as websocket:
                    got.append((now(), "open"))
                    for i in range(3):
                        await websocket.send(f"m{i}")
                        reply = await websocket.recv()
                        got.append((now(), str(reply)))
                closed = now()
        finally:
            server.close()
            await server.wait_closed()
        return got, heard, closed

    got, heard, closed = run(main)
    # Open at 0.02: the connect, then the HTTP upgrade's round trip.  Each message is heard
    # by the server one latency after it was sent and echoed back one later.  The closing
    # handshake takes a round trip, and the client waits for the server to end the TCP
    # connection, whose FIN comes with the server's close frame: closed at 0.06.
    assert got == [(0.02, "open"), (0.03, "echo m0"), (0.04, "echo m1"), (0.05, "echo m2")]
    assert heard == [(0.025, "m0"), (0.035, "m1"), (0.045, "m2")]
    assert closed == 0.06


# ------------------------------------------------------------------------------ redis


class RedisStub:
    """A tiny redis: RESP2 over asyncio streams, keys in a dict, expiry by the host's clock.

    Enough for redis-py: ``CLIENT SETINFO`` (sent on connect) is answered ``+OK`` as
    redis >= 7.2 does, unknown commands get redis's ``-ERR unknown command``.  Each command
    is logged with the server's ``loop.time()`` -- its host's clock.
    """

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}
        self.deadlines: dict[bytes, float] = {}  # by the server host's clock
        self.log: list[tuple[float, str]] = []
        self.open = 0
        self.idle = asyncio.Event()

    def _clock(self) -> float:
        return round(asyncio.get_running_loop().time(), 9)

    def _alive(self, key: bytes) -> bool:
        deadline = self.deadlines.get(key)
        if deadline is not None and self._clock() >= deadline:
            del self.data[key], self.deadlines[key]
        return key in self.data

    def answer(self, args: list[bytes]) -> bytes:
        name = args[0].upper()
        if name == b"PING":
            return b"+PONG\r\n"
        if name == b"CLIENT" and args[1].upper() == b"SETINFO":
            return b"+OK\r\n"
        if name == b"SET":
            self.data[args[1]] = args[2]
            self.deadlines.pop(args[1], None)
            return b"+OK\r\n"
        if name == b"GET":
            if not self._alive(args[1]):
                return b"$-1\r\n"
            value = self.data[args[1]]
            return b"$%d\r\n%s\r\n" % (len(value), value)
        if name in (b"INCR", b"INCRBY"):
            step = int(args[2]) if name == b"INCRBY" else 1
            number = (int(self.data[args[1]]) if self._alive(args[1]) else 0) + step
            self.data[args[1]] = b"%d" % number
            return b":%d\r\n" % number
        if name == b"DEL":
            gone = [key for key in args[1:] if self._alive(key)]
            for key in gone:
                del self.data[key]
                self.deadlines.pop(key, None)
            return b":%d\r\n" % len(gone)
        if name == b"EXPIRE":
            if not self._alive(args[1]):
                return b":0\r\n"
            self.deadlines[args[1]] = round(self._clock() + int(args[2]), 9)
            return b":1\r\n"
        if name == b"TTL":
            if not self._alive(args[1]):
                return b":-2\r\n"
            deadline = self.deadlines.get(args[1])
            left = -1 if deadline is None else math.ceil(deadline - self._clock())
            return b":%d\r\n" % left
        return b"-ERR unknown command '%s'\r\n" % args[0]

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open += 1
        self.idle.clear()
        try:
            while line := await reader.readline():
                args = []
                for _ in range(int(line[1:])):  # *<count>, then $<size> and the bytes each
                    size = int((await reader.readline())[1:])
                    args.append((await reader.readexactly(size + 2))[:-2])
                self.log.append((self._clock(), b" ".join(args).decode()))
                writer.write(self.answer(args))
        finally:
            writer.close()
            self.open -= 1
            if not self.open:
                self.idle.set()


async def start_redis_stub(host: net.Host) -> tuple[RedisStub, asyncio.AbstractServer]:
    stub = RedisStub()

    async def start() -> asyncio.AbstractServer:
        return await asyncio.start_server(stub.handle, None, 6379)

    return stub, await host.run(start())


async def stop_redis_stub(stub: RedisStub, server: asyncio.AbstractServer) -> None:
    """Stop listening and wait until every connection's handler has ended."""
    server.close()
    if stub.open:
        await stub.idle.wait()


def test_redis_py_against_an_in_memory_redis_on_a_simulated_host() -> None:
    async def main() -> tuple[list[tuple[float, Any]], list[tuple[float, str]]]:
        world = net.Network(latency=L)
        cache, app = world.host("cache"), world.host("app")
        stub, server = await start_redis_stub(cache)
        got: list[tuple[float, Any]] = []
        try:
            async with app:
                client = aioredis.Redis(host="cache", port=6379)
                try:
                    got.append(await timed(client.ping()))
                    got.append(await timed(client.set("user:1", "ada")))
                    got.append(await timed(client.get("user:1")))
                    got.append(await timed(client.incr("hits")))
                    got.append(await timed(client.incr("hits", 5)))
                    got.append(await timed(client.delete("user:1", "nobody")))
                    got.append(await timed(client.get("user:1")))
                finally:
                    await client.aclose()
        finally:
            await stop_redis_stub(stub, server)
        return got, stub.log

    got, log = run(main)
    # The first command connects (0.01), then redis-py pipelines its two CLIENT SETINFO
    # (0.02), then sends PING (0.03); every later command is one round trip.
    assert got == [
        (0.03, True),
        (0.04, True),
        (0.05, b"ada"),
        (0.06, 1),
        (0.07, 6),
        (0.08, 1),
        (0.09, None),
    ]
    # The server hears each command one latency after it leaves the client.
    assert log == [
        (0.015, "CLIENT SETINFO LIB-NAME redis-py"),
        (0.015, f"CLIENT SETINFO LIB-VER {redis.__version__}"),
        (0.025, "PING"),
        (0.035, "SET user:1 ada"),
        (0.045, "GET user:1"),
        (0.055, "INCRBY hits 1"),
        (0.065, "INCRBY hits 5"),
        (0.075, "DEL user:1 nobody"),
        (0.085, "GET user:1"),
    ]


def test_a_redis_key_expires_by_the_servers_clock_in_virtual_time() -> None:
    async def main() -> tuple[list[tuple[float, Any]], list[tuple[float, str]], float]:
        world = net.Network(latency=L)
        # The cache's clock reads 1000 s ahead of the loop's: the deadline is its own.
        cache, app = world.host("cache", clock_offset=1000.0), world.host("app")
        stub, server = await start_redis_stub(cache)
        got: list[tuple[float, Any]] = []
        try:
            async with app:
                client = aioredis.Redis(host="cache", port=6379)
                try:
                    await client.set("session", "token")  # at 0.03
                    got.append(await timed(client.expire("session", 10)))
                    got.append(await timed(client.ttl("session")))
                    await asyncio.sleep(9.975)
                    got.append(await timed(client.get("session")))
                    got.append(await timed(client.get("session")))
                    got.append(await timed(client.ttl("session")))
                finally:
                    await client.aclose()
        finally:
            await stop_redis_stub(stub, server)
        deadline = stub.deadlines.get(b"session", -1.0)
        return got, stub.log[3:], deadline

    got, log, deadline = run(main)
    # EXPIRE reaches the cache at 0.035 by the loop (1000.035 by the cache's clock): the key
    # lives until 1010.035 there.  A GET that arrives at 10.03 (1010.03) still finds it; the
    # next, at 10.04 (1010.04), does not, and TTL says -2 (no such key).
    assert got == [(0.04, True), (0.05, 10), (10.035, b"token"), (10.045, None), (10.055, -2)]
    assert log == [
        (1000.035, "EXPIRE session 10"),
        (1000.045, "TTL session"),
        (1010.03, "GET session"),
        (1010.04, "GET session"),
        (1010.05, "TTL session"),
    ]
    assert deadline == -1.0  # forgotten when it expired


@pytest.fixture(scope="module")
def real_redis() -> Iterator[int]:
    with peers.service_or_skip(peers.redis_server()) as port:
        yield port


def test_one_redis_client_library_for_a_simulated_cache_and_a_real_redis_server(
    real_redis: int,
) -> None:
    # The real redis-server on 127.0.0.1 is outside work: it answers in real time, and the
    # virtual clock stands still meanwhile -- so the simulated cache's times stay exact.
    async def main() -> tuple[list[tuple[float, Any, str]], list[tuple[float, str]]]:
        world = net.Network(latency=L)
        cache, app = world.host("cache"), world.host("app")
        stub, server = await start_redis_stub(cache)
        got: list[tuple[float, Any, str]] = []
        try:
            async with app:
                simulated = aioredis.Redis(host="cache", port=6379)
                real = aioredis.Redis(host="127.0.0.1", port=real_redis)
                try:
                    for i in range(3):
                        got.append((*await timed(real.set(f"vt:{i}", f"real {i}")), "real"))
                        got.append((*await timed(simulated.incr("hits")), "simulated"))
                    await asyncio.sleep(60)
                    got.append((*await timed(real.mget("vt:0", "vt:1", "vt:2")), "real"))
                    got.append((*await timed(simulated.get("hits")), "simulated"))
                    got.append((*await timed(real.delete("vt:0", "vt:1", "vt:2")), "real"))
                finally:
                    await simulated.aclose()
                    await real.aclose()
        finally:
            await stop_redis_stub(stub, server)
        return got, stub.log[2:]

    got, log = run(main)
    assert got == [
        (0.0, True, "real"),  # real work takes no virtual time
        (0.03, 1, "simulated"),  # connect, CLIENT SETINFO, INCRBY: three round trips
        (0.03, True, "real"),
        (0.04, 2, "simulated"),
        (0.04, True, "real"),
        (0.05, 3, "simulated"),
        (60.05, [b"real 0", b"real 1", b"real 2"], "real"),
        (60.06, b"3", "simulated"),
        (60.06, 3, "real"),
    ]
    assert log == [
        (0.025, "INCRBY hits 1"),
        (0.035, "INCRBY hits 1"),
        (0.045, "INCRBY hits 1"),
        (60.055, "GET hits"),
    ]


# ---------------------------------------------------------------------------- asyncpg


def pg_message(kind: bytes, body: bytes = b"") -> bytes:
    """A PostgreSQL backend message: its type byte, its length (itself included), its body."""
    return kind + struct.pack("!i", len(body) + 4) + body


PG_SETTINGS = {
    "server_version": "16.0",
    "server_encoding": "UTF8",
    "client_encoding": "UTF8",
    "DateStyle": "ISO, MDY",
    "integer_datetimes": "on",
    "standard_conforming_strings": "on",
    "TimeZone": "UTC",
}

INT4 = 23  # pg_type's oid of int4


class PostgresStub:
    """A PostgreSQL server that speaks just enough of the protocol (v3) for asyncpg.

    It answers the SSLRequest with ``S`` and upgrades the stream with
    ``StreamWriter.start_tls`` (the world's ``start_tls``), accepts any user without a
    password, reports the settings asyncpg reads, and answers every prepared statement as
    ``SELECT 1``: one ``int4`` column called ``?column?``, one row, in the format Bind asks.
    """

    def __init__(self, tls: ssl.SSLContext) -> None:
        self.tls = tls
        self.log: list[tuple[float, Any]] = []
        self.done = asyncio.Event()

    async def _message(self, reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
        kind = await reader.readexactly(1)
        (length,) = struct.unpack("!i", await reader.readexactly(4))
        return kind, await reader.readexactly(length - 4)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            length, code = struct.unpack("!ii", await reader.readexactly(8))
            self.log.append((now(), ("SSLRequest", length, code)))
            writer.write(b"S")
            await writer.start_tls(self.tls)
            tls = writer.get_extra_info("ssl_object")
            self.log.append((now(), ("TLS", None if tls is None else tls.version())))
            (length,) = struct.unpack("!i", await reader.readexactly(4))
            body = await reader.readexactly(length - 4)
            major, minor = struct.unpack("!hh", body[:4])
            pairs = body[4:-2].split(b"\0")  # name\0value\0 ... then a last \0
            startup = dict(zip(pairs[::2], pairs[1::2], strict=True))
            self.log.append((now(), ("StartupMessage", (major, minor), startup)))
            out = pg_message(b"R", struct.pack("!i", 0))  # AuthenticationOk
            for name, value in PG_SETTINGS.items():
                out += pg_message(b"S", name.encode() + b"\0" + value.encode() + b"\0")
            out += pg_message(b"K", struct.pack("!ii", 4242, 1234))  # BackendKeyData
            writer.write(out + pg_message(b"Z", b"I"))  # ReadyForQuery: idle
            out = b""
            binary = False
            while True:
                kind, body = await self._message(reader)
                self.log.append((now(), kind.decode()))
                if kind == b"X":  # Terminate
                    break
                if kind == b"P":  # Parse
                    out += pg_message(b"1")
                elif kind == b"D":  # Describe: no parameters, one int4 column
                    out += pg_message(b"t", struct.pack("!h", 0))
                    field = b"?column?\0" + struct.pack("!ihihih", 0, 0, INT4, 4, -1, 0)
                    out += pg_message(b"T", struct.pack("!h", 1) + field)
                elif kind == b"B":  # Bind: the last format code asked for the result
                    binary = body.endswith(b"\x00\x01\x00\x01")
                    out += pg_message(b"2")
                elif kind == b"E":  # Execute: one row, then the command tag
                    cell = struct.pack("!i", 1) if binary else b"1"
                    row = struct.pack("!hi", 1, len(cell)) + cell
                    out += pg_message(b"D", row) + pg_message(b"C", b"SELECT 1\0")
                elif kind in (b"H", b"S"):  # Flush, Sync (which ends with ReadyForQuery)
                    writer.write(out + (pg_message(b"Z", b"I") if kind == b"S" else b""))
                    out = b""
        finally:
            writer.close()
            self.done.set()


def test_asyncpg_connects_over_simulated_tls_to_a_stub_postgres(certs: Certs) -> None:
    async def main() -> tuple[list[tuple[float, Any]], list[tuple[float, Any]]]:
        world = net.Network(latency=L)
        pg, app = world.host("pg"), world.host("app")
        stub = PostgresStub(certs.server)

        async def start() -> asyncio.AbstractServer:
            return await asyncio.start_server(stub.handle, None, 5432)

        server = await pg.run(start())
        got: list[tuple[float, Any]] = []
        try:
            async with app:
                connection = await asyncpg.connect(
                    host="pg", port=5432, user="u", database="d", ssl=certs.client
                )
                try:
                    got.append((now(), "connected"))
                    got.append(await timed(connection.fetchval("SELECT 1")))
                    got.append(await timed(connection.fetchval("SELECT 1")))
                finally:
                    await connection.close()
                got.append((now(), "closed"))
                await stub.done.wait()
        finally:
            server.close()
        return got, stub.log

    got, log = run(main)
    # 0.01 the connect; 0.02 the SSLRequest answered "S"; 0.03 the TLS 1.3 handshake; 0.04
    # the StartupMessage answered up to ReadyForQuery.  The first fetchval prepares the
    # statement (Parse, Describe, Flush: 0.05), then binds and runs it (0.06); the second
    # reuses the prepared statement: one round trip.  close() sends Terminate and waits for
    # the server to end the connection: one more round trip.
    assert got == [(0.04, "connected"), (0.06, 1), (0.07, 1), (0.08, "closed")]
    assert log == [
        (0.015, ("SSLRequest", 8, 80877103)),
        # The server's handshake ends when the client's Finished arrives, with the startup.
        (0.035, ("TLS", "TLSv1.3")),
        (
            0.035,
            (
                "StartupMessage",
                (3, 0),
                {b"client_encoding": b"'utf-8'", b"user": b"u", b"database": b"d"},
            ),
        ),
        (0.045, "P"),
        (0.045, "D"),
        (0.045, "H"),
        (0.055, "B"),
        (0.055, "E"),
        (0.055, "S"),
        (0.065, "B"),
        (0.065, "E"),
        (0.065, "S"),
        (0.075, "X"),
    ]
