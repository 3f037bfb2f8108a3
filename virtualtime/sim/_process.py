"""Processes: the coroutines a simulation runs, which you can await, interrupt and cancel.

:class:`Process` is the handle :func:`start` returns: it runs the coroutine (as an asyncio
task, or a trio task in its own cancel scope), records how it ended and wakes whoever awaits
it.  :meth:`Process.interrupt` raises :class:`Interrupt` at the process's current kit wait
(by failing that wait's waiter, see :mod:`virtualtime.sim._kit`).  :func:`start` and
:func:`current_process` are the module-level verbs a model calls (and :func:`start_delayed`,
SimPy's delayed start); the :class:`Simulation` (``_simulation``) makes the processes and
cleans them up at the end of a run.  In ``order="simpy"`` a process is also a SimPy event
(virtualtime/sim/_core.py): its start and its interrupts are urgent events, and its task runs
only while it holds the model's turn.

Part of ``sim``: may import ``shared``, ``engine``, ``trace``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import itertools
import types
from collections.abc import Coroutine, Generator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio

from .._shared._errors import UsageError, VirtualTimeError
from ._check import check_name, check_positive
from ._core import PENDING as PENDING_EVENT
from ._core import URGENT, Event
from ._fast import trio_module
from ._kit import (
    _DONE,
    _PENDING,
    _PROC,
    _SIM,
    Waiter,
    _Abandonable,
    _current,
    _wait,
)

if TYPE_CHECKING:
    from ._simulation import Simulation

__all__ = ["Interrupt", "Process", "current_process", "start", "start_delayed"]


T = TypeVar("T")

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


# --------------------------------------------------------------------------- processes


class Process(_Abandonable, Generic[T]):
    """A running coroutine of the model: await it for its result, interrupt it, cancel it.

    Returned by :func:`start`.  ``await process`` gives the coroutine's return value (or
    raises its exception, which then counts as handled); any number of processes may wait.
    """

    __slots__ = (
        "_cond",
        "_context",
        "_coro",
        "_delayed",
        "_env",
        "_exc",
        "_joiners",
        "_name",
        "_parked",
        "_parked_on",
        "_pending",
        "_resume_cb",
        "_scope",
        "_sp",
        "_starting",
        "_state",
        "_target",
        "_target_op",
        "_task",
        "_value",
    )

    _counter = itertools.count(1)

    def __init__(self, env: Simulation, coro: Coroutine[Any, Any, T], name: str | None) -> None:
        self._env = env
        self._coro: Coroutine[Any, Any, T] | None = coro
        self._delayed: Coroutine[Any, Any, Any] | None = None  # start_delayed's, until started
        self._cond: Any = None  # the first_of/all_of it awaits (for target)
        self._name = name if name is not None else getattr(coro, "__qualname__", "process")
        self._state = _PENDING
        self._value: Any = None
        self._exc: BaseException | None = None
        self._joiners: list[Waiter] | None = None  # made when somebody waits
        self._pending: list[Interrupt] | None = None  # made when an interrupt must wait
        self._target: Waiter | None = None
        self._target_op: _Abandonable | None = None  # what _target waits for, to take back
        self._task: asyncio.Task[Any] | None = None
        self._scope: Any = None  # a trio.CancelScope, on trio
        self._parked: Any = None  # its sleep parked on virtualtime's trio clock, if it is in one
        # On virtualtime's trio clock, until its task is spawned: its start queued on the
        # clock (a _park.Starting) and the context it was started in (see _queue_start).
        self._starting: Any = None
        self._context: contextvars.Context | None = None
        # order="simpy" (virtualtime/sim/_core.py): the process's SimPy event, the callback that
        # resumes it and the waiter it is parked on.
        self._sp: Event | None = None
        self._resume_cb: Any = None
        self._parked_on: Any = None
        if env._simpy:
            core = env._core
            self._sp = Event(core, self)
            self._resume_cb = self._sp_resume
            start = Event(core)  # SimPy's Initialize: an urgent event that starts it
            start._value = None
            start.callbacks = [self._resume_cb]
            self._target = start
            core.schedule(start, URGENT)

    @property
    def name(self) -> str:
        """The process's name (the coroutine's, unless :func:`start` was given one)."""
        return self._name

    @property
    def target(self) -> Any:
        """The kit awaitable the process waits on now (a sleep, a request, a signal...), or
        None while it runs or waits on something that is not the kit's (SimPy's ``target``)."""
        if self._cond is not None:
            return self._cond
        if self._sp is not None:
            target = self._target
            return None if target is None else target.kit
        if self._target is None:
            return None
        op = self._target_op
        inner = getattr(op, "_signal", None) or getattr(op, "_proc", None)  # a wait's undo
        return inner if inner is not None else op

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
        try:
            value = await coro
            pending = self._pending
            if pending:
                # An interrupt kept for a kit await that never came (it came while the process
                # ran, or waited on something not the kit's): raised at the end, not dropped.
                raise pending.pop(0)
        except BaseException as exc:
            env._last = env._clock()
            if isinstance(exc, anyio.get_cancelled_exc_class()):
                self._finish(None, exc, cancelled=True)
                raise
            if not self._finish(None, exc, cancelled=False) and not env._closing:
                # (While the run is being cleaned up, a process that fails -- a joiner told
                # that the process it awaited was cancelled first -- fails nothing.)
                env._fail(exc)
            if not isinstance(exc, Exception):
                raise
            return
        self._finish(value, None, cancelled=False)

    def _queue_start(self, clock: Any) -> None:
        """On virtualtime's trio clock: queue the process's first step on the clock, in the
        order of starts (trio starts the tasks of one turn in random order); its task is
        spawned when that turn comes.  A task spawned at once would only park there, at the
        cost of a loop round and a wait."""
        self._context = contextvars.copy_context()  # what the task would have inherited now
        self._starting = clock._vt_start(self._spawn)

    def _spawn(self) -> None:
        """Spawn the task of a process whose start was queued: its turn has come, or it must
        end now (cancelled, or the run is being cleaned up: its first step sees that).
        Called from inside trio's run loop too, so it must not raise."""
        starting, self._starting = self._starting, None
        if starting is not None:
            starting.drop()
        context, self._context = self._context, None
        assert context is not None
        try:
            context.run(self._env._group.start_soon, self._body_anyio, name=self._name)
        except RuntimeError:  # pragma: no cover - the nursery is closed: nothing will run it
            self._never_started()

    async def _body_anyio(self) -> None:
        """The process on anyio (trio): in its own cancel scope, so it can be cancelled."""
        if self._env._closing or self._scope is not None:
            # Started too late (the simulation is being cleaned up), or cancelled before it
            # started (cancel() left a cancelled scope).
            self._never_started()
            return
        trio = trio_module()
        with trio.CancelScope() as scope:
            self._scope = scope
            park = self._env._park
            if park is not None:
                park._vt_fresh()  # a new task: the clock's in-place verdict must look again
                try:
                    # Spawned in its turn (_queue_start): it runs now, unless the whole run
                    # was cancelled meanwhile.
                    await trio.lowlevel.checkpoint_if_cancelled()
                except BaseException:
                    self._never_started()
                    raise
            await self._body()
        if scope.cancelled_caught and self._state == _PENDING:
            self._finish(None, None, cancelled=True)

    # ------------------------------------------------------------------ order="simpy"

    def _sp_event(self) -> Event:
        assert self._sp is not None
        return self._sp

    def _sp_resume(self, ev: Event) -> None:
        """The callback that resumes the process (SimPy's ``_resume``): it takes the turn.
        ``Core.resume``, inlined: this runs once per event of most models."""
        if self._state == _PENDING:
            if not ev._ok:
                ev._defused = True
            core = self._env._core
            core.active = self
            parked = self._parked_on
            if parked is None:
                core.turns.start(self)
            else:
                self._parked_on = None
                parked.set_result(ev)

    async def _body_simpy(self) -> None:
        """The process's task in ``order="simpy"``: made when its start event is processed,
        it holds the turn from its first step."""
        env = self._env
        if _SIM.get(None) is not env:
            _SIM.set(env)
        _PROC.set(self)
        core = env._core
        coro = self._coro
        if coro is None:  # cancelled before it started
            core.give_back(self)
            return
        self._coro = None
        try:
            value = await _holding_turn(core, self, coro)
            pending = self._pending
            if pending:  # kept for a kit wait that never came: raised at the end (as above)
                raise pending.pop(0)
        except BaseException as exc:
            cancelled = isinstance(exc, anyio.get_cancelled_exc_class())
            self._end_simpy(None, exc, cancelled)
            if not isinstance(exc, Exception):
                raise
            return
        self._end_simpy(value, None, False)

    async def _body_simpy_trio(self) -> None:
        """:meth:`_body_simpy` on trio, in the process's own cancel scope."""
        with trio_module().CancelScope() as scope:
            if self._scope is not None:  # cancelled before its task started
                scope.cancel()
            self._scope = scope
            await self._body_simpy()
        if scope.cancelled_caught and self._state == _PENDING:
            self._end_simpy(None, None, True)

    def _end_simpy(self, value: Any, exc: BaseException | None, cancelled: bool) -> None:
        """The coroutine ended: the process's event is triggered (SimPy: it is scheduled, and
        its joiners resume when it is processed) and the turn goes back."""
        env = self._env
        core = env._core
        coro = self._coro
        if coro is not None:
            self._coro = None
            coro.close()
        self._task = None  # nothing reads it any more (see _finish)
        self._close_delayed()
        self._state = _DONE
        self._value = value
        self._exc = None if cancelled else exc
        env._ended(self)
        ev = self._sp
        assert ev is not None
        if ev._value is PENDING_EVENT:
            if cancelled:
                ev._defused = True  # a cancellation is not a failure of the model
                exc = VirtualTimeError(f"{self!r} was cancelled before it returned a value")
            ev._ok = exc is None
            ev._value = value if exc is None else exc
            if not core.closed:
                core.schedule(ev)
        joiners, self._joiners = self._joiners or (), None
        for waiter in joiners:  # the clean-up at the end of a run waits this way
            if not waiter.done():
                waiter.set_result(None)
        core.give_back(self)

    def _sp_interrupted(self, ev: Event) -> None:
        """The callback of an interruption (SimPy's ``Interruption``): resume the process
        with it, taking it off the event it waits on."""
        if self._state != _PENDING:
            return  # it ended meanwhile
        target = self._target
        if self._parked_on is None or target is None or target.callbacks is None:
            # Running, or waiting on something that is not the kit's: kept for its next wait.
            if self._pending is None:
                self._pending = []
            self._pending.append(ev._value)
            return
        with contextlib.suppress(ValueError):
            target.callbacks.remove(self._resume_cb)
        self._env._core.resume(self, ev)

    def _never_started(self) -> None:
        """Cancelled before its first step: its coroutine never ran, and never will.  It is
        closed (so that it draws no "coroutine ... was never awaited" warning) and the process
        ends, cancelled.  Safe to call again."""
        if self._sp is not None:
            if self._state == _PENDING:
                self._end_simpy(None, None, True)
            return
        coro = self._coro
        if coro is not None:
            self._coro = None
            coro.close()
        if self._state == _PENDING:
            self._env._last = self._env._clock()
            self._finish(None, None, cancelled=True)

    def _close_delayed(self) -> None:
        """A start_delayed starter ended before it started its coroutine: close it."""
        delayed = self._delayed
        if delayed is not None:
            self._delayed = None
            delayed.close()

    def _finish(self, value: Any, exc: BaseException | None, *, cancelled: bool) -> bool:
        """Record the end; wake the joiners.  True if someone received the exception."""
        # The process has ended (its task is ending, or never ran): nothing reads its task any
        # more.  The task's context holds this process (current_process()), so keeping the
        # task would make every process a reference cycle, freed only by the cyclic collector.
        self._task = None
        self._close_delayed()
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
        A process that returns before another kit await ends with that interrupt instead, as
        if raised at its end: it fails with :class:`Interrupt`, which fails the run unless
        somebody awaits the process.  Use it when the process may be busy outside the kit.

        The kit operation the process waits on is withdrawn at the moment of the interrupt: a
        request is not granted, a get or a put does not complete afterwards (the interrupter
        may free room before the process runs again), a get that had just received gives it
        back.
        """
        if self._state != _PENDING:
            raise UsageError(f"{self!r} has ended and cannot be interrupted")
        exc = Interrupt(cause)
        if self._sp is not None:
            core = self._env._core
            if core.active is self:
                # Interrupting itself (SimPy refuses: "not allowed to interrupt itself", as
                # when a process's own request preempts its other one): kept for its next
                # kit wait, or its end, as in the default order.
                if self._pending is None:
                    self._pending = []
                self._pending.append(exc)
                return
            ev = Event(core)
            ev._ok = False
            ev._value = exc
            ev._defused = True
            ev.callbacks = [self._sp_interrupted]
            core.schedule(ev, URGENT)
            return
        target = self._target
        if target is not None and not target.done():
            target.set_exception(exc)
            op = self._target_op
            if op is not None:
                # Withdrawn now, not when the process resumes: a put must not complete, a
                # request must not be granted, in between (the interrupter may free room).
                op._abandon()
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
        if self._sp is not None and task is None and self._scope is None:
            # Not started yet (order="simpy"): it never will; its start event finds it ended.
            if self._env._fast:
                self._never_started()
            else:
                self._scope = trio_module().CancelScope()
                self._scope.cancel()
                self._never_started()
            return
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
            if self._starting is not None:
                # Queued to start: its task starts now, to end at its first step, in the
                # loop round after this one -- when a task already parked in its turn would
                # have been woken by the cancellation.
                self._spawn()

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
        ev = self._sp
        if ev is not None:
            value: T = yield from ev._core.wait(ev, None)
            return value
        if self._state != _PENDING:
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


@types.coroutine
def _holding_turn(
    core: Any, proc: Process[Any], coro: Coroutine[Any, Any, T]
) -> Generator[Any, Any, T]:
    """Run ``coro`` as ``await coro`` would, watching each suspension: one made while the
    process still has the turn is a wait on something that is not the kit's (a kit wait gives
    the turn back first), and the model must not wait for it -- the process is let go adrift
    (``Core.let_go``) at that moment."""
    send = coro.send
    value: Any = None
    while True:
        try:
            yielded = send(value)
        except StopIteration as stop:
            result: T = stop.value
            return result
        while True:  # (the inner loop keeps the usual resumption free of throw's bookkeeping)
            if core.active is proc:
                core.let_go(proc)
            try:
                value = yield yielded
                break
            except BaseException as exc:  # a cancellation, or a throw from the loop: passed on
                try:
                    yielded = coro.throw(exc)
                except StopIteration as stop:
                    result = stop.value
                    return result


# --------------------------------------------------------------------------- module functions


def start(coro: Coroutine[Any, Any, T], *, name: str | None = None) -> Process[T]:
    """Start ``coro`` as a process of the current simulation; returns its :class:`Process`.

    It starts at the current instant (behind what is ready, or -- in ``order="simpy"`` --
    ahead of it).  Keep the handle to await the result or to interrupt it.
    """
    return _current("sim.start()").start(coro, name=name)


def start_delayed(
    coro: Coroutine[Any, Any, T], delay: float, *, name: str | None = None
) -> Process[Process[T]]:
    """Start ``coro`` as a process ``delay`` from now (SimPy's ``util.start_delayed``).

    Returns the *starter*: a process that sleeps ``delay`` and then starts ``coro``; awaiting
    the starter gives the started :class:`Process`.  ``delay`` must be > 0.  Use it for
    arrivals planned ahead (a shift that begins at 8:00) without a process of your own.
    """
    try:
        env = _current("sim.start_delayed()")
        delay = check_positive("delay", delay)
        if name is not None:
            check_name("name", name)
    except BaseException:
        if inspect.iscoroutine(coro):
            coro.close()  # refused: it never runs, and must not warn that it was never awaited
        raise

    async def starter() -> Process[T]:
        from ._sleep import sleep

        await sleep(delay)
        proc._delayed = None
        return env.start(coro, name=name)

    label = name or getattr(coro, "__qualname__", "process")
    try:
        proc = env.start(starter(), name=f"start_delayed({label})")
    except BaseException:
        coro.close()
        raise
    proc._delayed = coro  # closed if the starter ends before it starts it
    return proc


def current_process() -> Process[Any] | None:
    """The process running this code, or None outside processes."""
    return _PROC.get()
