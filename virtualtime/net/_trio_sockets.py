"""trio sockets that are simulated when they reach the world: :class:`SimulatedSocket`.

While a world is attached to a trio run, ``trio.socket.socket()`` -- and so
``trio.open_tcp_stream``, ``trio.open_tcp_listeners``, ``trio.serve_tcp``, anyio's trio backend
and httpx over it -- makes a :class:`SimulatedSocket`.  It starts undecided, remembering its
options, and decides at its first act, by the rule the asyncio side follows
(:mod:`._seam`):

* ``connect`` to a host name or address of the world, ``bind`` on one, or ``bind``/``listen``
  on a wildcard address (``""``, ``0.0.0.0``, ``::``) from a task that lives on a host: the
  socket is simulated -- a stream socket sits on one end of a
  :class:`~._streams.StreamTransport` (latency, bandwidth, partitions, back-pressure as on
  asyncio), a listener is a :class:`~._seam.Server` in ``host.servers``, a datagram socket a
  :class:`~._streams.DatagramTransport` in ``host.datagrams``.  A Unix socket path is simulated
  when the caller lives on a host (``bind``), or the path is one its host listens on
  (``connect``).
* Anything else -- ``127.0.0.1``, ``localhost``, a real service, or a wildcard from a task on no
  host: the socket becomes a real trio socket, made then, with the remembered options set on
  it, and every later call goes to it.

How a simulated socket answers trio
-----------------------------------
Received bytes wait in a buffer of the socket's adapter (:class:`_Pipe`, the protocol on the
transport end); ``recv`` takes from it or parks the task (``trio.lowlevel.ParkingLot``) until
bytes, the end of the stream or an error arrive.  Above :data:`READ_LIMIT` unread bytes the
end stops reading, so the window closes and the sender waits, as a full kernel buffer does.
``send`` waits while the end's write buffer is above its high-water mark (what
``wait_writable`` waits for too), then takes all the bytes.  Every call is a trio checkpoint,
as a real socket's is.  Errors are the kernel's: ``ConnectionRefusedError`` after one round
trip when nobody listens, ``TimeoutError`` after the world's ``connect_timeout``,
``ConnectionResetError`` when the peer's host crashed, ``OSError(EBADF)`` on a closed socket
(which ``trio.SocketStream`` turns into ``ClosedResourceError``).

``fileno()`` is -1 once the socket is closed (trio and anyio test that), and before that a
*stand-in* descriptor: one of two pipes shared by every simulated socket, the one that polls
readable exactly when ``recv``/``accept`` would not wait.  httpcore decides whether a pooled
connection was closed by its server by polling the raw socket's descriptor; the stand-in makes
that check true to the simulated connection.  Never read, write, close or
``trio.lowlevel.wait_readable`` the stand-in: it belongs to no socket.

One room: :class:`SimulatedSocket` is one class because trio's ``SocketType`` is one
interface, and every method of it dispatches on the same state -- undecided, real, or a
simulated stream, listener or datagram endpoint -- by the one rule above; split, the rule
would be spread over several files.  The adapters it sits on are a few lines each.

Part of ``net``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trace`` (see
tests/layout.py).
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import errno
import os
import socket as _socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import trio

from .._shared._errors import InvalidTypeError, InvalidValueError, UnsupportedError
from ._endpoints import Server
from ._streams import DatagramTransport, StreamTransport, lent_descriptor

if TYPE_CHECKING:
    from types import TracebackType

    from ._world import Host, Network

__all__ = ["READ_LIMIT", "SimulatedSocket"]

READ_LIMIT: Final = 64 * 1024
"""Unread bytes a simulated socket buffers before its end stops reading (the receive buffer)."""

_WILDCARDS: Final = frozenset({"", "0.0.0.0", "::"})
_LOOPBACK: Final = frozenset({"127.0.0.1", "localhost", "::1"})
_TYPE_MASK: Final = ~(getattr(_socket, "SOCK_NONBLOCK", 0) | getattr(_socket, "SOCK_CLOEXEC", 0))
_SO_DOMAIN: Final = getattr(_socket, "SO_DOMAIN", None)
_SO_PROTOCOL: Final = getattr(_socket, "SO_PROTOCOL", None)

MakeReal = Callable[[int, int, int], trio.socket.SocketType]


def _closed() -> OSError:
    return OSError(errno.EBADF, "Bad file descriptor")


def _not_connected() -> OSError:
    return OSError(errno.ENOTCONN, "Transport endpoint is not connected")


class _Pipe(asyncio.Protocol):
    """The protocol on a simulated stream end under a socket: buffers bytes, wakes tasks."""

    def __init__(self, on_made: Callable[[_Pipe], None] | None = None) -> None:
        self.end: StreamTransport | None = None
        self.buffer = bytearray()
        self.eof = False  # the peer's FIN arrived
        self.lost = False  # the end is gone (closed here, or reset)
        self.error: BaseException | None = None
        self.paused = False  # the end's write buffer is above its high-water mark
        self.reading = True
        self.read_shut = False  # shutdown(SHUT_RD)
        self.readers = trio.lowlevel.ParkingLot()
        self.writers = trio.lowlevel.ParkingLot()
        self._on_made = on_made

    # the asyncio protocol interface the transport calls
    def connection_made(self, transport: Any) -> None:
        self.end = transport
        if self._on_made is not None:
            self._on_made(self)

    def data_received(self, data: bytes) -> None:
        if self.read_shut:
            return
        self.buffer += data
        if self.reading and len(self.buffer) >= READ_LIMIT and self.end is not None:
            self.reading = False
            self.end.pause_reading()
        self.readers.unpark_all()

    def eof_received(self) -> bool:
        self.eof = True
        self.readers.unpark_all()
        return True  # half-open: this side may still send

    def connection_lost(self, exc: BaseException | None) -> None:
        self.lost = True
        self.error = exc
        self.readers.unpark_all()
        self.writers.unpark_all()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self.writers.unpark_all()

    # what the socket asks
    @property
    def readable(self) -> bool:
        return bool(self.buffer) or self.eof or self.lost or self.read_shut

    def take(self, size: int, peek: bool) -> bytes:
        data = bytes(self.buffer[:size])
        if not peek:
            del self.buffer[:size]
            if not self.reading and len(self.buffer) < READ_LIMIT and self.end is not None:
                self.reading = True
                self.end.resume_reading()
        return data


class _Backlog:
    """A simulated listener: its server and the connections waiting for ``accept()``."""

    def __init__(self) -> None:
        self.server: Server | None = None
        self.queue: collections.deque[SimulatedSocket] = collections.deque()
        self.waiters = trio.lowlevel.ParkingLot()


class _Mailbox(asyncio.DatagramProtocol):
    """The protocol on a simulated datagram endpoint: received datagrams, in arrival order."""

    def __init__(self) -> None:
        self.endpoint: DatagramTransport | None = None
        self.queue: collections.deque[tuple[bytes, tuple[str, int]]] = collections.deque()
        self.waiters = trio.lowlevel.ParkingLot()

    def connection_made(self, transport: Any) -> None:
        self.endpoint = transport

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.queue.append((data, addr))
        self.waiters.unpark_all()

    def error_received(self, exc: Exception) -> None:  # nothing reports one in the world
        pass

    def connection_lost(self, exc: BaseException | None) -> None:
        self.waiters.unpark_all()


async def _park(lot: trio.lowlevel.ParkingLot) -> None:
    await lot.park()


class SimulatedSocket(trio.socket.SocketType):
    """A trio socket that is simulated when it reaches the world, and real otherwise.

    What ``trio.socket.socket()`` returns while a :class:`~virtualtime.net.Network` is
    attached to the trio run (see the module documentation for the rule and the behaviour).
    Use it as any trio socket -- or, better, through ``trio.open_tcp_stream``,
    ``trio.serve_tcp``, anyio or httpx, which never know the difference.
    """

    def __init__(
        self, world: Network, make_real: MakeReal, family: int, kind: int, proto: int
    ) -> None:
        super().__init__()
        self._world = world
        self._make_real = make_real
        self._family = _socket.AddressFamily(family)
        self._type = _socket.SocketKind(kind & _TYPE_MASK)
        self._proto = proto
        self._options: dict[tuple[int, int], Any] = {}
        self._calls: list[tuple[Any, ...]] = []  # setsockopt calls, to repeat on a real socket
        self._real: trio.socket.SocketType | None = None
        self._host: Host | None = None  # the host it is bound on (simulated)
        self._local: Any = None  # its bound address (simulated)
        self._pipe: _Pipe | None = None
        self._backlog: _Backlog | None = None
        self._mailbox: _Mailbox | None = None
        self._remote: tuple[str, int] | None = None  # a connected datagram socket's peer
        self._shut_wr = False
        self._closed = False

    def __repr__(self) -> str:
        if self._real is not None:
            return f"<SimulatedSocket real={self._real!r}>"
        state = "closed" if self._closed else "open"
        try:
            peer = f" -> {self.getpeername()!r}"
        except OSError:
            peer = ""
        return (
            f"<SimulatedSocket {self._family.name} {self._type.name} {state} "
            f"{self.getsockname()!r}{peer}>"
        )

    # ---------------------------------------------------------------- deciding

    @property
    def simulated(self) -> bool:
        """Whether the socket is simulated (bound, listening or connected in the world)."""
        return self._host is not None or self._pipe is not None

    @property
    def _sock(self) -> Any:
        # anyio's trio backend reads its socket's ``_sock`` (trio's stdlib socket) for the
        # raw socket, its addresses and its family; a simulated socket answers itself.
        if self._real is not None:
            return getattr(self._real, "_sock", self._real)
        return self

    def _go_real(self) -> trio.socket.SocketType:
        if self._real is None:
            real = self._make_real(self._family, self._type, self._proto)
            for call in self._calls:
                real.setsockopt(*call)
            self._real = real
        return self._real

    def _undecided(self) -> bool:
        return (
            self._real is None
            and self._host is None
            and self._pipe is None
            and self._mailbox is None
        )

    def _check_open(self) -> None:
        if self._closed:
            raise _closed()

    def _caller(self) -> Host | None:
        return self._world._caller()

    async def _address(self, address: Any) -> tuple[str, int]:
        """The (ip, port) an AF_INET/AF_INET6 address means, world names resolved here."""
        if not isinstance(address, tuple) or len(address) < 2:
            raise InvalidValueError(
                f"address must be a (host, port) tuple for {self._family.name}, got {address!r}"
            )
        name, port = address[0], address[1]
        if isinstance(port, bool) or not isinstance(port, int):
            raise InvalidTypeError(f"port must be an int, got {port!r}")
        if isinstance(name, bytes):
            name = name.decode("ascii", "replace")
        if name is None:
            name = ""
        if not isinstance(name, str):
            raise InvalidTypeError(f"host must be a str, bytes or None, got {name!r}")
        host = self._world.resolve(name)
        if host is not None:
            return host.address, port
        if name in _WILDCARDS or name in _LOOPBACK or _is_numeric(name):
            return name, port
        found = await trio.socket.getaddrinfo(name, port, self._family, self._type, self._proto)
        return str(found[0][4][0]), port

    # ----------------------------------------------------------------- binding

    async def bind(self, address: Any) -> None:
        if self._real is not None:
            return await self._real.bind(address)
        self._check_open()
        if not self._undecided():
            raise OSError(errno.EINVAL, "Invalid argument: the socket is already bound")
        if self._family == _socket.AF_UNIX:
            caller = self._caller()
            if caller is None:
                return await self._go_real().bind(address)
            path = os.fsdecode(address)
            if path in caller.unix_servers:
                raise OSError(errno.EADDRINUSE, f"Address already in use: {path}")
            await trio.lowlevel.checkpoint()
            self._host, self._local = caller, path
            return None
        ip, port = await self._address(address)
        target = self._bind_target(ip)
        if target is None:
            return await self._go_real().bind(address)
        await trio.lowlevel.checkpoint()
        self._settle(target, ip, port)
        return None

    def _bind_target(self, ip: str) -> Host | None:
        caller = self._caller()
        if ip in _LOOPBACK:
            return None
        if ip in _WILDCARDS:
            return caller
        target = self._world.resolve(ip)
        if target is not None and caller is not None and target is not caller:
            raise OSError(
                errno.EADDRNOTAVAIL,
                f"Cannot assign requested address: {ip} is host {target.name!r}'s, and this "
                f"task lives on {caller.name!r}",
            )
        return target

    def _settle(self, host: Host, ip: str, port: int) -> None:
        """Bind on ``host`` (simulated): pick the port, register a datagram endpoint."""
        if not host.up:
            raise OSError(errno.ENETDOWN, f"Network is down: host {host.name!r} is down")
        if self._type == _socket.SOCK_DGRAM:
            port = port or host.port()
            if port in host.datagrams:
                raise OSError(errno.EADDRINUSE, f"Address already in use: {host.name}:{port}")
            mailbox = _Mailbox()
            endpoint = DatagramTransport(
                self._world, host, port, mailbox, contextvars.copy_context(), None
            )
            host.datagrams[port] = endpoint
            mailbox.connection_made(endpoint)
            self._mailbox = mailbox
        else:
            if port and port in host.servers and not self._v6only():
                raise OSError(errno.EADDRINUSE, f"Address already in use: {host.name}:{port}")
            port = port or host.port()
        self._host, self._local = host, (ip or "0.0.0.0", port)

    def _v6only(self) -> bool:
        return self._family == _socket.AF_INET6 and bool(
            self._options.get((_socket.IPPROTO_IPV6, _socket.IPV6_V6ONLY), 0)
        )

    def listen(self, backlog: int = 128) -> None:
        if self._real is not None:
            return self._real.listen(backlog)
        self._check_open()
        if self._backlog is not None:
            return None
        if self._type != _socket.SOCK_STREAM:
            raise OSError(errno.EOPNOTSUPP, "Operation not supported on a datagram socket")
        host = self._host
        if host is None:
            caller = self._caller()
            if caller is None or self._family == _socket.AF_UNIX:
                return self._go_real().listen(backlog)
            self._settle(caller, "", 0)
            host = caller
        unix = self._family == _socket.AF_UNIX
        port = self._local if unix else self._local[1]
        registry: dict[Any, Server] = host.unix_servers if unix else host.servers
        heard = not self._v6only()  # the world is IPv4: an IPv6-only listener hears nothing
        if heard and port in registry:
            raise OSError(errno.EADDRINUSE, f"Address already in use: {host.name}:{port}")
        listening = _Backlog()

        def made(pipe: _Pipe) -> None:
            listening.queue.append(self._accepted(pipe))
            listening.waiters.unpark_all()

        server = Server(
            self._world,
            host,
            port,
            lambda: _Pipe(made),
            contextvars.copy_context(),
            None,
            None,
            True,
        )
        listening.server = server
        if heard:
            registry[port] = server
        self._backlog = listening
        return None

    def _accepted(self, pipe: _Pipe) -> SimulatedSocket:
        sock = SimulatedSocket(self._world, self._make_real, self._family, self._type, 0)
        if pipe.end is not None and pipe.end._sock.family == _socket.AF_INET:
            sock._family = _socket.AF_INET
        sock._host, sock._pipe = self._host, pipe
        return sock

    async def accept(self) -> tuple[trio.socket.SocketType, Any]:
        if self._real is not None:
            return await self._real.accept()
        self._check_open()
        backlog = self._backlog
        if backlog is None:
            raise OSError(errno.EINVAL, "Invalid argument: the socket is not listening")
        await trio.lowlevel.checkpoint_if_cancelled()
        parked = False
        while not backlog.queue:
            await _park(backlog.waiters)
            parked = True
            self._check_open()
        sock = backlog.queue.popleft()
        if not parked:
            await trio.lowlevel.cancel_shielded_checkpoint()
        return sock, sock.getpeername()

    # -------------------------------------------------------------- connecting

    async def connect(self, address: Any) -> None:
        if self._real is not None:
            return await self._real.connect(address)
        self._check_open()
        if self._pipe is not None:
            raise OSError(errno.EISCONN, "Transport endpoint is already connected")
        world = self._world
        if self._family == _socket.AF_UNIX:
            path = os.fsdecode(address)
            caller = self._caller()
            if caller is None or path not in caller.unix_servers:
                return await self._go_real().connect(address)
            return await self._open(caller, caller, path, path)
        ip, port = await self._address(address)
        dst = world.resolve(ip)
        if dst is None:
            if self.simulated or self._mailbox is not None:
                raise OSError(
                    errno.ENETUNREACH,
                    f"Network is unreachable: {ip} is outside the world this socket is in",
                )
            return await self._go_real().connect(address)
        if self._type == _socket.SOCK_DGRAM:
            if self._mailbox is None:
                self._settle(world._source(), "", 0)
            await trio.lowlevel.checkpoint()
            self._remote = (ip, port)
            assert self._mailbox is not None
            assert self._mailbox.endpoint is not None
            self._mailbox.endpoint._remote = self._remote
            return None
        src = self._host if self._host is not None else world._source()
        return await self._open(src, dst, port, (ip, port))

    async def _open(self, src: Host, dst: Host, port: int | str, shown: Any) -> None:
        outcome: list[StreamTransport | BaseException] = []
        done = trio.Event()

        def finish(result: StreamTransport | BaseException) -> None:
            outcome.append(result)
            done.set()

        attempt = self._world.begin_connect(src, dst, port, contextvars.copy_context(), finish)
        try:
            await done.wait()
        except BaseException:
            attempt.cancel()
            self.close()
            raise
        result = outcome[0]
        if isinstance(result, BaseException):
            if isinstance(result, OSError) and result.errno:
                code = result.errno
                raise OSError(code, f"Error connecting to {shown!r}: {os.strerror(code)}")
            raise result
        pipe = _Pipe()
        result._protocol = pipe
        pipe.connection_made(result)
        if result.lost_before is not None:
            # Reset between the answer and now: the pipe hears it, as a socket would.
            result._lost = False
            result._lose(result.lost_before)
        elif result.inbox or result._eof_in:
            result._feed()
        self._host, self._pipe = src, pipe

    # ------------------------------------------------------------------ streams

    def _stream(self) -> _Pipe:
        self._check_open()
        if self._pipe is None:
            raise _not_connected()
        return self._pipe

    async def send(self, data: Any, flags: int = 0, /) -> int:
        if self._real is not None:
            return await self._real.send(data, flags)
        if self._mailbox is not None:
            if self._remote is None:
                raise OSError(errno.EDESTADDRREQ, "Destination address required")
            return await self.sendto(data, self._remote)
        pipe = self._stream()
        payload = bytes(memoryview(data))
        await trio.lowlevel.checkpoint_if_cancelled()
        parked = False
        while pipe.paused and not pipe.lost:
            await _park(pipe.writers)
            parked = True
            self._check_open()
        if pipe.lost:
            raise pipe.error or OSError(errno.EPIPE, "Broken pipe")
        if self._shut_wr:
            raise OSError(errno.EPIPE, "Broken pipe: the socket was shut down for writing")
        assert pipe.end is not None
        pipe.end.write(payload)
        if not parked:
            await trio.lowlevel.cancel_shielded_checkpoint()
        return len(payload)

    async def wait_writable(self) -> None:
        if self._real is not None:
            return await self._real.wait_writable()
        pipe = self._pipe
        await trio.lowlevel.checkpoint_if_cancelled()
        parked = False
        while pipe is not None and pipe.paused and not pipe.lost and not self._closed:
            await _park(pipe.writers)
            parked = True
        self._check_open()
        if not parked:
            await trio.lowlevel.cancel_shielded_checkpoint()
        return None

    async def recv(self, buflen: int, flags: int = 0, /) -> bytes:
        if self._real is not None:
            return await self._real.recv(buflen, flags)
        if isinstance(buflen, bool) or not isinstance(buflen, int):
            raise InvalidTypeError(f"recv() takes a buffer size (an int), got {buflen!r}")
        if buflen < 0:
            raise InvalidValueError(f"negative buffersize in recv: {buflen!r}")
        if self._mailbox is not None:
            data, _addr = await self.recvfrom(buflen, flags)
            return data
        pipe = self._stream()
        await trio.lowlevel.checkpoint_if_cancelled()
        parked = False
        while buflen and not pipe.readable:
            await _park(pipe.readers)
            parked = True
            self._check_open()
        if pipe.buffer and not pipe.read_shut:
            data = pipe.take(buflen, bool(flags & _socket.MSG_PEEK))
        elif pipe.error is not None and not pipe.eof:
            raise pipe.error
        else:
            data = b""
        if not parked:
            await trio.lowlevel.cancel_shielded_checkpoint()
        return data

    async def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        if self._real is not None:
            return await self._real.recv_into(buffer, nbytes, flags)
        view = memoryview(buffer).cast("B")
        data = await self.recv(nbytes or len(view), flags)
        view[: len(data)] = data
        return len(data)

    def shutdown(self, flag: int) -> None:
        if self._real is not None:
            return self._real.shutdown(flag)
        pipe = self._stream()
        if flag in (_socket.SHUT_RD, _socket.SHUT_RDWR):
            pipe.read_shut = True
            pipe.buffer.clear()
            pipe.readers.unpark_all()
        if flag in (_socket.SHUT_WR, _socket.SHUT_RDWR):
            self._shut_wr = True
            if pipe.end is not None and not pipe.lost:
                pipe.end.write_eof()
        return None

    @property
    def did_shutdown_SHUT_WR(self) -> bool:
        if self._real is not None:
            return self._real.did_shutdown_SHUT_WR
        return self._shut_wr

    def is_readable(self) -> bool:
        if self._real is not None:
            return self._real.is_readable()
        return self._readable()

    def _readable(self) -> bool:
        if self._pipe is not None:
            return self._pipe.readable
        if self._backlog is not None:
            return bool(self._backlog.queue)
        if self._mailbox is not None:
            return bool(self._mailbox.queue)
        return False

    # ---------------------------------------------------------------- datagrams

    async def sendto(self, *args: Any) -> int:
        if self._real is not None:
            return await self._real.sendto(*args)
        self._check_open()
        if len(args) not in (2, 3):
            raise InvalidTypeError(f"sendto() takes (data, [flags,] address), got {args!r}")
        data, address = args[0], args[-1]
        if self._type != _socket.SOCK_DGRAM:
            raise OSError(errno.EISCONN, "Transport endpoint is already connected")
        payload = bytes(memoryview(data))
        ip, port = await self._address(address)
        dst = self._world.resolve(ip)
        if self._mailbox is None:
            if dst is None:
                return await self._go_real().sendto(*args)
            self._settle(self._world._source(), "", 0)
        assert self._mailbox is not None
        assert self._mailbox.endpoint is not None
        await trio.lowlevel.checkpoint()
        if dst is not None:  # else nowhere to go: the datagram is lost, as UDP's would be
            self._world.send_datagram(self._mailbox.endpoint, payload, (ip, port))
        return len(payload)

    async def recvfrom(self, bufsize: int, flags: int = 0, /) -> tuple[bytes, Any]:
        if self._real is not None:
            return await self._real.recvfrom(bufsize, flags)
        self._check_open()
        mailbox = self._mailbox
        if mailbox is None:
            if self._undecided():
                return await self._go_real().recvfrom(bufsize, flags)
            raise OSError(errno.EOPNOTSUPP, "recvfrom() on a simulated stream socket")
        await trio.lowlevel.checkpoint_if_cancelled()
        parked = False
        while not mailbox.queue:
            await _park(mailbox.waiters)
            parked = True
            self._check_open()
        if flags & _socket.MSG_PEEK:
            data, source = mailbox.queue[0]
        else:
            data, source = mailbox.queue.popleft()
        if not parked:
            await trio.lowlevel.cancel_shielded_checkpoint()
        return data[:bufsize], source

    async def recvfrom_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> tuple[int, Any]:
        if self._real is not None:
            return await self._real.recvfrom_into(buffer, nbytes, flags)
        view = memoryview(buffer).cast("B")
        data, source = await self.recvfrom(nbytes or len(view), flags)
        view[: len(data)] = data
        return len(data), source

    # ------------------------------------------------------------------ plumbing

    def close(self) -> None:
        if self._real is not None:
            return self._real.close()
        if self._closed:
            return None
        self._closed = True
        pipe, backlog, mailbox = self._pipe, self._backlog, self._mailbox
        if pipe is not None:
            if pipe.end is not None and not pipe.lost:
                pipe.end.close()
            pipe.readers.unpark_all()
            pipe.writers.unpark_all()
        if backlog is not None:
            if backlog.server is not None:
                backlog.server.close()
            while backlog.queue:  # connections nobody accepted: reset, as the kernel does
                waiting = backlog.queue.popleft()._pipe
                if waiting is not None and waiting.end is not None:
                    waiting.end.abort()
            backlog.waiters.unpark_all()
        if mailbox is not None:
            if mailbox.endpoint is not None:
                mailbox.endpoint.close()
            mailbox.waiters.unpark_all()
        return None

    def __enter__(self) -> SimulatedSocket:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def fileno(self) -> int:
        if self._real is not None:
            return self._real.fileno()
        if self._closed:
            return -1
        return lent_descriptor(self._readable())

    def getsockname(self) -> Any:
        if self._real is not None:
            return self._real.getsockname()
        if self._pipe is not None and self._pipe.end is not None:
            return self._pipe.end._sock.getsockname()
        if self._local is not None:
            if self._family == _socket.AF_INET6 and isinstance(self._local, tuple):
                return (self._local[0] or "::", self._local[1], 0, 0)
            return self._local
        if self._family == _socket.AF_UNIX:
            return ""
        return ("::", 0, 0, 0) if self._family == _socket.AF_INET6 else ("0.0.0.0", 0)

    def getpeername(self) -> Any:
        if self._real is not None:
            return self._real.getpeername()
        if self._pipe is not None and self._pipe.end is not None:
            return self._pipe.end._sock.getpeername()
        if self._remote is not None:
            return self._remote
        raise _not_connected()

    def setsockopt(self, level: int, optname: int, value: Any, optlen: int | None = None) -> None:
        call = (level, optname, value) if optlen is None else (level, optname, value, optlen)
        if self._real is not None:
            return self._real.setsockopt(*call)
        self._options[level, optname] = value
        self._calls.append(call)
        return None

    def getsockopt(self, level: int, optname: int, buflen: int | None = None) -> Any:
        if self._real is not None:
            if buflen is None:
                return self._real.getsockopt(level, optname)
            return self._real.getsockopt(level, optname, buflen)
        value: Any
        if level == _socket.SOL_SOCKET and optname == _socket.SO_ACCEPTCONN:
            value = int(self._backlog is not None)
        elif level == _socket.SOL_SOCKET and optname == _socket.SO_ERROR:
            value = 0
        elif level == _socket.SOL_SOCKET and optname == _socket.SO_TYPE:
            value = int(self._type)
        elif level == _socket.SOL_SOCKET and optname == _SO_DOMAIN:
            value = int(self._family)
        elif level == _socket.SOL_SOCKET and optname == _SO_PROTOCOL:
            value = self._proto
        else:
            value = self._options.get((level, optname), 0)
        if buflen is None:
            return int(value) if isinstance(value, bool | int) else value
        if isinstance(value, bytes | bytearray):
            return bytes(value[:buflen])
        return int(value).to_bytes(4, "little")[:buflen]

    @property
    def family(self) -> _socket.AddressFamily:
        return self._real.family if self._real is not None else self._family

    @property
    def type(self) -> _socket.SocketKind:
        return self._real.type if self._real is not None else self._type

    @property
    def proto(self) -> int:
        return self._real.proto if self._real is not None else self._proto

    # What only an OS socket has: a real (or still undecided) socket does it, a simulated
    # one refuses.
    def _os_only(self, what: str) -> trio.socket.SocketType:
        if self._real is not None or self._undecided():
            return self._go_real()
        raise UnsupportedError(
            f"{what} needs an operating-system socket; this one is simulated "
            f"({self!r}): use send/recv (or sendto/recvfrom) on it"
        )

    def detach(self) -> int:
        return self._os_only("detach()").detach()

    def dup(self) -> trio.socket.SocketType:
        return self._os_only("dup()").dup()

    def get_inheritable(self) -> bool:
        return self._os_only("get_inheritable()").get_inheritable()

    def set_inheritable(self, inheritable: bool) -> None:
        return self._os_only("set_inheritable()").set_inheritable(inheritable)

    async def recvmsg(self, bufsize: int, ancbufsize: int = 0, flags: int = 0, /) -> Any:
        return await self._os_only("recvmsg()").recvmsg(bufsize, ancbufsize, flags)

    async def recvmsg_into(self, buffers: Any, ancbufsize: int = 0, flags: int = 0, /) -> Any:
        return await self._os_only("recvmsg_into()").recvmsg_into(buffers, ancbufsize, flags)

    async def sendmsg(
        self, buffers: Any, ancdata: Any = (), flags: int = 0, address: Any = None, /
    ) -> int:
        return await self._os_only("sendmsg()").sendmsg(buffers, ancdata, flags, address)


def _is_numeric(name: str) -> bool:
    for family in (_socket.AF_INET, _socket.AF_INET6):
        try:
            _socket.inet_pton(family, name)
        except OSError:
            continue
        return True
    return False
