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
from ._kit import (
    _DONE,
    _OVER,
    _PENDING,
    _PROC,
    _SIM,
    Waiter,
    _Abandonable,
    _current,
    _suspend_once,
    _wait,
)

if TYPE_CHECKING:
    from ._simulation import Simulation


class _Op(_Abandonable):
    """A queued operation (a request, a get, a put): enqueued when made, awaited later."""

    __slots__ = ("_env", "_state", "_time", "_value", "_waiter")

    def __init__(self, env: Simulation) -> None:
        self._env = env
        self._state = _PENDING
        self._value: Any = None
        self._waiter: Waiter | None = None
        self._time = env._clock()

    def _complete(self, value: Any) -> None:
        self._state = _DONE
        self._value = value
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(value)

    @property
    def triggered(self) -> bool:
        """True once the operation has completed (granted, received, stored)."""
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
        state = self._state
        env = self._env
        if state == _DONE and self._waiter is None:
            if env._simpy:
                yield from _suspend_once(env)
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
