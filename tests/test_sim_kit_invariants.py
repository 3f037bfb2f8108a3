"""The modelling kit's invariants under interrupts, lost conditions and the end of a run.

A container's level stays in ``[0, capacity]`` and a store never holds more than its
capacity, even when a get gives back what it received after a put used the room; an
interrupted operation is withdrawn at the moment of the interrupt, so it never completes
afterwards; an interrupt kept for a process's next kit await is raised there -- or at the end
of the process -- and never dropped; a process's exception leaves ``simulate`` as itself on
trio too; and the kit leaves no "never retrieved" or "never awaited" noise behind.

Every model runs on both backends and in both orders (where the order matters, each gives its
own log).
"""

from __future__ import annotations

import gc
import sys
import warnings
from typing import Any

import anyio
import pytest

from virtualtime import sim


@pytest.fixture(params=["asyncio", "trio"])
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture(params=["virtualtime", "simpy"])
def order(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


def _levels(series: Any) -> list[float]:
    return list(series._values)


# --------------------------------------------------------------------------- give-backs


def test_a_get_that_loses_a_first_of_after_a_put_used_the_room_waits_to_give_back(
    backend: str, order: str
) -> None:
    log: list[Any] = []

    async def main() -> None:
        tank = sim.Container(10)

        async def taker() -> None:
            # At 1 the sleep wins; the get completes too (the filler's put), then loses.
            await sim.first_of(tank.get(5), sim.sleep(1))
            log.append(("taker", sim.now(), tank.level))

        async def filler() -> None:
            await sim.sleep(1)
            await tank.put(5)
            await tank.put(10)
            log.append(("filler", sim.now(), tank.level))

        sim.start(taker())
        sim.start(filler())
        await sim.sleep(2)
        log.append(("queued", tank.level, [repr(op) for op in tank.put_queue]))
        await sim.first_of(tank.get(10), sim.sleep(1))  # room again: the give-back goes first
        log.append(("after", tank.level, tank.put_queue))
        log.append(("puts", len(tank.stats.put_waits), "gets", len(tank.stats.get_waits)))
        levels.extend(_levels(tank.stats.level))

    levels: list[float] = []
    sim.simulate(main, backend=backend, order=order, until=5)
    assert max(levels) <= 10
    give_back = "<give-back into <Container level=10 capacity=10>>"
    if order == "virtualtime":
        assert log == [
            ("filler", 1.0, 10),
            ("taker", 1.0, 10),
            ("queued", 10, [give_back]),
            ("after", 5, []),
            ("puts", 2, "gets", 2),
        ]
    else:  # SimPy's order: the get is not served before the sleep wins
        assert log[0] == ("taker", 1.0, 5)


def test_a_get_interrupted_before_it_was_awaited_gives_back_only_when_there_is_room(
    backend: str, order: str
) -> None:
    log: list[Any] = []

    async def main() -> None:
        tank = sim.Container(10, init=5)

        async def taker() -> None:
            got = tank.get(5)  # completes at once: the level is 0
            await anyio.sleep(1)  # not the kit's: the interrupt is kept
            try:
                await got
            except sim.Interrupt as interrupt:
                log.append(("interrupted", interrupt.cause, sim.now(), tank.level))

        async def filler(proc: sim.Process[None]) -> None:
            await sim.sleep(0.5)
            await tank.put(10)
            proc.interrupt("stop")
            log.append(("filled", sim.now(), tank.level))

        proc = sim.start(taker())
        sim.start(filler(proc))
        await sim.sleep(2)
        log.append(("queued", tank.level, len(tank.put_queue)))
        await tank.get(7)
        log.append(("after", tank.level, len(tank.put_queue)))
        assert max(_levels(tank.stats.level)) <= 10

    sim.simulate(main, backend=backend, order=order)
    assert log == [
        ("filled", 0.5, 10),
        ("interrupted", "stop", 1.0, 10),
        ("queued", 10, 1),
        ("after", 8, 0),
    ]


def test_an_item_a_get_gives_back_into_a_full_store_waits_first_in_line(
    backend: str, order: str
) -> None:
    log: list[Any] = []

    async def main() -> None:
        store = sim.Store(1)

        async def taker() -> None:
            await sim.first_of(store.get(), sim.sleep(1))
            log.append(("taker", sim.now(), store.items))

        async def filler() -> None:
            await sim.sleep(1)
            await store.put("a")
            await store.put("b")

        sim.start(taker())
        sim.start(filler())
        await sim.sleep(2)
        log.append(("held", store.items, len(store.put_queue)))
        log.append(("got", await store.get(), store.items, len(store.put_queue)))
        assert max(_levels(store.stats.level)) <= 1

    sim.simulate(main, backend=backend, order=order)
    if order == "virtualtime":
        assert log == [("taker", 1.0, ["b"]), ("held", ["b"], 1), ("got", "b", ["a"], 0)]
    else:  # SimPy's order: the get is not served before the sleep wins
        assert log == [("taker", 1.0, ["a"]), ("held", ["a"], 1), ("got", "a", ["b"], 0)]


# --------------------------------------------------------------------------- withdrawn at once


def test_an_interrupted_put_does_not_complete_when_the_interrupter_makes_room(
    backend: str, order: str
) -> None:
    log: list[Any] = []

    async def main() -> None:
        tank = sim.Container(10, init=10)
        store = sim.Store(1)
        await store.put("old")

        async def putter() -> None:
            try:
                await tank.put(5)
            except sim.Interrupt:
                log.append(("tank put interrupted", sim.now(), tank.level))
            try:
                await store.put("new")
            except sim.Interrupt:
                log.append(("store put interrupted", sim.now(), store.items))

        proc = sim.start(putter())
        await sim.sleep(1)
        proc.interrupt()
        await tank.get(5)  # room for the put -- but it was withdrawn
        await sim.sleep(1)
        proc.interrupt()
        assert await store.get() == "old"
        await sim.sleep(1)
        log.append(("end", tank.level, store.items, len(tank.stats.put_waits)))

    sim.simulate(main, backend=backend, order=order)
    assert log == [
        ("tank put interrupted", 1.0, 5),
        ("store put interrupted", 2.0, []),
        ("end", 5, [], 0),
    ]


def test_an_interrupted_get_and_request_leave_no_trace(backend: str, order: str) -> None:
    log: list[Any] = []

    async def main() -> None:
        tank = sim.Container(10)
        counter = sim.Resource(1)
        holder = counter.request()
        await holder

        async def waiter() -> None:
            try:
                await tank.get(5)
            except sim.Interrupt:
                log.append(("get interrupted", sim.now(), tank.level))
            req = counter.request()
            try:
                await req
            except sim.Interrupt:
                log.append(("request interrupted", sim.now(), req.granted, counter.count))

        proc = sim.start(waiter())
        await sim.sleep(1)
        proc.interrupt()
        await tank.put(5)  # enough for the get -- but it was withdrawn
        await sim.sleep(1)
        proc.interrupt()
        holder.release()  # the unit is free -- but the request was withdrawn
        await sim.sleep(1)
        stats = counter.stats
        log.append(("tank", tank.level, len(tank.stats.get_waits)))
        log.append(("counter", counter.count, stats.served(), stats.renege_count()))

    sim.simulate(main, backend=backend, order=order)
    assert log == [
        ("get interrupted", 1.0, 5),
        ("request interrupted", 2.0, False, 0),
        ("tank", 5, 0),
        ("counter", 0, 1, 1),
    ]


def test_an_interrupted_first_of_withdraws_its_operations_at_once(backend: str, order: str) -> None:
    log: list[Any] = []

    async def main() -> None:
        tank = sim.Container(10, init=10)

        async def putter() -> None:
            try:
                await sim.first_of(tank.put(5), sim.sleep(10))
            except sim.Interrupt:
                log.append(("interrupted", sim.now(), tank.level))

        proc = sim.start(putter())
        await sim.sleep(1)
        proc.interrupt()
        await tank.get(5)
        await sim.sleep(1)
        log.append(("end", tank.level, len(tank.stats.put_waits)))

    sim.simulate(main, backend=backend, order=order)
    assert log == [("interrupted", 1.0, 5), ("end", 5, 0)]


def test_a_preemption_withdraws_what_the_victim_waits_for_without_overfilling(
    backend: str, order: str
) -> None:
    log: list[Any] = []

    async def main() -> None:
        machine = sim.PreemptiveResource(1)

        async def user(name: str, priority: int, *, preempt: bool = True) -> None:
            try:
                async with machine.request(priority=priority, preempt=preempt):
                    log.append((name, "granted", sim.now()))
                    await sim.sleep(5)
            except sim.Interrupt:
                log.append((name, "preempted", sim.now(), machine.count))

        async def victim() -> None:
            async with machine.request(priority=5):
                second = machine.request(priority=5)  # waits, holding the unit
                try:
                    await second
                except sim.Interrupt:
                    log.append(("victim", "preempted", sim.now(), machine.count))

        sim.start(victim())
        await sim.sleep(1)
        sim.start(user("waiting", 3, preempt=False))
        await sim.sleep(1)
        sim.start(user("urgent", 0))
        await sim.sleep(20)
        log.append(("count", machine.count, machine.queue))

    sim.simulate(main, backend=backend, order=order)
    preempted, granted = ("victim", "preempted", 2.0, 1), ("urgent", "granted", 2.0)
    # In the default order the urgent request is granted without suspending, so it logs first.
    first = [granted, preempted] if order == "virtualtime" else [preempted, granted]
    assert log == [*first, ("waiting", "granted", 7.0), ("count", 0, [])]


# --------------------------------------------------------------------------- kept interrupts


def test_a_first_of_with_a_completed_operand_raises_a_kept_interrupt(
    backend: str, order: str
) -> None:
    log: list[Any] = []

    async def main() -> None:
        tank = sim.Container(10, init=5)
        done = sim.Signal()
        done.succeed("fired")

        async def worker() -> None:
            await anyio.sleep(1)  # not the kit's: the interrupt is kept
            try:
                await sim.first_of(done, sim.sleep(5))
            except sim.Interrupt as interrupt:
                log.append(("signal", interrupt.cause, sim.now()))
            await anyio.sleep(1)
            try:
                await sim.first_of(tank.get(5), sim.sleep(5))
            except sim.Interrupt as interrupt:
                log.append(("get", interrupt.cause, sim.now(), tank.level))
            which, value = await sim.first_of(done, sim.sleep(5))  # no interrupt left
            log.append(("last", which is done, value, sim.now()))

        proc = sim.start(worker())
        await sim.sleep(0.5)
        proc.interrupt("one")
        await sim.sleep(1)
        proc.interrupt("two")

    sim.simulate(main, backend=backend, order=order)
    assert log == [("signal", "one", 1.0), ("get", "two", 2.0, 5), ("last", True, "fired", 2.0)]


def test_a_process_that_ends_with_a_kept_interrupt_fails_with_it(backend: str, order: str) -> None:
    async def busy() -> str:
        await anyio.sleep(2)  # not the kit's: the interrupt is kept ...
        return "done"  # ... and raised here, at its end

    async def main() -> None:
        proc = sim.start(busy())
        await sim.sleep(1)
        proc.interrupt("late")

    with pytest.raises(sim.Interrupt) as caught:
        sim.simulate(main, backend=backend, order=order)
    assert caught.value.cause == "late"

    async def awaited() -> tuple[object, float]:
        proc = sim.start(busy())
        await sim.sleep(1)
        proc.interrupt("seen")
        try:
            await proc
        except sim.Interrupt as interrupt:
            return interrupt.cause, sim.now()
        return "returned", sim.now()

    assert sim.simulate(awaited, backend=backend, order=order) == ("seen", 2.0)

    async def itself() -> str:
        me = sim.current_process()
        assert me is not None
        me.interrupt("self")  # running: kept for its next kit await, which never comes
        return "done"

    with pytest.raises(sim.Interrupt, match="self"):
        sim.simulate(itself, backend=backend, order=order)


# --------------------------------------------------------------------------- failures and noise


def test_a_process_failing_before_until_raises_itself(backend: str, order: str) -> None:
    async def main() -> None:
        async def bad() -> None:
            await sim.sleep(1)
            raise ValueError("boom")

        sim.start(bad())
        await sim.sleep(5)

    with pytest.raises(ValueError, match="boom") as caught:
        sim.simulate(main, backend=backend, order=order, until=3)
    assert type(caught.value) is ValueError


async def _fail(delay: float) -> None:
    await sim.sleep(delay)
    raise ValueError(delay)


async def _value(delay: float) -> float:
    await sim.sleep(delay)
    return delay


def test_conditions_with_failing_and_unawaited_operands_leave_no_noise(
    backend: str, order: str, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    log: list[Any] = []

    async def main() -> None:
        failed = sim.Signal()
        fired = sim.Signal()
        fired.succeed("fired")
        tank = sim.Container(10, init=5)

        async def loses_a_signal() -> None:  # the signal fails just after the sleep won
            which, _ = await sim.first_of(sim.sleep(1), failed)
            log.append(("signal lost", which is failed))

        async def fail_signal() -> None:
            await sim.sleep(1)
            if order == "simpy":
                failed.defused = True  # SimPy's rule: else a failure nobody awaits ends the run
            failed.fail(ValueError("signal"))

        async def loses_a_process() -> None:
            child = sim.start(_fail(2))
            which, _ = await sim.first_of(sim.sleep(2), child)
            log.append(("process lost", which is child))
            with pytest.raises(ValueError):
                await child

        # SimPy's rule in order="simpy": a second failure, which nobody awaits any more once
        # the condition has failed, would end the run -- so one operand fails there.
        second = _fail if order == "virtualtime" else _value

        async def two_fail() -> None:
            with pytest.raises(ValueError):
                await sim.first_of(_fail(3), second(3), sim.sleep(4))
            with pytest.raises(ValueError):
                await sim.all_of(_fail(4), second(4), sim.sleep(5))
            log.append(("two failed", sim.now()))

        async def nested_lose() -> None:
            _, value = await sim.first_of(
                fired, _value(1), sim.first_of(_value(2)), sim.all_of(_value(3), tank.get(1))
            )
            await sim.sleep(1)  # the nested conditions' tasks (on asyncio) are taken back
            log.append(("nested", value, tank.level))

        for model in (loses_a_signal, fail_signal, loses_a_process, two_fail, nested_lose):
            sim.start(model())
        await sim.sleep(6)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sim.simulate(main, backend=backend, order=order, until=10)
        gc.collect()
    sys.stderr.flush()
    assert capsys.readouterr().err == ""
    assert [record.getMessage() for record in caplog.records] == []  # asyncio's "never retrieved"
    assert sorted(log, key=str) == sorted(
        [
            ("signal lost", False),
            ("nested", "fired", 5),
            ("process lost", False),
            ("two failed", 7.0),
        ],
        key=str,
    )


def test_processes_cancelled_at_until_with_unstarted_operands_leave_no_noise(
    backend: str, order: str, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        async def waits() -> None:
            await sim.first_of(
                sim.sleep(3),
                _value(1),
                sim.first_of(_value(2), sim.sleep(2)),
                sim.all_of(_value(1)),
            )

        await sim.sleep(1)
        procs = [sim.start(waits()) for _ in range(3)]
        procs[1].cancel()
        await sim.sleep(0)
        procs[2].cancel()

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sim.simulate(main, backend=backend, order=order, until=1)
        gc.collect()
    sys.stderr.flush()
    assert capsys.readouterr().err == ""
    assert [record.getMessage() for record in caplog.records] == []  # asyncio's "never retrieved"
