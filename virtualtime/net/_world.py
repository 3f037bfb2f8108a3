"""Simulated hosts and the network between them: :class:`Network` and :class:`Host`.

A :class:`Network` is a world of hosts on one virtual loop.  A task *lives on* a host when it
runs inside ``async with host:`` or was started by :meth:`Host.run` (and so does every task it
starts: the host is a context variable).  The loop's network methods ask the world first
(:mod:`virtualtime._engine._network`), and the world answers for its own hosts' names and
addresses, its simulated sockets and transports, and the servers its hosts listen on
(:mod:`._seam` has those answers; :mod:`._streams` the bytes on the links).  Everything else
-- ``127.0.0.1``, ``localhost``, a real service -- goes to the real network, as outside work.

Faults are the world's verbs: :meth:`Network.partition` / :meth:`Network.heal`,
:meth:`Network.link` (latency, jitter, loss, duplication, bandwidth of one pair),
:meth:`Host.crash` / :meth:`Host.restart`, :meth:`Host.pause`; each host has its own clock
(:meth:`Host.set_clock`), which ``loop.time()``-based timeouts and, with ``patch_time=True``,
``time.time()``, ``time.monotonic()`` and ``datetime.now()`` follow for code on that host.

Every draw the world makes (jitter, loss, duplication) comes from the loop's seeded
:class:`~virtualtime._engine._seeding.Chooser`, so one seed is one run.

Part of ``net``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trace`` (see
tests/layout.py).
"""

from __future__ import annotations

import asyncio
import contextvars
import errno
import ipaddress
import sys
from collections.abc import Coroutine, Iterable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, TypeVar

from .._engine._loop import VirtualEventLoop
from .._engine._network import cancel_timers, context_of, requeue, task_of
from .._engine._seeding import Chooser
from .._shared._errors import InvalidTypeError, InvalidValueError, UsageError
from .._shared._time import TICKS_PER_SECOND, shown
from ._context import HOST as _HOST
from ._context import current_host
from ._links import (
    LOOPBACK,
    UNSET,
    Driver,
    HostClock,
    Link,
    LoopDriver,
    Unattached,
    Unset,
    bandwidth_setting,
    check_finite,
    check_probability,
    check_rate,
    check_seconds,
    is_address,
)
from ._seam import Seam
from ._streams import DatagramTransport, Flow, StreamTransport
from ._views import views_off, views_on

if TYPE_CHECKING:
    from ._endpoints import Server

__all__ = ["Host", "Link", "Network", "current_host"]

_ABSENT: Final = object()

# The ``async with host:`` blocks the calling task is in, innermost last: a context variable,
# so that two tasks entering one host leave it each in its own order.
_ENTERED: Final[contextvars.ContextVar[tuple[tuple[Any, Any], ...]]] = contextvars.ContextVar(
    "virtualtime.net.entered", default=()
)

_T = TypeVar("_T")


_FIRST_PORT: Final = 49152  # the IANA ephemeral range, where port 0 picks from


class Host:
    """A simulated machine: a name, an address, its own clock, its tasks, sockets and servers.

    Make one with :meth:`Network.host`.  Code lives on it inside ``async with host:`` or when
    started with :meth:`run`; the servers it starts listen on this host, the connections it
    makes leave from it, and the clocks it reads are this host's.
    """

    def __init__(
        self, world: Network, name: str, address: str, clock_offset: float, clock_rate: float
    ) -> None:
        self.world = world
        self.name = name
        self.address = address
        self.clock = HostClock(clock_offset, clock_rate)
        self.up = True
        self.crashes = 0
        self.paused_until = 0  # loop ticks; paused while now < paused_until
        self.held: list[Any] = []  # what the host would have run during its pause
        # ``async with host:`` blocks of tasks living elsewhere (dicts, here and below: their
        # order is the order things happened, never the order of addresses in memory).
        self.blocks: dict[_Block, None] = {}
        # The tasks living here, held until they end: a task started on a host and dropped by
        # its starter (``host.run(serve())``) must not be collected while it waits.
        self.tasks: dict[Any, None] = {}  # asyncio Tasks; on trio, _trio.HostTask/HostScope
        # Tasks from before the last crash that have not ended yet (each crash cancels them;
        # one that swallows the cancellation is cancelled again whenever it runs).
        self.stale: dict[Any, None] = {}
        self.transports: dict[StreamTransport, None] = {}
        self.servers: dict[int, Server] = {}
        self.unix_servers: dict[str, Server] = {}
        self.datagrams: dict[int, DatagramTransport] = {}
        self.context = contextvars.Context()
        self.context.run(_HOST.set, self)
        self._next_port = _FIRST_PORT

    def __repr__(self) -> str:
        state = "up" if self.up else "down"
        return f"<Host {self.name!r} {self.address} {state}>"

    # -------------------------------------------------------------- living on it

    async def __aenter__(self) -> Host:
        """Live on this host until the block ends: a scope that :meth:`crash` cancels.

        A crash while the block runs cancels the block's code (its ``finally`` blocks run)
        and the block ends quietly, as a trio cancel scope does: the code after it goes on,
        on no host.  (Code that lives on the host for good -- tasks started by :meth:`run`
        or inside the block -- is cancelled for good.)
        """
        loop = self.world.attach()
        if loop is None:  # trio
            from ._trio import enter_host

            scope: Any = enter_host(self)
        else:
            scope = _Block(self)
        _ENTERED.set((*_ENTERED.get(), (_HOST.set(self), scope)))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        entered = _ENTERED.get()
        token, scope = entered[-1]
        _ENTERED.set(entered[:-1])
        _HOST.reset(token)
        return bool(scope.exit(exc_type, exc, tb))

    def run(self, coro: Coroutine[Any, Any, _T], *, name: str | None = None) -> asyncio.Task[_T]:
        """Start ``coro`` as a task living on this host; await the task for its result.

        Call it from a task on the world's loop.  The host must be up (:meth:`restart` a
        crashed one).
        """
        if not asyncio.iscoroutine(coro):
            raise InvalidTypeError(f"Host.run() takes a coroutine, got {shown(coro)}")
        if not self.up:
            coro.close()
            raise UsageError(f"host {self.name!r} is down: restart() it to run code on it")
        loop = self.world.attach()
        if loop is None:  # trio: a HostTask, awaitable like a task
            from ._trio import run_on_host

            return run_on_host(self, coro, name=name)  # type: ignore[return-value]
        context = contextvars.copy_context()
        context.run(_HOST.set, self)
        return loop.create_task(coro, name=name, context=context)

    def port(self) -> int:
        """A free ephemeral port of this host (what binding port 0 picks)."""
        while True:
            port = self._next_port
            self._next_port = port + 1 if port < 65535 else _FIRST_PORT
            if port not in self.servers and port not in self.datagrams:
                return port

    # ------------------------------------------------------------------- faults

    def crash(self) -> None:
        """Stop this host at once, as a power cut does.

        Every task living on it is cancelled at this instant: its ``finally`` blocks and
        context managers run now, against a host that is already down, up to their first
        ``await`` (every step such a task takes from now on is cancelled again, so one that
        swallows the cancellation can do nothing more).  Its pending timers never fire and a
        pause it was in ends; its servers stop listening and its datagram endpoints close;
        its connections end with ``ConnectionResetError`` here, and at the peers one link
        latency later (after the heal, across a partition); nothing it sends leaves it.  A
        connect to a down host goes unanswered, like a SYN to a dead machine, until the
        caller's timeout.
        """
        if not self.up:
            return
        world = self.world
        world.attach()
        self.up = False
        self.crashes += 1
        world.version += 1
        for transport in list(self.transports):
            transport.vanish()
        for server in [*self.servers.values(), *self.unix_servers.values()]:
            server.close()
        for endpoint in list(self.datagrams.values()):
            endpoint._closing = True
        self.datagrams.clear()
        for task in list(self.tasks):
            self.stale[task] = None
            task.cancel(f"host {self.name!r} crashed")
        for block in list(self.blocks):
            block.cancel()
        self._forget_schedule()
        world.gates_changed()

    def _forget_schedule(self) -> None:
        """A crash: the host's pending timers never fire, its pause ends, and what the pause
        held runs only if it is a task's step or a callback (both end the cancelled tasks)."""
        world = self.world
        loop = world.loop
        self.paused_until = 0
        held, self.held = self.held, []
        if loop is None:
            return
        cancel_timers(loop, lambda context: context.get(_HOST) is self)
        requeue(loop, [h for h in held if not isinstance(h, asyncio.TimerHandle)])
        for (_src, dst), path in list(world._paths.items()):
            if dst is self:
                path.clear()

    def ended(self, task: Any) -> None:
        """A task of this host ended (its done callback)."""
        self.tasks.pop(task, None)
        if self.stale.pop(task, _ABSENT) is not _ABSENT and not self.stale:
            self.world.gates_changed()

    def restart(self, coro: Coroutine[Any, Any, _T] | None = None) -> asyncio.Task[_T] | None:
        """Bring a crashed host up again (fresh: no servers, no connections) and run ``coro``."""
        if self.up:
            if coro is not None:
                coro.close()
            raise UsageError(f"host {self.name!r} is up: crash() it before restart()")
        self.up = True
        self.world.version += 1
        self.world.gates_changed()
        self.world.resume_held()
        return None if coro is None else self.run(coro)

    def pause(self, duration: float) -> None:
        """Stop running this host's code for ``duration`` seconds, from now (a GC pause).

        Nothing of the host runs meanwhile -- its tasks, timers and protocol callbacks wait,
        and bytes that reach it wait unread -- and all of it runs, in order, when the pause
        ends.  Its clock keeps going.  A pause during a pause extends it.
        """
        seconds = check_seconds("duration", duration)
        assert seconds is not None
        world = self.world
        if world.attach() is None:
            from ._trio import unsupported

            raise unsupported("Host.pause()")
        until = world.ticks() + round(seconds * TICKS_PER_SECOND)
        if until > self.paused_until:
            self.paused_until = until
            world.at(until, world.gates_changed, world.context)
        world.gates_changed()

    @property
    def paused(self) -> bool:
        """Whether the host is paused right now."""
        return self.world.ticks() < self.paused_until

    # -------------------------------------------------------------------- clock

    def set_clock(self, *, offset: float | None = None, rate: float | None = None) -> None:
        """Step or slew this host's clock from now, as NTP would.

        ``offset``: the host's clock now reads the loop's time plus ``offset`` (a step);
        ``rate``: from now it runs at ``rate`` seconds per second of the loop's time (a
        drift).  Either left out keeps its current value: the clock does not jump.
        """
        new_offset = None if offset is None else check_finite("offset", offset)
        new_rate = None if rate is None else check_rate(rate, "rate")
        world = self.world
        if world.trio is not None:
            from ._trio import unsupported

            raise unsupported("Host.set_clock()")
        ticks = world.ticks()
        clock = self.clock
        local = clock.ticks(ticks)
        if new_offset is not None:
            local = ticks + round(new_offset * TICKS_PER_SECOND)
        clock.anchor, clock.local = ticks, local
        if new_rate is not None:
            clock.rate = new_rate
        world.clocks_changed()

    def time(self) -> float:
        """This host's clock now, in seconds (what ``loop.time()`` reads on the host)."""
        return self.clock.seconds(self.world.ticks())


class Network(Seam):
    """A world of simulated hosts on the virtual loop, with links, faults and one seed.

    Use it to test distributed asyncio code -- a client with retries against a server, a
    lease across three nodes, an API in front of a database -- in one process, in virtual
    time, with the faults that break such code (partitions, latency, loss, crashes, pauses,
    clock skew) placed exactly where you want them, and every run repeatable by its seed::

        async def main():
            world = net.Network(latency=0.005)
            db, api = world.host("db"), world.host("api")
            db.run(serve_db())
            async with api:
                reader, writer = await asyncio.open_connection("db", 5432)

    ``seed``: the seed of every draw (jitter, loss, duplication) and, on a loop that has no
    seed of its own, of the loop's same-instant order too; None takes the loop's seed (0 on
    an unseeded loop).  ``latency`` (one way, seconds), ``jitter``, ``loss``, ``duplicate``
    and ``bandwidth`` (bytes/s or None) are every link's defaults (:meth:`link` sets a
    pair's).  ``connect_timeout``: how long a connect nobody answers (across a partition, to
    a down host) waits before ``TimeoutError`` -- Linux gives up after about 127 s.

    The world attaches to the running virtual loop when it is made inside one (else at its
    first use there); it lasts as long as the loop, or until ``async with`` it ends.
    """

    def __init__(
        self,
        *,
        seed: int | None = None,
        latency: float = 0.0,
        bandwidth: float | None = None,
        jitter: float = 0.0,
        loss: float = 0.0,
        duplicate: float = 0.0,
        connect_timeout: float = 127.0,
    ) -> None:
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise InvalidTypeError(f"seed must be a non-negative int or None, got {shown(seed)}")
        if seed is not None and seed < 0:
            raise InvalidValueError(f"seed must be a non-negative int or None, got {shown(seed)}")
        default = Link(
            check_seconds("latency", latency) or 0.0,
            check_seconds("jitter", jitter) or 0.0,
            check_probability("loss", loss),
            check_probability("duplicate", duplicate),
            bandwidth_setting(bandwidth),
        )
        timeout = check_seconds("connect_timeout", connect_timeout)
        super().__init__()
        self._seed = seed
        self.default_link = default
        self.connect_timeout = timeout or 0.0
        self.loop: VirtualEventLoop | None = None
        self.driver: Driver = Unattached()
        self.trio: Any = None  # the trio run's attachment (_trio.py), while attached to one
        self.chooser: Chooser = Chooser(0 if seed is None else seed)
        self.context = contextvars.Context()  # the world's own callbacks: on no host
        self._hosts: dict[str, Host] = {}
        self._by_address: dict[str, Host] = {}
        self._links: dict[frozenset[Host], Link] = {}
        self._cut: set[frozenset[Host]] = set()
        self.version = 0  # bumped by every change of links, partitions and hosts' states
        self.held_flows: dict[Flow, None] = {}  # flows waiting for a heal or a restart
        self._gated = False
        self._viewing = False
        self._saved: dict[str, Any] = {}
        self._previous_factory: Any = None
        self._held_connects: list[Any] = []
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None or _trio_running():
            self.attach()

    def __repr__(self) -> str:
        return f"<Network hosts={list(self._hosts)!r} seed={self.seed!r}>"

    @property
    def seed(self) -> int | None:
        """The seed of the world's draws (None until attached to an unseeded-world loop)."""
        return self.chooser.seed if self.loop is not None else self._seed

    # ------------------------------------------------------------------- hosts

    def host(self, name: str, *, clock_offset: float = 0.0, clock_rate: float = 1.0) -> Host:
        """Add a host called ``name`` (its address is the next of 10.0.0.0/8).

        ``clock_offset``/``clock_rate``: its clock reads ``offset + rate * t`` when the
        loop's reads ``t`` (see :meth:`Host.set_clock`).
        """
        if not isinstance(name, str):
            raise InvalidTypeError(f"a host's name must be a str, got {shown(name)}")
        key = name.lower().rstrip(".")  # "db." is "db", as DNS has it
        if not key or any(c.isspace() for c in key) or is_address(key) or key == "localhost":
            raise InvalidValueError(
                f"a host's name must be a non-empty DNS-like name (not an address, not "
                f"'localhost'), got {name!r}"
            )
        if key in self._hosts:
            raise UsageError(f"the world already has a host called {name!r}")
        offset = check_finite("clock_offset", clock_offset)
        rate = check_rate(clock_rate)
        if self.trio is not None and (offset or rate != 1.0):
            from ._trio import unsupported

            raise unsupported("a host's own clock (clock_offset/clock_rate)")
        number = len(self._hosts) + 1
        address = str(ipaddress.IPv4Address(0x0A000000 + number))
        host = Host(self, name, address, offset, rate)
        self._hosts[key] = host
        self._by_address[address] = host
        if not host.clock.identity:
            self.clocks_changed()
        return host

    @property
    def hosts(self) -> tuple[Host, ...]:
        """The hosts, in the order they were added."""
        return tuple(self._hosts.values())

    def __iter__(self) -> Iterator[Host]:
        return iter(self._hosts.values())

    def resolve(self, name: object) -> Host | None:
        """The host a name or address means in this world, or None (a real one)."""
        if isinstance(name, bytes):
            name = name.decode("ascii", "replace")
        if not isinstance(name, str):
            return None
        key = name.lower().rstrip(".")
        return self._hosts.get(key) or self._by_address.get(key)

    def _host_arg(self, value: Host | str, what: str) -> Host:
        if isinstance(value, Host):
            if value.world is not self:
                raise UsageError(f"{what}: {value!r} belongs to another world")
            return value
        host = self.resolve(value)
        if host is None:
            raise InvalidValueError(f"{what}: no host called {value!r} in this world")
        return host

    def _hosts_arg(self, value: Host | str | Iterable[Host | str], what: str) -> list[Host]:
        if isinstance(value, Host | str):
            return [self._host_arg(value, what)]
        return [self._host_arg(item, what) for item in value]

    # ------------------------------------------------------------------- links

    def link(
        self,
        a: Host | str,
        b: Host | str,
        *,
        latency: float | None = None,
        jitter: float | None = None,
        loss: float | None = None,
        duplicate: float | None = None,
        bandwidth: float | Unset | None = UNSET,
    ) -> Link:
        """Set how bytes travel between ``a`` and ``b`` (both ways); unset values keep theirs.

        ``jitter`` adds up to that many seconds to each segment or datagram (drawn from the
        seed); a stream stays in order.  ``loss`` and ``duplicate`` are probabilities per
        datagram; a stream ignores them (TCP retransmits what a lossy link drops, and this model
        does not slow it down for that).  Returns the pair's :class:`Link`.
        """
        first, second = self._host_arg(a, "link"), self._host_arg(b, "link")
        if first is second:
            raise InvalidValueError(
                f"link() joins two hosts; {first.name!r} to itself is always instant"
            )
        current = self.link_of(first, second)
        new = Link(
            current.latency if latency is None else check_seconds("latency", latency) or 0.0,
            current.jitter if jitter is None else check_seconds("jitter", jitter) or 0.0,
            current.loss if loss is None else check_probability("loss", loss),
            current.duplicate if duplicate is None else check_probability("duplicate", duplicate),
            current.bandwidth if isinstance(bandwidth, Unset) else bandwidth_setting(bandwidth),
        )
        self._links[frozenset((first, second))] = new
        self.version += 1
        return new

    def link_of(self, a: Host, b: Host) -> Link:
        """The link between two hosts (the world's default unless :meth:`link` set one)."""
        if a is b:
            return LOOPBACK
        return self._links.get(frozenset((a, b)), self.default_link)

    def partition(
        self, a: Host | str | Iterable[Host | str], b: Host | str | Iterable[Host | str]
    ) -> None:
        """Cut every link between the hosts of ``a`` and those of ``b`` (a host, a name, or
        several), until :meth:`heal`.

        Bytes written across the cut wait, in order, and arrive after the heal; a connect
        across it goes unanswered until the heal or the caller's timeout; datagrams across it
        are lost.
        """
        left, right = self._hosts_arg(a, "partition"), self._hosts_arg(b, "partition")
        for x in left:
            for y in right:
                if x is not y:
                    self._cut.add(frozenset((x, y)))
        self.version += 1

    def heal(
        self,
        a: Host | str | Iterable[Host | str] | None = None,
        b: Host | str | Iterable[Host | str] | None = None,
    ) -> None:
        """Restore the links :meth:`partition` cut between ``a`` and ``b`` (all, without
        arguments); what waited on them is sent now, in order."""
        if a is None and b is None:
            healed = set(self._cut)
        elif a is None or b is None:
            raise UsageError("heal() takes two sides, or none to heal every partition")
        else:
            healed = {
                frozenset((x, y))
                for x in self._hosts_arg(a, "heal")
                for y in list(self._hosts_arg(b, "heal"))
                if x is not y
            }
        self._cut -= healed
        self.version += 1
        self.resume_held()

    def connected(self, a: Host, b: Host) -> bool:
        """Whether bytes can go from ``a`` to ``b`` now (no partition; both up)."""
        return a.up and b.up and (a is b or frozenset((a, b)) not in self._cut)

    def is_down(self, host: Host) -> bool:
        return not host.up

    # --------------------------------------------------------------- the loop

    def attach(self) -> VirtualEventLoop | None:
        """Join the running virtual loop or trio run (done for you at first use).

        Returns the loop, or None on trio (see :mod:`._trio`).
        """
        if self.loop is not None:
            return self.loop
        if self.trio is not None or _trio_running():
            if self.trio is None:
                from ._trio import attach_trio

                attach_trio(self)
            return None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise UsageError(
                "a simulated network runs on a running virtual loop: use it inside "
                "virtualtime.run(...) (or a test marked @pytest.mark.virtualtime)"
            ) from None
        if not isinstance(loop, VirtualEventLoop):
            raise UsageError(
                f"virtualtime.net needs the virtual event loop, not {type(loop).__name__}: "
                "run it with virtualtime.run(...)"
            )
        if loop._vt_net is not None:
            raise UsageError(f"this loop already has a simulated network: {loop._vt_net!r}")
        chooser = loop._vt_chooser
        if chooser is None and self._seed is not None:
            loop._vt_reseed(self._seed)
            chooser = loop._vt_chooser
        if chooser is not None and (self._seed is None or self._seed == chooser.seed):
            self.chooser = chooser
        self.loop = loop
        self.driver = LoopDriver(loop)
        self.trio = None
        loop._vt_net = self
        self._previous_factory = loop.get_task_factory()
        loop.set_task_factory(self._task_factory)
        if any(not host.clock.identity for host in self._hosts.values()):
            self.clocks_changed()
        self.gates_changed()
        return loop

    def detach(self) -> None:
        """Leave the loop: its network methods are the real ones again."""
        loop = self.loop
        if loop is None:
            if self.trio is not None:
                from ._trio import detach_trio

                detach_trio(self)
            return
        self._gate_off()
        views_off(self)
        self._wind_down()
        if loop.get_task_factory() == self._task_factory:
            loop.set_task_factory(self._previous_factory)
        loop._vt_net = None
        self.loop = None
        self.driver = Unattached()

    def _wind_down(self) -> None:
        """The world ends: its connections are reset, its servers and endpoints closed, its
        connects in progress fail -- nothing of it waits for a world that is gone."""
        for attempt in list(self._attempts):
            attempt.end(ConnectionAbortedError(errno.ECONNABORTED, "the simulated network ended"))
        for host in self._hosts.values():
            for transport in list(host.transports):
                transport.reset()
            for server in [*host.servers.values(), *host.unix_servers.values()]:
                server.close()
            for endpoint in list(host.datagrams.values()):
                endpoint.close()
        for path in self._paths.values():
            path.clear()

    async def __aenter__(self) -> Network:
        self.attach()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.detach()

    def _task_factory(self, loop: Any, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        context = kwargs.get("context")
        host = _HOST.get() if context is None else context.get(_HOST)
        previous = self._previous_factory
        if previous is not None:
            task: asyncio.Task[Any] = previous(loop, coro, **kwargs)
        else:
            task = asyncio.Task(coro, loop=loop, **kwargs)
        if host is not None and host.world is self:
            host.tasks[task] = None
            task.add_done_callback(host.ended)
            if not host.up:
                host.stale[task] = None
                task.cancel(f"host {host.name!r} is down")
        return task

    def ticks(self) -> int:
        """The loop's clock now, in ticks (the world's own timers run on it)."""
        return self.driver.ticks()

    def at(self, ticks: int, callback: Any, context: contextvars.Context, *args: Any) -> Any:
        """Call ``callback(*args)`` at the loop's tick ``ticks`` in ``context``; cancellable."""
        return self.driver.at(ticks, callback, context, *args)

    def soon(self, callback: Any, context: contextvars.Context, *args: Any) -> None:
        """Call ``callback(*args)`` in ``context`` as soon as the loop can."""
        self.driver.soon(callback, context, *args)

    def report(self, context: dict[str, Any]) -> None:
        """Report an error in a callback, as the loop's exception handler does."""
        self.driver.report(context)

    # ----------------------------------------------------- pauses and crashes

    def gates_changed(self) -> None:
        """Install the ready-queue gate while a host is paused or down; remove it after."""
        loop = self.loop
        if loop is None:
            return
        now = self.ticks()
        needed = any(h.stale or h.paused_until > now for h in self._hosts.values())
        if needed and not self._gated:
            loop._vt_add_gate(self._gate)
            self._gated = True
        elif not needed:
            self._gate_off()
        for host in self._hosts.values():
            if host.held and host.paused_until <= now:
                held, host.held = host.held, []
                requeue(loop, held)

    def _gate_off(self) -> None:
        if self._gated and self.loop is not None:
            self.loop._vt_remove_gate(self._gate)
            self._gated = False

    def _gate(self, ready: Any, ntodo: int) -> int:
        # Hold back what a paused host would run; cancel again a task from before a crash
        # that swallowed its cancellation (it must end, not live on).
        now = self.ticks()
        kept = 0
        for _ in range(ntodo):
            handle = ready.popleft()
            host = context_of(handle).get(_HOST)
            if host is None or host.world is not self:
                ready.append(handle)
                kept += 1
                continue
            if host.paused_until > now:
                host.held.append(handle)
                continue
            if host.stale:
                # A task from before the crash is cancelled at every step it takes: its
                # finally blocks run up to their first await, and a task that swallows the
                # cancellation gets it again at its next step -- it never does more.
                task = task_of(handle)
                if task is not None and task in host.stale:
                    task.cancel(f"host {host.name!r} crashed")
            ready.append(handle)
            kept += 1
        # What stays runs this round, after whatever was queued behind the batch meanwhile.
        ready.rotate(kept)
        return kept

    # ------------------------------------------------------------ host clocks

    def clocks_changed(self) -> None:
        """Make ``loop.time()`` and the loop's timers follow each host's clock on the host."""
        if self.loop is None:
            if self.trio is not None and any(not h.clock.identity for h in self._hosts.values()):
                from ._trio import unsupported

                raise unsupported("a host's own clock (clock_offset/clock_rate)")
            return
        if any(not h.clock.identity for h in self._hosts.values()):
            views_on(self)


class _Block:
    """An ``async with host:`` block on asyncio: the scope a crash of the host cancels."""

    __slots__ = ("cancelled", "host", "task")

    def __init__(self, host: Host) -> None:
        self.host = host
        self.task = asyncio.current_task()
        self.cancelled = False
        # A task that lives on the host anyway is cancelled for good by a crash: no scope.
        if self.task is not None and self.task not in host.tasks:
            host.blocks[self] = None

    def cancel(self) -> None:
        if not self.cancelled and self.task is not None:
            self.cancelled = True
            self.task.cancel(f"host {self.host.name!r} crashed")

    def exit(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        self.host.blocks.pop(self, None)
        if not self.cancelled or self.task is None:
            return False
        # As asyncio.timeout does: the cancellation was ours if nothing else asked for one.
        remaining = self.task.uncancel()
        return remaining == 0 and exc_type is asyncio.CancelledError


def _trio_running() -> bool:
    """Whether the calling code runs in a trio run (trio is never imported for the answer)."""
    trio = sys.modules.get("trio")
    if trio is None:
        return False
    try:
        trio.lowlevel.current_trio_token()
    except RuntimeError:
        return False
    return True
