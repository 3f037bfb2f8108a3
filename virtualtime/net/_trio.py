"""The simulated network on trio: the world's timers in the run, its sockets and its names.

On asyncio the world answers the loop's network methods.  trio has no loop to ask, but it
has two public hooks per run, and that is all this module needs:
``trio.socket.set_custom_socket_factory`` (every ``trio.socket.socket()`` -- so
``open_tcp_stream``, ``open_tcp_listeners``, ``serve_tcp``, anyio's trio backend, httpx --
makes a :class:`~._trio_sockets.SimulatedSocket`, simulated when it reaches the world, real
otherwise) and ``trio.socket.set_custom_hostname_resolver`` (world names resolve to their
hosts' addresses; every other name goes to the resolver that was there, or to trio's own way,
``getaddrinfo`` in a worker thread).  :func:`attach_trio` installs both for the current run;
:meth:`Network.attach` calls it when the running library is trio.

The world's timers: :class:`TrioDriver`
---------------------------------------
The world schedules its deliveries, connects and timeouts through a driver
(``ticks``/``at``/``soon``/``report``, see :class:`~._world.Driver`).  On trio the driver is a
heap served by one system task: it runs what is due -- by tick, then in the order scheduled
(or, in a seeded world, in the order of the world's :meth:`Chooser.timer_key` draws, as the
seeded asyncio loop orders same-instant timers) -- each in its context, then parks inside a
cancel scope whose deadline is the heap's head.  With ``virtualtime.trio.VirtualClock`` the
clock jumps to that deadline when nothing else can run, so a 5 ms link takes exactly 5 ms of
virtual time; on trio's own clock it takes 5 real milliseconds.  Time is
``trio.current_time()`` in integer nanoseconds.  What a crashed host scheduled is dropped
when it comes due, as the asyncio loop's gate drops it.

Errors in the world's callbacks (a protocol that raised, say) are reported as the asyncio
loop's default handler reports them: logged, with their traceback, on the
``virtualtime.net`` logger, at once, and kept in :attr:`TrioDriver.errors`.  The run goes on;
a task waiting on the failed connection sees the connection fail.  A :class:`HostTask` that
failed and whose outcome nobody asked for is logged the same way when the run ends.

Hosts on trio
-------------
* ``async with host:`` enters a cancel scope (:func:`enter_host`): the block and every task
  started in nurseries inside it live on the host, and ``host.crash()`` cancels the scope --
  the block's code stops at its next checkpoint (its ``finally`` blocks run), and the block
  ends quietly, as a cancelled ``trio.CancelScope`` does.  A task started from the block
  into a nursery *outside* it lives on the host (its context says so) but is outside the
  scope: a crash resets its connections, it does not cancel it.
* ``host.run(coro)`` (:func:`run_on_host`) starts ``coro`` as a system task living on the
  host, in its own cancel scope, and returns a :class:`HostTask` (await it for the result).
  A crash cancels it; so does the end of the run, as trio ends every system task.
* Not on trio: ``host.pause()`` and per-host clocks (``clock_offset``, ``clock_rate``,
  ``set_clock``) raise :class:`~virtualtime.UnsupportedError`: both need the asyncio loop's
  ready-queue gate and timer views, which trio does not offer.

Listeners made from real sockets
--------------------------------
``anyio.create_tcp_listener`` binds and listens on stdlib sockets itself and hands them to
``trio.socket.from_stdlib_socket``.  While a world is attached to the run, that function (it
is wrapped once, process-wide, at the first :func:`attach_trio`; the wrapper does nothing in
a run without a world) turns a TCP socket listening on a wildcard address, made by a task
that lives on a host, into a simulated listener on that host and port, and closes the real
one.  Such a listener keeps the port the kernel gave it: ask for a fixed port when runs must
be identical.

Determinism on trio.  trio itself reverses the order of the tasks it wakes in one batch at
random (unseeded); virtual times do not depend on it, but the interleaving of tasks woken at
one instant may differ from run to run, which a seed cannot fix.

Part of ``net``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trace`` (see
tests/layout.py).
"""

from __future__ import annotations

import collections
import contextvars
import heapq
import logging
import math
import socket as _socket
from collections.abc import Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

import trio

from .._shared._errors import UnsupportedError, UsageError
from .._shared._time import NEVER, TICKS_PER_SECOND, to_ticks
from ._context import HOST as _HOST
from ._trio_sockets import SimulatedSocket

if TYPE_CHECKING:
    from types import TracebackType

    from ._world import Host, Network

__all__ = [
    "HostScope",
    "HostTask",
    "TrioDriver",
    "attach_trio",
    "detach_trio",
    "enter_host",
    "run_on_host",
    "unsupported",
]

_T = TypeVar("_T")

# The package's logger, "virtualtime.net" (by computation: tests/layout.py reads a string
# naming one of our modules as an import of it).
logger: Final = logging.getLogger(__name__.rpartition(".")[0])

_ATTACHED: Final[trio.lowlevel.RunVar[_Attachment | None]] = trio.lowlevel.RunVar(
    "virtualtime.net.world", default=None
)

_from_stdlib_socket: Final = trio.socket.from_stdlib_socket  # trio's own, before our wrapper


def unsupported(what: str) -> UnsupportedError:
    """The error for a world feature trio cannot have (``what``: the feature, as named)."""
    return UnsupportedError(
        f"{what} is not available on trio: it needs the virtual asyncio loop's ready-queue "
        "gate and timer views, which trio has no public hook for; run the scenario with "
        "virtualtime.run(...) (asyncio) to use it"
    )


class _Timer:
    """One entry of the driver's heap (or ready queue): cancellable."""

    __slots__ = ("args", "callback", "cancelled", "context")

    def __init__(self, callback: Callable[..., object], context: contextvars.Context, args: Any):
        self.callback = callback
        self.context = context
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class TrioDriver:
    """Where a world's timers and callbacks run in a trio run (see the module documentation).

    ``errors`` holds every error context :meth:`report` received, in order.
    """

    def __init__(self, world: Network) -> None:
        self.world = world
        self.errors: list[dict[str, Any]] = []
        self._heap: list[tuple[int, int, _Timer]] = []
        self._ready: collections.deque[_Timer] = collections.deque()
        self._made = 0
        self._seeded = world._seed is not None
        self._task: trio.lowlevel.Task | None = None
        self._scope: trio.CancelScope | None = None  # the park's, while parked
        self._parked = False
        self._deadline = -1  # the park's deadline in ticks (-1: not parked)
        self._stopped = False
        self._failed: list[HostTask[Any]] = []

    def __repr__(self) -> str:
        return f"<TrioDriver timers={len(self._heap)} ready={len(self._ready)}>"

    # ------------------------------------------------------------- the Driver

    def ticks(self) -> int:
        """The run's clock now, in integer nanoseconds."""
        return to_ticks(trio.current_time())

    def at(self, ticks: int, callback: Any, context: contextvars.Context, *args: Any) -> _Timer:
        """Run ``callback(*args)`` in ``context`` at tick ``ticks``; returns a cancellable."""
        timer = _Timer(callback, context, args)
        if self._seeded:
            key = self.world.chooser.timer_key()
        else:
            key = self._made
            self._made += 1
        heapq.heappush(self._heap, (ticks, key, timer))
        if self._parked and ticks < self._deadline:
            if ticks <= self.ticks():
                self._wake()
            else:
                assert self._scope is not None
                self._deadline = ticks
                self._scope.deadline = ticks / TICKS_PER_SECOND
        return timer

    def soon(self, callback: Any, context: contextvars.Context, *args: Any) -> None:
        """Run ``callback(*args)`` in ``context`` as soon as the driver runs again."""
        self._ready.append(_Timer(callback, context, args))
        if self._parked:
            self._wake()

    def report(self, context: dict[str, Any]) -> None:
        """Log an error of a world callback (as asyncio's default handler) and keep it."""
        self.errors.append(context)
        exc = context.get("exception")
        info = (type(exc), exc, exc.__traceback__) if isinstance(exc, BaseException) else None
        logger.error(
            "%s", context.get("message", "error in a simulated network callback"), exc_info=info
        )

    # ---------------------------------------------------------------- serving

    def start(self) -> None:
        """Start serving, as a system task of the current run."""
        self._task = trio.lowlevel.spawn_system_task(
            self._serve, name="virtualtime.net driver", context=contextvars.Context()
        )

    def _wake(self) -> None:
        self._parked = False
        self._deadline = -1
        assert self._task is not None
        trio.lowlevel.reschedule(self._task)

    def _abort(self, raise_cancel: Any) -> trio.lowlevel.Abort:
        self._parked = False
        self._deadline = -1
        return trio.lowlevel.Abort.SUCCEEDED

    async def _serve(self) -> None:
        heap = self._heap
        try:
            while not self._stopped:
                self._run_batch()
                if self._ready:
                    await trio.lowlevel.checkpoint()  # let the tasks it woke run first
                    continue
                while heap and heap[0][2].cancelled:
                    heapq.heappop(heap)
                head = heap[0][0] if heap else None
                with trio.CancelScope(
                    deadline=math.inf if head is None else head / TICKS_PER_SECOND
                ) as scope:
                    self._scope = scope
                    self._deadline = NEVER if head is None else head
                    self._parked = True
                    await trio.lowlevel.wait_task_rescheduled(self._abort)
                self._scope = None
        finally:
            self._parked = False
            self._deadline = -1
            self._report_failed()

    def _run_batch(self) -> None:
        """Move what is due to the ready queue, then run what is ready now (one round)."""
        heap, ready = self._heap, self._ready
        now = self.ticks()
        seconds = trio.current_time()
        while heap and (heap[0][0] <= now or heap[0][0] / TICKS_PER_SECOND <= seconds):
            timer = heapq.heappop(heap)[2]
            if not timer.cancelled:
                ready.append(timer)
        world = self.world
        for _ in range(len(ready)):
            timer = ready.popleft()
            if timer.cancelled:
                continue
            host = timer.context.get(_HOST)
            if host is not None and not host.up and host.world is world:
                continue  # what a crashed host scheduled never runs
            try:
                timer.context.run(timer.callback, *timer.args)
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as exc:
                self.report(
                    {
                        "message": f"a simulated network callback failed: {timer.callback!r}",
                        "exception": exc,
                    }
                )

    def _report_failed(self) -> None:
        for task in self._failed:
            if not task._retrieved and task._error is not None:
                self.report(
                    {
                        "message": f"{task!r}: its exception was never retrieved",
                        "exception": task._error,
                    }
                )
        self._failed.clear()

    def stop(self) -> None:
        """Stop serving (the world detached): what is scheduled is dropped."""
        self._stopped = True
        self._heap.clear()
        self._ready.clear()
        if self._parked:
            self._wake()


# ----------------------------------------------------------------- attaching


class _Attachment:
    """A world attached to one trio run: its driver, its factory and resolver."""

    def __init__(self, world: Network) -> None:
        self.world = world
        self.driver = TrioDriver(world)
        self.previous_factory: trio.abc.SocketFactory | None = None
        self.previous_resolver: trio.abc.HostnameResolver | None = None

    def make_real(self, family: int, kind: int, proto: int) -> trio.socket.SocketType:
        previous = self.previous_factory
        if previous is not None:
            return previous.socket(family, kind, proto)
        return _from_stdlib_socket(_socket.socket(family, kind, proto))

    def adopt(self, sock: _socket.socket) -> SimulatedSocket | None:
        """A listening stdlib socket on a wildcard address, made on a host: simulated."""
        world = self.world
        host = world._caller()
        if host is None or not host.up:
            return None
        family = sock.family
        if family not in (_socket.AF_INET, _socket.AF_INET6) or (
            sock.type & _socket.SOCK_STREAM != _socket.SOCK_STREAM
        ):
            return None
        try:
            listening = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_ACCEPTCONN)
            address = sock.getsockname()
            v6only = family == _socket.AF_INET6 and sock.getsockopt(
                _socket.IPPROTO_IPV6, _socket.IPV6_V6ONLY
            )
        except OSError:
            return None
        if not listening or address[0] not in ("0.0.0.0", "::"):
            return None
        simulated = SimulatedSocket(world, self.make_real, family, _socket.SOCK_STREAM, 0)
        if v6only:
            simulated.setsockopt(_socket.IPPROTO_IPV6, _socket.IPV6_V6ONLY, 1)
        simulated._settle(host, address[0], address[1])
        simulated.listen()
        sock.close()
        return simulated


class _Factory(trio.abc.SocketFactory):
    """The run's socket factory: TCP, UDP and Unix sockets may become simulated."""

    def __init__(self, attachment: _Attachment) -> None:
        self._attachment = attachment

    def socket(
        self,
        family: _socket.AddressFamily | int = _socket.AF_INET,
        type: _socket.SocketKind | int = _socket.SOCK_STREAM,
        proto: int = 0,
    ) -> trio.socket.SocketType:
        attachment = self._attachment
        kind = type & ~(getattr(_socket, "SOCK_NONBLOCK", 0) | getattr(_socket, "SOCK_CLOEXEC", 0))
        if family not in (_socket.AF_INET, _socket.AF_INET6, _socket.AF_UNIX) or kind not in (
            _socket.SOCK_STREAM,
            _socket.SOCK_DGRAM,
        ):
            return attachment.make_real(family, type, proto)
        return SimulatedSocket(attachment.world, attachment.make_real, family, type, proto)


class _Resolver(trio.abc.HostnameResolver):
    """The run's resolver: the world's names first, then whoever resolved before."""

    def __init__(self, attachment: _Attachment) -> None:
        self._attachment = attachment

    async def getaddrinfo(
        self,
        host: bytes | None,
        port: bytes | str | int | None,
        family: int = 0,
        type: int = 0,
        proto: int = 0,
        flags: int = 0,
    ) -> Any:
        attachment = self._attachment
        world = attachment.world
        if world.resolve(host) is not None:
            await trio.lowlevel.checkpoint()
            options = {"family": family, "type": type, "proto": proto, "flags": flags}
            return await world.getaddrinfo(None, (host, port), options)
        previous = attachment.previous_resolver
        if previous is not None:
            return await previous.getaddrinfo(host, port, family, type, proto, flags)
        return await trio.to_thread.run_sync(
            _socket.getaddrinfo, host, port, family, type, proto, flags, abandon_on_cancel=True
        )

    async def getnameinfo(self, sockaddr: Any, flags: int) -> tuple[str, str]:
        attachment = self._attachment
        host = attachment.world.resolve(sockaddr[0]) if isinstance(sockaddr, tuple) else None
        if host is not None:
            await trio.lowlevel.checkpoint()
            return host.name, str(sockaddr[1])
        previous = attachment.previous_resolver
        if previous is not None:
            return await previous.getnameinfo(sockaddr, flags)
        return await trio.to_thread.run_sync(
            _socket.getnameinfo, sockaddr, flags, abandon_on_cancel=True
        )


def _adopting(sock: _socket.socket) -> trio.socket.SocketType:
    """``trio.socket.from_stdlib_socket``, adopting listeners on hosts (module docs)."""
    try:
        attachment = _ATTACHED.get()
    except RuntimeError:  # not in a trio run
        attachment = None
    if attachment is not None:
        adopted = attachment.adopt(sock)
        if adopted is not None:
            return adopted
    return _from_stdlib_socket(sock)


def attach_trio(world: Network) -> None:
    """Attach ``world`` to the running trio run (idempotent; one world per run).

    Gives the world a :class:`TrioDriver` (as ``world.driver``), installs the run's socket
    factory and hostname resolver, and wraps ``trio.socket.from_stdlib_socket`` once.
    Called by :meth:`Network.attach` when the running library is trio.
    """
    attached = _ATTACHED.get()
    if attached is not None:
        if attached.world is world:
            return
        raise UsageError(f"this trio run already has a simulated network: {attached.world!r}")
    for host in world.hosts:
        if not host.clock.identity:
            raise unsupported(f"host {host.name!r}'s own clock (clock_offset/clock_rate)")
    attachment = _Attachment(world)
    attachment.previous_factory = trio.socket.set_custom_socket_factory(_Factory(attachment))
    attachment.previous_resolver = trio.socket.set_custom_hostname_resolver(_Resolver(attachment))
    _ATTACHED.set(attachment)
    world.driver = attachment.driver
    world.trio = attachment
    if trio.socket.from_stdlib_socket is not _adopting:
        trio.socket.from_stdlib_socket = _adopting
    attachment.driver.start()


def detach_trio(world: Network) -> None:
    """Undo :func:`attach_trio` in the running run: the previous factory and resolver return,
    the driver stops (what it had scheduled is dropped)."""
    attachment = world.trio
    if not isinstance(attachment, _Attachment):
        return
    world.trio = None
    attachment.driver.stop()
    try:
        current = _ATTACHED.get()
    except RuntimeError:  # the run is over: its hooks went with it
        return
    if current is attachment:
        trio.socket.set_custom_socket_factory(attachment.previous_factory)
        trio.socket.set_custom_hostname_resolver(attachment.previous_resolver)
        _ATTACHED.set(None)


def driver_of(world: Network) -> TrioDriver:
    """The driver of ``world`` in the running trio run (UsageError when not attached)."""
    attachment = _ATTACHED.get()
    if attachment is None or attachment.world is not world:
        raise UsageError(f"{world!r} is not attached to this trio run")
    return attachment.driver


# --------------------------------------------------------------------- hosts


class HostScope:
    """One ``async with host:`` block on trio: a cancel scope that ``host.crash()`` cancels."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.scope = trio.CancelScope()

    def __repr__(self) -> str:
        return f"<HostScope {self.host.name!r}>"

    def cancel(self, msg: object = None) -> None:
        """Cancel the block (what a crash does)."""
        self.scope.cancel()

    def exit(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        """Leave the block; True when it ends a cancellation the crash started (swallowed)."""
        self.host.tasks.pop(self, None)
        return bool(self.scope.__exit__(exc_type, exc, tb))


def enter_host(host: Host) -> HostScope:
    """Enter ``async with host:`` on trio: returns the block's scope (call its ``exit``)."""
    block = HostScope(host)
    block.scope.__enter__()
    host.tasks[block] = None
    return block


class HostTask(Generic[_T]):
    """A coroutine running on a host in a trio run: what ``host.run(coro)`` returns on trio.

    Await it for the coroutine's result (or its exception).  :meth:`cancel` cancels it, as a
    crash of its host does; :meth:`done`, :meth:`cancelled`, :meth:`result` and
    :meth:`exception` read its outcome as an ``asyncio.Task``'s do (a cancelled task's
    :meth:`result` raises :class:`~virtualtime.UsageError`: trio's ``Cancelled`` cannot be
    raised outside the scope that was cancelled).
    """

    def __init__(self, host: Host, coro: Coroutine[Any, Any, _T], name: str) -> None:
        self.host = host
        self.name = name
        self._coro = coro
        self._scope = trio.CancelScope()
        self._done = trio.Event()
        self._value: Any = None
        self._error: BaseException | None = None
        self._cancelled = False
        self._retrieved = False

    def __repr__(self) -> str:
        state = (
            "pending"
            if not self.done()
            else "cancelled"
            if self._cancelled
            else "failed"
            if self._error is not None
            else "done"
        )
        return f"<HostTask {self.name!r} on {self.host.name!r} {state}>"

    async def _main(self, driver: TrioDriver) -> None:
        finished = False
        try:
            with self._scope:
                try:
                    self._value = await self._coro
                except Exception as exc:
                    self._error = exc
                    driver._failed.append(self)
                finished = True
        finally:
            self._cancelled = not finished
            self.host.tasks.pop(self, None)
            self._done.set()

    def cancel(self, msg: object = None) -> bool:
        """Cancel the task; False when it has already ended."""
        if self._done.is_set():
            return False
        self._scope.cancel()
        return True

    def done(self) -> bool:
        """Whether the task has ended (returned, raised or been cancelled)."""
        return self._done.is_set()

    def cancelled(self) -> bool:
        """Whether the task ended cancelled (by :meth:`cancel`, a crash or the run's end)."""
        return self._done.is_set() and self._cancelled

    def exception(self) -> BaseException | None:
        """The exception the coroutine raised, or None (it returned)."""
        self._check_settled()
        self._retrieved = True
        return self._error

    def result(self) -> _T:
        """What the coroutine returned (its exception is raised)."""
        self._check_settled()
        self._retrieved = True
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[no-any-return]

    def _check_settled(self) -> None:
        if not self._done.is_set():
            raise UsageError(f"{self!r} has not ended yet: await it first")
        if self._cancelled:
            raise UsageError(f"{self!r} was cancelled: it has no result (see cancelled())")

    async def wait(self) -> _T:
        """Wait for the task to end; its result, as :meth:`result`."""
        await self._done.wait()
        return self.result()

    def __await__(self) -> Generator[Any, None, _T]:
        return self.wait().__await__()


def run_on_host(
    host: Host, coro: Coroutine[Any, Any, _T], *, name: str | None = None
) -> HostTask[_T]:
    """Start ``coro`` on ``host`` in the running trio run (what ``host.run`` does on trio)."""
    driver = driver_of(host.world)
    task = HostTask(host, coro, name or f"{host.name}:{getattr(coro, '__qualname__', coro)}")
    context = contextvars.copy_context()
    context.run(_HOST.set, host)
    host.tasks[task] = None
    trio.lowlevel.spawn_system_task(task._main, driver, name=task.name, context=context)
    return task
