"""Conditions: :func:`first_of` and :func:`all_of`, waits on several awaitables at once.

Any awaitable can be an operand.  Kit operands (an operation, a sleep, a signal, a process)
are begun in place -- their waiters are watched, with no task each -- and the losers taken
back (:func:`_undo`); other awaitables become tasks.  On trio every operand runs in a task of
its own, and on virtualtime's trio clock the operands start in argument order.

Part of ``sim``: may import ``shared``, ``engine``, ``trace``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from .._shared._errors import InvalidTypeError, InvalidValueError
from ._check import short
from ._events import _kit_begin, _result_of, exact_all_of, exact_first_of
from ._kit import (
    _COMBINE,
    _DONE,
    _PENDING,
    _PROC,
    _SIM,
    Signal,
    _Abandonable,
    _current,
    _reserve,
    _take_turn,
    _Unsignal,
    _wait,
)
from ._ops import _Op
from ._process import Process, _Unjoin
from ._resources import Request
from ._sleep import _Sleep

if TYPE_CHECKING:
    from ._simulation import Simulation

__all__ = ["all_of", "first_of"]


T = TypeVar("T")


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
        env = _SIM.get(None)
        proc = _PROC.get()
        if proc is not None:
            proc._cond = self  # what Process.target shows meanwhile
        try:
            if env is not None and env._core is not None:
                # order="simpy": SimPy's AnyOf/AllOf, then the losers withdrawn (_events.py).
                exact = exact_first_of if self._run is _first_of else exact_all_of
                result: T = yield from exact(env, self._args)
                return result
            return (yield from self._run(*self._args).__await__())
        finally:
            if proc is not None:
                proc._cond = None

    def __or__(self, other: object) -> Any:
        """``first_of(...) | b``: see :class:`~virtualtime.sim.AnyOf`."""
        return _COMBINE[0](self, other, False)

    def __and__(self, other: object) -> Any:
        """``all_of(...) & b``: see :class:`~virtualtime.sim.AllOf`."""
        return _COMBINE[0](self, other, True)

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


def _first_done(outer: Any, index: int, waiter: Any) -> None:
    _retrieve(waiter)
    if not outer.done():
        outer.set_result(index)


def _retrieve(waiter: Any) -> None:
    """Mark an operand's exception as seen (asyncio): a loser that failed at the instant the
    condition ended -- a signal failed, a process raised -- is taken back, not an error, and
    must not be reported as "exception was never retrieved" when it is collected."""
    if not waiter.cancelled():
        waiter.exception()


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
    # An operand may fail it after the process stopped waiting (interrupted before it even
    # waited): read then, so that asyncio does not report the exception as never retrieved.
    outer.add_done_callback(_retrieve)
    waiters: list[Any] = []
    remaining = [len(awaitables)]

    def done(waiter: Any) -> None:
        _retrieve(waiter)
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
        _drop_unawaited(aw)
        raise


def _drop_unawaited(aw: object) -> None:
    """Take back an operand that lost before anybody awaited it: a kit operation withdrawn
    (or undone), a coroutine closed (so that it draws no "never awaited" warning), a
    condition's own operands likewise."""
    if isinstance(aw, _Op | _Sleep):
        aw._abandon()
    elif isinstance(aw, Coroutine):
        aw.close()
    elif isinstance(aw, _Condition):
        for inner in aw._args:
            _drop_unawaited(inner)


class _Operands(_Abandonable):
    """The kit operations among a condition's operands on trio (each awaited in a task):
    taken back at once when the waiting process is interrupted, so that none completes
    afterwards.  (The tasks themselves are cancelled when the process resumes: cancelling
    their group here would cancel the process's own wait too.)"""

    __slots__ = ("_items",)

    def __init__(self, items: tuple[Any, ...]) -> None:
        self._items = items

    def _abandon(self) -> None:
        for aw in self._items:
            if isinstance(aw, _Op | _Sleep):
                aw._abandon()


def _raise_pending(awaitables: tuple[Any, ...]) -> None:
    """An interrupt kept for the process's next kit await is raised here, before any operand
    began: each is taken back (a kit operation withdrawn or undone, a coroutine closed)."""
    proc = _PROC.get()
    if proc is None or not proc._pending:
        return
    for aw in awaitables:
        _drop_unawaited(aw)
    raise proc._pending.pop(0)


async def _first_of_anyio(env: Simulation, awaitables: tuple[Any, ...]) -> tuple[Any, Any]:
    _raise_pending(awaitables)
    # Operands complete already win in argument order, as on asyncio (trio would otherwise
    # pick among their tasks at random).
    for aw in awaitables:
        if _completed_now(aw):
            for other in awaitables:
                if other is not aw:
                    _drop_unawaited(other)  # it lost before it began
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
            result = await _Await(env, outer, _Operands(awaitables))
        except Exception as exc:  # raised outside the group, which would wrap it
            failure = exc
        finally:
            group.cancel_scope.cancel()
    if failure is not None:
        raise failure
    index, value = result
    return awaitables[index], value


async def _all_of_anyio(env: Simulation, awaitables: tuple[Any, ...]) -> list[Any]:
    _raise_pending(awaitables)
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
            await _Await(env, outer, _Operands(awaitables))
        except Exception as exc:  # raised outside the group, which would wrap it
            failure = exc
        finally:
            group.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return values
