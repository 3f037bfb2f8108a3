"""Real threads, sockets and subprocesses next to virtual time.

These are the few tests that wait in real time, on purpose: each real wait is short (< 1 s)
and marked ``# real-time:``.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time
from collections.abc import Iterator

import anyio
import anyio.to_thread
import pytest

import virtualtime


def now() -> float:
    return asyncio.get_running_loop().time()


def slow_job(seconds: float) -> str:
    time.sleep(seconds)  # real-time: the worker thread's own real work
    return "done"


# ---------------------------------------------------------------- threads


def test_time_stands_still_while_run_in_executor_job_runs() -> None:
    async def main() -> tuple[str, float, float]:
        loop = asyncio.get_running_loop()
        t0 = time.perf_counter()
        # The virtual timeout would fire first if time were allowed to jump.
        result = await asyncio.wait_for(loop.run_in_executor(None, slow_job, 0.1), timeout=1)
        return result, now(), time.perf_counter() - t0

    result, vt, real = virtualtime.run(main())
    assert result == "done"
    assert vt == 0.0
    assert real >= 0.09


def test_a_timer_set_while_a_thread_works_fires_after_its_real_delay() -> None:
    async def main() -> list[str]:
        order: list[str] = []

        async def ticker() -> None:
            await asyncio.sleep(0.001)
            order.append(f"tick at {now()}")

        async def worker() -> None:
            order.append(await asyncio.to_thread(slow_job, 0.05))

        async with asyncio.TaskGroup() as tg:
            tg.create_task(worker())
            tg.create_task(ticker())
        return order

    # While the job runs, virtual time runs no faster than real time: the tick due 0.001 s
    # later fires once a millisecond has really passed, long before the 50 ms job is done.
    assert virtualtime.run(main()) == ["tick at 0.001", "done"]


def test_anyio_to_thread_holds_virtual_time() -> None:
    async def main() -> tuple[str, float]:
        with anyio.fail_after(0.5):
            result = await anyio.to_thread.run_sync(slow_job, 0.1)
        return result, anyio.current_time()

    result = anyio.run(
        main, backend="asyncio", backend_options={"loop_factory": virtualtime.new_event_loop}
    )
    assert result == ("done", 0.0)


def test_closing_after_executor_use_emits_no_warning() -> None:
    # 3.12+ joins the default executor under a (virtual) 300 s timeout; it must not fire.
    async def main() -> str:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, slow_job, 0.05)

    assert virtualtime.run(main()) == "done"  # filterwarnings=error turns a warning into a failure


def test_job_in_flight_is_not_a_deadlock() -> None:
    async def main() -> str:
        return await asyncio.to_thread(slow_job, 0.4)

    assert virtualtime.run(main(), deadlock_timeout=0.05) == "done"


# ---------------------------------------------------------------- sockets


def test_server_and_client_in_the_same_virtual_loop() -> None:
    async def main() -> tuple[list[bytes], float]:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while line := await reader.readline():
                await asyncio.sleep(1.5)  # virtual processing time
                writer.write(line.upper())
                await writer.drain()
            writer.close()
            await writer.wait_closed()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            replies = []
            for word in (b"ping\n", b"pong\n", b"done\n"):
                writer.write(word)
                replies.append(await asyncio.wait_for(reader.readline(), timeout=2))
            writer.close()
            await writer.wait_closed()
        return replies, now()

    replies, vt = virtualtime.run(main())
    assert replies == [b"PING\n", b"PONG\n", b"DONE\n"]
    assert vt == 4.5


@pytest.fixture
def slow_echo_server() -> Iterator[int]:
    """A real TCP server in a thread that answers each line after 0.2 real seconds."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                data = conn.recv(1024)
                time.sleep(0.2)  # real-time: the peer takes real time to answer
                conn.sendall(b"reply:" + data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield port
    finally:
        stop.set()
        thread.join()
        listener.close()


async def _ask(port: int, timeout: float) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"hello")
        await writer.drain()
        return await asyncio.wait_for(reader.read(100), timeout)
    finally:
        writer.close()
        await writer.wait_closed()


def test_threshold_lets_a_slow_real_server_answer(slow_echo_server: int) -> None:
    assert virtualtime.run(_ask(slow_echo_server, 5), autojump_threshold=0.5) == b"reply:hello"


def test_a_slow_real_server_answers_at_the_defaults(slow_echo_server: int) -> None:
    async def main() -> tuple[bytes, float]:
        return await _ask(slow_echo_server, 5), now()

    # The request is outside work until the reply arrives: time stands still meanwhile.
    assert virtualtime.run(main()) == (b"reply:hello", 0.0)


def test_a_server_slower_than_the_timeout_loses_after_real_time(slow_echo_server: int) -> None:
    t0 = time.perf_counter()
    with pytest.raises(TimeoutError):
        virtualtime.run(_ask(slow_echo_server, 0.05))
    assert 0.05 <= time.perf_counter() - t0 < 0.2  # the timeout's own real delay, no more


# ---------------------------------------------------------------- subprocesses

_CHILD = [sys.executable, "-c", "import time; time.sleep(0.2); print('bye')"]  # real-time: peer


async def _child(timeout: float) -> tuple[int, bytes]:
    proc = await asyncio.create_subprocess_exec(*_CHILD, stdout=asyncio.subprocess.PIPE)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, out


def test_subprocess_is_awaited_under_a_virtual_timeout_with_threshold() -> None:
    assert virtualtime.run(_child(5), autojump_threshold=0.5) == (0, b"bye\n")


def test_subprocess_is_awaited_under_a_virtual_timeout_at_the_defaults() -> None:
    async def main() -> tuple[tuple[int, bytes], float]:
        return await _child(5), now()

    assert virtualtime.run(main()) == ((0, b"bye\n"), 0.0)


def test_a_child_slower_than_the_timeout_loses_after_real_time() -> None:
    t0 = time.perf_counter()
    with pytest.raises(TimeoutError):
        virtualtime.run(_child(0.05))
    assert 0.05 <= time.perf_counter() - t0 < 0.2 + 0.15


def test_waiting_on_real_io_uses_no_cpu() -> None:
    """No timer, a socket being watched: the loop blocks in the kernel, not in a spin."""

    async def main() -> tuple[bytes, float, float]:
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()
        ours.setblocking(False)

        def answer_later() -> None:
            time.sleep(0.3)  # real-time: the peer answers after a while
            theirs.sendall(b"late")

        thread = threading.Thread(target=answer_later)
        cpu0 = time.thread_time()  # the loop's thread: what a spin would burn
        thread.start()
        try:
            data = await loop.sock_recv(ours, 10)
        finally:
            thread.join()
            ours.close()
            theirs.close()
        return data, time.thread_time() - cpu0, loop.time()

    data, cpu, vt = virtualtime.run(main())
    assert data == b"late"
    assert cpu < 0.1
    assert vt == 0.0


def test_a_thread_waiting_for_the_loop_lets_time_move() -> None:
    # The job is blocked on the loop itself: holding time still would stall both for ever.
    async def main() -> tuple[float, float]:
        loop = asyncio.get_running_loop()

        def job() -> float:
            return asyncio.run_coroutine_threadsafe(_sleep_then_now(5), loop).result()

        inner = await asyncio.to_thread(job)
        return inner, now()

    assert virtualtime.run(main()) == (5.0, 5.0)


async def _sleep_then_now(delay: float) -> float:
    await asyncio.sleep(delay)
    return now()


def test_anyio_from_thread_inside_to_thread_lets_time_move() -> None:
    import anyio.from_thread

    async def main() -> tuple[float, float]:
        def job() -> float:
            anyio.from_thread.run(anyio.sleep, 3)
            return anyio.from_thread.run_sync(anyio.current_time)

        inner = await anyio.to_thread.run_sync(job)
        return inner, anyio.current_time()

    result = anyio.run(
        main, backend="asyncio", backend_options={"loop_factory": virtualtime.new_event_loop}
    )
    assert result == (3.0, 3.0)


def test_a_process_pool_job_holds_time_and_returns() -> None:
    import concurrent.futures
    import math
    import multiprocessing

    async def main() -> tuple[int, float]:
        loop = asyncio.get_running_loop()
        # spawn, not fork: the suite's process has other threads by now, and a forked child
        # can inherit a lock one of them held (and hang), whatever loop runs the parent.
        spawn = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as pool:
            result = await asyncio.wait_for(
                loop.run_in_executor(pool, math.factorial, 5), timeout=30
            )
        return result, now()

    assert virtualtime.run(main()) == (120, 0.0)
