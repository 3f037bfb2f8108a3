"""Covers: virtualtime.experiment sweep over a vehicle model - fleet size vs service level.

Scenario: the courier depot of ``fleet.py`` (a 6 x 6 grid of streets, orders arriving at
random, a dispatcher sending the nearest free van) asks how many vans it needs.  Each
replication is a quiet four-hour shift with its own stream of orders; the sweep runs 2, 3
and 4 vans, 6 replications each, on common random numbers -- replication *i* sees the same
orders whatever the fleet -- and reports the mean time from order to delivery, the vans'
utilisation, and the paired difference against two vans.  A model function can build any
virtualtime world: here anyio tasks, a ``Fleet`` and ``Vehicle`` journeys, each replication
on a fresh virtual loop.
"""

from __future__ import annotations

import random
import statistics
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fleet

from virtualtime import experiment
from virtualtime.sim import Fleet, GuidePath

SHIFT = 4 * 3600  # seconds of orders per replication
SIZES = [2, 3, 4]
REPLICATIONS = 6
SEED = 7


class QuietDepot(fleet.Depot):
    """fleet.py's depot with ``vans`` vans, telling nothing."""

    def __init__(self, streets: GuidePath, group: anyio.abc.TaskGroup, vans: int) -> None:
        super().__init__(streets, group)
        self.crews = [fleet.Crew(f"van-{number}", streets) for number in range(1, vans + 1)]

    def tell(self, order: fleet.Order, text: str) -> None:
        pass


async def shift(params: Mapping[str, Any], rng: np.random.Generator) -> dict[str, float]:
    """One shift: orders for SHIFT seconds, then every parcel delivered and every van home."""
    streets = GuidePath.grid(fleet.ROWS, fleet.COLUMNS, spacing=fleet.BLOCK)
    closing = anyio.Event()
    async with Fleet() as vans, anyio.create_task_group() as group:
        depot = QuietDepot(streets, group, params["vans"])
        for crew in depot.crews:
            vans.add(crew.van)
        group.start_soon(depot.dispatcher, closing)
        orders = random.Random(int(rng.integers(2**63)))  # fleet.py draws from `random`
        with anyio.move_on_after(SHIFT):
            await depot.customers(orders)
        closing.set()
        depot.poke()
    day = anyio.current_time()
    took = [(o.delivered or day) - o.placed for o in depot.orders]
    return {
        "minutes_to_delivery": statistics.fmean(took) / 60 if took else 0.0,
        "utilisation": statistics.fmean(c.busy / day for c in depot.crews),
    }


def main() -> None:
    results = experiment.sweep(shift, {"vans": SIZES}, replications=REPLICATIONS, seed=SEED)
    print(f"Courier depot, {SHIFT // 3600}-hour shifts, {REPLICATIONS} replications per fleet size")
    print()
    print("vans  output               mean     95% interval")
    for s in results.summary():
        print(
            f"{s.params['vans']:>4}  {s.output:<19}  {s.mean:7.3f}  [{s.low:7.3f}, {s.high:7.3f}]"
        )
    print()
    print("against 2 vans (paired by replication: the same orders):")
    for d in results.differences(baseline=0):
        print(f"  {d.params['vans']} vans, {d.output:<19} {d.mean:+8.3f} +- {d.half_width:.3f}")


if __name__ == "__main__":
    main()
