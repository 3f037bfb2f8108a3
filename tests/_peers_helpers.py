"""Real peers for the boundary tests and the boundary benchmark: one small server, two homes.

The server speaks two protocols on one port, chosen by a connection's first line:

* **HTTP/1.1 keep-alive** (a first line starting ``GET``): ``/cpu/N``, ``/sleep/N`` and
  ``/async/N`` answer ``ok N`` after N milliseconds of the peer's own work -- CPU work in
  Python, a blocking ``time.sleep`` or an ``await asyncio.sleep`` (the peer is a plain asyncio
  loop); ``/split/N`` sends the headers at once and the body after N ms of CPU work;
  ``/chunked/K/N`` sends the headers, then K chunks each after N ms of CPU work (a
  server-sent-events-like stream that ends); ``/push`` sends the headers and one event, then
  nothing more until the client goes away.
* **lines** (any other first line, and every line after it): ``cpu N`` / ``sleep N`` /
  ``async N`` answer ``ok N``; ``split N`` answers ``head``, then after N ms of CPU work
  ``body``; ``parts K N`` answers ``head``, then K lines ``part i`` each after N ms of CPU
  work, then ``end``; ``echo X`` answers ``X`` at once; ``sink ...`` is read and never
  answered (a fire-and-forget publish).

Run it in another thread of the test process (:func:`start_in_thread`: a plain asyncio loop of
its own), or as another process (:func:`start_in_process`: ``python _peers_helpers.py [PEM]``
prints its port and serves until its stdin closes; with a PEM file of key and certificate it
speaks TLS).  :data:`KILLABLE` is a smaller peer, one process per connection, for tests that
kill the peer.  :func:`bounded_run` runs a coroutine in virtual time with a real-time
watchdog, so a case that fails by holding time for minutes fails in seconds instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

HERE = Path(__file__).resolve()


def burn(ms: float) -> int:
    """CPU work in Python for about ``ms`` real milliseconds (the peer's own work)."""
    end = time.perf_counter() + ms / 1000  # real-time: the length of the work itself
    spins = 0
    while time.perf_counter() < end:
        spins += 1
    return spins


async def _work(kind: str, ms: int) -> None:
    if kind == "cpu":
        burn(ms)
    elif kind == "sleep":
        time.sleep(ms / 1000)  # real-time: the peer blocks, as a synchronous server would
    elif kind == "async":
        await asyncio.sleep(ms / 1000)
    else:
        raise ValueError(f"unknown kind of work {kind!r}")


# ------------------------------------------------------------------ the server


async def _http(first: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    request = first
    while request:
        while (await reader.readline()).strip():  # the headers, up to the blank line
            pass
        path = request.split()[1].decode()
        parts = path.strip("/").split("/")
        if parts[0] in ("cpu", "sleep", "async"):
            ms = int(parts[1])
            await _work(parts[0], ms)
            body = f"ok {ms}".encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        elif parts[0] == "split":
            ms = int(parts[1])
            body = f"split {ms}".encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body))
            await writer.drain()
            burn(ms)
            writer.write(body)
        elif parts[0] in ("chunked", "push"):
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n")
            writer.write(b"Transfer-Encoding: chunked\r\n\r\n")
            await writer.drain()
            if parts[0] == "push":
                event = b"data: hello\n\n"
                writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                await writer.drain()
                await reader.read()  # nothing more, ever: until the client goes away
                return
            count, ms = int(parts[1]), int(parts[2])
            for i in range(count):
                burn(ms)
                event = b"data: part %d\n\n" % i
                writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                await writer.drain()
            writer.write(b"0\r\n\r\n")
        else:
            writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        request = await reader.readline()


async def _lines(first: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    line = first
    while line:
        verb, _, rest = line.decode().strip().partition(" ")
        args = rest.split()
        if verb in ("cpu", "sleep", "async"):
            await _work(verb, int(args[0]))
            writer.write(f"ok {args[0]}\n".encode())
        elif verb == "split":
            writer.write(b"head\n")
            await writer.drain()
            burn(int(args[0]))
            writer.write(b"body\n")
        elif verb == "parts":
            writer.write(b"head\n")
            await writer.drain()
            for i in range(int(args[0])):
                burn(int(args[1]))
                writer.write(b"part %d\n" % i)
                await writer.drain()
            writer.write(b"end\n")
        elif verb == "echo":
            writer.write(f"{rest}\n".encode())
        elif verb != "sink":
            writer.write(f"unknown {verb}\n".encode())
        await writer.drain()
        line = await reader.readline()


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        try:
            first = await reader.readline()
            if first.startswith(b"GET "):
                await _http(first, reader, writer)
            else:
                await _lines(first, reader, writer)
        finally:
            writer.close()
            await writer.wait_closed()
    except (ConnectionError, ssl.SSLError):
        pass  # the client went away mid-answer: nothing to do
    except asyncio.CancelledError:
        pass  # the peer is shutting down (a thread peer's loop cancels what is left)


async def serve(
    tls: ssl.SSLContext | None, ready: queue.SimpleQueue[int], stop: asyncio.Event | None
) -> None:
    """Serve on 127.0.0.1 (a free port, put on ``ready``) until ``stop`` is set (or forever)."""
    server = await asyncio.start_server(_handle, "127.0.0.1", 0, ssl=tls)
    async with server:
        ready.put(server.sockets[0].getsockname()[1])
        if stop is None:
            await asyncio.get_running_loop().create_future()
        else:
            await stop.wait()


def server_tls(pem: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pem)
    return context


@dataclass
class Peer:
    """A running peer: its port, and how to stop it."""

    port: int
    kind: str  # "thread" or "process"
    _stop: Any

    def close(self) -> None:
        if self.kind == "thread":
            loop, event, thread = self._stop
            loop.call_soon_threadsafe(event.set)
            thread.join()
        else:
            proc: subprocess.Popen[str] = self._stop
            assert proc.stdin is not None
            assert proc.stdout is not None
            proc.stdin.close()
            proc.wait(timeout=10)
            proc.stdout.close()


def start_in_thread(tls: ssl.SSLContext | None = None) -> Peer:
    """The server in a daemon thread of this process, on a plain asyncio loop of its own."""
    ready: queue.SimpleQueue[int] = queue.SimpleQueue()
    handles: queue.SimpleQueue[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = (
        queue.SimpleQueue()
    )

    async def main() -> None:
        stop = asyncio.Event()
        handles.put((asyncio.get_running_loop(), stop))
        await serve(tls, ready, stop)

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    loop, stop = handles.get(timeout=10)
    port = ready.get(timeout=10)
    return Peer(port, "thread", (loop, stop, thread))


def start_in_process(pem: Path | None = None) -> Peer:
    """The server in another process (TLS with ``pem``, a file of key and certificate)."""
    args = [sys.executable, str(HERE)] + ([str(pem)] if pem is not None else [])
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return Peer(int(proc.stdout.readline()), "process", proc)


@contextlib.contextmanager
def peer(kind: str, tls: ssl.SSLContext | None = None, pem: Path | None = None) -> Iterator[int]:
    """A peer of ``kind`` ("thread" or "process") for the ``with`` block; yields its port."""
    running = start_in_thread(tls) if kind == "thread" else start_in_process(pem)
    try:
        yield running.port
    finally:
        running.close()


KILLABLE = (
    "import socket, sys\n"
    "listener = socket.create_server(('127.0.0.1', 0))\n"
    "print(listener.getsockname()[1], flush=True)\n"
    "conn, _ = listener.accept()\n"
    "conn.sendall(b'ready\\n')\n"
    "while conn.recv(4096):\n"
    "    pass\n"
)
"""A peer process for one connection: says ``ready``, then reads and never answers."""


def start_killable() -> tuple[subprocess.Popen[str], int]:
    """A :data:`KILLABLE` peer process and its port (the caller kills it and waits for it)."""
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", KILLABLE], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    proc.stdout.close()
    return proc, port


class ServiceMissing(RuntimeError):
    """A service's program is not installed (Debian's package of the same name has it)."""

    def __init__(self, program: str) -> None:
        super().__init__(
            f"{program} is not installed: apt-get install {program} (.ci/run installs it)"
        )


@contextlib.contextmanager
def service(argv: list[str], ready: str, stream: str = "stdout") -> Iterator[int]:
    """A real service (redis-server, mosquitto) on a free port of 127.0.0.1; yields the port.

    ``{port}`` in ``argv`` becomes the port; blocks until the service prints ``ready`` on
    ``stream`` (``stdout`` or ``stderr``).  Debian's packages: ``.ci/run`` installs them.
    """
    binary = shutil.which(argv[0]) or shutil.which(argv[0], path="/usr/sbin:/usr/bin")
    if binary is None:
        raise ServiceMissing(argv[0])
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    args = [binary, *(arg.format(port=port) for arg in argv[1:])]
    if stream == "stdout":
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        output = proc.stdout
    else:
        proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
        output = proc.stderr
    assert output is not None
    try:
        for line in output:  # blocks until the service says it is ready (or exits)
            if ready in line:
                break
        else:
            raise RuntimeError(f"{argv[0]} exited with {proc.wait()}")
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        output.close()


@contextlib.contextmanager
def service_or_skip(started: contextlib.AbstractContextManager[int]) -> Iterator[int]:
    """For a test fixture: the service's port, or the test skipped (naming the apt package)
    when its program is missing -- CI installs it, so there it always runs."""
    import pytest

    try:
        port = started.__enter__()
    except ServiceMissing as missing:
        pytest.skip(str(missing))
    try:
        yield port
    finally:
        started.__exit__(None, None, None)


def redis_server() -> contextlib.AbstractContextManager[int]:
    """A real redis-server (no persistence) on a free port; yields the port."""
    argv = ["redis-server", "--port", "{port}", "--bind", "127.0.0.1", "--save", ""]
    return service([*argv, "--appendonly", "no"], "Ready to accept connections")


def mosquitto() -> contextlib.AbstractContextManager[int]:
    """A real MQTT broker (mosquitto, verbose so that it says when it is ready)."""
    # Its last start-up line ends in "running"; an earlier one says "clients running on this
    # machine", before the listeners are open.
    return service(["mosquitto", "-v", "-p", "{port}"], " running\n", "stderr")


@contextlib.contextmanager
def busy_processes(count: int) -> Iterator[None]:
    """``count`` processes spinning on the CPU for the ``with`` block (a loaded machine)."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


# ------------------------------------------------------------------ running a case


class TooSlow(Exception):
    """A bounded run took longer than its real-time limit, and was cancelled."""


class Watchdog:
    """Cancels a run's main task once ``limit`` real seconds have passed.

    Its thread starts before the loop is created (so the loop never sees it as a new thread)
    and blocks until then; it speaks to the loop only to cancel a run that has failed.
    """

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.fired = False
        self._target: queue.SimpleQueue[
            tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]] | None
        ] = queue.SimpleQueue()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        target = self._target.get()
        if target is None or self._done.wait(self.limit):
            return
        loop, task = target
        self.fired = True
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(task.cancel)

    def arm(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
        self._target.put((loop, task))

    def disarm(self) -> None:
        self._done.set()
        self._target.put(None)  # if it was never armed
        self._thread.join()


def bounded_run(main: Coroutine[Any, Any, T], limit: float) -> tuple[T, float]:
    """Run ``main`` with :func:`virtualtime.run`; return its result and the real seconds taken.

    Raises :class:`TooSlow` if it needed more than ``limit`` real seconds (then it is
    cancelled at the limit rather than left to run for as long as it would).
    """
    import virtualtime

    watchdog = Watchdog(limit)

    async def guarded() -> T:
        task = asyncio.current_task()
        assert task is not None
        watchdog.arm(asyncio.get_running_loop(), task)
        return await main

    start = time.perf_counter()
    try:
        result = virtualtime.run(guarded())
    except asyncio.CancelledError:
        if watchdog.fired:
            raise TooSlow(f"still running after {limit} real seconds: cancelled") from None
        raise
    finally:
        watchdog.disarm()
    return result, time.perf_counter() - start


def main() -> None:
    tls = server_tls(Path(sys.argv[1])) if len(sys.argv) > 1 else None
    ready: queue.SimpleQueue[int] = queue.SimpleQueue()

    def report() -> None:
        print(ready.get(), flush=True)
        sys.stdin.read()  # the parent closes our stdin to stop us

    def run() -> None:
        asyncio.run(serve(tls, ready, None))

    threading.Thread(target=run, daemon=True).start()
    report()


if __name__ == "__main__":
    main()
