"""What a short trio run costs the clock (issue 38): the hooks it installs late, and the guard.

The clock's own instrument is installed at the run's first idle question (or first kit wait);
its instruments name their hooks in ``__dir__``; a guard that is trio's main task cancels the
nursery trio runs it in.  Each shortcut must leave the behaviour exactly as it was.
"""

from __future__ import annotations

import time

import pytest
import trio
import trio.testing

import virtualtime
import virtualtime.trio
from virtualtime.trio import VirtualClock, _instruments


def _hooks_of(cls: type) -> set[str]:
    """The hooks of trio.abc.Instrument that ``cls`` defines itself (or sets per instance)."""
    names = {name for name in vars(trio.abc.Instrument) if not name.startswith("_")}
    own = {name for name in vars(cls) if name in names}
    if "task_scheduled" in getattr(cls, "__slots__", ()):
        own.add("task_scheduled")  # ClockInstrument's is a bound list.append, set per instance
    return own


@pytest.mark.parametrize(
    "cls",
    [
        _instruments.ClockInstrument,
        _instruments.EndInstrument,
        _instruments.PaceInstrument,
        _instruments.ProbeInstrument,
    ],
)
def test_each_instrument_lists_exactly_the_hooks_it_defines(cls: type) -> None:
    # trio's add_instrument reads an instrument's hooks from dir(): a hook added to a class
    # without its __dir__ would silently never be called.
    clock = VirtualClock()
    args = (clock, clock._scheduled.append) if cls is _instruments.ClockInstrument else (clock,)
    assert set(dir(cls(*args))) == _hooks_of(cls)


def test_a_run_that_never_waits_never_hooks_the_clock_in() -> None:
    async def main() -> float:
        return trio.current_time()

    clock = VirtualClock(start=5.0)
    assert trio.run(main, clock=clock) == 5.0
    assert not clock._hooked
    assert clock._token is None  # the run's end was heard all the same
    assert virtualtime.trio.run(main, clock=clock) == 5.0
    assert not clock._hooked


def test_a_run_that_waits_hooks_in_and_jumps_exactly() -> None:
    async def main() -> float:
        for _ in range(10):
            await trio.sleep(0.1)
        return trio.current_time()

    clock = VirtualClock()
    assert trio.run(main, clock=clock) == 1.0
    assert clock._hooked
    assert clock.jumps == 10


def test_a_thread_job_started_before_the_first_idle_question_holds_time() -> None:
    # The tasks that ran before the clock hooked in are all read at its first idle question:
    # the main task already waits for its worker thread there, so the sleeper's deadline does
    # not overtake the thread's answer.
    order: list[tuple[str, float]] = []

    async def main() -> None:
        async def sleeper() -> None:
            await trio.sleep(5.0)
            order.append(("timeout", trio.current_time()))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sleeper)
            await trio.to_thread.run_sync(time.sleep, 0.02)
            order.append(("thread", trio.current_time()))

    virtualtime.trio.run(main)
    assert order == [("thread", 0.0), ("timeout", 5.0)]


def test_a_guard_that_is_the_main_task_still_raises_deadlock_error() -> None:
    async def main() -> None:
        await trio.Event().wait()

    with pytest.raises(virtualtime.DeadlockError) as caught:
        virtualtime.trio.run(main, deadlock_timeout=0.01)
    assert "main" in str(caught.value)
    with pytest.raises(virtualtime.DeadlockError):
        virtualtime.anyio_run(main, backend="trio", deadlock_timeout=0.01)


def test_a_guard_inside_the_main_task_cancels_only_its_own_tree() -> None:
    async def main() -> str:
        clock = trio.lowlevel.current_clock()
        assert isinstance(clock, VirtualClock)
        with pytest.raises(virtualtime.DeadlockError):
            await virtualtime.trio.RunGuard(clock, trio.Event().wait).guarded_main()
        await trio.sleep(1.0)  # the main task goes on: only the guarded tree was cancelled
        return "on"

    assert trio.run(main, clock=VirtualClock(deadlock_timeout=0.01)) == "on"
