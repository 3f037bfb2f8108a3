"""The kit's fast paths on the virtual asyncio loop: they change the cost of a run, never the run.

* A kit sleep is the loop's native wait (its future in the timer heap, no timer handle); an
  interrupt or a cancellation takes the entry back and tells the loop it is dead.
* A released unit goes straight to the next request (no dispatch, no record of an unchanged
  number of users).
* A level that does not change is not recorded again.

Each is pinned against the general path: the same model gives the same log with the native
wait turned off (timer handles) and with a history kept (which turns off every shortcut), and
a cancellation or interrupt landing at the instant of a hand-over loses no unit.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import math
import random
from typing import Any

import anyio
import pytest

import virtualtime
from virtualtime import sim
from virtualtime._engine import _outside, _timers
from virtualtime.sim import _kit, _native, _simulation, _sleep


@pytest.fixture(autouse=True)
def _no_foreign_worker_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """An idle pool worker left by an earlier test would keep the loop off its fast path."""
    monkeypatch.setattr(_outside, "_worker_threads", lambda: ())


def _busy_model(**options: Any) -> list[tuple[float, str]]:
    """Interrupts mid-sleep, preemption, reneging three ways, a store: a log of everything."""
    log: list[tuple[float, str]] = []
    rng = random.Random(11)

    broken: set[str] = set()

    async def machine(name: str, repairman: sim.PreemptiveResource) -> None:
        while True:
            left = rng.uniform(1, 3)
            while left:
                start = sim.now()
                try:
                    await sim.sleep(left)
                    left = 0
                except sim.Interrupt as exc:
                    log.append((sim.now(), f"{name} broke ({exc.cause})"))
                    broken.add(name)
                    left -= sim.now() - start
                    async with repairman.request(priority=1):
                        await sim.sleep(0.5)
                    broken.discard(name)
            log.append((sim.now(), f"{name} part"))

    async def breaker(victim: sim.Process[Any]) -> None:
        while True:
            await sim.sleep(rng.expovariate(0.4))
            if victim.name not in broken:
                victim.interrupt("wear")

    async def odd_jobs(repairman: sim.PreemptiveResource) -> None:
        while True:
            async with repairman.request(priority=2):
                try:
                    await sim.sleep(2)
                    log.append((sim.now(), "odd job done"))
                except sim.Interrupt as exc:
                    cause = exc.cause
                    assert isinstance(cause, sim.Preempted)
                    assert cause.by is not None
                    log.append((sim.now(), f"odd job preempted by {cause.by.name}"))

    async def customer(k: int, counter: sim.Resource, shelf: sim.Store) -> None:
        if k % 3 == 0:  # reneging by first_of
            req = counter.request()
            with req:
                which, _ = await sim.first_of(req, sim.sleep(0.7))
                if which is not req:
                    log.append((sim.now(), f"c{k} gave up"))
                    return
                await sim.sleep(0.3)
        elif k % 3 == 1:  # reneging by cancellation
            with anyio.move_on_after(0.9) as scope:
                async with counter.request():
                    await sim.sleep(0.4)
            if scope.cancelled_caught:
                log.append((sim.now(), f"c{k} left"))
                return
        else:
            async with counter.request():
                await sim.sleep(rng.expovariate(2.0))
        await shelf.put(k)
        log.append((sim.now(), f"c{k} served"))

    async def main() -> None:
        repairman = sim.PreemptiveResource(1)
        counter = sim.Resource(1)
        shelf = sim.Store(3)
        for name in ("m1", "m2"):
            sim.start(breaker(sim.start(machine(name, repairman), name=name)))
        sim.start(odd_jobs(repairman))
        for k in range(40):
            sim.start(customer(k, counter, shelf))
            await sim.sleep(rng.expovariate(2.5))
            if k % 4 == 3:
                log.append((sim.now(), f"took {await shelf.get()}"))

    sim.simulate(main, until=40, **options)
    return log


def test_native_sleeps_give_the_same_run_as_timer_handles_and_as_no_shortcut_at_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fast = _busy_model()
    assert len(fast) > 80
    text = "\n".join(entry for _, entry in fast)
    for kind in ("broke", "part", "gave up", "left", "served", "took", "preempted by m1"):
        assert kind in text, kind
    assert fast == _busy_model(history=100_000)  # no push_after, no jump, no skipped round
    monkeypatch.setattr(_simulation, "_native_loop", lambda loop: False)
    assert fast == _busy_model()  # every sleep a call_later timer handle


def test_interrupted_and_cancelled_sleeps_leave_dead_entries_the_loop_drops_uncounted() -> None:
    """A sleep given up early -- by an interrupt, a cancellation or a lost first_of -- leaves
    a dead entry in the heap that nobody counts (the loop counts only cancelled handles) and
    that the loop drops by itself before time reaches it."""
    checks: list[tuple[int, int]] = []

    def census(loop: Any) -> tuple[int, int]:
        dead = sum(1 for entry in loop._vt_heap if _timers.is_dead(entry[3]))
        return dead, loop._vt_timers.cancelled

    async def sleeper() -> int:
        caught = 0
        for _ in range(30):
            try:
                await sim.sleep(100)
            except sim.Interrupt:
                caught += 1
        return caught

    async def nap(delay: float) -> None:
        await sim.sleep(delay)

    async def main() -> tuple[int, bool, int, int]:
        loop: Any = asyncio.get_running_loop()
        async with sim.Simulation() as env:
            target = env.start(sleeper())
            doomed = env.start(nap(50))
            for k in range(30):
                await sim.sleep(1)
                target.interrupt(k)
                if k == 10:
                    doomed.cancel()
                _which, _ = await sim.first_of(sim.sleep(0.5), sim.sleep(7))
                checks.append(census(loop))
            caught = await target
            fired = loop.timers_fired
            await sim.sleep(200)  # past every dead entry's instant
            return caught, doomed.is_alive, len(loop._vt_heap), loop.timers_fired - fired

    # At the end the heap is empty, and the 200 s sleep was the only timer that fired: the
    # dead entries due in between fired nothing.
    assert virtualtime.run(main()) == (30, False, 0, 1)
    assert checks
    assert all(counted == 0 for _, counted in checks)
    assert max(dead for dead, _ in checks) > 0  # dead entries were there, uncounted


def _handover(cancel_first: bool) -> tuple[list[tuple[str, float]], tuple[Any, ...]]:
    """A holds the unit until 5; at 5 the next in line, B, is cancelled (before or after A's
    release hands it the unit); C must get the unit at 5 all the same."""
    log: list[tuple[str, float]] = []

    async def user(name: str, counter: sim.Resource, hold: float) -> None:
        try:
            async with counter.request():
                log.append((name, sim.now()))
                await sim.sleep(hold)
        except asyncio.CancelledError:
            log.append((f"{name} cancelled", sim.now()))
            raise

    victims: list[sim.Process[Any]] = []

    async def canceller() -> None:
        await sim.sleep(5)
        victims[0].cancel()

    async def main() -> tuple[Any, ...]:
        counter = sim.Resource(1)
        if cancel_first:  # the canceller's wake-up at 5 comes before a's
            sim.start(canceller())
            sim.start(user("a", counter, 5), name="a")
        else:
            sim.start(user("a", counter, 5), name="a")
            sim.start(canceller())
        await sim.sleep(0)
        victims.append(sim.start(user("b", counter, 1), name="b"))
        sim.start(user("c", counter, 1), name="c")
        await sim.sleep(20)
        stats = counter.stats
        return counter.count, len(counter.queue), stats.utilisation(0, 6), stats.served()

    state = sim.simulate(main)
    assert state is not None
    return log, state


def test_a_cancellation_at_the_instant_of_a_hand_over_loses_no_unit() -> None:
    log, state = _handover(cancel_first=False)
    assert log == [("a", 0.0), ("b cancelled", 5.0), ("c", 5.0)]
    assert state == (0, 0, 1.0, 3)  # b counts as served: the unit was handed to it at 5


def test_a_hand_over_to_a_request_already_cancelled_passes_the_unit_on() -> None:
    log, state = _handover(cancel_first=True)
    assert log == [("a", 0.0), ("b cancelled", 5.0), ("c", 5.0)]
    assert state == (0, 0, 1.0, 3)


def test_hand_overs_keep_exact_statistics_without_redundant_records() -> None:
    """Arrivals at 0, 1, 2, each served 3: grants at 0, 3, 6, waits 0, 2, 4."""

    async def user(counter: sim.Resource, arrive: float) -> None:
        await sim.sleep(arrive)
        async with counter.request():
            await sim.sleep(3)

    async def main() -> sim.Resource:
        counter = sim.Resource(1)
        for k in range(3):
            sim.start(user(counter, k))
        await sim.sleep(12)
        return counter

    counter = sim.simulate(main)
    assert counter is not None
    stats = counter.stats
    assert stats.waits.values() == [0.0, 2.0, 4.0]
    assert stats.utilisation(0, 9) == 1.0
    assert stats.utilisation(0, 12) == 0.75
    assert stats.mean_queue_length(0, 9) == pytest.approx((1 * 1 + 2 * 1 + 1 * 3) / 9)
    values = stats.users._values
    assert all(a != b for a, b in itertools.pairwise(values)), values
    assert stats.users.value_at(3.0) == 1
    assert stats.users.value_at(9.5) == 0


def test_a_level_recorded_again_unchanged_adds_no_point() -> None:
    clock = [0.0]
    series = sim.TimeSeries(lambda: clock[0], 2, 0.0)
    for t, value in [(1.0, 2), (2.0, 3), (3.0, 3), (4.0, 1)]:
        clock[0] = t
        series.record(value)
    assert series._times == [0.0, 2.0, 4.0]
    assert series.value_at(3.5) == 3
    assert series.mean(0, 4) == (2 * 2 + 3 * 2) / 4


def test_canary_the_loop_state_the_native_sleep_uses() -> None:
    """sim/_native.wake_after and the kit's sleep put the future itself into the loop's heap."""
    loop = virtualtime.new_event_loop()
    try:
        assert _native.native_loop(loop)
        missing = [
            name
            for name in (
                "_vt_wake_after",
                "_vt_heap",
                "_vt_seq",
                "_vt_ticks",
                "_vt_history",
                "_vt_now",
                "_vt_timers",
            )
            if not hasattr(loop, name)
        ]
        assert not missing, f"VirtualEventLoop no longer has {missing}: see sim/_native.py"
        future = loop.create_future()
        _native.wake_after(loop, 1.5, future)
        ticks, priority, _seq, item = loop._vt_heap[0]
        assert (ticks, priority, item) == (1_500_000_000, 0, future)
        assert _native.clock_of(loop)() == loop.time() == 0.0
        loop.run_until_complete(future)
        assert loop.time() == 1.5
        assert _native.clock_of(loop)() == 1.5
    finally:
        loop.close()
    stock = asyncio.SelectorEventLoop()
    try:
        assert not _native.native_loop(stock)
        assert _native.clock_of(stock) == stock.time
    finally:
        stock.close()


# --------------------------------------------------------------- the compiled kit sleep
#
# With the compiled core, awaiting sim.sleep runs KitSleep's C code (virtualtime/_engine/
# _cwake.c) in its common case and _Sleep._await_general, the reference, in every other.
# Forcing the reference everywhere must change nothing a model can see.


@pytest.fixture(params=["as-built", "reference"])
def sleep_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every kit sleep the way this build awaits it, or every one through the reference."""
    if request.param == "reference":
        monkeypatch.setattr(_sleep._Sleep, "__await__", _sleep._Sleep._await_general)
    return str(request.param)


def test_the_compiled_kit_sleep_gives_the_reference_run() -> None:
    compiled = _busy_model()
    simpy_order = _busy_model(order="simpy")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_sleep._Sleep, "__await__", _sleep._Sleep._await_general)
        assert _busy_model() == compiled
        assert _busy_model(order="simpy") == simpy_order


def test_the_kit_sleep_is_compiled_exactly_when_the_core_is() -> None:
    async def main() -> str:
        nap: Any = sim.sleep(1)
        awaiting = nap.__await__()
        kind = type(awaiting).__name__
        awaiting.close()
        nap._abandon()  # closed before it ran: taken back, not "never awaited"
        return kind

    kind = sim.simulate(main)
    assert kind == ("KitNap" if virtualtime._engine._compiled.COMPILED else "generator")
    nap: Any = sim.sleep(1)
    assert isinstance(nap, _kit._Abandonable)
    nap._abandon()  # taken back unawaited: no "never awaited" warning
    assert (_sleep._KIT_SLEEP is not None) is virtualtime._engine._compiled.COMPILED


def _suspended_sleep(loop: Any) -> tuple[Any, asyncio.Future[Any], int]:
    """A kit sleep of 5 driven by hand to its suspension: (its iterator, its future, the loop's
    count of dead entries before)."""
    awaiting = sim.sleep(5).__await__()
    future = awaiting.send(None)
    assert isinstance(future, asyncio.Future)
    assert future._asyncio_future_blocking
    assert any(entry[3] is future for entry in loop._vt_heap)
    return awaiting, future, loop._vt_timers.cancelled


@pytest.mark.parametrize("how", ["throw", "close"])
def test_a_kit_sleep_given_up_by_hand_leaves_its_entry_dead(sleep_path: str, how: str) -> None:
    """throw() and close() at the suspension: the future is cancelled, so its heap entry is
    dead (and, like every dead native entry, not counted), the process has no interrupt
    target left, and the sleep cannot be reused."""

    async def proc() -> tuple[bool, int, object, list[bool]]:
        loop: Any = asyncio.get_running_loop()
        me = sim.current_process()
        assert me is not None
        await sim.sleep(0)  # a ready queue is never empty at the start: wait one turn
        sim.start(nap())  # something due before 5, so the sleep must really suspend
        awaiting, future, dead_before = _suspended_sleep(loop)
        assert me._target is future
        compiled = sleep_path == "as-built" and virtualtime._engine._compiled.COMPILED
        assert type(awaiting).__name__ == ("KitNap" if compiled else "generator")
        if how == "throw":
            with pytest.raises(ValueError, match="given up"):
                awaiting.throw(ValueError("given up"))
        else:
            assert awaiting.close() is None
        with pytest.raises((RuntimeError, StopIteration)):
            awaiting.send(None)
        entry = [_timers.is_dead(e[3]) for e in loop._vt_heap if e[3] is future]
        return future.cancelled(), loop._vt_timers.cancelled - dead_before, me._target, entry

    async def nap() -> None:
        await sim.sleep(1)

    async def main() -> tuple[bool, int, object, list[bool]]:
        return await sim.start(proc())

    assert sim.simulate(main) == (True, 0, None, [True])


def test_a_kit_sleep_resolved_by_the_loop_is_not_counted_dead(sleep_path: str) -> None:
    """Interrupted after the loop resolved its sleep but before it ran, a process finishes
    that sleep normally -- nothing is counted dead -- and the interrupt is raised at its next
    kit await."""

    async def sleeper(log: list[str]) -> None:
        await sim.sleep(2)
        log.append(f"woke {sim.now()}")
        try:
            await sim.sleep(10)
        except sim.Interrupt as exc:
            log.append(f"interrupted {exc.cause} at {sim.now()}")

    async def main() -> tuple[list[str], int]:
        loop: Any = asyncio.get_running_loop()
        log: list[str] = []
        target = sim.start(sleeper(log))
        await sim.sleep(2)  # pushed before the sleeper's: at 2 this process runs first
        assert target._target is not None
        assert target._target.done()
        target.interrupt("late")
        await sim.sleep(1)
        return log, loop._vt_timers.cancelled

    state = sim.simulate(main)
    assert state == (["woke 2.0", "interrupted late at 2.0"], 0)


@pytest.mark.parametrize("delay", [-1, -0.5, math.nan, "5", True, None, [1], -(10**30)], ids=repr)
def test_the_compiled_sim_sleep_refuses_what_the_reference_refuses(delay: object) -> None:
    with pytest.raises(Exception) as compiled:
        sim.sleep(delay)  # type: ignore[arg-type]
    with pytest.raises(Exception) as reference:
        _sleep.pure_sleep(delay)  # type: ignore[arg-type]
    assert type(compiled.value) is type(reference.value)
    assert str(compiled.value) == str(reference.value)
    assert "delay" in str(compiled.value)


@pytest.mark.parametrize("delay", [0, 0.0, 2.5, 10**30, math.inf], ids=repr)
def test_the_compiled_sim_sleep_makes_the_reference_object(delay: float) -> None:
    made, expected = sim.sleep(delay), _sleep.pure_sleep(delay)
    assert type(made) is type(expected) is _sleep._Sleep
    assert made._delay == expected._delay == delay
    assert made._undo is None
    assert expected._undo is None
    assert repr(made) == repr(expected) == f"<sim.sleep({delay!r})>"
    made._abandon()  # taken back unawaited: no "never awaited" warning
    expected._abandon()


def test_the_compiled_sim_now_reads_the_reference_clock() -> None:
    seen: list[tuple[float, float]] = []
    inside: list[contextvars.Context] = []

    async def main() -> None:
        for delay in (0, 1.5, 0.25, 3):
            await sim.sleep(delay)
            seen.append((sim.now(), _sleep.pure_now()))
        inside.append(contextvars.copy_context())

    with pytest.raises(virtualtime.VirtualTimeError) as compiled:
        sim.now()
    with pytest.raises(virtualtime.VirtualTimeError) as reference:
        _sleep.pure_now()
    assert str(compiled.value) == str(reference.value)
    sim.simulate(main, until=10)
    assert seen == [(0.0, 0.0), (1.5, 1.5), (1.75, 1.75), (4.75, 4.75)]
    # Read again from the model's context after the run: the instant the run ended.
    assert inside[0].run(sim.now) == inside[0].run(_sleep.pure_now) == 10.0


def test_canary_sim_sleep_and_now_are_compiled_exactly_when_the_core_is() -> None:
    compiled = virtualtime._engine._compiled.COMPILED
    assert (sim.sleep is not _sleep.pure_sleep) is compiled
    assert (sim.now is not _sleep.pure_now) is compiled
    if compiled:
        core = virtualtime._engine._compiled.core
        assert sim.now is core.kit_now
        # sim.sleep(delay) and sim.sleep(delay, value) are the compiled maker itself (no
        # Python frame), and the compiled base marks an awaited sleep and warns about one
        # never awaited itself: _Sleep adds no Python __await__ or __del__ on top.
        assert core.KIT_SLEEP_VALUE == 1
        assert sim.sleep is core.kit_sleep
        assert _sleep._MARKS_AWAITED
        assert "__await__" not in vars(_sleep._Sleep)
        assert "__del__" not in vars(_sleep._Sleep)
    else:
        assert not _sleep._MARKS_AWAITED
        assert "__del__" in vars(_sleep._Sleep)


def _makers() -> list[Any]:
    """Every maker of a kit sleep in this build: the public one, the reference and, compiled,
    the compiled maker called directly."""
    makers: list[Any] = [sim.sleep, _sleep.pure_sleep]
    if virtualtime._engine._compiled.COMPILED:
        makers.append(virtualtime._engine._compiled.core.kit_sleep)
    return makers


@pytest.mark.parametrize(
    "delay", [10**400, 2 * 10**308, -(10**400)], ids=["1e400", "2e308", "-1e400"]
)
def test_every_sim_sleep_maker_refuses_an_int_too_large_for_a_float(delay: int) -> None:
    for make in _makers():
        with pytest.raises(virtualtime.InvalidValueError) as refused:
            make(delay)
        assert "delay" in str(refused.value)
        assert f"{len(str(abs(delay)))} digits" in str(refused.value)


def test_every_sim_sleep_maker_takes_a_value_and_the_reference_signature() -> None:
    """``sleep(delay, value)``, positional or by keyword, on every maker; None as the value is
    a plain sleep (SimPy's ``timeout(d)``), anything else a sleep whose await returns it."""

    async def main(make: Any) -> list[object]:
        got: list[object] = []
        for nap in (
            make(2, "late"),
            make(1, value=("a", 1)),
            make(delay=1, value=0),
            make(1, None),
            make(0.5),
        ):
            got.append(type(nap).__name__)
            got.append(await nap)
        got.append(sim.now())
        return got

    expected = ["_ValueSleep", "late", "_ValueSleep", ("a", 1), "_ValueSleep", 0]
    expected += ["_Sleep", None, "_Sleep", None, 5.5]
    for make in _makers():
        assert sim.simulate(main, make) == expected
        with pytest.raises(TypeError, match="delay"):
            make()
        with pytest.raises(TypeError):
            make(1, 2, 3)


def test_a_compiled_sleep_never_awaited_warns_in_the_reference_words() -> None:
    messages: list[str] = []
    for make in _makers():
        with pytest.warns(RuntimeWarning) as caught:
            make(2.5)  # dropped unawaited: reported when it goes
        messages.extend(str(w.message) for w in caught)
    assert messages == [
        "coroutine 'sim.sleep' was never awaited: <sim.sleep(2.5)> waits only when awaited "
        "(write 'await sim.sleep(...)')"
    ] * len(_makers())


def test_a_sleep_never_awaited_leaves_an_exception_on_its_way_alone() -> None:
    """The warning is given while an exception is on its way (the sleep, still on the
    evaluation stack, dropped as the error unwinds the frame): the exception that reaches the
    caller is the model's own, unchanged."""

    def drop_then_fail(make: Any, zero: int) -> tuple[object, int]:
        return (make(3), 1 // zero)  # the sleep is made, then the division fails

    for make in _makers():
        with (
            pytest.warns(RuntimeWarning, match="never awaited"),
            pytest.raises(ZeroDivisionError) as raised,
        ):
            drop_then_fail(make, 0)
        assert type(raised.value) is ZeroDivisionError
        assert raised.value.__context__ is None
