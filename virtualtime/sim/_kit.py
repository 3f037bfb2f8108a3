"""The modelling kit: processes you can interrupt, resources, containers, stores, conditions.

A model is ordinary async code.  A :class:`Simulation` (or :func:`simulate`, its one-call
entry point) runs *processes* -- coroutines started with :func:`start` -- and the kit's
awaitables make them wait: :func:`sleep`, a :class:`Resource` request, a :class:`Container` or
:class:`Store` get or put, a :class:`Signal`, another :class:`Process`.  :func:`first_of` and
:func:`all_of` combine any awaitables.

Interrupts are not cancellation
-------------------------------
``process.interrupt(cause)`` raises :class:`Interrupt` inside the process at the kit await
where it is suspended; the process may catch it and carry on.  Cancellation (of the whole run,
of a task group, a timeout) stays ``CancelledError``/``trio.Cancelled`` and never looks like an
interrupt.  The interrupt is delivered by failing the one thing the process waits for, so it
costs nothing when nobody interrupts.  A process suspended in a foreign await (``anyio.sleep``,
a socket) is not woken: the interrupt is kept and raised at its next kit await.

Abandoning a wait is always clean
---------------------------------
Every kit operation knows how to take itself back: a request that loses a :func:`first_of`, is
cancelled or interrupted leaves the queue (it *reneged*); one that had just been granted is
released; a get that had just received an item or an amount gives it back at the front.  So a
run can be cancelled at any point -- the end of ``until`` cancels every process -- and nothing
raises.

Ordering
--------
Everything the kit wakes is woken through the loop in first-in first-out order, so a run is
deterministic on asyncio -- and on virtualtime's trio clock, which queues the kit's wake-ups
itself.  Where SimPy's order differs, ``order="simpy"`` gives SimPy's (see :data:`ORDERS` and
docs/coming-from-simpy.md for the table).

The fast path
-------------
On the virtual asyncio loop a kit sleep is the loop's native wait -- its future sits in the
timer heap itself, with no timer handle (:mod:`virtualtime.sim._native`) -- and a sleep that
nothing else precedes skips its loop round (:mod:`virtualtime.sim._fast`); other waits are
plain futures, and a released unit goes straight to the next request.  On another asyncio
loop sleeps are ``call_later`` timers.  On trio the kit uses trio's own primitives (a
``trio.Event`` per wait; on virtualtime's trio clock a wait queued on the clock) rather than
anyio's wrappers; a sleep on virtualtime's trio clock is one of the clock's kit waits
(virtualtime/trio/_park.py: parked on the clock, or no wait at all when nothing else can happen
first), on another trio clock a ``trio.CancelScope`` deadline.
The behaviour is the same on all of them.  trio randomises the order of same-instant wake-ups
by design; on virtualtime's trio clock the kit queues its own wake-ups (starts, sleeps,
interrupts, settled waiters: :class:`_QueuedWaiter`) on the clock instead, first come first
served, so a model runs in asyncio's order there too.  On other trio clocks: trio's order.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import functools
import heapq
import inspect
import itertools
import math
import types
import warnings
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Generator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

import anyio

from .._shared._errors import (
    DeadlockError,
    InvalidTypeError,
    InvalidValueError,
    UsageError,
    VirtualTimeError,
)
from .._shared._time import check_bool, delay_ticks, to_seconds, to_ticks
from ._check import HORIZON, check_name, check_number, check_positive, short
from ._fast import current_library as _current_library
from ._fast import jump_by as _jump_by
from ._fast import set_result as _set_result
from ._fast import trio_module
from ._native import FAR as _FAR
from ._native import clock_of as _clock_of
from ._native import core as _core
from ._native import native_loop as _native_loop
from ._native import push_after as _push_after
from ._native import wake_after as _wake_after
from ._stats import Tally, TimeSeries

__all__ = [
    "ORDERS",
    "Container",
    "FilterStore",
    "Interrupt",
    "Preempted",
    "PreemptiveResource",
    "PriorityResource",
    "PriorityStore",
    "Process",
    "Request",
    "Resource",
    "Signal",
    "Simulation",
    "Store",
    "all_of",
    "current_process",
    "first_of",
    "now",
    "simulate",
    "sleep",
    "start",
]

T = TypeVar("T")

ORDERS: Final = ("virtualtime", "simpy")
"""The two orders a :class:`Simulation` can run in.

``"virtualtime"`` (default): a new process starts behind what is already ready at its
instant; an operation that can complete at once (a free resource, an item in a store) does
not suspend; ``until=T`` runs everything due at ``T`` (as ``run_until`` and ``--until`` do).
``"simpy"``: a new process runs before anything else due at its instant; every kit await
suspends once even when it could complete at once; ``until=T`` stops before anything due at
exactly ``T``.  On trio, ``"simpy"`` needs virtualtime's trio clock (another clock is a
:class:`~virtualtime.UsageError` on entering the simulation): only its queue can put a new
process ahead of what is already due.
"""

_SIM: ContextVar[Simulation] = ContextVar("virtualtime.sim.simulation")
_PROC: ContextVar[Process[Any] | None] = ContextVar("virtualtime.sim.process", default=None)

_PENDING: Final = 0
_DONE: Final = 1
_OVER: Final = 2  # released, withdrawn, preempted or given back: finished without a value


# --------------------------------------------------------------------------- interrupts


class Interrupt(Exception):
    """Raised inside a process by :meth:`Process.interrupt`; ``cause`` says why.

    Catch it where the process can recover (a machine that breaks mid-part, a repairman called
    away) and carry on; let it propagate to end the process.  It is never raised by
    cancellation.
    """

    def __init__(self, cause: object = None) -> None:
        super().__init__(cause)
        self.cause = cause

    def __str__(self) -> str:
        return f"Interrupt({self.cause!r})"


@dataclass(frozen=True, slots=True)
class Preempted:
    """The :attr:`Interrupt.cause` a user of a :class:`PreemptiveResource` receives.

    ``by`` is the process whose more urgent request took the resource (None if it was not
    made from a process), ``usage_since`` when the preempted user had been granted it, and
    ``resource`` which resource it was.
    """

    by: Process[Any] | None
    usage_since: float
    resource: Resource


# --------------------------------------------------------------------------- waiters


class _Waiter:
    """A settable, awaitable one-shot result for the anyio path (trio): what a future is on
    asyncio, with the same method names, so the kit's code serves both."""

    __slots__ = ("_callbacks", "_event", "_exc", "_state", "_value")

    def __init__(self) -> None:
        self._event = trio_module().Event()
        self._state = _PENDING
        self._value: Any = None
        self._exc: BaseException | None = None
        self._callbacks: list[Callable[[_Waiter], object]] = []

    def done(self) -> bool:
        return self._state != _PENDING

    def cancelled(self) -> bool:
        return False

    def _settle(self) -> None:
        self._state = _DONE
        self._event.set()
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)

    def set_result(self, value: Any) -> None:
        self._value = value
        self._settle()

    def set_exception(self, exc: BaseException) -> None:
        self._exc = exc
        self._settle()

    def cancel(self) -> bool:
        return False

    def result(self) -> Any:
        if self._exc is not None:
            raise self._exc
        return self._value

    def add_done_callback(self, callback: Callable[[_Waiter], object]) -> None:
        if self._state != _PENDING:
            callback(self)
        else:
            self._callbacks.append(callback)

    def __await__(self) -> Generator[Any, None, Any]:
        if self._state == _PENDING:
            yield from self._event.wait().__await__()
        return self.result()


class _QueuedWaiter(_Waiter):
    """:class:`_Waiter` on virtualtime's trio clock: settling it queues its waiter on the
    clock (virtualtime/trio/_park.py, ``hold``/``release``), so the waiters settled at one
    instant run in the order they were settled -- as on asyncio, where each is a
    ``call_soon`` -- and not in the order trio happens to pick."""

    __slots__ = ("_clock", "_held")

    def __init__(self, clock: Any) -> None:  # no trio.Event: the clock wakes the waiter
        self._clock = clock
        self._held: Any = None
        self._state = _PENDING
        self._value = None
        self._exc = None
        self._callbacks = []

    def _settle(self) -> None:
        self._state = _DONE
        held = self._held
        if held is not None:
            self._held = None
            self._clock._vt_release(held)
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)

    def __await__(self) -> Generator[Any, None, Any]:
        if self._state == _PENDING:
            if self._held is not None:
                raise UsageError("a kit wait is awaited by one task at a time")
            clock = self._clock
            held = self._held = clock._vt_hold(trio_module().lowlevel.current_task())
            try:
                yield from held.wait().__await__()
            finally:
                if self._held is held:  # cancelled before it was settled
                    self._held = None
        return self.result()


Waiter = Any  # asyncio.Future[Any] | _Waiter


def _suspend_once(env: Simulation) -> Generator[Any, None, None]:
    """Yield to the loop once (SimPy's order: every await suspends)."""
    if env._fast:
        yield
        while env._unstarted:
            yield
    elif env._park is not None:
        yield from _take_turn(env._park).__await__()
    else:
        yield from trio_module().lowlevel.checkpoint().__await__()


async def _dispatch_in_turn(clock: Any, dispatch: Callable[[], object], order: int) -> None:
    """SimPy's order on trio: ``dispatch()`` in the place ``order`` reserved at this instant
    (what ``loop.call_soon(dispatch)`` is on asyncio)."""
    await _take_turn(clock, order)
    dispatch()


def _reserve(env: Simulation) -> int:
    """A place in the order at this instant for a task about to start (0: not on
    virtualtime's trio clock, which alone keeps one)."""
    return env._park._vt_reserve() if env._park is not None else 0


async def _take_turn(clock: Any, order: int = 0) -> None:
    """On virtualtime's trio clock: let every kit wait queued before this one at this instant
    run first (``order``: a place reserved earlier; 0: behind all of them)."""
    trio = trio_module()
    await trio.lowlevel.checkpoint_if_cancelled()
    await clock._vt_turn(trio.lowlevel.current_task(), order).wait()


def _wait(env: Simulation, waiter: Waiter, op: _Abandonable) -> Generator[Any, None, Any]:
    """Await ``waiter`` as the current process's interruptible wait; abandon ``op`` on failure."""
    proc = _PROC.get()
    if proc is not None:
        if proc._pending:
            op._abandon()
            raise proc._pending.pop(0)
        proc._target = waiter
    try:
        if env._simpy and waiter.done():
            yield from _suspend_once(env)
        value = yield from waiter.__await__()
        while env._unstarted:
            yield  # SimPy's order: processes started at this instant run first
        return value
    except BaseException:
        op._abandon()
        raise
    finally:
        if proc is not None:
            proc._target = None


class _Abandonable:
    __slots__ = ()

    def _abandon(self) -> None:
        """Take back whatever this operation did or asked for (cancelled, lost, interrupted)."""


_NOTHING: Final = _Abandonable()


class _NoWait:
    """An awaitable that completes at once with None (what a sync ``__aexit__`` returns)."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return iter(())  # type: ignore[return-value]


_NO_WAIT: Final = _NoWait()
_Future: Final = asyncio.Future
_KIT_SLEEP: Final[Any] = None if _core is None else _core.KitSleep
_TPS: Final = 1e9  # ticks per second of the virtual loop's integer clock
_FAR_SECONDS: Final = 1e15  # sleeps this long (math.inf) on trio keep the cancel-scope path


# --------------------------------------------------------------------------- the simulation


def _current(what: str) -> Simulation:
    try:
        return _SIM.get()
    except LookupError:
        raise UsageError(
            f"{what} needs a running simulation: call it inside sim.simulate(...) or inside "
            "'async with sim.Simulation():'"
        ) from None


class Simulation:
    """The running model: its clock, its processes, the order it runs in, how it ends.

    Use :func:`simulate` to run a model from synchronous code; use ``async with
    Simulation() as env:`` inside code that already runs in virtual time (a test, an anyio
    program) -- on asyncio or on trio.  Inside it, :func:`start`, :func:`sleep`, :func:`now`
    and the resources act on this simulation; leaving the block cancels every process still
    running (cleanly: requests leave their queues).

    Args:
        order: ``"virtualtime"`` (default) or ``"simpy"``; see :data:`ORDERS`.

    A process that raises, with nobody awaiting it, fails the simulation: :meth:`run`
    raises that exception (as SimPy's ``run`` does), and so does leaving the block.
    """

    def __init__(self, *, order: str = "virtualtime") -> None:
        _check_order(order)
        self._order = order
        self._simpy = order == "simpy"
        self._fast = False
        self._native = False  # the virtual loop's native waits (sim/_native.py)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._group: Any = None
        self._clock: Callable[[], float] = _no_clock
        self._live: dict[Process[Any], None] = {}  # in start order (clean-up follows it)
        self._closing = False
        self._failure: BaseException | None = None
        self._halt: Waiter | None = None
        self._final: float | None = None
        self._last = 0.0
        self._token: Any = None
        self._entered = False
        self._started = 0.0
        self._unstarted = 0  # order="simpy" on asyncio: processes started but not yet run
        self._park: Any = None  # on virtualtime's trio clock: the clock (its kit waits)

    @property
    def order(self) -> str:
        """The order this simulation runs in (one of :data:`ORDERS`)."""
        return self._order

    @property
    def now(self) -> float:
        """The simulation's time: the loop's, or the end of the run once it has ended."""
        if self._final is not None:
            return self._final
        return self._clock()

    def _now(self) -> float:
        final = self._final
        return self._clock() if final is None else final

    @property
    def processes(self) -> list[Process[Any]]:
        """The processes still running (a new list)."""
        return list(self._live)

    async def __aenter__(self) -> Simulation:
        if self._entered:
            raise UsageError("a Simulation can be entered once")
        library = _current_library()
        if library is None:
            raise UsageError(
                "a Simulation runs inside asyncio or trio: enter it with 'async with' from a "
                "running loop, or use sim.simulate(...) from synchronous code"
            )
        self._entered = True
        if library == "asyncio":
            self._loop = loop = asyncio.get_running_loop()
            self._fast = True
            self._native = _native_loop(loop)
            self._clock = _clock_of(loop)
        else:
            trio = trio_module()
            # virtualtime's trio clock parks the kit's sleeps itself (virtualtime/trio/_park.py;
            # found on the clock: sim may not import virtualtime.trio); other clocks do not.
            running = trio.lowlevel.current_clock()
            park = running if getattr(running, "_vt_sleep", None) is not None else None
            if park is None and self._simpy:
                self._entered = False
                raise UsageError(
                    f'order="simpy" on trio needs virtualtime\'s trio clock, not '
                    f"{type(running).__name__}: only its queue can run a new process before "
                    "everything else due at its instant (virtualtime.trio.run, or "
                    "clock=virtualtime.trio.VirtualClock())"
                )
            self._park = park
            self._group = anyio.create_task_group()
            await self._group.__aenter__()
            self._clock = trio.current_time
        self._started = self._clock()
        self._token = _SIM.set(self)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._last = self._clock()
        if self._final is None:
            self._final = self._last
        try:
            await self._cancel_all()
        finally:
            _SIM.reset(self._token)
        failure = self._failure
        if failure is not None and exc_info[0] is None:
            self._failure = None
            raise failure

    async def _cancel_all(self) -> None:
        """Cancel the processes still running, in the order they were started, on every
        backend: their ``finally`` blocks (which often record statistics) run in that order,
        the same in every run."""
        self._closing = True
        if self._fast:
            # Each cancellation wakes its task through the loop's ready queue, first in first
            # out: the tasks run their clean-up in the order they are cancelled here.  A
            # process that has not run yet never will: it ends here (Process.cancel).
            tasks: list[asyncio.Task[Any]] = []
            for proc in list(self._live):
                if proc._task is not None:
                    tasks.append(proc._task)
                    proc.cancel()
            if tasks:
                await asyncio.wait(tasks)
            return
        # trio picks among tasks woken together at random: cancel one process at a time and
        # let it finish (a cancelled trio task cannot wait in its clean-up unless shielded).
        # A process whose task has not run yet never will (_body_anyio sees _closing).
        # If this task is cancelled itself meanwhile, the rest go together, as below.
        group = self._group
        try:
            for proc in list(self._live):
                scope = proc._scope
                if scope is None or proc._state != _PENDING:
                    continue
                ended = self._new_waiter()
                proc._join(ended)
                scope.cancel()
                with contextlib.suppress(Exception):  # how it ended is its joiners' business
                    await ended
        finally:
            group.cancel_scope.cancel()
            await group.__aexit__(None, None, None)

    # ------------------------------------------------------------------ processes

    def start(self, coro: Coroutine[Any, Any, T], *, name: str | None = None) -> Process[T]:
        """Start ``coro`` as a process of this simulation and return its handle."""
        if type(coro) is not _COROUTINE:  # the checks, skipped for what always passes them
            _check_process("start()", "coro", coro)
        if name is not None:
            check_name("name", name)
        if self._final is not None:
            coro.close()
            raise UsageError("this simulation has ended; it cannot start processes")
        proc: Process[T] = Process(self, coro, name)
        self._live[proc] = None
        if self._fast:
            assert self._loop is not None
            proc._task = task = self._loop.create_task(proc._body(), name=proc._name)
            if self._simpy:
                self._unstarted += 1
                task.add_done_callback(proc._never_ran)
        else:
            # On virtualtime's trio clock a started process first runs in its place in the
            # order of starts (trio starts the tasks of one turn in random order) -- in SimPy's
            # order, before everything else due at this instant.
            order = self._park._vt_reserve_first() if self._simpy else _reserve(self)
            self._group.start_soon(proc._body_anyio, order, name=proc._name)
        return proc

    def _ended(self, proc: Process[Any]) -> None:
        self._live.pop(proc, None)
        if not self._live:
            halt = self._halt
            if halt is not None and not halt.done() and self._halt_when_empty:
                halt.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = exc
        halt = self._halt
        if halt is not None and not halt.done():
            halt.set_exception(exc)

    # ------------------------------------------------------------------ running

    _halt_when_empty = False

    def _soon(self, dispatch: Callable[[], object]) -> None:
        """Serve a queue after a put or release: at once, or (SimPy's order) one step later,
        when SimPy would process the put or release event."""
        if not self._simpy:
            dispatch()
        elif self._fast:
            assert self._loop is not None
            self._loop.call_soon(dispatch)
        else:  # virtualtime's trio clock: a turn behind what is queued at this instant
            self._group.start_soon(
                _dispatch_in_turn, self._park, dispatch, self._park._vt_reserve()
            )

    def _new_waiter(self) -> Waiter:
        if self._fast:
            assert self._loop is not None
            return self._loop.create_future()
        if self._park is not None:
            return _QueuedWaiter(self._park)
        return _Waiter()

    def simulate(
        self,
        main: Callable[..., Coroutine[Any, Any, T]],
        *args: Any,
        until: float | None = None,
        backend: str = "asyncio",
        end_when_idle: bool = False,
        **options: Any,
    ) -> T | None:
        """Run a model in this simulation, from synchronous code; return ``main``'s value.

        :func:`simulate` with a simulation you keep: afterwards :attr:`now` reads the instant
        the run ended, and the resources it used still give their statistics.  Use it when
        the end time matters (``until=None``: when the last process ended)::

            env = sim.Simulation()
            served = env.simulate(main)
            print(f"{served} served by t={env.now}")

        Arguments as for :func:`simulate` (the order is this simulation's).  A simulation
        runs once.
        """
        return _simulate(self, main, args, until, backend, end_when_idle, options)

    async def run(self, until: float | None = None) -> None:
        """Run the model until ``until``, or until every process has ended.

        ``until`` is an instant of the simulation's clock.  In the default order everything
        due at ``until`` runs (as ``virtualtime.run_until`` and ``virtualtime run --until``
        do); in ``order="simpy"`` nothing due at exactly ``until`` runs (SimPy's rule).  Either
        way :attr:`now` reads ``until`` afterwards.  Without ``until`` (or with ``math.inf``,
        an instant never reached, which means the same), ``run`` returns when every process
        has ended; processes blocked for ever are a :class:`~virtualtime.DeadlockError` from
        the loop (see :func:`simulate`'s ``end_when_idle``).  A process that failed with
        nobody awaiting it is raised here.
        """
        until = _check_until(until)
        if until is not None and until < self._clock():
            raise InvalidValueError(
                f"until must not be before the current time {self._clock()!r}, got {until!r} "
                "(virtual time never goes backwards)"
            )
        self._raise_failure()
        halt = self._halt = self._new_waiter()
        driver: Any = None
        if self._park is not None:
            self._park._vt_fresh()  # the caller may just have entered a fail_after
        try:
            if until is None:
                self._halt_when_empty = True
                if not self._live:
                    halt.set_result(None)
                await halt
            elif self._fast:
                target = until
                if self._simpy:
                    target = to_seconds(max(to_ticks(until) - 1, to_ticks(self._clock())))
                assert self._loop is not None
                driver = self._loop.create_task(_drive_asyncio(target))
                driver.add_done_callback(lambda _: _settle_halt(halt))
                await halt
            else:
                await self._run_anyio(until, halt)
        finally:
            self._halt = None
            self._halt_when_empty = False
            if driver is not None and not driver.done():
                driver.cancel()
        self._raise_failure()
        if until is not None:
            self._final = until

    def _raise_failure(self) -> None:
        failure = self._failure
        if failure is not None:
            self._failure = None
            raise failure

    async def _run_anyio(self, until: float, halt: Waiter) -> None:
        async with anyio.create_task_group() as group:

            async def drive() -> None:
                if self._simpy:
                    await anyio.sleep_until(to_seconds(to_ticks(until) - 1))
                else:
                    await anyio.sleep_until(until)
                await anyio.wait_all_tasks_blocked()
                if not halt.done():
                    halt.set_result(None)

            group.start_soon(drive)
            try:
                await halt
            finally:
                group.cancel_scope.cancel()

    def __repr__(self) -> str:
        if not self._entered:
            return f"<Simulation not started order={self._order!r}>"
        state = "ended" if self._final is not None else "running"
        return (
            f"<Simulation {state} now={self.now!r} processes={len(self._live)} "
            f"order={self._order!r}>"
        )


# --------------------------------------------------------------------------- argument checks


def _check_order(order: object) -> str:
    if not isinstance(order, str):
        raise InvalidTypeError(
            f"order must be one of {', '.join(map(repr, ORDERS))}, got {short(order)} "
            f"({type(order).__name__})"
        )
    if order not in ORDERS:
        raise InvalidValueError(
            f"order must be one of {', '.join(map(repr, ORDERS))}, got {short(order)}"
        )
    return order


_SIMPY_HINT: Final = (
    "this looks like a SimPy process ('yield env.timeout(d)'): write it as 'async def' and "
    "'await sim.sleep(d)' instead of yield (see docs/coming-from-simpy.md)"
)


_COROUTINE: Final = types.CoroutineType


def _check_process(what: str, name: str, coro: object) -> None:
    """``coro`` must be a coroutine object: name the usual mistakes (a SimPy generator, an
    async function not called)."""
    if inspect.isgenerator(coro) or inspect.isgeneratorfunction(coro):
        raise InvalidTypeError(
            f"{what} takes a coroutine, got a generator {short(coro)}: {_SIMPY_HINT}"
        )
    if isinstance(coro, Coroutine):
        return
    if inspect.iscoroutinefunction(coro):
        raise InvalidTypeError(
            f"{what} takes a coroutine, got the async function {short(coro)} itself: call the "
            f"async function ({what[:-2]}(f(...)))"
        )
    raise InvalidTypeError(
        f"{name} must be a coroutine (call the async function: {what[:-2]}(f(...))), got "
        f"{short(coro)} ({type(coro).__name__})"
    )


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_until(until: object) -> float | None:
    """``until``: None or ``math.inf`` (no end but the processes' own), or an instant."""
    if until is None:
        return None
    number = check_number("until", until, allow_inf=True)
    if number == math.inf:
        return None  # never reached: the run ends when every process has ended
    if not abs(number) < HORIZON:
        raise InvalidValueError(
            "until must be None, math.inf or an instant before the horizon of virtual time "
            f"({HORIZON:.4g} s), got {short(until)}"
        )
    return number


def _no_clock() -> float:
    raise UsageError("this Simulation has not been entered yet ('async with' it)")


def _settle_halt(halt: Waiter) -> None:
    if not halt.done():
        halt.set_result(None)


async def _drive_asyncio(target: float) -> None:
    from .._engine._loop import VirtualEventLoop

    loop = asyncio.get_running_loop()
    if isinstance(loop, VirtualEventLoop):
        from .._engine._control import run_until

        if loop.autojump and not loop.rate and target > loop.time():
            # Reach the instant on a plain loop timer, so that until then the loop keeps its
            # fast path (a drive makes every round take the general one) and kit waits can
            # skip rounds; the drive then runs everything due at the instant.
            future: asyncio.Future[None] = loop.create_future()
            handle = loop.call_at(target, _set_result, future, None)
            try:
                await future
            finally:
                handle.cancel()
        await run_until(target)
    else:
        await asyncio.sleep(max(0.0, target - loop.time()))


# --------------------------------------------------------------------------- processes


class Process(_Abandonable, Generic[T]):
    """A running coroutine of the model: await it for its result, interrupt it, cancel it.

    Returned by :func:`start`.  ``await process`` gives the coroutine's return value (or
    raises its exception, which then counts as handled); any number of processes may wait.
    """

    __slots__ = (
        "_coro",
        "_env",
        "_exc",
        "_joiners",
        "_name",
        "_parked",
        "_pending",
        "_scope",
        "_state",
        "_target",
        "_task",
        "_value",
    )

    _counter = itertools.count(1)

    def __init__(self, env: Simulation, coro: Coroutine[Any, Any, T], name: str | None) -> None:
        self._env = env
        self._coro: Coroutine[Any, Any, T] | None = coro
        self._name = name if name is not None else getattr(coro, "__qualname__", "process")
        self._state = _PENDING
        self._value: Any = None
        self._exc: BaseException | None = None
        self._joiners: list[Waiter] | None = None  # made when somebody waits
        self._pending: list[Interrupt] | None = None  # made when an interrupt must wait
        self._target: Waiter | None = None
        self._task: asyncio.Task[Any] | None = None
        self._scope: Any = None  # a trio.CancelScope, on trio
        self._parked: Any = None  # its sleep parked on virtualtime's trio clock, if it is in one

    @property
    def name(self) -> str:
        """The process's name (the coroutine's, unless :func:`start` was given one)."""
        return self._name

    @property
    def is_alive(self) -> bool:
        """True until the coroutine returns, raises or is cancelled."""
        return self._state == _PENDING

    @property
    def value(self) -> T:
        """The return value (raises the process's exception, or if it has not ended)."""
        if self._state == _PENDING:
            raise UsageError(f"{self!r} has not ended yet; await it for its value")
        if self._exc is not None:
            raise self._exc
        result: T = self._value
        return result

    def _never_ran(self, _: object) -> None:
        """A done callback of the process's task on asyncio (see start and cancel)."""
        if self._coro is not None:  # cancelled before its first step
            self._never_started()

    async def _body(self) -> None:
        env = self._env
        if _SIM.get(None) is not env:
            _SIM.set(env)
        _PROC.set(self)
        coro = self._coro
        assert coro is not None
        self._coro = None
        if env._simpy and env._fast:
            env._unstarted -= 1
        try:
            value = await coro
        except BaseException as exc:
            env._last = env._clock()
            if isinstance(exc, anyio.get_cancelled_exc_class()):
                self._finish(None, exc, cancelled=True)
                raise
            if not self._finish(None, exc, cancelled=False):
                env._fail(exc)
            if not isinstance(exc, Exception):
                raise
            return
        self._finish(value, None, cancelled=False)

    async def _body_anyio(self, order: int) -> None:
        """The process on anyio (trio): in its own cancel scope, so it can be cancelled."""
        if self._env._closing or self._scope is not None:
            # Started too late (the simulation is being cleaned up), or cancelled before it
            # started (cancel() left a cancelled scope).
            self._never_started()
            return
        with trio_module().CancelScope() as scope:
            self._scope = scope
            park = self._env._park
            if park is not None:
                park._vt_fresh()  # a new task: the clock's in-place verdict must look again
                try:
                    await _take_turn(park, order)
                except BaseException:  # cancelled (the process, or the whole run) before it ran
                    self._never_started()
                    raise
            await self._body()
        if scope.cancelled_caught and self._state == _PENDING:
            self._finish(None, None, cancelled=True)

    def _never_started(self) -> None:
        """Cancelled before its first step: its coroutine never ran, and never will.  It is
        closed (so that it draws no "coroutine ... was never awaited" warning) and the process
        ends, cancelled.  Safe to call again."""
        coro = self._coro
        if coro is not None:
            self._coro = None
            coro.close()
            env = self._env
            if env._simpy and env._fast:
                env._unstarted -= 1  # counted by start(), uncounted by _body, which never runs
        if self._state == _PENDING:
            self._env._last = self._env._clock()
            self._finish(None, None, cancelled=True)

    def _finish(self, value: Any, exc: BaseException | None, *, cancelled: bool) -> bool:
        """Record the end; wake the joiners.  True if someone received the exception."""
        self._state = _DONE
        self._value = value
        self._exc = None if cancelled else exc
        self._env._ended(self)
        joiners, self._joiners = self._joiners or (), None
        told = False
        for waiter in joiners:
            if waiter.done():
                continue
            if cancelled:
                waiter.set_exception(
                    VirtualTimeError(f"{self!r} was cancelled before it returned a value")
                )
            elif exc is not None:
                waiter.set_exception(exc)
            else:
                waiter.set_result(value)
            told = True
        return told

    def _join(self, waiter: Waiter) -> None:
        if self._joiners is None:
            self._joiners = []
        self._joiners.append(waiter)

    def interrupt(self, cause: object = None) -> None:
        """Raise :class:`Interrupt` ``(cause)`` inside this process at its current kit await.

        The process may catch it and carry on.  Interrupting a process that has ended is a
        :class:`~virtualtime.VirtualTimeError`; interrupting one that is running (itself) or
        waiting on something that is not the kit's keeps the interrupt for its next kit await.
        """
        if self._state != _PENDING:
            raise UsageError(f"{self!r} has ended and cannot be interrupted")
        exc = Interrupt(cause)
        target = self._target
        if target is not None and not target.done():
            target.set_exception(exc)
            return
        if self._pending is None:
            self._pending = []
        self._pending.append(exc)
        parked = self._parked
        if parked is not None and parked.task is not None:
            # Parked on virtualtime's trio clock and not woken yet: wake it early; its sleep
            # then raises the interrupt (the first pending one, which is this one).
            parked.cancel()

    def cancel(self) -> None:
        """Cancel the process: its kit waits are taken back and it ends without a value.

        Not an interrupt: the process should not catch this and carry on.  Anyone awaiting
        it gets a :class:`~virtualtime.VirtualTimeError` saying it was cancelled.
        """
        if self._state != _PENDING:
            return
        task = self._task
        if task is not None:
            task.cancel()
            if self._coro is not None and not self._env._simpy:
                # Not run yet: the task's first step only ends it, without the coroutine,
                # which this callback closes (in SimPy's order it is there from the start).
                task.add_done_callback(self._never_ran)
        elif self._scope is not None:
            self._scope.cancel()
        else:  # on trio, before its task has started: _body_anyio finds this scope and ends
            self._scope = trio_module().CancelScope()
            self._scope.cancel()

    def _begin(self) -> Waiter:
        waiter = self._env._new_waiter()
        if self._state != _PENDING:
            if self._exc is not None:
                waiter.set_exception(self._exc)
            else:
                waiter.set_result(self._value)
        else:
            self._join(waiter)
        return waiter

    def __await__(self) -> Generator[Any, None, T]:
        if self._state != _PENDING:
            if self._env._simpy:
                yield from _suspend_once(self._env)
            return self.value
        waiter = self._env._new_waiter()
        self._join(waiter)
        result: T = yield from _wait(self._env, waiter, _Unjoin(self, waiter))
        return result

    def __repr__(self) -> str:
        state = "alive" if self._state == _PENDING else "ended"
        return f"<Process {self._name} {state}>"


class _Unjoin(_Abandonable):
    __slots__ = ("_proc", "_waiter")

    def __init__(self, proc: Process[Any], waiter: Waiter) -> None:
        self._proc = proc
        self._waiter = waiter

    def _abandon(self) -> None:
        joiners = self._proc._joiners
        if joiners is not None and self._waiter in joiners:
            joiners.remove(self._waiter)


# --------------------------------------------------------------------------- module functions


def now() -> float:
    """The current simulation's time (after the run: the instant it ended)."""
    env = _SIM.get(None)
    if env is None:
        return _current("sim.now()").now
    final = env._final
    return env._clock() if final is None else final


def start(coro: Coroutine[Any, Any, T], *, name: str | None = None) -> Process[T]:
    """Start ``coro`` as a process of the current simulation; returns its :class:`Process`.

    It starts at the current instant (behind what is ready, or -- in ``order="simpy"`` --
    ahead of it).  Keep the handle to await the result or to interrupt it.
    """
    return _current("sim.start()").start(coro, name=name)


def current_process() -> Process[Any] | None:
    """The process running this code, or None outside processes."""
    return _PROC.get()


_NUMBERS: Final = (int, float)


class _SleepSlots(_Abandonable):
    """The fields of :class:`_Sleep` on the pure-Python path (the compiled base has them)."""

    __slots__ = ("_delay", "_undo")
    _delay: float
    _undo: Any  # what _begin armed: call_later's timer or a native future


# With the compiled core, a sleep's base is its compiled twin (KitSleep in
# virtualtime/_engine/_cwake.c): awaiting it suspends without a Python frame in the common
# case -- a process of a simulation on the virtual asyncio loop whose sleep must wait -- and
# hands every other case to _await_general below, which stays the reference.
# (Made by sim.sleep() without __init__: see there.)
if TYPE_CHECKING:
    _SleepBase = _SleepSlots
else:
    _SleepBase = _SleepSlots if _KIT_SLEEP is None else _KIT_SLEEP


_MARKS_AWAITED: Final = _KIT_SLEEP is not None and hasattr(_KIT_SLEEP, "_awaited")
"""Does the compiled base mark an awaited sleep itself (and warn when one never was)?"""


class _Sleep(_SleepBase, _Abandonable):
    # _awaited: set once the sleep is awaited, begun or abandoned (unset: never used, which
    # __del__ reports as asyncio reports a coroutine never awaited).
    __slots__ = () if _MARKS_AWAITED else ("_awaited",)

    def _abandon(self) -> None:
        self._awaited = True
        undo = self._undo
        if undo is None:
            return
        self._undo = None
        if isinstance(undo, asyncio.Future):
            _drop_native(undo)
        else:  # the timer call_later returned (a TimerHandle, or the loop's SleepTimer)
            undo.cancel()

    def _begin(self) -> Waiter:
        self._awaited = True
        env = _current("sim.sleep()")
        loop = env._loop
        assert loop is not None
        future = loop.create_future()
        if env._native:
            _wake_after(loop, self._delay, future)
            self._undo = future
        else:
            self._undo = loop.call_later(self._delay, _set_result, future, None)
        return future

    def _await_general(self) -> Generator[Any, None, None]:
        """What awaiting the sleep does (the compiled base does its common case itself)."""
        self._awaited = True
        env = _SIM.get(None)
        if env is None:
            env = _current("sim.sleep()")
        if not env._fast:
            yield from _sleep_anyio(env, self._delay).__await__()
            return
        loop: Any = env._loop
        proc = _PROC.get()
        if proc is not None and proc._pending:
            raise proc._pending.pop(0)
        delay = self._delay
        if env._native:
            heap = loop._vt_heap
            # jump_by refuses at once when something is due before the sleep ends (the usual
            # case in a busy model); this reads that first, more loosely, and skips the call.
            if not (
                loop._ready or (heap and heap[0][0] < loop._vt_ticks + delay * _TPS - 1)
            ) and _jump_by(loop, delay, None if proc is None else proc._task):
                return  # nothing else could run before the sleep ends: no loop round needed
            # The loop's native wait: the future itself sits in the timer heap (no handle);
            # _fast.wake_after, inlined.
            future: asyncio.Future[None] = _Future(loop=loop)
            if _push_after is not None and 0 < delay < _FAR and loop._vt_history is None:
                _push_after(heap, loop._vt_seq, loop._vt_ticks, delay, 0, future)
            else:
                loop._vt_wake_after(delay, future)
            if proc is not None:
                proc._target = future
            try:
                yield from future  # the loop gives it a result; an interrupt an exception
                while env._unstarted:
                    yield  # SimPy's order: processes started at this instant run first
            except BaseException:
                _drop_native(future)
                raise
            finally:
                if proc is not None:
                    proc._target = None
            return
        if _jump_by(loop, delay, None if proc is None else proc._task):
            return  # nothing else could run before the sleep ends: no loop round needed
        future = loop.create_future()
        handle = loop.call_later(delay, _set_result, future, None)
        if proc is not None:
            proc._target = future
        try:
            yield from future  # only the timer gives it a result; an interrupt an exception
            while env._unstarted:
                yield  # SimPy's order: processes started at this instant run first
        except BaseException:
            handle.cancel()
            raise
        finally:
            if proc is not None:
                proc._target = None

    if _KIT_SLEEP is None:
        __await__ = _await_general
    elif not _MARKS_AWAITED:

        def __await__(self) -> Generator[Any, None, None]:
            # The compiled await, once the sleep is marked as awaited (a compiled base that
            # marks it itself does without this frame).
            self._awaited = True
            return _kit_await(self)  # type: ignore[no-any-return]

    if not _MARKS_AWAITED:

        def __del__(self) -> None:
            try:
                self._awaited  # noqa: B018 - set by every use
            except AttributeError:
                _never_awaited(self)

    def __repr__(self) -> str:
        return f"<sim.sleep({self._delay!r})>"


class _ValueSleep(_Sleep):
    """``sim.sleep(delay, value)``: a sleep whose await returns ``value`` (SimPy's
    ``timeout(delay, value)``).  Always awaited through the reference generator."""

    __slots__ = ("_value",)
    _value: Any

    def __await__(self) -> Generator[Any, None, Any]:
        yield from self._await_general()
        return self._value

    def __repr__(self) -> str:
        return f"<sim.sleep({self._delay!r}, {self._value!r})>"


def _never_awaited(nap: _Sleep) -> None:
    warnings.warn(
        f"coroutine 'sim.sleep' was never awaited: {nap!r} waits only when awaited "
        "(write 'await sim.sleep(...)')",
        RuntimeWarning,
        stacklevel=3,
    )


def _result_of(aw: object, waiter: Any) -> Any:
    """What awaiting ``aw`` gives, read from its finished waiter (a condition's operand)."""
    if type(aw) is _ValueSleep:
        waiter.result()
        return aw._value
    return waiter.result()


_kit_await: Final[Any] = None if _KIT_SLEEP is None else _KIT_SLEEP.__await__
_new_sleep: Final = _SleepBase.__new__


def _drop_native(future: asyncio.Future[Any]) -> None:
    """A native wait (:func:`~._fast.wake_after`) given up: make it done if the loop has not
    resolved it, so that its heap entry is dead (the loop finds dead entries itself)."""
    if not future.done():
        future.cancel()


async def _sleep_anyio(env: Simulation, delay: float) -> None:
    """:func:`sleep` on trio: a kit wait on virtualtime's trio clock, else a cancel scope."""
    proc = _PROC.get()
    if proc is not None and proc._pending:
        raise proc._pending.pop(0)
    clock = env._park
    if clock is not None and delay < _FAR_SECONDS:
        trio = trio_module()
        task = trio.lowlevel.current_task()
        if delay > 0:
            # A kit wait (virtualtime/trio/_park.py), the Timer's rounding: the instant is the
            # current tick plus the delay in ticks.  Interrupts wake it early
            # (Process.interrupt).
            ticks = to_ticks(trio.current_time()) + delay_ticks(delay)
            clock._vt_fresh()  # the process may just have entered a move_on_after
            parked = clock._vt_sleep(ticks, task)
            if parked is None:  # nothing else can happen first: time moves in place
                await trio.lowlevel.checkpoint_if_cancelled()  # a cancelled task moves no time
                clock._vt_arrive(ticks)
                return
        else:  # sleep(0): every kit wait queued before it at this instant runs first
            await trio.lowlevel.checkpoint_if_cancelled()
            parked = clock._vt_turn(task)
        if proc is None:
            await parked.wait()  # nobody can interrupt it: only a cancellation ends it early
            return
        proc._parked = parked
        try:
            awake = await parked.wait()
        finally:
            proc._parked = None
        if not awake:
            pending = proc._pending
            assert pending, "a parked kit sleep is woken early only by an interrupt"
            raise pending.pop(0)
        return
    waiter = _Waiter()
    if proc is not None:
        proc._target = waiter
    try:
        with trio_module().move_on_after(delay):
            await waiter
    finally:
        if proc is not None:
            proc._target = None
    exc = waiter._exc
    if exc is not None and proc is not None:
        # Interrupted after the deadline woke the task but before it ran: not lost, raised
        # at the next kit await (as on asyncio, where the sleep's future is done by then).
        if proc._pending is None:
            proc._pending = []
        proc._pending.insert(0, exc)  # type: ignore[arg-type]


def sleep(delay: float, value: Any = None) -> Awaitable[Any]:
    """Wait ``delay`` of simulated time -- interruptibly (SimPy's ``timeout``); return ``value``.

    ``await sim.sleep(5)`` in a process can be ended early by :meth:`Process.interrupt`;
    ``sim.sleep(p)`` is also what you give :func:`first_of` for "or until ``p`` has passed"
    (``sim.sleep(p, "late")`` makes that branch's value ``"late"``, as SimPy's ``timeout(p,
    value)`` does).  ``delay`` must be >= 0; ``math.inf``, or a delay past the horizon of
    virtual time, waits until interrupted or cancelled.  Like a coroutine, a sleep does
    nothing until awaited, and one that never is draws a ``RuntimeWarning``.
    """
    if value is not None:
        return _value_sleep(delay, value)
    if type(delay) not in _NUMBERS or not delay >= 0 or (type(delay) is int and delay > _MAX_FLOAT):
        delay = _check_sleep(delay)
    nap = _new_sleep(_Sleep)  # _Sleep(delay), without the frame of __init__
    nap._delay = delay
    nap._undo = None
    return nap


_MAX_FLOAT: Final = 1.7976931348623157e308  # an int above it is too large for any float


def _check_sleep(delay: object) -> float:
    """A sleep's delay: a number >= 0; ``inf`` and delays past the horizon wait for ever."""
    number = check_positive("delay", delay, allow_inf=True, zero=True)
    return delay if type(delay) in _NUMBERS else number  # type: ignore[return-value]


def _value_sleep(delay: float, value: Any) -> _ValueSleep:
    if type(delay) not in _NUMBERS or not delay >= 0 or (type(delay) is int and delay > _MAX_FLOAT):
        delay = _check_sleep(delay)
    nap = _new_sleep(_ValueSleep)
    nap._delay = delay
    nap._undo = None
    nap._value = value
    return nap


pure_sleep: Final = sleep
"""The pure-Python :func:`sleep` (and :data:`pure_now`): the references the compiled ones follow."""
pure_now: Final = now

if _core is not None:
    # The compiled core's twins of sleep() and now() (virtualtime/_engine/_cwake.c): the same
    # object and the same value without a Python frame; anything unusual (a delay to check,
    # no simulation) they hand to the functions above.  Bound through globals() so that type
    # checkers and the API docs keep reading the functions above.
    _core.setup_kit(_SIM, _PROC, _drop_native, _Sleep, pure_sleep, pure_now)
    _kit_sleep: Final[Any] = _core.kit_sleep
    if getattr(_core, "KIT_SLEEP_VALUE", False):  # the compiled sleep takes ``value`` itself
        globals()["sleep"] = _kit_sleep
    else:

        def _sleep_compiled(delay: float, value: Any = None) -> Awaitable[Any]:
            if value is None and (type(delay) is not int or delay <= _MAX_FLOAT):
                return _kit_sleep(delay)  # type: ignore[no-any-return]
            return pure_sleep(delay, value)

        _sleep_compiled.__doc__ = sleep.__doc__
        _sleep_compiled.__name__ = _sleep_compiled.__qualname__ = "sleep"
        globals()["sleep"] = _sleep_compiled
    globals()["now"] = _core.kit_now


# --------------------------------------------------------------------------- signals


class Signal(_Abandonable):
    """A one-shot event any number of processes can await (SimPy's ``env.event()``).

    ``signal.succeed(value)`` wakes every waiter with ``value``; ``signal.fail(exc)`` raises
    ``exc`` in each; awaiting a signal that has already fired returns at once.  Use it for
    "the movie is sold out", "the door opened": something that happens once, with waiters
    who may also be waiting for something else (``first_of(turn, sold_out)``).
    """

    __slots__ = ("_exc", "_state", "_value", "_waiters")

    def __init__(self) -> None:
        self._state = _PENDING
        self._value: Any = None
        self._exc: BaseException | None = None
        self._waiters: list[Waiter] = []

    @property
    def triggered(self) -> bool:
        """True once :meth:`succeed` or :meth:`fail` has been called."""
        return self._state != _PENDING

    @property
    def value(self) -> Any:
        """The value it succeeded with (its exception if it failed)."""
        if self._state == _PENDING:
            raise UsageError("this Signal has not fired yet")
        if self._exc is not None:
            raise self._exc
        return self._value

    def succeed(self, value: Any = None) -> None:
        """Fire the signal: every waiter wakes with ``value``.  Firing twice is an error."""
        self._fire(value, None)

    def fail(self, exc: BaseException) -> None:
        """Fire the signal with an exception, raised in every waiter."""
        if not isinstance(exc, BaseException):
            raise InvalidTypeError(
                f"exc must be an exception, got {short(exc)} ({type(exc).__name__})"
            )
        self._fire(None, exc)

    def _fire(self, value: Any, exc: BaseException | None) -> None:
        if self._state != _PENDING:
            raise UsageError("this Signal has already fired; a Signal fires once")
        self._state = _DONE
        self._value = value
        self._exc = exc
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                if exc is not None:
                    waiter.set_exception(exc)
                else:
                    waiter.set_result(value)

    def _begin(self) -> Waiter:
        waiter = _current("awaiting a Signal")._new_waiter()
        if self._state != _PENDING:
            if self._exc is not None:
                waiter.set_exception(self._exc)
            else:
                waiter.set_result(self._value)
        else:
            self._waiters.append(waiter)
        return waiter

    def __bool__(self) -> bool:
        return self._state != _PENDING

    def __await__(self) -> Generator[Any, None, Any]:
        env = _current("awaiting a Signal")
        if self._state != _PENDING:
            if env._simpy:
                yield from _suspend_once(env)
            return self.value
        waiter = env._new_waiter()
        self._waiters.append(waiter)
        return (yield from _wait(env, waiter, _Unsignal(self, waiter)))

    def __repr__(self) -> str:
        return f"<Signal {'fired' if self._state != _PENDING else 'pending'}>"


class _Unsignal(_Abandonable):
    __slots__ = ("_signal", "_waiter")

    def __init__(self, signal: Signal, waiter: Waiter) -> None:
        self._signal = signal
        self._waiter = waiter

    def _abandon(self) -> None:
        with contextlib.suppress(ValueError):
            self._signal._waiters.remove(self._waiter)


# --------------------------------------------------------------------------- operations


class _Op(_Abandonable):
    """A queued operation (a request, a get, a put): enqueued when made, awaited later."""

    __slots__ = ("_env", "_state", "_time", "_value", "_waiter")

    def __init__(self, env: Simulation) -> None:
        self._env = env
        self._state = _PENDING
        self._value: Any = None
        self._waiter: Waiter | None = None
        self._time = env._clock()

    def _complete(self, value: Any) -> None:
        self._state = _DONE
        self._value = value
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(value)

    @property
    def triggered(self) -> bool:
        """True once the operation has completed (granted, received, stored)."""
        return self._state == _DONE

    def _begin(self) -> Waiter:
        waiter = self._waiter
        if waiter is None:
            waiter = self._waiter = self._env._new_waiter()
            if self._state == _DONE:
                waiter.set_result(self._value)
        return waiter

    def _gone(self) -> VirtualTimeError:
        return VirtualTimeError(f"{self!r} was withdrawn or has ended; it cannot be awaited")

    def __await__(self) -> Generator[Any, None, Any]:
        state = self._state
        env = self._env
        if state == _DONE and self._waiter is None:
            if env._simpy:
                yield from _suspend_once(env)
            proc = _PROC.get()
            if proc is not None and proc._pending:
                self._abandon()
                raise proc._pending.pop(0)
            return self._value
        if state == _OVER:
            raise self._gone()
        return (yield from _wait(env, self._begin(), self))


class Request(_Op):
    """A claim on a :class:`Resource`, queued when made.

    ``async with resource.request() as req:`` waits for the grant and releases on exit.
    ``with resource.request() as req:`` only guarantees the release (or withdrawal) on exit:
    await ``req`` inside, alone or in :func:`first_of` to give up after a while (reneging).
    ``await req`` returns the request once granted.
    """

    __slots__ = ("_key", "_process", "_resource", "preempt", "priority", "usage_since")

    def __init__(self, resource: Resource, env: Simulation, priority: int, preempt: bool) -> None:
        self._env = env  # _Op.__init__, inlined
        self._state = _PENDING
        self._value: Any = None
        self._waiter: Waiter | None = None
        self._time = env._clock()
        self._resource = resource
        self.priority = priority
        self.preempt = preempt
        self._process = _PROC.get()
        self._key = (priority, next(_request_sequence))
        self.usage_since: float | None = None

    @property
    def resource(self) -> Resource:
        """The resource asked for."""
        return self._resource

    @property
    def process(self) -> Process[Any] | None:
        """The process that made the request (it is the one a preemption interrupts)."""
        return self._process

    @property
    def granted(self) -> bool:
        """True while the request holds the resource."""
        return self._state == _DONE

    def release(self) -> None:
        """Give the resource back (or leave the queue, if not granted yet).  Idempotent."""
        state = self._state
        if state == _DONE:
            self._resource._release(self)
        elif state == _PENDING:
            self._resource._withdraw(self)

    cancel = release

    def _abandon(self) -> None:
        self.release()

    def __enter__(self) -> Request:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def __aenter__(self) -> Request:
        return self  # ``async with`` awaits it: the grant (no coroutine per block)

    def __aexit__(self, *exc_info: object) -> Awaitable[None]:
        state = self._state  # release(), inlined
        if state == _DONE:
            self._resource._release(self)
        elif state == _PENDING:
            self._resource._withdraw(self)
        return _NO_WAIT

    def __await__(self) -> Generator[Any, None, Request]:
        env = self._env
        if self._waiter is None and not env._simpy:
            state = self._state
            if state == _DONE:
                # Granted when made (the common case): _Op.__await__'s fast path, inlined.
                proc = _PROC.get()
                if proc is None or not proc._pending:
                    return self
            elif state == _PENDING and env._fast:
                # Queued: _Op.__await__ and _wait, inlined (one generator, not three).
                proc = _PROC.get()
                if proc is not None and proc._pending:
                    self.release()
                    raise proc._pending.pop(0)
                loop: Any = env._loop
                waiter = self._waiter = loop.create_future()
                if proc is not None:
                    proc._target = waiter
                try:
                    yield from waiter
                except BaseException:
                    self.release()
                    raise
                finally:
                    if proc is not None:
                        proc._target = None
                return self
        yield from _Op.__await__(self)
        return self

    def __repr__(self) -> str:
        state = ("waiting", "granted", "over")[self._state]
        return f"<Request {state} priority={self.priority!r} on {self._resource!r}>"


_request_sequence = itertools.count()


def _check_request(priority: object, preempt: object) -> None:
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidTypeError(
            f"priority must be an int (smaller is more urgent), got {short(priority)} "
            f"({type(priority).__name__})"
        )
    check_bool("preempt", preempt)


def _check_capacity(value: object) -> float:
    """A capacity: a number > 0 (``math.inf``: no limit); kept as given (an int stays one)."""
    check_positive("capacity", value, allow_inf=True)
    return value  # type: ignore[return-value]


def _check_amount(name: str, value: object) -> float:
    """An amount of a container: a finite number > 0; kept as given."""
    check_positive(name, value)
    return value  # type: ignore[return-value]


def _adopt(owner: Any) -> None:
    """Made inside a running simulation: belong to it now, so that its statistics cover the
    run (and can be read after it) even if nothing ever uses it."""
    env = _SIM.get(None)
    if env is not None and env._final is None:
        owner._bind()


def _no_stats(owner: Any) -> UsageError:
    return UsageError(
        f"{owner!r} has not been used in a simulation, so it has no statistics yet: make it "
        "inside the model, or use it in a run, then read .stats (during or after the run)"
    )


def _bind(owner: Any, env: Simulation | None) -> Simulation:
    """The simulation ``owner`` (a resource, container or store) belongs to.

    It is bound to the first simulation that uses it; using it in another is an error
    (its queues and statistics belong to that run).
    """
    current = _current(f"using {owner!r}")
    if env is None:
        owner._env = current
        return current
    if current is not env:
        raise UsageError(f"{owner!r} belongs to another simulation; make a new one for each run")
    return env


class ResourceStats:
    """What a resource measured: utilisation, queue length, waits, served and reneged.

    Every figure takes an optional window ``start``/``end`` (delete a warm-up with
    ``start=``); the default is the whole run, up to now (or the end of the run).
    """

    __slots__ = ("_capacity", "preempted", "queue_length", "reneged", "users", "waits")

    def __init__(self, clock: Callable[[], float], capacity: float, start: float) -> None:
        self._capacity = capacity
        self.queue_length = TimeSeries(clock, 0, start)
        """Number of requests waiting, over time."""
        self.users = TimeSeries(clock, 0, start)
        """Number of requests holding the resource, over time."""
        self.waits = Tally()
        """Waiting time of every granted request, stamped with its grant time."""
        self.reneged = Tally()
        """Time waited by every request that left the queue unserved, stamped when it left."""
        self.preempted = Tally()
        """Usage time of every preempted user, stamped when it was preempted."""

    def utilisation(self, start: float | None = None, end: float | None = None) -> float:
        """Mean fraction of the capacity in use over the window."""
        return self.users.mean(start, end) / self._capacity

    def mean_queue_length(self, start: float | None = None, end: float | None = None) -> float:
        """Time-weighted mean number of waiting requests over the window."""
        return self.queue_length.mean(start, end)

    def mean_wait(self, start: float | None = None, end: float | None = None) -> float:
        """Mean waiting time of the requests granted in the window."""
        return self.waits.mean(start, end)

    def served(self, start: float | None = None, end: float | None = None) -> int:
        """How many requests were granted in the window."""
        return self.waits.count(start, end)

    def renege_count(self, start: float | None = None, end: float | None = None) -> int:
        """How many requests left the queue unserved in the window."""
        return self.reneged.count(start, end)

    def __repr__(self) -> str:
        return f"<ResourceStats served={len(self.waits)} reneged={len(self.reneged)}>"


class Resource:
    """``capacity`` identical units, granted first-come first-served (SimPy's ``Resource``).

    ``async with counter.request() as req:`` holds one unit for the block.  ``count``,
    ``users`` and ``queue`` show the state; :attr:`stats` what happened.  A request that is
    cancelled, interrupted or loses a :func:`first_of` leaves the queue.  ``priority`` and
    ``preempt`` are accepted (and ignored) so that code can switch resource kinds freely.
    """

    _prioritised = False
    _preemptive = False

    def __init__(self, capacity: int = 1, *, name: str | None = None) -> None:
        self._capacity = _check_capacity(capacity)
        self.name = check_name("name", name)
        self._users: list[Request] = []
        self._queue: Any = [] if self._prioritised else deque()
        self._env: Simulation | None = None
        self._stats: ResourceStats | None = None
        _adopt(self)

    @property
    def capacity(self) -> float:
        """How many requests may hold the resource at once."""
        return self._capacity

    @property
    def count(self) -> int:
        """How many requests hold it now."""
        return len(self._users)

    @property
    def users(self) -> list[Request]:
        """The requests holding it (a new list, in grant order)."""
        return list(self._users)

    @property
    def queue(self) -> list[Request]:
        """The requests waiting (a new list, in the order they will be served)."""
        return list(self._queue)

    @property
    def stats(self) -> ResourceStats:
        """Utilisation, queue length, waiting times, served and reneged counts.

        Readable during the run and after it (windows default to the whole run).  A resource
        made inside the model belongs to its simulation from the start; one made outside
        belongs to the first simulation that uses it.
        """
        if self._stats is None:
            if _SIM.get(None) is None:
                raise _no_stats(self)
            self._bind()
        assert self._stats is not None
        return self._stats

    def _bind(self) -> Simulation:
        env = _bind(self, self._env)
        if self._stats is None:
            self._stats = ResourceStats(env._now, self._capacity, env._started)
        return env

    def request(self, priority: int = 0, preempt: bool = True) -> Request:
        """Ask for one unit; the request queues at once.  Smaller ``priority`` (an int) is
        more urgent (on :class:`PriorityResource` and :class:`PreemptiveResource`); ``preempt``
        (True or False) says whether it may take the unit from a less urgent user (on
        :class:`PreemptiveResource`)."""
        if type(priority) is not int or type(preempt) is not bool:
            _check_request(priority, preempt)
        env = self._env
        if env is None or env._final is not None:
            env = self._bind()
        req = Request(self, env, priority, preempt)
        users = self._users
        stats = self._stats
        assert stats is not None
        now = req._time
        if len(users) < self._capacity or (self._preemptive and preempt and self._preempt(req)):
            # _grant, inlined (the common case of a free unit): a wait of zero.
            req.usage_since = now
            users.append(req)
            _record(stats.users, now, len(users))
            waits = stats.waits
            waits._times.append(now)
            waits._values.append(0.0)
            req._state = _DONE
            req._value = req
        else:
            queue = self._queue
            if self._prioritised:
                bisect.insort(queue, req, key=_request_key)
            else:
                queue.append(req)
            _record(stats.queue_length, now, len(queue))
        return req

    def _preempt(self, req: Request) -> bool:
        victim = max(self._users, key=_request_key)
        if victim._key <= req._key:
            return False
        stats = self._stats
        assert stats is not None
        now = stats.users.now
        self._users.remove(victim)
        victim._state = _OVER
        since = victim.usage_since if victim.usage_since is not None else now
        stats.preempted.add(now, now - since)
        stats.users.record(len(self._users))
        proc = victim._process
        if proc is not None and proc.is_alive:
            proc.interrupt(Preempted(by=req._process, usage_since=since, resource=self))
        return True

    def _grant(self, req: Request, now: float) -> None:
        stats = self._stats
        assert stats is not None
        req.usage_since = now
        users = self._users
        users.append(req)
        _record(stats.users, now, len(users))
        waits = stats.waits
        waits._times.append(now)  # Tally.add, inlined
        waits._values.append(now - req._time)
        req._state = _DONE  # _Op._complete, inlined
        req._value = req
        waiter = req._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(req)

    def _release(self, req: Request) -> None:
        req._state = _OVER
        users = self._users
        users.remove(req)
        stats = self._stats
        assert stats is not None
        env = req._env
        now = env._clock()
        queue = self._queue
        if queue and not env._simpy:
            # The freed unit goes straight to the next request (_dispatch and _grant,
            # inlined): the number of users does not change, so it needs no record.
            nxt = queue.pop(0) if self._prioritised else queue.popleft()
            nxt.usage_since = now
            users.append(nxt)
            waits = stats.waits
            waits._times.append(now)
            waits._values.append(now - nxt._time)
            nxt._state = _DONE
            nxt._value = nxt
            waiter = nxt._waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(nxt)
            _record(stats.queue_length, now, len(queue))
            return
        _record(stats.users, now, len(users))
        if queue:
            env._soon(self._dispatch)

    def _withdraw(self, req: Request) -> None:
        req._state = _OVER
        queue = self._queue
        queue.remove(req)
        stats = self._stats
        assert stats is not None
        now = stats.queue_length._clock()
        stats.queue_length.record(len(queue))
        stats.reneged.add(now, now - req._time)
        self._dispatch()

    def _dispatch(self) -> None:
        queue = self._queue
        if not queue:
            return
        users = self._users
        capacity = self._capacity
        if len(users) >= capacity:
            return
        stats = self._stats
        assert stats is not None
        now = stats.users._clock()
        while queue and len(users) < capacity:
            req = queue.pop(0) if self._prioritised else queue.popleft()
            self._grant(req, now)
        _record(stats.queue_length, now, len(queue))

    def __repr__(self) -> str:
        label = f" {self.name}" if self.name else ""
        return (
            f"<{type(self).__name__}{label} capacity={self._capacity!r} count={len(self._users)} "
            f"queue={len(self._queue)}>"
        )


def _record(series: TimeSeries, now: float, value: float) -> None:
    """``series._record_at(now, value)`` (a level holds from ``now``), for the hot paths."""
    times = series._times
    if times[-1] == now:
        series._values[-1] = value
    elif series._values[-1] != value:
        times.append(now)
        series._values.append(value)


def _request_key(req: Request) -> tuple[int, int]:
    return req._key


class PriorityResource(Resource):
    """A :class:`Resource` whose queue is served smallest ``priority`` first, FIFO within."""

    _prioritised = True


class PreemptiveResource(PriorityResource):
    """A :class:`PriorityResource` where an urgent request takes the unit from a user.

    A request with ``preempt=True`` (the default) that finds no free unit preempts the least
    urgent user (largest ``priority``, latest request) if that user is less urgent: the user
    loses the unit and its process receives :class:`Interrupt` with a :class:`Preempted`
    cause (by whom, since when, on which resource).  The preempted request is over (leaving
    its ``with`` block is fine); the process requests again if it wants to resume.
    """

    _preemptive = True


# --------------------------------------------------------------------------- containers


class _Get(_Op):
    __slots__ = ("_amount", "_filter", "_owner")

    def __init__(
        self, owner: _Buffer, env: Simulation, amount: float, filter: Callable[[Any], bool] | None
    ) -> None:
        super().__init__(env)
        self._owner = owner
        self._amount = amount
        self._filter = filter

    def _abandon(self) -> None:
        if self._state == _PENDING:
            self._state = _OVER
            self._owner._drop(self, self._owner._getters)
        elif self._state == _DONE:
            self._state = _OVER
            self._owner._give_back(self)

    def __repr__(self) -> str:
        return f"<get from {self._owner!r}>"


class _Put(_Op):
    __slots__ = ("_item", "_owner")

    def __init__(self, owner: _Buffer, env: Simulation, item: Any) -> None:
        super().__init__(env)
        self._owner = owner
        self._item = item

    def _abandon(self) -> None:
        if self._state == _PENDING:
            self._state = _OVER
            self._owner._drop(self, self._owner._putters)

    def __repr__(self) -> str:
        return f"<put into {self._owner!r}>"


class BufferStats:
    """What a container or store measured: its level over time and the waits of gets and puts.

    Windows work as on :class:`ResourceStats`.
    """

    __slots__ = ("get_waits", "level", "put_waits")

    def __init__(self, clock: Callable[[], float], initial: float, start: float) -> None:
        self.level = TimeSeries(clock, initial, start)
        """The level (a container) or the number of items (a store), over time."""
        self.get_waits = Tally()
        """Waiting time of every completed get, stamped when it completed."""
        self.put_waits = Tally()
        """Waiting time of every completed put, stamped when it completed."""

    def mean_level(self, start: float | None = None, end: float | None = None) -> float:
        """Time-weighted mean level over the window."""
        return self.level.mean(start, end)

    def __repr__(self) -> str:
        return f"<BufferStats gets={len(self.get_waits)} puts={len(self.put_waits)}>"


class _Buffer:
    """What containers and stores share: queues of gets and puts, served strictly in order."""

    def __init__(self, capacity: float) -> None:
        self._capacity = _check_capacity(capacity)
        self._getters: deque[_Get] = deque()
        self._putters: deque[_Put] = deque()
        self._env: Simulation | None = None
        self._stats: BufferStats | None = None

    @property
    def capacity(self) -> float:
        """The most it can hold."""
        return self._capacity

    @property
    def get_queue(self) -> list[Any]:
        """The gets waiting, in order (a new list)."""
        return list(self._getters)

    @property
    def put_queue(self) -> list[Any]:
        """The puts waiting, in order (a new list)."""
        return list(self._putters)

    @property
    def stats(self) -> BufferStats:
        """Level over time, waiting times of gets and puts (during the run and after it; see
        :attr:`Resource.stats`)."""
        if self._stats is None:
            if _SIM.get(None) is None:
                raise _no_stats(self)
            self._bind()
        assert self._stats is not None
        return self._stats

    def _bind(self) -> Simulation:
        env = _bind(self, self._env)
        if self._stats is None:
            self._stats = BufferStats(env._now, self._size(), env._started)
        return env

    def _env_now(self) -> Simulation:
        env = self._env
        if env is None or env._final is not None:
            env = self._bind()
        return env

    def _size(self) -> float:
        raise NotImplementedError

    def _after_put(self, env: Simulation) -> None:
        if env._simpy:
            self._dispatch(gets=False)  # the put itself completes now ...
            env._soon(self._dispatch)  # ... waiting gets are served when SimPy would
        else:
            self._dispatch()

    def _drop(self, op: _Op, queue: deque[Any]) -> None:
        with contextlib.suppress(ValueError):
            queue.remove(op)
        self._dispatch()

    def _give_back(self, op: _Get) -> None:
        raise NotImplementedError

    def _dispatch(self, gets: bool = True) -> None:
        raise NotImplementedError

    def _record(self) -> None:
        stats = self._stats
        assert stats is not None
        stats.level.record(self._size())

    def _completed(self, op: _Op, waits: Tally, value: Any) -> None:
        now = self._env._clock()  # type: ignore[union-attr]
        waits.add(now, now - op._time)
        op._complete(value)


class Container(_Buffer):
    """A level of something continuous or countable -- fuel, parts -- up to ``capacity``.

    ``await tank.get(amount)`` waits until ``amount`` is there and takes it; ``await
    tank.put(amount)`` waits until it fits.  Strictly first-come first-served, as SimPy: a
    get that cannot be served blocks every later get, even a smaller one that would fit, so
    nobody starves (and the order of service never depends on amounts).  Likewise for puts.
    """

    def __init__(self, capacity: float = math.inf, init: float = 0, *, name: str | None = None):
        check_positive("init", init, zero=True)
        super().__init__(capacity)
        if not init <= self._capacity:
            raise InvalidValueError(
                f"init must be between 0 and capacity={short(capacity)}, got {short(init)}"
            )
        self._level: float = init
        self.name = check_name("name", name)
        _adopt(self)

    @property
    def level(self) -> float:
        """How much it holds now."""
        return self._level

    def _size(self) -> float:
        return self._level

    def get(self, amount: float) -> Awaitable[float]:
        """Take ``amount`` (> 0) when it is there and it is this get's turn; returns ``amount``."""
        amount = _check_amount("amount", amount)
        env = self._env_now()
        op = _Get(self, env, amount, None)
        self._getters.append(op)
        self._dispatch()
        return op

    def put(self, amount: float) -> Awaitable[float]:
        """Add ``amount`` (> 0) when it fits and it is this put's turn; returns ``amount``."""
        amount = _check_amount("amount", amount)
        if amount > self._capacity:
            raise InvalidValueError(
                f"amount must fit in the container (capacity {short(self._capacity)}), got "
                f"{short(amount)}, which can never fit"
            )
        env = self._env_now()
        op = _Put(self, env, amount)
        self._putters.append(op)
        self._after_put(env)
        return op

    def _give_back(self, op: _Get) -> None:
        self._level += op._amount
        self._record()
        self._dispatch()

    def _dispatch(self, gets: bool = True) -> None:
        stats = self._stats
        assert stats is not None
        getters, putters = self._getters, self._putters
        changed = True
        moved = False
        while changed:
            changed = False
            while putters and self._capacity - self._level >= putters[0]._item:
                op = putters.popleft()
                self._level += op._item
                self._completed(op, stats.put_waits, op._item)
                changed = moved = True
            while gets and getters and self._level >= getters[0]._amount:
                got = getters.popleft()
                self._level -= got._amount
                self._completed(got, stats.get_waits, got._amount)
                changed = moved = True
        if moved:
            stats.level.record(self._level)

    def __repr__(self) -> str:
        label = f" {self.name}" if self.name else ""
        return f"<Container{label} level={self._level!r} capacity={self._capacity!r}>"


class Store(_Buffer):
    """Items handed from producers to consumers, first in first out (SimPy's ``Store``).

    ``await store.put(item)`` waits while the store is full (``capacity``, default
    unbounded); ``item = await store.get()`` waits while it is empty.  Getters are served in
    the order they asked.
    """

    def __init__(self, capacity: float = math.inf, *, name: str | None = None) -> None:
        super().__init__(capacity)
        self._items: Any = deque()
        self.name = check_name("name", name)
        _adopt(self)

    @property
    def items(self) -> list[Any]:
        """The items held, in the order they will be handed out (a new list)."""
        return list(self._items)

    def _size(self) -> float:
        return len(self._items)

    def put(self, item: Any) -> Awaitable[None]:
        """Add ``item`` when there is room."""
        env = self._env_now()
        op = _Put(self, env, item)
        self._putters.append(op)
        self._after_put(env)
        return op

    def get(self) -> Awaitable[Any]:
        """Take the next item when there is one; returns it."""
        env = self._env_now()
        op = _Get(self, env, 1, None)
        self._getters.append(op)
        self._dispatch()
        return op

    def _add(self, item: Any) -> None:
        self._items.append(item)

    def _take(self, op: _Get) -> tuple[bool, Any]:
        items = self._items
        if items:
            return True, items.popleft()
        return False, None

    def _give_back(self, op: _Get) -> None:
        self._items.appendleft(op._value)
        self._record()
        self._dispatch()

    def _dispatch(self, gets: bool = True) -> None:
        stats = self._stats
        assert stats is not None
        getters, putters = self._getters, self._putters
        changed = True
        moved = False
        while changed:
            changed = False
            while putters and len(self._items) < self._capacity:
                op = putters.popleft()
                self._add(op._item)
                self._completed(op, stats.put_waits, None)
                changed = moved = True
            if gets and getters and self._items:
                changed = self._serve_getters(stats) or changed
                moved = moved or changed
        if moved:
            stats.level.record(len(self._items))

    def _serve_getters(self, stats: BufferStats) -> bool:
        getters = self._getters
        served = False
        while getters and self._items:
            op = getters[0]
            ok, item = self._take(op)
            if not ok:
                break
            getters.popleft()
            self._completed(op, stats.get_waits, item)
            served = True
        return served

    def __repr__(self) -> str:
        label = f" {self.name}" if self.name else ""
        return (
            f"<{type(self).__name__}{label} items={len(self._items)} capacity={self._capacity!r}>"
        )


class FilterStore(Store):
    """A :class:`Store` whose getters say which item they want: ``await store.get(filter)``.

    Each getter, in the order they asked, takes the first item its ``filter(item)`` accepts;
    a getter whose filter accepts nothing waits without blocking the getters behind it.
    """

    def __init__(self, capacity: float = math.inf, *, name: str | None = None) -> None:
        super().__init__(capacity, name=name)
        self._items = []

    def get(self, filter: Callable[[Any], bool] | None = None) -> Awaitable[Any]:
        """Take the first item ``filter`` accepts (any item if None) when there is one."""
        if filter is not None and not callable(filter):
            raise InvalidTypeError(
                f"filter must be None or callable as filter(item) -> bool, got {short(filter)} "
                f"({type(filter).__name__})"
            )
        env = self._env_now()
        op = _Get(self, env, 1, filter)
        self._getters.append(op)
        self._dispatch()
        return op

    def _take(self, op: _Get) -> tuple[bool, Any]:
        wanted = op._filter
        items = self._items
        for index, item in enumerate(items):
            if wanted is None or wanted(item):
                del items[index]
                return True, item
        return False, None

    def _give_back(self, op: _Get) -> None:
        self._items.insert(0, op._value)
        self._record()
        self._dispatch()

    def _serve_getters(self, stats: BufferStats) -> bool:
        served = False
        for op in list(self._getters):
            if not self._items:
                break
            ok, item = self._take(op)
            if ok:
                self._getters.remove(op)
                self._completed(op, stats.get_waits, item)
                served = True
        return served


class PriorityStore(Store):
    """A :class:`Store` that hands out its smallest item first (items must be comparable).

    Put ``(priority, sequence, payload)`` tuples, or objects with ``__lt__``, as with
    :mod:`heapq`.
    """

    def __init__(self, capacity: float = math.inf, *, name: str | None = None) -> None:
        super().__init__(capacity, name=name)
        self._items = []

    @property
    def items(self) -> list[Any]:
        """The items held, smallest first (a new list)."""
        return sorted(self._items)

    def put(self, item: Any) -> Awaitable[None]:
        """Add ``item`` when there is room; it must compare with the items held."""
        if self._items:
            try:
                item < self._items[0]  # noqa: B015 - only whether it can compare
            except TypeError:
                raise InvalidTypeError(
                    f"item must be comparable with the items held (a PriorityStore hands out "
                    f"the smallest first), got {short(item)} ({type(item).__name__})"
                ) from None
        return super().put(item)

    def _add(self, item: Any) -> None:
        heapq.heappush(self._items, item)

    def _take(self, op: _Get) -> tuple[bool, Any]:
        if self._items:
            return True, heapq.heappop(self._items)
        return False, None

    def _give_back(self, op: _Get) -> None:
        heapq.heappush(self._items, op._value)
        self._record()
        self._dispatch()


# --------------------------------------------------------------------------- conditions


def _kit_begin(aw: object) -> Waiter | None:
    if isinstance(aw, _Op | _Sleep | Signal | Process):
        return aw._begin()
    return None


def _undo(aw: object, waiter: Any) -> None:
    """A loser of a condition: withdraw it, undo it if it completed, or cancel it."""
    if isinstance(aw, _Op | _Sleep):
        aw._abandon()
    elif isinstance(aw, Signal):
        _Unsignal(aw, waiter)._abandon()
    elif isinstance(aw, Process):
        _Unjoin(aw, waiter)._abandon()
    elif not waiter.done():
        waiter.cancel()


class _Many(_Abandonable):
    __slots__ = ("_items", "_waiters")

    def __init__(self, items: tuple[Any, ...], waiters: list[Any]) -> None:
        self._items = items
        self._waiters = waiters

    def _abandon(self) -> None:
        for aw, waiter in zip(self._items, self._waiters, strict=False):
            _undo(aw, waiter)


def _check_awaitables(name: str, awaitables: tuple[Any, ...]) -> None:
    if not awaitables:
        raise InvalidValueError(f"{name}() needs at least one awaitable, got none")
    for index, aw in enumerate(awaitables):
        if not isinstance(aw, Awaitable):
            raise InvalidTypeError(
                f"{name}() argument {index} must be awaitable, got {short(aw)} "
                f"({type(aw).__name__})"
            )


class _Condition(Awaitable[T]):
    """What :func:`first_of` and :func:`all_of` return: awaitable once, inert if never awaited."""

    __slots__ = ("_args", "_run")

    def __init__(
        self, run: Callable[..., Coroutine[Any, Any, T]], args: tuple[Awaitable[Any], ...]
    ) -> None:
        self._run = run
        self._args = args

    def __await__(self) -> Generator[Any, None, T]:
        return self._run(*self._args).__await__()

    def __repr__(self) -> str:
        return f"<{self._run.__name__.strip('_')} of {len(self._args)}>"


def first_of(*awaitables: Awaitable[Any]) -> Awaitable[tuple[Awaitable[Any], Any]]:
    """Wait for the first of ``awaitables``; return ``(which, value)`` and cancel the others.

    SimPy's ``a | b``: ``which, _ = await first_of(req, sim.sleep(patience))`` then ``if
    which is req``.  Any awaitable works (kit operations, processes, signals, coroutines,
    futures).  The losers are taken back: a request leaves its queue (or is released if it
    had just been granted), a get returns what it had just received, a coroutine is
    cancelled; a process operand is only no longer waited for.  If the first to finish raised,
    the others are taken back and the exception propagates.
    """
    _check_awaitables("first_of", awaitables)
    return _Condition(_first_of, awaitables)


async def _first_of(*awaitables: Awaitable[Any]) -> tuple[Awaitable[Any], Any]:
    env = _current("first_of()")
    if not env._fast:
        return await _first_of_anyio(env, awaitables)
    outer = env._new_waiter()
    waiters: list[Any] = []
    for index, aw in enumerate(awaitables):
        waiter = _kit_begin(aw)
        if waiter is None:
            waiter = asyncio.ensure_future(aw)
        waiters.append(waiter)
        waiter.add_done_callback(functools.partial(_first_done, outer, index))
    won: int = await _Await(env, outer, _Many(awaitables, waiters))
    index = won
    winner = waiters[index]
    losers = _Many(
        awaitables[:index] + awaitables[index + 1 :], waiters[:index] + waiters[index + 1 :]
    )
    losers._abandon()
    return awaitables[index], _result_of(awaitables[index], winner)


def _first_done(outer: Any, index: int, _: object) -> None:
    if not outer.done():
        outer.set_result(index)


class _Await:
    __slots__ = ("_env", "_op", "_waiter")

    def __init__(self, env: Simulation, waiter: Any, op: _Abandonable) -> None:
        self._env = env
        self._waiter = waiter
        self._op = op

    def __await__(self) -> Generator[Any, None, Any]:
        return (yield from _wait(self._env, self._waiter, self._op))


def all_of(*awaitables: Awaitable[Any]) -> Awaitable[list[Any]]:
    """Wait for every one of ``awaitables``; return their values in argument order.

    SimPy's ``a & b``.  If one raises, the others are taken back (as in :func:`first_of`)
    and the exception propagates; so does an interrupt of the waiting process.
    """
    _check_awaitables("all_of", awaitables)
    return _Condition(_all_of, awaitables)


async def _all_of(*awaitables: Awaitable[Any]) -> list[Any]:
    env = _current("all_of()")
    if not env._fast:
        return await _all_of_anyio(env, awaitables)
    outer = env._new_waiter()
    waiters: list[Any] = []
    remaining = [len(awaitables)]

    def done(waiter: Any) -> None:
        if outer.done():
            return
        if not waiter.cancelled() and waiter.exception() is not None:
            outer.set_exception(waiter.exception())
            return
        remaining[0] -= 1
        if not remaining[0]:
            outer.set_result(None)

    for aw in awaitables:
        waiter = _kit_begin(aw)
        if waiter is None:
            waiter = asyncio.ensure_future(aw)
        waiters.append(waiter)
        waiter.add_done_callback(done)
    await _Await(env, outer, _Many(awaitables, waiters))
    return [_result_of(aw, waiter) for aw, waiter in zip(awaitables, waiters, strict=True)]


def _completed_now(aw: object) -> bool:
    """A kit operand that has already completed (its value is there without waiting)."""
    if isinstance(aw, _Op):
        return aw._state == _DONE
    if isinstance(aw, Signal | Process):
        return aw._state != _PENDING
    return False


async def _operand_turn(env: Simulation, aw: Any, order: int) -> None:
    """A condition's operand task waits for its place (the operands start in argument order
    on virtualtime's trio clock); cancelled before it, the operand is taken back unawaited (a
    coroutine closed, a kit operation withdrawn)."""
    try:
        await _take_turn(env._park, order)
    except BaseException:
        if isinstance(aw, Coroutine):
            aw.close()
        elif isinstance(aw, _Op | _Sleep):
            aw._abandon()
        raise


async def _first_of_anyio(env: Simulation, awaitables: tuple[Any, ...]) -> tuple[Any, Any]:
    # Operands complete already win in argument order, as on asyncio (trio would otherwise
    # pick among their tasks at random).
    for aw in awaitables:
        if _completed_now(aw):
            for other in awaitables:
                if other is aw:
                    continue
                if isinstance(other, _Op | _Sleep):
                    other._abandon()
                elif isinstance(other, Coroutine):
                    other.close()  # never awaited, on purpose: it lost before it began
            if isinstance(aw, Request):
                return aw, aw
            return aw, aw._value if isinstance(aw, _Op) else aw.value
    outer = env._new_waiter()

    async def one(index: int, aw: Any, order: int) -> None:
        _PROC.set(None)
        if order:
            await _operand_turn(env, aw, order)
        try:
            value = await aw
        except Exception as exc:
            if not outer.done():
                outer.set_exception(exc)
            return
        if outer.done():
            if isinstance(aw, _Op):
                aw._abandon()
            return
        outer.set_result((index, value))

    result: Any = None
    failure: BaseException | None = None
    async with anyio.create_task_group() as group:
        for index, aw in enumerate(awaitables):
            group.start_soon(one, index, aw, _reserve(env))
        try:
            result = await _Await(env, outer, _NOTHING)
        except Exception as exc:  # raised outside the group, which would wrap it
            failure = exc
        finally:
            group.cancel_scope.cancel()
    if failure is not None:
        raise failure
    index, value = result
    return awaitables[index], value


async def _all_of_anyio(env: Simulation, awaitables: tuple[Any, ...]) -> list[Any]:
    outer = env._new_waiter()
    values: list[Any] = [None] * len(awaitables)
    remaining = [len(awaitables)]

    async def one(index: int, aw: Any, order: int) -> None:
        _PROC.set(None)
        if order:
            await _operand_turn(env, aw, order)
        try:
            values[index] = await aw
        except Exception as exc:
            if not outer.done():
                outer.set_exception(exc)
            return
        remaining[0] -= 1
        if not remaining[0] and not outer.done():
            outer.set_result(None)

    failure: BaseException | None = None
    async with anyio.create_task_group() as group:
        for index, aw in enumerate(awaitables):
            group.start_soon(one, index, aw, _reserve(env))
        try:
            await _Await(env, outer, _NOTHING)
        except Exception as exc:  # raised outside the group, which would wrap it
            failure = exc
        finally:
            group.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return values


# --------------------------------------------------------------------------- entry point


def simulate(
    main: Callable[..., Coroutine[Any, Any, T]],
    *args: Any,
    until: float | None = None,
    backend: str = "asyncio",
    order: str = "virtualtime",
    end_when_idle: bool = False,
    **options: Any,
) -> T | None:
    """Run a model in virtual time: ``main(*args)`` as the first process; return its value.

    The run ends at ``until`` (see :meth:`Simulation.run` for what happens at exactly
    ``until`` in each order), or when every process has ended.  Processes still running at
    the end are cancelled cleanly, in the order they were started.  Returns ``main``'s
    return value, or None if ``main`` was still running when the run ended (a ``setup`` that
    keeps creating customers).  To read when the run ended, or anything else about it
    afterwards, make the :class:`Simulation` yourself and call its :meth:`Simulation.simulate`:
    ``env = sim.Simulation(); env.simulate(main); env.now``.

    Args:
        until: The instant to stop at; None (or ``math.inf``) runs until every process has
            ended.
        backend: ``"asyncio"`` (the virtual loop, with the kit's fast path) or ``"trio"``.
        order: ``"virtualtime"`` or ``"simpy"`` (see :data:`ORDERS`).
        end_when_idle: SimPy's ending rule: when nothing is left to happen -- every process
            left waits for something nobody will ever do -- the run ends normally instead
            of raising :class:`~virtualtime.DeadlockError`.  Off by default, because a model
            that stops this way usually has a bug.
        **options: Loop or clock options (``start``, ``deadlock_timeout``, ...), as
            :func:`virtualtime.anyio_run` takes them.
    """
    _check_main(main)
    return Simulation(order=order).simulate(
        main, *args, until=until, backend=backend, end_when_idle=end_when_idle, **options
    )


def _check_main(main: object) -> None:
    if inspect.isgeneratorfunction(main):
        raise InvalidTypeError(
            f"main must be an async function, got a generator function {short(main)}: {_SIMPY_HINT}"
        )
    if not callable(main):
        raise InvalidTypeError(
            f"main must be an async function, got {short(main)} ({type(main).__name__})"
        )


def _simulate(
    env: Simulation,
    main: Callable[..., Coroutine[Any, Any, T]],
    args: tuple[Any, ...],
    until: object,
    backend: object,
    end_when_idle: object,
    options: dict[str, Any],
) -> T | None:
    """:meth:`Simulation.simulate`: every argument checked before anything runs."""
    _check_main(main)
    limit = _check_until(until)
    if not isinstance(backend, str) or backend not in ("asyncio", "trio"):
        raise (InvalidValueError if isinstance(backend, str) else InvalidTypeError)(
            f"backend must be 'asyncio' or 'trio', got {short(backend)}"
        )
    check_bool("end_when_idle", end_when_idle)
    begin = options.get("start", 0.0)
    if limit is not None and _is_number(begin) and limit < begin:
        raise InvalidValueError(
            f"until must not be before the start of the run {begin!r}, got {short(until)}"
        )
    if env._entered:
        raise UsageError("a Simulation runs once; make a new one for each run")
    holder: list[Process[T]] = []

    async def runner() -> None:
        async with env:
            if limit is not None and limit < env._clock():
                raise InvalidValueError(
                    f"until must not be before the start of the run {env._clock()!r}, got "
                    f"{short(until)}"
                )
            coro = main(*args)
            holder.append(env.start(coro, name=getattr(main, "__qualname__", None)))
            await env.run(limit)

    from .._anyio import anyio_run

    if end_when_idle:
        options.setdefault("deadlock_timeout", 0.0)
    try:
        anyio_run(runner, backend=backend, **options)
    except DeadlockError:
        if not end_when_idle:
            raise
        env._final = env._last
    if not holder:
        return None
    proc = holder[0]
    if proc._state == _PENDING or proc._exc is not None:
        return None
    result: T = proc._value
    return result
