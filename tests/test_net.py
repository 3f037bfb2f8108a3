"""virtualtime.net on asyncio: simulated hosts, links, faults and per-host clocks.

Every time asserted here is exact: a link of latency L delivers a byte written at t at
exactly t + L, a connect takes one round trip, a partition makes a timeout fire at its own
instant.  The peers are asyncio's own streams and servers, unmodified.
"""

from __future__ import annotations

import asyncio
import datetime
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

import virtualtime
from virtualtime import net
from virtualtime._shared._errors import InvalidTypeError, InvalidValueError, UsageError

T = TypeVar("T")
L = 0.005  # one way


def run(main: Callable[[], Awaitable[T]], **options: Any) -> T:
    async def wrapper() -> T:
        return await main()

    return virtualtime.run(wrapper(), **options)


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


async def serve(host: net.Host, port: int, handler: Any = echo) -> asyncio.AbstractServer:
    """Start an asyncio stream server on ``host`` (from any task) and return it."""

    async def start() -> asyncio.AbstractServer:
        return await asyncio.start_server(handler, None, port)

    return await host.run(start())


def now() -> float:
    return asyncio.get_running_loop().time()


def loop_now() -> float:
    """The loop's own clock, whatever host the caller lives on (``time()`` is the host's)."""
    loop: Any = asyncio.get_running_loop()
    return float(loop._vt_now)


# ----------------------------------------------------------------------------- streams


def test_connect_takes_one_round_trip_and_bytes_one_latency() -> None:
    async def main() -> list[Any]:
        world = net.Network(latency=L)
        db, api = world.host("db"), world.host("api")
        await serve(db, 7000)
        seen: list[Any] = []
        async with api:
            t0 = now()
            reader, writer = await asyncio.open_connection("db", 7000)
            seen.append(round(now() - t0, 9))
            seen.append(writer.get_extra_info("peername"))
            seen.append(writer.get_extra_info("sockname"))
            for i in range(3):
                writer.write(b"ping %d" % i)
                seen.append((await reader.read(100), round(now() - t0, 9)))
            writer.close()
            await writer.wait_closed()
        return seen

    assert run(main) == [
        0.01,
        ("10.0.0.1", 7000),
        ("10.0.0.2", 49152),
        (b"ping 0", 0.02),
        (b"ping 1", 0.03),
        (b"ping 2", 0.04),
    ]


def test_names_and_addresses_resolve_in_the_world_only() -> None:
    async def main() -> tuple[Any, ...]:
        world = net.Network()
        db = world.host("db")
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo("db", 5432, type=socket.SOCK_STREAM)
        by_address = await loop.getaddrinfo(db.address, "5432")
        real = await loop.getaddrinfo("127.0.0.1", 80, type=socket.SOCK_STREAM)
        name = await loop.getnameinfo((db.address, 5432))
        return infos, by_address[0][4], real[0][4], name, world.resolve("DB.") is db

    infos, by_address, real, name, case = run(main)
    assert infos == [
        (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("10.0.0.1", 5432))
    ]
    assert by_address == ("10.0.0.1", 5432)
    assert real == ("127.0.0.1", 80)
    assert name == ("db", "5432")
    assert case is True


def test_refused_after_one_round_trip() -> None:
    async def main() -> tuple[float, str]:
        world = net.Network(latency=L)
        world.host("db")
        async with world.host("api"):
            t0 = now()
            with pytest.raises(ConnectionRefusedError) as caught:
                await asyncio.open_connection("db", 1)
            return round(now() - t0, 9), type(caught.value).__name__
        raise AssertionError("the host block ended early")

    assert run(main) == (0.01, "ConnectionRefusedError")


def test_server_tasks_live_on_the_server_host() -> None:
    async def main() -> list[str | None]:
        world = net.Network(latency=L)
        db, api = world.host("db"), world.host("api")
        where: list[str | None] = []

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            host = net.current_host()
            where.append(None if host is None else host.name)
            writer.close()

        await serve(db, 80, handler)
        async with api:
            where.append(net.current_host().name)  # type: ignore[union-attr]
            reader, writer = await asyncio.open_connection("db", 80)
            assert await reader.read() == b""
            writer.close()
        where.append(None if net.current_host() is None else "?")
        return where

    assert run(main) == ["api", "db", None]


def test_eof_close_and_reset() -> None:
    async def main() -> list[Any]:
        world = net.Network(latency=L)
        db, api = world.host("db"), world.host("api")
        seen: list[Any] = []

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            data = await reader.read()  # until EOF
            seen.append(("server got", data, round(now(), 9)))
            writer.write(b"bye")
            writer.close()

        await serve(db, 80, handler)
        async with api:
            reader, writer = await asyncio.open_connection("db", 80)
            writer.write(b"abc")
            writer.write_eof()
            seen.append(("client got", await reader.read(), round(now(), 9)))
            writer.close()
            _reader2, writer2 = await asyncio.open_connection("db", 80)
            writer2.transport.abort()
            await asyncio.sleep(1)
        return seen

    assert run(main) == [("server got", b"abc", 0.015), ("client got", b"bye", 0.02)]


def test_back_pressure_drain_waits_for_the_reader() -> None:
    async def main() -> list[Any]:
        world = net.Network(latency=L)
        db, api = world.host("db"), world.host("api")
        release = asyncio.Event()
        got = bytearray()

        async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await release.wait()
                while data := await reader.read(1 << 20):
                    got.extend(data)
            finally:
                writer.close()

        await serve(db, 80, slow)
        log: list[Any] = []
        async with api:
            _reader, writer = await asyncio.open_connection("db", 80)
            chunk = b"x" * 65536
            sent = 0
            for _ in range(40):
                writer.write(chunk)
                sent += len(chunk)
                try:
                    async with asyncio.timeout(1):
                        await writer.drain()
                except TimeoutError:
                    log.append(("blocked after", sent, writer.transport.get_write_buffer_size()))
                    break
            release.set()
            await writer.drain()
            log.append(("drained", writer.transport.get_write_buffer_size() <= 16 * 1024))
            writer.close()
            await writer.wait_closed()
            await asyncio.sleep(1)
        log.append(("received", len(got), bytes(got) == b"x" * sent))
        return log

    log = run(main)
    blocked = log[0]
    assert blocked[0] == "blocked after"
    # Full: the server's StreamReader buffer (up to twice its 64 KiB limit, then it pauses
    # reading), the window (256 KiB) behind it, and the sender's buffer past its high-water
    # mark (64 KiB).
    assert net.WINDOW + 2 * 65536 < blocked[1] <= net.WINDOW + 6 * 65536
    assert blocked[2] > 64 * 1024
    assert log[1] == ("drained", True)
    assert log[2] == ("received", blocked[1], True)


def test_bandwidth_limits_a_transfer() -> None:
    async def main() -> float:
        world = net.Network(latency=0.01, bandwidth=1_000_000)
        db, api = world.host("db"), world.host("api")
        done = asyncio.Event()
        total = 0

        async def sink(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal total
            try:
                while data := await reader.read(1 << 20):
                    total += len(data)
                    if total == 1_000_000:
                        done.set()
            finally:
                writer.close()

        await serve(db, 80, sink)
        async with api:
            _reader, writer = await asyncio.open_connection("db", 80)
            t0 = now()
            writer.write(b"y" * 1_000_000)
            await done.wait()
            writer.close()
            return round(now() - t0, 9)
        raise AssertionError("the host block ended early")

    # One second on the wire, then the last byte's latency.
    assert run(main) == 1.01


def test_the_real_network_still_works_in_the_same_run() -> None:
    async def main() -> tuple[bytes, bytes]:
        world = net.Network(latency=L)
        db, api = world.host("db"), world.host("api")
        await serve(db, 80)
        real = await asyncio.start_server(echo, "127.0.0.1", 0)
        real_port = real.sockets[0].getsockname()[1]
        async with api:
            # From inside a simulated host, 127.0.0.1 is the real machine.
            r1, w1 = await asyncio.open_connection("127.0.0.1", real_port)
            w1.write(b"real")
            got_real = await r1.readexactly(4)
            w1.close()
            await w1.wait_closed()
            r2, w2 = await asyncio.open_connection("db", 80)
            w2.write(b"simulated")
            got_sim = await r2.readexactly(9)
            w2.close()
        real.close()
        await real.wait_closed()
        return got_real, got_sim

    assert run(main) == (b"real", b"simulated")


# ------------------------------------------------------------------------ partitions


def test_partition_timeout_fires_at_its_instant_and_heal_delivers_in_order() -> None:
    async def main() -> list[Any]:
        world = net.Network(latency=L)
        db, api = world.host("db"), world.host("api")
        got: list[tuple[bytes, float]] = []

        async def collect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while data := await reader.read(100):
                    got.append((data, round(now(), 9)))
            finally:
                writer.close()

        await serve(db, 80, collect)
        log: list[Any] = []
        async with api:
            _reader, writer = await asyncio.open_connection("db", 80)  # at 0.01
            world.partition(api, db)
            for i in range(3):
                writer.write(b"<%d>" % i)
                await asyncio.sleep(0.1)
            try:
                async with asyncio.timeout(2):
                    await asyncio.open_connection("db", 80)
            except TimeoutError:
                log.append(("timed out at", round(now(), 9)))
            world.heal(api, db)
            await asyncio.sleep(1)
            writer.close()
        log.append(got)
        return log

    # Held bytes leave at the heal (2.31) and arrive one latency later, coalesced, in order.
    assert run(main) == [("timed out at", 2.31), [(b"<0><1><2>", 2.315)]]


def test_a_connect_across_a_partition_completes_after_the_heal() -> None:
    async def main() -> float:
        world = net.Network(latency=L)
        db, api = world.host("db"), world.host("api")
        await serve(db, 80)
        world.partition("api", "db")
        loop = asyncio.get_running_loop()
        loop.call_later(3, world.heal)
        async with api:
            _reader, writer = await asyncio.open_connection("db", 80)
            writer.close()
            return round(now(), 9)
        raise AssertionError("the host block ended early")

    assert run(main) == 3.01


def test_an_unanswered_connect_gives_up_after_connect_timeout() -> None:
    async def main() -> tuple[str, float]:
        world = net.Network(latency=L, connect_timeout=20)
        world.host("db")
        api = world.host("api")
        world.partition(api, "db")
        async with api:
            try:
                await asyncio.open_connection("db", 80)
            except TimeoutError as exc:
                return type(exc).__name__, round(now(), 9)
        raise AssertionError("connected across a partition")

    assert run(main) == ("TimeoutError", 20.0)


# ------------------------------------------------------------------- crash and pause


def test_crash_resets_peers_and_restart_serves_again() -> None:
    async def main() -> list[Any]:
        world = net.Network(latency=L, connect_timeout=5)
        db, api = world.host("db"), world.host("api")
        log: list[Any] = []

        async def server() -> None:
            try:
                srv = await asyncio.start_server(echo, None, 80)
                await srv.serve_forever()
            finally:
                log.append(("db cleanup at", round(now(), 9)))

        db.run(server())
        await asyncio.sleep(0)
        async with api:
            reader, writer = await asyncio.open_connection("db", 80)
            loop = asyncio.get_running_loop()
            loop.call_at(1.0, db.crash)
            try:
                await reader.read(100)
            except ConnectionResetError:
                log.append(("reset seen at", round(now(), 9)))
            try:
                await asyncio.open_connection("db", 80)
            except TimeoutError:
                log.append(("no answer until", round(now(), 9)))
            db.restart(server())
            await asyncio.sleep(0)
            reader, writer = await asyncio.open_connection("db", 80)
            writer.write(b"again")
            log.append((await reader.read(100), round(now(), 9)))
            writer.close()
        log.append(("crashes", db.crashes, db.up))
        return log

    assert run(main) == [
        ("db cleanup at", 1.0),
        ("reset seen at", 1.005),
        ("no answer until", 6.005),
        (b"again", 6.025),
        ("crashes", 1, True),
        ("db cleanup at", 6.025),  # the restarted server, cancelled as the run ends
    ]


def test_a_crashed_hosts_timers_never_fire() -> None:
    async def main() -> list[str]:
        world = net.Network()
        db = world.host("db")
        fired: list[str] = []
        loop = asyncio.get_running_loop()
        async with db:
            loop.call_later(5, fired.append, "db timer")
        loop.call_later(5, fired.append, "main timer")
        db.crash()
        await asyncio.sleep(10)
        return fired

    assert run(main) == ["main timer"]


def test_pause_holds_everything_on_the_host_until_it_ends() -> None:
    async def main() -> list[Any]:
        world = net.Network(latency=L)
        db, api = world.host("db"), world.host("api")
        await serve(db, 80)
        log: list[Any] = []

        async def ticker() -> None:
            for _ in range(3):
                await asyncio.sleep(1)
                log.append(("tick", round(now(), 9)))

        db.run(ticker())
        async with api:
            reader, writer = await asyncio.open_connection("db", 80)  # 0.01
            db.pause(2.5)  # 0.01 .. 2.51
            writer.write(b"hi")
            log.append((await reader.read(10), round(now(), 9)))
            writer.close()
        await asyncio.sleep(5)
        return log

    assert run(main) == [
        ("tick", 2.51),  # due at 1.0, held until the pause ended
        (b"hi", 2.515),  # arrived at 0.015, answered at 2.51, back one latency later
        ("tick", 3.51),
        ("tick", 4.51),
    ]


# ------------------------------------------------------------------------ host clocks


def test_per_host_clocks_are_seen_by_time_functions_and_timeouts() -> None:
    async def main() -> dict[str, Any]:
        world = net.Network()
        skewed = world.host("b", clock_offset=2.0)
        fast = world.host("c", clock_rate=2.0)
        out: dict[str, Any] = {}
        await asyncio.sleep(10)
        out["main"] = (now(), time.monotonic(), time.time())
        async with skewed:
            out["b"] = (now(), time.monotonic(), time.time(), skewed.time())
            out["b datetime"] = datetime.datetime.now(datetime.UTC).timestamp()
        async with fast:
            t0 = loop_now()  # the loop's own clock
            await asyncio.sleep(4)  # four seconds of c's clock
            out["c sleep took"] = loop_now() - t0
            try:
                async with asyncio.timeout(1):
                    await asyncio.Event().wait()
            except TimeoutError:
                out["c timeout took"] = loop_now() - t0 - 2
        skewed.set_clock(offset=-1.0)
        async with skewed:
            out["b stepped"] = now() - loop_now()
        return out

    out = run(main, patch_time=True, wall_start=1_000_000.0)
    assert out["main"] == (10.0, 10.0, 1_000_010.0)
    assert out["b"] == (12.0, 12.0, 1_000_012.0, 12.0)
    assert out["b datetime"] == 1_000_012.0
    assert out["c sleep took"] == 2.0
    assert out["c timeout took"] == 0.5
    assert out["b stepped"] == -1.0


# ------------------------------------------------------------------------- datagrams


class _Collect(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.got: list[tuple[bytes, float, Any]] = []

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.got.append((data, round(now(), 9), addr))


def _datagrams(seed: int, **link: Any) -> list[tuple[bytes, float, Any]]:
    async def main() -> list[tuple[bytes, float, Any]]:
        world = net.Network(latency=L)
        a, b = world.host("a"), world.host("b")
        if link:
            world.link(a, b, **link)
        loop = asyncio.get_running_loop()
        async with b:
            _t, sink = await loop.create_datagram_endpoint(_Collect, local_addr=("0.0.0.0", 53))
        async with a:
            transport, _p = await loop.create_datagram_endpoint(
                asyncio.DatagramProtocol, remote_addr=("b", 53)
            )
            for i in range(10):
                transport.sendto(b"d%d" % i)
        await asyncio.sleep(1)
        transport.close()
        return sink.got

    return run(main, seed=seed)


def test_datagrams_travel_one_latency() -> None:
    got = _datagrams(1)
    assert [g[0] for g in got] == [b"d%d" % i for i in range(10)]
    assert {g[1] for g in got} == {L}
    assert {g[2] for g in got} == {("10.0.0.1", 49152)}


def test_datagram_loss_duplication_and_jitter_follow_the_seed() -> None:
    lossy = _datagrams(3, loss=0.5)
    assert 0 < len(lossy) < 10
    assert lossy == _datagrams(3, loss=0.5)
    assert len(_datagrams(3, loss=1.0)) == 0
    assert len(_datagrams(3, duplicate=1.0)) == 20
    jittered = [g[0] for g in _datagrams(5, jitter=0.01)]
    assert sorted(jittered) == sorted(b"d%d" % i for i in range(10))
    assert any(jittered != [g[0] for g in _datagrams(s, jitter=0.01)] for s in range(6, 10))
    assert jittered == [g[0] for g in _datagrams(5, jitter=0.01)]


def test_stream_jitter_never_reorders() -> None:
    async def main() -> tuple[bytes, list[float]]:
        world = net.Network(latency=L, jitter=0.02)
        db, api = world.host("db"), world.host("api")
        got = bytearray()
        times: list[float] = []

        async def collect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while data := await reader.read(100):
                    got.extend(data)
                    times.append(now())
            finally:
                writer.close()

        await serve(db, 80, collect)
        async with api:
            _r, writer = await asyncio.open_connection("db", 80)
            for i in range(50):
                writer.write(b"%02d" % i)
                await asyncio.sleep(0.001)
            await asyncio.sleep(1)
            writer.close()
        return bytes(got), times

    data, times = run(main, seed=11)
    assert data == b"".join(b"%02d" % i for i in range(50))
    assert times == sorted(times)
    assert len(set(times)) > 5  # the jitter did spread the arrivals


# ----------------------------------------------------------------- unix and raw sockets


def test_unix_sockets_are_local_to_their_host() -> None:
    async def main() -> tuple[bytes, str]:
        world = net.Network(latency=L)
        db, api = world.host("db"), world.host("api")
        async with db:
            await asyncio.start_unix_server(echo, path="/run/db.sock")
            reader, writer = await asyncio.open_unix_connection("/run/db.sock")
            writer.write(b"local")
            got = await reader.read(10)
            writer.close()
        async with api:
            try:
                await asyncio.open_unix_connection("/run/db.sock")
            except OSError as exc:  # api's filesystem has no such socket: the real one
                return got, type(exc).__name__
        raise AssertionError("api reached db's Unix socket")

    assert run(main) == (b"local", "FileNotFoundError")


def test_sock_connect_and_the_sock_methods() -> None:
    async def main() -> tuple[bytes, bytes, float]:
        world = net.Network(latency=L)
        db, api = world.host("db"), world.host("api")
        await serve(db, 80)
        loop = asyncio.get_running_loop()
        async with api:
            with socket.socket() as sock:
                sock.setblocking(False)
                await loop.sock_connect(sock, ("db", 80))
                await loop.sock_sendall(sock, b"raw bytes")
                first = await loop.sock_recv(sock, 3)
                buf = bytearray(20)
                n = await loop.sock_recv_into(sock, buf)
                return first, bytes(buf[:n]), round(now(), 9)
        raise AssertionError("the host block ended early")

    assert run(main) == (b"raw", b" bytes", 0.02)


# --------------------------------------------------------------------- determinism


def _trace(seed: int) -> list[tuple[float, str]]:
    async def main() -> list[tuple[float, str]]:
        world = net.Network(latency=L, jitter=0.004)
        hosts = [world.host(f"n{i}") for i in range(3)]
        trace: list[tuple[float, str]] = []

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while line := await reader.readline():
                    me = net.current_host().name  # type: ignore[union-attr]
                    trace.append((round(now(), 9), f"{me} got {line.decode().strip()}"))
                    writer.write(line)
            finally:
                writer.close()

        for h in hosts:
            await serve(h, 80, handler)

        async def client(h: net.Host) -> None:
            async with h:
                for other in hosts:
                    if other is h:
                        continue
                    reader, writer = await asyncio.open_connection(other.name, 80)
                    for k in range(3):
                        writer.write(f"{h.name}-{k}\n".encode())
                        await reader.readline()
                        await asyncio.sleep(0.001)
                    writer.close()

        await asyncio.gather(*(client(h) for h in hosts))
        return trace

    return run(main, seed=seed)


def test_one_seed_one_run_and_another_seed_another() -> None:
    first = _trace(7)
    assert first == _trace(7)
    assert any(first != _trace(seed) for seed in (8, 9, 10))
    assert len(first) == 18


# ----------------------------------------------------------------------- bad input


def test_bad_input_is_refused_with_the_rule() -> None:
    with pytest.raises(InvalidValueError, match="latency must be finite and >= 0, got -1"):
        net.Network(latency=-1)
    with pytest.raises(InvalidTypeError, match="latency must be a number of seconds"):
        net.Network(latency="5ms")  # type: ignore[arg-type]
    with pytest.raises(InvalidValueError, match=r"loss must be a probability in \[0, 1\], got 2"):
        net.Network(loss=2)
    with pytest.raises(InvalidValueError, match="bandwidth must be finite and > 0"):
        net.Network(bandwidth=0)
    with pytest.raises(InvalidValueError, match="seed must be a non-negative int"):
        net.Network(seed=-3)
    world = net.Network()
    world.host("db")
    with pytest.raises(UsageError, match="already has a host called 'DB'"):
        world.host("DB")
    with pytest.raises(InvalidValueError, match="not an address"):
        world.host("10.0.0.9")
    with pytest.raises(InvalidValueError, match="clock_rate must be finite and > 0"):
        world.host("x", clock_rate=0)
    assert [h.name for h in world.hosts] == ["db"]  # nothing was added by the refusals
    with pytest.raises(InvalidValueError, match="no host called 'nowhere'"):
        world.partition("db", "nowhere")
    with pytest.raises(InvalidValueError, match="duration must be finite and >= 0"):
        world.hosts[0].pause(-1)
    with pytest.raises(UsageError, match="running virtual loop"):
        world.hosts[0].pause(1)

    async def on_stock_loop() -> None:
        net.Network()

    with pytest.raises(UsageError, match="needs the virtual event loop"):
        asyncio.run(on_stock_loop())


def test_one_world_per_loop() -> None:
    async def main() -> None:
        net.Network()
        net.Network()

    with pytest.raises(UsageError, match="already has a simulated network"):
        run(main)


def test_async_with_detaches_the_world() -> None:
    async def main() -> tuple[bool, bool]:
        loop: Any = asyncio.get_running_loop()
        async with net.Network() as world:
            world.host("db")
            inside = loop._vt_net is world
        return inside, loop._vt_net is None

    assert run(main) == (True, True)


def test_a_crash_ends_a_host_block_of_another_task_quietly() -> None:
    async def main() -> list[Any]:
        world = net.Network()
        db = world.host("db")
        log: list[Any] = []
        asyncio.get_running_loop().call_at(1.0, db.crash)
        async with db:
            try:
                await asyncio.sleep(100)
            finally:
                log.append(("cleanup at", now()))
        log.append(("after the block at", now(), net.current_host()))
        # Cancellation asked for by someone else is never swallowed by the block.
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().call_at(2.0, task.cancel)
        db.restart()
        with pytest.raises(asyncio.CancelledError):
            async with db:
                await asyncio.sleep(100)
        task.uncancel()
        log.append(("outside cancel kept at", now()))
        return log

    assert run(main) == [
        ("cleanup at", 1.0),
        ("after the block at", 1.0, None),
        ("outside cancel kept at", 2.0),
    ]


def test_anyio_sleep_and_fail_after_follow_the_hosts_clock() -> None:
    import anyio

    async def main() -> tuple[float, float]:
        world = net.Network()
        fast = world.host("fast", clock_rate=4.0)
        async with fast:
            t0 = loop_now()
            await anyio.sleep(8)  # eight seconds of fast's clock: two of the loop's
            slept = loop_now() - t0
            with anyio.move_on_after(4):
                await anyio.sleep_forever()
            return slept, loop_now() - t0 - slept
        raise AssertionError("the host block ended early")

    assert run(main) == (2.0, 1.0)
