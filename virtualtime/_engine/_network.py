"""The loop's network seam: where a simulated network (``virtualtime.net``) takes a call.

A world of simulated hosts (:class:`virtualtime.net.Network`) attaches itself to the loop as
``loop._vt_net``; from then on every network method of the loop asks it first, and it answers
for the names and addresses of its own hosts (and for the simulated sockets and transports it
made), leaving everything else -- ``127.0.0.1``, a real redis-server, a real PostgreSQL -- to
the stock methods, as outside work.  The engine knows nothing of hosts or links: it only
defines this seam (:class:`NetworkSeam`, the methods a world provides) and routes through it.

What routing costs a loop with no world.  A routed method is a coroutine of its own that
tests ``self._vt_net`` and then awaits the stock method, found through ``super()``: each call
costs one more coroutine frame, a ``super()`` lookup and an attribute test than the stock
method alone -- measured at about 1.5 microseconds per ``sock_sendall`` + ``sock_recv`` pair
on a socketpair (4.3 to 5.9), small beside the system calls a real socket makes.  Two cheaper
shapes were left on purpose.  Binding the stock method once per class would miss a patch of
the stock loop's class made later (``mock.patch.object(asyncio.BaseEventLoop,
"getaddrinfo", ...)``, a common way to fake DNS in a test), which ``super()`` on each call
honours.  A plain method returning the stock coroutine would save the frame, but would no
longer be a coroutine function (``inspect.iscoroutinefunction``, and ``AsyncMock`` under
``autospec``, tell the difference).

Part of ``engine``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

import asyncio
import inspect
import socket
from collections.abc import Callable
from typing import Any, Final, Protocol

__all__ = [
    "NOT_OURS",
    "NetworkMixin",
    "NetworkSeam",
    "cancel_timers",
    "context_of",
    "requeue",
    "task_of",
]

_Args = tuple[Any, ...]
_Kwargs = dict[str, Any]

NOT_OURS: Final[Any] = NotImplemented
"""What a world's method returns for a call it leaves to the real network."""


class NetworkSeam(Protocol):
    """What a simulated network provides to the loop: one coroutine per network method.

    Each takes the loop and the method's own arguments and returns the method's result, or
    :data:`NOT_OURS` when the call is not for the world (a real address, a real socket), so
    that the stock method serves it.
    """

    async def getaddrinfo(self, loop: Any, args: _Args, kwargs: _Kwargs) -> Any: ...
    async def getnameinfo(self, loop: Any, args: _Args, kwargs: _Kwargs) -> Any: ...
    async def create_connection(self, loop: Any, args: _Args, kwargs: _Kwargs) -> Any: ...
    async def create_server(self, loop: Any, args: _Args, kwargs: _Kwargs) -> Any: ...
    async def create_unix_connection(self, loop: Any, args: _Args, kwargs: _Kwargs) -> Any: ...
    async def create_unix_server(self, loop: Any, args: _Args, kwargs: _Kwargs) -> Any: ...
    async def create_datagram_endpoint(self, loop: Any, args: _Args, kwargs: _Kwargs) -> Any: ...
    async def start_tls(self, loop: Any, args: _Args, kwargs: _Kwargs) -> Any: ...
    async def sock_connect(self, loop: Any, args: _Args, kwargs: _Kwargs) -> Any: ...
    async def sock_op(self, name: str, loop: Any, args: _Args, kwargs: _Kwargs) -> Any: ...
    def owns_socket(self, sock: object) -> bool: ...


def _routed(name: str) -> Callable[..., Any]:
    """A loop method that asks the attached world first, then the stock method."""

    async def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        net = self._vt_net
        if net is not None:
            result = await getattr(net, name)(self, args, kwargs)
            if result is not NOT_OURS:
                return result
        return await getattr(super(NetworkMixin, self), name)(*args, **kwargs)

    _like_stock(method, name)
    method.__doc__ = (
        f"Like :meth:`asyncio.loop.{name}`; for a host of an attached simulated network "
        "(:mod:`virtualtime.net`), the world answers."
    )
    return method


def _sock_routed(name: str) -> Callable[..., Any]:
    """A ``sock_*`` method: a simulated socket is served by its world, any other stock."""

    async def method(self: Any, sock: socket.socket, *args: Any, **kwargs: Any) -> Any:
        net = self._vt_net
        if net is not None and net.owns_socket(sock):
            return await net.sock_op(name, self, (sock, *args), kwargs)
        return await getattr(super(NetworkMixin, self), name)(sock, *args, **kwargs)

    _like_stock(method, name)
    method.__doc__ = (
        f"Like :meth:`asyncio.loop.{name}`; a socket connected into a simulated network "
        "(:mod:`virtualtime.net`) is served by its world."
    )
    return method


def _like_stock(method: Any, name: str) -> None:
    """Name the routed method and give it the stock method's signature, as this Python has it
    (for inspect.signature, help() and mocks with autospec)."""
    method.__name__ = name
    method.__qualname__ = f"VirtualEventLoop.{name}"
    method.__signature__ = inspect.signature(getattr(asyncio.SelectorEventLoop, name))


class NetworkMixin:
    """The network methods of :class:`~virtualtime.VirtualEventLoop`, routed through a world."""

    _vt_net: NetworkSeam | None = None
    """The attached simulated network, or None (every call is the stock one)."""

    getaddrinfo = _routed("getaddrinfo")
    getnameinfo = _routed("getnameinfo")
    create_connection = _routed("create_connection")
    create_server = _routed("create_server")
    create_unix_connection = _routed("create_unix_connection")
    create_unix_server = _routed("create_unix_server")
    create_datagram_endpoint = _routed("create_datagram_endpoint")
    start_tls = _routed("start_tls")
    sock_connect = _routed("sock_connect")
    sock_recv = _sock_routed("sock_recv")
    sock_recv_into = _sock_routed("sock_recv_into")
    sock_sendall = _sock_routed("sock_sendall")
    sock_recvfrom = _sock_routed("sock_recvfrom")
    sock_recvfrom_into = _sock_routed("sock_recvfrom_into")
    sock_sendto = _sock_routed("sock_sendto")
    sock_sendfile = _sock_routed("sock_sendfile")


def context_of(handle: Any) -> Any:
    """The context a ready handle runs in: whose code it is (a world's pause and crash gate).

    asyncio-private: ``Handle._context`` is where every handle keeps the context it was
    scheduled with (stock and lean handles alike); no public accessor exists before 3.12's
    ``get_context()``, and it exists on every version we support.  A canary test checks it.
    """
    return handle._context


def requeue(loop: Any, handles: list[Any]) -> None:
    """Put handles a gate held back at the end of the loop's ready queue (they run next round).

    asyncio-private: ``_ready`` is the stock loop's deque of ready handles, which the loop's
    own round (``_cycle``) runs; a gate takes handles out of it, and this puts them back.
    """
    loop._ready.extend(handles)


def task_of(handle: Any) -> Any:
    """The task whose step or wake-up a ready handle is, or None.

    asyncio-private: a task schedules its step and its wake-up as methods bound to itself
    (``Handle._callback.__self__`` is the task), in C and in Python alike; a world's gate
    reads it to tell a crashed host's tasks (which must run on, to end) from its other
    callbacks.  A canary test checks it.
    """
    task = getattr(handle._callback, "__self__", None)
    return task if isinstance(task, asyncio.Task) else None


def cancel_timers(loop: Any, doomed: Callable[[Any], bool]) -> int:
    """Cancel every pending timer of the loop whose context ``doomed`` says so; how many.

    A crashed host's timers never fire.  The loop's heap holds ``(tick, priority, seq, item)``
    entries (see _timers.py); an item with a context is a timer handle.  The lean sleep timers
    of ``asyncio.sleep`` carry none: they belong to a task, which the crash cancels.
    """
    count = 0
    for entry in loop._vt_heap:
        item = entry[3]
        context = getattr(item, "_context", None)
        if context is not None and not item.cancelled() and doomed(context):
            item.cancel()
            count += 1
    return count
