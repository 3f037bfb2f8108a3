"""order="simpy" is SimPy's order: one minimal pair of programs per cause the differential
campaign found (issue 37's table), each run on SimPy 4.1 and on the kit, on asyncio and on
trio.  Each pair also shows how the default order differs, where it does (the rows of the
table in docs/coming-from-simpy.md)."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import pytest
import simpy

from virtualtime import sim

Log = list[tuple[Any, ...]]
BACKENDS = ("asyncio", "trio")


def run_simpy(model: Callable[[simpy.Environment, Log], object], until: float | None = None) -> Log:
    env = simpy.Environment()
    log: Log = []
    model(env, log)
    try:
        env.run(until=until)
    except Exception as exc:  # the run ended with a failure nobody handled
        log.append(("raised", type(exc).__name__, str(exc)))
    log.append(("end", env.now))
    return log


def run_kit(
    model: Callable[[Log], Any],
    backend: str,
    order: str = "simpy",
    until: float | None = None,
) -> Log:
    log: Log = []
    env = sim.Simulation(order=order)

    async def main() -> None:
        await model(log)

    try:
        env.simulate(main, until=until, backend=backend, end_when_idle=True)
    except Exception as exc:
        log.append(("raised", type(exc).__name__, str(exc)))
    log.append(("end", env.now))
    return log


def both(simpy_model: Any, kit_model: Any, until: float | None = None) -> Log:
    """SimPy's log; the kit's in order="simpy" must equal it on both backends."""
    expected = run_simpy(simpy_model, until)
    for backend in BACKENDS:
        assert run_kit(kit_model, backend, until=until) == expected, backend
    return expected


# --------------------------------------------------------------------------- 1. interrupts


def test_an_interrupt_of_a_process_that_has_not_run_is_thrown_at_its_first_wait() -> None:
    def simpy_model(env: simpy.Environment, log: Log) -> None:
        def victim() -> Generator[Any, Any, None]:
            log.append((env.now, "victim", "runs"))
            try:
                yield env.timeout(5)
            except simpy.Interrupt as i:
                log.append((env.now, "victim", "interrupted", i.cause))

        def main() -> Generator[Any, Any, None]:
            p = env.process(victim())
            p.interrupt("early")
            log.append((env.now, "main", "interrupted it"))
            yield env.timeout(1)

        env.process(main())

    async def kit_model(log: Log) -> None:
        async def victim() -> None:
            log.append((sim.now(), "victim", "runs"))
            try:
                await sim.sleep(5)
            except sim.Interrupt as i:
                log.append((sim.now(), "victim", "interrupted", i.cause))

        p = sim.start(victim())
        p.interrupt("early")
        log.append((sim.now(), "main", "interrupted it"))
        await sim.sleep(1)

    expected = both(simpy_model, kit_model)
    assert expected[:3] == [
        (0, "main", "interrupted it"),
        (0, "victim", "runs"),
        (0, "victim", "interrupted", "early"),
    ]


def test_an_interrupt_comes_before_a_grant_due_at_the_same_instant() -> None:
    def simpy_model(env: simpy.Environment, log: Log) -> None:
        res = simpy.Resource(env, 1)

        def holder() -> Generator[Any, Any, None]:
            with res.request() as req:
                yield req
                yield env.timeout(1)
            log.append((env.now, "holder", "released"))

        def waiter() -> Generator[Any, Any, None]:
            req = res.request()
            try:
                yield req
                log.append((env.now, "waiter", "granted"))
                res.release(req)
            except simpy.Interrupt:
                log.append((env.now, "waiter", "interrupted", req.triggered))
                if req.triggered:
                    res.release(req)
                else:
                    req.cancel()

        def boss(w: Any) -> Generator[Any, Any, None]:
            yield env.timeout(1)
            w.interrupt()

        env.process(holder())
        w = env.process(waiter())
        env.process(boss(w))

    async def kit_model(log: Log) -> None:
        res = sim.Resource(1)

        async def holder() -> None:
            async with res.request():
                await sim.sleep(1)
            log.append((sim.now(), "holder", "released"))

        async def waiter() -> None:
            req = res.request()
            try:
                await req
                log.append((sim.now(), "waiter", "granted"))
                res.release(req)
            except sim.Interrupt:
                log.append((sim.now(), "waiter", "interrupted", req.triggered))

        async def boss(w: sim.Process[Any]) -> None:
            await sim.sleep(1)
            w.interrupt()

        sim.start(holder())
        w = sim.start(waiter())
        sim.start(boss(w))

    expected = both(simpy_model, kit_model)
    assert (1, "waiter", "interrupted", False) in expected


# --------------------------------------------------------------------------- 2. sleep(0)


def test_a_zero_sleep_is_first_in_first_out_with_work_made_ready_later() -> None:
    def simpy_model(env: simpy.Environment, log: Log) -> None:
        sig = env.event()

        def a() -> Generator[Any, Any, None]:
            yield env.timeout(0)
            log.append((env.now, "a"))

        def b() -> Generator[Any, Any, None]:
            yield sig
            log.append((env.now, "b"))

        def c() -> Generator[Any, Any, None]:
            sig.succeed()
            yield env.timeout(0)
            log.append((env.now, "c"))

        env.process(a())
        env.process(b())
        env.process(c())

    async def kit_model(log: Log) -> None:
        sig = sim.Signal()

        async def a() -> None:
            await sim.sleep(0)
            log.append((sim.now(), "a"))

        async def b() -> None:
            await sig
            log.append((sim.now(), "b"))

        async def c() -> None:
            sig.succeed()
            await sim.sleep(0)
            log.append((sim.now(), "c"))

        sim.start(a())
        sim.start(b())
        sim.start(c())

    assert [e[1] for e in both(simpy_model, kit_model)[:3]] == ["a", "b", "c"]
    # The default order on asyncio (row 8): the zero sleep goes through the timer heap, and
    # the signal's waiter, made ready later at the instant, resumes first.
    default = run_kit(kit_model, "asyncio", order="virtualtime")
    assert [e[1] for e in default[:3]] == ["b", "a", "c"]


# --------------------------------------------------------------------------- 3. failures


def test_a_failed_signal_nobody_waits_for_ends_the_run() -> None:
    def simpy_model(env: simpy.Environment, log: Log) -> None:
        def main() -> Generator[Any, Any, None]:
            env.event().fail(ValueError("lost"))
            yield env.timeout(1)
            log.append((env.now, "main", "after"))

        env.process(main())

    async def kit_model(log: Log) -> None:
        sim.Signal().fail(ValueError("lost"))
        await sim.sleep(1)
        log.append((sim.now(), "main", "after"))

    assert both(simpy_model, kit_model) == [("raised", "ValueError", "lost"), ("end", 0)]


def test_a_defused_failed_signal_does_not_end_the_run() -> None:
    def simpy_model(env: simpy.Environment, log: Log) -> None:
        def main() -> Generator[Any, Any, None]:
            ev = env.event()
            ev.fail(ValueError("lost"))
            ev.defused = True
            yield env.timeout(1)
            log.append((env.now, "main", "after"))

        env.process(main())

    async def kit_model(log: Log) -> None:
        sig = sim.Signal()
        sig.fail(ValueError("lost"))
        sig.defused = True
        await sim.sleep(1)
        log.append((sim.now(), "main", "after"))

    assert both(simpy_model, kit_model) == [(1, "main", "after"), ("end", 1)]


# --------------------------------------------------------------------------- 4. starts


def test_starting_a_process_does_not_reorder_the_processes_already_woken() -> None:
    def simpy_model(env: simpy.Environment, log: Log) -> None:
        def child(name: str) -> Generator[Any, Any, None]:
            log.append((env.now, name, "starts"))
            yield env.timeout(0)

        def sleeper(name: str, spawn: bool) -> Generator[Any, Any, None]:
            yield env.timeout(1)
            log.append((env.now, name, "wakes"))
            if spawn:
                env.process(child(name + "-child"))

        for i in range(3):
            env.process(sleeper(f"s{i}", i == 0))

    async def kit_model(log: Log) -> None:
        async def child(name: str) -> None:
            log.append((sim.now(), name, "starts"))
            await sim.sleep(0)

        async def sleeper(name: str, spawn: bool) -> None:
            await sim.sleep(1)
            log.append((sim.now(), name, "wakes"))
            if spawn:
                sim.start(child(name + "-child"))

        for i in range(3):
            sim.start(sleeper(f"s{i}", i == 0))

    expected = both(simpy_model, kit_model)
    assert [e[1] for e in expected[:4]] == ["s0", "s0-child", "s1", "s2"]


# --------------------------------------------------------------------------- 5. done waits


def test_waiting_on_something_already_processed_does_not_suspend() -> None:
    def simpy_model(env: simpy.Environment, log: Log) -> None:
        def quick() -> Generator[Any, Any, int]:
            yield env.timeout(0)
            return 7

        def main() -> Generator[Any, Any, None]:
            p = env.process(quick())
            yield env.timeout(1)
            env.process(other())
            value = yield p  # processed long ago: no suspension
            log.append((env.now, "main", value))

        def other() -> Generator[Any, Any, None]:
            log.append((env.now, "other"))
            yield env.timeout(0)

        env.process(main())

    async def kit_model(log: Log) -> None:
        async def quick() -> int:
            await sim.sleep(0)
            return 7

        async def other() -> None:
            log.append((sim.now(), "other"))
            await sim.sleep(0)

        p = sim.start(quick())
        await sim.sleep(1)
        sim.start(other())
        value = await p
        log.append((sim.now(), "main", value))

    assert both(simpy_model, kit_model)[:2] == [(1, "main", 7), (1, "other")]


# --------------------------------------------------------------------------- 6. priorities


def test_preempt_is_part_of_the_priority_key() -> None:
    def simpy_model(env: simpy.Environment, log: Log) -> None:
        res = simpy.PreemptiveResource(env, 1)

        def user(name: str, delay: float, preempt: bool) -> Generator[Any, Any, None]:
            yield env.timeout(delay)
            with res.request(priority=1, preempt=preempt) as req:
                yield req
                log.append((env.now, name, "granted"))
                yield env.timeout(1)

        env.process(user("holder", 0, True))
        env.process(user("yielding", 0.5, False))
        env.process(user("pushy", 0.5, True))

    async def kit_model(log: Log) -> None:
        res = sim.PreemptiveResource(1)

        async def user(name: str, delay: float, preempt: bool) -> None:
            await sim.sleep(delay)
            with res.request(priority=1, preempt=preempt) as req:
                await req
                log.append((sim.now(), name, "granted"))
                await sim.sleep(1)

        sim.start(user("holder", 0, True))
        sim.start(user("yielding", 0.5, False))
        sim.start(user("pushy", 0.5, True))

    expected = both(simpy_model, kit_model)
    assert [e[1] for e in expected[:3]] == ["holder", "pushy", "yielding"]


def test_the_victim_of_a_preemption_is_the_least_urgent_latest_user() -> None:
    def simpy_model(env: simpy.Environment, log: Log) -> None:
        res = simpy.PreemptiveResource(env, 2)

        def user(name: str, delay: float, prio: int) -> Generator[Any, Any, None]:
            yield env.timeout(delay)
            with res.request(priority=prio) as req:
                yield req
                try:
                    yield env.timeout(5)
                    log.append((env.now, name, "done"))
                except simpy.Interrupt as i:
                    log.append((env.now, name, "preempted by", i.cause.by.name))  # type: ignore[union-attr]

        env.process(user("a", 0, 2))
        env.process(user("b", 0, 2))
        env.process(user("boss", 1, 0))

    async def kit_model(log: Log) -> None:
        res = sim.PreemptiveResource(2)

        async def user(name: str, delay: float, prio: int) -> None:
            await sim.sleep(delay)
            with res.request(priority=prio) as req:
                await req
                try:
                    await sim.sleep(5)
                    log.append((sim.now(), name, "done"))
                except sim.Interrupt as i:
                    cause: Any = i.cause
                    log.append((sim.now(), name, "preempted by", cause.by.name))

        sim.start(user("a", 0, 2), name="a")
        sim.start(user("b", 0, 2), name="b")
        sim.start(user("boss", 1, 0), name="user")

    assert (1, "a", "preempted by", "user") in both(simpy_model, kit_model)


# --------------------------------------------------------------------------- 7. conditions


def test_a_nested_condition_resumes_its_process_a_step_later_per_level() -> None:
    def simpy_model(env: simpy.Environment, log: Log) -> None:
        def waiter() -> Generator[Any, Any, None]:
            t = env.timeout(1)
            yield (t | env.timeout(5)) | env.timeout(6)
            log.append((env.now, "condition"))

        def plain() -> Generator[Any, Any, None]:
            yield env.timeout(1)
            yield env.timeout(0)
            log.append((env.now, "plain"))

        env.process(waiter())
        env.process(plain())

    async def kit_model(log: Log) -> None:
        async def waiter() -> None:
            t = sim.sleep(1)
            await ((t | sim.sleep(5)) | sim.sleep(6))
            log.append((sim.now(), "condition"))

        async def plain() -> None:
            await sim.sleep(1)
            await sim.sleep(0)
            log.append((sim.now(), "plain"))

        sim.start(waiter())
        sim.start(plain())

    assert [e[1] for e in both(simpy_model, kit_model)[:2]] == ["plain", "condition"]


def test_a_condition_value_holds_every_operand_processed_before_it_was_decided() -> None:
    def simpy_model(env: simpy.Environment, log: Log) -> None:
        def main() -> Generator[Any, Any, None]:
            a = env.timeout(1, "a")
            b = env.timeout(1, "b")
            c = env.timeout(2, "c")
            got = yield a | b | c
            log.append((env.now, sorted(got.values()), c in got))

        env.process(main())

    async def kit_model(log: Log) -> None:
        a = sim.sleep(1, "a")
        b = sim.sleep(1, "b")
        c = sim.sleep(2, "c")
        got = await (a | b | c)
        log.append((sim.now(), sorted(got.values()), c in got))

    assert both(simpy_model, kit_model)[0] == (1, ["a", "b"], False)


# --------------------------------------------------------------------------- 8. hand-overs


def test_a_get_that_makes_room_serves_waiting_puts_one_step_later() -> None:
    def simpy_model(env: simpy.Environment, log: Log) -> None:
        tank = simpy.Container(env, 10, init=10)

        def putter() -> Generator[Any, Any, None]:
            yield tank.put(5)
            log.append((env.now, "put", tank.level))

        def getter() -> Generator[Any, Any, None]:
            yield env.timeout(1)
            yield tank.get(5)
            log.append((env.now, "got", tank.level))

        def bystander() -> Generator[Any, Any, None]:
            yield env.timeout(1)
            yield env.timeout(0)
            log.append((env.now, "bystander", tank.level))

        env.process(putter())
        env.process(getter())
        env.process(bystander())

    async def kit_model(log: Log) -> None:
        tank = sim.Container(10, init=10)

        async def putter() -> None:
            await tank.put(5)
            log.append((sim.now(), "put", tank.level))

        async def getter() -> None:
            await sim.sleep(1)
            await tank.get(5)
            log.append((sim.now(), "got", tank.level))

        async def bystander() -> None:
            await sim.sleep(1)
            await sim.sleep(0)
            log.append((sim.now(), "bystander", tank.level))

        sim.start(putter())
        sim.start(getter())
        sim.start(bystander())

    both(simpy_model, kit_model)


def test_a_release_keeps_the_queue_first_in_first_out() -> None:
    def simpy_model(env: simpy.Environment, log: Log) -> None:
        res = simpy.Resource(env, 1)

        def user(name: str, delay: float, again: bool) -> Generator[Any, Any, None]:
            yield env.timeout(delay)
            with res.request() as req:
                yield req
                log.append((env.now, name, "granted"))
                yield env.timeout(1)
            if again:
                with res.request() as req:
                    yield req
                    log.append((env.now, name, "granted again"))

        env.process(user("first", 0, True))
        env.process(user("second", 0.5, False))

    async def kit_model(log: Log) -> None:
        res = sim.Resource(1)

        async def user(name: str, delay: float, again: bool) -> None:
            await sim.sleep(delay)
            async with res.request():
                log.append((sim.now(), name, "granted"))
                await sim.sleep(1)
            if again:
                async with res.request():
                    log.append((sim.now(), name, "granted again"))

        sim.start(user("first", 0, True))
        sim.start(user("second", 0.5, False))

    expected = both(simpy_model, kit_model)
    assert [e[1:] for e in expected[:3]] == [
        ("first", "granted"),
        ("second", "granted"),
        ("first", "granted again"),
    ]


# --------------------------------------------------------------------------- 9. first_of


def test_first_of_picks_the_first_operand_that_had_happened_and_withdraws_the_rest() -> None:
    def simpy_model(env: simpy.Environment, log: Log) -> None:
        store = simpy.Store(env)

        def main() -> Generator[Any, Any, None]:
            get = store.get()
            t = env.timeout(1, "late")
            got = yield get | t
            which = "get" if get in got else "timeout"
            log.append((env.now, which, got[get] if get in got else got[t]))
            if get not in got:
                get.cancel()

        def producer() -> Generator[Any, Any, None]:
            yield env.timeout(1)
            yield store.put("item")
            log.append((env.now, "put", len(store.items)))

        env.process(main())
        env.process(producer())

    async def kit_model(log: Log) -> None:
        store = sim.Store()

        async def main() -> None:
            get = store.get()
            which, value = await sim.first_of(get, sim.sleep(1, "late"))
            log.append((sim.now(), "get" if which is get else "timeout", value))

        async def producer() -> None:
            await sim.sleep(1)
            await store.put("item")
            log.append((sim.now(), "put", len(store.items)))

        sim.start(main())
        sim.start(producer())

    both(simpy_model, kit_model)


@pytest.mark.parametrize("backend", BACKENDS)
def test_until_is_exclusive_in_simpy_order_and_inclusive_by_default(backend: str) -> None:
    """The table's ``until`` row: the same model, both orders, an event due at exactly T."""

    def simpy_model(env: simpy.Environment, log: Log) -> None:
        def main() -> Generator[Any, Any, None]:
            yield env.timeout(2)
            log.append((env.now, "at two"))

        env.process(main())

    async def kit_model(log: Log) -> None:
        await sim.sleep(2)
        log.append((sim.now(), "at two"))

    assert run_kit(kit_model, backend, until=2) == run_simpy(simpy_model, until=2)
    assert run_kit(kit_model, backend, until=2) == [("end", 2)]
    assert run_kit(kit_model, backend, order="virtualtime", until=2) == [
        (2, "at two"),
        ("end", 2),
    ]


# --------------------------------------------------------------------------- rows 20 and 21


def test_a_sleep_made_before_it_is_awaited_starts_when_made_in_simpy_order() -> None:
    def simpy_model(env: simpy.Environment, log: Log) -> None:
        def main() -> Generator[Any, Any, None]:
            later = env.timeout(2)
            yield env.timeout(1)
            yield later
            log.append((env.now, "both done"))

        env.process(main())

    async def kit_model(log: Log) -> None:
        later = sim.sleep(2)
        await sim.sleep(1)
        await later
        log.append((sim.now(), "both done"))

    assert both(simpy_model, kit_model)[0] == (2, "both done")
    for backend in BACKENDS:  # the default order: a sleep starts when awaited
        assert run_kit(kit_model, backend, order="virtualtime")[0] == (3, "both done")


@pytest.mark.parametrize("backend", BACKENDS)
def test_between_runs_the_model_waits_in_simpy_order_and_runs_by_default(backend: str) -> None:
    import anyio

    import virtualtime

    async def scenario(order: str) -> Log:
        log: Log = []

        async def sleeper() -> None:
            await sim.sleep(1.5)
            log.append((sim.now(), "woke"))

        async def late() -> None:
            log.append((sim.now(), "late start"))

        async with sim.Simulation(order=order) as env:
            sim.start(sleeper())
            await env.run(until=1)
            assert env.now == 1.0
            sim.start(late())  # the simulation goes on after a run: it has not ended
            await anyio.sleep(1)  # time the runner spends outside run()
            log.append((sim.now(), "between"))
            await env.run(until=3)
        return log

    assert virtualtime.anyio_run(scenario, "virtualtime", backend=backend) == [
        (1.0, "late start"),
        (1.5, "woke"),
        (2.0, "between"),
    ]
    # SimPy's rule: events are processed only inside run(): the wake-up due at 1.5 waits for
    # the next run, which processes it at once (the clock already reads 2).
    assert virtualtime.anyio_run(scenario, "simpy", backend=backend) == [
        (2.0, "between"),
        (2.0, "late start"),
        (2.0, "woke"),
    ]
