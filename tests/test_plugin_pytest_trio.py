"""pytest-trio's route to virtual time: a ``clock`` fixture returning a ``VirtualClock``.

pytest-trio runs each ``@pytest.mark.trio`` test with ``trio.run``, handing it any
``trio.abc.Clock`` among the test's fixtures.  With a :class:`virtualtime.trio.VirtualClock`
there, sleeps are instant; and (issue 34, item 4) a test or fixture that can never go on
must fail with :class:`~virtualtime.DeadlockError` -- the same short report as the anyio
route -- instead of hanging for ever.

The inner sessions run in a child process with a timeout, so that a regression (a hang)
fails this test instead of hanging the suite.
"""

from __future__ import annotations

import pytest
from _pytester_args import NEIGHBOURS_OFF

pytest_plugins = ["pytester"]

INI = """
[pytest]
filterwarnings = error
"""

ARGS = (*NEIGHBOURS_OFF, "-p", "no:asyncio", "-p", "no:anyio", "-p", "trio", "--strict-markers")

CONFTEST = """
import pytest
import virtualtime.trio


@pytest.fixture
def clock():
    return virtualtime.trio.VirtualClock(deadlock_timeout=0.01)
"""


def run(pytester: pytest.Pytester, tests: str, *args: str) -> pytest.RunResult:
    pytester.makeini(INI)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_it=tests)
    return pytester.runpytest_subprocess(*ARGS, *args, timeout=60)


def test_a_dead_wait_in_the_test_raises_deadlock_error(pytester: pytest.Pytester) -> None:
    result = run(
        pytester,
        """
import pytest
import trio


@pytest.mark.trio
async def test_virtual(clock):
    await trio.sleep(3600)
    assert trio.current_time() == 3600.0


@pytest.mark.trio
async def test_stuck(clock):
    await trio.sleep(7)
    await trio.Event().wait()


@pytest.mark.trio
async def test_stuck_shielded(clock):
    with trio.CancelScope(shield=True):
        await trio.Event().wait()
""",
        "-rf",
    )
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines_random(
        [
            "DeadlockError: deadlock at virtual time t=7.0: every task is blocked*",
            "  - <test 'test_stuck'>: test_stuck() at *test_it.py:14 -> Event.wait() at *",
            "DeadlockError: deadlock at virtual time t=0.0: every task is blocked*",
            "  - <test 'test_stuck_shielded'>: test_stuck_shielded() at *test_it.py:20 -> *",
            "FAILED test_it.py::test_stuck - *DeadlockError*",
            "FAILED test_it.py::test_stuck_shielded - *DeadlockError*",
        ]
    )
    # The short report, as on the anyio route: pytest-trio's own tasks are left out.
    out = result.stdout.str()
    assert "_bootstrap_fixtures_and_run_test" not in out
    assert "TrioFixture.run" not in out


def test_fixtures_that_never_finish_raise_deadlock_error(pytester: pytest.Pytester) -> None:
    result = run(
        pytester,
        """
import pytest
import trio


@pytest.fixture
async def never_ready():
    await trio.Event().wait()
    yield


@pytest.fixture
async def busy_nursery(nursery):
    nursery.start_soon(trio.sleep_forever)
    yield


@pytest.fixture
async def slow_but_fine():
    await trio.sleep(5)
    yield
    await trio.sleep(1)


@pytest.mark.trio
async def test_fixture_never_ready(clock, never_ready):
    pass


@pytest.mark.trio
async def test_stuck_beside_a_nursery(clock, busy_nursery):
    await trio.Event().wait()


@pytest.mark.trio
async def test_stuck_after_a_fixture(clock, slow_but_fine):
    assert trio.current_time() == 5.0
    await trio.Event().wait()
""",
        "-rf",
    )
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines_random(
        [
            "FAILED test_it.py::test_fixture_never_ready - *DeadlockError*",
            "FAILED test_it.py::test_stuck_beside_a_nursery - *DeadlockError*",
            "FAILED test_it.py::test_stuck_after_a_fixture - *DeadlockError*",
            "  - <fixture 'never_ready'>: never_ready() at *test_it.py:7 -> Event.wait() at *",
            "DeadlockError: deadlock at virtual time t=5.0: *",
        ]
    )


def test_other_clocks_and_runners_are_left_alone(pytester: pytest.Pytester) -> None:
    result = run(
        pytester,
        """
import pytest
import trio
import trio.testing

import virtualtime.trio

RUNS = []


def counting_run(*args, **kwargs):
    RUNS.append(type(kwargs["clock"]).__name__)
    return trio.run(*args, **kwargs)


@pytest.mark.trio
async def test_mock_clock(autojump_clock, request):
    await trio.sleep(60)
    assert trio.current_time() == 60.0
    assert len(list(request.node.iter_markers("trio"))) == 1


@pytest.mark.trio(run=counting_run)
async def test_own_runner_is_kept(clock):
    await trio.sleep(60)
    assert isinstance(trio.lowlevel.current_clock(), virtualtime.trio.VirtualClock)


def test_the_own_runner_ran():
    assert RUNS == ["VirtualClock"]
""",
    )
    result.assert_outcomes(passed=3)


def test_under_hypothesis_the_test_body_is_guarded(pytester: pytest.Pytester) -> None:
    # pytest-trio runs a Hypothesis test with trio.run itself (it ignores the mark's run=).
    result = run(
        pytester,
        """
import pytest
import trio
from hypothesis import HealthCheck, given, settings, strategies

EXAMPLES = []


@pytest.mark.trio
@settings(
    max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(strategies.integers(1, 9))
async def test_stuck(clock, seconds):
    EXAMPLES.append(seconds)
    await trio.sleep(seconds)
    await trio.Event().wait()


def test_it_ran_and_ended():
    assert EXAMPLES
""",
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*DeadlockError: deadlock at virtual time t=*"])
