"""What containers and stores share: queues of gets and puts, give-backs, and their statistics.

:class:`_Buffer` is the base of :class:`~virtualtime.sim.Container` (``_containers``) and of
the stores (``_stores``): queues of gets and puts (:class:`_Get`, :class:`_Put`) served
strictly in order -- at once in the default order, SimPy's way in ``order="simpy"``
(:mod:`virtualtime.sim._base`) -- a give-back for a get that is taken back after it received
(:class:`_GiveBack`), and :class:`BufferStats`.

Part of ``sim``: may import ``shared``, ``engine``, ``trace``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._base import exact_op, serve
from ._check import check_positive
from ._kit import _DONE, _OVER, _PENDING, _SIM
from ._ops import _bind, _check_capacity, _no_stats, _Op
from ._stats import Tally, TimeSeries

if TYPE_CHECKING:
    from ._simulation import Simulation

__all__ = ["BufferStats"]


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

    def _withdraw_exact(self) -> None:
        self._state = _OVER
        with contextlib.suppress(ValueError):
            self._owner._getters.remove(self)

    def _sp_withdraw(self) -> None:
        """order="simpy": a get that had received puts it back (a new put, not awaited: at
        the end of the put queue, as ``store.put(item)`` in SimPy); else it is cancelled."""
        if self.triggered:
            owner: Any = self._owner
            owner.put(owner._received(self))
        else:
            self.cancel()

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

    def _withdraw_exact(self) -> None:
        self._state = _OVER
        with contextlib.suppress(ValueError):
            self._owner._putters.remove(self)

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
        self._dispatch()

    # ------------------------------------------------------------------ order="simpy"
    # SimPy's service (virtualtime/sim/_base.py): a get or put is served when made; the other
    # side when it is processed, one step later.  The rules are _exact_do_get/_exact_do_put.

    def _exact(self, env: Simulation, op: _Op, gets: bool) -> _Op:
        if gets:
            exact_op(env, op, self._getters, self._exact_after_get, self._exact_serve_gets)
        else:
            exact_op(env, op, self._putters, self._exact_after_put, self._exact_serve_puts)
        return op

    def _exact_serve_gets(self) -> None:
        serve(self._getters, self._exact_do_get)

    def _exact_serve_puts(self) -> None:
        serve(self._putters, self._exact_do_put)

    def _exact_after_get(self, _: object) -> None:
        serve(self._putters, self._exact_do_put)

    def _exact_after_put(self, _: object) -> None:
        serve(self._getters, self._exact_do_get)

    def _exact_do_get(self, op: _Get) -> object:
        raise NotImplementedError

    def _exact_do_put(self, op: _Put) -> object:
        raise NotImplementedError

    def _exact_done(self, op: _Op, waits: Tally, value: Any) -> None:
        stats = self._stats
        assert stats is not None
        now = self._env._clock()  # type: ignore[union-attr]
        waits.add(now, now - op._time)
        stats.level.record(self._size())
        op._state = _DONE
        op._value = value
        assert op._ev is not None
        op._ev.succeed(value)

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

    def _completed(self, op: _Op, waits: Tally, value: Any) -> None:
        if type(op) is _GiveBack:
            op._state = _OVER  # nobody awaits it, and it is no put of the model's
            return
        now = self._env._clock()  # type: ignore[union-attr]
        waits.add(now, now - op._time)
        op._complete(value)
