"""The timer queue: a pure, loop-free heap of what is due when.

:class:`TimerQueue` is the kernel of the virtual loop, in the way SimPy's event queue is the
kernel of an ``Environment``: it knows nothing about asyncio, threads or real time, only the
total order of entries -- ``(tick, priority, seq)``: earlier instant first, then smaller
priority, then first pushed first -- and which entries were cancelled.  It can be unit-tested
with plain objects and no event loop.

An entry's *item* is anything with a boolean ``_cancelled`` attribute and a writable
``_scheduled`` attribute (asyncio's ``TimerHandle`` has both: ``_scheduled`` tells a cancelled
handle whether it still sits in a heap, which is how cancellations are counted).  A cancelled
item stays in the heap until it reaches the head or until cancelled entries are a quarter of
the heap, when :meth:`compact` rebuilds it without them -- the same bargain stock asyncio
makes, so that cancelling a timer is O(1).

The loop reads :attr:`heap` directly on its hottest path (``heap[0][0]`` is the next tick),
and pops due entries with :func:`heapq.heappop`; everything that changes the heap's shape
is a method here.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator
from typing import Any, Final, Protocol

from ._time import NEVER

__all__ = ["NEVER", "Entry", "TimerQueue"]


COMPACT_MIN: Final = 256
"""Cancelled entries are purged once there are more than this many and they are a quarter."""


class _Item(Protocol):
    _cancelled: bool


Entry = tuple[int, int, int, Any]
"""``(tick, priority, seq, item)``: tuples compare in C, and ``seq`` is unique, so the item
itself is never compared."""


class TimerQueue:
    """A heap of ``(tick, priority, seq, item)`` entries with O(1) cancellation.

    ``on_discard(seq)`` (optional) is called with the sequence number of every cancelled entry
    the queue throws away, so that side tables keyed by ``seq`` can forget it too.
    """

    __slots__ = ("_next_seq", "cancelled", "heap", "on_discard")

    def __init__(self, on_discard: Callable[[int], object] | None = None) -> None:
        self.heap: list[Entry] = []
        self.cancelled = 0
        """How many entries in :attr:`heap` are cancelled (maintained by :meth:`note_cancelled`)."""
        self.on_discard = on_discard
        self._next_seq = itertools.count().__next__

    def __len__(self) -> int:
        return len(self.heap)

    def __iter__(self) -> Iterator[Entry]:
        """The entries in heap order (not sorted), cancelled ones included."""
        return iter(self.heap)

    def next_seq(self) -> int:
        """A fresh sequence number (entries pushed later compare later at equal keys)."""
        return self._next_seq()

    def push(self, ticks: int, priority: int, item: _Item) -> int:
        """Add ``item`` due at ``ticks``; returns its sequence number."""
        seq = self._next_seq()
        heapq.heappush(self.heap, (ticks, priority, seq, item))
        return seq

    def note_cancelled(self) -> None:
        """An item still in the heap was cancelled (call once per item)."""
        self.cancelled += 1

    def purge(self) -> None:
        """Drop cancelled entries: all of them if they are many, else those at the head."""
        if self.cancelled > COMPACT_MIN and self.cancelled * 4 > len(self.heap):
            self.compact()
            return
        heap = self.heap
        while heap and heap[0][3]._cancelled:
            self._discard(heapq.heappop(heap))

    def compact(self) -> None:
        """Rebuild the heap without its cancelled entries."""
        live = []
        for entry in self.heap:
            if entry[3]._cancelled:
                entry[3]._scheduled = False
                if self.on_discard is not None:
                    self.on_discard(entry[2])
            else:
                live.append(entry)
        heapq.heapify(live)
        self.heap[:] = live  # in place: the loop holds a reference to this list
        self.cancelled = 0

    def _discard(self, entry: Entry) -> None:
        entry[3]._scheduled = False
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
            if entry[3]._cancelled:
                self._discard(entry)
                continue
            entry[3]._scheduled = False
            yield entry

    def live(self) -> list[Entry]:
        """Every entry not cancelled, in heap order."""
        return [entry for entry in self.heap if not entry[3]._cancelled]

    def clear(self) -> None:
        """Forget every entry."""
        self.heap.clear()
        self.cancelled = 0
