"""Seeds for virtual tests: exploring under many, replaying one, and saying how to replay.

Owns what ``--virtualtime-seeds N``, ``--virtualtime-seed S`` and ``--virtualtime-perturb``
do, and what a ``seed=`` on the mark adds to the loop option it already is:

* **Which tests.**  Every test that runs in virtual time through the plugin -- marked, or
  under ``--virtualtime`` -- and is async (pytest-asyncio's, or anyio's) is parametrized with
  the command line's seeds, ids ``[seed=0]``, ``[seed=1]``...  ``--virtualtime-seed 17`` runs
  each under seed 17 alone, with the same id, so the line a failure printed selects the same
  test.  A test whose mark sets ``seed=`` keeps that seed (the mark wins, as for every
  option): it is pinned, typically as the regression test of a seed that once failed.
  ``--virtualtime-perturb ready`` applies to the command line's seeds; a mark's ``perturb=``
  wins over it.  A test on trio (anyio's trio backend) runs each seed the same way: trio
  orders same-instant wake-ups at random itself, and a seed does not reach it.
* **How the seed reaches the loop.**  pytest-asyncio picks a test's loop factory once per
  test *function*, before this parametrization; the factory (:class:`~._asyncio_factories.
  _LoopFactory`) asks :func:`current_seed` when it builds the loop, which the plugin sets for
  each test while it is set up, run and torn down.  anyio's runner gets the seed among the
  test's options.  A loop of a wider ``loop_scope`` is built once, for the first test's seed:
  the test whose seed it is not fails, saying so (use the default function loop scope).
* **The rest of the entropy.**  While a seeded test runs, ``random`` is seeded with the seed
  and ``os.urandom`` (``uuid4``, :mod:`secrets`) draws from it, as in
  :func:`virtualtime.net.explore` (see :mod:`virtualtime.net._entropy`); both are put back
  afterwards.
* **Saying how to replay.**  A seeded test that fails gets a report section, and the end of
  the session a summary, with its seed and the command that runs it again:
  ``pytest 'tests/test_x.py::test_y[seed=17]' --virtualtime-seed=17``.

Part of ``testing``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trio``,
``net``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
import shlex
from collections.abc import Iterator
from typing import Any, Final

import pytest

from ._settings import (
    _command_line_perturb,
    _command_line_seeds,
    _is_async_test,
    _Settings,
    _settings,
)

SEED_FIXTURE: Final = "_virtualtime_seed"
"""The (hidden) fixture the command line's seeds parametrize; its value is the test's seed."""


@dataclasses.dataclass(frozen=True)
class SeedPlan:
    """The seed a test runs under, what it perturbs, and where the seed came from."""

    seed: int
    perturb: str
    from_mark: bool


_CURRENT: Final = contextvars.ContextVar[SeedPlan | None]("virtualtime_seed_plan", default=None)
_PLAN_KEY: Final = pytest.StashKey["SeedPlan | None"]()
_FAILED_KEY: Final = pytest.StashKey[list[str]]()


def current_seed() -> SeedPlan | None:
    """The seed of the test being set up, run or torn down (None: it has none)."""
    return _CURRENT.get()


@pytest.fixture
def _virtualtime_seed(request: pytest.FixtureRequest) -> int:
    """The seed the command line gave this test (``--virtualtime-seeds`` / ``-seed``)."""
    return int(request.param)


def parametrize(metafunc: pytest.Metafunc, settings: _Settings) -> None:
    """Run a virtual async test under each of the command line's seeds (if any)."""
    seeds = _command_line_seeds(metafunc.config)
    if seeds is None or not settings.virtual or dict(settings.options).get("seed") is not None:
        return
    if not _is_async_test(metafunc.definition):
        return
    if SEED_FIXTURE not in metafunc.fixturenames:
        metafunc.fixturenames.append(SEED_FIXTURE)
    metafunc.parametrize(SEED_FIXTURE, seeds, ids=[f"seed={seed}" for seed in seeds], indirect=True)


def plan_of(item: pytest.Item) -> SeedPlan | None:
    """The seed ``item`` runs under (cached on it), or None."""
    try:
        return item.stash[_PLAN_KEY]
    except KeyError:
        pass
    plan: SeedPlan | None = None
    try:
        settings = _settings(item)
    except pytest.fail.Exception:  # a bad mark: set-up reports it
        settings = None
    if settings is not None and settings.virtual:
        options = dict(settings.options)
        if options.get("seed") is not None:
            plan = SeedPlan(int(options["seed"]), str(options.get("perturb", "timers")), True)
        else:
            callspec = getattr(item, "callspec", None)
            seed = getattr(callspec, "params", {}).get(SEED_FIXTURE)
            if seed is not None:
                perturb = options.get("perturb") or _command_line_perturb(item.config)
                plan = SeedPlan(int(seed), str(perturb), False)
    item.stash[_PLAN_KEY] = plan
    return plan


def seed_options(
    item: pytest.Item, options: tuple[tuple[str, Any], ...]
) -> tuple[tuple[str, Any], ...]:
    """``options`` with the command line's seed of ``item`` added (for anyio's runner)."""
    plan = plan_of(item)
    if plan is None or plan.from_mark:
        return options
    given = dict(options)
    given["seed"] = plan.seed
    given["perturb"] = plan.perturb
    return tuple(sorted(given.items()))


@contextlib.contextmanager
def seeded_test(item: pytest.Item) -> Iterator[None]:
    """While ``item`` is set up, run and torn down: its seed for the loop, and its entropy."""
    plan = plan_of(item)
    if plan is None:
        yield
        return
    from ..net._entropy import SeededEntropy

    token = _CURRENT.set(plan)
    try:
        with SeededEntropy(plan.seed):
            yield
    finally:
        _CURRENT.reset(token)


def replay_command(item: pytest.Item, plan: SeedPlan) -> str:
    """The command that runs ``item`` again under its seed, from where pytest was started."""
    config = item.config
    path, sep, rest = item.nodeid.partition("::")
    try:
        where = os.path.relpath(config.rootpath / path, config.invocation_params.dir)
    except ValueError:  # another drive (Windows)
        where = str(config.rootpath / path)
    words = ["pytest", f"{where}{sep}{rest}"]
    if not plan.from_mark:
        words.append(f"--virtualtime-seed={plan.seed}")
        if plan.perturb != "timers":
            words.append(f"--virtualtime-perturb={plan.perturb}")
    return " ".join(shlex.quote(word) for word in words)


def describe(item: pytest.Item, plan: SeedPlan) -> str:
    """``seed 17 (perturb=timers) -- replay: pytest ...``, for a failed seeded test."""
    source = " (the mark's)" if plan.from_mark else ""
    return (
        f"seed {plan.seed}{source}, perturb={plan.perturb} -- replay: {replay_command(item, plan)}"
    )


def report_failure(item: pytest.Item, report: pytest.TestReport) -> None:
    """Add the seed and its replay command to a failed seeded test's report."""
    plan = plan_of(item)
    if plan is None or not report.failed:
        return
    text = describe(item, plan)
    report.sections.append(("virtualtime", f"virtualtime: {text}"))
    failed = item.config.stash.setdefault(_FAILED_KEY, [])
    line = f"{item.nodeid}: {text}"
    if line not in failed:
        failed.append(line)


def terminal_summary(reporter: Any, config: pytest.Config) -> None:
    """List every failed seeded test with its replay command at the end of the session."""
    failed = config.stash.get(_FAILED_KEY, [])
    if not failed:
        return
    reporter.section("virtualtime seeds that failed", sep="=", yellow=True)
    for line in failed:
        reporter.line(line)
