"""Executor adapters: how chunks of replications reach workers and their outcomes come back.

One small interface, :class:`Backend`, with four implementations: :class:`Serial` (in this
process), :class:`Futures` (any :class:`concurrent.futures.Executor`, a process pool
included), :class:`Dask` (a ``distributed.Client``) and :class:`Ray`.  Dask and Ray are
imported only when one of their adapters is made.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import sys
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any

from .._shared._errors import InvalidTypeError, InvalidValueError
from ._model import Outcome, Task

__all__ = ["Backend", "Dask", "Futures", "Ray", "Serial", "backend_for"]

Chunk = Sequence[Task]
RunChunk = Callable[[Chunk], list[Outcome]]


def _lost(chunk: Chunk, why: str, text: str) -> list[Outcome]:
    """Outcomes for a chunk the executor lost for good: recorded as failures, not dropped."""
    return [Outcome(t.scenario, t.replication, None, float("nan"), 0.0, why, text) for t in chunk]


class Backend(ABC):
    """Runs chunks of replications somewhere and yields their outcomes as they finish.

    Implement :meth:`run` to plug in another engine.  It must call ``fn(chunk)`` once per
    chunk (on a worker, where ``fn`` and the chunk arrive pickled) and yield each returned
    outcome; when the generator is closed early (Ctrl-C, a sequential stop) it must cancel
    what has not started.  Chunks may finish in any order and may be re-run after a worker
    dies; the experiment keeps one outcome per replication, so re-runs are never counted
    twice.  :meth:`close` releases what the backend itself started (a pool, a client).
    """

    name: str = "backend"

    @property
    def workers(self) -> int:
        """How many replications can run at once (used to size chunks)."""
        return 1

    @abstractmethod
    def run(self, fn: RunChunk, chunks: Sequence[Chunk]) -> Iterator[Outcome]:
        """Yield the outcomes of every chunk, in completion order."""

    def close(self) -> None:  # noqa: B027 - optional: most backends own nothing
        """Release what this backend started; the default has nothing to release."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(workers={self.workers})"


class Serial(Backend):
    """Every replication in this process, one after another: the default, and the reference."""

    name = "serial"

    def run(self, fn: RunChunk, chunks: Sequence[Chunk]) -> Iterator[Outcome]:
        for chunk in chunks:
            yield from fn(chunk)


class Futures(Backend):
    """Any :class:`concurrent.futures.Executor`: ``ProcessPoolExecutor`` uses every core.

    ``Futures.processes(n)`` makes (and owns) a pool of ``n`` spawned worker processes; if
    one of its workers dies, the pool is rebuilt and the chunks it had not finished are
    submitted again (up to ``retries`` times).  An executor you pass in stays yours: it is
    not shut down by :meth:`close`, and a broken one fails the chunks it held.
    """

    name = "futures"

    def __init__(
        self,
        executor: concurrent.futures.Executor,
        *,
        workers: int | None = None,
        _factory: Callable[[], concurrent.futures.Executor] | None = None,
        retries: int = 3,
    ) -> None:
        if not isinstance(executor, concurrent.futures.Executor):
            raise InvalidTypeError(
                f"executor must be a concurrent.futures.Executor, got {executor!r}"
            )
        self._executor = executor
        self._factory = _factory
        self._retries = retries
        self._workers = workers or int(getattr(executor, "_max_workers", 0) or os.cpu_count() or 1)

    @classmethod
    def processes(cls, workers: int | None = None, *, retries: int = 3) -> Futures:
        """A pool of ``workers`` spawned processes (default: one per core), owned by us."""
        if workers is not None and (
            isinstance(workers, bool) or not isinstance(workers, int) or workers < 1
        ):
            raise InvalidValueError(f"workers must be a positive integer, got {workers!r}")
        count = workers or os.cpu_count() or 1
        context = multiprocessing.get_context("spawn")  # fork is unsafe with threads around

        def factory() -> concurrent.futures.Executor:
            return concurrent.futures.ProcessPoolExecutor(count, mp_context=context)

        backend = cls(factory(), workers=count, _factory=factory, retries=retries)
        backend.name = "processes"
        return backend

    @property
    def workers(self) -> int:
        return self._workers

    def run(self, fn: RunChunk, chunks: Sequence[Chunk]) -> Iterator[Outcome]:
        todo = list(chunks)
        attempts = 0
        while todo:
            futures = {self._executor.submit(fn, chunk): chunk for chunk in todo}
            todo = []
            broken = False
            try:
                for future in concurrent.futures.as_completed(futures):
                    chunk = futures.pop(future)
                    try:
                        outcomes = future.result()
                    except concurrent.futures.process.BrokenProcessPool:
                        broken = True
                        todo.append(chunk)
                        continue
                    except Exception as error:
                        outcomes = _lost(chunk, f"executor: {error!r}", traceback.format_exc())
                    yield from outcomes
            finally:
                for future in futures:
                    future.cancel()
            if broken:
                attempts += 1
                if self._factory is None or attempts > self._retries:
                    text = "the process pool broke (a worker died) and cannot be rebuilt"
                    for chunk in todo:
                        yield from _lost(chunk, "executor: BrokenProcessPool", text)
                    return
                self._executor.shutdown(wait=False, cancel_futures=True)
                self._executor = self._factory()

    def close(self) -> None:
        if self._factory is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)


def _run_remote(fn: RunChunk, chunk: Chunk) -> list[Outcome]:
    return fn(chunk)


class Dask(Backend):
    """A Dask cluster through a ``distributed.Client`` (a ``LocalCluster`` included).

    Pass a client, or an address (``"tcp://host:8786"``; the CLI's ``dask://host:port``), in
    which case the adapter opens the client and closes it afterwards.  When a worker dies,
    the scheduler re-runs the chunks it held on the others; a chunk lost for good (the
    scheduler's ``allowed-failures`` exceeded) is recorded as failed replications.
    """

    name = "dask"

    def __init__(self, client: Any = None, *, address: str | None = None) -> None:
        try:
            import distributed
        except ImportError as error:
            raise ImportError(
                "the Dask executor needs dask.distributed: pip install 'async-virtualtime[dask]'"
            ) from error
        self._own = client is None
        if client is None:
            if address is None:
                raise InvalidValueError("Dask needs a client or an address")
            client = distributed.Client(address)  # type: ignore[no-untyped-call]
        elif not isinstance(client, distributed.Client):
            raise InvalidTypeError(f"client must be a distributed.Client, got {client!r}")
        self.client = client

    @property
    def workers(self) -> int:
        info = self.client.scheduler_info(n_workers=-1)
        threads = sum(int(w.get("nthreads", 1)) for w in info.get("workers", {}).values())
        return max(1, threads)

    def run(self, fn: RunChunk, chunks: Sequence[Chunk]) -> Iterator[Outcome]:
        import distributed

        futures = {
            self.client.submit(_run_remote, fn, chunk, pure=False): chunk for chunk in chunks
        }
        try:
            for future in distributed.as_completed(list(futures)):  # type: ignore[no-untyped-call]
                chunk = futures.pop(future)
                try:
                    outcomes = future.result()
                except Exception as error:
                    outcomes = _lost(chunk, f"executor: {error!r}", traceback.format_exc())
                yield from outcomes
        finally:
            if futures:
                self.client.cancel(list(futures))

    def close(self) -> None:
        if self._own:
            self.client.close()


class Ray(Backend):
    """Ray: the local machine (``ray.init()``), or a cluster at ``address`` (``ray://...``).

    If Ray is not initialised yet, the adapter initialises it (with ``address`` and any
    ``ray.init`` keyword arguments) and shuts it down on :meth:`close`.  Ray re-runs the
    tasks of a dead worker itself (``max_retries``); a task lost for good is recorded as
    failed replications.
    """

    name = "ray"

    def __init__(
        self, address: str | None = None, *, max_retries: int = 3, **init_options: Any
    ) -> None:
        try:
            import ray
        except ImportError as error:
            raise ImportError(
                "the Ray executor needs ray: pip install 'async-virtualtime[ray]'"
            ) from error
        self._ray = ray
        self._own = not ray.is_initialized()
        if self._own:
            init_options.setdefault("include_dashboard", False)
            init_options.setdefault("log_to_driver", False)
            ray.init(address=address, **init_options)
        self._remote = ray.remote(max_retries=max_retries)(_run_remote)

    @property
    def workers(self) -> int:
        resources = self._ray.cluster_resources()  # type: ignore[no-untyped-call]
        return max(1, int(resources.get("CPU", 1)))

    def run(self, fn: RunChunk, chunks: Sequence[Chunk]) -> Iterator[Outcome]:
        ray = self._ray
        fn_ref = ray.put(fn)
        refs = {self._remote.remote(fn_ref, chunk): chunk for chunk in chunks}
        try:
            while refs:
                done, _ = ray.wait(list(refs), num_returns=1)
                for ref in done:
                    chunk = refs.pop(ref)
                    try:
                        outcomes = ray.get(ref)
                    except Exception as error:
                        outcomes = _lost(chunk, f"executor: {error!r}", traceback.format_exc())
                    yield from outcomes
        finally:
            for ref in refs:
                ray.cancel(ref)

    def close(self) -> None:
        if self._own:
            self._ray.shutdown()


def backend_for(executor: object) -> tuple[Backend, bool]:
    """The adapter for ``executor`` and whether we own it (and so close it afterwards).

    Accepts None or ``"serial"``; ``"processes"`` or ``"processes:N"``; ``"dask://HOST:PORT"``
    (or ``"tcp://..."``); ``"ray"`` or ``"ray://ADDRESS"``; a :class:`Backend`; any
    :class:`concurrent.futures.Executor`; a ``distributed.Client``.
    """
    if executor is None or executor == "serial":
        return Serial(), True
    if isinstance(executor, Backend):
        return executor, False
    if isinstance(executor, concurrent.futures.Executor):
        return Futures(executor), False
    distributed = sys.modules.get("distributed")
    if distributed is not None and isinstance(executor, distributed.Client):
        return Dask(executor), False
    if isinstance(executor, str):
        if executor == "processes" or executor.startswith("processes:"):
            _, _, count = executor.partition(":")
            if count and not count.isdigit():
                raise InvalidValueError(f"processes:N needs a whole number, got {executor!r}")
            return Futures.processes(int(count) if count else None), True
        if executor.startswith("dask://"):
            return Dask(address="tcp://" + executor.removeprefix("dask://")), True
        if executor.startswith(("tcp://", "tls://")):
            return Dask(address=executor), True
        if executor == "ray":
            return Ray(), True
        if executor.startswith("ray://"):
            return Ray(address=executor), True
    raise InvalidValueError(
        "executor must be 'serial', 'processes[:N]', 'dask://HOST:PORT', 'ray[://ADDRESS]', "
        f"a concurrent.futures.Executor, a distributed.Client or a Backend; got {executor!r}"
    )


def chunked(tasks: Sequence[Task], size: int) -> list[list[Task]]:
    return [list(tasks[i : i + size]) for i in range(0, len(tasks), size)]


bind = partial
