"""The pytest plugin's seeds: ``--virtualtime-seeds``, ``--virtualtime-seed``, the mark's seed.

Each test runs an inner pytest session (Pytester), in-process, with its plugins named
explicitly, as ``test_pytest_plugin.py`` does.
"""

from __future__ import annotations

import textwrap

import pytest

pytest_plugins = ["pytester"]

INI = """
[pytest]
asyncio_mode = strict
asyncio_default_fixture_loop_scope = function
filterwarnings = error
"""

BASE_ARGS = (
    "-p",
    "no:cacheprovider",
    "-p",
    "no:looptime_plugin",
    "-p",
    "no:looptime_chronometers",
    "-p",
    "no:looptime_timeproxies",
    "-p",
    "no:hypothesispytest",
    "-p",
    "no:xdist",
    "--strict-markers",
    "--strict-config",
)

TESTS = """
import asyncio
import random

import pytest


@pytest.mark.asyncio
@pytest.mark.virtualtime
async def test_order():
    loop = asyncio.get_running_loop()
    items = []

    async def producer():
        await asyncio.sleep(1)
        items.append("job")

    async def consumer():
        await asyncio.sleep(1)
        assert items, f"the consumer came first under seed {loop.seed}"

    await asyncio.gather(producer(), consumer())


@pytest.mark.asyncio
@pytest.mark.virtualtime(seed=5)
async def test_pinned():
    assert asyncio.get_running_loop().seed == 5
    assert random.random() == random.Random(5).random()


@pytest.mark.asyncio
async def test_not_virtual():
    assert not hasattr(asyncio.get_running_loop(), "seed")


def test_sync():
    pass
"""


def run(pytester: pytest.Pytester, *args: str, tests: str = TESTS) -> pytest.RunResult:
    pytester.makeini(INI)
    pytester.makepyfile(test_seeds=textwrap.dedent(tests))
    return pytester.runpytest(*BASE_ARGS, *args)


def _has(result: pytest.RunResult, text: str) -> bool:
    return any(text in line for line in result.outlines)


def test_seeds_parametrize_the_virtual_async_tests_only(pytester: pytest.Pytester) -> None:
    result = run(pytester, "--virtualtime-seeds=3", "--collect-only", "-q")
    assert result.ret == 0
    collected = [line for line in result.outlines if line.startswith("test_seeds.py::")]
    assert collected == [
        "test_seeds.py::test_order[seed=0]",
        "test_seeds.py::test_order[seed=1]",
        "test_seeds.py::test_order[seed=2]",
        "test_seeds.py::test_pinned",  # the mark's seed wins
        "test_seeds.py::test_not_virtual",
        "test_seeds.py::test_sync",
    ]


def test_without_seeds_nothing_changes(pytester: pytest.Pytester) -> None:
    result = run(pytester, "-q")
    result.assert_outcomes(passed=4)  # FIFO: the producer first; the mark's seed 5 passes


def test_a_failing_seed_prints_the_command_that_replays_it(pytester: pytest.Pytester) -> None:
    result = run(pytester, "--virtualtime-seeds=8")
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] >= 1
    assert outcomes["passed"] + outcomes["failed"] == 8 + 3
    failed = [
        line.split()[1]
        for line in result.outlines
        if line.startswith("FAILED test_seeds.py::test_order[seed=")
    ]
    assert len(failed) == outcomes["failed"]
    seed = int(failed[0].split("seed=")[1].rstrip("]"))
    command = f"pytest 'test_seeds.py::test_order[seed={seed}]' --virtualtime-seed={seed}"
    # In the failure's report, and in the summary at the end.
    result.stdout.fnmatch_lines(
        [
            "*- virtualtime -*",
            f"virtualtime: seed {seed}, perturb=timers -- replay: {command}",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*= virtualtime seeds that failed =*",
            f"test_seeds.py::test_order[seed={seed}]: seed {seed}, perturb=timers -- replay: "
            f"{command}",
        ]
    )
    # The command selects that test alone, and it fails the same way.
    replayed = pytester.runpytest(*BASE_ARGS, f"test_seeds.py::test_order[seed={seed}]",
                                  f"--virtualtime-seed={seed}")  # fmt: skip
    replayed.assert_outcomes(failed=1)
    replayed.stdout.fnmatch_lines([f"*the consumer came first under seed {seed}*"])


def test_one_seed_replays_it_alone(pytester: pytest.Pytester) -> None:
    result = run(pytester, "--virtualtime-seed=4", "-v")
    assert any(line.startswith("test_seeds.py::test_order[seed=4] ") for line in result.outlines)
    assert result.parseoutcomes()["passed"] + result.parseoutcomes().get("failed", 0) == 4


def test_the_seeded_test_sees_its_seed_perturb_and_entropy(pytester: pytest.Pytester) -> None:
    tests = """
    import asyncio
    import os
    import random

    import pytest

    from virtualtime.net._entropy import SeededEntropy

    @pytest.mark.asyncio
    @pytest.mark.virtualtime
    async def test_seeded():
        loop = asyncio.get_running_loop()
        assert (loop.seed, loop.perturb) == (6, "ready")
        assert random.random() == random.Random(6).random()
        drawn = os.urandom(8)
        with SeededEntropy(6):  # the stream of seed 6 from its start: the same bytes
            assert os.urandom(8) == drawn
        with SeededEntropy(7):
            assert os.urandom(8) != drawn
    """
    result = run(pytester, "--virtualtime-seed=6", "--virtualtime-perturb=ready", tests=tests)
    result.assert_outcomes(passed=1)


def test_the_marks_perturb_wins_and_needs_a_seed_from_somewhere(
    pytester: pytest.Pytester,
) -> None:
    tests = """
    import asyncio
    import pytest

    @pytest.mark.asyncio
    @pytest.mark.virtualtime(perturb="ready")
    async def test_ready():
        loop = asyncio.get_running_loop()
        assert loop.perturb == "ready" and loop.seed in (0, 1)
    """
    result = run(pytester, "--virtualtime-seeds=2", tests=tests)
    result.assert_outcomes(passed=2)
    alone = pytester.runpytest(*BASE_ARGS)
    alone.assert_outcomes(errors=1)
    alone.stdout.fnmatch_lines(["*perturb='ready' needs a seed*--virtualtime-seeds N*"])


def test_a_pinned_failure_says_the_seed_is_the_marks(pytester: pytest.Pytester) -> None:
    tests = """
    import asyncio
    import pytest

    @pytest.mark.asyncio
    @pytest.mark.virtualtime(seed=11)
    async def test_pinned():
        await asyncio.sleep(1)
        assert False, "pinned"
    """
    result = run(pytester, tests=tests)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["virtualtime: seed 11 (the mark's), perturb=timers -- replay: pytest test_seeds.py::"
         "test_pinned"]
    )  # fmt: skip


def test_anyio_tests_get_the_seed_on_asyncio_and_run_on_trio(pytester: pytest.Pytester) -> None:
    pytest.importorskip("trio")
    tests = """
    import asyncio
    import pytest

    @pytest.fixture(params=["asyncio", "trio"])
    def anyio_backend(request):
        return request.param

    @pytest.mark.anyio
    @pytest.mark.virtualtime
    async def test_anyio(anyio_backend):
        if anyio_backend == "asyncio":
            assert asyncio.get_running_loop().seed in (0, 1)
    """
    result = run(pytester, "--virtualtime-seeds=2", "-v", tests=tests)
    result.assert_outcomes(passed=4)
    assert _has(result, "test_anyio[asyncio-seed=0] PASSED")
    assert _has(result, "test_anyio[trio-seed=1] PASSED")


def test_a_shared_loop_cannot_take_each_tests_seed(pytester: pytest.Pytester) -> None:
    tests = """
    import pytest

    pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.virtualtime]

    async def test_shared():
        pass
    """
    result = run(pytester, "--virtualtime-seeds=2", tests=tests)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*should run under seed 1, but its loop was built with seed=0*"])


def test_the_global_switch_seeds_unmarked_async_tests(pytester: pytest.Pytester) -> None:
    tests = """
    import asyncio
    import pytest

    @pytest.mark.asyncio
    async def test_unmarked():
        assert asyncio.get_running_loop().seed in (0, 1)

    def test_sync():
        pass
    """
    result = run(pytester, "--virtualtime", "--virtualtime-seeds=2", "-v", tests=tests)
    result.assert_outcomes(passed=3)
    assert _has(result, "test_unmarked[seed=1] PASSED")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--virtualtime-seeds=2", "--virtualtime-seed=1"), "give one of them"),
        (("--virtualtime-seeds=0",), "expected an integer >= 1"),
        (("--virtualtime-seed=x",), "expected an integer"),
        (("--virtualtime-perturb=tasks",), "invalid choice"),
    ],
)
def test_bad_seed_options_are_usage_errors(
    pytester: pytest.Pytester, args: tuple[str, ...], message: str
) -> None:
    result = run(pytester, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in "\n".join(result.errlines)
