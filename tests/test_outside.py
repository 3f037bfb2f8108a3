"""The outside world at the default options: real peers never lose to a virtual timeout.

Every peer here is real and on 127.0.0.1: an HTTP server in another thread and in another
process, a real ``redis-server``, TLS with a throw-away CA, child processes with and without
pipes, a real interval timer.  Each test asserts that the answer arrived, at the virtual time
the rule promises (time stands still while outside work is pending), with no spurious
timeout -- many times over, to catch races -- and that idle connections do not hold time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import math
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _peers_helpers as peers
import aiohttp
import aiohttp.web
import httpx
import peer_server
import pytest
import trustme

import virtualtime

HERE = Path(__file__).parent


def now() -> float:
    return asyncio.get_running_loop().time()


# ------------------------------------------------------------------ peers


@pytest.fixture(scope="module")
def thread_server() -> Iterator[int]:
    server, thread = peer_server.start_in_thread()
    yield server.server_address[1]
    server.shutdown()
    thread.join()
    server.server_close()


@pytest.fixture(scope="module")
def process_server() -> Iterator[int]:
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "peer_server.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdin is not None
    port = int(proc.stdout.readline())
    yield port
    proc.stdin.close()
    proc.wait(timeout=10)
    proc.stdout.close()


@pytest.fixture(scope="module")
def redis_port() -> Iterator[int]:
    with peers.service_or_skip(peers.redis_server()) as port:
        yield port


# ------------------------------------------------------- thread and process


async def _many_requests(port: int, n: int) -> tuple[int, int, float]:
    """n requests over one keep-alive session, a 5 s timeout each: (answered, timeouts, t)."""
    answered = timeouts = 0
    timeout = aiohttp.ClientTimeout(total=5)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for i in range(n):
            try:
                async with session.get(f"http://127.0.0.1:{port}/ms/{i % 3}") as response:
                    assert await response.text() == f"ok {i % 3}"
                    answered += 1
            except TimeoutError:
                timeouts += 1
    return answered, timeouts, now()


def test_500_requests_to_a_server_in_a_thread_never_time_out(thread_server: int) -> None:
    # Time stands still while each request is in flight: every answer comes at t=0.
    assert virtualtime.run(_many_requests(thread_server, 500)) == (500, 0, 0.0)


def test_500_requests_to_a_server_in_a_process_never_time_out(process_server: int) -> None:
    async def main() -> tuple[int, int, float]:
        answered = timeouts = 0
        async with httpx.AsyncClient(timeout=5) as client:
            for i in range(500):
                try:
                    response = await client.get(f"http://127.0.0.1:{process_server}/ms/{i % 2}")
                    assert response.text == f"ok {i % 2}"
                    answered += 1
                except httpx.TimeoutException:
                    timeouts += 1
        return answered, timeouts, now()

    assert virtualtime.run(main()) == (500, 0, 0.0)


def test_an_idle_keep_alive_connection_does_not_hold_time(thread_server: int) -> None:
    async def main() -> tuple[float, int]:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{thread_server}/ms/0") as response:
                await response.read()
            await asyncio.sleep(3600)  # the connection stays open in the pool, idle
            connector = session.connector
            assert connector is not None
            return now(), len(connector._conns)  # one idle pooled connection

    t0 = time.perf_counter()
    assert virtualtime.run(main()) == (3600.0, 1)
    assert time.perf_counter() - t0 < 0.5


def test_a_peer_blocked_reading_from_us_lets_the_timeout_fire_without_waiting(
    thread_server: int,
) -> None:
    # The peer's handler thread blocks in read() on our connection, with no timeout: the
    # kernel says it cannot answer before we speak again, so nothing holds time.
    async def main() -> float:
        timeout = aiohttp.ClientTimeout(total=0.2)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            with pytest.raises(TimeoutError):
                await session.get(f"http://127.0.0.1:{thread_server}/never")
        return now()

    t0 = time.perf_counter()
    assert virtualtime.run(main()) == 0.2
    assert time.perf_counter() - t0 < 0.15


def test_a_timer_keeps_real_pace_while_a_request_is_in_flight(thread_server: int) -> None:
    async def main() -> list[str]:
        order: list[str] = []

        async def ticker() -> None:
            await asyncio.sleep(0.01)
            order.append(f"tick {now()}")

        async with aiohttp.ClientSession() as session:
            task = asyncio.create_task(ticker())
            async with session.get(f"http://127.0.0.1:{thread_server}/ms/100") as response:
                order.append(f"{await response.text()} at {now()}")
            await task
        return order

    # The 10 ms tick fires once 10 ms have really passed: long before the 100 ms answer.
    assert virtualtime.run(main()) == ["tick 0.01", "ok 100 at 0.01"]


def test_the_first_connect_of_a_fresh_loop_never_loses(thread_server: int) -> None:
    async def main() -> float:
        async with asyncio.timeout(0.1):
            _, writer = await asyncio.open_connection("127.0.0.1", thread_server)
        writer.close()
        await writer.wait_closed()
        return now()

    for _ in range(100):
        assert virtualtime.run(main()) == 0.0


# ------------------------------------------------------------------- redis


def test_500_redis_commands_at_default_settings(redis_port: int) -> None:
    import redis.asyncio

    async def main() -> tuple[int, int, float]:
        ok = errors = 0
        client = redis.asyncio.Redis(port=redis_port)
        try:
            for i in range(500):
                try:
                    await client.set(f"k{i}", i)
                    assert await client.get(f"k{i}") == str(i).encode()
                    ok += 1
                except (redis.exceptions.TimeoutError, TimeoutError):
                    errors += 1
        finally:
            await client.aclose()
        return ok, errors, now()

    assert virtualtime.run(main()) == (500, 0, 0.0)


def test_redis_with_a_short_socket_timeout_and_a_ttl(redis_port: int) -> None:
    import redis.asyncio

    async def main() -> tuple[int, object, float]:
        client = redis.asyncio.Redis(port=redis_port, socket_timeout=1)
        errors = 0
        try:
            for _ in range(200):
                try:
                    await client.incr("counter")
                except (redis.exceptions.TimeoutError, TimeoutError):
                    errors += 1
            await client.set("session", "x")
            # A virtual hour while the idle connection stays open: instant.
            await asyncio.sleep(3600)
            return errors, await client.get("session"), now()
        finally:
            await client.delete("counter", "session")
            await client.aclose()

    t0 = time.perf_counter()
    assert virtualtime.run(main()) == (0, b"x", 3600.0)
    assert time.perf_counter() - t0 < 2.0


def test_a_subscribed_pubsub_channel_does_not_hold_time(redis_port: int) -> None:
    import redis.asyncio

    async def main() -> tuple[object, float]:
        client = redis.asyncio.Redis(port=redis_port)
        pubsub = client.pubsub()
        try:
            await pubsub.subscribe("news")
            confirmation = await pubsub.get_message(timeout=5)
            await asyncio.sleep(3600)
            await client.publish("news", "hello")
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=5)
            assert message is not None
            return message["data"], now()
        finally:
            assert confirmation is not None
            # redis < 8.2 leaves PubSub.aclose unannotated, 8.2 annotates it: called through
            # Any, the check passes on both.
            closer: Any = pubsub
            await closer.aclose()
            await client.aclose()

    t0 = time.perf_counter()
    assert virtualtime.run(main()) == (b"hello", 3600.0)
    assert time.perf_counter() - t0 < 1.0


# --------------------------------------------------------------------- TLS


@pytest.fixture(scope="module")
def tls() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return server, client


@pytest.fixture(scope="module")
def tls_thread_server(tls: tuple[ssl.SSLContext, ssl.SSLContext]) -> Iterator[int]:
    """A TLS echo server in a thread: reads a line, answers it upper-cased, closes."""
    server_ctx, _ = tls
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve_one(conn: socket.socket) -> None:
        with contextlib.suppress(OSError), server_ctx.wrap_socket(conn, server_side=True) as tls:
            line = tls.makefile("rb").readline()
            tls.sendall(line.upper())
            with contextlib.suppress(ssl.SSLError, OSError):
                tls.unwrap()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept(); close() alone does not
    listener.close()
    thread.join()


def test_tls_handshakes_and_shutdowns_with_a_thread_server(
    tls: tuple[ssl.SSLContext, ssl.SSLContext], tls_thread_server: int
) -> None:
    _, client_ctx = tls

    async def main() -> tuple[int, float]:
        answered = 0
        for i in range(100):
            async with asyncio.timeout(5):
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", tls_thread_server, ssl=client_ctx, server_hostname="localhost"
                )
                writer.write(b"hello %d\n" % i)
                assert await reader.readline() == b"HELLO %d\n" % i
                writer.close()
                await writer.wait_closed()
                answered += 1
        return answered, now()

    assert virtualtime.run(main()) == (100, 0.0)


def test_tls_with_both_ends_in_the_loop_stays_instant(
    tls: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    server_ctx, client_ctx = tls

    async def main() -> tuple[int, float]:
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while line := await reader.readline():
                writer.write(line)
                await writer.drain()
            writer.close()
            await writer.wait_closed()

        server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]
        count = 0
        async with server:
            for _ in range(20):
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", port, ssl=client_ctx, server_hostname="localhost"
                )
                for j in range(5):
                    writer.write(b"x%d\n" % j)
                    assert await asyncio.wait_for(reader.readline(), 30) == b"x%d\n" % j
                    count += 1
                writer.close()
                await writer.wait_closed()
                await asyncio.sleep(60)  # a minute between clients, instant
        return count, now()

    t0 = time.perf_counter()
    assert virtualtime.run(main()) == (100, 1200.0)
    assert time.perf_counter() - t0 < 3.0


def test_start_tls_with_both_ends_in_the_loop_does_not_jump_to_the_shutdown_timeout(
    tls: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    # CPython's test_streams test_start_tls: a plain connection upgraded to TLS; the server's
    # accepted socket has no TCP_NODELAY, so the kernel may hold the last record back.
    server_ctx, client_ctx = tls

    async def main() -> tuple[bytes, float]:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 0)
            assert await reader.readline() == b"upgrade\n"
            writer.write(b"ok\n")
            await writer.drain()
            await writer.start_tls(server_ctx)
            writer.write((await reader.readline()).upper())
            await writer.drain()
            writer.close()
            await writer.wait_closed()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"upgrade\n")
            assert await reader.readline() == b"ok\n"
            await writer.start_tls(client_ctx, server_hostname="localhost")
            writer.write(b"secret\n")
            answer = await reader.readline()
            writer.close()
            await writer.wait_closed()
        return answer, now()

    for _ in range(20):
        assert virtualtime.run(main()) == (b"SECRET\n", 0.0)


# ---------------------------------------------------------------- children

_SLOW_CHILD = "import time; time.sleep(0.1); print('bye')"  # real-time: the child's own work


def test_communicate_with_a_child_under_wait_for() -> None:
    async def main() -> tuple[bytes, float]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _SLOW_CHILD, stdout=asyncio.subprocess.PIPE
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 5)
        return out, now()

    for _ in range(5):
        assert virtualtime.run(main()) == (b"bye\n", 0.0)


def test_stdin_stdout_round_trips_with_a_child() -> None:
    code = "import sys\nfor line in sys.stdin: print(line.strip()[::-1], flush=True)"

    async def main() -> tuple[list[bytes], float]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            code,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert proc.stdin is not None
        assert proc.stdout is not None
        answers = []
        for word in (b"abc", b"virtual", b"time"):
            proc.stdin.write(word + b"\n")
            await proc.stdin.drain()
            answers.append(await asyncio.wait_for(proc.stdout.readline(), 2))
        proc.stdin.close()
        await asyncio.wait_for(proc.wait(), 5)
        return answers, now()

    assert virtualtime.run(main()) == ([b"cba\n", b"lautriv\n", b"emit\n"], 0.0)


def test_waiting_for_a_child_without_pipes_is_not_a_deadlock(tmp_path: Path) -> None:
    async def main() -> tuple[int, float]:
        with (tmp_path / "out.txt").open("wb") as out:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-c", _SLOW_CHILD, stdout=out
            )
            code = await asyncio.wait_for(proc.wait(), 5)
        return code, now()

    assert virtualtime.run(main()) == (0, 0.0)
    assert (tmp_path / "out.txt").read_text() == "bye\n"


def test_a_background_child_nobody_waits_for_does_not_hold_time() -> None:
    async def main() -> tuple[float, int | None]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "import sys; sys.stdin.read()", stdin=asyncio.subprocess.PIPE
        )
        await asyncio.sleep(3600)  # the child runs all along, but nobody waits for it
        returncode = proc.returncode
        assert proc.stdin is not None
        proc.stdin.close()
        await proc.wait()
        return now(), returncode

    t0 = time.perf_counter()
    assert virtualtime.run(main()) == (3600.0, None)
    assert time.perf_counter() - t0 < 1.0


# ------------------------------------------------------------------ alarms


def test_a_real_alarm_beats_a_long_virtual_timer() -> None:
    # CPython's signal tests: a real setitimer alarm against call_later(60, loop.stop).
    async def main() -> tuple[str, float]:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[str] = loop.create_future()
        loop.add_signal_handler(signal.SIGALRM, done.set_result, "alarm")
        timer = loop.call_later(60, done.set_result, "virtual timer")
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.05)
            return await done, now()
        finally:
            timer.cancel()
            signal.setitimer(signal.ITIMER_REAL, 0)
            loop.remove_signal_handler(signal.SIGALRM)

    assert virtualtime.run(main()) == ("alarm", 0.0)


# ----------------------------------------------------------------- threads


def test_a_thread_waiting_for_a_long_virtual_sleep_returns_at_its_instant() -> None:
    async def main() -> tuple[float, float]:
        loop = asyncio.get_running_loop()

        def job() -> float:
            return asyncio.run_coroutine_threadsafe(_sleep_then_now(3600), loop).result()

        inner = await asyncio.wait_for(asyncio.to_thread(job), 7200)
        return inner, now()

    for _ in range(50):
        assert virtualtime.run(main()) == (3600.0, 3600.0)


async def _sleep_then_now(delay: float) -> float:
    await asyncio.sleep(delay)
    return now()


def _slow(seconds: float) -> str:
    time.sleep(seconds)  # real-time: the thread's own work
    return "slow done"


def test_a_thread_job_waiting_on_another_pools_future_holds_time() -> None:
    async def main() -> tuple[str, float]:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:

            def job() -> str:
                return pool.submit(_slow, 0.05).result()

            result = await asyncio.wait_for(asyncio.to_thread(job), 1)
        return result, now()

    assert virtualtime.run(main()) == ("slow done", 0.0)


def test_a_wrapped_executor_future_holds_time() -> None:
    async def main() -> tuple[str, float]:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            wrapped = asyncio.wrap_future(pool.submit(_slow, 0.05))
            result = await asyncio.wait_for(wrapped, 1)
        return result, now()

    assert virtualtime.run(main()) == ("slow done", 0.0)


def test_thousands_of_thread_answers_never_lose_to_a_timeout() -> None:
    # The answer of a finished job must reach the loop before the job stops counting: no
    # moment may look like "no job, nothing ready" while it is in flight.
    async def main() -> tuple[int, float]:
        timeouts = 0
        for i in range(3000):
            try:
                await asyncio.wait_for(asyncio.to_thread(abs, -i), 1)
            except TimeoutError:
                timeouts += 1
        return timeouts, now()

    assert virtualtime.run(main()) == (0, 0.0)


def _blocking_client(port: int, payload: bytes) -> bytes:
    """A client as a test writes one in a plain thread: blocking socket calls, no loop."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(payload)
        return sock.recv(64)


def test_a_client_in_a_new_plain_thread_is_never_overtaken_by_a_timeout() -> None:
    # CPython's test_ssl does this (test_start_tls_server_1): a plain threading.Thread
    # connects to the loop's server while the loop waits under a timeout.  A listening socket
    # is not outside work, so until the connect lands nothing holds time, and the loop used to
    # jump to the timeout first (most runs, without any load on the machine).
    async def main() -> tuple[list[float], list[bytes]]:
        got: asyncio.Queue[bytes] = asyncio.Queue()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            got.put_nowait(await reader.readexactly(5))
            writer.write(b"thanks")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        arrivals: list[float] = []
        replies: list[bytes] = []
        async with server:
            for _ in range(200):
                client = threading.Thread(
                    target=lambda: replies.append(_blocking_client(port, b"hello"))
                )
                client.start()
                async with asyncio.timeout(5):
                    assert await got.get() == b"hello"
                arrivals.append(now())
                await asyncio.to_thread(client.join)
        return arrivals, replies

    arrivals, replies = virtualtime.run(main())
    assert arrivals == [0.0] * 200
    assert replies == [b"thanks"] * 200


def test_only_threads_the_other_rules_do_not_cover_count_as_new() -> None:
    release = threading.Event()
    old = threading.Thread(target=release.wait)
    old.start()  # before the loop: known from the start
    try:

        async def main() -> list[bool]:
            world = asyncio.get_running_loop()._vt_world  # type: ignore[attr-defined]
            seen = [world.thread_started()]  # the thread from before the loop: not new
            await asyncio.to_thread(abs, -1)  # a pool worker starts: jobs cover it
            seen.append(world.thread_started())
            fresh = threading.Thread(target=release.wait)
            fresh.start()
            seen.append(world.thread_started())  # a plain thread: new
            seen.append(world.thread_started())  # and only once
            release.set()
            fresh.join()
            return seen

        assert virtualtime.run(main()) == [False, False, True, False]
    finally:
        release.set()
        old.join()


def test_run_in_executor_does_not_import_multiprocessing_on_the_loop_thread() -> None:
    code = (
        "import asyncio, sys, virtualtime\n"
        "async def main():\n"
        "    await asyncio.get_running_loop().run_in_executor(None, abs, -1)\n"
        "virtualtime.run(main())\n"
        "print('multiprocessing' in sys.modules, 'concurrent.futures.process' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.split() == ["False", "False"]


# --------------------------------------------------------- closed world stays fast


def test_an_in_process_http_server_polled_every_minute_for_an_hour_is_instant() -> None:
    async def main() -> tuple[int, float]:
        async def hello(request: aiohttp.web.Request) -> aiohttp.web.Response:
            return aiohttp.web.Response(text=f"t={now()}")

        app = aiohttp.web.Application()
        app.router.add_get("/", hello)
        runner = aiohttp.web.AppRunner(app)
        await runner.setup()
        site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        polls = 0
        try:
            async with aiohttp.ClientSession() as session:
                while now() < 3600:
                    async with session.get(f"http://127.0.0.1:{port}/") as response:
                        assert await response.text() == f"t={now()}"
                    polls += 1
                    await asyncio.sleep(60)
        finally:
            await runner.cleanup()
        return polls, now()

    t0 = time.perf_counter()
    assert virtualtime.run(main()) == (60, 3600.0)
    assert time.perf_counter() - t0 < 1.0


# ---------------------------------------------------------------- deadlocks


def test_a_listening_server_nobody_connects_to_is_a_deadlock() -> None:
    async def main() -> None:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        async with server:
            await asyncio.get_running_loop().create_future()  # nothing will ever set it

    t0 = time.perf_counter()
    with pytest.raises(virtualtime.DeadlockError) as caught:
        virtualtime.run(main())
    assert time.perf_counter() - t0 < 1.0
    message = str(caught.value)
    assert "listening socket 127.0.0.1:" in message
    assert "(nobody outside is connected)" in message
    assert "main()" in message


def test_a_server_waiting_for_outside_clients_runs_with_deadlock_timeout_inf() -> None:
    async def main() -> tuple[bytes, float]:
        got: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            got.set_result(await reader.readline())
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]

        def client() -> None:
            time.sleep(0.4)  # real-time: a client from outside comes late
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.sendall(b"hi\n")
                sock.recv(1)

        threads.append(threading.Thread(target=client))
        threads[0].start()
        async with server:
            line = await got
        return line, now()

    threads: list[threading.Thread] = []
    assert virtualtime.run(main(), deadlock_timeout=math.inf) == (b"hi\n", 0.0)
    threads[0].join()


def test_a_deadlock_after_the_last_child_ended_is_reported() -> None:
    async def main() -> None:
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
        await proc.wait()
        await asyncio.Event().wait()

    with pytest.raises(virtualtime.DeadlockError, match="Blocked tasks"):
        virtualtime.run(main())


def test_a_deadlock_after_an_outside_connection_closed_is_reported(thread_server: int) -> None:
    async def main() -> None:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{thread_server}/ms/0") as response,
        ):
            await response.read()
        await asyncio.Event().wait()

    t0 = time.perf_counter()
    with pytest.raises(virtualtime.DeadlockError):
        virtualtime.run(main())
    assert time.perf_counter() - t0 < 1.5


def test_an_open_outside_connection_keeps_the_loop_waiting() -> None:
    # An idle connection to an outside peer does not hold time, but the peer may still speak
    # by itself: a program waiting only on it waits (no CPU) instead of a false deadlock.
    listener = socket.create_server(("127.0.0.1", 0))

    def peer() -> None:
        conn, _ = listener.accept()
        with conn:
            time.sleep(0.4)  # real-time: the peer speaks late, unasked, well past the grace
            conn.sendall(b"news\n")
            conn.recv(1)  # until the client closes

    thread = threading.Thread(target=peer)
    thread.start()

    async def main() -> tuple[bytes, float]:
        reader, writer = await asyncio.open_connection(*listener.getsockname())
        line = await reader.readline()
        writer.close()
        await writer.wait_closed()
        return line, now()

    try:
        assert virtualtime.run(main()) == (b"news\n", 0.0)
    finally:
        thread.join()
        listener.close()


def test_a_deadlock_still_raises_quickly_without_outside_work() -> None:
    # The loop runs in this thread, so this thread's CPU time is what a spin would burn: the
    # process's would also count other tests' leftover threads and the collector (CI, 3.14:
    # 0.23 s of process time in a run that did not spin).
    t0 = time.perf_counter()
    cpu0 = time.thread_time()
    with pytest.raises(virtualtime.DeadlockError):
        virtualtime.run(asyncio.Event().wait())
    assert time.perf_counter() - t0 < 1.0
    assert time.thread_time() - cpu0 < 0.2


# ------------------------------------------------------------- anyio portals


def test_a_portal_task_cancelled_right_after_it_started_is_cancelled() -> None:
    # anyio's test_start_task_soon_cancel_immediately: the loop runs in the portal's thread;
    # the main thread starts a task that sleeps, then cancels it at once.  Time must not jump
    # over the sleep between the two calls.
    import anyio
    import anyio.from_thread

    async def nap() -> str:
        await anyio.sleep(10)
        return "slept through"

    cancelled = 0
    for _ in range(100):
        with anyio.from_thread.start_blocking_portal(
            "asyncio", backend_options={"loop_factory": virtualtime.new_event_loop}
        ) as portal:
            future = portal.start_task_soon(nap)
            future.cancel()
            with contextlib.suppress(concurrent.futures.CancelledError):
                future.result()
            cancelled += future.cancelled()
    assert cancelled == 100
