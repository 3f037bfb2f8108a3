"""The TLS layer of the simulated network (``virtualtime.net._tls``), over real 127.0.0.1.

:func:`wrap` puts TLS on any asyncio transport; here the transports are real loopback sockets
on the virtual loop, so every case also checks the layer against OpenSSL on the other side:
both ends through the layer, or one end stock asyncio TLS (``start_server(ssl=)``,
``open_connection(ssl=)``).  The certificates come from a throw-away ``trustme`` CA.
Covered: 1 MiB echoed exactly (copied and buffered protocols), asyncio streams on top, the
``start_tls`` form, a wrong host name, the handshake timeout at its exact virtual instant,
``close_notify`` as end of file, a stream that ends without it, abort, cancellation,
write flow control, read pausing, errors of the program's protocol, and bad arguments.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import ssl
from collections.abc import Callable, Coroutine
from typing import Any, cast

import pytest
import trustme

import virtualtime
from virtualtime import InvalidTypeError, InvalidValueError, UsageError
from virtualtime.net._tls import HalfCloseError, TLSTransport, wrap

MIB = 1 << 20


@dataclasses.dataclass(frozen=True)
class Certs:
    server: ssl.SSLContext
    client: ssl.SSLContext
    client_tls12: ssl.SSLContext  # a client that goes no further than TLS 1.2


@pytest.fixture(scope="module")
def certs() -> Certs:
    """A throw-away CA, a certificate for ``localhost`` and the contexts of both sides."""
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(server)
    client, client_tls12 = ssl.create_default_context(), ssl.create_default_context()
    ca.configure_trust(client)
    ca.configure_trust(client_tls12)
    client_tls12.maximum_version = ssl.TLSVersion.TLSv1_2
    return Certs(server, client, client_tls12)


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    virtualtime.run(main())


def payload(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


# ------------------------------------------------------------------ protocols


class Held(asyncio.Protocol):
    """A fresh plain connection, paused at once so that no TLS byte is read before
    :func:`wrap` takes it over."""

    def __init__(self, into: asyncio.Queue[asyncio.Transport] | None = None) -> None:
        self.into = into

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        plain = cast(asyncio.Transport, transport)
        plain.pause_reading()
        if self.into is not None:
            self.into.put_nowait(plain)


class Recorder(asyncio.Protocol):
    """Keeps what it receives and the calls it gets; echoes when asked to."""

    def __init__(self, *, echo: bool = False, keep_open: bool = False) -> None:
        self.echo = echo
        self.keep_open = keep_open
        self.data = bytearray()
        self.events: list[str] = []
        self.transport: asyncio.Transport | None = None
        self.lost: asyncio.Future[Exception | None] = asyncio.get_running_loop().create_future()
        self._changed = asyncio.Event()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.events.append("made")

    def data_received(self, data: bytes) -> None:
        self.data += data
        if self.echo:
            assert self.transport is not None
            self.transport.write(data)
        self._changed.set()

    def eof_received(self) -> bool:
        self.events.append("eof")
        self._changed.set()
        return self.keep_open

    def pause_writing(self) -> None:
        self.events.append("pause")

    def resume_writing(self) -> None:
        self.events.append("resume")

    def connection_lost(self, exc: Exception | None) -> None:
        self.events.append("lost")
        self.lost.set_result(exc)
        self._changed.set()

    async def until(self, done: Callable[[Recorder], bool]) -> None:
        while not done(self):
            self._changed.clear()
            await self._changed.wait()


class BufferedEcho(asyncio.BufferedProtocol):
    """Receives through a small buffer of its own, so one arrival takes many rounds."""

    def __init__(self, size: int) -> None:
        self.buffer = bytearray(size)
        self.data = bytearray()
        self.rounds = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def get_buffer(self, sizehint: int) -> bytearray:
        return self.buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.rounds += 1
        chunk = bytes(self.buffer[:nbytes])
        self.data += chunk
        assert self.transport is not None
        self.transport.write(chunk)


# ------------------------------------------------------------------ connecting


@dataclasses.dataclass
class Pair:
    client: asyncio.Transport
    server: asyncio.Transport
    client_raw: asyncio.Transport
    server_raw: asyncio.Transport


async def plain_pair() -> tuple[asyncio.Transport, asyncio.Transport]:
    """A connected pair of plain loopback transports, both paused: (client, server)."""
    loop = asyncio.get_running_loop()
    accepted: asyncio.Queue[asyncio.Transport] = asyncio.Queue()
    server = await loop.create_server(lambda: Held(accepted), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client_raw, _ = await loop.create_connection(Held, "127.0.0.1", port)
    server_raw = await accepted.get()
    # Stop listening; not wait_closed(): from 3.12 on it also waits for this connection.
    server.close()
    return client_raw, server_raw


async def tls_pair(
    certs: Certs, client_app: asyncio.BaseProtocol, server_app: asyncio.BaseProtocol
) -> Pair:
    """Both ends of a loopback connection through :func:`wrap`."""
    loop = asyncio.get_running_loop()
    client_raw, server_raw = await plain_pair()
    client, server = await asyncio.gather(
        wrap(loop, client_raw, client_app, certs.client, server_side=False,
             server_hostname="localhost"),
        wrap(loop, server_raw, server_app, certs.server, server_side=True,
             server_hostname=None),
    )  # fmt: skip
    return Pair(client, server, client_raw, server_raw)


async def closed(*apps: Recorder) -> list[Exception | None]:
    return [await app.lost for app in apps]


# ------------------------------------------------------------------ data


def test_one_mib_echoed_exactly_with_both_ends_through_the_layer(certs: Certs) -> None:
    sent = payload(MIB, 1)

    async def main() -> None:
        client_app, server_app = Recorder(), Recorder(echo=True)
        pair = await tls_pair(certs, client_app, server_app)
        assert isinstance(pair.client, TLSTransport)
        assert client_app.events == server_app.events == ["made"]
        pair.client.write(sent[:1000])
        pair.client.writelines([sent[1000:5000], bytearray(sent[5000 : MIB // 2])])
        pair.client.write(memoryview(sent)[MIB // 2 :])
        await client_app.until(lambda app: len(app.data) >= MIB)
        assert bytes(server_app.data) == sent
        assert bytes(client_app.data) == sent
        assert pair.client.get_write_buffer_size() == 0

        pair.client.close()
        assert pair.client.is_closing()
        assert await closed(client_app, server_app) == [None, None]
        assert server_app.events[-2:] == ["eof", "lost"]
        assert pair.client_raw.is_closing()
        assert pair.server_raw.is_closing()

    run(main)


def test_tls_1_2_carries_data_and_closes_the_same_way(certs: Certs) -> None:
    sent = payload(100_000, 5)

    async def main() -> None:
        client_app, server_app = Recorder(), Recorder(echo=True)
        older = Certs(certs.server, certs.client_tls12, certs.client_tls12)
        pair = await tls_pair(older, client_app, server_app)
        assert pair.client.get_extra_info("ssl_object").version() == "TLSv1.2"
        pair.client.write(sent)
        await client_app.until(lambda app: len(app.data) >= len(sent))
        assert bytes(client_app.data) == sent
        pair.server.close()
        assert await closed(client_app, server_app) == [None, None]
        assert client_app.events == ["made", "eof", "lost"]

    run(main)


def test_the_extra_info_is_the_tls_facts_then_the_plain_transports(certs: Certs) -> None:
    async def main() -> None:
        client_app, server_app = Recorder(), Recorder()
        pair = await tls_pair(certs, client_app, server_app)
        info = pair.client.get_extra_info
        assert isinstance(info("ssl_object"), ssl.SSLObject)
        assert info("ssl_object").server_side is False
        assert info("sslcontext") is certs.client
        assert info("cipher") == info("ssl_object").cipher()
        assert info("compression") is None
        assert ("DNS", "localhost") in info("peercert")["subjectAltName"]
        assert info("peername") == pair.client_raw.get_extra_info("peername")
        assert info("socket") is pair.client_raw.get_extra_info("socket")
        assert info("no such thing", 42) == 42
        assert pair.server.get_extra_info("sslcontext") is certs.server
        assert pair.server.get_extra_info("peercert") is None  # no client certificate
        assert pair.client.get_protocol() is client_app
        assert "client open" in repr(pair.client)
        pair.client.close()
        await closed(client_app, server_app)

    run(main)


def test_a_buffered_protocol_receives_through_its_own_small_buffer(certs: Certs) -> None:
    sent = payload(300_000, 2)

    async def main() -> None:
        client_app, server_app = Recorder(), BufferedEcho(1000)
        pair = await tls_pair(certs, client_app, server_app)
        pair.client.write(sent)
        await client_app.until(lambda app: len(app.data) >= len(sent))
        assert bytes(server_app.data) == sent
        assert bytes(client_app.data) == sent
        assert server_app.rounds >= len(sent) // 1000
        pair.client.close()
        await client_app.lost

    run(main)


def test_asyncio_streams_run_on_the_tls_transport(certs: Certs) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        client_raw, server_raw = await plain_pair()
        served: asyncio.Future[list[bytes]] = loop.create_future()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            lines = []
            while line := await reader.readline():
                lines.append(line)
                writer.write(line.upper())
                await writer.drain()
            served.set_result(lines)
            writer.close()
            await writer.wait_closed()

        server_protocol = asyncio.StreamReaderProtocol(asyncio.StreamReader(), handle)
        reader = asyncio.StreamReader()
        client_protocol = asyncio.StreamReaderProtocol(reader)
        transport, _ = await asyncio.gather(
            wrap(loop, client_raw, client_protocol, certs.client, server_side=False,
                 server_hostname="localhost"),
            wrap(loop, server_raw, server_protocol, certs.server, server_side=True,
                 server_hostname=None),
        )  # fmt: skip
        writer = asyncio.StreamWriter(transport, client_protocol, reader, loop)
        assert writer.get_extra_info("ssl_object") is not None
        answers = []
        for word in (b"alpha\n", b"beta\n", b"gamma\n"):
            writer.write(word)
            await writer.drain()
            answers.append(await reader.readline())
        assert answers == [b"ALPHA\n", b"BETA\n", b"GAMMA\n"]
        writer.close()
        await writer.wait_closed()
        assert await served == [b"alpha\n", b"beta\n", b"gamma\n"]

    run(main)


# ------------------------------------------------------------------ interop


def test_the_client_layer_talks_to_a_stock_asyncio_tls_server(certs: Certs) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[bytes] = loop.create_future()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            request = await reader.readexactly(5)
            writer.write(request[::-1])
            await writer.drain()
            done.set_result(await reader.read())  # b"" at the client's close_notify
            writer.close()
            await writer.wait_closed()

        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=certs.server)
        port = server.sockets[0].getsockname()[1]
        raw, _ = await loop.create_connection(Held, "127.0.0.1", port)
        app = Recorder()
        transport = await wrap(
            loop, raw, app, certs.client, server_side=False, server_hostname="localhost"
        )
        transport.write(b"hello")
        await app.until(lambda app: len(app.data) >= 5)
        assert bytes(app.data) == b"olleh"
        transport.close()
        assert await done == b""
        assert await app.lost is None
        server.close()
        await server.wait_closed()

    run(main)


def test_the_server_layer_serves_a_stock_asyncio_tls_client(certs: Certs) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        accepted: asyncio.Queue[asyncio.Transport] = asyncio.Queue()
        server = await loop.create_server(lambda: Held(accepted), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        app = Recorder(echo=True)

        async def serve_one() -> asyncio.Transport:
            raw = await accepted.get()
            return await wrap(loop, raw, app, certs.server, server_side=True, server_hostname=None)

        serving = asyncio.create_task(serve_one())
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=certs.client, server_hostname="localhost"
        )
        sent = payload(200_000, 3)
        writer.write(sent)
        assert await reader.readexactly(len(sent)) == sent
        transport = await serving
        transport.close()  # close_notify: the stock client reads its end of file
        assert await reader.read() == b""
        assert await app.lost is None
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()

    run(main)


# ------------------------------------------------------------------ handshake failures


def test_a_wrong_host_name_fails_the_handshake_on_both_sides(certs: Certs) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        client_raw, server_raw = await plain_pair()
        client_app, server_app = Recorder(), Recorder()
        client, server = await asyncio.gather(
            wrap(loop, client_raw, client_app, certs.client, server_side=False,
                 server_hostname="elsewhere.example"),
            wrap(loop, server_raw, server_app, certs.server, server_side=True,
                 server_hostname=None),
            return_exceptions=True,
        )  # fmt: skip
        assert isinstance(client, ssl.SSLCertVerificationError)
        assert "elsewhere.example" in str(client)
        # The client's alert reaches the server: it fails with an SSL error of its own.
        assert isinstance(server, ssl.SSLError)
        assert client_raw.is_closing()
        assert server_raw.is_closing()
        await asyncio.sleep(0.1)
        assert client_app.events == server_app.events == []  # never connected

    run(main)


def test_an_unanswered_handshake_times_out_at_its_exact_virtual_instant(certs: Certs) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        for timeout, expected in ((7.25, 7.25), (None, 60.0)):
            client_raw, server_raw = await plain_pair()  # the server side never answers
            start = loop.time()
            with pytest.raises(ConnectionAbortedError, match="handshake took longer than"):
                await wrap(
                    loop, client_raw, Recorder(), certs.client, server_side=False,
                    server_hostname="localhost", handshake_timeout=timeout,
                )  # fmt: skip
            assert loop.time() - start == expected
            assert client_raw.is_closing()
            server_raw.close()

    run(main)


def test_a_peer_that_closes_during_the_handshake_is_a_reset(certs: Certs) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        for read_first, message in (
            (True, "closed during the TLS handshake"),
            (False, "reset by peer"),
        ):
            client_raw, server_raw = await plain_pair()
            wrapping = asyncio.create_task(
                wrap(loop, client_raw, Recorder(), certs.client, server_side=False,
                     server_hostname="localhost")
            )  # fmt: skip
            if read_first:  # the peer reads the ClientHello, then ends its stream
                reader = Recorder()
                server_raw.set_protocol(reader)
                server_raw.resume_reading()
                await reader.until(lambda app: bool(app.data))
            else:  # the ClientHello is left unread: the kernel resets the connection
                await asyncio.sleep(0.5)
            server_raw.close()
            with pytest.raises(ConnectionResetError, match=message):
                await wrapping
            assert client_raw.is_closing()

    run(main)


def test_cancelling_the_handshake_closes_the_plain_transport(certs: Certs) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        client_raw, server_raw = await plain_pair()
        wrapping = asyncio.create_task(
            wrap(loop, client_raw, Recorder(), certs.client, server_side=False,
                 server_hostname="localhost")
        )  # fmt: skip
        await asyncio.sleep(1)
        assert not wrapping.done()
        wrapping.cancel()
        with pytest.raises(asyncio.CancelledError):
            await wrapping
        assert client_raw.is_closing()
        server_raw.close()

    run(main)


# ------------------------------------------------------------------ ends


def test_close_notify_reaches_the_peer_as_end_of_file_then_both_close(certs: Certs) -> None:
    async def main() -> None:
        client_app, server_app = Recorder(), Recorder()
        pair = await tls_pair(certs, client_app, server_app)
        pair.server.write(b"last words")
        pair.server.close()
        pair.server.write(b"dropped: written after close")
        assert await closed(client_app, server_app) == [None, None]
        assert bytes(client_app.data) == b"last words"
        assert client_app.events == ["made", "eof", "lost"]
        assert server_app.events == ["made", "lost"]  # no data after its own close

    run(main)


def test_an_eof_received_that_returns_true_keeps_the_connection_writable(certs: Certs) -> None:
    async def main() -> None:
        client_app, server_app = Recorder(keep_open=True), Recorder()
        pair = await tls_pair(certs, client_app, server_app)
        pair.server.close()
        await client_app.until(lambda app: "eof" in app.events)
        await asyncio.sleep(1)
        assert not pair.client.is_closing()
        assert client_app.events == ["made", "eof"]
        pair.client.close()
        assert await closed(client_app, server_app) == [None, None]

    run(main)


def test_a_stream_that_ends_without_close_notify_is_end_of_file(certs: Certs) -> None:
    async def main() -> None:
        client_app, server_app = Recorder(), Recorder()
        pair = await tls_pair(certs, client_app, server_app)
        pair.server.write(b"partial")
        await client_app.until(lambda app: bool(app.data))
        pair.server_raw.close()  # the plain stream ends; no close_notify is sent
        assert await closed(client_app, server_app) == [None, None]
        assert client_app.events == ["made", "eof", "lost"]
        assert bytes(client_app.data) == b"partial"

    run(main)


def test_abort_drops_the_connection_at_once(certs: Certs) -> None:
    async def main() -> None:
        client_app, server_app = Recorder(), Recorder()
        pair = await tls_pair(certs, client_app, server_app)
        pair.client.get_protocol()  # still the program's
        pair.client_raw.get_protocol().pause_writing()  # hold what is written below
        pair.client.write(b"never sent")
        pair.client.abort()
        assert pair.client.is_closing()
        assert pair.client.get_write_buffer_size() == 0
        assert await closed(client_app, server_app) == [None, None]
        assert server_app.data == b""
        assert client_app.events == ["made", "lost"]

    run(main)


def test_data_the_peer_sends_while_we_close_is_dropped_cleanly(certs: Certs) -> None:
    """OpenSSL refuses a shutdown with application data unread; the layer reads and drops it."""

    class CloseAtFirstData(Recorder):
        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            assert self.transport is not None
            self.transport.close()

    async def main() -> None:
        client_app, server_app = CloseAtFirstData(), Recorder()
        pair = await tls_pair(certs, client_app, server_app)
        for _ in range(20):
            pair.server.write(payload(50_000, 4))
        assert await closed(client_app, server_app) == [None, None]
        assert 0 < len(client_app.data) < 1_000_000
        assert client_app.events == ["made", "lost"]

    run(main)


def test_a_peer_that_never_answers_close_notify_times_out_exactly(certs: Certs) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        client_raw, server_raw = await plain_pair()
        client_app, server_app = Recorder(), Recorder()
        client, _ = await asyncio.gather(
            wrap(loop, client_raw, client_app, certs.client, server_side=False,
                 server_hostname="localhost", shutdown_timeout=2.5),
            wrap(loop, server_raw, server_app, certs.server, server_side=True,
                 server_hostname=None),
        )  # fmt: skip
        silent = Recorder()
        server_raw.set_protocol(silent)  # the server stops speaking TLS
        start = loop.time()
        client.close()
        error = await client_app.lost
        assert isinstance(error, TimeoutError)
        assert "did not answer close_notify within 2.5 seconds" in str(error)
        assert loop.time() - start == 2.5
        assert silent.data  # our close_notify did arrive
        server_raw.close()

    run(main)


def test_close_during_the_handshake_aborts_it(certs: Certs) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        client_raw, server_raw = await plain_pair()
        app = Recorder()
        wrapping = asyncio.create_task(
            wrap(loop, client_raw, app, certs.client, server_side=False,
                 server_hostname="localhost")
        )  # fmt: skip
        await asyncio.sleep(0)
        cast(Any, client_raw.get_protocol()).transport.close()
        with pytest.raises(ConnectionResetError, match="lost during the TLS handshake"):
            await wrapping
        assert app.events == []
        server_raw.close()

    run(main)


# ------------------------------------------------------------------ flow control


def test_writing_pauses_the_protocol_while_the_plain_transport_is_paused(certs: Certs) -> None:
    async def main() -> None:
        client_app, server_app = Recorder(), Recorder()
        pair = await tls_pair(certs, client_app, server_app)
        link = pair.client_raw.get_protocol()
        assert pair.client.get_write_buffer_limits() == (128 * 1024, 512 * 1024)
        pair.client.set_write_buffer_limits(high=64_000)
        assert pair.client.get_write_buffer_limits() == (16_000, 64_000)

        link.pause_writing()  # as the plain transport does when its own buffer is full
        kept = bytearray(b"x" * 50_000)
        pair.client.write(kept)
        kept[:] = b"y" * 50_000  # the layer kept a copy
        assert pair.client.get_write_buffer_size() == 50_000
        assert client_app.events == ["made"]
        pair.client.write(b"z" * 20_000)
        assert pair.client.get_write_buffer_size() == 70_000
        assert client_app.events == ["made", "pause"]

        link.resume_writing()
        assert pair.client.get_write_buffer_size() == 0
        assert client_app.events == ["made", "pause", "resume"]
        await server_app.until(lambda app: len(app.data) >= 70_000)
        assert bytes(server_app.data) == b"x" * 50_000 + b"z" * 20_000
        pair.client.close()
        await closed(client_app, server_app)

    run(main)


def test_paused_reading_holds_the_data_until_resumed(certs: Certs) -> None:
    async def main() -> None:
        client_app, server_app = Recorder(), Recorder()
        pair = await tls_pair(certs, client_app, server_app)
        pair.server.pause_reading()
        assert not pair.server.is_reading()
        assert not pair.server_raw.is_reading()
        pair.client.write(b"held back")
        await asyncio.sleep(1)
        assert server_app.data == b""
        pair.server.resume_reading()
        assert pair.server.is_reading()
        await server_app.until(lambda app: bool(app.data))
        assert server_app.data == b"held back"
        # Closing while paused still reads the peer's close_notify: no shutdown timeout.
        start = asyncio.get_running_loop().time()
        pair.server.pause_reading()
        pair.server.close()
        assert await closed(client_app, server_app) == [None, None]
        assert asyncio.get_running_loop().time() - start < 1

    run(main)


def test_a_write_before_the_handshake_completes_is_sent_after_it(certs: Certs) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        client_raw, server_raw = await plain_pair()
        client_app, server_app = Recorder(), Recorder()
        wrapping = asyncio.gather(
            wrap(loop, client_raw, client_app, certs.client, server_side=False,
                 server_hostname="localhost"),
            wrap(loop, server_raw, server_app, certs.server, server_side=True,
                 server_hostname=None),
        )  # fmt: skip
        await asyncio.sleep(0)
        early = cast(Any, client_raw.get_protocol()).transport  # what wrap will return
        early.write(b"early")
        assert early.get_write_buffer_size() == 5
        client, _ = await wrapping
        assert client is early
        await server_app.until(lambda app: bool(app.data))
        assert server_app.data == b"early"
        client.close()
        await closed(client_app, server_app)

    run(main)


# ------------------------------------------------------------------ the start_tls form


def test_start_tls_keeps_the_connected_protocol_and_does_not_connect_it_again(
    certs: Certs,
) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        client_raw, server_raw = await plain_pair()
        client_app, server_app = Recorder(), Recorder()
        client_raw.set_protocol(client_app)
        client_app.connection_made(client_raw)
        server_raw.set_protocol(server_app)
        server_app.connection_made(server_raw)
        server_raw.resume_reading()
        client_raw.write(b"STARTTLS\n")  # in the clear
        await server_app.until(lambda app: bool(app.data))
        assert server_app.data == b"STARTTLS\n"
        client, _ = await asyncio.gather(
            wrap(loop, client_raw, client_app, certs.client, server_side=False,
                 server_hostname="localhost", call_connection_made=False),
            wrap(loop, server_raw, server_app, certs.server, server_side=True,
                 server_hostname=None, call_connection_made=False),
        )  # fmt: skip
        client.write(b"secret")
        await server_app.until(lambda app: len(app.data) >= 15)
        assert server_app.data == b"STARTTLS\nsecret"
        assert client_app.events == server_app.events == ["made"]
        client.close()
        assert await closed(client_app, server_app) == [None, None]

    run(main)


def test_a_failed_start_tls_tells_the_connected_protocol(certs: Certs) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        client_raw, server_raw = await plain_pair()
        app = Recorder()
        client_raw.set_protocol(app)
        app.connection_made(client_raw)
        with pytest.raises(ConnectionAbortedError):
            await wrap(
                loop, client_raw, app, certs.client, server_side=False,
                server_hostname="localhost", handshake_timeout=5, call_connection_made=False,
            )  # fmt: skip
        assert isinstance(await app.lost, ConnectionAbortedError)
        server_raw.close()

    run(main)


# ------------------------------------------------------------------ the program's mistakes


def test_an_error_in_data_received_is_reported_and_ends_the_connection(certs: Certs) -> None:
    class Failing(Recorder):
        def data_received(self, data: bytes) -> None:
            raise LookupError("the program's bug")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        reported: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _, context: reported.append(context))
        client_app, server_app = Recorder(), Failing()
        pair = await tls_pair(certs, client_app, server_app)
        pair.client.write(b"trigger")
        error, _ = await closed(server_app, client_app)
        assert isinstance(error, LookupError)
        assert [context["exception"] for context in reported] == [error]
        assert "data_received() failed" in reported[0]["message"]
        assert reported[0]["protocol"] is server_app
        assert reported[0]["transport"] is pair.server
        assert client_app.events[-1] == "lost"

    run(main)


class EmptyBuffer(asyncio.BufferedProtocol):
    def get_buffer(self, sizehint: int) -> bytearray:
        return bytearray()

    def buffer_updated(self, nbytes: int) -> None:
        raise AssertionError("never called: the buffer is empty")


class FailingEof(Recorder):
    def eof_received(self) -> bool:
        raise LookupError("the program's bug at end of file")


@pytest.mark.parametrize(
    ("protocol", "error", "message"),
    [
        (EmptyBuffer, UsageError, "get_buffer() failed"),
        (FailingEof, LookupError, "eof_received() failed"),
    ],
)
def test_other_protocol_errors_are_reported_too(
    certs: Certs, protocol: Callable[[], asyncio.BaseProtocol], error: type, message: str
) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        reported: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _, context: reported.append(context))
        client_app, server_app = Recorder(), protocol()
        pair = await tls_pair(certs, client_app, server_app)
        pair.client.write(b"trigger")
        pair.client.close()  # close_notify: end of file for FailingEof
        await client_app.lost
        await asyncio.sleep(0.1)
        assert len(reported) == 1
        assert isinstance(reported[0]["exception"], error)
        assert message in reported[0]["message"]
        assert pair.server.is_closing()

    run(main)


def test_misuse_raises_the_family_errors(certs: Certs) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        nothing = cast(asyncio.Transport, None)  # the arguments are checked first
        with pytest.raises(InvalidTypeError, match=r"context must be an ssl\.SSLContext"):
            await wrap(loop, nothing, Recorder(), "ctx", server_side=True, server_hostname=None)  # type: ignore[arg-type]
        with pytest.raises(InvalidValueError, match="handshake_timeout must be a positive"):
            await wrap(loop, nothing, Recorder(), certs.server, server_side=True,
                       server_hostname=None, handshake_timeout=0)  # fmt: skip
        with pytest.raises(InvalidTypeError, match="shutdown_timeout must be a number"):
            await wrap(loop, nothing, Recorder(), certs.server, server_side=True,
                       server_hostname=None, shutdown_timeout="1")  # type: ignore[arg-type]  # fmt: skip
        with pytest.raises(InvalidValueError, match="server_hostname is required"):
            await wrap(loop, nothing, Recorder(), certs.client, server_side=False,
                       server_hostname=None)  # fmt: skip

        client_app, server_app = Recorder(), Recorder()
        pair = await tls_pair(certs, client_app, server_app)
        with pytest.raises(InvalidTypeError, match="data must be bytes, bytearray or memoryview"):
            pair.client.write("text")  # type: ignore[arg-type]
        with pytest.raises(InvalidValueError, match="high >= low >= 0"):
            pair.client.set_write_buffer_limits(high=1, low=2)
        assert not pair.client.can_write_eof()
        with pytest.raises(NotImplementedError, match="TLS has no half-close") as raised:
            pair.client.write_eof()
        assert isinstance(raised.value, HalfCloseError)
        assert isinstance(raised.value, UsageError)
        pair.client.close()
        await closed(client_app, server_app)

    run(main)
