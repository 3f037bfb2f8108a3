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
  runnable, with the next deadline.  That is the moment to decide: jump, wait, or declare a
  deadlock.
* A small ``trio.abc.Instrument`` (added with ``trio.lowlevel.add_instrument`` when the run
  starts) sees ``before_io_wait(timeout)`` and ``after_io_wait(timeout)``.  The clock answers
  ``deadline_to_sleep_time`` with a *probe* value; if the loop then waits for less than the
  probe, a task in ``trio.testing.wait_all_tasks_blocked`` has asked to be woken first, and
  the clock leaves time alone so that task wakes before time moves.  Otherwise the clock
  jumps, and ends the I/O wait at once with ``TrioToken.run_sync_soon`` (one wake-up byte),
  so a jump costs no real time.  With ``autojump_threshold > 0`` the probe *is* the threshold:
  the loop waits that long in real time and the clock jumps only if nothing happened meanwhile
  (``trio.lowlevel.current_statistics().tasks_runnable == 0``).
* Worker threads: ``trio.testing.active_thread_count()`` counts ``trio.to_thread.run_sync``
  jobs in flight, whatever limiter they use (anyio's ``to_thread.run_sync`` included).  While
  it is non-zero, virtual time stands still and the loop sleeps until the thread reports back,
  so a thread's answer can never lose to a virtual ``fail_after``.  One refinement keeps a
  thread that calls back into trio (``trio.from_thread.run(trio.sleep, 1)``) from freezing
  time for ever: the clock looks at the tasks waiting in ``trio.to_thread.run_sync`` (public
  ``Task.iter_await_frames``) and lets time move only when it can account for every thread
  job and each of them is running a ``from_thread`` call in trio rather than waiting for its
  thread.  If it cannot account for them, it keeps time still -- the safe side.

Exact time
----------
Time is kept as integer nanoseconds (:mod:`virtualtime._time`), so ten ``trio.sleep(0.1)`` end
at exactly ``1.0`` (MockClock: ``0.9999999999999999``).  trio, though, hands the clock
absolute float deadlines computed as ``now + delay``, and such a sum can land a few ulps above
the instant it means (``0.2 + 0.1`` is ``0.30000000000000004``).  The clock recovers the delay
as ``deadline - now``, advances its ticks by that delay in whole nanoseconds (ignoring float
noise, so ticks never drift), and reports the larger of its ticks and the deadline that fired:
trio's expiry check and anyio's ``fail_after`` (which re-checks ``current_time() >=
deadline``) both need the reported time to reach the deadline.  So ``trio.current_time()`` is
exact whenever the program's float sums are, and otherwise a few ulps above the exact instant
-- never below it.  Near ``t = 1`` that is 1e-16 s and the next sum usually lands back on the
exact value; after a year of virtual time an ulp is 3.7 ns, and the excess can persist while
the program keeps adding delays to it.  (The asyncio loop receives relative delays and has no
such noise.)  A positive delay shorter than a tick still advances one tick; time never freezes
and never goes backwards.

Deadlocks
---------
When no task can run, no deadline is pending (or, with ``autojump=False``, nobody is left to
move time), no thread job is in flight, no task waits on a file descriptor and no task waits in
``wait_all_tasks_blocked``, nothing can happen again unless another thread or a signal wakes
trio.  The clock waits ``deadlock_timeout`` real seconds for that, never spinning.  (A program
that only waits for a signal looks exactly like this: give it a long ``deadlock_timeout``.)  Under
:func:`run` (and :func:`virtualtime.anyio_run`) it then cancels the main function and raises
:class:`~virtualtime.DeadlockError` listing every blocked task and where it waits.  Under a
plain ``trio.run(..., clock=VirtualClock())`` there is no public way for a clock to make the
main task raise an exception of its choosing -- trio only offers cancellation, which would
surface as a bare ``trio.Cancelled`` -- so the clock then just sleeps (no CPU) until something
outside wakes trio, exactly as trio does with its real clock.
"""

import collections.abc as _abc
import datetime
import math
import os
import sys
import time as _stdlib_time
import typing

import trio
import trio.lowlevel
import trio.testing

from . import _errors, _time

# No ``from x import y`` above: this module's public namespace is exactly ``__all__``.

__all__ = ("VirtualClock", "run")

_T = typing.TypeVar("_T")

_PROBE: typing.Final = 600.0
"""Real seconds answered to the run loop when the clock means "no real wait, but let any task
in ``wait_all_tasks_blocked`` (with a cushion below this) go first".  The loop never actually
waits this long: the clock cuts the wait short as soon as it knows nobody is waiting."""

_WAIT_SLACK: typing.Final = 0.001
"""Real seconds a timed quiet period may fall short of its length (OS timer granularity)."""

_NOISE_ULPS: typing.Final = 8
"""A deadline this many float ulps above a tick is float noise, not a later instant."""

# Public trio functions whose frames identify a task waiting for its worker thread.
_TO_THREAD_CODE: typing.Final = trio.to_thread.run_sync.__code__
_WAIT_RESCHEDULED_CODE: typing.Final = trio.lowlevel.wait_task_rescheduled.__code__

_LIBRARY_DIRS: typing.Final = tuple(
    os.path.dirname(path) + os.sep for path in (trio.__file__, __file__) if path is not None
)
"""Frames from these packages are trio's (or our) insides, trimmed from deadlock reports."""


def _library_dirs() -> tuple[str, ...]:
    anyio = sys.modules.get("anyio")  # anyio's frames too, if it is in use (never imported)
    anyio_file = getattr(anyio, "__file__", None)
    if anyio_file is None:
        return _LIBRARY_DIRS
    return (*_LIBRARY_DIRS, os.path.dirname(anyio_file) + os.sep)


_NO_PLAN: typing.Final = 0
_PLAN_JUMP: typing.Final = 1
_PLAN_DEADLOCK: typing.Final = 2


def _noop() -> None:
    """Queued with ``run_sync_soon`` only to end the run loop's I/O wait early."""


class VirtualClock(trio.abc.Clock):
    """A trio clock whose time is virtual: exact, instant and repeatable.

    Pass it to ``trio.run(main, clock=VirtualClock())`` (or use :func:`virtualtime.trio.run`,
    or ``anyio.run(main, backend="trio", backend_options={"clock": VirtualClock()})``).
    Every sleep, ``move_on_after``, ``fail_after`` and deadline then runs on virtual time,
    which moves only when the clock decides to move it.  Sockets, subprocesses and worker
    threads keep working in real time.

    Options (keyword-only; each is validated and is also a settable attribute):

    ``start`` (0.0)
        Virtual time at which the clock starts, in seconds (finite, >= 0).
    ``autojump`` (True)
        Jump straight to the next deadline whenever every task is blocked.  This is what you
        want for tests and simulations: a program that sleeps for a year finishes in
        milliseconds.  Turn it off to drive time yourself with :meth:`jump`, typically from a
        test that waits in ``trio.testing.wait_all_tasks_blocked()`` and then jumps.
    ``autojump_threshold`` (0.0)
        Real seconds of quiet (no task runnable, no I/O) before each jump.  0 jumps at once
        and costs no real time; it is right when all I/O is in-process.  Raise it (0.05 to
        0.5) when a real peer -- another process, a thread not started by
        ``trio.to_thread`` -- must get a chance to answer before a virtual timeout fires;
        every jump then costs that much real time.  (Threads started by ``trio.to_thread``
        never need it: time stands still while they run.)
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
    first-in first-out promise is the asyncio loop's, not trio's.
    """

    def __init__(
        self,
        *,
        start: float = 0.0,
        autojump: bool = True,
        autojump_threshold: float = 0.0,
        rate: float = 0.0,
        deadlock_timeout: float = 0.25,
        patch_time: bool = False,
        wall_start: float | datetime.datetime | None = None,
    ) -> None:
        start = _time.check_delay("start", start)
        _time.check_bool("autojump", autojump)
        autojump_threshold = _time.check_delay("autojump_threshold", autojump_threshold)
        rate = _time.check_rate("rate", rate)
        deadlock_timeout = _time.check_delay("deadlock_timeout", deadlock_timeout)
        _time.check_bool("patch_time", patch_time)
        patch: typing.Any = None
        if patch_time or wall_start is not None:
            from ._patch import TrioClockPatch, check_wall_start

            wall = check_wall_start(wall_start)
            patch = TrioClockPatch(self, _time.to_ticks(start), wall) if patch_time else None

        self._ticks = _time.to_ticks(start)
        # The time reported while rate == 0: the float of _ticks, or a deadline that is only
        # float noise above it (see "Exact time" in the module docstring).
        self._now = _time.to_seconds(self._ticks)
        self._rate = rate
        self._anchor = _time.RateAnchor(self._now, rate, _stdlib_time.perf_counter)
        self._autojump = autojump
        self._threshold = autojump_threshold
        self._deadlock_timeout = deadlock_timeout
        self._jumps = 0

        # Per-run state, reset by start_clock().
        self._token: trio.lowlevel.TrioToken | None = None
        self._instrument = _ClockInstrument(self)
        self._plan = _NO_PLAN
        self._plan_deadline = math.inf
        self._plan_wait = 0.0
        self._plan_immediate = False
        self._wait_started = 0.0
        self._dormant = False
        self._guard: trio.CancelScope | None = None
        self._guard_task: trio.lowlevel.Task | None = None
        self._guard_name = ""
        self._deadlock: _errors.DeadlockError | None = None
        self._error: BaseException | None = None
        # patch_time: entered when trio starts a run with this clock, left when it ends.
        self._patch = patch

    # ------------------------------------------------------------ settable options

    @property
    def rate(self) -> float:
        """Virtual seconds per real second; 0 means pure virtual time (the default)."""
        return self._rate

    @rate.setter
    def rate(self, value: float) -> None:
        value = _time.check_rate("rate", value)
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
            self._now = max(_time.to_seconds(self._ticks), virtual)
            self._anchor.set_rate(0.0)
        else:
            self._anchor.set_rate(value)
        self._rate = value
        self._poke()

    @property
    def autojump(self) -> bool:
        """Whether time jumps to the next deadline as soon as every task is blocked."""
        return self._autojump

    @autojump.setter
    def autojump(self, value: bool) -> None:
        _time.check_bool("autojump", value)
        self._autojump = value
        self._poke()

    @property
    def autojump_threshold(self) -> float:
        """Real seconds of quiet before each jump (see the class docstring)."""
        return self._threshold

    @autojump_threshold.setter
    def autojump_threshold(self, value: float) -> None:
        self._threshold = _time.check_delay("autojump_threshold", value)
        self._poke()

    @property
    def deadlock_timeout(self) -> float:
        """Real seconds to wait for an outside wake-up before declaring a deadlock."""
        return self._deadlock_timeout

    @deadlock_timeout.setter
    def deadlock_timeout(self, value: float) -> None:
        self._deadlock_timeout = _time.check_delay("deadlock_timeout", value)

    @property
    def jumps(self) -> int:
        """How many times this clock has jumped to a deadline on its own (autojump)."""
        return self._jumps

    # ------------------------------------------------------------ moving time by hand

    def jump(self, seconds: float) -> None:
        """Move virtual time forward by ``seconds`` at once.

        Every deadline passed over expires on the run loop's next turn, all seeing the new
        time (a suspended laptop waking up).  Use it with ``autojump=False`` to drive time
        from a test, after ``await trio.testing.wait_all_tasks_blocked()``.  Call it from
        inside the run; from another thread use
        ``trio.from_thread.run_sync(clock.jump, seconds, trio_token=...)``.

        Raises ``ValueError`` for a negative, NaN or infinite ``seconds`` (time never goes
        backwards) and ``TypeError`` for a non-number; the clock is then unchanged.
        """
        seconds = _time.check_delay("seconds", seconds)
        if self._rate:
            self._anchor.rebase(self._anchor.virtual() + seconds)
        else:
            self._ticks += _time.delay_ticks(seconds)
            self._now = max(_time.to_seconds(self._ticks), self._now)
        self._dormant = False
        self._poke()

    fast_forward = jump

    # ------------------------------------------------------------ trio.abc.Clock

    def start_clock(self) -> None:
        """Called by trio at the start of a run: hook into that run's loop."""
        self._token = trio.lowlevel.current_trio_token()
        self._plan = _NO_PLAN
        self._dormant = False
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

        trio calls this only when no task is runnable.
        """
        self._plan = _NO_PLAN
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        if self._rate:
            now = self._anchor.virtual()
            if deadline <= now:
                return 0.0
            if deadline < math.inf or self._threads_busy():
                self._dormant = False
                return (deadline - now) / self._rate
            return self._check_deadlock()
        if deadline <= self._now:
            return 0.0
        if self._threads_busy():
            # A worker thread is running: time stands still until it reports back.
            self._dormant = False
            return math.inf
        if deadline < math.inf and self._autojump:
            self._dormant = False
            self._plan = _PLAN_JUMP
            self._plan_deadline = deadline
            return self._arm(self._threshold)
        return self._check_deadlock()

    # ------------------------------------------------------------ internals

    def _arm(self, wait: float) -> float:
        """Answer the run loop with a probe; the instrument acts on what the loop does."""
        self._plan_immediate = wait <= 0
        self._plan_wait = _PROBE if self._plan_immediate else wait
        return self._plan_wait

    def _check_deadlock(self) -> float:
        if self._dormant or self._io_waiters() > 0:
            return math.inf
        self._plan = _PLAN_DEADLOCK
        return self._arm(self._deadlock_timeout)

    def _before_io_wait(self, timeout: float) -> None:
        if not self._plan:
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
        if not self._plan:
            return
        plan, self._plan = self._plan, _NO_PLAN
        if trio.lowlevel.current_statistics().tasks_runnable:
            return  # something happened during the quiet period: not idle after all
        waited = _stdlib_time.perf_counter() - self._wait_started
        if waited < self._plan_wait - _WAIT_SLACK:
            return  # woken early without anything to run (guest mode): not quiet long enough
        self._carry_out(plan)

    def _carry_out(self, plan: int) -> None:
        if plan == _PLAN_JUMP:
            self._advance_to(self._plan_deadline)
        else:
            self._declare_deadlock()

    def _advance_to(self, deadline: float) -> None:
        """Jump to ``deadline``: the tick it means, reported as no earlier than ``deadline``."""
        self._ticks += _ticks_until(deadline, self._now)
        self._now = max(_time.to_seconds(self._ticks), deadline, self._now)
        self._jumps += 1

    def _threads_busy(self) -> bool:
        """Whether a ``trio.to_thread`` job is running (time must stand still)."""
        active = trio.testing.active_thread_count()
        if not active:
            return False
        # Jobs are in flight.  Time may still move if every one of them is blocked calling
        # back into trio (from_thread.run), because only trio can make progress then.
        found = 0
        for task in _all_tasks():
            frames = [frame.f_code for frame, _ in task.iter_await_frames()]
            for index, code in enumerate(frames):
                if code is _TO_THREAD_CODE:
                    found += 1
                    if index + 1 < len(frames) and frames[index + 1] is _WAIT_RESCHEDULED_CODE:
                        return True  # this task waits for its thread: the thread is working
                    break
        return found < active  # cannot account for every job: keep time still

    def _io_waiters(self) -> int:
        """Tasks waiting on file descriptors, not counting trio's own wake-up socket."""
        stats = trio.lowlevel.current_statistics().io_statistics
        waiting = 0
        for name in dir(stats):
            if name.startswith("tasks_waiting"):
                value = getattr(stats, name)
                if isinstance(value, int):
                    waiting += value
        # trio's run_sync_soon task always waits to read its wake-up socket.
        return waiting - 1

    def _declare_deadlock(self) -> None:
        self._dormant = True  # do not re-detect (and re-wake) until something changes
        guard = self._guard
        if guard is None or self._deadlock is not None:
            return
        blocked = tuple(self._describe(task) for task in self._guarded_tasks())
        lines = "\n".join(f"  {name}: {where}" for name, where in blocked)
        self._deadlock = _errors.DeadlockError(
            f"deadlock at virtual time t={self.current_time()!r}: every task is blocked, no "
            "deadline is pending that the clock may jump to, no worker thread or I/O is in "
            f"flight, and nothing woke trio for deadlock_timeout={self._deadlock_timeout!r} "
            f"real seconds.  Blocked tasks:\n{lines}",
            blocked,
        )
        guard.cancel()

    def _guarded_tasks(self) -> list[trio.lowlevel.Task]:
        return _task_tree(self._guard_task)

    def _describe(self, task: trio.lowlevel.Task) -> tuple[str, str]:
        """``(name, where)``: the task's awaits, outermost first, trimmed of trio's insides."""
        frames = [(frame.f_code, lineno) for frame, lineno in task.iter_await_frames()]
        library = _library_dirs()
        last_user = -1
        for index, (code, _) in enumerate(frames):
            if not code.co_filename.startswith(library):
                last_user = index
        shown = frames[: last_user + 2] if last_user >= 0 else frames[:1]
        if task is self._guard_task and shown and shown[0][0] is _run_guarded.__code__:
            shown = shown[1:]
        where = " -> ".join(
            f"{code.co_qualname}() at {code.co_filename}:{lineno}" for code, lineno in shown
        )
        name = self._guard_name if task is self._guard_task else task.name
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

    def __repr__(self) -> str:
        return (
            f"<VirtualClock time={self.current_time()!r} rate={self._rate!r} "
            f"autojump={self._autojump!r} autojump_threshold={self._threshold!r} "
            f"deadlock_timeout={self._deadlock_timeout!r} at {id(self):#x}>"
        )


class _ClockInstrument(trio.abc.Instrument):
    """Lets a :class:`VirtualClock` see the run loop go to sleep and wake up.

    Instrument hooks must never raise (trio would remove the instrument), so they only call
    methods of the clock that cannot fail.
    """

    __slots__ = ("_clock",)

    def __init__(self, clock: VirtualClock) -> None:
        self._clock = clock

    def before_io_wait(self, timeout: float) -> None:
        try:
            self._clock._before_io_wait(timeout)
        except BaseException as exc:  # pragma: no cover - a bug in the clock
            self._clock._failed(exc)

    def after_io_wait(self, timeout: float) -> None:
        try:
            self._clock._after_io_wait()
        except BaseException as exc:  # pragma: no cover - a bug in the clock
            self._clock._failed(exc)

    def after_run(self) -> None:
        self._clock._run_ended()


def _ticks_until(deadline: float, now: float) -> int:
    """Whole ticks from the reported time ``now`` to a float ``deadline`` (> ``now``).

    trio computes deadlines as ``now + delay`` in floats, so a deadline carries a few ulps of
    rounding noise; the delay is recovered as ``deadline - now`` and turned into ticks:

    * where floats are finer than a tick (the first weeks of virtual time), the nearest whole
      tick if the delay is within float noise of one, else the next tick up (a genuine instant
      between two ticks, or a delay shorter than a tick, which still moves time);
    * where floats are coarser (about 3.7 ns per ulp after a year), several tick counts are
      within the noise; the roundest decimal among them is the one the program meant
      (``0.1`` rather than ``0.100000003``), so sums of sleeps stay exact in ticks.
    """
    delay = deadline - now
    noise = _NOISE_ULPS * math.ulp(deadline) * _time.TICKS_PER_SECOND
    scaled = delay * _time.TICKS_PER_SECOND
    if not scaled < 2.0**53:
        # A delay of more than ~104 days: whole ticks of the float are all there is.
        return int(scaled) if math.isfinite(scaled) else int(delay) * _time.TICKS_PER_SECOND
    if noise < 0.5:
        ticks = round(scaled)
        if scaled - ticks > noise:
            ticks += 1
        return ticks
    low = max(0, math.ceil(scaled - noise))
    high = math.floor(scaled + noise)
    if high <= low:
        return low
    step = 10 ** len(str(high))
    while step > 1:
        step //= 10
        first = -(-low // step) * step
        if first <= high:
            # Fewer than ten multiples of step fit, since no multiple of step * 10 did.
            return min(range(first, high + 1, step), key=lambda ticks: abs(ticks - scaled))
    return low  # pragma: no cover - every integer is a multiple of 1


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


async def _run_guarded(
    clock: VirtualClock, async_fn: _abc.Callable[..., _abc.Awaitable[_T]], *args: object
) -> _T:
    """Run ``async_fn(*args)``; a deadlock ends it with :class:`~virtualtime.DeadlockError`."""
    if not isinstance(trio.lowlevel.current_clock(), VirtualClock):
        raise RuntimeError("virtualtime.trio: the running trio clock is not a VirtualClock")
    if clock._guard is not None:
        raise RuntimeError(f"{clock!r} is already guarding another run")
    with trio.CancelScope() as scope:
        clock._guard = scope
        clock._guard_task = trio.lowlevel.current_task()
        clock._guard_name = getattr(async_fn, "__qualname__", None) or repr(async_fn)
        clock._deadlock = None
        clock._dormant = False  # a new guarded run: a deadlock in it must be detected afresh
        try:
            return await async_fn(*args)
        finally:
            clock._guard = None
            clock._guard_task = None
            clock._dormant = False
    error, clock._deadlock = clock._deadlock, None
    if error is None:  # pragma: no cover - only the clock cancels this scope
        raise RuntimeError("virtualtime.trio: the guard scope was cancelled unexpectedly")
    raise error


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
    if clock is None:
        clock = VirtualClock(**options)
    elif options:
        raise TypeError(
            f"pass clock options ({', '.join(sorted(options))}) or clock={clock!r}, not both"
        )
    elif not isinstance(clock, VirtualClock):
        raise TypeError(f"clock must be a virtualtime.trio.VirtualClock, got {clock!r}")
    return trio.run(_run_guarded, clock, async_fn, *args, clock=clock)
