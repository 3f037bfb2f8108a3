"""Seeded exploration: ``virtualtime.net``'s explore, replay, shrink and determinism check.

The scenarios live in ``explore_scenarios.py`` so that worker processes can import them.
``ordering_bug`` is wrong only when the consumer's timer fires before the producer's at the
same instant: FIFO (and so an unseeded loop) never shows it, about half the seeds do.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import random
import sys
import types
from pathlib import Path
from typing import Any, ClassVar

import explore_scenarios as scenarios
import pytest

import virtualtime
from virtualtime import DeadlockError, InvalidTypeError, InvalidValueError, UsageError
from virtualtime.net._entropy import RANDOM, URANDOM, EntropyReport, SeededEntropy, hash_seed
from virtualtime.net._explore import Exploration, explore
from virtualtime.net._replay import replay
from virtualtime.net._scenario import WorkerPool
from virtualtime.net._targets import load_target, target_of

TARGET = "tests/explore_scenarios.py"
_HASH = f"PYTHONHASHSEED={hash_seed()} " if hash_seed() else ""
"""What replay lines start with: this process's hash seed, when it is fixed."""


@pytest.fixture(scope="module")
def found() -> Exploration:
    return explore(scenarios.ordering_bug, range(200))


# ------------------------------------------------------------------ finding and replaying


def test_explore_finds_the_ordering_bug_and_names_its_seed(found: Exploration) -> None:
    assert not scenarios.__name__.startswith("tests.")  # the target below is a file path
    assert len(found.seeds) == 200
    assert found.failed == len(found.failures) > 0
    assert found.passed + found.failed == 200
    assert not found.ok
    assert not found.stopped_early
    first = found.failures[0]
    assert first.kind == "error"
    assert first.error == "AssertionError"
    assert first.message == "the consumer woke before the producer: nothing to take"
    assert "raise AssertionError" in first.traceback
    assert first.keep is None
    assert 0 < first.deviations <= first.decisions
    line = f"python -m virtualtime explore {TARGET}:ordering_bug --seed {first.seed}"
    assert first.replay == _HASH + line
    # Failures come in seed order; the summary lists them with their replay lines.
    assert [f.seed for f in found.failures] == sorted(f.seed for f in found.failures)
    text = str(found)
    assert text.splitlines()[0].startswith(
        f"explored {TARGET}:ordering_bug under 200 seeds (perturb=timers)"
    )
    assert f"{found.failed} failed, {found.passed} passed" in text
    assert f"  replay: {first.replay}" in text
    assert repr(found).startswith(f"<Exploration {TARGET}:ordering_bug seeds=200 failed=")


def test_the_unseeded_order_and_a_passing_seed_pass(found: Exploration) -> None:
    failing = {f.seed for f in found.failures}
    passing = next(seed for seed in range(200) if seed not in failing)
    assert replay(scenarios.ordering_bug, passing) is None
    assert replay(scenarios.ordering_bug, failing.pop(), keep=()) is None  # no deviation: FIFO


def test_replay_reproduces_the_failure(found: Exploration) -> None:
    first = found.failures[0]
    for _ in range(2):
        with pytest.raises(AssertionError, match="nothing to take"):
            replay(scenarios.ordering_bug, first.seed)
    with pytest.raises(AssertionError, match="nothing to take"):
        first.rerun()
    again = explore(scenarios.ordering_bug, [first.seed])
    assert again.failures == (first,)


def test_shrink_keeps_fewer_deviations_and_still_fails(found: Exploration) -> None:
    first = found.failures[0]
    shrunk = first.shrink()
    assert shrunk.keep is not None
    assert 0 < len(shrunk.keep) < first.deviations
    assert shrunk.deviations <= first.deviations
    assert shrunk.keep <= set(first.deviation_indices)
    assert (shrunk.seed, shrunk.error, shrunk.kind) == (first.seed, "AssertionError", "error")
    keep = ",".join(map(str, sorted(shrunk.keep)))
    assert shrunk.replay.endswith(f"--seed {first.seed} --keep {keep}")
    with pytest.raises(AssertionError, match="nothing to take"):
        replay(scenarios.ordering_bug, first.seed, keep=shrunk.keep)
    with pytest.raises(AssertionError):
        shrunk.rerun()
    # Shrinking a shrunk failure finds nothing smaller: it is returned as it is.
    assert shrunk.shrink() is shrunk


def test_a_bug_that_needs_no_reordering_shrinks_to_keep_nothing() -> None:
    found = explore(scenarios.always_fails, range(3))
    assert found.failed == 3
    shrunk = found.failures[0].shrink(max_runs=5)
    assert shrunk.keep == frozenset()
    assert shrunk.deviations == 0
    assert shrunk.replay.endswith("--keep none")


def test_a_clean_program_passes_every_seed() -> None:
    found = explore(scenarios.clean, range(200))
    assert found.ok
    assert found.failures == ()
    assert found.passed == 200
    assert found.entropy.reached() == ()


def test_max_failures_stops_early(found: Exploration) -> None:
    stopped = explore(scenarios.ordering_bug, range(200), max_failures=2)
    assert stopped.failures == found.failures[:2]
    assert stopped.stopped_early
    assert stopped.seeds == tuple(range(found.failures[1].seed + 1))


def test_perturb_ready_explores_and_its_replay_line_says_so() -> None:
    found = explore(scenarios.ordering_bug, range(30), perturb="ready")
    assert found.failures
    assert found.perturb == "ready"
    first = found.failures[0]
    assert first.replay.endswith("--perturb ready")
    with pytest.raises(AssertionError):
        replay(scenarios.ordering_bug, first.seed, perturb="ready")


def test_deadlocks_are_failures_and_loop_options_reach_every_run() -> None:
    found = explore(scenarios.deadlocks, range(2), deadlock_timeout=0)
    assert [f.error for f in found.failures] == ["DeadlockError", "DeadlockError"]
    # Loop options cannot be given on the command line: the replay line is a Python call.
    assert found.failures[0].replay == (
        "virtualtime.net.replay(deadlocks, seed=0, deadlock_timeout=0)"
    )
    with pytest.raises(DeadlockError):
        replay(scenarios.deadlocks, 0, deadlock_timeout=0)


def test_a_configure_layer_around_the_exploration_does_not_replace_each_runs_seed(
    found: Exploration,
) -> None:
    # A configure() layer's seed and perturb win over a loop's own options; each run's loop
    # is built under the run's own, innermost, so the runs are those of a plain exploration.
    failing = found.failures[0].seed
    passing = next(seed for seed in range(200) if seed not in {f.seed for f in found.failures})
    with virtualtime.configure(seed=failing, perturb="ready"):
        under = explore(scenarios.ordering_bug, range(40))
        assert replay(scenarios.ordering_bug, passing) is None
        with pytest.raises(AssertionError, match="nothing to take"):
            replay(scenarios.ordering_bug, failing)
    assert under.failures == tuple(f for f in found.failures if f.seed < 40)
    assert under.perturb == "timers"


def test_the_decisions_are_read_from_the_runs_own_loop() -> None:
    # A helper's own virtual loop (here in a thread) closes before the run's loop does: the
    # failure still counts the run's seeded decisions, and so shrinking has something to do.
    async def nested() -> None:
        await asyncio.to_thread(virtualtime.run, asyncio.sleep(1))
        await scenarios.ordering_bug()

    found = explore(nested, range(20))
    plain = explore(scenarios.ordering_bug, range(20))
    assert found.failed == plain.failed > 0
    for failure, alone in zip(found.failures, plain.failures, strict=True):
        assert failure.seed == alone.seed
        # The run's own decisions: the scenario's, and (on some versions) one or two of the
        # thread hand-off's -- never the helper loop's none.
        assert failure.decisions >= alone.decisions > 0
    shrunk = found.failures[0].shrink()
    assert shrunk.keep is not None
    assert 0 < len(shrunk.keep) < found.failures[0].deviations


def test_a_scenario_defined_in_a_function_replays_from_python() -> None:
    async def local() -> None:
        await asyncio.sleep(1)
        raise ValueError("local")

    failure = explore(local, [4]).failures[0]
    assert target_of(local) is None
    assert failure.replay == (
        "virtualtime.net.replay(test_a_scenario_defined_in_a_function_replays_from_python"
        ".<locals>.local, seed=4)"
    )


def test_keyboard_interrupt_stops_the_exploration() -> None:
    runs: list[int] = []

    async def interrupted() -> None:
        runs.append(1)
        raise KeyboardInterrupt

    state = random.getstate()
    urandom, draw = os.urandom, random.random
    with pytest.raises(KeyboardInterrupt):
        explore(interrupted, range(5))
    assert runs == [1]
    # The run's entropy is put back on the way out.
    assert os.urandom is urandom
    assert random.random is draw
    assert random.getstate() == state


# ------------------------------------------------------------------ determinism and entropy


@pytest.mark.parametrize("name", ["leaky", "real_clock"])
def test_check_determinism_catches_a_run_that_is_not_a_function_of_its_seed(name: str) -> None:
    found = explore(getattr(scenarios, name), range(4), check_determinism=True)
    assert found.failed == 4
    first = found.failures[0]
    assert (first.kind, first.error) == ("nondeterministic", "NondeterministicRun")
    assert first.message.startswith(
        f"two runs of seed {first.seed} differ: timer 1 of the history differs: run 1: t="
    )
    assert first.replay.endswith("--check-determinism")
    assert first.shrink() is first


def test_check_determinism_passes_a_deterministic_program() -> None:
    for main in (scenarios.clean, scenarios.ordering_bug, scenarios.draws):
        found = explore(main, range(30), check_determinism=True, perturb="ready")
        assert all(f.kind == "error" for f in found.failures), found


def test_random_and_urandom_follow_the_seed_and_are_put_back() -> None:
    state = random.getstate()
    urandom = os.urandom
    first, again, other = (replay(scenarios.draws, seed) for seed in (3, 3, 4))
    assert first == again
    for drawn, different in zip(first, other, strict=True):
        assert drawn != different
    generator = random.Random(3)  # random.seed(3), as the run saw it
    assert first[0] == [generator.random() for _ in range(3)]
    assert random.getstate() == state
    assert os.urandom is urandom


def test_the_exploration_reports_the_entropy_reached() -> None:
    found = explore(scenarios.draws, range(5))
    assert found.entropy.reached() == (RANDOM, URANDOM)
    assert found.entropy.calls[RANDOM] == 5 * 4  # three random() and a randint() per run
    assert found.entropy.runs[RANDOM] == 5
    assert found.entropy.calls[URANDOM] >= 5 * 3  # os.urandom, uuid4, secrets
    assert found.entropy.hash_seed == hash_seed()
    assert "random: 20 calls in 5 runs" in str(found)


def test_seeded_entropy_counts_a_generator_reached_through_an_early_binding() -> None:
    draw = random.random  # bound before the block: uncounted, but still seeded
    with SeededEntropy(1) as entropy:
        value = draw()
    assert value == random.Random(1).random()
    assert entropy.calls[RANDOM] == 1
    with pytest.raises(InvalidValueError, match="size must be >= 0"), SeededEntropy(1):
        os.urandom(-1)


# ------------------------------------------------------------------ processes


def test_processes_find_the_same_failures_as_this_process(found: Exploration) -> None:
    environment = os.environ.get("PYTHONHASHSEED")
    in_workers = explore(scenarios.ordering_bug, range(40), processes=2)
    here = [f for f in found.failures if f.seed < 40]
    assert list(in_workers.failures) == here
    assert in_workers.processes == 2
    expected_hash = hash_seed() or "0"
    assert in_workers.entropy.hash_seed == expected_hash
    assert in_workers.failures[0].replay.startswith(f"PYTHONHASHSEED={expected_hash} python -m")
    assert "in 2 processes" in str(in_workers)
    assert os.environ.get("PYTHONHASHSEED") == environment  # set for the workers only


class _Executor:
    """A stand-in for ProcessPoolExecutor: runs each chunk at once, here; records shutdown."""

    made: ClassVar[list[_Executor]] = []

    def __init__(self, workers: int, mp_context: object = None) -> None:
        self.shutdowns: list[dict[str, bool]] = []
        self.interrupt = False
        _Executor.made.append(self)

    def submit(self, function: Any, *args: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        if self.interrupt:
            future.set_exception(KeyboardInterrupt())
        else:
            future.set_result(function(*args))
        return future

    def shutdown(self, *, wait: bool, cancel_futures: bool) -> None:
        self.shutdowns.append({"wait": wait, "cancel_futures": cancel_futures})


@pytest.fixture
def executor(monkeypatch: pytest.MonkeyPatch) -> type[_Executor]:
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", _Executor)
    _Executor.made = []
    return _Executor


def test_the_pool_is_shut_down_as_soon_as_the_runs_are_over(
    executor: type[_Executor], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Stopped by max_failures, the loop over the outcomes breaks; the pool is shut down then,
    # before the report is made -- not whenever the suspended generator is collected.
    import virtualtime.net._explore as explore_module

    seen: list[list[dict[str, bool]]] = []
    report = EntropyReport

    def reporting(*args: Any) -> Any:
        seen.append(list(executor.made[0].shutdowns))
        return report(*args)

    monkeypatch.setattr(explore_module, "EntropyReport", reporting)
    found = explore(scenarios.ordering_bug, range(40), processes=2, max_failures=1)
    assert found.stopped_early
    assert seen == [[{"wait": True, "cancel_futures": True}]]


def test_an_interrupt_stops_the_pool_without_waiting(
    executor: type[_Executor], monkeypatch: pytest.MonkeyPatch
) -> None:
    environment = os.environ.get("PYTHONHASHSEED")
    # Interrupted while waiting for a worker's chunk...
    original = _Executor.__init__

    def interrupting(self: _Executor, workers: int, mp_context: object = None) -> None:
        original(self, workers, mp_context)
        self.interrupt = True

    monkeypatch.setattr(_Executor, "__init__", interrupting)
    with pytest.raises(KeyboardInterrupt):
        explore(scenarios.ordering_bug, range(40), processes=2)
    assert executor.made[-1].shutdowns == [{"wait": False, "cancel_futures": True}]
    monkeypatch.setattr(_Executor, "__init__", original)
    # ... and between two outcomes, in explore's own loop.
    import virtualtime.net._explore as explore_module

    def interrupted(*args: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(explore_module, "add_counts", interrupted)
    with pytest.raises(KeyboardInterrupt):
        explore(scenarios.ordering_bug, range(40), processes=2)
    assert executor.made[-1].shutdowns == [{"wait": False, "cancel_futures": True}]
    assert os.environ.get("PYTHONHASHSEED") == environment


def test_a_pool_that_fails_to_start_puts_the_hash_seed_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError("no processes today")

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", broken)
    monkeypatch.setenv("PYTHONHASHSEED", "17")
    with pytest.raises(OSError, match="no processes today"), WorkerPool(2, "3"):
        pass
    assert os.environ["PYTHONHASHSEED"] == "17"
    monkeypatch.delenv("PYTHONHASHSEED")
    with pytest.raises(OSError, match="no processes today"), WorkerPool(2, "3"):
        pass
    assert "PYTHONHASHSEED" not in os.environ


def test_processes_need_an_importable_scenario() -> None:
    async def local() -> None:
        return None

    with pytest.raises(UsageError, match="needs a scenario a worker process can import"):
        explore(local, range(2), processes=2)


# ------------------------------------------------------------------ traces


def test_replay_writes_a_chrome_trace_even_when_the_run_fails(
    found: Exploration, tmp_path: Path
) -> None:
    seed = found.failures[0].seed
    path = tmp_path / "failure.json"
    with pytest.raises(AssertionError):
        replay(scenarios.ordering_bug, seed, trace=path)
    trace = json.loads(path.read_text())
    assert trace["otherData"]["seed"] == seed
    assert trace["otherData"]["outcome"].startswith("raised AssertionError: the consumer woke")
    assert trace["otherData"]["runs"][0]["label"] == f"seed {seed}"
    assert any(event.get("cat") == "sleep" for event in trace["traceEvents"])


def test_a_trace_that_cannot_be_written_never_hides_the_runs_exception(
    found: Exploration, tmp_path: Path
) -> None:
    blocked = tmp_path / "blocked.json"
    blocked.mkdir()  # a folder where the trace file should go: writing it fails
    with pytest.raises(AssertionError, match="nothing to take") as raised:
        replay(scenarios.ordering_bug, found.failures[0].seed, trace=blocked)
    notes = getattr(raised.value, "__notes__", [])
    assert len(notes) == 1
    assert notes[0].startswith("virtualtime: the replay's trace was not written: IsADirectoryError")
    # A run that returned has nothing to hide: the writing's error is the error.
    with pytest.raises(IsADirectoryError):
        replay(scenarios.clean, 0, trace=blocked)


def test_replay_draws_a_timeline(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "clean.png"
    assert replay(scenarios.clean, 1, trace=str(path)) == 10
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"seeds": []}, InvalidValueError, "seeds is empty"),
        ({"seeds": [1.5]}, InvalidTypeError, "each seed must be an int >= 0, got 1.5"),
        ({"seeds": [-1]}, InvalidValueError, "each seed must be an int >= 0, got -1"),
        ({"seeds": [True]}, InvalidTypeError, "each seed must be an int"),
        ({"seeds": "12"}, InvalidTypeError, "seeds must be an iterable of ints"),
        ({"seeds": 5}, InvalidTypeError, "seeds must be an iterable of ints"),
        ({"processes": 0}, InvalidValueError, "processes must be None or an int >= 1"),
        ({"processes": True}, InvalidTypeError, "processes must be None or an int >= 1"),
        ({"max_failures": 0}, InvalidValueError, "max_failures must be None or an int >= 1"),
        ({"check_determinism": 1}, InvalidTypeError, "check_determinism must be True or False"),
        ({"perturb": "tasks"}, InvalidValueError, "perturb must be 'timers'"),
        ({"seed": 3}, InvalidTypeError, r"use seeds=\[...\]"),
        ({"autojmp": False}, InvalidTypeError, "did you mean 'autojump'"),
        ({"start": -1}, InvalidValueError, "start must be >= 0"),
    ],
)
def test_bad_arguments_are_refused_before_anything_runs(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        explore(scenarios.ordering_bug, **kwargs)


def test_a_main_that_is_not_a_scenario_is_refused() -> None:
    coroutine = scenarios.ordering_bug()
    with pytest.raises(InvalidTypeError, match="main must be a function that returns a coro"):
        explore(coroutine, range(2))  # type: ignore[arg-type]
    coroutine.close()
    with pytest.raises(InvalidTypeError, match=r"main\(\) returned 3"):
        explore(lambda: 3, range(2))
    with pytest.raises(InvalidTypeError, match="main must be a function"):
        replay(42, 0)  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError, match="main must take no arguments"):
        explore(lambda x: x, range(2))  # type: ignore[misc,arg-type]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"seed": -2}, InvalidValueError, "seed must be an int >= 0"),
        ({"seed": "1"}, InvalidTypeError, "seed must be an int >= 0"),
        ({"seed": 1, "keep": "1,2"}, InvalidTypeError, "keep must be None"),
        ({"seed": 1, "keep": [1, -1]}, InvalidValueError, "each index in keep"),
        ({"seed": 1, "trace": "out.txt"}, InvalidValueError, "trace must end in .json"),
        ({"seed": 1, "trace": "/no/such/dir/x.json"}, InvalidValueError, "does not exist"),
        ({"seed": 1, "trace": 3}, InvalidTypeError, "trace must be None or a path"),
    ],
)
def test_bad_replay_arguments_are_refused(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        replay(scenarios.clean, **kwargs)


def test_exploring_inside_a_running_loop_is_refused() -> None:
    async def inside() -> None:
        explore(scenarios.clean, range(2))

    with pytest.raises(UsageError, match="cannot be called from a running event loop"):
        asyncio.run(inside())


def test_a_failure_compares_by_what_failed_not_by_its_traceback(found: Exploration) -> None:
    import dataclasses

    first = found.failures[0]
    assert dataclasses.replace(first, traceback="elsewhere") == first
    assert dataclasses.replace(first, message="other") != first
    assert "traceback" not in repr(first)
    assert repr(first).startswith(f"Failure(seed={first.seed}, perturb='timers', keep=None")
    assert str(first).splitlines()[1] == f"  replay: {first.replay}"


def test_targets_name_module_level_functions_and_load_them_back() -> None:
    assert target_of(scenarios.clean) == f"{TARGET}:clean"
    assert load_target(f"{TARGET}:clean").__name__ == "clean"
    assert target_of(json.dumps) == "json:dumps"
    assert load_target("json:dumps") is json.dumps
    assert target_of(lambda: None) is None
    with pytest.raises(InvalidValueError, match="a scenario is 'module:function'"):
        load_target("no colon")
    with pytest.raises(InvalidValueError, match="has no function 'nope'"):
        load_target("json:nope")
    with pytest.raises(InvalidValueError, match="does not exist"):
        load_target("tests/no_such_file.py:main")


def test_a_scenario_file_never_takes_the_place_of_a_real_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A file named like a module of the standard library that nobody imported yet.
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))  # loading adds the file's folder
    file = tmp_path / "colorsys.py"
    file.write_text("async def main():\n    return 'the scenario'\n")
    main = load_target(f"{file}:main")
    assert "colorsys" not in sys.modules
    assert main.__module__.startswith("_virtualtime_scenario_")
    assert target_of(main) == f"{file}:main"  # named by its file: the replay line works
    assert load_target(f"{file}:main") is main
    import colorsys

    assert colorsys.__file__ != str(file)
    assert callable(colorsys.rgb_to_hsv)


def test_the_script_being_run_is_not_run_again_to_load_its_scenario(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "ran"
    script = tmp_path / "script.py"
    script.write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('top level ran')\n"
        "async def main():\n    return 1\n"
    )
    running = types.ModuleType("__main__")  # the script as python runs it (no top level here)
    running.__file__ = str(script)

    async def main() -> int:
        return 1

    running.main = main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "__main__", running)
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert load_target(f"{script}:main") is main
    assert not marker.exists()
