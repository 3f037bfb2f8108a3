"""virtualtime.net's faults at their corners: crashes amid task groups, resets racing
connects, pauses and crashes together, partitions and the world's end.

Each test is a case a review found broken once; each asserts the exact outcome.
"""

from __future__ import annotations

import asyncio
import gc
import socket
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

import virtualtime
from virtualtime import net
from virtualtime._shared._errors import InvalidValueError

T = TypeVar("T")
L = 0.005


def run(main: Callable[[], Awaitable[T]], **options: Any) -> T:
    async def wrapper() -> T:
        return await main()

    return virtualtime.run(wrapper(), **options)


def now() -> float:
    return asyncio.get_running_loop().time()


async def start_server(host: net.Host, handler: Any, port: int) -> asyncio.AbstractServer:
    async def start() -> asyncio.AbstractServer:
        return await asyncio.start_server(handler, None, port)

    return await host.run(start())


def test_a_crash_ends_gather_and_task_group_parents_on_the_host() -> None:
    async def main() -> list[str]:
        world = net.Network()
        h = world.host("h")
        log: list[str] = []

        async def child() -> None:
            await asyncio.sleep(100)

        async def gathering() -> None:
            try:
                await asyncio.gather(child(), child())
            finally:
                log.append(f"gather parent ended at {now()}")

        async def grouping() -> None:
            try:
                async with asyncio.TaskGroup() as group:
                    group.create_task(child())
                    group.create_task(child())
            finally:
                log.append(f"task group parent ended at {now()}")

        tasks = [h.run(gathering()), h.run(grouping())]
        await asyncio.sleep(1)
        h.crash()
        await asyncio.sleep(10)
        log.append(str([t.cancelled() for t in tasks]))
        return log

    assert run(main) == [
        "gather parent ended at 1.0",
        "task group parent ended at 1.0",
        "[True, True]",
    ]


def test_a_task_that_swallows_the_crash_does_nothing_more() -> None:
    async def main() -> list[float]:
        world = net.Network()
        h = world.host("h")
        ticks: list[float] = []

        async def stubborn() -> None:
            for _ in range(10):  # not for ever: a task that always swallows never ends
                try:
                    await asyncio.sleep(1)
                    ticks.append(now())
                except asyncio.CancelledError:
                    pass

        task = h.run(stubborn())
        await asyncio.sleep(2.5)
        h.crash()
        await task  # it swallowed every cancellation, so it ends by returning
        return ticks

    assert run(main) == [1.0, 2.0]


def test_a_reset_racing_the_connect_is_never_lost() -> None:
    def outcome(seed: int | None) -> tuple[str, float]:
        async def main() -> tuple[str, float]:
            world = net.Network(latency=L)
            db, api = world.host("db"), world.host("api")

            class Slammer(asyncio.Protocol):
                def connection_made(self, transport: Any) -> None:
                    transport.abort()

            async def start() -> Any:
                return await asyncio.get_running_loop().create_server(Slammer, None, 80)

            await db.run(start())
            async with api:
                try:
                    reader, writer = await asyncio.open_connection("db", 80)
                except ConnectionResetError:
                    return "the connect failed", now()
                try:
                    await reader.read()
                except ConnectionResetError:
                    return "the first read failed", now()
                finally:
                    writer.close()
            raise AssertionError("the reset was lost")

        return run(main) if seed is None else run(main, seed=seed)

    # The server's answer and its reset both arrive at 0.01: in the order sent, the connect
    # succeeds and the first read fails; a seed may deliver the reset first, and then the
    # connect itself fails.  Either way, at 0.01 -- never a hang.
    assert outcome(None) == ("the first read failed", 0.01)
    seen = {outcome(seed) for seed in range(12)}
    assert seen <= {("the first read failed", 0.01), ("the connect failed", 0.01)}


def test_a_connect_cancelled_after_its_syn_arrived_resets_the_server_end() -> None:
    async def main() -> list[Any]:
        world = net.Network(latency=L)
        db, api = world.host("db"), world.host("api")
        seen: list[Any] = []

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await reader.read()
            except ConnectionResetError:
                seen.append(("server end reset at", now()))
            finally:
                writer.close()

        await start_server(db, handler, 80)
        async with api:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.007):  # the SYN arrived at 0.005, not the answer
                    await asyncio.open_connection("db", 80)
        await asyncio.sleep(1)
        return seen

    assert run(main) == [("server end reset at", 0.012)]


def test_closing_with_unread_bytes_resets_the_peer() -> None:
    async def main() -> str:
        world = net.Network(latency=L)
        db, api = world.host("db"), world.host("api")
        outcome: list[str] = []

        class Paused(asyncio.Protocol):
            def connection_made(self, transport: Any) -> None:
                transport.pause_reading()  # what arrives stays unread in the socket
                asyncio.get_running_loop().call_later(0.1, transport.close)

        async def start() -> Any:
            return await asyncio.get_running_loop().create_server(Paused, None, 80)

        await db.run(start())
        async with api:
            reader, writer = await asyncio.open_connection("db", 80)
            writer.write(b"never read")
            try:
                await reader.read()
                outcome.append("end of file")
            except ConnectionResetError:
                outcome.append(f"reset at {now()}")
            writer.close()
        return outcome[0]

    # The close at 0.105 (accepted at 0.005) finds bytes unread: a reset, there at 0.11.
    assert run(main) == "reset at 0.11"


def test_a_paused_server_host_accepts_when_its_pause_ends() -> None:
    async def main() -> list[Any]:
        world = net.Network(latency=L)
        db, api = world.host("db"), world.host("api")
        log: list[Any] = []

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            log.append(("accepted at", now()))
            writer.write(await reader.read(10))
            writer.close()

        await start_server(db, handler, 80)
        db.pause(2)
        async with api:
            reader, writer = await asyncio.open_connection("db", 80)
            log.append(("connected at", now()))  # the kernel answered the SYN
            writer.write(b"hi")
            log.append((await reader.read(10), now()))
            writer.close()
        return log

    assert run(main) == [("connected at", 0.01), ("accepted at", 2.0), (b"hi", 2.005)]


def test_a_crash_ends_a_pause_and_nothing_from_before_it_runs_after_the_restart() -> None:
    async def main() -> list[str]:
        world = net.Network()
        h = world.host("h")
        fired: list[str] = []
        loop = asyncio.get_running_loop()
        async with h:
            loop.call_later(1, fired.append, "timer from before the crash")
        h.pause(3)
        await asyncio.sleep(2)  # the timer fired into the pause and waits there
        h.crash()
        h.restart()
        await asyncio.sleep(5)
        fired.append(f"paused after the restart: {h.paused}")
        return fired

    assert run(main) == ["paused after the restart: False"]


def test_a_crash_across_a_partition_resets_the_peer_after_the_heal() -> None:
    async def main() -> str:
        world = net.Network(latency=L)
        db, api = world.host("db"), world.host("api")

        async def idle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await reader.read()
            finally:
                writer.close()

        await start_server(db, idle, 80)
        loop = asyncio.get_running_loop()
        async with api:
            reader, writer = await asyncio.open_connection("db", 80)
            world.partition(api, db)
            loop.call_at(1, db.crash)
            loop.call_at(3, world.heal)
            try:
                await reader.read()
            except ConnectionResetError:
                return f"reset at {now()}"
            finally:
                writer.close()
        raise AssertionError("the host block ended early")

    assert run(main) == "reset at 3.005"


def test_datagrams_flow_again_after_a_crash_and_restart() -> None:
    class Collect(asyncio.DatagramProtocol):
        def __init__(self) -> None:
            self.got: list[tuple[bytes, float]] = []

        def datagram_received(self, data: bytes, addr: Any) -> None:
            self.got.append((data, now()))

    async def main() -> list[tuple[bytes, float]]:
        world = net.Network(latency=L)
        a, b = world.host("a"), world.host("b")
        loop = asyncio.get_running_loop()

        async def bind() -> Collect:
            _transport, protocol = await loop.create_datagram_endpoint(
                Collect, local_addr=("0.0.0.0", 53)
            )
            return protocol

        await b.run(bind())
        async with a:
            sender, _ = await loop.create_datagram_endpoint(
                asyncio.DatagramProtocol, remote_addr=("b", 53)
            )
            sender.sendto(b"lost in the crash")
            b.crash()
            b.restart()
            sink = await b.run(bind())
            sender.sendto(b"after the restart")
            await asyncio.sleep(1)
            sender.close()
        return sink.got

    assert run(main) == [(b"after the restart", L)]


def test_the_orders_of_a_crash_and_a_heal_do_not_depend_on_memory() -> None:
    def scenario(padding: int) -> list[Any]:
        async def main() -> list[Any]:
            garbage = [object() for _ in range(padding)]  # moves later allocations
            world = net.Network(latency=L)
            db, api = world.host("db"), world.host("api")
            log: list[Any] = []

            async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                name = (await reader.readline()).strip().decode()
                try:
                    await reader.read()
                finally:
                    log.append(("ended", name, now()))
                    writer.close()

            await start_server(db, handler, 80)
            writers = []
            async with api:
                for i in range(8):
                    _reader, writer = await asyncio.open_connection("db", 80)
                    writer.write(b"c%d\n" % i)
                    writers.append(writer)
                world.partition(api, db)
                for writer in writers:
                    writer.write(b"held")
                await asyncio.sleep(1)
                world.heal()
                await asyncio.sleep(1)
                db.crash()
                await asyncio.sleep(1)
                for writer in writers:
                    writer.close()
            del garbage
            return log

        return run(main, seed=5)

    first = scenario(0)
    assert len(first) == 8
    for padding in (1, 17, 1000):
        gc.collect()
        assert scenario(padding) == first


def test_when_the_world_ends_its_connections_are_reset() -> None:
    async def main() -> str:
        db_reader: list[asyncio.StreamReader] = []
        async with net.Network(latency=L) as world:
            db, api = world.host("db"), world.host("api")

            async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                db_reader.append(reader)
                try:
                    await reader.read()
                except ConnectionResetError:
                    pass
                finally:
                    writer.close()

            await start_server(db, handler, 80)
            async with api:
                reader, writer = await asyncio.open_connection("db", 80)
        try:
            await reader.read()
        except ConnectionResetError:
            return "reset"
        finally:
            writer.close()
        return "no reset"

    assert run(main) == "reset"


def test_a_socket_closed_by_the_program_ends_its_simulated_connection() -> None:
    async def main() -> tuple[str, float]:
        world = net.Network(latency=L)
        db, api = world.host("db"), world.host("api")
        seen: list[tuple[str, float]] = []

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read()
            seen.append(("end of file at", now()))
            writer.close()

        await start_server(db, handler, 80)
        loop = asyncio.get_running_loop()
        async with api:
            sock = socket.socket()
            sock.setblocking(False)
            await loop.sock_connect(sock, ("db", 80))
            sock.close()
            with pytest.raises(OSError, match="Bad file descriptor"):
                await loop.sock_sendall(sock, b"x")
            await asyncio.sleep(1)
        return seen[0]

    assert run(main) == ("end of file at", 0.015)


def test_bad_fault_arguments_change_nothing() -> None:
    async def main() -> list[str]:
        world = net.Network()
        a, b = world.host("a"), world.host("b")
        errors = []
        with pytest.raises(InvalidValueError, match="no host called 'nowhere'") as caught:
            world.partition([a, b], (name for name in ("b", "nowhere")))
        errors.append(str(caught.value))
        assert world.connected(a, b)  # the refused call cut nothing
        world.partition([a], (name for name in ("b",)))
        assert not world.connected(a, b)
        with pytest.raises(InvalidValueError, match="to itself"):
            world.link(a, "a")
        async with a:
            with pytest.raises(InvalidValueError, match="port must be in 0-65535, got 70000"):
                await asyncio.open_connection("b", 70000)
        return errors

    assert run(main) == ["partition: no host called 'nowhere' in this world"]
