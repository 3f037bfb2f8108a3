"""Executor adapters: how chunks of replications reach workers and their outcomes come back.

One small interface, :class:`Backend`, with four implementations: :class:`Serial` (in this
process), :class:`Futures` (any :class:`concurrent.futures.Executor`, a process pool
included), :class:`Dask` (a ``distributed.Client``) and :class:`Ray`.  Dask and Ray are
imported only when one of their adapters is made.

Chunks arrive as an iterable that is read as work is handed out, never all at once: an
experiment of ``10**30`` replications holds a few chunks per worker in memory, not ``10**30``
records.  Each backend keeps a bounded number of chunks in flight (:data:`IN_FLIGHT` per
worker) and submits the next as one finishes.

Part of ``experiment``: may import ``shared``, ``options``, ``engine``, ``trio``, ``trace``,
``api``, ``sim`` (see tests/layout.py).
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import sys
import traceback
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from typing import Any, Final

from .._shared._errors import InvalidTypeError, InvalidValueError
from ._model import Outcome, Task, shown

__all__ = ["Backend", "Dask", "Futures", "Ray", "Serial", "backend_for"]

Chunk = Sequence[Task]
RunChunk = Callable[[Chunk], list[Outcome]]

IN_FLIGHT: Final = 2
"""Chunks submitted per worker before the first comes back (the rest wait in the iterable)."""

MAX_WORKERS: Final = 1024
"""The most worker processes a backend this package starts may ask for."""

DASK_CONNECT_TIMEOUT: Final = 10.0
"""Seconds to wait for a Dask scheduler at an address before giving up (``Dask(timeout=)``)."""


def _count(name: str, value: object, *, low: int, high: int | None = None) -> int:
    """``value`` if it is an int in ``low..high``, else a clear error naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(f"{name} must be an int, got {shown(value)}")
    if value < low or (high is not None and value > high):
        rule = f"from {low} to {high}" if high is not None else f">= {low}"
        raise InvalidValueError(f"{name} must be an int {rule}, got {shown(value)}")
    return value


def _lost(chunk: Chunk, why: str, text: str) -> list[Outcome]:
    """Outcomes for a chunk the executor lost for good: recorded as failures, not dropped."""
    return [Outcome(t.scenario, t.replication, None, float("nan"), 0.0, why, text) for t in chunk]


class Backend(ABC):
    """Runs chunks of replications somewhere and yields their outcomes as they finish.

    Implement :meth:`run` to plug in another engine.  It must call ``fn(chunk)`` once per
    chunk (on a worker, where ``fn`` and the chunk arrive pickled) and yield each returned
    outcome; when the generator is closed early (Ctrl-C, a sequential stop) it must cancel
    what has not started.  ``chunks`` is an iterable made as it is read (it may be very
    long): take a few chunks per worker at a time, never ``list(chunks)``.  Chunks may
    finish in any order and may be re-run after a worker dies; the experiment keeps one
    outcome per replication, so re-runs are never counted twice.  :meth:`close` releases
    what the backend itself started (a pool, a client).
    """

    name: str = "backend"

    @property
    def workers(self) -> int:
        """How many replications can run at once (used to size chunks)."""
        return 1

    @abstractmethod
    def run(self, fn: RunChunk, chunks: Iterable[Chunk]) -> Iterator[Outcome]:
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

    def run(self, fn: RunChunk, chunks: Iterable[Chunk]) -> Iterator[Outcome]:
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
                f"executor must be a concurrent.futures.Executor, got {shown(executor)}"
            )
        if workers is not None:
            _count("workers", workers, low=1, high=MAX_WORKERS)
        self._retries = _count("retries", retries, low=0, high=1000)
        self._executor = executor
        self._factory = _factory
        self._workers = workers or int(getattr(executor, "_max_workers", 0) or os.cpu_count() or 1)

    @classmethod
    def processes(cls, workers: int | None = None, *, retries: int = 3) -> Futures:
        """A pool of ``workers`` spawned processes (default: one per core), owned by us."""
        if workers is not None:
            _count("workers", workers, low=1, high=MAX_WORKERS)
        _count("retries", retries, low=0, high=1000)
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

    def run(self, fn: RunChunk, chunks: Iterable[Chunk]) -> Iterator[Outcome]:
        source = iter(chunks)
        again: deque[Chunk] = deque()  # chunks a broken pool lost, to submit first
        window = max(2, self._workers * IN_FLIGHT)
        futures: dict[concurrent.futures.Future[list[Outcome]], Chunk] = {}
        attempts = 0
        try:
            while True:
                broken = False
                while len(futures) < window and not broken:
                    chunk = again.popleft() if again else next(source, None)
                    if chunk is None:
                        break
                    try:
                        futures[self._executor.submit(fn, chunk)] = chunk
                    except concurrent.futures.process.BrokenProcessPool:
                        again.appendleft(chunk)
                        broken = True
                if not futures and not broken:
                    return
                done, _ = concurrent.futures.wait(
                    futures, return_when=concurrent.futures.FIRST_COMPLETED
                )
                if broken:  # every future of a broken pool ends at once: take them all
                    done, _ = concurrent.futures.wait(futures)
                for future in done:
                    chunk = futures.pop(future)
                    try:
                        outcomes = future.result()
                    except concurrent.futures.process.BrokenProcessPool:
                        broken = True
                        again.append(chunk)
                        continue
                    except Exception as error:
                        outcomes = _lost(chunk, f"executor: {error!r}", traceback.format_exc())
                    yield from outcomes
                if not broken:
                    continue
                for future, chunk in list(futures.items()):  # still running in a dead pool
                    future.cancel()
                    again.append(chunk)
                futures.clear()
                attempts += 1
                if self._factory is None or attempts > self._retries:
                    text = "the process pool broke (a worker died) and cannot be rebuilt"
                    for chunk in (*again, *source):
                        yield from _lost(chunk, "executor: BrokenProcessPool", text)
                    return
                self._executor.shutdown(wait=False, cancel_futures=True)
                self._executor = self._factory()
        finally:
            for future in futures:
                future.cancel()

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

    def __init__(
        self,
        client: Any = None,
        *,
        address: str | None = None,
        timeout: float = DASK_CONNECT_TIMEOUT,
    ) -> None:
        if address is not None:
            _check_address(address, "tcp://HOST:PORT")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise InvalidTypeError(f"timeout must be a number of seconds, got {shown(timeout)}")
        if not 0 < timeout <= 3600:
            raise InvalidValueError(
                f"timeout must be more than 0 and at most 3600 seconds, got {shown(timeout)}"
            )
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
            try:
                client = distributed.Client(address, timeout=timeout)  # type: ignore[no-untyped-call]
            except (OSError, TimeoutError) as error:
                raise InvalidValueError(
                    f"executor: no Dask scheduler answered at {shown(address)} within "
                    f"{timeout:g} s ({_first_line(error)})"
                ) from None
            except ValueError as error:  # an address distributed cannot parse
                raise InvalidValueError(
                    f"executor: {shown(address)} is not a Dask address ({_first_line(error)})"
                ) from None
        elif not isinstance(client, distributed.Client):
            raise InvalidTypeError(f"client must be a distributed.Client, got {shown(client)}")
        self.client = client

    @property
    def workers(self) -> int:
        info = self.client.scheduler_info(n_workers=-1)
        threads = sum(int(w.get("nthreads", 1)) for w in info.get("workers", {}).values())
        return max(1, threads)

    def run(self, fn: RunChunk, chunks: Iterable[Chunk]) -> Iterator[Outcome]:
        import distributed

        source = iter(chunks)
        window = max(2, self.workers * IN_FLIGHT)
        futures: dict[Any, Chunk] = {}

        def submit() -> Any:
            chunk = next(source, None)
            if chunk is None:
                return None
            future = self.client.submit(_run_remote, fn, chunk, pure=False)
            futures[future] = chunk
            return future

        while len(futures) < window and submit() is not None:
            pass
        pending = distributed.as_completed(list(futures))  # type: ignore[no-untyped-call]
        try:
            for future in pending:
                chunk = futures.pop(future)
                try:
                    outcomes = future.result()
                except Exception as error:
                    outcomes = _lost(chunk, f"executor: {error!r}", traceback.format_exc())
                yield from outcomes
                while len(futures) < window:
                    added = submit()
                    if added is None:
                        break
                    pending.add(added)  # type: ignore[no-untyped-call]
        finally:
            if futures:
                self.client.cancel(list(futures))

    def close(self) -> None:
        if self._own:
            self.client.close()


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    text = lines[0] if lines else type(error).__name__
    return text if len(text) <= 200 else text[:199] + "…"


def _check_address(address: object, form: str) -> str:
    """A cluster address: ``SCHEME://HOST:PORT`` or ``HOST:PORT``, checked before connecting."""
    if not isinstance(address, str):
        raise InvalidTypeError(f"address must be a str like {form}, got {shown(address)}")
    host = address.partition("://")[2] if "://" in address else address
    if (
        len(address) > 300
        or not address.isprintable()
        or any(c.isspace() for c in address)
        or ":" not in host
        or not host.rpartition(":")[0]
    ):
        raise InvalidValueError(f"address must look like {form}, got {shown(address)}")
    return address


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
        if address is not None and address not in ("auto", "local"):
            _check_address(address, "'auto', 'local', ray://HOST:PORT or HOST:PORT")
        _count("max_retries", max_retries, low=-1, high=1000)
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

    def run(self, fn: RunChunk, chunks: Iterable[Chunk]) -> Iterator[Outcome]:
        ray = self._ray
        fn_ref = ray.put(fn)
        source = iter(chunks)
        window = max(2, self.workers * IN_FLIGHT)
        refs: dict[Any, Chunk] = {}
        try:
            while True:
                while len(refs) < window:
                    chunk = next(source, None)
                    if chunk is None:
                        break
                    refs[self._remote.remote(fn_ref, chunk)] = chunk
                if not refs:
                    return
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
            if count and not (count.isascii() and count.isdigit() and len(count) <= 6):
                raise InvalidValueError(
                    f"executor: processes:N needs a whole number N, got {shown(executor)}"
                )
            if count and not 1 <= int(count) <= MAX_WORKERS:
                raise InvalidValueError(
                    f"executor: processes:N needs N from 1 to {MAX_WORKERS}, got {shown(executor)}"
                )
            return Futures.processes(int(count) if count else None), True
        if executor.startswith("dask://"):
            address = "tcp://" + executor.removeprefix("dask://")
            return Dask(address=address, timeout=DASK_CONNECT_TIMEOUT), True
        if executor.startswith(("tcp://", "tls://")):
            return Dask(address=executor, timeout=DASK_CONNECT_TIMEOUT), True
        if executor == "ray":
            return Ray(), True
        if executor.startswith("ray://"):
            return Ray(address=executor), True
    raise InvalidValueError(
        "executor must be 'serial', 'processes[:N]', 'dask://HOST:PORT', 'ray[://ADDRESS]', "
        f"a concurrent.futures.Executor, a distributed.Client or a Backend; got {shown(executor)}"
    )


def chunked(tasks: Iterable[Task], size: int) -> Iterator[list[Task]]:
    """``tasks`` in lists of ``size``, made as they are read (the last may be shorter)."""
    chunk: list[Task] = []
    for task in tasks:
        chunk.append(task)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


bind = partial
