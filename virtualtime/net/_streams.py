"""The bytes on a simulated link: stream and datagram transports between simulated hosts.

A connection is two :class:`StreamTransport` ends joined by two :class:`Flow` objects, one
per direction.  A flow is the link as the sender sees it: segments wait in its *send queue*
while the receive window is full or the hosts are partitioned, then travel on the *wire*
(each with its arrival instant: serialisation at the link's bandwidth, then its latency and
jitter), then wait in the receiver's *inbox* while it has paused reading.  Three rules keep
it a network rather than a scheduler:

* **In order.**  A segment never arrives before the one sent ahead of it (jitter only delays),
  and one timer per flow delivers everything due, so the order of timers at one instant --
  which a seed may shuffle -- can never reorder a stream.
* **Held, not lost.**  Across a partition nothing moves: segments wait (those already on the
  wire go back to the head of the queue) and leave, in order, when the link heals.  Loss and
  duplication are datagram faults; a stream is what TCP makes of a lossy link.
* **Back-pressure.**  At most :data:`WINDOW` bytes are on the wire or unread at the receiver;
  beyond that, writes wait in the sender's buffer, which is what ``get_write_buffer_size``
  reports and what ``pause_writing``/``drain`` respond to.

Protocol callbacks run in the context of the side that set the end up (the task that called
``create_connection``, the one that called ``create_server``), so tasks they start live on
that host.

Part of ``net``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trace`` (see
tests/layout.py).
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import errno
import os
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from .._shared._errors import InvalidTypeError, InvalidValueError, UsageError

if TYPE_CHECKING:
    from ._world import Host, Network

__all__ = ["WINDOW", "DatagramTransport", "Flow", "SimSocket", "StreamTransport", "lent_descriptor"]

WINDOW: Final = 256 * 1024
"""Bytes a flow keeps on the wire or unread at the receiver before writes wait (a TCP window)."""

_SEGMENT: Final = 64 * 1024
"""The largest segment a write is cut into (so a window can open part way)."""

_DATA: Final = 0
_FIN: Final = 1
_RST: Final = 2


_LENT: list[int] = []  # [never readable, always readable, the first's writer], made once


def _lent_descriptors() -> list[int]:
    """Two pipe ends that simulated connections lend as their descriptor, for ``poll``.

    The first is never readable (its pipe's write end stays open and is never written), the
    second always is (its write end is closed: it reads as end of file).  Made once per
    process; a child started with ``subprocess`` does not inherit them (PEP 446).
    """
    if not _LENT:
        quiet, silent = os.pipe()
        ready, writer = os.pipe()
        os.close(writer)
        _LENT.extend((quiet, ready, silent))
    return _LENT


def lent_descriptor(readable: bool) -> int:
    """The shared descriptor a simulated socket lends: one ``poll`` sees as readable, or not."""
    quiet, ready, _silent = _lent_descriptors()
    return ready if readable else quiet


class SimSocket:
    """What ``transport.get_extra_info("socket")`` gives for a simulated connection.

    Libraries ask the socket of a transport for its addresses and set options on it (aiohttp
    and redis-py set ``TCP_NODELAY``, anyio reads ``family`` and the addresses).  This one
    answers with the simulated addresses and remembers options.  Some also ``poll`` its
    descriptor before they reuse an idle connection (httpcore, hence httpx, as urllib3 does):
    readable means the server has closed it or sent something unasked, and the connection is
    dropped.  So a connection's socket lends a descriptor that polls as its state does
    (:meth:`fileno`), and reads -1 once closed, as a real socket does.
    """

    def __init__(self, family: int, kind: int, local: Any, remote: Any) -> None:
        self.family = family
        self.type = kind
        self.proto = 0 if family == socket.AF_UNIX else socket.IPPROTO_TCP
        self._local = local
        self._remote = remote
        self._options: dict[tuple[int, int], Any] = {}
        self._end: StreamTransport | None = None  # the connection end it is the socket of
        self._closed = False

    def fileno(self) -> int:
        """A descriptor that ``poll``/``select`` see as this connection's readiness, or -1.

        For a connection end: a shared pipe end that is never readable while the end is open
        with nothing unread, and one that always is once the peer has finished sending or
        bytes wait unread (reading paused).  -1 for a listening or datagram socket (no
        descriptor of its own) and after :meth:`close`.  The descriptor is only lent: do not
        read, register or close it.
        """
        end = self._end
        if self._closed or end is None:
            return -1
        return lent_descriptor(bool(end.inbox or end._eof_in or end._peer_done))

    def getsockname(self) -> Any:
        """The local simulated address."""
        return self._local

    def getpeername(self) -> Any:
        """The remote simulated address (``OSError`` ENOTCONN when there is none)."""
        if self._remote is None:
            raise OSError(errno.ENOTCONN, "Transport endpoint is not connected")
        return self._remote

    def setsockopt(self, level: int, option: int, value: Any, *rest: Any) -> None:
        """Remember an option (it changes nothing on a simulated link)."""
        self._options[level, option] = value

    def getsockopt(self, level: int, option: int, *rest: Any) -> Any:
        """An option set before, else 0."""
        return self._options.get((level, option), 0)

    def setblocking(self, flag: bool) -> None:
        """Accepted and ignored: simulated sockets never block a thread."""

    def gettimeout(self) -> float:
        """0.0: non-blocking, as asyncio's sockets are."""
        return 0.0

    def close(self) -> None:
        """Closed: :meth:`fileno` is -1 from now on (the addresses stay readable)."""
        self._closed = True

    def __repr__(self) -> str:
        return f"<SimSocket {self._local!r} -> {self._remote!r}>"


def _check_data(data: object) -> bytes:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise InvalidTypeError(
            f"data argument must be a bytes-like object, not {type(data).__name__!r}"
        )
    return bytes(data)


class Flow:
    """One direction of a connection: from ``src``'s host to ``dst``'s, over their link."""

    __slots__ = (
        "dst",
        "held",
        "last_arrival",
        "link",
        "open",
        "pending",
        "queue",
        "queued_bytes",
        "src",
        "timer",
        "tx_free",
        "unacked",
        "version",
        "wire",
        "world",
    )

    def __init__(self, world: Network, src: StreamTransport, dst: StreamTransport) -> None:
        self.world = world
        self.src = src
        self.dst = dst
        self.queue: collections.deque[tuple[int, bytes]] = collections.deque()
        self.queued_bytes = 0  # data bytes in queue: the sender's write buffer
        self.wire: collections.deque[tuple[int, int, bytes]] = collections.deque()
        self.unacked = 0  # data bytes on the wire or in the receiver's inbox
        self.tx_free = 0  # the tick the link's transmitter is free again
        self.last_arrival = 0
        self.timer: asyncio.TimerHandle | None = None
        self.pending = 0  # the arrival tick the timer is set for
        self.held = False
        # The link and whether it is open, as of the world's version (faults bump it).
        self.version = -1
        self.link = world.default_link
        self.open = True

    def _refresh(self) -> bool:
        world = self.world
        if self.version != world.version:
            src, dst = self.src.host, self.dst.host
            self.open = world.connected(src, dst)
            self.link = world.link_of(src, dst)
            self.version = world.version
        return self.open

    # ----------------------------------------------------------------- sending

    def send(self, kind: int, data: bytes = b"") -> None:
        """Queue a segment (cut to :data:`_SEGMENT`) and move what may move."""
        if kind == _DATA:
            if len(data) <= _SEGMENT:
                self.queue.append((_DATA, data))
                self.queued_bytes += len(data)
            else:
                for start in range(0, len(data), _SEGMENT):
                    piece = data[start : start + _SEGMENT]
                    self.queue.append((_DATA, piece))
                    self.queued_bytes += len(piece)
        else:
            self.queue.append((kind, data))
        self.pump()

    def pump(self) -> None:
        """Put queued segments on the wire while the window and the link allow."""
        world = self.world
        if not self._refresh():
            self.held = True
            world.held_flows[self] = None
            return
        if self.held:
            self.held = False
            world.held_flows.pop(self, None)
        link = self.link
        now = world.ticks()
        moved = False
        while self.queue:
            kind, data = self.queue[0]
            size = len(data)
            if kind == _DATA and self.unacked and self.unacked + size > WINDOW:
                break
            self.queue.popleft()
            if kind == _DATA:
                self.queued_bytes -= size
                self.unacked += size
            start = max(now, self.tx_free)
            if link.bandwidth is not None and size:
                start += round(size / link.bandwidth * 1e9)
            self.tx_free = start
            arrival = start + link.delay_ticks(world)
            if arrival < self.last_arrival:
                arrival = self.last_arrival  # jitter delays, never reorders
            self.last_arrival = arrival
            self.wire.append((arrival, kind, data))
            moved = True
        if moved:
            self._arm()

    def resume(self) -> None:
        """In the sender's context: move what waited (a heal, an opened window), then tell its
        protocol whether it may write again."""
        self.pump()
        self.src.writable()

    def _arm(self) -> None:
        if not self.wire:
            return
        head = self.wire[0][0]
        if self.timer is not None:
            if self.pending <= head:
                return
            self.timer.cancel()
        self.pending = head
        self.timer = self.world.at(head, self._deliver, self.dst.context)

    # ---------------------------------------------------------------- delivery

    def _deliver(self) -> None:
        self.timer = None
        world = self.world
        if not self._refresh():
            # A partition fell while these were on the wire: they wait for the heal, first
            # in line, and are sent again then (as TCP retransmits them).
            while self.wire:
                _arrival, kind, data = self.wire.pop()
                if kind == _DATA:
                    self.unacked -= len(data)
                    self.queued_bytes += len(data)
                self.queue.appendleft((kind, data))
            self.held = True
            world.held_flows[self] = None
            world.soon(self.src.writable, self.src.context)
            return
        now = world.ticks()
        dst = self.dst
        while self.wire and self.wire[0][0] <= now:
            _arrival, kind, data = self.wire.popleft()
            dst.arrive(self, kind, data)
        self._arm()

    def consumed(self, size: int) -> None:
        """The receiver read ``size`` bytes: the window opens (the sender learns it in its own
        context: its protocol's resume_writing runs there, held back if its host is paused)."""
        self.unacked -= size
        if self.queue or self.src._writing_paused:
            self.world.soon(self.resume, self.src.context)

    def drop(self) -> None:
        """Forget everything in flight (the connection is gone)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.queue.clear()
        self.wire.clear()
        self.queued_bytes = 0
        self.unacked = 0
        self.world.held_flows.pop(self, None)


class StreamTransport(asyncio.Transport):
    """One end of a simulated stream connection (TCP or a Unix socket between two hosts)."""

    def __init__(
        self,
        world: Network,
        host: Host,
        protocol: asyncio.BaseProtocol | None,
        context: contextvars.Context,
        sock: SimSocket,
        *,
        unix: bool = False,
    ) -> None:
        super().__init__({"socket": sock, "sockname": sock._local, "peername": sock._remote})
        self.world = world
        self.host = host
        self.context = context
        self._protocol = protocol
        self._sock = sock
        sock._end = self
        self._unix = unix
        self.out: Flow | None = None  # to the peer
        self.incoming: Flow | None = None  # from the peer
        self.inbox: collections.deque[bytes] = collections.deque()
        self._eof_in = False  # a FIN is waiting behind the inbox
        self._peer_done = False  # the peer's FIN has arrived (delivered or not)
        self._eof_out = False  # we wrote EOF (or closed)
        self._closing = False
        self._lost = False
        self._reading = True
        self._writing_paused = False
        self._high = 64 * 1024
        self._low = 16 * 1024
        self._feeding = False
        self.server: Any = None  # the Server that accepted this end, if one did
        # A reset that came before the end had its protocol (during the connect).
        self.lost_before: BaseException | None = None
        host.transports[self] = None

    def __repr__(self) -> str:
        state = "closed" if self._lost else "closing" if self._closing else "open"
        return f"<StreamTransport {self._sock._local!r} -> {self._sock._remote!r} {state}>"

    # ----------------------------------------------------------- transport API

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol  # type: ignore[return-value]

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol
        if self.inbox or self._eof_in:
            self.world.soon(self._feed, self.context)

    def is_closing(self) -> bool:
        return self._closing

    def is_reading(self) -> bool:
        return self._reading and not self._closing

    def pause_reading(self) -> None:
        self._reading = False

    def resume_reading(self) -> None:
        if self._reading:
            return
        self._reading = True
        if self.inbox or self._eof_in:
            self.world.soon(self._feed, self.context)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if high is None:
            high = 64 * 1024 if low is None else 4 * low
        if low is None:
            low = high // 4
        if not high >= low >= 0:
            raise InvalidValueError(f"high ({high!r}) must be >= low ({low!r}) must be >= 0")
        self._high, self._low = high, low
        self.writable()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return (self._low, self._high)

    def get_write_buffer_size(self) -> int:
        return 0 if self.out is None else self.out.queued_bytes

    def write(self, data: bytes | bytearray | memoryview) -> None:
        payload = _check_data(data)
        if self._eof_out and not self._closing:
            raise UsageError("Cannot call write() after write_eof()")
        if self._closing or self.out is None or not payload:
            return
        self.out.send(_DATA, payload)
        self.writable()

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(_check_data(piece) for piece in list_of_data))

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        if self._eof_out or self._closing:
            return
        self._eof_out = True
        if self.out is not None:
            self.out.send(_FIN)

    def close(self) -> None:
        if self._closing:
            return
        if self.inbox:
            # Closing with bytes unread: the peer is reset, as Linux does (the bytes it sent
            # were never read, and its window would never open again).
            self.abort()
            return
        self._closing = True
        if not self._eof_out and self.out is not None:
            self._eof_out = True
            self.out.send(_FIN)
        self.world.soon(self._lose, self.context, None)

    def abort(self) -> None:
        if self._lost:
            return
        self._closing = True
        if self.out is not None:
            self.out.drop()
            self.out.send(_RST)
        self.world.soon(self._lose, self.context, None)

    # --------------------------------------------------------------- internals

    def writable(self) -> None:
        """Tell the protocol to pause or resume writing as the buffer crosses its marks."""
        if self._lost:
            return
        size = self.get_write_buffer_size()
        if not self._writing_paused and size > self._high:
            self._writing_paused = True
            self._call("pause_writing")
        elif self._writing_paused and size <= self._low:
            self._writing_paused = False
            self._call("resume_writing")

    def _call(self, name: str, *args: Any) -> Any:
        if self._protocol is None:
            return None
        try:
            return getattr(self._protocol, name)(*args)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._failed(name, exc)
            return None

    def _failed(self, name: str, exc: BaseException) -> None:
        """A protocol method raised: report it as asyncio's transports do, and abort."""
        self.world.report(
            {
                "message": f"protocol.{name}() failed",
                "exception": exc,
                "transport": self,
                "protocol": self._protocol,
            }
        )
        self._force_close(exc)

    def _force_close(self, exc: BaseException) -> None:
        """End the connection at once after a protocol error: the peer is reset, and this
        end's protocol learns why (``connection_lost(exc)``), as asyncio's transports do."""
        if not self._halt():
            return
        if self.out is not None:
            self.out.send(_RST)
        self.world.soon(self._lose, self.context, exc)

    def _halt(self) -> bool:
        """Stop this end's traffic: nothing unread is kept, nothing unsent goes out.  False
        if the connection had already ended."""
        if self._lost:
            return False
        self._closing = True
        self.inbox.clear()
        if self.out is not None:
            self.out.drop()
        return True

    def arrive(self, flow: Flow, kind: int, data: bytes) -> None:
        """A segment reached this end (called in this end's context)."""
        if self._lost:
            if kind == _DATA:
                flow.unacked -= len(data)
                if self.out is not None and not self.world.is_down(self.host):
                    # Data for a connection this end has closed: the peer is reset.
                    self.out.send(_RST)
            return
        if kind == _RST:
            self.reset()
            return
        if kind == _FIN:
            self._eof_in = self._peer_done = True
        else:
            self.inbox.append(data)
        self._feed()

    def _feed(self) -> None:
        if self._feeding or self._lost or self._protocol is None:
            return
        self._feeding = True
        try:
            flow = self.incoming
            while self.inbox and self._reading and not self._closing:
                data = b"".join(self.inbox) if len(self.inbox) > 1 else self.inbox[0]
                self.inbox.clear()
                if flow is not None:
                    flow.consumed(len(data))
                self._hand_over(data)
            if self._eof_in and not self.inbox and self._reading and not self._closing:
                self._eof_in = False
                keep_open = self._call("eof_received")
                if not keep_open and not self.is_closing():
                    self.close()
        finally:
            self._feeding = False

    def _hand_over(self, data: bytes) -> None:
        protocol = self._protocol
        if not isinstance(protocol, asyncio.BufferedProtocol):
            try:  # _call("data_received", data), inlined: every delivery of every connection
                protocol.data_received(data)  # type: ignore[union-attr]
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._failed("data_received", exc)
            return
        view = memoryview(data)
        while view and not self._lost:
            try:
                buf = memoryview(protocol.get_buffer(len(view)))
                n = min(len(buf), len(view))
                if n == 0:
                    raise UsageError("get_buffer() returned an empty buffer")
                buf[:n] = view[:n]
                protocol.buffer_updated(n)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._failed("get_buffer/buffer_updated", exc)
                return
            view = view[n:]

    def reset(self) -> None:
        """The peer reset the connection (or its host crashed)."""
        if not self._halt():
            return
        self._lose(ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"))

    def _lose(self, exc: BaseException | None) -> None:
        if self._lost:
            return
        self._lost = True
        self.host.transports.pop(self, None)
        if self.server is not None:
            self.server.forget(self)
        self.world.forget_socket(self)
        if self._protocol is None:
            self.lost_before = exc or ConnectionResetError(errno.ECONNRESET, "Connection reset")
        self._call("connection_lost", exc)
        self._sock.close()

    def vanish(self) -> None:
        """This end's host crashed: the end is gone, and its peer is reset.

        This end's protocol learns it at once (``connection_lost`` with a reset), so that code
        of the host still waiting on it ends; the peer learns it one link latency later -- or,
        across a partition, one latency after the heal.
        """
        if self._lost:
            return
        peer = self.out.dst if self.out is not None else None
        if self.out is not None:
            self.out.drop()
        self.out = None
        self._closing = True
        self.inbox.clear()
        self._lose(ConnectionResetError(errno.ECONNRESET, f"host {self.host.name!r} crashed"))
        if peer is not None and not peer._lost:
            self.world.reset_later(self.host, peer)


class DatagramTransport(asyncio.DatagramTransport):
    """A UDP endpoint on a simulated host: datagrams may be lost, duplicated or reordered."""

    def __init__(
        self,
        world: Network,
        host: Host,
        port: int,
        protocol: asyncio.DatagramProtocol,
        context: contextvars.Context,
        remote: tuple[str, int] | None,
    ) -> None:
        sock = SimSocket(socket.AF_INET, socket.SOCK_DGRAM, (host.address, port), remote)
        super().__init__({"socket": sock, "sockname": (host.address, port), "peername": remote})
        self.world = world
        self.host = host
        self.port = port
        self._protocol = protocol
        self.context = context
        self._remote = remote
        self._closing = False

    def __repr__(self) -> str:
        return f"<DatagramTransport {self.host.address}:{self.port}>"

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol  # type: ignore[assignment]

    def is_closing(self) -> bool:
        return self._closing

    def get_write_buffer_size(self) -> int:
        return 0

    def sendto(self, data: Any, addr: Any = None) -> None:
        payload = _check_data(data)
        if self._closing:
            return
        if addr is None:
            if self._remote is None:
                raise InvalidValueError("sendto() needs an address on an unconnected endpoint")
            addr = self._remote
        elif self._remote is not None and tuple(addr[:2]) != self._remote:
            raise InvalidValueError(
                f"Invalid address: must be None or {self._remote!r}, got {addr!r}"
            )
        self.world.send_datagram(self, payload, (str(addr[0]), int(addr[1])))

    def received(self, data: bytes, source: tuple[str, int]) -> None:
        """A datagram arrived (in this endpoint's context)."""
        if self._closing:
            return
        if self._remote is not None and source != self._remote:
            return  # a connected endpoint hears only its peer
        try:
            self._protocol.datagram_received(data, source)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self.world.report(
                {"message": "datagram_received() failed", "exception": exc, "transport": self}
            )

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self.host.datagrams.pop(self.port, None)
        self.world.soon(self._protocol.connection_lost, self.context, None)

    def abort(self) -> None:
        self.close()


Callback = Callable[..., object]
