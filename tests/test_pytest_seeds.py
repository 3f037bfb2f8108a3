"""The pytest plugin's seeds: ``--virtualtime-seeds``, ``--virtualtime-seed``, the mark's seed.

Each test runs an inner pytest session (Pytester), in-process, with its plugins named
explicitly, as ``test_pytest_plugin.py`` does.
"""

from __future__ import annotations

import shlex
import textwrap

import pytest
from _pytester_args import HYPOTHESIS_OFF, NEIGHBOURS_OFF, STRICT

pytest_plugins = ["pytester"]

INI = """
[pytest]
asyncio_mode = strict
asyncio_default_fixture_loop_scope = function
filterwarnings = error
"""

BASE_ARGS = (*NEIGHBOURS_OFF, *HYPOTHESIS_OFF, "-p", "no:xdist", *STRICT)

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


def _replay_line(result: pytest.RunResult) -> str:
    """The replay command of the first failed seeded test's report section."""
    marker = "virtualtime: seed "
    return next(line for line in result.outlines if line.startswith(marker))


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
    # In the failure's report: the node id, the session's options (not its seeds), the seed.
    line = _replay_line(result)
    head = f"virtualtime: seed {seed}, perturb=timers -- replay: "
    assert line.startswith(head)
    words = shlex.split(line.removeprefix(head))
    assert words[:2] == ["pytest", f"test_seeds.py::test_order[seed={seed}]"]
    assert words[2 : 2 + len(BASE_ARGS)] == list(BASE_ARGS)
    assert words[-2].startswith("--basetemp=")  # pytester's own option, carried too
    assert words[-1] == f"--virtualtime-seed={seed}"
    assert "--virtualtime-seeds=8" not in words
    # And in the summary at the end.
    summary = result.outlines.index(next(x for x in result.outlines if "seeds that failed" in x))
    assert result.outlines[summary + 1] == (
        f"test_seeds.py::test_order[seed={seed}]: {line.removeprefix('virtualtime: ')}"
    )
    # The command selects that test alone, and it fails the same way.
    replayed = pytester.runpytest(*words[1:])
    replayed.assert_outcomes(failed=1)
    replayed.stdout.fnmatch_lines([f"*the consumer came first under seed {seed}*"])


def test_the_replay_command_keeps_what_made_the_test_virtual(pytester: pytest.Pytester) -> None:
    tests = """
    import asyncio
    import pytest

    @pytest.mark.asyncio
    async def test_unmarked():
        loop = asyncio.get_running_loop()
        items = []

        async def producer():
            await asyncio.sleep(1)
            items.append(1)

        async def consumer():
            await asyncio.sleep(1)
            assert items, f"the consumer came first under seed {loop.seed}"

        await asyncio.gather(producer(), consumer())
    """
    result = run(pytester, "--virtualtime", "--virtualtime-seeds", "8", tests=tests)
    assert result.parseoutcomes()["failed"] >= 1
    words = shlex.split(_replay_line(result).partition(" -- replay: ")[2])
    assert "--virtualtime" in words
    assert "8" not in words  # the value of --virtualtime-seeds went with it
    seed = int(words[-1].removeprefix("--virtualtime-seed="))
    replayed = pytester.runpytest(*words[1:])
    replayed.assert_outcomes(failed=1)
    replayed.stdout.fnmatch_lines([f"*the consumer came first under seed {seed}*"])


def test_the_summary_is_printed_by_the_xdist_controller(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    tests = """
    import pytest

    @pytest.mark.asyncio
    @pytest.mark.virtualtime
    async def test_fails():
        assert False, "always"
    """
    pytester.makeini(INI)
    pytester.makepyfile(test_seeds=textwrap.dedent(tests))
    args = list(BASE_ARGS)
    at = args.index("no:xdist")
    del args[at - 1 : at + 1]  # -p no:xdist: this one runs on xdist
    result = pytester.runpytest(*args, "-n", "1", "--virtualtime-seeds=2")
    result.assert_outcomes(failed=2)
    summary = result.outlines.index(next(x for x in result.outlines if "seeds that failed" in x))
    listed = sorted(result.outlines[summary + 1 : summary + 3])
    for seed, line in enumerate(listed):
        assert line.startswith(
            f"test_seeds.py::test_fails[seed={seed}]: seed {seed}, perturb=timers -- replay: "
            f"pytest 'test_seeds.py::test_fails[seed={seed}]' "
        )
        assert " -n 1 " in line
        assert line.endswith(f" --virtualtime-seed={seed}")


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

    DRAWN = []

    @pytest.mark.asyncio
    @pytest.mark.virtualtime
    @pytest.mark.parametrize("n", [1, 2])
    async def test_seeded(request, n):
        loop = asyncio.get_running_loop()
        assert (loop.seed, loop.perturb) == (6, "ready")
        assert random.random() == random.Random(6).random()  # random: the seed alone
        drawn = os.urandom(8)
        DRAWN.append(drawn)
        # os.urandom: the stream of seed 6 salted with the test's node id, from its start.
        with SeededEntropy(6, salt=request.node.nodeid):
            assert os.urandom(8) == drawn
        with SeededEntropy(6):
            assert os.urandom(8) != drawn
        with SeededEntropy(7, salt=request.node.nodeid):
            assert os.urandom(8) != drawn

    def test_two_tests_under_one_seed_drew_different_bytes():
        assert len(DRAWN) == len(set(DRAWN)) == 2
    """
    result = run(pytester, "--virtualtime-seed=6", "--virtualtime-perturb=ready", tests=tests)
    result.assert_outcomes(passed=3)


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
    line = _replay_line(result)
    assert line.startswith(
        "virtualtime: seed 11 (the mark's), perturb=timers -- replay: pytest "
        "test_seeds.py::test_pinned -p no:cacheprovider "
    )
    assert "--virtualtime-seed" not in line  # the mark pins it


_BOTH_BACKENDS = """
    import pytest

    @pytest.fixture(params=["asyncio", "trio"])
    def anyio_backend(request):
        return request.param

    @pytest.mark.anyio
    @pytest.mark.virtualtime
"""
"""An anyio test module's head: both backends, the test below it marked for virtual time."""


def test_anyio_tests_get_the_seed_on_asyncio_and_run_on_trio(pytester: pytest.Pytester) -> None:
    pytest.importorskip("trio")
    tests = (
        """
    import asyncio
"""
        + _BOTH_BACKENDS
        + """    async def test_anyio(anyio_backend):
        if anyio_backend == "asyncio":
            assert asyncio.get_running_loop().seed in (0, 1)
    """
    )
    result = run(pytester, "--virtualtime-seeds=2", "-v", tests=tests)
    result.assert_outcomes(passed=4)
    assert _has(result, "test_anyio[asyncio-seed=0] PASSED")
    assert _has(result, "test_anyio[trio-seed=1] PASSED")


def test_a_failure_on_trio_gets_no_replay_command(pytester: pytest.Pytester) -> None:
    pytest.importorskip("trio")
    tests = (
        _BOTH_BACKENDS
        + """    async def test_anyio(anyio_backend):
        assert False, anyio_backend
    """
    )
    result = run(pytester, "--virtualtime-seed=3", tests=tests)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*= virtualtime seeds that failed =*",
            "test_seeds.py::test_anyio?asyncio-seed=3?: seed 3, perturb=timers -- replay: pytest*",
            "test_seeds.py::test_anyio?trio-seed=3?: seed 3, on trio -- no replay: the seed fixed "
            "only random and os.urandom, not trio's own schedule*",
        ]
    )


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
