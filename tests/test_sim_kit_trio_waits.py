"""The kit's sleeps on virtualtime's trio clock: parked on the clock (virtualtime/trio/_park.py)
instead of a trio cancel scope each, with the same behaviour.

A busy model (interrupts mid-sleep, preemption, reneging by ``first_of`` and by
``anyio.move_on_after``, a store) gives the same (time, event) log and the same statistics on
trio with the parked sleeps, on trio with them forced off (the cancel-scope path other trio
clocks take), and on asyncio.  Then: what an interrupted or cancelled parked sleep leaves
behind (nothing), and deadlocks while parked.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import virtualtime
import virtualtime.trio
from virtualtime import sim
from virtualtime.trio import VirtualClock, _park

Log = list[tuple[float, str]]


class CountingClock(VirtualClock):
    """The virtualtime trio clock, counting the kit waits that parked or jumped in place."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.parked = 0
        self.in_place = 0

    def _vt_sleep(self, ticks: int, task: Any) -> Any:  # type: ignore[override]
        parked = _park.sleep(self, ticks, task)
        if parked is None:
            self.in_place += 1
        else:
            self.parked += 1
        return parked


class NoParkClock(VirtualClock):
    """The same clock without kit waits: the kit sleeps in a trio cancel scope each."""

    _vt_sleep = None  # type: ignore[assignment]


def _run(config: str, main: Callable[[], Awaitable[Any]]) -> tuple[Any, VirtualClock | None]:
    if config == "asyncio":
        return virtualtime.anyio_run(main, backend="asyncio"), None
    clock = CountingClock() if config == "trio-park" else NoParkClock()
    return virtualtime.trio.run(main, clock=clock), clock


CONFIGS = ["asyncio", "trio-park", "trio-nopark"]


def _live_waits(clock: VirtualClock) -> list[Any]:
    return [entry for entry in clock._kit if entry[2].task is not None]


# --------------------------------------------------------------------------- the busy model


def _busy_model(log: Log) -> Callable[[], Awaitable[dict[str, object]]]:
    """Every instant below has one cause (no two unrelated wake-ups coincide), so the log is
    the same whatever order trio gives same-instant wake-ups."""

    def note(what: str) -> None:
        log.append((sim.now(), what))

    async def sleeper() -> None:  # interrupted mid-sleep twice, carries on
        left = 10.0
        while left > 0:
            start = sim.now()
            try:
                await sim.sleep(left)
                note("sleeper woke")
                left = 0
            except sim.Interrupt as interrupt:
                note(f"sleeper interrupted: {interrupt.cause}")
                left -= sim.now() - start

    async def kicker(victim: sim.Process[None]) -> None:
        for _ in range(2):
            await sim.sleep(2.5)
            victim.interrupt("kick")

    async def user(
        res: sim.PreemptiveResource, name: str, prio: int, at: float, work: float
    ) -> None:
        await sim.sleep(at)
        note(f"{name} arrives")
        try:
            async with res.request(priority=prio):
                note(f"{name} served")
                await sim.sleep(work)
                note(f"{name} done")
        except sim.Interrupt as interrupt:
            cause = interrupt.cause
            assert isinstance(cause, sim.Preempted)
            assert cause.by is not None
            note(f"{name} preempted by {cause.by.name} (since {cause.usage_since})")

    async def impatient(res: sim.PreemptiveResource, name: str, at: float, patience: float) -> None:
        await sim.sleep(at)
        req = res.request(priority=5)
        which, _ = await sim.first_of(req, sim.sleep(patience))
        if which is req:
            note(f"{name} got it")
            await sim.sleep(0.25)
            req.release()
        else:
            note(f"{name} reneged")

    async def timid(res: sim.PreemptiveResource, name: str, at: float, patience: float) -> None:
        await sim.sleep(at)
        with anyio.move_on_after(patience) as scope:
            async with res.request(priority=5):
                note(f"{name} served")
                await sim.sleep(0.5)
        note(f"{name} {'gave up' if scope.cancelled_caught else 'left'}")
        with anyio.move_on_after(0.375) as scope:  # a sleep cut short by a timeout
            await sim.sleep(4)
        note(f"{name} dozed {'briefly' if scope.cancelled_caught else 'long'}")

    async def producer(store: sim.Store) -> None:
        for k in range(4):
            await sim.sleep(1.125)
            await store.put(k)

    async def consumer(store: sim.Store) -> None:
        for _ in range(4):
            item = await store.get()
            note(f"got item {item}")
            await sim.sleep(0.0625)

    async def main() -> dict[str, object]:
        async with sim.Simulation() as env:
            res = sim.PreemptiveResource(1)
            store = sim.Store()
            victim = env.start(sleeper(), name="sleeper")
            env.start(kicker(victim), name="kicker")
            env.start(user(res, "low", 9, 0.5, 3.0), name="low")
            env.start(user(res, "high", 1, 1.75, 1.0), name="high")
            env.start(user(res, "mid", 4, 3.125, 1.5), name="mid")
            env.start(impatient(res, "quick", 2.0, 0.25), name="quick")
            env.start(impatient(res, "patient", 2.25, 5.0), name="patient")
            env.start(timid(res, "timid", 2.375, 0.5), name="timid")
            env.start(producer(store), name="producer")
            env.start(consumer(store), name="consumer")
            await env.run()
            stats = res.stats
            return {
                "end": env.now,
                "utilisation": stats.utilisation(),
                "mean_queue": stats.mean_queue_length(),
                "mean_wait": stats.mean_wait(),
                "served": stats.served(),
                "reneged": stats.renege_count(),
            }

    return main


@pytest.fixture(scope="module")
def busy_runs() -> dict[str, tuple[Log, dict[str, object], VirtualClock | None]]:
    runs = {}
    for config in CONFIGS:
        log: Log = []
        summary, clock = _run(config, _busy_model(log))
        runs[config] = (log, summary, clock)
    return runs


@pytest.mark.parametrize("config", CONFIGS[1:])
def test_the_busy_model_gives_the_asyncio_log_and_statistics_on_trio(
    busy_runs: dict[str, tuple[Log, dict[str, object], VirtualClock | None]], config: str
) -> None:
    reference_log, reference_summary, _ = busy_runs["asyncio"]
    log, summary, _ = busy_runs[config]
    assert log == reference_log
    assert summary == reference_summary


def test_the_busy_model_does_what_it_is_meant_to(
    busy_runs: dict[str, tuple[Log, dict[str, object], VirtualClock | None]],
) -> None:
    log, summary, _ = busy_runs["asyncio"]
    assert log[:4] == [
        (0.5, "low arrives"),
        (0.5, "low served"),
        (1.125, "got item 0"),
        (1.75, "high arrives"),
    ]
    assert (1.75, "low preempted by high (since 0.5)") in log
    assert (2.5, "sleeper interrupted: kick") in log
    assert (5.0, "sleeper interrupted: kick") in log
    assert (10.0, "sleeper woke") in log  # 2.5 + 2.5 + 5 of sleep in all
    assert (2.25, "quick reneged") in log  # first_of: the sleep won
    assert (2.875, "timid gave up") in log  # move_on_after around a request
    assert (3.25, "timid dozed briefly") in log  # move_on_after around a sleep
    assert summary["reneged"] == 2
    assert summary["end"] == 10.0


def test_the_parked_path_was_taken_and_the_other_was_not(
    busy_runs: dict[str, tuple[Log, dict[str, object], VirtualClock | None]],
) -> None:
    park = busy_runs["trio-park"][2]
    nopark = busy_runs["trio-nopark"][2]
    assert isinstance(park, CountingClock)
    assert park.parked > 10
    assert isinstance(nopark, NoParkClock)
    assert not nopark._kit_count


# --------------------------------------------------------------------------- same-instant order


def _crowded_model(log: Log) -> Callable[[], Awaitable[None]]:
    """Everything here happens at a few crowded instants: processes started together, a signal
    with many waiters, a resource and a store served at the instant they are freed, sleep(0),
    first_of and all_of whose operands end together, an interrupt among them."""

    def note(what: str) -> None:
        log.append((sim.now(), what))

    async def waiter(name: str, signal: sim.Signal) -> None:
        note(f"{name} waits")
        value = await signal
        note(f"{name} got {value}")
        await sim.sleep(0)
        note(f"{name} after sleep(0)")
        await sim.sleep(1)
        note(f"{name} slept")

    async def user(name: str, res: sim.Resource) -> None:
        async with res.request():
            note(f"{name} served")
            await sim.sleep(1)

    async def getter(name: str, store: sim.Store) -> None:
        note(f"{name} got item {await store.get()}")

    async def racer(name: str) -> None:
        await sim.first_of(sim.sleep(2), sim.sleep(2))
        await sim.all_of(sim.sleep(1.5), sim.sleep(1.5), sim.sleep(0))
        note(f"{name} raced")

    async def victim() -> None:
        try:
            await sim.sleep(10)
        except sim.Interrupt as interrupt:
            note(f"victim interrupted: {interrupt.cause}")

    async def main() -> None:
        async with sim.Simulation() as env:
            signal = sim.Signal()
            res = sim.Resource(1)
            store = sim.Store()
            for k in range(5):
                env.start(waiter(f"w{k}", signal))
            for k in range(4):
                env.start(user(f"u{k}", res))
            for k in range(3):
                env.start(getter(f"g{k}", store))
            for k in range(3):
                env.start(racer(f"r{k}"))
            hit = env.start(victim())
            await sim.sleep(2)
            signal.succeed("go")
            hit.interrupt("now")
            for item in range(3):
                await store.put(item)
            await env.run()

    return main


def test_same_instant_wake_ups_run_in_asyncios_order_on_virtualtimes_trio_clock() -> None:
    # trio runs the tasks woken in one loop round in random order; virtualtime's clock queues
    # the kit's wake-ups (starts, settled waits, sleep(0)) first come, first served instead,
    # so every run is the asyncio run.  Repeated: a random order shows within a few runs.
    reference: Log = []
    _run("asyncio", _crowded_model(reference))
    assert [what for t, what in reference if t == 0.0] == [
        *(f"w{k} waits" for k in range(5)),
        "u0 served",
    ]
    assert [what for t, what in reference if t == 2.0] == [
        *(f"w{k} got go" for k in range(5)),  # in the order they began to wait
        "victim interrupted: now",
        *(f"g{k} got item {k}" for k in range(3)),
        "u2 served",  # u1's release at 2 (its sleep ended after the main process's)
        *(f"w{k} after sleep(0)" for k in range(5)),
    ]
    for _ in range(30):
        log: Log = []
        _run("trio-park", _crowded_model(log))
        assert log == reference


def test_conditions_ending_among_other_wake_ups_are_deterministic_on_trio() -> None:
    # first_of/all_of run their operands in helper tasks on trio (callbacks on asyncio), so
    # where one ends at an instant shared with other wake-ups its place may differ from
    # asyncio's -- but it is the same place in every run.
    log: Log = []

    async def racer(name: str) -> None:
        await sim.first_of(sim.sleep(1), sim.Signal())
        await sim.all_of(sim.sleep(1), sim.sleep(1), sim.sleep(0))
        log.append((sim.now(), f"{name} raced"))

    async def plain(name: str) -> None:
        for _ in range(2):
            await sim.sleep(1)
            log.append((sim.now(), f"{name} slept"))

    async def main() -> None:
        async with sim.Simulation() as env:
            for k in range(4):
                env.start(racer(f"r{k}"))
                env.start(plain(f"p{k}"))
            await env.run()

    runs = []
    for _ in range(30):
        log.clear()
        _run("trio-park", main)
        runs.append(list(log))
    assert all(run == runs[0] for run in runs)
    assert sorted(runs[0]) == sorted(
        [(2.0, f"r{k} raced") for k in range(4)]
        + [(t, f"p{k} slept") for k in range(4) for t in (1.0, 2.0)]
    )


def test_a_task_that_polls_does_not_hold_back_the_kits_wake_ups() -> None:
    # The kit's wake-ups at an instant wait for the run to be idle; a task that keeps it busy
    # with plain checkpoints must not starve them (asyncio runs its call_soon in turn).
    seen: list[object] = []

    async def proc() -> None:
        seen.append(("started", sim.now()))

    async def main() -> int:
        async with sim.Simulation() as env:
            env.start(proc())
            polls = 0
            while not seen:
                await anyio.lowlevel.checkpoint()
                polls += 1
                assert polls < 1000, "the process never started"
            return polls

    polls, _ = _run("trio-park", main)
    assert seen == [("started", 0.0)]
    # PATIENCE busy turns, then the process and the poller share a turn in trio's order.
    assert _park.PATIENCE <= polls <= _park.PATIENCE + 2


def _no_coroutine_left_unawaited(run: Callable[[], object]) -> None:
    import gc
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()
        gc.collect()
    assert [str(w.message) for w in caught if w.category is RuntimeWarning] == []


def test_a_process_still_waiting_for_its_first_turn_when_the_run_ends_is_cancelled() -> None:
    started: list[sim.Process[None]] = []

    async def proc() -> None:
        await sim.sleep(1)

    async def main() -> None:
        async with sim.Simulation() as env:
            started.append(env.start(proc()))  # the block ends before it takes its turn

    _no_coroutine_left_unawaited(lambda: _run("trio-park", main))
    assert not started[0].is_alive


def test_operands_of_a_condition_cancelled_before_they_start_are_taken_back() -> None:
    queue_lengths: list[int] = []

    async def work() -> None:
        await sim.sleep(3)

    async def main() -> None:
        async with sim.Simulation() as env:
            res = sim.Resource(1)

            async def holder() -> None:
                async with res.request():
                    await sim.sleep(10)

            async def victim() -> None:
                await sim.first_of(work(), res.request(), sim.sleep(5))

            env.start(holder())
            await sim.sleep(0)
            target = env.start(victim())
            await sim.sleep(0)  # the victim runs and starts its operands' tasks ...
            target.cancel()  # ... which are cancelled before their first turn
            await sim.sleep(1)
            queue_lengths.append(len(res.queue))

    _no_coroutine_left_unawaited(lambda: _run("trio-park", main))
    assert queue_lengths == [0]  # the request was withdrawn, not left queued


# --------------------------------------------------------------------------- races and timeouts


def _late_interrupt(log: Log) -> Callable[[], Awaitable[None]]:
    async def sleeper() -> None:
        await sim.sleep(1)
        log.append((sim.now(), "woke"))
        try:
            await sim.sleep(5)
        except sim.Interrupt as interrupt:
            log.append((sim.now(), f"interrupted: {interrupt.cause}"))

    async def kicker(victim: sim.Process[None]) -> None:
        await sim.sleep(0.5)  # trio starts the two in either order; this wait comes later
        await sim.sleep(0.5)
        victim.interrupt("late")

    async def main() -> None:
        async with sim.Simulation() as env:
            victim = env.start(sleeper())
            env.start(kicker(victim))
            await env.run()

    return main


@pytest.mark.parametrize("config", CONFIGS)
def test_an_interrupt_right_after_the_sleep_ended_is_raised_at_the_next_wait(config: str) -> None:
    # Both sleeps end at 1: the kicker may run before the sleeper resumes (trio's order, on
    # the cancel-scope path) or after it; either way the interrupt reaches the sleeper at its
    # next kit wait, never lost.  Repeated: trio picks either order at random.
    for _ in range(1 if config != "trio-nopark" else 12):
        log: Log = []
        _run(config, _late_interrupt(log))
        assert log == [(1.0, "woke"), (1.0, "interrupted: late")]


@pytest.mark.parametrize("config", CONFIGS)
def test_a_timeout_entered_between_in_place_sleeps_is_seen(config: str) -> None:
    # A lone process: its sleeps jump in place on the trio clock; a move_on_after entered
    # between two of them must still cut the second short at its deadline.
    ends: list[float] = []

    async def lone() -> None:
        for _ in range(300):
            await sim.sleep(1)
            await sim.sleep(1)  # in place, in the loop round the first one was woken in
            with anyio.move_on_after(0.5):
                await sim.sleep(0.75)  # in place too, if the timeout were not seen
            ends.append(sim.now())

    async def main() -> None:
        async with sim.Simulation() as env:
            env.start(lone())
            await env.run()

    _, clock = _run(config, main)
    assert ends == [2.5 * (k + 1) for k in range(300)]
    if isinstance(clock, CountingClock):
        assert clock.in_place > 100  # the sleeps did jump in place


@pytest.mark.parametrize("config", CONFIGS)
def test_sleep_zero_still_lets_the_others_due_now_run_first(config: str) -> None:
    log: Log = []

    async def polite(name: str) -> None:
        for k in range(3):
            await sim.sleep(0)
            log.append((sim.now(), f"{name} {k}"))

    async def main() -> None:
        async with sim.Simulation() as env:
            env.start(polite("a"))
            env.start(polite("b"))
            await env.run()

    _run(config, main)
    # The two alternate: each sleep(0) yields to the other.
    assert sorted(log) == sorted((0.0, f"{name} {k}") for k in range(3) for name in "ab")
    if config == "trio-nopark":  # another trio clock: trio's order, either one
        assert [name for _, name in log[:2]] in (["a 0", "b 0"], ["b 0", "a 0"])
        assert {name[0] for _, name in log[2:4]} == {"a", "b"}
    else:  # asyncio's order, kept by virtualtime's trio clock
        assert [name for _, name in log] == ["a 0", "b 0", "a 1", "b 1", "a 2", "b 2"]


@pytest.mark.parametrize("config", CONFIGS)
def test_first_of_and_all_of_over_sleeps(config: str) -> None:
    got: list[object] = []

    async def main() -> None:
        async with sim.Simulation() as env:

            async def proc() -> None:
                short = sim.sleep(1)
                which, _ = await sim.first_of(sim.sleep(3), short)
                got.append((sim.now(), which is short))
                await sim.all_of(sim.sleep(0.5), sim.sleep(2))
                got.append(sim.now())

            env.start(proc())
            await env.run()
            got.append(env.now)

    _, clock = _run(config, main)
    assert got == [(1.0, True), 3.0, 3.0]  # the loser at 3 moved no time
    if clock is not None:
        assert clock.current_time() == 3.0
        assert _live_waits(clock) == []


# --------------------------------------------------------------------------- nothing left behind


def test_an_interrupted_or_cancelled_parked_sleep_leaves_nothing_behind() -> None:
    clock = CountingClock()
    seen: dict[str, object] = {}

    async def long_sleep(name: str) -> None:
        try:
            await sim.sleep(100)
        except sim.Interrupt:
            seen[name] = sim.now()

    async def timed_out() -> None:
        with anyio.move_on_after(2):
            await sim.sleep(200)
        seen["timed out"] = sim.now()

    async def main() -> None:
        async with sim.Simulation() as env:
            interrupted = env.start(long_sleep("interrupted"))
            cancelled = env.start(long_sleep("cancelled"))
            env.start(timed_out())
            await sim.sleep(1)
            assert len(_live_waits(clock)) == 3  # all three parked (main sleeps in place)
            interrupted.interrupt()
            cancelled.cancel()
            await sim.sleep(0.5)
            assert interrupted._parked is None
            assert not interrupted._pending
            assert cancelled._parked is None
            assert not cancelled.is_alive
            assert len(_live_waits(clock)) == 1  # only the one under the timeout
            await env.run()
            seen["end"] = env.now

    virtualtime.trio.run(main, clock=clock)
    # The dead entries (at 100 and 200) moved no time: the run ended at the timeout, 2.
    assert seen == {"interrupted": 1.0, "timed out": 2.0, "end": 2.0}
    assert _park.head(clock) is None
    assert clock.current_time() == 2.0


# --------------------------------------------------------------------------- deadlocks


def test_a_deadlock_while_parked_raises() -> None:
    # Without autojump nothing moves time: the parked sleeper waits for ever.
    async def nap() -> None:
        await sim.sleep(5)

    async def main() -> None:
        async with sim.Simulation() as env:
            env.start(nap(), name="the-sleeper")
            await env.run()

    clock = CountingClock(autojump=False, deadlock_timeout=0)
    with pytest.raises(virtualtime.DeadlockError) as info:
        virtualtime.trio.run(main, clock=clock)
    assert "the-sleeper" in [name for name, _ in info.value.blocked]
    assert clock.parked == 1


def test_a_deadlock_after_parked_sleeps_raises_and_names_the_processes() -> None:
    async def stuck(signal: sim.Signal) -> None:
        await sim.sleep(3)
        await signal

    async def main() -> None:
        async with sim.Simulation() as env:
            signal = sim.Signal()
            env.start(stuck(signal), name="stuck-a")
            env.start(stuck(signal), name="stuck-b")
            await env.run()

    clock = CountingClock(deadlock_timeout=0)
    with pytest.raises(virtualtime.DeadlockError) as info:
        virtualtime.trio.run(main, clock=clock)
    names = [name for name, _ in info.value.blocked]
    assert "stuck-a" in names
    assert "stuck-b" in names
    assert clock.parked == 2
    assert clock.current_time() == 3.0
