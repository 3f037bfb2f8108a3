"""The modelling kit's core: the waits every kit operation is made of, and :class:`Signal`.

What every module of the kit shares lives here: the running simulation and process
(``_SIM``, ``_PROC``), the states of a kit operation, the one-shot waiters that stand in for
futures on trio (:class:`_Waiter`, :class:`_QueuedWaiter`), :func:`_wait` -- a process's
interruptible wait, which takes its operation back when it fails -- and the turns that keep
asyncio's order on virtualtime's trio clock.  :class:`Signal` lives here too: it is the kit's
simplest wait, nothing but a list of these waiters (and tests/test_public_api.py pins its
module).  The rest of the kit builds on this module (and on ``_core``), laid out along SimPy's
own seams:

* core and processes: ``_simulation`` -- :class:`Simulation`, :data:`ORDERS` and
  :func:`simulate`, SimPy's ``Environment``; ``_process`` -- :class:`Process`,
  :class:`Interrupt`, :func:`start`, :func:`start_delayed`, :func:`current_process`; ``_sleep``
  -- :func:`sleep` (SimPy's timeout) and :func:`now`, in pure Python and their compiled twins;
  ``_core`` -- SimPy's event queue, which runs ``order="simpy"``;
* events and conditions: ``_events`` -- ``|``, ``&``, :class:`AnyOf`, :class:`AllOf`,
  :class:`ConditionValue`; ``_conditions`` -- :func:`first_of` and :func:`all_of`;
* resources: ``_base`` -- :class:`BaseResource`, :class:`Put`, :class:`Get` and SimPy's way of
  serving queues; ``_ops`` -- the queued operation every kit resource is made of;
  ``_resources`` -- :class:`Resource`, :class:`PriorityResource`, :class:`PreemptiveResource`;
* containers and stores: ``_buffers`` -- what they share; ``_containers`` --
  :class:`Container`; ``_stores`` -- :class:`Store`, :class:`FilterStore`,
  :class:`PriorityStore`, :class:`PriorityItem`;
* statistics: ``_stats`` -- :class:`TimeSeries`, :class:`Tally`, :class:`Summary`.

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
costs nothing when nobody interrupts; the operation it waited for is withdrawn at that moment,
so it cannot complete before the process runs again.  A process suspended in a foreign await
(``anyio.sleep``, a socket) is not woken: the interrupt is kept and raised at its next kit
await -- or at its end, if it returns first.

Abandoning a wait is always clean
---------------------------------
Every kit operation knows how to take itself back: a request that loses a :func:`first_of`, is
cancelled or interrupted leaves the queue (it *reneged*); one that had just been granted is
released; a get that had just received an item or an amount gives it back at the front (if a
put took the room meanwhile, it waits first in the put queue: a level never exceeds the
capacity).  So a run can be cancelled at any point -- the end of ``until`` cancels every
process -- and nothing raises.

Ordering
--------
In the default order everything the kit wakes is woken through the loop in first-in
first-out order, so a run is deterministic on asyncio -- and on virtualtime's trio clock, which
queues the kit's wake-ups itself.  ``order="simpy"`` is SimPy's order exactly, on both
backends: it runs SimPy's event queue (``_core``), and the processes take turns (see
:data:`ORDERS` and docs/coming-from-simpy.md for the rules and the table of differences).

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
The behaviour is the same on all of them (the default order's same-instant order aside, see
docs/coming-from-simpy.md, row 19).  trio randomises the order of same-instant wake-ups
by design; on virtualtime's trio clock the kit queues its own wake-ups (starts, sleeps,
interrupts, settled waiters: :class:`_QueuedWaiter`) on the clock instead, first come first
served, so a model runs in asyncio's order there too.  On other trio clocks: trio's order.

Part of ``sim``: may import ``shared``, ``engine``, ``trace``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

from .._shared._errors import InvalidTypeError, UsageError
from ._check import short
from ._core import PENDING as _SP_PENDING
from ._core import Event as _SpEvent
from ._fast import trio_module

if TYPE_CHECKING:
    from ._process import Process
    from ._simulation import Simulation

__all__ = ["Signal"]

T_co = TypeVar("T_co", covariant=True)

_SIM: ContextVar[Simulation] = ContextVar("virtualtime.sim.simulation")
_PROC: ContextVar[Process[Any] | None] = ContextVar("virtualtime.sim.process", default=None)

_PENDING: Final = 0
_DONE: Final = 1
_OVER: Final = 2  # released, withdrawn, preempted or given back: finished without a value


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
        proc._target_op = op  # Process.interrupt takes it back at once
    try:
        return (yield from waiter.__await__())
    except BaseException:
        op._abandon()
        raise
    finally:
        if proc is not None:
            proc._target = None
            proc._target_op = None


class _Abandonable:
    __slots__ = ()

    def _abandon(self) -> None:
        """Take back whatever this operation did or asked for (cancelled, lost, interrupted)."""

    def __or__(self, other: object) -> Any:
        """``a | b``: a condition that happens when either has (SimPy's ``|``); see
        :class:`~virtualtime.sim.AnyOf`."""
        return _COMBINE[0](self, other, False)

    def __and__(self, other: object) -> Any:
        """``a & b``: a condition that happens when both have (SimPy's ``&``); see
        :class:`~virtualtime.sim.AllOf`."""
        return _COMBINE[0](self, other, True)


class KitAwaitable(Protocol[T_co]):
    """What the kit's awaitables are to a type checker: awaitable, and combinable with ``|``
    and ``&`` into conditions (SimPy's operators)."""

    def __await__(self) -> Generator[Any, None, T_co]: ...

    def __or__(self, other: object) -> Any: ...

    def __and__(self, other: object) -> Any: ...


_COMBINE: list[Callable[[object, object, bool], Any]] = []
"""What ``|`` and ``&`` make: set by ``_events`` (which builds on this module) when imported."""


_NOTHING: Final = _Abandonable()


def _current(what: str) -> Simulation:
    try:
        return _SIM.get()
    except LookupError:
        raise UsageError(
            f"{what} needs a running simulation: call it inside sim.simulate(...) or inside "
            "'async with sim.Simulation():'"
        ) from None


# --------------------------------------------------------------------------- signals


class Signal(_Abandonable):
    """A one-shot event any number of processes can await (SimPy's ``env.event()``).

    ``signal.succeed(value)`` wakes every waiter with ``value``; ``signal.fail(exc)`` raises
    ``exc`` in each; awaiting a signal that has already fired returns at once.  Use it for
    "the movie is sold out", "the door opened": something that happens once, with waiters
    who may also be waiting for something else (``first_of(turn, sold_out)``).

    In ``order="simpy"`` it is SimPy's event exactly: firing schedules it, its waiters wake
    when it is processed, and a failed signal that nobody waits for (and nobody
    :attr:`defused`) ends the run with its exception, as SimPy's ``run`` does.  In the default
    order firing wakes the waiters at once and a failure nobody waits for is dropped.
    """

    __slots__ = ("_defused", "_ev", "_exc", "_state", "_value", "_waiters")

    def __init__(self) -> None:
        self._state = _PENDING
        self._value: Any = None
        self._exc: BaseException | None = None
        self._waiters: list[Waiter] = []
        self._ev: Any = None  # order="simpy": its SimPy event (virtualtime/sim/_core.py)
        self._defused = False

    def _sp_event(self) -> Any:
        """Its SimPy event in an ``order="simpy"`` simulation (made on first use)."""
        ev = self._ev
        if ev is None:
            env = _current("using a Signal")
            if env._core is None:
                raise UsageError("this Signal's SimPy event exists only in order='simpy'")
            ev = self._ev = _SpEvent(env._core, self)
            if self._state != _PENDING:  # fired before it was first used here
                ev._ok = self._exc is None
                ev._value = self._value if self._exc is None else self._exc
                ev.callbacks = None
            ev._defused = self._defused
        return ev

    def _exact(self) -> Any:
        """Its SimPy event when it is used in an ``order="simpy"`` simulation, else None."""
        if self._ev is not None:
            return self._ev
        env = _SIM.get(None)
        if env is not None and env._core is not None:
            return self._sp_event()
        return None

    @property
    def ok(self) -> bool:
        """True if it succeeded, False if it failed (SimPy's ``ok``); an error before it fired."""
        if self._state == _PENDING:
            raise UsageError("this Signal has not fired yet")
        return self._exc is None

    @property
    def processed(self) -> bool:
        """True once its waiters have been woken (SimPy's ``processed``: in
        ``order="simpy"`` one step after it fired; in the default order when it fired)."""
        ev = self._ev
        if ev is not None:
            return bool(ev.callbacks is None)
        return self._state != _PENDING

    @property
    def defused(self) -> bool:
        """Set it to True to say a failure is handled (SimPy's ``defused``): a failed signal
        nobody waits for then does not end an ``order="simpy"`` run."""
        ev = self._ev
        return bool(ev._defused) if ev is not None else self._defused

    @defused.setter
    def defused(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise InvalidTypeError(f"defused must be True or False, got {short(value)}")
        self._defused = value
        if self._ev is not None:
            self._ev._defused = value

    def trigger(self, other: Any) -> None:
        """Fire with the outcome of ``other`` -- a signal, a process or a kit operation that
        has happened: its value, or its exception (SimPy's ``trigger``).  Use it to pass an
        outcome on: ``done.trigger(worker)`` from a callback or a process."""
        get = getattr(other, "_sp_event", None)
        ev = self._exact()
        if ev is not None and get is not None:
            source = get()
            if source._value is _SP_PENDING:
                raise UsageError(f"{short(other)} has not happened yet; nothing to pass on")
            if source._ok:
                self._fire(source._value, None)
            else:
                self._fire(None, source._value)
            return
        state = getattr(other, "_state", None)
        if state is None:
            raise InvalidTypeError(
                f"trigger() takes a Signal, a Process or a kit operation, got {short(other)} "
                f"({type(other).__name__})"
            )
        if state == _PENDING:
            raise UsageError(f"{short(other)} has not happened yet; nothing to pass on")
        exc = getattr(other, "_exc", None)
        self._fire(None if exc is not None else other._value, exc)

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
        ev = self._exact()
        self._state = _DONE
        self._value = value
        self._exc = exc
        if ev is not None:
            if exc is None:
                ev.succeed(value)
            else:
                ev.fail(exc)
            return
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
        if env._core is not None:
            ev = self._sp_event()
            return (yield from ev._core.wait(ev, None))
        if self._state != _PENDING:
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
