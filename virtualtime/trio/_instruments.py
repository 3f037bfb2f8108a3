"""How the trio clock hears the run: its instruments, and the run's entry queue.

A :class:`~virtualtime.trio.VirtualClock` learns what happens in the run it drives through
trio instruments and one swapped container:

* :class:`EndInstrument` tells the clock that the run ended (installed for every run);
* :class:`ClockInstrument` records every task that becomes runnable (a bare ``list.append``)
  and, after each I/O poll, carries out the jump the clock planned when trio asked how long to
  sleep (the plan is one of the ``PLAN_*`` values below; the common jump is inlined there, as
  the hot path of every jump).  It is installed when the run first goes idle (or first uses
  a kit wait), not when the run starts: until then there is nothing to decide, and a short
  run -- one that never waits for anything -- pays none of its calls (the clock then reads
  every task once, see ``VirtualClock._hook``);
* :class:`ProbeInstrument`, installed only while the clock answers with a probe, sees the
  timeout of the next I/O wait (how the clock learns that a task waits in
  ``wait_all_tasks_blocked``);
* :class:`PaceInstrument`, installed only on a clock with ``rate_strict``, checks after each
  I/O poll that the run has not fallen too far behind real time;
* :func:`listen_to` makes the run's entry queue tell the clock of every call another thread
  makes into the run (``trio.from_thread``, anyio's portals), before the call is queued.

Instrument hooks must never raise (trio would remove the instrument), so a failure is handed
to the clock, which raises it on the run's next turn.

Each instrument names its hooks in ``__dir__``: trio's ``add_instrument`` finds an
instrument's hooks by walking ``dir(instrument)`` (some forty names, sorted, each looked up on
``trio.abc.Instrument``), which was a sizeable part of what a short run costs; the short list
gives it the same answer.

Part of ``trio``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

import collections
import math
import typing
from collections import abc as _abc

import trio
import trio.lowlevel

from .._shared import _time
from . import _park
from ._exact import FINE_LIMIT, FINE_NOISE

if typing.TYPE_CHECKING:
    from ._clock import VirtualClock

__all__ = [
    "NO_PLAN",
    "PLAN_DEADLOCK",
    "PLAN_JUMP",
    "PLAN_POLL",
    "ClockInstrument",
    "EndInstrument",
    "PaceInstrument",
    "ProbeInstrument",
    "listen_to",
    "noop",
]

NO_PLAN: typing.Final = 0
PLAN_POLL: typing.Final = 1  # jump after this I/O poll (timeout 0) unless it woke a task
PLAN_JUMP: typing.Final = 2  # probe first (idle waiters, threshold), then jump
PLAN_DEADLOCK: typing.Final = 3


def noop() -> None:
    """Queued with ``run_sync_soon`` only to end the run loop's I/O wait early."""


class ClockInstrument(trio.abc.Instrument):
    """Lets a :class:`VirtualClock` see tasks become runnable and the loop wake up.

    ``task_scheduled`` is the bare ``list.append`` of the clock's list of tasks to look at,
    the cheapest hook trio can call.  Instrument hooks must never raise (trio would remove
    the instrument), so the others only call methods of the clock that cannot fail.
    """

    __slots__ = ("_clock", "task_scheduled")

    def __init__(
        self, clock: VirtualClock, record: _abc.Callable[[trio.lowlevel.Task], None]
    ) -> None:
        self._clock = clock
        self.task_scheduled = record  # type: ignore[method-assign, assignment]

    def __dir__(self) -> list[str]:
        return ["after_io_wait", "task_scheduled"]  # see the module docstring

    def after_io_wait(self, timeout: float) -> None:
        clock = self._clock
        clock._rounds += 1
        if clock._peer_reads:
            try:
                clock._note_answers()
            except BaseException as exc:  # pragma: no cover - a bug in the clock
                clock._failed(exc)
                return
        plan = clock._plan
        if not plan:
            # A turn with nothing planned (a busy run, a kit wait handed on).  A kit wait due
            # now is normally woken when the run is idle; a run kept busy by a task that
            # polls (``while not done: await trio.sleep(0)``) gets it after a few turns.
            kit = clock._kit
            if kit and (clock._rate or kit[0][0] <= clock._ticks):
                _park.busy_turn(clock)
            return
        if plan == PLAN_POLL:
            # The fast path of every jump, inlined: jump unless the poll woke a task (or
            # another thread began to call into the run since the jump was planned).
            clock._plan = NO_PLAN
            if clock._scheduled or clock._said != clock._said_seen:
                return
            deadline = clock._plan_deadline
            if clock._plan_kit >= 0:
                deadline = math.inf  # to a kit wait: _advance_to goes to its tick
            if deadline < FINE_LIMIT:
                # Floats finer than a tick: ticks_until's carried rounding, inlined.
                scaled = (deadline - clock._now) * _time.TICKS_PER_SECOND
                exact = scaled + clock._residue
                ticks = round(exact)
                if ticks >= 1 and scaled > FINE_NOISE:
                    clock._residue = exact - ticks
                    clock._ticks += ticks
                    now = clock._ticks / _time.TICKS_PER_SECOND
                    clock._now = now if now > deadline else deadline
                    clock._jumps += 1
                    clock._hold_since = None
                    return
            try:
                clock._advance_to(deadline)
            except BaseException as exc:  # pragma: no cover - a bug in the clock
                clock._failed(exc)
            return
        try:
            clock._after_io_wait()
        except BaseException as exc:  # pragma: no cover - a bug in the clock
            clock._failed(exc)


class EndInstrument(trio.abc.Instrument):
    """Tells a :class:`VirtualClock` that its run ended (its only hook runs once per run)."""

    __slots__ = ("_clock",)

    def __init__(self, clock: VirtualClock) -> None:
        self._clock = clock

    def __dir__(self) -> list[str]:
        return ["after_run"]  # see the module docstring

    def after_run(self) -> None:
        self._clock._run_ended()


class ProbeInstrument(trio.abc.Instrument):
    """Sees the timeout of the run loop's next I/O wait; installed only while a probe is
    armed (a ``before_io_wait`` hook on every turn would cost every jump a call)."""

    __slots__ = ("_clock",)

    def __init__(self, clock: VirtualClock) -> None:
        self._clock = clock

    def __dir__(self) -> list[str]:
        return ["before_io_wait"]  # see the module docstring

    def before_io_wait(self, timeout: float) -> None:
        clock = self._clock
        try:
            trio.lowlevel.remove_instrument(self)
            clock._probe_installed = False
            clock._before_io_wait(timeout)
        except BaseException as exc:  # pragma: no cover - a bug in the clock
            clock._failed(exc)


class PaceInstrument(trio.abc.Instrument):
    """Checks, after each I/O poll, that no wake-up is due further back than the clock's
    ``rate_strict`` allows; installed only on a clock with that option (a hook on every turn
    would cost every other clock's jumps a call)."""

    __slots__ = ("_clock",)

    def __init__(self, clock: VirtualClock) -> None:
        self._clock = clock

    def __dir__(self) -> list[str]:
        return ["after_io_wait"]  # see the module docstring

    def after_io_wait(self, timeout: float) -> None:
        clock = self._clock
        if not clock._rate:
            return
        try:
            clock._keep_pace()
        except BaseException as exc:  # pragma: no cover - a bug in the clock
            clock._failed(exc)


class _HeardQueue(collections.deque[typing.Any]):
    """The run's queue of ``run_sync_soon`` calls, telling the clock of each call first."""

    __slots__ = ("_heard",)

    def __init__(self, items: _abc.Iterable[typing.Any], heard: _abc.Callable[[], None]) -> None:
        super().__init__(items)
        self._heard = heard

    def append(self, item: typing.Any) -> None:
        self._heard()
        super().append(item)


class _HeardSet(dict[typing.Any, None]):
    """The run's queue of idempotent ``run_sync_soon`` calls (a dict used as an ordered set),
    telling the clock of each call first."""

    __slots__ = ("_heard",)

    def __init__(
        self, items: _abc.Mapping[typing.Any, None], heard: _abc.Callable[[], None]
    ) -> None:
        super().__init__(items)
        self._heard = heard

    def __setitem__(self, key: typing.Any, value: None) -> None:
        self._heard()
        super().__setitem__(key, value)


def listen_to(
    token: trio.lowlevel.TrioToken, heard: _abc.Callable[[], None]
) -> tuple[collections.deque[typing.Any], dict[typing.Any, None]] | None:
    """Make ``heard()`` run in any thread that calls ``token.run_sync_soon``, before the call.

    Every way into a trio run from another thread -- ``trio.from_thread``, anyio's
    ``BlockingPortal`` and ``from_thread``, ``TrioToken.run_sync_soon`` itself -- ends in
    that method, and it puts the call on the run's entry queue, in the calling thread, under
    the queue's lock.  trio offers no hook there (an instrument sees the run's own thread
    only, after the fact: not who called).  So the clock swaps the queue's two containers for
    subclasses that call ``heard()`` as they are filled; everything else about them -- the
    atomic appends the queue relies on, what the run reads from them -- is the deque's and
    the dict's own.  One run's token only: no other run, and nothing global, is touched.

    trio-private: ``TrioToken._reentry_queue`` and its ``queue``/``idempotent_queue`` fields
    (a deque and a dict, trio 0.22 to 0.32+), set once when the run starts.  A canary test
    (``tests/test_trio_outside.py``) pins them; if they change shape, nothing is swapped
    (None) and the clock no longer hears other threads -- the portal race comes back, but
    nothing breaks.

    Returns the two containers now in place (the clock reads their length: a callback is
    queued, so the run wakes at once), or None.
    """
    entry = getattr(token, "_reentry_queue", None)
    queue = getattr(entry, "queue", None)
    idempotent = getattr(entry, "idempotent_queue", None)
    if isinstance(queue, _HeardQueue) and isinstance(idempotent, _HeardSet):
        return queue, idempotent  # swapped already (a second clock hook on the same run)
    if type(queue) is not collections.deque or type(idempotent) is not dict:
        return None
    swapped = _HeardQueue(queue, heard), _HeardSet(idempotent, heard)
    entry.queue, entry.idempotent_queue = swapped  # type: ignore[union-attr]
    return swapped
