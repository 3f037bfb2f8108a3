"""The trio clock itself: :class:`VirtualClock`, its options, and when time jumps.

This module owns the clock's state and the decision trio asks it for on every idle turn
(``deadline_to_sleep_time``): jump now (the fast path), hold time while outside work may still
answer, probe for tasks in ``wait_all_tasks_blocked``, or declare a deadlock.  The rest of the
clock lives in the rooms named after what they hold: :mod:`._outside` (a mixin: may anything
outside the run still answer?), :mod:`._instruments` (how it hears the run), :mod:`._tasks`
(reading trio's tasks), :mod:`._exact` (float deadlines to ticks), :mod:`._park` (kit waits),
:mod:`._run` (guarded runs) and :mod:`._verbs` (the driving verbs' trio side).  The package
documentation tells the whole story.

Part of ``trio``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

import heapq
import math
import threading
import time as _stdlib_time
import typing
from collections import abc as _abc

import trio
import trio.lowlevel

from .. import _options
from .._shared import _errors, _peers, _threads, _time
from . import _park
from ._exact import HORIZON, beyond_horizon, span_ticks, ticks_until
from ._instruments import (
    NO_PLAN,
    PLAN_DEADLOCK,
    PLAN_JUMP,
    PLAN_POLL,
    ClockInstrument,
    EndInstrument,
    PaceInstrument,
    ProbeInstrument,
    listen_to,
    noop,
)
from ._outside import RECHECK_MIN, OutsideWork
from ._tasks import Wait, every_task, library_dirs, lift_shields, task_tree

if typing.TYPE_CHECKING:
    from ._run import RunGuard

__all__ = ["VirtualClock"]

_thread_table_size: typing.Final = _threads.thread_table_size
_real_monotonic: typing.Final = _stdlib_time.monotonic
_heappop: typing.Final = heapq.heappop

_NO_THREADS: typing.Final = _threads.NewThreads()
"""A clock's watch for new threads until its first run starts (only a run looks)."""

_PROBE: typing.Final = 600.0
"""Real seconds answered to the run loop when a task may be waiting in
``wait_all_tasks_blocked``: trio lowers the I/O wait to that task's cushion, which tells the
clock to leave time alone.  The loop never actually waits this long: the clock cuts the wait
short as soon as it knows nobody is waiting."""

_WAIT_SLACK: typing.Final = 0.001
"""Real seconds a timed quiet period may fall short of its length (OS timer granularity)."""


class VirtualClock(OutsideWork, trio.abc.Clock):
    """A trio clock whose time is virtual: exact, instant and repeatable.

    Pass it to ``trio.run(main, clock=VirtualClock())`` (or use :func:`virtualtime.trio.run`,
    or ``anyio.run(main, backend="trio", backend_options={"clock": VirtualClock()})``).
    Every sleep, ``move_on_after``, ``fail_after`` and deadline then runs on virtual time,
    which moves only when the clock decides to move it.  Sockets, subprocesses and worker
    threads keep working in real time, and never lose to a virtual timeout (see "The outside
    world" in the package documentation).

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
    ``rate_strict`` (False)
        With a ``rate``: end the run with ``FellBehindError`` (a ``RuntimeError``) when a
        wake-up -- a deadline, a simulation's sleep -- comes later than it allows after the
        pace said it was due: ``True`` one virtual second (``1 / rate`` real seconds: SimPy's
        ``strict=True``, with ``rate = 1 / factor``), a number that many virtual seconds.
        Virtual time follows real time here, during a step too, so a step's own computation
        is time passing; what comes late is what another task (or the same one) was due to
        wake for meanwhile.  The pace is kept from the start of each run, and a jump or a
        rate change starts it afresh.  A guarded run (:func:`run`,
        :func:`virtualtime.anyio_run`, ``sim.simulate``, the pytest plugin) raises the error;
        a bare ``trio.run`` ends with trio's ``TrioInternalError``, caused by it.  Set when
        the clock is made.
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
        self._rate_strict = checked.rate_strict
        # rate_strict forgives what was due before this instant: the start of a run, a jump
        # and a rate change start the pace afresh.
        self._pace_from = -math.inf
        self._ending = False  # a bare run that fell behind is being ended
        self._autojump = autojump
        self._threshold = autojump_threshold
        self._deadlock_timeout = deadlock_timeout
        self._jumps = 0
        self._plain = True  # rate 0, autojump, no threshold: the fast path applies
        self._update_plain()

        # Per-run state, reset by start_clock().
        self._token: trio.lowlevel.TrioToken | None = None
        # The run's entry queue (its two containers, see listen_to), or None.
        self._entry: tuple[_abc.Sized, _abc.Sized] | None = None
        self._scheduled: list[trio.lowlevel.Task] = []
        self._instrument = ClockInstrument(self, self._scheduled.append)
        self._hooked = False  # whether _instrument is installed in this run (see _hook)
        self._ender = EndInstrument(self)
        self._probe = ProbeInstrument(self)
        self._probe_installed = False
        self._waits: dict[trio.lowlevel.Task, Wait] = {}
        self._inside_io: dict[trio.lowlevel.Task, Wait] = {}
        self._run_addresses: set[object] = set()
        self._listen_ports: set[int] = set()
        """Ports this run listens on: a connection from one of them was accepted (we serve it)."""
        self._hold_since: float | None = None
        self._new_threads = _NO_THREADS  # made at each run's start (start_clock)
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
        self._speak_recheck = RECHECK_MIN
        self._run_ident: int | None = None
        self._peer_reads: dict[trio.lowlevel.Task, int] = {}
        """Tasks waiting to read from a connection to an outside peer -> its descriptor number:
        data that wakes one answers what was sent before it (see _note_answers)."""
        self._plan = NO_PLAN
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
        self._pace_from = self.current_time()
        self._update_plain()
        self._poke()

    @property
    def rate_strict(self) -> bool | float:
        """How far (virtual seconds; True: one) a paced run may fall behind; False: no limit.

        Set when the clock is made (see the class docstring).
        """
        return self._rate_strict

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
            if not virtual < HORIZON:
                raise beyond_horizon(name, seconds)
            self._anchor.rebase(virtual)
            self._pace_from = virtual
        else:
            self._ticks += span_ticks(name, seconds, self._ticks)
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
    _vt_hold = _park.hold
    _vt_release = _park.release
    _vt_turn = _park.turn
    _vt_start = _park.start

    # ------------------------------------------------------------ trio.abc.Clock

    def start_clock(self) -> None:
        """Called by trio at the start of a run: hook into that run's loop."""
        self._token = trio.lowlevel.current_trio_token()
        self._new_threads = _threads.NewThreads()  # the threads alive now are not new
        self._plan = NO_PLAN
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
        self._entry = listen_to(self._token, self._heard)
        self._probe_installed = False
        self._kit.clear()
        self._kit_own.clear()
        self._kit_dead = 0
        self._plan_kit = -1
        self._kit_round = -1
        if self._rate_strict:
            # The pace is kept from the start of each run: what was due before it (a model's
            # first instant, fixed in advance while the clock's time flowed) is due now.
            self._pace_from = self.current_time()
            self._ending = False
            # Before the clock's own instrument: its busy turn may wake a late kit wait.
            trio.lowlevel.add_instrument(PaceInstrument(self))
        # The clock's own instrument waits until the run first goes idle (see _hook).
        self._hooked = False
        trio.lowlevel.add_instrument(self._ender)
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
        if deadline == math.inf and not self._kit:
            entry = self._entry
            if entry is not None and (entry[0] or entry[1]):
                # A callback is queued (trio queues one at the end of every run; or another
                # thread called in): the poll wakes the run at once, and trio asks again
                # after it.  Nothing to decide now (so a run that ends without ever waiting
                # never hooks in): the tasks that ran are classified at that question.
                self._plan = NO_PLAN
                return 0.0
        if not self._hooked and self._token is not None:  # (None: asked outside a run)
            self._hook()
        if self._scheduled:
            self._absorb()
        self._said_seen = self._said
        self._plan_kit = -1
        kit = self._kit
        while kit and kit[0][2].task is None:  # _park.head, inlined: dead entries dropped
            _heappop(kit)
        if kit:
            # Kit waits are deadlines too; one due now is woken (one at a time: FIFO).
            head: int = kit[0][0]
            now = _park.now_ticks(self) if self._rate else self._ticks
            if head <= now and not deadline <= self.current_time():  # trio's due: first
                if self._rate and self._rate_strict:
                    self._check_late(head, now)
                _park.wake_next(self, now)
                self._plan = NO_PLAN
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
                self._plan = NO_PLAN
                return 0.0
            if deadline < math.inf:
                self._dormant = False
                self._plan = PLAN_POLL
                self._plan_deadline = deadline
                return 0.0
        return self._decide(deadline)

    def _decide(self, deadline: float) -> float:
        """:meth:`deadline_to_sleep_time` for everything but the fast path."""
        self._plan = NO_PLAN
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
                self._plan = PLAN_JUMP
                return self._arm(self._threshold)
            self._plan = PLAN_POLL
            return 0.0
        return self._check_deadlock()

    # ------------------------------------------------------------ what the run waits for
    # _absorb, _outside_work and the rest of the questions about the world outside the run:
    # the OutsideWork mixin (_outside.py).

    # ------------------------------------------------------------ internals

    def _hook(self) -> None:
        """Start hearing the run: install the clock's instrument, and count every task alive
        as one that ran (each is read at the next idle question, as the instrument would have
        had them all recorded since the run started).

        Called at the run's first idle question and at its first kit wait: before either,
        nothing depends on what the instrument hears (no jump is planned, no kit wait can be
        handed on), so a run that never waits pays for none of its calls.
        """
        self._hooked = True
        self._scheduled.extend(every_task(trio.lowlevel.current_root_task()))
        trio.lowlevel.add_instrument(self._instrument)

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
        self._plan = PLAN_DEADLOCK
        return self._arm(self._deadlock_timeout)

    def _before_io_wait(self, timeout: float) -> None:
        if self._plan < PLAN_JUMP:
            return
        if timeout < self._plan_wait:
            # The loop will wake a task in wait_all_tasks_blocked first: leave time alone.
            self._plan = NO_PLAN
            return
        if self._plan_immediate:
            plan, self._plan = self._plan, NO_PLAN
            self._carry_out(plan)
            token = self._token
            if token is not None:
                token.run_sync_soon(noop, idempotent=True)
        else:
            self._wait_started = _stdlib_time.perf_counter()

    def _after_io_wait(self) -> None:
        plan = self._plan
        if not plan:
            return
        self._plan = NO_PLAN
        if self._scheduled or self._said != self._said_seen:
            return  # the poll (or the quiet period) woke a task, or a thread is calling in
        if plan == PLAN_POLL:
            self._advance_to(self._plan_deadline)
            return
        waited = _stdlib_time.perf_counter() - self._wait_started
        if waited < self._plan_wait - _WAIT_SLACK:
            return  # woken early without anything to run (guest mode): not quiet long enough
        self._carry_out(plan)

    def _carry_out(self, plan: int) -> None:
        if plan == PLAN_DEADLOCK:
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
        ticks, self._residue = ticks_until(deadline, self._now, self._residue)
        self._ticks += ticks
        self._now = max(_time.to_seconds(self._ticks), deadline, self._now)
        self._jumps += 1
        self._hold_since = None

    # ------------------------------------------------------------ rate_strict
    # The clock never re-anchors in rate mode (only a jump or a rate change does, and they
    # start the pace afresh, as the start of a run does: _pace_from), so how far a wake-up
    # lies behind the time now is how late it comes.  Three places see a wake-up come: the
    # PaceInstrument after each I/O poll (trio's next deadline, which the run loop is about
    # to expire, and the first kit wait, before a busy turn wakes it), the idle question as
    # it wakes a due kit wait, and a kit sleep asked for an instant already past
    # (_park.sleep: a periodic timer whose action takes longer than its period).

    def _keep_pace(self) -> None:
        """After an I/O poll: end the run if the earliest wake-up is due too far back."""
        now = self._anchor.virtual()
        # trio's own reading of the time, so the deadline's lateness is exact.
        behind = -trio.lowlevel.current_statistics().seconds_to_next_deadline
        if self._kit:
            head = _park.head(self)
            if head is not None:
                behind = max(behind, now - head / _time.TICKS_PER_SECOND)
        if behind > 0:
            self._fell_behind(now - behind, now)

    def _check_late(self, due_ticks: int, now_ticks: int) -> None:
        """A kit wait due at tick ``due_ticks`` comes at tick ``now_ticks``: too late?"""
        self._fell_behind(due_ticks / _time.TICKS_PER_SECOND, now_ticks / _time.TICKS_PER_SECOND)

    def _fell_behind(self, due: float, now: float) -> None:
        """End the run if the wake-up due at ``due`` comes at ``now`` later than allowed:
        through the guard (its run raises ``FellBehindError``), or, with no guard, as a
        failure of the clock (trio's ``TrioInternalError``, caused by it)."""
        strict = self._rate_strict
        due = max(due, self._pace_from)
        if now - due <= float(strict):
            return
        guard = self._guard
        if self._ending or (guard is not None and guard.error is not None):
            return  # already ending
        error = _options.fell_behind(due, now, self._rate, strict)
        if guard is not None:
            self._end_guarded_run(guard, error)
            return
        # No guard (a bare trio.run): a system task that fails ends the run cleanly, every
        # task cancelled, and trio.run raises TrioInternalError from the error.
        self._ending = True

        async def fell_behind() -> None:
            raise error

        trio.lowlevel.spawn_system_task(fell_behind, name="virtualtime: rate_strict")

    def _end_guarded_run(
        self,
        guard: RunGuard[typing.Any],
        error: _errors.VirtualTimeError,
        tasks: list[trio.lowlevel.Task] | None = None,
    ) -> None:
        """Cancel the guarded task tree (``tasks``, if already read); its guard raises ``error``."""
        guard.error = error
        # Cancellation does not reach into shielded scopes; lift the shields the blocked tasks
        # sit in, so that the whole guarded tree unwinds and the error can be raised.
        for task in self._guarded_tasks() if tasks is None else tasks:
            lift_shields(task)
        guard.scope.cancel()

    def _declare_deadlock(self) -> None:
        self._dormant = True  # do not re-detect (and re-wake) until something changes
        guard = self._guard
        if guard is None or guard.error is not None:
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
        self._end_guarded_run(guard, _errors.DeadlockError("\n".join(lines), blocked), tasks)

    def _guarded_tasks(self) -> list[trio.lowlevel.Task]:
        return task_tree(None if self._guard is None else self._guard.task)

    def _describe(self, task: trio.lowlevel.Task) -> tuple[str, str]:
        """``(name, where)``: the task's awaits, outermost first, trimmed of trio's insides."""
        frames = [(frame.f_code, lineno) for frame, lineno in task.iter_await_frames()]
        library = library_dirs()
        last_user = -1
        for index, (code, _) in enumerate(frames):
            if not code.co_filename.startswith(library):
                last_user = index
        shown = frames[: last_user + 2] if last_user >= 0 else frames[:1]
        guard = self._guard
        is_main = guard is not None and task is guard.task
        if (
            is_main
            and guard is not None
            and shown
            and shown[0][0] is type(guard).guarded_main.__code__
        ):
            # The guard's own frame: the report starts at the guarded main function.
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
            token.run_sync_soon(noop, idempotent=True)
        except trio.RunFinishedError:
            self._token = None

    def _failed(self, exc: BaseException) -> None:
        """An instrument hook failed: surface it on the loop's next turn rather than hang."""
        self._plan = NO_PLAN
        self._error = exc
        self._poke()

    def _run_ended(self) -> None:
        self._token = None
        self._entry = None
        self._plan = NO_PLAN
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
