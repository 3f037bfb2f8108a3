"""Kit waits: sleeping until an exact tick on a :class:`~virtualtime.trio.VirtualClock`, cheaply.

A plain trio sleep costs a cancel scope, a deadline in trio's heap, a second loop round and
trio's cancellation bookkeeping -- about five times a bare loop round.  The simulation toolkit
(``virtualtime.sim``: ``Timer``, the vehicles of a ``Fleet``) sleeps millions of times and
only ever needs "wake me at tick T, or earlier if I say so".  This module gives it that,
through trio's public API only:

* :func:`park`: the task parks itself with ``trio.lowlevel.wait_task_rescheduled``; its
  wake-up ``(ticks, arrival, handle)`` goes into a heap the clock owns.  The clock treats the
  heap's head as one more deadline: when the run is idle, it jumps to whichever comes first,
  the head or trio's next deadline, after trio has polled I/O exactly as for any jump (see
  the clock's module documentation), and reschedules the woken task itself.  Cancellation
  reaches a parked task through its abort function (the heap entry is dropped lazily), so
  timeouts, ``Ctrl-C`` and the clock's deadlock clean-up work as around any trio wait.
  ``handle.cancel()`` wakes the task early (the wait then returns False).
* :func:`can_jump_in_place` and :func:`arrive`: when the waiting task is the only thing that
  can happen before its instant, the next loop round would do nothing but jump there and wake
  it; the clock jumps in place and the task goes on without suspending (the toolkit does the
  same on the asyncio loop, ``virtualtime/sim/_fast.py``).  One wait in :data:`ROUND_EVERY`
  takes the round anyway.

The ordering rule at one instant
--------------------------------
* Among kit waits: first come, first served (by the order the waits were parked), one at a
  time -- the next one is woken when everything the previous one set off at that instant has
  run (the run is idle again).  Wake-ups the toolkit causes join the queue at the instant they
  happen, as a ``call_soon`` would on asyncio: a one-shot result settled (:func:`hold`,
  :func:`release`), an early wake (:meth:`Parked.cancel`: an interrupt), a process's first
  step (:func:`start`: its task is spawned in its turn), a ``sleep(0)`` or a condition's
  helper task (:func:`turn`, in a place :func:`reserve` took when it was started).  trio
  randomises the order of tasks woken in the same loop round; waking kit
  waits one by one keeps their order fixed.  Quiet waits (see
  :func:`wake_next`: vehicle steps that touch nothing but their vehicle) due together share
  one round, which nobody can tell apart from one by one.
* Against trio's own deadlines (``trio.sleep``, ``move_on_after``...) due at the same instant
  (within float noise): trio's deadlines fire first; the kit waits at that instant wake once
  the tasks those deadlines woke are idle again.

What "the only thing that can happen" means
-------------------------------------------
The in-place jump needs all of: the clock in pure virtual time with autojump and no threshold,
nothing outside the run pending (no worker thread, child, outside socket, no task waiting on a
descriptor or in ``wait_all_tasks_blocked``); the calling task the only one made runnable since
the run was last idle (the clock's instrument records every ``reschedule``, so a task the
caller woke, started or cancelled is seen); no kit wait due at or before the instant; trio's
next deadline strictly later (``current_statistics()``: read once per loop round, and again
after :func:`fresh`, which the toolkit calls at each ``Timer.run`` and each journey, so a
``fail_after`` entered around them is seen; the read costs as much as ten cheap checks); no
callback queued from another thread (same read); and no cancellation pending for the task
(``trio.lowlevel.checkpoint_if_cancelled()``, awaited by the caller every time -- an action
may just have cancelled the scope the timer runs in; ``trio.current_effective_deadline()``
would say the same at ten times the cost in a deep stack of scopes).

One thing trio gives no cheap public way to see: code running in the waiting task between
two of its waits (a timer action, a vehicle callback) that moves the deadline of an
*existing* cancel scope earlier (``scope.deadline = ...``, on a scope around the timer or one
another task sleeps in), with no checkpoint in between.  That deadline is seen at the next
loop round (at most :data:`ROUND_EVERY` waits later), not at once.  Cancelling a scope
(``scope.cancel()``) is seen at once: it reschedules the tasks sleeping in it, or is pending
for the waiting task itself.

Part of ``trio``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

import heapq
from collections.abc import Awaitable, Callable
from typing import Any, Final

import outcome
import trio
import trio.lowlevel
import trio.testing

from .._shared._time import TICKS_PER_SECOND, to_ticks

__all__ = [
    "NOISE",
    "PATIENCE",
    "ROUND_EVERY",
    "Held",
    "Parked",
    "arrive",
    "busy_turn",
    "can_jump_in_place",
    "fresh",
    "head",
    "hold",
    "park",
    "now_ticks",
    "prune",
    "queue_now",
    "release",
    "reserve",
    "sleep",
    "start",
    "turn",
    "wake_next",
]

ROUND_EVERY: Final = 256
"""At most this many waits in a row jump in place; then one takes the loop round (a power
of two), so a model that never needs the loop still lets trio deliver signals, thread
callbacks and what the in-place check cannot see."""

NOISE: Final = 1.0 + 16 * 2.0**-52
"""A trio deadline closer above an instant than this factor (8 ulps either way) is the same
instant spelled in floats (trio computes ``now + delay``): it fires first."""

PATIENCE: Final = 8
"""Busy loop turns in a row, with a kit wait due, after which :func:`busy_turn` wakes it."""

_PRUNE_AT: Final = 256
"""Dead heap entries (cancelled or woken-early waits) tolerated before pruning, if they are
also more than half of the heap."""

_heappush: Final = heapq.heappush
_heappop: Final = heapq.heappop
_reschedule: Final = trio.lowlevel.reschedule
_wait_task_rescheduled: Final = trio.lowlevel.wait_task_rescheduled
_current_statistics: Final = trio.lowlevel.current_statistics
_active_thread_count: Final = trio.testing.active_thread_count
_SUCCEEDED: Final = trio.lowlevel.Abort.SUCCEEDED
_Value: Final = outcome.Value


class Parked:
    """One task parked on the clock until a tick; :meth:`cancel` wakes it early.

    Made by :func:`park`; await :meth:`wait` once.  The method is named ``cancel`` so that
    code holding either this or a ``trio.CancelScope`` (the fallback on other clocks) can
    end the sleep the same way.
    """

    __slots__ = ("clock", "order", "quiet", "task", "ticks", "value")

    def __init__(
        self,
        clock: Any,
        task: trio.lowlevel.Task,
        quiet: Callable[[], bool] | None = None,
        ticks: int = -1,
    ) -> None:
        self.clock = clock
        self.task: trio.lowlevel.Task | None = task
        """The parked task; None once it was woken, woken early, or cancelled."""
        self.quiet = quiet
        """Asked when the wait comes due: True if what the task does next touches nothing but
        its own state (see :func:`wake_next`)."""
        self.order = 0
        """Set when the clock wakes the task: its place for its next wait (see :func:`sleep`)."""
        self.ticks = ticks
        """The tick it sleeps until, if it was parked at an earlier instant; -1 for a wait
        queued at its own instant (:func:`turn`, :func:`release`)."""
        self.value = True
        """What its :meth:`wait` returns: False once :meth:`cancel` woke it early."""

    def cancel(self) -> None:
        """Wake the task early (its :meth:`wait` returns False), in its turn at this instant:
        behind every wait queued here before (an asyncio future's wake-up is a ``call_soon``).

        Nothing if it is not parked, or if it is due at this instant already: its end came
        first (on asyncio, every timer due at an instant fires before any task runs there),
        so it returns True as planned.
        """
        task = self.task
        if task is None or not self.value:
            return
        clock = self.clock
        if 0 <= self.ticks <= now_ticks(clock):
            return
        self.value = False
        clock._kit_dead += 1  # its first entry, dead once this one has woken it
        queue_now(clock, self)

    def _abort(self, raise_cancel: Any) -> trio.lowlevel.Abort:
        self.task = None  # the heap entry is dropped when it reaches the top (or pruned)
        self.clock._kit_dead += 1
        return _SUCCEEDED

    def wait(self) -> Awaitable[bool]:
        """Await it to sleep until the tick (True) or until :meth:`cancel` (False); a
        cancellation of the task (a timeout, the run ending) raises ``trio.Cancelled`` as any
        trio wait.  (trio's own wait, returned as is: one coroutine less per wait.)"""
        return _wait_task_rescheduled(self._abort)


class Held(Parked):
    """A kit wait with no tick of its own: the task waits until :func:`release` queues it.

    What an asyncio future is to a task that awaits it: the toolkit's one-shot results (a
    process joined, a resource granted, a signal fired) wake their waiter through the clock's
    first-come first-served queue, at the instant they are settled, instead of through
    ``trio.lowlevel.reschedule`` (trio runs the tasks woken in one loop round in random order).
    """

    __slots__ = ("queued",)

    def __init__(self, clock: Any, task: trio.lowlevel.Task) -> None:
        super().__init__(clock, task)
        self.queued = False
        """Whether :func:`release` has put it in the clock's heap."""

    def _abort(self, raise_cancel: Any) -> trio.lowlevel.Abort:
        self.task = None
        if self.queued:  # a dead heap entry now (never counted while it was not in the heap)
            self.clock._kit_dead += 1
        return _SUCCEEDED


class Starting(Parked):
    """A task not spawned yet, queued for its first step like a :func:`turn`: ``spawn`` is
    called when its turn comes, instead of waking a task already parked.

    Spawning a task only to park it at once costs a loop round and a wait; a process of the
    toolkit is started this way instead (see :func:`start`).  Its :attr:`Parked.task` is
    :data:`NOT_SPAWNED` while it is queued, None once spawned or dropped.
    """

    __slots__ = ("spawn",)

    def __init__(self, clock: Any, spawn: Callable[[], object]) -> None:
        super().__init__(clock, NOT_SPAWNED)
        self.spawn = spawn

    def drop(self) -> bool:
        """Take it out of the queue (the entry is dead); whether it was still queued."""
        if self.task is None:
            return False
        self.task = None
        self.clock._kit_dead += 1
        return True


NOT_SPAWNED: Final[Any] = object()
"""The task of a :class:`Starting` entry still queued."""


def start(clock: Any, spawn: Callable[[], object], order: int = 0) -> Starting:
    """Queue a task's first step at the current instant, in the place ``order`` (one
    :func:`reserve` took; 0: behind every wait so far): ``spawn()`` -- which must start the
    task and must not raise -- is called when every wait queued before it has had its turn,
    from inside the run loop (or from :func:`park`, in the task that parks).  So the task's
    first step is the step a task that took its :func:`turn` first would make, without the
    spawn's own round."""
    entry = Starting(clock, spawn)
    queue_now(clock, entry, order)
    return entry


def hold(clock: Any, task: trio.lowlevel.Task) -> Held:
    """A wait for the calling ``task`` that only :func:`release` ends; await its
    :meth:`Parked.wait` right away (it returns True)."""
    return Held(clock, task)


def release(clock: Any, held: Held) -> None:
    """Queue ``held`` at the current instant, behind every wait queued so far: the clock wakes
    it when the run is idle, one wait at a time (asyncio's ``call_soon`` order).  Nothing if it
    is queued already or its task was cancelled."""
    if held.queued or held.task is None:
        return
    held.queued = True
    queue_now(clock, held)


def turn(clock: Any, task: trio.lowlevel.Task, order: int = 0) -> Parked:
    """Queue the calling ``task`` at the current instant and return its wait (await
    :meth:`Parked.wait` right away): it runs on when every wait queued before it at this
    instant has had its turn.  ``order``: a place taken earlier with :func:`reserve` (a helper
    task of a condition takes one when it is started, so helpers started together first run
    in the order they were started, as on asyncio; a process's start is queued with
    :func:`start` instead); 0: behind every wait so far (``sim.sleep(0)``)."""
    parked = Parked(clock, task)
    queue_now(clock, parked, order)
    return parked


def now_ticks(clock: Any) -> int:
    """``clock``'s current tick (paced by real time, with a ``rate``)."""
    if clock._rate:
        return to_ticks(clock._anchor.virtual())
    ticks: int = clock._ticks
    return ticks


def queue_now(clock: Any, parked: Parked, order: int = 0) -> None:
    """Put ``parked`` in ``clock``'s heap at the current tick, in the place ``order`` (one
    :func:`reserve` took; 0: a new place, behind every wait so far)."""
    if not clock._hooked:
        clock._hook()  # a kit wait needs the clock's instrument (its busy turns, its rounds)
    _heappush(clock._kit, (now_ticks(clock), order or reserve(clock), parked))


def reserve(clock: Any) -> int:
    """A place in the first-come first-served order at one instant, taken now for a wait
    that will start later (pass it to :func:`sleep` as ``order``).  The toolkit takes one
    when a vehicle is commanded: trio starts the tasks of one turn in random order, and the
    order of commands is the one the asyncio loop keeps."""
    clock._kit_count += 1
    count: int = clock._kit_count
    return count


def park(
    clock: Any,
    ticks: int,
    task: trio.lowlevel.Task,
    order: int = 0,
    quiet: Callable[[], bool] | None = None,
) -> Parked:
    """Queue ``task`` (the calling task) on ``clock`` until tick ``ticks``; await the result's
    :meth:`Parked.wait` right away.

    When the calling task is the only one made runnable since the run was last idle (so the
    run is idle again as soon as it parks), the next kit wait due now is handed the turn
    here -- what the clock's next idle question would do, without asking it.
    """
    if not clock._hooked:
        clock._hook()  # as in queue_now
    parked = Parked(clock, task, quiet, ticks)
    if not order:
        clock._kit_count += 1
        order = clock._kit_count
    kit = clock._kit
    if clock._kit_dead > _PRUNE_AT and 2 * clock._kit_dead > len(kit):
        prune(clock)
    _heappush(kit, (ticks, order, parked))
    if quiet is not None:
        # Only a vehicle's driver parks with ``quiet``: a task the toolkit started itself, so
        # its chain of awaits is the toolkit's and ends here (never inside a from_thread job or
        # on a socket).  The clock's _absorb skips reading it while it is still parked.
        clock._kit_own[task] = parked
    scheduled = clock._scheduled
    if (
        len(scheduled) == 1
        and scheduled[0] is task
        and clock._plain
        and not clock._waits
        and not clock._inside_io
    ):
        # The clock's _absorb would learn nothing from this task (a kit wait is inside the
        # run): forget it, so that the task handed the turn is alone in the list in its turn.
        scheduled.clear()
        if kit[0][0] <= clock._ticks:
            wake_next(clock, clock._ticks)
    return parked


def prune(clock: Any) -> None:
    """Drop the entries of waits cancelled or woken early (kept until they reach the top
    otherwise: a timer changed many times while it sleeps towards a far instant, behind an
    earlier wait, would pile them up)."""
    kit = clock._kit
    kit[:] = [entry for entry in kit if entry[2].task is not None]
    heapq.heapify(kit)
    clock._kit_dead = 0


def wake_next(clock: Any, now: int) -> bool:
    """Wake the first kit wait due at or before tick ``now``; whether there was one.

    Called by the clock from inside the run loop (an idle question or an instrument hook),
    where ``trio.lowlevel.reschedule`` is allowed.  Entries of waits that were cancelled or
    woken early are dropped on the way.

    Quiet waits share a loop turn.  A wait parked with ``quiet`` whose ``quiet()`` says True
    when it comes due (a vehicle's step that only moves the vehicle: no callback, no arrival,
    no redirect) is woken together with the quiet waits that follow it at that instant, up to
    the first that is not: trio runs them in either order, which nobody can tell apart, since
    each touches only its own vehicle and nothing else runs in that turn.  Each woken wait
    gets its place for its next wait (:attr:`Parked.order`) here, in first-come first-served
    order, so the order stays the same as if they had run one by one.
    """
    kit = clock._kit
    clock._kit_busy = 0
    while kit:
        entry = kit[0]
        if entry[0] > now:
            return False
        _heappop(kit)
        parked = entry[2]
        task = parked.task
        if task is None:
            continue
        parked.task = None
        clock._kit_count += 1
        parked.order = clock._kit_count
        if task is NOT_SPAWNED:
            parked.spawn()  # a Starting entry
            return True
        _reschedule(task, _Value(parked.value))
        quiet = parked.quiet
        if quiet is None or not quiet():
            return True
        while kit:  # the quiet waits right behind it join its turn
            entry = kit[0]
            if entry[0] > now:
                break
            parked = entry[2]
            task = parked.task
            if task is not None:
                quiet = parked.quiet
                if quiet is None or not quiet():
                    break
                parked.task = None
                clock._kit_count += 1
                parked.order = clock._kit_count
                _reschedule(task, _Value(parked.value))
            _heappop(kit)
        return True
    return False


def busy_turn(clock: Any) -> None:
    """A loop turn in which tasks ran while a kit wait was due (the clock's instrument calls
    this after the turn's I/O poll, where rescheduling is allowed).

    Kit waits due now are woken one at a time when the run is idle; a task that keeps the run
    busy by polling with plain trio checkpoints would hold them back for ever, where asyncio
    would run their ``call_soon`` in turn.  After :data:`PATIENCE` such turns in a row the next
    one is woken anyway.  Must not raise (an instrument hook): a failure goes to the clock.
    """
    clock._kit_busy += 1
    if clock._kit_busy < PATIENCE:
        return
    try:
        wake_next(clock, now_ticks(clock))
    except BaseException as exc:  # pragma: no cover - a quiet() check that failed
        clock._failed(exc)


def head(clock: Any) -> int | None:
    """The tick of the first live kit wait, or None (dead entries on top are dropped)."""
    kit = clock._kit
    while kit:
        entry = kit[0]
        if entry[2].task is not None:
            return int(entry[0])
        _heappop(kit)
    return None


def sleep(
    clock: Any,
    ticks: int,
    task: trio.lowlevel.Task,
    order: int = 0,
    quiet: Callable[[], bool] | None = None,
) -> Parked | None:
    """Start the calling ``task``'s wait until tick ``ticks`` on ``clock``.

    A :class:`Parked`: the task is queued (:func:`park`); await its :meth:`Parked.wait`
    right away.  None: no need to park -- the tick is not in the future, or nothing else
    can happen before it (:func:`can_jump_in_place`); then await
    ``trio.lowlevel.checkpoint_if_cancelled()`` (a cancelled task must not move time; it never
    suspends otherwise) and call :func:`arrive`.  One call for the toolkit's hot loops (a
    vehicle step, a timer dispatch); ``order``: a place taken earlier with :func:`reserve`,
    or the :attr:`Parked.order` the previous wait was woken with (0: the wait queues behind
    every wait parked so far); ``quiet``: see :func:`wake_next`.
    """
    if clock._rate:
        now = to_ticks(clock._anchor.virtual())
        if ticks <= now:
            if clock._rate_strict:
                clock._check_late(ticks, now)  # rate_strict: an instant long past is late
            return None
    elif ticks <= clock._ticks or can_jump_in_place(clock, ticks, task):
        return None
    return park(clock, ticks, task, order, quiet)


def arrive(clock: Any, ticks: int) -> None:
    """Move ``clock`` to tick ``ticks`` in place, after :func:`sleep` returned None (nothing
    if the tick is not in the future)."""
    if not clock._rate and ticks > clock._ticks:
        clock._ticks = ticks
        seconds = ticks / TICKS_PER_SECOND
        if seconds > clock._now:
            clock._now = seconds
        clock._jumps += 1


def fresh(clock: Any) -> None:
    """Forget the in-place verdict of this loop round: call it where the waiting task may just
    have entered a cancel scope with a deadline (``with trio.fail_after(5): await
    timer.run(...)``), which the per-round ``current_statistics()`` read has not seen."""
    clock._kit_round = -1


def can_jump_in_place(clock: Any, ticks: int, task: trio.lowlevel.Task) -> bool:
    """Whether the run's next rounds would only move ``clock`` to tick ``ticks`` and wake the
    calling ``task`` (then :func:`arrive` does it in place, and the task goes on without
    suspending).  False: :func:`park` it.  See the module notes for the rule; the cheap
    refusals come first.  Changes nothing but the counter of waits since a loop round.
    """
    if not clock._plain or clock._waits or clock._inside_io or clock._error is not None:
        return False
    scheduled = clock._scheduled
    if len(scheduled) != 1 or scheduled[0] is not task or ticks <= clock._ticks:
        return False
    kit = clock._kit
    if kit and kit[0][0] <= ticks:
        return False  # another kit wait (perhaps a dead entry: the round drops it) comes first
    clock._kit_skipped += 1
    if not clock._kit_skipped & (ROUND_EVERY - 1):
        return False
    if clock._kit_round != clock._rounds:
        clock._kit_round = clock._rounds
        stats = _current_statistics()
        if stats.run_sync_soon_queue_size or _active_thread_count():
            clock._kit_limit = -1.0  # something from another thread: take the round
        else:
            clock._kit_limit = clock._now + stats.seconds_to_next_deadline
    return bool(ticks / TICKS_PER_SECOND * NOISE < clock._kit_limit)
