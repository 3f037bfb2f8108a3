"""``virtualtime explore`` and ``virtualtime run --seed/--perturb`` from the command line.

The scenarios are those of ``test_explore.py`` (``explore_scenarios.py``), named by file.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import explore_scenarios as scenarios
import pytest

from virtualtime.cli import main
from virtualtime.net._entropy import hash_seed
from virtualtime.net._explore import explore

SCENARIOS = "tests/explore_scenarios.py"


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture(scope="module")
def failing_seed() -> int:
    return explore(scenarios.ordering_bug, range(20)).failures[0].seed


def test_explore_lists_the_failing_seeds_and_exits_1(
    capsys: pytest.CaptureFixture[str], failing_seed: int
) -> None:
    status, out, err = run(capsys, "explore", f"{SCENARIOS}:ordering_bug", "--seeds", "20")
    assert status == 1
    lines = out.splitlines()
    assert lines[0].startswith(
        f"explored {SCENARIOS}:ordering_bug under 20 seeds (perturb=timers) in "
    )
    assert lines[1].startswith("entropy: random: not reached; os.urandom: not reached")
    assert lines[2].startswith(f"seed {failing_seed}: AssertionError: the consumer woke")
    prefix = f"PYTHONHASHSEED={hash_seed()} " if hash_seed() else ""
    assert lines[3] == (
        f"  replay: {prefix}python -m virtualtime explore {SCENARIOS}:ordering_bug "
        f"--seed {failing_seed}"
    )
    # The first failure's traceback, the scenario's own frame in it.
    assert err.startswith(f"first failure, seed {failing_seed}:\nTraceback")
    assert 'explore_scenarios.py", line' in err


def test_explore_of_a_clean_scenario_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "explore", f"{SCENARIOS}:clean", "--seeds", "30", "-q")
    assert status == 0
    assert ": 0 failed, 30 passed" in out.splitlines()[0]
    assert err == ""


def test_the_replay_line_replays_the_seed_with_its_traceback(
    capsys: pytest.CaptureFixture[str], failing_seed: int
) -> None:
    status, out, err = run(
        capsys, "explore", f"{SCENARIOS}:ordering_bug", "--seed", str(failing_seed)
    )
    assert status == 1
    assert out == (
        f"{SCENARIOS}:ordering_bug: seed {failing_seed} (perturb=timers) failed: "
        "AssertionError: the consumer woke before the producer: nothing to take\n"
    )
    assert err.startswith("Traceback (most recent call last):\n")
    assert "virtualtime/" not in err  # the scenario's frames only, as python shows them
    assert err.endswith("AssertionError: the consumer woke before the producer: nothing to take\n")
    # With no deviation kept the run is the unseeded one, which passes.
    replay = ["explore", f"{SCENARIOS}:ordering_bug", "--seed", str(failing_seed)]
    status, out, _ = run(capsys, *replay, "--keep", "none")
    assert status == 0
    assert out == (
        f"{SCENARIOS}:ordering_bug: seed {failing_seed} (perturb=timers, keeping deviations "
        "none) passed (returned None)\n"
    )


def test_a_pasted_replay_line_runs_in_a_shell(failing_seed: int) -> None:
    line = explore(scenarios.ordering_bug, [failing_seed]).failures[0].replay
    words = line.split()
    if words[0].startswith("PYTHONHASHSEED="):
        words = words[1:]
    assert words[:4] == ["python", "-m", "virtualtime", "explore"]
    done = subprocess.run(
        [sys.executable, *words[1:]], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1, done.stderr
    assert "seed" in done.stdout
    assert "AssertionError: the consumer woke" in done.stdout


def test_shrink_and_trace_the_first_failure(
    capsys: pytest.CaptureFixture[str], failing_seed: int, tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    picture = tmp_path / "failure.png"
    status, out, err = run(
        capsys,
        "explore",
        f"{SCENARIOS}:ordering_bug",
        "--seeds",
        "20",
        "--shrink",
        "--trace",
        picture,
        "-q",
    )
    assert status == 1
    first = out.splitlines()[0]
    assert first.startswith(f"shrunk seed {failing_seed}: ")
    assert first.endswith(" seeded decisions")
    assert " it needs " in first
    assert f"--seed {failing_seed} --keep " in out
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert err == f"virtualtime: trace written to {picture}\n"


def test_a_trace_that_cannot_be_written_is_told_not_claimed(
    capsys: pytest.CaptureFixture[str], failing_seed: int, tmp_path: Path
) -> None:
    blocked = tmp_path / "blocked.json"
    blocked.mkdir()  # a folder where the trace file should go
    replay = ["explore", f"{SCENARIOS}:ordering_bug", "--seed", str(failing_seed), "-q"]
    status, out, err = run(capsys, *replay, "--trace", blocked)
    assert status == 1  # the seed failed, as it did: that is the news
    assert "failed: AssertionError: the consumer woke" in out
    assert "trace written" not in err
    assert err.startswith(
        f"virtualtime: error: explore: the trace was not written to {blocked}: IsADirectoryError"
    )
    assert err.count("\n") == 1
    status, out, err = run(capsys, *replay, "--keep", "none", "--trace", blocked)
    assert status == 2  # the run passed; the trace asked for is missing
    assert "passed (returned None)" in out
    assert "trace written" not in err
    assert "the trace was not written" in err
    status, _, err = run(capsys, "explore", f"{SCENARIOS}:ordering_bug", "--seeds", "20",
                         "-q", "--trace", blocked)  # fmt: skip
    assert status == 1
    assert "trace written" not in err
    assert "the trace was not written" in err


def test_a_traced_rerun_that_passes_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    trace = tmp_path / "leaky.json"
    status, _, err = run(capsys, "explore", f"{SCENARIOS}:leaky", "--seeds", "1",
                         "--check-determinism", "-q", "--trace", trace)  # fmt: skip
    assert status == 1
    assert err == (
        "virtualtime: seed 0 passed when run again for the trace (two runs of it differ: this "
        "one passed): the trace shows that passing run\n"
        f"virtualtime: trace written to {trace}\n"
    )
    assert trace.is_file()


def test_check_determinism_from_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(
        capsys, "explore", f"{SCENARIOS}:leaky", "--seeds", "2", "--check-determinism", "-q"
    )
    assert status == 1
    assert "seed 0: NondeterministicRun: two runs of seed 0 differ: timer 1" in out
    assert f"explore {SCENARIOS}:leaky --seed 0 --check-determinism" in out


def test_processes_and_max_failures(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(
        capsys,
        "explore",
        f"{SCENARIOS}:ordering_bug",
        "--seeds",
        "20",
        "--processes",
        "2",
        "--max-failures",
        "1",
        "-q",
    )
    assert status == 1
    assert "in 2 processes" in out
    assert "1 failed" in out
    assert "(stopped at max_failures)" in out
    assert out.count("  replay: PYTHONHASHSEED=") == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seeds", "3", "--keep", "1"], "--keep replays one run: give --seed S too"),
        (["--seed", "1", "--keep", "1", "--check-determinism"], "does not combine"),
        (["--seeds", "0"], "expected an integer >= 1"),
        (["--seed", "-1"], "expected an integer >= 0"),
        (["--seed", "1", "--keep", "a,b"], "expected decision indices"),
        (["--seed", "1", "--seeds", "2"], "not allowed with argument"),
        (["--seed", "1", "--trace", "out.txt"], "trace must end in .json"),
        (["--perturb", "tasks"], "invalid choice: 'tasks'"),
        (["--seed", "1", "--shrink"], "--seed S replays one seed; --shrink is for exploring"),
        (
            ["--seed", "1", "--processes", "2", "--max-failures", "1"],
            "--processes, --max-failures are for exploring many (--seeds N)",
        ),
    ],
)
def test_bad_command_lines_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    status, _, err = run(capsys, "explore", f"{SCENARIOS}:clean", *argv)
    assert status == 2
    assert message in err


@pytest.mark.parametrize(
    ("scenario", "message"),
    [
        ("no_such_module_here:main", "No module named 'no_such_module_here'"),
        (f"{SCENARIOS}:nope", "has no function 'nope'"),
        ("tests/missing.py:main", "does not exist"),
        ("main", "a scenario is 'module:function'"),
        ("json:dumps", "main must take no arguments"),
        ("json:JSONDecoder", "main() returned"),
    ],
)
def test_a_scenario_that_cannot_be_run_exits_2(
    capsys: pytest.CaptureFixture[str], scenario: str, message: str
) -> None:
    status, _, err = run(capsys, "explore", scenario, "--seed", "0")
    assert status == 2
    assert err.startswith("virtualtime: error: explore: ")
    assert message in err


# ------------------------------------------------------------------ virtualtime run --seed


def _script(tmp_path: Path) -> Path:
    script = tmp_path / "order.py"
    script.write_text(
        textwrap.dedent(
            """
            import asyncio

            async def main():
                loop = asyncio.get_running_loop()
                order = []

                async def one(n):
                    await asyncio.sleep(1)
                    order.append(n)

                await asyncio.gather(*(one(n) for n in range(8)))
                print(loop.seed, loop.perturb, order)

            asyncio.run(main())
            """
        )
    )
    return script


def test_run_seed_seeds_the_loop(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    script = _script(tmp_path)
    status, fifo, _ = run(capsys, "run", "-q", script)
    assert status == 0
    assert fifo == "None timers [0, 1, 2, 3, 4, 5, 6, 7]\n"
    outs = [run(capsys, "run", "-q", "--seed", "7", script)[1] for _ in range(2)]
    assert outs[0] == outs[1] != fifo.replace("None", "7")
    assert outs[0].startswith("7 timers [")
    status, ready, _ = run(capsys, "run", "-q", "--seed", "7", "--perturb", "ready", script)
    assert status == 0
    assert ready.startswith("7 ready [")


def test_run_perturb_needs_a_seed(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, _, err = run(capsys, "run", "--perturb", "ready", _script(tmp_path))
    assert status == 2
    assert "--perturb says what the seed reorders: give --seed N too" in err
