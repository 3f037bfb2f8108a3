"""Wake-up benchmark: what one timer wake-up costs on virtualtime and on its neighbours.

Run by hand (never by CI or pytest), from the project root::

    .venv/bin/python bench/bench_wakeups.py                  # N = 1e4 and 1e5, every system
    .venv/bin/python bench/bench_wakeups.py --n 1e5 --big    # N = 1e5 and 1e6
    .venv/bin/python bench/bench_wakeups.py --systems virtualtime,simpy --n 1e6
    .venv/bin/python bench/bench_wakeups.py --profile virtualtime --n 1e5

How it measures
---------------
K tasks (default 1000) each sleep M times for seeded random whole-millisecond durations
(``--grid-us`` changes the grid), so
N = K x M wake-ups.  Every measurement runs in a fresh child process (this file, re-run with
``--child``), so no system inherits another's heap, caches or garbage.  Systems are
interleaved round-robin (the order rotates every round), each (system, N) is measured
``--repeats`` times (default 3) and the median is reported as microseconds per wake-up, with
ratios against SimPy and against virtualtime's ``asyncio.sleep`` row.  Each row also checks
the final clock value against the exact end time computed in integer nanoseconds.

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
MEMORY_TARGET_KIB: Final = 1.5


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
        "--n",
        nargs="+",
        type=parse_count,
        default=[10_000, 100_000],
        metavar="N",
        help="wake-up counts to measure (default: 1e4 1e5); each must be a multiple of --tasks",
    )
    parser.add_argument(
        "--big",
        action="store_true",
        help="also measure N = 1e6, for the --big-systems only",
    )
    parser.add_argument(
        "--big-systems",
        type=parse_systems,
        default=[VT_KEY, SIMPY_KEY],
        help="systems measured at the N = 1e6 that --big adds (default: virtualtime,simpy)",
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
        "--grid-us",
        type=int,
        default=_systems.DEFAULT_GRID_US,
        help="durations are multiples of this many microseconds (default 1000 = 1 ms)",
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

    system = BY_KEY[args.child]
    n = args.n[0]
    workload = _systems.make_workload(args.tasks, n // args.tasks, args.seed, args.grid_us)
    try:
        m = system.run(workload)
    except Unavailable as exc:
        out = {"status": "unavailable", "note": str(exc)}
    else:
        out = {
            "status": "ok",
            "cpu_seconds": m.cpu_seconds,
            "seconds": m.seconds,
            "final_time": m.final_time,
            "expected": workload.expected_seconds,
        }
    print(json.dumps(out))
    return 0


def profile_main(args: argparse.Namespace) -> int:
    """Run one system once under cProfile and print the top functions."""
    system = BY_KEY[args.profile]
    n = args.n[0]
    workload = _systems.make_workload(args.tasks, n // args.tasks, args.seed, args.grid_us)
    profiler = cProfile.Profile()
    try:
        profiler.enable()
        try:
            m = system.run(workload)
        finally:
            profiler.disable()
    except Unavailable as exc:
        print(f"{system.key}: {exc}")
        return 1
    per = m.cpu_seconds / workload.n * 1e6
    print(f"{system.label}: N={n:,}, {per:.2f} us/wake-up under cProfile (inflated)\n")
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

    @property
    def done(self) -> bool:
        return self.status != "ok"

    @property
    def median(self) -> float | None:
        return statistics.median(self.per_wakeup_us) if self.per_wakeup_us else None


def run_child(extra: Sequence[str], timeout: float) -> dict[str, Any]:
    """Run this file with ``extra`` arguments in a fresh interpreter; parse its JSON line."""
    cmd = [sys.executable, str(HERE), *extra]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
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
            str(args.grid_us),
        ]
        result = run_child(extra, args.timeout)
        status = result["status"]
        if status == "timeout" and cell.effective_n // 10 >= args.tasks:
            old = cell.effective_n
            cell.effective_n //= 10
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


def run_benchmark(args: argparse.Namespace, sizes: list[int]) -> dict[int, list[Cell]]:
    """Every (size, system) cell, measured round-robin with a rotating order."""
    cells: dict[int, list[Cell]] = {}
    for n in sizes:
        keys = args.systems
        if n == BIG_N and args.big and not args.big_explicit:
            keys = [k for k in keys if k in args.big_systems]
        if keys:
            cells[n] = [Cell(BY_KEY[k], n, n) for k in keys]
    for n, row in cells.items():
        for repeat in range(args.repeats):
            shift = repeat % len(row)
            for cell in row[shift:] + row[:shift]:
                if cell.done:
                    continue
                measure(cell, args)
                shown = f"{cell.per_wakeup_us[-1]:.2f} us" if not cell.done else cell.note
                log(f"N={fmt_n(n)} round {repeat + 1}/{args.repeats} {cell.system.key}: {shown}")
    return cells


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


def targets(cells: dict[int, list[Cell]]) -> list[str]:
    lines = ["### Targets (issue 2, at N = 1e5, ratios from this run)", ""]
    if TARGET_N not in cells:
        return [*lines, "N = 1e5 was not measured in this run.", ""]
    med = {c.system.key: c.median for c in cells[TARGET_N]}
    vt = med.get(VT_KEY)

    def check(label: str, other: str, limit: float, *, at_most: bool) -> None:
        """``at_most``: virtualtime / other <= limit; else other / virtualtime >= limit."""
        o = med.get(other)
        if vt is None or o is None:
            lines.append(f"- {label}: n/a ({VT_KEY if vt is None else other} not measured)")
            return
        ratio = vt / o if at_most else o / vt
        ok = ratio <= limit if at_most else ratio >= limit
        lines.append(f"- {label}: {ratio:.2f}x → {verdict(ok)}")

    check("virtualtime ≤ 5x SimPy per wake-up (virtualtime / SimPy)", SIMPY_KEY, 5, at_most=True)
    check("≥ 20x faster than looptime (looptime / virtualtime)", "looptime", 20, at_most=False)
    check("≥ 5x faster than trio MockClock (trio / virtualtime)", "trio", 5, at_most=False)
    trio_mock, trio_virtual = med.get("trio"), med.get(TRIO_VT_KEY)
    if trio_mock is not None and trio_virtual is not None:
        ratio = trio_mock / trio_virtual
        lines.append(
            "- trio VirtualClock ≥ 1.3x faster than MockClock(autojump_threshold=0)"
            f" (MockClock / VirtualClock, issue 14): {ratio:.2f}x → {verdict(ratio >= 1.3)}"
        )
    trio_big = next((c.median for c in cells.get(BIG_N, []) if c.system.key == TRIO_VT_KEY), None)
    trio_small = next(
        (c.median for c in cells.get(SMALL_N, []) if c.system.key == TRIO_VT_KEY), None
    )
    if trio_virtual is not None and trio_big is not None and trio_small is not None:
        spread = max(trio_small, trio_virtual, trio_big) / min(trio_small, trio_virtual, trio_big)
        lines.append(
            f"- trio VirtualClock flat from 1e4 to 1e6 (max / min ≤ {FLAT_TOLERANCE}):"
            f" {spread:.2f}x → {verdict(spread <= FLAT_TOLERANCE)}"
        )
    vt_big = next((c.median for c in cells.get(BIG_N, []) if c.system.key == VT_KEY), None)
    if vt is not None and vt_big is not None:
        growth = vt_big / vt
        lines.append(
            f"- per-wake-up cost flat from 1e5 to 1e6 (1e6 / 1e5 ≤ {FLAT_TOLERANCE}):"
            f" {growth:.2f}x → {verdict(growth <= FLAT_TOLERANCE)}"
        )
    else:
        lines.append("- per-wake-up cost flat from 1e5 to 1e6: n/a (run with --big)")
    hist = med.get("virtualtime-history")
    if vt is not None and hist is not None:
        bound = f"{_systems.HISTORY_BOUND:_}"
        lines.append(f"- history on (history={bound}): {hist / vt:.2f}x the cost of history off")
    return [*lines, ""]


def memory_section(args: argparse.Namespace) -> list[str]:
    lines = [
        f"### Memory: {args.memory_n:,} pending sleepers, half cancelled, run to completion",
        "",
        "RSS growth above the baseline taken just before the run, divided by the number of"
        " sleepers: once all are pending, and at the peak of the whole run (cancellation and"
        f" completion included). Target: <= {MEMORY_TARGET_KIB} KiB per pending sleeper.",
        "",
        "| loop | KiB / sleeper, all pending | KiB / sleeper, peak of run | peak growth"
        " | cancelled | run time | final time |",
        "|---|--:|--:|--:|--:|--:|---|",
    ]
    timeout = max(args.timeout, 600.0)
    for key, label in (
        ("virtualtime", "virtualtime"),
        ("asyncio-naive", "stock asyncio + naive virtual clock (reference)"),
    ):
        log(f"memory check: {key} ...")
        extra = ["--child-memory", key, "--memory-n", str(args.memory_n), "--seed", str(args.seed)]
        r = run_child(extra, timeout)
        if r["status"] != "ok":
            lines.append(f"| {label} | {r['status']}: {r.get('note', '')} | | | | | |")
            continue
        exact = "OK" if r["final_time"] == r["expected"] else f"MISMATCH ({r['final_time']!r})"
        pending = f"{r['pending_kib_per_sleeper']:.2f}"
        peak = f"{r['kib_per_sleeper']:.2f}"
        if key == "virtualtime":
            pending += f" ({verdict(r['pending_kib_per_sleeper'] <= MEMORY_TARGET_KIB)})"
            peak += f" ({verdict(r['kib_per_sleeper'] <= MEMORY_TARGET_KIB)})"
        lines.append(
            f"| {label} | {pending} | {peak}"
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
    return [
        "## Wake-up benchmark",
        "",
        f"- date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"- machine: {os.cpu_count()} CPUs (nproc), {platform.machine()}, {platform.system()}"
        f" {platform.release()}",
        f"- load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
        " (other work on the machine adds noise; compare ratios, not absolute µs)",
        f"- software: {versions()}",
        f"- command: `{cmd}`",
        f"- K = {args.tasks} tasks, durations: multiples of {args.grid_us} µs up to"
        f" {_systems.MAX_US // 1000} ms (seed {args.seed}),"
        f" median of {args.repeats}, each measurement in a fresh process",
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
    for n in args.n:
        if n % args.tasks:
            parser.error(f"--n {n} is not a multiple of --tasks {args.tasks}")
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    if not 1 <= args.grid_us <= _systems.MAX_US:
        parser.error(f"--grid-us must be in 1..{_systems.MAX_US}, got {args.grid_us}")
    if args.timeout <= 0:
        parser.error(f"--timeout must be > 0, got {args.timeout}")

    if args.child is not None or args.child_memory is not None:
        return child_main(args)
    if args.profile is not None:
        return profile_main(args)

    report = header(args, argv)
    if not args.memory_only:
        cells = run_benchmark(args, args.n)
        for n, row in cells.items():
            report += [f"### N = {n:,} wake-ups ({args.tasks} tasks x {n // args.tasks})", ""]
            report += [*table(row), ""]
        report += targets(cells)
    if not args.no_memory:
        report += memory_section(args)
    text = "\n".join(report)
    print(text)
    if args.output is not None:
        args.output.write_text(text + "\n", encoding="utf-8")
        log(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
