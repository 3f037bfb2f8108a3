"""The outside world on trio: real peers never lose to a virtual timeout, idle ones never hold time.

The rule (``virtualtime.trio`` module docs, "The outside world"): while something outside the
run may still answer -- a worker thread, a child process, a connection to a server in another
thread or process, a connect or TLS handshake in flight -- virtual time does not jump; a
deadline fires only once as much real time has passed as its virtual delay.  Everything whose
both ends are in the run (an in-process server and its client) stays instant.

Every peer here is on 127.0.0.1.  Repeated requests catch races; each test stays well under a
second of real time unless it measures a real timeout on purpose.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import trio

import virtualtime
import virtualtime.trio

REQUESTS = 300


def _echo_forever(conn: socket.socket, delay: float) -> None:
    with conn:
        while True:
            try:
                data = conn.recv(1024)
            except OSError:
                return
            if not data:
                return
            if delay:
                time.sleep(delay)  # real-time: the server thread really takes this long
            conn.sendall(b"re:" + data)


class ThreadServer:
    """A blocking TCP echo server in its own thread ("re:" + request, after ``delay``)."""

    def __init__(self, delay: float = 0.0, context: ssl.SSLContext | None = None) -> None:
        self.delay = delay
        self.context = context
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.port: int = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.context is not None:
                try:
                    conn = self.context.wrap_socket(conn, server_side=True)
                except (OSError, ssl.SSLError):
                    conn.close()
                    continue
            threading.Thread(target=_echo_forever, args=(conn, self.delay), daemon=True).start()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
        self.listener.close()
        self.thread.join(5)


@pytest.fixture
def thread_server() -> Iterator[ThreadServer]:
    server = ThreadServer()
    yield server
    server.close()


_PROCESS_SERVER = """
import socket, sys, threading
listener = socket.create_server(("127.0.0.1", 0), backlog=128)
print(listener.getsockname()[1], flush=True)
def echo(conn):
    with conn:
        while data := conn.recv(1024):
            conn.sendall(b"re:" + data)
while True:
    conn, _ = listener.accept()
    threading.Thread(target=echo, args=(conn,), daemon=True).start()
"""


@pytest.fixture(scope="module")
def process_server() -> Iterator[int]:
    """An echo server in another process; yields its port, stops it by its PID."""
    child = subprocess.Popen(
        [sys.executable, "-c", _PROCESS_SERVER], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        yield port
    finally:
        child.kill()
        child.wait(5)
        if child.stdout is not None:
            child.stdout.close()


async def _ask_many(port: int, count: int, timeout: float) -> tuple[int, float]:
    answered = 0
    for index in range(count):
        with trio.fail_after(timeout):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                await stream.send_all(b"q%d" % index)
                answered += await stream.receive_some(64) == b"re:q%d" % index
    return answered, trio.current_time()


def test_a_server_in_another_thread_never_loses_to_a_virtual_timeout(
    thread_server: ThreadServer,
) -> None:
    # A fresh connection per request: connect, send, answer -- 300 times under fail_after.
    answered, when = virtualtime.trio.run(_ask_many, thread_server.port, REQUESTS, 5.0)
    assert answered == REQUESTS
    assert when == 0.0  # the answers came before any virtual time had to pass


def test_a_server_in_another_process_never_loses_to_a_virtual_timeout(
    process_server: int,
) -> None:
    answered, when = virtualtime.trio.run(_ask_many, process_server, REQUESTS, 5.0)
    assert answered == REQUESTS
    assert when == 0.0


async def _ask_on_one_connection(port: int, count: int) -> int:
    # One kept-alive connection, requests back to back, each under a virtual timeout.
    answered = 0
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        for index in range(count):
            with trio.fail_after(5):
                await stream.send_all(b"k%d" % index)
                answered += await stream.receive_some(64) == b"re:k%d" % index
    return answered


def test_a_slow_server_thread_is_waited_for_in_real_time() -> None:
    # real-time: the thread answers after 20 ms; the 10 ms-virtual ticker below must not
    # push virtual time past the 1 s timeout meanwhile (it may tick in real time).
    server = ThreadServer(delay=0.02)

    async def main() -> tuple[bytes, float]:
        async with trio.open_nursery() as nursery:

            async def ticker() -> None:
                while True:
                    await trio.sleep(0.01)

            nursery.start_soon(ticker)
            with trio.fail_after(1):
                stream = await trio.open_tcp_stream("127.0.0.1", server.port)
                await stream.send_all(b"slow")
                data = await stream.receive_some(64)
            await stream.aclose()
            nursery.cancel_scope.cancel()
        return data, trio.current_time()

    try:
        data, when = virtualtime.trio.run(main)
    finally:
        server.close()
    assert data == b"re:slow"
    assert when < 0.5  # the ticker moved at about real speed, never jumped to the timeout


def test_a_kept_alive_connection_to_another_process(process_server: int) -> None:
    assert virtualtime.trio.run(_ask_on_one_connection, process_server, REQUESTS) == REQUESTS


def test_a_peer_that_never_answers_still_times_out_in_about_real_time() -> None:
    silent = socket.create_server(("127.0.0.1", 0))  # accepts (backlog), never answers

    async def main() -> float:
        stream = await trio.open_tcp_stream("127.0.0.1", silent.getsockname()[1])
        async with stream:
            with pytest.raises(trio.TooSlowError):
                with trio.fail_after(0.1):
                    await stream.receive_some(10)
        return trio.current_time()

    try:
        t0 = time.perf_counter()
        when = virtualtime.trio.run(main)
        elapsed = time.perf_counter() - t0
    finally:
        silent.close()
    assert when == 0.1
    assert 0.09 <= elapsed < 1.0  # real-time: the timeout took about its own length


def test_an_idle_kept_alive_connection_does_not_hold_time(thread_server: ThreadServer) -> None:
    async def main() -> float:
        stream = await trio.open_tcp_stream("127.0.0.1", thread_server.port)
        async with stream:
            await stream.send_all(b"hello")
            assert await stream.receive_some(64) == b"re:hello"
            async with trio.open_nursery() as nursery:
                # A reader that waits for whatever the server might push: idle, not a request.
                nursery.start_soon(stream.receive_some, 64)
                await trio.sleep(3600)
                nursery.cancel_scope.cancel()
        return trio.current_time()

    t0 = time.perf_counter()
    assert virtualtime.trio.run(main) == 3600.0
    assert time.perf_counter() - t0 < 1.0


def test_tls_handshakes_with_a_server_thread_never_time_out() -> None:
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    server = ThreadServer(context=server_context)

    async def main(count: int) -> int:
        answered = 0
        for index in range(count):
            with trio.fail_after(1):
                tcp = await trio.open_tcp_stream("127.0.0.1", server.port)
                stream = trio.SSLStream(tcp, client_context, server_hostname="localhost")
                async with stream:
                    await stream.do_handshake()
                    await stream.send_all(b"t%d" % index)
                    answered += await stream.receive_some(64) == b"re:t%d" % index
        return answered

    try:
        assert virtualtime.trio.run(main, 100) == 100
    finally:
        server.close()


async def _children() -> tuple[int, bytes, float]:
    script = "import time; time.sleep(0.05); print('done')"  # real-time: a child's real work
    nap = "import time; time.sleep(0.05)"  # real-time: the child's own work, 50 ms
    with trio.fail_after(5):
        finished = await trio.run_process([sys.executable, "-c", nap])
    process = await trio.lowlevel.open_process(
        [sys.executable, "-c", script], stdout=subprocess.PIPE
    )
    assert process.stdout is not None
    with trio.fail_after(5):
        output = await process.stdout.receive_some(64)
        await process.wait()
    await process.stdout.aclose()
    return finished.returncode, bytes(output).strip(), trio.current_time()


def test_running_child_processes_never_lose_to_a_virtual_timeout() -> None:
    # Nothing else is pending, so the clock would jump straight to the 5 s timeouts if it did
    # not count the running children as outside work.
    assert virtualtime.trio.run(_children) == (0, b"done", 0.0)


def test_a_child_that_never_ends_still_times_out_in_about_real_time() -> None:
    async def main() -> float:
        process = await trio.lowlevel.open_process(
            [sys.executable, "-c", "input()"], stdin=subprocess.PIPE
        )
        try:
            with pytest.raises(trio.TooSlowError):
                with trio.fail_after(0.2):
                    await process.wait()
        finally:
            process.kill()
            await process.wait()
            assert process.stdin is not None
            await process.stdin.aclose()
        return trio.current_time()

    t0 = time.perf_counter()
    assert virtualtime.trio.run(main) == 0.2
    assert 0.19 <= time.perf_counter() - t0 < 2.0  # real-time: about the timeout's length


def test_worker_threads_never_lose_to_a_virtual_timeout_under_timer_pressure() -> None:
    async def main() -> tuple[int, float]:
        done = 0
        async with trio.open_nursery() as nursery:

            async def ticker() -> None:
                while True:
                    await trio.sleep(0.001)

            nursery.start_soon(ticker)
            for _ in range(500):
                with trio.fail_after(0.05):
                    done += await trio.to_thread.run_sync(sum, range(100)) == 4950
            nursery.cancel_scope.cancel()
        return done, trio.current_time()

    done, when = virtualtime.trio.run(main)
    assert done == 500
    assert when < 5.0


def _blocking_client(port: int, replies: list[bytes]) -> None:
    """A client as a test writes one in a plain thread: blocking socket calls, no trio."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"hello")
        replies.append(sock.recv(64))


def test_a_client_in_a_new_plain_thread_is_never_overtaken_by_a_timeout() -> None:
    # The server waits in accept() on a listening socket (not outside work) under fail_after:
    # until the new thread's connect lands nothing else holds time, and the clock used to jump
    # to the deadline first.
    async def main() -> tuple[list[float], list[bytes], list[bytes]]:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        arrivals: list[float] = []
        got: list[bytes] = []
        replies: list[bytes] = []
        for _ in range(200):
            client = threading.Thread(target=_blocking_client, args=(port, replies))
            client.start()
            with trio.fail_after(5):
                stream = await listeners[0].accept()
                got.append(await stream.receive_some(5))
                arrivals.append(trio.current_time())
                await stream.send_all(b"thanks")
                await stream.aclose()
            await trio.to_thread.run_sync(client.join)
        await listeners[0].aclose()
        return arrivals, got, replies

    arrivals, got, replies = virtualtime.trio.run(main)
    assert arrivals == [0.0] * 200
    assert got == [b"hello"] * 200
    assert replies == [b"thanks"] * 200


def test_a_timer_set_while_a_thread_job_runs_still_fires() -> None:
    # The thread waits for something only trio does after a virtual 0.1 s: the sleep must
    # fire (after about 0.1 s of real time), not wait for the thread for ever.
    release = threading.Event()

    async def main() -> float:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(trio.to_thread.run_sync, release.wait))
            await trio.sleep(0.1)
            release.set()
        return trio.current_time()

    t0 = time.perf_counter()
    assert virtualtime.trio.run(main) == 0.1
    assert 0.09 <= time.perf_counter() - t0 < 1.0  # real-time: the delay's own length


# ----------------------------------------------------------- in-process peers stay instant


async def _poll_in_process_server_for_an_hour() -> list[float]:
    async def handler(stream: trio.SocketStream) -> None:
        async for data in stream:
            await stream.send_all(b"re:" + data)

    seen = []
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            for _ in range(61):
                with trio.fail_after(1):
                    await stream.send_all(b"q")
                    assert await stream.receive_some(8) == b"re:q"
                seen.append(trio.current_time())
                await trio.sleep(60)
        nursery.cancel_scope.cancel()
    return seen


def test_an_in_process_server_and_its_client_stay_instant() -> None:
    t0 = time.perf_counter()
    seen = virtualtime.trio.run(_poll_in_process_server_for_an_hour)
    assert time.perf_counter() - t0 < 0.5
    assert seen == [60.0 * minute for minute in range(61)]


async def _first_connect(port: int) -> bool:
    with trio.fail_after(0.1):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.aclose()
    return True


def test_the_first_loopback_connect_of_a_fresh_run_is_never_overtaken(
    thread_server: ThreadServer,
) -> None:
    assert all(virtualtime.trio.run(_first_connect, thread_server.port) for _ in range(50))


def test_httpx_against_an_in_process_server_measures_the_exact_delay() -> None:
    httpx = pytest.importorskip("httpx")

    async def main() -> tuple[str, float]:
        async def handler(stream: trio.SocketStream) -> None:
            request = b""
            while b"\r\n\r\n" not in request:
                request += await stream.receive_some(1024)
            await trio.sleep(5)
            await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(
                functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1")
            )
            port = listeners[0].socket.getsockname()[1]
            async with httpx.AsyncClient(timeout=10) as client:
                start = trio.current_time()
                response = await client.get(f"http://127.0.0.1:{port}/")
                elapsed = trio.current_time() - start
            nursery.cancel_scope.cancel()
        return response.text, elapsed

    results: list[Any] = [virtualtime.trio.run(main) for _ in range(10)]
    assert results == [("ok", 5.0)] * 10


# ------------------------------------------------------------ canary (trio-private)


def test_canary_trio_entry_queue_holds_a_deque_and_a_dict_the_clock_swaps() -> None:
    # virtualtime.trio._instruments.listen_to hears other threads call run_sync_soon by swapping
    # the two containers of the run's entry queue (trio-private: TrioToken._reentry_queue and
    # its queue/idempotent_queue fields) for subclasses.  If trio changes them, the clock stops
    # hearing other threads (the portal start-then-cancel race comes back): this fails first.
    async def containers() -> tuple[type, type]:
        entry = trio.lowlevel.current_trio_token()._reentry_queue
        return type(entry.queue), type(entry.idempotent_queue)

    assert trio.run(containers) == (collections.deque, dict)
    heard = virtualtime.trio.run(containers)
    assert issubclass(heard[0], collections.deque)
    assert heard[0] is not collections.deque
    assert issubclass(heard[1], dict)
    assert heard[1] is not dict
