"""The kit's time: :func:`sleep` (SimPy's ``timeout``) and :func:`now`.

A sleep is an object (:class:`_Sleep`, :class:`_ValueSleep` when it carries a value) that
waits only when awaited -- and one that never is draws a ``RuntimeWarning``, as a coroutine
does.  Awaiting one is the kit's hottest path, so there are three ways in: on the virtual
asyncio loop the loop's native wait (the future in the timer heap, or no wait at all when
nothing else can happen first), on another asyncio loop a ``call_later`` timer, and on trio
:func:`_sleep_anyio`.  With the compiled core (virtualtime/_engine/_cwake.c) :func:`sleep`,
:func:`now` and the common await run without a Python frame; the pure-Python functions here
(:data:`pure_sleep`, :data:`pure_now`, :meth:`_Sleep._await_general`) stay the reference.

Part of ``sim``: may import ``shared``, ``engine``, ``trace``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

import asyncio
import types
import warnings
from collections.abc import Generator
from heapq import heappush as _heappush
from typing import TYPE_CHECKING, Any, Final

from .._shared._time import delay_ticks, to_ticks
from ._check import check_positive
from ._core import _NEVER as _NEVER_DELAY
from ._core import NORMAL, Event
from ._fast import jump_by as _jump_by
from ._fast import set_result as _set_result
from ._fast import trio_module
from ._kit import _PROC, _SIM, KitAwaitable, Waiter, _Abandonable, _current, _Waiter
from ._native import EXACT as _EXACT
from ._native import FAR as _FAR
from ._native import core as _core
from ._native import push_after as _push_after
from ._native import wake_after as _wake_after

if TYPE_CHECKING:
    from ._process import Process
    from ._simulation import Simulation

__all__ = ["now", "sleep"]


_Future: Final = asyncio.Future
_KIT_SLEEP: Final[Any] = None if _core is None else _core.KitSleep
_TPS: Final = 1e9  # ticks per second of the virtual loop's integer clock
_FAR_SECONDS: Final = 1e15  # sleeps this long (math.inf) on trio keep the cancel-scope path


def now() -> float:
    """The current simulation's time (after the run: the instant it ended)."""
    env = _SIM.get(None)
    if env is None:
        return _current("sim.now()").now
    final = env._final
    return env._clock() if final is None else final


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
            yield from _sleep_anyio(env, self._delay)
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


_kit_await: Final[Any] = None if _KIT_SLEEP is None else _KIT_SLEEP.__await__
_new_sleep: Final = _SleepBase.__new__


def _drop_native(future: asyncio.Future[Any]) -> None:
    """A native wait (:func:`~._fast.wake_after`) given up: make it done if the loop has not
    resolved it, so that its heap entry is dead (the loop finds dead entries itself)."""
    if not future.done():
        future.cancel()


@types.coroutine
def _sleep_anyio(env: Simulation, delay: float) -> Generator[Any, Any, None]:
    """:func:`sleep` on trio: a kit wait on virtualtime's trio clock, else a cancel scope.

    A generator-based coroutine, not ``async def``: the sleep's ``__await__`` yields from it
    directly (no coroutine and no ``__await__`` wrapper between it and trio's trap, which
    every resumption would pass through), and ``await`` works on it as on a coroutine.
    """
    proc = _PROC.get()
    if proc is not None and proc._pending:
        raise proc._pending.pop(0)
    clock = env._park
    if clock is not None and delay < _FAR_SECONDS:
        lowlevel = trio_module().lowlevel
        task = lowlevel.current_task()
        if delay > 0:
            # A kit wait (virtualtime/trio/_park.py), the Timer's rounding: the instant is the
            # current tick plus the delay in ticks (the clock is the run's: its current_time()
            # is trio.current_time()).  Interrupts wake it early (Process.interrupt).
            ticks = to_ticks(clock.current_time()) + delay_ticks(delay)
            clock._vt_fresh()  # the process may just have entered a move_on_after
            parked = clock._vt_sleep(ticks, task)
            if parked is None:  # nothing else can happen first: time moves in place
                yield from lowlevel.checkpoint_if_cancelled()  # a cancelled task moves no time
                clock._vt_arrive(ticks)
                return
        else:  # sleep(0): every kit wait queued before it at this instant runs first
            yield from lowlevel.checkpoint_if_cancelled()
            parked = clock._vt_turn(task)
        if proc is None:
            yield from parked.wait()  # nobody can interrupt it: only a cancellation ends it early
            return
        proc._parked = parked
        try:
            awake = yield from parked.wait()
        finally:
            proc._parked = None
        if not awake:
            pending = proc._pending
            assert pending, "a parked kit sleep is woken early only by an interrupt"
            raise pending.pop(0)
        return
    yield from _sleep_scope(env, proc, delay)


@types.coroutine
def _sleep_scope(
    env: Simulation, proc: Process[Any] | None, delay: float
) -> Generator[Any, Any, None]:
    """:func:`_sleep_anyio` on a trio clock that is not virtualtime's: a ``move_on_after``."""
    waiter = _Waiter()
    if proc is not None:
        proc._target = waiter
    try:
        with trio_module().move_on_after(delay):
            yield from waiter.__await__()
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


class _ExactSleep(Event, _Abandonable):
    """A sleep in ``order="simpy"``: SimPy's timeout, scheduled when made (so that
    ``t = sim.sleep(5)`` awaited later ends 5 after it was made, as ``env.timeout(5)`` does).

    The sleep is its own SimPy event (one object per sleep, made without ``__init__``: see
    :func:`sleep`); what the event stands for (``kit``) is the sleep itself.
    """

    __slots__ = ("_delay",)
    _delay: float

    @property  # (over Event's slot, left unused: the sleep refers to itself without a cycle)
    def kit(self) -> Any:
        return self

    def _sp_event(self) -> Any:
        return self

    def __await__(self) -> Generator[Any, None, Any]:
        return self._core.wait(self, None)

    def __repr__(self) -> str:
        return f"<sim.sleep({self._delay!r})>"


_new_event: Final = Event.__new__


def sleep(delay: float, value: Any = None) -> KitAwaitable[Any]:
    """Wait ``delay`` of simulated time -- interruptibly (SimPy's ``timeout``); return ``value``.

    ``await sim.sleep(5)`` in a process can be ended early by :meth:`Process.interrupt`;
    ``sim.sleep(p)`` is also what you give :func:`first_of` for "or until ``p`` has passed"
    (``sim.sleep(p, "late")`` makes that branch's value ``"late"``, as SimPy's ``timeout(p,
    value)`` does).  ``delay`` must be >= 0; ``math.inf``, or a delay past the horizon of
    virtual time, waits until interrupted or cancelled.  Like a coroutine, a sleep does
    nothing until awaited, and one that never is draws a ``RuntimeWarning``.
    """
    if _EXACT[0]:
        env = _SIM.get(None)
        core = None if env is None else env._core
        if core is not None:
            if (type(delay) is not float or not delay >= 0) and (  # (a float >= 0 is fine)
                type(delay) not in _NUMBERS
                or not delay >= 0
                or (type(delay) is int and delay > _MAX_FLOAT)
            ):
                delay = _check_sleep(delay)
            # Event.__init__ and the timeout's scheduling, inlined (a frame each per sleep).
            timeout = _new_event(_ExactSleep)
            timeout._core = core
            timeout.callbacks = []
            timeout._ok = True
            timeout._value = value
            timeout._defused = False
            timeout._delay = delay
            if delay < _NEVER_DELAY:  # longer (math.inf): a timeout that never happens
                if core.active is None and not core._pumping:
                    core.timeout(timeout, delay)  # from outside the turn: the general way
                else:  # Core.timeout's usual case, inlined
                    _heappush(
                        core._heap,
                        (core.now + round(delay * _TPS), NORMAL, next(core._eid), timeout),
                    )
            return timeout
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

        def _sleep_compiled(delay: float, value: Any = None) -> KitAwaitable[Any]:
            if value is None and (type(delay) is not int or delay <= _MAX_FLOAT):
                return _kit_sleep(delay)  # type: ignore[no-any-return]
            return pure_sleep(delay, value)

        _sleep_compiled.__doc__ = sleep.__doc__
        _sleep_compiled.__name__ = _sleep_compiled.__qualname__ = "sleep"
        globals()["sleep"] = _sleep_compiled
    globals()["now"] = _core.kit_now
