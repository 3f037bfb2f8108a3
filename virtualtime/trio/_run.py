"""Guarded trio runs: :func:`run` and :class:`RunGuard`, which turn a deadlock into an error.

A bare :class:`~virtualtime.trio.VirtualClock` can only sleep when nothing can ever happen
again; trio gives a clock no public way to make the main task raise.  :class:`RunGuard` wraps
the main function of a run so that the clock, once it declares a deadlock, cancels the guarded
task tree and the guard raises :class:`~virtualtime.DeadlockError` instead (and, the same way,
the ``FellBehindError`` of a clock with ``rate_strict``).  :func:`run` is the one-call way to
use it; :func:`virtualtime.anyio_run` and the pytest plugin use the guard directly.

Part of ``trio``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

import functools
import sys
import typing
from collections import abc as _abc

import trio
import trio.lowlevel

from .._shared import _errors
from ._clock import VirtualClock

__all__ = ["RunGuard", "run"]

_T = typing.TypeVar("_T")


class RunGuard(typing.Generic[_T]):
    """One trio run on a :class:`VirtualClock` whose deadlock raises ``DeadlockError``.

    The contract between the clock and the code that starts trio runs on it --
    :func:`run`, :func:`virtualtime.anyio_run` with ``backend="trio"`` and the pytest
    plugin: each wraps its main function, ``trio.run(RunGuard(clock, main).guarded_main,
    *args, clock=clock)``.  While the guarded main function runs, the clock knows which task
    tree is the program's; when that tree deadlocks, the clock cancels it and
    :meth:`guarded_main` raises the clock's :class:`~virtualtime.DeadlockError` (naming every
    blocked task) instead of letting the run hang; a clock with ``rate_strict`` ends a run that
    fell too far behind real time the same way, with its ``FellBehindError``.  Only this class
    sets the clock's guard.
    """

    __slots__ = ("async_fn", "clock", "error", "name", "scope", "task")

    def __init__(
        self, clock: VirtualClock, async_fn: _abc.Callable[..., _abc.Awaitable[_T]]
    ) -> None:
        if not isinstance(clock, VirtualClock):
            raise _errors.InvalidTypeError(
                f"clock must be a virtualtime.trio.VirtualClock, got {clock!r}"
            )
        if not callable(async_fn):
            raise _errors.InvalidTypeError(
                f"async_fn must be an async function (or another callable returning an "
                f"awaitable), got {async_fn!r} ({type(async_fn).__name__})"
            )
        self.clock = clock
        self.async_fn = async_fn
        self.name: str = _callable_name(async_fn)
        self.scope: trio.CancelScope
        """The scope the clock cancels to end the run: set by :meth:`guarded_main`."""
        self.task: trio.lowlevel.Task | None = None
        self.error: _errors.VirtualTimeError | None = None
        """Set by the clock when it ends this run -- a :class:`~virtualtime.DeadlockError`, or
        the ``FellBehindError`` of ``rate_strict`` -- then it cancels ``scope``."""

    @staticmethod
    def active(clock: VirtualClock) -> bool:
        """Whether a guarded run is under way on ``clock`` (a nested one would be refused)."""
        return clock._guard is not None

    async def guarded_main(self, *args: object) -> _T:
        """Await ``async_fn(*args)``; a deadlock ends it with ``DeadlockError`` (falling behind
        under ``rate_strict``, with ``FellBehindError``).

        Call it from inside a trio run whose clock is ``clock`` (it is a coroutine because it
        runs inside one).  Raises :class:`~virtualtime.UsageError` when the running clock is
        another one, or when ``clock`` already guards a run.
        """
        clock = self.clock
        if trio.lowlevel.current_clock() is not clock:
            raise _errors.UsageError(
                f"virtualtime.trio: the running trio clock is not {clock!r}; start the run "
                "with clock=<that clock>"
            )
        if clock._guard is not None:
            raise _errors.UsageError(f"{clock!r} is already guarding another run")
        task = trio.lowlevel.current_task()
        nursery = task.parent_nursery
        own: trio.CancelScope | _NoScope
        if (
            getattr(task.coro, "cr_frame", None) is sys._getframe()
            and nursery is not None
            and nursery.parent_task is trio.lowlevel.current_root_task()
            and len(nursery.child_tasks) == 1
        ):
            # This coroutine is trio's main task itself (trio.run(guard.guarded_main), and
            # anyio.run's, which hands trio the same coroutine): trio runs it alone in a
            # nursery of its root task, whose scope ends exactly this task's tree, and nothing
            # else of the run -- the clock cancels that one.  Entering a scope of our own
            # costs a good part of a short run.
            self.scope = nursery.cancel_scope
            own = _NO_SCOPE
        else:
            own = self.scope = trio.CancelScope()
        try:
            with own:
                clock._guard = self
                self.task = task
                clock._dormant = False  # a new guarded run: a deadlock must be found afresh
                try:
                    return await self.async_fn(*args)
                finally:
                    clock._guard = None
                    clock._dormant = False
        except BaseException as exc:
            # Once the clock has declared a deadlock (or the run too late), whatever the
            # cancellation turned into on its way out (pytest-trio, for one, reports a fixture
            # it cancelled as a RuntimeError) is a consequence: the clock's error is what the
            # caller must hear about.
            error, self.error = self.error, None
            if error is None or _interrupts(exc):
                raise
            raise error from exc
        error, self.error = self.error, None
        if error is None:  # pragma: no cover - only the clock cancels this scope
            raise _errors.UsageError("virtualtime.trio: the guard scope was cancelled unexpectedly")
        raise error


class _NoScope:
    """The context a guarded main task runs in when the clock cancels trio's own scope."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc_info: object) -> typing.Literal[False]:
        return False  # never swallows: the cancellation reaches guarded_main's handler


_NO_SCOPE: typing.Final = _NoScope()


def _callable_name(func: object) -> str:
    """The name a guarded run's main task goes by in deadlock reports."""
    while True:
        name = getattr(func, "__qualname__", None)
        if isinstance(name, str):
            return name
        if not isinstance(func, functools.partial):
            return repr(func)
        func = func.func


def _interrupts(exc: BaseException) -> bool:
    """Whether ``exc`` is (or holds) an interruption that must pass through unchanged."""
    kinds = (KeyboardInterrupt, SystemExit, GeneratorExit)
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(kinds) is not None
    return isinstance(exc, kinds)


def run(
    async_fn: _abc.Callable[..., _abc.Awaitable[_T]],
    *args: object,
    clock: VirtualClock | None = None,
    **options: typing.Any,
) -> _T:
    """Run ``async_fn(*args)`` with trio in virtual time and return its result.

    Like ``trio.run(async_fn, *args, clock=VirtualClock(**options))``, plus one thing a bare
    clock cannot do: if the run deadlocks (see :class:`VirtualClock`), the main function is
    cancelled and :class:`~virtualtime.DeadlockError` is raised, naming every blocked task
    and where it waits, instead of hanging.  Pass either ``clock`` (a clock you keep, to read
    or :meth:`~VirtualClock.jump` it) or clock ``options`` (``start``, ``autojump``,
    ``autojump_threshold``, ``rate``, ``rate_strict``, ``deadlock_timeout``, ``patch_time``,
    ``wall_start``), not both.
    """
    if not callable(async_fn):
        raise _errors.InvalidTypeError(
            f"async_fn must be an async function, got {async_fn!r} ({type(async_fn).__name__})"
        )
    if clock is None:
        clock = VirtualClock(**options)
    elif options:
        raise _errors.InvalidTypeError(
            f"pass clock options ({', '.join(sorted(options))}) or clock={clock!r}, not both"
        )
    guard = RunGuard(clock, async_fn)
    return trio.run(guard.guarded_main, *args, clock=clock)
