"""What a new user met in the first hour with the modelling kit (issue 34), pinned.

Each test names the trouble it guards against: an import that needed an undeclared package,
clean-up whose order changed from run to run, the end time of a run nowhere to be read,
statistics that could not be read after the run, SimPy habits (``sim.start(generator)``,
``timeout(d, value)``) met with a bare error, an un-awaited sleep that said nothing, and a
journey that could not be followed through a halt.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

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
    seen = {_run_python(_CLEANUP_MODEL) for _ in range(15)}
    assert seen == {f"{start_order} {start_order}\n"}
