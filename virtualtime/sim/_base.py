"""Resources of your own: :class:`BaseResource`, its :class:`Put` and :class:`Get` (SimPy's
``resources.base``), and the queue service every kit resource uses in ``order="simpy"``.

A resource, in SimPy's sense, is two queues -- puts and gets -- and two rules:
``_do_put(put)`` says whether a put can happen now (and does it: ``put.succeed()``),
``_do_get(get)`` the same for a get.  Whenever a put or get is made, the queue on its side is
served in order; whenever one *happens*, the other side's queue is served (a put makes room for
gets, a get for puts).  :class:`BaseResource` is that machine, for a resource kind the kit does
not have -- a bounded buffer with its own discipline, a pool with reservations -- written as
SimPy's are, with the same two methods.

In ``order="simpy"`` "happens" means "is processed", one step after it succeeded, exactly as
in SimPy; in the default order the other side is served as soon as the serving that made it
happen is over.  The kit's own :class:`~virtualtime.sim.Resource`,
:class:`~virtualtime.sim.Container` and stores use :func:`serve` and :func:`exact_op` in
``order="simpy"``: their rules are their ``_do_put``/``_do_get``.

Part of ``sim``: may import ``shared``, ``engine``, ``trace``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, MutableSequence
from typing import TYPE_CHECKING, Any

from .._shared._errors import UsageError
from ._check import check_positive, short
from ._core import PENDING, Event
from ._kit import _DONE, _OVER, _PENDING, _PROC, _current
from ._ops import _Op

if TYPE_CHECKING:
    from ._process import Process
    from ._simulation import Simulation

__all__ = ["BaseResource", "Get", "Put"]


def serve(queue: MutableSequence[Any], do: Callable[[Any], object]) -> None:
    """Serve ``queue`` in order with the rule ``do`` (SimPy's ``_trigger_put``/``_get``):
    each operation that happens leaves the queue; one that cannot stays and the next is
    tried; serving stops after the first operation whose rule returned a false value."""
    idx = 0
    while idx < len(queue):
        op = queue[idx]
        proceed = do(op)
        if op._ev._value is PENDING:
            idx += 1
        else:
            del queue[idx]
        if not proceed:
            break


def exact_op(
    env: Simulation,
    op: Any,
    queue: MutableSequence[Any],
    after: Callable[[Event], object],
    serve_now: Callable[[], object],
    insert: Callable[[Any], object] | None = None,
) -> None:
    """Make ``op`` a SimPy put or get: its event (whose processing calls ``after``, serving
    the other side), its place in ``queue``, then its own side served (SimPy's ``Put``/``Get``
    constructors)."""
    ev = op._ev = Event(env._core, op)
    assert ev.callbacks is not None
    ev.callbacks.append(after)
    if insert is None:
        queue.append(op)
    else:
        insert(op)
    serve_now()


class _Exchange(_Op):
    """What :class:`Put` and :class:`Get` share: an operation on a :class:`BaseResource`."""

    __slots__ = ("proc", "resource")

    def __init__(self, resource: BaseResource) -> None:
        env = resource._use()
        super().__init__(env)
        self.resource = resource
        self.proc: Process[Any] | None = _PROC.get()

    @property
    def value(self) -> Any:
        """What it succeeded with."""
        ev = self._ev
        if ev is not None:
            if ev._value is PENDING:
                raise UsageError(f"{self!r} has not happened yet")
            return ev._value
        if self._state == _PENDING:
            raise UsageError(f"{self!r} has not happened yet")
        return self._value

    def succeed(self, value: Any = None) -> None:
        """Say it happened, with ``value`` (call it from ``_do_put``/``_do_get``)."""
        ev = self._ev
        if ev is not None:
            self._state = _DONE
            self._value = value
            ev.succeed(value)
        else:
            if self._state != _PENDING:
                raise UsageError(f"{self!r} has already happened")
            self._complete(value)
            self.resource._happened.append(self)

    def _queue(self) -> MutableSequence[Any]:
        raise NotImplementedError

    def cancel(self) -> None:
        """Withdraw it if it has not happened yet (SimPy's ``cancel``); else nothing."""
        if not self.triggered:
            queue = self._queue()
            if self in queue:
                queue.remove(self)
            self._state = _OVER

    def _abandon(self) -> None:
        self.cancel()


class Put(_Exchange):
    """A put to a :class:`BaseResource`: queued when made, awaited for its value.  Subclass it
    to carry what the put brings (set the fields, then call ``super().__init__(resource)``)."""

    __slots__ = ()

    def __init__(self, resource: BaseResource) -> None:
        super().__init__(resource)
        resource._enqueue(self, resource.put_queue, resource._serve_gets, resource._serve_puts)

    def _queue(self) -> MutableSequence[Any]:
        return self.resource.put_queue

    def __repr__(self) -> str:
        return f"<{type(self).__name__} to {short(self.resource)}>"


class Get(_Exchange):
    """A get from a :class:`BaseResource`: queued when made, awaited for its value (what the
    resource's ``_do_get`` succeeded it with).  Subclass it to carry what the get asks for."""

    __slots__ = ()

    def __init__(self, resource: BaseResource) -> None:
        super().__init__(resource)
        resource._enqueue(self, resource.get_queue, resource._serve_puts, resource._serve_gets)

    def _queue(self) -> MutableSequence[Any]:
        return self.resource.get_queue

    def __repr__(self) -> str:
        return f"<{type(self).__name__} from {short(self.resource)}>"


class BaseResource:
    """The base of a resource kind of your own: two queues and two rules (SimPy's
    ``BaseResource``).

    Subclass it and write ``_do_put(put)`` and ``_do_get(get)``: each looks at the
    resource's state, and when the operation can happen now, changes the state and calls
    ``put.succeed(value)``; the value is what ``await`` gives.  Return True to go on serving
    the queue after this operation, a false value to stop at it.  ``put()`` and ``get()``
    make a :class:`Put` and a :class:`Get`; override them (with subclasses carrying fields)
    for operations that need arguments::

        class Tray(sim.BaseResource):      # a stack: last in, first out
            def __init__(self, capacity):
                super().__init__(capacity)
                self.items = []

            def put(self, item):
                return TrayPut(self, item)

            def _do_put(self, put):
                if len(self.items) < self.capacity:
                    self.items.append(put.item)
                    put.succeed()

            def _do_get(self, get):
                if self.items:
                    get.succeed(self.items.pop())

        class TrayPut(sim.Put):
            def __init__(self, tray, item):
                self.item = item
                super().__init__(tray)

    Operations are awaitable, can be withdrawn with ``cancel()`` or a ``with`` block, and
    work in :func:`~virtualtime.sim.first_of`.  ``order="simpy"`` serves them exactly as SimPy
    does (the other side one step after an operation happened); the default order at once.
    """

    def __init__(self, capacity: float = math.inf) -> None:
        check_positive("capacity", capacity, allow_inf=True)
        self._capacity = capacity
        self._puts: list[Put] = []
        self._gets: list[Get] = []
        self._happened: list[_Exchange] = []
        self._env: Simulation | None = None

    @property
    def capacity(self) -> float:
        """The capacity given when it was made."""
        return self._capacity

    @property
    def put_queue(self) -> list[Put]:
        """The puts waiting, in order (the live list)."""
        return self._puts

    @property
    def get_queue(self) -> list[Get]:
        """The gets waiting, in order (the live list)."""
        return self._gets

    def put(self) -> Put:
        """A put (override to take arguments)."""
        return Put(self)

    def get(self) -> Get:
        """A get (override to take arguments)."""
        return Get(self)

    def _do_put(self, put: Any) -> object:
        raise NotImplementedError(f"{type(self).__name__} must define _do_put(put)")

    def _do_get(self, get: Any) -> object:
        raise NotImplementedError(f"{type(self).__name__} must define _do_get(get)")

    def _use(self) -> Simulation:
        env = _current(f"using {self!r}")
        if self._env is None:
            self._env = env
        elif self._env is not env and self._env._final is None:
            raise UsageError(f"{self!r} belongs to another simulation; make a new one for each run")
        else:
            self._env = env
        return env

    def _enqueue(
        self,
        op: _Exchange,
        queue: list[Any],
        after: Callable[[], object],
        serve_now: Callable[[], object],
    ) -> None:
        env = op._env
        if env._simpy:
            exact_op(env, op, queue, lambda _: after(), serve_now)
        else:
            queue.append(op)
            serve_now()

    def _serve_puts(self) -> None:
        serve(self._puts, self._do_put) if self._exact() else self._serve_now(self._puts, True)

    def _serve_gets(self) -> None:
        serve(self._gets, self._do_get) if self._exact() else self._serve_now(self._gets, False)

    def _exact(self) -> bool:
        env = self._env
        return env is not None and env._simpy

    def _serve_now(self, queue: list[Any], puts: bool) -> None:
        """The default order: serve ``queue``, then the other side at once for each operation
        that happened."""
        do = self._do_put if puts else self._do_get
        idx = 0
        while idx < len(queue):
            op = queue[idx]
            proceed = do(op)
            if op._state == _PENDING:
                idx += 1
            else:
                del queue[idx]
            if not proceed:
                break
        happened, self._happened = self._happened, []
        for op in happened:
            if op._state == _DONE:
                (self._serve_gets if isinstance(op, Put) else self._serve_puts)()

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} capacity={self._capacity!r} puts={len(self._puts)} "
            f"gets={len(self._gets)}>"
        )
