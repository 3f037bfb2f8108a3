"""Resources: units that processes request, hold and release (SimPy's resources).

:class:`Resource` grants ``capacity`` units first-come first-served; :class:`PriorityResource`
serves the smallest ``priority`` first; :class:`PreemptiveResource` lets an urgent request
take a unit from a less urgent user, whose process receives :class:`Interrupt` with a
:class:`Preempted` cause.  A :class:`Request` is queued when made and awaited (or used as a
context manager) afterwards.  :class:`ResourceStats` is what a resource measures.  Granting,
releasing and recording are per-event paths: several are written out inline on purpose.

Part of ``sim``: may import ``shared``, ``engine``, ``trace``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

import bisect
import itertools
from collections import deque
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from .._shared._errors import InvalidTypeError, InvalidValueError
from .._shared._time import check_bool
from ._base import exact_op, serve
from ._check import check_name, short
from ._kit import _DONE, _OVER, _PENDING, _PROC, _SIM, Waiter
from ._ops import _adopt, _bind, _check_capacity, _no_stats, _Op
from ._stats import Tally, TimeSeries

if TYPE_CHECKING:
    from ._process import Process
    from ._simulation import Simulation

__all__ = [
    "Preempted",
    "PreemptiveResource",
    "PriorityResource",
    "Request",
    "Resource",
    "ResourceStats",
]


@dataclass(frozen=True, slots=True)
class Preempted:
    """The :attr:`Interrupt.cause` a user of a :class:`PreemptiveResource` receives.

    ``by`` is the process whose more urgent request took the resource (None if it was not
    made from a process), ``usage_since`` when the preempted user had been granted it, and
    ``resource`` which resource it was.
    """

    by: Process[Any] | None
    usage_since: float
    resource: Resource


class _NoWait:
    """An awaitable that completes at once with None (what a sync ``__aexit__`` returns)."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return iter(())  # type: ignore[return-value]


_NO_WAIT: Final = _NoWait()


class Request(_Op):
    """A claim on a :class:`Resource`, queued when made.

    ``async with resource.request() as req:`` waits for the grant and releases on exit.
    ``with resource.request() as req:`` only guarantees the release (or withdrawal) on exit:
    await ``req`` inside, alone or in :func:`first_of` to give up after a while (reneging).
    ``await req`` returns the request once granted.
    """

    __slots__ = ("_key", "_process", "_resource", "preempt", "priority", "usage_since")

    def __init__(self, resource: Resource, env: Simulation, priority: int, preempt: bool) -> None:
        self._env = env  # _Op.__init__, inlined
        self._state = _PENDING
        self._value: Any = None
        self._waiter: Waiter | None = None
        self._time = env._clock()
        self._ev = None
        self._resource = resource
        self.priority = priority
        self.preempt = preempt
        self._process = _PROC.get()
        self._key: tuple[Any, ...] = (priority, next(_request_sequence))
        self.usage_since: float | None = None

    @property
    def resource(self) -> Resource:
        """The resource asked for."""
        return self._resource

    @property
    def process(self) -> Process[Any] | None:
        """The process that made the request (it is the one a preemption interrupts)."""
        return self._process

    @property
    def granted(self) -> bool:
        """True while the request holds the resource."""
        if self._ev is not None:
            return self in self._resource._users
        return self._state == _DONE

    def release(self) -> None:
        """Give the resource back (or leave the queue, if not granted yet).  Idempotent in
        the default order; in ``order="simpy"`` each call is SimPy's ``res.release(req)``."""
        if self._ev is not None:
            self._resource._exact_release(self)
            return
        state = self._state
        if state == _DONE:
            self._resource._release(self)
        elif state == _PENDING:
            self._resource._withdraw(self)

    def cancel(self) -> None:
        """Leave the queue if not granted yet (SimPy's ``cancel``); nothing once granted
        (release it for that)."""
        if self._ev is not None:
            if not self.triggered:
                self._resource._exact_withdraw(self)
        elif self._state == _PENDING:
            self._resource._withdraw(self)

    def _sp_withdraw(self) -> None:
        """order="simpy": released if granted (SimPy's ``res.release(req)``), else cancelled."""
        if self.triggered:
            self._resource._exact_release(self)
        else:
            self._resource._exact_withdraw(self)

    def _abandon(self) -> None:
        self.release()

    def __enter__(self) -> Request:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._ev is not None:  # SimPy's Request.__exit__: cancel(), then a release
            self.cancel()
            self._resource._exact_release(self)
            return
        self.release()

    def __aenter__(self) -> Request:
        return self  # ``async with`` awaits it: the grant (no coroutine per block)

    def __aexit__(self, *exc_info: object) -> Awaitable[None]:
        if self._ev is not None:
            self.__exit__()
            return _NO_WAIT
        state = self._state  # release(), inlined
        if state == _DONE:
            self._resource._release(self)
        elif state == _PENDING:
            self._resource._withdraw(self)
        return _NO_WAIT

    def __await__(self) -> Generator[Any, None, Request]:
        env = self._env
        if self._waiter is None and not env._simpy:
            state = self._state
            if state == _DONE:
                # Granted when made (the common case): _Op.__await__'s fast path, inlined.
                proc = _PROC.get()
                if proc is None or not proc._pending:
                    return self
            elif state == _PENDING and env._fast:
                # Queued: _Op.__await__ and _wait, inlined (one generator, not three).
                proc = _PROC.get()
                if proc is not None and proc._pending:
                    self.release()
                    raise proc._pending.pop(0)
                loop: Any = env._loop
                waiter = self._waiter = loop.create_future()
                if proc is not None:
                    proc._target = waiter
                    proc._target_op = self  # Process.interrupt withdraws it at once
                try:
                    yield from waiter
                except BaseException:
                    self.release()
                    raise
                finally:
                    if proc is not None:
                        proc._target = None
                        proc._target_op = None
                return self
        yield from _Op.__await__(self)
        return self

    def __repr__(self) -> str:
        state = ("waiting", "granted", "over")[self._state]
        return f"<Request {state} priority={self.priority!r} on {self._resource!r}>"


_request_sequence = itertools.count()


def _check_request(priority: object, preempt: object) -> None:
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidTypeError(
            f"priority must be an int (smaller is more urgent), got {short(priority)} "
            f"({type(priority).__name__})"
        )
    check_bool("preempt", preempt)


class ResourceStats:
    """What a resource measured: utilisation, queue length, waits, served and reneged.

    Every figure takes an optional window ``start``/``end`` (delete a warm-up with
    ``start=``); the default is the whole run, up to now (or the end of the run).
    """

    __slots__ = ("_capacity", "preempted", "queue_length", "reneged", "users", "waits")

    def __init__(self, clock: Callable[[], float], capacity: float, start: float) -> None:
        self._capacity = capacity
        self.queue_length = TimeSeries(clock, 0, start)
        """Number of requests waiting, over time."""
        self.users = TimeSeries(clock, 0, start)
        """Number of requests holding the resource, over time."""
        self.waits = Tally()
        """Waiting time of every granted request, stamped with its grant time."""
        self.reneged = Tally()
        """Time waited by every request that left the queue unserved, stamped when it left."""
        self.preempted = Tally()
        """Usage time of every preempted user, stamped when it was preempted."""

    def utilisation(self, start: float | None = None, end: float | None = None) -> float:
        """Mean fraction of the capacity in use over the window."""
        return self.users.mean(start, end) / self._capacity

    def mean_queue_length(self, start: float | None = None, end: float | None = None) -> float:
        """Time-weighted mean number of waiting requests over the window."""
        return self.queue_length.mean(start, end)

    def mean_wait(self, start: float | None = None, end: float | None = None) -> float:
        """Mean waiting time of the requests granted in the window."""
        return self.waits.mean(start, end)

    def served(self, start: float | None = None, end: float | None = None) -> int:
        """How many requests were granted in the window."""
        return self.waits.count(start, end)

    def renege_count(self, start: float | None = None, end: float | None = None) -> int:
        """How many requests left the queue unserved in the window."""
        return self.reneged.count(start, end)

    def __repr__(self) -> str:
        return f"<ResourceStats served={len(self.waits)} reneged={len(self.reneged)}>"


class Resource:
    """``capacity`` identical units, granted first-come first-served (SimPy's ``Resource``).

    ``async with counter.request() as req:`` holds one unit for the block.  ``count``,
    ``users`` and ``queue`` show the state; :attr:`stats` what happened.  A request that is
    cancelled, interrupted or loses a :func:`first_of` leaves the queue.  ``priority`` and
    ``preempt`` are accepted (and ignored) so that code can switch resource kinds freely.
    """

    _prioritised = False
    _preemptive = False

    def __init__(self, capacity: int = 1, *, name: str | None = None) -> None:
        self._capacity = _check_capacity(capacity)
        self.name = check_name("name", name)
        self._users: list[Request] = []
        self._queue: Any = [] if self._prioritised else deque()
        self._releases: list[_Release] = []  # order="simpy": releases not processed yet
        self._env: Simulation | None = None
        self._stats: ResourceStats | None = None
        _adopt(self)

    @property
    def capacity(self) -> float:
        """How many requests may hold the resource at once."""
        return self._capacity

    @property
    def count(self) -> int:
        """How many requests hold it now."""
        return len(self._users)

    @property
    def users(self) -> list[Request]:
        """The requests holding it (a new list, in grant order)."""
        return list(self._users)

    @property
    def queue(self) -> list[Request]:
        """The requests waiting (a new list, in the order they will be served)."""
        return list(self._queue)

    @property
    def stats(self) -> ResourceStats:
        """Utilisation, queue length, waiting times, served and reneged counts.

        Readable during the run and after it (windows default to the whole run).  A resource
        made inside the model belongs to its simulation from the start; one made outside
        belongs to the first simulation that uses it.
        """
        if self._stats is None:
            if _SIM.get(None) is None:
                raise _no_stats(self)
            self._bind()
        assert self._stats is not None
        return self._stats

    def _bind(self) -> Simulation:
        env = _bind(self, self._env)
        if self._stats is None:
            self._stats = ResourceStats(env._now, self._capacity, env._started)
        return env

    def request(self, priority: int = 0, preempt: bool = True) -> Request:
        """Ask for one unit; the request queues at once.  Smaller ``priority`` (an int) is
        more urgent (on :class:`PriorityResource` and :class:`PreemptiveResource`); ``preempt``
        (True or False) says whether it may take the unit from a less urgent user (on
        :class:`PreemptiveResource`)."""
        if type(priority) is not int or type(preempt) is not bool:
            _check_request(priority, preempt)
        env = self._env
        if env is None or env._final is not None:
            env = self._bind()
        req = Request(self, env, priority, preempt)
        if env._simpy:
            return self._exact_request(env, req)
        users = self._users
        stats = self._stats
        assert stats is not None
        now = req._time
        if len(users) < self._capacity or (self._preemptive and preempt and self._preempt(req)):
            # _grant, inlined (the common case of a free unit): a wait of zero.
            req.usage_since = now
            users.append(req)
            _record(stats.users, now, len(users))
            waits = stats.waits
            waits._times.append(now)
            waits._values.append(0.0)
            req._state = _DONE
            req._value = req
        else:
            queue = self._queue
            if self._prioritised:
                bisect.insort(queue, req, key=_request_key)
            else:
                queue.append(req)
            _record(stats.queue_length, now, len(queue))
        return req

    @property
    def put_queue(self) -> list[Request]:
        """The requests waiting (SimPy's name for :attr:`queue`; a new list)."""
        return list(self._queue)

    @property
    def get_queue(self) -> list[Any]:
        """The releases waiting to be processed (``order="simpy"``: a release happens one step
        after it is made; empty in the default order, where it happens at once)."""
        return list(self._releases)

    def release(self, request: Request) -> None:
        """Give ``request``'s unit back (SimPy's ``res.release(req)``); see
        :meth:`Request.release`."""
        if not isinstance(request, Request) or request._resource is not self:
            raise InvalidValueError(
                f"request must be a request made on {self!r}, got {short(request)}"
            )
        request.release()

    # ------------------------------------------------------------------ order="simpy"
    # SimPy's Resource (virtualtime/sim/_base.py): a request is a put, a release a get; each
    # serves its own queue when made and the other when it is processed, one step later.

    def _exact_request(self, env: Simulation, req: Request) -> Request:
        req._key = (req.priority, req._time, not req.preempt)  # SimPy's key
        queue = self._queue
        if type(queue) is not list:
            queue = self._queue = list(queue)
        insert = None
        if self._prioritised:
            insert = lambda r: bisect.insort(queue, r, key=_request_key)  # noqa: E731
        exact_op(env, req, queue, self._exact_after_request, self._exact_serve, insert)
        stats = self._stats
        assert stats is not None
        _record(stats.queue_length, req._time, len(queue))
        return req

    def _exact_serve(self) -> None:
        queue = self._queue
        serve(queue, self._exact_do_request)
        stats = self._stats
        assert stats is not None
        _record(stats.queue_length, stats.users._clock(), len(queue))

    def _exact_after_request(self, _: object) -> None:
        serve(self._releases, self._exact_do_release)

    def _exact_after_release(self, _: object) -> None:
        self._exact_serve()

    def _exact_do_request(self, req: Request) -> object:
        users = self._users
        stats = self._stats
        assert stats is not None
        now = req._env._clock()
        if self._preemptive and len(users) >= self._capacity and req.preempt:
            victim = max(users, key=_request_key)
            if victim._key > req._key:
                users.remove(victim)
                victim._state = _OVER
                since = victim.usage_since if victim.usage_since is not None else now
                stats.preempted.add(now, now - since)
                proc = victim._process
                if proc is not None and proc.is_alive:
                    proc.interrupt(Preempted(by=req._process, usage_since=since, resource=self))
        if len(users) < self._capacity:
            users.append(req)
            req.usage_since = now
            stats.waits.add(now, now - req._time)
            req._state = _DONE
            req._value = req
            assert req._ev is not None
            req._ev.succeed(req)
        _record(stats.users, now, len(users))
        return None  # SimPy's resources serve one request per turn

    def _exact_withdraw(self, req: Request) -> None:
        """A request not granted leaves the queue (it reneged)."""
        req._state = _OVER
        queue = self._queue
        if req in queue:
            queue.remove(req)
            stats = self._stats
            assert stats is not None
            now = req._env._clock()
            _record(stats.queue_length, now, len(queue))
            stats.reneged.add(now, now - req._time)

    def _exact_release(self, req: Request) -> None:
        """SimPy's ``res.release(req)``: a release event, served when made."""
        env = req._env
        rel = _Release(env, req)
        exact_op(env, rel, self._releases, self._exact_after_release, self._exact_serve_releases)

    def _exact_serve_releases(self) -> None:
        serve(self._releases, self._exact_do_release)

    def _exact_do_release(self, rel: _Release) -> object:
        req = rel._request
        users = self._users
        if req in users:
            users.remove(req)
            req._state = _OVER
            stats = self._stats
            assert stats is not None
            _record(stats.users, req._env._clock(), len(users))
        assert rel._ev is not None
        rel._ev.succeed(None)
        return None

    def _preempt(self, req: Request) -> bool:
        victim = max(self._users, key=_request_key)
        if victim._key <= req._key:
            return False
        stats = self._stats
        assert stats is not None
        now = stats.users.now
        self._users.remove(victim)
        victim._state = _OVER
        since = victim.usage_since if victim.usage_since is not None else now
        stats.preempted.add(now, now - since)
        stats.users.record(len(self._users))
        proc = victim._process
        if proc is not None and proc.is_alive:
            # The interrupt withdraws what the victim waits for, which may serve this queue:
            # the freed unit is held for ``req`` meanwhile (request() grants it just after).
            self._users.append(req)
            try:
                proc.interrupt(Preempted(by=req._process, usage_since=since, resource=self))
            finally:
                self._users.remove(req)
        return True

    def _grant(self, req: Request, now: float) -> None:
        stats = self._stats
        assert stats is not None
        req.usage_since = now
        users = self._users
        users.append(req)
        _record(stats.users, now, len(users))
        waits = stats.waits
        waits._times.append(now)  # Tally.add, inlined
        waits._values.append(now - req._time)
        req._state = _DONE  # _Op._complete, inlined
        req._value = req
        waiter = req._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(req)

    def _release(self, req: Request) -> None:
        req._state = _OVER
        users = self._users
        users.remove(req)
        stats = self._stats
        assert stats is not None
        env = req._env
        now = env._clock()
        queue = self._queue
        if queue:
            # The freed unit goes straight to the next request (_dispatch and _grant,
            # inlined): the number of users does not change, so it needs no record.
            nxt = queue.pop(0) if self._prioritised else queue.popleft()
            nxt.usage_since = now
            users.append(nxt)
            waits = stats.waits
            waits._times.append(now)
            waits._values.append(now - nxt._time)
            nxt._state = _DONE
            nxt._value = nxt
            waiter = nxt._waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(nxt)
            _record(stats.queue_length, now, len(queue))
            return
        _record(stats.users, now, len(users))

    def _withdraw(self, req: Request) -> None:
        req._state = _OVER
        queue = self._queue
        queue.remove(req)
        stats = self._stats
        assert stats is not None
        now = stats.queue_length._clock()
        stats.queue_length.record(len(queue))
        stats.reneged.add(now, now - req._time)
        self._dispatch()

    def _dispatch(self) -> None:
        queue = self._queue
        if not queue:
            return
        users = self._users
        capacity = self._capacity
        if len(users) >= capacity:
            return
        stats = self._stats
        assert stats is not None
        now = stats.users._clock()
        while queue and len(users) < capacity:
            req = queue.pop(0) if self._prioritised else queue.popleft()
            self._grant(req, now)
        _record(stats.queue_length, now, len(queue))

    def __repr__(self) -> str:
        label = f" {self.name}" if self.name else ""
        return (
            f"<{type(self).__name__}{label} capacity={self._capacity!r} count={len(self._users)} "
            f"queue={len(self._queue)}>"
        )


class _Release(_Op):
    """order="simpy": SimPy's release event (a get on the resource)."""

    __slots__ = ("_request",)

    def __init__(self, env: Simulation, request: Request) -> None:
        super().__init__(env)
        self._request = request

    def __repr__(self) -> str:
        return f"<release of {self._request!r}>"


def _record(series: TimeSeries, now: float, value: float) -> None:
    """``series._record_at(now, value)`` (a level holds from ``now``), for the hot paths."""
    times = series._times
    if times[-1] == now:
        series._values[-1] = value
    elif series._values[-1] != value:
        times.append(now)
        series._values.append(value)


def _request_key(req: Request) -> tuple[Any, ...]:
    return req._key


class PriorityResource(Resource):
    """A :class:`Resource` whose queue is served smallest ``priority`` first, FIFO within."""

    _prioritised = True


class PreemptiveResource(PriorityResource):
    """A :class:`PriorityResource` where an urgent request takes the unit from a user.

    A request with ``preempt=True`` (the default) that finds no free unit preempts the least
    urgent user (largest ``priority``, latest request) if that user is less urgent: the user
    loses the unit and its process receives :class:`Interrupt` with a :class:`Preempted`
    cause (by whom, since when, on which resource).  The preempted request is over (leaving
    its ``with`` block is fine); the process requests again if it wants to resume.
    """

    _preemptive = True
