"""Events and conditions in SimPy's sense: ``a | b``, ``a & b``, :class:`AnyOf`, :class:`AllOf`,
:class:`~virtualtime.sim.ConditionValue` -- and :func:`first_of`/:func:`all_of` in
``order="simpy"``.

Every kit awaitable (a sleep, a request, a get or put, a :class:`~virtualtime.sim.Signal`, a
:class:`~virtualtime.sim.Process`, a condition) combines with ``|`` and ``&`` into a
condition, as SimPy's events do.  Awaiting a condition gives a ``ConditionValue``: the
operands that had happened when it was decided, with their values.  Nothing is taken back: a
request that lost an ``|`` is still queued, as in SimPy, so this is the form for code ported
line by line.  :func:`~virtualtime.sim.first_of` and :func:`~virtualtime.sim.all_of` are the
kit's own forms, which return the winner (or the values) and withdraw what lost; in
``order="simpy"`` they are exactly "an ``AnyOf``/``AllOf``, then withdraw the losers in
argument order" (:func:`exact_first_of`, :func:`exact_all_of`).

In ``order="simpy"`` a condition is SimPy's (:class:`virtualtime.sim._core.Condition`): made
when written, decided when an operand is processed, resumed one step later.  In the default
order it is decided as soon as an operand completes and resumes its waiter through the loop.

Part of ``sim``: may import ``shared``, ``engine``, ``trace``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Generator
from typing import TYPE_CHECKING, Any

from .._shared._errors import InvalidTypeError
from ._check import short
from ._core import Condition, ConditionValue, Event
from ._kit import _COMBINE, _PROC, Signal, Waiter, _Abandonable, _current, _wait
from ._ops import _Op
from ._process import Process
from ._sleep import _Sleep, _sleep_anyio, _ValueSleep

if TYPE_CHECKING:
    from ._simulation import Simulation

__all__ = ["AllOf", "AnyOf", "ConditionValue"]


def event_of(env: Simulation, aw: object) -> Event:
    """The SimPy event an awaitable stands for in ``order="simpy"``: a kit awaitable's own; a
    coroutine (or another awaitable) is started as a process, whose end is the event."""
    get = getattr(aw, "_sp_event", None)
    if get is not None:
        ev: Event = get()
        return ev
    coro: Any = aw if inspect.iscoroutine(aw) else _awaiting(aw)  # type: ignore[arg-type]
    proc = env.start(coro)
    ev = proc._sp_event()
    return ev


async def _awaiting(aw: Awaitable[Any]) -> Any:
    return await aw


def withdraw(aw: object, ev: Event) -> None:
    """Take back a loser (or an operand of an interrupted condition): see each kind's
    ``_sp_withdraw`` (a request is cancelled or released, a get cancelled or given back, a put
    cancelled if it has not happened; the rest have nothing to take back) -- and a coroutine
    operand, which :func:`event_of` started as a process, is cancelled, as in the default
    order."""
    take_back = getattr(aw, "_sp_withdraw", None)
    if take_back is not None:
        take_back()
    elif ev.kit is not aw and ev.callbacks is not None:
        ev.kit.cancel()


def _check_operands(name: str, awaitables: tuple[Any, ...]) -> None:
    for index, aw in enumerate(awaitables):
        if not isinstance(aw, Awaitable):
            raise InvalidTypeError(
                f"{name}() argument {index} must be awaitable, got {short(aw)} "
                f"({type(aw).__name__})"
            )


def _abandon(
    cond: Condition, awaitables: tuple[Any, ...], events: list[Event], exc: BaseException
) -> None:
    """The wait on a condition ended otherwise (an interrupt, a failure, a cancellation):
    its operands are withdrawn in argument order.  After an interrupt the condition stays
    as SimPy leaves it, watching its operands (one that fails later fails it, and a failure
    nobody handles ends the run); after a cancellation, which SimPy does not have, it stops
    watching them."""
    if not isinstance(exc, Exception):
        cond._unhook()
        cond._defused = True
    for aw, ev in zip(awaitables, events, strict=True):
        withdraw(aw, ev)


def exact_first_of(env: Simulation, awaitables: tuple[Any, ...]) -> Generator[Any, None, Any]:
    """:func:`~virtualtime.sim.first_of` in ``order="simpy"``: ``AnyOf``, then the winner is
    the first operand (in argument order) that had happened, and the others are withdrawn."""
    events = [event_of(env, aw) for aw in awaitables]
    core = env._core
    cond = Condition(core, tuple(events), False, None)
    try:
        # (the wait is yielded from here, not from a helper both conditions share: a layer
        # of generators less on every resumption of the process)
        got: ConditionValue = yield from core.wait(cond, None)
    except BaseException as exc:
        _abandon(cond, awaitables, events, exc)
        raise
    winner = next(index for index, ev in enumerate(events) if ev.kit in got)
    for index, aw in enumerate(awaitables):
        if index != winner:
            withdraw(aw, events[index])
    return awaitables[winner], got[events[winner].kit]


def exact_all_of(env: Simulation, awaitables: tuple[Any, ...]) -> Generator[Any, None, Any]:
    """:func:`~virtualtime.sim.all_of` in ``order="simpy"``: ``AllOf``; if it fails (or the
    process is interrupted), every operand is withdrawn, in argument order."""
    events = [event_of(env, aw) for aw in awaitables]
    core = env._core
    cond = Condition(core, tuple(events), True, None)
    try:
        got: ConditionValue = yield from core.wait(cond, None)
    except BaseException as exc:
        _abandon(cond, awaitables, events, exc)
        raise
    return [got[ev.kit] for ev in events]


class _Combined(_Abandonable):
    """A condition of the kit's, in either order (what ``a | b`` makes)."""

    __slots__ = ("_all", "_env", "_ev", "_operands", "_outer", "_pairs", "_waiters")

    def __init__(self, operands: tuple[Any, ...], all_: bool) -> None:
        name = "AllOf" if all_ else "AnyOf"
        _check_operands(name, operands)
        env = _current(f"{name}()")
        self._env = env
        self._all = all_
        self._operands = operands
        self._ev: Event | None = None
        self._outer: Waiter | None = None
        self._pairs: list[tuple[Any, Any]] | None = None
        self._waiters: list[Any] = []
        if env._simpy:
            events = tuple(event_of(env, aw) for aw in operands)
            self._ev = Condition(env._core, events, all_, self)
        else:
            self._begin_default()

    # ------------------------------------------------------------------ order="simpy"

    def _sp_event(self) -> Event:
        assert self._ev is not None
        return self._ev

    # ------------------------------------------------------------------ the default order

    def _begin_default(self) -> None:
        env = self._env
        self._outer = env._new_waiter()
        left = [len(self._operands)]
        for aw in self._operands:
            waiter = _begin_operand(env, aw)
            if waiter is None:  # a coroutine or another awaitable: it runs as a process
                coro: Any = aw if inspect.iscoroutine(aw) else _awaiting(aw)
                waiter = env.start(coro)._begin()
            self._waiters.append(waiter)
        if not self._operands:
            self._decide()
            return
        for waiter in self._waiters:
            waiter.add_done_callback(lambda w, left=left: self._done(w, left))

    def _done(self, waiter: Any, left: list[int]) -> None:
        exc = _exception_of(waiter)  # read, so asyncio never reports it "never retrieved"
        outer = self._outer
        assert outer is not None
        if outer.done():
            return
        if exc is not None:
            outer.set_exception(exc)
            return
        left[0] -= 1
        if not self._all or not left[0]:
            self._decide()

    def _decide(self) -> None:
        pairs: list[tuple[Any, Any]] = []
        self._collect(pairs)
        self._pairs = pairs
        outer = self._outer
        assert outer is not None
        outer.set_result(ConditionValue(pairs))

    def _collect(self, pairs: list[tuple[Any, Any]]) -> None:
        for aw, waiter in zip(self._operands, self._waiters, strict=True):
            if isinstance(aw, _Combined):
                aw._collect(pairs)
            elif waiter.done() and not waiter.cancelled():
                try:
                    value = _result_of(aw, waiter)
                except Exception:  # it failed: not among the operands that happened
                    continue
                pairs.append((aw, value))

    def _begin(self) -> Waiter:
        """As an operand of another condition (the default order)."""
        assert self._outer is not None
        return self._outer

    def __await__(self) -> Generator[Any, None, ConditionValue]:
        ev = self._ev
        if ev is not None:
            value: ConditionValue = yield from ev._core.wait(ev, None)
            return value
        assert self._outer is not None
        result: ConditionValue = yield from _wait(self._env, self._outer, self)
        return result

    def _abandon(self) -> None:
        """The default order: the wait ended otherwise (an interrupt): the condition may
        still fail later, with nobody to read it -- read it then (asyncio reports it else)."""
        outer = self._outer
        if outer is not None:
            outer.add_done_callback(_exception_of)

    @property
    def triggered(self) -> bool:
        """True once decided."""
        if self._ev is not None:
            return self._ev.triggered
        assert self._outer is not None
        return bool(self._outer.done())

    def __repr__(self) -> str:
        state = "decided" if self.triggered else "pending"
        return f"<{type(self).__name__} of {len(self._operands)} {state}>"


class AnyOf(_Combined):
    """A condition that happens when any of ``awaitables`` has (SimPy's ``AnyOf`` and ``|``).

    ``result = await sim.AnyOf(req, sim.sleep(5))`` (or ``await (req | sim.sleep(5))``) gives a
    :class:`ConditionValue`: ``req in result`` says whether the request was granted.  Unlike
    :func:`~virtualtime.sim.first_of` nothing is withdrawn: withdraw a request that lost
    yourself (``req.cancel()``, or a ``with`` block).  With no operand it happens at once.
    """

    __slots__ = ()

    def __init__(self, *awaitables: Awaitable[Any]) -> None:
        super().__init__(awaitables, False)


class AllOf(_Combined):
    """A condition that happens when all of ``awaitables`` have (SimPy's ``AllOf`` and ``&``);
    gives a :class:`ConditionValue`.  A failed operand fails it at once."""

    __slots__ = ()

    def __init__(self, *awaitables: Awaitable[Any]) -> None:
        super().__init__(awaitables, True)


def combine(left: object, right: object, all_: bool) -> _Combined:
    """``left | right`` / ``left & right`` on kit awaitables."""
    if not isinstance(right, Awaitable):
        raise InvalidTypeError(
            f"{'&' if all_ else '|'} combines awaitables, got {short(right)} "
            f"({type(right).__name__})"
        )
    return AllOf(left, right) if all_ else AnyOf(left, right)  # type: ignore[arg-type]


_COMBINE.append(combine)


def _result_of(aw: object, waiter: Any) -> Any:
    """What awaiting ``aw`` gives, read from its finished waiter (a condition's operand)."""
    if type(aw) is _ValueSleep:
        waiter.result()
        return aw._value
    return waiter.result()


def _exception_of(waiter: Any) -> BaseException | None:
    """A finished waiter's exception (an asyncio future's, marked as retrieved)."""
    if isinstance(waiter, asyncio.Future):
        return None if waiter.cancelled() else waiter.exception()
    exc: BaseException | None = waiter._exc
    return exc


def _begin_operand(env: Simulation, aw: object) -> Waiter | None:
    """A condition's operand begun in place; a sleep on trio in a helper task of the
    simulation (a sleep's own waiter is the asyncio loop's)."""
    if isinstance(aw, _Sleep) and not env._fast:
        aw._awaited = True
        waiter = env._new_waiter()

        async def nap() -> None:
            _PROC.set(None)  # a helper of the condition, not the process that made it
            await _sleep_anyio(env, aw._delay)
            if not waiter.done():
                waiter.set_result(None)

        env._group.start_soon(nap)
        return waiter
    return _kit_begin(aw)


def _kit_begin(aw: object) -> Waiter | None:
    """A kit operand begun in place (its waiter), or None for another awaitable."""
    if isinstance(aw, _Op | _Sleep | Signal | Process | _Combined):
        return aw._begin()
    return None
