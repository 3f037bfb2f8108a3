"""M/M/1 queue benchmark: cost per customer on every virtual clock, side by side.

One arrival process draws customers with exponential inter-arrival times (rate 0.9), one server
serves them in order with exponential service times (rate 1.0), so the server is 90 % busy and
a queue builds up and drains all the time.  The same pre-drawn times go to every system, so
every system must report the same mean wait (to float rounding): a check that they ran the
same model, not only a speed figure.

Systems (``--systems``, default all):

* ``asyncio``  -- ``virtualtime.new_event_loop()``, an ``asyncio.Queue``, ``asyncio.sleep``;
* ``trio``     -- ``virtualtime.trio.VirtualClock()``, a trio memory channel, ``trio.sleep``;
* ``mockclock`` -- the same trio program under ``trio.testing.MockClock(autojump_threshold=0)``;
* ``simpy``    -- SimPy, a ``Store`` and ``env.timeout`` (the classic kernel, for scale).

Each measurement runs in a fresh interpreter, after an untimed warm-up run on ten customers
(imports and first-run set-up are not customers); rounds are interleaved (the order rotates)
and the table shows the median of ``--repeats`` CPU times.  Run by hand, from the project root::

    .venv/bin/python bench/bench_mm1.py                 # 1e5 customers, 3 repeats
    .venv/bin/python bench/bench_mm1.py --customers 1e4 --repeats 5
    .venv/bin/python bench/bench_mm1.py --profile trio  # cProfile one run
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import math
import pstats
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

HERE: Final = Path(__file__).resolve()
ARRIVAL_RATE: Final = 0.9
SERVICE_RATE: Final = 1.0
SEED: Final = 20_241_201


def draw(customers: int, seed: int) -> tuple[list[float], list[float]]:
    """Inter-arrival and service times, from two seeded streams."""
    arrivals = random.Random(seed)
    services = random.Random(seed + 1)
    gaps = [arrivals.expovariate(ARRIVAL_RATE) for _ in range(customers)]
    work = [services.expovariate(SERVICE_RATE) for _ in range(customers)]
    return gaps, work


# --------------------------------------------------------------------------- the systems


def run_asyncio(gaps: Sequence[float], work: Sequence[float]) -> float:
    import virtualtime

    async def main() -> float:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[float] = asyncio.Queue()
        waits: list[float] = []

        async def arrivals() -> None:
            for gap in gaps:
                await asyncio.sleep(gap)
                queue.put_nowait(loop.time())

        async def server() -> None:
            for service in work:
                arrived = await queue.get()
                waits.append(loop.time() - arrived)
                await asyncio.sleep(service)

        await asyncio.gather(arrivals(), server())
        return statistics.fmean(waits)

    with asyncio.Runner(loop_factory=virtualtime.new_event_loop) as runner:
        return runner.run(main())


def _run_trio(gaps: Sequence[float], work: Sequence[float], clock: Any) -> float:
    import trio

    async def main() -> float:
        send, receive = trio.open_memory_channel[float](math.inf)
        waits: list[float] = []

        async def arrivals() -> None:
            for gap in gaps:
                await trio.sleep(gap)
                send.send_nowait(trio.current_time())

        async def server() -> None:
            for service in work:
                arrived = await receive.receive()
                waits.append(trio.current_time() - arrived)
                await trio.sleep(service)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(arrivals)
            nursery.start_soon(server)
        return statistics.fmean(waits)

    result: float = trio.run(main, clock=clock)
    return result


def run_trio_virtual(gaps: Sequence[float], work: Sequence[float]) -> float:
    import virtualtime.trio

    return _run_trio(gaps, work, virtualtime.trio.VirtualClock())


def run_mockclock(gaps: Sequence[float], work: Sequence[float]) -> float:
    import trio.testing

    return _run_trio(gaps, work, trio.testing.MockClock(autojump_threshold=0))


def run_simpy(gaps: Sequence[float], work: Sequence[float]) -> float:
    import simpy

    env = simpy.Environment()
    store = simpy.Store(env)
    waits: list[float] = []

    def arrivals() -> Any:
        for gap in gaps:
            yield env.timeout(gap)
            yield store.put(env.now)

    def server() -> Any:
        for service in work:
            arrived = yield store.get()
            waits.append(env.now - arrived)
            yield env.timeout(service)

    env.process(arrivals())
    env.process(server())
    env.run()
    return statistics.fmean(waits)


SYSTEMS: Final[dict[str, tuple[str, Callable[[Sequence[float], Sequence[float]], float]]]] = {
    "asyncio": ("virtualtime asyncio loop", run_asyncio),
    "trio": ("trio VirtualClock", run_trio_virtual),
    "mockclock": ("trio MockClock(autojump_threshold=0)", run_mockclock),
    "simpy": ("SimPy", run_simpy),
}


# --------------------------------------------------------------------------- harness


def child(key: str, customers: int, seed: int) -> dict[str, Any]:
    gaps, work = draw(customers, seed)
    try:
        # A warm-up run on ten customers: imports and first-run set-up are not timed.
        SYSTEMS[key][1](*draw(10, seed))
    except ImportError as exc:
        return {"status": "unavailable", "note": str(exc)}
    gc.collect()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    try:
        mean_wait = SYSTEMS[key][1](gaps, work)
    except ImportError as exc:
        return {"status": "unavailable", "note": str(exc)}
    return {
        "status": "ok",
        "cpu": time.process_time() - cpu0,
        "wall": time.perf_counter() - wall0,
        "mean_wait": mean_wait,
    }


def parse_count(text: str) -> int:
    value = float(text)
    if not value.is_integer() or value < 1:
        raise argparse.ArgumentTypeError(f"a positive whole number is needed, got {text!r}")
    return int(value)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--customers", type=parse_count, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated keys")
    parser.add_argument("--profile", choices=sorted(SYSTEMS), help="cProfile one run")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        print(json.dumps(child(args.child, args.customers, args.seed)))
        return 0
    if args.profile:
        gaps, work = draw(args.customers, args.seed)
        profiler = cProfile.Profile()
        profiler.enable()
        SYSTEMS[args.profile][1](gaps, work)
        profiler.disable()
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(20)
        return 0

    keys = [key.strip() for key in args.systems.split(",") if key.strip()]
    unknown = [key for key in keys if key not in SYSTEMS]
    if unknown:
        parser.error(f"unknown system(s) {', '.join(unknown)}; choose from {', '.join(SYSTEMS)}")
    results: dict[str, list[dict[str, Any]]] = {key: [] for key in keys}
    for round_ in range(args.repeats):
        order = keys[round_ % len(keys) :] + keys[: round_ % len(keys)]
        for key in order:
            command = [sys.executable, str(HERE), "--child", key]
            command += ["--customers", str(args.customers), "--seed", str(args.seed)]
            out = subprocess.run(command, capture_output=True, text=True, check=True, timeout=600)
            results[key].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"round {round_ + 1}: {key} done", file=sys.stderr)

    per = {
        key: statistics.median(r["cpu"] for r in runs) / args.customers * 1e6
        for key, runs in results.items()
        if runs and runs[0]["status"] == "ok"
    }
    print(f"## M/M/1, {args.customers:,} customers (rho = {ARRIVAL_RATE / SERVICE_RATE:.1f}), ")
    print(f"median of {args.repeats}, each run in a fresh process\n")
    print("| system | µs / customer (CPU) | min - max | vs asyncio | mean wait |")
    print("|---|--:|--:|--:|--:|")
    base = per.get("asyncio")
    for key, runs in results.items():
        label = SYSTEMS[key][0]
        if not runs or runs[0]["status"] != "ok":
            print(f"| {label} | {runs[0].get('note', 'n/a') if runs else 'n/a'} | | | |")
            continue
        cpus = [r["cpu"] / args.customers * 1e6 for r in runs]
        ratio = f"{per[key] / base:.2f}x" if base else "n/a"
        wait = runs[0]["mean_wait"]
        print(
            f"| {label} | {per[key]:.2f} | {min(cpus):.2f} - {max(cpus):.2f} "
            f"| {ratio} | {wait:.6f} |"
        )
    if "trio" in per and "mockclock" in per:
        print(f"\nMockClock / VirtualClock per customer: {per['mockclock'] / per['trio']:.2f}x")
    if "trio" in per and "asyncio" in per:
        print(
            "trio VirtualClock / virtualtime asyncio per customer: "
            f"{per['trio'] / per['asyncio']:.2f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
