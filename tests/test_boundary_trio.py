"""The boundary with real peers on trio: the asyncio loop's rules, read from the machine (issue 35).

``virtualtime.trio.VirtualClock`` asks the same model as the asyncio loop
(:mod:`virtualtime._shared._peers` for connections, :mod:`virtualtime._shared._threads` for
threads that call into the run), against real peers: a server in another thread of this
process (its own asyncio loop, or a ``socketserver``) and one in another process.  Each case
is repeated to catch races:

* **a real answer never loses to a virtual timeout** -- back-to-back requests on one kept-alive
  connection to a peer that sleeps before it answers (a blocking sleep, an asyncio sleep),
  httpx's keep-alive requests to a server that sends the headers and the body apart;
* **a thread that calls into the run is outside work while it works** -- it starts a task
  through a portal, ``trio.from_thread`` or the run's token and at once cancels it: the
  cancel always arrives before the clock jumps past the task's sleep (stock trio: always);
* **an idle outside world costs no real time** -- pings far apart with a reader waiting on the
  connection all along, a wait for a push that never comes (anyio on trio), an idle Unix
  connection to another process.

Peers may sleep and burn CPU (they are the outside world); the test process never sleeps to
wait for anything.  Every wait of a run is under a virtual timeout, which the clock lets fire
after at most that much real time, so a case that fails does so in seconds.
"""

from __future__ import annotations

import asyncio
import http.server
import pathlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import _peers_helpers as peers
import anyio
import anyio.from_thread
import httpx
import pytest
import trio

import virtualtime
import virtualtime.trio

T = TypeVar("T")


@pytest.fixture(scope="module")
def plain() -> Iterator[dict[str, int]]:
    """A peer in another thread (its own asyncio loop) and one in another process."""
    with peers.peer("thread") as in_thread, peers.peer("process") as in_process:
        yield {"thread": in_thread, "process": in_process}


class _Handler(http.server.BaseHTTPRequestHandler):
    """``GET /N``: ``ok`` after N ms of a blocking sleep; headers and body in two writes."""

    protocol_version = "HTTP/1.1"  # keep-alive

    def do_GET(self) -> None:
        ms = int(self.path.strip("/") or 0)
        if ms:
            time.sleep(ms / 1000)  # real-time: the server's own work
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()  # flushes the headers: the body is a second write
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def socketserver_port() -> Iterator[int]:
    """``http.server.ThreadingHTTPServer`` in a thread of this process (a thread per client)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()
    thread.join()


def _timed(main: Callable[..., Awaitable[T]], *args: object) -> tuple[T, float]:
    """Run ``main(*args)`` on a VirtualClock; its result and the real seconds it took."""
    start = time.perf_counter()
    result = virtualtime.trio.run(main, *args)
    return result, time.perf_counter() - start


# ----------------------------------------------------- back-to-back requests


class _Lines:
    """A line reader on a trio stream."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = b""

    async def line(self) -> bytes:
        while b"\n" not in self.buffer:
            data = await self.stream.receive_some(4096)
            if not data:
                raise EOFError("the peer closed the connection")
            self.buffer += data
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line


async def _ask(port: int, requests: list[bytes]) -> tuple[int, int, float]:
    """Each request on one connection under a fresh ``fail_after(2)``: (answered, timed out,
    virtual seconds the requests took)."""
    answered = timeouts = 0
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    reader = _Lines(stream)
    start = trio.current_time()
    async with stream:
        for request in requests:
            expected = b"ok " + request.split()[1]
            try:
                with trio.fail_after(2):
                    await stream.send_all(request)
                    assert await reader.line() == expected
                answered += 1
            except trio.TooSlowError:
                timeouts += 1
                assert await reader.line() == expected  # in step again for the next one
    return answered, timeouts, trio.current_time() - start


@pytest.mark.parametrize(
    ("where", "work"), [("thread", "sleep"), ("process", "sleep"), ("process", "async")]
)
def test_back_to_back_requests_to_a_peer_that_sleeps_before_answering_never_time_out(
    plain: dict[str, int], where: str, work: str
) -> None:
    # 32 requests on one kept-alive connection; the peer sleeps (a blocking sleep, or an
    # asyncio sleep on its own loop) 20 ms before most answers and 300 ms before two of them.
    # While it sleeps it works not at all: only the answer it owes holds virtual time.
    requests = [f"{work} {300 if i in (10, 20) else 20}\n".encode() for i in range(32)]
    (answered, timeouts, virtual), real = _timed(_ask, plain[where], requests)
    assert (answered, timeouts) == (32, 0)
    assert virtual <= real / 10  # time stood (almost) still while the answers were coming


@pytest.mark.parametrize("where", ["thread", "process"])
def test_each_fresh_timeout_gets_its_own_real_time_allowance(
    plain: dict[str, int], where: str
) -> None:
    # Ten requests on one connection, each under a fresh fail_after(0.5), each answered after
    # 100 ms of the peer's blocking sleep: a second of real time in all, time standing still
    # all along.  Each timeout allows half a second from when it was set, not from when the
    # hold began.
    async def main() -> tuple[int, int]:
        answered = timeouts = 0
        stream = await trio.open_tcp_stream("127.0.0.1", plain[where])
        reader = _Lines(stream)
        async with stream:
            for _ in range(10):
                try:
                    with trio.fail_after(0.5):
                        await stream.send_all(b"sleep 100\n")
                        assert await reader.line() == b"ok 100"
                    answered += 1
                except trio.TooSlowError:
                    timeouts += 1
                    assert await reader.line() == b"ok 100"
        return answered, timeouts

    (answered, timeouts), real = _timed(main)
    assert (answered, timeouts) == (10, 0)
    assert real >= 1.0  # the peer's sleeps were real: the allowances were put to the test


def test_httpx_keep_alive_requests_to_a_socketserver_thread_never_time_out(
    socketserver_port: int,
) -> None:
    # The server writes the headers, then the body: httpx waits for the body inside an async
    # generator (Response.aiter_raw), and the clock must see that wait too.
    async def main() -> tuple[int, int, float]:
        answered = timeouts = 0
        async with httpx.AsyncClient() as client:
            for index in range(120):
                try:
                    with trio.fail_after(2):
                        ms = 300 if index == 60 else 0
                        response = await client.get(f"http://127.0.0.1:{socketserver_port}/{ms}")
                    assert response.text == "ok"
                    answered += 1
                except trio.TooSlowError:
                    timeouts += 1
        return answered, timeouts, trio.current_time()

    (answered, timeouts, virtual), real = _timed(main)
    assert (answered, timeouts) == (120, 0)
    assert virtual <= real / 10


def test_another_threads_ticks_are_not_a_sleeping_thread_peers_answer(
    socketserver_port: int,
) -> None:
    # The server's handler thread sleeps 400 ms before it answers; meanwhile another thread of
    # this process wakes every 20 ms (a server's poll loop, a heartbeat).  Its work is not the
    # handler's: seen once, then quiet, it must not pass for the peer having woken and gone
    # back to sleep with nothing to say.
    stop = threading.Event()

    def ticker() -> None:
        while not stop.wait(0.02):  # real-time: a heartbeat's period
            _burn_briefly()

    async def main() -> tuple[int, int]:
        answered = timeouts = 0
        async with httpx.AsyncClient() as client:
            for _ in range(3):
                try:
                    with trio.fail_after(2):
                        response = await client.get(f"http://127.0.0.1:{socketserver_port}/400")
                    assert response.text == "ok"
                    answered += 1
                except trio.TooSlowError:
                    timeouts += 1
        return answered, timeouts

    thread = threading.Thread(target=ticker)
    thread.start()
    try:
        assert _timed(main)[0] == (3, 0)
    finally:
        stop.set()
        thread.join()


def _burn_briefly() -> int:
    """A tick's worth of CPU work (a few hundred microseconds)."""
    return sum(range(20_000))


def test_httpx_keep_alive_requests_to_a_thread_peer_never_time_out(plain: dict[str, int]) -> None:
    async def main() -> tuple[int, int]:
        answered = timeouts = 0
        async with httpx.AsyncClient() as client:
            for index in range(60):
                kind = "sleep/300" if index == 30 else "split/5" if index % 2 else "sleep/10"
                try:
                    with trio.fail_after(2):
                        response = await client.get(f"http://127.0.0.1:{plain['thread']}/{kind}")
                    assert response.status_code == 200
                    answered += 1
                except trio.TooSlowError:
                    timeouts += 1
        return answered, timeouts

    assert _timed(main)[0] == (60, 0)


def test_a_streamed_answer_with_work_between_chunks_never_trips_a_per_chunk_read_timeout(
    plain: dict[str, int],
) -> None:
    # Server-sent-events-like: the headers, then four chunks, each after 100 ms of the peer's
    # CPU work.  httpcore sets its read timeout (0.25 s) afresh for each chunk, inside the async
    # generators the body is read through: each is a new timer, whose real-time allowance
    # starts when it is set -- not when the stream began, 0.4 s earlier by the last chunk.
    async def main() -> tuple[int, int, float]:
        streamed = timeouts = 0
        timeout = httpx.Timeout(5, read=0.25)
        async with httpx.AsyncClient(timeout=timeout) as client:
            for _ in range(2):
                url = f"http://127.0.0.1:{plain['process']}/chunked/4/100"
                try:
                    async with client.stream("GET", url) as response:
                        body = b"".join([chunk async for chunk in response.aiter_raw()])
                    assert body.count(b"data: part") == 4
                    streamed += 1
                except httpx.ReadTimeout:
                    timeouts += 1
        return streamed, timeouts, trio.current_time()

    (streamed, timeouts, virtual), real = _timed(main)
    assert (streamed, timeouts) == (2, 0)
    assert virtual <= real / 10


# ------------------------------------------------- threads calling into the run


def test_a_portal_task_cancelled_at_once_is_always_cancelled_before_its_sleep_ends() -> None:
    # anyio's BlockingPortal on trio: the portal runs trio in its own thread; this thread starts
    # a task that sleeps for 3 virtual seconds, then cancels it at once.  The run is idle in
    # between: the clock must not jump past the sleep while this thread is still working.
    outcomes: list[str] = []

    async def sleeper() -> None:
        try:
            await anyio.sleep(3)
            outcomes.append("slept")
        except anyio.get_cancelled_exc_class():
            outcomes.append("cancelled")
            raise

    options = {"clock": virtualtime.trio.VirtualClock()}
    with anyio.from_thread.start_blocking_portal("trio", options) as portal:
        for _ in range(200):
            future = portal.start_task_soon(sleeper)
            future.cancel()
            portal.call(anyio.wait_all_tasks_blocked)  # the cancel has been delivered
    assert (outcomes.count("cancelled"), len(outcomes)) == (200, 200)


class _RunInThread:
    """A trio run on a VirtualClock in its own thread, with a nursery other threads may use."""

    def __init__(self) -> None:
        self.ready = threading.Event()
        self.token: trio.lowlevel.TrioToken | None = None
        self.nursery: trio.Nursery | None = None
        self.stop: trio.Event | None = None
        self.thread = threading.Thread(target=virtualtime.trio.run, args=(self._main,))
        self.thread.start()
        self.ready.wait()

    async def _main(self) -> None:
        self.token = trio.lowlevel.current_trio_token()
        self.stop = trio.Event()
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            self.ready.set()
            await self.stop.wait()
            nursery.cancel_scope.cancel()

    def close(self) -> None:
        assert self.stop is not None
        trio.from_thread.run_sync(self.stop.set, trio_token=self.token)
        self.thread.join()


def _start_then_cancel(run: _RunInThread, outcomes: list[str], via: str) -> None:
    """Start a task in ``run`` that sleeps 3 virtual seconds, then cancel it at once."""
    scope = trio.CancelScope()
    started = trio.Event()  # made here, set there

    async def sleeper() -> None:
        with scope:
            started.set()
            await trio.sleep(3)
            outcomes.append("slept")
        if scope.cancelled_caught:
            outcomes.append("cancelled")

    assert run.nursery is not None
    if via == "from_thread":
        trio.from_thread.run_sync(run.nursery.start_soon, sleeper, trio_token=run.token)
    else:
        assert run.token is not None
        run.token.run_sync_soon(run.nursery.start_soon, sleeper)
    sum(range(5000))  # this thread's own work between the two calls (about 0.1 ms)
    if via == "from_thread":
        trio.from_thread.run_sync(scope.cancel, trio_token=run.token)
    else:
        assert run.token is not None
        run.token.run_sync_soon(scope.cancel)


@pytest.mark.parametrize("via", ["from_thread", "token"])
def test_a_task_another_thread_starts_and_cancels_is_always_cancelled(via: str) -> None:
    outcomes: list[str] = []
    run = _RunInThread()
    try:
        for _ in range(200):
            _start_then_cancel(run, outcomes, via)
        # Everything said has been heard: the last cancel was delivered before this call ran;
        # and every task it started has taken its first step (one started in the last batch
        # would otherwise meet the nursery's own cancellation at close, and say nothing).
        trio.from_thread.run_sync(lambda: None, trio_token=run.token)
        trio.from_thread.run(trio.testing.wait_all_tasks_blocked, trio_token=run.token)
    finally:
        run.close()
    assert (outcomes.count("cancelled"), len(outcomes)) == (200, 200)


# ------------------------------------------------------------ idle waits


async def _pings(port: int) -> tuple[int, float]:
    # A websocket-like keep-alive: a reader task waits on the connection all along; a ping,
    # its pong, then 20 virtual seconds of quiet -- 30 times.
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    reader = _Lines(stream)
    send, receive = trio.open_memory_channel[bytes](10)
    pongs = 0

    async def read_all() -> None:
        while True:
            await send.send(await reader.line())

    async with stream, trio.open_nursery() as nursery:
        nursery.start_soon(read_all)
        for index in range(30):
            await stream.send_all(b"echo pong %d\n" % index)
            with trio.fail_after(5):
                assert await receive.receive() == b"pong %d" % index
            pongs += 1
            await trio.sleep(20)
        nursery.cancel_scope.cancel()
    return pongs, trio.current_time()


async def _asyncio_pings(port: int) -> tuple[int, float]:
    """The same pings on the asyncio loop, for comparison."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    queue: asyncio.Queue[bytes] = asyncio.Queue()

    async def read_all() -> None:
        while True:
            await queue.put(await reader.readline())

    task = asyncio.create_task(read_all())
    pongs = 0
    for index in range(30):
        writer.write(b"echo pong %d\n" % index)
        async with asyncio.timeout(5):
            assert await queue.get() == b"pong %d\n" % index
        pongs += 1
        await asyncio.sleep(20)
    task.cancel()
    writer.close()
    await writer.wait_closed()
    return pongs, asyncio.get_running_loop().time()


@pytest.mark.parametrize("where", ["thread", "process"])
def test_thirty_pings_twenty_virtual_seconds_apart_with_a_reader_waiting_are_fast(
    plain: dict[str, int], where: str
) -> None:
    result, real = _timed(_pings, plain[where])
    start = time.perf_counter()
    assert virtualtime.run(_asyncio_pings(plain[where])) == (30, 600.0)
    on_asyncio = time.perf_counter() - start
    assert result == (30, 600.0)
    assert real <= max(on_asyncio, 1.0), f"trio {real:.2f} s, asyncio {on_asyncio:.2f} s"


@pytest.mark.parametrize("where", ["thread", "process"])
def test_an_anyio_wait_on_trio_for_a_push_that_never_comes_costs_no_real_time(
    plain: dict[str, int], where: str
) -> None:
    async def main() -> tuple[bytes, bool, float, float]:
        async with await anyio.connect_tcp("127.0.0.1", plain[where]) as stream:
            await stream.send(b"echo hi\n")
            with anyio.fail_after(5):
                answer = await stream.receive()
            virtual, real = anyio.current_time(), time.perf_counter()
            with anyio.move_on_after(3) as scope:
                await stream.receive()  # a push from the peer that never comes
            return (
                answer,
                scope.cancelled_caught,
                anyio.current_time() - virtual,
                (time.perf_counter() - real),
            )

    for _ in range(5):
        answer, idle, virtual, real = anyio.run(
            main, backend="trio", backend_options={"clock": virtualtime.trio.VirtualClock()}
        )
        assert (answer, idle, virtual) == (b"hi\n", True, 3.0)
        assert real <= 0.05


_UNIX_PEER = """
import socket, sys
peer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
peer.connect(sys.argv[1])
peer.sendall(peer.recv(64))  # one echo, then quiet until we close
peer.recv(64)
"""


def test_an_idle_unix_connection_to_another_process_does_not_hold_time(
    tmp_path: pathlib.Path,
) -> None:
    path = str(tmp_path / "peer.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen()
        child = subprocess.Popen([sys.executable, "-c", _UNIX_PEER, path])
        listener.settimeout(10)
        accepted, _ = listener.accept()  # before the run: the run only talks to it

    async def main() -> tuple[bytes, float, float]:
        with trio.socket.from_stdlib_socket(accepted) as conn:
            await conn.send(b"hello")
            with trio.fail_after(5):
                echo = await conn.recv(64)
            real = time.perf_counter()
            with trio.move_on_after(60):
                await conn.recv(64)  # the peer is quiet: nothing comes
            real = time.perf_counter() - real
        return echo, trio.current_time(), real

    try:
        echo, virtual, real = virtualtime.trio.run(main)
    finally:
        accepted.close()
        child.wait(10)
    assert echo == b"hello"
    assert virtual == 60.0
    assert real <= 0.5
