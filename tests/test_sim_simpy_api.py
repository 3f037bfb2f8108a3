"""SimPy's API, the parts the kit gained for issue 37: each works in both orders and on both
backends, and bad input is a clear error that changes nothing.

``|``/``&``/``AnyOf``/``AllOf`` and ``ConditionValue``; ``run``/``simulate`` until a process
or a signal; ``Signal.trigger``/``ok``/``processed``/``defused``; ``PriorityItem``;
``start_delayed``; ``Resource.release(req)``, ``put_queue``/``get_queue``; ``cancel()`` and
``with`` on gets and puts; ``Process.target``; a resource kind of one's own on
``BaseResource``.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import virtualtime
from virtualtime import sim


@pytest.fixture(params=["asyncio", "trio"])
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture(params=["virtualtime", "simpy"])
def order(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


def run(main: Any, backend: str, order: str, **kw: Any) -> Any:
    return sim.simulate(main, backend=backend, order=order, **kw)


# --------------------------------------------------------------------------- conditions


def test_operators_give_a_condition_value_and_withdraw_nothing(backend: str, order: str) -> None:
    async def main() -> tuple[Any, ...]:
        res = sim.Resource(1)
        holder = res.request()
        await holder
        req = res.request()
        late = sim.sleep(1, "late")
        got = await (req | late)
        queued = len(res.queue)  # the request that lost is still queued, as in SimPy
        req.cancel()
        both = await (sim.sleep(1, "a") & sim.sleep(2, "b"))
        anyof = await sim.AnyOf(sim.sleep(1, "x"), sim.sleep(3, "y"))
        allof = await sim.AllOf()
        return (
            req in got,
            got[late],
            got.todict() == {late: "late"},
            queued,
            len(res.queue),
            list(both.values()),
            sim.now(),
            list(anyof.values()),
            len(allof),
        )

    assert run(main, backend, order) == (False, "late", True, 1, 0, ["a", "b"], 4.0, ["x"], 0)


def test_a_condition_value_refuses_an_operand_that_did_not_happen(order: str) -> None:
    async def main() -> None:
        a = sim.sleep(1)
        b = sim.sleep(2)
        got = await (a | b)
        assert a in got
        assert b not in got
        with pytest.raises(KeyError):
            got[b]

    run(main, "asyncio", order)


def test_operators_refuse_what_is_not_awaitable(order: str) -> None:
    async def main() -> None:
        nap = sim.sleep(1)
        with pytest.raises(virtualtime.InvalidTypeError, match=r"\| combines awaitables, got 5"):
            nap | 5
        with pytest.raises(virtualtime.InvalidTypeError, match=r"AllOf.. argument 0"):
            sim.AllOf(7)  # type: ignore[arg-type]
        await nap  # still a plain sleep
        assert sim.now() == 1

    run(main, "asyncio", order)


# --------------------------------------------------------------------------- until an event


def test_run_until_a_process_returns_its_value(backend: str, order: str) -> None:
    async def worker() -> str:
        await sim.sleep(3)
        return "done"

    async def other() -> None:
        await sim.sleep(10)

    async def main() -> tuple[Any, float]:
        async with sim.Simulation(order=order) as env:
            proc = env.start(worker())
            env.start(other())
            value = await env.run(until=proc)
            return value, env.now

    assert virtualtime.anyio_run(main, backend=backend) == ("done", 3.0)


def test_simulate_until_a_signal_returns_its_value_or_raises_its_exception(
    backend: str, order: str
) -> None:
    done = sim.Signal()

    async def main() -> None:
        await sim.sleep(2)
        done.succeed("fin")
        await sim.sleep(5)

    assert run(main, backend, order, until=done) == "fin"

    failed = sim.Signal()

    async def failing() -> None:
        await sim.sleep(1)
        failed.fail(ValueError("bad"))

    with pytest.raises(ValueError, match="bad"):
        run(failing, backend, order, until=failed)


# --------------------------------------------------------------------------- signals


def test_signal_trigger_ok_processed_and_defused(backend: str, order: str) -> None:
    async def main() -> tuple[Any, ...]:
        source = sim.Signal()
        copy = sim.Signal()
        source.succeed(7)
        copy.trigger(source)
        before = copy.processed
        value = await copy
        bad = sim.Signal()
        bad.defused = True
        bad.fail(ValueError("nobody"))  # defused: no waiter, and the run goes on
        await sim.sleep(1)
        return copy.ok, value, before, copy.processed, bad.ok, bad.defused

    simpy_order = order == "simpy"
    assert run(main, backend, order) == (True, 7, not simpy_order, True, False, True)


def test_signal_bad_input_is_refused(order: str) -> None:
    async def main() -> None:
        sig = sim.Signal()
        with pytest.raises(virtualtime.UsageError, match="has not fired yet"):
            sig.ok  # noqa: B018
        with pytest.raises(virtualtime.InvalidTypeError, match="defused must be True or False"):
            sig.defused = "yes"  # type: ignore[assignment]
        with pytest.raises(virtualtime.UsageError, match="has not happened yet"):
            sig.trigger(sim.Signal())
        with pytest.raises(virtualtime.InvalidTypeError, match=r"trigger.. takes a Signal"):
            sig.trigger(42)
        assert not sig.triggered
        assert not sig.defused

    run(main, "asyncio", order)


# --------------------------------------------------------------------------- stores, starts


def test_priority_items_order_by_priority_alone(backend: str, order: str) -> None:
    class Job:  # not comparable
        def __init__(self, name: str) -> None:
            self.name = name

    async def main() -> list[tuple[int, str]]:
        store = sim.PriorityStore()
        for priority, name in ((3, "c"), (1, "a"), (2, "b")):
            await store.put(sim.PriorityItem(priority, Job(name)))
        out = []
        for _ in range(3):
            item = await store.get()
            out.append((item.priority, item.item.name))
        return out

    assert run(main, backend, order) == [(1, "a"), (2, "b"), (3, "c")]


def test_start_delayed_starts_later_and_gives_the_process(backend: str, order: str) -> None:
    async def child() -> float:
        return sim.now()

    async def main() -> tuple[Any, ...]:
        starter = sim.start_delayed(child(), 2.5, name="late")
        started = await starter
        return await started, started.name, starter.value is started

    assert run(main, backend, order) == (2.5, "late", True)


def test_start_delayed_refuses_a_delay_that_is_not_positive(order: str) -> None:
    async def main() -> None:
        for delay in (0, -1, float("nan")):
            body = _nothing()
            with pytest.raises(virtualtime.InvalidValueError, match="delay must be"):
                sim.start_delayed(body, delay)
            assert inspect.getcoroutinestate(body) == inspect.CORO_CLOSED  # not left to warn
        assert sim.current_process() is not None
        assert len(_live()) == 1

    run(main, "asyncio", order)


async def _nothing() -> None:
    return None


def _live() -> list[Any]:
    from virtualtime.sim._kit import _SIM

    return _SIM.get().processes


# --------------------------------------------------------------------------- operations


def test_release_cancel_queues_and_target(backend: str, order: str) -> None:
    async def main() -> tuple[Any, ...]:
        res = sim.Resource(1)
        tank = sim.Container(10, init=0)
        first = res.request()
        await first
        second = res.request()
        waiting = [r is second for r in res.put_queue]

        async def taker() -> str:
            get: Any = tank.get(5)
            with get:  # withdrawn on leaving the block
                which, _ = await sim.first_of(get, sim.sleep(1))
                return "got" if which is get else "gave up"

        proc = sim.start(taker())
        await sim.sleep(0.5)
        target = proc.target
        res.release(first)
        await second
        second.cancel()  # granted: cancel does nothing to it
        holds = second.granted
        res.release(second)
        outcome = await proc
        return (
            waiting,
            type(target).__name__,
            holds,
            res.count,
            outcome,
            tank.get_queue,
            res.get_queue,
        )

    got = run(main, backend, order)
    assert got[0] == [True]
    assert got[2:] == (True, 0, "gave up", [], [])
    assert got[1] == "_Condition"  # the first_of the taker waits on


def test_release_refuses_a_request_of_another_resource(order: str) -> None:
    async def main() -> None:
        a, b = sim.Resource(1), sim.Resource(1)
        req = a.request()
        with pytest.raises(virtualtime.InvalidValueError, match="request must be a request made"):
            b.release(req)
        assert req.granted  # unchanged

    run(main, "asyncio", order)


class Stack(sim.BaseResource):
    """Last in, first out: a resource kind the kit does not have."""

    def __init__(self, capacity: float) -> None:
        super().__init__(capacity)
        self.items: list[Any] = []

    def put(self, item: Any) -> StackPut:  # type: ignore[override]
        return StackPut(self, item)

    def _do_put(self, put: Any) -> object:
        if len(self.items) < self.capacity:
            self.items.append(put.item)
            put.succeed()
        return None

    def _do_get(self, get: Any) -> object:
        if self.items:
            get.succeed(self.items.pop())
        return None


class StackPut(sim.Put):
    def __init__(self, stack: Stack, item: Any) -> None:
        self.item = item
        super().__init__(stack)


def test_a_resource_kind_of_ones_own(backend: str, order: str) -> None:
    async def main() -> tuple[Any, ...]:
        stack = Stack(2)
        log: list[Any] = []

        async def consumer() -> None:
            for _ in range(3):
                log.append((sim.now(), await stack.get()))

        sim.start(consumer())
        await stack.put("a")
        await stack.put("b")
        blocked = stack.put("c")
        await sim.sleep(1)
        await blocked
        pending = stack.get()
        pending.cancel()
        return tuple(log), stack.items, len(stack.get_queue)

    log, items, gets = run(main, backend, order)
    assert items == []
    assert gets == 0
    # Last in, first out: the consumer (which starts behind main in the default order, before
    # main's puts in SimPy's) takes whatever is on top when it asks.
    expected = ["b", "c", "a"] if order == "virtualtime" else ["a", "b", "c"]
    assert [value for _, value in log] == expected


def test_base_resource_needs_its_rules() -> None:
    async def main() -> None:
        with pytest.raises(NotImplementedError, match="must define _do_put"):
            sim.BaseResource().put()

    sim.simulate(main)


def test_a_condition_runs_a_coroutine_operand_as_a_process(backend: str, order: str) -> None:
    async def job() -> str:
        await sim.sleep(2)
        return "job"

    async def main() -> tuple[Any, ...]:
        got = await sim.AnyOf(job(), sim.sleep(5, "late"))
        first: Any = sim.first_of(sim.sleep(1, "one"))
        inner = await (first | sim.sleep(3))
        return list(got.values()), list(inner.values()), sim.now()

    jobs, inner, now = run(main, backend, order)
    assert jobs == ["job"]
    assert now == 3.0
    ((_which, value),) = inner  # the first_of's own value: (its winner, the winner's value)
    assert value == "one"


def test_a_filter_that_raises_while_the_queue_is_served_ends_the_run(backend: str) -> None:
    """order="simpy": a put served a step later meets a getter whose filter raises -- the run
    ends with that exception, as SimPy's ``run()`` raises it."""

    def picky(item: Any) -> bool:
        if item == "bad":
            raise LookupError("cannot judge 'bad'")
        return False

    async def getter(store: sim.FilterStore) -> None:
        await store.get(picky)

    seen: list[str] = []

    async def main() -> None:
        store = sim.FilterStore()
        sim.start(getter(store))
        await sim.sleep(1)
        try:
            await store.put("bad")  # the getters are served when the put is processed ...
        except LookupError:
            seen.append("main")  # ... which is no part of main's own wait
        await sim.sleep(1)

    with pytest.raises(LookupError, match="cannot judge"):
        run(main, backend, "simpy")
    assert seen == []


def test_a_process_awaiting_outside_the_kit_lets_the_model_go_on(backend: str) -> None:
    """order="simpy": a process that awaits something that is not the kit's while it has the
    turn is let go adrift -- the others carry on -- and rejoins the order at its next kit
    wait."""
    import anyio

    log: list[tuple[float, str]] = []

    async def outsider() -> None:
        log.append((sim.now(), "out"))
        await anyio.sleep(5)
        log.append((sim.now(), "back"))
        await sim.sleep(1)
        log.append((sim.now(), "rejoined"))

    async def insider() -> None:
        for _ in range(3):
            await sim.sleep(2)
            log.append((sim.now(), "in"))

    async def main() -> None:
        sim.start(outsider())
        sim.start(insider())

    run(main, backend, "simpy")
    assert log == [(0, "out"), (2, "in"), (4, "in"), (5, "back"), (6, "in"), (6, "rejoined")]
