"""Covers: virtualtime.sim.Timer and PeriodicAction - periodic events, priorities, ending an event.

Scenario: a greenhouse controller.  A thermometer is read every 2 s and a hygrometer every
3 s; the controller decides every 5 s with priority "low", so at an instant shared with a
sensor it always sees the fresh reading; a watchdog with priority "veryhigh" runs first at
every 10 s.  The hygrometer's battery dies after five readings (its action returns False).
Opening the vent is async: the action awaits the motor, and the timer waits for it.  At
equal time and priority the event queued first runs first: at 6 s the hygrometer (queued
at 3 s) reads before the thermometer (queued at 4 s).
"""

from __future__ import annotations

import anyio

import virtualtime
from virtualtime.sim import PeriodicAction, Timer


def log(timer: Timer, who: str, what: str) -> None:
    print(f"t={timer.time:4.1f}  {who:<11} {what}")


class Greenhouse:
    """The model's state; its methods are the events' actions, action(event, timer)."""

    def __init__(self) -> None:
        self.temperature = 0.0
        self.humidity_readings = 0
        self.vent_open = False

    def thermometer(self, event: PeriodicAction, timer: Timer) -> None:
        self.temperature = 18.0 + 0.5 * timer.time - (6.0 if self.vent_open else 0.0)
        log(timer, "thermometer", f"{self.temperature:.1f} C")

    def hygrometer(self, event: PeriodicAction, timer: Timer) -> bool:
        self.humidity_readings += 1
        log(timer, "hygrometer", f"{60 + 2 * self.humidity_readings} %")
        if self.humidity_readings == 5:
            log(timer, "hygrometer", "battery empty: stops")
            return False  # exactly False ends the event
        return True

    async def controller(self, event: PeriodicAction, timer: Timer) -> None:
        if self.temperature > 22.0 and not self.vent_open:
            log(timer, "controller", f"{self.temperature:.1f} C is too warm: opening the vent")
            await anyio.sleep(0.4)  # the motor takes 0.4 s; the timer waits for the action
            self.vent_open = True
            log(timer, "controller", f"vent open at loop time {anyio.current_time():.1f}")
        else:
            vent = "open" if self.vent_open else "shut"
            log(timer, "controller", f"{self.temperature:.1f} C, vent {vent}")

    def watchdog(self, event: PeriodicAction, timer: Timer) -> None:
        log(timer, "watchdog", f"{len(timer)} other events queued; notifying observers")
        timer.notify()


async def main() -> None:
    house = Greenhouse()
    timer = Timer(
        PeriodicAction(house.thermometer, start=0, period=2),
        PeriodicAction(house.hygrometer, start=0, period=3),
        PeriodicAction(house.controller, start=0, period=5, priority="low"),
        PeriodicAction(house.watchdog, start=10, period=10, priority="veryhigh"),
    )
    timer.observe(lambda time: print(f"           observer    snapshot at t={time:g}"))
    await timer.run(20)
    print(f"run(20) returned: timer.time={timer.time:g}, loop time={anyio.current_time():g}")


if __name__ == "__main__":
    virtualtime.run(main())
