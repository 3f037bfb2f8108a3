"""The world's answers to the loop's network methods (the engine's :class:`NetworkSeam`).

Each method takes a call the loop received (``create_connection``, ``create_server``,
``getaddrinfo``, ``sock_connect`` ...) and either serves it inside the world -- a host name or
address of the world, a simulated socket or transport, a server on the calling host -- or
returns :data:`~virtualtime._engine._network.NOT_OURS`, and the real network serves it.  The
rule for "inside": the *destination* is a host of the world (connections, datagrams to an
address), or the *caller* lives on a host and binds no real address (servers, endpoints, Unix
sockets).  ``127.0.0.1`` and ``localhost`` are always real.

How a TCP connection is made: the SYN travels one link latency to the server's host; there
the listening server's protocol factory is called and its protocol's ``connection_made``
runs (in the server's context); the answer travels back, and ``create_connection`` returns
one round trip after it was called.  No listener: ``ConnectionRefusedError`` after one round
trip.  A partition or a down host: no answer, until the heal (the SYN waits with the bytes)
or the world's ``connect_timeout``.  TLS (``ssl=``, ``start_tls``) runs over the simulated
stream through :mod:`._tls`.

Part of ``net``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trace`` (see
tests/layout.py).
"""

from __future__ import annotations

import asyncio
import contextvars
import errno
import socket
import ssl as _ssl
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._engine._network import NOT_OURS
from .._shared._errors import InvalidValueError, UsageError
from .._shared._time import TICKS_PER_SECOND
from ._calls import (
    ANY,
    REAL,
    bind,
    create_connection_args,
    create_server_args,
    datagram_args,
    getaddrinfo_args,
    port_number,
    start_tls_args,
    tls_context,
    unix_connection_args,
    unix_server_args,
)
from ._context import current_host
from ._endpoints import Connect, Path, Server, SockBuffer
from ._streams import DatagramTransport, Flow, SimSocket, StreamTransport

if TYPE_CHECKING:
    from ._world import Host, Network

__all__ = ["Seam"]

_Args = tuple[Any, ...]
_Kwargs = dict[str, Any]


class Seam:
    """The network methods of a world (mixed into :class:`~virtualtime.net.Network`)."""

    loop: Any
    _held_connects: list[Connect]

    def __init__(self) -> None:
        # Sockets connected with sock_connect: the socket, its end, and the finalizer that
        # closes the end if the program drops the socket without a transport taking it.
        self._socks: dict[int, tuple[Any, StreamTransport, Any]] = {}
        self._held_resets: list[tuple[Host, StreamTransport]] = []
        self._attempts: dict[Connect, None] = {}  # connects in progress, in the order made
        self._paths: dict[tuple[Host, Host], Path] = {}

    # ---------------------------------------------------------------- helpers

    def _caller(self) -> Host | None:
        host = current_host()
        return host if host is not None and host.world is self else None

    def _source(self) -> Host:
        """The host a connection leaves from: the caller's, or the world's ``main`` host."""
        host = self._caller()
        if host is not None:
            if not host.up:
                raise OSError(errno.ENETDOWN, f"host {host.name!r} is down")
            return host
        world: Network = self  # type: ignore[assignment]
        return world.resolve("main") or world.host("main")

    def owns_socket(self, sock: object) -> bool:
        return id(sock) in self._socks and self._socks[id(sock)][0] is sock

    def forget_socket(self, transport: StreamTransport) -> None:
        for key, (sock, end, _finalizer) in list(self._socks.items()):
            if end is transport:
                del self._socks[key]
                sock.close()

    # ----------------------------------------------------------- connecting

    def begin_connect(
        self,
        src: Host,
        dst: Host,
        port: int | str,
        context: contextvars.Context,
        finish: Callable[[StreamTransport | BaseException], object],
    ) -> Connect:
        """Start connecting ``src`` to ``port`` on ``dst`` (a str port: a Unix path).

        The client end's protocol callbacks run in ``context``; ``finish`` gets the outcome
        (see :class:`Connect`).  Either backend builds its awaitable on this: asyncio a
        future (:meth:`_connect`), trio a socket's wait.
        """
        world: Network = self  # type: ignore[assignment]
        unix = isinstance(port, str)
        family = socket.AF_UNIX if unix else socket.AF_INET
        local: Any = "" if unix else (src.address, src.port())
        remote: Any = port if unix else (dst.address, port)
        sock = SimSocket(family, socket.SOCK_STREAM, local, remote)
        client = StreamTransport(world, src, None, context, sock, unix=unix)
        attempt = Connect(self, src, dst, port, client, finish)
        self._attempts[attempt] = None
        if world.connect_timeout:
            attempt.timer = world.at(
                world.ticks() + round(world.connect_timeout * TICKS_PER_SECOND),
                self._connect_timed_out,
                world.context,
                attempt,
            )
        self._send_syn(attempt)
        return attempt

    async def _connect(
        self, src: Host, dst: Host, port: int | str, context: contextvars.Context
    ) -> StreamTransport:
        loop = self.loop
        done: asyncio.Future[Any] = loop.create_future()

        def finish(result: StreamTransport | BaseException) -> None:
            if done.done():
                return
            if isinstance(result, BaseException):
                done.set_exception(result)
            else:
                done.set_result(result)

        attempt = self.begin_connect(src, dst, port, context, finish)
        try:
            return await done  # type: ignore[no-any-return]
        except BaseException:
            attempt.cancel()
            raise

    def _send_syn(self, attempt: Connect) -> None:
        world: Network = self  # type: ignore[assignment]
        if not world.connected(attempt.src, attempt.dst):
            self._held_connects.append(attempt)
            return
        delay = world.link_of(attempt.src, attempt.dst).delay_ticks(world)
        world.at(world.ticks() + delay, self._syn_arrives, world.context, attempt)

    def resume_held(self) -> None:
        """After a heal or a restart: held SYNs go again, held bytes move."""
        world: Network = self  # type: ignore[assignment]
        held, self._held_connects = self._held_connects, []
        for attempt in held:
            if not attempt.finished:
                self._send_syn(attempt)
        for flow in list(world.held_flows):
            world.soon(flow.resume, flow.src.context)
        resets, self._held_resets = self._held_resets, []
        for src, peer in resets:
            self.reset_later(src, peer)

    def reset_later(self, src: Host, peer: StreamTransport) -> None:
        """Reset ``peer`` one link latency from now, as the reset from ``src`` travels --
        after the heal, when the two are cut apart."""
        world: Network = self  # type: ignore[assignment]
        if src is not peer.host and frozenset((src, peer.host)) in world._cut:
            self._held_resets.append((src, peer))
            return
        delay = world.link_of(src, peer.host).delay_ticks(world)
        world.at(world.ticks() + delay, peer.reset, peer.context)

    def _connect_timed_out(self, attempt: Connect) -> None:
        attempt.timer = None
        attempt.end(TimeoutError(errno.ETIMEDOUT, "Connection timed out"))

    def _syn_arrives(self, attempt: Connect) -> None:
        world: Network = self  # type: ignore[assignment]
        if attempt.finished:
            return
        src, dst = attempt.src, attempt.dst
        if not world.connected(src, dst):
            self._held_connects.append(attempt)  # lost on the way: sent again at the heal
            return
        registry: dict[Any, Server] = dst.unix_servers if attempt.unix else dst.servers
        server = registry.get(attempt.port)
        back = world.link_of(dst, src).delay_ticks(world)
        if server is None or not server.is_serving():
            world.at(world.ticks() + back, self._refused, world.context, attempt)
            return
        client = attempt.client
        family = socket.AF_UNIX if attempt.unix else socket.AF_INET
        sock = SimSocket(family, socket.SOCK_STREAM, client._sock._remote, client._sock._local)
        end = StreamTransport(world, dst, None, server.context, sock, unix=attempt.unix)
        client.out = Flow(world, client, end)
        end.out = Flow(world, end, client)
        client.incoming, end.incoming = end.out, client.out
        end.server = server
        server._connections[end] = None
        # The kernel finishes the handshake; the server's code accepts when it runs (later,
        # if its host is paused).
        world.soon(self._accept, server.context, server, end)
        world.at(world.ticks() + back, self._established, world.context, attempt)

    def _accept(self, server: Server, end: StreamTransport) -> None:
        world: Network = self  # type: ignore[assignment]
        try:
            protocol = server.protocol_factory()
        except Exception as exc:
            world.report({"message": "the server's protocol factory failed", "exception": exc})
            end.abort()
            return
        if server.tls is not None:
            self.loop.create_task(self._accept_tls(server, end, protocol))
            return
        end._protocol = protocol
        end._call("connection_made", end)
        if end.inbox or end._eof_in:  # bytes that came before the server's code accepted
            end._feed()

    async def _accept_tls(self, server: Server, end: StreamTransport, protocol: Any) -> None:
        from ._tls import wrap

        assert server.tls is not None
        try:
            await wrap(
                self.loop,
                end,
                protocol,
                server.tls,
                server_side=True,
                server_hostname=None,
                handshake_timeout=server.handshake_timeout,
            )
        except (OSError, _ssl.SSLError, TimeoutError, asyncio.CancelledError):
            end.abort()  # a failed handshake closes the connection, as asyncio's does

    def _refused(self, attempt: Connect) -> None:
        attempt.end(ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed"))

    def _established(self, attempt: Connect) -> None:
        if attempt.finished:
            attempt.client.abort()
            return
        client = attempt.client
        if client.lost_before is not None:
            attempt.end(client.lost_before)  # reset before the answer came: the connect fails
            return
        attempt.end(client)

    async def _finish(
        self,
        client: StreamTransport,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        tls: Any,
        server_hostname: Any,
        host_name: str | None,
        handshake_timeout: Any,
    ) -> tuple[asyncio.BaseTransport, asyncio.BaseProtocol]:
        protocol = protocol_factory()
        if tls is None or tls is False:
            client._protocol = protocol
            client._call("connection_made", client)
            if client.lost_before is not None:
                # Reset between the answer and now: the protocol hears it next, as asyncio's
                # would from its transport.
                client._lost = False
                client._lose(client.lost_before)
            elif client.inbox or client._eof_in:
                world: Network = self  # type: ignore[assignment]
                world.soon(client._feed, client.context)
            return client, protocol
        from ._tls import wrap

        context = tls_context(tls, server_side=False)
        if server_hostname is None:
            server_hostname = host_name
        try:
            transport = await wrap(
                self.loop,
                client,
                protocol,
                context,
                server_side=False,
                server_hostname=server_hostname or None,
                handshake_timeout=handshake_timeout,
            )
        except BaseException:
            client.abort()
            raise
        return transport, protocol

    # ------------------------------------------------------- the seam methods

    async def getaddrinfo(self, loop: Any, args: _Args, kwargs: _Kwargs) -> Any:
        call = bind(getaddrinfo_args, args, kwargs)
        world: Network = self  # type: ignore[assignment]
        host = world.resolve(call["host"])
        if host is None:
            return NOT_OURS
        family, kind, proto = call["family"], call["type"], call["proto"]
        if family not in (0, socket.AF_INET, socket.AF_UNSPEC):
            raise socket.gaierror(
                socket.EAI_ADDRFAMILY, "Address family for hostname not supported"
            )
        port = port_number(call["port"])
        kinds = [kind] if kind else [socket.SOCK_STREAM, socket.SOCK_DGRAM]
        result = []
        for each in kinds:
            number = proto or (
                socket.IPPROTO_UDP if each == socket.SOCK_DGRAM else socket.IPPROTO_TCP
            )
            result.append((socket.AF_INET, each, number, "", (host.address, port)))
        return result

    async def getnameinfo(self, loop: Any, args: _Args, kwargs: _Kwargs) -> Any:
        sockaddr: Any = args[0] if args else kwargs.get("sockaddr")
        world: Network = self  # type: ignore[assignment]
        host = world.resolve(sockaddr[0]) if isinstance(sockaddr, tuple) else None
        if host is None:
            return NOT_OURS
        return host.name, str(sockaddr[1])

    async def create_connection(self, loop: Any, args: _Args, kwargs: _Kwargs) -> Any:
        call = bind(create_connection_args, args, kwargs)
        world: Network = self  # type: ignore[assignment]
        sock = call["sock"]
        if sock is not None:
            if not self.owns_socket(sock):
                return NOT_OURS
            _sock, client, finalizer = self._socks.pop(id(sock))
            finalizer.detach()  # the transport made now owns the connection
            sock.close()
            pending = client._protocol
            client._protocol = None
            if isinstance(pending, SockBuffer) and pending.buffer:
                client.inbox.appendleft(bytes(pending.buffer))
            return await self._finish(
                client,
                call["protocol_factory"],
                call["ssl"],
                call["server_hostname"],
                client.world.resolve(client._sock._remote[0]).name,  # type: ignore[union-attr]
                call["ssl_handshake_timeout"],
            )
        dst = world.resolve(call["host"])
        if dst is None:
            return NOT_OURS
        src = self._source()
        port = port_number(call["port"])
        client = await self._connect(src, dst, port, contextvars.copy_context())
        return await self._finish(
            client,
            call["protocol_factory"],
            call["ssl"],
            call["server_hostname"],
            str(call["host"]),
            call["ssl_handshake_timeout"],
        )

    async def create_server(self, loop: Any, args: _Args, kwargs: _Kwargs) -> Any:
        call = bind(create_server_args, args, kwargs)
        world: Network = self  # type: ignore[assignment]
        host = self._caller()
        address = call["host"]
        if call["sock"] is not None:
            return NOT_OURS
        if host is None:
            target = world.resolve(address) if isinstance(address, str) else None
            if target is None:
                return NOT_OURS
            host = target
        elif isinstance(address, str) and address not in ANY:
            if address in REAL or world.resolve(address) is None:
                return NOT_OURS
            if world.resolve(address) is not host:
                raise OSError(
                    errno.EADDRNOTAVAIL, f"cannot address {address!r}: not host {host.name!r}'s"
                )
        elif isinstance(address, list | tuple) and any(item in REAL for item in address):
            return NOT_OURS
        if not host.up:
            raise OSError(errno.ENETDOWN, f"host {host.name!r} is down")
        port = port_number(call["port"]) or host.port()
        if port in host.servers:
            raise OSError(errno.EADDRINUSE, f"address already in use: {host.name}:{port}")
        tls = None if call["ssl"] is None else tls_context(call["ssl"], server_side=True)
        server = Server(
            world,
            host,
            port,
            call["protocol_factory"],
            contextvars.copy_context(),
            tls,
            call["ssl_handshake_timeout"],
            bool(call["start_serving"]),
        )
        host.servers[port] = server
        return server

    async def create_unix_server(self, loop: Any, args: _Args, kwargs: _Kwargs) -> Any:
        call = bind(unix_server_args, args, kwargs)
        host = self._caller()
        if host is None or call["sock"] is not None:
            return NOT_OURS
        path = call["path"]
        if not isinstance(path, str | bytes) or not path:
            raise InvalidValueError(f"path must be a non-empty str, got {path!r}")
        path = path.decode() if isinstance(path, bytes) else path
        if path in host.unix_servers:
            raise OSError(errno.EADDRINUSE, f"address already in use: {path}")
        tls = None if call["ssl"] is None else tls_context(call["ssl"], server_side=True)
        world: Network = self  # type: ignore[assignment]
        server = Server(
            world,
            host,
            path,
            call["protocol_factory"],
            contextvars.copy_context(),
            tls,
            call["ssl_handshake_timeout"],
            bool(call["start_serving"]),
        )
        host.unix_servers[path] = server
        return server

    async def create_unix_connection(self, loop: Any, args: _Args, kwargs: _Kwargs) -> Any:
        call = bind(unix_connection_args, args, kwargs)
        host = self._caller()
        path = call["path"]
        if isinstance(path, bytes):
            path = path.decode()
        if host is None or call["sock"] is not None or path not in host.unix_servers:
            return NOT_OURS
        client = await self._connect(host, host, path, contextvars.copy_context())
        return await self._finish(
            client,
            call["protocol_factory"],
            call["ssl"],
            call["server_hostname"],
            None,
            call["ssl_handshake_timeout"],
        )

    async def create_datagram_endpoint(self, loop: Any, args: _Args, kwargs: _Kwargs) -> Any:
        call = bind(datagram_args, args, kwargs)
        world: Network = self  # type: ignore[assignment]
        if call["sock"] is not None:
            return NOT_OURS
        local, remote = call["local_addr"], call["remote_addr"]
        remote_host = None
        if remote is not None:
            remote_host = world.resolve(remote[0])
            if remote_host is None:
                return NOT_OURS
        host = self._caller()
        if local is not None and local[0] not in ANY:
            if local[0] in REAL:
                return NOT_OURS
            bound = world.resolve(local[0])
            if bound is None:
                return NOT_OURS
            if host is not None and bound is not host:
                raise OSError(errno.EADDRNOTAVAIL, f"cannot bind {local[0]!r} on {host.name!r}")
            host = bound
        if host is None:
            if remote_host is None:
                return NOT_OURS
            host = self._source()
        port = port_number(local[1]) if local is not None else 0
        port = port or host.port()
        if port in host.datagrams:
            raise OSError(errno.EADDRINUSE, f"address already in use: {host.name}:{port}")
        protocol = call["protocol_factory"]()
        peer = None if remote_host is None else (remote_host.address, port_number(remote[1]))
        endpoint = DatagramTransport(world, host, port, protocol, contextvars.copy_context(), peer)
        host.datagrams[port] = endpoint
        endpoint.context.run(protocol.connection_made, endpoint)
        return endpoint, protocol

    def send_datagram(
        self, endpoint: DatagramTransport, data: bytes, addr: tuple[str, int]
    ) -> None:
        world: Network = self  # type: ignore[assignment]
        src = endpoint.host
        dst = world.resolve(addr[0])
        if dst is None or not world.connected(src, dst):
            return  # nowhere to go, or across a cut: UDP has no retransmission
        link = world.link_of(src, dst)
        chooser = world.chooser
        if link.loss and chooser.chance(link.loss):
            return
        copies = 2 if link.duplicate and chooser.chance(link.duplicate) else 1
        source = (src.address, endpoint.port)
        path = self._paths.get((src, dst))
        if path is None:
            path = self._paths[src, dst] = Path(world, dst)
        for _ in range(copies):
            path.add(world.ticks() + link.delay_ticks(world), addr[1], data, source)

    async def start_tls(self, loop: Any, args: _Args, kwargs: _Kwargs) -> Any:
        call = bind(start_tls_args, args, kwargs)
        transport = call["transport"]
        if not isinstance(transport, StreamTransport) or transport.world is not self:
            return NOT_OURS
        from ._tls import wrap

        return await wrap(
            loop,
            transport,
            call["protocol"],
            tls_context(call["sslcontext"], bool(call["server_side"])),
            server_side=bool(call["server_side"]),
            server_hostname=call["server_hostname"],
            handshake_timeout=call["ssl_handshake_timeout"],
            shutdown_timeout=call["ssl_shutdown_timeout"],
            call_connection_made=False,
        )

    async def sock_connect(self, loop: Any, args: _Args, kwargs: _Kwargs) -> Any:
        sock = args[0] if args else kwargs["sock"]
        address = args[1] if len(args) > 1 else kwargs["address"]
        world: Network = self  # type: ignore[assignment]
        if not isinstance(address, tuple) or not address:
            return NOT_OURS
        dst = world.resolve(address[0])
        if dst is None:
            return NOT_OURS
        src = self._source()
        client = await self._connect(src, dst, port_number(address[1]), contextvars.copy_context())
        buffer = SockBuffer()
        client._protocol = buffer
        buffer.connection_made(client)
        # Closing the socket object cannot be seen; collecting it closes the connection.
        self._socks[id(sock)] = (sock, client, weakref.finalize(sock, client.close))
        return None

    async def sock_op(self, name: str, loop: Any, args: _Args, kwargs: _Kwargs) -> Any:
        sock = args[0]
        _sock, client, _finalizer = self._socks[id(sock)]
        if sock.fileno() == -1:  # the program closed the socket object: the connection too
            client.close()
            raise OSError(errno.EBADF, "Bad file descriptor")
        buffer = client._protocol
        assert isinstance(buffer, SockBuffer)
        if name == "sock_sendall":
            client.write(args[1])
            return None
        if name in ("sock_recv", "sock_recv_into"):
            data = await buffer.read(args[1] if name == "sock_recv" else len(args[1]))
            if name == "sock_recv":
                return data
            memoryview(args[1])[: len(data)] = data
            return len(data)
        raise UsageError(f"loop.{name}() is not supported on a simulated stream socket")
