"""End-to-end tests of the pytest plugin, each running an inner pytest session (Pytester).

Every inner run names its plugins explicitly with ``-p``: ``no:asyncio`` / ``no:anyio`` to
simulate a suite without pytest-asyncio or anyio, ``no:virtualtime`` to switch the plugin off.
looptime (installed for the benchmarks) is switched off in every inner run so it cannot
interfere.  The inner runs are in-process, so they are fast and see monkeypatches.
"""

from __future__ import annotations

import gc
import signal
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Iterator

import pytest
from _pytester_args import HYPOTHESIS_OFF, NEIGHBOURS_OFF, STRICT

import virtualtime
from virtualtime.pytest_plugin import VirtualTime, _asyncio_factories

pytest_plugins = ["pytester"]

INI = """
[pytest]
asyncio_mode = strict
asyncio_default_fixture_loop_scope = function
filterwarnings = error
"""

INI_WITHOUT_PYTEST_ASYNCIO = """
[pytest]
filterwarnings = error
"""

BASE_ARGS = (*NEIGHBOURS_OFF, *HYPOTHESIS_OFF, *STRICT)


@pytest.fixture(autouse=True)
def _collect_looptime_leftover_loop(request: pytest.FixtureRequest) -> Iterator[None]:
    """Free, quietly, the event loop looptime leaves behind in the outer session.

    looptime's plugin (installed for the benchmarks) creates an event loop in the main thread
    for every test it sees, and never closes it.  An inner pytest-asyncio session resets the
    main thread's event loop to None, which orphans that loop; garbage-collected later, it
    would report "unclosed event loop" against an unrelated test.  Collect it here instead.
    """
    yield
    if request.config.pluginmanager.has_plugin("looptime_plugin"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()


def run(
    pytester: pytest.Pytester, *args: str, ini: str = "", base_ini: str = INI
) -> pytest.RunResult:
    """Run the inner session with the shared ini and flags (plus ``ini`` lines and ``args``)."""
    pytester.makeini(base_ini + ini)
    return pytester.runpytest(*BASE_ARGS, *args)


def write(pytester: pytest.Pytester, **files: str) -> None:
    """Write test files; each may be several dedented pieces joined (``UNMARKED_CHECKS + ...``)."""
    pytester.makepyfile(**{name: _dedent_pieces(text) for name, text in files.items()})


def _dedent_pieces(text: str) -> str:
    return "\n".join(textwrap.dedent(piece) for piece in text.split(_PIECE))


# ------------------------------------------------------------------ inert unless asked


def test_importing_the_plugin_loads_no_integration() -> None:
    code = textwrap.dedent(
        """
        import sys, pytest, virtualtime
        before = set(sys.modules)
        import virtualtime.pytest_plugin
        new = set(sys.modules) - before
        print(sorted(m for m in new if not m.startswith("virtualtime.pytest_plugin.")))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "['virtualtime.pytest_plugin']"


def test_marker_is_registered(pytester: pytest.Pytester) -> None:
    result = run(pytester, "--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.virtualtime(enabled=True, /, **options): *"])
    assert result.ret == 0


_PIECE = "# ---- piece ----\n"

UNMARKED_CHECKS = (
    """
import asyncio
import pytest
import pytest_asyncio
import virtualtime

def normal_loop_type():
    loop = asyncio.new_event_loop()
    loop.close()
    return type(loop)
"""
    + _PIECE
)


@pytest.mark.parametrize("mode", ["strict", "auto"])
def test_marked_test_runs_in_virtual_time_and_unmarked_keep_their_loop(
    pytester: pytest.Pytester, mode: str
) -> None:
    write(
        pytester,
        test_mix=UNMARKED_CHECKS
        + """
        # In auto mode pytest-asyncio takes every async test: no asyncio mark needed.
        pytestmark = [pytest.mark.asyncio] if "MODE" == "strict" else []

        async def test_unmarked_before():
            assert type(asyncio.get_running_loop()) is normal_loop_type()

        @pytest.mark.virtualtime
        async def test_marked():
            loop = asyncio.get_running_loop()
            assert isinstance(loop, virtualtime.VirtualEventLoop)
            for _ in range(10):
                await asyncio.sleep(0.1)
            assert loop.time() == 1.0
            await asyncio.sleep(3600)
            assert loop.time() == 3601.0

        async def test_unmarked_after():
            assert type(asyncio.get_running_loop()) is normal_loop_type()
        """.replace("MODE", mode),
    )
    result = run(pytester, "-v", f"--asyncio-mode={mode}", "-p", "no:anyio")
    result.assert_outcomes(passed=3)
    # Test ids are unchanged: no loop-factory parameter shows.
    result.stdout.fnmatch_lines(["*::test_marked PASSED*", "*::test_unmarked_after PASSED*"])


def test_unmarked_modules_keep_fixture_lifetimes(pytester: pytest.Pytester) -> None:
    # Once any plugin answers pytest_asyncio_loop_factories, pytest-asyncio parametrizes the
    # tests it collects, which rebuilds wider-loop-scope fixtures per test.  Unmarked modules,
    # before and after a virtual one, must not see that.
    plain = (
        UNMARKED_CHECKS
        + """
        SETUPS = []

        @pytest_asyncio.fixture(scope="module", loop_scope="module")
        async def shared():
            SETUPS.append(type(asyncio.get_running_loop()))
            yield

        @pytest.mark.asyncio
        async def test_one(shared):
            pass

        @pytest.mark.asyncio
        async def test_two(shared):
            pass

        def test_fixture_was_set_up_once_on_the_normal_loop():
            assert SETUPS == [normal_loop_type()]
        """
    )
    write(
        pytester,
        test_1_plain=plain,
        test_2_virtual="""
        import asyncio
        import pytest
        import virtualtime

        @pytest.mark.asyncio
        @pytest.mark.virtualtime
        async def test_virtual():
            assert isinstance(asyncio.get_running_loop(), virtualtime.VirtualEventLoop)
        """,
        test_3_plain=plain,
    )
    run(pytester).assert_outcomes(passed=7)


# ------------------------------------------------------------------ marks and options


def test_marks_merge_closest_option_wins(pytester: pytest.Pytester) -> None:
    write(
        pytester,
        test_merge="""
        import asyncio
        import pytest
        import virtualtime

        pytestmark = [pytest.mark.asyncio, pytest.mark.virtualtime(start=100, history=5)]

        async def test_module_mark(virtual_time):
            assert dict(virtual_time.options) == {"start": 100, "history": 5}
            assert virtual_time.now() == 100.0
            for _ in range(8):
                await asyncio.sleep(1)
            assert len(virtual_time.loop.history) == 5  # history=5 reached the loop

        @pytest.mark.virtualtime(start=200)
        class TestClassMark:
            async def test_class_mark(self, virtual_time):
                assert dict(virtual_time.options) == {"start": 200, "history": 5}
                assert virtual_time.now() == 200.0

            @pytest.mark.virtualtime(autojump=False)
            async def test_function_mark(self, virtual_time):
                assert dict(virtual_time.options) == {
                    "start": 200, "history": 5, "autojump": False
                }
                assert virtual_time.loop.autojump is False

            @pytest.mark.virtualtime(False)
            async def test_opt_out(self):
                loop = asyncio.get_running_loop()
                assert not isinstance(loop, virtualtime.VirtualEventLoop)
        """,
        test_param_marks="""
        import anyio
        import pytest

        @pytest.mark.anyio
        @pytest.mark.virtualtime(start=1, deadlock_timeout=1)
        @pytest.mark.parametrize(
            "start",
            [pytest.param(7.5, marks=pytest.mark.virtualtime(start=7.5)), pytest.param(1)],
        )
        async def test_anyio_param_mark_is_closest(virtual_time, start, anyio_backend_name):
            assert anyio.current_time() == start
            assert dict(virtual_time.options) == {"start": start, "deadlock_timeout": 1}

        @pytest.mark.asyncio
        @pytest.mark.parametrize(
            "start", [pytest.param(7.5, marks=pytest.mark.virtualtime(start=7.5))]
        )
        async def test_pytest_asyncio_param_mark_is_too_late(start):
            pass
        """,
    )
    result = run(pytester, "-p", "no:anyio", "test_merge.py")
    result.assert_outcomes(passed=4)
    result = run(pytester, "test_param_marks.py")
    result.assert_outcomes(passed=4, errors=1)  # two parameter sets on two backends
    result.stdout.fnmatch_lines(
        [
            "*test_pytest_asyncio_param_mark_is_too_late[[]7.5[]]: @pytest.mark.virtualtime: "
            "pytest-asyncio chose this test's loop from the marks on the test function (no "
            "virtual time), but the test ends up with virtual time(start=7.5)*"
        ]
    )


def test_bad_marks_fail_collection_naming_test_and_option(pytester: pytest.Pytester) -> None:
    write(
        pytester,
        test_bad_name="""
        import pytest

        @pytest.mark.asyncio
        @pytest.mark.virtualtime(strat=5)
        async def test_typo():
            pass
        """,
        test_bad_value="""
        import pytest

        @pytest.mark.asyncio
        @pytest.mark.virtualtime(start=-1)
        async def test_negative():
            pass
        """,
        test_bad_positional="""
        import pytest

        @pytest.mark.asyncio
        @pytest.mark.virtualtime("yes")
        async def test_positional():
            pass
        """,
    )
    result = run(pytester)
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines_random(
        [
            "*test_bad_name.py::test_typo: @pytest.mark.virtualtime: unknown option 'strat'*",
            "*test_bad_value.py::test_negative: @pytest.mark.virtualtime: bad option "
            "start=-1: start must be >= 0*",
            "*test_bad_positional.py::test_positional: @pytest.mark.virtualtime: the "
            "positional argument must be True or False*",
        ]
    )


GLOBAL_SUITE = """
import asyncio
import pytest
import virtualtime

def in_virtual_time(backend="asyncio"):
    if backend == "asyncio":
        return isinstance(asyncio.get_running_loop(), virtualtime.VirtualEventLoop)
    import trio
    return type(trio.lowlevel.current_clock()).__name__ == "VirtualClock"

@pytest.mark.asyncio
async def test_pytest_asyncio():
    assert in_virtual_time()

@pytest.mark.anyio
async def test_anyio(anyio_backend_name):
    assert in_virtual_time(anyio_backend_name)

@pytest.mark.asyncio
@pytest.mark.virtualtime(False)
async def test_opted_out():
    assert not in_virtual_time()

def test_sync():
    assert True
"""


@pytest.mark.parametrize(
    ("args", "ini"),
    [
        pytest.param((), "", id="off"),
        pytest.param(("--virtualtime",), "", id="option"),
        pytest.param((), "virtualtime = true\n", id="ini"),
    ],
)
def test_global_switch_covers_every_async_test(
    pytester: pytest.Pytester, args: tuple[str, ...], ini: str
) -> None:
    write(pytester, test_global=GLOBAL_SUITE)
    result = run(pytester, *args, ini=ini)
    if args or ini:
        result.assert_outcomes(passed=5)  # anyio runs on asyncio and trio
    else:
        result.assert_outcomes(passed=2, failed=3)


# ------------------------------------------------------------------ pytest-asyncio fixtures


def test_async_fixtures_share_the_virtual_loop(pytester: pytest.Pytester) -> None:
    write(
        pytester,
        test_function_scope="""
        import asyncio
        import pytest
        import pytest_asyncio
        import virtualtime

        @pytest_asyncio.fixture
        async def slow_resource():
            await asyncio.sleep(10)
            yield asyncio.get_running_loop()
            await asyncio.sleep(5)  # teardown runs in virtual time too

        @pytest.mark.asyncio
        @pytest.mark.virtualtime
        async def test_fixture_on_the_test_loop(slow_resource):
            assert slow_resource is asyncio.get_running_loop()
            assert slow_resource.time() == 10.0
        """,
        test_module_scope="""
        import asyncio
        import pytest
        import pytest_asyncio
        import virtualtime

        pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.virtualtime]

        @pytest_asyncio.fixture(scope="module", loop_scope="module")
        async def module_loop():
            yield asyncio.get_running_loop()

        async def test_first(module_loop):
            assert module_loop is asyncio.get_running_loop()
            assert isinstance(module_loop, virtualtime.VirtualEventLoop)
            await asyncio.sleep(10)

        async def test_second_continues_the_same_clock(module_loop):
            assert module_loop is asyncio.get_running_loop()
            assert module_loop.time() == 10.0
        """,
        test_wider_scope="""
        import asyncio
        import pytest
        import pytest_asyncio
        import virtualtime

        SETUPS = []

        @pytest_asyncio.fixture(scope="module", loop_scope="module")
        async def wider():
            SETUPS.append(type(asyncio.get_running_loop()).__name__)
            yield

        @pytest.mark.asyncio
        @pytest.mark.virtualtime
        async def test_a(wider):
            pass

        @pytest.mark.asyncio
        @pytest.mark.virtualtime
        async def test_b(wider):
            pass

        def test_wider_fixture_is_rebuilt_per_test_on_a_virtual_loop():
            assert SETUPS == ["VirtualEventLoop", "VirtualEventLoop"]
        """,
        test_mixed=UNMARKED_CHECKS
        + """
        # Virtual and normal tests share a module: none gets a fixture of the other's loop.
        SETUPS = []

        @pytest_asyncio.fixture(scope="module", loop_scope="module")
        async def shared():
            SETUPS.append(type(asyncio.get_running_loop()))
            yield asyncio.get_running_loop()

        @pytest.mark.asyncio
        async def test_1(shared):
            assert type(shared) is normal_loop_type()

        @pytest.mark.asyncio
        @pytest.mark.virtualtime
        async def test_2(shared):
            assert type(shared) is virtualtime.VirtualEventLoop

        @pytest.mark.asyncio
        async def test_3(shared):
            assert type(shared) is normal_loop_type()

        @pytest.mark.asyncio(loop_scope="module")
        @pytest.mark.virtualtime
        async def test_4(shared):
            assert shared is asyncio.get_running_loop()
            assert type(shared) is virtualtime.VirtualEventLoop

        @pytest.mark.asyncio(loop_scope="module")
        async def test_5(shared):
            assert shared is asyncio.get_running_loop()
            assert type(shared) is normal_loop_type()

        def test_setups():
            normal, virtual = normal_loop_type(), virtualtime.VirtualEventLoop
            assert SETUPS == [normal, virtual, normal, virtual, normal]
        """,
    )
    run(pytester).assert_outcomes(passed=12)


# ------------------------------------------------------------------ anyio


def test_anyio_runs_both_backends_in_virtual_time(pytester: pytest.Pytester) -> None:
    write(
        pytester,
        test_anyio_both="""
        import anyio
        import pytest
        import virtualtime

        pytestmark = pytest.mark.anyio

        @pytest.fixture
        async def ready_after_a_minute():
            await anyio.sleep(60)
            return anyio.current_time()

        @pytest.mark.virtualtime(start=5)
        async def test_exact_time(anyio_backend, anyio_backend_name, virtual_time,
                                  ready_after_a_minute):
            assert anyio_backend == anyio_backend_name  # what tests see is unchanged
            assert virtual_time.backend == anyio_backend_name
            assert ready_after_a_minute == 65.0
            for _ in range(10):
                await anyio.sleep(0.1)
            assert anyio.current_time() == 66.0
            with anyio.move_on_after(3600) as scope:
                await anyio.sleep_forever()
            assert scope.cancelled_caught
            assert anyio.current_time() == 3666.0
            with pytest.raises(TimeoutError):
                with anyio.fail_after(10):
                    await anyio.sleep(11)
            assert virtual_time.now() == 3676.0

        async def test_unmarked_is_real(anyio_backend_name):
            if anyio_backend_name == "asyncio":
                loop = __import__("asyncio").get_running_loop()
                assert not isinstance(loop, virtualtime.VirtualEventLoop)
            else:
                clock = __import__("trio").lowlevel.current_clock()
                assert type(clock).__name__ == "SystemClock"
        """,
    )
    result = run(pytester, "-v")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines_random(
        ["*test_exact_time?asyncio? PASSED*", "*test_exact_time?trio? PASSED*"]
    )


def test_anyio_keeps_the_backends_and_options_the_suite_selects(
    pytester: pytest.Pytester,
) -> None:
    write(
        pytester,
        conftest="""
        import pytest

        @pytest.fixture
        def anyio_backend():
            return "trio"
        """,
        test_trio_only="""
        import anyio
        import pytest

        @pytest.mark.anyio
        @pytest.mark.virtualtime
        async def test_on_trio(anyio_backend, virtual_time):
            assert anyio_backend == "trio"
            await anyio.sleep(30)
            assert virtual_time.backend == "trio"
            assert virtual_time.clock.current_time() == 30.0
        """,
        test_asyncio_debug="""
        import asyncio
        import anyio
        import pytest
        import virtualtime

        @pytest.fixture(params=[pytest.param(("asyncio", {"debug": True}), id="debug")])
        def anyio_backend(request):
            return request.param

        @pytest.mark.anyio
        @pytest.mark.virtualtime
        async def test_options_kept(anyio_backend):
            loop = asyncio.get_running_loop()
            assert isinstance(loop, virtualtime.VirtualEventLoop)
            assert loop.get_debug() is True
            assert anyio_backend == ("asyncio", {"debug": True})
        """,
    )
    result = run(pytester, "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines_random(
        ["*test_on_trio PASSED*", "*test_options_kept?debug? PASSED*"]
    )


def test_anyio_conflicting_options_fail_clearly(pytester: pytest.Pytester) -> None:
    write(
        pytester,
        test_conflicts="""
        import asyncio
        import pytest

        @pytest.fixture(params=[
            pytest.param(("asyncio", {"loop_factory": asyncio.new_event_loop}), id="factory"),
            pytest.param("trio", id="trio"),
        ])
        def anyio_backend(request):
            return request.param

        @pytest.mark.anyio
        @pytest.mark.virtualtime(history=10)
        async def test_conflict():
            pass
        """,
    )
    result = run(pytester)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines_random(
        [
            "*test_conflict?factory?: @pytest.mark.virtualtime: its anyio_backend already "
            "sets loop_factory*",
            "*test_conflict?trio?: @pytest.mark.virtualtime: this test runs on trio, and option "
            "history exists only on the asyncio loop*",
        ]
    )


def test_deadlocks_raise_instead_of_hanging(pytester: pytest.Pytester) -> None:
    write(
        pytester,
        test_deadlock="""
        import anyio
        import pytest

        pytestmark = [pytest.mark.anyio, pytest.mark.virtualtime(deadlock_timeout=0.01)]

        @pytest.fixture
        async def never_ready():
            await anyio.Event().wait()
            yield

        async def test_waits_for_ever():
            await anyio.Event().wait()

        async def test_fixture_waits_for_ever(never_ready):
            pass
        """,
    )
    result = run(pytester)
    result.assert_outcomes(failed=2, errors=2)
    assert result.stdout.str().count("DeadlockError: deadlock at virtual time t=0.0") >= 4


def test_anyio_runner_built_without_virtual_time_is_reported(pytester: pytest.Pytester) -> None:
    write(
        pytester,
        test_shared_runner="""
        import anyio
        import pytest

        pytestmark = pytest.mark.anyio

        @pytest.fixture(scope="module")
        def anyio_backend():
            return "asyncio"

        @pytest.fixture(scope="module")
        async def keeps_the_runner():
            yield

        async def test_real_first(keeps_the_runner):
            pass

        @pytest.mark.virtualtime
        async def test_virtual_second(keeps_the_runner):
            pass
        """,
    )
    result = run(pytester)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["*test_virtual_second (marked virtualtime) needs virtual time, but it runs on a real*"]
    )


def test_anyio_runner_reused_with_other_options_is_reported(pytester: pytest.Pytester) -> None:
    write(
        pytester,
        test_reused_runner="""
        import anyio
        import pytest

        pytestmark = [pytest.mark.anyio, pytest.mark.virtualtime]

        @pytest.fixture(scope="module")
        def anyio_backend():
            return "asyncio"

        @pytest.fixture(scope="module")
        async def keeps_the_runner():
            yield

        async def test_first(keeps_the_runner):
            await anyio.sleep(1)

        @pytest.mark.virtualtime(start=500)
        async def test_other_options(keeps_the_runner):
            pass
        """,
    )
    result = run(pytester)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["*anyio reuses the runner built for *test_first*this test asks for {'start': 500*"]
    )


# ------------------------------------------------------------------ driving time


DRIVE_CHECKS = """
    assert await virtual_time.settle() == 0.0
    assert virtual_time.peek() == 5.0
    assert await virtual_time.evolve(4) == 4.0
    assert fired == []
    assert await virtual_time.step() == 5.0
    assert fired == [(5, 5.0)]
    assert await virtual_time.run_until(7) == 7.0
    assert await virtual_time.fast_forward(10) == 17.0
    assert fired == [(5, 5.0), (10, 17.0)]
    assert virtual_time.peek() == math.inf
    assert await virtual_time.step() is None
    with pytest.raises(ValueError, match="dt must be >= 0"):
        await virtual_time.evolve(-1)
    with pytest.raises(ValueError, match="must not be in the past"):
        await virtual_time.run_until(1)
    assert virtual_time.now() == 17.0
"""


def test_virtual_time_fixture_drives_both_runners(pytester: pytest.Pytester) -> None:
    write(
        pytester,
        test_drive="""
        import asyncio
        import math
        import anyio
        import pytest
        import virtualtime

        async def check_driving(virtual_time, fired):
        """
        + textwrap.indent(textwrap.dedent(DRIVE_CHECKS), " " * 12)
        + """
        @pytest.mark.asyncio
        @pytest.mark.virtualtime(autojump=False)
        async def test_pytest_asyncio_manual(virtual_time):
            fired = []

            async def sleeper(delay):
                await asyncio.sleep(delay)
                fired.append((delay, virtual_time.now()))

            tasks = [asyncio.create_task(sleeper(delay)) for delay in (5, 10)]
            await check_driving(virtual_time, fired)
            await asyncio.gather(*tasks)
            assert virtual_time.backend == "asyncio"
            with pytest.raises(virtualtime.VirtualTimeError, match="trio only"):
                virtual_time.clock

        @pytest.mark.anyio
        @pytest.mark.virtualtime(autojump=False)
        async def test_anyio_manual(virtual_time, anyio_backend_name):
            fired = []

            async def sleeper(delay):
                await anyio.sleep(delay)
                fired.append((delay, virtual_time.now()))

            async with anyio.create_task_group() as tg:
                tg.start_soon(sleeper, 5)
                tg.start_soon(sleeper, 10)
                await check_driving(virtual_time, fired)
            if anyio_backend_name == "trio":
                with pytest.raises(virtualtime.VirtualTimeError, match="asyncio only"):
                    virtual_time.loop

        @pytest.mark.asyncio
        async def test_unmarked_cannot_use_it(virtual_time):
            pass
        """,
    )
    result = run(pytester)
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*test_unmarked_cannot_use_it requests the virtual_time fixture but does not run "
            "in virtual time: it is not marked*"
        ]
    )


def test_virtual_time_outside_a_running_test_is_an_error() -> None:
    handle = VirtualTime("tests/x.py::test_x", {"start": 1.0})
    assert handle.options == {"start": 1.0}
    with pytest.raises(virtualtime.VirtualTimeError, match=r"virtual_time.now\(\) needs a"):
        handle.now()
    with pytest.raises(TypeError):
        handle.options["start"] = 2.0  # type: ignore[index]


# ------------------------------------------------------------------ missing integrations


def test_without_pytest_asyncio_nothing_breaks(pytester: pytest.Pytester) -> None:
    write(
        pytester,
        conftest="""
        import pytest

        @pytest.fixture
        def resource():
            yield {"open": True}
        """,
        test_no_asyncio="""
        import anyio
        import pytest

        def test_sync_fixture(resource):
            assert resource == {"open": True}

        @pytest.mark.anyio
        @pytest.mark.virtualtime
        async def test_anyio_still_virtual(resource, anyio_backend_name):
            await anyio.sleep(100)
            assert anyio.current_time() == 100.0

        @pytest.mark.virtualtime
        async def test_nobody_runs_this():
            pass

        @pytest.mark.virtualtime
        def test_sync_marked():
            pass
        """,
    )
    result = run(pytester, "-p", "no:asyncio", base_ini=INI_WITHOUT_PYTEST_ASYNCIO)
    result.assert_outcomes(passed=3, errors=2)
    result.stdout.fnmatch_lines_random(
        [
            "*test_nobody_runs_this is marked virtualtime, but it is an async test that "
            "neither pytest-asyncio nor anyio runs*",
            "*test_sync_marked is marked virtualtime, but it is a synchronous test*",
        ]
    )


def test_without_trio_anyio_tests_run_on_asyncio(pytester: pytest.Pytester) -> None:
    # anyio decides its default backends when its plugin is imported, so hiding trio takes a
    # fresh interpreter: an early-loaded plugin module makes "import trio" fail there.
    write(
        pytester,
        no_trio="""
        import sys

        sys.modules["trio"] = None  # "import trio" now raises ImportError
        """,
        test_no_trio="""
        import sys
        import anyio
        import pytest

        @pytest.mark.anyio
        @pytest.mark.virtualtime
        async def test_virtual(anyio_backend_name, virtual_time):
            assert anyio_backend_name == "asyncio"
            await anyio.sleep(90)
            assert virtual_time.now() == 90.0

        def test_virtualtime_trio_not_loaded():
            assert "virtualtime.trio" not in sys.modules
        """,
    )
    pytester.makeini(INI)
    # pytest-trio, if installed, cannot load without trio: a suite without trio lacks it too.
    result = pytester.runpytest_subprocess("-p", "no_trio", "-p", "no:trio", *BASE_ARGS)
    result.assert_outcomes(passed=2)


def test_without_anyio_nothing_breaks(pytester: pytest.Pytester) -> None:
    write(
        pytester,
        test_no_anyio=UNMARKED_CHECKS
        + """
        @pytest.fixture
        def resource():
            yield 1

        @pytest_asyncio.fixture
        async def async_resource():
            yield 2

        def test_sync(resource):
            assert resource == 1

        @pytest.mark.asyncio
        async def test_unmarked(async_resource):
            assert type(asyncio.get_running_loop()) is normal_loop_type()

        @pytest.mark.asyncio
        @pytest.mark.virtualtime
        async def test_marked(async_resource):
            await asyncio.sleep(5)
            assert asyncio.get_running_loop().time() == 5.0
        """,
    )
    run(pytester, "-p", "no:anyio").assert_outcomes(passed=3)


def test_plugin_switched_off_leaves_the_suite_alone(pytester: pytest.Pytester) -> None:
    write(
        pytester,
        test_off=UNMARKED_CHECKS
        + """
        @pytest.mark.asyncio
        async def test_unmarked():
            assert type(asyncio.get_running_loop()) is normal_loop_type()
        """,
    )
    run(pytester, "-p", "no:virtualtime").assert_outcomes(passed=1)
    result = run(pytester, "-p", "no:virtualtime", "--virtualtime")
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_old_pytest_asyncio_is_a_clear_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        _asyncio_factories, "_pytest_asyncio_has_loop_factories", lambda config: False
    )
    write(
        pytester,
        test_old=UNMARKED_CHECKS
        + """
        @pytest.mark.asyncio
        @pytest.mark.virtualtime
        async def test_marked():
            pass

        @pytest.mark.asyncio
        async def test_unmarked():
            assert type(asyncio.get_running_loop()) is normal_loop_type()
        """,
    )
    result = run(pytester)
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*test_marked is marked virtualtime, but the installed pytest-asyncio cannot take a "
            "loop factory from a plugin (that needs pytest-asyncio 1.4 or later*"
        ]
    )


def test_anyio_without_a_runner_seam_is_a_clear_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    import anyio.pytest_plugin

    monkeypatch.delattr(anyio.pytest_plugin, "get_runner")
    write(
        pytester,
        test_no_seam="""
        import pytest

        @pytest.mark.anyio
        @pytest.mark.virtualtime
        async def test_marked(anyio_backend_name):
            pass
        """,
    )
    result = run(pytester, "-p", "no:asyncio", base_ini=INI_WITHOUT_PYTEST_ASYNCIO)
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        [
            "*test_marked[[]asyncio[]] is marked virtualtime, but this version of anyio's pytest "
            "plugin has no get_runner()*"
        ]
    )


# ------------------------------------------------------------------ issue 12: messages


def test_an_unknown_option_suggests_the_closest(pytester: pytest.Pytester) -> None:
    write(
        pytester,
        test_typo="""
        import pytest

        @pytest.mark.asyncio
        @pytest.mark.virtualtime(autojmp=False)
        async def test_typo():
            pass
        """,
    )
    result = run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*unknown option 'autojmp' (did you mean 'autojump'?)*; the marker also takes max_time"]
    )


def test_a_bad_option_is_reported_once(pytester: pytest.Pytester) -> None:
    write(
        pytester,
        test_negative="""
        import pytest

        @pytest.mark.asyncio
        @pytest.mark.virtualtime(start=-5)
        async def test_negative():
            pass
        """,
    )
    result = run(pytester)
    result.assert_outcomes(errors=1)
    out = result.stdout.str()
    assert "During handling of the above exception" not in out
    # Once in the error section (the summary line repeats it, in full when CI is set, cut
    # short at the terminal's width otherwise).
    errors_section = out.split("short test summary info")[0]
    assert errors_section.count("start must be >= 0, got -5") == 1


def test_a_marked_sync_test_is_told_what_the_mark_is_for(pytester: pytest.Pytester) -> None:
    write(
        pytester,
        test_sync="""
        import pytest

        @pytest.mark.virtualtime
        def test_sync():
            pass
        """,
    )
    result = run(pytester)
    result.assert_outcomes(errors=1)
    out = result.stdout.str()
    assert "is a synchronous test, so the mark would do nothing" in out
    assert "runs an async test" in out
    assert "virtualtime.run(main())" in out
    assert "Mark it @pytest.mark.asyncio" not in out


def test_deadlock_reports_are_short_and_alike(pytester: pytest.Pytester) -> None:
    write(
        pytester,
        test_stuck="""
        import asyncio
        import anyio
        import pytest

        @pytest.mark.asyncio
        @pytest.mark.virtualtime(deadlock_timeout=0.01)
        async def test_asyncio_stuck():
            await asyncio.Event().wait()

        @pytest.mark.anyio
        @pytest.mark.virtualtime(deadlock_timeout=0.01)
        @pytest.mark.parametrize("anyio_backend", ["trio"])
        async def test_trio_stuck(anyio_backend):
            await anyio.Event().wait()
        """,
    )
    result = run(pytester)
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    failures = out[out.index("= FAILURES =") : out.index("short test summary")]
    sections = failures.split("\n_")[1:]
    assert len(sections) == 2
    for section in sections:
        lines = section.strip().splitlines()
        assert len(lines) <= 6, section  # title, headline, "Blocked tasks:", the task, a hint
        assert lines[1].startswith("DeadlockError: deadlock at virtual time t=0.0: ")
        assert lines[2] == "Blocked tasks:"
    # Each blocked task is shown from the test's own code on, not the runners' frames.
    result.stdout.fnmatch_lines_random(
        [
            "  - *: test_asyncio_stuck() at *test_stuck.py:8 -> Event.wait() at *",
            "  - test_trio_stuck: test_trio_stuck() at *test_stuck.py:14 -> Event.wait() at *",
        ]
    )
    for internal in (
        "guarded_main",
        "_trio_guarded",
        "virtualtime/pytest_plugin/",
        "base_events.py",
    ):
        assert internal not in failures
    # --tb=long keeps the full traceback for whoever wants it.
    long = run(pytester, "--tb=long")
    assert "guarded_main" in long.stdout.str()


def test_a_trio_deadlock_reports_the_time_it_happened_and_runs_the_test_once(
    pytester: pytest.Pytester,
) -> None:
    # Issue 34, item 5: DeadlockError is a RuntimeError, and the horizon's watch swallowed
    # RuntimeErrors while it looked for the trio clock -- so it ran the test body a second
    # time, and the report said t=14.0 for a deadlock at t=7.0.
    write(
        pytester,
        test_stuck="""
        import anyio
        import pytest

        CALLS = []
        on_trio = pytest.mark.parametrize("anyio_backend", ["trio"])

        @pytest.mark.anyio
        @pytest.mark.virtualtime(deadlock_timeout=0.01)
        @on_trio
        async def test_stuck_at_seven(anyio_backend):
            CALLS.append("seven")
            await anyio.sleep(7)
            await anyio.Event().wait()

        @pytest.mark.anyio
        @pytest.mark.virtualtime(deadlock_timeout=0.01, start=100)
        @on_trio
        async def test_stuck_at_107(anyio_backend):
            CALLS.append("107")
            await anyio.sleep(7)
            await anyio.Event().wait()

        @pytest.mark.anyio
        @pytest.mark.virtualtime
        @on_trio
        async def test_raises_a_runtime_error(anyio_backend):
            CALLS.append("raises")
            await anyio.sleep(1)
            raise RuntimeError("once")

        def test_each_body_ran_once():
            assert CALLS == ["seven", "107", "raises"]
        """,
    )
    result = run(pytester)
    result.assert_outcomes(failed=3, passed=1)
    result.stdout.fnmatch_lines_random(
        [
            "DeadlockError: deadlock at virtual time t=7.0: *",
            "DeadlockError: deadlock at virtual time t=107.0: *",
        ]
    )
    out = result.stdout.str()
    assert "t=14.0" not in out
    assert "t=114.0" not in out


# ------------------------------------------------------------------ issue 12: looptime


def test_looptime_and_virtualtime_together_is_an_error(pytester: pytest.Pytester) -> None:
    pytest.importorskip("looptime")
    write(
        pytester,
        test_both="""
        import asyncio
        import pytest

        @pytest.mark.asyncio
        @pytest.mark.looptime
        @pytest.mark.virtualtime
        async def test_both():
            await asyncio.sleep(10)

        @pytest.mark.asyncio
        @pytest.mark.looptime
        async def test_looptime_alone():
            await asyncio.sleep(10)

        @pytest.mark.asyncio
        @pytest.mark.virtualtime
        async def test_virtualtime_alone():
            await asyncio.sleep(10)
        """,
    )
    pytester.makeini(INI)
    args = ["-p", "no:cacheprovider", "-p", "no:hypothesispytest", "--strict-markers"]
    result = pytester.runpytest(*args)
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        ["*test_both.py::test_both runs in virtual time (virtualtime) and is also marked looptime*"]
    )
    # --looptime turns looptime on for every test: a virtual test then conflicts as well.
    result = pytester.runpytest(*args, "--looptime", "-k", "virtualtime_alone")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*is also under --looptime*"])


# ------------------------------------------------------------------ issue 12: the horizon

FOREVER = """
import asyncio
import time
import anyio
import pytest
import virtualtime

async def retry_until_the_real_deadline(sleep=anyio.sleep):
    # The bug the horizon catches: a deadline on a clock the loop does not drive.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        await sleep(1)
"""


def test_a_test_that_never_ends_fails_at_its_horizon(pytester: pytest.Pytester) -> None:
    write(
        pytester,
        test_forever=FOREVER
        + _PIECE
        + """
        @pytest.mark.asyncio
        @pytest.mark.virtualtime(max_time=3600)
        async def test_pytest_asyncio():
            await retry_until_the_real_deadline()

        @pytest.mark.asyncio
        @pytest.mark.virtualtime(max_time=3600)
        async def test_native_sleep():
            await retry_until_the_real_deadline(virtualtime.sleep)

        @pytest.mark.anyio
        @pytest.mark.virtualtime(max_time="1h")
        @pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
        async def test_anyio(anyio_backend):
            await retry_until_the_real_deadline()
        """,
    )
    result = run(pytester)
    result.assert_outcomes(failed=4)
    # Stopped as time moves past the horizon, before the timer due there fires.
    result.stdout.fnmatch_lines(
        [
            "*_ test_pytest_asyncio _*",
            "virtualtime: the test ran past its max_time=1 h and was stopped: virtual time "
            "reached t=3,601 s (1 h after the test started at t=0 s), 3,600 timers fired.  "
            "Likely cause:*time.monotonic()*patch_time=True*",
            "*_ test_native_sleep _*",
            "virtualtime: the test ran past its max_time=1 h*t=3,601 s*3,600 timers fired*",
            "*_ test_anyio?asyncio? _*",
            "virtualtime: the test ran past its max_time=1 h*t=3,601 s*3,600 timers fired*",
            "*_ test_anyio?trio? _*",
            "virtualtime: the test ran past its max_time=1 h*t=3,601 s*3,601 trio clock jumps*",
        ]
    )


def test_the_runaway_advice_matches_what_patch_time_reaches(pytester: pytest.Pytester) -> None:
    # Issue 34: the message said patch_time cannot reach `from time import monotonic` done at
    # import; it does (docs/testing.md, "What is reached"), so the advice is to turn it on.
    pytester.makepyfile(
        bound="""
        from time import monotonic

        def deadline(after, now=monotonic):
            return now() + after

        def passed(when):
            return monotonic() >= when
        """
    )
    write(
        pytester,
        test_bound="""
        import anyio
        import pytest

        import bound

        async def retry_for_an_hour():
            when = bound.deadline(3600)
            tries = 0
            while not bound.passed(when):
                await anyio.sleep(60)
                tries += 1
            return tries

        @pytest.mark.anyio
        @pytest.mark.virtualtime(patch_time=True, max_time="2h")
        @pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
        async def test_patched(anyio_backend):
            assert await retry_for_an_hour() == 60

        @pytest.mark.anyio
        @pytest.mark.virtualtime(max_time="2h")
        @pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
        async def test_unpatched(anyio_backend):
            await retry_for_an_hour()
        """,
    )
    result = run(pytester, "-rf")
    result.assert_outcomes(passed=2, failed=2)
    out = result.stdout.str()
    # Counted in the failures' reports: the summary lines repeat them in full on CI (pytest
    # does not cut them short when CI is set) and cut short elsewhere.
    body = out.split("short test summary info")[0]
    assert body.count("ran past its max_time=2 h") == 2
    assert body.count("give the mark patch_time=True") == 2
    assert "cannot reach" not in out
    result.stdout.fnmatch_lines(["*`from time import monotonic`*included*"])


def test_the_horizon_comes_from_mark_ini_option_or_a_day(pytester: pytest.Pytester) -> None:
    write(
        pytester,
        test_long="""
        import asyncio
        import pytest

        pytestmark = pytest.mark.asyncio

        @pytest.mark.virtualtime
        async def test_two_days():
            await asyncio.sleep(2 * 86400)

        @pytest.mark.virtualtime
        async def test_half_a_day():
            await asyncio.sleep(12 * 3600)

        @pytest.mark.virtualtime(max_time=None)
        async def test_a_year_without_horizon():
            await asyncio.sleep(365 * 86400)

        @pytest.mark.virtualtime(max_time="30d")
        async def test_a_week_with_a_month():
            await asyncio.sleep(7 * 86400)
        """,
    )
    # The default is one virtual day.
    result = run(pytester, "-rf")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*ran past its max_time=1 d and was stopped: *t=172,800 s*"])
    # The ini option, then the command line, replace the default; marks win over both.
    result = run(pytester, "-rf", ini="virtualtime_max_time = 3d\n")
    result.assert_outcomes(passed=4)
    result = run(pytester, "-rf", "--virtualtime-max-time", "6h", ini="virtualtime_max_time = 3d\n")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines_random(["FAILED *test_two_days*", "FAILED *test_half_a_day*"])
    result = run(pytester, "--virtualtime-max-time", "none")
    result.assert_outcomes(passed=4)


def test_bad_horizons_are_clear_errors(pytester: pytest.Pytester) -> None:
    write(
        pytester,
        test_bad="""
        import pytest

        @pytest.mark.asyncio
        @pytest.mark.virtualtime(max_time=0)
        async def test_zero():
            pass

        @pytest.mark.asyncio
        @pytest.mark.virtualtime(max_time=[1])
        async def test_list():
            pass
        """,
    )
    result = run(pytester)
    result.assert_outcomes(errors=1)  # collection stops at the first bad mark of the module
    result.stdout.fnmatch_lines(["*bad option max_time=0: max_time must be > 0 virtual seconds*"])
    result = run(pytester, "--virtualtime-max-time", "soon")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--virtualtime-max-time: expected seconds (3600) or a duration*"])


def test_horizons_past_virtual_time_itself_are_clear_errors(pytester: pytest.Pytester) -> None:
    # Issue 34: max_time=1e308 ran into a bare OverflowError on asyncio, and 10**400 ended
    # collection with one; both now name the option, the value and the rule.
    for name, value in (("huge_float", "1e308"), ("huge_int", "10**400"), ("text", "'1e308s'")):
        write(
            pytester,
            **{
                f"test_{name}": f"""
                import pytest

                @pytest.mark.asyncio
                @pytest.mark.virtualtime(max_time={value})
                async def test_it():
                    pass
                """
            },
        )
    result = run(pytester)
    result.assert_outcomes(errors=3)
    out = result.stdout.str()
    assert "OverflowError" not in out
    body = out.split("short test summary info")[0]  # (the summary repeats them on CI)
    assert body.count("max_time must be shorter than the horizon of virtual time") == 3
    result.stdout.fnmatch_lines_random(
        [
            "*bad option max_time=1e+308: *got 1e+308*",
            "*bad option max_time=*: *got an int of about 401 digits*",
            "*bad option max_time='1e308s': *got '1e308s'*",
        ]
    )
    result = run(pytester, "--virtualtime-max-time", "1e308")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--virtualtime-max-time: max_time must be shorter than*"])


def test_the_horizon_changes_nothing_before_it_is_reached(pytester: pytest.Pytester) -> None:
    write(
        pytester,
        test_inside="""
        import asyncio
        import math
        import anyio
        import pytest

        @pytest.mark.asyncio
        @pytest.mark.virtualtime(max_time=10)
        async def test_a_timeout_past_the_horizon_that_is_not_needed(virtual_time):
            assert virtual_time.peek() == math.inf  # the horizon is not a timer
            with anyio.fail_after(100):
                await asyncio.sleep(5)
            assert virtual_time.now() == 5
            assert await virtual_time.step() is None

        @pytest.mark.asyncio
        @pytest.mark.virtualtime(max_time=10, deadlock_timeout=0.01)
        async def test_a_deadlock_is_still_a_deadlock():
            await asyncio.Event().wait()

        @pytest.mark.anyio
        @pytest.mark.virtualtime(max_time=10, deadlock_timeout=0.01)
        @pytest.mark.parametrize("anyio_backend", ["trio"])
        async def test_a_trio_deadlock_too(anyio_backend):
            await anyio.Event().wait()
        """,
    )
    result = run(pytester, "-rf")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines_random(
        [
            "FAILED *test_a_deadlock_is_still_a_deadlock - DeadlockError*",
            "FAILED *test_a_trio_deadlock_too?trio? - DeadlockError*",
        ]
    )


def _timed_out(pytester: pytest.Pytester, body: str) -> pytest.RunResult:
    """Run ``test_slow.py::test_endless`` (``body``: its lines, no horizon) under
    pytest-timeout's signal method with 0.3 s, in a child process: the alarm interrupts the
    loop at some point, and whatever that point is, this session must not be the one left to
    deal with it."""
    pytest.importorskip("pytest_timeout")
    write(
        pytester,
        test_slow="""
        import asyncio
        import time
        import pytest

        @pytest.mark.asyncio
        @pytest.mark.virtualtime(max_time=None)
        @pytest.mark.timeout(0.3, method="signal")
        async def test_endless():
        """
        + textwrap.indent(textwrap.dedent(body), " " * 12),
    )
    pytester.makeini(INI)
    return pytester.runpytest_subprocess(*BASE_ARGS, "-p", "timeout", timeout=120)


def test_a_timeout_of_pytest_timeout_tells_where_virtual_time_was(
    pytester: pytest.Pytester,
) -> None:
    result = _timed_out(
        pytester,
        """
        while True:
            await asyncio.sleep(1)
            # A slow step in the test's own code: where the alarm lands, nearly always
            # (rather than inside the loop's bookkeeping, which no loop survives intact).
            time.sleep(0.005)  # real-time: a slow step of the test's own, for the alarm
        """,
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed") == 1
    # An exception raised from a signal handler can land inside asyncio's own bookkeeping
    # (between a timer leaving the heap and its callback running, say); the runner's teardown
    # may then fail too.  That is the signal method's risk on any loop, not this report's.
    assert outcomes.get("errors", 0) <= 1
    result.stdout.fnmatch_lines(
        [
            "*Timeout (>0.3s) from pytest-timeout.",
            "*virtualtime: test_slow.py::test_endless was interrupted: virtual time reached "
            "t=*timers fired.  Likely cause:*",
        ]
    )


def test_a_timeout_that_lands_in_a_loop_callback_still_ends_the_test(
    pytester: pytest.Pytester,
) -> None:
    # asyncio hands whatever a callback raises (but Ctrl-C and SystemExit) to the exception
    # handler and goes on; pytest-timeout's alarm raised there used to vanish, and a test with
    # no horizon then ran for ever.  Here the alarm always lands in a callback.
    result = _timed_out(
        pytester,
        """
        await asyncio.sleep(5)
        asyncio.get_running_loop().call_soon(time.sleep, 30)  # real-time: where the alarm lands
        while True:
            await asyncio.sleep(1)
        """,
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*Timeout (>0.3s) from pytest-timeout.",
            "*virtualtime: test_slow.py::test_endless was interrupted: virtual time reached "
            "t=5 s (5 s after the test started at t=0 s), 1 timer fired.  Likely cause:*",
        ]
    )


@pytest.mark.parametrize("runner", ["asyncio", "anyio"])
def test_pytest_outcomes_raised_in_loop_callbacks_end_the_test(
    pytester: pytest.Pytester, runner: str
) -> None:
    mark = "pytest.mark.asyncio" if runner == "asyncio" else "pytest.mark.anyio"
    write(
        pytester,
        test_callbacks=f"""
        import asyncio
        import pytest

        @pytest.fixture
        def anyio_backend():
            return "asyncio"

        def fail_here():
            pytest.fail("failed in a callback")

        @{mark}
        @pytest.mark.virtualtime(max_time=3600)  # the horizon: were the failure lost
        async def test_fails():
            asyncio.get_running_loop().call_later(3, fail_here)
            try:
                while True:
                    await asyncio.sleep(1)
            finally:
                print("cleaned up at", asyncio.get_running_loop().time())

        @{mark}
        @pytest.mark.virtualtime
        async def test_skips():
            asyncio.get_running_loop().call_soon(pytest.skip, "skipped in a callback")
            await asyncio.sleep(3600)
            raise AssertionError("not reached: the skip cancels the test's task")

        @{mark}
        @pytest.mark.virtualtime
        async def test_finishes_first():
            asyncio.get_running_loop().call_soon(fail_here)
            await asyncio.sleep(0)  # the callback runs; the cancellation it asks comes later
            await asyncio.sleep(0)

        @{mark}
        @pytest.mark.virtualtime
        async def test_other_errors_go_to_the_handler_set_before(caplog):
            asyncio.get_running_loop().call_soon(lambda: 1 / 0)
            await asyncio.sleep(1)
            assert "ZeroDivisionError" in caplog.text  # asyncio's default handler logs it
        """,
    )
    result = run(pytester, "-rfs", "-s")
    lines = [
        "*cleaned up at 3.0*",
        "FAILED test_callbacks.py::test_fails - Failed: failed in a callback",
        "FAILED test_callbacks.py::test_finishes_first - Failed: failed in a callback",
        "SKIPPED * skipped in a callback",
    ]
    if runner == "asyncio":
        result.assert_outcomes(failed=2, skipped=1, passed=1)
    else:  # anyio's runner sets a handler of its own, which raises them after the test
        result.assert_outcomes(failed=3, skipped=1)
        lines += [
            "FAILED *::test_other_errors_go_to_the_handler_set_before*",
            "*ZeroDivisionError*",
        ]
    result.stdout.fnmatch_lines_random(lines)


def test_ctrl_c_in_a_virtual_test_tells_where_virtual_time_was(
    pytester: pytest.Pytester,
) -> None:
    write(
        pytester,
        test_endless="""
        import asyncio
        import time
        import pytest

        @pytest.mark.asyncio
        @pytest.mark.virtualtime(max_time=None)
        async def test_endless():
            print("started", flush=True)
            while True:
                await asyncio.sleep(1)
                time.sleep(0.005)  # real-time: a slow step, where Ctrl-C lands (see above)
        """,
    )
    pytester.makeini(INI)
    command = [sys.executable, "-m", "pytest", *BASE_ARGS, "-s", "-p", "no:pytest_timeout"]
    child = subprocess.Popen(
        command, cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert child.stdout is not None
    for line in child.stdout:
        if "started" in line:
            break
    child.send_signal(signal.SIGINT)
    out, _ = child.communicate(timeout=60)
    assert child.returncode == pytest.ExitCode.INTERRUPTED
    assert "virtualtime: test_endless.py::test_endless was interrupted: virtual time reached" in out
    assert " fired.  Likely cause:" in out
