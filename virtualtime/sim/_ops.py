"""The queued operation (a request, a get, a put) and what owners of queues share.

:class:`_Op` is an operation enqueued when it is made and awaited later: its state, its
waiter (made only when somebody waits), the time it was made (for waiting-time statistics)
and the await that takes it back when the wait fails.  Resources (``_resources``) and
containers and stores (``_buffers``) build their operations on it, and share the helpers that
bind an owner of queues to the one simulation it serves (:func:`_bind`, :func:`_adopt`) and
check its capacity.

Part of ``sim``: may import ``shared``, ``engine``, ``trace``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from .._shared._errors import UsageError, VirtualTimeError
from ._check import check_positive
from ._core import PENDING as _SP_PENDING
from ._core import Event
from ._kit import (
    _DONE,
    _OVER,
    _PENDING,
    _PROC,
    _SIM,
    Waiter,
    _Abandonable,
    _current,
    _wait,
)

if TYPE_CHECKING:
    from ._simulation import Simulation


class _Op(_Abandonable):
    """A queued operation (a request, a get, a put): enqueued when made, awaited later."""

    __slots__ = ("_env", "_ev", "_state", "_time", "_value", "_waiter")

    def __init__(self, env: Simulation) -> None:
        self._env = env
        self._state = _PENDING
        self._value: Any = None
        self._waiter: Waiter | None = None
        self._time = env._clock()
        self._ev: Event | None = None  # order="simpy": its SimPy event (see _base.exact_op)

    def _sp_event(self) -> Event:
        ev = self._ev
        if ev is None:
            raise UsageError(f"{self!r} was not made in an order='simpy' simulation")
        return ev

    def _sp_withdraw(self) -> None:
        """order="simpy": take back what this operation did (see its kind)."""
        self.cancel()

    def cancel(self) -> None:
        """Withdraw the operation if it has not happened yet (SimPy's ``cancel``); nothing
        if it has.  Also what leaving a ``with`` block made on it does."""
        ev = self._ev
        if ev is not None:
            if ev._value is _SP_PENDING:
                self._withdraw_exact()
        elif self._state == _PENDING:
            self._abandon()

    def _withdraw_exact(self) -> None:
        """order="simpy": leave the queue (not happened yet)."""

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.cancel()

    def _complete(self, value: Any) -> None:
        self._state = _DONE
        self._value = value
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(value)

    @property
    def triggered(self) -> bool:
        """True once the operation has completed (granted, received, stored)."""
        ev = self._ev
        if ev is not None:
            return ev._value is not _SP_PENDING
        return self._state == _DONE

    def _begin(self) -> Waiter:
        waiter = self._waiter
        if waiter is None:
            waiter = self._waiter = self._env._new_waiter()
            if self._state == _DONE:
                waiter.set_result(self._value)
        return waiter

    def _gone(self) -> VirtualTimeError:
        return VirtualTimeError(f"{self!r} was withdrawn or has ended; it cannot be awaited")

    def __await__(self) -> Generator[Any, None, Any]:
        ev = self._ev
        if ev is not None:
            return (yield from ev._core.wait(ev, self._sp_withdraw))
        state = self._state
        env = self._env
        if state == _DONE and self._waiter is None:
            proc = _PROC.get()
            if proc is not None and proc._pending:
                self._abandon()
                raise proc._pending.pop(0)
            return self._value
        if state == _OVER:
            raise self._gone()
        return (yield from _wait(env, self._begin(), self))


def _check_capacity(value: object) -> float:
    """A capacity: a number > 0 (``math.inf``: no limit); kept as given (an int stays one)."""
    check_positive("capacity", value, allow_inf=True)
    return value  # type: ignore[return-value]


def _adopt(owner: Any) -> None:
    """Made inside a running simulation: belong to it now, so that its statistics cover the
    run (and can be read after it) even if nothing ever uses it."""
    env = _SIM.get(None)
    if env is not None and env._final is None:
        owner._bind()


def _no_stats(owner: Any) -> UsageError:
    return UsageError(
        f"{owner!r} has not been used in a simulation, so it has no statistics yet: make it "
        "inside the model, or use it in a run, then read .stats (during or after the run)"
    )


def _bind(owner: Any, env: Simulation | None) -> Simulation:
    """The simulation ``owner`` (a resource, container or store) belongs to.

    It is bound to the first simulation that uses it; using it in another is an error
    (its queues and statistics belong to that run).
    """
    current = _current(f"using {owner!r}")
    if env is None:
        owner._env = current
        return current
    if current is not env:
        raise UsageError(f"{owner!r} belongs to another simulation; make a new one for each run")
    return env
