"""The boundary with threads of this process: one allowance per timer, facts about threads.

While outside work is pending, a timer may fire only once as much real time has passed as its
virtual delay -- counted from when *that* timer was set (or when the outside work began, if
later), never from an earlier burst.  And a thread is outside work when the machine says it is
working and it has spoken to the loop, not for a guessed grace after it spoke.  Every case runs
at the default options, with real threads (and, where it says so, real processes), repeated
enough to catch a race; the model's parts are also tested alone, with made-up facts.
"""

from __future__ import annotations

import asyncio
import math
import time

import virtualtime
from virtualtime._engine._outside import Allowances


def now() -> float:
    return asyncio.get_running_loop().time()


# ------------------------------------------------------------ one allowance per timer


def test_thirty_thread_jobs_back_to_back_each_get_their_own_second() -> None:
    # Jobs follow each other with no idle moment between them, so the outside work never
    # ends; each wait_for's second must count from when that wait_for began.
    async def main() -> tuple[int, float]:
        timeouts = 0
        for _ in range(30):
            try:
                await asyncio.wait_for(asyncio.to_thread(time.sleep, 0.1), 1)
            except TimeoutError:
                timeouts += 1
        return timeouts, now()

    assert virtualtime.run(main()) == (0, 0.0)


def test_a_timeout_set_late_in_a_stretch_is_not_fired_by_an_earlier_one_at_its_instant() -> None:
    # Virtual time stands still while the jobs run, so both timeouts land on the same instant;
    # the first (set at real 0) is due at real 0.5, the second (set at real 0.4) at 0.9, and its
    # job ends at 0.7.  Time reaching the shared instant fires both: it must wait for the second.
    async def main() -> tuple[str, str]:
        async def first() -> str:
            try:
                await asyncio.wait_for(asyncio.to_thread(time.sleep, 1.0), 0.5)
            except TimeoutError:
                return "timed out"
            return "answered"

        async def second() -> str:
            await asyncio.to_thread(time.sleep, 0.4)
            try:
                await asyncio.wait_for(asyncio.to_thread(time.sleep, 0.3), 0.5)
            except TimeoutError:
                return "timed out"
            return "answered"

        one, two = await asyncio.gather(first(), second())
        return one, two

    for _ in range(2):
        assert virtualtime.run(main()) == ("timed out", "answered")


def test_allowances_count_each_timer_from_the_first_round_that_could_see_it() -> None:
    allowances = Allowances()
    assert not allowances
    # The stretch starts at real 10.0, tick 5: timers 0..6 were set before it.
    assert allowances.anchor(7, 10.0, 5, 3) == (10.0, 5)
    # A round with the same counter notes nothing new.
    assert allowances.anchor(7, 10.5, 5, 3) == (10.0, 5)
    assert len(allowances) == 1
    # Timers 7 and 8 were set between the rounds: they count from the round at 11.0.
    assert allowances.anchor(9, 11.0, 5, 8) == (11.0, 5)
    assert allowances.anchor(9, 11.2, 5, 7) == (11.0, 5)
    assert allowances.anchor(12, 12.0, 6, 9) == (12.0, 6)
    # The older timers still count from where they did; an unknown target from the start.
    assert allowances.anchor(12, 12.1, 6, 3) == (10.0, 5)
    assert allowances.anchor(12, 12.1, 6, 8) == (11.0, 5)
    assert allowances.anchor(12, 12.1, 6, -1) == (10.0, 5)
    allowances.clear()
    assert not allowances
    assert allowances.anchor(20, 30.0, 9, 3) == (30.0, 9)


def test_allowances_forget_only_rounds_no_live_timer_counts_from() -> None:
    allowances = Allowances()
    for i in range(1000):
        allowances.anchor(i + 1, float(i), i, -1)
    assert allowances.crowded()
    # Live timers: 0 (counts from the first round) and 500 (from the round at 500.0).
    allowances.keep_for([0, 500])
    assert not allowances.crowded()
    assert len(allowances) <= 4
    assert allowances.anchor(1000, 999.5, 999, 0) == (0.0, 0)
    assert allowances.anchor(1000, 999.5, 999, 500) == (500.0, 500)
    assert allowances.anchor(1000, 999.5, 999, -1) == (0.0, 0)
    assert math.isfinite(allowances.anchor(1001, 1000.0, 1000, 999)[0])
