"""``rate_strict``: a paced run that falls behind real time raises instead of running late.

SimPy's ``RealtimeEnvironment(factor, strict=True)`` raises when a step comes more than
``factor`` real seconds late; here ``rate = 1 / factor`` and ``rate_strict=True`` allows one
virtual second (``1 / rate`` real seconds), a number that many virtual seconds.  The models
burn real CPU time in a busy loop measured with ``time.perf_counter`` (never a sleep), so a
step really costs what it says; no run takes much more than 150 ms of real time.
"""

from __future__ import annotations

import asyncio
import math
import pickle
import time
from typing import Any

import anyio
import pytest
import trio

import virtualtime
import virtualtime.trio
from virtualtime import FellBehindError, LoopOptions, sim

BACKENDS = ("asyncio", "trio")

# At rate 1000 one virtual second is a millisecond of real time; a 20 ms step is 20 virtual
# seconds late, far past rate_strict=True.  At rate 10 the allowance is 100 ms of real time,
# far more than a 0.5 ms step (and a loaded machine's hiccups) can use up.
FAST = 1000
KEPT = 10
HEAVY = 0.02
LIGHT = 0.0005


@pytest.fixture(autouse=True, scope="module")
def _backends_imported() -> None:
    """Run the models once unpaced, so no paced run pays for a first import.

    anyio imports its backend at a run's first task group: some 20 ms of real time on a
    quiet machine and ten times that on a loaded one, charged to the paced run's first step
    -- a step that really is late, but not the model's doing.
    """
    for backend in BACKENDS:
        assert virtualtime.anyio_run(two_tasks, 0, backend=backend) == "done"
        assert sim.simulate(sim_model, 0, backend=backend) == "done"


def burn(seconds: float) -> None:
    """Keep the CPU busy for ``seconds`` of real time (a step that costs real work)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def two_tasks(cost: float) -> str:
    """A worker whose steps cost ``cost`` real seconds, and a ticker that only sleeps.

    On asyncio the worker's own next wake-up comes late (the loop's time stands still during a
    step); on trio virtual time flows during the step, and the ticker's deadline, due while
    the worker computes, is what comes late.  The worker sleeps first, so the ticker is
    already waiting when the first step burns.
    """

    async def worker() -> None:
        for _ in range(4):
            await anyio.sleep(0.1)
            burn(cost)

    async def ticker() -> None:
        for _ in range(3):
            await anyio.sleep(0.5)

    async with anyio.create_task_group() as group:
        group.start_soon(worker)
        group.start_soon(ticker)
    return "done"


async def sim_model(cost: float) -> str:
    """:func:`two_tasks` as simulation processes (kit waits on trio, timers on asyncio)."""

    async def worker() -> None:
        for _ in range(4):
            await sim.sleep(0.1)
            burn(cost)

    async def ticker() -> None:
        for _ in range(3):
            await sim.sleep(0.5)

    await sim.all_of(sim.start(worker()), sim.start(ticker()))
    return "done"


def check_error(error: FellBehindError, rate: float, allowed: float) -> None:
    assert error.rate == rate
    assert error.allowed == allowed
    assert error.behind > allowed
    assert error.due < math.inf
    message = str(error)
    assert f"at rate={rate:g}" in message
    assert "fell behind real time" in message
    assert "virtual s" in message
    assert "real s" in message
    assert "rate_strict=" in message


# ---------------------------------------------------------------- the option


def test_the_option_is_in_the_catalogue_off_by_default() -> None:
    assert LoopOptions().rate_strict is False
    assert LoopOptions.of({"rate_strict": True}).rate_strict is True
    assert LoopOptions.of({"rate_strict": 2}).rate_strict == 2.0
    assert LoopOptions.of({"rate_strict": 0.5}, backend="trio").given() == {"rate_strict": 0.5}
    strict = virtualtime.new_event_loop(rate=2, rate_strict=3)
    plain = virtualtime.new_event_loop()
    try:
        assert (strict.rate_strict, plain.rate_strict) == (3.0, False)
    finally:
        strict.close()
        plain.close()
    assert virtualtime.trio.VirtualClock(rate=2, rate_strict=True).rate_strict is True
    assert virtualtime.trio.VirtualClock().rate_strict is False


@pytest.mark.parametrize(
    ("value", "kind", "words"),
    [
        ("yes", TypeError, "rate_strict must be True, False or a number of virtual seconds"),
        (None, TypeError, "got None (NoneType)"),
        (0, ValueError, "rate_strict must be > 0 virtual seconds (False turns it off), got 0"),
        (-1.5, ValueError, "got -1.5"),
        (math.nan, ValueError, "rate_strict must be finite"),
        (math.inf, ValueError, "rate_strict must be finite"),
    ],
)
def test_bad_values_are_refused_before_anything_runs(
    value: Any, kind: type[Exception], words: str
) -> None:
    for call in (
        lambda: virtualtime.run(asyncio.sleep(0), rate=1, rate_strict=value),
        lambda: virtualtime.trio.VirtualClock(rate=1, rate_strict=value),
        lambda: sim.simulate(_never, rate=1, rate_strict=value),
    ):
        with pytest.raises(kind, match="rate_strict") as caught:
            call()
        assert isinstance(caught.value, virtualtime.VirtualTimeError)
        assert words in str(caught.value)


async def _never() -> None:  # pragma: no cover - refused before it runs
    raise AssertionError("not reached")


def test_the_error_is_a_runtime_error_of_the_family_and_pickles() -> None:
    assert issubclass(FellBehindError, virtualtime.VirtualTimeError)
    assert issubclass(FellBehindError, RuntimeError)
    error = FellBehindError("late", 1.0, 5.0, 1.0, 1000.0)
    copy = pickle.loads(pickle.dumps(error))
    assert (str(copy), type(copy)) == ("late", FellBehindError)


# ---------------------------------------------------------------- asyncio


def test_asyncio_a_model_too_slow_for_the_rate_raises() -> None:
    with pytest.raises(FellBehindError) as caught:
        virtualtime.run(two_tasks(HEAVY), rate=FAST, rate_strict=True)
    check_error(caught.value, FAST, 1.0)
    assert "rate_strict=True allows one virtual second, SimPy's strict rule" in str(caught.value)
    # One of the model's own wake-ups came late: each 20 ms step is about 20 virtual seconds
    # at rate 1000 (on a loaded machine the first, at 0.1, may already be a second late).
    assert round(caught.value.due, 9) in {0.1, 0.2, 0.3, 0.4, 0.5}


def test_asyncio_a_model_the_rate_leaves_time_for_runs_through() -> None:
    assert virtualtime.run(two_tasks(LIGHT), rate=KEPT, rate_strict=True) == "done"


def test_asyncio_without_the_option_a_slow_model_runs_late_as_before() -> None:
    assert virtualtime.run(two_tasks(HEAVY), rate=FAST) == "done"
    assert virtualtime.run(two_tasks(HEAVY), rate=FAST, rate_strict=False) == "done"


def test_asyncio_without_a_rate_the_option_does_nothing() -> None:
    assert virtualtime.run(two_tasks(HEAVY), rate_strict=True) == "done"


def test_asyncio_lateness_adds_up_over_steps_each_within_the_allowance() -> None:
    # Each step is 3 ms (3 virtual s) late; 30 virtual seconds are allowed: about the tenth
    # step passes the limit.  Without the option the same run finishes, slipping.
    steps: list[float] = []

    async def creeping() -> None:
        for _ in range(40):
            burn(0.003)
            await asyncio.sleep(0.001)
            steps.append(virtualtime.now())

    with pytest.raises(FellBehindError) as caught:
        virtualtime.run(creeping(), rate=FAST, rate_strict=30)
    check_error(caught.value, FAST, 30.0)
    assert "rate_strict=30.0 allows 30 virtual s (0.03 real s at this rate)" in str(caught.value)
    assert len(steps) < 40  # (about the tenth; a loaded machine's hiccup may trip it sooner)
    steps.clear()
    virtualtime.run(creeping(), rate=FAST)
    assert len(steps) == 40


def test_asyncio_real_time_between_runs_is_nobodys_lateness() -> None:
    # At rate 100, True allows 10 ms of real time; 30 ms pass before each run.
    loop = virtualtime.new_event_loop(rate=100, rate_strict=True)
    try:
        burn(0.03)  # the loop exists but does not run: its time stands still
        loop.run_until_complete(asyncio.sleep(0.5))
        burn(0.03)
        loop.run_until_complete(asyncio.sleep(0.5))
        assert loop.time() == 1.0
    finally:
        loop.close()


# ---------------------------------------------------------------- trio


def test_trio_a_model_too_slow_for_the_rate_raises() -> None:
    clock = virtualtime.trio.VirtualClock(rate=FAST, rate_strict=True)
    with pytest.raises(FellBehindError) as caught:
        virtualtime.trio.run(two_tasks, HEAVY, clock=clock)
    check_error(caught.value, FAST, 1.0)


def test_trio_a_model_the_rate_leaves_time_for_runs_through() -> None:
    clock = virtualtime.trio.VirtualClock(rate=KEPT, rate_strict=True)
    assert virtualtime.trio.run(two_tasks, LIGHT, clock=clock) == "done"
    assert virtualtime.trio.run(two_tasks, HEAVY, rate=FAST) == "done"  # off: runs late


def test_trio_a_periodic_timer_whose_action_outlasts_its_period_raises() -> None:
    # The timer asks for instants fixed in advance; once an action has burned past the next
    # one, that instant is already history when the timer sleeps towards it.
    def heavy(action: sim.PeriodicAction, timer: sim.Timer) -> None:
        burn(HEAVY)

    async def main() -> None:
        start = trio.current_time() + 0.5
        await sim.Timer(sim.PeriodicAction(heavy, start=start, period=1)).run(start + 5)

    with pytest.raises(FellBehindError) as caught:
        virtualtime.trio.run(main, rate=FAST, rate_strict=5)
    check_error(caught.value, FAST, 5.0)


def test_trio_a_jump_starts_the_pace_afresh() -> None:
    # The sleep is passed over by 290 virtual seconds, far more than the 100 allowed (which
    # leave room for the selector's millisecond ticks, 1 virtual second each at this rate, and
    # for a loaded machine's hiccups: 100 ms of real time).
    async def main() -> float:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep, 10)
            await trio.sleep(0.5)
            virtualtime.trio.VirtualClock.jump(_clock(), 300)
            await trio.sleep(0.5)
        return trio.current_time()

    assert virtualtime.trio.run(main, rate=FAST, rate_strict=100) > 300


def _clock() -> virtualtime.trio.VirtualClock:
    clock = trio.lowlevel.current_clock()
    assert isinstance(clock, virtualtime.trio.VirtualClock)
    return clock


def test_trio_a_bare_run_ends_cleanly_with_trios_internal_error() -> None:
    # No guard to raise through: a failing system task ends the run, every task cancelled
    # (nothing left open for the warnings, which are errors here, to find).
    clock = virtualtime.trio.VirtualClock(rate=FAST, rate_strict=True)
    with pytest.raises(trio.TrioInternalError) as caught:
        trio.run(two_tasks, HEAVY, clock=clock)
    cause = caught.value.__cause__
    if isinstance(cause, BaseExceptionGroup):
        cause = cause.subgroup(FellBehindError)
        while isinstance(cause, BaseExceptionGroup):
            cause = cause.exceptions[0]
    assert isinstance(cause, FellBehindError)


# ---------------------------------------------------------------- anyio_run and simulate


@pytest.mark.parametrize("backend", BACKENDS)
def test_anyio_run_raises_when_behind_and_not_when_kept(backend: str) -> None:
    with pytest.raises(FellBehindError) as caught:
        virtualtime.anyio_run(two_tasks, HEAVY, backend=backend, rate=FAST, rate_strict=True)
    check_error(caught.value, FAST, 1.0)
    done = virtualtime.anyio_run(two_tasks, LIGHT, backend=backend, rate=KEPT, rate_strict=True)
    assert done == "done"


@pytest.mark.parametrize("backend", BACKENDS)
def test_anyio_run_a_driving_verb_starts_the_pace_afresh(backend: str) -> None:
    # As for the trio clock's jump: 290 virtual seconds passed over, 100 allowed.
    async def main() -> float:
        async with anyio.create_task_group() as group:
            group.start_soon(anyio.sleep, 10)
            await anyio.sleep(0.5)
            await virtualtime.fast_forward(300)
            await anyio.sleep(0.5)
        return anyio.current_time()

    assert virtualtime.anyio_run(main, backend=backend, rate=FAST, rate_strict=100) > 300


@pytest.mark.parametrize("backend", BACKENDS)
def test_simulate_raises_when_behind_and_not_when_kept(backend: str) -> None:
    options: dict[str, Any] = {"backend": backend, "rate_strict": True}
    with pytest.raises(FellBehindError) as caught:
        sim.simulate(sim_model, HEAVY, rate=FAST, **options)
    check_error(caught.value, FAST, 1.0)
    assert sim.simulate(sim_model, LIGHT, rate=KEPT, **options) == "done"
    assert sim.simulate(sim_model, HEAVY, rate=FAST, backend=backend) == "done"
