"""replicate and sweep: scenarios x replications, seeded streams, batches, the sequential rule.

Part of ``experiment``: may import ``shared``, ``options``, ``engine``, ``trio``, ``trace``,
``api``, ``sim`` (see tests/layout.py).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import secrets
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

from .._shared._errors import InvalidTypeError, InvalidValueError
from ._executors import Backend, Serial, backend_for, chunked
from ._model import (
    Model,
    ModelRef,
    Outcome,
    Task,
    check_params,
    check_seed,
    execute,
    reference,
    shown,
    stream_text,
)
from ._results import KEY_COLUMNS, TAIL_COLUMNS, Failure, Results
from ._stats import _check_confidence, t_quantile

__all__ = ["Progress", "replicate", "scenarios_of", "sweep"]


@dataclass(frozen=True)
class Progress:
    """Where a running experiment is, passed to the ``progress`` callback after each outcome.

    ``half_widths`` maps ``(scenario, output)`` to the current t half-width (nan below two
    replications); ``total`` is what is planned so far (the sequential rule may add more).
    """

    done: int
    failed: int
    total: int
    elapsed: float
    half_widths: Mapping[tuple[int, str], float]
    means: Mapping[tuple[int, str], float]


class _Running:
    """Welford sums per scenario and output, for the progress display."""

    def __init__(self) -> None:
        self.n: dict[tuple[int, str], int] = {}
        self.mean: dict[tuple[int, str], float] = {}
        self.m2: dict[tuple[int, str], float] = {}

    def add(self, scenario: int, outputs: Mapping[str, float]) -> None:
        for name, x in outputs.items():
            key = (scenario, name)
            n = self.n.get(key, 0) + 1
            mean = self.mean.get(key, 0.0)
            delta = x - mean
            mean += delta / n
            self.n[key], self.mean[key] = n, mean
            self.m2[key] = self.m2.get(key, 0.0) + delta * (x - mean)

    def half_widths(self, confidence: float) -> dict[tuple[int, str], float]:
        out = {}
        for key, n in self.n.items():
            if n < 2 or not math.isfinite(self.m2[key]):
                out[key] = math.nan
            else:
                std = math.sqrt(max(self.m2[key], 0.0) / (n - 1))
                out[key] = t_quantile(confidence, n - 1) * std / math.sqrt(n)
        return out


MAX_CHUNKSIZE: Final = 100_000
"""The most replications one task may carry to a worker."""

MAX_SCENARIOS: Final = 1_000_000
"""The most scenarios a grid may make (a full factorial multiplies up quickly)."""


def _positive_int(name: str, value: object, *, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(f"{name} must be a positive integer, got {shown(value)}")
    if value < 1:
        raise InvalidValueError(f"{name} must be a positive integer, got {shown(value)}")
    if high is not None and value > high:
        raise InvalidValueError(f"{name} must be an integer from 1 to {high:,}, got {shown(value)}")
    return value


def _flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise InvalidTypeError(f"{name} must be True or False, got {shown(value)}")
    return value


def scenarios_of(grid: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The scenarios of a grid: a full factorial of a mapping, or an explicit list.

    ``{"servers": [1, 2], "rate": 0.8}`` gives two scenarios (a single value, or a string,
    is one level); the first parameter varies slowest.  A list of mappings is taken as it is;
    every scenario must name the same parameters.
    """
    if isinstance(grid, Mapping):
        names = list(grid)
        levels: list[list[Any]] = []
        count = 1
        for name in names:
            if not isinstance(name, str) or not name:
                raise InvalidValueError(
                    f"grid: parameter names must be non-empty strs, got {shown(name)}"
                )
            value = grid[name]
            if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
                levels.append([value])
            else:
                values = list(itertools.islice(value, MAX_SCENARIOS + 1))
                if not values:
                    raise InvalidValueError(f"grid: parameter {shown(name)} has no values")
                levels.append(values)
            count *= len(levels[-1])
            if count > MAX_SCENARIOS:
                raise InvalidValueError(
                    f"grid: more than {MAX_SCENARIOS:,} scenarios (the full factorial of "
                    f"{', '.join(names[: len(levels)])})"
                )
        return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*levels)]
    if not isinstance(grid, Sequence) or isinstance(grid, (str, bytes)):  # type: ignore[unreachable]
        raise InvalidTypeError(
            f"grid must be a mapping of values or a list of scenarios, got {shown(grid)}"
        )
    if len(grid) > MAX_SCENARIOS:
        raise InvalidValueError(f"grid: more than {MAX_SCENARIOS:,} scenarios ({len(grid):,})")
    scenarios = []
    for i, scenario in enumerate(grid):
        if not isinstance(scenario, Mapping):
            raise InvalidTypeError(
                f"grid: scenario {i} must be a mapping of parameters, got {shown(scenario)}"
            )
        scenarios.append(check_params(scenario))
    if not scenarios:
        raise InvalidValueError("grid: the grid has no scenarios")
    first = list(scenarios[0])
    for i, scenario in enumerate(scenarios):
        if sorted(scenario) != sorted(first):
            raise InvalidValueError(
                f"grid: scenario {i} names {shown(sorted(scenario))}, scenario 0 names "
                f"{shown(sorted(first))}: "
                "every scenario must name the same parameters"
            )
    return scenarios


def sweep(
    model: Model | str | ModelRef,
    grid: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    *,
    replications: int = 10,
    seed: int | None = None,
    executor: object = None,
    crn: bool = True,
    baseline: int | Mapping[str, Any] = 0,
    confidence: float = 0.95,
    half_width: float | None = None,
    relative: bool = False,
    outputs: Sequence[str] | None = None,
    max_n: int = 1000,
    chunksize: int | None = None,
    progress: Callable[[Progress], None] | None = None,
) -> Results:
    """Run ``model`` on every scenario of ``grid``, ``replications`` times each.

    Use it to compare designs: replication *i* of every scenario gets the same random
    stream (common random numbers, ``crn=True``), so :meth:`Results.differences` against
    ``baseline`` is sharper than comparing two intervals.  With ``crn=False`` every
    scenario has streams of its own.

    Args:
        model: ``async def model(params, rng) -> {"name": number, ...}``, run on a fresh
            virtual loop per replication; or a plain function (which may call
            :func:`virtualtime.run` itself); or ``"file.py:name"``.  ``rng`` is a
            :class:`numpy.random.Generator` seeded for this replication only.
        grid: see :func:`scenarios_of`.
        replications: per scenario; with ``half_width``, the first batch.
        seed: the root of every stream; the same seed gives the same table on every
            executor and any number of workers.  None draws one (it is in the results).
        executor: None/``"serial"``, ``"processes[:N]"``, ``"dask://HOST:PORT"``,
            ``"ray[://ADDRESS]"``, a ``concurrent.futures.Executor``, a
            ``distributed.Client``, or a :class:`Backend`.
        half_width: with it, the sequential rule: each scenario gets more replications, in
            batches, until the half-width of every output in ``outputs`` (default: all) is at
            most ``half_width`` (times ``|mean|`` when ``relative``), or ``max_n`` is reached;
            :attr:`Results.target_met` says which scenarios made it.
        chunksize: replications per task sent to a worker (default: a few tasks per worker).
        progress: called with a :class:`Progress` after every finished replication.

    A replication that raises is recorded in :attr:`Results.failures` (scenario, index,
    seed, stream, traceback) and the rest go on.  Ctrl-C stops the run and returns what
    finished, with :attr:`Results.interrupted` set.
    """
    if not (callable(model) or isinstance(model, (str, ModelRef))):
        raise InvalidTypeError(
            f"model must be a function, 'file.py:function' or a ModelRef, got {shown(model)}"
        )
    scenarios = scenarios_of(grid)
    replications = _positive_int("replications", replications)
    level = _check_confidence(confidence)
    max_n = _positive_int("max_n", max_n)
    crn = _flag("crn", crn)
    relative = _flag("relative", relative)
    if chunksize is not None:
        chunksize = _positive_int("chunksize", chunksize, high=MAX_CHUNKSIZE)
    if progress is not None and not callable(progress):
        raise InvalidTypeError(f"progress must be None or a callable, got {shown(progress)}")
    if half_width is not None:
        if isinstance(half_width, bool) or not isinstance(half_width, (int, float)):
            raise InvalidTypeError(f"half_width must be a positive number, got {shown(half_width)}")
        if not half_width > 0 or not math.isfinite(half_width):
            raise InvalidValueError(
                f"half_width must be a positive number, got {shown(half_width)}"
            )
        if max_n < replications:
            raise InvalidValueError(
                f"max_n ({max_n}) must be at least the first batch (replications={replications})"
            )
        if replications < 2:
            raise InvalidValueError(
                "replications: the sequential rule (half_width) needs a first batch of at "
                f"least 2, got {replications}"
            )
    seed = secrets.randbits(63) if seed is None else check_seed(seed, or_none=True)
    if outputs is not None:
        if isinstance(outputs, str):
            outputs = [outputs]
        elif isinstance(outputs, (list, tuple)):
            outputs = list(outputs)
        else:
            raise InvalidTypeError(
                f"outputs must be None, an output name or a list of them, got {shown(outputs)}"
            )
        for name in outputs:
            if not isinstance(name, str) or not name:
                raise InvalidValueError(f"outputs: names must be non-empty strs, got {shown(name)}")
    parameters = list(scenarios[0])
    for name in parameters:
        if name in (*KEY_COLUMNS, *TAIL_COLUMNS):
            raise InvalidValueError(
                f"grid: {name!r} is a column of the results table; rename the parameter"
            )
    sent = reference(model)
    results = Results(
        scenarios=scenarios,
        parameters=parameters,
        rows=[],
        failures=[],
        seed=seed,
        crn=bool(crn),
        confidence=level,
        attempted=[0] * len(scenarios),
    )
    results.baseline = results._scenario_index(baseline)
    backend, owned = backend_for(executor)
    results.executor = backend.name
    if isinstance(backend, Serial) and callable(model):
        sent = model  # in this process: the function itself, not a reference to re-import
    try:
        _drive(
            backend,
            partial(execute, sent),
            results,
            replications,
            half_width,
            relative,
            outputs,
            max_n,
            chunksize,
            progress,
        )
    finally:
        if owned:
            backend.close()
    results.rows.sort(key=lambda row: (row["scenario"], row["replication"]))
    results.failures.sort(key=lambda f: (f.scenario, f.replication))
    return results


def replicate(
    model: Model | str | ModelRef,
    params: Mapping[str, Any] | None = None,
    n: int = 10,
    *,
    seed: int | None = None,
    executor: object = None,
    confidence: float = 0.95,
    half_width: float | None = None,
    relative: bool = False,
    outputs: Sequence[str] | None = None,
    max_n: int = 1000,
    chunksize: int | None = None,
    progress: Callable[[Progress], None] | None = None,
) -> Results:
    """Run ``model`` with ``params`` ``n`` times on independent streams; see :func:`sweep`.

    Use it for one design's confidence intervals: ``replicate(model, {"rate": 0.8}, 200,
    seed=1).summary()``.  With ``half_width=h`` it is KSL's sequential procedure: ``n`` is
    the first batch, and batches follow until every chosen output's half-width is at most
    ``h`` (relative to the mean with ``relative=True``) or ``max_n`` replications ran;
    ``results.attempted[0]`` says how many it took and ``results.target_met[0]`` whether
    the target was met.
    """
    n = _positive_int("n", n)
    return sweep(
        model,
        [check_params(params)],
        replications=n,
        seed=seed,
        executor=executor,
        confidence=confidence,
        half_width=half_width,
        relative=relative,
        outputs=outputs,
        max_n=max_n,
        chunksize=chunksize,
        progress=progress,
    )


def _drive(
    backend: Backend,
    fn: Callable[[Sequence[Task]], list[Outcome]],
    results: Results,
    first: int,
    half_width: float | None,
    relative: bool,
    outputs: Sequence[str] | None,
    max_n: int,
    chunksize: int | None,
    progress: Callable[[Progress], None] | None,
) -> None:
    began = time.perf_counter()
    running = _Running()
    seen: set[tuple[int, int]] = set()
    planned = [first] * len(results.scenarios)
    total = sum(planned)
    failed = 0
    parameters = set(results.parameters)
    if half_width is not None:
        results.target_met = [False] * len(results.scenarios)
    while True:
        count = sum(planned[s] - results.attempted[s] for s in range(len(results.scenarios)))
        if not count:
            return
        workers = 1 if backend.name == "serial" else backend.workers
        size = chunksize or min(DEFAULT_CHUNK_LIMIT, max(1, -(-count // (workers * 4))))
        if backend.name == "serial" and chunksize is None:
            size = 1
        stream = backend.run(fn, chunked(_tasks(results, planned), size))
        try:
            with contextlib.closing(stream):  # type: ignore[type-var]
                for outcome in stream:
                    if outcome.key in seen:
                        continue  # a re-run of a chunk a dead worker had finished in part
                    seen.add(outcome.key)
                    _record(results, outcome, parameters)
                    if outcome.outputs is None:
                        failed += 1
                    else:
                        running.add(outcome.scenario, outcome.outputs)
                    if progress is not None:
                        progress(
                            Progress(
                                done=len(seen),
                                failed=failed,
                                total=total,
                                elapsed=time.perf_counter() - began,
                                half_widths=running.half_widths(results.confidence),
                                means=dict(running.mean),
                            )
                        )
        except KeyboardInterrupt:
            results.interrupted = True
            return
        if half_width is None:
            return
        grew = False
        for s in range(len(results.scenarios)):
            need = _needed(results, s, half_width, relative, outputs)
            assert results.target_met is not None
            results.target_met[s] = need == 0
            if need and planned[s] < max_n:
                target = min(max_n, max(need, planned[s] + 1))
                total += target - planned[s]
                planned[s] = target
                grew = True
        if not grew:
            return


DEFAULT_CHUNK_LIMIT: Final = 1000
"""Without ``chunksize``, a task carries at most this many replications."""


def _tasks(results: Results, planned: Sequence[int]) -> Iterator[Task]:
    """The replications still to hand out, made one at a time as the backend reads them.

    ``results.attempted`` counts a replication when it is handed out, so a run of
    ``10**30`` replications holds only what is in flight, never a list of every one.
    """
    for s in range(len(results.scenarios)):
        while results.attempted[s] < planned[s]:
            r = results.attempted[s]
            results.attempted[s] = r + 1
            yield Task(
                scenario=s,
                replication=r,
                params=results.scenarios[s],
                seed=results.seed,
                stream=(r,) if results.crn else (s, r),
            )


def _needed(
    results: Results, scenario: int, target: float, relative: bool, outputs: Sequence[str] | None
) -> int:
    """0 if every chosen output meets the target, else the replications the rule asks for."""
    rows = [row for row in results.rows if row["scenario"] == scenario]
    names = list(outputs) if outputs is not None else results.outputs
    if not rows:
        return results.attempted[scenario] * 2
    need = 0
    for name in names:
        if name not in rows[0]["_outputs"]:
            raise InvalidValueError(
                f"no output {name!r}; the model returns {list(rows[0]['_outputs'])}"
            )
        summary = next(s for s in results.summary() if s.scenario == scenario and s.output == name)
        goal = target * abs(summary.mean) if relative else target
        if summary.n >= 2 and summary.half_width <= goal:
            continue
        if summary.n < 2 or not goal > 0 or math.isnan(summary.half_width):
            need = max(need, results.attempted[scenario] * 2)
            continue
        # KSL's estimate: n such that t * s / sqrt(n) <= goal, from the current n and width.
        # A tiny goal (half_width=1e-300) makes it astronomical: the caller caps it at max_n.
        ratio = summary.half_width / goal
        exact = summary.n * ratio * ratio if ratio < 1e150 else math.inf
        estimate = math.ceil(exact) if exact < 2**62 else 2**62
        failures = results.attempted[scenario] - summary.n
        need = max(need, estimate + failures)
    return need


def _record(results: Results, outcome: Outcome, parameters: set[str]) -> None:
    s, r = outcome.scenario, outcome.replication
    stream = stream_text((r,) if results.crn else (s, r))
    params = results.scenarios[s]
    if outcome.outputs is None:
        results.failures.append(
            Failure(
                scenario=s,
                params=params,
                replication=r,
                seed=results.seed,
                stream=stream,
                error=outcome.error or "",
                traceback=outcome.traceback or "",
                worker=outcome.worker,
            )
        )
        return
    clash = parameters.intersection(outcome.outputs) | set(KEY_COLUMNS + TAIL_COLUMNS).intersection(
        outcome.outputs
    )
    if clash:
        results.failures.append(
            Failure(
                s,
                params,
                r,
                results.seed,
                stream,
                f"ValueError: output name(s) {sorted(clash)} clash with the table's columns",
                "",
                outcome.worker,
            )
        )
        return
    row: dict[str, Any] = {"scenario": s, **params, "replication": r, "seed": results.seed}
    row["stream"] = stream
    row.update(outcome.outputs)
    row["end_time"] = outcome.end_time
    row["wall_seconds"] = outcome.wall_seconds
    row["_outputs"] = tuple(outcome.outputs)
    results.rows.append(row)
