"""Covers: virtualtime.sim.Timeline - events with durations, fluent scheduling, completion.

Scenario: a loading dock plans a truck's visit relative to its inspection: the gate opens 1 s
before loading starts, loading follows the inspection, the drive follows the loading, a radio
check happens 4 s into the drive, unloading follows the drive.  The dock shift spans it all.
Every 2.5 s of virtual time the queue says what is going on and how far along it is; events
that finished during the step are shown once more, marked done.  The forklift is sent home
early with expire().
"""

from __future__ import annotations

import anyio

import virtualtime
from virtualtime.sim import Timeline, TimelineEntry


def describe(info: TimelineEntry[str]) -> str:
    if info.duration == 0:
        return f"{info.item} (instant)"
    state = " done" if info.has_expired else ""
    return f"{info.item} {min(info.completion, 1.0):.0%}{state}"


async def main() -> None:
    dock: Timeline[str] = Timeline()
    dock.add("shift", delay=0, duration=35)
    inspect = dock.add("inspect", delay=5, duration=3)  # 5..8
    load = inspect.add_after("load", 2, 5)  # 10..15
    load.add_before("open gate", 1)  # instant, at 9
    drive = load.add_after("drive", 2, 10)  # 17..27
    drive.add_sync("radio check", 4)  # instant, at 21
    drive.add_after("unload", 0, 5)  # 27..32
    forklift = dock.add("forklift", delay=12, duration=20)  # 12..32, but sent home at 20
    for info in sorted([inspect, load, drive, forklift], key=lambda i: i.start):
        print(f"planned: {info.item:<8} {info.start:4.1f} .. {info.start + info.duration:4.1f}")

    async for active in dock.steps(dt=2.5):
        print(f"t={anyio.current_time():5.1f} | " + " | ".join(map(describe, active)))
        if dock.time == 20 and not forklift.has_expired:
            forklift.expire()
            print("          forklift sent home: gone from the next update")
    print(f"queue empty at t={dock.time:g}")


if __name__ == "__main__":
    virtualtime.run(main())
