"""The registry of drivers (virtualtime/_shared/_drivers.py): how the verbs find other clocks.

The driving verbs live in the asyncio engine, which knows no other backend.  When no asyncio loop
runs in the calling thread they ask the registered finders for another backend's running
virtual clock and drive what they get.  These tests register a fake backend in place of the
real ones; tests/test_trio_verbs.py drives the trio clock through the same path.
"""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

import virtualtime
from virtualtime import InvalidTypeError, InvalidValueError, UsageError
from virtualtime._engine import _control
from virtualtime._shared import _drivers

NO_LOOP = "needs a running virtual event loop, and no event loop is running"


class FakeDriver:
    """A backend's clock standing at 42.0 whose next deadline is at 50.0; it notes each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def now(self) -> float:
        self.calls.append(("now", None))
        return 42.0

    def peek(self) -> float:
        self.calls.append(("peek", None))
        return 50.0

    async def settle(self) -> float:
        self.calls.append(("settle", None))
        return 42.0

    async def step(self) -> float | None:
        self.calls.append(("step", None))
        return 50.0

    async def evolve(self, dt: float) -> float:
        self.calls.append(("evolve", dt))
        return 42.0 + dt

    async def run_until(self, t: float) -> float:
        self.calls.append(("run_until", t))
        return t

    async def fast_forward(self, dt: float) -> float:
        self.calls.append(("fast_forward", dt))
        return 42.0 + dt


class Backend:
    """A fake backend's finder: answers with ``driver`` (None: not running) and notes each ask."""

    def __init__(self, driver: FakeDriver | None) -> None:
        self.driver = driver
        self.asked: list[str] = []

    def __call__(self, what: str) -> FakeDriver | None:
        self.asked.append(what)
        return self.driver


@pytest.fixture
def alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """No backend registered but the ones a test registers (the real ones come back after)."""
    monkeypatch.setattr(_drivers, "_finders", {})


@pytest.fixture
def fake(alone: None) -> Backend:
    backend = Backend(FakeDriver())
    _drivers.register("fake", backend)
    return backend


def finish(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never suspends to its end, with no event loop at all."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    pytest.fail("the verb suspended: it did not go to the fake driver")


def test_a_registered_finder_is_asked_when_no_asyncio_loop_runs(fake: Backend) -> None:
    assert virtualtime.now() == 42.0
    assert fake.asked == ["virtualtime.now()"]


def test_the_driver_found_drives_every_verb(fake: Backend) -> None:
    assert fake.driver is not None
    results = [
        virtualtime.now(),
        virtualtime.peek(),
        finish(virtualtime.settle()),
        finish(virtualtime.step()),
        finish(virtualtime.evolve(2)),
        finish(virtualtime.run_until(70)),
        finish(virtualtime.fast_forward(8)),
    ]
    assert results == [42.0, 50.0, 42.0, 50.0, 44.0, 70, 50.0]
    calls = fake.driver.calls
    assert calls == [
        ("now", None),
        ("peek", None),
        ("settle", None),
        ("step", None),
        ("evolve", 2.0),
        ("run_until", 70.0),
        ("fast_forward", 8.0),
    ]
    # The numbers reach the driver checked and as floats, whatever the caller passed.
    assert all(type(arg) is float for _, arg in calls[4:])
    assert fake.asked == [
        f"virtualtime.{verb}()"
        for verb in ("now", "peek", "settle", "step", "evolve", "run_until", "fast_forward")
    ]


def test_bad_numbers_are_refused_before_the_driver_is_used(fake: Backend) -> None:
    assert fake.driver is not None
    with pytest.raises(InvalidValueError, match="dt must be >= 0, got -1"):
        finish(virtualtime.evolve(-1))
    with pytest.raises(InvalidValueError, match="dt must be finite, got nan"):
        finish(virtualtime.fast_forward(math.nan))
    with pytest.raises(InvalidTypeError, match="t must be a real number, got 'soon'"):
        finish(virtualtime.run_until("soon"))  # type: ignore[arg-type]
    assert fake.driver.calls == []
    # A bad span is refused before anybody is asked; a target needs the clock's time.
    assert fake.asked == ["virtualtime.run_until()"]


def test_a_running_asyncio_loop_is_asked_first(fake: Backend) -> None:
    async def main() -> tuple[float, float]:
        return virtualtime.now(), await virtualtime.evolve(1)

    assert virtualtime.run(main(), start=5) == (5.0, 6.0)

    async def on_a_plain_loop() -> float:
        return virtualtime.now()

    with pytest.raises(UsageError, match="but the running loop is"):
        asyncio.run(on_a_plain_loop())
    assert fake.asked == []
    # Once no loop runs, the same call goes to the other backend.
    assert virtualtime.now() == 42.0
    assert fake.asked == ["virtualtime.now()"]


@pytest.mark.parametrize("finders", [[Backend(None)], [Backend(None), Backend(None)]])
def test_without_a_driver_the_verbs_say_what_they_need(alone: None, finders: list[Backend]) -> None:
    for number, backend in enumerate(finders):
        _drivers.register(f"backend {number}", backend)
    with pytest.raises(UsageError, match=f"virtualtime.now\\(\\) {NO_LOOP}"):
        virtualtime.now()
    with pytest.raises(UsageError, match=f"virtualtime.step\\(\\) {NO_LOOP}"):
        finish(virtualtime.step())
    for backend in finders:
        assert backend.asked == ["virtualtime.now()", "virtualtime.step()"]


def test_a_finders_usage_error_reaches_the_caller(alone: None) -> None:
    refusal = UsageError("virtualtime.step() needs virtual time, but fake runs with RealClock")

    def finder(what: str) -> FakeDriver | None:
        raise refusal

    _drivers.register("fake", finder)
    with pytest.raises(UsageError) as caught:
        finish(virtualtime.step())
    assert caught.value is refusal


def test_the_first_finder_with_a_driver_wins(alone: None) -> None:
    idle, running, never = Backend(None), Backend(FakeDriver()), Backend(FakeDriver())
    for name, backend in [("idle", idle), ("running", running), ("never", never)]:
        _drivers.register(name, backend)
    assert _drivers.registered() == ("idle", "running", "never")
    assert finish(virtualtime.evolve(1.5)) == 43.5
    assert (idle.asked, running.asked, never.asked) == (["virtualtime.evolve()"],) * 2 + ([],)
    assert running.driver is not None
    assert running.driver.calls == [("evolve", 1.5)]


def test_registering_again_replaces_and_unregistering_forgets(alone: None) -> None:
    first, second = Backend(FakeDriver()), Backend(None)
    _drivers.register("fake", first)
    _drivers.register("fake", second)
    assert _drivers.registered() == ("fake",)
    with pytest.raises(UsageError, match=NO_LOOP):
        virtualtime.now()
    assert (first.asked, second.asked) == ([], ["virtualtime.now()"])
    _drivers.unregister("fake")
    _drivers.unregister("fake")  # forgetting twice is no error
    assert _drivers.registered() == ()
    # With no backend registered at all, the verbs say what they need.
    with pytest.raises(UsageError, match=f"virtualtime.now\\(\\) {NO_LOOP}"):
        virtualtime.now()
    assert second.asked == ["virtualtime.now()"]


@pytest.mark.parametrize(
    ("backend", "finder", "error", "message"),
    [
        (3, Backend(None), InvalidTypeError, "backend must be a str naming the backend, got 3"),
        (None, Backend(None), InvalidTypeError, "backend must be a str .*, got None"),
        ("", Backend(None), InvalidValueError, "backend must be a non-empty name, got ''"),
        ("fake", "find", InvalidTypeError, "finder must be a callable .*, got 'find' \\(str\\)"),
        ("fake", None, InvalidTypeError, "finder must be a callable .*, got None"),
    ],
)
def test_a_bad_registration_is_refused_and_changes_nothing(
    alone: None, backend: Any, finder: Any, error: type[Exception], message: str
) -> None:
    kept = Backend(None)
    _drivers.register("kept", kept)
    with pytest.raises(error, match=message):
        _drivers.register(backend, finder)
    assert _drivers.registered() == ("kept",)
    with pytest.raises(UsageError, match=NO_LOOP):
        virtualtime.now()
    assert kept.asked == ["virtualtime.now()"]


def _fresh(code: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return result.stdout.splitlines()


def test_the_trio_package_registers_its_finder_when_imported() -> None:
    # In a fresh interpreter: the package registers a stand-in for trio and loads no trio;
    # importing virtualtime.trio puts the real finder in its place.
    code = (
        "import sys\n"
        "import virtualtime\n"
        "from virtualtime._shared import _drivers\n"
        "print(_drivers.registered(), _drivers._finders['trio'].__name__, 'trio' in sys.modules)\n"
        "import virtualtime.trio\n"
        "print(_drivers.registered(), _drivers._finders['trio'].__name__)\n"
    )
    assert _fresh(code) == ["('trio',) _trio_stand_in False", "('trio',) find_driver"]


def test_a_trio_run_with_its_own_clock_is_told_so_before_virtualtime_trio_is_imported() -> None:
    code = (
        "import sys, trio, virtualtime\n"
        "async def main():\n"
        "    print('virtualtime.trio' in sys.modules)\n"
        "    try:\n"
        "        virtualtime.now()\n"
        "    except virtualtime.UsageError as error:\n"
        "        print(error)\n"
        "trio.run(main)\n"
    )
    assert _fresh(code) == [
        "False",
        "virtualtime.now() needs virtual time, but trio runs with SystemClock; run it with "
        "virtualtime.trio.run(...) or trio.run(..., clock=virtualtime.trio.VirtualClock())",
    ]


def test_the_engines_verbs_do_not_name_any_other_backend() -> None:
    source = Path(_control.__file__).read_text(encoding="utf-8").lower()
    assert "trio" not in source
