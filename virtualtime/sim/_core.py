"""SimPy's event core, for ``order="simpy"``: the event queue, events, and processes taking turns.

In ``order="simpy"`` a simulation runs exactly as SimPy 4 runs a model, because it runs the
same machine: a heap of ``(instant, priority, sequence, event)``; a step pops one event and
calls its callbacks in order; a callback that resumes a process lets that process run until
it waits again before the next callback is called.  Starting a process and interrupting one
are *urgent* events (before every ordinary event due at the same instant); everything else --
a timeout, a granted request, a put, a release, a finished process, a decided condition -- is
ordinary, first scheduled first processed.  Waiting on an event that has already been
processed does not suspend.  A failed event that no callback handled ends the run with its
exception.

The kit's processes stay coroutines run by asyncio or trio tasks, so they may await anything
else too.  What makes the order SimPy's is that only one process of the model runs at a time:
the *turn*.  Resuming a process hands it the turn; the process gives it back when it waits on
a kit event again (or ends), and the queue carries on from the callback after the one that
resumed it -- so asyncio and trio, whose schedulers differ, give one and the same order.  A
process that awaits something outside the kit (``anyio.sleep``, a socket) while holding the
turn is let go *adrift* as it suspends (its coroutine runs under a watch,
``_process._holding_turn``): the model carries on without it, and it rejoins the order at its
next kit wait.  On the virtual asyncio loop a process that gives the turn back when nothing else
can happen before the next event moves the clock there in place (the loop's ``_vt_jump_to``,
as the kit's sleeps do) instead of taking a loop round for a timer.

:class:`Core` is the queue and the turn; :class:`Event` the SimPy event (callbacks, value,
``ok``, ``defused``); :class:`Condition` and :class:`ConditionValue` SimPy's conditions.  The
kit's own awaitables (a sleep, a request, a get, a signal, a process) each own one of these
events in ``order="simpy"`` and wait on it with :meth:`Core.wait`.  The default order does not
use this module.

Part of ``sim``: may import ``shared``, ``engine``, ``trace``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import math
from collections.abc import Callable, Generator, Iterator
from heapq import heappop, heappush
from typing import TYPE_CHECKING, Any, Final

from .._shared._errors import UsageError
from .._shared._time import TICKS_PER_SECOND, to_seconds, to_ticks
from ._check import short
from ._fast import trio_module

if TYPE_CHECKING:
    from ._process import Process
    from ._simulation import Simulation

PENDING: Final[Any] = object()
URGENT: Final = 0
NORMAL: Final = 1

Callback = Callable[["Event"], object]
_NEVER: Final = 1e15  # a delay at least this long (math.inf) never ends


class Event:
    """One thing that happens at an instant of an ``order="simpy"`` run (SimPy's ``Event``).

    ``callbacks`` is the list called when the event is processed, then None.  ``kit`` is the
    kit object the event stands for (a request, a signal, a process...), which is what a
    :class:`ConditionValue` shows and what a ``first_of`` returns.
    """

    __slots__ = ("_core", "_defused", "_ok", "_value", "callbacks", "kit")

    def __init__(self, core: Core, kit: Any = None) -> None:
        self._core = core
        self.callbacks: list[Callback] | None = []
        self._ok = True
        self._value: Any = PENDING
        self._defused = False
        self.kit = kit

    @property
    def triggered(self) -> bool:
        return self._value is not PENDING

    @property
    def processed(self) -> bool:
        return self.callbacks is None

    def succeed(self, value: Any = None) -> None:
        if self._value is not PENDING:
            raise UsageError(f"{short(self.kit)} has already been triggered")
        self._ok = True
        self._value = value
        self._core.schedule(self)

    def fail(self, exc: BaseException) -> None:
        if self._value is not PENDING:
            raise UsageError(f"{short(self.kit)} has already been triggered")
        self._ok = False
        self._value = exc
        self._core.schedule(self)

    def value_or_raise(self) -> Any:
        """The value of a processed event, or its exception raised (and then handled)."""
        if self._ok:
            return self._value
        self._defused = True
        raise self._value

    def __repr__(self) -> str:
        state = (
            "processed" if self.callbacks is None else "triggered" if self.triggered else "pending"
        )
        return f"<sim event {state} for {short(self.kit)}>"


class _Turns:
    """How the core hands the turn to a process's task on one backend, and keeps time."""

    __slots__ = ()

    def parker(self) -> Callable[[], Any]:
        """What makes a one-shot waiter (``yield from`` it) a process suspends on until it is
        resumed (its ``set_result`` resumes it)."""
        raise NotImplementedError

    def arm(self, ticks: int) -> None:
        """Call ``core.pump()`` at ``ticks`` (or now, if that has passed)."""
        raise NotImplementedError

    def poke(self) -> None:
        """Call ``core.pump()`` soon, from the loop (not from the caller's stack)."""
        raise NotImplementedError

    def jumper(self) -> Callable[[int, Any], bool] | None:
        """``jump(ticks, task)``: move the clock to ``ticks`` in place, from the process's task
        as it gives the turn back (or takes its own next event), when the loop's next round
        would do only that (then the queue goes on at once); False: arm the timer instead.
        None: the backend never jumps."""
        return None

    def start(self, proc: Process[Any]) -> None:
        """Start the process's task; it holds the turn when it first runs."""
        raise NotImplementedError

    def close(self) -> None:
        """The simulation is over: drop the timer."""


class Core:
    """SimPy's environment: the event heap, the clock of the model, the process whose turn it
    is, and the step that processes events -- paused except while ``Simulation.run`` runs."""

    __slots__ = (
        "_cbs",
        "_clock",
        "_current",
        "_eid",
        "_env",
        "_ev",
        "_heap",
        "_i",
        "_jump",
        "_park",
        "_pumping",
        "active",
        "closed",
        "now",
        "on_step",
        "paused",
        "turns",
    )

    def __init__(
        self,
        env: Simulation,
        clock: Callable[[], float],
        turns: _Turns,
        current: Callable[[], Process[Any] | None],
    ) -> None:
        self._env = env
        self._clock = clock  # the backend's clock, in seconds (ticks: see _loop_ticks)
        self._current = current  # the process running this code (the kit's context variable)
        self.turns = turns
        self._heap: list[tuple[int, int, int, Event]] = []
        self._eid = itertools.count()
        self.now = to_ticks(clock())
        self.active: Process[Any] | None = None
        # The backend's verbs the hot path calls, bound once (see _Turns.park and jump).
        self._park: Callable[[], Any] = turns.parker()
        self._jump: Callable[[int, Any], bool] | None = turns.jumper()
        self._cbs: list[Callback] | None = None
        self._ev: Event | None = None
        self._i = 0
        self._pumping = False
        self.paused = True  # SimPy processes events only inside run()
        self.closed = False
        self.on_step: Callable[[], object] | None = None  # the simulation's _on_step

    def _loop_ticks(self) -> int:
        """The backend's clock in ticks (the hot paths have it written out)."""
        return round(self._clock() * TICKS_PER_SECOND)

    # ------------------------------------------------------------------ the queue

    def schedule(self, ev: Event, priority: int = NORMAL, delay: int = 0) -> None:
        """Put ``ev`` on the heap ``delay`` ticks from now (SimPy's ``env.schedule``)."""
        if self.active is not None or self._pumping:  # from inside the model's turn
            heappush(self._heap, (self.now + delay, priority, next(self._eid), ev))
            return
        # From outside the model's turn (an adrift process, a task that is not a process, a
        # Signal fired from plain code): the model's clock may be behind.
        now = self.now = max(self.now, self._loop_ticks())
        heappush(self._heap, (now + delay, priority, next(self._eid), ev))
        if not self.paused and not self.closed:
            self.turns.poke()

    def timeout(self, ev: Event, delay: float) -> None:
        """Schedule ``ev``, a timeout made with its value (SimPy's ``env.timeout(delay)``),
        ``delay`` seconds from now: :meth:`schedule` for the common case, one frame."""
        if delay < _NEVER:  # longer (math.inf): a timeout that never happens
            if self.active is None and not self._pumping:
                self.schedule(ev, NORMAL, to_ticks(delay))
            else:  # from the process holding the turn (the model's clock is current)
                heappush(
                    self._heap,
                    (self.now + round(delay * TICKS_PER_SECOND), NORMAL, next(self._eid), ev),
                )

    # ------------------------------------------------------------------ the step

    def pump(self, caller: Process[Any] | None = None) -> None:
        """Process events in SimPy's order until a process has the turn, the next event is
        later than now (the timer is armed for it, or -- from ``caller``'s task, about to
        wait -- the clock moves there in place), the run is paused, or nothing is left."""
        if self._pumping or self.active is not None or self.paused or self.closed:
            return
        self._pumping = True
        try:
            self._pump(caller)
        except Exception as exc:  # a callback failed (a store's filter, a _do_get): SimPy's
            self.closed = True  # run() raises it, so the run ends with it here
            self._env._fail(exc)
        finally:
            self._pumping = False

    def _pump(self, caller: Process[Any] | None) -> None:
        # The hottest code of order="simpy": one pass of the loop per event, with what it
        # reads held in locals and SimPy's step (pop, call the callbacks, check the failure)
        # written out in it rather than in helper methods.  (Core.wait calls it directly,
        # with pump's part written out there.)
        heap = self._heap
        env = self._env
        cbs = self._cbs
        if cbs is not None:  # the step a process took the turn in: its other callbacks
            ev = self._ev
            assert ev is not None
            i = self._i
            self._cbs = self._ev = None
            if self._callbacks(ev, cbs, i) or not self._stepped(ev):
                return
        while True:
            if not heap:
                if not env._live:
                    env._core_idle()
                return
            entry = heap[0]
            when = entry[0]
            if when > self.now and when > round(self._clock() * TICKS_PER_SECOND):
                jump = self._jump
                if caller is None or jump is None or not jump(when, caller._task):
                    self.turns.arm(when)
                    return
                caller = None  # one jump per hand-over: the loop keeps its rounds
            heappop(heap)
            self.now = when  # (the simulation reads its last instant from here)
            ev = entry[3]
            cbs = ev.callbacks
            ev.callbacks = None
            if cbs:
                if len(cbs) == 1:  # the usual step: one process resumed (_callbacks, inlined)
                    cbs[0](ev)
                    if self.active is not None or self.paused or self.closed:
                        if not (ev._ok or ev._defused) or self.on_step is not None:
                            self._cbs = cbs  # the step ends at the next pump (_stepped)
                            self._ev = ev
                            self._i = 1
                        return
                elif self._callbacks(ev, cbs, 0):
                    return
            if not ev._ok and not ev._defused:
                self._stepped(ev)
                return
            hook = self.on_step
            if hook is not None:
                hook()

    def _callbacks(self, ev: Event, cbs: list[Callback], i: int) -> bool:
        """Call ``ev``'s callbacks from the ``i``-th on; True if one of them handed the turn
        to a process (or paused or ended the run): the rest wait for the next pump, and so
        does the end of the step, unless nothing is left to do there."""
        n = len(cbs)
        while i < n:
            callback = cbs[i]
            i += 1
            callback(ev)
            if self.active is not None or self.paused or self.closed:
                if i < n or not (ev._ok or ev._defused) or self.on_step is not None:
                    self._cbs = cbs
                    self._ev = ev
                    self._i = i
                return True
        return False

    def _stepped(self, ev: Event) -> bool:
        """The step of ``ev`` is over: a failure nothing handled ends the run (SimPy: "failed
        events are never silently ignored"); False then."""
        if not ev._ok and not ev._defused:
            self.closed = True
            self._env._fail(ev._value)
            return False
        hook = self.on_step
        if hook is not None:
            hook()
        return True

    def run(self) -> None:
        """Un-pause: ``Simulation.run`` is running."""
        self.paused = False
        self.pump()

    def stop_at(self, ticks: int, stop: Callback) -> None:
        """SimPy's ``run(until=T)``: an urgent event at ``T`` that pauses the run."""
        ev = Event(self)
        ev._value = None
        ev.callbacks = [stop]
        heappush(self._heap, (ticks, URGENT, next(self._eid), ev))

    def close(self) -> None:
        self.closed = True
        self.turns.close()

    # ------------------------------------------------------------------ the turn

    def resume(self, proc: Process[Any], ev: Event) -> None:
        """A callback resumed ``proc`` with ``ev``: hand it the turn (SimPy's ``_resume``;
        ``Process._sp_resume`` has it inlined)."""
        if not ev._ok:
            ev._defused = True
        self.active = proc
        parked = proc._parked_on
        if parked is None:
            self.turns.start(proc)
        else:
            proc._parked_on = None
            parked.set_result(ev)

    def give_back(self, proc: Process[Any]) -> None:
        """``proc`` waits again, or has ended: the queue carries on."""
        if self.active is proc:
            self.active = None
            self.pump(proc)

    def let_go(self, proc: Process[Any]) -> None:
        """``proc`` awaits something that is not the kit's while it has the turn: it goes on
        adrift, outside the order, and rejoins it at its next kit wait."""
        if self.active is proc:
            self.active = None
            self.pump()

    def wait(self, ev: Event, withdraw: Callable[[], object] | None) -> Generator[Any, None, Any]:
        """Await ``ev`` from the current task: SimPy's ``yield ev`` in a process.

        ``withdraw`` takes back the kit operation the event stands for when the wait ends in
        an interrupt (or a cancellation) instead of the event.
        """
        proc = self._current()
        if proc is None or proc._env is not self._env:
            return (yield from self._wait_outside(ev))
        pending = proc._pending
        if pending:
            if withdraw is not None:
                withdraw()
            raise pending.pop(0)
        callbacks = ev.callbacks
        while callbacks is not None:
            if self.active is not proc:  # adrift (or not resumed yet): just wait
                callbacks.append(proc._resume_cb)
                proc._target = ev
                parked = proc._parked_on = self._park()
            else:
                heap = self._heap
                if not callbacks and heap and heap[0][3] is ev and self._own_next(heap[0][0], proc):
                    # The process's own event is the next one (its timeout, usually): SimPy's
                    # step would pop it and resume this process at once, so it just goes on.
                    heappop(heap)
                    ev.callbacks = None
                    break
                callbacks.append(proc._resume_cb)
                proc._target = ev
                parked = proc._parked_on = self._park()
                # give_back and pump, inlined
                self.active = None
                if not (self._pumping or self.paused or self.closed):
                    self._pumping = True
                    try:
                        self._pump(proc)
                    except Exception as exc:  # (as in pump)
                        self.closed = True
                        self._env._fail(exc)
                    finally:
                        self._pumping = False
            try:
                got = yield from parked
            except BaseException:
                proc._parked_on = None
                target = proc._target
                if target is not None and target.callbacks is not None:
                    _discard(target.callbacks, proc._resume_cb)
                proc._target = None
                if withdraw is not None:
                    withdraw()
                self.give_back(proc)
                raise
            proc._target = None
            if got is not ev:  # an interruption
                if withdraw is not None:
                    withdraw()
                return got.value_or_raise()
            callbacks = ev.callbacks
        if ev._ok:  # value_or_raise, inlined
            return ev._value
        ev._defused = True
        raise ev._value

    def _own_next(self, when: int, proc: Process[Any]) -> bool:
        """Can the process holding the turn take the next event, due at ``when``, itself?
        Yes when it is due now, or when the clock can move there in place (the loop would
        otherwise take a round only to wake this task); the clock of the model moves.  Not
        while a step is unfinished, the run paused or over, or a step hook watches."""
        if self._cbs is not None or self.paused or self.closed or self.on_step is not None:
            return False
        if when > self.now and when > round(self._clock() * TICKS_PER_SECOND):
            jump = self._jump
            if jump is None or not jump(when, proc._task):
                return False
        self.now = when
        return True

    def _wait_outside(self, ev: Event) -> Generator[Any, None, Any]:
        """A task that is not one of the model's processes waits for ``ev`` to be processed
        (it takes no turn: it is outside the model, as the code driving a SimPy run is)."""
        if ev.callbacks is not None:
            parked = self._park()
            ev.callbacks.append(lambda e: parked.set_result(e))
            yield from parked
        return ev.value_or_raise()


def _discard(callbacks: list[Callback], callback: Callback) -> None:
    with contextlib.suppress(ValueError):
        callbacks.remove(callback)


# --------------------------------------------------------------------------- backends


class _Parked:
    """A one-shot waiter on trio (a future's part the core needs): the waiting task parks
    with trio's low-level ``wait_task_rescheduled`` and ``set_result`` reschedules it -- what
    a ``trio.Event`` would do for its one waiter, without its parking lot."""

    __slots__ = ("_set", "_task", "_value")

    def __init__(self) -> None:
        self._set = False
        self._task: Any = None  # the task parked on it, until it is rescheduled or cancelled
        self._value: Any = None

    def set_result(self, value: Any) -> None:
        self._value = value
        self._set = True
        task = self._task
        if task is not None:
            self._task = None
            trio_module().lowlevel.reschedule(task)

    def done(self) -> bool:
        return self._set

    def _abort(self, _: Any) -> Any:
        """Cancelled while parked: it will not be rescheduled (set_result finds no task)."""
        self._task = None
        return trio_module().lowlevel.Abort.SUCCEEDED

    def __await__(self) -> Generator[Any, None, Any]:
        if not self._set:  # resumed already: no checkpoint (it would look foreign)
            lowlevel = trio_module().lowlevel
            self._task = lowlevel.current_task()
            yield from lowlevel.wait_task_rescheduled(self._abort).__await__()
        return self._value

    __iter__ = __await__  # (the core waits with ``yield from``, as on an asyncio future)


class AsyncioTurns(_Turns):
    """The turn on asyncio: a future per wait, a loop timer for the next instant."""

    __slots__ = ("_core", "_loop", "_timer", "_when")

    def __init__(self, loop: Any) -> None:
        self._loop = loop
        self._core: Core | None = None
        self._timer: Any = None
        self._when = -1

    def parker(self) -> Callable[[], Any]:
        loop = self._loop
        if type(loop).create_future is asyncio.BaseEventLoop.create_future:
            # What the stock create_future makes, without its Python frame.
            return functools.partial(asyncio.Future, loop=loop)
        return loop.create_future  # type: ignore[no-any-return]

    def arm(self, ticks: int) -> None:
        if self._timer is not None:
            if self._when <= ticks:
                return
            self._timer.cancel()
        self._when = ticks
        self._timer = self._loop.call_at(to_seconds(ticks), self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._when = -1
        assert self._core is not None
        self._core.pump()

    def poke(self) -> None:
        assert self._core is not None
        self._loop.call_soon(self._core.pump)

    def jumper(self) -> Callable[[int, Any], bool] | None:
        # The loop's contract with a wait that skips its round (_vt_jump_to, what
        # _fast.jump_to calls): nothing ready, nothing due first, nothing outside; from the
        # task that is about to wait.  Bound once: the core calls it on most hand-overs.
        jump: Callable[[int, Any], bool] | None = getattr(self._loop, "_vt_jump_to", None)
        return jump

    def start(self, proc: Process[Any]) -> None:
        proc._task = self._loop.create_task(proc._body_simpy(), name=proc._name)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class TrioTurns(_Turns):
    """The turn on trio: a driver task keeps the timer and looks after each hand-over."""

    __slots__ = ("_core", "_deadline", "_group", "_poked", "_scope", "_wake")

    def __init__(self, group: Any) -> None:
        self._group = group
        self._core: Core | None = None
        self._deadline = math.inf
        self._poked = False
        self._scope: Any = None
        self._wake: Any = None

    def parker(self) -> Callable[[], Any]:
        return _Parked

    def _kick(self) -> None:
        wake = self._wake
        if wake is not None:
            self._wake = None
            wake.set_result(None)

    def arm(self, ticks: int) -> None:
        when = to_seconds(ticks)
        if when < self._deadline:
            self._deadline = when
            if self._scope is not None:
                self._scope.deadline = when

    def poke(self) -> None:
        self._poked = True
        self._kick()

    def start(self, proc: Process[Any]) -> None:
        self._group.start_soon(proc._body_simpy_trio, name=proc._name)

    async def drive(self) -> None:
        """The driver task: runs for the whole simulation."""
        trio = trio_module()
        core = self._core
        assert core is not None
        while True:
            if self._poked:
                self._poked = False
                core.pump()
                continue
            wake = self._wake = _Parked()  # (a trio.Event's part the driver needs)
            with trio.CancelScope(deadline=self._deadline) as scope:
                self._scope = scope
                await wake
            self._scope = None
            if scope.cancelled_caught:
                self._deadline = math.inf
                core.pump()


# --------------------------------------------------------------------------- conditions


class ConditionValue:
    """What a condition (``a | b``, ``a & b``, :class:`AnyOf`, :class:`AllOf`) gives: the
    operands that had happened when it was decided, with their values (SimPy's
    ``ConditionValue``).

    ``ev in result`` says whether an operand happened; ``result[ev]`` is its value;
    ``result.todict()`` maps each to its value, in operand order.  Nested conditions are
    flattened: the leaves are what you passed.
    """

    __slots__ = ("_pairs",)

    def __init__(self, pairs: list[tuple[Any, Any]] | None = None) -> None:
        self._pairs: list[tuple[Any, Any]] = pairs if pairs is not None else []

    @property
    def events(self) -> list[Any]:
        """The operands that happened, in operand order."""
        return [kit for kit, _ in self._pairs]

    def __getitem__(self, key: Any) -> Any:
        # dict(self._pairs)[key] without building the dict (a first_of reads one on every
        # wait): the last pair whose operand equals ``key``
        for kit, value in reversed(self._pairs):
            if kit is key or kit == key:
                return value
        return dict(self._pairs)[key]  # the KeyError of an operand that did not happen

    def __contains__(self, key: object) -> bool:
        for kit, _ in self._pairs:  # noqa: SIM110 - no generator: a first_of asks on every wait
            if kit is key:
                return True
        return False

    def __iter__(self) -> Iterator[Any]:
        return iter(self.events)

    def __len__(self) -> int:
        return len(self._pairs)

    def keys(self) -> Iterator[Any]:
        return iter(self.events)

    def values(self) -> Iterator[Any]:
        return (value for _, value in self._pairs)

    def items(self) -> Iterator[tuple[Any, Any]]:
        return iter(list(self._pairs))

    def todict(self) -> dict[Any, Any]:
        return dict(self._pairs)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ConditionValue):
            return self._pairs == other._pairs
        if isinstance(other, dict):
            return self.todict() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<ConditionValue {self.todict()!r}>"


class Condition(Event):
    """SimPy's condition over events: decided when an operand is processed (``any``: the
    first; ``all``: the last; a failed operand fails it), processed one step later, when its
    value is built from every operand processed by then."""

    __slots__ = ("_all", "_count", "_events")

    def __init__(self, core: Core, events: tuple[Event, ...], all_: bool, kit: Any) -> None:
        super().__init__(core, kit)
        self._all = all_
        self._events = events
        self._count = 0
        if not events:
            self.succeed(ConditionValue())
            return
        check = self._check
        for ev in events:
            if ev.callbacks is None:
                check(ev)
            else:
                ev.callbacks.append(check)
        assert self.callbacks is not None
        self.callbacks.append(self._build)

    def _check(self, ev: Event) -> None:
        if self._value is not PENDING:
            return
        self._count += 1
        if not ev._ok:
            ev._defused = True
            self.fail(ev._value)
        elif not self._all or self._count == len(self._events):
            self.succeed()

    def _populate(self, pairs: list[tuple[Any, Any]]) -> None:
        for ev in self._events:
            if isinstance(ev, Condition):
                ev._populate(pairs)
            elif ev.callbacks is None:
                pairs.append((ev.kit, ev._value))

    def _unhook(self) -> None:
        check = self._check
        for ev in self._events:
            if ev.callbacks:
                _discard(ev.callbacks, check)
            if isinstance(ev, Condition):
                ev._unhook()

    def _build(self, _: Event) -> None:
        self._unhook()
        if self._ok:
            pairs: list[tuple[Any, Any]] = []
            self._populate(pairs)
            self._value = ConditionValue(pairs)
