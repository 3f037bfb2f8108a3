"""The simulation: :class:`Simulation`, the orders it runs in, and :func:`simulate`.

:class:`Simulation` is the environment a model runs in: it finds the backend (the virtual
asyncio loop, another asyncio loop, trio with or without virtualtime's clock) when it is
entered, starts processes, runs until an instant or until every process has ended, and
cancels what is left, in start order, when it is left.  :data:`ORDERS` names the two orders
it runs in.  :func:`simulate` (and :meth:`Simulation.simulate`) run a model from synchronous
code, with every argument checked before anything runs.

Part of ``sim``: may import ``shared``, ``engine``, ``trace``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import math
import types
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final, TypeVar

import anyio

from .._shared._errors import DeadlockError, InvalidTypeError, InvalidValueError, UsageError
from .._shared._time import check_bool, to_seconds, to_ticks
from ._check import HORIZON, check_name, check_number, short
from ._core import AsyncioTurns, Core, TrioTurns
from ._fast import current_library as _current_library
from ._fast import set_result as _set_result
from ._fast import trio_module
from ._kit import _PENDING, _PROC, _SIM, Waiter, _QueuedWaiter, _Waiter
from ._native import clock_of as _clock_of
from ._native import exact_runs
from ._native import native_loop as _native_loop
from ._process import Process

__all__ = ["ORDERS", "Simulation", "simulate"]


T = TypeVar("T")

ORDERS: Final = ("virtualtime", "simpy")
"""The two orders a :class:`Simulation` can run in.

``"virtualtime"`` (default): the order that costs nothing on asyncio -- a new process starts
behind what is already ready at its instant; an operation that can complete at once (a free
resource, an item in a store) does not suspend; a put or release serves the waiting at once;
``until=T`` runs everything due at ``T`` (as ``run_until`` and ``--until`` do).
``"simpy"``: SimPy 4's order exactly, on asyncio and on any trio clock alike -- SimPy's event
queue runs the model (starts and interrupts first at their instant, a put or release served
when it is processed, conditions resumed a step later, ``until=T`` stopping before anything due
at exactly ``T``), and the processes take turns.  Use it for models ported from SimPy, or
whenever one log on both backends matters.  docs/coming-from-simpy.md lists every difference.
"""


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
        self._group: Any = None  # on trio: the processes' nursery
        self._nursery: Any = None  # ... and the manager that opened it
        self._clock: Callable[[], float] = _no_clock
        self._live: dict[Process[Any], None] = {}  # in start order (clean-up follows it)
        self._closing = False
        self._failure: BaseException | None = None
        self._halt: Waiter | None = None
        self._final: float | None = None
        self._stopped_at: float | None = None  # the until of the last run(), if it had one
        self._last = 0.0
        self._token: Any = None
        self._entered = False
        self._started = 0.0
        self._park: Any = None  # on virtualtime's trio clock: the clock (its kit waits)
        self._core: Any = None  # order="simpy": SimPy's event core (virtualtime/sim/_core.py)
        self._step_hook: Callable[[], object] | None = None  # (see _on_step)

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
            self._park = park
            # A trio nursery of our own, not anyio's task group: anyio (4.14+) wraps every
            # task it starts in a handle with a cancel scope and an event of its own, which
            # a process (it has its own scope) never uses -- a third of a start's cost.
            self._nursery = trio.open_nursery(strict_exception_groups=True)
            self._group = await self._nursery.__aenter__()
            self._clock = trio.current_time
        self._started = self._clock()
        if self._simpy:
            self._open_core()
        self._token = _SIM.set(self)
        return self

    @property
    def _on_step(self) -> Callable[[], object] | None:
        """order="simpy": called after every event the core processes (the differential
        test checks the kit's invariants there: tests/simpy_models.py).  Kept by the core
        too, which reads it on every event."""
        return self._step_hook

    @_on_step.setter
    def _on_step(self, hook: Callable[[], object] | None) -> None:
        self._step_hook = hook
        if self._core is not None:
            self._core.on_step = hook

    def _open_core(self) -> None:
        """``order="simpy"``: SimPy's event core, with the turn kept by this backend."""
        turns: Any = AsyncioTurns(self._loop) if self._fast else TrioTurns(self._group)
        self._core = core = Core(self, self._clock, turns, _PROC.get)
        core.paused = False
        core.on_step = self._step_hook
        turns._core = core
        if not self._fast:
            self._group.start_soon(turns.drive, name="virtualtime.sim order='simpy'")
        exact_runs(1)

    def _core_idle(self) -> None:
        """order="simpy": nothing is left on the heap and no process is alive."""
        halt = self._halt
        if halt is not None and not halt.done() and self._halt_when_empty:
            halt.set_result(None)

    async def __aexit__(self, *exc_info: object) -> None:
        core = self._core
        if core is not None:
            # Closed already by a failure: the run ended at that event's instant.
            self._last = self._clock() if not core.closed else to_seconds(core.now)
            core.close()
            exact_runs(-1)
        else:
            self._last = self._clock()
        if self._final is None:
            stopped = self._stopped_at
            self._final = stopped if stopped is not None else self._last
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
                elif proc._sp is not None:  # order="simpy": its start event never came
                    proc._never_started()
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
                if scope is None and proc._sp is not None and proc._state == _PENDING:
                    proc._never_started()  # order="simpy": its start event never came
                    continue
                queued = proc._starting is not None
                if not queued and (scope is None or proc._state != _PENDING):
                    continue
                ended = self._new_waiter()
                proc._join(ended)
                if queued:
                    proc._spawn()  # its first step sees _closing and ends it
                else:
                    scope.cancel()
                with contextlib.suppress(Exception):  # how it ended is its joiners' business
                    await ended
        finally:
            for proc in list(self._live):
                if proc._starting is not None:
                    proc._spawn()  # as above; they end together, as the run's cancellation
            group.cancel_scope.cancel()
            await _close_nursery(self._nursery)

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
        if self._simpy:
            return proc  # its task is made when its start event is processed (_core.py)
        if self._fast:
            assert self._loop is not None
            proc._task = self._loop.create_task(proc._body(), name=proc._name)
        else:
            park = self._park
            if park is not None and not self._closing:
                # On virtualtime's trio clock a started process first runs in its place in
                # the order of starts (trio starts the tasks of one turn in random order).
                proc._queue_start(park)
            else:
                self._group.start_soon(proc._body_anyio, name=proc._name)
        return proc

    def _ended(self, proc: Process[Any]) -> None:
        self._live.pop(proc, None)
        if not self._live and not self._simpy:
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

    def _new_waiter(self) -> Waiter:
        if self._fast:
            assert self._loop is not None
            return self._loop.create_future()
        if self._park is not None and self._core is None:
            return _QueuedWaiter(self._park)
        return _Waiter()

    def simulate(
        self,
        main: Callable[..., Coroutine[Any, Any, T]],
        *args: Any,
        until: float | Awaitable[Any] | None = None,
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

    async def run(self, until: Any = None) -> Any:
        """Run the model until ``until``, or until every process has ended.

        ``until`` is an instant of the simulation's clock, or something that happens: a
        :class:`Process`, a :class:`Signal` or another kit awaitable (SimPy's ``run(until=
        event)``), in which case ``run`` returns its value (or raises its exception) once it
        has happened.  With an instant, in the default order everything due at ``until`` runs
        (as ``virtualtime.run_until`` and ``virtualtime run --until`` do); in
        ``order="simpy"`` nothing due at exactly ``until`` runs (SimPy's rule).  Either way
        :attr:`now` reads ``until`` afterwards.  Without ``until`` (or with ``math.inf``, an
        instant never reached, which means the same), ``run`` returns when every process has
        ended (in ``order="simpy"``: when nothing is left to happen, which includes a timeout
        nobody waits for any more, as in SimPy); processes blocked for ever are a
        :class:`~virtualtime.DeadlockError` from the loop (see :func:`simulate`'s
        ``end_when_idle``).  A process that failed with nobody awaiting it is raised here.

        In ``order="simpy"`` the model runs as soon as the simulation is open, and a ``run``
        that stopped at ``until`` leaves it paused there until the next ``run`` -- as SimPy's
        environment processes events only inside ``run()``.
        """
        if _is_event(until):
            return await self._run_until_event(until)
        until = _check_until(until)
        if until is not None and until < self._clock():
            raise InvalidValueError(
                f"until must not be before the current time {self._clock()!r}, got {until!r} "
                "(virtual time never goes backwards)"
            )
        self._raise_failure()
        halt = self._halt = self._new_waiter()
        driver: Any = None
        core = self._core
        if self._park is not None:
            self._park._vt_fresh()  # the caller may just have entered a fail_after
        try:
            if until is None:
                self._halt_when_empty = True
                if core is not None:
                    core.run()
                    if not self._live and not core._heap:
                        _settle_halt(halt)
                elif not self._live:
                    halt.set_result(None)
                await halt
            elif core is not None:
                core.stop_at(to_ticks(until), lambda _: self._pause(halt))
                core.run()
                await halt
            elif self._fast:
                assert self._loop is not None
                driver = self._loop.create_task(_drive_asyncio(until))
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
        # ``now`` reads the clock, at ``until`` now; the simulation's end, if it ends next,
        # is ``until`` exactly (see __aexit__).  A later run() goes on from here.
        self._stopped_at = until
        return None

    def _pause(self, halt: Waiter) -> None:
        """order="simpy": the urgent event at ``until`` -- the model stops here until the
        next :meth:`run`."""
        self._core.paused = True
        _settle_halt(halt)

    async def _run_until_event(self, until: Any) -> Any:
        """``run(until=process_or_signal)``: run until it has happened; its value."""
        self._raise_failure()
        self._stopped_at = None
        halt = self._halt = self._new_waiter()
        core = self._core
        waiter: Any = None
        try:
            if core is not None:
                ev = until._sp_event()
                if ev.callbacks is None:
                    return ev.value_or_raise()

                def stop(ev: Any) -> None:
                    core.paused = True
                    if not halt.done():
                        if ev._ok:
                            halt.set_result(ev._value)
                        else:
                            ev._defused = True
                            halt.set_exception(ev._value)

                ev.callbacks.append(stop)
                core.run()
            else:
                waiter = until._begin()
                waiter.add_done_callback(lambda w: _copy_outcome(w, halt))
            value = await halt
        finally:
            self._halt = None
            if waiter is not None and not waiter.done():
                # The run ended otherwise (a failure): how ``until`` ends later is nobody's.
                waiter.add_done_callback(_read)
        self._raise_failure()
        return value

    def _raise_failure(self) -> None:
        failure = self._failure
        if failure is not None:
            self._failure = None
            raise failure

    async def _run_anyio(self, until: float, halt: Waiter) -> None:
        async with anyio.create_task_group() as group:

            async def drive() -> None:
                await anyio.sleep_until(until)
                await anyio.wait_all_tasks_blocked()
                if not halt.done():
                    halt.set_result(None)

            group.start_soon(drive)
            try:
                await halt
            except Exception:  # a process's failure: raised below, by run(), not wrapped
                if self._failure is None:
                    raise
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


async def _close_nursery(manager: Any) -> None:
    """Leave the processes' nursery as anyio's task group would: a group of nothing but
    cancellations (the run itself was cancelled from outside) is one ``Cancelled``."""
    try:
        await manager.__aexit__(None, None, None)
    except BaseExceptionGroup as exc:
        if exc.split(trio_module().Cancelled)[1] is None:
            leaf: BaseException = exc
            while isinstance(leaf, BaseExceptionGroup):
                leaf = leaf.exceptions[0]
            raise leaf from None  # one of the cancellations, as they were all alike
        raise


def _settle_halt(halt: Waiter) -> None:
    if not halt.done():
        halt.set_result(None)


def _read(waiter: Any) -> None:
    """Read a finished waiter's exception, so that asyncio does not report it unread."""
    if isinstance(waiter, asyncio.Future) and not waiter.cancelled():
        waiter.exception()


def _copy_outcome(waiter: Any, halt: Waiter) -> None:
    if halt.done():
        return
    try:
        value = waiter.result()
    except BaseException as exc:
        halt.set_exception(exc)
    else:
        halt.set_result(value)


def _is_event(until: object) -> bool:
    """``until`` is something that happens (a process, a signal, a kit awaitable), not an
    instant."""
    return hasattr(until, "_sp_event") or isinstance(until, Process)


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


# --------------------------------------------------------------------------- entry point


def simulate(
    main: Callable[..., Coroutine[Any, Any, T]],
    *args: Any,
    until: float | Awaitable[Any] | None = None,
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
            ended.  Or something that happens -- a :class:`Signal` made beforehand, a kit
            awaitable -- as SimPy's ``run(until=event)``: the run stops once it has happened
            and ``simulate`` returns *its* value (raises its exception).
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
    event = until if _is_event(until) else None
    limit = None if event is not None else _check_until(until)
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
    reached: list[Any] = []

    async def runner() -> None:
        async with env:
            if limit is not None and limit < env._clock():
                raise InvalidValueError(
                    f"until must not be before the start of the run {env._clock()!r}, got "
                    f"{short(until)}"
                )
            coro = main(*args)
            holder.append(env.start(coro, name=getattr(main, "__qualname__", None)))
            reached.append(await env.run(limit if event is None else event))

    from .._anyio import anyio_run

    if end_when_idle:
        options.setdefault("deadlock_timeout", 0.0)
    try:
        anyio_run(runner, backend=backend, **options)
    except DeadlockError:
        if not end_when_idle:
            raise
        # SimPy's rule: the run ended when nothing was left -- at the last event processed.
        env._final = env._last if env._core is None else to_seconds(env._core.now)
    if event is not None:
        return reached[0] if reached else None
    if not holder:
        return None
    proc = holder[0]
    if proc._state == _PENDING or proc._exc is not None:
        return None
    result: T = proc._value
    return result
