"""virtualtime.experiment on a real Dask cluster: a LocalCluster of 2 worker processes on
127.0.0.1, shared by this module's tests."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import virtualtime.cli
from virtualtime import experiment
from virtualtime.experiment import _executors

distributed = pytest.importorskip("distributed", reason="dask[distributed] is not installed")

sys.path.insert(0, str(Path(__file__).resolve().parent))
import experiment_models as models  # noqa: E402
from test_experiment import GRID, bits  # noqa: E402


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    began = time.perf_counter()
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",  # loopback, any free port (None means 8787)
            silence_logs=50,
        ) as cluster,
        distributed.Client(cluster) as dask_client,
    ):
        dask_client.started_in = time.perf_counter() - began
        yield dask_client


def test_same_seed_same_table_on_dask_as_serial(client: Any) -> None:
    serial = experiment.sweep(models.mm1, GRID, replications=6, seed=11)
    for chunksize in (1, 4):
        on_dask = experiment.sweep(
            models.mm1, GRID, replications=6, seed=11, executor=client, chunksize=chunksize
        )
        assert on_dask.executor == "dask"
        assert bits(on_dask) == bits(serial)


def test_a_dask_worker_killed_mid_run_costs_only_its_replications(
    client: Any, tmp_path: Path
) -> None:
    before = set(client.run(lambda: __import__("os").getpid()).values())
    marker = tmp_path / "killed"
    grid = {"marker": str(marker)}
    results = experiment.sweep(
        models.dies_once, grid, replications=16, seed=9, executor=client, chunksize=2
    )
    assert marker.exists()  # the first replication to run SIGKILLed its worker
    assert results.failures == []
    keys = [(r["scenario"], r["replication"]) for r in results.records()]
    assert keys == [(0, i) for i in range(16)]  # nothing lost, nothing twice
    reference = experiment.sweep(models.dies_once, grid, replications=16, seed=9)
    assert bits(results) == bits(reference)
    client.wait_for_workers(2, timeout=60)  # the nanny restarted it
    after = set(client.run(lambda: __import__("os").getpid()).values())
    assert len(before - after) == 1


def test_a_dask_address_string_opens_and_closes_its_own_client(client: Any) -> None:
    address = client.scheduler.address
    assert address.startswith("tcp://127.0.0.1:")
    spec = "dask://" + address.removeprefix("tcp://")
    results = experiment.replicate(models.noisy, {}, 4, seed=2, executor=spec)
    assert bits(results) == bits(experiment.replicate(models.noisy, {}, 4, seed=2))


@pytest.fixture
def dead_address() -> Iterator[str]:
    """An address where nothing listens: a port held (so no one else takes it), not served."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{held.getsockname()[1]}"


def test_a_dead_dask_address_is_one_line_within_a_bounded_time(
    dead_address: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(_executors, "DASK_CONNECT_TIMEOUT", 1.0)
    began = time.monotonic()
    status = virtualtime.cli.main(
        [
            "experiment",
            f"{Path(models.__file__)}:noisy",
            "-n",
            "2",
            "-q",
            "--executor",
            f"dask://{dead_address}",
        ]
    )
    took = time.monotonic() - began
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1, err
    assert err.startswith(
        f"virtualtime: experiment: executor: no Dask scheduler answered at "
        f"'tcp://{dead_address}' within 1 s"
    )
    assert took < 15  # was 30 s, then a traceback
