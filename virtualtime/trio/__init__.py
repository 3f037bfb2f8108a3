"""Virtual time for trio: :class:`VirtualClock`, a clock you hand to ``trio.run``.

``trio.run(main, clock=virtualtime.trio.VirtualClock())`` makes ``trio.sleep(3600)`` return at
once with ``trio.current_time()`` advanced by exactly 3600; :func:`run` does the same and turns
a deadlock into :class:`~virtualtime.DeadlockError`.  This is the only module of virtualtime
that imports trio; ``import virtualtime`` never loads it.

Why trio needs its own clock
----------------------------
trio already ships a virtual clock, ``trio.testing.MockClock(autojump_threshold=0)``, but the
part that makes it jump is private: the run loop reads a hidden runner attribute and calls a
private ``MockClock._autojump()`` method, so a third-party clock cannot reuse it (trio issues
#1587 and #3369, PR #3371).  MockClock also lets a virtual timeout overtake a worker thread
(trio #456), spins a core when every task is blocked for ever, and drifts because it adds
floats.  :class:`VirtualClock` is built only on trio's public interfaces:

* ``trio.abc.Clock.deadline_to_sleep_time`` is called by the run loop exactly when no task is
  runnable, with the next deadline.  With nothing outside the run to wait for, the clock
  answers 0: trio polls I/O *without blocking*, and a small ``trio.abc.Instrument`` jumps the
  clock to that deadline in ``after_io_wait`` if the poll woke nobody -- so every jump comes
  after trio has looked at I/O, and the deadline expires in the same turn of the loop.  No
  wake-up socket, no extra turn (MockClock needs two turns per jump).
* The instrument's ``task_scheduled`` hook (a bare ``list.append``) records every task that
  becomes runnable.  At the next idle question the clock reads what each of those tasks now
  waits for from its chain of awaited coroutines (public ``Task.coro``; ``cr_await``): a
  ``trio.testing.wait_all_tasks_blocked`` call, a ``trio.to_thread.run_sync`` job, or a
  ``trio.lowlevel.wait_readable``/``wait_writable`` on some descriptor.  A task's wait can only
  change when it runs, so this sees every change at a cost per task that ran.
* A task in ``wait_all_tasks_blocked`` goes before any jump: the clock then answers with a
  long *probe* instead of 0; trio lowers the wait to that task's cushion and wakes it, and the
  clock leaves time alone (with ``autojump_threshold > 0`` the probe is the threshold, and the
  clock jumps only after that much real quiet).

The outside world
-----------------
Virtual time must never overtake something outside the run that may still answer.  The clock
asks the same model as the asyncio loop, read from the machine where it can be (see
``docs/loop.md``, "When may time jump?"):

* **thread jobs**: a worker thread running a ``trio.to_thread.run_sync`` job (anyio's
  ``to_thread`` too); a job blocked calling back into trio with ``from_thread`` does not
  count, only trio can move it;
* **threads that call into the run** -- ``trio.from_thread``, anyio's ``BlockingPortal``,
  ``TrioToken.run_sync_soon`` from another thread -- while the kernel says that thread works
  (:class:`~virtualtime._shared._threads.Speakers`): it may be about to cancel what it just
  started.  The clock hears such calls on the run's entry queue (:func:`_listen_to`).  A plain
  thread that started during the run holds time for its first 50 ms (a blocking client about
  to connect to the run's server: a listening socket is not outside work);
* **children** still running (trio waits on their pidfd), pipes to them, connects in flight,
  connected datagram sockets;
* **connections to peers outside the run** (TCP, and Unix stream sockets to other processes):
  :class:`~virtualtime._shared._peers.Connections` decides -- bytes in flight, the peer
  working, an answer it still owes us (we are the client unless a listener of this run
  accepted the connection); data that wakes a reader is noted as an answer before the reader
  runs, and acknowledged at once (``TCP_QUICKACK``).

Not outside work: sockets whose both ends are in this run (an in-process server and its client
-- the peer's address is one this run's own sockets have), listening sockets, pipes with both
ends in this process, trio's wake-up socket, and an *idle* connection (answered, the peer
asleep).  A wait is read from the task's chain of awaits, through async generators too (a body
read inside ``async for``).

While outside work is pending, time does not jump: it stands still, and a deadline fires only
once as much real time has passed as its virtual delay, then time steps to exactly that
deadline.  So a real answer never loses to a virtual timeout, quick answers arrive at the same
virtual instant on every machine, and a peer that never answers still times out after about
its real timeout.  The real-time count restarts whenever the run makes progress (any task
runs, except a reader going back to the same outside wait under the same timeouts), since that
step may have set the timer now due: trio does not say which deadline is whose, so this stands
for the asyncio loop's allowance per timer -- never early, possibly late while other tasks keep
making progress.  ``autojump_threshold`` remains for what the model cannot see, such as a
socket pair handed to a plain thread.

Exact time
----------
Time is kept as integer nanoseconds (:mod:`virtualtime._shared._time`), so ten ``trio.sleep(0.1)``
end at exactly ``1.0`` (MockClock: ``0.9999999999999999``).  trio, though, hands the clock
absolute float deadlines computed as ``now + delay``, and such a sum can land a few ulps above
the instant it means (``0.2 + 0.1`` is ``0.30000000000000004``).  The clock recovers the delay
as ``deadline - now``, rounds it to the nearest tick and carries the remainder to the next
delay (so long runs of ``sleep(1/3)`` drift neither up nor down), and reports the larger of
its ticks and the deadline that fired: trio's expiry check and anyio's ``fail_after`` (which
re-checks ``current_time() >= deadline``) both need the reported time to reach the deadline.
What is left is the float error of trio's own ``now + delay`` sums, the same as MockClock's:
about 5e-8 s after 10,000 sleeps from one day, 1.5e-5 s after 10,000 ``sleep(0.1)`` from one
year, and a second after 1,000 sleeps at a million years (floats are 4 ms apart there).  (The
asyncio loop receives relative delays and has no such error.)  A positive delay shorter than a
tick still advances one tick; time never freezes and never goes backwards.

Deadlocks
---------
When no task can run, no deadline is pending (or, with ``autojump=False``, nobody is left to
move time), no outside work is pending, no task waits on a file descriptor and no task waits
in ``wait_all_tasks_blocked``, nothing can happen again unless another thread or a signal
wakes trio.  The clock waits ``deadlock_timeout`` real seconds for that, never spinning.  (A
program that only waits for a signal looks exactly like this: give it a long
``deadlock_timeout``.)  Under :func:`run` (and :func:`virtualtime.anyio_run`, and the pytest
plugin) it then lifts the shields of the cancel scopes the blocked tasks wait in (public
``CancelScope.shield``), cancels the main function and raises
:class:`~virtualtime.DeadlockError` listing every blocked task and where it waits, in the
asyncio loop's format -- from shielded scopes, nested nurseries and ``from_thread`` calls
alike.  Under a plain ``trio.run(..., clock=VirtualClock())`` there is no public way for a
clock to make the main task raise an exception of its choosing -- trio only offers
cancellation, which would surface as a bare ``trio.Cancelled`` -- so the clock then just
sleeps (no CPU) until something outside wakes trio, exactly as trio does with its real clock.

Kit waits
---------
The simulation toolkit (``virtualtime.sim``: ``Timer``, vehicles) sleeps on this clock without
a cancel scope: the task parks (``trio.lowlevel.wait_task_rescheduled``) in a heap the clock
owns and treats as one more deadline, or -- when it is the only thing that can happen before
its instant -- the clock jumps in place and the task does not suspend at all.  The rules, the
order at one instant and the one limit are in :mod:`virtualtime.trio._park`.

Driving verbs
-------------
``virtualtime.settle/step/evolve/run_until/fast_forward`` (awaitable) and ``virtualtime.now/
peek`` work on trio with the same meaning as on asyncio: called from a task of a run whose
clock is a VirtualClock, they drive it (this module holds their trio halves).
"""

import collections
import collections.abc as _abc
import contextlib
import functools
import gc
import math
import os
import socket
import stat
import sys
import threading
import time as _stdlib_time
import types
import typing

try:
    import trio
except ModuleNotFoundError as _missing:  # trio is an extra: say how to get it
    if _missing.name != "trio":
        raise
    raise ModuleNotFoundError(
        "virtualtime.trio runs trio programs in virtual time and needs trio, which is not "
        "installed: pip install 'async-virtualtime[trio]' (or pip install trio)",
        name="trio",
    ) from None
import trio.lowlevel
import trio.testing

from .. import _options
from .._shared import _awaits, _errors, _machine, _peers, _threads, _time
from . import _park

# No ``from x import y`` above: this module's public namespace is exactly ``__all__``.

__all__ = ("RunGuard", "VirtualClock", "run")

_T = typing.TypeVar("_T")

_PROBE: typing.Final = 600.0
"""Real seconds answered to the run loop when a task may be waiting in
``wait_all_tasks_blocked``: trio lowers the I/O wait to that task's cushion, which tells the
clock to leave time alone.  The loop never actually waits this long: the clock cuts the wait
short as soon as it knows nobody is waiting."""

_WAIT_SLACK: typing.Final = 0.001
"""Real seconds a timed quiet period may fall short of its length (OS timer granularity)."""

_NOISE_ULPS: typing.Final = 8
"""A deadline this many float ulps above a tick is float noise, not a later instant."""

_FINE_LIMIT: typing.Final = 2.0**18
"""Below this many seconds (about three days) floats are fine enough that the float
noise of a deadline stays below :data:`_FINE_NOISE` and the jump's fast path applies."""

_FINE_NOISE: typing.Final = _NOISE_ULPS * math.ulp(_FINE_LIMIT) * _time.TICKS_PER_SECOND
"""The largest float noise, in ticks, of a deadline below :data:`_FINE_LIMIT`."""

_ROUND_MARGIN: typing.Final = 100
"""Where floats are coarser than a tick, a round decimal delay is believed only if it is this
many times rounder than the width of the noise window (a chance match is then < 1 %)."""

_THREAD_GRACE: typing.Final = _threads.THREAD_GRACE

_RECHECK_MIN: typing.Final = 0.0005
_RECHECK_MAX: typing.Final = 0.05
"""Real seconds before a thread that spoke to the run and works is looked at again: from the
first to the second, doubling while it keeps working (it may block on the run instead, which
sends no wake-up)."""

_WORKER_TARGETS: typing.Final = frozenset({"WorkerThread._work"})
"""trio's cached worker threads, by their target's ``__qualname__``: they run ``to_thread``
jobs and deliver their results, which the rules for thread jobs cover -- never speakers."""

_HORIZON: typing.Final = _time.NEVER / _time.TICKS_PER_SECOND
"""The horizon of virtual time, in seconds (2**125 ns, about 4.25e28 s), as on the asyncio loop:
no driving verb and no :meth:`VirtualClock.jump` may take the clock there.  (A trio deadline
beyond it still fires when it is the next one: ``trio.sleep(1e300)`` is one jump.)"""

_thread_table_size: typing.Final = _threads.thread_table_size
# threading-private, read only: the table of live threads (see _threads; a canary pins it).
_thread_table: typing.Final[dict[int, threading.Thread]] = threading._active  # type: ignore[attr-defined]
_real_monotonic: typing.Final = _stdlib_time.monotonic

_WAKEUP_TASK: typing.Final = "<TrioToken.run_sync_soon task>"
"""trio's own task that waits on its wake-up socket: never outside work, never a reason to
keep a deadlocked run alive."""

# What a blocked task waits for, read from its await chain (public ``Task.coro`` and the
# coroutine objects' ``cr_await``/``cr_code``): the public trio functions below mark it.
_W_IDLE: typing.Final = 1  # trio.testing.wait_all_tasks_blocked
_W_THREAD: typing.Final = 2  # trio.to_thread.run_sync, waiting for its thread
_W_CALLBACK: typing.Final = 3  # trio.to_thread.run_sync, running a from_thread call in trio
_W_READ: typing.Final = 4  # trio.lowlevel.wait_readable
_W_WRITE: typing.Final = 5  # trio.lowlevel.wait_writable

_TO_THREAD_CODE: typing.Final = trio.to_thread.run_sync.__code__
_WAIT_RESCHEDULED_CODE: typing.Final = trio.lowlevel.wait_task_rescheduled.__code__
_W_INSIDE: typing.Final = 0  # a wait on trio alone (a sleep, an Event...): stop looking
_MARKS: typing.Final[dict[types.CodeType, int]] = {
    trio.testing.wait_all_tasks_blocked.__code__: _W_IDLE,
    _TO_THREAD_CODE: _W_THREAD,
    trio.lowlevel.wait_readable.__code__: _W_READ,
    trio.lowlevel.wait_writable.__code__: _W_WRITE,
    # Waits that never lead to I/O, a thread or an idle wait: the walk stops there (speed).
    trio.sleep.__code__: _W_INSIDE,
    trio.sleep_until.__code__: _W_INSIDE,
    trio.sleep_forever.__code__: _W_INSIDE,
    trio.Event.wait.__code__: _W_INSIDE,
    trio.lowlevel.ParkingLot.park.__code__: _W_INSIDE,
    trio.MemoryReceiveChannel.receive.__code__: _W_INSIDE,
    trio.MemorySendChannel.send.__code__: _W_INSIDE,
}

# How a file descriptor a task waits on relates to the world outside this run.
_FD_INSIDE: typing.Final = 0  # both ends are ours (or a listener): never outside work
_FD_OUTSIDE: typing.Final = 1  # a child process, a pipe or socket to another process...
_FD_PEER: typing.Final = 2  # a TCP or Unix connection: ask _peers.Connections (unless ours)

_LIBRARY_DIRS: typing.Final = tuple(
    os.path.dirname(path) + os.sep
    for path in (trio.__file__, os.path.dirname(__file__))
    if path is not None
)
"""Frames from these packages are trio's (or our) insides, trimmed from deadlock reports."""


def _library_dirs() -> tuple[str, ...]:
    dirs = _LIBRARY_DIRS
    for name in ("anyio", "outcome"):  # their frames too, if they are in use (never imported)
        path = getattr(sys.modules.get(name), "__file__", None)
        if path is not None:
            dirs = (*dirs, os.path.dirname(path) + os.sep)
    return dirs


_NO_PLAN: typing.Final = 0
_PLAN_POLL: typing.Final = 1  # jump after this I/O poll (timeout 0) unless it woke a task
_PLAN_JUMP: typing.Final = 2  # probe first (idle waiters, threshold), then jump
_PLAN_DEADLOCK: typing.Final = 3


def _noop() -> None:
    """Queued with ``run_sync_soon`` only to end the run loop's I/O wait early."""


class _Wait(typing.NamedTuple):
    """What one blocked task waits for (see :func:`_classify`)."""

    kind: int
    in_thread_job: bool
    fd: object = None
    fd_class: int = _FD_INSIDE
    peer: object = None
    timers: frozenset[tuple[int, float]] = frozenset()
    number: int = -1
    """The descriptor number (what :class:`~virtualtime._shared._peers.Connections` is asked)."""
    port: int = -1
    """The local port of a TCP connection (-1: not TCP)."""


_COROUTINE: typing.Final = types.CoroutineType
_GENERATOR: typing.Final = types.GeneratorType


_AGEN_STEPS: typing.Final = _awaits.ASYNC_GEN_STEPS
"""A task blocked inside ``async for`` (httpx's ``Response.aiter_raw``, anyio's stream
iterators) awaits one of these: it refers to its async generator, whose ``ag_await`` goes on."""
_generator_of: typing.Final = _awaits.generator_of


def _classify(
    task: trio.lowlevel.Task,
    _coroutine: type = _COROUTINE,
    _generator: type = _GENERATOR,
    _marks: typing.Any = _MARKS.get,
) -> _Wait | None:
    """Read what ``task`` (blocked now) waits for from its chain of awaited coroutines.

    None for anything the clock need not know about (a sleep, an Event, a channel...).
    This runs for every task that ran, so it walks the chain without raising anything (the
    keyword defaults are local bindings, for speed).
    """
    coro: typing.Any = task.coro
    in_thread_job = False
    while True:
        kind = type(coro)
        if kind is _coroutine:
            mark = _marks(coro.cr_code)
            if mark is not None:
                if mark == _W_INSIDE:
                    break
                if mark == _W_IDLE:
                    return _Wait(_W_IDLE, in_thread_job)
                if mark != _W_THREAD:
                    return _Wait(mark, in_thread_job, coro.cr_frame.f_locals.get("fd"))
                inner = coro.cr_await
                if type(inner) is _COROUTINE and inner.cr_code is _WAIT_RESCHEDULED_CODE:
                    return _Wait(_W_THREAD, True)
                in_thread_job = True  # running a from_thread call: look deeper
            coro = coro.cr_await
        elif kind is _generator:
            coro = coro.gi_yieldfrom
        elif kind in _AGEN_STEPS:
            generator = _generator_of(coro)
            coro = None if generator is None else generator.ag_await
        else:
            break
    return _Wait(_W_CALLBACK, True) if in_thread_job else None


class VirtualClock(trio.abc.Clock):
    """A trio clock whose time is virtual: exact, instant and repeatable.

    Pass it to ``trio.run(main, clock=VirtualClock())`` (or use :func:`virtualtime.trio.run`,
    or ``anyio.run(main, backend="trio", backend_options={"clock": VirtualClock()})``).
    Every sleep, ``move_on_after``, ``fail_after`` and deadline then runs on virtual time,
    which moves only when the clock decides to move it.  Sockets, subprocesses and worker
    threads keep working in real time, and never lose to a virtual timeout (see "The outside
    world" in the module documentation).

    Options (keywords, or one :class:`~virtualtime.LoopOptions` passed positionally; checked by
    that options catalogue, the same as the asyncio loop's; each is also a settable
    attribute; inside :func:`virtualtime.configure` its options apply on top):

    ``start`` (0.0)
        Virtual time at which the clock starts, in seconds (finite, >= 0).
    ``autojump`` (True)
        Jump straight to the next deadline whenever every task is blocked.  This is what you
        want for tests and simulations: a program that sleeps for a year finishes in
        milliseconds.  Turn it off to drive time yourself with :meth:`jump` or the driving
        verbs (``await virtualtime.evolve(dt)`` and friends).
    ``autojump_threshold`` (0.0)
        Real seconds of quiet (no task runnable, no I/O) before each jump.  0 jumps as soon
        as trio has polled I/O and found nothing, and costs no real time.  The clock already
        holds time for the outside work it can see (threads, children, sockets to other
        processes); raise this (0.05 to 0.5) only for what it cannot see, such as a peer
        reached through a socket pair handed to another thread.  Every jump then costs that
        much real time.
    ``rate`` (0.0)
        0 is pure virtual time.  ``r > 0`` makes virtual time flow at ``r`` times real time
        (``rate=1`` is real time, ``rate=60`` a minute per second) and turns jumping off,
        to watch a simulation unfold or to pace it against real hardware.  Setting it while
        running re-anchors, so the clock neither jumps nor goes back at the change.
    ``deadlock_timeout`` (0.25)
        Real seconds to wait, when nothing at all can happen any more, for another thread or
        a signal to wake trio before the run is declared deadlocked (see :func:`run`).
    ``patch_time`` (False) and ``wall_start`` (None)
        With ``patch_time=True``, while a run with this clock goes on, ``time.monotonic()``,
        ``time.time()``, ``datetime.now()`` and the rest follow this clock in trio's thread,
        however the code holds them -- exactly as the asyncio loop's option of the same name
        (README: "Clocks outside the loop").  ``wall_start`` is the wall-clock time of virtual
        time ``start``: a POSIX timestamp or a datetime (naive: local time); default the real
        time when the clock is made.

    :meth:`jump` (alias :meth:`fast_forward`) moves time forward by hand; time never goes
    backwards.  Same-instant wake-ups run in trio's (deliberately randomised) order: the
    first-in first-out promise is the asyncio loop's, not trio's -- except for the waits of
    the simulation toolkit (``virtualtime.sim``: its sleeps, process starts, interrupts and
    settled waits), which this clock queues itself, first come first served, after trio's own
    deadlines at the same instant (see ``_park.py``).
    """

    def __init__(
        self,
        options: _options.LoopOptions | None = None,
        /,
        **kwargs: typing.Unpack[_options.ClockKwargs],
    ) -> None:
        checked, layers = _options.configured(
            _options.from_call(options, kwargs, "VirtualClock", "trio"), trio=True
        )
        start = checked.start
        autojump = checked.autojump
        autojump_threshold = checked.autojump_threshold
        rate = checked.rate
        deadlock_timeout = checked.deadlock_timeout
        patch: typing.Any = None
        if checked.patch_time or checked.wall_start is not None:
            from .._clocks._patch import TrioClockPatch

            wall = _options.wall_epoch(checked)
            patch = (
                TrioClockPatch(self, _time.to_ticks(start), wall) if checked.patch_time else None
            )

        self._ticks = _time.to_ticks(start)
        # Sub-tick remainder of the delays added so far, in ticks (|x| <= 0.5): rounding each
        # delay to the nearest tick and carrying the rest keeps long sums unbiased.
        self._residue = 0.0
        # The time reported while rate == 0: the float of _ticks, or a deadline that is only
        # float noise above it (see "Exact time" in the module docstring).
        self._now = _time.to_seconds(self._ticks)
        self._rate = rate
        self._anchor = _time.RateAnchor(self._now, rate, _stdlib_time.perf_counter)
        self._autojump = autojump
        self._threshold = autojump_threshold
        self._deadlock_timeout = deadlock_timeout
        self._jumps = 0
        self._plain = True  # rate 0, autojump, no threshold: the fast path applies
        self._update_plain()

        # Per-run state, reset by start_clock().
        self._token: trio.lowlevel.TrioToken | None = None
        self._scheduled: list[trio.lowlevel.Task] = []
        self._instrument = _ClockInstrument(self, self._scheduled.append)
        self._probe = _ProbeInstrument(self)
        self._probe_installed = False
        self._waits: dict[trio.lowlevel.Task, _Wait] = {}
        self._inside_io: dict[trio.lowlevel.Task, _Wait] = {}
        self._run_addresses: set[object] = set()
        self._listen_ports: set[int] = set()
        """Ports this run listens on: a connection from one of them was accepted (we serve it)."""
        self._hold_since: float | None = None
        self._new_threads = _threads.NewThreads()  # replaced at each run's start
        # The model of outside work the asyncio loop asks too (issue 35): connections to peers
        # outside the run, and the threads that have called into it.
        self._conns = _peers.Connections(self._others_working)
        self._speakers = _threads.Speakers()
        self._spoke = False
        """Set (in the speaking thread) when a thread spoke: the fast path must ask."""
        self._said = 0
        """Bumped (in the speaking thread) before each call another thread makes into the run:
        a jump planned before the call is called off after the poll (see _heard)."""
        self._said_seen = 0
        self._busy: frozenset[int] | None = None
        self._busy_round = -1
        self._idle_round = 0
        self._speak_recheck = _RECHECK_MIN
        self._run_ident: int | None = None
        self._peer_reads: dict[trio.lowlevel.Task, int] = {}
        """Tasks waiting to read from a connection to an outside peer -> its descriptor number:
        data that wakes one answers what was sent before it (see _note_answers)."""
        self._plan = _NO_PLAN
        self._plan_deadline = math.inf
        self._plan_wait = 0.0
        self._plan_immediate = False
        self._plan_kit = -1  # the tick of the kit wait the planned jump goes to, or -1
        self._wait_started = 0.0
        # Kit waits (virtualtime/trio/_park.py): a heap of (ticks, arrival, Parked), and the
        # state of the in-place jump: loop rounds seen (counted by the instrument), the round
        # whose current_statistics() the cached limit came from, and waits since a round.
        self._kit: list[tuple[int, int, _park.Parked]] = []
        self._kit_count = 0
        self._kit_first = 0  # places taken ahead of the others (_park.reserve_first)
        self._kit_dead = 0  # entries of cancelled or woken-early waits still in the heap
        self._kit_busy = 0  # busy loop turns in a row with a kit wait due (_park.busy_turn)
        # The toolkit's own tasks (a vehicle's driver) parked since the last idle question:
        # task -> its Parked.  _absorb need not read their chain (see _park.park).
        self._kit_own: dict[trio.lowlevel.Task, _park.Parked] = {}
        self._rounds = 0
        self._kit_round = -1
        self._kit_limit = -1.0
        self._kit_skipped = 0
        self._dormant = False
        self._guard: RunGuard[typing.Any] | None = None  # set only by RunGuard.guarded_main
        self._error: BaseException | None = None
        # patch_time: entered when trio starts a run with this clock, left when it ends.
        self._patch = patch
        # The configure() layers this clock was made under: told when each run ends.
        self._layers = layers
        if layers:
            _options.created(self, layers)

    # ------------------------------------------------------------ settable options

    @property
    def rate(self) -> float:
        """Virtual seconds per real second; 0 means pure virtual time (the default)."""
        return self._rate

    @rate.setter
    def rate(self, value: float) -> None:
        value = _options.check_option("rate", value)
        if self._rate == value:
            return
        if self._rate == 0:
            # Leaving pure virtual time: real time starts counting from the present instant.
            self._anchor.rebase(self._now)
            self._anchor.set_rate(value)
        elif value == 0:
            # Back to ticks, rounding up so that time does not step back by a fraction.
            virtual = self._anchor.virtual()
            ticks = _time.to_ticks(virtual)
            if _time.to_seconds(ticks) < virtual:
                ticks += 1
            self._ticks = max(ticks, self._ticks)
            self._residue = 0.0
            self._now = max(_time.to_seconds(self._ticks), virtual)
            self._anchor.set_rate(0.0)
        else:
            self._anchor.set_rate(value)
        self._rate = value
        self._update_plain()
        self._poke()

    def _update_plain(self) -> None:
        self._plain = not self._rate and self._autojump and not self._threshold

    @property
    def autojump(self) -> bool:
        """Whether time jumps to the next deadline as soon as every task is blocked."""
        return self._autojump

    @autojump.setter
    def autojump(self, value: bool) -> None:
        self._autojump = _options.check_option("autojump", value)
        self._update_plain()
        self._poke()

    @property
    def autojump_threshold(self) -> float:
        """Real seconds of quiet before each jump (see the class docstring)."""
        return self._threshold

    @autojump_threshold.setter
    def autojump_threshold(self, value: float) -> None:
        self._threshold = _options.check_option("autojump_threshold", value)
        self._update_plain()
        self._poke()

    @property
    def deadlock_timeout(self) -> float:
        """Real seconds to wait for an outside wake-up before declaring a deadlock."""
        return self._deadlock_timeout

    @deadlock_timeout.setter
    def deadlock_timeout(self, value: float) -> None:
        self._deadlock_timeout = _options.check_option("deadlock_timeout", value)

    @property
    def jumps(self) -> int:
        """How many times this clock has jumped to a deadline on its own (autojump)."""
        return self._jumps

    # ------------------------------------------------------------ moving time by hand

    def jump(self, seconds: float) -> None:
        """Move virtual time forward by ``seconds`` at once.

        Every deadline passed over expires on the run loop's next turn, all seeing the new
        time (a suspended laptop waking up).  Use it with ``autojump=False`` to drive time
        from a test, after ``await trio.testing.wait_all_tasks_blocked()`` (or use the
        awaitable verbs ``virtualtime.evolve``/``fast_forward``, which also let everything
        due settle).  Call it from inside the run; from another thread use
        ``trio.from_thread.run_sync(clock.jump, seconds, trio_token=...)``.

        Raises ``ValueError`` for a negative, NaN or infinite ``seconds`` (time never goes
        backwards) or one that would take time to the horizon of virtual time (about 4.25e28
        s), and ``TypeError`` for a non-number; the clock is then unchanged.
        """
        self._leap("seconds", seconds)

    fast_forward = jump

    def _leap(self, name: str, seconds: object) -> None:
        """:meth:`jump`, with errors naming the argument ``name``."""
        if self._rate:
            span = _time.check_delay(name, seconds)
            virtual = self._anchor.virtual() + span
            if not virtual < _HORIZON:
                raise _beyond_horizon(name, seconds)
            self._anchor.rebase(virtual)
        else:
            self._ticks += _span_ticks(name, seconds, self._ticks)
            self._now = max(_time.to_seconds(self._ticks), self._now)
        self._dormant = False
        self._hold_since = None
        self._poke()

    # ------------------------------------------------------------ kit waits
    # The toolkit (virtualtime.sim) may not import this package; it finds these on the
    # running clock instead (see _park.py: the primitive, the ordering rule, the in-place rule).

    _vt_sleep = _park.sleep
    _vt_arrive = _park.arrive
    _vt_fresh = _park.fresh
    _vt_reserve = _park.reserve
    _vt_reserve_first = _park.reserve_first
    _vt_hold = _park.hold
    _vt_release = _park.release
    _vt_turn = _park.turn

    # ------------------------------------------------------------ trio.abc.Clock

    def start_clock(self) -> None:
        """Called by trio at the start of a run: hook into that run's loop."""
        self._token = trio.lowlevel.current_trio_token()
        self._new_threads = _threads.NewThreads()  # the threads alive now are not new
        self._plan = _NO_PLAN
        self._dormant = False
        self._hold_since = None
        self._scheduled.clear()
        self._waits.clear()
        self._inside_io.clear()
        self._run_addresses.clear()
        self._listen_ports.clear()
        self._peer_reads.clear()
        self._spoke = False
        self._said = self._said_seen = 0
        self._run_ident = threading.get_ident()
        _listen_to(self._token, self._heard)
        self._probe_installed = False
        self._kit.clear()
        self._kit_own.clear()
        self._kit_dead = 0
        self._plan_kit = -1
        self._kit_round = -1
        trio.lowlevel.add_instrument(self._instrument)
        if self._patch is not None and not self._patch.active:
            self._patch.__enter__()

    def current_time(self) -> float:
        """The virtual time now, in seconds."""
        if self._rate:
            return self._anchor.virtual()
        return self._now

    def deadline_to_sleep_time(self, deadline: float) -> float:
        """Real seconds the run loop may sleep before ``deadline``; decides when time jumps.

        trio calls this only when no task is runnable.  With nothing outside the run to wait
        for, the answer is 0: trio polls I/O without blocking, and the clock jumps to
        ``deadline`` right after that poll if it woke nobody (see ``_after_io_wait``).
        """
        if self._scheduled:
            self._absorb()
        self._said_seen = self._said
        self._plan_kit = -1
        if self._kit:
            # Kit waits are deadlines too; one due now is woken (one at a time: FIFO).
            head = _park.head(self)
            if head is not None:
                now = _park.now_ticks(self)
                if head <= now and not deadline <= self.current_time():  # trio's due: first
                    _park.wake_next(self, now)
                    self._plan = _NO_PLAN
                    self._dormant = False
                    return 0.0
                seconds = head / _time.TICKS_PER_SECOND
                if seconds * _park.NOISE < deadline:  # trio's deadlines first at one instant
                    deadline = seconds
                    self._plan_kit = head
        if (
            self._plain
            and not self._waits
            and self._error is None
            and (_thread_table_size() == 1 or not (self._spoke or self._new_threads.look()))
        ):
            # The fast path of every jump: pure virtual time, nothing outside, nobody idle.
            if deadline <= self._now:
                self._plan = _NO_PLAN
                return 0.0
            if deadline < math.inf:
                self._dormant = False
                self._plan = _PLAN_POLL
                self._plan_deadline = deadline
                return 0.0
        return self._decide(deadline)

    def _decide(self, deadline: float) -> float:
        """:meth:`deadline_to_sleep_time` for everything but the fast path."""
        self._plan = _NO_PLAN
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        self._idle_round += 1  # a new look at the other threads when a rule needs one
        if self._rate:
            now = self._anchor.virtual()
            if deadline <= now:
                return 0.0
            if deadline < math.inf:
                self._dormant = False
                return (deadline - now) / self._rate
            recheck = self._outside_work(_real_monotonic())
            if recheck is not None:
                self._dormant = False
                return recheck
            return self._check_deadlock()
        if deadline <= self._now:
            return 0.0
        recheck = self._outside_work(_real_monotonic())
        if recheck is not None:
            # Outside work may still answer: time stands still, and a deadline fires only
            # once as much real time has passed as its virtual delay.
            self._dormant = False
            if deadline == math.inf or not self._autojump:
                return recheck
            real = _stdlib_time.perf_counter()
            since = self._hold_since
            if since is None:
                since = self._hold_since = real
            remaining = (deadline - self._now) - (real - since)
            if remaining > 0:
                return min(remaining, recheck)
        else:
            self._hold_since = None
        if deadline < math.inf and self._autojump:
            self._dormant = False
            self._plan_deadline = deadline
            if self._threshold or self._idle_waiters():
                self._plan = _PLAN_JUMP
                return self._arm(self._threshold)
            self._plan = _PLAN_POLL
            return 0.0
        return self._check_deadlock()

    # ------------------------------------------------------------ what the run waits for

    def _absorb(self) -> None:
        """Classify the tasks that ran since the last question (they are all blocked now).

        A task's wait changes only when it runs, and it runs only after being rescheduled,
        which the instrument records; so this sees every change, at a cost per task that ran.
        ``_waits`` holds what may be outside work or an idle waiter; ``_inside_io`` the tasks
        waiting on descriptors whose both ends are ours (not outside work, not a deadlock).

        It also decides when a hold on outside work restarts its real-time count (see
        :meth:`deadline_to_sleep_time`): whenever the run made progress other than a task
        going back to the same outside wait under the same timeouts (a reader of a chatty
        peer), since any such step may have set the timer that is now due.
        """
        waits = self._waits
        inside = self._inside_io
        scheduled = self._scheduled
        own = self._kit_own
        if not waits and not inside:
            # The common case: tasks that sleep, or wait on each other.
            for task in scheduled:
                parked = own.get(task)
                if parked is not None and parked.task is task:
                    continue  # the toolkit's own task, still in its kit wait: a sleep
                if _classify(task) is not None:
                    break
            else:
                scheduled.clear()
                own.clear()
                self._hold_since = None
                return
        fresh: list[tuple[trio.lowlevel.Task, _Wait]] | None = None
        progressed = False
        reads = self._peer_reads
        for task in scheduled:
            parked = own.get(task)
            wait = None if parked is not None and parked.task is task else _classify(task)
            if reads:
                reads.pop(task, None)
            if wait is None:
                if waits:
                    waits.pop(task, None)
                if inside:
                    inside.pop(task, None)
                progressed = True
            elif wait.kind >= _W_READ:
                if fresh is None:
                    fresh = []
                fresh.append((task, wait))
            else:
                if wait.kind != _W_IDLE:
                    wait = wait._replace(timers=_timers_of(task))
                previous = waits.get(task)
                if previous is None or previous.timers != wait.timers or wait.kind == _W_IDLE:
                    progressed = True
                waits[task] = wait
                if inside:
                    inside.pop(task, None)
        scheduled.clear()
        own.clear()
        if fresh is not None:
            # Two passes: every socket's own address first, so that a peer seen in the same
            # batch is known to be ours.
            described = [(task, wait, self._describe_fd(task, wait)) for task, wait in fresh]
            for task, wait, (fd_class, peer, number, port) in described:
                if fd_class == _FD_INSIDE and not wait.in_thread_job:
                    waits.pop(task, None)
                    if task.name != _WAKEUP_TASK:
                        inside[task] = wait
                        progressed = True
                else:
                    inside.pop(task, None)
                    wait = wait._replace(
                        fd_class=fd_class,
                        peer=peer,
                        timers=_timers_of(task),
                        number=number,
                        port=port,
                    )
                    previous = waits.get(task)
                    if (
                        previous is None
                        or previous.fd is not wait.fd
                        or previous.timers != wait.timers
                    ):
                        progressed = True
                    waits[task] = wait
                    if fd_class == _FD_PEER and wait.kind == _W_READ:
                        reads[task] = number
        if progressed:
            self._hold_since = None

    def _idle_waiters(self) -> bool:
        return bool(self._waits) and any(wait.kind == _W_IDLE for wait in self._waits.values())

    def _outside_work(self, real_now: float) -> float | None:
        """May anything outside this run still answer?  ``None``: no, time may move.

        Otherwise the real seconds after which to look again without an event (``inf``: only
        an event -- I/O, a thread's result -- can change the answer).
        """
        found: float | None = None
        if self._waits:
            thread_waits = callbacks = 0
            for wait in self._waits.values():
                kind = wait.kind
                if kind == _W_THREAD:
                    thread_waits += 1
                elif wait.in_thread_job:
                    callbacks += 1
                if kind >= _W_READ:
                    again = self._fd_pending(wait, real_now)
                    if again is not None and (found is None or again < found):
                        found = again
            active = trio.testing.active_thread_count()
            # A thread job is working unless it is blocked calling back into trio; if the
            # clock cannot account for every job it keeps time still -- the safe side.  Its
            # result wakes trio.
            if active and (thread_waits > 0 or thread_waits + callbacks < active):
                found = math.inf if found is None else found
        if self._spoke:
            again = self._speakers_pending(real_now)
            if again is not None and (found is None or again < found):
                found = again
        # A thread that just started may be about to speak (see _threads.NewThreads).
        fresh = self._fresh_thread(real_now)
        if fresh and (found is None or fresh < found):
            found = fresh
        return found

    def _speakers_pending(self, real_now: float) -> float | None:
        """Is a thread that called into this run working (so it may call again)?

        A thread that handed the run a callback -- the far side of a portal, a
        ``trio.from_thread`` caller -- is outside work exactly while the machine says it is
        working (see :class:`~virtualtime._shared._threads.Speakers`): it may be about to
        cancel the task it just started.  Blocked, it owes nothing.  Where the machine cannot
        tell, it holds time for a grace after it last spoke.
        """
        speakers = self._speakers
        self._spoke = False  # before reading them: a thread that speaks now sets it again
        if not speakers:
            return None
        busy = self._busy_now()  # forgets the threads that have ended
        if not speakers:
            return None
        self._spoke = True
        if busy is None:
            left = speakers.spoke_at + _THREAD_GRACE - real_now
            return left if left > 0 else None
        if speakers.working(busy):
            # It may also be about to block on the run instead, which sends no wake-up: look
            # again after a short, growing real wait.
            wait = self._speak_recheck
            self._speak_recheck = min(wait * 2, _RECHECK_MAX)
            return wait
        self._speak_recheck = _RECHECK_MIN
        return None

    def _busy_now(self) -> frozenset[int] | None:
        """The process's other threads working now (native ids; None: unknown), looked at
        once per idle question and only when a rule needs it."""
        if self._busy_round != self._idle_round:
            self._busy_round = self._idle_round
            self._busy = self._speakers.look()
        return self._busy

    def _others_working(self) -> bool | None:
        """Is another thread of this process working (for a peer in another thread)?"""
        busy = self._busy_now()
        return None if busy is None else bool(busy)

    def _heard(self) -> None:
        """Another thread is calling ``TrioToken.run_sync_soon`` for this run (runs in it).

        Called by the run's entry queue (see :func:`_listen_to`) before the call is queued.
        The run's own thread is nobody outside; trio's cached worker threads run thread jobs
        and deliver their results, which the rules for jobs cover.
        """
        ident = threading.get_ident()
        if ident == self._run_ident:
            return
        thread = _thread_table.get(ident)
        if (
            thread is not None
            and getattr(getattr(thread, "_target", None), "__qualname__", "") in _WORKER_TARGETS
        ):
            return
        self._speakers.note()
        # After the note (the idle question reads _spoke first, the speakers second), and the
        # count last: a jump planned before this call is called off (see _after_io_wait).
        self._spoke = True
        self._said += 1

    def _fresh_thread(self, real_now: float) -> float:
        """Real seconds a thread that started during the run still holds time (0: none)."""
        if _thread_table_size() > 1:
            self._new_threads.look()  # trio's own thread is never new: it was there first
        return self._new_threads.grace_left(real_now)

    def _fd_pending(self, wait: _Wait, real_now: float) -> float | None:
        """May the other end of the descriptor ``wait`` is on still answer?  (As
        :meth:`_outside_work`: ``None``, or the real seconds before looking again.)"""
        fd_class = wait.fd_class
        if fd_class == _FD_INSIDE:
            return None
        if fd_class == _FD_OUTSIDE or wait.kind == _W_WRITE:
            return math.inf  # a child, a connect in flight, bytes waiting to be sent...
        if wait.peer in self._run_addresses:
            return None  # an in-run server and its client
        # A connection: the asyncio loop's rules (virtualtime._shared._peers).  We are its
        # client unless one of this run's listeners accepted it.
        client = wait.port not in self._listen_ports
        return self._conns.pending(wait.number, client=client, real_now=real_now)

    def _note_answers(self) -> None:
        """Data arrived for a task waiting to read from an outside peer: an answer.

        Called after trio's I/O poll, before the woken tasks run: whatever we sent on that
        connection, we sent before this data arrived (asyncio's loop tells its model the same
        on each read event).  Without it the model orders a question and its answer that came
        between two looks by the kernel's millisecond timestamps, and a tie counts as an answer
        still owed.
        """
        reads = self._peer_reads
        for task, number in list(reads.items()):
            unread = _machine.unread_bytes(number)
            if unread is None or unread > 0:
                del reads[task]  # read on its next wait (or gone)
                if unread:
                    self._conns.answered(number)  # (and acknowledged at once)

    def _describe_fd(self, task: trio.lowlevel.Task, wait: _Wait) -> tuple[int, object, int, int]:
        """``(fd class, peer address, descriptor number, local TCP port)`` of what ``task``
        waits on."""
        if task.name == _WAKEUP_TASK:
            return _FD_INSIDE, None, -1, -1
        fd = wait.fd
        sock: socket.socket | None = fd if isinstance(fd, socket.socket) else None
        try:
            number = fd if isinstance(fd, int) else fd.fileno()  # type: ignore[attr-defined]
            mode = os.fstat(number).st_mode
        except (AttributeError, OSError, TypeError, ValueError):
            return _FD_OUTSIDE, None, -1, -1  # unknown: the safe side
        if stat.S_ISSOCK(mode):
            detach = sock is None
            if sock is None:
                try:
                    sock = socket.socket(fileno=number)  # wraps the descriptor, no copy
                except OSError:
                    return _FD_OUTSIDE, None, number, -1
            try:
                fd_class, peer, port = self._describe_socket(sock)
                return fd_class, peer, number, port
            finally:
                if detach:
                    sock.detach()
        if stat.S_ISFIFO(mode):
            inside = _pipe_is_ours(number, os.fstat(number))
            return (_FD_INSIDE if inside else _FD_OUTSIDE), None, number, -1
        return _FD_OUTSIDE, None, number, -1  # a child's pidfd, a terminal, a signalfd...

    def _describe_socket(self, sock: socket.socket) -> tuple[int, object, int]:
        """``(fd class, peer address, local TCP port)`` of a socket a task waits on."""
        try:
            family = sock.family
            if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                local = sock.getsockname()
                self._run_addresses.add(local)
                if family in (socket.AF_INET, socket.AF_INET6):
                    self._listen_ports.add(local[1])
                return _FD_INSIDE, None, -1  # a listener: nothing is in progress
            if family == socket.AF_UNIX:
                creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
                pid = int.from_bytes(creds[:4], sys.byteorder)
                if pid in (0, os.getpid()):
                    return _FD_INSIDE, None, -1  # unconnected, or both ends in this process
                if sock.type == socket.SOCK_STREAM:
                    return _FD_PEER, None, -1  # a connection to another process
                return _FD_OUTSIDE, None, -1
            if family not in (socket.AF_INET, socket.AF_INET6):
                return _FD_OUTSIDE, None, -1
            local = sock.getsockname()
            self._run_addresses.add(local)
            try:
                peer = sock.getpeername()
            except OSError:
                return _FD_OUTSIDE, None, -1  # a connect in progress
            if sock.type != socket.SOCK_STREAM:
                return _FD_OUTSIDE, None, -1  # a connected datagram socket: a reply may come
            return _FD_PEER, peer, local[1]
        except (AttributeError, OSError):
            return _FD_OUTSIDE, None, -1

    # ------------------------------------------------------------ internals

    def _arm(self, wait: float) -> float:
        """Answer the run loop with a probe; the instrument acts on what the loop does."""
        if not self._probe_installed:
            trio.lowlevel.add_instrument(self._probe)
            self._probe_installed = True
        self._plan_immediate = wait <= 0
        self._plan_wait = _PROBE if self._plan_immediate else wait
        return self._plan_wait

    def _check_deadlock(self) -> float:
        if self._dormant or self._io_waiting():
            return math.inf
        self._plan = _PLAN_DEADLOCK
        return self._arm(self._deadlock_timeout)

    def _io_waiting(self) -> bool:
        """Whether a task (not trio's own) waits on a file descriptor: not a deadlock."""
        return bool(self._inside_io) or any(wait.kind >= _W_READ for wait in self._waits.values())

    def _before_io_wait(self, timeout: float) -> None:
        if self._plan < _PLAN_JUMP:
            return
        if timeout < self._plan_wait:
            # The loop will wake a task in wait_all_tasks_blocked first: leave time alone.
            self._plan = _NO_PLAN
            return
        if self._plan_immediate:
            plan, self._plan = self._plan, _NO_PLAN
            self._carry_out(plan)
            token = self._token
            if token is not None:
                token.run_sync_soon(_noop, idempotent=True)
        else:
            self._wait_started = _stdlib_time.perf_counter()

    def _after_io_wait(self) -> None:
        plan = self._plan
        if not plan:
            return
        self._plan = _NO_PLAN
        if self._scheduled or self._said != self._said_seen:
            return  # the poll (or the quiet period) woke a task, or a thread is calling in
        if plan == _PLAN_POLL:
            self._advance_to(self._plan_deadline)
            return
        waited = _stdlib_time.perf_counter() - self._wait_started
        if waited < self._plan_wait - _WAIT_SLACK:
            return  # woken early without anything to run (guest mode): not quiet long enough
        self._carry_out(plan)

    def _carry_out(self, plan: int) -> None:
        if plan == _PLAN_DEADLOCK:
            self._declare_deadlock()
        else:
            self._advance_to(self._plan_deadline)

    def _advance_to(self, deadline: float) -> None:
        """Jump to ``deadline``: the tick it means, reported as no earlier than ``deadline``.

        A jump planned to a kit wait goes to its exact tick and wakes it.
        """
        kit = self._plan_kit
        if kit >= 0:
            self._plan_kit = -1
            if kit > self._ticks:
                self._ticks = kit
                self._now = max(kit / _time.TICKS_PER_SECOND, self._now)
            self._jumps += 1
            self._hold_since = None
            _park.wake_next(self, self._ticks)
            return
        ticks, self._residue = _ticks_until(deadline, self._now, self._residue)
        self._ticks += ticks
        self._now = max(_time.to_seconds(self._ticks), deadline, self._now)
        self._jumps += 1
        self._hold_since = None

    def _declare_deadlock(self) -> None:
        self._dormant = True  # do not re-detect (and re-wake) until something changes
        guard = self._guard
        if guard is None or guard.deadlock is not None:
            return
        tasks = self._guarded_tasks()
        blocked = tuple(self._describe(task) for task in tasks)
        lines = [
            f"deadlock at virtual time t={self.current_time()!r}: every task is blocked, no "
            "deadline is pending that the clock may jump to"
            + ("" if self._autojump else " (time is manual: autojump=False and nobody drives it)")
            + ", no worker thread, child process or outside connection is in flight, and "
            f"nothing woke trio for deadlock_timeout={self._deadlock_timeout!r} real seconds."
        ]
        if blocked:
            lines.append("Blocked tasks:")
            lines.extend(f"  - {name}: {where}" for name, where in blocked)
        guard.deadlock = _errors.DeadlockError("\n".join(lines), blocked)
        # Cancellation does not reach into shielded scopes; lift the shields the blocked tasks
        # sit in, so that the whole guarded tree unwinds and the error can be raised.
        for task in tasks:
            _lift_shields(task)
        guard.scope.cancel()

    def _guarded_tasks(self) -> list[trio.lowlevel.Task]:
        return _task_tree(None if self._guard is None else self._guard.task)

    def _describe(self, task: trio.lowlevel.Task) -> tuple[str, str]:
        """``(name, where)``: the task's awaits, outermost first, trimmed of trio's insides."""
        frames = [(frame.f_code, lineno) for frame, lineno in task.iter_await_frames()]
        library = _library_dirs()
        last_user = -1
        for index, (code, _) in enumerate(frames):
            if not code.co_filename.startswith(library):
                last_user = index
        shown = frames[: last_user + 2] if last_user >= 0 else frames[:1]
        guard = self._guard
        is_main = guard is not None and task is guard.task
        if is_main and shown and shown[0][0] is RunGuard.guarded_main.__code__:
            shown = shown[1:]
        where = " -> ".join(
            f"{code.co_qualname}() at {code.co_filename}:{lineno}" for code, lineno in shown
        )
        name = guard.name if guard is not None and is_main else task.name
        return name, where or "not started"

    def _use_real_clock(self, real_clock: _abc.Callable[[], float]) -> None:
        """Measure real time with ``real_clock`` from now on (tests inject a fake one)."""
        self._anchor = _time.RateAnchor(self.current_time(), self._rate, real_clock)

    def _poke(self) -> None:
        """Wake the run loop (if any) so that a changed setting takes effect now."""
        token = self._token
        if token is None:
            return
        try:
            token.run_sync_soon(_noop, idempotent=True)
        except trio.RunFinishedError:
            self._token = None

    def _failed(self, exc: BaseException) -> None:
        """An instrument hook failed: surface it on the loop's next turn rather than hang."""
        self._plan = _NO_PLAN
        self._error = exc
        self._poke()

    def _run_ended(self) -> None:
        self._token = None
        self._plan = _NO_PLAN
        if self._patch is not None and self._patch.active:
            self._patch.__exit__(None, None, None)
        self._scheduled.clear()
        self._waits.clear()
        self._inside_io.clear()
        self._run_addresses.clear()
        self._listen_ports.clear()
        self._peer_reads.clear()
        self._conns.close()
        self._speakers.close()
        self._spoke = False
        self._busy = None
        self._run_ident = None
        self._kit.clear()
        self._kit_own.clear()
        self._plan_kit = -1
        if self._layers:
            _options.closed(self, self._layers)

    def __repr__(self) -> str:
        return (
            f"<VirtualClock time={self.current_time()!r} rate={self._rate!r} "
            f"autojump={self._autojump!r} autojump_threshold={self._threshold!r} "
            f"deadlock_timeout={self._deadlock_timeout!r} at {id(self):#x}>"
        )


class _ClockInstrument(trio.abc.Instrument):
    """Lets a :class:`VirtualClock` see tasks become runnable and the loop wake up.

    ``task_scheduled`` is the bare ``list.append`` of the clock's list of tasks to look at,
    the cheapest hook trio can call.  Instrument hooks must never raise (trio would remove
    the instrument), so the others only call methods of the clock that cannot fail.
    """

    __slots__ = ("_clock", "task_scheduled")

    def __init__(
        self, clock: VirtualClock, record: _abc.Callable[[trio.lowlevel.Task], None]
    ) -> None:
        self._clock = clock
        self.task_scheduled = record  # type: ignore[method-assign, assignment]

    def after_io_wait(self, timeout: float) -> None:
        clock = self._clock
        clock._rounds += 1
        if clock._peer_reads:
            try:
                clock._note_answers()
            except BaseException as exc:  # pragma: no cover - a bug in the clock
                clock._failed(exc)
                return
        plan = clock._plan
        if not plan:
            # A turn with nothing planned (a busy run, a kit wait handed on).  A kit wait due
            # now is normally woken when the run is idle; a run kept busy by a task that
            # polls (``while not done: await trio.sleep(0)``) gets it after a few turns.
            kit = clock._kit
            if kit and (clock._rate or kit[0][0] <= clock._ticks):
                _park.busy_turn(clock)
            return
        if plan == _PLAN_POLL:
            # The fast path of every jump, inlined: jump unless the poll woke a task (or
            # another thread began to call into the run since the jump was planned).
            clock._plan = _NO_PLAN
            if clock._scheduled or clock._said != clock._said_seen:
                return
            deadline = clock._plan_deadline
            if clock._plan_kit >= 0:
                deadline = math.inf  # to a kit wait: _advance_to goes to its tick
            if deadline < _FINE_LIMIT:
                # Floats finer than a tick: _ticks_until's carried rounding, inlined.
                scaled = (deadline - clock._now) * _time.TICKS_PER_SECOND
                exact = scaled + clock._residue
                ticks = round(exact)
                if ticks >= 1 and scaled > _FINE_NOISE:
                    clock._residue = exact - ticks
                    clock._ticks += ticks
                    now = clock._ticks / _time.TICKS_PER_SECOND
                    clock._now = now if now > deadline else deadline
                    clock._jumps += 1
                    clock._hold_since = None
                    return
            try:
                clock._advance_to(deadline)
            except BaseException as exc:  # pragma: no cover - a bug in the clock
                clock._failed(exc)
            return
        try:
            clock._after_io_wait()
        except BaseException as exc:  # pragma: no cover - a bug in the clock
            clock._failed(exc)

    def after_run(self) -> None:
        self._clock._run_ended()


class _ProbeInstrument(trio.abc.Instrument):
    """Sees the timeout of the run loop's next I/O wait; installed only while a probe is
    armed (a ``before_io_wait`` hook on every turn would cost every jump a call)."""

    __slots__ = ("_clock",)

    def __init__(self, clock: VirtualClock) -> None:
        self._clock = clock

    def before_io_wait(self, timeout: float) -> None:
        clock = self._clock
        try:
            trio.lowlevel.remove_instrument(self)
            clock._probe_installed = False
            clock._before_io_wait(timeout)
        except BaseException as exc:  # pragma: no cover - a bug in the clock
            clock._failed(exc)


class _HeardQueue(collections.deque[typing.Any]):
    """The run's queue of ``run_sync_soon`` calls, telling the clock of each call first."""

    __slots__ = ("_heard",)

    def __init__(self, items: _abc.Iterable[typing.Any], heard: _abc.Callable[[], None]) -> None:
        super().__init__(items)
        self._heard = heard

    def append(self, item: typing.Any) -> None:
        self._heard()
        super().append(item)


class _HeardSet(dict[typing.Any, None]):
    """The run's queue of idempotent ``run_sync_soon`` calls (a dict used as an ordered set),
    telling the clock of each call first."""

    __slots__ = ("_heard",)

    def __init__(
        self, items: _abc.Mapping[typing.Any, None], heard: _abc.Callable[[], None]
    ) -> None:
        super().__init__(items)
        self._heard = heard

    def __setitem__(self, key: typing.Any, value: None) -> None:
        self._heard()
        super().__setitem__(key, value)


def _listen_to(token: trio.lowlevel.TrioToken, heard: _abc.Callable[[], None]) -> bool:
    """Make ``heard()`` run in any thread that calls ``token.run_sync_soon``, before the call.

    Every way into a trio run from another thread -- ``trio.from_thread``, anyio's
    ``BlockingPortal`` and ``from_thread``, ``TrioToken.run_sync_soon`` itself -- ends in
    that method, and it puts the call on the run's entry queue, in the calling thread, under
    the queue's lock.  trio offers no hook there (an instrument sees the run's own thread
    only, after the fact: not who called).  So the clock swaps the queue's two containers for
    subclasses that call ``heard()`` as they are filled; everything else about them -- the
    atomic appends the queue relies on, what the run reads from them -- is the deque's and
    the dict's own.  One run's token only: no other run, and nothing global, is touched.

    trio-private: ``TrioToken._reentry_queue`` and its ``queue``/``idempotent_queue`` fields
    (a deque and a dict, trio 0.22 to 0.32+), set once when the run starts.  A canary test
    (``tests/test_trio_outside.py``) pins them; if they change shape, nothing is swapped
    (False) and the clock no longer hears other threads -- the portal race comes back, but
    nothing breaks.
    """
    entry = getattr(token, "_reentry_queue", None)
    queue = getattr(entry, "queue", None)
    idempotent = getattr(entry, "idempotent_queue", None)
    if type(queue) is not collections.deque or type(idempotent) is not dict:
        return isinstance(queue, _HeardQueue)
    entry.queue = _HeardQueue(queue, heard)  # type: ignore[union-attr]
    entry.idempotent_queue = _HeardSet(idempotent, heard)  # type: ignore[union-attr]
    return True


def _pipe_is_ours(number: int, info: os.stat_result) -> bool:
    """Whether the other end of the pipe ``number`` is open in this process too."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return False
    for name in names:
        other = int(name)
        if other == number:
            continue
        try:
            found = os.fstat(other)
        except OSError:
            continue
        if found.st_ino == info.st_ino and found.st_dev == info.st_dev:
            return True
    return False


def _lift_shields(task: trio.lowlevel.Task) -> None:
    """Unshield every cancel scope ``task`` is waiting inside (deadlock clean-up only).

    The scopes a suspended coroutine has entered are referenced from its frame (a ``with``
    statement keeps the scope's ``__exit__``); ``gc.get_referents`` finds them, and the
    public ``CancelScope.shield`` setter lifts them.  anyio's scopes wrap trio's and have the
    same attribute.
    """
    coro: typing.Any = task.coro
    scope_types = (trio.CancelScope, *_anyio_scope_types())
    while coro is not None:
        for ref in gc.get_referents(coro):
            scope: typing.Any = getattr(ref, "__self__", ref)
            if isinstance(scope, scope_types) and getattr(scope, "shield", False):
                setattr(scope, "shield", False)  # noqa: B010 - typed as a bare object here
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)


@contextlib.contextmanager
def _sample_manager() -> _abc.Iterator[None]:
    yield


_GENERATOR_MANAGER: typing.Final = type(_sample_manager())
"""contextlib's class for ``@contextmanager`` objects (``trio.fail_after`` is one)."""


def _timers_of(task: trio.lowlevel.Task) -> frozenset[tuple[int, float]]:
    """``(id, deadline)`` of every cancel scope ``task`` is waiting inside.

    Used only for tasks waiting on outside work: a new timeout (or a moved deadline) means
    the program set a timer just now.  The scopes are found as in :func:`_lift_shields`,
    through ``@contextmanager`` wrappers such as ``fail_after``.
    """
    found: set[tuple[int, float]] = set()
    scope_types = (trio.CancelScope, *_anyio_scope_types())

    def visit(obj: object, depth: int) -> None:
        target: typing.Any = getattr(obj, "__self__", obj) if type(obj) is types.MethodType else obj
        if isinstance(target, scope_types):
            found.add((id(target), getattr(target, "deadline", math.inf)))
            return
        if depth >= 4:
            return
        if isinstance(target, _GENERATOR_MANAGER):
            target = getattr(target, "gen", None)
        if isinstance(target, (types.GeneratorType, types.AsyncGeneratorType)):
            for ref in gc.get_referents(target):
                visit(ref, depth + 1)

    coro: typing.Any = task.coro
    while coro is not None:
        if type(coro) in _AGEN_STEPS:
            # Inside ``async for``: the generator's own scopes count too -- a library's read
            # timeout set afresh for each chunk (httpcore) is a new timer.
            coro = _generator_of(coro)
            if coro is None:
                break
        for ref in gc.get_referents(coro):
            visit(ref, 0)
        coro = (
            getattr(coro, "cr_await", None)
            or getattr(coro, "gi_yieldfrom", None)
            or getattr(coro, "ag_await", None)
        )
    return frozenset(found)


def _anyio_scope_types() -> tuple[type, ...]:
    anyio = sys.modules.get("anyio")
    scope = getattr(anyio, "CancelScope", None)
    return (scope,) if isinstance(scope, type) else ()


def _ticks_until(deadline: float, now: float, residue: float) -> tuple[int, float]:
    """Whole ticks from the reported time ``now`` to a float ``deadline`` (> ``now``).

    Returns ``(ticks, new residue)``.  trio computes deadlines as ``now + delay`` in floats,
    so a deadline carries a few ulps of rounding noise; the delay is recovered as
    ``deadline - now`` and turned into ticks:

    * where floats are finer than a tick (the first weeks of virtual time), the delay is
      rounded to the nearest tick and the remainder carried to the next delay, so a long run
      of ``sleep(1/3)`` drifts neither up nor down, and float noise below a tick (``0.3 -
      0.2``) never adds a tick: ten ``sleep(0.1)`` are exactly one second;
    * where floats are coarser than a tick (about 3.7 ns per ulp after a year), the round
      decimal delay the program meant (``0.1`` rather than ``0.100000003``) is taken when
      one is clearly rounder than chance would give; otherwise the float delay is all there
      is, and the carried remainder keeps its rounding unbiased.

    A positive delay shorter than a tick still advances one tick (time never freezes), unless
    it is float noise: two tasks' deadlines for one instant, spelled differently
    (``0.1 + 0.2`` and ``0.3``), are the same instant.
    """
    delay = deadline - now
    scaled = delay * _time.TICKS_PER_SECOND
    if not scaled < 2.0**53:
        # A delay of more than ~104 days: whole ticks of the float are all there is.
        if math.isfinite(scaled):
            return int(scaled), residue
        return int(delay) * _time.TICKS_PER_SECOND, residue
    noise = _NOISE_ULPS * math.ulp(deadline) * _time.TICKS_PER_SECOND
    if noise >= 0.5:
        low = max(1, math.ceil(scaled - noise))
        high = math.floor(scaled + noise)
        if low <= high:
            roundest = _roundest(low, high)
            if roundest[1] >= _ROUND_MARGIN * (high - low + 1):
                return roundest[0], residue
    if scaled <= noise:
        return 0, residue  # float noise between two spellings of one instant: no time passes
    exact = scaled + residue
    ticks = round(exact)
    if ticks < 1:
        return 1, max(exact - 1, -0.5)
    return ticks, exact - ticks


def _roundest(low: int, high: int) -> tuple[int, int]:
    """``(n, step)``: a number in ``[low, high]`` that is a multiple of the largest power of
    ten ``step`` that has one there (the middle one of several)."""
    step = 10 ** len(str(high))
    while step > 1:
        step //= 10
        first = -(-low // step) * step
        if first <= high:
            last = high // step * step
            return first + (last - first) // step // 2 * step, step
    return low, 1  # pragma: no cover - every integer is a multiple of 1


def _task_name(task: trio.lowlevel.Task) -> str:
    return task.name


def _all_tasks() -> list[trio.lowlevel.Task]:
    return _task_tree(trio.lowlevel.current_root_task())


def _task_tree(root: trio.lowlevel.Task | None) -> list[trio.lowlevel.Task]:
    """``root`` and its descendants, depth first, siblings in name order (a stable report)."""
    if root is None:
        return []
    tasks: list[trio.lowlevel.Task] = []
    stack = [root]
    while stack:
        task = stack.pop()
        tasks.append(task)
        for nursery in reversed(task.child_nurseries):
            stack.extend(sorted(nursery.child_tasks, key=_task_name, reverse=True))
    return tasks


class RunGuard(typing.Generic[_T]):
    """One trio run on a :class:`VirtualClock` whose deadlock raises ``DeadlockError``.

    The contract between the clock and the code that starts trio runs on it --
    :func:`run`, :func:`virtualtime.anyio_run` with ``backend="trio"`` and the pytest
    plugin: each wraps its main function, ``trio.run(RunGuard(clock, main).guarded_main,
    *args, clock=clock)``.  While the guarded main function runs, the clock knows which task
    tree is the program's; when that tree deadlocks, the clock cancels it and
    :meth:`guarded_main` raises the clock's :class:`~virtualtime.DeadlockError` (naming every
    blocked task) instead of letting the run hang.  Only this class sets the clock's guard.
    """

    __slots__ = ("async_fn", "clock", "deadlock", "name", "scope", "task")

    def __init__(
        self, clock: VirtualClock, async_fn: _abc.Callable[..., _abc.Awaitable[_T]]
    ) -> None:
        if not isinstance(clock, VirtualClock):
            raise _errors.InvalidTypeError(
                f"clock must be a virtualtime.trio.VirtualClock, got {clock!r}"
            )
        if not callable(async_fn):
            raise _errors.InvalidTypeError(
                f"async_fn must be an async function (or another callable returning an "
                f"awaitable), got {async_fn!r} ({type(async_fn).__name__})"
            )
        self.clock = clock
        self.async_fn = async_fn
        self.name: str = _callable_name(async_fn)
        self.scope = trio.CancelScope()
        self.task: trio.lowlevel.Task | None = None
        self.deadlock: _errors.DeadlockError | None = None
        """Set by the clock when it declares this run deadlocked (then it cancels ``scope``)."""

    @staticmethod
    def active(clock: VirtualClock) -> bool:
        """Whether a guarded run is under way on ``clock`` (a nested one would be refused)."""
        return clock._guard is not None

    async def guarded_main(self, *args: object) -> _T:
        """Await ``async_fn(*args)``; a deadlock ends it with ``DeadlockError``.

        Call it from inside a trio run whose clock is ``clock`` (it is a coroutine because it
        runs inside one).  Raises :class:`~virtualtime.UsageError` when the running clock is
        another one, or when ``clock`` already guards a run.
        """
        clock = self.clock
        if trio.lowlevel.current_clock() is not clock:
            raise _errors.UsageError(
                f"virtualtime.trio: the running trio clock is not {clock!r}; start the run "
                "with clock=<that clock>"
            )
        if clock._guard is not None:
            raise _errors.UsageError(f"{clock!r} is already guarding another run")
        try:
            with self.scope:
                clock._guard = self
                self.task = trio.lowlevel.current_task()
                clock._dormant = False  # a new guarded run: a deadlock must be found afresh
                try:
                    return await self.async_fn(*args)
                finally:
                    clock._guard = None
                    clock._dormant = False
        except BaseException as exc:
            # Once the clock has declared a deadlock, whatever the cancellation turned into on
            # its way out (pytest-trio, for one, reports a fixture it cancelled as a
            # RuntimeError) is a consequence: the deadlock is what the caller must hear about.
            error, self.deadlock = self.deadlock, None
            if error is None or _interrupts(exc):
                raise
            raise error from exc
        error, self.deadlock = self.deadlock, None
        if error is None:  # pragma: no cover - only the clock cancels this scope
            raise _errors.UsageError("virtualtime.trio: the guard scope was cancelled unexpectedly")
        raise error


def _callable_name(func: object) -> str:
    """The name a guarded run's main task goes by in deadlock reports."""
    while True:
        name = getattr(func, "__qualname__", None)
        if isinstance(name, str):
            return name
        if not isinstance(func, functools.partial):
            return repr(func)
        func = func.func


def _span_ticks(name: str, value: object, now: int) -> int:
    """Ticks of a span ``value`` (finite, >= 0) from tick ``now``, short of the horizon; else
    the error naming ``name`` (the asyncio loop's rule and words)."""
    span = _time.check_delay(name, value)
    if span < _HORIZON:
        ticks = _time.delay_ticks(span)
        if now + ticks < _time.NEVER:
            return ticks
    raise _beyond_horizon(name, value)


def _beyond_horizon(name: str, value: object) -> _errors.InvalidValueError:
    if isinstance(value, int) and value.bit_length() > 200:  # repr() may even refuse it
        shown = f"an int of about {value.bit_length() * 30103 // 100000 + 1} digits"
    else:
        shown = repr(value)
    return _errors.InvalidValueError(
        f"{name} would take virtual time past its horizon ({_HORIZON:.4g} s): got {shown}"
    )


def _interrupts(exc: BaseException) -> bool:
    """Whether ``exc`` is (or holds) an interruption that must pass through unchanged."""
    kinds = (KeyboardInterrupt, SystemExit, GeneratorExit)
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(kinds) is not None
    return isinstance(exc, kinds)


def run(
    async_fn: _abc.Callable[..., _abc.Awaitable[_T]],
    *args: object,
    clock: VirtualClock | None = None,
    **options: typing.Any,
) -> _T:
    """Run ``async_fn(*args)`` with trio in virtual time and return its result.

    Like ``trio.run(async_fn, *args, clock=VirtualClock(**options))``, plus one thing a bare
    clock cannot do: if the run deadlocks (see :class:`VirtualClock`), the main function is
    cancelled and :class:`~virtualtime.DeadlockError` is raised, naming every blocked task
    and where it waits, instead of hanging.  Pass either ``clock`` (a clock you keep, to read
    or :meth:`~VirtualClock.jump` it) or clock ``options`` (``start``, ``autojump``,
    ``autojump_threshold``, ``rate``, ``deadlock_timeout``, ``patch_time``, ``wall_start``),
    not both.
    """
    if not callable(async_fn):
        raise _errors.InvalidTypeError(
            f"async_fn must be an async function, got {async_fn!r} ({type(async_fn).__name__})"
        )
    if clock is None:
        clock = VirtualClock(**options)
    elif options:
        raise _errors.InvalidTypeError(
            f"pass clock options ({', '.join(sorted(options))}) or clock={clock!r}, not both"
        )
    guard = RunGuard(clock, async_fn)
    return trio.run(guard.guarded_main, *args, clock=clock)


# ------------------------------------------------------------------ driving verbs
#
# The trio halves of virtualtime.settle/step/evolve/run_until/fast_forward/now/peek: the
# backend-neutral functions in virtualtime._engine._control call these when the running trio clock
# is a VirtualClock.  They only use what any task may: sleeping, waiting for the run to be idle,
# and the clock's own jump().


def _now(clock: VirtualClock) -> float:
    return clock.current_time()


def _peek(clock: VirtualClock) -> float:
    """Virtual time of the next pending deadline (or kit wait), or ``math.inf``."""
    gap = trio.lowlevel.current_statistics().seconds_to_next_deadline
    found = math.inf if gap == math.inf else clock.current_time() + gap
    head = _park.head(clock)
    return found if head is None else min(found, head / _time.TICKS_PER_SECOND)


async def _settle(clock: VirtualClock) -> float:
    """Let every task run until all are blocked; time does not move (a waiter in
    ``wait_all_tasks_blocked`` always goes before a jump)."""
    await trio.testing.wait_all_tasks_blocked()
    return clock.current_time()


async def _run_until(clock: VirtualClock, t: float) -> float:
    """Let the clock jump from deadline to deadline (even in manual mode) until this task's own
    deadline at ``t`` wakes it, then settle.  While this task waits, no jump can pass ``t``."""
    autojump = clock.autojump
    clock.autojump = True
    try:
        await trio.sleep_until(t)
    finally:
        clock.autojump = autojump
    return await _settle(clock)


async def _evolve(clock: VirtualClock, dt: float) -> float:
    now = _time.to_ticks(clock.current_time())
    target = now + _span_ticks("dt", dt, now)
    return await _run_until(clock, _time.to_seconds(target))


def _check_target(clock: VirtualClock, t: float) -> float:
    t = _time.check_finite("t", t)
    if t >= _HORIZON:
        raise _errors.InvalidValueError(
            f"t must be before the horizon of virtual time ({_HORIZON:.4g} s), got {t!r}"
        )
    now = clock.current_time()
    # Compare in ticks: trio's float deadlines carry noise (0.1 * 3 reads 0.300...04).
    if _time.to_ticks(t) < _time.to_ticks(now):
        raise _errors.InvalidValueError(
            f"t must not be in the past: t={t!r} < now={now!r} (virtual time never goes backwards)"
        )
    return t


async def _step(clock: VirtualClock) -> float | None:
    await _settle(clock)
    before = clock.current_time()
    target = _peek(clock)
    if target == math.inf:
        return None
    if target <= before:
        return await _settle(clock)  # due now: settling fired it
    now = await _run_until(clock, target)
    # now + gap can land an ulp short of the deadline it measured: catch that deadline too.
    for _ in range(_NOISE_ULPS):
        gap = trio.lowlevel.current_statistics().seconds_to_next_deadline
        if not 0 < gap <= _NOISE_ULPS * math.ulp(now):
            break
        now = await _run_until(clock, max(now + gap, math.nextafter(now, math.inf)))
    return now


async def _fast_forward(clock: VirtualClock, dt: float) -> float:
    clock._leap("dt", dt)
    await trio.lowlevel.checkpoint()
    return await _settle(clock)
