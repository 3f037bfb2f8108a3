"""virtualtime.experiment on a real local Ray instance (``ray.init(num_cpus=2)``).

Ray publishes no wheel for Python 3.15 yet, so there this module is skipped (the `test`
extra installs ray only below 3.15).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from virtualtime import experiment

ray = pytest.importorskip(
    "ray", reason="ray is not installed (no Ray wheel for this Python version)"
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import experiment_models as models  # noqa: E402
from test_experiment import GRID, bits  # noqa: E402


@pytest.fixture(scope="module")
def ray_session() -> Iterator[Any]:
    began = time.perf_counter()
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        _node_ip_address="127.0.0.1",
    )
    try:
        yield time.perf_counter() - began
    finally:
        ray.shutdown()


def test_same_seed_same_table_on_ray_as_serial(ray_session: Any) -> None:
    serial = experiment.sweep(models.mm1, GRID, replications=6, seed=11)
    on_ray = experiment.sweep(models.mm1, GRID, replications=6, seed=11, executor="ray")
    assert on_ray.executor == "ray"
    assert bits(on_ray) == bits(serial)
    assert ray.is_initialized()  # an instance the adapter did not start is left running


def test_a_ray_worker_killed_mid_run_is_retried_without_doubling(
    ray_session: Any, tmp_path: Path
) -> None:
    marker = tmp_path / "killed"
    grid = {"marker": str(marker)}
    results = experiment.sweep(
        models.dies_once, grid, replications=8, seed=9, executor=experiment.Ray(), chunksize=2
    )
    assert marker.exists()
    assert results.failures == []
    assert [r["replication"] for r in results.records()] == list(range(8))
    assert bits(results) == bits(experiment.sweep(models.dies_once, grid, replications=8, seed=9))
