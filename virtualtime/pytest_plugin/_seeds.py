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
  wins over it.  A test on trio (anyio's trio backend) is run under each seed too, but there
  the seed reaches only ``random`` and ``os.urandom``: trio orders same-instant wake-ups
  with a generator of its own, which no seed fixes, so a trio test's run is not a function
  of its seed, and its failure is reported without a replay command.
* **How the seed reaches the loop.**  pytest-asyncio picks a test's loop factory once per
  test *function*, before this parametrization; the factory (:class:`~._asyncio_factories.
  _LoopFactory`) asks :func:`current_seed` when it builds the loop, which the plugin sets for
  each test while it is set up, run and torn down.  anyio's runner gets the seed among the
  test's options.  A loop of a wider ``loop_scope`` is built once, for the first test's seed:
  the test whose seed it is not fails, saying so (use the default function loop scope).
* **The rest of the entropy.**  While a seeded test runs, ``random`` is seeded with the seed
  and ``os.urandom`` (``uuid4``, :mod:`secrets`) draws from it, as in
  :func:`virtualtime.net.explore` (see :mod:`virtualtime.net._entropy`) -- salted with the
  test's node id, so that tests run under one seed do not draw the same bytes (the same
  ``uuid4()`` keys); both are put back afterwards.
* **Saying how to replay.**  A seeded test that fails gets a report section, and the end of
  the session a summary, with its seed and the command that runs it again: the test's node
  id, the options of the command line that ran it (``--virtualtime``, ``-p``, ``-c``...: what
  made the test virtual and selected it) without its paths and seeds, and the seed --
  ``pytest 'tests/test_x.py::test_y[seed=17]' --virtualtime --virtualtime-seed=17``.  The
  summary is built from the test reports, so under pytest-xdist the controller prints it.

Part of ``testing``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trio``,
``net``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

import collections
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
    _is_anyio_test,
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

SECTION: Final = "virtualtime"
"""The name of the report section a failed seeded test gets (and the summary reads)."""

_SEED_OPTIONS: Final = ("--virtualtime-seed", "--virtualtime-seeds", "--virtualtime-perturb")
"""The command line's options a replay command replaces with the test's own seed."""


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
        with SeededEntropy(plan.seed, salt=item.nodeid):
            yield
    finally:
        _CURRENT.reset(token)


def replay_command(item: pytest.Item, plan: SeedPlan) -> str:
    """The command that runs ``item`` again under its seed, from where pytest was started.

    The test's node id, the options the session was started with (what made the test virtual
    and selected it: ``--virtualtime``, ``-p``, ``-c``, ``-m``...), less its positional
    arguments (the node id replaces them) and its seed options, and the test's seed.
    """
    config = item.config
    path, sep, rest = item.nodeid.partition("::")
    try:
        where = os.path.relpath(config.rootpath / path, config.invocation_params.dir)
    except ValueError:  # another drive (Windows)
        where = str(config.rootpath / path)
    words = ["pytest", f"{where}{sep}{rest}", *_carried_options(config)]
    if not plan.from_mark:
        words.append(f"--virtualtime-seed={plan.seed}")
        if plan.perturb != "timers":
            words.append(f"--virtualtime-perturb={plan.perturb}")
    return " ".join(shlex.quote(word) for word in words)


def _carried_options(config: pytest.Config) -> list[str]:
    """The session's command-line arguments without its positional ones and its seeds."""
    args = [str(arg) for arg in config.invocation_params.args]
    positional = collections.Counter(str(arg) for arg in config.getoption("file_or_dir") or ())
    dropped: set[int] = set()
    for value, count in positional.items():
        places = [index for index, arg in enumerate(args) if arg == value]
        # The same text may also be an option's value (``-k test_x test_x``): a place right
        # after an option with no ``=`` may be that, so the others are taken first.
        places.sort(key=lambda i: i > 0 and args[i - 1][:1] == "-" and "=" not in args[i - 1])
        dropped.update(places[:count])
    kept: list[str] = []
    skip = False
    for index, arg in enumerate(args):
        if skip or index in dropped:
            skip = False
            continue
        name, equals, _ = arg.partition("=")
        if name in _SEED_OPTIONS:
            skip = not equals  # --virtualtime-seed 17: its value too
            continue
        kept.append(arg)
    return kept


def on_trio(item: pytest.Item) -> bool:
    """Whether ``item`` runs on trio (anyio's trio backend), where a seed fixes no schedule."""
    if not _is_anyio_test(item):
        return False
    backend = getattr(item, "funcargs", {}).get("anyio_backend")
    if backend is None:
        backend = getattr(getattr(item, "callspec", None), "params", {}).get("anyio_backend")
    if isinstance(backend, (tuple, list)) and backend:
        backend = backend[0]
    return backend == "trio"


def describe(item: pytest.Item, plan: SeedPlan) -> str:
    """``seed 17, perturb=timers -- replay: pytest ...``, for a failed seeded test."""
    source = " (the mark's)" if plan.from_mark else ""
    if on_trio(item):
        return (
            f"seed {plan.seed}{source}, on trio -- no replay: the seed fixed only random and "
            "os.urandom, not trio's own schedule (trio orders same-instant wake-ups with a "
            "generator of its own), so the run may not repeat"
        )
    return (
        f"seed {plan.seed}{source}, perturb={plan.perturb} -- replay: {replay_command(item, plan)}"
    )


def report_failure(item: pytest.Item, report: pytest.TestReport) -> None:
    """Add the seed and its replay command to a failed seeded test's report."""
    plan = plan_of(item)
    if plan is None or not report.failed:
        return
    report.sections.append((SECTION, f"virtualtime: {describe(item, plan)}"))


class FailedSeeds:
    """The failed seeded tests of a session, read from the reports as they are logged.

    Registered as a plugin for the session (:data:`PLUGIN_NAME`).  It reads the report
    section :func:`report_failure` added -- where the report was made, and, under
    pytest-xdist, on the controller, which receives the workers' reports with their sections
    -- and lists them at the end of the session.
    """

    def __init__(self) -> None:
        self.lines: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not report.failed:
            return
        for name, text in report.sections:
            if name == SECTION:
                line = f"{report.nodeid}: {text.removeprefix('virtualtime: ')}"
                if line not in self.lines:
                    self.lines.append(line)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.lines:
            return
        terminalreporter.section("virtualtime seeds that failed", sep="=", yellow=True)
        for line in self.lines:
            terminalreporter.line(line)


PLUGIN_NAME: Final = "virtualtime-failed-seeds"
"""The name :class:`FailedSeeds` is registered under."""


def register(config: pytest.Config) -> None:
    """Register the session's :class:`FailedSeeds` (once)."""
    if config.pluginmanager.get_plugin(PLUGIN_NAME) is None:
        config.pluginmanager.register(FailedSeeds(), name=PLUGIN_NAME)
