"""``patch_time`` reaches a clock however it is held, only where it should, and lets go.

Every way a program can hold a clock -- module attribute, ``from`` import, default argument,
bound method, attribute of an object made before the run, a class bound before the run --
reads virtual time on the patched thread; other threads, the stdlib's own waits and worker
pools keep real time; and every exit (normal, exception, deadlock, Ctrl-C, a forked child)
puts the very same objects back.  Expected values come from the test's own arithmetic on the
virtual schedule; real readings are bracketed by the unpatched copies of the clocks.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import functools
import gc
import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
import types
import warnings
import weakref
from collections.abc import Callable, Coroutine
from datetime import date as bound_date  # classes bound before any run
from datetime import datetime as bound_datetime
from time import monotonic, perf_counter_ns, time_ns  # names bound before any run
from typing import Any, TypeVar

import pytest
import trio

import virtualtime
import virtualtime.trio
from virtualtime._clocks import _hook, _patch
from virtualtime._clocks._patch import _real_monotonic as real_monotonic

_T = TypeVar("_T")
UTC = datetime.UTC
WALL = datetime.datetime(2030, 1, 1, tzinfo=UTC)
HOUR = 3600.0


def fields() -> dict[str, object]:
    """What the patch may touch, as raw pointers and namespace entries."""
    found: dict[str, object] = {
        name: (_hook._slot(getattr(time, name), 0).value, _hook._slot(getattr(time, name), 1).value)
        for name in _patch._CLOCKS
    }
    found.update({f"datetime.{n}": vars(datetime.datetime).get(n) for n in ("now", "utcnow")})
    found["date.today"] = vars(datetime.date)["today"]
    found["Thread.start"] = vars(threading.Thread)["start"]
    for cls, name in (
        (datetime.datetime, "now"),
        (datetime.datetime, "utcnow"),
        (datetime.date, "today"),
    ):
        if name in vars(cls):  # the C definitions (the compiled path points these elsewhere)
            found[f"{cls.__name__}.{name} C"] = _hook._class_method_definition(cls, name).ml_meth
    return found


ORIGINAL_FIELDS = fields()
ORIGINAL_OBJECTS = {name: getattr(time, name) for name in _patch._CLOCKS}
# A bound method stored before any run (as attrs factories and partials do).
STORED_NOW = functools.partial(datetime.datetime.now, UTC)
STORED_NOW_FIELDS = (_hook._slot(STORED_NOW.func, 0).value, _hook._slot(STORED_NOW.func, 1).value)


def assert_restored() -> None:
    assert not _patch.installed()
    assert fields() == ORIGINAL_FIELDS
    assert {name: getattr(time, name) for name in _patch._CLOCKS} == ORIGINAL_OBJECTS
    assert all(getattr(time, n) is o for n, o in ORIGINAL_OBJECTS.items())
    stored = (_hook._slot(STORED_NOW.func, 0).value, _hook._slot(STORED_NOW.func, 1).value)
    assert stored == STORED_NOW_FIELDS
    assert getattr(STORED_NOW.func, "__self__", None) is datetime.datetime


def run(coro: Coroutine[Any, Any, _T], **options: Any) -> _T:
    result = virtualtime.run(coro, patch_time=True, wall_start=WALL, **options)
    assert_restored()
    return result


def is_real(reading: Callable[[], float]) -> bool:
    before = real_monotonic()
    value = reading()
    return before <= value <= real_monotonic()


class Stopwatch:
    """An object made before the run that keeps its clock as an attribute."""

    def __init__(self, timer: Callable[[], float] = time.monotonic) -> None:
        self.timer = timer
        self.bound = timer  # a second reference, as many libraries keep


def default_argument(timer: Callable[[], float] = time.monotonic) -> float:
    return timer()


STOPWATCH = Stopwatch()
BOUND_TODAY = datetime.date.today  # a bound class method, stored before the run


# ------------------------------------------------------------------ every way of holding


def test_every_way_of_holding_a_clock_reads_virtual_time() -> None:
    early = types.ModuleType("holds_early")
    exec("from time import monotonic, time\nfrom datetime import datetime", early.__dict__)

    async def main() -> dict[str, object]:
        await asyncio.sleep(HOUR)
        return {
            "module attribute": time.monotonic(),
            "from import": monotonic(),
            "from import in another module": early.monotonic(),
            "default argument": default_argument(),
            "object attribute": STOPWATCH.timer(),
            "second reference": STOPWATCH.bound(),
            "ns from import": perf_counter_ns(),
            "wall ns from import": time_ns(),
            "class bound before": bound_datetime.now(UTC),
            "class bound in another module": early.datetime.now(UTC),
            "stored partial": STORED_NOW(),
            "stored bound method": BOUND_TODAY(),
            "date class bound before": bound_date.today(),
        }

    wall = WALL + datetime.timedelta(hours=1)
    assert run(main()) == {
        "module attribute": HOUR,
        "from import": HOUR,
        "from import in another module": HOUR,
        "default argument": HOUR,
        "object attribute": HOUR,
        "second reference": HOUR,
        "ns from import": 3600 * 10**9,
        "wall ns from import": int(wall.timestamp()) * 10**9,
        "class bound before": wall,
        "class bound in another module": wall,
        "stored partial": wall,
        "stored bound method": wall.astimezone().date(),
        "date class bound before": wall.astimezone().date(),
    }
    # After the run the same references are real again.
    assert is_real(monotonic)
    assert is_real(default_argument)
    assert is_real(STOPWATCH.timer)
    assert abs(STORED_NOW().timestamp() - _patch._real_time()) < 5


def test_datetime_today_utcnow_and_subclasses_bound_before() -> None:
    class Stamp(datetime.datetime):
        pass

    stamp_now = Stamp.now  # bound before the run, on a subclass

    async def main() -> tuple[object, ...]:
        await asyncio.sleep(90)
        return bound_datetime.today(), stamp_now(UTC), type(stamp_now(UTC))

    today, stamp, kind = run(main())
    assert today == (WALL + datetime.timedelta(seconds=90)).astimezone().replace(tzinfo=None)
    assert stamp == WALL + datetime.timedelta(seconds=90)
    assert kind is Stamp


def test_a_module_imported_during_the_run_and_one_imported_after_it() -> None:
    during = types.ModuleType("imported_during")

    async def main() -> float:
        await asyncio.sleep(5)
        exec(
            "from time import monotonic\nimport datetime as d\nN = d.datetime.now", during.__dict__
        )
        return during.monotonic()  # type: ignore[no-any-return]

    assert run(main()) == 5.0
    after = types.ModuleType("imported_after")
    exec("from time import monotonic", after.__dict__)

    async def again() -> tuple[float, datetime.datetime]:
        await asyncio.sleep(7)
        return after.monotonic(), during.N(UTC)

    assert run(again()) == (7.0, WALL + datetime.timedelta(seconds=7))


def test_errors_of_the_real_clocks_still_raise_while_patched() -> None:
    async def main() -> None:
        with pytest.raises(TypeError):
            datetime.datetime.now(tz=5)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            STORED_NOW.func("not a tz")
        with pytest.raises(TypeError):
            time.localtime("soon")  # type: ignore[arg-type]
        with pytest.raises((OverflowError, OSError, ValueError)):
            time.gmtime(1e300)
        with pytest.raises(TypeError):
            time.monotonic(1)  # type: ignore[call-arg]

    run(main())


# ------------------------------------------------------------------------------ threads


def test_only_the_loop_thread_and_threads_it_starts_see_virtual_time() -> None:
    seen: dict[str, object] = {}
    release = threading.Event()
    started = threading.Event()

    def existing() -> None:  # started before the run: real clocks throughout
        started.set()
        release.wait(5)
        seen["existing"] = is_real(time.monotonic)

    def library_thread() -> None:  # started by the program during the run: shares its clock
        seen["library"] = (time.monotonic(), datetime.datetime.now(UTC))

    before = threading.Thread(target=existing)
    before.start()
    started.wait(5)

    async def main() -> None:
        await asyncio.sleep(60)
        thread = threading.Thread(target=library_thread)
        thread.start()
        await asyncio.to_thread(thread.join, 5)  # real-time: joins a short thread
        seen["worker"] = await asyncio.to_thread(is_real, time.monotonic)
        release.set()
        await asyncio.to_thread(before.join, 5)  # real-time: joins a short thread

    run(main())
    assert seen == {
        "library": (60.0, WALL + datetime.timedelta(seconds=60)),
        "worker": True,
        "existing": True,
    }


def test_a_thread_started_during_the_run_is_real_again_after_it() -> None:
    go_on = threading.Event()
    readings: list[bool] = []

    def lingering() -> None:
        readings.append(is_real(time.monotonic))
        go_on.wait(5)
        readings.append(is_real(time.monotonic))

    thread = threading.Thread(target=lingering)

    async def main() -> None:
        thread.start()
        await asyncio.sleep(1)

    run(main())
    go_on.set()
    thread.join(5)
    assert readings[1] is True
    assert len(readings) == 2


def test_the_stdlib_waits_keep_real_time_in_the_loop_thread() -> None:
    # A fresh copy of ``queue``, imported during the run (as the first to_thread imports it).
    async def main() -> tuple[float, float, float]:
        spec = importlib.util.find_spec("queue")
        assert spec is not None
        assert spec.loader is not None
        fresh = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(fresh)
        started = real_monotonic()
        with pytest.raises(fresh.Empty):
            fresh.Queue().get(timeout=0.2)  # real-time: the bug was that this never returned
        waited = real_monotonic() - started
        condition = threading.Condition()
        with condition:
            assert condition.wait_for(lambda: False, timeout=0.05) is False  # real-time
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            job = pool.submit(threading.Event().wait, 0.05)  # real-time: a 50 ms job
            done, _ = concurrent.futures.wait([job], timeout=5)
        assert done == {job}
        return waited, time.monotonic(), asyncio.get_running_loop().time()

    waited, mono, loop_now = run(main())
    assert 0.2 <= waited < 3
    assert mono == loop_now == 0.0  # virtual time did not move meanwhile


# ------------------------------------------------------------------ restoration by exit


def test_restored_after_an_exception_a_deadlock_and_ctrl_c() -> None:
    async def fails() -> None:
        await asyncio.sleep(1)
        assert _patch.installed()
        raise LookupError("boom")

    async def stuck() -> None:
        await asyncio.Event().wait()

    async def interrupted() -> None:
        await asyncio.sleep(1)
        raise KeyboardInterrupt

    with pytest.raises(LookupError):
        run(fails())
    assert_restored()
    # real-time: deadlock_timeout is the loop's own 10 ms real wait before reporting.
    with pytest.raises(virtualtime.DeadlockError):
        run(stuck(), deadlock_timeout=0.01)
    assert_restored()
    with pytest.raises(KeyboardInterrupt):
        run(interrupted())
    assert_restored()

    async def real_ctrl_c() -> None:  # a real SIGINT, through asyncio's own handler
        await asyncio.sleep(1)
        signal.raise_signal(signal.SIGINT)
        await asyncio.sleep(1)

    with pytest.raises(KeyboardInterrupt):
        run(real_ctrl_c())
    assert_restored()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_has_every_clock_restored() -> None:
    async def main() -> int:
        await asyncio.sleep(10)
        read, write = os.pipe()
        with warnings.catch_warnings():
            # 3.12+ warns about fork() in a process that has threads (the suite's own);
            # the child below only reads clocks and writes to a pipe.
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                ok = fields() == ORIGINAL_FIELDS and not _patch.installed() and is_real(monotonic)
            finally:
                os.write(write, b"1" if ok else b"0")
                os._exit(0)
        os.close(write)
        answer = os.read(read, 1)
        os.close(read)
        os.waitpid(pid, 0)  # noqa: ASYNC222 - the child has already written and exited
        assert time.monotonic() == 10.0  # the parent is still patched
        return int(answer)

    assert run(main()) == 1


# --------------------------------------------------------------------------------- trio


def test_trio_clock_patches_and_restores_on_every_exit() -> None:
    async def main() -> tuple[float, float, datetime.datetime, bool]:
        await trio.sleep(HOUR)
        worker = await trio.to_thread.run_sync(is_real, time.monotonic)
        return monotonic(), default_argument(), STORED_NOW(), worker

    assert virtualtime.trio.run(main, patch_time=True, wall_start=WALL) == (
        HOUR,
        HOUR,
        WALL + datetime.timedelta(hours=1),
        True,
    )
    assert_restored()

    async def fails() -> None:
        await trio.sleep(1)
        assert monotonic() == 1.0
        raise LookupError("boom")

    with pytest.raises(LookupError):
        virtualtime.trio.run(fails, patch_time=True)
    assert_restored()

    async def stuck() -> None:
        await trio.Event().wait()

    with pytest.raises(virtualtime.DeadlockError):
        virtualtime.trio.run(stuck, patch_time=True, deadlock_timeout=0.01)
    assert_restored()

    async def interrupted() -> None:
        await trio.sleep(1)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        virtualtime.trio.run(interrupted, patch_time=True)
    assert_restored()

    async def real_ctrl_c() -> None:
        await trio.sleep(1)
        signal.raise_signal(signal.SIGINT)
        await trio.sleep(1)

    with pytest.raises(KeyboardInterrupt):
        virtualtime.trio.run(real_ctrl_c, patch_time=True)
    assert_restored()


def test_trio_clock_options_are_checked() -> None:
    with pytest.raises(TypeError, match="patch_time"):
        virtualtime.trio.VirtualClock(patch_time=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="wall_start"):
        virtualtime.trio.VirtualClock(patch_time=True, wall_start="2030")  # type: ignore[arg-type]
    clock = virtualtime.trio.VirtualClock()
    assert clock._patch is None


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_anyio_run_patches_on_both_backends(backend: str) -> None:
    import anyio

    async def main() -> tuple[float, datetime.datetime]:
        await anyio.sleep(30)
        return monotonic(), bound_datetime.now(UTC)

    result = virtualtime.anyio_run(main, backend=backend, patch_time=True, wall_start=WALL)
    assert result == (30.0, WALL + datetime.timedelta(seconds=30))
    assert_restored()


# --------------------------------------------------------------------------------- cost


def test_patched_clocks_off_the_loop_thread_call_the_real_ones_cheaply() -> None:
    # Not a benchmark (bench/bench_patch_time.py is): a guard that the routing stays a dict
    # lookup -- a thousand calls in another thread while a patched loop runs stay real.
    async def main() -> bool:
        return await asyncio.to_thread(lambda: all(is_real(monotonic) for _ in range(1000)))

    assert run(main()) is True


def test_the_real_datetime_path_while_patched_in_another_thread() -> None:
    def real_now() -> bool:
        before = _patch._real_time()
        value = datetime.datetime.now(UTC).timestamp()
        naive = datetime.datetime.now().timestamp()
        return before - 1e-6 <= value <= _patch._real_time() and abs(naive - value) < 5

    async def main() -> bool:
        await asyncio.sleep(1)
        return await asyncio.to_thread(real_now)

    assert run(main()) is True


# ------------------------------------------------------------------ the command line

LOGGING_SCRIPT = """
import asyncio, datetime, logging, time
logging.basicConfig(format="%(asctime)s %(message)s", level=logging.INFO, force=True)
logging.Formatter.converter = time.gmtime

async def main():
    await asyncio.sleep(90.25)
    logging.info("aware %s", datetime.datetime.now(datetime.UTC).isoformat())
    print("naive", datetime.datetime.now().isoformat())

asyncio.run(main())
"""

TRIO_SCRIPT = """
import datetime, time
from time import monotonic
import trio

async def main():
    await trio.sleep(3600)
    print(monotonic(), datetime.datetime.now(datetime.UTC).isoformat())

trio.run(main)
"""


def run_cli(
    capsys: pytest.CaptureFixture[str], tmp_path: Any, script: str, *options: str
) -> tuple[int, str, str]:
    from virtualtime.cli import main

    path = tmp_path / "script.py"
    path.write_text(script)
    status = main(["run", "-q", *options, str(path)])
    out, err = capsys.readouterr()
    assert_restored()
    return status, out, err


def test_cli_wall_start_makes_every_run_log_the_same(
    capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    options = ("--patch-time", "--wall-start", "2030-01-01T00:00:00Z")
    runs = [run_cli(capsys, tmp_path, LOGGING_SCRIPT, *options) for _ in range(2)]
    assert runs[0] == runs[1]
    status, out, err = runs[0]
    assert status == 0
    assert err == "2030-01-01 00:01:30,250 aware 2030-01-01T00:01:30.250000+00:00\n"
    local = datetime.datetime(2030, 1, 1, 0, 1, 30, 250000, tzinfo=UTC).astimezone()
    assert out == f"naive {local.replace(tzinfo=None).isoformat()}\n"


def test_cli_naive_wall_start_is_local_time_like_the_marker(
    capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    status, out, _ = run_cli(
        capsys, tmp_path, LOGGING_SCRIPT, "--patch-time", "--wall-start", "2030-01-01T00:00:00"
    )
    assert status == 0
    assert out == "naive 2030-01-01T00:01:30.250000\n"  # on any machine, as wall_start= does
    assert _patch.check_wall_start(datetime.datetime(2030, 1, 1)) == (
        datetime.datetime(2030, 1, 1).timestamp()
    )


def test_cli_patch_time_and_wall_start_reach_trio(
    capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    status, out, _ = run_cli(
        capsys, tmp_path, TRIO_SCRIPT, "--patch-time", "--wall-start", "2030-01-01T00:00:00+00:00"
    )
    assert status == 0
    assert out == "3600.0 2030-01-01T01:00:00+00:00\n"


@pytest.mark.parametrize("bad", ["tomorrow", "2030-13-01", "99999-01-01"])
def test_cli_bad_wall_start_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Any, bad: str
) -> None:
    status, out, err = run_cli(
        capsys, tmp_path, LOGGING_SCRIPT, "--patch-time", "--wall-start", bad
    )
    assert (status, out) == (2, "")
    assert "argument --wall-start: expected an ISO 8601 date and time" in err
    assert repr(bad) in err


# ------------------------------------------------------------- compiled and pure paths

PURE_PYTHON_CHECK = """
import asyncio, datetime, functools, time
from time import monotonic
from virtualtime._clocks import _patch
import virtualtime

assert _patch.COMPILED is False
UTC = datetime.UTC
stored = functools.partial(datetime.datetime.now, UTC)

class Stamp(datetime.datetime):
    pass

async def main():
    await asyncio.sleep(60)
    return monotonic(), stored(), type(Stamp.now(UTC)), datetime.date.today()

wall = datetime.datetime(2030, 1, 1, tzinfo=UTC)
mono, now, kind, today = virtualtime.run(main(), patch_time=True, wall_start=wall)
assert (mono, now, kind) == (60.0, wall + datetime.timedelta(seconds=60), Stamp), (mono, now)
assert today == (wall + datetime.timedelta(seconds=60)).astimezone().date()
assert not _patch.installed()
assert stored.func.__self__ is datetime.datetime
print("ok")
"""


def test_the_pure_python_path_when_forced() -> None:
    env = {**os.environ, "VIRTUALTIME_PURE_PYTHON": "1"}
    result = subprocess.run(
        [sys.executable, "-c", PURE_PYTHON_CHECK],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.stdout == "ok\n", result.stderr


def test_a_bound_datetime_now_made_between_runs() -> None:
    run(asyncio.sleep(1))  # a first patched run: the pure path searched the heap then
    made_between = functools.partial(datetime.datetime.now, UTC)

    async def main() -> datetime.datetime:
        await asyncio.sleep(60)
        return made_between()

    value = run(main())
    if _patch.COMPILED:  # the C definition itself is redirected: everything follows
        assert value == WALL + datetime.timedelta(seconds=60)
    else:  # the documented gap of the pure path: found only after the next import
        assert abs(value.timestamp() - _patch._real_time()) < 5


def test_a_stored_bound_method_dropped_during_the_run_lives_until_it_is_restored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The pure path redirects a bound datetime.now found on the heap by writing its fields,
    # and writes them back when the run ends: the object must still exist then, whatever the
    # program did with it meanwhile.  (The compiled path never touches bound methods.)
    monkeypatch.setattr(_patch, "_scanned_with", (-1, -1))  # search the heap at this install
    stored = [functools.partial(datetime.datetime.now, UTC)]
    method = weakref.ref(stored[0].func)

    async def main() -> tuple[bool, datetime.datetime]:
        await asyncio.sleep(60)
        value = stored[0]()
        stored.clear()  # the program lets go of it while it is redirected
        gc.collect()
        return method() is not None, value

    held, value = run(main())
    assert value == WALL + datetime.timedelta(seconds=60)
    assert held is (not _patch.COMPILED)
    gc.collect()
    assert method() is None  # and freed once restored
