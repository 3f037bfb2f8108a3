"""Stores: items handed from producers to consumers (SimPy's ``resources.store``).

:class:`Store` hands items out first in first out, :class:`FilterStore` to the first getter
whose filter accepts one, :class:`PriorityStore` smallest first (:class:`PriorityItem` pairs a
priority with an item that need not compare).  Their queues, give-backs and statistics come
from ``_buffers``.

Part of ``sim``: may import ``shared``, ``engine``, ``trace``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

from .._shared._errors import InvalidTypeError
from ._buffers import BufferStats, _Buffer, _Get, _GiveBack, _Put
from ._check import check_name, short
from ._kit import KitAwaitable
from ._ops import _adopt

__all__ = ["FilterStore", "PriorityItem", "PriorityStore", "Store"]


class PriorityItem(NamedTuple):
    """An item with a priority, for a :class:`PriorityStore` (SimPy's ``PriorityItem``).

    Ordered by ``priority`` alone, so the item itself need not be comparable and items of
    equal priority keep no particular order among themselves (a heap's).  Put
    ``sim.PriorityItem(2, job)``; a get returns the whole pair (``.priority``, ``.item``).
    """

    priority: Any
    item: Any

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, PriorityItem):
            return NotImplemented
        return bool(self.priority < other.priority)


class Store(_Buffer):
    """Items handed from producers to consumers, first in first out (SimPy's ``Store``).

    ``await store.put(item)`` waits while the store is full (``capacity``, default
    unbounded); ``item = await store.get()`` waits while it is empty.  Getters are served in
    the order they asked.
    """

    def __init__(self, capacity: float = math.inf, *, name: str | None = None) -> None:
        super().__init__(capacity)
        self._items: Any = deque()
        self.name = check_name("name", name)
        _adopt(self)

    @property
    def items(self) -> list[Any]:
        """The items held, in the order they will be handed out (a new list)."""
        return list(self._items)

    def _size(self) -> float:
        return len(self._items)

    def put(self, item: Any) -> KitAwaitable[None]:
        """Add ``item`` when there is room."""
        env = self._env_now()
        op = _Put(self, env, item)
        if env._simpy:
            return self._exact(env, op, False)
        self._putters.append(op)
        self._after_put(env)
        return op

    def get(self) -> KitAwaitable[Any]:
        """Take the next item when there is one; returns it."""
        env = self._env_now()
        op = _Get(self, env, 1, None)
        if env._simpy:
            return self._exact(env, op, True)
        self._getters.append(op)
        self._dispatch()
        return op

    def _add(self, item: Any) -> None:
        self._items.append(item)

    def _add_back(self, item: Any) -> None:
        """An item a get gives back: first in line again."""
        self._items.appendleft(item)

    def _received(self, op: _Get) -> Any:
        return op._value

    def _exact_do_put(self, op: _Put) -> object:
        if len(self._items) < self._capacity:
            self._add(op._item)
            self._exact_done(op, self._stats.put_waits, None)  # type: ignore[union-attr]
        return None  # SimPy's stores serve one put per turn

    def _exact_do_get(self, op: _Get) -> object:
        ok, item = self._take(op)
        if ok:
            self._exact_done(op, self._stats.get_waits, item)  # type: ignore[union-attr]
        return None  # ... and one get

    def _take(self, op: _Get) -> tuple[bool, Any]:
        items = self._items
        if items:
            return True, items.popleft()
        return False, None

    def _dispatch(self, gets: bool = True) -> None:
        stats = self._stats
        assert stats is not None
        getters, putters = self._getters, self._putters
        changed = True
        moved = False
        while changed:
            changed = False
            while putters and len(self._items) < self._capacity:
                op = putters.popleft()
                if type(op) is _GiveBack:
                    self._add_back(op._item)
                else:
                    self._add(op._item)
                self._completed(op, stats.put_waits, None)
                changed = moved = True
            if gets and getters and self._items:
                changed = self._serve_getters(stats) or changed
                moved = moved or changed
        if moved:
            stats.level.record(len(self._items))

    def _serve_getters(self, stats: BufferStats) -> bool:
        getters = self._getters
        served = False
        while getters and self._items:
            op = getters[0]
            ok, item = self._take(op)
            if not ok:
                break
            getters.popleft()
            self._completed(op, stats.get_waits, item)
            served = True
        return served

    def __repr__(self) -> str:
        label = f" {self.name}" if self.name else ""
        return (
            f"<{type(self).__name__}{label} items={len(self._items)} capacity={self._capacity!r}>"
        )


class FilterStore(Store):
    """A :class:`Store` whose getters say which item they want: ``await store.get(filter)``.

    Each getter, in the order they asked, takes the first item its ``filter(item)`` accepts;
    a getter whose filter accepts nothing waits without blocking the getters behind it.
    """

    def __init__(self, capacity: float = math.inf, *, name: str | None = None) -> None:
        super().__init__(capacity, name=name)
        self._items = []

    def get(self, filter: Callable[[Any], bool] | None = None) -> KitAwaitable[Any]:
        """Take the first item ``filter`` accepts (any item if None) when there is one."""
        if filter is not None and not callable(filter):
            raise InvalidTypeError(
                f"filter must be None or callable as filter(item) -> bool, got {short(filter)} "
                f"({type(filter).__name__})"
            )
        env = self._env_now()
        op = _Get(self, env, 1, filter)
        if env._simpy:
            return self._exact(env, op, True)
        self._getters.append(op)
        self._dispatch()
        return op

    def _take(self, op: _Get) -> tuple[bool, Any]:
        wanted = op._filter
        items = self._items
        for index, item in enumerate(items):
            if wanted is None or wanted(item):
                del items[index]
                return True, item
        return False, None

    def _add_back(self, item: Any) -> None:
        self._items.insert(0, item)

    def _exact_do_get(self, op: _Get) -> object:
        Store._exact_do_get(self, op)
        return True  # SimPy's filter store tries every getter in turn

    def _serve_getters(self, stats: BufferStats) -> bool:
        served = False
        for op in list(self._getters):
            if not self._items:
                break
            ok, item = self._take(op)
            if ok:
                self._getters.remove(op)
                self._completed(op, stats.get_waits, item)
                served = True
        return served


class PriorityStore(Store):
    """A :class:`Store` that hands out its smallest item first (items must be comparable).

    Put ``(priority, sequence, payload)`` tuples, or objects with ``__lt__``, as with
    :mod:`heapq`.
    """

    def __init__(self, capacity: float = math.inf, *, name: str | None = None) -> None:
        super().__init__(capacity, name=name)
        self._items = []

    @property
    def items(self) -> list[Any]:
        """The items held, smallest first (a new list)."""
        return sorted(self._items)

    def put(self, item: Any) -> KitAwaitable[None]:
        """Add ``item`` when there is room; it must compare with the items held."""
        if self._items:
            try:
                item < self._items[0]  # noqa: B015 - only whether it can compare
            except TypeError:
                raise InvalidTypeError(
                    f"item must be comparable with the items held (a PriorityStore hands out "
                    f"the smallest first), got {short(item)} ({type(item).__name__})"
                ) from None
        return super().put(item)

    def _add(self, item: Any) -> None:
        heapq.heappush(self._items, item)

    def _take(self, op: _Get) -> tuple[bool, Any]:
        if self._items:
            return True, heapq.heappop(self._items)
        return False, None

    def _add_back(self, item: Any) -> None:
        heapq.heappush(self._items, item)
