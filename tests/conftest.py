"""Shared test helpers."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Protocol, TypeVar

import pytest

import virtualtime

T = TypeVar("T")


#: The experiment engines' tests: a real Dask cluster and a real Ray instance.  They need the
#: `engines` extra (hundreds of megabytes; Ray starts a cluster of its own), so the default
#: run leaves them out and says so in its header; ``pytest --engines`` collects them, as
#: .ci/run does in a venv with that extra.
ENGINE_MODULES = frozenset({"test_experiment_dask.py", "test_experiment_ray.py"})


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--engines",
        action="store_true",
        help="also run the Dask and Ray engine tests (pip install -e '.[engines]' first)",
    )


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path.name in ENGINE_MODULES and not config.getoption("--engines"):
        return True
    return None


def pytest_report_header(config: pytest.Config) -> str:
    if config.getoption("--engines"):
        return "virtualtime: the Dask and Ray engine tests are collected (--engines)"
    return "virtualtime: the Dask and Ray engine tests are left out (run them with --engines)"


def pytest_configure(config: pytest.Config) -> None:
    # A suite started with SIGINT ignored (`cmd &` in a non-interactive shell, nohup) hands
    # that to every child it starts, and no Ctrl-C can reach one; the Ctrl-C tests need the
    # disposition a terminal gives.  Python's own handler here means each child starts with
    # the default, as it would from a terminal.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


class Runner(Protocol):
    """Runs an async function in virtual time on one anyio backend; returns its result."""

    def __call__(self, main: Callable[[], Awaitable[T]], /) -> T: ...


@pytest.fixture(params=["asyncio", "trio"])
def run(request: pytest.FixtureRequest) -> Runner:
    """Run an async main with anyio in virtual time, once per backend (asyncio and trio)."""
    backend: str = request.param

    def runner(main: Callable[[], Awaitable[T]], /) -> T:
        return virtualtime.anyio_run(main, backend=backend)

    return runner


@pytest.fixture
def loop() -> Iterator[virtualtime.VirtualEventLoop]:
    """A fresh autojump virtual loop, closed after the test."""
    vloop = virtualtime.new_event_loop()
    try:
        yield vloop
    finally:
        vloop.close()


@pytest.fixture
def manual_loop() -> Iterator[virtualtime.VirtualEventLoop]:
    """A fresh manual-mode virtual loop (time moves only when driven), closed afterwards."""
    vloop = virtualtime.new_event_loop(autojump=False)
    try:
        yield vloop
    finally:
        for task in asyncio.all_tasks(vloop):
            task.cancel()
        if not vloop.is_closed():
            vloop.run_until_complete(asyncio.sleep(0))
        vloop.close()
