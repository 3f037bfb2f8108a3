"""Containers: a level of something continuous or countable, up to a capacity (SimPy's
``resources.container``).

:class:`Container` holds fuel, parts, money: ``get(amount)`` waits until the amount is there,
``put(amount)`` until it fits, both strictly first-come first-served.  Its queues, give-backs
and statistics come from ``_buffers``.

Part of ``sim``: may import ``shared``, ``engine``, ``trace``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

import math
from typing import Any

from .._shared._errors import InvalidValueError
from ._buffers import _Buffer, _check_amount, _Get, _Put
from ._check import check_name, check_positive, short
from ._kit import KitAwaitable
from ._ops import _adopt

__all__ = ["Container"]


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

    def get(self, amount: float) -> KitAwaitable[float]:
        """Take ``amount`` (> 0) when it is there and it is this get's turn; returns ``amount``."""
        amount = _check_amount("amount", amount)
        env = self._env_now()
        op = _Get(self, env, amount, None)
        if env._simpy:
            return self._exact(env, op, True)
        self._getters.append(op)
        self._dispatch()
        return op

    def put(self, amount: float) -> KitAwaitable[float]:
        """Add ``amount`` (> 0) when it fits and it is this put's turn; returns ``amount``."""
        amount = _check_amount("amount", amount)
        if amount > self._capacity:
            raise InvalidValueError(
                f"amount must fit in the container (capacity {short(self._capacity)}), got "
                f"{short(amount)}, which can never fit"
            )
        env = self._env_now()
        op = _Put(self, env, amount)
        if env._simpy:
            return self._exact(env, op, False)
        self._putters.append(op)
        self._after_put(env)
        return op

    def _received(self, op: _Get) -> Any:
        return op._amount

    def _exact_do_put(self, op: _Put) -> object:
        if self._capacity - self._level >= op._item:
            self._level += op._item
            self._exact_done(op, self._stats.put_waits, op._item)  # type: ignore[union-attr]
            return True
        return None

    def _exact_do_get(self, op: _Get) -> object:
        if self._level >= op._amount:
            self._level -= op._amount
            self._exact_done(op, self._stats.get_waits, op._amount)  # type: ignore[union-attr]
            return True
        return None

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
