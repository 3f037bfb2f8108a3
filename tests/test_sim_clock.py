"""virtualtime.sim.Clock: Ruck's clock tree (checklist B), synchronous and on both backends."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Hashable
from fractions import Fraction
from typing import Any

import anyio
import pytest
from conftest import Runner
from hypothesis import given, settings
from hypothesis import strategies as st

from virtualtime import VirtualTimeError
from virtualtime.sim import Clock, TriggerClock


def ruck_tree() -> tuple[Clock, Clock, Clock, Clock]:
    """Ruck's spec tree: root(x1) -> c1(x1), c2(x2) -> c3(x2)."""
    root = Clock()
    c1 = root.add_child_clock(Clock(1.0))
    c2 = root.add_child_clock(Clock(2.0))
    c3 = c2.add_child_clock(Clock(2.0))
    return root, c1, c2, c3


def snapshot(clock: Clock) -> list[tuple[float, float, tuple[tuple[Hashable, float], ...]]]:
    """Everything observable about a manual tree, to check that a failed call changed nothing."""
    return [(c.rate, c.now, c.occurrences) for c in clock._subtree()]


# ---------------------------------------------------------------------------- B1 - B4


def test_B1_new_clock_starts_at_zero() -> None:
    clock = Clock(1.0)
    assert clock.now == 0.0
    assert clock.rate == 1.0
    assert clock.parent is None
    assert not clock.follows_loop
    assert clock.next() is None


def test_B2_fast_forward_multiplies_rates_down_the_tree() -> None:
    root, c1, c2, c3 = ruck_tree()
    root.fast_forward(1)
    assert (root.now, c1.now, c2.now, c3.now) == (1.0, 1.0, 2.0, 4.0)
    assert c3.effective_rate == 4.0


def test_B2_root_rate_scales_its_own_time() -> None:
    root = Clock(3.0)
    child = root.child(rate=0.5)
    root.fast_forward(2)
    assert root.now == 6.0
    assert child.now == 3.0


def test_B3_only_the_root_is_fast_forwarded() -> None:
    root, _, c2, c3 = ruck_tree()
    before = snapshot(root)
    with pytest.raises(VirtualTimeError, match="only for the root"):
        c2.fast_forward(1)
    assert snapshot(root) == before
    root.fast_forward(0.25)
    assert c3.now == 1.0  # the children moved in lock-step with the root


def test_B3_tree_following_the_loop_is_not_fast_forwarded(run: Runner) -> None:
    async def main() -> float:
        root = Clock()
        with pytest.raises(VirtualTimeError, match="follows the event loop"):
            root.fast_forward(1)
        return root.now

    assert run(main) == 0.0


def test_B4_add_child_clock_is_idempotent_sets_parent_and_returns_it() -> None:
    root = Clock()
    child = Clock(2.0)
    assert root.add_child_clock(child) is child
    assert root.add_child_clock(child) is child
    assert child.parent is root
    assert root.children == (child,)
    assert child.root is root


def test_B4_a_clock_has_at_most_one_parent() -> None:
    first, second = Clock(), Clock()
    child = first.child(rate=2.0)
    child.schedule("x", 3)
    before = snapshot(first), snapshot(second)
    with pytest.raises(ValueError, match="already has a parent"):
        second.add_child_clock(child)
    assert child.parent is first
    assert second.children == ()
    assert (snapshot(first), snapshot(second)) == before


def test_B4_cycles_are_rejected() -> None:
    root = Clock()
    grandchild = root.child().child()
    with pytest.raises(ValueError, match="cycle"):
        grandchild.add_child_clock(root)
    with pytest.raises(ValueError, match="cycle"):
        root.add_child_clock(root)
    assert root.parent is None
    assert grandchild.children == ()


def test_B4_add_child_clock_rejects_non_clocks() -> None:
    root = Clock()
    with pytest.raises(TypeError, match="clock must be a Clock"):
        root.add_child_clock("fast")  # type: ignore[type-var]
    assert root.children == ()


def test_B4_attached_clock_keeps_its_reading() -> None:
    root = Clock()
    root.fast_forward(10)
    late = root.add_child_clock(Clock(2.0))
    assert late.now == 0.0  # a new clock starts at 0, whenever it joins
    root.fast_forward(1)
    assert late.now == 2.0


# ---------------------------------------------------------------------------- B5 - B9


def test_B5_schedule_is_absolute_in_the_clocks_own_units() -> None:
    root, _, c2, _ = ruck_tree()
    root.fast_forward(1)  # c2.now == 2
    c2.schedule("later", 6)
    c2.schedule("now")  # defaults to c2.now
    assert c2.occurrences == (("now", 2.0), ("later", 6.0))
    assert root.next() == ("now", 0.0)


def test_B5_scheduling_again_moves_the_object() -> None:
    clock = Clock()
    clock.schedule("a", 5)
    clock.schedule("b", 3)
    clock.schedule("a", 1)
    assert clock.occurrences == (("a", 1.0), ("b", 3.0))
    assert clock.unschedule_next() == ("a", 1.0)
    assert clock.unschedule_next() == ("b", 3.0)
    assert clock.unschedule_next() is None  # the moved-away entry is gone for good


def test_B5_same_object_on_two_clocks_is_two_occurrences() -> None:
    root = Clock()
    child = root.child(rate=2.0)
    root.schedule("o", 5)
    child.schedule("o", 4)
    assert root.unschedule_next() == ("o", 2.0)
    assert root.unschedule_next() == ("o", 5.0)


def test_B6_next_converts_to_parent_units() -> None:
    root, _, c2, c3 = ruck_tree()
    c2.schedule("o", 4)
    assert root.next() == ("o", 2.0)
    c2.unschedule("o")
    c3.schedule("o", 8)
    assert root.next() == ("o", 2.0)
    assert c2.next() == ("o", 2.0)  # from c2: its parent is root, one rate fewer on the path
    assert c3.next() == ("o", 4.0)
    root.fast_forward(1)
    assert root.next() == ("o", 1.0)
    assert root.next() == ("o", 1.0)  # next() does not remove


def test_B7_unschedule_next_returns_and_removes() -> None:
    expected = {0: 4.0, 1: 4.0, 2: 2.0, 3: 1.0}
    for index, rel in expected.items():
        clocks = ruck_tree()
        root = clocks[0]
        clocks[index].schedule("o", 4)
        assert root.unschedule_next() == ("o", rel)
        assert root.unschedule_next() is None
        assert root.next() is None


def test_B8_unschedule_searches_the_clock_then_each_child() -> None:
    root, c1, _, c3 = ruck_tree()
    c3.schedule("o", 4)
    assert root.unschedule("o") == 1.0
    assert root.unschedule("o") is None
    assert root.unschedule("never scheduled") is None
    root.schedule("p", 3)
    c1.schedule("p", 1)
    assert root.unschedule("p") == 3.0  # the clock's own occurrence first
    assert root.unschedule("p") == 1.0  # then the children's
    assert root.next() is None


def test_B9_clear_empties_the_whole_subtree() -> None:
    root, c1, c2, c3 = ruck_tree()
    for clock in (root, c1, c2, c3):
        clock.schedule(("o", id(clock)), 1)
    c2.clear()
    assert c2.occurrences == ()
    assert c3.occurrences == ()
    assert len(root.occurrences) == 1
    assert len(c1.occurrences) == 1
    root.clear()
    assert root.next() is None
    assert all(clock.occurrences == () for clock in (root, c1, c2, c3))


# ---------------------------------------------------------------------------- B10 - B12


def test_B10_rate_change_retimes_pending_occurrences() -> None:
    root, c1, _, _ = ruck_tree()
    root.schedule("o0", 3)
    c1.schedule("o1", 4)
    assert root.next() == ("o0", 3.0)
    c1.rate = 2
    assert root.next() == ("o1", 2.0)
    c1.rate = 0  # paused: its occurrence can never come due
    assert root.next() == ("o0", 3.0)
    assert root.unschedule("o1") == math.inf
    assert c1.occurrences == ()


def test_B11_order_is_global_across_clocks() -> None:
    rng = random.Random(11)
    root = Clock()
    expected: list[tuple[Fraction, str]] = []
    for index in range(10):
        rate = rng.choice([0.25, 0.5, 1.0, 2.0, 3.0, 10.0])
        child = root.child(rate=rate)
        for item in range(10):
            time = round(rng.uniform(0, 100), 3)
            name = f"{index}.{item}"
            child.schedule(name, time)
            expected.append((Fraction(repr(time)) / Fraction(repr(rate)), name))
    seen: list[tuple[Hashable, float]] = []
    while (found := root.unschedule_next()) is not None:
        seen.append(found)
    assert [name for name, _ in seen] == [name for _, name in sorted(expected)]
    assert [rel for _, rel in seen] == sorted(rel for _, rel in seen)
    assert root.unschedule_next() is None


def test_B12_run_one_fast_forwards_and_calls() -> None:
    root = Clock()
    child = root.child(rate=2.0)
    calls: list[tuple[str, float]] = []

    def shred(name: str) -> Callable[[], None]:
        def call() -> None:
            calls.append((name, root.now))

        return call

    a, b, c = shred("a"), shred("b"), shred("c")
    root.schedule(a, 3)
    child.schedule(b, 2)  # root time 1
    root.schedule(c)  # now: no fast-forward needed
    assert root.run_one() is c
    assert root.run_one() is b
    assert root.run_one() is a
    assert root.run_one() is None
    assert calls == [("c", 0.0), ("b", 1.0), ("a", 3.0)]
    assert root.now == 3.0


def test_B12_run_one_never_moves_time_backwards_for_overdue_objects() -> None:
    root = Clock()
    root.fast_forward(5)
    calls: list[float] = []
    root.schedule(lambda: calls.append(root.now), 2)
    root.run_one()
    assert calls == [5.0]
    assert root.now == 5.0


def test_B12_run_runs_until_nothing_is_left() -> None:
    root = Clock()
    calls: list[float] = []

    def again() -> None:
        calls.append(root.now)
        if len(calls) < 4:
            root.schedule(again, root.now + 0.5)

    root.schedule(again, 1)
    root.run()
    assert calls == [1.0, 1.5, 2.0, 2.5]
    assert root.next() is None


def test_B12_run_until_runs_what_is_due_then_moves_to_the_target() -> None:
    root = Clock()
    calls: list[float] = []
    for t in (1, 2, 3):
        root.schedule(lambda: calls.append(root.now), t)
    root.run_until(2)
    assert calls == [1.0, 2.0]  # the boundary is inclusive
    assert root.now == 2.0
    root.run_until(2.5)
    assert root.now == 2.5
    assert calls == [1.0, 2.0]
    root.run_until(1.0)  # in the past: returns at once, nothing changes
    assert root.now == 2.5
    assert len(root.occurrences) == 1


def test_B12_run_one_rejects_non_callables_and_keeps_them() -> None:
    root = Clock()
    root.schedule("plain", 1)
    with pytest.raises(TypeError, match="not callable"):
        root.run_one()
    assert root.next() == ("plain", 1.0)
    assert root.now == 0.0


def test_B12_trigger_clock_parks_until_fire() -> None:
    root = Clock()
    events = root.add_child_clock(TriggerClock())
    root.schedule("timed", 5)
    events.wait("w1", "door")
    events.wait("w2", "door")
    events.wait("w3", "bell")
    assert root.next() == ("timed", 5.0)
    assert events.waiting("door") == ("w1", "w2")
    assert events.fire("door") == 2
    assert root.unschedule_next() == ("w1", 0.0)
    assert root.unschedule_next() == ("w2", 0.0)
    assert root.unschedule_next() == ("timed", 5.0)
    assert root.unschedule("w3") == math.inf  # parked, removed, never due
    assert events.fire("bell") == 0
    assert root.next() is None


def test_B12_trigger_clock_clear_drops_parked_objects() -> None:
    events = TriggerClock()
    events.wait("w", "e")
    events.clear()
    assert events.fire("e") == 0
    assert events.next() is None


def test_B12_trigger_clock_keys_each_object_once() -> None:
    events = TriggerClock()
    events.schedule("x", 5)
    events.wait("x", "door")  # parking moves it off the timeline
    assert (events.occurrences, events.waiting("door")) == ((), ("x",))
    events.schedule("x", 2)  # filing it moves it back
    assert (events.occurrences, events.waiting("door")) == ((("x", 2.0),), ())
    with pytest.raises(TypeError, match="trigger must be hashable"):
        events.wait("y", ["door"])  # type: ignore[arg-type]
    assert events.waiting("door") == ()


# ---------------------------------------------------------------------------- B13 - B14


def test_B13_rate_change_is_not_retroactive() -> None:
    root = Clock()
    child = root.child(rate=1.0)
    root.fast_forward(5)  # only the root moves; the rate change below needs no fast-forward
    child.rate = 5000
    assert child.now == 5.0  # Ruck would now read 25,000
    child.schedule("x", child.now + 5000)
    assert root.next() == ("x", 1.0)
    root.fast_forward(1)
    assert child.now == 5005.0


def test_B13_rate_change_keeps_elapsed_time_without_fast_forward() -> None:
    root = Clock()
    child = root.child(rate=2.0)
    child.schedule("x", 10)  # due at root 5
    root.fast_forward(2)  # child at 4: 6 child units left
    child.rate = 3.0
    assert root.next() == ("x", 2.0)
    child.rate = 0.0
    root.fast_forward(100)
    assert child.now == 4.0
    child.rate = 6.0
    assert root.next() == ("x", 1.0)


def test_B14_cross_clock_order_after_time_advances() -> None:
    root = Clock()
    child = root.child(rate=1.0)
    root.fast_forward(10)
    root.schedule("a", 12)
    child.schedule("b", 15)
    assert root.unschedule_next() == ("a", 2.0)  # Ruck HEAD yields b first
    assert root.unschedule_next() == ("b", 5.0)


def test_B14_rate_setter_works_on_roots_and_empty_clocks() -> None:
    root = Clock()
    root.rate = 2.0  # no parent, no occurrences: Ruck would fail on nil
    root.fast_forward(1)
    assert root.now == 2.0
    empty = root.child()
    empty.rate = 0.5
    assert empty.next() is None


def test_B14_ties_are_first_scheduled_first() -> None:
    root = Clock()
    fast = root.child(rate=2.0)
    slow = root.child(rate=0.5)
    slow.schedule("first", 1)  # root time 2
    root.schedule("second", 2)
    fast.schedule("third", 4)  # root time 2
    order = [root.unschedule_next() for _ in range(3)]
    assert order == [("first", 2.0), ("second", 2.0), ("third", 2.0)]


@st.composite
def tree_operations(draw: st.DrawFn) -> list[tuple[str, int, float]]:
    kinds = st.sampled_from(["schedule", "schedule", "schedule", "rate", "forward"])
    return draw(
        st.lists(
            st.tuples(kinds, st.integers(0, 4), st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 4.0])),
            min_size=1,
            max_size=40,
        )
    )


@settings(max_examples=60, deadline=None)
@given(tree_operations())
def test_B11_B14_order_matches_exact_root_time_under_any_history(
    operations: list[tuple[str, int, float]],
) -> None:
    """Whatever the fast-forwards and rate changes, order is (exact root time, FIFO)."""
    root = Clock()
    clocks = [root, root.child(2.0), root.child(0.5)]
    clocks += [clocks[1].child(3.0), clocks[2].child(1.0)]
    filed: dict[str, tuple[Clock, float, int]] = {}
    for step, (kind, index, value) in enumerate(operations):
        clock = clocks[index]
        if kind == "schedule":
            name = f"o{step}"
            clock.schedule(name, clock.now + value * 3)
            filed[name] = (clock, clock.now + value * 3, step)
        elif kind == "rate" and clock is not root:
            clock.rate = value
        elif kind == "forward":
            root.fast_forward(value)

    def root_time(clock: Clock, local: float) -> Fraction | None:
        instant = clock._to_base(Fraction(round(local * 1e9)))
        return instant

    due = []
    for name, (clock, local, step) in filed.items():
        instant = root_time(clock, local)
        if instant is not None:
            due.append((instant, step, name))
    got = []
    while (found := root.unschedule_next()) is not None:
        got.append(found[0])
    assert got == [name for _, _, name in sorted(due)]


# ---------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("value", "error"),
    [(-1.0, ValueError), (math.nan, ValueError), (math.inf, ValueError), ("2", TypeError)],
)
def test_bad_rates_are_rejected_and_change_nothing(value: Any, error: type[Exception]) -> None:
    root, _, c2, _ = ruck_tree()
    c2.schedule("x", 3)
    root.fast_forward(1)
    before = snapshot(root)
    with pytest.raises(error, match="rate"):
        c2.rate = value
    with pytest.raises(error, match="rate"):
        root.child(rate=value)
    with pytest.raises(error, match="rate"):
        Clock(value)
    assert snapshot(root) == before
    assert len(root.children) == 2


@pytest.mark.parametrize("value", [-0.5, math.nan, math.inf])
def test_bad_fast_forward_is_rejected_and_changes_nothing(value: float) -> None:
    root, *_ = ruck_tree()
    root.fast_forward(1)
    before = snapshot(root)
    with pytest.raises(ValueError, match="dt"):
        root.fast_forward(value)
    assert snapshot(root) == before


def test_bad_schedule_times_and_objects_are_rejected() -> None:
    root, _, c2, _ = ruck_tree()
    c2.schedule("keep", 2)
    before = snapshot(root)
    with pytest.raises(ValueError, match="time"):
        c2.schedule("x", math.nan)
    with pytest.raises(ValueError, match="time"):
        c2.schedule("x", -math.inf)
    with pytest.raises(TypeError, match="time"):
        c2.schedule("x", "soon")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="hashable"):
        c2.schedule(["not", "hashable"], 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="time"):
        root.run_until(math.nan)
    assert snapshot(root) == before


def test_follow_loop_needs_a_running_loop() -> None:
    with pytest.raises(VirtualTimeError, match="no event loop is running"):
        Clock(follow_loop=True)
    with pytest.raises(TypeError, match="follow_loop"):
        Clock(follow_loop=1)  # type: ignore[arg-type]


def test_paused_manual_root_cannot_run_until_a_later_time() -> None:
    root = Clock(0.0)
    with pytest.raises(VirtualTimeError, match="paused"):
        root.run_until(1)
    assert root.now == 0.0


# ---------------------------------------------------------------------------- on a loop


def test_root_follows_the_loop(run: Runner) -> None:
    async def main() -> list[float]:
        await anyio.sleep(3)
        root = Clock()
        double = Clock(2.0)  # a second root, made at loop time 3
        seen = [root.now, double.now]
        await anyio.sleep(1.5)
        return [*seen, root.now, double.now, anyio.current_time()]

    assert run(main) == [3.0, 3.0, 4.5, 6.0, 4.5]


def test_child_sleeps_in_its_own_units(run: Runner) -> None:
    async def main() -> list[float]:
        root = Clock()
        music = root.child(rate=2.0)
        beat = music.child(rate=0.5)
        await music.sleep(1.0)
        after_music = anyio.current_time()
        await beat.sleep(1.0)
        after_beat = anyio.current_time()
        await music.sleep_until(10)
        return [after_music, after_beat, music.now, beat.now, anyio.current_time()]

    assert run(main) == [0.5, 1.5, 10.0, 5.0, 5.0]


def test_B13_pause_keeps_remaining_time_and_speed_change_retimes(run: Runner) -> None:
    async def main() -> list[float]:
        root = Clock()
        music = root.child(rate=2.0)
        woke: list[float] = []

        async def sleeper() -> None:
            await music.sleep(10)  # 5 loop seconds at rate 2
            woke.append(anyio.current_time())

        async with anyio.create_task_group() as tg:
            tg.start_soon(sleeper)
            await anyio.sleep(1)  # music: 2 of 10 done
            music.rate = 0.0
            await anyio.sleep(2)  # paused: nothing elapses
            assert music.now == 2.0
            music.rate = 4.0  # 8 left at 4x: 2 more loop seconds
        return [*woke, music.now]

    assert run(main) == [5.0, 10.0]


def test_B13_descendant_sleepers_are_retimed(run: Runner) -> None:
    async def main() -> dict[str, float]:
        root = Clock()
        parent = root.child(rate=1.0)
        child = parent.child(rate=2.0)
        grandchild = child.child(rate=0.5)
        woke: dict[str, float] = {}

        async def sleep_on(name: str, clock: Clock, dt: float) -> None:
            await clock.sleep(dt)
            woke[name] = anyio.current_time()

        async with anyio.create_task_group() as tg:
            tg.start_soon(sleep_on, "child", child, 8.0)  # at rate 2: loop 4
            tg.start_soon(sleep_on, "grandchild", grandchild, 4.0)  # at rate 1: loop 4
            tg.start_soon(sleep_on, "sibling", root.child(), 4.0)  # unaffected
            await anyio.sleep(2)  # child at 4 of 8, grandchild at 2 of 4
            parent.rate = 0.5  # halves everything below: 4 child units at 1x, 2 gc at 0.5x
        return woke

    assert run(main) == {"sibling": 4.0, "child": 6.0, "grandchild": 6.0}


def test_sleep_on_a_paused_clock_waits_for_resume(run: Runner) -> None:
    async def main() -> tuple[bool, float]:
        root = Clock()
        paused = root.child(rate=0.0)
        with anyio.move_on_after(100) as scope:
            await paused.sleep(1)
        timed_out = scope.cancelled_caught
        assert not paused._sleepers  # the cancelled sleeper unregistered itself

        async def resume() -> None:
            await anyio.sleep(5)
            paused.rate = 1.0

        async with anyio.create_task_group() as tg:
            tg.start_soon(resume)
            await paused.sleep(1)
        return timed_out, anyio.current_time()

    assert run(main) == (True, 106.0)


def test_sleep_until_the_past_returns_at_once(run: Runner) -> None:
    async def main() -> float:
        root = Clock()
        await anyio.sleep(2)
        await root.sleep_until(1)
        await root.sleep(0)
        return anyio.current_time()

    assert run(main) == 2.0


def test_sleep_on_a_manual_tree_wakes_when_fast_forwarded(run: Runner) -> None:
    async def main() -> list[float]:
        manual = Clock(follow_loop=False)
        child = manual.child(rate=2.0)
        woke: list[float] = []

        async def sleeper() -> None:
            await child.sleep(4)  # manual time 2
            woke.append(manual.now)

        async with anyio.create_task_group() as tg:
            tg.start_soon(sleeper)
            await anyio.sleep(0.1)
            manual.fast_forward(1)
            await anyio.sleep(0.1)
            assert woke == []
            manual.fast_forward(1.5)
        return [*woke, anyio.current_time()]

    assert run(main) == [2.5, 0.2]


def test_next_on_a_loop_bound_tree_is_a_loop_delay(run: Runner) -> None:
    async def main() -> list[Any]:
        root = Clock()
        slow = root.child(rate=0.25)
        slow.schedule("tick", 1.0)  # loop time 4
        found = root.next()
        assert found is not None
        await anyio.sleep(found[1])
        return [found, root.next(), slow.now, anyio.current_time()]

    assert run(main) == [("tick", 4.0), ("tick", 0.0), 1.0, 4.0]


def test_attaching_a_clock_retimes_its_sleepers(run: Runner) -> None:
    async def main() -> float:
        root = Clock()
        loose = Clock(1.0)  # its own root, following the loop
        done = anyio.Event()

        async def sleeper() -> None:
            await loose.sleep(4)
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(sleeper)
            await anyio.sleep(1)
            root.child(rate=2.0).add_child_clock(loose)  # 3 left, now at 2x
            await done.wait()
        return anyio.current_time()

    assert run(main) == 2.5


@pytest.mark.parametrize("value", [-1.0, math.nan, math.inf])
def test_bad_sleep_delays_are_rejected(run: Runner, value: float) -> None:
    async def main() -> float:
        clock = Clock()
        with pytest.raises(ValueError, match="delay"):
            await clock.sleep(value)
        if not math.isinf(value):
            with pytest.raises(ValueError, match="deadline"):
                await clock.sleep_until(value if math.isnan(value) else math.inf)
        return anyio.current_time()

    assert run(main) == 0.0


def test_repr_shows_kind_rate_and_time() -> None:
    root = Clock()
    child = root.child(rate=2.0)
    assert repr(root) == "<Clock manual rate=1.0 now=0.0>"
    assert repr(child) == "<Clock child rate=2.0 now=0.0>"
