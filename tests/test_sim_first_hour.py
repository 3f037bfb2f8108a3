"""What a new user met in the first hour with the modelling kit (issue 34), pinned.

Each test names the trouble it guards against: an import that needed an undeclared package,
clean-up whose order changed from run to run, the end time of a run nowhere to be read,
statistics that could not be read after the run, SimPy habits (``sim.start(generator)``,
``timeout(d, value)``) met with a bare error, an un-awaited sleep that said nothing, and a
journey that could not be followed through a halt.
"""

from __future__ import annotations

import gc
import math
import os
import subprocess
import sys
import textwrap
import warnings
from typing import Any

import anyio
import pytest
from conftest import Runner

import virtualtime
from virtualtime import sim


def _run_python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


# --------------------------------------------------------------------------- no sniffio


def test_the_kit_imports_and_runs_without_sniffio() -> None:
    """sniffio is not a dependency (anyio no longer needs it): the kit must not need it."""
    out = _run_python(
        """
        import sys
        sys.modules["sniffio"] = None  # importing it now fails, as on a base install
        from virtualtime import sim

        async def main():
            counter = sim.Resource()
            async with counter.request():
                await sim.sleep(2)
            return sim.now()

        # ... and it finds its library without importing trio either.
        print(sim.simulate(main), "trio" in sys.modules)
        """
    )
    assert out.strip() == "2.0 False"


def test_a_simulation_entered_outside_any_loop_is_a_usage_error() -> None:
    env = sim.Simulation()
    coro = env.__aenter__()
    with pytest.raises(virtualtime.UsageError, match="runs inside asyncio or trio"):
        coro.send(None)
    assert env.processes == []


# --------------------------------------------------------------------------- clean-up order

_CLEANUP_MODEL = """
from virtualtime import sim


def cleanup_order(backend):
    cancelled = []

    async def worker(n):
        try:
            await sim.sleep(100 + n)  # still waiting when the run ends
        finally:
            cancelled.append(n)

    async def main():
        for n in range(20):
            sim.start(worker(n))
        await sim.sleep(1000)

    sim.simulate(main, until=10, backend=backend)
    return cancelled

print(cleanup_order("asyncio"), cleanup_order("trio"))
"""


def test_processes_left_at_the_end_are_cancelled_in_start_order_in_every_run() -> None:
    """The order of clean-up is part of the run: ``finally`` blocks that record statistics see
    it.  A set of processes made it vary with the address of each object (run to run)."""
    start_order = list(range(20))
    # Fresh processes at once (each its own address layout and hash seed), not one by one.
    procs = [
        subprocess.Popen(
            [sys.executable, "-W", "error", "-c", textwrap.dedent(_CLEANUP_MODEL)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": str(i)},
        )
        for i in range(8)
    ]
    seen = set()
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        seen.add(out)
    assert seen == {f"{start_order} {start_order}\n"}


@pytest.fixture(params=["asyncio", "trio"])
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


# --------------------------------------------------------------------------- the end time


def test_a_kept_simulation_tells_when_the_run_ended_and_main_still_gives_its_value(
    backend: str,
) -> None:
    async def customer(counter: sim.Resource, service: float) -> None:
        async with counter.request():
            await sim.sleep(service)

    async def main() -> int:
        counter = sim.Resource()
        for service in (3, 4, 5):
            sim.start(customer(counter, service))
        return 3

    env = sim.Simulation()
    assert env.simulate(main, backend=backend) == 3  # main's value, as sim.simulate gives
    assert env.now == 12.0  # the last customer left at 3 + 4 + 5
    assert sim.simulate(main, backend=backend) == 3
    with pytest.raises(virtualtime.UsageError, match="runs once"):
        env.simulate(main, backend=backend)


def test_until_inf_runs_until_every_process_has_ended_as_until_none_does(backend: str) -> None:
    async def main() -> str:
        await sim.sleep(7)
        return "done"

    env = sim.Simulation()
    assert env.simulate(main, until=math.inf, backend=backend) == "done"
    assert env.now == 7.0


# --------------------------------------------------------------------------- statistics


def test_statistics_are_readable_after_the_run_even_for_a_resource_nobody_used(
    backend: str,
) -> None:
    async def main() -> tuple[sim.Resource, sim.Store]:
        idle, shelf = sim.Resource(2), sim.Store()
        await sim.sleep(10)
        return idle, shelf

    result = sim.simulate(main, backend=backend)
    assert result is not None
    idle, shelf = result
    assert idle.stats.utilisation() == 0.0
    assert idle.stats.served() == 0
    assert shelf.stats.mean_level() == 0.0
    assert idle.stats.users.now == 10.0


def test_statistics_of_a_resource_never_used_anywhere_say_why_there_are_none() -> None:
    counter = sim.Resource()
    with pytest.raises(virtualtime.UsageError, match="has not been used in a simulation"):
        _ = counter.stats


# --------------------------------------------------------------------------- SimPy habits


def test_starting_a_simpy_generator_names_the_fix() -> None:
    def simpy_style() -> Any:
        yield 1

    async def main() -> None:
        sim.start(simpy_style())

    with pytest.raises(virtualtime.InvalidTypeError, match=r"async def.*coming-from-simpy\.md"):
        sim.simulate(main)
    with pytest.raises(virtualtime.InvalidTypeError, match=r"async def.*coming-from-simpy\.md"):
        sim.simulate(simpy_style)


def test_sleep_gives_back_the_value_it_was_given_on_every_path(backend: str) -> None:
    async def main() -> tuple[Any, ...]:
        plain = await sim.sleep(1)
        given = await sim.sleep(2, "rested")
        _, value = await sim.first_of(sim.sleep(5, "late"), sim.sleep(1, "early"))
        both = await sim.all_of(sim.sleep(1, "a"), sim.sleep(2, "b"), sim.sleep(0))
        return plain, given, value, both, sim.now()

    assert sim.simulate(main, backend=backend) == (None, "rested", "early", ["a", "b", None], 6.0)


def test_an_interrupted_sleep_with_a_value_raises_the_interrupt(backend: str) -> None:
    async def napper() -> str:
        try:
            return str(await sim.sleep(10, "slept"))
        except sim.Interrupt as interrupt:
            return f"woken by {interrupt.cause} at {sim.now()}"

    async def main() -> str:
        proc = sim.start(napper())
        await sim.sleep(4)
        proc.interrupt("alarm")
        return await proc

    assert sim.simulate(main, backend=backend) == "woken by alarm at 4.0"


def test_a_sleep_never_awaited_warns_as_an_asyncio_coroutine_does_and_a_lost_one_not(
    backend: str,
) -> None:
    async def forgetful() -> None:
        sim.sleep(5)  # forgot the await

    async def patient() -> str:
        counter = sim.Resource()
        req = counter.request()  # granted at once: it wins before the sleep begins
        which, _ = await sim.first_of(req, sim.sleep(3))
        req.release()
        return "request" if which is req else "sleep"

    with pytest.warns(RuntimeWarning, match=r"coroutine 'sim\.sleep' was never awaited"):
        sim.simulate(forgetful, backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the sleep that lost is taken back, not forgotten
        assert sim.simulate(patient, backend=backend) == "request"
        gc.collect()


# --------------------------------------------------------------------------- journeys


async def _halt_resume_redirect(
    van: sim.Vehicle[tuple[float, ...]], through_halts: bool
) -> list[tuple[str, float, tuple[float, ...]]]:
    got: list[tuple[str, float, tuple[float, ...]]] = []
    async with sim.Fleet(van):
        journey = van.travel_to((10.0, 0.0))

        async def watcher() -> None:
            outcome = await journey.follow(through_halts=through_halts)
            got.append((outcome.status.value, outcome.ended, outcome.position))

        async with anyio.create_task_group() as group:
            group.start_soon(watcher)
            await anyio.sleep(3)
            van.halt()
            await anyio.sleep(5)
            van.resume()  # a new journey: follow() goes on with it
            await anyio.sleep(2)
            van.halt()
            await anyio.sleep(1)
            van.travel_to((20.0, 0.0))  # a new destination after a halt: followed too
    return got


def test_following_a_journey_through_halts_waits_until_it_truly_ends(run: Runner) -> None:
    def van() -> sim.Vehicle[tuple[float, ...]]:
        return sim.Vehicle(sim.Euclidean(), position=(0.0, 0.0), velocity=1.0)

    assert run(lambda: _halt_resume_redirect(van(), through_halts=True)) == [
        ("arrived", 26.0, (20.0, 0.0))
    ]
    assert run(lambda: _halt_resume_redirect(van(), through_halts=False)) == [
        ("halted", 3.0, (3.0, 0.0))
    ]


def test_following_through_a_halt_that_is_final_returns_the_halt(run: Runner) -> None:
    async def main() -> tuple[str, float]:
        van = sim.Vehicle(sim.Euclidean(), position=(0.0, 0.0), velocity=1.0)
        async with sim.Fleet(van):
            journey = van.travel_to((10.0, 0.0))
            await anyio.sleep(4)
            van.halt()
            # Reset: the halted journey will never go on.
            follower = journey.follow(through_halts=True)
            van.reset()
            outcome = await follower
        return outcome.status.value, outcome.ended

    assert run(main) == ("halted", 4.0)
