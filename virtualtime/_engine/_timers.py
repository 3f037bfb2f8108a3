"""The timer queue: a pure, loop-free heap of what is due when.

:class:`TimerQueue` is the kernel of the virtual loop, in the way SimPy's event queue is the
kernel of an ``Environment``: it knows nothing about asyncio, threads or real time, only the
total order of entries -- ``(tick, priority, seq)``: earlier instant first, then smaller
priority, then first pushed first -- and which entries were cancelled.  It can be unit-tested
with plain objects and no event loop.

An entry's *item* is one of three things.

* A *handle*: anything with a boolean ``_cancelled`` attribute and a writable ``_scheduled``
  attribute (asyncio's ``TimerHandle`` has both: ``_scheduled`` tells a cancelled handle
  whether it still sits in a heap, which is how cancellations are counted).
* A *waiter*: an :class:`asyncio.Future` of the exact stock type (what
  ``loop.create_future()`` returns), which the entry resolves when it fires -- the native
  sleep's entry, with no handle at all -- and which is dead once it is done (cancelled, or
  resolved early by its owner).  A waiter's death is never reported (see below).
* A :class:`SleepTimer`: the timer of an ``asyncio.sleep``, which resolves one future with one
  value and is at once the entry's item and the handle ``call_later`` returns.  It is dead
  once cancelled (counted, by its :meth:`~SleepTimer.cancel`) or once its future is done (not
  counted: found when the entry reaches the head, or by :meth:`TimerQueue.compact`).

Two kinds of death, then.  A handle's or a sleep timer's cancellation is *reported* (counted in
:attr:`TimerQueue.cancelled`), as stock asyncio counts cancelled timers.  A waiter's is only
*discovered*: a waiter dies when its task is cancelled, inside ``Task.cancel()`` (C code that
calls nobody back), and the native sleep that armed it keeps no frame of its own while it
waits, so nobody is there to report it (a Python frame per pending sleep would weigh as much
as the future and the heap entry together).  So the queue never counts a waiter's death, and
finds dead waiters itself:

* at the head: before the loop moves time to the head it makes sure the head is alive
  (:func:`is_dead`, :meth:`TimerQueue.purge`), so time never jumps to an instant where only
  dead waiters were due;
* by a scan: once the heap has grown to twice the live entries it held after the last scan
  (:attr:`TimerQueue.scan_at`, at least :data:`SCAN_MIN`), :meth:`TimerQueue.compact`
  rebuilds it without any dead entry.  A scan of n entries comes after at least n/2 pushes,
  so it costs O(1) per push, and dead waiters cannot pile up however long they would wait
  (a watchdog that gives up a day-long sleep every second), as stock asyncio's counting
  keeps cancelled timers from piling up.

A dead entry of either kind stays in the heap until it reaches the head or until one of the
two triggers rebuilds the heap without it: reported deaths past a quarter of the heap, or the
growth scan -- so that cancelling a timer is O(1).

The loop reads :attr:`heap` directly on its hottest path (``heap[0][0]`` is the next tick),
and pops due entries with :func:`heapq.heappop`; everything that changes the heap's shape
is a method here.

Part of ``engine``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable, Iterator
from typing import Any, Final

from .._shared._time import NEVER, TICKS_PER_SECOND

__all__ = ["NEVER", "SCAN_MIN", "WAITER", "Entry", "SleepTimer", "TimerQueue", "is_dead"]


COMPACT_MIN: Final = 256
"""Cancelled entries are purged once there are more than this many and they are a quarter."""

SCAN_MIN: Final = 1024
"""The smallest heap the growth scan looks through for dead waiters (``TimerQueue.scan_at``)."""


WAITER: Final = asyncio.Future
"""The type of a waiter item: the stock future (``_asyncio.Future`` where it is compiled)."""


_CANCELLED: Final = object()  # a SleepTimer's result once it is cancelled


class SleepTimer:
    """The timer of one ``asyncio.sleep``: it resolves ``future`` with ``result`` when due.

    What the virtual loop's ``call_later(delay, callback, future, result)`` returns when
    ``callback`` is asyncio's ``futures._set_result_unless_cancelled`` (the call
    ``asyncio.sleep`` makes) or virtualtime's ``set_result_unless_cancelled``, outside debug
    mode and without history -- in place of a ``TimerHandle``, which would carry a callback,
    an argument tuple, a context and seven more fields for a timer that only ever resolves
    one future.  It is the heap entry's item too, so a pending ``asyncio.sleep`` costs about
    140 bytes less (less than on stock asyncio), and the loop resolves the future straight
    from the heap.

    It answers what ``asyncio.sleep`` and careful callers ask of a timer: :meth:`cancel`,
    :meth:`cancelled`, :meth:`when`.  It is not a ``TimerHandle`` (``isinstance`` says so);
    a caller that needs one passes ``context=`` or another callback.  The loop sets the
    fields directly; nothing else should make one.
    """

    __slots__ = ("_future", "_queue", "_result", "_ticks")
    _future: asyncio.Future[Any] | None
    """The future to resolve; None once the timer fired, was cancelled or left the heap."""
    _queue: TimerQueue
    _result: Any
    _ticks: int
    """The tick it is due at (the entry's own int: no float is made unless asked for)."""

    def cancel(self) -> None:
        """Cancel the timer: its future is left alone (as ``TimerHandle.cancel()`` leaves it)."""
        if self._future is not None:  # still in the heap: its entry is dead from now on
            self._future = None
            self._queue.cancelled += 1
        self._result = _CANCELLED

    def cancelled(self) -> bool:
        """Was :meth:`cancel` called?"""
        return self._result is _CANCELLED

    def when(self) -> float:
        """The virtual time the timer is (or was) due at, in seconds."""
        return self._ticks / TICKS_PER_SECOND

    def __repr__(self) -> str:
        state = " cancelled" if self.cancelled() else ""
        return f"<SleepTimer{state} when={self.when()!r}>"


def is_dead(item: Any) -> bool:
    """Is this entry's item cancelled (a handle, a sleep timer) or done (a waiter, a sleep
    timer's future)?"""
    if type(item) is WAITER:
        return bool(item.done())
    if type(item) is SleepTimer:
        future = item._future
        return future is None or bool(future.done())
    return bool(item._cancelled)


_FLAGLESS: Final = (WAITER, SleepTimer)  # the items with no _scheduled flag


def _leave(item: Any) -> bool:
    """``item``'s dead entry leaves the heap: mark it so and say whether its death was counted."""
    kind = type(item)
    if kind is WAITER:
        return False  # a waiter's death is discovered, never counted
    if kind is SleepTimer:
        counted = item._future is None  # cancelled in the heap; else its future is done
        item._future = None  # a cancel() from now on counts nothing
        return counted
    item._scheduled = False
    return True


Entry = tuple[int, int, int, Any]
"""``(tick, priority, seq, item)``: tuples compare in C, and ``seq`` is unique, so the item
itself is never compared."""


class TimerQueue:
    """A heap of ``(tick, priority, seq, item)`` entries with O(1) cancellation.

    ``on_discard(seq)`` (optional) is called with the sequence number of every cancelled entry
    the queue throws away, so that side tables keyed by ``seq`` can forget it too.
    """

    __slots__ = ("cancelled", "heap", "next_seq", "on_discard", "scan_at")

    def __init__(self, on_discard: Callable[[int], object] | None = None) -> None:
        self.heap: list[Entry] = []
        self.cancelled = 0
        """How many handles and sleep timers in :attr:`heap` are cancelled (maintained by
        :meth:`note_cancelled`); dead waiters are not counted.  Any non-zero count makes the
        loop purge before it moves time."""
        self.scan_at = SCAN_MIN
        """The heap size at which :meth:`purge` scans the whole heap for dead waiters: twice
        the live entries left by the last scan, and never below :data:`SCAN_MIN`."""
        self.on_discard = on_discard
        self.next_seq: Callable[[], int] = itertools.count().__next__
        """A fresh sequence number (entries pushed later compare later at equal keys); a C
        callable, called on every timer, so no Python method wraps it."""

    def __len__(self) -> int:
        return len(self.heap)

    def __iter__(self) -> Iterator[Entry]:
        """The entries in heap order (not sorted), cancelled ones included."""
        return iter(self.heap)

    def push(self, ticks: int, priority: int, item: object) -> int:
        """Add ``item`` (a handle, a waiter or a sleep timer) due at ``ticks``; returns its
        sequence number."""
        seq = self.next_seq()
        heapq.heappush(self.heap, (ticks, priority, seq, item))
        return seq

    def note_cancelled(self) -> None:
        """A handle still in the heap was cancelled (call once per handle)."""
        self.cancelled += 1

    def purge(self) -> None:
        """Drop dead entries: all of them if many are cancelled or the heap has grown past
        :attr:`scan_at`, else those at the head."""
        heap = self.heap
        if len(heap) >= self.scan_at or (
            self.cancelled > COMPACT_MIN and self.cancelled * 4 > len(heap)
        ):
            self.compact()
            return
        while heap and is_dead(heap[0][3]):
            self._discard(heapq.heappop(heap))

    def compact(self) -> None:
        """Rebuild the heap without its dead entries."""
        live = []
        counted = 0
        on_discard = self.on_discard
        for entry in self.heap:
            item = entry[3]
            if is_dead(item):
                counted += _leave(item)
                if on_discard is not None:
                    on_discard(entry[2])
            else:
                live.append(entry)
        if len(live) < len(self.heap):
            heapq.heapify(live)
            self.heap[:] = live  # in place: the loop holds a reference to this list
        self.cancelled -= counted
        self.scan_at = max(SCAN_MIN, 2 * len(live))

    def _discard(self, entry: Entry) -> None:
        if _leave(entry[3]):
            self.cancelled -= 1
        if self.on_discard is not None:
            self.on_discard(entry[2])

    def peek(self) -> int | None:
        """The tick of the next live, finite entry, or None (cancelled heads are dropped)."""
        self.purge()
        heap = self.heap
        if not heap or heap[0][0] >= NEVER:
            return None
        return heap[0][0]

    def pop_due(self, now: int) -> Iterator[Entry]:
        """Remove and yield, in order, every live entry due at or before ``now``.

        Entries pushed while iterating are included when they are due too.  Cancelled
        entries met on the way are discarded and not yielded.
        """
        heap = self.heap
        while heap and heap[0][0] <= now:
            entry = heapq.heappop(heap)
            if is_dead(entry[3]):
                self._discard(entry)
                continue
            if type(entry[3]) not in _FLAGLESS:
                entry[3]._scheduled = False
            yield entry

    def live(self) -> list[Entry]:
        """Every entry not cancelled, in heap order."""
        return [entry for entry in self.heap if not is_dead(entry[3])]

    def clear(self) -> None:
        """Forget every entry."""
        self.heap.clear()
        self.cancelled = 0
        self.scan_at = SCAN_MIN
