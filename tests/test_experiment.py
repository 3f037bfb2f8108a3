"""virtualtime.experiment: seeds, common random numbers, intervals, the sequential rule,
failures, Ctrl-C, files, the CLI -- in this process and on a real process pool.

The Dask and Ray engines have modules of their own (test_experiment_dask.py, _ray.py).
"""

from __future__ import annotations

import concurrent.futures
import csv
import json
import math
import multiprocessing
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats

import virtualtime.cli
from virtualtime import experiment

sys.path.insert(0, str(Path(__file__).resolve().parent))
import experiment_models as models

MODELS = Path(models.__file__).resolve()
GRID = {"rate": [0.5, 0.8], "customers": 30}


def bits(results: experiment.Results) -> list[dict[str, Any]]:
    """The table without its real-time column, floats as hex: equal means bit for bit."""
    return [
        {k: v.hex() if isinstance(v, float) else v for k, v in row.items() if k != "wall_seconds"}
        for row in results.records()
    ]


@pytest.fixture(scope="module")
def serial() -> experiment.Results:
    return experiment.sweep(models.mm1, GRID, replications=6, seed=11)


@pytest.fixture(scope="module")
def pool() -> Iterator[concurrent.futures.ProcessPoolExecutor]:
    spawn = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=spawn) as executor:
        yield executor


# --------------------------------------------------------------------------- seeds and tables


def test_the_table_has_one_row_per_replication_with_its_seed(serial: experiment.Results) -> None:
    rows = serial.records()
    assert len(rows) == 12
    assert [(r["scenario"], r["replication"]) for r in rows] == [
        (s, i) for s in range(2) for i in range(6)
    ]
    assert serial.columns == [
        "scenario",
        "rate",
        "customers",
        "replication",
        "seed",
        "stream",
        "wait",
        "longest",
        "end_time",
        "wall_seconds",
    ]
    assert {r["seed"] for r in rows} == {11}
    assert all(r["end_time"] > 0 and r["wall_seconds"] > 0 for r in rows)
    frame = serial.table()
    assert list(frame.columns) == serial.columns
    assert frame["wait"].tolist() == [r["wait"] for r in rows]


def test_a_row_is_reproduced_alone_from_its_seed_and_stream(serial: experiment.Results) -> None:
    row = serial.records()[9]
    again = experiment.run_one(
        models.mm1, serial.scenarios[row["scenario"]], seed=row["seed"], stream=row["stream"]
    )
    assert again == {"wait": row["wait"], "longest": row["longest"]}


def test_streams_are_seed_sequence_children() -> None:
    mine = experiment.make_rng(5, (3,)).random(4)
    spawned = np.random.Generator(np.random.PCG64(np.random.SeedSequence(5).spawn(4)[3]))
    assert mine.tolist() == spawned.random(4).tolist()


def test_common_random_numbers_give_every_scenario_the_same_streams() -> None:
    grid = {"mean": [0.0, 10.0]}
    crn = experiment.sweep(models.noisy, grid, replications=5, seed=3)
    a, b = crn.values("x", 0), crn.values("x", 1)
    assert [y - x for x, y in zip(a, b, strict=True)] == pytest.approx([10.0] * 5)
    (diff,) = crn.differences()
    assert diff.mean == pytest.approx(10.0)
    assert diff.std < 1e-9
    independent = experiment.sweep(models.noisy, grid, replications=5, seed=3, crn=False)
    c, d = independent.values("x", 0), independent.values("x", 1)
    assert c != a  # scenario 0's streams are (0, i), not the CRN ones (i,) ...
    assert [y - 10.0 for y in d] != pytest.approx(c)  # ... and scenario 1 has its own
    assert independent.records()[5]["stream"] == "1.0"


def test_a_different_seed_gives_a_different_table(serial: experiment.Results) -> None:
    other = experiment.sweep(models.mm1, GRID, replications=6, seed=12)
    assert bits(other) != bits(serial)


def test_same_seed_same_table_on_a_process_pool_whatever_the_chunks(
    serial: experiment.Results, pool: concurrent.futures.ProcessPoolExecutor
) -> None:
    for chunksize in (1, 5):
        on_pool = experiment.sweep(
            models.mm1, GRID, replications=6, seed=11, executor=pool, chunksize=chunksize
        )
        assert on_pool.executor == "futures"
        assert bits(on_pool) == bits(serial)
    threads = concurrent.futures.ThreadPoolExecutor(3)
    with threads:
        assert bits(
            experiment.sweep(models.mm1, GRID, replications=6, seed=11, executor=threads)
        ) == bits(serial)


def test_an_owned_pool_survives_a_killed_worker_without_doubling(tmp_path: Path) -> None:
    marker = tmp_path / "killed"
    results = experiment.sweep(
        models.dies_once,
        {"marker": str(marker)},
        replications=8,
        seed=4,
        executor="processes:2",
        chunksize=2,
    )
    assert marker.exists()  # a worker really died
    assert results.failures == []
    assert [r["replication"] for r in results.records()] == list(range(8))
    again = experiment.sweep(models.dies_once, {"marker": str(marker)}, replications=8, seed=4)
    assert bits(results) == bits(again)


# --------------------------------------------------------------------------- statistics


def test_summary_is_the_t_interval(serial: experiment.Results) -> None:
    waits = np.array(serial.values("wait", 1))
    (s,) = [x for x in serial.summary() if x.scenario == 1 and x.output == "wait"]
    assert s.n == 6
    assert s.params == {"rate": 0.8, "customers": 30}
    assert s.mean == pytest.approx(waits.mean())
    assert s.std == pytest.approx(waits.std(ddof=1))
    half = stats.t.ppf(0.975, 5) * waits.std(ddof=1) / math.sqrt(6)
    assert s.half_width == pytest.approx(half)
    assert s.low < s.mean < s.high
    (wide,) = [x for x in serial.summary(0.99) if x.scenario == 1 and x.output == "wait"]
    assert wide.half_width > s.half_width


def test_paired_differences_pair_by_replication(serial: experiment.Results) -> None:
    diffs = serial.differences(baseline={"rate": 0.5, "customers": 30})
    assert [(d.scenario, d.baseline, d.output) for d in diffs] == [
        (1, 0, "wait"),
        (1, 0, "longest"),
    ]
    paired = np.array(serial.values("wait", 1)) - np.array(serial.values("wait", 0))
    assert diffs[0].mean == pytest.approx(paired.mean())
    assert diffs[0].half_width == pytest.approx(
        stats.t.ppf(0.975, 5) * paired.std(ddof=1) / math.sqrt(6)
    )
    with pytest.raises(ValueError, match="no scenario has the parameters"):
        serial.differences(baseline={"rate": 0.3})
    with pytest.raises(ValueError, match="not a scenario index"):
        serial.differences(baseline=7)


def test_intervals_cover_the_analytic_mm1_mean_about_95_percent_of_the_time() -> None:
    # 200 independent experiments (crn=False: every scenario has streams of its own) of 50
    # replications each; each replication is one arrival's time in a stationary M/M/1
    # system, whose mean is exactly 1 / (mu - lambda) = 2.
    results = experiment.sweep(
        models.mm1_sojourn,
        [{"rate": 0.5, "service": 1.0}] * 200,
        replications=50,
        seed=1,
        crn=False,
    )
    covered = sum(s.contains(2.0) for s in results.summary())
    assert 180 <= covered <= 198  # binomial(200, 0.95): mean 190, sd 3.1


# --------------------------------------------------------------------------- sequential rule


def test_the_sequential_rule_stops_once_the_half_width_is_reached() -> None:
    results = experiment.replicate(
        models.noisy, {"sd": 1.0}, 10, seed=8, half_width=0.2, max_n=2000
    )
    assert results.target_met == [True]
    (s,) = results.summary()
    assert s.half_width <= 0.2
    # Normal data, sd 1: about (1.96 / 0.2)^2 = 96 replications are needed, not thousands.
    assert 60 <= results.attempted[0] == s.n <= 200
    # The first batch alone did not meet the target: more replications were truly needed.
    assert experiment.interval(results.values("x")[:10], 0.95)[2] > 0.2


def test_the_sequential_rule_stops_at_max_n_and_says_so() -> None:
    results = experiment.replicate(models.noisy, {"sd": 1.0}, 10, seed=8, half_width=0.01, max_n=40)
    assert results.target_met == [False]
    assert results.attempted == [40]
    assert len(results.rows) == 40


def test_the_sequential_rule_relative_and_per_output_in_a_sweep() -> None:
    results = experiment.sweep(
        models.mm1,
        {"rate": [0.3, 0.6], "customers": 20},
        replications=5,
        seed=2,
        half_width=0.25,
        relative=True,
        outputs=["wait"],
        max_n=400,
    )
    assert results.target_met == [True, True]
    for s in results.summary():
        if s.output == "wait":
            assert s.half_width <= 0.25 * abs(s.mean)
    with pytest.raises(ValueError, match="no output 'nope'"):
        experiment.replicate(models.noisy, {}, 5, seed=1, half_width=0.1, outputs=["nope"])


# --------------------------------------------------------------------------- failures, Ctrl-C


def test_a_raising_replication_is_recorded_and_rerunnable_and_the_rest_go_on() -> None:
    results = experiment.replicate(models.fails_on, {"below": 0.3}, 20, seed=5)
    assert results.failures, "some draws are below 0.3"
    assert len(results.failures) + len(results.rows) == 20
    failure = results.failures[0]
    assert (failure.scenario, failure.params, failure.seed) == (0, {"below": 0.3}, 5)
    assert "RuntimeError: unlucky draw" in failure.error
    assert "fails_on" in failure.traceback
    assert "Traceback" in failure.traceback
    with pytest.raises(RuntimeError, match="unlucky draw"):
        failure.rerun(models.fails_on)
    with pytest.raises(RuntimeError, match="unlucky draw"):
        experiment.run_one(f"{MODELS}:fails_on", failure.params, seed=5, stream=failure.stream)
    assert all(row["u"] >= 0.3 for row in results.records())


def test_ctrl_c_returns_what_finished() -> None:
    def interrupt(state: experiment.Progress) -> None:
        if state.done == 4:
            raise KeyboardInterrupt

    results = experiment.replicate(models.noisy, {}, 50, seed=1, progress=interrupt)
    assert results.interrupted
    assert [r["replication"] for r in results.records()] == [0, 1, 2, 3]


def test_ctrl_c_on_a_pool_cancels_the_rest(pool: concurrent.futures.ProcessPoolExecutor) -> None:
    seen: list[int] = []

    def interrupt(state: experiment.Progress) -> None:
        seen.append(state.done)
        if state.done == 3:
            raise KeyboardInterrupt

    results = experiment.replicate(
        models.noisy, {}, 200, seed=1, executor=pool, chunksize=1, progress=interrupt
    )
    assert results.interrupted
    assert len(results.rows) == 3
    assert seen == [1, 2, 3]
    # The pool is still usable afterwards.
    assert len(experiment.replicate(models.noisy, {}, 3, seed=1, executor=pool).rows) == 3


def test_progress_reports_done_total_and_half_widths() -> None:
    states: list[experiment.Progress] = []
    experiment.sweep(models.noisy, {"mean": [0, 1]}, replications=3, seed=1, progress=states.append)
    assert [s.done for s in states] == [1, 2, 3, 4, 5, 6]
    assert {s.total for s in states} == {6}
    assert math.isnan(states[0].half_widths[0, "x"])
    assert states[-1].half_widths[1, "x"] > 0


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"replications": 0}, "replications must be a positive integer, got 0"),
        ({"seed": -1}, "seed must be a non-negative integer or None, got -1"),
        ({"confidence": 1.5}, r"confidence must be in \(0, 1\), got 1.5"),
        ({"half_width": -1.0}, "half_width must be a positive number, got -1.0"),
        ({"half_width": 0.1, "max_n": 3}, r"max_n \(3\) must be at least the first batch"),
        ({"executor": "cluster"}, "executor must be 'serial'"),
        ({"baseline": 5}, "baseline 5 is not a scenario index"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        experiment.sweep(models.noisy, {"mean": [0, 1]}, **kwargs)


def test_bad_grids_and_models_are_named() -> None:
    with pytest.raises(ValueError, match="parameter 'mean' has no values"):
        experiment.sweep(models.noisy, {"mean": []})
    with pytest.raises(ValueError, match="every scenario must name the same parameters"):
        experiment.sweep(models.noisy, [{"mean": 0}, {"sd": 1}])
    with pytest.raises(ValueError, match="'replication' is a column"):
        experiment.sweep(models.noisy, {"replication": [1]})
    with pytest.raises(TypeError, match="model must be a function"):
        experiment.sweep(42, {"mean": [0]})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"'file\.py:function'"):
        experiment.sweep("no-colon", {"mean": [0]})
    assert experiment.scenarios_of({"a": [1, 2], "b": "xy"}) == [
        {"a": 1, "b": "xy"},
        {"a": 2, "b": "xy"},
    ]


def test_a_model_returning_no_numbers_is_a_recorded_failure() -> None:
    results = experiment.replicate(lambda params, rng: {"x": "text"}, {}, 2, seed=1)
    assert len(results.failures) == 2
    assert "output 'x' must be a number, got 'text'" in results.failures[0].error


# --------------------------------------------------------------------------- files and CLI


def test_csv_and_parquet_round_trip_exactly(serial: experiment.Results, tmp_path: Path) -> None:
    import pandas

    serial.write(tmp_path / "r.csv")
    with (tmp_path / "r.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [float(r["wait"]) for r in rows] == serial.values("wait", 0) + serial.values("wait", 1)
    serial.write(tmp_path / "r.parquet")
    frame = pandas.read_parquet(tmp_path / "r.parquet")
    assert frame.equals(serial.to_pandas())
    with pytest.raises(ValueError, match=r"\.parquet or \.csv"):
        serial.write(tmp_path / "r.xlsx")


def test_the_cli_runs_a_sweep_writes_files_and_prints_a_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, png = tmp_path / "r.parquet", tmp_path / "r.png"
    argv = ["experiment", f"{MODELS}:mm1", "--replications", "4", "--param", "rate=0.5,0.8"]
    argv += ["--param", "customers=20", "--seed", "11", "--out", str(out), "--plot", str(png)]
    assert virtualtime.cli.main(argv) == 0
    printed = capsys.readouterr()
    assert "rate=0.8" in printed.out
    assert "± half-width" in printed.out
    assert "8 replication(s), seed 11" in printed.out
    assert f"wrote {out}" in printed.err
    import pandas

    frame = pandas.read_parquet(out)
    api = experiment.sweep(
        models.mm1, {"rate": [0.5, 0.8], "customers": 20}, replications=4, seed=11
    )
    assert frame["wait"].tolist() == api.to_pandas()["wait"].tolist()
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 10_000


def test_the_cli_reports_failures_with_how_to_rerun_and_exits_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["experiment", f"{MODELS}:fails_on", "-n", "12", "-p", "below=0.3", "--seed", "5"]
    assert virtualtime.cli.main(argv) == 1
    err = capsys.readouterr().err
    assert "replication(s) raised" in err
    assert "run_one(" in err
    assert "seed=5" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["nope.py:model"], "cannot load nope.py:model"),
        ([f"{MODELS}:missing"], "has no model named 'missing'"),
        ([f"{MODELS}:mm1", "--param", "rate"], "a parameter is NAME=VALUE"),
        ([f"{MODELS}:mm1", "--replications", "0"], "expected a positive integer, got '0'"),
        ([f"{MODELS}:mm1", "--out", "r.xlsx"], "--out must end in .parquet or .csv"),
        ([f"{MODELS}:mm1", "-p", "a=1", "-p", "a=2"], "--param a is given more than once"),
    ],
)
def test_the_cli_rejects_bad_input(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert virtualtime.cli.main(["experiment", *argv]) == 2
    assert message in capsys.readouterr().err


# --------------------------------------------------------------------------- imports


def _fresh(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


def test_importing_never_loads_dask_or_ray() -> None:
    code = (
        "import json, sys, virtualtime, virtualtime.cli\n"
        "from virtualtime.experiment import sweep, Dask, Ray, Results\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    result = _fresh(code)
    assert result.returncode == 0, result.stderr
    loaded = set(json.loads(result.stdout))
    assert "virtualtime.experiment._run" in loaded
    assert not {m for m in loaded if m.split(".")[0] in ("dask", "distributed", "ray")}
    # ... and `virtualtime` itself does not even load numpy.
    plain = _fresh(
        "import json, sys, virtualtime, virtualtime.experiment\nprint('numpy' in sys.modules)"
    )
    assert plain.stdout.strip() == "False", plain.stderr


def test_without_numpy_the_error_names_the_extra() -> None:
    code = (
        "import sys\nsys.modules['numpy'] = None\n"
        "import virtualtime.experiment\n"
        "try:\n    virtualtime.experiment.sweep\n"
        "except ImportError as e:\n    print(e)\n"
    )
    result = _fresh(code)
    assert "needs numpy and scipy (numpy is missing)" in result.stdout, result.stderr
    assert "async-virtualtime[experiment]" in result.stdout
