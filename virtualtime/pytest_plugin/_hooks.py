"""The plugin's pytest hooks, in the order pytest calls them, and the set-up checks.

Owns every ``pytest_*`` function pytest calls on the plugin: the options and ini values
(``pytest_addoption``), the marker and the session's switches (``pytest_configure`` /
``pytest_unconfigure``), collection (``pytest_generate_tests``, around pytest-asyncio's),
set-up with its checks (a virtual test nobody runs, a synchronous test, looptime on the same
test), the protocol around anyio tests, the call under the horizon watch, the deadlock report
and teardown.  Each hook is a short dispatcher to the module that holds the work; pytest finds
them because the plugin's face imports them (the face is the ``pytest11`` entry point).  The
one exception is the summary of the seeds that failed: ``_seeds.FailedSeeds``, a plugin
object ``pytest_configure`` registers, which reads the reports as they are logged (so that
under pytest-xdist the controller has them).

Part of ``testing``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trio``,
``net``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

from ._anyio_runner import _ANYIO_PATCHED_KEY, _ANYIO_PLAN, _AnyioPatch, _AnyioPlan
from ._asyncio_factories import (
    _FACTORIES_PLUGIN_NAME,
    _check_pytest_asyncio_test,
    _factories,
)
from ._deadlocks import _deadlock_of, _settings_or_none, deadlock_report
from ._seeds import (
    parametrize,
    plan_of,
    register,
    report_failure,
    seed_options,
    seeded_test,
)
from ._settings import (
    _MARKER_HELP,
    _NOT_VIRTUAL,
    MARKER,
    _command_line_seeds,
    _default_max_time,
    _global_switch,
    _is_anyio_test,
    _is_async_test,
    _is_pytest_asyncio_test,
    _own_mark,
    _read_settings,
    _settings,
)
from ._trio import _PYTEST_TRIO_KEY, _guard_pytest_trio
from ._watch import _WATCHES, _say, _told, _Watch, _watch_pytest_asyncio_test


def pytest_addoption(parser: pytest.Parser) -> None:
    from .._shared._units import count_arg  # here: importing the plugin stays light

    group = parser.getgroup("virtualtime", "virtual time for async tests")
    group.addoption(
        "--virtualtime",
        action="store_true",
        default=False,
        dest="virtualtime",
        help="run every async test (pytest-asyncio and anyio) in virtual time, except those "
        "marked virtualtime(False)",
    )
    group.addoption(
        "--virtualtime-max-time",
        dest="virtualtime_max_time",
        default=None,
        metavar="T",
        help="virtual horizon of each virtual test: seconds or a duration (90s, 36h, 2d), or "
        "none; past it the test fails (default 1d; a mark's max_time= wins)",
    )
    group.addoption(
        "--virtualtime-seeds",
        dest="virtualtime_seeds",
        type=count_arg(1),
        default=None,
        metavar="N",
        help="run each virtual async test under seeds 0 to N-1 (ids [seed=0]...): each seed "
        "orders same-instant timers its own way; a failure prints the command that replays it",
    )
    group.addoption(
        "--virtualtime-seed",
        dest="virtualtime_seed",
        type=count_arg(0),
        default=None,
        metavar="S",
        help="run each virtual async test under seed S only (replay a failing seed)",
    )
    group.addoption(
        "--virtualtime-perturb",
        dest="virtualtime_perturb",
        choices=("timers", "ready"),
        default=None,
        help="what the seeds reorder: same-instant timers (default), or also the task steps "
        "made ready in one loop round",
    )
    parser.addini(
        "virtualtime",
        type="bool",
        default=False,
        help="run every async test in virtual time (like --virtualtime)",
    )
    parser.addini(
        "virtualtime_max_time",
        type="string",
        default="",
        help="virtual horizon of each virtual test (like --virtualtime-max-time; default 1d)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARKER}{_MARKER_HELP[len(MARKER) :]}")
    _default_max_time(config)  # a bad --virtualtime-max-time is a usage error at once
    _command_line_seeds(config)  # and so is giving both --virtualtime-seeds and -seed
    register(config)  # the summary of the seeds that failed
    if _global_switch(config):
        state = _factories(config)
        if state.usable:
            config.pluginmanager.register(state.plugin, name=_FACTORIES_PLUGIN_NAME)
            state.permanent = True


def pytest_unconfigure(config: pytest.Config) -> None:
    if config.stash.get(_ANYIO_PATCHED_KEY, False):
        config.stash[_ANYIO_PATCHED_KEY] = False
        _AnyioPatch.release()


@pytest.hookimpl(wrapper=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> Generator[None, None, None]:
    # Runs around pytest-asyncio's own pytest_generate_tests, which asks for loop factories:
    # validate the marks first, and offer the factory while a virtual test is collected.
    # With seeds on the command line, a virtual test is then run under each (last, so that
    # its id reads test[asyncio-seed=3]).
    definition = metafunc.definition
    if definition.get_closest_marker(MARKER) is None:
        result = yield
        if _global_switch(metafunc.config) and _command_line_seeds(metafunc.config):
            parametrize(metafunc, _read_settings(definition))
        return result
    settings = _read_settings(definition)
    if not settings.virtual:
        return (yield)
    with _factories(metafunc.config).registered(metafunc.config):
        result = yield
    parametrize(metafunc, settings)
    return result


def _check_runnable(item: pytest.Item) -> None:
    """Fail a virtual test that neither pytest-asyncio nor anyio runs, saying why."""
    if _is_anyio_test(item):
        if not item.config.stash.get(_ANYIO_PATCHED_KEY, False):
            pytest.fail(
                f"{item.nodeid} is marked {MARKER}, but this version of anyio's pytest plugin "
                "has no get_runner() to give its runner a virtual loop or clock (anyio 4.4 or "
                "later works)",
                pytrace=False,
            )
        return
    if _own_mark(item):
        if not _is_async_test(item):
            pytest.fail(
                f"{item.nodeid} is marked {MARKER}, but it is a synchronous test, so the mark "
                f"would do nothing: @pytest.mark.{MARKER} runs an async test (one that "
                "pytest-asyncio or anyio runs) on a virtual clock.  In a synchronous test, "
                "run the async code in virtual time yourself (virtualtime.run(main()), or a "
                "virtualtime.new_event_loop() you drive with step()/evolve()), and drop the mark",
                pytrace=False,
            )
        pytest.fail(
            f"{item.nodeid} is marked {MARKER}, but it is an async test that neither "
            "pytest-asyncio nor anyio runs, so the mark would do nothing.  Mark it "
            "@pytest.mark.asyncio (or set asyncio_mode = auto) or @pytest.mark.anyio; with "
            "pytest-trio, use a fixture that returns virtualtime.trio.VirtualClock() instead",
            pytrace=False,
        )


def _looptime_enabled(item: pytest.Item) -> bool:
    """Whether looptime's plugin (if loaded) would also fake this test's loop time.

    Mirrors looptime's own rule: its marks, closest last, then ``--looptime`` /
    ``--no-looptime``.
    """
    config = item.config
    if not config.pluginmanager.has_plugin("looptime_plugin"):
        return False
    try:
        flag = config.getoption("looptime")
    except ValueError:  # pragma: no cover - the plugin is loaded, so its option exists
        return False
    marks = list(item.iter_markers("looptime"))
    enabled = bool((marks or flag is True) and flag is not False)
    for mark in reversed(marks):
        enabled = bool(mark.args[0]) if mark.args else enabled
    return enabled


def _check_not_looptime(item: pytest.Item) -> None:
    if not _looptime_enabled(item):
        return
    how = "marked looptime" if item.get_closest_marker("looptime") else "under --looptime"
    pytest.fail(
        f"{item.nodeid} runs in virtual time ({MARKER}) and is also {how}: looptime would "
        "patch the clock of the very loop virtualtime drives, and the test would see a mix of "
        "both clocks (wrong times, timers firing out of order).  Use one of them: drop the "
        f"looptime mark (virtualtime already makes sleeps instant and exact), or mark the test "
        f"@pytest.mark.{MARKER}(False)",
        pytrace=False,
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    settings = _settings(item)
    if settings.virtual:
        _check_not_looptime(item)
    if not _is_pytest_asyncio_test(item):
        if settings.virtual:
            _check_runnable(item)
        result = yield
        _guard_pytest_trio(item)  # its fixtures are set up now: is the clock among them?
        return result
    state = _check_pytest_asyncio_test(item, settings)
    needed = settings.virtual or state.after_virtual
    state.after_virtual = settings.virtual
    if not needed:
        return (yield)
    with state.registered(item.config):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    plan: _AnyioPlan | None = None
    if _is_anyio_test(item):
        try:
            settings = _settings(item)
        except pytest.fail.Exception:  # a bad mark added late: set-up reports it
            settings = _NOT_VIRTUAL
        if settings.virtual:
            plan = _AnyioPlan(item.nodeid, seed_options(item, settings.options))
            if not item.config.stash.get(_ANYIO_PATCHED_KEY, False):
                # Failure leaves the flag unset; pytest_runtest_setup then fails the test.
                item.config.stash[_ANYIO_PATCHED_KEY] = _AnyioPatch.acquire()
    token = _ANYIO_PLAN.set(plan)
    try:
        with seeded_test(item):
            return (yield)
    finally:
        _ANYIO_PLAN.reset(token)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    try:
        settings = _settings(item)
    except pytest.fail.Exception:  # reported at set-up
        return (yield)
    runner = _is_pytest_asyncio_test(item) or (_is_anyio_test(item) and _is_async_test(item))
    if not settings.virtual or not runner:
        return (yield)
    seed = plan_of(item)
    watch = _WATCHES[item.nodeid] = _Watch(
        item.nodeid, settings.max_time, None if seed is None else seed.seed
    )
    undo = _watch_pytest_asyncio_test(item, watch) if _is_pytest_asyncio_test(item) else None
    try:
        result = yield
    except KeyboardInterrupt:
        if watch.clock is not None:
            _say(item.config, watch.interrupted())
        raise
    except BaseException as exc:
        if watch.reached is not None:
            raise watch.failure() from None
        outcome = _told(watch, exc if watch.dropped is None else watch.dropped)
        if outcome is not exc:
            raise outcome from None
        raise
    finally:
        _WATCHES.pop(item.nodeid, None)
        if undo is not None:
            undo()
    if watch.reached is not None:
        raise watch.failure()
    if watch.dropped is not None:  # the test ended before the cancellation reached it
        raise _told(watch, watch.dropped) from None
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    excinfo = call.excinfo
    if excinfo is None or not report.failed:
        return report
    report_failure(item, report)
    if not (_settings_or_none(item) or item.stash.get(_PYTEST_TRIO_KEY, None) is not None):
        return report
    if item.config.getoption("tbstyle", "auto") in ("long", "native"):
        return report
    error = _deadlock_of(excinfo.value)
    if error is None:
        return report
    report.longrepr = deadlock_report(error)
    return report


def pytest_runtest_teardown(item: pytest.Item) -> None:
    undo = item.stash.get(_PYTEST_TRIO_KEY, None)
    if undo is not None:
        undo()
