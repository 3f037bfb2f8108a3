"""Driving time by hand: step, evolve, run_until, fast_forward, settle, peek.

Spinoza's timeline (SEED-SPECS section A) mapped onto the loop: a "scheduled event" is a
``call_at`` timer, ``now`` is ``loop.time()``, ``history`` is ``loop.history``.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import virtualtime
from virtualtime import VirtualEventLoop

Log = list[tuple[float, str]]


@pytest.fixture
def manual() -> Iterator[VirtualEventLoop]:
    loop = virtualtime.new_event_loop(autojump=False, history=1000)
    try:
        yield loop
    finally:
        _shutdown(loop)


def _shutdown(loop: VirtualEventLoop) -> None:
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    loop.close()


def _event(loop: VirtualEventLoop, log: Log, name: str) -> Callable[[], None]:
    return lambda: log.append((loop.time(), name))


# ------------------------------------------------------------- Spinoza A1-A14


def test_A1_new_loop_starts_at_zero_with_empty_future_and_history(
    manual: VirtualEventLoop,
) -> None:
    assert manual.time() == 0.0
    assert manual.peek() == math.inf
    assert manual.history == ()


def test_A2_scheduling_files_under_its_time_and_accepts_the_past(
    manual: VirtualEventLoop,
) -> None:
    manual.run_until(5.0)
    log: Log = []
    manual.call_at(7.0, _event(manual, log, "future"))
    manual.call_at(2.0, _event(manual, log, "past"))  # accepted: due now, time stays
    assert manual.peek() == 5.0
    manual.settle()
    assert log == [(5.0, "past")]
    assert manual.peek() == 7.0


def test_A3_step_on_an_empty_loop_returns_none_and_keeps_time(
    manual: VirtualEventLoop,
) -> None:
    assert manual.step() is None
    assert manual.time() == 0.0


def test_A4_step_fires_the_earliest_and_returns_now(manual: VirtualEventLoop) -> None:
    log: Log = []
    manual.call_at(1.0, _event(manual, log, "e"))
    assert manual.step() == 1.0
    assert manual.time() == 1.0
    assert log == [(1.0, "e")]
    assert [r.time for r in manual.history] == [1.0]
    assert manual.step() is None
    assert manual.time() == 1.0


def test_A5_equal_times_dispatch_in_scheduling_order(manual: VirtualEventLoop) -> None:
    log: Log = []
    manual.call_at(2.0, _event(manual, log, "A"))
    manual.call_at(2.0, _event(manual, log, "B"))
    assert manual.step() == 2.0
    assert log == [(2.0, "A"), (2.0, "B")]


def test_A6_evolve_is_inclusive_and_returns_the_new_now(manual: VirtualEventLoop) -> None:
    log: Log = []
    for t in (1.0, 2.0, 3.0):
        manual.call_at(t, _event(manual, log, f"@{t}"))
    assert manual.evolve(1.0) == 1.0
    assert log == [(1.0, "@1.0")]
    assert manual.evolve(2.0) == 3.0
    assert log == [(1.0, "@1.0"), (2.0, "@2.0"), (3.0, "@3.0")]


def test_A7_evolve_with_nothing_due_still_advances(manual: VirtualEventLoop) -> None:
    assert manual.evolve(1.0) == 1.0
    assert manual.evolve(0.5) == 1.5


def test_A8_evolve_ends_at_now_plus_dt_even_after_an_earlier_event(
    manual: VirtualEventLoop,
) -> None:
    log: Log = []
    manual.call_at(0.25, _event(manual, log, "early"))
    assert manual.evolve(10.0) == 10.0
    assert log == [(0.25, "early")]


def test_A9_events_scheduled_during_evolve_fire_in_the_same_call(
    manual: VirtualEventLoop,
) -> None:
    log: Log = []

    def chain() -> None:
        log.append((manual.time(), "first"))
        manual.call_later(1.0, _event(manual, log, "chained"))  # t=2: inside the window
        manual.call_later(20.0, _event(manual, log, "outside"))  # t=21: beyond it

    manual.call_at(1.0, chain)
    assert manual.evolve(10.0) == 10.0
    # Not Twisted's Clock.advance: the chained timer ran at its own instant, 2.0.
    assert log == [(1.0, "first"), (2.0, "chained")]
    assert manual.peek() == 21.0


def test_A10_history_hands_each_dispatched_event_back(manual: VirtualEventLoop) -> None:
    def named_callback() -> None:
        pass

    manual.call_at(1.0, named_callback)
    manual.call_at(1.0, named_callback, priority=-1)
    manual.evolve(2.0)
    records = manual.history
    assert [(r.time, r.priority, r.scheduled) for r in records] == [
        (1.0, -1, 0.0),
        (1.0, 0, 0.0),
    ]
    assert records[0].seq > records[1].seq  # scheduled second, ran first by priority
    assert all(r.what.endswith("named_callback") for r in records)


def test_A11_dispatching_in_the_past_is_impossible_time_never_goes_back(
    manual: VirtualEventLoop,
) -> None:
    # Spinoza raises when an event is dispatched in the past.  Here a past call_at is due
    # "now", so time cannot go backwards by construction; run_until into the past raises.
    log: Log = []
    manual.call_at(1.0, _event(manual, log, "e1"))
    manual.step()
    manual.call_at(0.9, _event(manual, log, "past"))
    assert manual.step() == 1.0
    assert log == [(1.0, "e1"), (1.0, "past")]
    with pytest.raises(ValueError, match=r"t must not be in the past: t=0\.9 < now=1\.0"):
        manual.run_until(0.9)
    assert manual.time() == 1.0


def test_A12_zero_delay_is_legal(manual: VirtualEventLoop) -> None:
    log: Log = []
    manual.call_later(0, _event(manual, log, "now"))
    assert manual.step() == 0.0
    assert log == [(0.0, "now")]


def test_A13_events_carry_their_callback_and_arguments(manual: VirtualEventLoop) -> None:
    received: list[tuple[Any, ...]] = []
    manual.call_at(3.0, lambda *args: received.append(args), "actor", "action", 42)
    manual.evolve(3.0)
    assert received == [("actor", "action", 42)]


@pytest.mark.parametrize("dt", [-1.0, math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("verb", ["evolve", "fast_forward"])
def test_A14_bad_dt_raises_and_leaves_state_unchanged(
    manual: VirtualEventLoop, verb: str, dt: float
) -> None:
    log: Log = []
    manual.call_at(1.0, _event(manual, log, "e"))
    manual.evolve(0.5)
    with pytest.raises(ValueError, match="dt must be"):
        getattr(manual, verb)(dt)
    assert manual.time() == 0.5
    assert manual.peek() == 1.0
    assert log == []


@pytest.mark.parametrize("t", [math.nan, math.inf, "soon"])
def test_run_until_rejects_non_finite_targets(manual: VirtualEventLoop, t: Any) -> None:
    with pytest.raises((ValueError, TypeError), match="t must be"):
        manual.run_until(t)
    assert manual.time() == 0.0


# -------------------------------------------------------------- the verbs


async def _worker(log: Log, delays: list[float]) -> None:
    loop = asyncio.get_running_loop()
    for d in delays:
        await asyncio.sleep(d)
        log.append((loop.time(), f"slept {d}"))


def test_issue_walkthrough_from_outside(manual: VirtualEventLoop) -> None:
    log: Log = []
    manual.create_task(_worker(log, [1, 2, 3, 1, 100]))
    assert manual.step() == 1.0
    assert manual.evolve(5.0) == 6.0  # wakes at 3 and 6 fired at their own instants
    assert log == [(1.0, "slept 1"), (3.0, "slept 2"), (6.0, "slept 3")]
    assert manual.peek() == 7.0
    assert manual.fast_forward(100.0) == 106.0
    assert log[-1] == (106.0, "slept 1")  # overdue by the leap: fired late, saw t=106
    assert manual.peek() == 206.0
    assert manual.run_until(200.0) == 200.0
    assert manual.settle() == 200.0
    assert manual.step() == 206.0
    assert log[-1] == (206.0, "slept 100")


def test_settle_runs_what_is_ready_without_moving_time(manual: VirtualEventLoop) -> None:
    log: Log = []
    manual.call_soon(_event(manual, log, "soon"))
    manual.call_later(0, _event(manual, log, "due now"))
    manual.call_later(1, _event(manual, log, "later"))
    assert manual.settle() == 0.0
    assert log == [(0.0, "soon"), (0.0, "due now")]


def test_step_settles_then_fires_the_next_instant(manual: VirtualEventLoop) -> None:
    log: Log = []
    manual.create_task(_worker(log, [2.5]))
    assert manual.peek() == math.inf  # the task has not run yet
    assert manual.step() == 2.5
    assert log == [(2.5, "slept 2.5")]


def test_fast_forward_differs_from_evolve() -> None:
    def scenario(verb: str) -> Log:
        loop = virtualtime.new_event_loop(autojump=False)
        log: Log = []
        try:
            for t, name in [(3.0, "a"), (1.0, "b"), (3.0, "c"), (20.0, "d")]:
                loop.call_at(t, _event(loop, log, name))
            getattr(loop, verb)(10.0)
        finally:
            loop.close()
        return log

    assert scenario("evolve") == [(1.0, "b"), (3.0, "a"), (3.0, "c")]
    # Overdue callbacks run after the leap, in their original order, seeing the new time.
    assert scenario("fast_forward") == [(10.0, "b"), (10.0, "a"), (10.0, "c")]


def test_peek_skips_cancelled_timers(manual: VirtualEventLoop) -> None:
    first = manual.call_at(1.0, print)
    manual.call_at(2.0, print)
    first.cancel()
    assert manual.peek() == 2.0


def test_verbs_work_in_autojump_mode_from_outside() -> None:
    loop = virtualtime.new_event_loop()
    log: Log = []
    try:
        loop.create_task(_worker(log, [1, 1, 1]))
        assert loop.evolve(2.5) == 2.5
        assert log == [(1.0, "slept 1"), (2.0, "slept 1")]
    finally:
        _shutdown(loop)


# ----------------------------------------------------------- inside the loop


async def _heartbeat(beats: list[float], period: float) -> None:
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(period)
        beats.append(loop.time())


@pytest.mark.parametrize("autojump", [True, False])
def test_issue_walkthrough_from_inside(autojump: bool) -> None:
    async def main() -> list[Any]:
        beats: list[float] = []
        hb = asyncio.create_task(_heartbeat(beats, period=5))
        out: list[Any] = []
        out.append(await virtualtime.evolve(12))
        out.append((virtualtime.now(), list(beats)))
        out.append(await virtualtime.step())
        out.append(await virtualtime.settle())
        out.append(virtualtime.peek())
        out.append(await virtualtime.fast_forward(60))
        out.append(list(beats))
        out.append(await virtualtime.run_until(80))
        hb.cancel()
        return out

    assert virtualtime.run(main(), autojump=autojump) == [
        12.0,
        (12.0, [5.0, 10.0]),
        15.0,
        15.0,
        20.0,
        75.0,
        [5.0, 10.0, 15.0, 75.0],  # the beat due at 20 fired late, at 75
        80.0,
    ]


def _program(log: Log) -> Callable[[VirtualEventLoop], None]:
    """Timers that chain further timers: a program both drivers must see identically."""

    def install(vloop: VirtualEventLoop) -> None:
        def tick(n: int) -> None:
            log.append((vloop.time(), f"tick {n}"))
            if n < 6:
                vloop.call_later(1.5, tick, n + 1)

        vloop.call_at(1.0, tick, 0)
        vloop.call_at(2.5, _event(vloop, log, "x"))
        vloop.call_at(2.5, _event(vloop, log, "y"), priority=-1)
        vloop.call_at(10.0, _event(vloop, log, "boundary"))
        vloop.call_at(10.5, _event(vloop, log, "beyond"))

    return install


def test_inside_and_outside_drivers_observe_the_same_sequence() -> None:
    outside: Log = []
    loop = virtualtime.new_event_loop(autojump=False)
    try:
        _program(outside)(loop)
        assert loop.evolve(10) == 10.0
    finally:
        loop.close()

    inside: Log = []

    async def driver() -> float:
        vloop = asyncio.get_running_loop()
        assert isinstance(vloop, VirtualEventLoop)
        _program(inside)(vloop)
        return await virtualtime.evolve(10)

    assert virtualtime.run(driver(), autojump=False) == 10.0
    assert inside == outside
    assert outside[:4] == [(1.0, "tick 0"), (2.5, "y"), (2.5, "x"), (2.5, "tick 1")]
    assert (10.0, "boundary") in outside
    assert all(name != "beyond" for _, name in outside)


def test_inside_evolve_stops_at_its_target_in_autojump_mode() -> None:
    async def main() -> tuple[float, list[float]]:
        beats: list[float] = []
        hb = asyncio.create_task(_heartbeat(beats, period=7))
        t = await virtualtime.evolve(20)
        hb.cancel()
        return t, beats

    assert virtualtime.run(main()) == (20.0, [7.0, 14.0])


def test_inside_step_on_nothing_returns_none() -> None:
    async def main() -> tuple[float | None, float]:
        return await virtualtime.step(), virtualtime.now()

    assert virtualtime.run(main(), autojump=False) == (None, 0.0)


def test_inside_verbs_reject_bad_input_and_leave_time() -> None:
    async def main() -> float:
        await virtualtime.evolve(3)
        for bad in (-1.0, math.nan, math.inf):
            with pytest.raises(ValueError, match="dt must be"):
                await virtualtime.evolve(bad)
            with pytest.raises(ValueError, match="dt must be"):
                await virtualtime.fast_forward(bad)
        with pytest.raises(ValueError, match="must not be in the past"):
            await virtualtime.run_until(1)
        return virtualtime.now()

    assert virtualtime.run(main(), autojump=False) == 3.0


def test_two_inside_drivers_each_wake_at_their_own_target() -> None:
    async def main() -> list[tuple[str, float]]:
        woke: list[tuple[str, float]] = []

        async def drive(name: str, dt: float) -> None:
            woke.append((name, await virtualtime.evolve(dt)))

        async with asyncio.TaskGroup() as tg:
            tg.create_task(drive("long", 9))
            tg.create_task(drive("short", 4))
        return woke

    assert virtualtime.run(main(), autojump=False) == [("short", 4.0), ("long", 9.0)]


# ------------------------------------------------------- manual mode, runaway


def test_manual_mode_with_nobody_driving_is_a_deadlock_not_a_hang() -> None:
    async def main() -> None:
        await asyncio.sleep(5)

    t0 = time.perf_counter()
    with pytest.raises(virtualtime.DeadlockError, match="time is manual") as info:
        virtualtime.run(main(), autojump=False)
    assert time.perf_counter() - t0 < 1.0
    assert "the next at t=5.0" in str(info.value)


def test_runaway_zero_delay_timer_stops_evolve_with_a_clear_error() -> None:
    loop = virtualtime.new_event_loop(autojump=False, max_rounds_per_instant=5000)
    count = 0

    def again() -> None:
        nonlocal count
        count += 1
        loop.call_later(0, again)

    try:
        loop.call_at(1.0, again)
        with pytest.raises(
            virtualtime.RunawayError, match=r"went round \d+ times at virtual time t=1\.0"
        ):
            loop.evolve(10)
        assert 5000 <= count <= 5002
        assert loop.time() == 1.0
    finally:
        loop.close()


def test_runaway_inside_reaches_the_driver() -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()

        def again() -> None:
            handle[0] = loop.call_later(0, again)

        handle = [loop.call_later(0.5, again)]
        with pytest.raises(virtualtime.RunawayError, match="max_rounds_per_instant=2000"):
            await virtualtime.evolve(10)
        handle[0].cancel()
        return loop.time()

    assert virtualtime.run(main(), max_rounds_per_instant=2000) == 0.5


def test_runaway_busy_polling_task_in_autojump_mode() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 1
        while loop.time() < deadline:  # time never moves while something is always ready
            await asyncio.sleep(0)

    with pytest.raises(virtualtime.RunawayError):
        virtualtime.run(main(), max_rounds_per_instant=3000)


# ------------------------------------------------------------------ rate mode


def test_rate_mode_paces_virtual_time() -> None:
    async def main() -> tuple[float, float]:
        t0 = time.perf_counter()
        await asyncio.sleep(10)
        return asyncio.get_running_loop().time(), time.perf_counter() - t0

    vt, real = virtualtime.run(main(), rate=100)
    assert vt == 10.0  # the timer fired at exactly its instant
    assert 0.09 <= real < 0.5  # real-time: 10 virtual seconds at 100x


def test_rate_change_mid_run_rebases_without_a_jump() -> None:
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualEventLoop)
        await asyncio.sleep(2)  # 0.02 s real at rate 100
        before = loop.time()
        loop.rate = 1000
        after = loop.time()
        await asyncio.sleep(20)  # 0.02 s real at rate 1000
        loop.rate = 0  # back to pure virtual: the next sleep is instant
        t0 = time.perf_counter()
        await asyncio.sleep(1000)
        return [before, after, loop.time(), time.perf_counter() - t0]

    before, after, end, last_real = virtualtime.run(main(), rate=100)
    assert 2.0 <= before <= after < 2.5  # neither backwards nor a leap forwards
    assert end == pytest.approx(after + 1020, abs=0.5)
    assert last_real < 0.05


def test_rate_mode_never_overtakes_an_unfired_timer() -> None:
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        seen: list[float] = []
        for _ in range(5):
            await asyncio.sleep(0.5)
            seen.append(loop.time())
        return seen

    assert virtualtime.run(main(), rate=50) == [0.5, 1.0, 1.5, 2.0, 2.5]


def test_rate_setter_validates() -> None:
    loop = virtualtime.new_event_loop(rate=2)
    try:
        with pytest.raises(ValueError, match="rate must be >= 0"):
            loop.rate = -1
        assert loop.rate == 2.0
        loop.rate = 0
        assert loop.rate == 0.0
    finally:
        loop.close()


# -------------------------------------------------------------------- history


def test_history_records_tasks_and_drops_the_oldest() -> None:
    async def main() -> tuple[VirtualEventLoop, list[Any]]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualEventLoop)

        async def sleeper(n: int) -> None:
            for _ in range(n):
                await asyncio.sleep(1)

        await asyncio.gather(
            asyncio.create_task(sleeper(3), name="three"),
            asyncio.create_task(sleeper(5), name="five"),
        )
        return loop, list(loop.history)

    loop, records = virtualtime.run(main(), history=4)
    assert len(records) == 4
    assert [r.time for r in records] == [3.0, 3.0, 4.0, 5.0]
    assert [r.what for r in records] == ["task three", "task five", "task five", "task five"]
    assert all(r.scheduled == r.time - 1 for r in records)
    assert loop.timers_fired == 8


def test_history_is_read_only_and_empty_when_off() -> None:
    loop = virtualtime.new_event_loop(history=10)
    plain = virtualtime.new_event_loop()
    try:
        loop.call_later(1, print)
        loop.step()
        snapshot = loop.history
        with pytest.raises(TypeError):
            snapshot[0] = snapshot[0]  # type: ignore[index]
        loop.call_later(1, print)
        loop.step()
        assert len(snapshot) == 1
        assert len(loop.history) == 2
        plain.call_later(1, print)
        plain.step()
        assert plain.history == ()
    finally:
        loop.close()
        plain.close()


# --------------------------------------------------------------------- misuse


def test_sync_verbs_inside_a_coroutine_name_the_awaitable() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualEventLoop)
        for verb, hint in [
            ("step", "await virtualtime.step()"),
            ("settle", "await virtualtime.settle()"),
        ]:
            with pytest.raises(virtualtime.VirtualTimeError, match=re.escape(hint)):
                getattr(loop, verb)()
        with pytest.raises(virtualtime.VirtualTimeError, match=r"await virtualtime\.evolve"):
            loop.evolve(1)

    virtualtime.run(main())


def test_inside_verbs_on_a_stock_loop_are_a_clear_error() -> None:
    async def main() -> None:
        with pytest.raises(virtualtime.VirtualTimeError, match=r"not virtual|running loop is"):
            await virtualtime.evolve(1)
        with pytest.raises(virtualtime.VirtualTimeError):
            virtualtime.now()

    with asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as runner:
        runner.run(main())


def test_inside_verbs_without_a_loop_are_a_clear_error() -> None:
    with pytest.raises(virtualtime.VirtualTimeError, match="no event loop is running"):
        virtualtime.peek()


def test_verbs_on_a_closed_loop_raise() -> None:
    loop = virtualtime.new_event_loop()
    loop.close()
    with pytest.raises(RuntimeError, match="closed"):
        loop.evolve(1)


# ------------------------------------------------- state machine against a model


class LoopVersusModel(RuleBasedStateMachine):
    """Random schedule/step/evolve/fast_forward interleavings against a plain model."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = virtualtime.new_event_loop(autojump=False)
        self.fired: list[tuple[int, int]] = []  # (fire tick, id)
        self.pending: list[tuple[int, int, int]] = []  # (due tick, seq, id) in the model
        self.now = 0  # model time in ticks (ms here)
        self.next_id = 0

    def teardown(self) -> None:
        self.loop.close()

    def _record(self, ident: int) -> None:
        self.fired.append((round(self.loop.time() * 1000), ident))

    def _expect_fire_until(self, limit: int, leap: bool) -> list[tuple[int, int]]:
        due = sorted(p for p in self.pending if p[0] <= limit)
        self.pending = [p for p in self.pending if p[0] > limit]
        return [(limit if leap else max(t, self.now), ident) for t, _, ident in due]

    @rule(delay=st.integers(0, 5000))
    def schedule(self, delay: int) -> None:
        ident = self.next_id
        self.next_id += 1
        self.loop.call_later(delay / 1000, self._record, ident)
        self.pending.append((self.now + delay, ident, ident))

    @rule(dt=st.integers(0, 3000))
    def evolve(self, dt: int) -> None:
        before = len(self.fired)
        assert self.loop.evolve(dt / 1000) * 1000 == pytest.approx(self.now + dt)
        expected = self._expect_fire_until(self.now + dt, leap=False)
        self.now += dt
        assert self.fired[before:] == expected

    @rule(dt=st.integers(0, 3000))
    def fast_forward(self, dt: int) -> None:
        before = len(self.fired)
        self.loop.fast_forward(dt / 1000)
        self.now += dt
        assert self.fired[before:] == self._expect_fire_until(self.now, leap=True)

    @precondition(lambda self: bool(self.pending))
    @rule()
    def step(self) -> None:
        before = len(self.fired)
        nxt = min(self.pending)[0]
        assert self.loop.step() == nxt / 1000
        self.now = nxt
        assert self.fired[before:] == self._expect_fire_until(nxt, leap=False)

    @invariant()
    def clocks_agree(self) -> None:
        assert round(self.loop.time() * 1000) == self.now
        expected = min(self.pending)[0] / 1000 if self.pending else math.inf
        assert self.loop.peek() == expected


TestLoopVersusModel = LoopVersusModel.TestCase
TestLoopVersusModel.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)


@pytest.mark.parametrize("start", [0.0, 3e9])
def test_step_fires_the_next_timer_even_far_out(start: float) -> None:
    # At 3e9 s a float cannot tell neighbouring nanoseconds apart: step() must drive to the
    # timer's own tick, not to a float's rounding of it.
    loop = virtualtime.new_event_loop(autojump=False, start=start)
    fired: list[float] = []
    try:
        loop.call_later(1e-9, lambda: fired.append(loop.time()))
        assert loop.step() is not None
        assert len(fired) == 1
    finally:
        loop.close()
