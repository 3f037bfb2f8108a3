"""TLS on top of any asyncio transport, through :class:`ssl.MemoryBIO` (the public ``ssl`` API).

When to use this
----------------
The simulated network carries bytes between hosts on in-memory transports.  When a program
asks for TLS on one of them -- ``loop.create_connection(..., ssl=ctx)``,
``loop.create_server(..., ssl=ctx)``, ``loop.start_tls(...)``, ``StreamWriter.start_tls()``
-- the world calls :func:`wrap` on the plain transport and gives the program the transport
:func:`wrap` returns.  Nothing here is specific to the simulation: :func:`wrap` puts TLS on
*any* object that behaves as an :class:`asyncio.Transport` (a real socket transport too,
which is how the tests check it against stock asyncio TLS peers).  Everything else in a
program -- asyncio streams, aiohttp, asyncpg, anyio -- sees an ordinary TLS transport.

How it works
------------
OpenSSL does the work in an :class:`ssl.SSLObject` made by :meth:`ssl.SSLContext.wrap_bio`
over two memory buffers: bytes from the wire are written into the *incoming* buffer, the
object turns them into plaintext (or into handshake progress), and whatever it wants to send
appears in the *outgoing* buffer, which is written to the plain transport.  Two objects sit
around it: a :class:`_Link` becomes the plain transport's protocol (the wire side), and a
:class:`TLSTransport` is what the program writes to and reads from.  ``asyncio.sslproto`` is
not used: it is private, and this package touches asyncio's private parts only in the
engine's loop modules.

A connection lives through four phases, each driven by what arrives from the wire:

``handshaking``
    :func:`wrap` has started the handshake and waits for it.  Application data written in
    the meantime is kept and sent once it completes; a handshake that fails sends OpenSSL's
    alert (so the peer learns why) and closes; one that outlasts ``handshake_timeout``
    aborts the connection with :class:`ConnectionAbortedError`, as asyncio does.
``open``
    Everything decrypted from one arrival is handed over at once (one ``data_received``
    call, or as many ``get_buffer``/``buffer_updated`` rounds as the plaintext needs).  Data
    written is encrypted in slices of :data:`SLICE` bytes, and only while the plain
    transport accepts more: when it asks to pause, plaintext waits here and the program is
    paused in turn once that wait passes its high-water mark.
``closing``
    After ``close()`` (or after the peer's ``close_notify`` when the program's
    ``eof_received`` returns false): what is waiting is sent, then ``close_notify``, then the
    peer's ``close_notify`` is awaited for up to ``shutdown_timeout`` (a late one aborts with
    :class:`TimeoutError`); data the peer sent meanwhile is dropped, as ``close()`` promises.
``closed``
    The plain transport is closed or aborted; when it reports its end, the program's
    ``connection_lost`` follows, with the error that ended the connection, if one did.

Decisions
---------
* The peer's ``close_notify`` reaches the program as ``eof_received()``; a true return keeps
  the connection open for writing (TLS 1.3 allows that half-close, and OpenSSL writes after
  it), where asyncio's own TLS transport closes anyway.  asyncio's streams return false over
  TLS, so they close as before.  A plain stream that ends without ``close_notify`` is
  treated the same way (asyncio does not tell the two apart either).
* With ``call_connection_made=False`` (``start_tls``) the program's protocol was already
  connected through the plain transport, so if the upgrade fails its ``connection_lost`` is
  called too; with ``True`` it hears nothing until the handshake has succeeded.
* An exception from the program's ``data_received`` (or ``get_buffer``, ``buffer_updated``,
  ``eof_received``) goes to ``loop.call_exception_handler`` and aborts the connection; the
  program's ``connection_lost`` receives it.  SSL errors are ``OSError``\\ s and, as in
  asyncio, are not reported: they reach the program as the error its connection ended with.
* The plain transport must call its protocol from the loop (as every asyncio transport
  does), not from inside its own ``write``; reentrant arrivals are queued all the same.

Part of ``net``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trace`` (see
tests/layout.py).
"""

from __future__ import annotations

import asyncio
import collections
import enum
import math
import ssl
from collections.abc import Callable, Iterable
from typing import Any, Final, cast

from .._shared._errors import InvalidTypeError, InvalidValueError, UsageError

__all__ = ["HalfCloseError", "TLSTransport", "wrap"]

HANDSHAKE_TIMEOUT: Final = 60.0
"""Seconds a handshake may take when the caller gives no timeout (asyncio's default)."""

SHUTDOWN_TIMEOUT: Final = 30.0
"""Seconds to wait for the peer's ``close_notify`` after ours (asyncio's default)."""

WRITE_HIGH_WATER: Final = 512 * 1024
"""Default high-water mark of the plaintext waiting to be encrypted (asyncio's for TLS)."""

SLICE: Final = 256 * 1024
"""Bytes encrypted, or decrypted, per step: a large write never becomes one huge record run."""

_AGAIN = (ssl.SSLWantReadError, ssl.SSLWantWriteError, ssl.SSLSyscallError)
"""What OpenSSL says when it needs more bytes from the wire before it can go on."""

_Bytes = bytes | bytearray | memoryview


class HalfCloseError(UsageError, NotImplementedError):
    """``write_eof()`` on a TLS transport: TLS has no half-close of the writing side.

    It is a :class:`NotImplementedError` because that is what asyncio's own TLS transport
    raises (and what code that tries ``write_eof`` first catches).  Check
    ``transport.can_write_eof()`` (false here), or call ``close()``, which sends
    ``close_notify``.
    """


class _Phase(enum.Enum):
    HANDSHAKING = "handshaking"
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


class _App(enum.Enum):
    """How far the program's protocol has been told about the connection."""

    NEW = "new"  # connection_made not called yet
    CONNECTED = "connected"
    EOF = "eof"  # eof_received called
    GONE = "gone"  # connection_lost called


class TLSTransport(asyncio.Transport):
    """The program's side of a TLS connection: write plaintext, receive plaintext.

    Made by :func:`wrap`; it behaves as asyncio's own TLS transport does.  ``write`` never
    blocks: plaintext waits here while the plain transport below is paused, and the
    protocol's ``pause_writing``/``resume_writing`` follow the high- and low-water marks of
    that wait (:meth:`set_write_buffer_limits`).  ``pause_reading`` stops the plain
    transport too, so a slow reader slows the sender.  ``get_extra_info`` answers
    ``"ssl_object"``, ``"peercert"``, ``"cipher"``, ``"compression"`` and ``"sslcontext"``
    itself and asks the plain transport for everything else (``"peername"``, ``"socket"``).
    """

    def __init__(self, link: _Link) -> None:
        super().__init__()
        self._link = link
        self._closing = False

    def __repr__(self) -> str:
        link = self._link
        side = "server" if link.server_side else "client"
        return f"<TLSTransport {side} {link.phase.value} peer={self.get_extra_info('peername')}>"

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """TLS facts (``ssl_object``, ``peercert``, ``cipher``, ...), else the plain
        transport's."""
        return self._link.extra_info(name, default)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._link.app

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        """Deliver from now on to ``protocol`` (a ``Protocol`` or a ``BufferedProtocol``)."""
        self._link.set_app(protocol)

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        """Send what is waiting, then ``close_notify``; ``connection_lost(None)`` follows.

        No more data is delivered to the protocol.  A connection still in its handshake is
        aborted instead.
        """
        if not self._closing:
            self._closing = True
            self._link.begin_close()

    def abort(self) -> None:
        """Drop everything waiting and close the plain transport at once."""
        self._closing = True
        self._link.abort()

    # -- reading

    def is_reading(self) -> bool:
        return not self._closing and not self._link.reading_paused

    def pause_reading(self) -> None:
        """Stop delivering data, and stop reading the plain transport, until resumed."""
        self._link.pause_reading()

    def resume_reading(self) -> None:
        """Deliver again; plaintext already decrypted arrives from the next loop round."""
        self._link.resume_reading()

    # -- writing

    def write(self, data: _Bytes) -> None:
        """Encrypt and send ``data`` (a copy is kept while it waits)."""
        self._link.write((_checked(data),))

    def writelines(self, list_of_data: Iterable[_Bytes]) -> None:
        """Write each item in turn, as one batch."""
        self._link.write([_checked(data) for data in list_of_data])

    def write_eof(self) -> None:
        """Refuse: TLS cannot half-close (:class:`HalfCloseError`); use :meth:`close`."""
        raise HalfCloseError(
            "write_eof() is not possible on a TLS transport: TLS has no half-close of the "
            "writing side (can_write_eof() is False); call close() to send close_notify"
        )

    def can_write_eof(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        """Plaintext bytes written but not yet handed, encrypted, to the plain transport."""
        return self._link.waiting

    def get_write_buffer_limits(self) -> tuple[int, int]:
        """``(low, high)``: the marks at which the protocol is resumed and paused."""
        return self._link.low_water, self._link.high_water

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        """Pause the protocol's writing above ``high`` bytes waiting, resume at ``low``.

        ``high`` defaults to 512 KiB (or ``4 * low``), ``low`` to ``high // 4``; they must
        satisfy ``high >= low >= 0``.
        """
        if high is None:
            high = WRITE_HIGH_WATER if low is None else 4 * low
        if low is None:
            low = high // 4
        if not high >= low >= 0:
            raise InvalidValueError(
                f"write buffer limits must satisfy high >= low >= 0, got high={high!r}, low={low!r}"
            )
        self._link.high_water, self._link.low_water = high, low
        self._link.control_app_writing()


def _checked(data: object) -> _Bytes:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise InvalidTypeError(
            f"data must be bytes, bytearray or memoryview, got {type(data).__name__}"
        )
    return data


class _Link(asyncio.Protocol):
    """The plain transport's protocol: the TLS state machine between the wire and the program.

    Everything that arrives goes through :meth:`_dispatch`, which runs the step of the
    current phase until nothing more can be done with the bytes at hand.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        raw: asyncio.Transport,
        app: asyncio.BaseProtocol,
        context: ssl.SSLContext,
        *,
        server_side: bool,
        server_hostname: str | None,
        handshake_timeout: float,
        shutdown_timeout: float,
        call_connection_made: bool,
    ) -> None:
        self.loop = loop
        self.raw = raw
        self.server_side = server_side
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(
            self._incoming,
            self._outgoing,
            server_side=server_side,
            server_hostname=None if server_side else server_hostname,
        )
        self._extra: dict[str, Any] = {"sslcontext": context}
        self.phase = _Phase.HANDSHAKING
        self._app_state = _App.NEW if call_connection_made else _App.CONNECTED
        self._handshake_timeout = handshake_timeout
        self._shutdown_timeout = shutdown_timeout
        self._timer: asyncio.TimerHandle | None = None
        self.handshake: asyncio.Future[None] = loop.create_future()
        self._error: Exception | None = None  # what ended the connection, if anything
        # Writing: plaintext waiting to be encrypted, and who asked whom to pause.
        self._backlog: collections.deque[memoryview] = collections.deque()
        self.waiting = 0
        self.high_water = WRITE_HIGH_WATER
        self.low_water = WRITE_HIGH_WATER // 4
        self._raw_paused = False  # the plain transport asked us to stop writing
        self._app_paused = False  # we asked the program to stop writing
        self._pushing = False
        # Reading.
        self.reading_paused = False  # the program paused its reading
        self._raw_held = False  # ... and so we paused the plain transport's
        self._raw_eof = False  # the plain stream has ended
        self._peer_closed = False  # the peer's close_notify has been read
        self._dispatching = False
        self._again = False
        self._lost = False  # the plain transport has reported its end
        self.transport = TLSTransport(self)
        self.set_app(app)

    # -- the program's protocol

    def set_app(self, app: asyncio.BaseProtocol) -> None:
        self.app = app
        self._get_buffer: Callable[[int], Any] | None = None
        self._buffer_updated: Callable[[int], object] | None = None
        self._data_received: Callable[[bytes], object] | None = None
        if isinstance(app, asyncio.BufferedProtocol):
            self._get_buffer = app.get_buffer
            self._buffer_updated = app.buffer_updated
        else:
            self._data_received = cast(asyncio.Protocol, app).data_received

    def extra_info(self, name: str, default: Any) -> Any:
        if name in self._extra:
            return self._extra[name]
        return self.raw.get_extra_info(name, default)

    def _report(self, exc: Exception, message: str) -> None:
        """Tell the loop's exception handler about a failure of the program's protocol."""
        self.loop.call_exception_handler(
            {
                "message": message,
                "exception": exc,
                "transport": self.transport,
                "protocol": self.app,
            }
        )

    # -- starting and ending

    def start(self) -> None:
        self.raw.set_protocol(self)
        self.raw.resume_reading()
        if math.isfinite(self._handshake_timeout):
            self._timer = self.loop.call_later(self._handshake_timeout, self._handshake_expired)
        self._dispatch()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _end(self, error: Exception | None, *, abort: bool) -> None:
        """Move to ``closed`` and close the plain transport (the program hears of it when
        the plain transport reports its end)."""
        if self.phase is _Phase.CLOSED:
            return
        self.phase = _Phase.CLOSED
        self.transport._closing = True
        self._error = error
        self._cancel_timer()
        self._backlog.clear()
        self.waiting = 0
        if error is not None and not self.handshake.done():
            self.handshake.set_exception(error)
        if abort:
            self.raw.abort()
        else:
            self.raw.close()

    def _fail(self, exc: Exception, message: str | None = None) -> None:
        """End the connection at once because of ``exc``; report it if it is not an
        ``OSError`` (an SSL error, a reset) and ``message`` says what failed."""
        if message is not None and not isinstance(exc, OSError):
            self._report(exc, message)
        self._end(exc, abort=True)

    def abandon(self) -> None:
        """:func:`wrap` gave up (cancelled, or failed): close the plain transport."""
        if self.phase is not _Phase.CLOSED:
            self._end(None, abort=False)

    def abort(self) -> None:
        if self.phase is _Phase.CLOSED:
            if not self._lost:
                self.raw.abort()  # a graceful close still flushing: drop it now
            return
        self._end(None, abort=True)

    # -- the plain transport's calls

    def data_received(self, data: bytes) -> None:
        self._incoming.write(data)
        self._dispatch()

    def eof_received(self) -> bool:
        self._raw_eof = True
        if self.phase is _Phase.HANDSHAKING:
            self._end(ConnectionResetError("the peer closed during the TLS handshake"), abort=False)
        else:
            self._dispatch()
        return True  # the plain transport stays open until this layer closes it

    def connection_lost(self, exc: Exception | None) -> None:
        error = self._error if self._error is not None else exc
        self._lost = True
        self.phase = _Phase.CLOSED
        self.transport._closing = True
        self._cancel_timer()
        self._backlog.clear()
        self.waiting = 0
        if not self.handshake.done():
            self.handshake.set_exception(
                error or ConnectionResetError("the connection was lost during the TLS handshake")
            )
        if self._app_state in (_App.CONNECTED, _App.EOF):
            self._app_state = _App.GONE
            self.app.connection_lost(error)

    def pause_writing(self) -> None:
        self._raw_paused = True

    def resume_writing(self) -> None:
        self._raw_paused = False
        self._push()

    # -- the state machine

    def _dispatch(self) -> None:
        """Run the current phase's step until the bytes at hand are used up.

        A call made while a step runs (a reentrant arrival) only asks for another round.
        """
        self._again = True
        if self._dispatching:
            return
        self._dispatching = True
        try:
            while self._again:
                self._again = False
                if self.phase is _Phase.HANDSHAKING:
                    self._step_handshake()
                elif self.phase is _Phase.OPEN:
                    self._step_read()
                elif self.phase is _Phase.CLOSING:
                    self._step_close()
        finally:
            self._dispatching = False

    def _send_outgoing(self) -> None:
        data = self._outgoing.read()
        if data:
            self.raw.write(data)

    def _step_handshake(self) -> None:
        try:
            self._tls.do_handshake()
        except _AGAIN:
            self._send_outgoing()
            return
        except ssl.SSLError as exc:
            self._send_outgoing()  # OpenSSL's alert tells the peer why
            self._end(exc, abort=False)
            return
        self._cancel_timer()
        tls = self._tls
        self._extra.update(
            ssl_object=tls,
            peercert=tls.getpeercert(),
            cipher=tls.cipher(),
            compression=tls.compression(),
        )
        self.phase = _Phase.OPEN
        self._send_outgoing()  # the client's Finished; a TLS 1.3 server's session tickets
        if self._app_state is _App.NEW:
            self._app_state = _App.CONNECTED
            try:
                self.app.connection_made(self.transport)
            except Exception as exc:
                self._fail(exc, "Fatal error on TLS transport: protocol.connection_made() failed")
                return
        if not self.handshake.done():
            self.handshake.set_result(None)
        self._push()
        self._again = True  # application data may have come with the handshake's last bytes

    def _handshake_expired(self) -> None:
        self._timer = None
        if self.phase is _Phase.HANDSHAKING:
            self._fail(
                ConnectionAbortedError(
                    f"the TLS handshake took longer than {self._handshake_timeout} seconds: "
                    "the connection is aborted"
                )
            )

    def _step_read(self) -> None:
        if not self.reading_paused and not self._peer_closed:
            closed = self._deliver_buffered() if self._get_buffer else self._deliver_copied()
            if self.phase is not _Phase.OPEN:
                return  # the program closed or aborted, or the data was bad
            self._send_outgoing()  # replies to post-handshake messages (key updates)
            if self._backlog:
                self._push()  # a write may have waited for the peer
            if closed:
                self._peer_eof()
                return
        if self._raw_eof and not self.reading_paused and not self._peer_closed:
            self._peer_eof()  # the stream ended without close_notify

    def _deliver_copied(self) -> bool:
        """Hand everything decrypted to ``data_received`` in one call; True at close_notify."""
        chunks: list[bytes] = []
        closed = False
        try:
            while chunk := self._tls.read(SLICE):
                chunks.append(chunk)
            closed = True
        except _AGAIN:
            pass
        except ssl.SSLError as exc:
            self._fail(exc)
            return False
        if chunks:
            assert self._data_received is not None
            try:
                self._data_received(chunks[0] if len(chunks) == 1 else b"".join(chunks))
            except Exception as exc:
                self._fail(exc, "Fatal error on TLS transport: protocol.data_received() failed")
                return False
        return closed

    def _deliver_buffered(self) -> bool:
        """Fill the protocol's buffers until the plaintext is used up; True at close_notify."""
        assert self._get_buffer is not None
        assert self._buffer_updated is not None
        while self.phase is _Phase.OPEN and not self.reading_paused:
            try:
                view = memoryview(self._get_buffer(-1)).cast("B")
                if not len(view):
                    raise UsageError("protocol.get_buffer() returned an empty buffer")
            except Exception as exc:
                self._fail(exc, "Fatal error on TLS transport: protocol.get_buffer() failed")
                return False
            filled, closed, drained = 0, False, False
            try:
                while filled < len(view):
                    count = cast(int, self._tls.read(len(view) - filled, view[filled:]))
                    if not count:
                        closed = True
                        break
                    filled += count
            except _AGAIN:
                drained = True
            except ssl.SSLError as exc:
                self._fail(exc)
                return False
            finally:
                view.release()
            if filled:
                try:
                    self._buffer_updated(filled)
                except Exception as exc:
                    self._fail(
                        exc, "Fatal error on TLS transport: protocol.buffer_updated() failed"
                    )
                    return False
            if closed or drained:
                return closed
        return False

    def _peer_eof(self) -> None:
        """The peer has finished sending: tell the program, and close unless it keeps the
        connection open for writing."""
        self._peer_closed = True
        keep_open = False
        if self._app_state is _App.CONNECTED:
            self._app_state = _App.EOF
            try:
                keep_open = bool(cast(asyncio.Protocol, self.app).eof_received())
            except Exception as exc:
                self._fail(exc, "Fatal error on TLS transport: protocol.eof_received() failed")
                return
        if not keep_open:
            self.transport._closing = True
            self.begin_close()

    def begin_close(self) -> None:
        """Start the ``closing`` phase: flush, send ``close_notify``, await the peer's."""
        if self.phase is _Phase.HANDSHAKING:
            self.abort()
            return
        if self.phase is not _Phase.OPEN:
            return
        if not self._push(everything=True):
            return  # encrypting failed: the connection is gone
        self.phase = _Phase.CLOSING
        if self._raw_held:
            self._raw_held = False
            self.raw.resume_reading()  # the peer's close_notify must be read
        if math.isfinite(self._shutdown_timeout):
            self._timer = self.loop.call_later(self._shutdown_timeout, self._shutdown_expired)
        self._dispatch()

    def _step_close(self) -> None:
        if not self._peer_closed:
            # Drop what the peer sent before it saw our close_notify: OpenSSL refuses to
            # finish a shutdown with unread application data.
            try:
                while self._tls.read(SLICE):
                    pass
                self._peer_closed = True
            except ssl.SSLZeroReturnError:
                self._peer_closed = True  # read after our own close_notify
            except _AGAIN:
                pass
            except ssl.SSLError as exc:
                self._fail(exc)
                return
        if self._raw_eof:
            # The plain stream has ended: nobody reads a close_notify any more.
            self._end(None, abort=False)
            return
        try:
            self._tls.unwrap()
        except _AGAIN:
            self._send_outgoing()  # our close_notify; the peer's is still to come
            return
        except ssl.SSLError as exc:
            self._fail(exc)
            return
        self._send_outgoing()
        self._end(None, abort=False)

    def _shutdown_expired(self) -> None:
        self._timer = None
        if self.phase is _Phase.CLOSING:
            self._fail(
                TimeoutError(
                    f"the peer did not answer close_notify within {self._shutdown_timeout} "
                    "seconds: the connection is aborted"
                )
            )

    # -- the program's writes

    def write(self, items: Iterable[_Bytes]) -> None:
        if self.phase in (_Phase.CLOSING, _Phase.CLOSED):
            return  # as asyncio's transports do: writes after close() are dropped
        for data in items:
            if data:
                kept = memoryview(data if isinstance(data, bytes) else bytes(data))
                self._backlog.append(kept)
                self.waiting += len(kept)
        if self.phase is _Phase.OPEN:
            self._push()
        else:
            self.control_app_writing()

    def _push(self, *, everything: bool = False) -> bool:
        """Encrypt waiting plaintext, a slice at a time, while the plain transport takes it
        (or all of it, when closing); False if that failed and ended the connection."""
        if self._pushing or self.phase is not _Phase.OPEN:
            return True
        self._pushing = True
        try:
            backlog = self._backlog
            while backlog and self.phase is _Phase.OPEN and (everything or not self._raw_paused):
                head = backlog[0]
                try:
                    count = self._tls.write(head[:SLICE])
                except _AGAIN:
                    break  # the peer must speak first; the next arrival pushes again
                except ssl.SSLError as exc:
                    self._fail(exc)
                    return False
                if count >= len(head):
                    backlog.popleft()
                else:
                    backlog[0] = head[count:]
                self.waiting -= count
                self._send_outgoing()
        finally:
            self._pushing = False
        self.control_app_writing()
        return True

    def control_app_writing(self) -> None:
        """Pause the program's writing above the high-water mark, resume at the low one."""
        if self.phase is _Phase.CLOSED:
            return
        if not self._app_paused and self.waiting > self.high_water:
            self._app_paused = True
            try:
                self.app.pause_writing()
            except Exception as exc:
                self._report(exc, "protocol.pause_writing() failed")
        elif self._app_paused and self.waiting <= self.low_water:
            self._app_paused = False
            try:
                self.app.resume_writing()
            except Exception as exc:
                self._report(exc, "protocol.resume_writing() failed")

    # -- the program's reading

    def pause_reading(self) -> None:
        if self.reading_paused:
            return
        self.reading_paused = True
        if self.phase is _Phase.OPEN and not self._raw_held:
            self._raw_held = True
            self.raw.pause_reading()

    def resume_reading(self) -> None:
        if not self.reading_paused:
            return
        self.reading_paused = False
        if self._raw_held:
            self._raw_held = False
            self.raw.resume_reading()
        if self.phase is _Phase.OPEN:
            self.loop.call_soon(self._dispatch)


def _timeout(name: str, value: object, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidTypeError(f"{name} must be a number of seconds or None, got {value!r}")
    if not value > 0:
        raise InvalidValueError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)


async def wrap(
    loop: asyncio.AbstractEventLoop,
    raw: asyncio.Transport,
    app_protocol: asyncio.BaseProtocol,
    context: ssl.SSLContext,
    *,
    server_side: bool,
    server_hostname: str | None,
    handshake_timeout: float | None = None,
    shutdown_timeout: float | None = None,
    call_connection_made: bool = True,
) -> asyncio.Transport:
    """Run a TLS handshake over ``raw`` and return the transport ``app_protocol`` uses.

    ``raw`` is a connected transport (in-memory or real) whose protocol has not consumed
    any of the peer's TLS bytes; from now on its protocol is this layer's.
    ``call_connection_made=True`` is for ``create_connection``/``create_server`` with
    ``ssl=``: ``app_protocol.connection_made`` is called with the returned transport when
    the handshake succeeds.  ``False`` is for ``start_tls``: the protocol is already
    connected, and simply receives from the new transport.

    A handshake that fails raises the :class:`ssl.SSLError` (for instance
    :class:`ssl.SSLCertVerificationError` for a wrong host name) and closes ``raw``; one
    that takes longer than ``handshake_timeout`` seconds (default 60) raises
    :class:`ConnectionAbortedError` and aborts it; a peer that goes away raises
    :class:`ConnectionResetError`.  ``shutdown_timeout`` (default 30) bounds the wait for
    the peer's ``close_notify`` after ``close()``.  If the caller is cancelled, ``raw`` is
    closed.
    """
    if not isinstance(context, ssl.SSLContext):
        raise InvalidTypeError(f"context must be an ssl.SSLContext, got {type(context).__name__}")
    handshake = _timeout("handshake_timeout", handshake_timeout, HANDSHAKE_TIMEOUT)
    shutdown = _timeout("shutdown_timeout", shutdown_timeout, SHUTDOWN_TIMEOUT)
    if not server_side and not server_hostname and context.check_hostname:
        raise InvalidValueError(
            "server_hostname is required on the client side when context.check_hostname is "
            f"True, got {server_hostname!r}"
        )
    if raw.is_closing():
        raise ConnectionResetError("the transport to wrap in TLS is already closing")
    link = _Link(
        loop,
        raw,
        app_protocol,
        context,
        server_side=server_side,
        server_hostname=server_hostname,
        handshake_timeout=handshake,
        shutdown_timeout=shutdown,
        call_connection_made=call_connection_made,
    )
    link.start()
    try:
        await link.handshake
    except BaseException:
        link.abandon()
        raise
    return link.transport
