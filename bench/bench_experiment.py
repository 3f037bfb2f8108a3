"""Experiment executors: overhead per replication, and scaling of an M/M/1 experiment.

Two measurements, each executor started (and warmed up) before its clock starts:

1. Overhead: ``--tiny`` replications of a model that does nothing (one empty virtual loop
   each), per replication, on each executor -- the price of a replication beyond the model.
2. Scaling: ``--replications`` replications of an M/M/1 model with ``--customers`` customers
   each (an asyncio queue on the virtual loop), serial and on 2 workers: a pool of 2
   processes, a Dask ``LocalCluster`` of 2 worker processes, and Ray with ``num_cpus=2``.
   Speed-up is serial time / parallel time; the model's own cost is the mean of the table's
   ``wall_seconds``.

It ends with the determinism check: the four M/M/1 tables, without ``wall_seconds``,
compared bit for bit.  Run it from the project root when the machine is quiet::

    .venv/bin/python bench/bench_experiment.py                      # 400 x 1e4 customers
    .venv/bin/python bench/bench_experiment.py --replications 40 --customers 2000 --quick
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import hashlib
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from typing import Any

import numpy as np

from virtualtime import experiment

HERE = os.path.abspath(__file__)


async def mm1(params: Mapping[str, Any], rng: np.random.Generator) -> dict[str, float]:
    """M/M/1 in virtual time: arrivals and one server around an asyncio queue."""
    n = int(params["customers"])
    gaps = rng.exponential(1.0 / params["rate"], n).tolist()
    work = rng.exponential(1.0, n).tolist()
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
    return {"wait": sum(waits) / n}


async def nothing(params: Mapping[str, Any], rng: np.random.Generator) -> dict[str, float]:
    """The cheapest model: one draw, on a fresh virtual loop like every replication."""
    return {"x": float(rng.random())}


MM1 = experiment.ModelRef(module="_bench_experiment", name="mm1", file=HERE)
NOTHING = experiment.ModelRef(module="_bench_experiment", name="nothing", file=HERE)


def bits(results: experiment.Results) -> list[dict[str, Any]]:
    return [
        {k: v.hex() if isinstance(v, float) else v for k, v in row.items() if k != "wall_seconds"}
        for row in results.records()
    ]


def timed(fn: Callable[[], experiment.Results]) -> tuple[float, experiment.Results]:
    began = time.perf_counter()
    results = fn()
    return time.perf_counter() - began, results


def measure(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """One executor, in this (fresh) process: startup, empty-model overhead, the M/M/1 run."""
    params = {"rate": 0.8, "customers": int(args.customers)}
    with ExitStack() as stack:
        began = time.perf_counter()
        executor: Any = None
        if name == "processes":
            spawn = multiprocessing.get_context("spawn")
            executor = stack.enter_context(
                concurrent.futures.ProcessPoolExecutor(2, mp_context=spawn)
            )
        elif name == "dask":
            import distributed

            cluster = stack.enter_context(
                distributed.LocalCluster(  # type: ignore[no-untyped-call]
                    n_workers=2,
                    threads_per_worker=1,
                    host="127.0.0.1",
                    dashboard_address="127.0.0.1:0",  # loopback, any free port (None means 8787)
                    silence_logs=50,
                )
            )
            executor = stack.enter_context(distributed.Client(cluster))  # type: ignore[no-untyped-call]
        elif name == "ray":
            import ray

            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
            stack.callback(ray.shutdown)
            executor = experiment.Ray()
        elif name != "serial":
            raise SystemExit(f"unknown executor {name!r}")
        experiment.replicate(NOTHING, {}, 4, seed=0, executor=executor, chunksize=1)  # warm up
        startup = time.perf_counter() - began
        tiny, _ = timed(
            lambda: experiment.replicate(NOTHING, {}, args.tiny, seed=args.seed, executor=executor)
        )
        total, table = timed(
            lambda: experiment.replicate(
                MM1, params, args.replications, seed=args.seed, executor=executor
            )
        )
    digest = hashlib.sha256(json.dumps(bits(table)).encode()).hexdigest()
    cost = statistics.fmean(row["wall_seconds"] for row in table.records())
    first = table.summary()[0]
    return {
        "startup": startup,
        "tiny": tiny / args.tiny,
        "total": total,
        "cost": cost,
        "digest": digest,
        "rows": len(table.rows),
        "failures": len(table.failures),
        "mean": first.mean,
        "half_width": first.half_width,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--replications", type=int, default=400)
    parser.add_argument("--customers", type=float, default=1e4)
    parser.add_argument("--tiny", type=int, default=400, help="replications of the empty model")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--executors", default="serial,processes,dask,ray", help="comma-separated subset"
    )
    parser.add_argument("--quick", action="store_true", help="(a smoke run: no 1.7x check)")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args)))
        return 0
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} cores; each executor in a fresh process"
    )
    found: dict[str, dict[str, Any]] = {}
    for name in args.executors.split(","):
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        command = [sys.executable, HERE, "--one", name, *sys.argv[1:]]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(f"!! {name} failed:\n{done.stderr[-2000:]}")
            return 1
        found[name] = json.loads(done.stdout.strip().splitlines()[-1])
        found[name]["load"] = load
        print(f"  {name:<10} {found[name]['total']:8.2f} s   (load average before: {load})")
    print()
    cost = statistics.fmean(r["cost"] for r in found.values())
    startups = ", ".join(f"{k} {v['startup']:.1f} s" for k, v in found.items())
    print(f"startup, excluded below: {startups}")
    print(
        f"model's own cost (M/M/1, {int(args.customers):,} customers, mean wall_seconds): "
        f"{cost * 1e3:.1f} ms"
    )
    print()
    print("| executor | workers | empty-model cost per replication | M/M/1 total | speed-up |")
    print("|---|---|---|---|---|")
    base = found.get("serial", {}).get("total")
    for name, r in found.items():
        workers = 1 if name == "serial" else 2
        speedup = f"{base / r['total']:.2f}x" if base else "-"
        print(
            f"| {name} | {workers} | {r['tiny'] * 1e6:.0f} µs ({r['tiny'] / cost:.2%} of the "
            f"model's cost) | {r['total']:.1f} s | {speedup} |"
        )
    print()
    reference = next(iter(found.values()))
    verdicts = ", ".join(
        f"{k} {'same' if r['digest'] == reference['digest'] else 'DIFFERENT'}"
        for k, r in found.items()
    )
    print(
        f"determinism (sha256 of the table without wall_seconds): {verdicts}; "
        f"{reference['rows']} rows, mean wait {reference['mean']:.6f} ± "
        f"{reference['half_width']:.6f}, digest {reference['digest'][:16]}"
    )
    ok = all(r["digest"] == reference["digest"] and not r["failures"] for r in found.values())
    if base and not args.quick:
        for name, r in found.items():
            if name != "serial" and base / r["total"] < 1.7:
                print(f"!! {name}: speed-up {base / r['total']:.2f}x is below 1.7x")
                ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
