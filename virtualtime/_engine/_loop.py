"""The virtual-time asyncio event loop.

This module holds :class:`VirtualEventLoop` itself -- its options, its constructor and every
public method.  The private machinery lives in one mixin module per concern, stacked under
the class (see :mod:`._fields`): :mod:`._history` (what a loop with history remembers),
:mod:`._driving` (the clock's setter, drives), :mod:`._waits` (the native wait and the
in-place jump), :mod:`._reports` (deadlock and runaway reports), :mod:`._idle` (waiting for
the outside world) and :mod:`._cycle` (one round: the hot path).  Handles and tasks are in
:mod:`._handles`, the compiled core's loading in :mod:`._compiled`, the checks of time
arguments in :mod:`._checks`, the loop running in this thread in :mod:`._running`.

One room: this module is longer than the others because the API reference documents a
class's own members only, so every public method of the loop is defined here, on the class
(moved to a mixin, it would drop out of the reference), with the private helpers it needs
in the mixins.  Two private groups stay here on purpose: ``_vt_call_at``/``_vt_schedule``
(a debug-mode handle records where it was made by skipping this file's frames, see
``_user_frame``) and ``_vt_lean_get_debug``/``_vt_update_fast`` (they compare the class's
methods with this class's own).  ``call_later``'s inline path is the hot path of every
``asyncio.sleep``: it calls no helper.

These modules and :mod:`virtualtime._engine._outside` (the outside-work model the loop asks)
are the only places in virtualtime that touch private parts of asyncio.  Each touch is marked
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

Part of ``engine``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextvars
import functools
import heapq
import inspect
import itertools
import math
import os
import sys
import weakref
from asyncio import base_events as _base_events
from asyncio import events as _asyncio_events
from asyncio import format_helpers as _format_helpers
from collections.abc import Callable, Coroutine, Generator, Iterator, Sequence
from types import FrameType
from typing import (
    Any,
    Final,
    Literal,
    TypeVar,
    TypeVarTuple,
    Unpack,
    overload,
)

from .._clocks._patch import TimePatch
from .._options import (
    LoopKwargs,
    LoopOptions,
    Perturb,
    check_option,
    closed,
    configured,
    created,
    from_call,
    wall_epoch,
)
from .._shared._errors import InvalidTypeError, InvalidValueError, UsageError
from .._shared._threads import ANYIO_ASYNCIO, THREAD_TABLE, forget
from .._shared._time import (
    RESOLUTION,
    TICKS_PER_SECOND,
    RateAnchor,
    delay_ticks,
    to_seconds,
    to_ticks,
)
from ._checks import _FAR, _HORIZON, _NEVER, _seconds
from ._compiled import core
from ._cycle import CycleMixin
from ._driving import DriveVerb, _Drive
from ._handles import _WAKE_CONTEXT, _WAKERS, Task, _Soon, _Timer
from ._history import HistoryRecord, TaskRecord
from ._network import NetworkMixin
from ._outside import OutsideWork
from ._running import RUNNING_HERE
from ._seeding import Chooser, replay_keep
from ._sockets import CountingSelector
from ._timers import SleepTimer, TimerQueue
from ._waits import JUMP_ROUND_EVERY, WaitsMixin

__all__ = ["VirtualEventLoop", "running_virtual_loop"]

_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")

_heappush: Final = heapq.heappush
_current_task: Final = asyncio.current_task
_modules: Final = sys.modules
_core: Final = core
# The compiled core's note of RUNNING_HERE.loop, told of every change run_forever makes.
_note_running: Final = None if core is None else core.note_running

_ZERO: Final = 0
"""The default ``priority``: the one value the inline path of ``call_later`` takes."""

_INT_OR_FLOAT: Final = (float, int)

_new_handle: Final = object.__new__
_copy_context: Final = contextvars.copy_context
_SLEEP_TIMER: Final = SleepTimer
_SLEEP_WAKER: Final = _WAKERS[0]
_OUR_WAKER: Final = _WAKERS[1]
_Future: Final = asyncio.Future
_THIS_FILE: Final = __file__

_NO_PARAMETERS: Final = inspect.Signature()
"""The signature of ``get_debug()`` and ``create_future()``, which take nothing."""


# The task class the stock create_task makes, looked up where it does (asyncio.tasks.Task,
# at each call): code that swaps it -- CPython's own tests of the pure-Python tasks replace it
# with tasks._PyTask -- gets its own class, unnumbered, as from the stock loop.
_asyncio_tasks: Final = asyncio.tasks
_STOCK_TASK: Final = asyncio.Task

# The two halves of calling Task(...): the number is set between them, because the stock
# constructor already hashes the task (it registers it in a WeakSet, to 3.13).
_new_task: Final = Task.__new__
_init_task: Final = asyncio.Task.__init__

_ANYIO_ASYNCIO: Final = ANYIO_ASYNCIO
_anyio_seen: object = None
"""anyio's asyncio backend module as :func:`_tell_anyio_hooks` last handled it (fully
imported).  Kept by identity, not as a once-per-process flag: a runner that restores
``sys.modules`` (pytester in process) or a reload brings a new module to route."""


_anyio_hooks: list[Callable[[], object]] = []
"""What to call when a loop starts with anyio's asyncio backend newly imported.

``_anyio_sleep`` puts its ``install`` here when it is imported (the package's front door
imports it), which routes anyio's sleep to the native one on virtual loops: this module never
imports it, as it imports this module."""


def on_anyio_backend(hook: Callable[[], object]) -> None:
    """Call ``hook()`` when a virtual loop starts and anyio's asyncio backend is new to it."""
    if hook not in _anyio_hooks:
        _anyio_hooks.append(hook)


def _tell_anyio_hooks() -> None:
    """anyio's backend is imported: tell the hooks (_anyio_sleep routes its sleep)."""
    global _anyio_seen
    module = _modules.get(_ANYIO_ASYNCIO)
    if isinstance(getattr(module, "AsyncIOBackend", None), type):
        _anyio_seen = module  # else still being imported: look again at the next run
    for hook in _anyio_hooks:
        hook()


def _user_frame(frame: FrameType | None) -> FrameType | None:
    """The innermost frame outside this module: where the caller scheduled a timer."""
    while frame is not None and frame.f_code.co_filename == _THIS_FILE:
        frame = frame.f_back
    return frame


def _is_process_pool(executor: concurrent.futures.Executor) -> bool:
    # Reading concurrent.futures.ProcessPoolExecutor imports multiprocessing (a lazy module
    # attribute), which does file-system work on the loop thread; if the module that defines
    # it was never imported, no executor can be one.
    process = _modules.get("concurrent.futures.process")
    return process is not None and isinstance(executor, process.ProcessPoolExecutor)


class VirtualEventLoop(NetworkMixin, CycleMixin):
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
    ``rate_strict`` (False)
        With a ``rate``: raise :class:`~virtualtime.FellBehindError` (a
        ``RuntimeError``) when the run falls behind real time by more than it allows --
        ``True`` one virtual second (``1 / rate`` real seconds: SimPy's ``strict=True``, with
        ``rate = 1 / factor``), a number that many virtual seconds.  The pace is then kept
        from the start of each run (and each rate change or driving verb): a timer reached a
        little late shortens the waits after it, and one reached too late raises.  Off, a
        late timer fires late and the pacing goes on from there, never catching up.  Use it
        when the run must keep up with something real (hardware, a person watching).
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
    ``seed`` (None) and ``perturb`` ("timers")
        A seed (an int >= 0) decides what the program leaves open, so that one run explores
        one of the orders a real machine could produce, and the same seed always the same
        one: with ``perturb="timers"``, the order of timers due at the same instant with
        the same priority; with ``perturb="ready"``, also the order in which the task steps
        made ready side by side in one loop round run (only tasks' steps and wake-ups move,
        past each other only: asyncio's own callbacks keep their places, and the FIFO order
        asyncio relies on; a task started just before ``await asyncio.sleep(0)`` may then
        run after the sleeper wakes).  A ``Network()`` without a seed of its own
        (:mod:`virtualtime.net`) draws its jitter and losses from the loop's seed.  Use it
        to hunt ordering bugs under many seeds (``virtualtime.explore``,
        ``pytest --virtualtime-seeds``) and to replay the one that failed; None keeps the
        FIFO order below.  ``perturb="ready"`` needs a seed.  See :attr:`seed`.

    Ordering guarantee: timers due at the same virtual instant run in order of priority
    (smaller first; ``call_later(..., priority=p)``, :func:`virtualtime.sleep`), then first
    scheduled first -- or, on a seeded loop, in an order its seed draws among those of equal
    priority.  Time never goes backwards.

    Two limits of the clock.  It has a *horizon*, 2**125 ns (about 4.25e28 s): a timer at or
    beyond it is a timer at infinity (never fired; :meth:`peek` says ``math.inf``), and the
    clock never reaches it.  And a ``call_at`` deadline that keeps landing on the current
    instant (a rate limiter whose computed wake-up rounds to now) lets time *creep* one
    nanosecond after 8 such rounds, as a real clock would have moved; zero delays never do.
    """

    # The fields every round reads or writes are slots (the instance keeps its __dict__ for
    # the rest): the compiled core reads them at fixed offsets (_cwake.c, setup_loop) where a
    # lookup in the instance dict hashed a name a dozen times a round, about a fifth of a
    # wake-up.  Python reads and writes them as before.  _stopping, _debug and _closed are
    # asyncio's own flags: BaseEventLoop's assignments land in these slots
    # (tests/test_canaries.py pins that).
    __slots__ = (
        "_closed",
        "_debug",
        "_ready",
        "_stopping",
        "_vt_beyond",
        "_vt_drives",
        "_vt_fired",
        "_vt_future_kw",
        "_vt_heap",
        "_vt_history",
        "_vt_instant_count",
        "_vt_lone",
        "_vt_now",
        "_vt_plain",
        "_vt_rearmed",
        "_vt_seq",
        "_vt_skipped",
        "_vt_ticks",
        "_vt_world",
    )

    def __init__(self, options: LoopOptions | None = None, /, **kwargs: Unpack[LoopKwargs]) -> None:
        # asyncio-private: BaseEventLoop.__del__ reads _closed.  A loop whose options are
        # rejected never opens anything, so until BaseEventLoop.__init__ sets it, it is closed.
        self._closed = True
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
        # The keywords of Future(loop=self), made once for the compiled sleeps (_cwake.c,
        # push_waiter); dropped at close, so that a closed loop is no cycle.
        self._vt_future_kw: dict[str, Any] | None = {"loop": self}
        self._vt_seq = self._vt_timers.next_seq
        # Seeded runs (_seeding.py): the Chooser behind every seeded decision, and what the
        # seed perturbs; the gates on the ready queue (_cycle.py), perturb="ready" among them.
        self._vt_chooser: Chooser | None = None
        self._vt_task_names: Iterator[int] = itertools.count(1)
        self._vt_perturb: Perturb = "timers"
        self._vt_gates: list[Callable[[collections.deque[Any], int], int]] = []
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
        self._vt_rate_strict = checked.rate_strict
        self._vt_anchor = RateAnchor(self._vt_now, rate)
        self._vt_selector = CountingSelector()
        self._vt_world = OutsideWork(self, self._vt_selector)
        self._vt_fast = False
        self._vt_lean = False
        self._vt_plain = False
        self._vt_lone = None
        self._vt_native_sleep = False
        # A simulated network whose hosts keep their own clocks reads timers through
        # loop.call_later/call_at stand-ins (virtualtime.net): anyio's sleep must go there too.
        self._vt_clock_views = False
        self._vt_update_fast()
        if checked.seed is not None:
            self._vt_seed_with(Chooser(checked.seed, replay_keep()), checked.perturb)
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
    def rate_strict(self) -> bool | float:
        """How far (virtual seconds; True: one) a paced run may fall behind; False: no limit.

        Set when the loop is made (see the class docstring).
        """
        return self._vt_rate_strict

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
        return self._vt_history_records()

    @property
    def task_history(self) -> Sequence[TaskRecord]:
        """The latest tasks :meth:`create_task` made, oldest first (empty when history is off).

        Finished tasks and tasks still running (``ended`` is None), as a read-only snapshot;
        with ``history=n`` the latest ``n`` finished ones are kept.  Tasks made directly with
        ``asyncio.Task(coro, loop=loop)`` are not listed.
        """
        return self._vt_task_records()

    @property
    def seed(self) -> int | None:
        """The seed that orders this loop's free choices, or None (FIFO: unseeded).

        Set with the ``seed`` option (or by the simulated network's ``Network(seed=...)``);
        see the class docstring.  Run the same program with the same seed again and it
        makes the same choices.
        """
        chooser = self._vt_chooser
        return None if chooser is None else chooser.seed

    @property
    def perturb(self) -> Perturb:
        """What the seed perturbs: ``"timers"`` or ``"ready"`` (see the class docstring)."""
        return self._vt_perturb

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
        own = self.__dict__
        before = set(own)
        if cls.get_debug is _base_events.BaseEventLoop.get_debug:
            if _core is not None:  # the compiled twin: reads the flag from its slot
                self.get_debug = _core.DebugFlag(self)  # type: ignore[method-assign]
            else:  # the same read in pure Python: the slot's own getter, no attribute search
                flag = functools.partial(_DEBUG_SLOT.__get__, self)
                flag.__signature__ = _NO_PARAMETERS  # type: ignore[attr-defined]
                flag.__call__ = flag  # type: ignore[method-assign]
                self.get_debug = flag  # type: ignore[method-assign]
        if cls.create_future is _base_events.BaseEventLoop.create_future:
            make_future = functools.partial(_Future, loop=self)
            make_future.__signature__ = _NO_PARAMETERS  # type: ignore[attr-defined]
            make_future.__call__ = make_future  # type: ignore[method-assign]
            self.create_future = make_future  # type: ignore[method-assign]
        if _core is not None and cls.call_later is VirtualEventLoop.call_later:
            self.call_later = self._vt_later_caller()  # type: ignore[method-assign]
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
        if _core is not None and cls._vt_jump_to is WaitsMixin._vt_jump_to:
            # The compiled in-place jump (every sim kit wait that skips its round): the
            # method's checks read at the slots' offsets; the method stays the reference.
            self._vt_jump_to = functools.partial(_core.jump_to, self)  # type: ignore[method-assign]
        # Each stand-in refers back to the loop: close() lets go of them (_vt_let_go).
        self._vt_stand_ins: dict[str, object] = {name: own[name] for name in own.keys() - before}
        # The lone wake-up of the pure-Python rounds runs a future's one callback itself, where
        # the future would have scheduled it with getattr(loop, "call_soon"): only while that
        # is still this stand-in (not a subclass's method, nor anything put in its place since).
        self._vt_lone = self._vt_stand_ins.get("call_soon")

    def _vt_later_caller(self) -> Any:
        # The compiled call_later: the inline path below (every asyncio.sleep), without a
        # Python frame; anything unusual (a priority, debug mode, history, an odd delay)
        # calls the method.  It holds the loop's _vt_seq, read when it is made.
        assert _core is not None
        return _core.LaterCaller(self, _Timer, functools.partial(VirtualEventLoop.call_later, self))

    def _vt_seed_with(self, chooser: Chooser, perturb: Perturb) -> None:
        # Every new timer's sequence number (its place among ties) becomes a seeded key, and
        # with perturb="ready" the ready queue gets the shuffling gate.
        self._vt_chooser = chooser
        self._vt_perturb = perturb
        self._vt_timers.next_seq = self._vt_seq = chooser.timer_key
        # Unnamed tasks get their names from the loop, not from asyncio's counter for the
        # whole process: two runs of one seed in one process name their tasks alike.
        self._vt_task_names = itertools.count(1)
        if perturb == "ready":
            self._vt_add_gate(chooser.ready_gate)

    def _vt_reseed(self, seed: int, perturb: Perturb = "timers") -> None:
        """Seed this loop now (running or not), as ``seed=``/``perturb=`` would have.

        The seam of the simulated network: ``net.Network(seed=5)`` on an unseeded loop seeds
        it here, so that its draws and the loop's ties come from one :class:`Chooser`.  Timers
        already scheduled keep their places; every later one is ordered by the seed.  On a
        loop seeded with this same seed it changes nothing, except that ``perturb="ready"``
        adds the ready shuffle if the loop lacked it; another seed is a ``UsageError``.
        """
        seed = check_option("seed", seed)
        perturb = check_option("perturb", perturb)
        if seed is None:
            raise InvalidTypeError("_vt_reseed() needs a seed: an int >= 0, got None")
        self._check_closed()  # asyncio-private: the stock "Event loop is closed" check.
        chooser = self._vt_chooser
        if chooser is not None:
            if chooser.seed != seed:
                raise UsageError(
                    f"this loop is already seeded with seed={chooser.seed}; it cannot be seeded "
                    f"again with seed={seed} (one run, one seed: pass the same seed, or none)"
                )
            if perturb == "ready" and self._vt_perturb != "ready":
                self._vt_perturb = "ready"
                self._vt_add_gate(chooser.ready_gate)
            return
        chooser = Chooser(seed, replay_keep())
        # Number the seeded timers on from the unseeded ones (one number is spent: harmless).
        chooser.number_timers_from(self._vt_seq())
        self._vt_seed_with(chooser, perturb)
        # The compiled call_later read the old _vt_seq when it was made: make it again.
        own = self.__dict__
        stand_ins = getattr(self, "_vt_stand_ins", {})
        made = stand_ins.get("call_later")
        if made is not None and own.get("call_later") is made:
            stand_ins["call_later"] = own["call_later"] = self._vt_later_caller()

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
        # The plain round of _run_once: the fast path with lean timers, and no gate on the
        # ready queue (the compiled rounds run it without asking them).
        self._vt_plain = self._vt_fast and self._vt_lean and not self._vt_gates
        # anyio.sleep may take virtualtime.sleep (_anyio_sleep.py): where asyncio.sleep would
        # take the lean timer, on a class that keeps the stock timers and futures.
        cls = type(self)
        self._vt_native_sleep = (
            self._vt_lean
            and cls.call_later is VirtualEventLoop.call_later
            and cls.create_future is _base_events.BaseEventLoop.create_future
            and not self._vt_clock_views
        )

    def set_debug(self, enabled: bool) -> None:
        """Like the stock method (debug mode takes the loop's general path)."""
        super().set_debug(enabled)
        self._vt_update_fast()

    def add_signal_handler(self, sig: int, callback: Callable[[*_Ts], object], *args: *_Ts) -> None:
        """Like the stock method; a handler is outside work (a signal may come at any time)."""
        super().add_signal_handler(sig, callback, *args)
        self._vt_world.changes += 1

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

    # ------------------------------------------------------------------ tasks

    # create_task, as the stock method of each Python version takes its arguments: the stock
    # body, making a numbered Task (see Task) where the stock method makes asyncio.Task.
    # asyncio-private: a debug-mode task records where it was made (_source_traceback); the
    # stock method drops its own frame from that record, and so does this one.
    if sys.version_info >= (3, 14):

        def create_task(self, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
            """Like the stock method; the task is numbered (see :class:`Task`)."""
            self._check_closed()
            if self._vt_chooser is not None and kwargs.get("name") is None:
                kwargs["name"] = f"Task-{next(self._vt_task_names)}"
            # asyncio-private: the factory as the stock method reads it (no method call).
            if self._task_factory is not None or _asyncio_tasks.Task is not _STOCK_TASK:
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
            if self._vt_chooser is not None and name is None:
                name = f"Task-{next(self._vt_task_names)}"
            # asyncio-private: the factory as the stock method reads it (no method call).
            if self._task_factory is not None or _asyncio_tasks.Task is not _STOCK_TASK:
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
            if self._vt_chooser is not None and name is None:
                name = f"Task-{next(self._vt_task_names)}"
            # asyncio-private: the factory as the stock method reads it (no method call).
            if self._task_factory is not None or _asyncio_tasks.Task is not _STOCK_TASK:
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

    # ------------------------------------------------------------ running

    def run_forever(self) -> None:
        """Like the stock method; with ``patch_time=True`` the stdlib clocks follow this loop."""
        anyio_backend = _modules.get(_ANYIO_ASYNCIO)
        if anyio_backend is not _anyio_seen and anyio_backend is not None:
            _tell_anyio_hooks()
        here = RUNNING_HERE
        outer = here.loop
        here.loop = self
        if _note_running is not None:
            _note_running(self)
        if self._vt_rate_strict:
            # The strict pace is kept from the start of each run: time stood still between
            # runs, and the real time that passed meanwhile is nobody's lateness.
            self._vt_anchor.rebase(self._vt_now)
        try:
            if self._vt_patch is None:
                super().run_forever()
            else:
                with self._vt_patch:
                    super().run_forever()
        finally:
            here.loop = outer
            if _note_running is not None:
                _note_running(outer)

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
        self._vt_let_go()

    def _vt_let_go(self) -> None:
        # A closed loop is freed by reference counting, as a stock loop is, not left to the
        # cyclic collector: its passes (one every few runs, and now and then a full one over
        # the whole heap) were a tenth of the cost of a short run.  So the loop lets go of what
        # refers back to it: the stand-ins of _vt_lean_get_debug (the class's own methods
        # answer again: the same answers, and a closed loop refuses the same calls), the timer
        # queue's hook (the queue is empty now), and the outside model's link (weak from now
        # on: it still reaches the loop while anybody holds the loop).
        self._vt_future_kw = None
        own = self.__dict__
        for name, made in getattr(self, "_vt_stand_ins", {}).items():
            if own.get(name) is made:  # (not if somebody has replaced it meanwhile)
                del own[name]
            if type(made) is functools.partial:
                made.__dict__.pop("__call__", None)  # itself: a cycle of its own
        self._vt_stand_ins = {}
        self._vt_lone = None
        timers = getattr(self, "_vt_timers", None)
        if timers is not None:
            timers.on_discard = None
        world = getattr(self, "_vt_world", None)
        if world is not None:
            world.let_go()

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


# asyncio-private: the slot that holds BaseEventLoop's _debug flag (see __slots__).
_DEBUG_SLOT: Final[Any] = VirtualEventLoop.__dict__["_debug"]

if _core is not None:
    # The compiled core reads the slotted fields at their offsets in this class (see __slots__).
    _core.setup_loop(
        VirtualEventLoop,
        TimerQueue,
        OutsideWork,
        WaitsMixin._vt_jump_to,
        THREAD_TABLE,
        JUMP_ROUND_EVERY,
    )
    if hasattr(os, "register_at_fork"):
        # A forked child forgets the running loop (_running.py); the core's note of it too.
        os.register_at_fork(after_in_child=functools.partial(_core.note_running, None))


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
