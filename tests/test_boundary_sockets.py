"""The boundary with real peers on 127.0.0.1: decided by what the machine knows (issue 35).

The asyncio virtual loop at its default options, against real peers: a server in another
process and a server in another thread of this process (its own plain asyncio loop), plain
and TLS, a real ``redis-server``, a peer process killed mid-read, a pty.  Two promises are
checked, each many times over to catch races:

* **a real answer never loses to a virtual timeout** -- back-to-back requests on one kept-alive
  connection (raw streams, httpx, aiohttp, TLS), an answer split by the peer's own work, a
  CPU-bound peer on a loaded machine, bytes through a pty -- and virtual time stands still
  while the answer is on its way (it moves by far less than the real time spent, if at all);
  a peer killed while we read from it is seen closing at the virtual instant of the kill;
* **an idle outside world costs no real time** -- a message sent to a peer that reads it and
  never answers, an idle keep-alive connection, a wait for a push that never comes (anyio,
  httpx), a redis poll, pings far apart: a long virtual wait takes (almost) no real time.

Peers may sleep and burn CPU (they are the outside world); the test process never sleeps to
wait for anything.  A case that would hold time for minutes is cut off by a watchdog
(:func:`_peers_helpers.bounded_run`) and fails at once, saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import _peers_helpers as peers
import aiohttp
import anyio
import httpx
import pytest
import trustme


def now() -> float:
    return asyncio.get_running_loop().time()


# ------------------------------------------------------------------ peers


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[ssl.SSLContext, ssl.SSLContext, Path]:
    """A throw-away CA: the server's context, the client's, and the server's PEM file."""
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    pem = tmp_path_factory.mktemp("tls") / "server.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(pem))
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return peers.server_tls(pem), client, pem


@pytest.fixture(scope="module")
def plain() -> Iterator[dict[str, int]]:
    """A plain peer in another thread and one in another process: their ports by kind."""
    with peers.peer("thread") as in_thread, peers.peer("process") as in_process:
        yield {"thread": in_thread, "process": in_process}


@pytest.fixture(scope="module")
def secure(tls: tuple[ssl.SSLContext, ssl.SSLContext, Path]) -> Iterator[dict[str, int]]:
    """TLS peers, in another thread and in another process."""
    server, _, pem = tls
    with peers.peer("thread", tls=server) as in_thread, peers.peer("process", pem=pem) as proc:
        yield {"thread": in_thread, "process": proc}


@pytest.fixture(scope="module")
def redis_port() -> Iterator[int]:
    with peers.service_or_skip(peers.redis_server()) as port:
        yield port


Outcome = tuple[int, int, float]
"""(answered, timed out, virtual seconds the run took)."""


def _still(outcome: Outcome, real: float, total: int) -> None:
    """Every answer arrived, none timed out, and virtual time stood (almost) still."""
    answered, timeouts, virtual = outcome
    assert (answered, timeouts) == (total, 0)
    assert virtual <= real / 10, f"virtual time moved {virtual} s in {real:.3f} real s"


# ----------------------------------------------------- back-to-back requests


async def _lines(
    port: int,
    request: bytes,
    expected: list[bytes],
    repeats: int,
    ssl_context: ssl.SSLContext | None = None,
) -> Outcome:
    """``repeats`` requests on one connection, each under a fresh ``asyncio.timeout(5)``."""
    answered = timeouts = 0
    if ssl_context is None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    else:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=ssl_context, server_hostname="localhost"
        )
    start = now()
    try:
        for _ in range(repeats):
            try:
                async with asyncio.timeout(5):
                    writer.write(request)
                    await writer.drain()
                    lines = [await reader.readline() for _ in expected]
                assert lines == expected
                answered += 1
            except TimeoutError:
                timeouts += 1
                # The answer is still on its way: take it in, so the next request is in step.
                await _drain_answer(reader, expected)
    finally:
        writer.close()
        await writer.wait_closed()
    return answered, timeouts, now() - start


async def _drain_answer(reader: asyncio.StreamReader, expected: list[bytes]) -> None:
    """After a timeout: read until the answer's last line (however much of it was read)."""
    while (await reader.readline()) not in (expected[-1], b""):
        pass


@pytest.mark.parametrize("work", ["cpu", "sleep", "async"])
@pytest.mark.parametrize("where", ["thread", "process"])
def test_back_to_back_requests_on_one_connection_never_time_out(
    plain: dict[str, int], where: str, work: str
) -> None:
    # Each answer takes 50 ms of the peer's own work: CPU, a blocking sleep, an asyncio sleep.
    outcome, real = peers.bounded_run(
        _lines(plain[where], f"{work} 50\n".encode(), [b"ok 50\n"], 10), limit=10
    )
    _still(outcome, real, 10)


def test_answers_after_300_ms_of_a_sleeping_peer_never_time_out(plain: dict[str, int]) -> None:
    outcome, real = peers.bounded_run(
        _lines(plain["process"], b"sleep 300\n", [b"ok 300\n"], 4), limit=10
    )
    _still(outcome, real, 4)


@pytest.mark.parametrize("work", ["sleep", "async"])
def test_another_threads_ticks_are_not_a_sleeping_thread_peers_answer(
    plain: dict[str, int], work: str
) -> None:
    # The peer in another thread sleeps 400 ms before each answer while a third thread wakes
    # every 20 ms (a heartbeat).  The heartbeat's work is not the peer waking: seen once, then
    # quiet, it must not pass for the peer having woken and slept again with nothing to say.
    stop = threading.Event()

    def heartbeat() -> None:
        while not stop.wait(0.02):  # real-time: the heartbeat's period
            sum(range(20_000))  # a tick's worth of work

    thread = threading.Thread(target=heartbeat)
    thread.start()
    try:
        outcome, real = peers.bounded_run(
            _lines(plain["thread"], f"{work} 400\n".encode(), [b"ok 400\n"], 3), limit=10
        )
    finally:
        stop.set()
        thread.join()
    _still(outcome, real, 3)


def test_httpx_keep_alive_requests_to_a_process_never_time_out(plain: dict[str, int]) -> None:
    async def main() -> Outcome:
        answered = timeouts = 0
        url = f"http://127.0.0.1:{plain['process']}/sleep/50"
        async with httpx.AsyncClient() as client:
            await client.get(url)  # the connection is open and kept alive from here on
            start = now()
            for _ in range(10):
                try:
                    async with asyncio.timeout(5):
                        response = await client.get(url)
                    assert response.text == "ok 50"
                    answered += 1
                except TimeoutError:
                    timeouts += 1
        return answered, timeouts, now() - start

    outcome, real = peers.bounded_run(main(), limit=10)
    _still(outcome, real, 10)


def test_aiohttp_keep_alive_requests_to_a_process_never_time_out(plain: dict[str, int]) -> None:
    async def main() -> Outcome:
        answered = timeouts = 0
        url = f"http://127.0.0.1:{plain['process']}/cpu/50"
        async with aiohttp.ClientSession() as session:
            start = now()
            for _ in range(10):
                try:
                    async with asyncio.timeout(5), session.get(url) as response:
                        assert await response.text() == "ok 50"
                    answered += 1
                except TimeoutError:
                    timeouts += 1
            connector = session.connector
            assert connector is not None
            assert sum(len(idle) for idle in connector._conns.values()) == 1  # one connection
        return answered, timeouts, now() - start

    outcome, real = peers.bounded_run(main(), limit=10)
    _still(outcome, real, 10)


# --------------------------------------------------------------------- TLS


@pytest.mark.parametrize("where", ["thread", "process"])
def test_back_to_back_requests_over_tls_never_time_out(
    tls: tuple[ssl.SSLContext, ssl.SSLContext, Path], secure: dict[str, int], where: str
) -> None:
    # Five connections, four requests each: a TLS 1.3 server sends its session tickets after
    # the handshake, and they may arrive while the first request waits -- they answer nothing.
    _, client, _ = tls

    async def main() -> Outcome:
        answered = timeouts = 0
        virtual = 0.0
        for _ in range(5):
            one = await _lines(secure[where], b"cpu 50\n", [b"ok 50\n"], 4, client)
            answered, timeouts, virtual = answered + one[0], timeouts + one[1], virtual + one[2]
        return answered, timeouts, virtual

    outcome, real = peers.bounded_run(main(), limit=10)
    _still(outcome, real, 20)


# ----------------------------------------------------------- split answers


@pytest.mark.parametrize("where", ["thread", "process"])
def test_an_answer_split_by_the_peers_work_never_times_out(
    plain: dict[str, int], where: str
) -> None:
    # The peer sends the first line at once, then works 50 ms on the CPU, then sends the rest:
    # the first part answers nothing yet -- the peer is still working on the answer.
    outcome, real = peers.bounded_run(
        _lines(plain[where], b"split 50\n", [b"head\n", b"body\n"], 20), limit=10
    )
    _still(outcome, real, 20)


def test_a_chunked_answer_with_work_between_the_parts_never_times_out(
    plain: dict[str, int],
) -> None:
    # Server-sent-events-like: the headers at once, then three events, each after 50 ms of
    # the peer's CPU work, then the end of the stream.
    async def main() -> Outcome:
        answered = timeouts = 0
        url = f"http://127.0.0.1:{plain['process']}/chunked/3/50"
        expected = "".join(f"data: part {i}\n\n" for i in range(3))
        async with aiohttp.ClientSession() as session:
            start = now()
            for _ in range(10):
                try:
                    async with asyncio.timeout(5), session.get(url) as response:
                        assert await response.text() == expected
                    answered += 1
                except TimeoutError:
                    timeouts += 1
        return answered, timeouts, now() - start

    outcome, real = peers.bounded_run(main(), limit=10)
    _still(outcome, real, 10)


# ----------------------------------------------------- a loaded machine


def test_a_cpu_bound_peer_process_never_loses_while_busy_processes_load_every_core(
    plain: dict[str, int],
) -> None:
    # Each answer needs 50 ms of the peer's CPU, and the peer has to fight for it.
    with peers.busy_processes(os.cpu_count() or 2):
        outcome, real = peers.bounded_run(
            _lines(plain["process"], b"cpu 50\n", [b"ok 50\n"], 20), limit=20
        )
    _still(outcome, real, 20)


# ------------------------------------------------------ a peer killed


async def _read_until_killed(idle: bool) -> tuple[float, float, bytes | str]:
    """Read from a peer process while it is killed: (virtual time of the kill, of the end)."""
    proc, port = peers.start_killable()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await reader.readline() == b"ready\n"
        sleeper = asyncio.create_task(asyncio.sleep(1000))  # a timer time could jump to
        if idle:
            await asyncio.sleep(10)  # long after the hello: the connection is quiet
        else:
            writer.write(b"a request it reads and never answers\n")
            await writer.drain()
        reading = asyncio.create_task(reader.read(100))
        await asyncio.sleep(0)  # the read has begun: it waits for data
        killed_at = now()
        proc.kill()
        try:
            got: bytes | str = await reading
        except ConnectionResetError:
            got = "reset"
        seen_at = now()
        sleeper.cancel()
        writer.close()
        with contextlib.suppress(ConnectionError):  # the peer is gone: closing may say so
            await writer.wait_closed()
    finally:
        proc.kill()
        proc.wait()
    return killed_at, seen_at, got


@pytest.mark.parametrize("idle", [False, True], ids=["owing", "idle"])
def test_a_peer_killed_while_we_read_is_seen_closing_at_the_instant_of_the_kill(
    idle: bool,
) -> None:
    # "owing": we sent a request it never answered; "idle": we only wait for it to speak.
    seen: list[tuple[float, float, bytes | str]] = []
    for _ in range(20):
        result, _ = peers.bounded_run(_read_until_killed(idle), limit=10)
        seen.append(result)
    late = [(killed, closed) for killed, closed, _ in seen if closed != killed]
    assert late == [], f"{len(late)} of 20 saw the close after time moved: {late[:3]}"
    assert {got for _, _, got in seen} <= {b"", "reset"}


# ------------------------------------------------------------------- a pty


class _Collect(asyncio.Protocol):
    def __init__(self) -> None:
        self.data: asyncio.Queue[bytes] = asyncio.Queue()

    def data_received(self, data: bytes) -> None:
        self.data.put_nowait(data)


async def _through_pty(
    ptys: int, trials: int, write: queue.SimpleQueue[bytes | None] | None
) -> Outcome:
    """Bytes written to a pty's slave (by the loop, or by a thread fed through ``write``),
    read from its master through the loop, each under ``asyncio.timeout(1)``: ``trials``
    times on each of ``ptys`` fresh ptys (how quickly a pty delivers varies from one to the
    next)."""
    import tty

    loop = asyncio.get_running_loop()
    answered = timeouts = 0
    start = now()
    for _ in range(ptys):
        master, slave = os.openpty()
        tty.setraw(slave)
        transport, protocol = await loop.connect_read_pipe(
            _Collect, os.fdopen(master, "rb", buffering=0)
        )
        try:
            for i in range(trials):
                byte = b"%c" % (65 + i % 26)
                if write is None:
                    os.write(slave, byte)
                else:
                    write.put(slave.to_bytes(4, "little") + byte)
                try:
                    async with asyncio.timeout(1):
                        got = await protocol.data.get()
                    assert got == byte
                    answered += 1
                except TimeoutError:
                    timeouts += 1
                    assert await protocol.data.get() == byte  # it does arrive, later
        finally:
            transport.close()
            os.close(slave)
    return answered, timeouts, now() - start


def test_bytes_written_to_a_pty_by_the_loop_arrive_before_a_timeout() -> None:
    outcome, real = peers.bounded_run(_through_pty(40, 50, None), limit=10)
    _still(outcome, real, 2000)


def test_bytes_written_to_a_pty_by_another_thread_arrive_before_a_timeout() -> None:
    # The writer thread runs all along (started before the loop) and never speaks to the
    # loop: it only writes to the slave what the loop asks it to.
    requests: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()

    def writer() -> None:
        while (item := requests.get()) is not None:
            os.write(int.from_bytes(item[:4], "little"), item[4:])

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        outcome, real = peers.bounded_run(_through_pty(10, 30, requests), limit=10)
    finally:
        requests.put(None)
        thread.join()
    _still(outcome, real, 300)


# ------------------------------------------------------------ idle waits


@pytest.mark.parametrize("where", ["thread", "process"])
def test_a_message_to_a_peer_that_never_answers_then_a_long_sleep_is_fast(
    plain: dict[str, int], where: str
) -> None:
    # Fire and forget (an MQTT QoS 0 publish): the peer reads the message and owes nothing.
    async def main() -> tuple[float, bytes]:
        reader, writer = await asyncio.open_connection("127.0.0.1", plain[where])
        writer.write(b"sink a published message\n")
        await writer.drain()
        await asyncio.sleep(120)
        slept_to = now()
        writer.write(b"echo still here\n")  # the connection is alive, and in step
        async with asyncio.timeout(5):
            answer = await reader.readline()
        writer.close()
        await writer.wait_closed()
        return slept_to, answer

    result, real = peers.bounded_run(main(), limit=2)
    assert result == (120.0, b"still here\n")
    assert real <= 1.0


def test_an_idle_keep_alive_connection_after_an_answer_does_not_hold_time(
    plain: dict[str, int],
) -> None:
    async def main() -> tuple[str, str, float]:
        url = f"http://127.0.0.1:{plain['process']}/cpu/0"
        async with aiohttp.ClientSession() as session:
            async with session.get(url) as response:
                first = await response.text()
            await asyncio.sleep(600)  # the connection waits in the pool, idle
            async with asyncio.timeout(5), session.get(url) as response:
                second = await response.text()
        return first, second, now()

    result, real = peers.bounded_run(main(), limit=2)
    assert result == ("ok 0", "ok 0", 600.0)
    assert real <= 0.5


def test_an_anyio_wait_for_a_push_that_never_comes_costs_no_real_time(
    plain: dict[str, int],
) -> None:
    async def main() -> tuple[bytes, bool, float, float]:
        async with await anyio.connect_tcp("127.0.0.1", plain["process"]) as stream:
            await stream.send(b"echo hi\n")
            with anyio.fail_after(5):
                answer = await stream.receive()
            virtual, real = now(), time.perf_counter()
            with anyio.move_on_after(3) as scope:
                await stream.receive()  # a push from the peer that never comes
            return answer, scope.cancelled_caught, now() - virtual, time.perf_counter() - real

    (answer, idle, virtual, real), _ = peers.bounded_run(main(), limit=1)
    assert (answer, idle, virtual) == (b"hi\n", True, 3.0)
    assert real <= 0.05


def test_an_httpx_wait_for_the_next_event_that_never_comes_costs_no_real_time(
    plain: dict[str, int],
) -> None:
    async def main() -> tuple[bytes, bool, float, float]:
        async with (
            httpx.AsyncClient() as client,
            client.stream("GET", f"http://127.0.0.1:{plain['process']}/push") as response,
        ):
            events = response.aiter_raw()
            with anyio.fail_after(5):
                first = await anext(events)
            virtual, real = now(), time.perf_counter()
            with anyio.move_on_after(3) as scope:
                await anext(events)  # the next event never comes
            return first, scope.cancelled_caught, now() - virtual, time.perf_counter() - real

    (first, idle, virtual, real), _ = peers.bounded_run(main(), limit=1)
    assert (first, idle, virtual) == (b"data: hello\n\n", True, 3.0)
    assert real <= 0.05


def test_a_redis_poll_every_half_second_for_ten_virtual_minutes_is_fast(redis_port: int) -> None:
    import redis.asyncio

    async def main() -> tuple[int, float]:
        client = redis.asyncio.Redis(port=redis_port)
        polls = 0
        try:
            await client.set("polled", "x")
            while now() < 600:
                assert await client.get("polled") == b"x"
                polls += 1
                await asyncio.sleep(0.5)
        finally:
            await client.aclose()
        return polls, now()

    result, real = peers.bounded_run(main(), limit=3)
    assert result == (1200, 600.0)
    assert real <= 2.0


def test_thirty_pings_twenty_virtual_seconds_apart_are_fast(plain: dict[str, int]) -> None:
    # A websocket-like keep-alive: a ping, its pong, then a long quiet gap.
    async def main() -> tuple[int, float]:
        reader, writer = await asyncio.open_connection("127.0.0.1", plain["process"])
        pongs = 0
        for i in range(30):
            writer.write(b"echo pong %d\n" % i)
            async with asyncio.timeout(5):
                assert await reader.readline() == b"pong %d\n" % i
            pongs += 1
            await asyncio.sleep(20)
        writer.close()
        await writer.wait_closed()
        return pongs, now()

    result, real = peers.bounded_run(main(), limit=2)
    assert result == (30, 600.0)
    assert real <= 1.0
