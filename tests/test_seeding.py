"""Seeded scheduling: the seed decides the free choices of a run, and only those.

A seeded loop orders timers due at the same instant with equal priority by its seed, and
with ``perturb="ready"`` also the task steps made ready in one round; the same seed gives
the same run, another seed (usually) another one, and an unseeded loop is FIFO as always.
Every decision goes through one :class:`Chooser`, whose deviations can be replayed in part.
Runs with the compiled core and, under ``VIRTUALTIME_PURE_PYTHON=1``, without it.
"""

from __future__ import annotations

import asyncio
import collections
import random
import textwrap
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

import virtualtime
from virtualtime._engine import _compiled
from virtualtime._engine._loop import VirtualEventLoop
from virtualtime._engine._seeding import (
    TIMER_KEY_BITS,
    Chooser,
    replay_keep,
    replaying,
    timer_number,
)

pytest_plugins = ["pytester"]

Log = list[tuple[Any, ...]]


def _loop() -> VirtualEventLoop:
    loop = asyncio.get_running_loop()
    assert isinstance(loop, VirtualEventLoop)
    return loop


async def ties(log: Log) -> None:
    """Timers, sleeps and task steps that meet at the same instants, logged as they run."""
    loop = _loop()

    async def worker(name: str) -> None:
        for step in range(3):
            log.append((name, step, loop.time()))
            await asyncio.sleep(1)
        await virtualtime.sleep(0.25)  # the native sleep: its own heap entry
        log.append((name, "native", loop.time()))

    for i in range(5):
        loop.call_later(0.5, log.append, ("timer", i))
    await asyncio.gather(*(worker(name) for name in "abcdef"))


def run_logged(
    program: Callable[[Log], Coroutine[Any, Any, None]], **options: Any
) -> tuple[Log, Chooser | None]:
    log: Log = []
    chooser: list[Chooser | None] = []

    async def main() -> None:
        chooser.append(_loop()._vt_chooser)
        await program(log)

    virtualtime.run(main(), **options)
    return log, chooser[0]


FIFO_TIES: Log = [
    *[(name, 0, 0.0) for name in "abcdef"],
    *[("timer", i) for i in range(5)],
    *[(name, 1, 1.0) for name in "abcdef"],
    *[(name, 2, 2.0) for name in "abcdef"],
    *[(name, "native", 3.25) for name in "abcdef"],
]


# ------------------------------------------------------------------ the same seed, the same run


def test_an_unseeded_loop_is_fifo_exactly_as_before() -> None:
    log, chooser = run_logged(ties)
    assert log == FIFO_TIES
    assert chooser is None
    loop = virtualtime.new_event_loop()
    try:
        assert (loop.seed, loop.perturb, loop._vt_gates) == (None, "timers", [])
    finally:
        loop.close()


@pytest.mark.parametrize("perturb", ["timers", "ready"])
def test_the_same_seed_gives_the_same_run(perturb: str) -> None:
    first, chooser = run_logged(ties, seed=11, perturb=perturb)
    second, again = run_logged(ties, seed=11, perturb=perturb)
    assert first == second
    assert sorted(first, key=repr) == sorted(FIFO_TIES, key=repr)  # the same events...
    assert first != FIFO_TIES  # ...in another order
    assert chooser is not None
    assert again is not None
    assert (chooser.decisions, chooser.deviations) == (again.decisions, again.deviations)


def test_seeds_order_the_ties_differently_and_only_the_ties() -> None:
    logs = {tuple(run_logged(ties, seed=seed)[0]) for seed in range(20)}
    assert len(logs) >= 10
    for log in logs:
        # Instants still come in order: only events at one instant trade places.
        times = [event[2] if event[0] != "timer" else 0.5 for event in log]
        assert times == sorted(times)


def test_perturb_timers_keeps_the_first_steps_of_tasks_in_order() -> None:
    # The first steps of gather's tasks are made ready in one round: only "ready" moves them.
    for seed in range(10):
        log, _ = run_logged(ties, seed=seed)
        assert log[:6] == [(name, 0, 0.0) for name in "abcdef"]
    moved = [run_logged(ties, seed=seed, perturb="ready")[0][:6] for seed in range(10)]
    assert any(first != [(name, 0, 0.0) for name in "abcdef"] for first in moved)


def test_priorities_still_come_first_under_a_seed() -> None:
    async def prioritised(log: Log) -> None:
        loop = _loop()
        for i in range(12):
            loop.call_later(1, log.append, (i % 3, i), priority=i % 3)
        await asyncio.sleep(2)

    for seed in range(8):
        log, _ = run_logged(prioritised, seed=seed)
        assert [priority for priority, _ in log] == [0] * 4 + [1] * 4 + [2] * 4
        assert sorted(log) == sorted((i % 3, i) for i in range(12))


def test_history_and_debug_mode_follow_the_seed_too() -> None:
    async def timers(log: Log) -> None:
        loop = _loop()
        for i in range(8):
            loop.call_later(1, log.append, (i,))
        await asyncio.sleep(2)

    lean, _ = run_logged(timers, seed=5)
    kept, _ = run_logged(timers, seed=5, history=50)
    assert lean == kept != [(i,) for i in range(8)]
    debug: Log = []

    async def main() -> None:
        await timers(debug)

    loop = virtualtime.new_event_loop(seed=5)
    loop.set_debug(True)
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert debug == lean


# ------------------------------------------------------------------------- the ready shuffle


def test_perturb_ready_moves_task_steps_only_among_their_neighbours() -> None:
    async def mixed(log: Log) -> None:
        loop = _loop()

        async def task(name: str) -> None:
            log.append((name,))

        def later() -> None:
            # One round's batch: callbacks and task steps interleaved.
            loop.call_soon(log.append, ("cb1",))
            for name in ("t1", "t2", "t3"):
                loop.create_task(task(name))
            loop.call_soon(log.append, ("cb2",))
            loop.create_task(task("t4"))
            loop.call_soon(log.append, ("cb3",))

        loop.call_soon(later)
        await asyncio.sleep(1)

    orders = set()
    for seed in range(20):
        log, _ = run_logged(mixed, seed=seed, perturb="ready")
        # Callbacks keep their places, and no task step passes one: t4 stays between.
        assert [log[0], log[4], log[5], log[6]] == [("cb1",), ("cb2",), ("t4",), ("cb3",)]
        orders.add(tuple(log[1:4]))
    assert len(orders) >= 3  # the adjacent first steps trade places


def test_perturb_ready_gives_up_call_soons_promise_between_tasks() -> None:
    # What the docs say it gives up: a task started just before sleep(0) may run after.
    async def task(log: Log) -> None:
        log.append(("task",))

    async def started(log: Log) -> None:
        _loop().create_task(task(log))
        await asyncio.sleep(0)
        log.append(("sleeper",))
        await asyncio.sleep(0)

    assert run_logged(started, seed=1)[0] == [("task",), ("sleeper",)]
    orders = {tuple(run_logged(started, seed=seed, perturb="ready")[0]) for seed in range(10)}
    assert orders == {(("task",), ("sleeper",)), (("sleeper",), ("task",))}


def test_shuffle_tasks_permutes_runs_of_adjacent_task_steps() -> None:
    loop = virtualtime.new_event_loop()

    async def nothing() -> None:
        return None

    try:
        tasks = [loop.create_task(nothing()) for _ in range(5)]
        ready = loop._ready
        steps = list(ready)  # the five first steps
        owners = [getattr(h._callback, "__self__", None) for h in steps]  # type: ignore[attr-defined]
        assert owners == tasks
        plain = [loop.call_soon(print) for _ in range(2)]
        ready.clear()
        batch = [steps[0], plain[0], steps[1], steps[2], plain[1], steps[3], steps[4]]
        seen = set()
        for seed in range(20):
            ready.extend(batch)
            chooser = Chooser(seed)
            chooser.shuffle_tasks(ready, 6)  # the last step is beyond ntodo: it stays
            after = list(ready)
            ready.clear()
            # steps[0] and steps[3] have no task step beside them (within ntodo): they stay.
            assert [after[i] for i in (0, 1, 4, 5, 6)] == [batch[i] for i in (0, 1, 4, 5, 6)]
            assert {id(after[2]), id(after[3])} == {id(steps[1]), id(steps[2])}
            assert chooser.decisions == 1
            seen.add(after[2] is steps[2])
        assert seen == {True, False}
        lone = Chooser(3)
        lone.shuffle_tasks(collections.deque([steps[0], plain[0], steps[1]]), 3)
        assert lone.decisions == 0  # no two adjacent task steps: nothing to choose
        for task in tasks:
            task.cancel()
        ready.extend(steps)
        loop.run_until_complete(asyncio.sleep(0))
    finally:
        loop.close()


async def spawned(log: Log) -> None:
    async def output(text: str) -> bytes | None:
        process = await asyncio.create_subprocess_exec("echo", text, stdout=asyncio.subprocess.PIPE)
        out, _ = await process.communicate()
        return out

    log.extend((out,) for out in await asyncio.gather(*(output(str(i)) for i in range(8))))


def test_subprocesses_still_work_under_perturb_ready() -> None:
    # A subprocess transport calls connection_made, then wakes the task waiting for it: a
    # wake-up moved before that callback would find no pipes (communicate() gives None).
    for seed in range(3):
        log, chooser = run_logged(spawned, seed=seed, perturb="ready")
        assert log == [(b"%d\n" % i,) for i in range(8)]
        assert chooser is not None
        assert chooser.deviations


async def echo(log: Log) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.readline():
            writer.write(data)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for i in range(200):
        writer.write(b"%d\n" % i)
        await writer.drain()
        log.append((await reader.readline(),))
    writer.close()
    await writer.wait_closed()
    server.close()
    await server.wait_closed()


def test_real_streams_still_work_under_perturb_ready() -> None:
    for seed in range(6):
        log, chooser = run_logged(echo, seed=seed, perturb="ready")
        assert log == [(b"%d\n" % i,) for i in range(200)]
        assert chooser is not None
        assert chooser.decisions > 0


# ---------------------------------------------------------------------------- replay masks


def test_replaying_the_deviations_repeats_the_run_and_none_of_them_is_fifo() -> None:
    seeded, chooser = run_logged(ties, seed=4, perturb="ready")
    assert chooser is not None
    assert chooser.deviations
    with replaying(frozenset(chooser.deviations)):
        assert replay_keep() == frozenset(chooser.deviations)
        again, masked = run_logged(ties, seed=4, perturb="ready")
    assert again == seeded
    assert masked is not None
    assert masked.deviations == chooser.deviations
    with replaying(frozenset()):
        fifo, none = run_logged(ties, seed=4, perturb="ready")
    assert fifo == FIFO_TIES
    assert none is not None
    assert none.deviations == []
    assert none.decisions > 0
    assert replay_keep() is None


def test_choose_draws_whatever_the_mask_says() -> None:
    free = Chooser(9)
    values = [free.choose(0, lambda rng: rng.randrange(3)) for _ in range(30)]
    assert free.decisions == 30
    assert free.deviations == [i for i, value in enumerate(values) if value != 0]
    keep = frozenset(free.deviations[::2])
    masked = Chooser(9, keep)
    again = [masked.choose(0, lambda rng: rng.randrange(3)) for _ in range(30)]
    # The kept decisions drew what they drew unmasked: the draws did not shift.
    assert again == [value if i in keep else 0 for i, value in enumerate(values)]
    assert masked.deviations == sorted(keep)


def test_the_conveniences_and_their_defaults() -> None:
    rng = random.Random(2)
    drawn = Chooser(2)
    assert drawn.random() == rng.random()
    assert drawn.uniform(1.0, 2.0) == rng.uniform(1.0, 2.0)
    expected_chance = rng.random() < 0.5
    assert drawn.chance(0.5) is expected_chance
    assert drawn.chance(1.0) is True
    assert drawn.chance(0.0) is False
    rng.random()
    rng.random()
    assert drawn.timer_key() == (rng.getrandbits(TIMER_KEY_BITS) << 40) | 0
    assert drawn.decisions == 6
    masked = Chooser(2, frozenset())
    got = (masked.random(), masked.uniform(1.0, 2.0), masked.chance(1.0), masked.timer_key())
    assert got == (0.0, 1.0, False, 0)
    assert (masked.timer_key(), masked.timers_made, masked.deviations) == (1, 2, [])
    keys = [drawn.timer_key() for _ in range(1000)]
    assert len(set(keys)) == 1000
    assert max(keys) < 2**62
    assert [timer_number(key) for key in keys] == list(range(1, 1001))
    with pytest.raises(ValueError, match=r"p must be a probability in \[0, 1\], got 1.5"):
        drawn.chance(1.5)


# ----------------------------------------------------------------------------------- gates


def test_a_gate_that_holds_a_handle_back_delays_exactly_it() -> None:
    log: list[str] = []
    held: list[asyncio.Handle] = []

    async def main() -> None:
        loop = _loop()

        def gate(ready: collections.deque[Any], ntodo: int) -> int:
            batch = [ready.popleft() for _ in range(ntodo)]
            keep = []
            for handle in batch:
                if handle._args == ("b",):
                    held.append(handle)
                else:
                    keep.append(handle)
            ready.extendleft(reversed(keep))
            return len(keep)

        loop._vt_add_gate(gate)
        assert not loop._vt_plain  # the compiled rounds would bypass the gate
        for name in "abc":
            loop.call_soon(log.append, name)
        await asyncio.sleep(1)
        assert log == ["a", "c"]
        loop._vt_remove_gate(gate)
        loop._vt_remove_gate(gate)  # absent: nothing happens
        loop._ready.extend(held)
        await asyncio.sleep(0)
        assert log == ["a", "c", "b"]
        assert loop._vt_plain

    virtualtime.run(main())
    assert len(held) == 1


def test_a_gate_returning_nonsense_is_reported() -> None:
    async def main() -> None:
        loop = _loop()

        def gate(ready: collections.deque[Any], ntodo: int) -> int:
            loop._vt_remove_gate(gate)  # once: the run can still end cleanly
            return ntodo + 5

        loop._vt_add_gate(gate)
        await asyncio.sleep(0)

    with pytest.raises(virtualtime.UsageError, match="an int from 0 to 1; it returned 6"):
        virtualtime.run(main())


# ----------------------------------------------------------------------------- re-seeding


def test_reseed_seeds_a_running_loop_like_the_option() -> None:
    async def reseeded(log: Log) -> None:
        loop = _loop()
        assert loop._vt_chooser is None
        before = loop.__dict__.get("call_later")
        loop._vt_reseed(5)
        after = loop.__dict__.get("call_later")
        loop._vt_reseed(5)  # the same seed: nothing changes
        assert (loop.seed, loop.perturb) == (5, "timers")
        assert loop.__dict__.get("call_later") is after
        if _compiled.COMPILED:  # the compiled call_later held the old _vt_seq: made anew
            assert before is not after
            assert loop._vt_stand_ins["call_later"] is after
        await ties(log)

    log, _ = run_logged(reseeded)
    assert log == run_logged(ties, seed=5)[0] != FIFO_TIES

    async def ready_later(log: Log) -> None:
        loop = _loop()
        loop._vt_reseed(7)
        loop._vt_reseed(7, "ready")  # the same seed may add the ready shuffle
        assert loop.perturb == "ready"
        assert len(loop._vt_gates) == 1
        with pytest.raises(virtualtime.UsageError, match=r"already seeded with seed=7.*seed=8"):
            loop._vt_reseed(8)
        await ties(log)

    log, _ = run_logged(ready_later)
    assert sorted(log, key=repr) == sorted(FIFO_TIES, key=repr)


def test_reseed_reads_the_replay_mask() -> None:
    async def reseeded(log: Log) -> None:
        _loop()._vt_reseed(5, "ready")
        await ties(log)

    with replaying(frozenset()):
        log, chooser = run_logged(reseeded)
    assert log == FIFO_TIES
    assert chooser is None  # read before the reseed; the loop's own is masked
    loop = virtualtime.new_event_loop(seed=1)
    try:
        with pytest.raises(virtualtime.UsageError, match="already seeded with seed=1"):
            loop._vt_reseed(2)
    finally:
        loop.close()


# ------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("options", "kind", "message"),
    [
        ({"seed": -1}, ValueError, "seed must be an int >= 0, got -1"),
        ({"seed": True}, TypeError, r"seed must be None or an int >= 0 .*got True \(bool\)"),
        ({"seed": 1.5}, TypeError, r"seed must be None or an int >= 0 .*got 1.5 \(float\)"),
        ({"seed": "3"}, TypeError, r"got '3' \(str\)"),
        ({"perturb": "x"}, ValueError, r"perturb must be 'timers' .* or\s+'ready' .*got 'x'"),
        ({"perturb": None}, TypeError, r"perturb must be 'timers' or 'ready'.*got None"),
        ({"perturb": "ready"}, ValueError, "perturb='ready' needs a seed"),
    ],
)
def test_bad_seeds_and_perturbs_are_refused(
    options: dict[str, Any], kind: type[Exception], message: str
) -> None:
    with pytest.raises(kind, match=message):
        virtualtime.new_event_loop(**options)


def test_bad_chooser_and_reseed_arguments_are_refused() -> None:
    with pytest.raises(TypeError, match="a Chooser's seed must be an int >= 0, got None"):
        Chooser(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seed must be an int >= 0, got -2"):
        Chooser(-2)
    with pytest.raises(TypeError, match=r"keep must be None .* got list"):
        Chooser(1, [1])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="keep must hold decision indices"):
        Chooser(1, frozenset({"a"}))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="keep must be None"), replaying({1}):  # type: ignore[arg-type]
        pass  # pragma: no cover
    loop = virtualtime.new_event_loop()
    try:
        with pytest.raises(TypeError, match=r"_vt_reseed\(\) needs a seed"):
            loop._vt_reseed(None)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="perturb must be"):
            loop._vt_reseed(1, "all")  # type: ignore[arg-type]
        assert loop.seed is None
    finally:
        loop.close()


def test_configure_seeds_the_loops_made_inside() -> None:
    with virtualtime.configure(seed=5, perturb="ready"):
        log, chooser = run_logged(ties)
    assert chooser is not None
    assert (chooser.seed, log) == (
        5,
        run_logged(ties, seed=5, perturb="ready")[0],
    )
    with pytest.raises(ValueError, match="perturb='ready' needs a seed"):  # noqa: SIM117
        with virtualtime.configure(seed=None):
            virtualtime.new_event_loop(seed=3, perturb="ready")


def test_the_pytest_marker_takes_a_seed(pytester: pytest.Pytester) -> None:
    pytester.makeini(
        "[pytest]\nasyncio_mode = strict\nasyncio_default_fixture_loop_scope = function\n"
        "filterwarnings = error\n"
    )
    pytester.makepyfile(
        test_seeded=textwrap.dedent(
            """
            import asyncio
            import pytest

            @pytest.mark.asyncio
            @pytest.mark.virtualtime(seed=3, perturb="ready")
            async def test_seeded():
                loop = asyncio.get_running_loop()
                assert (loop.seed, loop.perturb) == (3, "ready")
            """
        )
    )
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "-p", "no:looptime_plugin", "-p", "no:hypothesispytest"
    )
    result.assert_outcomes(passed=1)


def test_reseed_numbers_later_timers_after_the_earlier_ones() -> None:
    # Masked to FIFO, a reseeded loop's keys are plain timer numbers: they go on from the
    # ones before the reseed (equal keys at one instant would compare the handles).
    async def reseeded(log: Log) -> None:
        loop = _loop()
        for i in range(3):
            loop.call_later(5, log.append, (i,))
        with replaying(frozenset()):
            loop._vt_reseed(5)
        for i in range(3, 6):
            loop.call_later(5, log.append, (i,))
        await asyncio.sleep(6)

    log, _ = run_logged(reseeded)
    assert log == [(i,) for i in range(6)]


def test_a_seeded_loop_names_its_tasks_itself_so_two_runs_name_them_alike() -> None:
    async def main() -> list[str]:
        async def child() -> None:
            await asyncio.sleep(0)

        tasks = [asyncio.create_task(child()) for _ in range(3)]
        named = asyncio.create_task(child(), name="mine")
        await asyncio.gather(*tasks, named)
        current = asyncio.current_task()
        assert current is not None
        return [current.get_name(), *(t.get_name() for t in tasks), named.get_name()]

    first = virtualtime.run(main(), seed=4)
    assert first == ["Task-1", "Task-2", "Task-3", "Task-4", "mine"]
    assert virtualtime.run(main(), seed=4) == first
    # Unseeded, asyncio's counter for the whole process names them: never the same twice.
    assert virtualtime.run(main()) != virtualtime.run(main())
