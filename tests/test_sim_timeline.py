"""virtualtime.sim.Timeline: Nit's event queue (checklist C), no loop and both backends."""

from __future__ import annotations

import math

import anyio
import pytest
from conftest import Runner
from hypothesis import given, settings
from hypothesis import strategies as st

from virtualtime.sim import Timeline, TimelineEntry


def names(infos: list[TimelineEntry[str]]) -> list[str]:
    return [info.item for info in infos]


def canonical() -> Timeline[str]:
    queue: Timeline[str] = Timeline()
    queue.add("1..2", 1, 1)
    queue.add("2..10", 2, 8)
    queue.add("1.5", 1.5)
    return queue


# ---------------------------------------------------------------------------- C1 - C4


def test_C1_time_starts_at_zero() -> None:
    queue: Timeline[str] = Timeline()
    assert queue.time == 0.0
    assert len(queue) == 0
    assert queue.update(0) == []


def test_C2_add_and_add_at_return_event_infos() -> None:
    queue: Timeline[str] = Timeline()
    queue.update(3)
    relative = queue.add("relative", 2, 5)
    absolute = queue.add_at("absolute", 2, 5)
    assert isinstance(relative, TimelineEntry)
    assert isinstance(absolute, TimelineEntry)
    assert (relative.start, relative.duration, relative.item) == (5.0, 5.0, "relative")
    assert (absolute.start, absolute.duration) == (2.0, 5.0)
    assert relative.timeline is queue
    assert math.isnan(relative.time)
    assert math.isnan(relative.dt)
    assert (relative.completion, relative.occurrences, relative.has_expired) == (0.0, 0, False)


def test_C2_duration_none_or_zero_is_instant_and_inf_never_expires() -> None:
    queue: Timeline[str] = Timeline()
    none = queue.add("none", 1)
    zero = queue.add("zero", 1, 0)
    forever = queue.add("forever", 1, math.inf)
    assert (none.duration, zero.duration, forever.duration) == (0.0, 0.0, math.inf)
    assert names(queue.update(1)) == ["none", "zero", "forever"]
    assert (none.has_expired, zero.has_expired, forever.has_expired) == (True, True, False)
    queue.update(1e6)
    assert names(queue.update(1e6)) == ["forever"]
    assert (forever.completion, forever.has_expired, forever.time) == (0.0, False, 2e6)


def test_C3_update_steps() -> None:
    queue: Timeline[str] = Timeline()
    ended = queue.add("ended", 0, 1)
    later = queue.add("later", 3, 2)
    assert names(queue.update(1)) == ["ended"]  # 1. time += dt  3./4. activated, expired at 1
    assert ended.has_expired
    assert queue.time == 1.0
    assert names(queue.update(0)) == []  # 2. dropped; time moves by dt=0 "always"
    assert queue.time == 1.0
    result = queue.update(2.5)  # 3. later (start 3) activates at 3.5
    assert names(result) == ["later"]
    assert (later.time, later.dt, later.completion, later.occurrences) == (0.5, 0.5, 0.25, 1)
    assert names(queue.update(2)) == ["later"]  # 5. returned although it just expired
    assert (later.time, later.dt, later.completion, later.has_expired) == (2.5, 2.0, 1.25, True)
    assert queue.update(1) == []
    assert queue.time == 6.5


def test_C4_canonical_example() -> None:
    queue = canonical()
    assert names(queue.update(1)) == ["1..2"]
    infos = queue.update(1)
    assert names(infos) == ["1..2", "1.5", "2..10"]
    assert queue.time == 2.0
    assert [info.time for info in infos] == [1.0, 0.5, 0.0]
    assert [info.completion for info in infos] == [1.0, math.inf, 0.0]
    assert [info.occurrences for info in infos] == [2, 1, 1]
    assert [info.has_expired for info in infos] == [True, True, False]
    assert names(queue.update(1)) == ["2..10"]
    assert queue.time == 3.0


def test_C4_continued_expire_and_fluent_chain() -> None:
    queue = canonical()
    for _ in range(3):
        infos = queue.update(1)
    infos[0].expire()
    assert queue.update(1) == []
    fluent: Timeline[str] = Timeline()
    e4 = fluent.add("e1", 10, 5).add_after("e2", 2, 5).add_sync("e3", 2, 5).add_before("e4", 2, 5)
    assert e4.start == 12.0


# ---------------------------------------------------------------------------- C5 - C12


def test_C5_an_expiring_event_is_returned_once_more_then_never() -> None:
    queue: Timeline[str] = Timeline()
    info = queue.add("e", 0, 2)
    assert (names(queue.update(1)), info.has_expired) == (["e"], False)
    assert (names(queue.update(1)), info.has_expired) == (["e"], True)
    for _ in range(3):
        assert queue.update(1) == []
    assert info.occurrences == 2
    assert len(queue) == 0


def test_C6_expire() -> None:
    queue: Timeline[str] = Timeline()
    e1 = queue.add("active", 0, 10)
    e2 = queue.add("not active", 2, 10)
    assert queue.update(1) == [e1]
    e1.expire()
    e2.expire()
    assert queue.update(2) == []
    assert (e1.occurrences, e2.occurrences) == (1, 0)
    assert e1.has_expired
    assert e2.has_expired


def test_C7_order_old_actives_then_new_by_start_fifo_on_ties() -> None:
    queue: Timeline[str] = Timeline()
    queue.add("late starter", 1, 10)
    queue.add("first", 0, 10)
    queue.update(0.5)
    queue.add("tie-a", 0.5, 1)
    queue.add("early", 0.2, 1)
    queue.add("tie-b", 0.5, 1)
    queue.add("tie-c", 0.5, 1)
    assert names(queue.update(1)) == ["first", "early", "late starter", "tie-a", "tie-b", "tie-c"]
    assert names(queue.update(0.5)) == ["first", "early", "late starter", "tie-a", "tie-b", "tie-c"]


def test_C8_fluent_relative_events() -> None:
    queue: Timeline[str] = Timeline()
    e1 = queue.add("e1", 10, 5)
    e2 = e1.add_after("e2", 2, 5)
    e3 = e2.add_sync("e3", 2, 5)
    e4 = e3.add_before("e4", 2, 5)
    assert [e.start for e in (e1, e2, e3, e4)] == [10.0, 17.0, 19.0, 12.0]
    instant = e1.add_before("instant", 1)  # duration None -> 0
    assert (instant.start, instant.duration) == (9.0, 0.0)
    assert e1.add_after("contiguous", 0).start == 15.0
    assert e1.add_sync("together", 0, 3).start == 10.0
    assert all(info.timeline is queue for info in (e2, e3, e4, instant))


def test_C9_an_event_inside_one_step_is_returned_once_expired() -> None:
    queue: Timeline[str] = Timeline()
    info = queue.add("blink", 1, 2)
    assert queue.update(10) == [info]
    assert info.has_expired
    assert (info.time, info.dt, info.occurrences) == (9.0, 9.0, 1)
    assert info.completion == 4.5  # may exceed 1
    assert queue.update(1) == []


def test_C10_an_event_starting_in_the_past_activates_at_the_next_update() -> None:
    queue: Timeline[str] = Timeline()
    queue.update(10)
    running = queue.add_at("running", 7, 5)
    gone = queue.add_at("gone", 2, 3)
    assert queue.update(1) == [gone, running]  # newly active: by start
    assert (running.time, running.dt, running.has_expired) == (4.0, 1.0, False)
    assert (gone.time, gone.completion, gone.has_expired) == (9.0, 3.0, True)


def test_C11_instant_event_at_the_exact_update_time_has_completion_one() -> None:
    queue: Timeline[str] = Timeline()
    exact = queue.add("exact", 2)
    before = queue.add("before", 1.5)
    infos = queue.update(2)
    assert infos == [before, exact]
    assert exact.time == 0.0
    assert exact.completion == 1.0
    assert before.completion == math.inf
    assert exact.has_expired


def test_C12_occurrences_count_every_returned_update() -> None:
    """Rule: every event an update returns has occurrences >= 1 (1 the first time), even one
    that starts and ends within a single step.  occurrences == 0 with has_expired only
    happens when expire() was called before any update returned the event."""
    queue: Timeline[str] = Timeline()
    inside = queue.add("inside one step", 0.2, 0.3)
    instant = queue.add("instant", 0.5)
    never = queue.add("never returned", 5, 1)
    never.expire()
    returned = queue.update(1)
    assert returned == [inside, instant]
    assert all(info.has_expired and info.occurrences == 1 for info in returned)
    queue.update(10)
    assert (never.has_expired, never.occurrences) == (True, 0)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 20), st.one_of(st.none(), st.integers(0, 10))),
        min_size=1,
        max_size=12,
    ),
    st.lists(st.integers(0, 6), min_size=1, max_size=25),
)
def test_C3_C5_C12_every_event_is_returned_on_consecutive_updates_until_it_expires(
    events: list[tuple[int, int | None]], steps: list[int]
) -> None:
    queue: Timeline[int] = Timeline()
    for index, (start, duration) in enumerate(events):
        queue.add(index, start / 4, None if duration is None else duration / 4)
    history: dict[int, list[tuple[int, bool]]] = {index: [] for index in range(len(events))}
    for step, dt in enumerate(steps):
        returned = queue.update(dt / 4)
        assert len({info.item for info in returned}) == len(returned)
        for info in returned:
            history[info.item].append((step, info.has_expired))
            assert info.occurrences == len(history[info.item])  # C12
            assert info.start <= queue.time
            assert info.has_expired == (info.time >= info.duration)
    assert queue.time == sum(steps) / 4
    for seen in history.values():
        steps_seen = [step for step, _ in seen]
        first = steps_seen[0] if seen else 0
        assert steps_seen == list(range(first, first + len(seen)))  # consecutive updates
        assert [expired for _, expired in seen[:-1]] == [False] * (len(seen) - 1)  # C5


# ---------------------------------------------------------------------------- steps


def test_steps_update_every_dt_of_virtual_time(run: Runner) -> None:
    async def main() -> list[tuple[float, float, list[str]]]:
        queue = canonical()
        await anyio.sleep(100)
        trace: list[tuple[float, float, list[str]]] = []
        async for active in queue.steps(dt=0.5):
            trace.append((anyio.current_time(), queue.time, names(active)))
        return trace

    trace = run(main)
    assert [loop for loop, _, _ in trace] == [100 + k / 2 for k in range(1, 21)]
    assert [queue_time for _, queue_time, _ in trace] == [k / 2 for k in range(1, 21)]
    assert trace[1][2] == ["1..2"]
    assert trace[2][2] == ["1..2", "1.5"]
    assert trace[3][2] == ["1..2", "2..10"]
    assert trace[-1][2] == ["2..10"]  # expires at 10: last returned, then the iteration ends


def test_steps_catch_up_when_the_body_overruns(run: Runner) -> None:
    async def main() -> list[tuple[float, float]]:
        queue: Timeline[str] = Timeline()
        queue.add("long", 0, 4)
        trace: list[tuple[float, float]] = []
        async for _ in queue.steps(1):
            trace.append((anyio.current_time(), queue.time))
            if len(trace) == 1:
                await anyio.sleep(2.5)
        return trace

    assert run(main) == [(1.0, 1.0), (3.5, 2.0), (3.5, 3.0), (4.0, 4.0)]


def test_steps_on_an_empty_queue_end_at_once_and_events_added_meanwhile_count(
    run: Runner,
) -> None:
    async def main() -> list[list[str]]:
        queue: Timeline[str] = Timeline()
        seen = [names(active) async for active in queue.steps(1)]
        queue.add("first", 0)
        async for active in queue.steps(1):
            seen.append(names(active))
            if active and active[0].item == "first":
                queue.add("second", 2)  # queue time 1 + 2
        return seen

    assert run(main) == [["first"], [], ["second"]]


@pytest.mark.parametrize("dt", [0, -1, math.nan, math.inf])
def test_steps_need_a_positive_finite_dt(dt: float) -> None:
    queue = canonical()
    with pytest.raises(ValueError, match="dt"):
        queue.steps(dt)
    assert len(queue) == 3
    assert queue.time == 0.0


# ---------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("delay", [-1, math.nan, math.inf, -math.inf])
def test_bad_delays_are_rejected_and_change_nothing(delay: float) -> None:
    queue = canonical()
    info = queue.add("anchor", 1, 1)
    with pytest.raises(ValueError, match="delay"):
        queue.add("x", delay)
    for method in (info.add_after, info.add_sync, info.add_before):
        with pytest.raises(ValueError, match="delay"):
            method("x", delay)
    assert len(queue) == 4
    assert names(queue.update(1)) == ["1..2", "anchor"]


@pytest.mark.parametrize("duration", [-1, math.nan, -math.inf])
def test_bad_durations_are_rejected_and_change_nothing(duration: float) -> None:
    queue = canonical()
    with pytest.raises(ValueError, match="duration"):
        queue.add("x", 1, duration)
    with pytest.raises(ValueError, match="duration"):
        queue.add_at("x", 1, duration)
    assert len(queue) == 3


def test_bad_types_starts_and_steps_are_rejected() -> None:
    queue = canonical()
    with pytest.raises(TypeError, match="delay"):
        queue.add("x", "1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="duration"):
        queue.add("x", 1, True)
    with pytest.raises(ValueError, match="start"):
        queue.add_at("x", math.nan)
    for dt in (-1, math.nan, math.inf):
        with pytest.raises(ValueError, match="dt"):
            queue.update(dt)
    assert queue.time == 0.0
    assert len(queue) == 3


def test_infinite_durations_cannot_anchor_after_or_before() -> None:
    queue: Timeline[str] = Timeline()
    forever = queue.add("forever", 1, math.inf)
    with pytest.raises(ValueError, match="never ends"):
        forever.add_after("x", 1)
    with pytest.raises(ValueError, match="duration must be finite for add_before"):
        forever.add_before("x", 1, math.inf)
    assert len(queue) == 1


def test_reprs_and_active() -> None:
    queue = canonical()
    queue.update(1)
    assert repr(queue) == "<Timeline time=1.0 events=3>"
    assert repr(queue.active[0]) == "<TimelineEntry '1..2'@1.0+1.0>"
