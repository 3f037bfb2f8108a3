"""What each descriptor the loop watches is: the outside-work model's look at sockets.

:class:`CountingSelector` is the loop's selector, which counts its registrations (so the idle
checks stay cheap) and keeps, per descriptor, what :func:`classify` decided about it: a
connection to a peer *outside* the loop, one whose both ends are *inside* it, a listening
socket, a connect in progress, a Unix socket, a terminal, or another descriptor.
:mod:`virtualtime._engine._outside` decides from these kinds whether socket I/O is outside
work, and what keeps the loop alive.

Part of ``engine``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

import os
import selectors
import socket
from typing import Any, Final, Protocol

from .._shared._machine import tcp_info as _tcp_info

__all__ = ["CountingSelector", "classify", "our_addresses"]

_TCP_LISTEN: Final = 10


class _Told(Protocol):
    """Who a :class:`CountingSelector` tells of a new registration (the outside-work model)."""

    changes: int


class CountingSelector(selectors.DefaultSelector):
    """The platform selector, counting registrations so that idle checks stay cheap."""

    registered: int = 0

    def __init__(self) -> None:
        super().__init__()
        self.kinds: dict[int, _Socket] = {}
        """What the outside-work model decided about each registered descriptor."""

    world: _Told | None = None
    """The model told of every new registration (see :attr:`OutsideWork.changes`)."""

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        key = super().register(fileobj, events, data)
        self.registered = len(self.get_map())
        if self.world is not None:
            self.world.changes += 1
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        key = super().unregister(fileobj)
        self.registered = len(self.get_map())
        self.kinds.pop(key.fd, None)
        return key


class _Peer:
    """What the model remembers about one connected socket to an outside peer (the rest of
    what is known about the connection lives in :class:`~virtualtime._shared._peers.Connections`,
    which outlives a registration: a socket whose reading was paused keeps its history)."""

    __slots__ = ("accepted", "label")

    def __init__(self, label: str, accepted: bool) -> None:
        self.label = label
        self.accepted = accepted


class _Socket:
    """The kind of one registered descriptor, decided once per registration."""

    __slots__ = ("inflight_since", "kind", "label", "peer")

    def __init__(self, kind: str, label: str, peer: _Peer | None = None) -> None:
        self.kind = kind  # "inside", "outside", "connecting", "listening", "other"
        self.label = label
        self.peer = peer
        self.inflight_since = -1.0


def _address(addr: Any) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        return f"{addr[0]}:{addr[1]}"
    return repr(addr)


def classify(key: selectors.SelectorKey, selector: selectors.BaseSelector, loop: object) -> _Socket:
    """What a descriptor the loop registered is: decided once per registration.

    ``selector`` is the loop's selector and ``loop`` the loop: a TCP connection whose peer
    is one of their own sockets is ``inside`` (both ends ours), any other connected TCP
    socket ``outside``.
    """
    fd = key.fd
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        try:
            tty = os.isatty(fd)
        except OSError:
            tty = False
        if tty:
            return _Socket("tty", f"terminal {fd}")
        return _Socket("other", f"descriptor {fd}")
    try:
        if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != (
            socket.SOCK_STREAM
        ):
            if sock.family == getattr(socket, "AF_UNIX", None):
                # No TCP_INFO: a Unix socket counts as outside work while a writer waits
                # on it, TLS is mid-handshake, the peer has not read what we sent, or the
                # peer process works (see _peers).
                return _Socket("unix", f"unix socket {fd}")
            return _Socket("other", f"socket {fd}")
        try:
            local = sock.getsockname()
        except OSError:
            return _Socket("other", f"socket {fd}")
        try:
            peer = sock.getpeername()
        except OSError:
            state = _tcp_state(sock)
            if state == _TCP_LISTEN:
                return _Socket("listening", f"listening socket {_address(local)}")
            # Not connected yet (a connect in progress): its peer decides later.
            return _Socket("connecting", f"socket {fd} connecting")
        exact, listening, wildcard = our_addresses(selector, loop)
        label = f"connection {_address(local)} -> {_address(peer)}"
        if tuple(peer[:2]) in exact or peer[1] in wildcard:
            return _Socket("inside", label)
        return _Socket("outside", label, _Peer(label, accepted=local[1] in listening))
    finally:
        sock.detach()


def our_addresses(
    selector: selectors.BaseSelector, loop: object
) -> tuple[set[tuple[Any, ...]], set[int], set[int]]:
    """Addresses of this loop's TCP sockets: exact, listening ports, wildcard listeners."""
    fds: set[int] = {key.fd for key in selector.get_map().values()}
    transports = getattr(loop, "_transports", None)
    if transports is not None:
        # asyncio-private: the loop's fd -> transport map (read-only use), which also
        # knows sockets whose reading is paused and so are not registered right now.  A
        # closed transport may linger in it while its fd number already belongs to
        # somebody else's socket (a server thread's, say): only open ones count.
        for fd, transport in list(transports.items()):
            if not transport.is_closing():
                fds.add(fd)
    exact: set[tuple[Any, ...]] = set()
    listening: set[int] = set()
    wildcard: set[int] = set()
    for fd in fds:
        try:
            sock = socket.socket(fileno=fd)
        except OSError:
            continue
        try:
            if sock.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            addr = tuple(sock.getsockname()[:2])
            exact.add(addr)
            if _tcp_state(sock) == _TCP_LISTEN:
                listening.add(addr[1])
                if addr[0] in ("0.0.0.0", "::"):
                    wildcard.add(addr[1])
        except OSError:
            continue
        finally:
            sock.detach()
    return exact, listening, wildcard


def _tcp_state(sock: socket.socket) -> int | None:
    """A TCP socket's state (``TCP_INFO``'s first field), or None (not TCP, not Linux)."""
    info = _tcp_info(sock)
    return None if info is None else info.state
