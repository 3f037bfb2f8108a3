"""Experiments at the edges: astronomical counts, tiny targets, bad plot files, dead clusters.

Replications are handed out as the executor takes them (never a list of all of them), a
target no run can meet stops at ``max_n``, a plot the command cannot write is refused before
anything runs, a Dask address nobody answers at is one line within a bounded time, and a
model may use the simulation kit without opening a ``Simulation`` itself.
"""

from __future__ import annotations

import concurrent.futures
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import experiment_models as models
import numpy as np
import pytest

import virtualtime.cli
from virtualtime import InvalidValueError, experiment
from virtualtime.experiment import _executors

MODELS = Path(models.__file__)


def stop_after(done: int) -> Callable[[experiment.Progress], None]:
    def progress(state: experiment.Progress) -> None:
        if state.done >= done:
            raise KeyboardInterrupt

    return progress


def constant(params: Any, rng: np.random.Generator) -> dict[str, float]:
    return {"x": 1.0}


def test_replications_are_handed_out_as_they_run_not_listed_up_front() -> None:
    # Was: every Task record built before the first ran (10**30 never started, memory grew).
    results = experiment.replicate(constant, {}, 10**6, seed=1, progress=stop_after(5))
    assert results.interrupted
    assert len(results.rows) == 5
    assert results.attempted == [5]
    results = experiment.replicate(constant, {}, 10**30, seed=1, progress=stop_after(3))
    assert results.attempted == [3]
    assert [row["replication"] for row in results.rows] == [0, 1, 2]


class CountingPool(concurrent.futures.ThreadPoolExecutor):
    """A thread pool that remembers the most futures it ever had outstanding."""

    def __init__(self) -> None:
        super().__init__(2)
        self.outstanding = 0
        self.most = 0
        self.lock = threading.Lock()

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        future = super().submit(fn, *args, **kwargs)
        with self.lock:
            self.outstanding += 1
            self.most = max(self.most, self.outstanding)
        future.add_done_callback(self._done)
        return future

    def _done(self, _future: concurrent.futures.Future[Any]) -> None:
        with self.lock:
            self.outstanding -= 1


def test_an_executor_gets_a_few_chunks_per_worker_at_a_time() -> None:
    with CountingPool() as pool:
        results = experiment.replicate(
            models.noisy, {}, 200, seed=3, executor=experiment.Futures(pool), chunksize=1
        )
    assert len(results.rows) == 200
    assert pool.most <= 2 * _executors.IN_FLIGHT  # was 200: every chunk submitted at once
    serial = experiment.replicate(models.noisy, {}, 200, seed=3)
    assert results.values("x") == serial.values("x")


def test_a_half_width_no_run_can_meet_stops_at_max_n() -> None:
    # Was: OverflowError from n * (width / 1e-300) ** 2.
    results = experiment.replicate(models.noisy, {}, 2, seed=1, half_width=1e-300, max_n=12)
    assert results.target_met == [False]
    assert results.attempted == [12]
    assert len(results.rows) == 12


def test_the_cli_refuses_a_plot_it_cannot_write_before_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = tmp_path / "runs.csv"
    argv = [f"{MODELS}:noisy", "-n", "3", "--seed", "1", "-q", "--out", str(table)]
    status = virtualtime.cli.main(["experiment", *argv, "--plot", str(tmp_path / "x.json")])
    err = capsys.readouterr().err
    assert status == 2
    assert "--plot must end in .png, .svg, .pdf, got" in err
    assert "Traceback" not in err
    assert not table.exists(), "nothing ran"


def test_results_refuse_a_plot_path_they_cannot_write(tmp_path: Path) -> None:
    results = experiment.replicate(models.noisy, {}, 3, seed=1)
    with pytest.raises(InvalidValueError, match=r"path: a plot is written to \.png"):
        results.plot(tmp_path / "x.json")
    with pytest.raises(InvalidValueError, match="reference"):
        results.plot(tmp_path / "x.png", reference={"x": [1.0, 2.0]})
    assert list(tmp_path.iterdir()) == []


def test_the_dask_executor_without_dask_is_one_line_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # As on an install without the dask extra (the lean test extra has none): one line, the
    # extra to install, status 2.  (A dead scheduler address: test_experiment_dask.py.)
    monkeypatch.setitem(sys.modules, "distributed", None)
    status = virtualtime.cli.main(
        ["experiment", f"{MODELS}:noisy", "-n", "2", "-q", "--executor", "dask://127.0.0.1:9"]
    )
    err = capsys.readouterr().err
    assert status == 2
    assert err == (
        "virtualtime: experiment: the Dask executor needs dask.distributed: "
        "pip install 'async-virtualtime[dask]'\n"
    )


def test_a_model_may_use_the_simulation_kit_without_opening_a_simulation() -> None:
    # Was: every replication failed ("needs a running simulation") with "never awaited" noise.
    results = experiment.replicate(models.kit_queue, {}, 4, seed=2)
    assert results.failures == []
    assert len(results.rows) == 4
    again = experiment.replicate(models.kit_queue, {}, 4, seed=2)
    assert results.values("wait") == again.values("wait")
    assert all(row["end"] == row["end_time"] for row in results.records())
