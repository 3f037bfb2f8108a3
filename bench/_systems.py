"""The workloads of ``bench_wakeups.py``: one function per system, all doing the same work.

Every system runs the same program: ``K`` tasks (processes, for SimPy), each sleeping ``M``
times for durations drawn from one seeded :class:`random.Random`, so ``N = K * M`` wake-ups.
Durations are whole multiples of a grid (1 ms by default; ``--grid-us`` changes it) between
the grid and 1 s, so the exact end time is known in integer nanoseconds: the largest per-task
sum.  Each runner times only the work (task creation + running the
schedule to completion), not interpreter start-up, imports or drawing the durations, and
reports the clock value it ended at so the harness can check exactness.

A system whose package is missing (or, for virtualtime, whose loop has not been written yet)
raises :class:`Unavailable`; the harness prints the reason in the table instead of crashing.

This module is imported only by ``bench_wakeups.py``, inside a fresh child process per
measurement, so nothing here is shared between measurements.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
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
    "make_workload",
    "memory_check",
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
    """``tasks`` x ``sleeps`` durations, as integer microseconds and as float seconds.

    The float form is ``us / 1e6`` (the float nearest the exact decimal), which is what a
    user would write; every system gets exactly these floats.
    """

    tasks: int
    sleeps: int
    seed: int
    micros: list[list[int]]
    seconds: list[list[float]]

    @property
    def n(self) -> int:
        """Number of wake-ups."""
        return self.tasks * self.sleeps

    @property
    def expected_ns(self) -> int:
        """Exact end time in integer nanoseconds: the longest task's total."""
        return max(sum(row) for row in self.micros) * NS_PER_US

    @property
    def expected_seconds(self) -> float:
        """The float nearest :attr:`expected_ns` (what an exact clock must read at the end)."""
        return self.expected_ns / NS_PER_S


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
    return Workload(tasks=tasks, sleeps=sleeps, seed=seed, micros=micros, seconds=seconds)


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

    env = simpy.Environment()

    def process(durations: Sequence[float]) -> Generator[Any, Any, None]:
        for delay in durations:
            yield env.timeout(delay)

    gc.collect()
    with _Stopwatch() as watch:
        for row in workload.seconds:
            env.process(process(row))
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

    clock = make_clock()
    gc.collect()
    with _Stopwatch() as watch:
        final = trio.run(main, clock=clock)
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
    ),
    System(
        "virtualtime-history",
        f"virtualtime, history={HISTORY_BOUND:_}",
        "same, with the bounded dispatch history recording every wake-up",
        run_virtualtime_history,
        "virtualtime",
    ),
    System(
        "virtualtime-sleep",
        "virtualtime, virtualtime.sleep",
        "`virtualtime.sleep(d)` (priority-aware sleep) on the same loop",
        run_virtualtime_sleep,
        "virtualtime",
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


def memory_check(key: str, count: int, seed: int) -> MemoryResult:
    """``count`` tasks, each ``asyncio.sleep(d)``; cancel every other one; run to the end.

    The tasks stay referenced (as a user's list of tasks would) and the survivors are
    awaited with ``gather``.  ``key`` is ``"virtualtime"`` or ``"asyncio-naive"`` (the
    stock-asyncio reference: what a pending Task, its sleep future and a stock TimerHandle
    cost anyway).
    """
    factory: LoopFactory
    if key == "virtualtime":
        factory = _virtualtime_factory()
    elif key == "asyncio-naive":
        factory = _NaiveVirtualLoop
    else:
        raise ValueError(f"memory check key must be 'virtualtime' or 'asyncio-naive', got {key!r}")
    if count < 2:
        raise ValueError(f"memory check count must be >= 2, got {count!r}")
    rng = random.Random(seed)
    micros = [rng.randint(1, MAX_US // DEFAULT_GRID_US) * DEFAULT_GRID_US for _ in range(count)]
    seconds = [us / 1e6 for us in micros]
    expected = max(micros[1::2]) * NS_PER_US / NS_PER_S
    marks: dict[str, int] = {}

    async def main() -> float:
        loop = asyncio.get_running_loop()
        tasks = [loop.create_task(asyncio.sleep(delay)) for delay in seconds]
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
