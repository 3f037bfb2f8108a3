"""One round of the virtual loop: the hot path (``_run_once``), which must stay one room.

:meth:`CycleMixin._run_once` replaces the stock loop's iteration: pick the next instant (the
*plain round* of a pure simulation, or the general round that purges dead timers, polls, and
asks :meth:`~virtualtime._engine._idle.IdleMixin._vt_idle`), fire every timer due at it in
total order -- in C when the compiled core is there (``_cwake.c``'s ``fire``/``run_ready``
mirror the loops below, and its ``plain_rounds`` runs this whole method, round after round,
for as long as each round is the plain one or a busy one that needs no look outside) -- and
run what is ready.  Without the compiled core the method itself goes on from a plain round to
the next in one call, and returns to ``run_forever`` at the first round that is not plain; a
plain round with one sleep due and nothing ready (the *lone wake-up*) runs the sleeping task's
wake-up itself, without a trip through ``call_soon`` and the ready queue.
It runs once per wake-up of a simulation, so it is written for speed: module globals bound
once, the common cases inlined, no helper call that the plain round does not need.  Keep it
that way: a method call added here costs every wake-up of every program.

Part of ``engine``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import inspect
import time as _time_module
from asyncio import base_events as _base_events
from asyncio import format_helpers as _format_helpers
from collections.abc import Callable
from typing import Any, Final, TypeAlias

from .._shared._errors import UsageError
from .._shared._threads import THREAD_TABLE, thread_table_size
from .._shared._time import TICKS_PER_SECOND
from ._checks import _NEVER
from ._compiled import _core_fire, _core_plain_rounds, _core_run_ready
from ._handles import _WAKERS, _Soon
from ._idle import IdleMixin
from ._timers import WAITER, SleepTimer

__all__ = ["CycleMixin", "Gate"]

Gate: TypeAlias = Callable[[collections.deque[Any], int], int]
"""A gate on the ready queue: ``gate(ready, ntodo) -> ntodo`` (see ``_vt_add_gate``)."""

_real_monotonic: Final = _time_module.monotonic
_thread_table_size: Final = thread_table_size
_threads: Final = THREAD_TABLE
_heappop: Final = heapq.heappop
_heappush: Final = heapq.heappush
_InvalidStateError: Final = asyncio.InvalidStateError
_WAITER: Final = WAITER
_SLEEP_TIMER: Final = SleepTimer
_SLEEP_WAKER: Final = _WAKERS[0]
_OUR_WAKER: Final = _WAKERS[1]

# asyncio-private: the helper Handle._run formats a failed callback with; it took a debug
# parameter during 3.12 (what the running interpreter's Handle._run passes, we pass).
_FORMAT_TAKES_DEBUG: Final = (
    "debug" in inspect.signature(_format_helpers._format_callback_source).parameters
)


def _soon(loop: Any, callback: Any, future: Any, context: Any) -> _Soon:
    """The handle the ready queue would have run ``callback(future)`` from: what a failure
    of a callback run by the lone wake-up is reported with."""
    handle = _Soon()  # type: ignore[call-arg]  # an empty handle (see _Soon)
    handle._context = context
    handle._loop = loop
    handle._callback = callback
    handle._args = (future,)
    handle._cancelled = False
    handle._repr = None
    handle._source_traceback = None
    return handle


class CycleMixin(IdleMixin):
    """The loop's one iteration: choose the instant, fire its timers, run what is ready."""

    def _run_once(self) -> None:
        # asyncio-private: _run_once is the one iteration of the stock loop (run_forever calls
        # it).  Replacing it is the whole point of this class: a stock loop keeps timers in a
        # heap of TimerHandles ordered by float time only (equal times in no particular
        # order) and blocks on the selector until the earliest is due; this one keeps a
        # totally ordered heap, jumps time instead of blocking, and detects deadlocks.
        timers = self._vt_timers
        heap = self._vt_heap
        ready = self._ready  # asyncio-private: the stock loop's deque of ready handles.
        world = self._vt_world
        if (
            _core_plain_rounds is not None
            and self._vt_plain
            and _core_plain_rounds(
                self, heap, ready, timers, world, _threads, ready.popleft, self._vt_callback_failed
            )
        ):
            # The compiled core ran this round and the next ones, for as long as each was
            # the plain round below or a general round with something ready that needs no
            # purge, poll or outside look (it checks _stopping between them, as run_forever
            # does); the next round it could not take is this method's again.
            return
        # The pure-Python rounds: each plain round goes on to the next one in this frame, as
        # the compiled plain_rounds does in C (the call of _run_once, its frame and these
        # locals were 1 to 4 % of a pure-Python wake-up); any other round is taken once, first.
        opening = True
        while True:
            if (
                self._vt_plain
                and not ready
                and heap
                and not timers.cancelled
                and not self._vt_drives
                and not self._vt_rearmed
                and world.calm_at == world.changes  # world.calm(), inlined
                and _thread_table_size() == 1
                and not self._stopping  # asyncio-private: set by stop().
                and (first := heap[0])[0] < self._vt_beyond  # not never, nor past a watched horizon
                # A dead waiter is never counted (see _timers): time must not jump to one.
                and (type(item := first[3]) is not _WAITER or not item.done())
            ):
                # The plain round, the common case of a simulation and of most tests: pure
                # virtual time, nothing ready, no dead entry to drop, nothing outside.  It makes
                # exactly the decisions of the general round below (jump to the head), with a
                # tenth of its tests: each of these is a state the loop keeps up to date.
                now = first[0]
                if now > self._vt_ticks:  # _vt_set_ticks, inlined
                    self._vt_ticks = now
                    seconds = now / TICKS_PER_SECOND
                    if seconds > self._vt_now:
                        self._vt_now = seconds
                    self._vt_instant_count = 0
                if self.call_soon is self._vt_lone and (
                    type(item) is _WAITER or type(item) is _SLEEP_TIMER
                ):
                    # The lone wake-up, the common round of a simulation: one sleep is due at
                    # this instant and nothing is ready.  The round would resolve the sleep's
                    # future, whose one callback (the sleeping task's wake-up) call_soon would
                    # put in the ready queue, and then run it.  The lane runs it at once, in
                    # its context, without the call_soon, the handle and the queue (about a
                    # sixth of a pure-Python wake-up).  Only while call_soon is the loop's own
                    # (_vt_lean_get_debug): a subclass's or a patched one sees every callback.
                    _heappop(heap)
                    if not heap or heap[0][0] > now:  # the only entry due now
                        sleeper: Any = item
                        if type(sleeper) is _WAITER:  # (always this loop's own future)
                            awaited = sleeper
                            value = None
                            ours = True
                        else:  # (taken out now, as the fire loop does: put back if no lane)
                            awaited = sleeper._future
                            value = sleeper._result
                            sleeper._future = None
                            ours = type(awaited) is _WAITER and awaited.get_loop() is self
                        # asyncio-private: Future._callbacks, the (callback, context) pairs.
                        # The lane takes only this loop's own asyncio future, not done yet,
                        # with one callback, on a round within max_rounds_per_instant (the
                        # general round reports the one past it).
                        if (
                            ours
                            and not awaited.done()
                            and (callbacks := awaited._callbacks) is not None
                            and len(callbacks) == 1
                            and self._vt_instant_count < self._vt_max_instant
                        ):
                            callback, context = callbacks[0]
                            if awaited.remove_done_callback(callback) != 1:
                                # Cancelled a moment ago by a signal handler (Ctrl-C under
                                # asyncio.run cancels the main task from one), which scheduled
                                # the callback: the timer wakes nobody, as in the fire loop.
                                del first, item, sleeper, awaited, callbacks, callback, context
                                continue
                            self._vt_instant_count += 1
                            opening = False
                            try:
                                awaited.set_result(value)
                            except _InvalidStateError:
                                pass  # cancelled just now (as above): the callback still runs
                            else:
                                self._vt_fired += 1
                            try:
                                context.run(callback, awaited)
                            except (SystemExit, KeyboardInterrupt):
                                raise
                            except BaseException as exc:
                                self._vt_callback_failed(
                                    _soon(self, callback, awaited, context), exc
                                )
                            # Nothing of the wake-up stays alive in this frame until the next.
                            del first, item, sleeper, awaited, callbacks, callback, context
                            continue
                        if type(sleeper) is not _WAITER:
                            sleeper._future = awaited
                    _heappush(heap, first)  # (the round below takes it the general way)
                history = None
                direct = True
            elif not opening:
                # The round after a plain one is not plain: run_forever's next call takes it
                # (after checking _stopping, as between any two rounds).
                return
            else:
                if (
                    timers.cancelled
                    or len(heap) >= timers.scan_at
                    or (heap and type(item := heap[0][3]) is _WAITER and item.done())
                ):
                    # Cancelled handles, a heap due for its scan, or a dead waiter at the head
                    # (waiters' deaths are found, not counted: see _timers): drop them before
                    # time moves.
                    timers.purge()
                if ready or self._stopping:
                    if self._vt_selector.registered > 1:
                        self._vt_poll(0)
                elif (
                    self._vt_fast
                    and heap
                    and heap[0][0] < _NEVER
                    and not self._vt_drives
                    and world.calm()
                ):
                    # Pure virtual time and nothing at all outside: the decision _vt_idle would
                    # make (jump to the head), without its general bookkeeping.
                    head = heap[0][0]
                    if head > self._vt_ticks:
                        self._vt_set_ticks(head)
                else:
                    self._vt_idle()
                now = self._vt_ticks
                if self._vt_rearmed and heap and heap[0][0] <= now:
                    now = self._vt_rearmed_round(now)
                history = self._vt_history
                direct = not self._debug
            opening = False

            if heap and heap[0][0] <= now:
                fired = 0
                seconds = self._vt_now
                if _core_fire is not None and history is None and direct:
                    # The compiled core: the loop below, in C (no history, not in debug mode).
                    fired, dead, seconds = _core_fire(heap, now, seconds, ready.append)
                    timers.cancelled -= dead
                    if seconds > self._vt_now:
                        self._vt_now = seconds
                    # (Every entry due is gone: the loop below stops at its first test.)
                while heap and heap[0][0] <= now:
                    entry = _heappop(heap)
                    handle = entry[3]
                    if type(handle) is _WAITER:
                        # A native sleep (_vt_wake_after): the entry is the future itself.  A
                        # future already done (cancelled -- by a signal handler too -- or resolved
                        # early) refuses its result: the entry is dead, and was never counted.
                        try:
                            handle.set_result(None)
                        except _InvalidStateError:
                            if history is not None:
                                self._vt_scheduled_at.pop(entry[2], None)
                            continue
                        fired += 1
                        if history is not None:
                            self._vt_record(entry)
                        continue
                    if type(handle) is _SLEEP_TIMER:
                        # asyncio.sleep's timer (call_later): resolve its future here, in timer
                        # order.  No future: it was cancelled in the heap (and counted); a
                        # future already done (its sleep was cancelled) refuses the value.
                        future = handle._future
                        if future is None:
                            timers.cancelled -= 1
                            continue
                        handle._future = None
                        try:
                            future.set_result(handle._result)
                        except _InvalidStateError:
                            continue
                        fired += 1
                        continue
                    handle._scheduled = False
                    if handle._cancelled:
                        timers.cancelled -= 1
                        if history is not None:
                            self._vt_scheduled_at.pop(entry[2], None)
                        continue
                    callback = handle._callback
                    if (
                        direct
                        and history is None
                        and (callback is _SLEEP_WAKER or callback is _OUR_WAKER)
                    ):
                        # The common wake-up of asyncio.sleep: resolve its future here, in timer
                        # order, saving a round trip through the ready queue (the woken task
                        # still runs in this round).  A future already done was cancelled
                        # before its timer came due (or by a signal handler just now): the
                        # timer wakes nobody and does not count as fired, as below.
                        args = handle._args
                        try:
                            args[0].set_result(args[1])
                        except _InvalidStateError:
                            continue
                        fired += 1
                        if handle._when > seconds:  # see call_at
                            seconds = self._vt_now = handle._when
                        continue
                    waker = callback is _SLEEP_WAKER or callback is _OUR_WAKER
                    if waker and handle._args[0].done():
                        # A sleep cancelled before its timer came due (its task has not run
                        # since): the timer wakes nobody, so it neither fires nor is recorded --
                        # exactly like a native sleep's dead entry above.
                        if history is not None:
                            self._vt_scheduled_at.pop(entry[2], None)
                        continue
                    fired += 1
                    if handle._when > seconds:  # see call_at
                        seconds = self._vt_now = handle._when
                    if history is not None:
                        self._vt_record(entry)
                    if direct and waker:
                        # A sleep's timer only resolves its future, whose waiter is then
                        # scheduled.  Resolving it here, in timer order, saves a round trip
                        # through the ready queue; the woken task still runs in this round.
                        try:  # noqa: SIM105 - the hot path: no context manager here
                            handle._args[0].set_result(handle._args[1])
                        except _InvalidStateError:
                            # Cancelled between the two calls by a signal handler: Ctrl-C
                            # under asyncio.run cancels the main task from one.
                            pass
                        continue
                    ready.append(handle)
                self._vt_fired += fired

            rounds = self._vt_instant_count + 1
            self._vt_instant_count = rounds
            if rounds > self._vt_max_instant:
                self._vt_runaway()
            ntodo = len(ready)
            if self._vt_gates:
                ntodo = self._vt_pass_gates(ready, ntodo)
            if self._debug:
                self._vt_run_ready_debug(ntodo)
                return
            popleft = ready.popleft
            if _core_run_ready is not None:
                _core_run_ready(popleft, ntodo, self._vt_callback_failed)
                return
            for _ in range(ntodo):
                todo = popleft()
                if todo._cancelled:
                    continue
                if type(todo) is _Soon:
                    # Handle._run, inlined for the loop's own lean handles (a frame saved on
                    # every wake-up); a failure is reported exactly as Handle._run reports it.
                    args = todo._args
                    try:
                        if len(args) == 1:
                            # A future's callback: every task wake-up.  A call with *args
                            # builds a new argument list and tuple each time; this builds none
                            # (about 3 % of a pure-Python wake-up).
                            todo._context.run(todo._callback, args[0])
                        else:
                            todo._context.run(todo._callback, *args)
                    except (SystemExit, KeyboardInterrupt):
                        raise
                    except BaseException as exc:
                        self._vt_callback_failed(todo, exc)
                else:
                    todo._run()

    # ------------------------------------------------------- gates on the ready queue

    def _vt_add_gate(self, gate: Gate) -> None:
        """Ask ``gate(ready, ntodo) -> ntodo`` before every batch of ready callbacks runs.

        The seam for whatever must decide, round by round, which of the callbacks made
        ready run now and in what order: the seeded shuffle of ``perturb="ready"``, and the
        simulated network's paused hosts.  ``ready`` is the loop's ready deque and ``ntodo``
        how many of its first entries this round would run; the gate may reorder those
        entries, or remove some (a paused host's, to ``ready.extend`` them again later), and
        returns how many of the first entries to run now.  A gate that holds callbacks back
        keeps them alive itself: the loop neither sees nor waits for them, so it must also
        schedule what puts them back (a timer), or the loop may find nothing to do.  Gates
        run in the order they were added.  While any gate is there, the loop takes its
        general round (the compiled rounds, which run the ready queue in C, would bypass it).
        """
        self._vt_gates.append(gate)
        self._vt_update_fast()

    def _vt_remove_gate(self, gate: Gate) -> None:
        """Stop asking ``gate`` (added with :meth:`_vt_add_gate`); absent, nothing happens."""
        if gate in self._vt_gates:
            self._vt_gates.remove(gate)
        self._vt_update_fast()

    def _vt_pass_gates(self, ready: collections.deque[Any], ntodo: int) -> int:
        # Each gate, in order, on the batch the previous ones left.
        for gate in tuple(self._vt_gates):
            ntodo = gate(ready, ntodo)
            if type(ntodo) is not int or not 0 <= ntodo <= len(ready):
                raise UsageError(
                    f"a gate of the ready queue ({gate!r}) must return how many of the first "
                    f"ready callbacks to run, an int from 0 to {len(ready)}; it returned "
                    f"{ntodo!r}"
                )
        return ntodo

    def _vt_callback_failed(self, handle: asyncio.Handle, exc: BaseException) -> None:
        # asyncio-private: what Handle._run does when a callback raises (its message, built
        # with format_helpers, the handle and where it was made) -- for the inlined run above.
        base: Any = _format_helpers
        callback: Any = handle._callback  # type: ignore[attr-defined]
        args: Any = handle._args
        if _FORMAT_TAKES_DEBUG:
            source = base._format_callback_source(callback, args, debug=self.get_debug())
        else:  # 3.11 and early 3.12: the helper has no debug parameter
            source = base._format_callback_source(callback, args)
        context: dict[str, Any] = {
            "message": f"Exception in callback {source}",
            "exception": exc,
            "handle": handle,
        }
        if handle._source_traceback:  # type: ignore[attr-defined]
            context["source_traceback"] = handle._source_traceback  # type: ignore[attr-defined]
        self.call_exception_handler(context)

    def _vt_run_ready_debug(self, ntodo: int) -> None:
        # Debug mode, as the stock loop: record the current handle and log slow callbacks,
        # measured in *real* time (virtual time does not move during a callback).
        ready = self._ready
        for _ in range(ntodo):
            handle = ready.popleft()
            if handle._cancelled:
                continue
            try:
                self._current_handle = handle  # asyncio-private: shown in debug reports.
                t0 = _real_monotonic()
                handle._run()
                dt = _real_monotonic() - t0
                if dt >= self.slow_callback_duration:
                    # asyncio-private: the stock loop logs through base_events' module-level
                    # logger with its _format_handle; both are looked up at call time, so
                    # code that patches or filters them sees our reports too.
                    base: Any = _base_events
                    base.logger.warning(
                        "Executing %s took %.3f seconds", base._format_handle(handle), dt
                    )
            finally:
                self._current_handle = None
