"""Wake-up benchmark: what one timer wake-up costs on virtualtime and on its neighbours.

Run by hand (never by CI or pytest), from the project root::

    .venv/bin/python bench/bench_wakeups.py                  # N = 1e4 and 1e5, every system
    .venv/bin/python bench/bench_wakeups.py --n 1e5 --big    # N = 1e5 and 1e6
    .venv/bin/python bench/bench_wakeups.py --systems virtualtime,simpy --n 1e6
    .venv/bin/python bench/bench_wakeups.py --profile virtualtime --n 1e5
    .venv/bin/python bench/bench_wakeups.py --workload expo --no-memory   # issue 38's table only

How it measures
---------------
Two workloads (``--workload``, both by default).  ``grid``: K tasks (default 1000) each sleep
M times for seeded random whole-millisecond durations (``--grid-us`` changes the grid), so
N = K x M wake-ups; the loop is made before the stopwatch starts.  ``expo`` (issue 38): K tasks
each sleep ``--expo-sleeps`` (default 100) times for ``expovariate(1.0)`` durations (mean 1 s,
any float), with making the loop (environment, clock) and the tasks inside the timed region for
every system, and its own targets.  Every measurement runs in a fresh
child process (this file, re-run with ``--child``), so no system inherits another's heap,
caches or garbage; the child runs its system once on a tiny workload before the timed run,
so first-run imports are not timed.  Systems are interleaved round-robin (the order rotates
every round), each (system, N) is measured ``--repeats`` times (default 3) and the median is
reported as microseconds per wake-up, with ratios against SimPy and against virtualtime's
``asyncio.sleep`` row.  Each row also checks the final clock value against the exact end time
computed in integer nanoseconds (expo, float clocks: against the exact real sum of the floats).

A child that takes longer than ``--timeout`` seconds (default 60) is stopped and that system
is re-measured at N/10 (noted in the table), so one slow system cannot stall the run.  A
system whose package is missing is shown as "not installed".

See bench/README.md for what each row measures and how to read the ratios.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import importlib.metadata
import json
import os
import platform
import pstats
import shlex
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import _systems
from _systems import SYSTEMS, System, Unavailable

HERE: Final = Path(__file__).resolve()
SYSTEM_KEYS: Final = tuple(s.key for s in SYSTEMS)
BY_KEY: Final = {s.key: s for s in SYSTEMS}

VT_KEY: Final = "virtualtime"
TRIO_VT_KEY: Final = "trio-virtualtime"
SMALL_N: Final = 10_000
SIMPY_KEY: Final = "simpy"
TARGET_N: Final = 100_000
BIG_N: Final = 1_000_000
FLAT_TOLERANCE: Final = 1.25
"""Per-wake-up cost at 1e6 may be at most this many times the cost at 1e5 to count as flat."""
RATIO_TARGETS: Final = {
    "`asyncio.sleep`, pure Python": ("virtualtime-pure", 3.0),
    "`asyncio.sleep`, compiled core": (VT_KEY, 3.0),
    "`virtualtime.sleep`, pure Python": ("virtualtime-sleep-pure", 2.5),
    "`virtualtime.sleep`, compiled core": ("virtualtime-sleep", 1.5),
    "`anyio.sleep`, pure Python": ("anyio-pure", 4.0),
    "`anyio.sleep`, compiled core": ("anyio", 4.0),
}
"""Issue 18: at most this many times SimPy's cost per wake-up at N = 1e5, by row."""
NOISE_LIMIT: Final = 0.15
"""A row whose measurements spread more than this (max - min over the median) marks a noisy run."""
MEMORY_TARGET_KIB: Final = {"virtualtime-sleep": 1.2, "virtualtime": 1.45}
"""Issue 18: KiB per pending sleeper (a user coroutine around each sleep), by row."""
EXPO_TARGETS: Final = {
    "`virtualtime.sleep`, compiled core": ("virtualtime-sleep", 1.0),
    "`asyncio.sleep`, compiled core": (VT_KEY, 1.8),
    "`anyio.sleep`, compiled core": ("anyio", 2.3),
    "`asyncio.sleep`, pure Python": ("virtualtime-pure", 3.0),
    "`virtualtime.sleep`, pure Python": ("virtualtime-sleep-pure", 2.5),
}
"""Issue 38: at most this many times SimPy's cost per wake-up on the expo workload, by row."""
EXPO_TRIO_SPEEDUP: Final = 1.3
"""Issue 38: trio VirtualClock at least this many times faster than MockClock on expo."""
DEFAULT_EXPO_SLEEPS: Final = 100
WORKLOADS: Final = ("grid", "expo")
DEFAULT_BIG: Final = (
    "virtualtime,virtualtime-pure,virtualtime-sleep,virtualtime-sleep-pure,anyio-pure,simpy,"
    "heapq-floor,trio-virtualtime"
)


# --------------------------------------------------------------------------- parsing


def parse_count(text: str) -> int:
    """``"1e5"``, ``"100000"`` or ``"100_000"`` -> 100000; a clear error otherwise."""
    try:
        value = float(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a count such as 1e5, got {text!r}") from None
    if not value.is_integer() or value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole count, got {text!r}")
    return int(value)


def parse_systems(text: str) -> list[str]:
    """Comma-separated system keys, each one of :data:`SYSTEM_KEYS`."""
    keys = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in keys if k not in BY_KEY]
    if unknown or not keys:
        raise argparse.ArgumentTypeError(
            f"unknown system(s) {unknown!r}; choose from {', '.join(SYSTEM_KEYS)}"
        )
    return keys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Wake-up cost of virtualtime vs stock asyncio, SimPy, looptime, trio.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="systems: " + ", ".join(SYSTEM_KEYS),
    )
    parser.add_argument(
        "--workload",
        nargs="+",
        choices=WORKLOADS,
        default=list(WORKLOADS),
        help="which workloads to measure (default: grid expo). grid: whole-millisecond (--grid-us)"
        " durations at each --n, loop made outside the timed region, plus the scenarios and"
        " issue 18's targets; expo: issue 38's exponential durations, loop and task creation"
        " timed, and its targets",
    )
    parser.add_argument(
        "--n",
        nargs="+",
        type=parse_count,
        default=[10_000, 100_000],
        metavar="N",
        help="grid workload: wake-up counts to measure (default: 1e4 1e5); each must be a"
        " multiple of --tasks",
    )
    parser.add_argument(
        "--big",
        action="store_true",
        help="also measure N = 1e6, for the --big-systems only",
    )
    parser.add_argument(
        "--big-systems",
        type=parse_systems,
        default=DEFAULT_BIG.split(","),
        help=f"systems measured at the N = 1e6 that --big adds (default: {DEFAULT_BIG})",
    )
    parser.add_argument(
        "--systems",
        type=parse_systems,
        default=list(SYSTEM_KEYS),
        help="comma-separated systems to run (default: all)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="measurements per cell (median)")
    parser.add_argument("--tasks", type=parse_count, default=1000, help="K, tasks (default 1000)")
    parser.add_argument("--seed", type=int, default=20_240_501, help="seed for the durations")
    parser.add_argument(
        "--expo-sleeps",
        type=parse_count,
        default=DEFAULT_EXPO_SLEEPS,
        metavar="M",
        help=f"expo workload: sleeps per task (default {DEFAULT_EXPO_SLEEPS}; N = K x M)",
    )
    parser.add_argument(
        "--grid-us",
        type=int,
        nargs="+",
        default=[_systems.DEFAULT_GRID_US, 1],
        help="duration grids: durations are multiples of this many microseconds; one table"
        " per grid (default: 1000 1 -- a 1 ms grid, then a 1 µs grid where nearly every"
        " wake-up is its own instant)",
    )
    parser.add_argument(
        "--scenarios",
        nargs="*",
        choices=sorted(_systems.SCENARIOS),
        default=sorted(_systems.SCENARIOS),
        help="scenario tables to add at N = 1e5 on the first grid (default: all; the flag with"
        " no names: none)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds one child may take before the system is re-measured at N/10 (default 60)",
    )
    memory = parser.add_mutually_exclusive_group()
    memory.add_argument(
        "--memory-only", action="store_true", help="run only the memory check, no timing"
    )
    memory.add_argument("--no-memory", action="store_true", help="skip the memory check")
    parser.add_argument(
        "--memory-n",
        type=parse_count,
        default=BIG_N,
        help="pending sleepers in the memory check (default 1e6)",
    )
    parser.add_argument("--output", type=Path, help="also write the Markdown report to this file")
    parser.add_argument(
        "--profile",
        choices=SYSTEM_KEYS,
        help="instead of benchmarking, run SYSTEM once at the first --n under cProfile",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-scenario", help=argparse.SUPPRESS)
    parser.add_argument("--child-memory", help=argparse.SUPPRESS)
    return parser


# --------------------------------------------------------------------------- child side


def child_main(args: argparse.Namespace) -> int:
    """Run one measurement and print one JSON line on stdout."""
    out: dict[str, Any]
    if args.child_memory is not None:
        try:
            mem = _systems.memory_check(args.child_memory, args.memory_n, args.seed)
        except Unavailable as exc:
            out = {"status": "unavailable", "note": str(exc)}
        else:
            out = {
                "status": "ok",
                "count": mem.count,
                "peak_kib": mem.peak_kib,
                "kib_per_sleeper": mem.kib_per_sleeper,
                "pending_kib_per_sleeper": mem.pending_kib_per_sleeper,
                "cancelled": mem.cancelled,
                "seconds": mem.seconds,
                "final_time": mem.final_time,
                "expected": mem.expected,
            }
        print(json.dumps(out))
        return 0

    kind = args.workload[0]
    workload = make_workload(args, kind, args.n[0] // args.tasks)
    expected = workload.expected_seconds
    if args.child_scenario is not None:
        rows = {row[0]: row[2] for row in _systems.SCENARIOS[args.child_scenario][1]}
        run = rows[args.child]
        expected = _systems.scenario_expected(args.child_scenario, workload)
    else:
        run = BY_KEY[args.child].run
        if kind == "expo" and not BY_KEY[args.child].ns_delays:
            # A float clock adds the float delays as they are: its exact end is their sum.
            expected = workload.real_end_seconds
    try:
        # A warm-up run of a tiny workload first: what a system imports or sets up on its
        # first run (anyio loads its asyncio backend, 32 modules, on its first anyio.run) is
        # not a wake-up, and the README's rule is that imports are not timed.
        run(make_workload(args, kind, 2, tasks=2))
        m = run(workload)
    except Unavailable as exc:
        out = {"status": "unavailable", "note": str(exc)}
    else:
        out = {
            "status": "ok",
            "cpu_seconds": m.cpu_seconds,
            "seconds": m.seconds,
            "final_time": m.final_time,
            "expected": expected,
            "compiled": _compiled(),
        }
    print(json.dumps(out))
    return 0


def make_workload(
    args: argparse.Namespace, kind: str, sleeps: int, *, tasks: int | None = None
) -> _systems.Workload:
    """The ``kind`` workload (grid: on the first ``--grid-us``) of ``tasks`` x ``sleeps``."""
    k = args.tasks if tasks is None else tasks
    if kind == "expo":
        return _systems.make_expo_workload(k, sleeps, args.seed)
    return _systems.make_workload(k, sleeps, args.seed, args.grid_us[0])


def _compiled() -> bool | None:
    """Did this child run virtualtime's compiled core?  None if virtualtime was not loaded."""
    loop_module = sys.modules.get("virtualtime._engine._compiled")
    return None if loop_module is None else bool(loop_module.COMPILED)


def profile_main(args: argparse.Namespace) -> int:
    """Run one system once under cProfile and print the top functions."""
    system = BY_KEY[args.profile]
    kind = args.workload[0]
    sleeps = args.expo_sleeps if kind == "expo" else args.n[0] // args.tasks
    workload = make_workload(args, kind, sleeps)
    n = workload.n
    profiler = cProfile.Profile()
    try:
        system.run(make_workload(args, kind, 2, tasks=2))  # first-run imports, as in a child
        profiler.enable()
        try:
            m = system.run(workload)
        finally:
            profiler.disable()
    except Unavailable as exc:
        print(f"{system.key}: {exc}")
        return 1
    per = m.cpu_seconds / workload.n * 1e6
    print(f"{system.label}: {kind}, N={n:,}, {per:.2f} us/wake-up under cProfile (inflated)\n")
    stats = pstats.Stats(profiler, stream=sys.stdout)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(25)
    return 0


# --------------------------------------------------------------------------- parent side


@dataclass
class Cell:
    """All measurements of one system at one requested N."""

    system: System
    requested_n: int
    effective_n: int
    per_wakeup_us: list[float] = field(default_factory=list)  # CPU time
    wall_us: list[float] = field(default_factory=list)
    exact: list[bool | None] = field(default_factory=list)
    worst_error: float = 0.0
    status: str = "ok"  # ok | unavailable | error | timeout
    note: str = ""
    scenario: str | None = None
    grid_us: int = _systems.DEFAULT_GRID_US
    workload: str = "grid"
    compiled: set[bool | None] = field(default_factory=set)

    @property
    def done(self) -> bool:
        return self.status != "ok"

    @property
    def median(self) -> float | None:
        return statistics.median(self.per_wakeup_us) if self.per_wakeup_us else None


def run_child(extra: Sequence[str], timeout: float, *, pure: bool = False) -> dict[str, Any]:
    """Run this file with ``extra`` arguments in a fresh interpreter; parse its JSON line.

    ``pure``: with ``VIRTUALTIME_PURE_PYTHON=1`` (virtualtime's pure-Python path); otherwise
    with that variable removed, so that the compiled core is used when it was built.
    """
    cmd = [sys.executable, str(HERE), *extra]
    env = dict(os.environ)
    env.pop("VIRTUALTIME_PURE_PYTHON", None)
    if pure:
        env["VIRTUALTIME_PURE_PYTHON"] = "1"
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, check=False, env=env
        )
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "note": f"took more than {timeout:g} s"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        err = proc.stderr.strip().splitlines()
        last = err[-1] if err else f"exit status {proc.returncode}"
        return {"status": "error", "note": last}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def measure(cell: Cell, args: argparse.Namespace) -> None:
    """One more measurement of ``cell``; on timeout retry at N/10 (while N/10 >= K)."""
    while True:
        extra = [
            "--child",
            cell.system.key,
            "--n",
            str(cell.effective_n),
            "--tasks",
            str(args.tasks),
            "--seed",
            str(args.seed),
            "--grid-us",
            str(cell.grid_us),
            "--workload",
            cell.workload,
        ]
        if cell.scenario is not None:
            extra += ["--child-scenario", cell.scenario]
        result = run_child(extra, args.timeout, pure=cell.system.pure)
        status = result["status"]
        if status == "timeout" and cell.effective_n // 10 >= args.tasks:
            old = cell.effective_n
            cell.effective_n = cell.effective_n // 10 // args.tasks * args.tasks
            cell.per_wakeup_us.clear()
            cell.wall_us.clear()
            cell.exact.clear()
            cell.note = (
                f"> {args.timeout:g} s at N={fmt_n(old)}; measured at N={fmt_n(cell.effective_n)}"
            )
            log(f"  {cell.system.key}: {cell.note}")
            continue
        break
    if status != "ok":
        cell.status = status
        cell.note = str(result.get("note", status))
        return
    cell.compiled.add(result.get("compiled"))
    cell.per_wakeup_us.append(result["cpu_seconds"] / cell.effective_n * 1e6)
    cell.wall_us.append(result["seconds"] / cell.effective_n * 1e6)
    final = result["final_time"]
    if final is None:
        cell.exact.append(None)
    else:
        cell.exact.append(final == result["expected"])
        error = final - result["expected"]
        if abs(error) > abs(cell.worst_error):
            cell.worst_error = error


def fmt_n(n: int) -> str:
    """1e5 for powers of ten, 12,000 otherwise."""
    text = str(n)
    if text.startswith("1") and set(text[1:]) <= {"0"} and len(text) > 3:
        return f"1e{len(text) - 1}"
    return f"{n:,}"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_benchmark(
    args: argparse.Namespace, sizes: list[int], grid_us: int
) -> dict[int, list[Cell]]:
    """Every (size, system) cell on one duration grid, round-robin with a rotating order."""
    cells: dict[int, list[Cell]] = {}
    for n in sizes:
        keys = args.systems
        if n == BIG_N and args.big and not args.big_explicit:
            keys = [k for k in keys if k in args.big_systems]
        if keys:
            cells[n] = [Cell(BY_KEY[k], n, n, grid_us=grid_us) for k in keys]
    for n, row in cells.items():
        measure_row(args, row, f"grid {grid_us} us, N={fmt_n(n)}")
    return cells


def measure_row(args: argparse.Namespace, row: list[Cell], what: str) -> None:
    """``--repeats`` rounds over the cells of one table, the order rotating every round."""
    for repeat in range(args.repeats):
        shift = repeat % len(row)
        for cell in row[shift:] + row[:shift]:
            if cell.done:
                continue
            measure(cell, args)
            shown = f"{cell.per_wakeup_us[-1]:.2f} us" if not cell.done else cell.note
            log(f"{what} round {repeat + 1}/{args.repeats} {cell.system.key}: {shown}")


def run_expo(args: argparse.Namespace) -> list[Cell]:
    """The expo table: every ``--systems`` row on issue 38's workload, round-robin."""
    n = args.tasks * args.expo_sleeps
    row = [Cell(BY_KEY[k], n, n, workload="expo") for k in args.systems]
    measure_row(args, row, f"expo N={fmt_n(n)}")
    return row


def run_scenario(args: argparse.Namespace, name: str) -> list[Cell]:
    """One scenario table at N = 1e5 (or the largest --n) on the first grid."""
    n = TARGET_N if TARGET_N in args.n else max(args.n)
    row = [
        Cell(System(key, label, "", run, "", pure=pure), n, n, scenario=name)
        for key, label, run, pure in _systems.SCENARIOS[name][1]
        if key in args.systems or key in ("simpy", "looptime", "trio", "trio-virtualtime")
    ]
    measure_row(args, row, f"{name} N={fmt_n(n)}")
    return row


# --------------------------------------------------------------------------- report


def fmt_ratio(value: float | None, ref: float | None) -> str:
    if value is None or ref is None or ref == 0:
        return "-"
    return f"{value / ref:.2f}x"


def fmt_exact(cell: Cell) -> str:
    if not cell.exact:
        return "-"
    if all(e is None for e in cell.exact):
        return "n/a (real clock)"
    if all(cell.exact):
        return "OK"
    return f"MISMATCH ({cell.worst_error:+.3g} s)"


def table(cells: list[Cell]) -> list[str]:
    ref = {c.system.key: c.median for c in cells}
    lines = [
        "| system | N measured | µs / wake-up (CPU, median) | min - max | wall µs | vs SimPy"
        " | vs virtualtime | final time |",
        "|---|--:|--:|--:|--:|--:|--:|---|",
    ]
    for c in cells:
        med = c.median
        if med is None:
            note = "not installed" if c.note == "not installed" else f"{c.status}: {c.note}"
            lines.append(f"| {c.system.label} | - | {note} | | | | | |")
            continue
        spread = f"{min(c.per_wakeup_us):.2f} - {max(c.per_wakeup_us):.2f}"
        if c.compiled == {False} and not c.system.pure:
            c.note = c.note or "the compiled core was not built: this row ran pure Python"
        n_text = f"{c.effective_n:,}" + (" ⚠" if c.effective_n != c.requested_n else "")
        lines.append(
            f"| {c.system.label} | {n_text} | {med:.2f} | {spread}"
            f" | {statistics.median(c.wall_us):.2f} | {fmt_ratio(med, ref.get(SIMPY_KEY))}"
            f" | {fmt_ratio(med, ref.get(VT_KEY))}"
            f" | {fmt_exact(c)} |"
        )
    notes = [f"- {c.system.label}: {c.note}" for c in cells if c.note and c.median is not None]
    if notes:
        lines += ["", *notes]
    return lines


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("**met**" if ok else "**NOT met**")


def _median(cells: dict[int, list[Cell]], n: int, key: str) -> float | None:
    return next((c.median for c in cells.get(n, []) if c.system.key == key), None)


def targets(cells: dict[int, list[Cell]], memory: dict[str, float]) -> list[str]:
    """Issue 18's targets, from this run's first grid (ratios at N = 1e5)."""
    lines = ["### Targets (issue 18, N = 1e5, ratios from this run)", ""]
    simpy = _median(cells, TARGET_N, SIMPY_KEY)
    if TARGET_N not in cells or simpy is None:
        return [*lines, "N = 1e5 (with SimPy) was not measured in this run.", ""]

    judged = {SIMPY_KEY, *(key for key, _ in RATIO_TARGETS.values())}
    lines += _noise_warning(cells[TARGET_N], judged)

    for label, (key, limit) in RATIO_TARGETS.items():
        value = _median(cells, TARGET_N, key)
        if value is None:
            lines.append(f"- {label}: n/a ({key} not measured)")
            continue
        r = value / simpy
        lines.append(f"- {label} ≤ {limit}x SimPy: {r:.2f}x → {verdict(r <= limit)}")
    for key in ("virtualtime-pure", "virtualtime-sleep-pure", VT_KEY, "virtualtime-sleep"):
        values = [_median(cells, n, key) for n in (SMALL_N, TARGET_N, BIG_N)]
        if None in values:
            continue
        known = [v for v in values if v is not None]
        spread = max(known) / min(known)
        lines.append(
            f"- {BY_KEY[key].label}: flat from 1e4 to 1e6 (max / min ≤ {FLAT_TOLERANCE}):"
            f" {spread:.2f}x → {verdict(spread <= FLAT_TOLERANCE)}"
        )
    for key, limit in MEMORY_TARGET_KIB.items():
        for variant in (key, f"{key}-pure"):
            if variant in memory:
                lines.append(
                    f"- memory, {_systems.MEMORY_KEYS[variant]}: {memory[variant]:.2f} KiB per"
                    f" pending sleeper ≤ {limit} → {verdict(memory[variant] <= limit)}"
                )
    vt = _median(cells, TARGET_N, VT_KEY)
    # Issue 2's ratios to the test aids, and issue 14's trio targets.
    for other, limit, label in (
        ("looptime", 20, "≥ 20x faster than looptime (looptime / virtualtime)"),
        ("trio", 5, "≥ 5x faster than trio MockClock (trio / virtualtime)"),
    ):
        o = _median(cells, TARGET_N, other)
        if vt is not None and o is not None:
            lines.append(f"- {label}: {o / vt:.2f}x → {verdict(o / vt >= limit)}")
    trio_mock = _median(cells, TARGET_N, "trio")
    trio_virtual = _median(cells, TARGET_N, TRIO_VT_KEY)
    if trio_mock is not None and trio_virtual is not None:
        speedup = trio_mock / trio_virtual
        lines.append(
            "- trio VirtualClock ≥ 1.3x faster than MockClock(autojump_threshold=0)"
            f" (MockClock / VirtualClock, issue 14): {speedup:.2f}x → {verdict(speedup >= 1.3)}"
        )
    trio_row = [_median(cells, n, TRIO_VT_KEY) for n in (SMALL_N, TARGET_N, BIG_N)]
    if None not in trio_row:
        known = [v for v in trio_row if v is not None]
        spread = max(known) / min(known)
        lines.append(
            f"- trio VirtualClock flat from 1e4 to 1e6 (max / min ≤ {FLAT_TOLERANCE}):"
            f" {spread:.2f}x → {verdict(spread <= FLAT_TOLERANCE)}"
        )
    hist = _median(cells, TARGET_N, "virtualtime-history")
    if vt is not None and hist is not None:
        bound = f"{_systems.HISTORY_BOUND:_}"
        lines.append(f"- history on (history={bound}): {hist / vt:.2f}x the cost of history off")
    return [*lines, ""]


def _noise_warning(cells: list[Cell], judged: set[str]) -> list[str]:
    """A warning line when a judged row's measurements spread more than :data:`NOISE_LIMIT`."""
    spreads = [
        ((max(c.per_wakeup_us) - min(c.per_wakeup_us)) / c.median, c.system.label)
        for c in cells
        if c.median and len(c.per_wakeup_us) > 1 and c.system.key in judged
    ]
    if not spreads or max(spreads)[0] <= NOISE_LIMIT:
        return []
    worst, label = max(spreads)
    return [
        f"- ⚠ a noisy run: the measurements of {label} spread {worst:.0%} (max - min over"
        f" the median; on a quiet machine every row stays under {NOISE_LIMIT:.0%}), so a"
        " ratio below can be off by about that much: re-run on a quieter machine.",
        "",
    ]


def expo_targets(expo: list[Cell], grid: dict[int, list[Cell]], repeats: int) -> list[str]:
    """Issue 38's targets, from this run's expo table; the grid ratio at 1e5 beside each."""
    n = expo[0].requested_n if expo else 0
    lines = [f"### Targets (issue 38, expo workload, N = {n:,}, ratios from this run)", ""]
    by_key = {c.system.key: c.median for c in expo}
    simpy = by_key.get(SIMPY_KEY)
    if simpy is None:
        return [*lines, "SimPy was not measured on the expo workload in this run.", ""]
    if repeats == 1:
        lines += [
            "- ⚠ one measurement per row (`--repeats 1`): no median, no spread; a loaded"
            " machine can move any ratio below by 10-20 %.",
            "",
        ]
    judged = {SIMPY_KEY, "trio", TRIO_VT_KEY, *(key for key, _ in EXPO_TARGETS.values())}
    lines += _noise_warning(expo, judged)
    grid_simpy = _median(grid, TARGET_N, SIMPY_KEY)
    for label, (key, limit) in EXPO_TARGETS.items():
        value = by_key.get(key)
        if value is None:
            lines.append(f"- {label}: n/a ({key} not measured)")
            continue
        r = value / simpy
        grid_value = _median(grid, TARGET_N, key)
        beside = (
            f" (grid workload, N = 1e5: {grid_value / grid_simpy:.2f}x)"
            if grid_value is not None and grid_simpy is not None
            else ""
        )
        lines.append(f"- {label} ≤ {limit}x SimPy: {r:.2f}x → {verdict(r <= limit)}{beside}")
    mock, virtual = by_key.get("trio"), by_key.get(TRIO_VT_KEY)
    if mock is None or virtual is None:
        lines.append("- trio VirtualClock vs MockClock: n/a (both trio rows are needed)")
    else:
        speedup = mock / virtual
        lines.append(
            f"- trio VirtualClock ≥ {EXPO_TRIO_SPEEDUP}x faster than"
            f" MockClock(autojump_threshold=0) (MockClock / VirtualClock): {speedup:.2f}x"
            f" → {verdict(speedup >= EXPO_TRIO_SPEEDUP)}"
        )
    return [*lines, ""]


def memory_section(args: argparse.Namespace, results: dict[str, float]) -> list[str]:
    """The pending-sleepers table; fills ``results`` with KiB per pending sleeper by key."""
    lines = [
        f"### Memory and time: {args.memory_n:,} pending sleepers, half cancelled, run to the end",
        "",
        "Each sleeper is a task running a user coroutine around one sleep. RSS growth above"
        " the baseline taken just before the run, divided by the number of sleepers: once all"
        " are pending, and at the peak of the whole run (cancellation and completion included)."
        " Run time is wall time for the whole run.",
        "",
        "| loop | KiB / sleeper, all pending | KiB / sleeper, peak of run | peak growth"
        " | cancelled | run time | final time |",
        "|---|--:|--:|--:|--:|--:|---|",
    ]
    timeout = max(args.timeout, 600.0)
    for key, label in _systems.MEMORY_KEYS.items():
        log(f"memory check: {key} ...")
        extra = ["--child-memory", key, "--memory-n", str(args.memory_n), "--seed", str(args.seed)]
        r = run_child(extra, timeout, pure=key.endswith("-pure"))
        if r["status"] != "ok":
            lines.append(f"| {label} | {r['status']}: {r.get('note', '')} | | | | | |")
            continue
        exact = "OK" if r["final_time"] == r["expected"] else f"MISMATCH ({r['final_time']!r})"
        results[key] = r["pending_kib_per_sleeper"]
        lines.append(
            f"| {label} | {r['pending_kib_per_sleeper']:.2f} | {r['kib_per_sleeper']:.2f}"
            f" | {r['peak_kib'] / 1024:.0f} MiB | {r['cancelled']:,} | {r['seconds']:.1f} s"
            f" | {exact} |"
        )
    return [*lines, ""]


def versions() -> str:
    parts = [f"Python {platform.python_version()} ({platform.python_implementation()})"]
    for dist in ("async-virtualtime", "simpy", "looptime", "trio"):
        try:
            parts.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            parts.append(f"{dist} not installed")
    return ", ".join(parts)


def header(args: argparse.Namespace, argv: Sequence[str]) -> list[str]:
    cmd = shlex.join([".venv/bin/python", "bench/bench_wakeups.py", *argv])
    loop_module: Any = __import__("virtualtime._engine._compiled", fromlist=["COMPILED"])
    core = "built" if loop_module.COMPILED else "NOT built (every row ran pure Python)"
    lines = [
        "## Wake-up benchmark",
        "",
        f"- date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"- machine: {os.cpu_count()} CPUs (nproc), {platform.machine()}, {platform.system()}"
        f" {platform.release()}",
        f"- load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
        " (other work on the machine adds noise; compare ratios, not absolute µs)",
        f"- software: {versions()}; virtualtime's compiled core: {core}",
        f"- command: `{cmd}`",
        f"- K = {args.tasks} tasks, median of {args.repeats}, each measurement in a fresh"
        " process after an untimed warm-up run (2 tasks x 2 sleeps), rows interleaved",
    ]
    if "grid" in args.workload:
        lines.append(
            f"- grid workload: durations are multiples of the grid up to"
            f" {_systems.MAX_US // 1000} ms (seed {args.seed}); the loop (environment, clock)"
            " is made before the timed region, task creation is timed"
        )
    if "expo" in args.workload:
        lines.append(
            f"- expo workload (issue 38): {args.expo_sleeps} sleeps per task, durations"
            f" `random.Random({args.seed}).expovariate(1.0)` (mean 1 s); making the loop"
            " (environment, clock), creating the tasks, running and closing are all timed"
        )
    return [
        *lines,
        '- µs / wake-up is CPU time (`time.process_time`); wall µs is also shown; "(pure'
        ' Python)" rows run with `VIRTUALTIME_PURE_PYTHON=1`; final time is checked against'
        " the exact end computed in integers (expo, float clocks: the exact sum of the floats)",
        "",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    args.big_explicit = BIG_N in args.n
    if args.big and not args.big_explicit:
        args.n.append(BIG_N)
    args.n = sorted(set(args.n)) if args.child is None else args.n
    args.workload = list(dict.fromkeys(args.workload))
    for n in args.n if "grid" in args.workload else ():
        if n % args.tasks:
            parser.error(f"--n {n} is not a multiple of --tasks {args.tasks}")
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    for grid in args.grid_us:
        if not 1 <= grid <= _systems.MAX_US:
            parser.error(f"--grid-us must be in 1..{_systems.MAX_US}, got {grid}")
    if args.timeout <= 0:
        parser.error(f"--timeout must be > 0, got {args.timeout}")

    if args.child is not None or args.child_memory is not None:
        return child_main(args)
    if args.profile is not None:
        return profile_main(args)

    report = header(args, argv)
    first: dict[int, list[Cell]] = {}
    expo: list[Cell] = []
    grid_on = "grid" in args.workload and not args.memory_only
    if grid_on:
        for index, grid in enumerate(args.grid_us):
            cells = run_benchmark(args, args.n, grid)
            if index == 0:
                first = cells
            report += [f"## Wake-ups, durations on a {grid} µs grid", ""]
            for n, row in cells.items():
                report += [f"### N = {n:,} wake-ups ({args.tasks} tasks x {n // args.tasks})", ""]
                report += [*table(row), ""]
        if args.scenarios:
            report += ["## Scenarios", ""]
        for name in args.scenarios:
            row = run_scenario(args, name)
            what = _systems.SCENARIOS[name][0]
            report += [f"### {name}: {what}", "", *table(row), ""]
    if "expo" in args.workload and not args.memory_only:
        expo = run_expo(args)
        n = args.tasks * args.expo_sleeps
        report += [
            "## Wake-ups, exponential durations (issue 38)",
            "",
            f"### N = {n:,} wake-ups ({args.tasks} tasks x {args.expo_sleeps}), loop and task"
            " creation timed",
            "",
            "Final time: the rows on virtualtime's asyncio loop (and the heapq floor) are"
            " checked against the sum of each delay rounded to whole nanoseconds (as"
            " virtualtime counts a delay), the others against the exact sum of the float"
            " delays; a MISMATCH shows the worst error.",
            "",
            *table(expo),
            "",
        ]
    memory: dict[str, float] = {}
    if not args.no_memory:
        report += memory_section(args, memory)
    if grid_on:
        report += targets(first, memory)
    if expo:
        report += expo_targets(expo, first, args.repeats)
    text = "\n".join(report)
    print(text)
    if args.output is not None:
        args.output.write_text(text + "\n", encoding="utf-8")
        log(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
