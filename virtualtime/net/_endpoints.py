"""What the world hands out for a call: servers, connects on their way, datagram paths.

:class:`Server` is what ``create_server`` returns on a simulated host; :class:`Connect` a
connect between its SYN and its answer (both backends wait on it); a datagram path delivers
one host's datagrams to another in arrival order; :class:`SockBuffer` holds what reaches a
socket connected with ``sock_connect`` until a transport takes it over.

Part of ``net``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trace`` (see
tests/layout.py).
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import socket
import ssl as _ssl
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from .._shared._errors import UsageError
from ._streams import SimSocket, StreamTransport

if TYPE_CHECKING:
    from ._seam import Seam
    from ._world import Host, Network

__all__ = ["Connect", "Path", "Server", "SockBuffer"]

# asyncio's Server.wait_closed waits for the server's connections from 3.12.1 on (gh-79033).
_WAITS_FOR_CONNECTIONS: Final = sys.version_info >= (3, 12, 1)


class Server(asyncio.AbstractServer):
    """A server listening on a simulated host (what ``create_server`` returns there)."""

    def __init__(
        self,
        world: Network,
        host: Host,
        port: int | str,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        context: contextvars.Context,
        tls: _ssl.SSLContext | None,
        handshake_timeout: float | None,
        serving: bool,
    ) -> None:
        self.world = world
        self.host = host
        self.port = port
        self.protocol_factory = protocol_factory
        self.context = context
        self.tls = tls
        self.handshake_timeout = handshake_timeout
        self._serving = serving
        self._closed = False
        # The open connections it accepted, in the order they came (a dict: ordered).
        self._connections: dict[StreamTransport, None] = {}
        self._closed_event: asyncio.Event | None = None
        self._idle: asyncio.Future[None] | None = None  # wait_closed, for the last connection
        unix = isinstance(port, str)
        family = socket.AF_UNIX if unix else socket.AF_INET
        local = port if unix else (host.address, port)
        self._sockets = (SimSocket(family, socket.SOCK_STREAM, local, None),)

    def __repr__(self) -> str:
        return f"<Server {self.host.name}:{self.port} {'closed' if self._closed else 'open'}>"

    @property
    def sockets(self) -> tuple[SimSocket, ...]:
        return () if self._closed else self._sockets

    def get_loop(self) -> asyncio.AbstractEventLoop:
        loop = self.world.loop
        assert loop is not None
        return loop

    def is_serving(self) -> bool:
        return self._serving and not self._closed

    async def start_serving(self) -> None:
        if self._closed:
            raise UsageError(f"{self!r} is closed")
        self._serving = True

    async def serve_forever(self) -> None:
        if self._closed:
            raise UsageError(f"{self!r} is closed")
        self._serving = True
        try:
            await self._event().wait()
        except asyncio.CancelledError:
            self.close()
            raise

    def _event(self) -> asyncio.Event:
        if self._closed_event is None:
            self._closed_event = asyncio.Event()
            if self._closed:
                self._closed_event.set()
        return self._closed_event

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._serving = False
        registry: dict[Any, Server] = (
            self.host.unix_servers if isinstance(self.port, str) else self.host.servers
        )
        if registry.get(self.port) is self:
            del registry[self.port]
        if self._closed_event is not None:
            self._closed_event.set()

    def close_clients(self) -> None:
        for transport in list(self._connections):
            transport.close()

    def abort_clients(self) -> None:
        for transport in list(self._connections):
            transport.abort()

    async def wait_closed(self) -> None:
        """Wait until the server is closed -- and, from Python 3.12.1 on, as asyncio's own
        servers do there, until the connections it accepted have closed too."""
        if not self._closed:
            await self._event().wait()
        if _WAITS_FOR_CONNECTIONS:
            while self._connections:
                idle = self._idle = asyncio.get_running_loop().create_future()
                await idle

    def forget(self, end: StreamTransport) -> None:
        """A connection it accepted has closed."""
        self._connections.pop(end, None)
        idle = self._idle
        if not self._connections and idle is not None and not idle.done():
            idle.set_result(None)

    async def __aenter__(self) -> Server:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()
        await self.wait_closed()


class Connect:
    """A connect on its way: the SYN, its answer, its timeout (:meth:`Seam.begin_connect`).

    ``finish`` is called exactly once: with the connected client end, or with the error
    (``ConnectionRefusedError``, ``TimeoutError``); :meth:`cancel` withdraws the attempt.
    """

    __slots__ = ("client", "dst", "finish", "finished", "port", "src", "timer", "unix", "world")

    def __init__(
        self,
        world: Seam,
        src: Host,
        dst: Host,
        port: int | str,
        client: StreamTransport,
        finish: Callable[[StreamTransport | BaseException], object],
    ) -> None:
        self.world = world
        self.src = src
        self.dst = dst
        self.port = port
        self.client = client
        self.finish = finish
        self.finished = False
        self.timer: Any = None
        self.unix = isinstance(port, str)

    def end(self, result: StreamTransport | BaseException) -> None:
        if self.finished:
            return
        self.finished = True
        self.world._attempts.pop(self, None)
        if self.timer is not None:
            self.timer.cancel()
        self.finish(result)

    def cancel(self) -> None:
        """Withdraw the attempt: a connection made meanwhile is aborted."""
        if self.timer is not None:
            self.timer.cancel()
        held = self.world._held_connects
        if self in held:
            held.remove(self)
        client = self.client
        if client.out is not None:
            # The SYN reached a listener (the server's end exists): reset it.
            client.abort()
        elif not client._lost:
            client._closing = client._lost = True
            self.src.transports.pop(client, None)
        self.finished = True
        self.world._attempts.pop(self, None)


class Path:
    """The datagrams on their way from one host to another, delivered in arrival order.

    Datagrams that arrive at one instant arrive in the order they were sent: only jitter
    reorders them, never the order in which a seed runs same-instant timers.
    """

    __slots__ = ("dst", "heap", "sent", "timer", "when", "world")

    def __init__(self, world: Network, dst: Host) -> None:
        self.world = world
        self.dst = dst
        self.heap: list[tuple[int, int, int, bytes, tuple[str, int]]] = []
        self.sent = 0
        self.timer: Any = None
        self.when = 0

    def add(self, arrival: int, port: int, data: bytes, source: tuple[str, int]) -> None:
        self.sent += 1
        heapq.heappush(self.heap, (arrival, self.sent, port, data, source))
        if self.timer is not None and self.when <= arrival and not self.timer.cancelled():
            return
        if self.timer is not None:
            self.timer.cancel()
        self.when = arrival
        self.timer = self.world.at(arrival, self._deliver, self.dst.context)

    def clear(self) -> None:
        """Forget the datagrams on their way (their destination crashed)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.heap.clear()

    def _deliver(self) -> None:
        self.timer = None
        world = self.world
        now = world.ticks()
        heap, dst = self.heap, self.dst
        while heap and heap[0][0] <= now:
            _arrival, _n, port, data, source = heapq.heappop(heap)
            endpoint = dst.datagrams.get(port)
            sender = world.resolve(source[0])
            if sender is not None and not world.connected(sender, dst):
                continue  # a partition fell while it was on its way: lost
            if endpoint is not None and dst.up:
                endpoint.context.run(endpoint.received, data, source)
        if heap:
            self.when = heap[0][0]
            self.timer = self.world.at(self.when, self._deliver, dst.context)


class SockBuffer(asyncio.Protocol):
    """The protocol of a socket connected with ``sock_connect``, until a transport takes it."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.eof = False
        self.waiter: asyncio.Future[None] | None = None

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return True

    def connection_lost(self, exc: BaseException | None) -> None:
        self.eof = True
        self._wake()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def read(self, n: int) -> bytes:
        while not self.buffer and not self.eof:
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter
        data = bytes(self.buffer[:n])
        del self.buffer[:n]
        return data
