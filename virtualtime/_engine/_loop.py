"""The virtual-time asyncio event loop.

This module and :mod:`virtualtime._engine._outside` (the outside-work model it asks) are the only
places in virtualtime that touch private parts of asyncio.  Each touch is marked
``# asyncio-private:`` with the reason; canary tests (``tests/test_canaries.py``, one per
assumption) and the suite on every CPython from 3.11 to 3.15 keep them honest.

The contract with :mod:`virtualtime._engine._control` (the awaitable verbs) is
:meth:`VirtualEventLoop.
drive`; with the wall clock of ``patch_time`` (:mod:`virtualtime._clocks._patch`), the read-only
:attr:`VirtualEventLoop.ticks`.  Options come from :mod:`virtualtime._options`.

How the loop decides what happens next
--------------------------------------
A stock loop asks its selector to block until the next timer is due.  This loop keeps its own
timer heap of ``(tick, priority, sequence, handle)`` tuples -- compared in C, and totally
ordered: same instant, then smaller priority, then first-scheduled first -- and, whenever
nothing is ready to run, chooses between three things:

1. **Wait for the outside world, in real time.**  While *outside work* is pending -- a thread
   job, a child process something waits for, a request to a peer outside the loop that has
   not been answered, a TLS handshake, a pending real alarm (the full model, and what does
   *not* count, is in :mod:`virtualtime._engine._outside`) -- virtual time may not overtake it: the
   clock stands still, and a timer fires only once as much real time has passed as its
   virtual delay.  A real answer therefore never loses to a virtual timeout, and a peer that
   never answers still times out, after about as much real time as the timeout says.

2. **Move time.**  With no outside work, in *autojump* mode (the default) time jumps straight
   to the next timer, after one non-blocking poll so that bytes already in the kernel are
   delivered first.  ``autojump_threshold > 0`` additionally waits that many real seconds of
   quiet before every jump, for outside work the model cannot see (a plain thread that will
   call ``call_soon_threadsafe`` later).  In *manual* mode time moves only when a driving verb
   asks (:meth:`VirtualEventLoop.evolve` and friends, or ``await virtualtime.evolve()``).  In
   *rate* mode (``rate > 0``) the loop waits in real time until each timer is due at ``rate``
   times real speed, then sets the clock to exactly that timer's instant.

3. **Declare a deadlock.**  If nothing is ready, no timer can fire, no outside work is pending
   and nothing outside keeps the loop alive (an idle connection to an outside peer, a running
   child, a pipe, a signal handler), and the loop is running a future to completion, it waits
   ``deadlock_timeout`` real seconds for another thread to call ``call_soon_threadsafe`` and
   then raises :class:`~virtualtime.DeadlockError` naming every blocked task, where it is
   suspended, and what is still registered outside -- instead of hanging.

Driving verbs are "drives": a target instant with somebody waiting for it.  A drive behaves like
a timer that fires only once the loop is idle at its instant, so ``evolve(dt)`` fires every
timer due in ``[now, now + dt]`` at its own instant, lets everything they start settle, and
only then reports back -- from outside the loop (a method that runs the loop) or inside it (an
awaitable) alike.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import contextvars
import enum
import functools
import heapq
import importlib
import inspect
import itertools
import math
import os
import sys
import threading
import time as _time_module
import weakref
from asyncio import base_events as _base_events
from asyncio import events as _asyncio_events
from asyncio import format_helpers as _format_helpers
from collections.abc import Callable, Coroutine, Generator, Iterator, Sequence
from numbers import Real
from types import FrameType
from typing import (
    TYPE_CHECKING,
    Any,
    Final,
    Literal,
    NamedTuple,
    TypeVar,
    TypeVarTuple,
    Unpack,
    overload,
)

from .._clocks._patch import TimePatch
from .._options import (
    LoopKwargs,
    LoopOptions,
    check_option,
    closed,
    configured,
    created,
    from_call,
    wall_epoch,
)
from .._shared._errors import (
    DeadlockError,
    InvalidTypeError,
    InvalidValueError,
    RunawayError,
    UsageError,
)
from .._shared._threads import ANYIO_ASYNCIO, forget, thread_table_size
from .._shared._time import (
    RESOLUTION,
    TICKS_PER_SECOND,
    RateAnchor,
    check_delay,
    check_finite,
    delay_ticks,
    shown,
    ticks_at_or_after,
    to_seconds,
    to_ticks,
)
from ._outside import CountingSelector, OutsideWork
from ._timers import NEVER, WAITER, SleepTimer, TimerQueue

__all__ = [
    "HistoryRecord",
    "RecordKind",
    "TaskRecord",
    "VirtualEventLoop",
    "running_virtual_loop",
    "set_result_unless_cancelled",
]

_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")

DriveVerb = Literal["settle", "step", "evolve", "run_until", "fast_forward"]

_real_monotonic: Final = _time_module.monotonic
_thread_table_size: Final = thread_table_size
_heappop: Final = heapq.heappop
_heappush: Final = heapq.heappush
_current_task: Final = asyncio.current_task
_modules: Final = sys.modules

_NEVER: Final = NEVER
_HORIZON: Final = NEVER / TICKS_PER_SECOND
"""The horizon of virtual time, in seconds (2**125 ns, about 4.25e28 s or 1.3e21 years).

A timer at or beyond it is a timer at infinity: accepted, like a stock loop accepts
``asyncio.sleep(1e300)``, and never fired.  The clock itself never reaches it."""

_FAR: Final = 1e18
"""Longest delay (seconds) the inline path of ``call_later`` takes without the full checks."""

_ZERO: Final = 0
"""The default ``priority``: the one value the inline path of ``call_later`` takes."""

_INT_OR_FLOAT: Final = (float, int)

_CREEP_AFTER: Final = 8
"""Rounds at one instant that may fire ``call_at`` timers re-armed at that very instant,
after which time creeps forward one tick (see ``VirtualEventLoop._vt_rearmed_round``)."""

JUMP_ROUND_EVERY: Final = 256
"""At most this many waits in a row skip their loop round (``_vt_jump_to``; a power of two)."""

_InvalidStateError: Final = asyncio.InvalidStateError
_new_handle: Final = object.__new__
_copy_context: Final = contextvars.copy_context
_WAITER: Final = WAITER
_SLEEP_TIMER: Final = SleepTimer
_Future: Final = asyncio.Future
_THIS_FILE: Final = __file__

# asyncio-private: the helper Handle._run formats a failed callback with; it took a debug
# parameter during 3.12 (what the running interpreter's Handle._run passes, we pass).
_FORMAT_TAKES_DEBUG: Final = (
    "debug" in inspect.signature(_format_helpers._format_callback_source).parameters
)

_NO_PARAMETERS: Final = inspect.Signature()
"""The signature of ``get_debug()`` and ``create_future()``, which take nothing."""

_MAX_REAL_WAIT: Final = 3600.0
"""Longest single real-time block on the selector; longer waits are made of several."""


class RecordKind(enum.Enum):
    """What a dispatched timer woke: the ``kind`` of a :class:`HistoryRecord`."""

    TASK = "task"
    """A task asleep on the timer (``asyncio.sleep``, anyio's ``sleep``, ``virtualtime.sleep``)."""
    CALLBACK = "callback"
    """A plain callback (``call_later``, the expiry of ``asyncio.timeout``)."""


class HistoryRecord(NamedTuple):
    """One dispatched timer, as kept by ``VirtualEventLoop(history=n)``.

    ``time`` is the virtual instant it fired, ``scheduled`` the virtual instant it was
    scheduled at, ``priority`` and ``seq`` its place in the total order, and ``what`` a short
    description of what it woke: ``"task <name>"`` for a sleeping task, or the callback's
    qualified name.  ``task_id`` tells tasks apart that share a name (anyio reuses names): an
    identifier of the woken task, stable for as long as the record is kept, or None for a
    plain callback.  ``kind`` says which of the two it was (:class:`RecordKind`); read
    :attr:`task_name` rather than taking ``what`` apart.
    """

    time: float
    priority: int
    seq: int
    what: str
    scheduled: float
    task_id: int | None = None
    kind: RecordKind = RecordKind.CALLBACK

    @property
    def task_name(self) -> str | None:
        """The woken task's name (``kind`` is ``TASK``), or None for a plain callback."""
        return self.what[len("task ") :] if self.kind is RecordKind.TASK else None


class TaskRecord(NamedTuple):
    """One task made by a loop that keeps history (:attr:`VirtualEventLoop.task_history`).

    ``created`` is the virtual instant the task was made, ``ended`` the instant it finished
    (returned, raised or was cancelled), or None if it had not finished when the list was
    read; ``name`` is its name and ``task_id`` the same identifier :attr:`HistoryRecord.task_id`
    gives its sleeps.  Traces draw a task's life from these, so that a task that never sleeps
    on a timer (it waits on queues, events, other tasks) still gets a row.
    """

    created: float
    ended: float | None
    name: str
    task_id: int


class _Timer(asyncio.TimerHandle):
    """A TimerHandle built without the stock constructor's per-call debug checks.

    asyncio-private: the fields below are exactly those of ``Handle`` and ``TimerHandle``
    (unchanged from 3.11 to 3.15).  Setting them directly saves a ``get_debug()`` call and a
    ``super()`` chain on every timer, the single hottest allocation of a virtual-time program.
    Debug-mode loops use the stock constructor, which records the source traceback.
    """

    __slots__ = ()

    def __init__(
        self,
        when: float,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        loop: asyncio.AbstractEventLoop,
        context: contextvars.Context | None,
    ) -> None:
        self._context = contextvars.copy_context() if context is None else context
        self._loop = loop
        self._callback = callback
        self._args = args
        self._cancelled = False
        self._repr = None
        self._source_traceback = None
        self._when = when
        self._scheduled = True

    def cancel(self) -> None:
        # The stock TimerHandle.cancel() calls back into the loop and then Handle.cancel(),
        # which asks get_debug(); a non-debug timer needs only this.
        if not self._cancelled:
            if self._scheduled:
                self._loop._vt_timers.cancelled += 1  # type: ignore[attr-defined]
            self._cancelled = True
            self._callback = None  # type: ignore[assignment]
            self._args = None  # type: ignore[assignment]


class _Soon(asyncio.Handle):
    """A ready-queue Handle built without the stock constructor's per-call debug check.

    asyncio-private: the fields are exactly those of ``Handle`` (unchanged from 3.11 to 3.15),
    as for :class:`_Timer`.  Every task wake-up goes through ``call_soon`` (a future schedules
    its waiter's callback with it), so the stock ``get_debug()`` call and the
    ``call_soon`` -> ``_call_soon`` -> ``Handle.__init__`` chain cost on every wake-up.  The
    fields are therefore set where the handle is made -- inline in
    :meth:`VirtualEventLoop.call_soon`, and in C by the compiled core.  ``_Soon()`` makes an
    empty handle: its constructor is ``object.__init__``, which runs in C, so the call costs
    less than ``object.__new__(_Soon)`` and far less than the stock ``Handle.__init__``.
    Debug-mode loops use the stock path, which records the source traceback.
    """

    __slots__ = ()
    if not TYPE_CHECKING:  # (type checkers keep reading Handle's signature)
        __init__ = object.__init__  # see above: the maker sets the fields
    # The stock fields the loop sets (typeshed does not declare these private ones).
    _context: contextvars.Context
    _loop: asyncio.AbstractEventLoop
    _callback: Callable[..., object]
    _repr: str | None
    _source_traceback: Any


class Task(asyncio.Task[_T]):
    """A task of the virtual loop: a stock asyncio task whose hash is its creation number.

    ``loop.create_task`` (and so ``asyncio.create_task``, ``TaskGroup``, ``gather`` of
    coroutines, anyio's task groups, the task that runs ``virtualtime.run``'s coroutine) makes
    these unless a task factory is set.  Why: code that keeps tasks in a ``set`` iterates them
    in the order of their hashes, and a stock task hashes by its memory address -- so a
    cancelled ``TaskGroup`` (asyncio's and anyio's both iterate a set) cancelled its children
    in an order that changed with the address layout of the process, the hash seed and
    everything allocated before.  Numbered tasks make that order, and every other iteration
    over a set of tasks (``asyncio.wait``'s ``done`` and ``pending``, ``all_tasks()``), a
    function of the program alone: every run is the same run.

    Everything else is the stock task (the C one where CPython has it): its constructor,
    stepping, cancellation, ``current_task()``, eager start, its repr (the class is named
    ``Task``).  ``isinstance(t, asyncio.Task)`` holds; ``type(t) is asyncio.Task`` does not.
    Equality stays identity.  A task factory you set with ``loop.set_task_factory`` is used
    as on any loop, and its tasks hash as they always do; so does a task class swapped in
    for ``asyncio.tasks.Task`` (CPython's tests of the pure-Python tasks do that).
    """

    __slots__ = ("_vt_order",)

    _vt_order: int

    def __hash__(self) -> int:
        return self._vt_order


# The task class the stock create_task makes, looked up where it does (asyncio.tasks.Task,
# at each call): code that swaps it -- CPython's own tests of the pure-Python tasks replace it
# with tasks._PyTask -- gets its own class, unnumbered, as from the stock loop.
_asyncio_tasks: Final = asyncio.tasks
_STOCK_TASK: Final = asyncio.Task

# The two halves of calling Task(...): the number is set between them, because the stock
# constructor already hashes the task (it registers it in a WeakSet, to 3.13).
_new_task: Final = Task.__new__
_init_task: Final = asyncio.Task.__init__


def set_result_unless_cancelled(fut: asyncio.Future[Any], result: Any) -> None:
    """Resolve ``fut`` unless it is already done: the timer callback the loop recognises.

    A ``call_later``/``call_at`` timer whose callback is this function (or asyncio's own
    ``futures._set_result_unless_cancelled``, which ``asyncio.sleep`` schedules) is resolved by
    the loop in timer order, without a trip through the ready queue.
    """
    if not fut.done():
        try:  # noqa: SIM105 - contextlib.suppress costs a context manager per wake-up
            fut.set_result(result)
        except _InvalidStateError:  # cancelled in between, by a signal handler (Ctrl-C)
            pass


class _RunningHere(threading.local):
    """The virtual loop running in this thread (``loop``), or None."""

    loop: VirtualEventLoop | None = None


RUNNING_HERE: Final = _RunningHere()
"""Which virtual loop runs in this thread: what ``asyncio.get_running_loop()`` returns while
one does, set and restored by :meth:`VirtualEventLoop.run_forever`.

For :func:`virtualtime.sleep`, on every wake-up.  On CPython 3.11 ``get_running_loop()``
makes a ``getpid()`` system call each time (to tell a forked child from its parent), which
costs more than the rest of the sleep's own bookkeeping; reading a thread-local does not.
A forked child forgets it (below), as ``get_running_loop()`` does.
"""


def _forget_running_in_child() -> None:
    RUNNING_HERE.loop = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_running_in_child)


_ANYIO_ASYNCIO: Final = ANYIO_ASYNCIO
_anyio_seen: object = None
"""anyio's asyncio backend module as :func:`_install_anyio_sleep` last handled it (fully
imported).  Kept by identity, not as a once-per-process flag: a runner that restores
``sys.modules`` (pytester in process) or a reload brings a new module to route."""


def _install_anyio_sleep() -> None:
    """anyio's backend is imported: route its sleep on virtual loops (_anyio_sleep.py)."""
    global _anyio_seen
    # Here, not at the top: it imports this module.  Through sys.modules, not the package's
    # attribute: after a runner restored sys.modules the two can differ, and the copy in
    # sys.modules is the one everybody else asks.
    _anyio_sleep = importlib.import_module(f"{__package__}._anyio_sleep")

    module = _modules.get(_ANYIO_ASYNCIO)
    if isinstance(getattr(module, "AsyncIOBackend", None), type):
        _anyio_seen = module  # else still being imported: look again at the next run
    _anyio_sleep.install()


_short: Final = shown  # repr for a message: a 400-digit int is named, not printed


def _seconds(name: str, value: object) -> float:
    """A time argument of ``call_at``/``call_later`` as a float, or an error naming it.

    Accepts what a stock loop accepts in practice (any real number; ``inf`` included);
    refuses ``None``, strings, lists and other non-numbers at once with a ``TypeError``, NaN
    with a ``ValueError``, and an int too large for any float with a ``ValueError`` rather
    than the stock ``OverflowError``.
    """
    if type(value) is float:
        seconds = value
    elif value is None:
        raise InvalidTypeError(f"{name} cannot be None")
    elif not isinstance(value, Real):
        raise InvalidTypeError(
            f"{name} must be a number of seconds (an int or a float), got {_short(value)} "
            f"({type(value).__name__})"
        )
    else:
        try:
            seconds = float(value)
        except OverflowError:
            raise InvalidValueError(
                f"{name} is too large for a time: {_short(value)} is beyond any float "
                "(use math.inf to wait for ever)"
            ) from None
    if seconds != seconds:
        raise InvalidValueError(f"{name} must not be NaN, got {value!r}")
    return seconds


def _check_span(name: str, value: object, now: int) -> int:
    """Ticks of a driving verb's span ``value`` (>= 0) from tick ``now``, below the horizon."""
    span = check_delay(name, value)
    if span < _HORIZON:
        ticks = to_ticks(span)
        if now + ticks < _NEVER:
            return ticks
    raise InvalidValueError(
        f"{name} would take virtual time past its horizon ({_HORIZON:.4g} s): got {_short(value)}"
    )


def _user_frame(frame: FrameType | None) -> FrameType | None:
    """The innermost frame outside this module: where the caller scheduled a timer."""
    while frame is not None and frame.f_code.co_filename == _THIS_FILE:
        frame = frame.f_back
    return frame


def _describe_handle(handle: asyncio.Handle) -> str:
    """What a ready handle will run: a task and where it is, or a callback's name."""
    callback = getattr(handle, "_callback", None)
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        name, where = _describe_task(owner)
        return f"task {name!r} at {where}"
    target = getattr(callback, "func", callback)  # functools.partial
    name = getattr(target, "__qualname__", None) or repr(target)
    code = getattr(target, "__code__", None)
    if code is not None:
        return f"callback {name}() from {code.co_filename}:{code.co_firstlineno}"
    return f"callback {name}"


# Timer callbacks that do nothing but resolve a future (``asyncio.sleep``'s and our own).
# asyncio-private: futures._set_result_unless_cancelled is what asyncio.sleep schedules.
_WAKERS: Final = (
    asyncio.futures._set_result_unless_cancelled,  # type: ignore[attr-defined]
    set_result_unless_cancelled,
)
_SLEEP_WAKER: Final = _WAKERS[0]
_OUR_WAKER: Final = _WAKERS[1]


_WAKE_CONTEXT: Final = contextvars.Context()
"""The context every waker timer (``asyncio.sleep``'s) gets when it is not given one.

A timer handle copies the current context so that its callback runs in it; a waker's callback
only resolves its future, which schedules each of the future's callbacks in *their* own
contexts, so it reads and sets no variable.  The loop resolves the future directly, and even
when it does run the handle (debug mode) nothing can observe the context.  One shared, empty
context instead of a copy per sleep saves a context object (64 bytes, and its allocation) for
every pending ``asyncio.sleep``.
"""


def _load_core() -> Any:
    """The compiled core (``virtualtime._engine._cwake``), set up; None for the pure-Python path.

    Absent when it was not built (no compiler at install time), ignored with
    ``VIRTUALTIME_PURE_PYTHON=1``, and refused -- silently, the pure path is always correct --
    if it does not recognise this interpreter's handle layout.
    """
    if os.environ.get("VIRTUALTIME_PURE_PYTHON"):
        return None
    try:
        from . import _cwake
    except ImportError:
        return None
    try:
        # asyncio-private: the core reads and writes Handle/TimerHandle slots directly (the
        # fields _Timer and _Soon set); setup() checks each is a plain slot first.
        _cwake.setup(
            WAITER,
            asyncio.TimerHandle,
            _Soon,
            *_WAKERS,
            asyncio.InvalidStateError,
            _WAKE_CONTEXT,
            SleepTimer,
        )
    except (TypeError, AttributeError):  # pragma: no cover - a future CPython's layout
        return None
    return _cwake


_core: Final = _load_core()
core: Final = _core
"""The compiled core module, set up; None on the pure-Python path."""
COMPILED: Final = _core is not None
"""Is the loop running on its compiled core?  (False: the pure-Python path.)"""
_core_fire: Final = None if _core is None else _core.fire
_core_run_ready: Final = None if _core is None else _core.run_ready
core_push_after: Final = None if _core is None else _core.push_after
"""``push_after(heap, next_seq, ticks, delay, priority, item) -> seq``, or None: the entry
:meth:`VirtualEventLoop._vt_wake_after` pushes, in one C call (the sim kit's sleeps use it)."""


def _history_record(raw: tuple[int, int, int, object, int]) -> HistoryRecord:
    ticks, priority, seq, what, scheduled = raw
    if isinstance(what, asyncio.Task):
        return HistoryRecord(
            to_seconds(ticks),
            priority,
            seq,
            f"task {what.get_name()}",
            to_seconds(scheduled),
            id(what),
            RecordKind.TASK,
        )
    name = getattr(what, "__qualname__", None) or repr(what)
    return HistoryRecord(to_seconds(ticks), priority, seq, name, to_seconds(scheduled))


def _task_name(task: asyncio.Future[Any]) -> str:
    """A task's name; a task factory may also make futures that are not tasks (no name)."""
    get_name = getattr(task, "get_name", None)
    return str(get_name()) if callable(get_name) else type(task).__name__


def _is_process_pool(executor: concurrent.futures.Executor) -> bool:
    # Reading concurrent.futures.ProcessPoolExecutor imports multiprocessing (a lazy module
    # attribute), which does file-system work on the loop thread; if the module that defines
    # it was never imported, no executor can be one.
    process = _modules.get("concurrent.futures.process")
    return process is not None and isinstance(executor, process.ProcessPoolExecutor)


def _describe_task(task: asyncio.Task[Any]) -> tuple[str, str]:
    """``(name, where)`` for a blocked task: its chain of awaits, outermost first."""
    coro: Any = task.get_coro()
    frames: list[str] = []
    while coro is not None and len(frames) < 20:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        code = frame.f_code
        frames.append(f"{code.co_qualname}() at {code.co_filename}:{frame.f_lineno}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    where = " -> ".join(frames) if frames else "not started"
    # asyncio-private: the future a task is blocked on; read only for this report.
    waiter = getattr(task, "_fut_waiter", None)
    if waiter is not None:
        where += f", awaiting {type(waiter).__name__}"
    return task.get_name(), where


def _report_order(entry: tuple[str, str]) -> tuple[str, int, str]:
    """Tasks by name, numbers as numbers (``Task-2`` before ``Task-10``), then by place."""
    name, where = entry
    stem, _, number = name.rpartition("-")
    if stem and number.isdigit():
        return stem, int(number), where
    return name, -1, where


class _Drive:
    """Somebody waiting for the loop to be idle at a target instant (the heap key)."""

    __slots__ = ("future",)

    def __init__(self, future: asyncio.Future[float] | None) -> None:
        self.future = future  # None: an outside verb, which stops the loop instead


class VirtualEventLoop(asyncio.SelectorEventLoop):
    """An asyncio event loop whose clock is virtual: exact, instant and repeatable.

    Everything that asks the loop for the time -- ``asyncio.sleep``, ``wait_for``,
    ``asyncio.timeout``, ``call_later``, anyio's ``sleep`` and ``fail_after`` -- runs on virtual
    time, which only moves when the loop decides to move it.  Real sockets, pipes, subprocesses
    and threads keep working in real time.  Build one with :func:`virtualtime.new_event_loop`
    (a loop factory for ``asyncio.Runner``, ``asyncio.run`` and anyio) or run a coroutine with
    :func:`virtualtime.run`.

    Options (keywords, or one :class:`~virtualtime.LoopOptions` passed positionally; checked
    by that options catalogue, so a bad value raises ``ValueError``/``TypeError`` naming the
    option before any resource is created; inside :func:`virtualtime.configure` its options
    apply on top):

    ``start`` (0.0)
        Virtual time when the loop is created, in seconds; finite and >= 0.
    ``autojump`` (True)
        Jump to the next timer as soon as the loop is idle.  Turn it off (*manual* mode) to
        hold time still and move it yourself with :meth:`step`, :meth:`evolve`,
        :meth:`run_until` and :meth:`fast_forward` -- from outside the loop, or with
        ``await virtualtime.evolve(...)`` and friends from a task inside it.  Settable.
    ``autojump_threshold`` (0.0)
        Real seconds the loop must be quiet before each jump.  0 (after one non-blocking poll)
        is right almost always: threads, children, outside peers and alarms are already waited
        for by the outside-work model.  Raise it (0.05--0.5) only for outside work the model
        cannot see -- a plain ``threading.Thread`` that calls ``call_soon_threadsafe`` after a
        while, a Unix socket or pipe to another process -- knowing that every jump then costs
        that much real time.
    ``rate`` (0.0)
        0 is pure virtual time.  ``r > 0`` paces the loop at ``r`` times real time
        (``rate=1`` is real time, ``rate=100`` a hundred times faster): before each timer
        instant it waits the real time that is due, then fires it at exactly its virtual
        instant.  Use it to watch a simulation unfold or to co-simulate with real hardware.
        Driving verbs still move time at once.  Settable at run time; the pacing re-anchors
        at the current instant, so the clock never jumps at the change.
    ``history`` (None)
        Keep the latest ``n`` dispatched timers as :class:`HistoryRecord` in :attr:`history`,
        and the latest ``n`` tasks made by :meth:`create_task` as :class:`TaskRecord` in
        :attr:`task_history` (for traces, plots and determinism checks).  None costs nothing.
    ``deadlock_timeout`` (0.25)
        Real seconds to wait, when nothing at all can happen, for another thread to wake the
        loop before raising :class:`~virtualtime.DeadlockError`.  ``math.inf`` never declares
        a deadlock: for a server whose only hope is a client from outside, since a listening
        socket nobody is connected to does not count as something that can happen (see
        :mod:`virtualtime._engine._outside`).
    ``patch_time`` (False) and ``wall_start`` (None)
        With ``patch_time=True``, while this loop runs, ``time.monotonic()``,
        ``time.perf_counter()``, ``time.time()``, ``datetime.datetime.now()`` and friends follow
        virtual time in the loop's thread, however a library bound them (threads that existed
        before the run and executor workers keep real clocks; a thread the loop's thread starts
        during the run shares its clock until the run ends).  ``wall_start`` is
        the wall-clock epoch of virtual time ``start`` (a POSIX timestamp, or a datetime --
        a naive one is read as local time, like ``datetime.timestamp()``; default: the real
        time when the loop is created).  See
        :func:`virtualtime.wall_time`.
    ``max_rounds_per_instant`` (1,000,000)
        Raise :class:`~virtualtime.RunawayError` when the loop has gone round this many times
        at one virtual instant without time moving or real I/O arriving: something keeps
        rescheduling itself with zero delay (``call_soon``, ``call_later(0)``,
        ``sleep(0)`` in a loop), and time would otherwise never advance.  A large fan-out
        (a million tasks started at once) is one round, not a million.  Creeping (below) is
        not progress: it does not reset the count.

    Ordering guarantee: timers due at the same virtual instant run in order of priority
    (smaller first; ``call_later(..., priority=p)``, :func:`virtualtime.sleep`), then first
    scheduled first.  Time never goes backwards.

    Two limits of the clock.  It has a *horizon*, 2**125 ns (about 4.25e28 s): a timer at or
    beyond it is a timer at infinity (never fired; :meth:`peek` says ``math.inf``), and the
    clock never reaches it.  And a ``call_at`` deadline that keeps landing on the current
    instant (a rate limiter whose computed wake-up rounds to now) lets time *creep* one
    nanosecond after 8 such rounds, as a real clock would have moved; zero delays never do.
    """

    # asyncio-private: BaseEventLoop.__del__ reads _closed.  A loop whose options were rejected
    # never opened anything, so until BaseEventLoop.__init__ sets it, it counts as closed.
    _closed = True

    if TYPE_CHECKING:
        # asyncio-private attributes and methods this module uses, which typeshed omits.
        _ready: collections.deque[asyncio.Handle]
        _stopping: bool
        _debug: bool
        _default_executor: concurrent.futures.ThreadPoolExecutor | None
        _current_handle: asyncio.Handle | None

        def _check_closed(self) -> None: ...
        def _check_thread(self) -> None: ...
        def _check_callback(self, callback: Callable[..., Any], method: str) -> None: ...
        def _check_default_executor(self) -> None: ...
        def _process_events(self, event_list: list[Any]) -> None: ...

    def __init__(self, options: LoopOptions | None = None, /, **kwargs: Unpack[LoopKwargs]) -> None:
        # Validate everything before creating any resource (the selector and self-pipe).
        checked, layers = configured(from_call(options, kwargs, "VirtualEventLoop"))
        start = checked.start
        autojump = checked.autojump
        autojump_threshold = checked.autojump_threshold
        rate = checked.rate
        history = checked.history
        deadlock_timeout = checked.deadlock_timeout
        max_rounds_per_instant = checked.max_rounds_per_instant
        patch_time = checked.patch_time
        wall = wall_epoch(checked)
        self._vt_ticks = to_ticks(start)
        self._vt_now = to_seconds(self._vt_ticks)
        # A watched horizon (_vt_watch_horizon): the first tick past it, and who is told when
        # time gets there.  Unwatched, no tick is past it.
        self._vt_beyond = _NEVER
        self._vt_at_horizon: Callable[[], object] | None = None
        self._vt_start = self._vt_now
        # seq -> (tick it was scheduled at, task that scheduled it), kept only with history.
        self._vt_scheduled_at: dict[int, tuple[int, asyncio.Task[Any] | None]] = {}
        self._vt_timers = TimerQueue(on_discard=self._vt_forget_seq)
        # The timer heap itself, read directly on the hot path (the queue changes it in place).
        self._vt_heap: list[tuple[int, int, int, Any]] = self._vt_timers.heap
        self._vt_seq = self._vt_timers.next_seq
        self._vt_autojump = autojump
        self._vt_threshold = autojump_threshold
        self._vt_deadlock_timeout = deadlock_timeout
        self._vt_max_instant = max_rounds_per_instant
        self._vt_instant_count = 0
        # The livelock guard (see _vt_rearmed_round): was call_at() asked for a deadline
        # already reached since the last round that fired timers; at which tick, how many
        # rounds; and (first tick, ticks crept) of the latest run of creeps.
        self._vt_rearmed = False
        self._vt_rearm_tick = -1
        self._vt_rearm_rounds = 0
        self._vt_creeping = (-2, 0)
        # Waits that skipped their loop round (_vt_jump_to), counted to take one in
        # _JUMP_ROUND_EVERY anyway.
        self._vt_skipped = 0
        self._vt_drives: list[tuple[int, int, _Drive]] = []
        self._vt_target: asyncio.Future[Any] | None = None
        self._vt_fired = 0
        # The creation number of the next Task made by create_task (see Task).
        self._vt_task_number = itertools.count().__next__
        # Raw records (fired tick, priority, seq, task or callback, scheduled tick), turned
        # into HistoryRecords only when read: plain tuples are cheap for the GC to ignore.
        self._vt_history: collections.deque[tuple[int, int, int, object, int]] | None = (
            collections.deque(maxlen=history) if history else None
        )
        # With history, the lives of the tasks create_task makes: a task still running ->
        # (creation number, created tick), weakly (a task nobody holds is freed as usual); a
        # finished one -> (number, created tick, ended tick, id, name), the latest n kept.
        self._vt_running: weakref.WeakKeyDictionary[asyncio.Future[Any], tuple[int, int]] | None
        self._vt_lives: collections.deque[tuple[int, int, int, int, str]] | None
        if history:
            self._vt_running = weakref.WeakKeyDictionary()
            self._vt_lives = collections.deque(maxlen=history)
        else:
            self._vt_running = self._vt_lives = None
        self._vt_lives_made = itertools.count().__next__
        self._vt_paced = rate > 0
        self._vt_anchor = RateAnchor(self._vt_now, rate)
        self._vt_selector = CountingSelector()
        self._vt_world = OutsideWork(self, self._vt_selector)
        self._vt_fast = False
        self._vt_lean = False
        self._vt_plain = False
        self._vt_native_sleep = False
        self._vt_update_fast()
        self._vt_patch = (
            TimePatch(self, wall, direct=type(self).time is VirtualEventLoop.time)
            if patch_time
            else None
        )
        self._vt_wall = wall
        super().__init__(selector=self._vt_selector)
        # asyncio-private: add_signal_handler() delivers signals through the self-pipe, which
        # only a poll drains; the Unix loop keeps its handlers in this dict (same object for
        # the loop's life), absent on other platforms.
        self._vt_signals: dict[int, Any] = getattr(self, "_signal_handlers", {})
        self._vt_world.signals = self._vt_signals
        # asyncio-private: _ssock is the read end of the self-pipe, which is not outside work.
        self._vt_world.self_pipe = self._ssock.fileno()  # type: ignore[attr-defined]
        # asyncio-private: _clock_resolution is what the stock _run_once adds to time() to
        # find due timers.  Ours compares integer ticks instead; keep the attribute truthful.
        self._clock_resolution = RESOLUTION
        # The configure() layers this loop was made under: told when it closes.
        self._vt_layers = layers
        if layers:
            created(self, layers)
        self._vt_lean_get_debug()
        self._vt_update_fast()  # the base constructor has set _debug

    # ------------------------------------------------------------------ clock

    def time(self) -> float:
        """The virtual time now, in seconds (a float of a whole number of nanoseconds)."""
        return self._vt_now

    @property
    def autojump(self) -> bool:
        """Whether time jumps to the next timer as soon as the loop is idle."""
        return self._vt_autojump

    @autojump.setter
    def autojump(self, value: bool) -> None:
        self._vt_autojump = check_option("autojump", value)
        self._vt_update_fast()

    @property
    def rate(self) -> float:
        """Virtual seconds per real second; 0 means pure virtual time.

        Setting it takes effect at once and re-anchors, so the clock neither jumps forwards nor
        backwards at the change.
        """
        return self._vt_anchor.rate if self._vt_paced else 0.0

    @rate.setter
    def rate(self, value: float) -> None:
        value = check_option("rate", value)
        self._vt_anchor.rebase(self._vt_now)
        self._vt_anchor.set_rate(value)
        self._vt_paced = value > 0
        self._vt_update_fast()

    @property
    def autojump_threshold(self) -> float:
        """Real seconds of quiet the loop waits before each jump (see the class docstring)."""
        return self._vt_threshold

    @autojump_threshold.setter
    def autojump_threshold(self, value: float) -> None:
        self._vt_threshold = check_option("autojump_threshold", value)
        self._vt_update_fast()

    @property
    def history(self) -> Sequence[HistoryRecord]:
        """The latest dispatched timers, oldest first (empty when history is off).

        A read-only snapshot: it does not change when the loop goes on running.
        """
        if self._vt_history is None:
            return ()
        return tuple(map(_history_record, self._vt_history))

    @property
    def task_history(self) -> Sequence[TaskRecord]:
        """The latest tasks :meth:`create_task` made, oldest first (empty when history is off).

        Finished tasks and tasks still running (``ended`` is None), as a read-only snapshot;
        with ``history=n`` the latest ``n`` finished ones are kept.  Tasks made directly with
        ``asyncio.Task(coro, loop=loop)`` are not listed.
        """
        if self._vt_lives is None or self._vt_running is None:
            return ()
        now = self._vt_ticks
        lives = list(self._vt_lives)
        # Running, or done at this instant with its done callback still to come.
        lives += [
            (number, created, now if task.done() else -1, id(task), _task_name(task))
            for task, (number, created) in list(self._vt_running.items())
        ]
        lives.sort()
        return tuple(
            TaskRecord(to_seconds(created), None if ended < 0 else to_seconds(ended), name, task_id)
            for _number, created, ended, task_id, name in lives
        )

    def _vt_task_made(self, task: asyncio.Future[Any]) -> None:
        """History is on: note when ``task`` was made, and have it say when it ends."""
        running = self._vt_running
        if running is not None:
            running[task] = (self._vt_lives_made(), self._vt_ticks)
            task.add_done_callback(self._vt_task_ended)

    def _vt_task_ended(self, task: asyncio.Future[Any]) -> None:
        running, lives = self._vt_running, self._vt_lives
        if running is None or lives is None:
            return
        made = running.pop(task, None)
        if made is not None:
            lives.append((*made, self._vt_ticks, id(task), _task_name(task)))

    @property
    def timers_fired(self) -> int:
        """How many timers this loop has dispatched so far."""
        return self._vt_fired

    @property
    def wall_start(self) -> float:
        """The wall-clock time (POSIX timestamp) of virtual time :attr:`start_time`.

        :func:`virtualtime.wall_time` adds the virtual time elapsed since then.
        """
        return self._vt_wall

    @property
    def start_time(self) -> float:
        """The virtual time the loop was created at."""
        return self._vt_start

    # ------------------------------------------- the contract with virtualtime._engine._control

    @property
    def ticks(self) -> int:
        """The virtual time now as an exact integer count of 1 ns ticks (read-only).

        ``time()`` is the float of it.  This is what other modules read when a float is not
        exact enough (the wall clock of ``patch_time``, which counts nanoseconds since 1970).
        """
        return self._vt_ticks

    @overload
    async def drive(self, verb: Literal["step"], value: float = 0.0) -> float | None: ...
    @overload
    async def drive(
        self, verb: Literal["settle", "evolve", "run_until", "fast_forward"], value: float = 0.0
    ) -> float: ...
    async def drive(self, verb: DriveVerb, value: float = 0.0) -> float | None:
        """Drive time from a task of this running loop: the awaitable verbs' one entry point.

        ``verb`` is ``"settle"``, ``"step"``, ``"evolve"`` (``value`` is ``dt``),
        ``"run_until"`` (``value`` is ``t``) or ``"fast_forward"`` (``value`` is ``dt``),
        with the meaning of the synchronous methods of the same names.  It returns once the
        loop is idle at the target.  :func:`virtualtime.evolve` and its siblings call this
        after finding the running loop; call those, not this.  It is a coroutine because it
        must be awaited from inside the running loop (the synchronous twins drive a loop from
        outside).  A bad ``value`` raises before time moves.
        """
        if verb == "settle":
            return await self._vt_await_drive(self._vt_ticks)
        if verb == "step":
            fired = self._vt_fired
            await self._vt_await_drive(self._vt_ticks)
            if self._vt_fired > fired:  # timers were due at the current instant: that was it
                return self.time()
            nxt = self._vt_next_ticks()
            if nxt is None:
                return None
            return await self._vt_await_drive(nxt)
        if verb == "evolve":
            return await self._vt_await_drive(self._vt_ticks + self._vt_span_ticks(value))
        if verb == "run_until":
            return await self._vt_await_drive(self._vt_check_target(value))
        if verb == "fast_forward":
            self._vt_leap(self._vt_span_ticks(value))
            return await self._vt_await_drive(self._vt_ticks)
        raise InvalidValueError(
            f"verb must be one of settle, step, evolve, run_until, fast_forward; got {verb!r}"
        )

    async def _vt_await_drive(self, target: int) -> float:
        future = self._vt_drive_inside(target)
        try:
            return await future
        finally:
            if not future.done():
                self._vt_cancel_drive(future)

    def _vt_lean_get_debug(self) -> None:
        # Every Future and Task built on this loop asks loop.get_debug() (from C, once per
        # future: every sleep).  The stock method is a Python function, and so a frame per
        # call; an instance attribute that is a C callable reading the same flag answers
        # without one.  set_debug() keeps working: the flag is read at each call.  The same
        # for create_future (asyncio.sleep, wait_for, queues and locks call it): the stock
        # method is exactly this call, made from a Python frame.  A subclass that overrides
        # either method keeps its own.
        # The stand-ins describe themselves as the methods they replace: the partials carry
        # a __signature__, the compiled callers answer one (_cwake.c, signature_of), for
        # inspect.signature, help() and pytest-mock.  unittest.mock's autospec reads the
        # signature of obj.__call__ instead when obj is not a function: a partial's own
        # __call__ attribute (the partial itself; calls go through its type) points it there.
        cls = type(self)
        if cls.get_debug is _base_events.BaseEventLoop.get_debug:
            if _core is not None:  # the compiled twin: reads the flag from the loop's __dict__
                self.get_debug = _core.DictFlag(self.__dict__, "_debug")  # type: ignore[method-assign]
            else:  # the same read in pure Python: the dict's own lookup, no attribute search
                flag = functools.partial(self.__dict__.__getitem__, "_debug")
                flag.__signature__ = _NO_PARAMETERS  # type: ignore[attr-defined]
                flag.__call__ = flag  # type: ignore[method-assign]
                self.get_debug = flag  # type: ignore[method-assign]
        if cls.create_future is _base_events.BaseEventLoop.create_future:
            make_future = functools.partial(_Future, loop=self)
            make_future.__signature__ = _NO_PARAMETERS  # type: ignore[attr-defined]
            make_future.__call__ = make_future  # type: ignore[method-assign]
            self.create_future = make_future  # type: ignore[method-assign]
        if _core is not None and cls.call_later is VirtualEventLoop.call_later:
            # The compiled call_later: the inline path below (every asyncio.sleep), without a
            # Python frame; anything unusual (a priority, debug mode, history, an odd delay)
            # calls the method.
            self.call_later = _core.LaterCaller(  # type: ignore[method-assign]
                self, _Timer, functools.partial(VirtualEventLoop.call_later, self)
            )
        if _core is not None and cls.call_soon is VirtualEventLoop.call_soon:
            # The compiled call_soon: the same lean handle, made without a Python frame; in
            # debug mode or on a closed loop it calls the method below.
            self.call_soon = _core.SoonCaller(  # type: ignore[method-assign]
                self, self._ready.append, functools.partial(VirtualEventLoop.call_soon, self)
            )
        elif cls.call_soon is VirtualEventLoop.call_soon:
            # Pure Python: the method itself, bound once.  A C future schedules its callbacks
            # with getattr(loop, "call_soon") (every wake-up of every task), which binds a new
            # method object each time unless the instance already holds one (about 1 % of a
            # pure-Python wake-up).
            self.call_soon = self.call_soon  # type: ignore[method-assign]

    def _vt_update_fast(self) -> None:
        # The common case, decided once per mode change rather than on every iteration.
        self._vt_fast = (
            self._vt_autojump and not self._vt_paced and self._vt_threshold == 0
        ) and not self._vt_world.holds
        # The lean timer of call_later: no history to keep, not in debug mode, not closed.
        self._vt_lean = (
            self._vt_history is None
            and not getattr(self, "_debug", False)
            and not getattr(self, "_closed", False)
        )
        # The plain round of _run_once: the fast path with lean timers.
        self._vt_plain = self._vt_fast and self._vt_lean
        # anyio.sleep may take virtualtime.sleep (_anyio_sleep.py): where asyncio.sleep would
        # take the lean timer, on a class that keeps the stock timers and futures.
        cls = type(self)
        self._vt_native_sleep = (
            self._vt_lean
            and cls.call_later is VirtualEventLoop.call_later
            and cls.create_future is _base_events.BaseEventLoop.create_future
        )

    def set_debug(self, enabled: bool) -> None:
        """Like the stock method (debug mode takes the loop's general path)."""
        super().set_debug(enabled)
        self._vt_update_fast()

    def add_signal_handler(self, sig: int, callback: Callable[[*_Ts], object], *args: *_Ts) -> None:
        """Like the stock method; a handler is outside work (a signal may come at any time)."""
        super().add_signal_handler(sig, callback, *args)
        self._vt_world.changes += 1

    def _vt_set_ticks(self, ticks: int) -> None:
        self._vt_ticks = ticks
        now = ticks / TICKS_PER_SECOND
        if now > self._vt_now:  # never below a deadline already read (see call_at)
            self._vt_now = now
        self._vt_instant_count = 0
        if ticks >= self._vt_beyond:
            self._vt_past_horizon()

    def _vt_watch_horizon(self, ticks: int | None, told: Callable[[], object] | None) -> None:
        """Call ``told()`` whenever virtual time moves to ``ticks`` or past it (None: stop).

        The pytest plugin's ``max_time``: every way time moves -- a timer of any kind
        (``call_later``, ``asyncio.sleep``, ``virtualtime.sleep``, anyio's sleep, the sim
        kit's waits), a jump, a driving verb -- goes through :meth:`_vt_set_ticks`, and the
        plain round steps aside for a head at or past ``ticks``.  ``told`` runs before the
        timers of that instant fire, each time time moves while past it; it must not raise.
        """
        self._vt_beyond = _NEVER if ticks is None else min(ticks, _NEVER)
        self._vt_at_horizon = told

    def _vt_past_horizon(self) -> None:
        told = self._vt_at_horizon
        if told is not None:
            told()

    def _vt_rearmed_round(self, now: int) -> int:
        """A round fires timers after ``call_at`` was asked for a deadline already reached.

        Returns the tick the round fires at: ``now``, or one tick later once this has
        happened :data:`_CREEP_AFTER` times at one instant.  On a real clock time moves by
        itself between two rounds, and code that computes its next deadline from
        ``time()`` gets out: aiolimiter's wake-up deadline ``last_check + needed / rate``
        can round to a float equal to now, so it re-arms ``call_at(now)`` until the clock
        moves.  Creeping one tick is the least change that lets it out, and it is not
        progress for the runaway guard (its round count is kept), so a genuine spin still
        ends in :class:`RunawayError`.  Zero *delays* (``call_later(0)``, ``sleep(0,
        priority=p)``) ask for the current instant on purpose and never creep: only a
        deadline that keeps landing on the current instant does.
        """
        self._vt_rearmed = False
        if self._vt_rearm_tick != now:
            self._vt_rearm_tick = now
            self._vt_rearm_rounds = 1
            return now
        rounds = self._vt_rearm_rounds + 1
        if rounds <= _CREEP_AFTER:
            self._vt_rearm_rounds = rounds
            return now
        ticks = now + 1
        self._vt_ticks = ticks
        seconds = ticks / TICKS_PER_SECOND
        if seconds > self._vt_now:
            self._vt_now = seconds
        if ticks >= self._vt_beyond:
            self._vt_past_horizon()
        start, count = self._vt_creeping
        self._vt_creeping = (start, count + 1) if start + count == now else (now, 1)
        self._vt_rearm_tick = ticks
        self._vt_rearm_rounds = 0
        return ticks

    # -------------------------------------------------------------- scheduling

    def call_later(  # type: ignore[override]
        self,
        delay: float,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
        priority: int = 0,
    ) -> asyncio.TimerHandle:
        """Like :meth:`asyncio.loop.call_later`, exact in virtual time, with a ``priority``.

        The delay is added to the current instant in integer nanoseconds, so repeated delays
        never drift; any positive delay advances at least one nanosecond.  Among timers due at
        the same instant, smaller ``priority`` runs first, then first scheduled first.  A
        delay that reaches the horizon of virtual time (about 4.25e28 s; ``math.inf``
        included) makes a timer that never fires, as ``asyncio.sleep(1e300)`` is on a stock
        loop; ``None``, NaN and non-numbers are refused at once, naming ``delay``.
        """
        if (
            not self._vt_lean  # history kept, debug mode or closed (see _vt_update_fast)
            or priority is not _ZERO
            or type(delay) not in _INT_OR_FLOAT
            or not delay < _FAR  # NaN, inf and astronomically long delays included
        ):
            seconds = _seconds("delay", delay)
            when = self._vt_now + seconds
            if seconds >= _HORIZON:
                ticks = _NEVER
            else:
                ticks = self._vt_ticks + delay_ticks(seconds)
                if ticks >= _NEVER:
                    ticks = _NEVER
                else:
                    when = ticks / TICKS_PER_SECOND
            return self._vt_schedule(ticks, priority, callback, args, context, when)
        # The hot path of every asyncio.sleep(): _vt_schedule and delay_ticks, inlined.
        ticks = self._vt_ticks
        if delay > 0:
            step = round(delay * TICKS_PER_SECOND)
            ticks += step if step > 0 else 1
        if callback is _SLEEP_WAKER or callback is _OUR_WAKER:
            if context is None and len(args) == 2:
                # asyncio.sleep's timer: a SleepTimer, which is the heap entry's item and the
                # handle at once (the future and the value, nothing else; see _timers.py).
                sleeper = _SLEEP_TIMER()  # no __init__: faster than object.__new__(cls)
                sleeper._future, sleeper._result = args
                sleeper._queue = self._vt_timers
                sleeper._ticks = ticks
                _heappush(self._vt_heap, (ticks, 0, self._vt_seq(), sleeper))
                return sleeper  # type: ignore[return-value]  # what a sleep asks of a handle
            if context is None:
                context = _WAKE_CONTEXT
        elif context is None:
            context = _copy_context()
        # _Timer.__init__, inlined: a Python frame less on every asyncio.sleep().
        handle = _new_handle(_Timer)
        handle._context = context
        handle._loop = self
        handle._callback = callback
        handle._args = args
        handle._cancelled = False
        handle._repr = None
        handle._source_traceback = None
        handle._when = ticks / TICKS_PER_SECOND
        handle._scheduled = True
        _heappush(self._vt_heap, (ticks, 0, self._vt_seq(), handle))
        return handle

    def call_soon(  # type: ignore[override]
        self,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> asyncio.Handle:
        """Like :meth:`asyncio.loop.call_soon` (a leaner handle outside debug mode)."""
        if self._debug or self._closed:
            handle = super().call_soon(callback, *args, context=context)
            # asyncio-private: a debug handle records where it was made, and the stock method
            # drops its own frames from the record; drop this one too, so it names the caller.
            if handle._source_traceback:  # type: ignore[attr-defined]
                del handle._source_traceback[-1]  # type: ignore[attr-defined]
            return handle
        # _Soon.__init__, inlined: a Python frame less on every wake-up of the pure path.
        handle = _Soon()  # type: ignore[call-arg]  # an empty handle (see _Soon)
        handle._context = _copy_context() if context is None else context
        handle._loop = self
        handle._callback = callback
        handle._args = args
        handle._cancelled = False
        handle._repr = None
        handle._source_traceback = None
        self._ready.append(handle)
        return handle

    def _vt_wake_after(self, delay: float, future: asyncio.Future[Any], priority: int = 0) -> None:
        """Resolve ``future`` (with None) once ``delay`` virtual seconds have passed.

        The cheapest wait the loop offers, and the one :func:`virtualtime.sleep` is made of:
        the future itself goes into the timer heap, ordered like every timer (instant, then
        ``priority``, then first scheduled first), with no handle and no callback.  For code
        that sleeps in a hot loop on the virtual loop (the sim kit); everything else should
        call ``virtualtime.sleep``.

        The contract: ``future`` is a plain ``loop.create_future()`` of this loop, and
        ``delay`` a checked float or int >= 0 (``math.inf``: never).  Whoever makes the future
        done *before* the loop does -- cancels it, or resolves it early -- need tell nobody:
        the entry is dead from then on, and the loop finds it (see
        :mod:`virtualtime._engine._timers`).  History and traces see the wake-up like a
        sleep's.
        """
        ticks = self._vt_ticks
        if delay > 0:
            if delay < _FAR:
                step = round(delay * TICKS_PER_SECOND)
                ticks += step if step > 0 else 1
            else:
                seconds = _seconds("delay", delay)  # an int beyond any float is refused
                far = seconds >= _HORIZON
                ticks = _NEVER if far else min(ticks + delay_ticks(seconds), _NEVER)
        seq = self._vt_seq()
        _heappush(self._vt_heap, (ticks, priority, seq, future))
        if self._vt_history is not None:
            self._vt_scheduled_at[seq] = (self._vt_ticks, _current_task(self))

    def _vt_jump_to(self, ticks: int, task: asyncio.Task[Any] | None) -> bool:
        """Move the clock to tick ``ticks`` now if the next round would do only that.

        For a wait made by ``task`` (None: the current task) that is about to suspend until
        ``ticks``: when nothing is ready, no timer or drive comes due before or at ``ticks``,
        time is on the fast path (autojump, no rate, no threshold, no history, not debug)
        and nothing outside the loop can deliver, the next round would only jump to
        ``ticks`` and wake this task.  Then the clock moves here and True says "go on at
        once, without suspending"; False says "wait the ordinary way".  One wait in
        :data:`JUMP_ROUND_EVERY` (counted per loop) takes the round anyway, so a model that
        never needs the loop still lets it deliver ``Ctrl-C`` and cancellations.  The sim
        kit's waits (``virtualtime.sim._fast.jump_to``) call this.
        """
        if self._ready or ticks <= self._vt_ticks:
            return False
        heap = self._vt_heap
        if heap and heap[0][0] <= ticks:
            return False
        drives = self._vt_drives
        if (
            (drives and drives[0][0] <= ticks)
            or not self._vt_plain
            or self._stopping
            or not self._vt_world.calm()
        ):
            return False
        if task is None:
            task = _current_task(self)
        if task is None or task.cancelling():
            return False
        skipped = self._vt_skipped + 1
        self._vt_skipped = skipped
        if not skipped & (JUMP_ROUND_EVERY - 1):
            return False
        self._vt_set_ticks(ticks)
        return True

    def _vt_jump_by(self, delay: float, task: asyncio.Task[Any] | None) -> bool:
        """:meth:`_vt_jump_to` the tick ``call_later(delay, ...)`` would fire at (delay > 0)."""
        if self._ready or not 0 < delay < _FAR:
            return False
        step = round(delay * TICKS_PER_SECOND)
        return self._vt_jump_to(self._vt_ticks + (step if step > 0 else 1), task)

    def call_at(  # type: ignore[override]
        self,
        when: float,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
        priority: int = 0,
    ) -> asyncio.TimerHandle:
        """Like :meth:`asyncio.loop.call_at`, with a ``priority``; a past ``when`` is due now.

        A ``when`` at or beyond the horizon of virtual time (about 4.25e28 s; ``math.inf``
        included) makes a timer that never fires; ``None``, NaN and non-numbers are refused
        at once, naming ``when``.
        """
        return self._vt_call_at(_seconds("when", when), callback, args, context, priority, True)

    def _vt_call_at(
        self,
        seconds: float,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        context: contextvars.Context | None,
        priority: int,
        deadline: bool,
    ) -> asyncio.TimerHandle:
        """``call_at`` for a checked float; ``deadline``: may a reached one creep?

        :func:`virtualtime.sleep_until` passes False: like a zero delay, it asks for the
        current instant (in priority order) on purpose when its time has come.
        """
        if seconds >= _HORIZON:
            return self._vt_schedule(_NEVER, priority, callback, args, context, seconds)
        if seconds == -math.inf:
            if deadline:
                self._vt_rearmed = True
            return self._vt_schedule(self._vt_ticks, priority, callback, args, context)
        ticks = to_ticks(seconds)
        if ticks <= self._vt_ticks:
            ticks = self._vt_ticks
            if deadline:  # a deadline already reached (see _vt_rearmed_round)
                self._vt_rearmed = True
        elif ticks >= _NEVER:
            return self._vt_schedule(_NEVER, priority, callback, args, context, seconds)
        if ticks / TICKS_PER_SECOND < seconds:
            # A float deadline a hair above its nearest tick (0.2 + 0.1 is
            # 0.30000000000000004): fire at that tick, but let time() read the deadline
            # itself, so code that re-checks ``time() >= deadline`` (anyio's cancel
            # scopes) sees it passed, while the integer clock stays exact.
            return self._vt_schedule(ticks, priority, callback, args, context, seconds)
        return self._vt_schedule(ticks, priority, callback, args, context)

    def _vt_schedule(
        self,
        ticks: int,
        priority: int,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        context: contextvars.Context | None,
        when: float | None = None,
    ) -> asyncio.TimerHandle:
        if type(priority) is not int and (
            isinstance(priority, bool) or not isinstance(priority, int)
        ):
            raise InvalidTypeError(f"priority must be an int, got {priority!r}")
        self._check_closed()  # asyncio-private: the stock "Event loop is closed" check.
        if self._debug:  # asyncio-private: debug-mode argument checks, as stock call_at does.
            self._check_thread()
            self._check_callback(callback, "call_at")
        if when is None:
            when = ticks / TICKS_PER_SECOND
        handle: asyncio.TimerHandle
        if self._debug:
            handle = asyncio.TimerHandle(when, callback, args, self, context)
            # asyncio-private: TimerHandle.cancel() reports to _timer_handle_cancelled only
            # while _scheduled is true; that is how we count cancelled entries in our heap.
            handle._scheduled = True  # type: ignore[attr-defined]
            # asyncio-private: _source_traceback is where a debug-mode handle was created;
            # the stock loop trims its own frames from it, and so do we: it ends at the
            # caller's line, not inside this module.
            handle._source_traceback = _format_helpers.extract_stack(  # type: ignore[attr-defined]
                _user_frame(sys._getframe(1))
            )
        else:
            handle = _Timer(when, callback, args, self, context)
        seq = self._vt_timers.push(ticks, priority, handle)
        if self._vt_history is not None:
            self._vt_scheduled_at[seq] = (self._vt_ticks, _current_task(self))
        return handle

    def _timer_handle_cancelled(self, handle: asyncio.TimerHandle) -> None:
        # asyncio-private: TimerHandle.cancel() calls this hook; stock loops count cancelled
        # timers here to know when to compact their heap, and so do we.
        if handle._scheduled:  # type: ignore[attr-defined]
            self._vt_timers.cancelled += 1

    def _vt_forget_seq(self, seq: int) -> None:
        self._vt_scheduled_at.pop(seq, None)

    # ------------------------------------------------------------------ tasks

    # create_task, as the stock method of each Python version takes its arguments: the stock
    # body, making a numbered Task (see Task) where the stock method makes asyncio.Task.
    # asyncio-private: a debug-mode task records where it was made (_source_traceback); the
    # stock method drops its own frame from that record, and so does this one.
    if sys.version_info >= (3, 14):

        def create_task(self, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
            """Like the stock method; the task is numbered (see :class:`Task`)."""
            self._check_closed()
            if self.get_task_factory() is not None or _asyncio_tasks.Task is not _STOCK_TASK:
                made = super().create_task(coro, **kwargs)
                if self._vt_running is not None:
                    self._vt_task_made(made)
                return made
            task = _new_task(Task)
            task._vt_order = self._vt_task_number()
            _init_task(task, coro, loop=self, **kwargs)
            if task._source_traceback:
                del task._source_traceback[-1]
            if self._vt_running is not None:
                self._vt_task_made(task)
            try:
                return task
            finally:
                del task  # as stock: no cycle through a failed eager task's traceback

    elif sys.version_info >= (3, 13):

        def create_task(
            self,
            coro: Any,
            *,
            name: object = None,
            context: contextvars.Context | None = None,
            **kwargs: Any,
        ) -> asyncio.Task[Any]:
            """Like the stock method; the task is numbered (see :class:`Task`)."""
            self._check_closed()
            if self.get_task_factory() is not None or _asyncio_tasks.Task is not _STOCK_TASK:
                made = super().create_task(coro, name=name, context=context, **kwargs)
                if self._vt_running is not None:
                    self._vt_task_made(made)
                return made
            task = _new_task(Task)
            task._vt_order = self._vt_task_number()
            _init_task(task, coro, loop=self, name=name, context=context, **kwargs)
            if task._source_traceback:
                del task._source_traceback[-1]
            if self._vt_running is not None:
                self._vt_task_made(task)
            try:
                return task
            finally:
                del task  # as stock: no cycle through a failed eager task's traceback

    else:

        def create_task(
            self,
            coro: Generator[Any, None, _T] | Coroutine[Any, Any, _T],
            *,
            name: object = None,
            context: contextvars.Context | None = None,
        ) -> asyncio.Task[_T]:
            """Like the stock method; the task is numbered (see :class:`Task`)."""
            self._check_closed()
            if self.get_task_factory() is not None or _asyncio_tasks.Task is not _STOCK_TASK:
                made = super().create_task(coro, name=name, context=context)
                if self._vt_running is not None:
                    self._vt_task_made(made)
                return made
            task: Task[_T] = _new_task(Task)
            task._vt_order = self._vt_task_number()
            # (``name`` is any object, as for the stock method: the task str()s it.)
            _init_task(task, coro, loop=self, name=name, context=context)  # type: ignore[arg-type]
            if task._source_traceback:  # type: ignore[attr-defined]
                del task._source_traceback[-1]  # type: ignore[attr-defined]
            if self._vt_running is not None:
                self._vt_task_made(task)
            return task

    # ------------------------------------------------------ external activity

    def run_in_executor(  # type: ignore[override]
        self,
        executor: concurrent.futures.Executor | None,
        func: Callable[..., _T],
        *args: Any,
    ) -> asyncio.Future[_T]:
        """Like :meth:`asyncio.loop.run_in_executor`; virtual time stands still meanwhile.

        The loop never jumps while a job submitted here is in flight: it waits in real time
        for the thread, so a virtual timeout cannot overtake real work.
        """
        self._check_closed()  # asyncio-private: the stock closed-loop check.
        if self._debug:
            self._check_callback(func, "run_in_executor")  # asyncio-private: as stock.
        if executor is None:
            # asyncio-private: the default executor and its shutdown flag are loop state with
            # no public accessor; this mirrors the stock method so the job can be tracked.
            self._check_default_executor()
            executor = self._default_executor
            if executor is None:
                executor = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="asyncio")
                self._default_executor = executor
        world = self._vt_world
        if _is_process_pool(executor):
            # Another process: it cannot wait for this loop, and the job must stay picklable.
            job = executor.submit(func, *args)
        else:
            job = executor.submit(self._vt_job, func, args)
        world.track_job(job)
        wrapped = asyncio.wrap_future(job, loop=self)
        # Done callbacks run in the order they were added, in the worker thread: wrap_future's
        # hands the result to the loop (call_soon_threadsafe puts it in the ready queue at
        # once), and only then is the job forgotten -- so the loop never sees "no job and
        # nothing ready" while the answer is in flight, and never jumps past it.
        job.add_done_callback(world.job_done)
        return wrapped

    def call_soon_threadsafe(  # type: ignore[override]
        self,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> asyncio.Handle:
        """Like the stock method; a thread that speaks to the loop holds time while it works.

        Another thread that handed the loop a callback (aiosqlite's worker, a portal) is
        likely to hand it another, so the outside-work model counts it as outside work for as
        long as the machine says it is working (see ``OutsideWork.poked``); where the machine
        cannot say, for :data:`virtualtime._engine._outside.POKE_GRACE` real seconds after it
        spoke.  Called from the loop's own thread, it holds nothing.
        """
        # Noted before the callback is handed over: the loop may run it, and go idle, before
        # this thread gets the CPU back.
        self._vt_world.poked(callback)
        handle = super().call_soon_threadsafe(callback, *args, context=context)
        # asyncio-private: a debug handle records where it was made and the stock method
        # drops its own frame from that record; drop this one too, so it names the caller.
        if handle._source_traceback:  # type: ignore[attr-defined]
            del handle._source_traceback[-1]  # type: ignore[attr-defined]
        return handle

    def _vt_job(self, func: Callable[..., _T], args: tuple[Any, ...]) -> _T:
        # Runs in the worker thread: remember which thread works for us, so that a job
        # which is itself waiting for this loop (run_coroutine_threadsafe(...).result(),
        # anyio.from_thread.run) does not hold time still for ever.
        threads = self._vt_world.job_threads
        ident = threading.get_ident()
        threads.add(ident)
        try:
            return func(*args)
        finally:
            threads.discard(ident)

    # shutdown_default_executor, with the stock method's parameters: 3.12 added ``timeout``.
    if sys.version_info >= (3, 12):

        async def shutdown_default_executor(self, timeout: float | None = None) -> None:
            """Like the stock method; time stands still while the executor's threads join.

            Without this, the join timeout (300 s) would be a virtual timer that fires at once
            and warns that the threads did not finish.
            """
            with self._vt_holding_time():
                await super().shutdown_default_executor(timeout)

    else:

        async def shutdown_default_executor(self) -> None:
            """Like the stock method; time stands still while the executor's threads join."""
            with self._vt_holding_time():
                await super().shutdown_default_executor()

    @contextlib.contextmanager
    def _vt_holding_time(self) -> Iterator[None]:
        # Outside work for as long as the block runs: time stands still.
        self._vt_world.holds += 1
        self._vt_world.changes += 1
        self._vt_update_fast()
        try:
            yield
        finally:
            self._vt_world.holds -= 1
            self._vt_update_fast()

    async def _make_subprocess_transport(self, *args: Any, **kwargs: Any) -> Any:
        # asyncio-private: every subprocess_exec/subprocess_shell (and so
        # asyncio.create_subprocess_*) builds its transport here, under every child watcher.
        # The outside-work model keeps a weak reference to know which children still run.
        transport = await super()._make_subprocess_transport(  # type: ignore[misc]
            *args, **kwargs
        )
        self._vt_world.track_child(transport)
        self._vt_update_fast()
        return transport

    def _vt_poll(self, timeout: float | None) -> bool:
        """Block on the selector for up to ``timeout`` real seconds; True if events came."""
        if timeout is not None and timeout > _MAX_REAL_WAIT:
            timeout = _MAX_REAL_WAIT
        event_list = self._vt_selector.select(timeout)
        if event_list:
            self._vt_world.saw_events(event_list)
            # asyncio-private: _process_events turns selector events into ready callbacks;
            # it is the stock loop's own dispatch step, called exactly as _run_once does.
            self._process_events(event_list)
            self._vt_instant_count = 0
            return True
        return False

    # ------------------------------------------------------------- main cycle

    def _run_once(self) -> None:
        # asyncio-private: _run_once is the one iteration of the stock loop (run_forever calls
        # it).  Replacing it is the whole point of this class: a stock loop keeps timers in a
        # heap of TimerHandles ordered by float time only (equal times in no particular
        # order) and blocks on the selector until the earliest is due; this one keeps a
        # totally ordered heap, jumps time instead of blocking, and detects deadlocks.
        timers = self._vt_timers
        heap = self._vt_heap
        ready = self._ready  # asyncio-private: the stock loop's deque of ready handles.
        world = self._vt_world
        if (
            self._vt_plain
            and not ready
            and heap
            and not timers.cancelled
            and not self._vt_drives
            and not self._vt_rearmed
            and world.calm_at == world.changes  # world.calm(), inlined
            and _thread_table_size() == 1
            and not self._stopping  # asyncio-private: set by stop().
            and (first := heap[0])[0] < self._vt_beyond  # not never, nor past a watched horizon
            # A dead waiter is never counted (see _timers): time must not jump to one.
            and (type(item := first[3]) is not _WAITER or not item.done())
        ):
            # The plain round, the common case of a simulation and of most tests: pure
            # virtual time, nothing ready, no dead entry to drop, nothing outside.  It makes
            # exactly the decisions of the general round below (jump to the head), with a
            # tenth of its tests: each of these is a state the loop keeps up to date.
            now = first[0]
            if now > self._vt_ticks:  # _vt_set_ticks, inlined
                self._vt_ticks = now
                seconds = now / TICKS_PER_SECOND
                if seconds > self._vt_now:
                    self._vt_now = seconds
                self._vt_instant_count = 0
            history = None
            direct = True
        else:
            if (
                timers.cancelled
                or len(heap) >= timers.scan_at
                or (heap and type(item := heap[0][3]) is _WAITER and item.done())
            ):
                # Cancelled handles, a heap due for its scan, or a dead waiter at the head
                # (waiters' deaths are found, not counted: see _timers): drop them before
                # time moves.
                timers.purge()
            if ready or self._stopping:
                if self._vt_selector.registered > 1:
                    self._vt_poll(0)
            elif (
                self._vt_fast
                and heap
                and heap[0][0] < _NEVER
                and not self._vt_drives
                and world.calm()
            ):
                # Pure virtual time and nothing at all outside: the decision _vt_idle would
                # make (jump to the head), without its general bookkeeping.
                head = heap[0][0]
                if head > self._vt_ticks:
                    self._vt_set_ticks(head)
            else:
                self._vt_idle()
            now = self._vt_ticks
            if self._vt_rearmed and heap and heap[0][0] <= now:
                now = self._vt_rearmed_round(now)
            history = self._vt_history
            direct = not self._debug

        if heap and heap[0][0] <= now:
            fired = 0
            seconds = self._vt_now
            if _core_fire is not None and history is None and direct:
                # The compiled core: the loop below, in C (no history, not in debug mode).
                fired, dead, seconds = _core_fire(heap, now, seconds, ready.append)
                timers.cancelled -= dead
                if seconds > self._vt_now:
                    self._vt_now = seconds
                heap = ()  # type: ignore[assignment]  # the loop below has nothing left to do
            while heap and heap[0][0] <= now:
                entry = _heappop(heap)
                handle = entry[3]
                if type(handle) is _WAITER:
                    # A native sleep (_vt_wake_after): the entry is the future itself.  A
                    # future already done (cancelled -- by a signal handler too -- or resolved
                    # early) refuses its result: the entry is dead, and was never counted.
                    try:
                        handle.set_result(None)
                    except _InvalidStateError:
                        if history is not None:
                            self._vt_scheduled_at.pop(entry[2], None)
                        continue
                    fired += 1
                    if history is not None:
                        self._vt_record(entry)
                    continue
                if type(handle) is _SLEEP_TIMER:
                    # asyncio.sleep's timer (call_later): resolve its future here, in timer
                    # order.  No future: it was cancelled in the heap (and counted); a
                    # future already done (its sleep was cancelled) refuses the value.
                    future = handle._future
                    if future is None:
                        timers.cancelled -= 1
                        continue
                    handle._future = None
                    try:
                        future.set_result(handle._result)
                    except _InvalidStateError:
                        continue
                    fired += 1
                    continue
                handle._scheduled = False
                if handle._cancelled:
                    timers.cancelled -= 1
                    if history is not None:
                        self._vt_scheduled_at.pop(entry[2], None)
                    continue
                callback = handle._callback
                if (
                    direct
                    and history is None
                    and (callback is _SLEEP_WAKER or callback is _OUR_WAKER)
                ):
                    # The common wake-up of asyncio.sleep: resolve its future here, in timer
                    # order, saving a round trip through the ready queue (the woken task
                    # still runs in this round).  A future already done was cancelled
                    # before its timer came due (or by a signal handler just now): the
                    # timer wakes nobody and does not count as fired, as below.
                    args = handle._args
                    try:
                        args[0].set_result(args[1])
                    except _InvalidStateError:
                        continue
                    fired += 1
                    if handle._when > seconds:  # see call_at
                        seconds = self._vt_now = handle._when
                    continue
                waker = callback is _SLEEP_WAKER or callback is _OUR_WAKER
                if waker and handle._args[0].done():
                    # A sleep cancelled before its timer came due (its task has not run
                    # since): the timer wakes nobody, so it neither fires nor is recorded --
                    # exactly like a native sleep's dead entry above.
                    if history is not None:
                        self._vt_scheduled_at.pop(entry[2], None)
                    continue
                fired += 1
                if handle._when > seconds:  # see call_at
                    seconds = self._vt_now = handle._when
                if history is not None:
                    self._vt_record(entry)
                if direct and waker:
                    # A sleep's timer only resolves its future, whose waiter is then
                    # scheduled.  Resolving it here, in timer order, saves a round trip
                    # through the ready queue; the woken task still runs in this round.
                    try:  # noqa: SIM105 - the hot path: no context manager here
                        handle._args[0].set_result(handle._args[1])
                    except _InvalidStateError:
                        # Cancelled between the two calls by a signal handler: Ctrl-C
                        # under asyncio.run cancels the main task from one.
                        pass
                    continue
                ready.append(handle)
            self._vt_fired += fired

        rounds = self._vt_instant_count + 1
        self._vt_instant_count = rounds
        if rounds > self._vt_max_instant:
            self._vt_runaway()
        ntodo = len(ready)
        if self._debug:
            self._vt_run_ready_debug(ntodo)
            return
        popleft = ready.popleft
        if _core_run_ready is not None:
            _core_run_ready(popleft, ntodo, self._vt_callback_failed)
            return
        for _ in range(ntodo):
            todo = popleft()
            if todo._cancelled:
                continue
            if type(todo) is _Soon:
                # Handle._run, inlined for the loop's own lean handles (a frame saved on
                # every wake-up); a failure is reported exactly as Handle._run reports it.
                args = todo._args
                try:
                    if len(args) == 1:
                        # A future's callback: every task wake-up.  A call with *args
                        # builds a new argument list and tuple each time; this builds none
                        # (about 3 % of a pure-Python wake-up).
                        todo._context.run(todo._callback, args[0])
                    else:
                        todo._context.run(todo._callback, *args)
                except (SystemExit, KeyboardInterrupt):
                    raise
                except BaseException as exc:
                    self._vt_callback_failed(todo, exc)
            else:
                todo._run()

    def _vt_callback_failed(self, handle: asyncio.Handle, exc: BaseException) -> None:
        # asyncio-private: what Handle._run does when a callback raises (its message, built
        # with format_helpers, the handle and where it was made) -- for the inlined run above.
        base: Any = _format_helpers
        callback: Any = handle._callback  # type: ignore[attr-defined]
        args: Any = handle._args
        if _FORMAT_TAKES_DEBUG:
            source = base._format_callback_source(callback, args, debug=self.get_debug())
        else:  # 3.11 and early 3.12: the helper has no debug parameter
            source = base._format_callback_source(callback, args)
        context: dict[str, Any] = {
            "message": f"Exception in callback {source}",
            "exception": exc,
            "handle": handle,
        }
        if handle._source_traceback:  # type: ignore[attr-defined]
            context["source_traceback"] = handle._source_traceback  # type: ignore[attr-defined]
        self.call_exception_handler(context)

    def _vt_run_ready_debug(self, ntodo: int) -> None:
        # Debug mode, as the stock loop: record the current handle and log slow callbacks,
        # measured in *real* time (virtual time does not move during a callback).
        ready = self._ready
        for _ in range(ntodo):
            handle = ready.popleft()
            if handle._cancelled:
                continue
            try:
                self._current_handle = handle  # asyncio-private: shown in debug reports.
                t0 = _real_monotonic()
                handle._run()
                dt = _real_monotonic() - t0
                if dt >= self.slow_callback_duration:
                    # asyncio-private: the stock loop logs through base_events' module-level
                    # logger with its _format_handle; both are looked up at call time, so
                    # code that patches or filters them sees our reports too.
                    base: Any = _base_events
                    base.logger.warning(
                        "Executing %s took %.3f seconds", base._format_handle(handle), dt
                    )
            finally:
                self._current_handle = None

    def _vt_record(self, entry: tuple[int, int, int, Any]) -> None:
        ticks, priority, seq, handle = entry
        assert self._vt_history is not None
        scheduled, task = self._vt_scheduled_at.pop(seq, (ticks, None))
        if type(handle) is _WAITER:
            callback: object = set_result_unless_cancelled
        else:
            callback = handle._callback
        what: object = task if task is not None and callback in _WAKERS else callback
        self._vt_history.append((self._vt_ticks, priority, seq, what, scheduled))

    def _vt_idle(self) -> None:
        """Nothing is ready: wait for the outside world, move time, or report a deadlock.

        Returns once something may be ready (or a timer is due at the current instant).  The
        outside-work model (:mod:`virtualtime._engine._outside`) says how long to wait, in real
        time, before time may move; the mode (autojump, manual, rate, drives) says where to.
        """
        heap = self._vt_heap
        drives = self._vt_drives
        world = self._vt_world
        while True:
            now = self._vt_ticks
            head = heap[0][0] if heap else _NEVER
            if head <= now:
                return
            drive = drives[0][0] if drives else _NEVER
            if drive <= now:
                self._vt_finish_drives()
                return

            if drives:
                target = min(head, drive)
            elif self._vt_autojump or (self._vt_paced and head < _NEVER):
                target = head
            else:
                target = _NEVER

            if target >= _NEVER:
                recheck = world.pending(_real_monotonic())
                if recheck is not None:
                    # Outside work may still deliver: wait for it in real time.
                    if self._vt_poll(recheck):
                        return
                    continue
                world.forget()
                self._vt_wait_or_deadlock()
                return

            wait = world.wait_before(target, now)
            if wait > 0:
                # Outside work is pending: virtual time may not run ahead of real time.
                if self._vt_poll(wait):
                    return
                continue
            if self._vt_paced and not drives:
                # Rate mode: wait, in real time, until the anchor says the head is due.  The
                # anchor is not re-based on each wake-up, so a late wake-up shortens the next
                # wait instead of accumulating as drift.
                wait = self._vt_anchor.real_until(to_seconds(head))
                if wait > 0:
                    if self._vt_poll(wait):
                        # Real I/O between two instants sees the time that has passed.
                        ticks = min(to_ticks(self._vt_anchor.virtual()), head)
                        if ticks > self._vt_ticks:
                            self._vt_set_ticks(ticks)
                        return
                    continue
            if self._vt_threshold > 0:
                if self._vt_poll(self._vt_threshold):
                    return
            elif (self._vt_selector.registered > 1 or self._vt_signals) and self._vt_poll(0):
                # Bytes already in the kernel go first -- and so do signals: a signal handler's
                # wake-up byte waits in the self-pipe, which only a poll reads.
                return
            self._vt_set_ticks(target)
            if self._vt_paced:
                self._vt_anchor.rebase(self._vt_now)
            # Loop again: a due timer returns at once, a reached drive finishes.

    def _vt_finish_drives(self) -> None:
        drives = self._vt_drives
        now = self._vt_ticks
        while drives and drives[0][0] <= now:
            drive = heapq.heappop(drives)[2]
            if drive.future is None:
                self.stop()
            else:
                set_result_unless_cancelled(drive.future, self._vt_now)

    def _vt_wait_or_deadlock(self) -> None:
        """No timer may fire and no outside work is pending: wait, or report a deadlock."""
        world = self._vt_world
        if self._vt_target is None or self._vt_deadlock_timeout == math.inf or world.keeps_alive():
            # Running forever on purpose (waiting for stop()), or something outside may still
            # speak by itself (an idle connection, a child, a signal): wait, using no CPU.
            self._vt_poll(_MAX_REAL_WAIT)
            return
        if self._vt_poll(self._vt_deadlock_timeout):
            return
        if self._ready or world.pending(_real_monotonic()) is not None:
            return
        raise self._vt_deadlock_error()

    def _vt_deadlock_error(self) -> DeadlockError:
        # all_tasks() is a set: sorted, so the same program gives the same report every run.
        blocked = tuple(
            sorted(
                (_describe_task(task) for task in asyncio.all_tasks(self) if not task.done()),
                key=_report_order,
            )
        )
        live = self._vt_timers.live()
        finite = [entry for entry in live if entry[0] < _NEVER]
        if finite and not self._vt_autojump:
            reason = (
                f"time is manual (autojump=False) and nothing advances it: {len(finite)} "
                f"timer(s) pending, the next at t={to_seconds(min(finite)[0])!r}; drive time "
                "with loop.step()/loop.evolve(dt) from outside, or await "
                "virtualtime.evolve(dt) from a task"
            )
        else:
            reason = (
                "no callback is ready, no timer is pending"
                + (" (only timers at infinity, or beyond the horizon)" if live else "")
                + " and nothing outside the loop can wake it"
            )
        lines = [f"deadlock at virtual time t={self._vt_now!r}: {reason}."]
        if blocked:
            lines.append("Blocked tasks:")
            lines.extend(f"  - {name}: {where}" for name, where in blocked)
        registered = self._vt_world.describe()
        if registered:
            lines.append("Registered outside the loop, none of which can answer:")
            lines.extend(f"  - {what}" for what in registered)
        return DeadlockError("\n".join(lines), blocked)

    def _vt_runaway(self) -> None:
        count = self._vt_instant_count
        self._vt_instant_count = 0
        start, crept = self._vt_creeping
        moved = "without time moving"
        if crept and start + crept == self._vt_ticks:
            moved = (
                f"with time moving only by creeping {crept} ns from t={to_seconds(start)!r} "
                "(past timers re-armed at the current instant)"
            )
        spinning = [_describe_handle(handle) for handle in list(self._ready)[:3]]
        error = RunawayError(
            f"the loop went round {count} times at virtual time t={self._vt_now!r} {moved} "
            f"(max_rounds_per_instant={self._vt_max_instant}). Something busy-waits: it "
            "reschedules itself with zero delay (call_soon, sleep(0), call_later(0)) waiting "
            "for a condition that only the passing of time would change, but virtual time "
            "passes only while the loop is idle. Wait for the condition itself instead (an "
            "asyncio.Event, a Future, a Condition), or poll with a positive delay "
            "(await asyncio.sleep(0.01)); if the condition comes from a thread or another "
            "process, await it through loop.run_in_executor() / asyncio.to_thread(), or run "
            "with autojump_threshold > 0. Raise max_rounds_per_instant only for a long but "
            "finite burst of work at one instant."
            + (f" Running at that instant: {'; '.join(spinning)}." if spinning else "")
        )
        waiting = [d.future for _, _, d in self._vt_drives if d.future is not None]
        if waiting:
            # Drivers inside the loop receive the error; the loop itself goes on.
            for future in waiting:
                if not future.done():
                    future.set_exception(error)
            self._vt_drives[:] = [e for e in self._vt_drives if e[2].future is None]
            heapq.heapify(self._vt_drives)
            return
        raise error

    # ------------------------------------------------------------ running

    def run_forever(self) -> None:
        """Like the stock method; with ``patch_time=True`` the stdlib clocks follow this loop."""
        anyio_backend = _modules.get(_ANYIO_ASYNCIO)
        if anyio_backend is not _anyio_seen and anyio_backend is not None:
            _install_anyio_sleep()
        here = RUNNING_HERE
        outer = here.loop
        here.loop = self
        try:
            if self._vt_patch is None:
                super().run_forever()
            else:
                with self._vt_patch:
                    super().run_forever()
        finally:
            here.loop = outer

    def run_until_complete(self, future: Any) -> Any:
        """Like the stock method; raises :class:`DeadlockError` instead of hanging.

        As on a stock loop, a loop that is closed or already running (or any loop while
        another runs in this thread) refuses at once, before ``future`` is touched: a
        coroutine passed in is neither wrapped in a task nor run.
        """
        # asyncio-private: the stock checks, which the stock method makes first too.
        self._check_closed()
        self._check_running()  # type: ignore[attr-defined]
        outer = self._vt_target
        target = asyncio.ensure_future(future, loop=self)
        self._vt_target = target
        try:
            return super().run_until_complete(target)
        except BaseException:
            if target is not future and target.done() and not target.cancelled():
                target.exception()  # retrieved: no "exception was never retrieved" log
            raise
        finally:
            self._vt_target = outer

    def close(self) -> None:
        """Close the loop; pending timers are dropped."""
        first = not self.is_closed()
        super().close()
        self._vt_update_fast()  # no lean timers on a closed loop
        self._vt_timers.clear()
        self._vt_drives.clear()
        self._vt_scheduled_at.clear()
        # The threads module caches the threads it last saw, the finished workers of this
        # run among them; an anyio worker holds its loop, so forget them (else this loop
        # would never be garbage-collected).
        forget()
        world = getattr(self, "_vt_world", None)  # (absent if __init__ failed part-way)
        if world is not None:
            world.close()  # the outside model's procfs files, now, not at collection
        if first and self._vt_layers:
            closed(self, self._vt_layers)

    def __repr__(self) -> str:
        mode = "rate" if self._vt_paced else ("autojump" if self._vt_autojump else "manual")
        return (
            f"<{type(self).__name__} time={self._vt_now!r} mode={mode} "
            f"running={self.is_running()} closed={self.is_closed()} debug={self.get_debug()}>"
        )

    # --------------------------------------------------------- driving verbs

    def peek(self) -> float:
        """Virtual time of the next pending timer, or ``math.inf`` if there is none."""
        ticks = self._vt_next_ticks()
        return math.inf if ticks is None else max(to_seconds(ticks), self._vt_now)

    def _vt_next_ticks(self) -> int | None:
        """The tick of the next pending (live, finite) timer, or None."""
        ticks = self._vt_timers.peek()
        return None if ticks is None else max(ticks, self._vt_ticks)

    def settle(self) -> float:
        """Run everything that is ready (and timers due now) without moving time."""
        self._vt_outside("settle", "await virtualtime.settle()")
        self._vt_drive_outside(self._vt_ticks)
        return self.time()

    def step(self) -> float | None:
        """Fire the next timer instant and let everything it made ready settle.

        What is ready now runs first; if that included timers due at the current instant,
        that instant was the step.  Returns the new virtual time, or None (time unchanged)
        when nothing is scheduled.
        """
        self._vt_outside("step", "await virtualtime.step()")
        fired = self._vt_fired
        self._vt_drive_outside(self._vt_ticks)
        if self._vt_fired > fired:  # timers were due at the current instant: that was it
            return self.time()
        nxt = self._vt_next_ticks()
        if nxt is None:
            return None
        self._vt_drive_outside(nxt)
        return self.time()

    def evolve(self, dt: float) -> float:
        """Fire every timer due in ``[now, now + dt]`` at its own instant, then set now + dt.

        Timers created meanwhile are included when they fall in the window; everything each
        instant makes ready settles before time moves on.  Returns the new time.
        """
        ticks = self._vt_span_ticks(dt)
        self._vt_outside("evolve", "await virtualtime.evolve(dt)")
        self._vt_drive_outside(self._vt_ticks + ticks)
        return self.time()

    def run_until(self, t: float) -> float:
        """``evolve`` up to absolute virtual time ``t`` (which must not be in the past)."""
        target = self._vt_check_target(t)
        self._vt_outside("run_until", "await virtualtime.run_until(t)")
        self._vt_drive_outside(target)
        return self.time()

    def fast_forward(self, dt: float) -> float:
        """Leap ``dt`` seconds at once; timers the leap made overdue then fire, in order.

        Unlike :meth:`evolve`, overdue callbacks see the new time, as after a laptop wakes.
        """
        ticks = self._vt_span_ticks(dt)
        self._vt_outside("fast_forward", "await virtualtime.fast_forward(dt)")
        self._vt_leap(ticks)
        self._vt_drive_outside(self._vt_ticks)
        return self.time()

    def _vt_check_target(self, t: float) -> int:
        t = check_finite("t", t)
        target = ticks_at_or_after(t) if t < _HORIZON else _NEVER
        if target >= _NEVER:
            raise InvalidValueError(
                f"t must be before the horizon of virtual time ({_HORIZON:.4g} s), got {t!r}"
            )
        if target < self._vt_ticks:
            raise InvalidValueError(
                f"t must not be in the past: t={t!r} < now={self._vt_now!r} "
                "(virtual time never goes backwards)"
            )
        return target

    def _vt_span_ticks(self, dt: object) -> int:
        """Ticks of a driving verb's ``dt`` (finite, >= 0, not past the horizon)."""
        return _check_span("dt", dt, self._vt_ticks)

    def _vt_leap(self, ticks: int) -> None:
        self._vt_set_ticks(self._vt_ticks + ticks)
        self._vt_anchor.rebase(self._vt_now)

    def _vt_outside(self, verb: str, inside: str) -> None:
        if self.is_running() or _asyncio_events._get_running_loop() is not None:
            raise UsageError(
                f"loop.{verb}() drives a loop that is not running; this one is running "
                f"(or another loop is). From a coroutine use `{inside}`; from another thread "
                f"use asyncio.run_coroutine_threadsafe({inside.removeprefix('await ')}, loop)"
            )
        self._check_closed()  # asyncio-private: the stock "Event loop is closed" check.

    def _vt_drive_outside(self, target: int) -> None:
        drive = _Drive(None)
        heapq.heappush(self._vt_drives, (target, self._vt_seq(), drive))
        self._vt_instant_count = 0
        try:
            self.run_forever()
        finally:
            self._vt_drives[:] = [e for e in self._vt_drives if e[2] is not drive]
            heapq.heapify(self._vt_drives)

    def _vt_drive_inside(self, target: int) -> asyncio.Future[float]:
        future: asyncio.Future[float] = self.create_future()
        heapq.heappush(self._vt_drives, (target, self._vt_seq(), _Drive(future)))
        self._vt_instant_count = 0
        return future

    def _vt_cancel_drive(self, future: asyncio.Future[float]) -> None:
        self._vt_drives[:] = [e for e in self._vt_drives if e[2].future is not future]
        heapq.heapify(self._vt_drives)


def running_virtual_loop(what: str) -> VirtualEventLoop:
    """The running :class:`VirtualEventLoop`, or a ``UsageError`` saying why not."""
    loop = _asyncio_events._get_running_loop()
    if isinstance(loop, VirtualEventLoop):
        return loop
    if loop is None:
        raise UsageError(
            f"{what} needs a running virtual event loop, and no event loop is running; "
            "run your code with virtualtime.run(...) or a virtualtime.new_event_loop factory"
        )
    raise UsageError(
        f"{what} needs a running virtual event loop, but the running loop is "
        f"{type(loop).__name__}; create it with virtualtime.new_event_loop "
        "(asyncio.Runner(loop_factory=virtualtime.new_event_loop))"
    )
