"""Buffers: containers of an amount and stores of items, with queues of gets and puts.

:class:`Container` holds a level (fuel, parts) up to a capacity; :class:`Store` hands items
from producers to consumers first in first out, :class:`FilterStore` to the first getter
whose filter accepts an item, :class:`PriorityStore` smallest first.  They share
:class:`_Buffer`: queues of gets and puts (:class:`_Get`, :class:`_Put`) served strictly in
order, a give-back for a get that is taken back after it received, and :class:`BufferStats`.

Part of ``sim``: may import ``shared``, ``engine``, ``trace``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

import contextlib
import heapq
import math
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .._shared._errors import InvalidTypeError, InvalidValueError
from ._check import check_name, check_positive, short
from ._kit import _DONE, _OVER, _PENDING, _SIM
from ._ops import _adopt, _bind, _check_capacity, _no_stats, _Op
from ._stats import Tally, TimeSeries

if TYPE_CHECKING:
    from ._simulation import Simulation

__all__ = ["BufferStats", "Container", "FilterStore", "PriorityStore", "Store"]


def _check_amount(name: str, value: object) -> float:
    """An amount of a container: a finite number > 0; kept as given."""
    check_positive(name, value)
    return value  # type: ignore[return-value]


class _Get(_Op):
    __slots__ = ("_amount", "_filter", "_owner")

    def __init__(
        self, owner: _Buffer, env: Simulation, amount: float, filter: Callable[[Any], bool] | None
    ) -> None:
        super().__init__(env)
        self._owner = owner
        self._amount = amount
        self._filter = filter

    def _abandon(self) -> None:
        if self._state == _PENDING:
            self._state = _OVER
            self._owner._drop(self, self._owner._getters)
        elif self._state == _DONE:
            self._state = _OVER
            self._owner._give_back(self)

    def __repr__(self) -> str:
        return f"<get from {self._owner!r}>"


class _Put(_Op):
    __slots__ = ("_item", "_owner")

    def __init__(self, owner: _Buffer, env: Simulation, item: Any) -> None:
        super().__init__(env)
        self._owner = owner
        self._item = item

    def _abandon(self) -> None:
        if self._state == _PENDING:
            self._state = _OVER
            self._owner._drop(self, self._owner._putters)

    def __repr__(self) -> str:
        return f"<put into {self._owner!r}>"


class _GiveBack(_Put):
    """What a get taken back after it received gives back, when there is no room for it
    (a put completed meanwhile): a put nobody awaits, at the front of the put queue, served
    first when room appears.  It counts in no statistics of puts."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<give-back into {self._owner!r}>"


class BufferStats:
    """What a container or store measured: its level over time and the waits of gets and puts.

    Windows work as on :class:`ResourceStats`.
    """

    __slots__ = ("get_waits", "level", "put_waits")

    def __init__(self, clock: Callable[[], float], initial: float, start: float) -> None:
        self.level = TimeSeries(clock, initial, start)
        """The level (a container) or the number of items (a store), over time."""
        self.get_waits = Tally()
        """Waiting time of every completed get, stamped when it completed."""
        self.put_waits = Tally()
        """Waiting time of every completed put, stamped when it completed."""

    def mean_level(self, start: float | None = None, end: float | None = None) -> float:
        """Time-weighted mean level over the window."""
        return self.level.mean(start, end)

    def __repr__(self) -> str:
        return f"<BufferStats gets={len(self.get_waits)} puts={len(self.put_waits)}>"


class _Buffer:
    """What containers and stores share: queues of gets and puts, served strictly in order."""

    def __init__(self, capacity: float) -> None:
        self._capacity = _check_capacity(capacity)
        self._getters: deque[_Get] = deque()
        self._putters: deque[_Put] = deque()
        self._env: Simulation | None = None
        self._stats: BufferStats | None = None

    @property
    def capacity(self) -> float:
        """The most it can hold."""
        return self._capacity

    @property
    def get_queue(self) -> list[Any]:
        """The gets waiting, in order (a new list)."""
        return list(self._getters)

    @property
    def put_queue(self) -> list[Any]:
        """The puts waiting, in order (a new list)."""
        return list(self._putters)

    @property
    def stats(self) -> BufferStats:
        """Level over time, waiting times of gets and puts (during the run and after it; see
        :attr:`Resource.stats`)."""
        if self._stats is None:
            if _SIM.get(None) is None:
                raise _no_stats(self)
            self._bind()
        assert self._stats is not None
        return self._stats

    def _bind(self) -> Simulation:
        env = _bind(self, self._env)
        if self._stats is None:
            self._stats = BufferStats(env._now, self._size(), env._started)
        return env

    def _env_now(self) -> Simulation:
        env = self._env
        if env is None or env._final is not None:
            env = self._bind()
        return env

    def _size(self) -> float:
        raise NotImplementedError

    def _after_put(self, env: Simulation) -> None:
        if env._simpy:
            self._dispatch(gets=False)  # the put itself completes now ...
            env._soon(self._dispatch)  # ... waiting gets are served when SimPy would
        else:
            self._dispatch()

    def _drop(self, op: _Op, queue: deque[Any]) -> None:
        with contextlib.suppress(ValueError):
            queue.remove(op)
        self._dispatch()

    def _give_back(self, op: _Get) -> None:
        """A get taken back after it received: what it received goes back -- at once if
        there is room, else at the front of the put queue (a put nobody awaits), so the level
        never exceeds the capacity."""
        env = self._env
        assert env is not None
        self._putters.appendleft(_GiveBack(self, env, self._received(op)))
        self._dispatch()

    def _received(self, op: _Get) -> Any:
        raise NotImplementedError

    def _dispatch(self, gets: bool = True) -> None:
        raise NotImplementedError

    def _record(self) -> None:
        stats = self._stats
        assert stats is not None
        stats.level.record(self._size())

    def _completed(self, op: _Op, waits: Tally, value: Any) -> None:
        if type(op) is _GiveBack:
            op._state = _OVER  # nobody awaits it, and it is no put of the model's
            return
        now = self._env._clock()  # type: ignore[union-attr]
        waits.add(now, now - op._time)
        op._complete(value)


class Container(_Buffer):
    """A level of something continuous or countable -- fuel, parts -- up to ``capacity``.

    ``await tank.get(amount)`` waits until ``amount`` is there and takes it; ``await
    tank.put(amount)`` waits until it fits.  Strictly first-come first-served, as SimPy: a
    get that cannot be served blocks every later get, even a smaller one that would fit, so
    nobody starves (and the order of service never depends on amounts).  Likewise for puts.
    """

    def __init__(self, capacity: float = math.inf, init: float = 0, *, name: str | None = None):
        check_positive("init", init, zero=True)
        super().__init__(capacity)
        if not init <= self._capacity:
            raise InvalidValueError(
                f"init must be between 0 and capacity={short(capacity)}, got {short(init)}"
            )
        self._level: float = init
        self.name = check_name("name", name)
        _adopt(self)

    @property
    def level(self) -> float:
        """How much it holds now."""
        return self._level

    def _size(self) -> float:
        return self._level

    def get(self, amount: float) -> Awaitable[float]:
        """Take ``amount`` (> 0) when it is there and it is this get's turn; returns ``amount``."""
        amount = _check_amount("amount", amount)
        env = self._env_now()
        op = _Get(self, env, amount, None)
        self._getters.append(op)
        self._dispatch()
        return op

    def put(self, amount: float) -> Awaitable[float]:
        """Add ``amount`` (> 0) when it fits and it is this put's turn; returns ``amount``."""
        amount = _check_amount("amount", amount)
        if amount > self._capacity:
            raise InvalidValueError(
                f"amount must fit in the container (capacity {short(self._capacity)}), got "
                f"{short(amount)}, which can never fit"
            )
        env = self._env_now()
        op = _Put(self, env, amount)
        self._putters.append(op)
        self._after_put(env)
        return op

    def _received(self, op: _Get) -> Any:
        return op._amount

    def _dispatch(self, gets: bool = True) -> None:
        stats = self._stats
        assert stats is not None
        getters, putters = self._getters, self._putters
        changed = True
        moved = False
        while changed:
            changed = False
            while putters and self._capacity - self._level >= putters[0]._item:
                op = putters.popleft()
                self._level += op._item
                self._completed(op, stats.put_waits, op._item)
                changed = moved = True
            while gets and getters and self._level >= getters[0]._amount:
                got = getters.popleft()
                self._level -= got._amount
                self._completed(got, stats.get_waits, got._amount)
                changed = moved = True
        if moved:
            stats.level.record(self._level)

    def __repr__(self) -> str:
        label = f" {self.name}" if self.name else ""
        return f"<Container{label} level={self._level!r} capacity={self._capacity!r}>"


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

    def put(self, item: Any) -> Awaitable[None]:
        """Add ``item`` when there is room."""
        env = self._env_now()
        op = _Put(self, env, item)
        self._putters.append(op)
        self._after_put(env)
        return op

    def get(self) -> Awaitable[Any]:
        """Take the next item when there is one; returns it."""
        env = self._env_now()
        op = _Get(self, env, 1, None)
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

    def get(self, filter: Callable[[Any], bool] | None = None) -> Awaitable[Any]:
        """Take the first item ``filter`` accepts (any item if None) when there is one."""
        if filter is not None and not callable(filter):
            raise InvalidTypeError(
                f"filter must be None or callable as filter(item) -> bool, got {short(filter)} "
                f"({type(filter).__name__})"
            )
        env = self._env_now()
        op = _Get(self, env, 1, filter)
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

    def put(self, item: Any) -> Awaitable[None]:
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
