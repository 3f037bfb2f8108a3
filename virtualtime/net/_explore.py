"""Seeded exploration: run a scenario under many seeds, keep what fails, shrink it, replay it.

When to use it
--------------
A virtual loop runs a program one way: timers due at the same instant first-scheduled first,
ready tasks in the order they became ready.  A real machine may run it any way asyncio
allows, and the bugs that matter in concurrent and distributed code -- a reply racing its own
timeout, a check-then-act interleaved with another task, a retry landing before the cleanup
of the previous attempt -- live in the other orders.  Give the loop a seed and it takes one
of those orders (see :class:`~virtualtime.VirtualEventLoop`'s ``seed`` and ``perturb``);
:func:`explore` runs a *scenario* (``async def main(): ...``, a whole test of the system: set
it up, drive it, assert) under many seeds and returns the ones that fail::

    found = virtualtime.net.explore(main, seeds=range(1000))
    print(found)                      # the summary, and each failure's replay line
    failure = found.failures[0].shrink()
    virtualtime.net.replay(main, failure.seed, keep=failure.keep, trace="failure.png")

Same seed, same run: a failing seed is a bug report that reproduces every time.  Each
:class:`Failure` carries its one-line :attr:`~Failure.replay` (paste it in a shell, or in
Python when the scenario cannot be named from outside), and :meth:`Failure.shrink` looks for
the fewest of the seed's *deviations* (the decisions that differed from the unseeded order)
that still fail the same way, so that what is left to read is the reordering that matters.
:func:`replay` runs one seed again -- under the trace recorder, when asked, for a timeline.

``perturb="timers"`` (the default) reorders same-instant timers of equal priority;
``perturb="ready"`` also reorders the task steps made ready in one loop round, which finds
more interleavings (and costs a little more per round).

The seed decides the rest of what the program draws, too: during each run the :mod:`random`
module is seeded with the run's seed and ``os.urandom`` (so ``uuid.uuid4`` and
:mod:`secrets`) returns bytes drawn from that seed alone, the same in any process (see
:mod:`virtualtime.net._entropy`; the pytest plugin salts each test's stream); the
:class:`Exploration` reports which of these sources the runs reached.  What cannot be seeded
-- a module-level counter that outlives a run, a set ordered by ``id()``, a real clock read
-- makes two runs of one seed differ: ``check_determinism=True`` runs each seed twice and
reports such a seed as a failure of its own kind, naming the first difference.

``processes=N`` runs the seeds in N spawned worker processes (the scenario must be a
module-level function, so that a worker can import it); workers get a fixed
``PYTHONHASHSEED`` (this process's, or ``0``), which the report and the replay lines state.

Part of ``net``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trace`` (see
tests/layout.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import shlex
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, Literal

from .._options import Perturb
from .._shared._errors import UsageError
from .._shared._time import check_bool, shown
from ._entropy import SOURCES, EntropyReport, add_counts, hash_seed
from ._replay import replay
from ._runs import RunResult, difference, run_seed
from ._scenario import (
    Scenario,
    WorkerPool,
    check_count,
    check_perturb,
    check_seeds,
    keep_text,
    not_in_a_loop,
)
from ._scenario import scenario as make_scenario
from ._targets import load_target

__all__ = ["Exploration", "Failure", "explore", "replay"]

Kind = Literal["error", "nondeterministic"]

NONDETERMINISTIC: Final = "NondeterministicRun"
"""The ``error`` of a :class:`Failure` of kind ``"nondeterministic"``."""

WORKER_HASH_SEED: Final = "0"
"""The ``PYTHONHASHSEED`` of worker processes when this process has none fixed."""

_SHRINK_RUNS: Final = 100
_SHOWN_FAILURES: Final = 10


# ------------------------------------------------------------------------- a failure


@dataclasses.dataclass(frozen=True)
class Failure:
    """One seed that failed: what it raised, how far from the unseeded run, how to replay it.

    ``kind`` is ``"error"`` (the scenario raised: ``error`` is the exception's type name,
    ``message`` its text, ``traceback`` the formatted traceback) or ``"nondeterministic"``
    (two runs of the seed differed, with ``check_determinism=True``: ``message`` names the
    first difference).  ``deviations`` is how many of the run's seeded ``decisions`` differed
    from the unseeded order (``deviation_indices`` lists them), and ``keep`` which deviations
    the run kept: None for all of them (a plain seeded run), a set after :meth:`shrink`.
    ``hash_seed`` is the ``PYTHONHASHSEED`` the run had (None: random).

    Two failures compare equal when the same seed failed the same way (the traceback and the
    scenario object are left out).
    """

    seed: int
    perturb: Perturb
    keep: frozenset[int] | None
    kind: Kind
    error: str
    message: str
    deviations: int
    decisions: int = dataclasses.field(repr=False)
    deviation_indices: tuple[int, ...] = dataclasses.field(repr=False)
    error_type: str = dataclasses.field(repr=False)
    """The exception's qualified name (``module.Class``); what :meth:`shrink` keeps equal."""
    traceback: str = dataclasses.field(repr=False, compare=False)
    hash_seed: str | None = dataclasses.field(repr=False, compare=False)
    _scenario: Scenario = dataclasses.field(repr=False, compare=False)

    @property
    def replay(self) -> str:
        """One line that runs this failure again: a shell command, or a Python call.

        ``python -m virtualtime explore MODULE:FUNC --seed S`` (with ``--keep`` after a
        shrink, ``--perturb ready``, ``--check-determinism`` for a nondeterministic run, and
        ``PYTHONHASHSEED=...`` in front when the run had a fixed one) when the scenario is a
        module-level function and no loop options were given; else the call of
        :func:`virtualtime.net.replay` with the same arguments.
        """
        scenario = self._scenario
        if scenario.target is not None and not scenario.options:
            words = ["python", "-m", "virtualtime", "explore", scenario.target]
            words += ["--seed", str(self.seed)]
            if self.keep is not None:
                words += ["--keep", keep_text(self.keep)]
            if self.perturb != "timers":
                words += ["--perturb", self.perturb]
            if self.kind == "nondeterministic":
                words.append("--check-determinism")
            line = " ".join(shlex.quote(word) for word in words)
            return f"PYTHONHASHSEED={self.hash_seed} {line}" if self.hash_seed else line
        main = scenario.target.replace(":", ".") if scenario.target else scenario.name
        if scenario.target is not None and scenario.target.partition(":")[0].endswith(".py"):
            main = scenario.target.rpartition(":")[2]
        args = [main, f"seed={self.seed}"]
        if self.keep is not None:
            args.append(f"keep={set(sorted(self.keep)) or 'set()'}")
        if self.perturb != "timers":
            args.append(f"perturb={self.perturb!r}")
        args += [f"{name}={value!r}" for name, value in scenario.options]
        return f"virtualtime.net.replay({', '.join(args)})"

    def shrink(self, *, max_runs: int = _SHRINK_RUNS) -> Failure:
        """This failure with as few deviations kept as a search of ``max_runs`` runs finds.

        Delta debugging over the seed's deviations: the seed is run again keeping only some
        of them (every other decision takes its unseeded default), and a subset that still
        raises the same type of exception replaces the set, until no half, quarter... and no
        single deviation can be dropped, or the runs are spent.  The result's ``keep`` says
        which deviations are left (``frozenset()``: the unseeded order fails too, so the bug
        does not need a reordering), and its :attr:`replay` line repeats it.  Later decisions
        of a run that keeps fewer deviations may differ from the original run's; what is kept
        is the failure, not the path.  A nondeterministic failure, or one where no smaller
        set fails, is returned as it is.  Runs where the failure was found: in a worker
        process with its ``PYTHONHASHSEED``, when that differs from this process's.
        """
        runs = check_count("max_runs", max_runs, "how many runs the search may take")
        assert runs is not None
        if self.kind != "error":
            return self
        not_in_a_loop("Failure.shrink()")
        scenario = self._scenario
        args = (self.seed, self.perturb, scenario.options, self.deviation_indices)
        remote = self.hash_seed is not None and self.hash_seed != hash_seed()
        if remote and scenario.target is not None:
            with WorkerPool(1, self.hash_seed) as pool:
                found = pool.submit(
                    _shrink_in_worker, scenario.target, *args, self.error_type, runs
                ).result()
        else:
            found = _shrink(scenario.main, *args, self.error_type, runs)
        if found is None:
            return self
        keep, result = found
        assert result.error is not None
        return _failure(scenario, result, self.perturb, keep, self.hash_seed)

    def rerun(self, *, trace: str | os.PathLike[str] | None = None) -> Any:
        """:func:`replay` this failure (its seed, ``keep`` and options) in this process."""
        scenario = self._scenario
        return replay(
            scenario.main,
            self.seed,
            keep=self.keep,
            perturb=self.perturb,
            trace=trace,
            **scenario.options_dict(),
        )

    def summary(self) -> str:
        """``seed 17: AssertionError: two owners (9 seeded decisions)``.

        A shrunk failure says how few of its seeded decisions it still needs: ``(shrunk to 2
        of 9 seeded decisions)``.
        """
        message = self.message if len(self.message) <= 200 else self.message[:197] + "..."
        if self.keep is None:
            counted = f"{self.decisions} seeded decisions"
        else:
            counted = f"shrunk to {len(self.keep)} of {self.decisions} seeded decisions"
        return f"seed {self.seed}: {self.error}: {message} ({counted})"

    def __str__(self) -> str:
        return f"{self.summary()}\n  replay: {self.replay}"


def _failure(
    scenario: Scenario,
    result: RunResult,
    perturb: Perturb,
    keep: frozenset[int] | None,
    hash_seed: str | None,
    nondeterminism: str | None = None,
) -> Failure:
    error = result.error
    if nondeterminism is not None:
        kind: Kind = "nondeterministic"
        name = qualified = NONDETERMINISTIC
        message = f"two runs of seed {result.seed} differ: {nondeterminism}"
        text = error.traceback if error is not None else ""
    else:
        assert error is not None
        kind, name, qualified, message, text = (
            "error",
            error.name,
            error.type,
            error.message,
            error.traceback,
        )
    return Failure(
        seed=result.seed,
        perturb=perturb,
        keep=keep,
        kind=kind,
        error=name,
        message=message,
        deviations=len(result.deviations),
        decisions=result.decisions,
        deviation_indices=result.deviations,
        error_type=qualified,
        traceback=text,
        hash_seed=hash_seed,
        _scenario=scenario,
    )


# ------------------------------------------------------------------------- shrinking


def _shrink(
    main: Callable[[], Any],
    seed: int,
    perturb: Perturb,
    options: tuple[tuple[str, Any], ...],
    deviations: Sequence[int],
    error_type: str,
    max_runs: int,
) -> tuple[frozenset[int], RunResult] | None:
    """Delta debugging (ddmin) over ``deviations``: the smallest failing ``keep`` found."""
    tried: dict[frozenset[int], RunResult | None] = {}
    given = dict(options)

    def fails(keep: frozenset[int]) -> bool:
        if keep not in tried:
            if len(tried) >= max_runs:
                return False
            result = run_seed(main, seed, perturb, given, keep=keep)
            same = result.error is not None and result.error.type == error_type
            tried[keep] = result if same else None
        return tried[keep] is not None

    items = sorted(set(deviations))
    if fails(frozenset()):
        items = []
    granularity = 2
    while len(items) >= 2 and len(tried) < max_runs:
        size = math.ceil(len(items) / granularity)
        chunks = [items[i : i + size] for i in range(0, len(items), size)]
        reduced = False
        for chunk in chunks:
            if fails(frozenset(chunk)):
                items, granularity, reduced = chunk, 2, True
                break
        if not reduced and len(chunks) > 2:
            for index in range(len(chunks)):
                rest = [i for n, c in enumerate(chunks) if n != index for i in c]
                if fails(frozenset(rest)):
                    items, granularity, reduced = rest, max(granularity - 1, 2), True
                    break
        if not reduced:
            if granularity >= len(items):
                break
            granularity = min(len(items), granularity * 2)
    keep = frozenset(items)
    if keep == frozenset(deviations):
        return None  # nothing smaller fails
    result = tried.get(keep)
    if result is None:  # pragma: no cover - every accepted set was run and failed
        return None
    return keep, result


def _shrink_in_worker(
    target: str,
    seed: int,
    perturb: Perturb,
    options: tuple[tuple[str, Any], ...],
    deviations: Sequence[int],
    error_type: str,
    max_runs: int,
) -> tuple[frozenset[int], RunResult] | None:
    return _shrink(load_target(target), seed, perturb, options, deviations, error_type, max_runs)


# ------------------------------------------------------------------------- exploring


@dataclasses.dataclass(frozen=True)
class Exploration:
    """What :func:`explore` found: the seeds it ran, the failures, how long it took.

    ``failures`` are in seed order (at most ``max_failures``); ``passed`` counts the seeds
    that did not fail; ``stopped_early`` says that ``max_failures`` ended the exploration
    before every seed ran.  ``entropy`` reports which sources of entropy the runs reached
    besides the loop (``random``, ``os.urandom``) and the ``PYTHONHASHSEED`` they had.
    ``real_seconds`` is the wall-clock time of the whole exploration.  ``str()`` gives the
    summary with each failure's replay line.
    """

    seeds: tuple[int, ...]
    failures: tuple[Failure, ...]
    passed: int
    real_seconds: float
    perturb: Perturb
    check_determinism: bool
    processes: int | None
    entropy: EntropyReport
    stopped_early: bool
    scenario: str

    @property
    def failed(self) -> int:
        """How many seeds failed."""
        return len(self.failures)

    @property
    def ok(self) -> bool:
        """True when no seed failed."""
        return not self.failures

    def headline(self) -> str:
        count = len(self.seeds)
        where = f" in {self.processes} processes" if self.processes else ""
        checked = ", each run twice" if self.check_determinism else ""
        text = (
            f"explored {self.scenario} under {count:,} seed{'s' if count != 1 else ''} "
            f"(perturb={self.perturb}{checked}){where} in {self.real_seconds:.3g} s: "
            f"{self.failed:,} failed, {self.passed:,} passed"
        )
        if self.stopped_early:
            text += " (stopped at max_failures)"
        return text

    def lines(self, limit: int = _SHOWN_FAILURES) -> Iterator[str]:
        yield self.headline()
        yield "entropy: " + "; ".join(self.entropy.lines())
        shown_failures = self.failures[:limit]
        for failure in shown_failures:
            yield failure.summary()
            yield f"  replay: {failure.replay}"
        if len(self.failures) > len(shown_failures):
            yield f"... and {len(self.failures) - len(shown_failures):,} more failures"

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def __repr__(self) -> str:
        return (
            f"<Exploration {self.scenario} seeds={len(self.seeds)} failed={self.failed} "
            f"passed={self.passed} real={self.real_seconds:.3g}s>"
        )


def explore(
    main: Callable[[], Any],
    seeds: Iterable[int] = range(100),
    *,
    perturb: Perturb = "timers",
    check_determinism: bool = False,
    processes: int | None = None,
    max_failures: int | None = None,
    **loop_options: Any,
) -> Exploration:
    """Run the scenario ``main`` under each seed; return the failures and a report.

    ``main`` is a function taking no arguments that returns a coroutine: the scenario, an
    ``async def`` that sets up the system, drives it and asserts.  Each seed runs
    ``virtualtime.run(main(), seed=seed, perturb=perturb, **loop_options)`` with the
    program's entropy seeded too (see the module); a run fails when it raises any
    ``Exception`` (``DeadlockError``, ``RunawayError`` and a failed assertion alike) or lets
    ``asyncio.CancelledError`` out.  ``KeyboardInterrupt`` stops the exploration.

    ``check_determinism=True`` runs each seed twice, with the loop's history on, and reports a
    seed whose two runs differ as a :class:`Failure` of kind ``"nondeterministic"``.
    ``processes=N`` runs the seeds in N spawned worker processes (``main`` must be a
    module-level function); the failures are the same as in this process, given a fixed
    ``PYTHONHASHSEED``.  ``max_failures`` stops after that many failures (the first ones in
    seed order).  Loop options (``start``, ``patch_time``, ``deadlock_timeout``...) are
    passed to every run.  A :func:`virtualtime.configure` block around the exploration
    reaches every run with its options and hooks, except ``seed`` and ``perturb``: each run's
    own win (the run's loop is built under them, innermost).
    """
    scenario = make_scenario(main, loop_options, "explore()")
    seed_list = check_seeds(seeds)
    perturb = check_perturb(perturb)
    check = check_bool("check_determinism", check_determinism)
    workers = check_count("processes", processes, "how many worker processes")
    limit = check_count("max_failures", max_failures, "stop after that many failures")
    if workers is not None and scenario.target is None:
        raise UsageError(
            f"explore(processes={workers}) needs a scenario a worker process can import: a "
            f"function defined at the top level of a module or file, not {shown(main)} (a "
            "lambda, a closure, a partial, or a function typed at the prompt); define it at "
            "module level, or leave processes=None"
        )
    not_in_a_loop("explore()")
    began = time.perf_counter()
    if workers is None:
        hash_seed_used = hash_seed()
        outcomes = _explore_here(scenario.main, seed_list, perturb, scenario.options, check, limit)
    else:
        assert scenario.target is not None
        hash_seed_used = hash_seed() or WORKER_HASH_SEED
        outcomes = _explore_in_processes(
            scenario.target, seed_list, perturb, scenario.options, check, limit, workers,
            hash_seed_used,
        )  # fmt: skip
    failures: list[Failure] = []
    totals: tuple[dict[str, int], dict[str, int]] = ({}, {})
    ran = 0
    try:
        for result, nondeterminism in outcomes:
            ran += 1
            add_counts(totals, dict(result.entropy))
            if nondeterminism is not None or result.error is not None:
                failures.append(
                    _failure(scenario, result, perturb, None, hash_seed_used, nondeterminism)
                )
                if limit is not None and len(failures) >= limit:
                    break
    except KeyboardInterrupt as interrupt:
        # Interrupted here, between two outcomes: the pool of workers hears of it (it then
        # stops at once rather than wait for the chunks running), and the interrupt goes on.
        with contextlib.suppress(KeyboardInterrupt):
            outcomes.throw(interrupt)
        raise
    finally:
        outcomes.close()  # the pool is shut down now, not when the generator is collected
    calls, runs = totals
    report = EntropyReport(
        {**dict.fromkeys(SOURCES, 0), **calls},
        {**dict.fromkeys(SOURCES, 0), **runs},
        hash_seed_used,
    )
    return Exploration(
        seeds=seed_list[:ran],
        failures=tuple(failures),
        passed=ran - len(failures),
        real_seconds=time.perf_counter() - began,
        perturb=perturb,
        check_determinism=check,
        processes=workers,
        entropy=report,
        stopped_early=ran < len(seed_list),
        scenario=scenario.name,
    )


_Outcome = tuple[RunResult, str | None]


def _explore_seed(
    main: Callable[[], Any],
    seed: int,
    perturb: Perturb,
    options: Mapping[str, Any],
    check: bool,
) -> _Outcome:
    first = run_seed(main, seed, perturb, options, fingerprint=check)
    if not check:
        return first, None
    second = run_seed(main, seed, perturb, options, fingerprint=True)
    return dataclasses.replace(first, fingerprint=None), difference(first, second)


def _explore_here(
    main: Callable[[], Any],
    seeds: Sequence[int],
    perturb: Perturb,
    options: tuple[tuple[str, Any], ...],
    check: bool,
    limit: int | None,
) -> Generator[_Outcome, None, None]:
    given = dict(options)
    failed = 0
    for seed in seeds:
        outcome = _explore_seed(main, seed, perturb, given, check)
        yield outcome
        if outcome[1] is not None or outcome[0].error is not None:
            failed += 1
            if limit is not None and failed >= limit:
                return


def _explore_chunk(
    target: str,
    seeds: Sequence[int],
    perturb: Perturb,
    options: tuple[tuple[str, Any], ...],
    check: bool,
    limit: int | None,
) -> list[_Outcome]:
    """A worker's share: its seeds, in order (stopping after ``limit`` failures of its own)."""
    return list(_explore_here(load_target(target), seeds, perturb, options, check, limit))


def _explore_in_processes(
    target: str,
    seeds: Sequence[int],
    perturb: Perturb,
    options: tuple[tuple[str, Any], ...],
    check: bool,
    limit: int | None,
    workers: int,
    hash_seed: str,
) -> Generator[_Outcome, None, None]:
    load_target(target)  # a scenario that cannot be loaded fails here, not in every worker
    size = max(1, min(50, math.ceil(len(seeds) / (workers * 4))))
    chunks = [seeds[i : i + size] for i in range(0, len(seeds), size)]
    with WorkerPool(workers, hash_seed) as pool:
        futures = [
            pool.submit(_explore_chunk, target, chunk, perturb, options, check, limit)
            for chunk in chunks
        ]
        try:
            for future in futures:
                yield from future.result()
        finally:
            for future in futures:
                future.cancel()
