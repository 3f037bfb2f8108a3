"""virtualtime.net on trio: simulated hosts reached through trio's socket and resolver hooks.

Every scenario runs under ``trio.run(..., clock=VirtualClock())`` (one runs on trio's own
clock), with 5 ms links unless it says otherwise: a connect takes one round trip (10 ms), an
echo another.
"""

from __future__ import annotations

import errno
import functools
import itertools
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest
import trio

from virtualtime import net
from virtualtime._shared._errors import UnsupportedError, UsageError
from virtualtime.net._streams import lent_descriptor
from virtualtime.net._trio import HostTask, TrioDriver, driver_of
from virtualtime.net._trio_sockets import READ_LIMIT, SimulatedSocket
from virtualtime.trio import VirtualClock

LATENCY = 0.005
RTT = 2 * LATENCY


def run(main: Callable[[], Awaitable[Any]]) -> Any:
    return trio.run(main, clock=VirtualClock())


def now() -> float:
    return trio.current_time()


async def echo(stream: trio.SocketStream) -> None:
    async for data in stream:
        await stream.send_all(data)


async def serve(
    host: net.Host,
    handler: Callable[[trio.SocketStream], Awaitable[object]],
    port: int,
    *,
    task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED,
) -> None:
    async with host:
        await trio.serve_tcp(handler, port, task_status=task_status)


async def http(stream: trio.SocketStream) -> None:
    """A tiny HTTP/1.1 responder: keep-alive, answers ``hi <path>``."""
    buffer = b""
    while True:
        while b"\r\n\r\n" not in buffer:
            data = await stream.receive_some()
            if not data:
                return
            buffer += data
        head, buffer = buffer.split(b"\r\n\r\n", 1)
        body = b"hi " + head.split(b" ")[1]
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
        )


# ------------------------------------------------------------------ plain trio


def test_echo_between_hosts_takes_exact_round_trips() -> None:
    async def main() -> list[Any]:
        world = net.Network(latency=LATENCY)
        srv, cli = world.host("srv"), world.host("cli")
        seen: list[Any] = []
        async with trio.open_nursery() as nursery:
            await nursery.start(serve, srv, echo, 7000)
            async with cli:
                start = now()
                stream = await trio.open_tcp_stream("srv", 7000)
                seen.append(now() - start)
                sock = stream.socket
                assert isinstance(sock, SimulatedSocket)
                assert sock.simulated
                seen.append((sock.getsockname(), sock.getpeername()))
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
                for i in range(3):
                    await stream.send_all(b"ping %d" % i)
                    seen.append((await stream.receive_some(), round(now() - start, 9)))
                await stream.aclose()
                assert sock.fileno() == -1
            nursery.cancel_scope.cancel()
        return seen

    assert run(main) == [
        RTT,
        (("10.0.0.2", 49152), ("10.0.0.1", 7000)),
        (b"ping 0", 0.02),
        (b"ping 1", 0.03),
        (b"ping 2", 0.04),
    ]


def test_connect_to_a_closed_port_is_refused_after_one_round_trip() -> None:
    async def main() -> tuple[float, BaseException | None]:
        world = net.Network(latency=LATENCY)
        world.host("srv")
        async with world.host("cli"):
            start = now()
            with pytest.raises(OSError, match="all attempts to connect to srv:7001") as caught:
                await trio.open_tcp_stream("srv", 7001)
            elapsed = now() - start
        return elapsed, caught.value.__cause__

    elapsed, cause = run(main)
    assert elapsed == RTT
    assert isinstance(cause, ExceptionGroup)
    (refused,) = cause.exceptions
    assert isinstance(refused, ConnectionRefusedError)
    assert refused.errno == errno.ECONNREFUSED
    assert "('10.0.0.1', 7001)" in str(refused)


def test_a_partition_times_out_exactly_and_a_heal_delivers_held_bytes_in_order() -> None:
    async def main() -> list[Any]:
        world = net.Network(latency=LATENCY)
        srv, cli = world.host("srv"), world.host("cli")
        seen: list[Any] = []
        accepted: list[trio.SocketStream] = []

        async def keep(stream: trio.SocketStream) -> None:
            accepted.append(stream)
            await trio.sleep_forever()

        async with trio.open_nursery() as nursery:
            await nursery.start(serve, srv, keep, 7000)
            async with cli:
                stream = await trio.open_tcp_stream("srv", 7000)
                await trio.sleep(0.001)
                (server_side,) = accepted
                world.partition("cli", "srv")
                for piece in (b"one ", b"two ", b"three"):
                    await stream.send_all(piece)
                start = now()
                with trio.move_on_after(1.5) as scope:
                    await server_side.receive_some()
                seen.append((scope.cancelled_caught, now() - start))
                # A connect across the cut goes unanswered: its timeout fires on time too.
                with trio.move_on_after(0.25) as scope:
                    await trio.open_tcp_stream("srv", 7000)
                seen.append((scope.cancelled_caught, now() - start))
                world.heal()
                healed = now()
                received = b""
                while len(received) < len(b"one two three"):
                    received += await server_side.receive_some()
                seen.append((received, round(now() - healed, 9)))
            nursery.cancel_scope.cancel()
        return seen

    assert run(main) == [(True, 1.5), (True, 1.75), (b"one two three", LATENCY)]


def test_real_loopback_sockets_still_work_in_the_same_run() -> None:
    async def main() -> list[Any]:
        world = net.Network(latency=LATENCY)
        srv = world.host("srv")
        seen: list[Any] = []
        async with trio.open_nursery() as nursery:
            # A real server and a real client, from a task living on a simulated host.
            async with srv:
                listeners = await nursery.start(
                    functools.partial(trio.serve_tcp, echo, 0, host="127.0.0.1")
                )
            (listener,) = listeners
            port = listener.socket.getsockname()[1]
            assert not isinstance(listener.socket, SimulatedSocket) or not (
                listener.socket.simulated
            )
            async with srv:
                stream = await trio.open_tcp_stream("127.0.0.1", port)
                assert stream.socket.fileno() > 2
                assert stream.socket.getpeername() == ("127.0.0.1", port)
                await stream.send_all(b"real")
                seen.append(await stream.receive_some())
                await stream.aclose()
            # ... and the simulated network beside it.
            await nursery.start(serve, srv, echo, 7000)
            start = now()
            simulated = await trio.open_tcp_stream("srv", 7000)
            seen.append(now() - start)
            await simulated.aclose()
            nursery.cancel_scope.cancel()
        return seen

    assert run(main) == [b"real", RTT]


def test_bytes_wait_for_a_reader_and_the_window_holds_the_sender() -> None:
    async def main() -> list[Any]:
        world = net.Network(latency=LATENCY)
        srv, cli = world.host("srv"), world.host("cli")
        accepted: list[trio.SocketStream] = []
        sent = 0
        total = 4 * net.WINDOW

        async def keep(stream: trio.SocketStream) -> None:
            accepted.append(stream)
            await trio.sleep_forever()

        async def send_all(stream: trio.SocketStream) -> None:
            nonlocal sent
            chunk = bytes(range(256)) * 256  # 64 KiB
            while sent < total:
                await stream.send_all(chunk)
                sent += len(chunk)

        seen: list[Any] = []
        async with trio.open_nursery() as nursery:
            await nursery.start(serve, srv, keep, 7000)
            async with cli:
                stream = await trio.open_tcp_stream("srv", 7000)
                nursery.start_soon(send_all, stream)
                await trio.sleep(1)
                # Held: the receiver's buffer, the window and the sender's buffer are full.
                seen.append(0 < sent < total)
                seen.append(sent <= READ_LIMIT + net.WINDOW + 2 * 64 * 1024)
                (server_side,) = accepted
                received = bytearray()
                while len(received) < total:
                    received += await server_side.receive_some()
                seen.append((received == bytes(range(256)) * (total // 256), sent))
            nursery.cancel_scope.cancel()
        return seen

    assert run(main) == [True, True, (True, 4 * net.WINDOW)]


def test_datagrams_between_hosts() -> None:
    async def main() -> list[Any]:
        world = net.Network(latency=LATENCY)
        srv, cli = world.host("srv"), world.host("cli")
        seen: list[Any] = []
        async with srv:
            server = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            await server.bind(("", 5353))
        async with cli:
            client = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            start = now()
            await client.sendto(b"query", ("srv", 5353))
            data, source = await server.recvfrom(100)
            seen.append((data, source, now() - start))
            await server.sendto(b"answer", source)
            seen.append((await client.recv(100), now() - start))
            await client.connect(("srv", 5353))
            await client.send(b"again")
            seen.append((await server.recvfrom(3), client.getpeername()))
        server.close()
        client.close()
        return seen

    assert run(main) == [
        (b"query", ("10.0.0.2", 49152), LATENCY),
        (b"answer", RTT),
        ((b"aga", ("10.0.0.2", 49152)), ("10.0.0.1", 5353)),
    ]


# ---------------------------------------------------------- httpx and anyio


def test_httpx_on_trio_between_hosts_with_exact_times() -> None:
    async def main() -> tuple[list[Any], int]:
        world = net.Network(latency=LATENCY)
        srv, cli = world.host("srv"), world.host("cli")
        times: list[Any] = []
        connections = 0

        async def counted(stream: trio.SocketStream) -> None:
            nonlocal connections
            connections += 1
            await http(stream)

        async with trio.open_nursery() as nursery:
            await nursery.start(serve, srv, counted, 8080)
            async with cli, httpx.AsyncClient() as client:
                start = now()
                for i in range(20):
                    response = await client.get(f"http://srv:8080/{i}")
                    times.append((response.status_code, response.text, round(now() - start, 9)))
            nursery.cancel_scope.cancel()
        return times, connections

    times, connections = run(main)
    # One round trip to connect, then one per request on the same kept-alive connection.
    assert times == [(200, f"hi /{i}", round(RTT * (i + 2), 9)) for i in range(20)]
    assert connections == 1


def test_anyio_on_trio_between_hosts() -> None:
    async def main() -> list[Any]:
        world = net.Network(latency=LATENCY)
        srv, cli = world.host("srv"), world.host("cli")
        seen: list[Any] = []

        async def upper(stream: anyio.abc.SocketStream) -> None:
            async with stream:
                async for data in stream:
                    await stream.send(data.upper())

        async def server(*, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
            async with srv:
                listener = await anyio.create_tcp_listener(local_port=0)
                task_status.started(listener.extra(anyio.abc.SocketAttribute.local_port))
                await listener.serve(upper)

        async with trio.open_nursery() as nursery:
            port = await nursery.start(server)
            async with cli:
                start = now()
                async with await anyio.connect_tcp("srv", port) as stream:
                    seen.append(now() - start)
                    remote = stream.extra(anyio.abc.SocketAttribute.remote_address)
                    seen.append(remote == ("10.0.0.1", port))
                    await stream.send(b"shout")
                    seen.append((await stream.receive(), round(now() - start, 9)))
            nursery.cancel_scope.cancel()
        return seen

    assert run(main) == [RTT, True, (b"SHOUT", 2 * RTT)]


# ------------------------------------------------------------------ hosts


def test_host_run_crash_and_restart() -> None:
    async def main() -> list[Any]:
        world = net.Network(latency=LATENCY)
        srv, cli = world.host("srv"), world.host("cli")
        seen: list[Any] = []

        async def listen() -> None:
            await trio.serve_tcp(echo, 7000)

        task: Any = srv.run(listen())
        assert isinstance(task, HostTask)
        await trio.lowlevel.checkpoint()
        async with cli:
            stream = await trio.open_tcp_stream("srv", 7000)
            start = now()
            srv.crash()
            with pytest.raises(trio.BrokenResourceError):
                await stream.receive_some()
            seen.append(round(now() - start, 9))  # the reset: one latency after the crash
            seen.append((task.done(), task.cancelled()))
            with trio.move_on_after(1) as scope:  # a down host answers nothing
                await trio.open_tcp_stream("srv", 7000)
            seen.append(scope.cancelled_caught)

            async def greet() -> str:
                listeners = await trio.open_tcp_listeners(7000)
                (accepted,) = [await listeners[0].accept()]
                await accepted.send_all(b"back")
                return "served"

            again: Any = srv.restart(greet())
            assert isinstance(again, HostTask)
            stream = await trio.open_tcp_stream("srv", 7000)
            seen.append(await stream.receive_some())
            seen.append(await again)
        return seen

    assert run(main) == [LATENCY, (True, True), True, b"back", "served"]


def test_a_crash_cancels_async_with_host_blocks() -> None:
    async def main() -> list[Any]:
        world = net.Network(latency=LATENCY)
        srv = world.host("srv")
        seen: list[Any] = []

        async def on_srv() -> None:
            async with srv:
                try:
                    await trio.sleep_forever()
                finally:
                    seen.append(("stopped", now()))
            seen.append("after the block")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(on_srv)
            await trio.sleep(2)
            srv.crash()
        return seen

    assert run(main) == [("stopped", 2.0), "after the block"]


def test_pause_and_host_clocks_are_not_available_on_trio() -> None:
    async def main() -> None:
        world = net.Network(latency=LATENCY)
        host = world.host("a")
        with pytest.raises(UnsupportedError, match=r"Host\.pause\(\) is not available on trio"):
            host.pause(1)
        with pytest.raises(UnsupportedError, match=r"set_clock\(\) is not available on trio"):
            host.set_clock(offset=2.0)
        with pytest.raises(UnsupportedError, match="own clock"):
            world.host("b", clock_offset=1.0)

    run(main)


def test_task_on_no_host_connects_from_main_and_the_resolver_answers_world_names() -> None:
    async def main() -> list[Any]:
        world = net.Network(latency=LATENCY)
        srv = world.host("srv")
        seen: list[Any] = []
        async with trio.open_nursery() as nursery:
            await nursery.start(serve, srv, echo, 7000)
            seen.append(await trio.socket.getaddrinfo("SRV", 7000, type=socket.SOCK_STREAM))
            seen.append(await trio.socket.getnameinfo(("10.0.0.1", 7000), 0))
            stream = await trio.open_tcp_stream("srv", 7000)
            main_host = world.resolve("main")
            assert main_host is not None
            seen.append(stream.socket.getsockname()[0] == main_host.address)
            await stream.aclose()
            nursery.cancel_scope.cancel()
        return seen

    assert run(main) == [
        [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("10.0.0.1", 7000))],
        ("srv", "7000"),
        True,
    ]


# --------------------------------------------------------- the driver itself


def test_the_driver_runs_timers_in_order_and_reports_errors(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> tuple[list[Any], list[dict[str, Any]]]:
        world = net.Network()
        a = world.host("a")
        async with a:
            pass
        driver = driver_of(world)
        order: list[Any] = []

        def fail() -> None:
            raise ZeroDivisionError("boom")

        world.at(2_000_000, order.append, world.context, "b")
        world.at(1_000_000, order.append, world.context, "a")
        world.at(2_000_000, order.append, world.context, "c")
        world.at(2_000_000, order.append, world.context, "dropped").cancel()
        world.at(3_000_000, fail, world.context)
        world.soon(order.append, world.context, "soon")
        await trio.sleep(0.01)
        order.append(now())
        return order, driver.errors

    with caplog.at_level(logging.ERROR, logger="virtualtime.net"):
        order, errors = run(main)
    assert order == ["soon", "a", "b", "c", 0.01]
    assert len(errors) == 1
    assert isinstance(errors[0]["exception"], ZeroDivisionError)
    assert "boom" in caplog.text


def test_the_simulated_network_works_on_trios_own_clock() -> None:
    async def main() -> bytes:
        world = net.Network()  # no latency: nothing to wait for in real time
        srv, cli = world.host("srv"), world.host("cli")
        async with trio.open_nursery() as nursery:
            await nursery.start(serve, srv, echo, 7000)
            async with cli:
                stream = await trio.open_tcp_stream("srv", 7000)
                await stream.send_all(b"real clock")
                data = await stream.receive_some()
            nursery.cancel_scope.cancel()
        return data

    assert trio.run(main) == b"real clock"


def test_stand_in_descriptors_poll_as_the_socket_reads() -> None:
    import select

    poll = select.poll()
    poll.register(lent_descriptor(True), select.POLLIN)
    poll.register(lent_descriptor(False), select.POLLIN)
    assert [fd for fd, _ in poll.poll(0)] == [lent_descriptor(True)]


def test_one_seed_one_run_another_seed_another() -> None:
    def times(seed: int) -> list[float]:
        async def main() -> list[float]:
            world = net.Network(seed=seed, latency=LATENCY, jitter=0.004)
            srv, cli = world.host("srv"), world.host("cli")
            seen: list[float] = []
            async with trio.open_nursery() as nursery:
                await nursery.start(serve, srv, echo, 7000)
                async with cli:
                    stream = await trio.open_tcp_stream("srv", 7000)
                    for i in range(10):
                        await stream.send_all(b"%d" % i)
                        assert await stream.receive_some() == b"%d" % i
                        seen.append(now())
                nursery.cancel_scope.cancel()
            return seen

        result: list[float] = run(main)
        return result

    first = times(7)
    assert first == times(7)
    assert first != times(8)
    # Jitter only delays: each echo takes at least its round trip, at most that plus jitter.
    gaps = [round(b - a, 9) for a, b in itertools.pairwise(first)]
    assert all(RTT <= gap <= RTT + 0.008 for gap in gaps)
    assert len(set(gaps)) > 1


def test_a_failed_host_task_nobody_awaited_is_logged_at_the_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> tuple[Any, Any]:
        world = net.Network()
        host = world.host("a")

        async def fail() -> None:
            await trio.sleep(1)
            raise KeyError("lost")

        async def answer() -> int:
            return 42

        failing: Any = host.run(fail())
        fine: Any = host.run(answer(), name="answer")
        assert await fine == 42
        assert fine.result() == 42
        assert "answer" in repr(fine)
        await trio.sleep(2)
        return failing.done(), failing.cancelled()

    with caplog.at_level(logging.ERROR, logger="virtualtime.net"):
        assert run(main) == (True, False)
    assert "its exception was never retrieved" in caplog.text
    assert "KeyError: 'lost'" in caplog.text


def test_unix_sockets_on_a_host() -> None:
    async def main() -> list[Any]:
        world = net.Network(latency=LATENCY)
        seen: list[Any] = []
        async with world.host("db"), trio.open_nursery() as nursery:
            sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            await sock.bind("/run/db.sock")
            sock.listen()
            assert isinstance(sock, SimulatedSocket)
            assert sock.simulated
            nursery.start_soon(trio.serve_listeners, echo, [trio.SocketListener(sock)])
            start = now()
            stream = await trio.open_unix_socket("/run/db.sock")
            await stream.send_all(b"local")
            seen.append((await stream.receive_some(), now() - start))
            await stream.aclose()
            nursery.cancel_scope.cancel()
        return seen

    assert run(main) == [(b"local", 0.0)]


def test_a_world_leaves_the_run_and_one_run_holds_one_world() -> None:
    async def main() -> list[Any]:
        seen: list[Any] = []
        async with net.Network(latency=LATENCY) as world:
            world.host("srv")
            seen.append(type(trio.socket.socket()).__name__)
            with pytest.raises(UsageError, match="already has a simulated network"):
                net.Network()
        sock = trio.socket.socket()
        seen.append(isinstance(sock, SimulatedSocket))
        sock.close()
        async with net.Network() as other:  # a new world may come after
            seen.append(isinstance(other.driver, TrioDriver))
        return seen

    assert run(main) == ["SimulatedSocket", False, True]
