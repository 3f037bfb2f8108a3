"""Boundary benchmark: real threads against virtual timeouts, on an idle and on a loaded machine.

The outside-work model (``virtualtime/_engine/_outside.py``) promises two things: a real peer
never loses to a virtual timeout, and an idle outside world costs no real time.  This script
runs the thread cases of issue 35 -- aiosqlite, SQLAlchemy on aiosqlite, ``to_thread`` jobs
back to back, a job blocked on a process pool or on a plain future, a CPU-bound peer thread,
and the idle cases (a same-thread ``call_soon_threadsafe``, a portal caller, a heartbeat
thread) -- with 0, 2 and 4 busy processes started beside it, and prints one Markdown table:
for each case, how many answers lost to a timeout (or raised a false ``DeadlockError``) out of
how many, and the real seconds it took.  Then the cost of one idle round while a thread that
spoke to the loop is alive, with 1 and 10 other threads.

The socket cases come next, with real peers on 127.0.0.1 (``tests/_peers_helpers.py``, the
peers of ``tests/test_boundary_sockets.py``): requests back to back on one kept-alive
connection to a server in another thread and in another process (raw streams, TLS, httpx,
aiohttp), an answer split by the peer's CPU work, a peer process that needs 50 ms of CPU per
answer, a peer process killed while we read from it, bytes through a pty -- and the idle ones
(a fire-and-forget message, an idle keep-alive connection, an anyio wait for a push that never
comes, a redis poll, pings far apart), whose cells also give real seconds per virtual hour.  A
socket case still running after ``--cap`` real seconds (a model that holds time for as long as
a virtual sleep says) is cut off, and its cell says so.

Run by hand, never by CI or pytest (it takes several minutes, and its point is to load the
machine)::

    .venv/bin/python bench/boundary.py
    .venv/bin/python bench/boundary.py --loads 0 4 --cases aiosqlite-slow,cpu-peer
    .venv/bin/python bench/boundary.py --loads 0 --cases split-process,redis-poll --cap 60

Needs the test extra (``aiosqlite``, ``sqlalchemy``, ``httpx``, ``aiohttp``, ``anyio``,
``redis``, ``trustme``) and a ``redis-server`` binary for the redis case.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import inspect
import os
import queue
import ssl
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import _peers_helpers as peers  # noqa: E402  (tests/: the peers the boundary tests use)
from sqlalchemy import Integer, String, select  # noqa: E402
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine  # noqa: E402
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column  # noqa: E402

import virtualtime  # noqa: E402

Result = tuple[int, int]
"""(lost, total): answers that lost to a timeout or a false deadlock, out of how many."""


def _burn(seconds: float) -> int:
    end = time.perf_counter() + seconds
    spins = 0
    while time.perf_counter() < end:
        spins += 1
    return spins


def _slept(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


# ------------------------------------------------------------------------------ cases


async def aiosqlite_slow() -> Result:
    import aiosqlite

    lost = 0
    async with aiosqlite.connect(":memory:") as db:
        await db.create_function("burn", 1, _burn)
        for seconds in (0.1, 0.4, 0.1, 0.4):
            try:
                async with asyncio.timeout(5):
                    await (await db.execute("SELECT burn(?)", (seconds,))).fetchone()
            except TimeoutError:
                lost += 1
    return lost, 4


async def aiosqlite_quick_after_work() -> Result:
    import aiosqlite

    lost = 0
    async with aiosqlite.connect(":memory:") as db:
        for i in range(20):
            _burn(0.06)
            try:
                async with asyncio.timeout(5):
                    await (await db.execute("SELECT ?", (i,))).fetchone()
            except TimeoutError:
                lost += 1
    return lost, 20


async def aiosqlite_no_timer() -> Result:
    import aiosqlite

    async with aiosqlite.connect(":memory:") as db:
        await db.create_function("burn", 1, _burn)
        try:
            await (await db.execute("SELECT burn(?)", (0.4,))).fetchone()
        except virtualtime.DeadlockError:
            return 1, 1
    return 0, 1


class Base(DeclarativeBase):
    pass


class Item(Base):
    __tablename__ = "items"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(20))


async def sqlalchemy_orm() -> Result:
    lost = 0
    with tempfile.TemporaryDirectory() as folder:
        engine = create_async_engine(f"sqlite+aiosqlite:///{folder}/bench.db")
        try:
            async with engine.begin() as conn:
                await conn.run_sync(Base.metadata.create_all)
            sessions = async_sessionmaker(engine, expire_on_commit=False)
            async with sessions() as session:
                for i in range(300):
                    if i % 5 == 0:
                        _burn(0.06)
                    try:
                        async with asyncio.timeout(5):
                            if i % 2 == 0:
                                session.add(Item(name=f"item {i}"))
                                await session.commit()
                            else:
                                (await session.scalars(select(Item))).all()
                    except TimeoutError:
                        lost += 1
                        await session.rollback()
        finally:
            await engine.dispose()
    return lost, 300


async def to_thread_back_to_back() -> Result:
    lost = 0
    for _ in range(30):
        try:
            await asyncio.wait_for(asyncio.to_thread(time.sleep, 0.1), 1)
        except TimeoutError:
            lost += 1
    return lost, 30


async def job_on_process_pool() -> Result:
    lost = 0
    with concurrent.futures.ProcessPoolExecutor(1) as pool:
        pool.submit(abs, -1).result()
        for timeout in (None, 10.0):
            try:
                await asyncio.wait_for(
                    asyncio.to_thread(lambda: pool.submit(_slept, 0.3).result()), timeout
                )
            except (TimeoutError, virtualtime.DeadlockError):
                lost += 1
    return lost, 2


async def job_on_plain_future() -> Result:
    lost = 0
    for timeout in (None, 10.0):
        future: concurrent.futures.Future[int] = concurrent.futures.Future()
        worker = threading.Thread(target=lambda f=future: f.set_result(_burn(0.3)))
        worker.start()
        try:
            await asyncio.wait_for(asyncio.to_thread(future.result), timeout)
        except (TimeoutError, virtualtime.DeadlockError):
            lost += 1
        finally:
            worker.join()
    return lost, 2


def _serve(requests: queue.SimpleQueue[asyncio.Future[int] | None]) -> None:
    while (future := requests.get()) is not None:
        spins = _burn(0.05)
        future.get_loop().call_soon_threadsafe(future.set_result, spins)


async def cpu_peer() -> Result:
    requests: queue.SimpleQueue[asyncio.Future[int] | None] = queue.SimpleQueue()
    peer = threading.Thread(target=_serve, args=(requests,))
    peer.start()
    lost = 0
    try:
        for _ in range(30):
            future = asyncio.get_running_loop().create_future()
            requests.put(future)
            try:
                await asyncio.wait_for(asyncio.shield(future), 1)
            except TimeoutError:
                lost += 1
                await future
    finally:
        requests.put(None)
        peer.join()
    return lost, 30


async def same_thread_week() -> Result:
    loop = asyncio.get_running_loop()
    for _ in range(7 * 24):
        fired = asyncio.Event()
        loop.call_soon_threadsafe(loop.call_later, 3600, fired.set)
        await fired.wait()
    return 0, 0


async def heartbeat_hour() -> Result:
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(0.001):
            _burn(0.0002)

    thread = threading.Thread(target=beat)
    thread.start()
    try:
        for _ in range(3600):
            await asyncio.sleep(1)
    finally:
        stop.set()
        thread.join()
    return 0, 0


def portal_calls() -> Result:
    import anyio
    import anyio.from_thread

    with anyio.from_thread.start_blocking_portal(
        "asyncio", backend_options={"loop_factory": virtualtime.new_event_loop}
    ) as portal:
        for _ in range(50):
            portal.call(anyio.sleep, 3600)
    return 0, 0


# ------------------------------------------------------------------------------ socket cases
# Real peers on 127.0.0.1 (tests/_peers_helpers.py): a server in another thread (a plain
# asyncio loop of its own) and one in another process, plain and TLS, started once and kept
# for the whole run (so they feel the busy processes too), a real redis-server, a peer process
# killed mid-read, a pty.


class _Peers:
    """The peers the socket cases talk to, started on first use and stopped at the end."""

    def __init__(self) -> None:
        self.stack = contextlib.ExitStack()
        self.ports: dict[str, int] = {}
        self._client_tls: ssl.SSLContext | None = None
        self._server: tuple[ssl.SSLContext, Path] | None = None

    def port(self, kind: str) -> int:
        """``thread``, ``process``, ``tls-thread``, ``tls-process``, ``redis`` or ``mqtt``."""
        if kind not in self.ports:
            if kind == "redis":
                self.ports[kind] = self.stack.enter_context(peers.redis_server())
            elif kind == "mqtt":
                self.ports[kind] = self.stack.enter_context(peers.mosquitto())
            elif kind.startswith("tls-"):
                server, pem = self._server_tls()
                where = kind.removeprefix("tls-")
                self.ports[kind] = self.stack.enter_context(peers.peer(where, tls=server, pem=pem))
            else:
                self.ports[kind] = self.stack.enter_context(peers.peer(kind))
        return self.ports[kind]

    def _server_tls(self) -> tuple[ssl.SSLContext, Path]:
        """One throw-away CA for every TLS peer: the server's context and PEM file."""
        if self._server is None:
            import trustme

            folder = Path(self.stack.enter_context(tempfile.TemporaryDirectory()))
            ca = trustme.CA()
            pem = folder / "server.pem"
            cert = ca.issue_cert("localhost", "127.0.0.1")
            cert.private_key_and_cert_chain_pem.write_to_path(str(pem))
            self._client_tls = ssl.create_default_context()
            ca.configure_trust(self._client_tls)
            self._server = peers.server_tls(pem), pem
        return self._server

    def client_tls(self) -> ssl.SSLContext:
        assert self._client_tls is not None
        return self._client_tls


PEERS = _Peers()


async def _requests(
    port: int, requests: list[bytes], lines: int, tls: ssl.SSLContext | None = None
) -> Result:
    """Requests back to back on one connection, each under a fresh ``asyncio.timeout(5)``."""
    lost = 0
    if tls is None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    else:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=tls, server_hostname="localhost"
        )
    try:
        for request in requests:
            read = 0
            try:
                async with asyncio.timeout(5):
                    writer.write(request)
                    await writer.drain()
                    for _ in range(lines):
                        await reader.readline()
                        read += 1
            except TimeoutError:
                lost += 1
                for _ in range(lines - read):  # the rest is on its way: stay in step
                    await reader.readline()
    finally:
        writer.close()
        await writer.wait_closed()
    return lost, len(requests)


_MIXED_300 = [f"{kind} 300\n".encode() for kind in ("cpu", "sleep", "async")] * 10
"""30 answers of 300 ms: CPU work, a blocking sleep, an asyncio sleep in the peer, in turn."""


async def thread_server() -> Result:
    return await _requests(PEERS.port("thread"), _MIXED_300, 1)


async def process_server() -> Result:
    return await _requests(PEERS.port("process"), _MIXED_300, 1)


async def tls_thread_server() -> Result:
    return await _requests(PEERS.port("tls-thread"), [b"cpu 100\n"] * 30, 1, PEERS.client_tls())


async def tls_process_server() -> Result:
    return await _requests(PEERS.port("tls-process"), [b"cpu 100\n"] * 30, 1, PEERS.client_tls())


async def httpx_keep_alive() -> Result:
    import httpx

    lost = 0
    url = f"http://127.0.0.1:{PEERS.port('process')}/sleep/100"
    async with httpx.AsyncClient() as client:
        for _ in range(30):
            try:
                async with asyncio.timeout(5):
                    await client.get(url)
            except TimeoutError:
                lost += 1
    return lost, 30


async def aiohttp_keep_alive() -> Result:
    import aiohttp

    lost = 0
    url = f"http://127.0.0.1:{PEERS.port('process')}/async/100"
    async with aiohttp.ClientSession() as session:
        for _ in range(30):
            try:
                async with asyncio.timeout(5), session.get(url) as response:
                    await response.read()
            except TimeoutError:
                lost += 1
    return lost, 30


async def split_thread() -> Result:
    return await _requests(PEERS.port("thread"), [b"split 50\n"] * 30, 2)


async def split_process() -> Result:
    return await _requests(PEERS.port("process"), [b"split 50\n"] * 30, 2)


async def chunked_answer() -> Result:
    import aiohttp

    lost = 0
    url = f"http://127.0.0.1:{PEERS.port('process')}/chunked/3/50"
    async with aiohttp.ClientSession() as session:
        for _ in range(10):
            try:
                async with asyncio.timeout(5), session.get(url) as response:
                    await response.read()
            except TimeoutError:
                lost += 1
    return lost, 10


async def slow_cpu_peer() -> Result:
    lost = 0
    reader, writer = await asyncio.open_connection("127.0.0.1", PEERS.port("process"))
    try:
        for _ in range(30):
            writer.write(b"cpu 50\n")
            await writer.drain()
            try:
                await asyncio.wait_for(asyncio.shield(reader.readline()), 1)
            except TimeoutError:
                lost += 1
                await reader.readline()  # the answer still comes: keep the requests in step
    finally:
        writer.close()
        await writer.wait_closed()
    return lost, 30


async def killed_peer() -> Result:
    """A peer process killed while we read from it: is the close seen at the kill's instant?

    Half the tries owe the peer an answer, half only wait for it to speak (long after its
    last word); a timer at 1000 s is pending all along.
    """
    lost = 0
    for i in range(20):
        proc, port = peers.start_killable()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            await reader.readline()
            sleeper = asyncio.create_task(asyncio.sleep(1000))
            if i % 2:
                await asyncio.sleep(10)
            else:
                writer.write(b"a request it never answers\n")
                await writer.drain()
            reading = asyncio.create_task(reader.read(100))
            await asyncio.sleep(0)
            killed_at = asyncio.get_running_loop().time()
            proc.kill()
            with contextlib.suppress(ConnectionError):
                await reading
            lost += asyncio.get_running_loop().time() != killed_at
            sleeper.cancel()
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
        finally:
            proc.kill()
            proc.wait()
    return lost, 20


class _Collect(asyncio.Protocol):
    def __init__(self) -> None:
        self.data: asyncio.Queue[bytes] = asyncio.Queue()

    def data_received(self, data: bytes) -> None:
        self.data.put_nowait(data)


async def _pty_round_trips(write: Callable[[int, bytes], object]) -> Result:
    """A byte written to a pty's slave, read from its master under timeout(1): 20 ptys x 50."""
    import tty

    lost = 0
    loop = asyncio.get_running_loop()
    for _ in range(20):
        master, slave = os.openpty()
        tty.setraw(slave)
        transport, protocol = await loop.connect_read_pipe(
            _Collect, os.fdopen(master, "rb", buffering=0)
        )
        try:
            for _ in range(50):
                write(slave, b"x")
                try:
                    async with asyncio.timeout(1):
                        await protocol.data.get()
                except TimeoutError:
                    lost += 1
                    await protocol.data.get()
        finally:
            transport.close()
            os.close(slave)
    return lost, 1000


async def pty_from_loop() -> Result:
    return await _pty_round_trips(os.write)


def pty_from_thread() -> Result:
    # The writer thread starts before the loop and never speaks to it.
    requests: queue.SimpleQueue[tuple[int, bytes] | None] = queue.SimpleQueue()

    def writer() -> None:
        while (item := requests.get()) is not None:
            os.write(*item)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        result, _ = peers.bounded_run(
            _pty_round_trips(lambda fd, data: requests.put((fd, data))), CAP
        )
    finally:
        requests.put(None)
        thread.join()
    return result


def trio_keep_alive() -> Result:
    """trio with a ``VirtualClock``: 30 requests on one kept-alive connection to the process
    server, answered after 300 ms (CPU, a blocking sleep, an asyncio sleep), each under a fresh
    ``fail_after(5)``."""
    import trio

    from virtualtime.trio import VirtualClock

    port = PEERS.port("process")
    kinds = [b"cpu", b"sleep", b"async"]

    async def main() -> Result:
        lost = 0
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            buffer = b""
            for i in range(30):
                try:
                    with trio.fail_after(5):
                        await stream.send_all(kinds[i % 3] + b" 300\n")
                        while b"\n" not in buffer:
                            buffer += await stream.receive_some(4096)
                except trio.TooSlowError:
                    lost += 1
                    while b"\n" not in buffer:  # the answer is on its way: stay in step
                        buffer += await stream.receive_some(4096)
                buffer = buffer.split(b"\n", 1)[1]
        return lost, 30

    result: Result = trio.run(main, clock=VirtualClock())
    return result


async def fire_and_forget() -> Result:
    reader, writer = await asyncio.open_connection("127.0.0.1", PEERS.port("process"))
    try:
        for _ in range(3):
            writer.write(b"sink a published message\n")  # read, never answered
            await writer.drain()
            await asyncio.sleep(120)
        writer.write(b"echo done\n")
        await reader.readline()
    finally:
        writer.close()
        await writer.wait_closed()
    return 0, 0


async def idle_keep_alive() -> Result:
    import aiohttp

    url = f"http://127.0.0.1:{PEERS.port('process')}/cpu/0"
    async with aiohttp.ClientSession() as session:
        for _ in range(6):
            async with session.get(url) as response:
                await response.read()
            await asyncio.sleep(600)  # the connection waits in the pool, idle
    return 0, 0


async def anyio_idle() -> Result:
    import anyio

    async with await anyio.connect_tcp("127.0.0.1", PEERS.port("process")) as stream:
        for _ in range(3):
            await stream.send(b"echo hi\n")
            await stream.receive()
            with anyio.move_on_after(3):
                await stream.receive()  # a push that never comes
    return 0, 0


async def redis_poll() -> Result:
    import redis.asyncio

    client = redis.asyncio.Redis(port=PEERS.port("redis"))
    try:
        await client.set("polled", "x")
        for _ in range(1200):
            await client.get("polled")
            await asyncio.sleep(0.5)
    finally:
        await client.aclose()
    return 0, 0


async def mqtt_publish() -> Result:
    """One MQTT QoS 0 publish (fire and forget) to a real broker, then 120 virtual seconds.

    Raw MQTT 3.1.1 packets: CONNECT (keep-alive 60 s), CONNACK, PUBLISH, then a PINGREQ at
    each keep-alive, answered by the broker, as a client library would.
    """
    reader, writer = await asyncio.open_connection("127.0.0.1", PEERS.port("mqtt"))
    try:
        writer.write(bytes([0x10, 13, 0, 4]) + b"MQTT" + bytes([4, 2, 0, 60, 0, 1]) + b"b")
        await writer.drain()
        async with asyncio.timeout(5):
            assert await reader.readexactly(4) == bytes([0x20, 2, 0, 0])  # CONNACK
        writer.write(bytes([0x30, 10, 0, 3]) + b"a/bhello")  # PUBLISH, QoS 0: never answered
        await writer.drain()
        lost = 0
        for _ in range(2):
            await asyncio.sleep(60)
            writer.write(bytes([0xC0, 0]))  # PINGREQ
            await writer.drain()
            try:
                async with asyncio.timeout(5):
                    assert await reader.readexactly(2) == bytes([0xD0, 0])  # PINGRESP
            except TimeoutError:
                lost += 1
    finally:
        writer.close()
        await writer.wait_closed()
    return lost, 2


async def double(ctx: dict[str, Any], x: int) -> int:
    """The arq case's job (arq finds a job's function by its qualified name)."""
    return 2 * x


async def arq_hour() -> Result:
    """An arq worker (real redis) running for one virtual hour: one job, polls every 0.5 s."""
    from arq.connections import RedisSettings, create_pool
    from arq.worker import Worker

    settings = RedisSettings(port=PEERS.port("redis"))
    pool = await create_pool(settings)
    worker = Worker(functions=[double], redis_settings=settings, handle_signals=False)
    running = asyncio.create_task(worker.async_run())
    lost = 0
    try:
        job = await pool.enqueue_job("double", 21)
        assert job is not None
        try:
            answer = await job.result(timeout=10)
        except TimeoutError:
            lost += 1
        else:
            assert answer == 42
        await asyncio.sleep(3600)
    finally:
        await worker.close()
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
        await pool.aclose()
    return lost, 1


async def pings() -> Result:
    reader, writer = await asyncio.open_connection("127.0.0.1", PEERS.port("process"))
    lost = 0
    try:
        for i in range(30):
            writer.write(b"echo pong %d\n" % i)
            try:
                async with asyncio.timeout(5):
                    await reader.readline()
            except TimeoutError:
                lost += 1
            await asyncio.sleep(20)
    finally:
        writer.close()
        await writer.wait_closed()
    return lost, 30


CASES: dict[str, tuple[str, Callable[[], Coroutine[Any, Any, Result] | Result]]] = {
    "aiosqlite-slow": (
        "aiosqlite: 0.1 s and 0.4 s queries under timeout(5), twice",
        aiosqlite_slow,
    ),
    "aiosqlite-quick": (
        "aiosqlite: 20 quick queries, each after 60 ms of work",
        aiosqlite_quick_after_work,
    ),
    "aiosqlite-no-timer": ("aiosqlite: a 0.4 s query with no timer pending", aiosqlite_no_timer),
    "orm": ("SQLAlchemy ORM on aiosqlite (file), 300 queries", sqlalchemy_orm),
    "to-thread": ("30 x wait_for(to_thread(time.sleep, 0.1), 1)", to_thread_back_to_back),
    "process-pool": ("to_thread blocked on a ProcessPoolExecutor future", job_on_process_pool),
    "plain-future": ("to_thread blocked on a plain Future a thread completes", job_on_plain_future),
    "cpu-peer": ("a peer thread needing 50 ms of CPU per answer, 30 requests", cpu_peer),
    "same-thread": ("idle: same-thread call_soon_threadsafe, a virtual week", same_thread_week),
    "heartbeat": ("idle: a silent heartbeat thread, a virtual hour", heartbeat_hour),
    "portal": ("idle: 50 portal calls of sleep(3600)", portal_calls),
    # ---- sockets and peers
    "thread-server": (
        "thread server: 30 answers of 300 ms (CPU, sleep, asyncio) on one connection",
        thread_server,
    ),
    "process-server": (
        "process server: 30 answers of 300 ms (CPU, sleep, asyncio) on one connection",
        process_server,
    ),
    "tls-thread": ("TLS, thread server: 30 answers of 100 ms of CPU", tls_thread_server),
    "tls-process": ("TLS, process server: 30 answers of 100 ms of CPU", tls_process_server),
    "httpx": ("httpx keep-alive, process server: 30 answers of 100 ms", httpx_keep_alive),
    "aiohttp": ("aiohttp keep-alive, process server: 30 answers of 100 ms", aiohttp_keep_alive),
    "trio-keep-alive": (
        "trio (VirtualClock) keep-alive, process server: 30 answers of 300 ms",
        trio_keep_alive,
    ),
    "split-thread": ("split answer, thread server: head, 50 ms of CPU, body; x30", split_thread),
    "split-process": (
        "split answer, process server: head, 50 ms of CPU, body; x30",
        split_process,
    ),
    "chunked": ("chunked answer: 3 events 50 ms of CPU apart, aiohttp; x10", chunked_answer),
    "slow-cpu-peer": (
        "a peer process needing 50 ms of CPU per answer, wait_for 1 s; x30",
        slow_cpu_peer,
    ),
    "killed-peer": ("a peer process killed mid-read, seen at the kill's instant; x20", killed_peer),
    "pty-loop": ("pty: a byte the loop writes, read under timeout(1); x1000", pty_from_loop),
    "pty-thread": (
        "pty: a byte a (silent) thread writes, read under timeout(1); x1000",
        pty_from_thread,
    ),
    "fire-and-forget": (
        "idle: 3 unanswered messages, each then sleep(120) (6 virtual min)",
        fire_and_forget,
    ),
    "idle-keep-alive": (
        "idle: aiohttp, an answer then sleep(600), x6 (1 virtual hour)",
        idle_keep_alive,
    ),
    "anyio-idle": (
        "idle: anyio, an answer then move_on_after(3) for a push, x3 (9 virtual s)",
        anyio_idle,
    ),
    "redis-poll": ("idle: a redis GET every 0.5 s for 600 virtual s", redis_poll),
    "pings": ("idle: 30 pings 20 virtual s apart (10 virtual min)", pings),
    "mqtt": ("idle: an MQTT QoS 0 publish to mosquitto, then 120 virtual s", mqtt_publish),
    "arq": ("idle: an arq worker on a real redis for one virtual hour", arq_hour),
}

VIRTUAL_SECONDS: dict[str, float] = {
    "fire-and-forget": 360,
    "idle-keep-alive": 3600,
    "anyio-idle": 9,
    "redis-poll": 600,
    "pings": 600,
    "mqtt": 120,
    "arq": 3600,
}
"""The socket idle cases' virtual length: their cells also say real seconds per virtual hour."""

SOCKET_CASES = frozenset(list(CASES)[list(CASES).index("portal") + 1 :])
"""The cases with real peers: each runs under a watchdog that cuts it off at ``--cap``."""

CAP = 20.0
"""Real seconds after which a socket case is cut off (``--cap``): one that holds time for as
long as its virtual sleeps say would otherwise take minutes."""


# ------------------------------------------------------------------------------ harness


def run_case(key: str) -> tuple[Result, float]:
    case = CASES[key][1]
    start = time.monotonic()
    outcome = case()
    if not inspect.iscoroutine(outcome):
        result = outcome
    elif key in SOCKET_CASES:
        result, _ = peers.bounded_run(outcome, CAP)
    else:
        result = virtualtime.run(outcome)
    assert isinstance(result, tuple)
    return result, time.monotonic() - start


def start_peers() -> None:
    """Start every peer before the first case, so that no case's time includes a start-up."""
    for kind in ("thread", "process", "tls-thread", "tls-process", "redis", "mqtt"):
        try:
            PEERS.port(kind)
        except Exception as error:  # no redis-server: its case will say so
            print(f"peer {kind}: {type(error).__name__}: {error}", file=sys.stderr)


def idle_round_cost(others: int, rounds: int = 3000) -> float:
    """Real microseconds per idle round with ``others`` other threads, one of which spoke."""
    release = threading.Event()

    async def main() -> float:
        loop = asyncio.get_running_loop()
        threads = [
            threading.Thread(
                target=(lambda: (loop.call_soon_threadsafe(int), release.wait()))
                if i == 0
                else release.wait
            )
            for i in range(others)
        ]
        for thread in threads:
            thread.start()
        await asyncio.sleep(1)  # past the new threads' grace
        start = time.perf_counter()
        for _ in range(rounds):
            await asyncio.sleep(1)
        elapsed = time.perf_counter() - start
        release.set()
        for thread in threads:
            thread.join()
        return elapsed

    return virtualtime.run(main()) / rounds * 1e6


def cell(key: str) -> str:
    """Run one case; its table cell."""
    start = time.monotonic()
    try:
        (lost, total), real = run_case(key)
    except peers.TooSlow:
        return f"cut off at {CAP:g} s"
    except Exception as error:  # the case itself failed: say how, go on
        return f"{type(error).__name__}, {time.monotonic() - start:.2f} s"
    text = f"{lost}/{total}, {real:.2f} s" if total else f"{real:.2f} s"
    if key in VIRTUAL_SECONDS:
        text += f" ({real / VIRTUAL_SECONDS[key] * 3600:.2f} s/virtual h)"
    return text


def main() -> None:
    global CAP
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", type=int, nargs="+", default=[0, 2, 4])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument(
        "--cap", type=float, default=CAP, help="real seconds before a socket case is cut off"
    )
    args = parser.parse_args()
    CAP = args.cap
    keys = [key for key in args.cases.split(",") if key]
    unknown = [key for key in keys if key not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {unknown!r}; known: {', '.join(CASES)}")
    cells: dict[tuple[str, int], str] = {}
    with PEERS.stack:
        if SOCKET_CASES.intersection(keys):
            start_peers()
        for load in args.loads:
            with peers.busy_processes(load):
                for key in keys:
                    print(f"load {load}: {key}", file=sys.stderr)
                    cells[key, load] = cell(key)
    print(f"- machine: {os.cpu_count()} cores; Python {sys.version.split()[0]}")
    print(f"- command: `{' '.join([Path(sys.executable).name, *sys.argv])}`")
    print()
    print("| case | " + " | ".join(f"{load} busy" for load in args.loads) + " |")
    print("|---|" + "---|" * len(args.loads))
    for key in keys:
        row = " | ".join(cells[key, load] for load in args.loads)
        print(f"| {CASES[key][0]} | {row} |")
    print()
    print(
        "Lost answers out of total (spurious timeouts, false DeadlockErrors, a killed peer's "
        "close seen after time moved), real seconds; for the socket idle cases also real "
        f"seconds per virtual hour; a socket case still running after {CAP:g} real seconds is "
        "cut off."
    )
    print()
    for others in (1, 10):
        print(
            f"- idle round with {others} other thread(s), one of which spoke to the loop: "
            f"{idle_round_cost(others):.1f} µs"
        )


if __name__ == "__main__":
    main()
