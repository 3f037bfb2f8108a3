"""Every run is the same run, clean-up included: task groups cancel in a reproducible order.

An asyncio ``TaskGroup`` that one child brings down cancels the others by iterating a ``set``
of tasks, and so does an anyio task group's cancel scope on the asyncio backend.  A stock
task hashes by its address, so that order is a function of the memory layout: of the process
(address-space randomisation, ``PYTHONHASHSEED``) and of everything allocated before.  The
virtual loop's tasks hash by their creation number on the loop, which makes it a function of
the program alone.

The program below runs the same failing group in fresh interpreters -- each with its own
address layout and hash seed -- and twice in each, and every run must report the same order.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from typing import Any

import pytest

import virtualtime

PROGRAM = r"""
import asyncio
import json
import sys

import anyio

import virtualtime

SIZES = (20, 40, 100, 300)


async def child(i, order, sleep):
    try:
        await sleep(10)
    finally:
        order.append(i)


async def boom(sleep):
    await sleep(1)
    raise RuntimeError("boom")


async def asyncio_group(n):
    order = []
    try:
        async with asyncio.TaskGroup() as tg:
            for i in range(n):
                tg.create_task(child(i, order, asyncio.sleep))
            tg.create_task(boom(asyncio.sleep))
    except* RuntimeError:
        pass
    return order


async def anyio_group(n):
    order = []
    try:
        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(child, i, order, anyio.sleep)
            tg.start_soon(boom, anyio.sleep)
    except* RuntimeError:
        pass
    return order


def run_all():
    out = {}
    for n in SIZES:
        out[f"asyncio-{n}"] = virtualtime.run(asyncio_group(n))
        out[f"anyio-{n}"] = anyio.run(
            anyio_group, n, backend="asyncio",
            backend_options={"loop_factory": virtualtime.new_event_loop},
        )
    return out


first = run_all()
garbage = [object() for _ in range(int(sys.argv[1]))]  # a different allocation history
second = run_all()
print(json.dumps({"first": first, "second": second}))
"""

RUNS = 10


def _orders(runs: int) -> list[dict[str, Any]]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PROGRAM, str(37 * i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": str(i)},
        )
        for i in range(runs)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate()
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    return results


def test_task_groups_cancel_in_one_order_in_every_process() -> None:
    results = _orders(RUNS)
    reference = results[0]["first"]
    for key, order in reference.items():
        n = int(key.split("-")[1])
        assert sorted(order) == list(range(n)), key  # every child saw its cancellation
    for i, result in enumerate(results):
        for key, order in result["first"].items():
            assert order == reference[key], f"process {i}, {key}: {order} != {reference[key]}"
    for i, result in enumerate(results):
        assert result["second"] == result["first"], f"process {i}: a second run in-process"


def test_default_tasks_are_numbered_stock_tasks() -> None:
    async def child() -> asyncio.Task[Any] | None:
        return asyncio.current_task()

    async def main() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        tasks = [loop.create_task(child()) for _ in range(5)]
        named = loop.create_task(child(), name="worker")
        loop.set_debug(True)
        traced = loop.create_task(asyncio.sleep(0))  # the origin
        await traced
        return {
            "hashes": [hash(task) for task in tasks],
            "current": [await task is task for task in tasks],
            "all Task": all(isinstance(task, asyncio.Task) for task in tasks),
            "numbered": type(named).__mro__[1] is asyncio.Task,
            "repr": (await named, repr(named))[1],
            "factory": loop.get_task_factory(),
            "origin": traced._source_traceback[-1].line,  # type: ignore[attr-defined]
        }

    seen = virtualtime.run(main())
    # The main task is the loop's first (0); these five are the next five, in order.
    assert seen["hashes"] == [1, 2, 3, 4, 5]
    # Otherwise a stock task: current_task(), awaiting, isinstance, repr, debug origin.
    assert seen["current"] == [True] * 5
    assert seen["all Task"]
    assert seen["numbered"]
    assert seen["repr"].startswith("<Task finished name='worker' coro=<")
    assert seen["factory"] is None
    assert seen["origin"] == "traced = loop.create_task(asyncio.sleep(0))  # the origin"


def _custom_factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
    task = asyncio.Task(coro, loop=loop, **kwargs)
    task.made_by_factory = True  # type: ignore[attr-defined]
    return task


FACTORIES = [pytest.param(_custom_factory, id="custom")]
if hasattr(asyncio, "eager_task_factory"):  # 3.12+
    FACTORIES.append(pytest.param(asyncio.eager_task_factory, id="eager"))


@pytest.mark.parametrize("factory", FACTORIES)
def test_a_task_factory_you_set_makes_the_tasks(factory: Any) -> None:
    async def child() -> str:
        return "done"

    async def main() -> tuple[type, str, str, bool, type]:
        loop = asyncio.get_running_loop()
        loop.set_task_factory(factory)
        try:
            task = loop.create_task(child(), name="mine")
            made = type(task), task.get_name(), await task, loop.get_task_factory() is factory
        finally:
            loop.set_task_factory(None)
        return (*made, type(loop.create_task(child())))

    kind, name, result, kept, default = virtualtime.run(main())
    # The factory's own tasks while it is set; numbered tasks again once it is unset.
    assert (kind, name, result, kept) == (asyncio.Task, "mine", "done", True)
    assert default is not asyncio.Task
    assert issubclass(default, asyncio.Task)


def test_anyio_scopes_are_ordered_on_virtual_loops_only() -> None:
    import anyio
    import anyio.lowlevel
    from anyio._backends import _asyncio as anyio_asyncio

    from virtualtime._engine import _anyio_sleep

    async def kind() -> type:
        with anyio.CancelScope() as scope:
            await anyio.lowlevel.checkpoint()
        return type(scope._child_scopes)  # type: ignore[attr-defined]

    virtual = virtualtime.anyio_run(kind, backend="asyncio")
    stock = anyio.run(kind, backend="asyncio")
    assert _anyio_sleep.scopes_ordered()
    assert anyio_asyncio.CancelScope.__init__.__wrapped__ is _anyio_sleep._state["scope_init"]  # type: ignore[attr-defined]
    assert (virtual, stock) == (_anyio_sleep.ChildScopes, set)


def test_child_scopes_behave_as_the_set_they_replace() -> None:
    from virtualtime._engine._anyio_sleep import ChildScopes

    scopes = ChildScopes()
    a, b, c = object(), object(), object()
    for scope in (c, a, b):
        scopes.add(scope)
    scopes.add(a)  # already there: its place is kept
    assert list(scopes) == [c, a, b]
    assert len(scopes) == 3
    scopes.remove(a)
    scopes.discard(a)  # absent: nothing happens, as with a set
    with pytest.raises(KeyError):
        scopes.remove(a)
    assert list(scopes) == [c, b]
    assert scopes


def test_a_swapped_asyncio_task_class_makes_the_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    # CPython's tests of the pure-Python tasks swap asyncio.tasks.Task for tasks._PyTask; the
    # stock loop then makes that class, and so must this one (a numbered C task would not be
    # what those tests inspect).
    py_task = asyncio.tasks._PyTask  # type: ignore[attr-defined]
    monkeypatch.setattr(asyncio.tasks, "Task", py_task)

    async def child() -> str:
        return "done"

    async def main() -> tuple[type, str]:
        task = asyncio.get_running_loop().create_task(child())
        return type(task), await task

    assert virtualtime.run(main()) == (py_task, "done")
