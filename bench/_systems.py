"""The workloads of ``bench_wakeups.py``: one function per system, all doing the same work.

Every system runs the same program: ``K`` tasks (processes, for SimPy), each sleeping ``M``
times for durations drawn from one seeded :class:`random.Random`, so ``N = K * M`` wake-ups.
Two workloads:

* ``grid`` (:func:`make_workload`): durations are whole multiples of a grid (1 ms by default;
  ``--grid-us`` changes it) between the grid and 1 s, so the exact end time is known in
  integer nanoseconds: the largest per-task sum.  Each runner times only the work (task
  creation + running the schedule to completion): the loop, environment or clock is made
  before the stopwatch starts.
* ``expo`` (:func:`make_expo_workload`, issue 38): durations drawn with
  ``expovariate(1.0)`` (mean 1 s, any float), and the stopwatch also covers making the loop
  (environment, clock) and closing it: the whole run as a user's program pays it.

Neither times interpreter start-up, imports or drawing the durations; each runner reports the
clock value it ended at so the harness can check exactness.

A system whose package is missing (or, for virtualtime, whose loop has not been written yet)
raises :class:`Unavailable`; the harness prints the reason in the table instead of crashing.

This module is imported only by ``bench_wakeups.py``, inside a fresh child process per
measurement, so nothing here is shared between measurements.
"""

from __future__ import annotations

import asyncio
import gc
import heapq
import importlib
import math
import random
import resource
import selectors
import time
from collections.abc import Callable, Coroutine, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "MAX_US",
    "SYSTEMS",
    "Measurement",
    "MemoryResult",
    "System",
    "Unavailable",
    "Workload",
    "make_expo_workload",
    "make_workload",
    "memory_check",
    "MEMORY_KEYS",
    "SCENARIOS",
]

NS_PER_US: Final = 1_000
NS_PER_S: Final = 1_000_000_000
MAX_US: Final = 1_000_000
"""Durations are drawn uniformly from the multiples of the grid in (0, MAX_US] microseconds."""
DEFAULT_GRID_US: Final = 1000

HISTORY_BOUND: Final = 100_000
"""``history=`` used by the "history on" virtualtime variant."""

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


class Unavailable(Exception):
    """The system cannot run here (package not installed, API not there yet)."""


@dataclass(frozen=True)
class Workload:
    """``tasks`` x ``sleeps`` durations, as float seconds and as whole nanoseconds.

    ``seconds`` is what every system is given (the same floats for all).  ``ticks`` is each
    of those delays as virtualtime's loop counts it: ``max(1, round(d * 1e9))`` nanoseconds.
    On the grid workload the floats are ``us / 1e6`` (the float nearest the exact decimal,
    what a user would write) and the ticks are exactly ``us * 1000``.

    ``time_setup``: the runner's stopwatch also covers making (and closing) the loop,
    environment or clock, not just creating the tasks and running them (the expo workload).
    """

    tasks: int
    sleeps: int
    seed: int
    ticks: list[list[int]]
    seconds: list[list[float]]
    kind: str = "grid"
    time_setup: bool = False

    @property
    def n(self) -> int:
        """Number of wake-ups."""
        return self.tasks * self.sleeps

    @property
    def expected_ns(self) -> int:
        """Exact end time in integer nanoseconds: the longest task's total of ``ticks``."""
        return max(sum(row) for row in self.ticks)

    @property
    def expected_seconds(self) -> float:
        """The float nearest :attr:`expected_ns` (what an exact clock must read at the end)."""
        return self.expected_ns / NS_PER_S

    @property
    def real_end_seconds(self) -> float:
        """The float nearest the exact real sum of the longest task's float delays.

        What a clock that adds the delays without rounding them to nanoseconds would end at
        if its arithmetic were exact (``math.fsum`` is correctly rounded, and rounding keeps
        order, so the largest rounded sum is the rounded largest sum).
        """
        return max(math.fsum(row) for row in self.seconds)


def make_workload(tasks: int, sleeps: int, seed: int, grid_us: int = DEFAULT_GRID_US) -> Workload:
    """Draw the durations; the same arguments give the same durations in every process.

    A coarse grid (the default 1 ms) makes many wake-ups share an instant; ``grid_us=1``
    makes nearly every wake-up its own instant, which matters for systems whose cost is per
    clock jump rather than per wake-up (looptime).
    """
    if tasks < 1:
        raise ValueError(f"tasks must be >= 1, got {tasks!r}")
    if sleeps < 1:
        raise ValueError(f"sleeps must be >= 1, got {sleeps!r}")
    if not 1 <= grid_us <= MAX_US:
        raise ValueError(f"grid_us must be in 1..{MAX_US}, got {grid_us!r}")
    rng = random.Random(seed)
    steps = MAX_US // grid_us
    micros = [[rng.randint(1, steps) * grid_us for _ in range(sleeps)] for _ in range(tasks)]
    seconds = [[us / 1e6 for us in row] for row in micros]
    ticks = [[us * NS_PER_US for us in row] for row in micros]
    return Workload(tasks=tasks, sleeps=sleeps, seed=seed, ticks=ticks, seconds=seconds)


def delay_ticks(delay: float) -> int:
    """``delay`` seconds in whole nanoseconds, rounded as virtualtime's loop rounds a delay.

    ``max(1, round(delay * 1e9))``: the pure-Python path's ``round(delay * TICKS_PER_SECOND)``
    and the compiled core's ``nearbyint(delay * 1e9)`` agree (both round half to even on the
    same float product), and a positive delay is at least one nanosecond.
    """
    return max(1, round(delay * NS_PER_S))


def make_expo_workload(tasks: int, sleeps: int, seed: int) -> Workload:
    """Issue 38's workload: ``random.Random(seed).expovariate(1.0)`` durations (mean 1 s).

    Drawn task by task, in order, from one generator; the setup is timed (``time_setup``).
    """
    if tasks < 1:
        raise ValueError(f"tasks must be >= 1, got {tasks!r}")
    if sleeps < 1:
        raise ValueError(f"sleeps must be >= 1, got {sleeps!r}")
    rng = random.Random(seed)
    seconds = [[rng.expovariate(1.0) for _ in range(sleeps)] for _ in range(tasks)]
    ticks = [[delay_ticks(d) for d in row] for row in seconds]
    return Workload(
        tasks=tasks,
        sleeps=sleeps,
        seed=seed,
        ticks=ticks,
        seconds=seconds,
        kind="expo",
        time_setup=True,
    )


@dataclass(frozen=True)
class Measurement:
    """Seconds spent on the work (CPU and wall) and the clock value the system ended at.

    CPU time (:func:`time.process_time`) is the headline number: every workload here is
    single-threaded and never waits in real time, so CPU time equals wall time on an idle
    machine and stays honest on a busy one, where wall time also counts waiting for a core.
    ``final_time`` is None when the system has no virtual clock to check (the asyncio floor).
    """

    cpu_seconds: float
    seconds: float
    final_time: float | None


class _Stopwatch:
    """Measures CPU and wall time of a ``with`` block."""

    cpu = 0.0
    wall = 0.0

    def __enter__(self) -> _Stopwatch:
        self._cpu0 = time.process_time()
        self._wall0 = time.perf_counter()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.wall = time.perf_counter() - self._wall0
        self.cpu = time.process_time() - self._cpu0


@dataclass(frozen=True)
class System:
    """One row of the table: a key for the command line, a label and what it measures."""

    key: str
    label: str
    measures: str
    run: Callable[[Workload], Measurement]
    package: str
    pure: bool = False
    """Run the child with ``VIRTUALTIME_PURE_PYTHON=1``: virtualtime's pure-Python path."""
    ns_delays: bool = False
    """Each delay becomes whole nanoseconds (virtualtime's asyncio loop, the heapq floor): on
    the expo workload its exact end is :attr:`Workload.expected_ns`; a row without it (a
    float clock: SimPy, trio, looptime) is checked against :attr:`Workload.real_end_seconds`."""


# --------------------------------------------------------------------------- asyncio family


def _run_asyncio(
    factory: LoopFactory,
    main_for: Callable[[Sequence[float]], Coroutine[Any, Any, None]],
    workload: Workload,
    *,
    check_time: bool = True,
) -> Measurement:
    """Run ``main_for(durations)`` for every task on a loop made by ``factory``; time it."""

    async def main() -> float:
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(main_for(row) for row in workload.seconds))
        return loop.time()

    gc.collect()
    if workload.time_setup:
        # The stopwatch outside: making the loop and closing it are timed too.
        with _Stopwatch() as watch, asyncio.Runner(loop_factory=factory) as runner:
            final = runner.run(main())
    else:
        with asyncio.Runner(loop_factory=factory) as runner, _Stopwatch() as watch:
            final = runner.run(main())
    return Measurement(watch.cpu, watch.wall, final if check_time else None)


async def _sleeper_asyncio(durations: Sequence[float]) -> None:
    for delay in durations:
        await asyncio.sleep(delay)


async def _sleeper_zero(durations: Sequence[float]) -> None:
    for _ in durations:
        await asyncio.sleep(0)


def _virtualtime_module() -> Any:
    # Imported by name so that mypy checks this file against virtualtime's public names at run
    # time only: the benchmark must keep working (and type-check) while the loop is in flux.
    try:
        virtualtime = importlib.import_module("virtualtime")
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise Unavailable("not installed") from exc
    if not hasattr(virtualtime, "new_event_loop"):
        raise Unavailable("virtualtime.new_event_loop does not exist yet (loop not landed)")
    return virtualtime


def _virtualtime_factory(**options: Any) -> LoopFactory:
    vt = _virtualtime_module()

    def factory() -> asyncio.AbstractEventLoop:
        loop: asyncio.AbstractEventLoop = vt.new_event_loop(**options)
        return loop

    return factory


def run_virtualtime(workload: Workload) -> Measurement:
    """``asyncio.sleep(d)`` on ``virtualtime.new_event_loop()`` (defaults: autojump, no history)."""
    return _run_asyncio(_virtualtime_factory(), _sleeper_asyncio, workload)


def run_virtualtime_history(workload: Workload) -> Measurement:
    """As :func:`run_virtualtime` with ``history=HISTORY_BOUND``: the price of recording."""
    return _run_asyncio(_virtualtime_factory(history=HISTORY_BOUND), _sleeper_asyncio, workload)


def run_virtualtime_sleep(workload: Workload) -> Measurement:
    """``virtualtime.sleep(d)`` (the priority-aware sleep) instead of ``asyncio.sleep``."""
    vt = _virtualtime_module()
    if not hasattr(vt, "sleep"):
        raise Unavailable("virtualtime.sleep does not exist yet")
    vt_sleep: Callable[[float], Coroutine[Any, Any, None]] = vt.sleep

    async def sleeper(durations: Sequence[float]) -> None:
        for delay in durations:
            await vt_sleep(delay)

    return _run_asyncio(_virtualtime_factory(), sleeper, workload)


def run_anyio(workload: Workload) -> Measurement:
    """``anyio.sleep(d)`` tasks in a task group on ``virtualtime.new_event_loop()``.

    The grid workload calls ``anyio.run`` with the loop factory; the expo workload (setup
    timed) enters through ``virtualtime.anyio_run``, the documented shorthand for the same
    call, as a program would (its option check is then timed too).
    """
    try:
        import anyio
    except ImportError as exc:
        raise Unavailable("not installed") from exc
    factory = _virtualtime_factory()
    runner: Callable[[Callable[[], Coroutine[Any, Any, float]]], float] | None = getattr(
        _virtualtime_module(), "anyio_run", None
    )

    async def sleeper(durations: Sequence[float]) -> None:
        for delay in durations:
            await anyio.sleep(delay)

    async def main() -> float:
        async with anyio.create_task_group() as group:
            for row in workload.seconds:
                group.start_soon(sleeper, row)
        return anyio.current_time()

    gc.collect()
    with _Stopwatch() as watch:
        if workload.time_setup and runner is not None:
            final = runner(main)
        else:
            final = anyio.run(main, backend="asyncio", backend_options={"loop_factory": factory})
    return Measurement(watch.cpu, watch.wall, final)


def run_heapq_floor(workload: Workload) -> Measurement:
    """The floor: a bare heap of (time, seq, task) and generators, no event loop at all.

    What any discrete-event engine in Python must at least do per wake-up: push an entry, pop
    it, resume a generator.  Integer-nanosecond time (the workload's ``ticks``, rounded as
    virtualtime rounds a delay), so the end time is exact.
    """
    heap: list[tuple[int, int, Generator[int, None, None]]] = []

    def process(durations: Sequence[int]) -> Generator[int, None, None]:
        yield from durations

    push, pop = heapq.heappush, heapq.heappop
    gc.collect()
    with _Stopwatch() as watch:
        seq = 0
        for row in workload.ticks:
            gen = process(row)
            push(heap, (next(gen), seq, gen))
            seq += 1
        now = 0
        while heap:
            now, _, gen = pop(heap)
            for delay in gen:
                push(heap, (now + delay, seq, gen))
                seq += 1
                break
    return Measurement(watch.cpu, watch.wall, now / NS_PER_S)


def run_asyncio_floor(workload: Workload) -> Measurement:
    """Stock asyncio, every sleep ``asyncio.sleep(0)``: task switching with no timers at all."""
    return _run_asyncio(asyncio.new_event_loop, _sleeper_zero, workload, check_time=False)


class _JumpingSelector(selectors.DefaultSelector):
    """A real selector that, when asked to block with nothing ready, moves a clock instead."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if not ready and timeout is not None and timeout > 0:
            self.now += timeout
        return ready


class _NaiveVirtualLoop(asyncio.SelectorEventLoop):
    """Textbook virtual clock: float ``time()``, jump by the select timeout.  Reference only.

    No FIFO order, no integer time, no executor or deadlock handling: this is the cheapest
    loop with a jumping clock that stock asyncio allows, so it shows what the stock
    ``asyncio.sleep`` machinery costs when the clock is free.
    """

    def __init__(self) -> None:
        self._jumping = _JumpingSelector()
        super().__init__(selector=self._jumping)

    def time(self) -> float:
        return self._jumping.now


def run_asyncio_naive(workload: Workload) -> Measurement:
    """``asyncio.sleep(d)`` on :class:`_NaiveVirtualLoop` (float clock, stock timer heap)."""
    return _run_asyncio(_NaiveVirtualLoop, _sleeper_asyncio, workload)


def run_looptime(workload: Workload) -> Measurement:
    """``asyncio.sleep(d)`` on ``looptime.new_event_loop()`` with looptime's defaults."""
    try:
        import looptime
    except ImportError as exc:
        raise Unavailable("not installed") from exc
    factory: LoopFactory = looptime.new_event_loop
    return _run_asyncio(factory, _sleeper_asyncio, workload)


# --------------------------------------------------------------------------- SimPy, trio


def run_simpy(workload: Workload) -> Measurement:
    """One SimPy process per task, each ``yield env.timeout(d)`` per sleep."""
    try:
        import simpy
    except ImportError as exc:
        raise Unavailable("not installed") from exc

    def process(env: Any, durations: Sequence[float]) -> Generator[Any, Any, None]:
        for delay in durations:
            yield env.timeout(delay)

    gc.collect()
    env = None if workload.time_setup else simpy.Environment()
    with _Stopwatch() as watch:
        if env is None:
            env = simpy.Environment()
        for row in workload.seconds:
            env.process(process(env, row))
        env.run()
    return Measurement(watch.cpu, watch.wall, float(env.now))


def _run_trio_clock(workload: Workload, make_clock: Callable[[], Any]) -> Measurement:
    """One trio task per row in a nursery, each ``trio.sleep(d)``, under ``make_clock()``."""
    try:
        import trio
    except ImportError as exc:
        raise Unavailable("not installed") from exc

    async def sleeper(durations: Sequence[float]) -> None:
        for delay in durations:
            await trio.sleep(delay)

    async def main() -> float:
        async with trio.open_nursery() as nursery:
            for row in workload.seconds:
                nursery.start_soon(sleeper, row)
        return trio.current_time()

    gc.collect()
    clock = None if workload.time_setup else make_clock()
    with _Stopwatch() as watch:
        final = trio.run(main, clock=make_clock() if clock is None else clock)
    return Measurement(watch.cpu, watch.wall, final)


def run_trio(workload: Workload) -> Measurement:
    """``trio.sleep(d)`` tasks under ``MockClock(autojump_threshold=0)``.

    The clock starts at 0 like the others; trio adds each delay to a float clock.
    """
    try:
        import trio.testing
    except ImportError as exc:
        raise Unavailable("not installed") from exc
    return _run_trio_clock(workload, lambda: trio.testing.MockClock(autojump_threshold=0))


def run_trio_virtualtime(workload: Workload) -> Measurement:
    """The same trio program under ``virtualtime.trio.VirtualClock()`` (defaults)."""
    try:
        import trio  # noqa: F401 - only to report "not installed" cleanly
    except ImportError as exc:
        raise Unavailable("not installed") from exc
    try:
        virtual_trio = importlib.import_module("virtualtime.trio")
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise Unavailable("virtualtime.trio not importable") from exc
    return _run_trio_clock(workload, virtual_trio.VirtualClock)


SYSTEMS: Final[tuple[System, ...]] = (
    System(
        "virtualtime",
        "virtualtime, asyncio.sleep",
        "`asyncio.sleep(d)` tasks on `virtualtime.new_event_loop()` (defaults)",
        run_virtualtime,
        "virtualtime",
        ns_delays=True,
    ),
    System(
        "virtualtime-history",
        f"virtualtime, history={HISTORY_BOUND:_}",
        "same, with the bounded dispatch history recording every wake-up",
        run_virtualtime_history,
        "virtualtime",
        ns_delays=True,
    ),
    System(
        "virtualtime-sleep",
        "virtualtime, virtualtime.sleep",
        "`virtualtime.sleep(d)` (priority-aware sleep) on the same loop",
        run_virtualtime_sleep,
        "virtualtime",
        ns_delays=True,
    ),
    System(
        "virtualtime-pure",
        "virtualtime, asyncio.sleep (pure Python)",
        "as the first row, with `VIRTUALTIME_PURE_PYTHON=1`: no compiled core",
        run_virtualtime,
        "virtualtime",
        pure=True,
        ns_delays=True,
    ),
    System(
        "virtualtime-sleep-pure",
        "virtualtime, virtualtime.sleep (pure Python)",
        "`virtualtime.sleep(d)` with `VIRTUALTIME_PURE_PYTHON=1`",
        run_virtualtime_sleep,
        "virtualtime",
        pure=True,
        ns_delays=True,
    ),
    System(
        "anyio",
        "virtualtime, anyio.sleep",
        "`anyio.sleep(d)` tasks in a task group, asyncio backend on the virtual loop",
        run_anyio,
        "anyio",
        ns_delays=True,
    ),
    System(
        "anyio-pure",
        "virtualtime, anyio.sleep (pure Python)",
        "the same with `VIRTUALTIME_PURE_PYTHON=1`",
        run_anyio,
        "anyio",
        pure=True,
        ns_delays=True,
    ),
    System(
        "heapq-floor",
        "heapq floor (no event loop)",
        "a bare `heapq` of (time, seq, generator): push, pop, resume -- the least any engine does",
        run_heapq_floor,
        "heapq",
        ns_delays=True,
    ),
    System(
        "asyncio-floor",
        "stock asyncio, sleep(0) (floor)",
        "stock loop, every sleep `asyncio.sleep(0)`: task switching only, no timer",
        run_asyncio_floor,
        "asyncio",
    ),
    System(
        "asyncio-naive",
        "stock asyncio + naive virtual clock",
        "reference: `SelectorEventLoop` with a float `time()` that jumps by the select timeout",
        run_asyncio_naive,
        "asyncio",
    ),
    System(
        "simpy",
        "SimPy",
        "one process per task, `yield env.timeout(d)`",
        run_simpy,
        "simpy",
    ),
    System(
        "looptime",
        "looptime (defaults)",
        "`asyncio.sleep(d)` on `looptime.new_event_loop()`",
        run_looptime,
        "looptime",
    ),
    System(
        "trio",
        "trio MockClock",
        "`trio.sleep(d)` under `MockClock(autojump_threshold=0)`",
        run_trio,
        "trio",
    ),
    System(
        "trio-virtualtime",
        "trio VirtualClock",
        "the same `trio.sleep(d)` tasks under `virtualtime.trio.VirtualClock()` (defaults)",
        run_trio_virtualtime,
        "trio",
    ),
)


# --------------------------------------------------------------------------- memory


@dataclass(frozen=True)
class MemoryResult:
    """RSS growth while ``count`` sleepers were pending, and the exactness check.

    ``pending_kib`` is the high-water mark once every sleeper has parked on its timer;
    ``peak_kib`` is the high-water mark of the whole run (cancellation and completion
    included).  Both are growth above the baseline taken just before the run.
    """

    count: int
    pending_kib: int
    peak_kib: int
    cancelled: int
    seconds: float
    final_time: float
    expected: float

    @property
    def kib_per_sleeper(self) -> float:
        """Peak RSS growth of the whole run divided by the number of pending sleepers."""
        return self.peak_kib / self.count

    @property
    def pending_kib_per_sleeper(self) -> float:
        """RSS growth when all sleepers are pending, per sleeper."""
        return self.pending_kib / self.count


def _peak_rss_kib() -> int:
    # Linux reports ru_maxrss in KiB (macOS in bytes; this benchmark targets Linux).
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


MEMORY_KEYS: Final = {
    "virtualtime": "virtualtime, asyncio.sleep",
    "virtualtime-pure": "virtualtime, asyncio.sleep (pure Python)",
    "virtualtime-sleep": "virtualtime, virtualtime.sleep",
    "virtualtime-sleep-pure": "virtualtime, virtualtime.sleep (pure Python)",
    "asyncio-naive": "stock asyncio + naive virtual clock (reference)",
    "simpy": "SimPy (a process per sleeper)",
}
"""The memory check's rows; ``-pure`` rows run with VIRTUALTIME_PURE_PYTHON=1."""


def memory_check(key: str, count: int, seed: int) -> MemoryResult:
    """``count`` tasks, each a user coroutine around one sleep; cancel every other one; run on.

    The tasks stay referenced (as a user's list of tasks would) and the survivors are
    awaited with ``gather``.  ``key`` is one of :data:`MEMORY_KEYS` (``asyncio-naive`` is the
    stock-asyncio reference: what a pending Task, its sleep future and a stock TimerHandle
    cost anyway; SimPy interrupts the cancelled half).
    """
    if key not in MEMORY_KEYS:
        raise ValueError(f"memory check key must be one of {sorted(MEMORY_KEYS)}, got {key!r}")
    if count < 2:
        raise ValueError(f"memory check count must be >= 2, got {count!r}")
    rng = random.Random(seed)
    micros = [rng.randint(1, MAX_US // DEFAULT_GRID_US) * DEFAULT_GRID_US for _ in range(count)]
    seconds = [us / 1e6 for us in micros]
    expected = max(micros[1::2]) * NS_PER_US / NS_PER_S
    if key == "simpy":
        return _memory_simpy(count, seconds, expected)
    factory: LoopFactory
    sleep: Callable[[float], Any] = asyncio.sleep
    if key == "asyncio-naive":
        factory = _NaiveVirtualLoop
    else:
        factory = _virtualtime_factory()
        if key.startswith("virtualtime-sleep"):
            sleep = _vt_sleep()
    marks: dict[str, int] = {}

    async def user(delay: float) -> None:
        await sleep(delay)

    async def main() -> float:
        loop = asyncio.get_running_loop()
        tasks = [loop.create_task(user(delay)) for delay in seconds]
        await asyncio.sleep(0)  # every task starts and parks on its timer
        marks["pending"] = _peak_rss_kib()
        for task in tasks[::2]:
            task.cancel()
        await asyncio.gather(*tasks[1::2])
        marks["cancelled"] = sum(task.cancelled() for task in tasks)
        return loop.time()

    loop = factory()
    try:
        gc.collect()
        baseline = _peak_rss_kib()
        start = time.perf_counter()
        final = loop.run_until_complete(main())
        elapsed = time.perf_counter() - start
        peak = _peak_rss_kib()
    finally:
        loop.close()
    return MemoryResult(
        count=count,
        pending_kib=marks["pending"] - baseline,
        peak_kib=peak - baseline,
        cancelled=marks["cancelled"],
        seconds=elapsed,
        final_time=final,
        expected=expected,
    )


def _memory_simpy(count: int, seconds: list[float], expected: float) -> MemoryResult:
    try:
        import simpy
    except ImportError as exc:
        raise Unavailable("not installed") from exc
    env = simpy.Environment()
    cancelled = 0

    def user(delay: float) -> Generator[Any, Any, None]:
        nonlocal cancelled
        try:
            yield env.timeout(delay)
        except simpy.Interrupt:
            cancelled += 1

    gc.collect()
    baseline = _peak_rss_kib()
    start = time.perf_counter()
    processes = [env.process(user(delay)) for delay in seconds]
    env.step()  # the first process starts; run the rest of instant 0
    while env.peek() == 0:
        env.step()
    pending = _peak_rss_kib()
    for process in processes[::2]:
        process.interrupt()
    env.run()
    elapsed = time.perf_counter() - start
    peak = _peak_rss_kib()
    return MemoryResult(
        count=count,
        pending_kib=pending - baseline,
        peak_kib=peak - baseline,
        cancelled=cancelled,
        seconds=elapsed,
        final_time=float(env.now),
        expected=expected,
    )


# --------------------------------------------------------------------------- scenarios
#
# Programs beyond plain wake-ups, each measured on every system it applies to: M/M/1 queues
# in the two styles people write them (a lock around the service, or a queue feeding one
# server) and a never-firing timeout around every sleep.  Each row is (key, label, runner,
# pure); the harness runs it in a fresh child, with VIRTUALTIME_PURE_PYTHON=1 when ``pure``.

MM1_ARRIVAL_US: Final = 1000
MM1_SERVICE_US: Final = 800
"""Mean interarrival and service times (µs) of the M/M/1 scenarios: utilisation 0.8."""

NEVER_S: Final = 1e9
"""The never-firing timeout of the timeout scenario (seconds)."""


def mm1_customers(n: int, seed: int) -> tuple[list[int], list[int], int]:
    """Interarrival gaps and service times (integer µs) and the exact last departure (µs).

    A single work-conserving server finishes its last customer at the same instant whatever
    the order it serves them in, so ``D_i = max(A_i, D_{i-1}) + S_i`` checks every style.
    """
    rng = random.Random(seed)
    gaps = [max(1, round(rng.expovariate(1 / MM1_ARRIVAL_US))) for _ in range(n)]
    services = [max(1, round(rng.expovariate(1 / MM1_SERVICE_US))) for _ in range(n)]
    arrival = departure = 0
    for gap, service in zip(gaps, services, strict=True):
        arrival += gap
        departure = max(arrival, departure) + service
    return gaps, services, departure


def _mm1_asyncio(
    factory: LoopFactory, sleep: Callable[[float], Any], style: str, workload: Workload
) -> Measurement:
    gaps, services, _ = mm1_customers(workload.n, workload.seed)

    async def lock_style() -> float:
        loop = asyncio.get_running_loop()
        lock = asyncio.Lock()

        async def customer(service: float) -> None:
            async with lock:
                await sleep(service)

        tasks = []
        for gap, service in zip(gaps, services, strict=True):
            await sleep(gap / 1e6)
            tasks.append(loop.create_task(customer(service / 1e6)))
        await asyncio.gather(*tasks)
        return loop.time()

    async def queue_style() -> float:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[float] = asyncio.Queue()

        async def server() -> None:
            for _ in services:
                await sleep(await queue.get())

        serving = loop.create_task(server())
        for gap, service in zip(gaps, services, strict=True):
            await sleep(gap / 1e6)
            queue.put_nowait(service / 1e6)
        await serving
        return loop.time()

    gc.collect()
    with asyncio.Runner(loop_factory=factory) as runner, _Stopwatch() as watch:
        final = runner.run(lock_style() if style == "lock" else queue_style())
    return Measurement(watch.cpu, watch.wall, final)


def _mm1_simpy(style: str, workload: Workload) -> Measurement:
    try:
        import simpy
    except ImportError as exc:
        raise Unavailable("not installed") from exc
    gaps, services, _ = mm1_customers(workload.n, workload.seed)
    env = simpy.Environment()
    if style == "lock":
        server = simpy.Resource(env, capacity=1)

        def customer(service: float) -> Generator[Any, Any, None]:
            with server.request() as request:
                yield request
                yield env.timeout(service)

        def arrivals() -> Generator[Any, Any, None]:
            for gap, service in zip(gaps, services, strict=True):
                yield env.timeout(gap / 1e6)
                env.process(customer(service / 1e6))

    else:
        store = simpy.Store(env)

        def serve() -> Generator[Any, Any, None]:
            for _ in services:
                service = yield store.get()
                yield env.timeout(service)

        def arrivals() -> Generator[Any, Any, None]:
            for gap, service in zip(gaps, services, strict=True):
                yield env.timeout(gap / 1e6)
                store.put(service / 1e6)

        env.process(serve())
    gc.collect()
    with _Stopwatch() as watch:
        env.process(arrivals())
        env.run()
    return Measurement(watch.cpu, watch.wall, float(env.now))


def _vt_sleep() -> Callable[[float], Any]:
    sleep: Callable[[float], Any] = _virtualtime_module().sleep
    return sleep


def _looptime_factory() -> LoopFactory:
    try:
        import looptime
    except ImportError as exc:
        raise Unavailable("not installed") from exc
    factory: LoopFactory = looptime.new_event_loop
    return factory


def _mm1_rows(style: str) -> list[tuple[str, str, Callable[[Workload], Measurement], bool]]:
    def vt_asyncio(w: Workload) -> Measurement:
        return _mm1_asyncio(_virtualtime_factory(), asyncio.sleep, style, w)

    def vt_native(w: Workload) -> Measurement:
        return _mm1_asyncio(_virtualtime_factory(), _vt_sleep(), style, w)

    def looptime_asyncio(w: Workload) -> Measurement:
        return _mm1_asyncio(_looptime_factory(), asyncio.sleep, style, w)

    def simpy_style(w: Workload) -> Measurement:
        return _mm1_simpy(style, w)

    return [
        ("virtualtime", "virtualtime, asyncio.sleep", vt_asyncio, False),
        ("virtualtime-pure", "virtualtime, asyncio.sleep (pure Python)", vt_asyncio, True),
        ("virtualtime-sleep", "virtualtime, virtualtime.sleep", vt_native, False),
        ("virtualtime-sleep-pure", "virtualtime, virtualtime.sleep (pure Python)", vt_native, True),
        ("simpy", "SimPy (Resource)" if style == "lock" else "SimPy (Store)", simpy_style, False),
        ("looptime", "looptime, asyncio.sleep", looptime_asyncio, False),
    ]


def _timeout_asyncio(factory: LoopFactory, sleep: Callable[[float], Any]) -> Any:
    def run(workload: Workload) -> Measurement:
        async def sleeper(durations: Sequence[float]) -> None:
            for delay in durations:
                async with asyncio.timeout(NEVER_S):
                    await sleep(delay)

        return _run_asyncio(factory, sleeper, workload)

    return run


def _timeout_simpy(workload: Workload) -> Measurement:
    try:
        import simpy
    except ImportError as exc:
        raise Unavailable("not installed") from exc
    env = simpy.Environment()

    def process(durations: Sequence[float]) -> Generator[Any, Any, None]:
        for delay in durations:
            # SimPy cannot cancel an event: the never-firing timeout stays in its queue.
            yield env.timeout(delay) | env.timeout(NEVER_S)

    gc.collect()
    with _Stopwatch() as watch:
        for row in workload.seconds:
            env.process(process(row))
        env.run(until=NEVER_S / 2)
    # The clock ends at ``until``: report the last wake-up's instant instead, as the others.
    return Measurement(watch.cpu, watch.wall, None)


def _timeout_trio(make_clock: Callable[[], Any]) -> Callable[[Workload], Measurement]:
    def run(workload: Workload) -> Measurement:
        try:
            import trio
        except ImportError as exc:
            raise Unavailable("not installed") from exc

        async def sleeper(durations: Sequence[float]) -> None:
            for delay in durations:
                with trio.move_on_after(NEVER_S):
                    await trio.sleep(delay)

        async def main() -> float:
            async with trio.open_nursery() as nursery:
                for row in workload.seconds:
                    nursery.start_soon(sleeper, row)
            return trio.current_time()

        clock = make_clock()
        gc.collect()
        with _Stopwatch() as watch:
            final = trio.run(main, clock=clock)
        return Measurement(watch.cpu, watch.wall, final)

    return run


def _timeout_anyio(workload: Workload) -> Measurement:
    try:
        import anyio
    except ImportError as exc:
        raise Unavailable("not installed") from exc
    factory = _virtualtime_factory()

    async def sleeper(durations: Sequence[float]) -> None:
        for delay in durations:
            with anyio.move_on_after(NEVER_S):
                await anyio.sleep(delay)

    async def main() -> float:
        async with anyio.create_task_group() as group:
            for row in workload.seconds:
                group.start_soon(sleeper, row)
        return anyio.current_time()

    gc.collect()
    with _Stopwatch() as watch:
        final = anyio.run(main, backend="asyncio", backend_options={"loop_factory": factory})
    return Measurement(watch.cpu, watch.wall, final)


def _timeout_rows() -> list[tuple[str, str, Callable[[Workload], Measurement], bool]]:
    def vt_asyncio(w: Workload) -> Measurement:
        run: Callable[[Workload], Measurement] = _timeout_asyncio(
            _virtualtime_factory(), asyncio.sleep
        )
        return run(w)

    def vt_native(w: Workload) -> Measurement:
        run: Callable[[Workload], Measurement] = _timeout_asyncio(
            _virtualtime_factory(), _vt_sleep()
        )
        return run(w)

    def looptime_asyncio(w: Workload) -> Measurement:
        run: Callable[[Workload], Measurement] = _timeout_asyncio(
            _looptime_factory(), asyncio.sleep
        )
        return run(w)

    def trio_mock(w: Workload) -> Measurement:
        import trio.testing

        return _timeout_trio(lambda: trio.testing.MockClock(autojump_threshold=0))(w)

    def trio_virtual(w: Workload) -> Measurement:
        return _timeout_trio(importlib.import_module("virtualtime.trio").VirtualClock)(w)

    return [
        ("virtualtime", "virtualtime, asyncio.sleep", vt_asyncio, False),
        ("virtualtime-pure", "virtualtime, asyncio.sleep (pure Python)", vt_asyncio, True),
        ("virtualtime-sleep", "virtualtime, virtualtime.sleep", vt_native, False),
        ("virtualtime-sleep-pure", "virtualtime, virtualtime.sleep (pure Python)", vt_native, True),
        ("anyio", "virtualtime, anyio.sleep in move_on_after", _timeout_anyio, False),
        ("simpy", "SimPy, `timeout(d) | timeout(never)`", _timeout_simpy, False),
        ("looptime", "looptime, asyncio.sleep", looptime_asyncio, False),
        ("trio", "trio MockClock, move_on_after", trio_mock, False),
        ("trio-virtualtime", "trio VirtualClock, move_on_after", trio_virtual, False),
    ]


SCENARIOS: Final = {
    "mm1-lock": (
        "M/M/1, lock style: a task per customer, `async with lock: await sleep(service)`"
        " (SimPy: `Resource`); N = customers",
        _mm1_rows("lock"),
    ),
    "mm1-queue": (
        "M/M/1, queue style: one server task `await queue.get()` then sleeps the service"
        " (SimPy: `Store`); N = customers",
        _mm1_rows("queue"),
    ),
    "timeout": (
        "a never-firing timeout around every sleep (`async with asyncio.timeout(1e9)`,"
        " `move_on_after(1e9)`); N = wake-ups",
        _timeout_rows(),
    ),
}
"""Scenario name -> (what it measures, rows)."""


def scenario_expected(name: str, workload: Workload) -> float:
    """The exact end time of a scenario run (seconds, nearest float)."""
    if name.startswith("mm1"):
        return mm1_customers(workload.n, workload.seed)[2] / 1e6
    return workload.expected_seconds
