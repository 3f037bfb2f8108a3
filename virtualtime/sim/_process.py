"""Processes: the coroutines a simulation runs, which you can await, interrupt and cancel.

:class:`Process` is the handle :func:`start` returns: it runs the coroutine (as an asyncio
task, or a trio task in its own cancel scope), records how it ended and wakes whoever awaits
it.  :meth:`Process.interrupt` raises :class:`Interrupt` at the process's current kit wait
(by failing that wait's waiter, see :mod:`virtualtime.sim._kit`).  :func:`start` and
:func:`current_process` are the module-level verbs a model calls; the :class:`Simulation`
(``_simulation``) makes the processes and cleans them up at the end of a run.

Part of ``sim``: may import ``shared``, ``engine``, ``trace``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Coroutine, Generator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio

from .._shared._errors import UsageError, VirtualTimeError
from ._fast import trio_module
from ._kit import (
    _DONE,
    _PENDING,
    _PROC,
    _SIM,
    Waiter,
    _Abandonable,
    _current,
    _suspend_once,
    _take_turn,
    _wait,
)

if TYPE_CHECKING:
    from ._simulation import Simulation

__all__ = ["Interrupt", "Process", "current_process", "start"]


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
        "_target_op",
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
        self._target_op: _Abandonable | None = None  # what _target waits for, to take back
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


def start(coro: Coroutine[Any, Any, T], *, name: str | None = None) -> Process[T]:
    """Start ``coro`` as a process of the current simulation; returns its :class:`Process`.

    It starts at the current instant (behind what is ready, or -- in ``order="simpy"`` --
    ahead of it).  Keep the handle to await the result or to interrupt it.
    """
    return _current("sim.start()").start(coro, name=name)


def current_process() -> Process[Any] | None:
    """The process running this code, or None outside processes."""
    return _PROC.get()
