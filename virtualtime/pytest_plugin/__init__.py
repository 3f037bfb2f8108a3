"""pytest plugin: run async tests in virtual time with one marker.

Loaded automatically (entry point ``pytest11: virtualtime``) and inert unless asked: it does
nothing to a test that is not marked ``@pytest.mark.virtualtime`` while neither
``--virtualtime`` nor the ini option ``virtualtime = true`` is set.  Importing it loads neither
trio, anyio nor pytest-asyncio; each integration is imported inside the hook that needs it, so a
suite without pytest-asyncio, anyio or trio keeps every test and fixture working.

Asking for virtual time
-----------------------
``@pytest.mark.virtualtime`` on a test function, a class or a module (``pytestmark``) runs the
async tests it covers in virtual time.  ``--virtualtime`` (or ``virtualtime = true`` in the ini
file) does it for every async test; ``@pytest.mark.virtualtime(False)`` opts one test, class or
module out again.  Keyword arguments are loop options (``start``, ``autojump``,
``autojump_threshold``, ``rate``, ``history``, ``deadlock_timeout``,
``max_rounds_per_instant``, ``patch_time``, ``wall_start``; see
:class:`virtualtime.VirtualEventLoop`).

**Merge rule.**  Marks are read from the closest (function, including ``pytest.param(...,
marks=...)``) to the farthest (class, then module).  Each option comes from the closest mark
that sets it, so a module can set ``history=100`` and one test add ``start=50``.  Whether the
test is virtual at all comes from the closest mark: a mark with no positional argument means
yes, ``virtualtime(False)`` means no.  With no mark at all, ``--virtualtime`` / the ini option
decide.  Options are validated at collection: an unknown option, a bad value or a bad
positional argument is a collection error naming the test, the option and the rule (a misspelt
option also gets the closest real one: "did you mean autojump?").  The mark is for async tests;
on a synchronous test it is a set-up error that says what to do instead.

The horizon, interrupts, deadlocks
----------------------------------
``max_time`` (the plugin's own option, not the loop's) is how much virtual time the test
function may take: past it the test is stopped and fails with the virtual time it reached, the
timers fired (on trio: the clock's jumps), and the likely cause -- a deadline read from a clock
the loop does not drive.  Seconds or a duration (``"36h"``); ``None`` means no horizon.  The
default is :data:`DEFAULT_MAX_TIME` (one virtual day), replaced by the ini option
``virtualtime_max_time`` and, above it, by ``--virtualtime-max-time``; a mark's ``max_time``
wins over both.  How it is watched without a timer of its own (which would change ``peek()``,
``step()`` and deadlock detection) is told in :class:`_Watch`.  When a virtual test is
interrupted -- Ctrl-C, or pytest-timeout's signal method -- the same facts are printed.  A
pytest outcome raised in a loop callback (``pytest.fail()``, or pytest-timeout's alarm landing
there), which asyncio would only log, ends the test (see :meth:`_Watch._keep_outcomes`).
A test that deadlocks fails with a short report, alike on asyncio and trio
(:func:`deadlock_report`); ``--tb=long`` keeps the full traceback.  A test that looptime would
also fake (its mark, or ``--looptime``) fails at set-up: two fake clocks on one loop give wrong
results.

How it plugs in
---------------
* **pytest-asyncio** (1.4 or later) asks plugins for loop factories through its
  ``pytest_asyncio_loop_factories(config, item)`` hook: ``firstresult``, called once per test
  function while it is collected (``item`` is the function's definition, before
  parametrization); the answer must be a non-empty mapping of names to zero-argument loop
  factories, and pytest-asyncio parametrizes the test with them at the test's loop scope.  The
  plugin answers ``{"virtualtime": factory}`` for virtual tests.  Because pytest-asyncio
  demands an answer for *every* test once any plugin implements the hook -- and parametrizing a
  test that way makes pytest-asyncio rebuild its wider-loop-scope fixtures for each test --
  the implementation is registered only while a virtual test is collected or set up (see
  ``_FactoriesState``), so tests that are not virtual keep their loop and their fixtures exactly
  as without the plugin.  (With ``--virtualtime`` it stays registered, and a test opted out
  with ``virtualtime(False)`` gets another plugin's answer or ``asyncio.new_event_loop``, the
  very loop pytest-asyncio would have made.)  Factories compare equal for equal options, so
  tests with the same options share a loop of a wider ``loop_scope``.  The deprecated
  ``event_loop_policy`` fixture is left alone.  As pytest-asyncio picks the loop per test
  function, a virtualtime mark inside ``pytest.param(...)`` (or one added after collection)
  cannot change it: that is a set-up error for pytest-asyncio tests, and works for anyio tests.
* **anyio's pytest plugin** runs a test with one shared test runner, built from the test's
  ``anyio_backend`` -- ``"asyncio"``, ``"trio"`` or ``(name, options)``, parametrized at module
  scope by default.  That value is cached per module, so it cannot be changed for one test, and
  the ``anyio_backend_options`` fixture is only informative (anyio's runner does not read it).
  anyio has no hook for its runner either, so the plugin wraps the one function that builds
  it, ``anyio.pytest_plugin.get_runner(backend_name, backend_options)``, from the first virtual
  anyio test to the end of the session.  While a virtual test is set up, run or torn down, the
  wrapper adds ``loop_factory`` (a :class:`~virtualtime.VirtualEventLoop`) to ``("asyncio",
  options)`` and ``clock`` (a :class:`virtualtime.trio.VirtualClock`) to ``("trio",
  options)``; otherwise it passes everything through.  The backends the suite selects are kept,
  and so is what tests see in ``anyio_backend``.  On trio, tests and async fixtures run guarded,
  so a deadlock raises :class:`~virtualtime.DeadlockError` instead of hanging.  Should a future
  anyio drop ``get_runner``, virtual anyio tests fail with a clear error, never silently.

Fixtures and loops
------------------
With pytest-asyncio, an async fixture whose ``loop_scope`` equals the test's runs on the test's
virtual loop; with a class, module, package or session loop scope on both, every test of that
scope with equal options shares the one loop (and its clock) with the fixture.  A fixture of a
*wider* loop scope than its test also runs on a virtual loop built with the test's factory, but
pytest-asyncio ties that loop to the test's factory parameter: it tears the fixture down after
the test and builds it again for the next one.  To share a virtual fixture, give the tests its
loop scope (``pytestmark = [pytest.mark.asyncio(loop_scope="module"),
pytest.mark.virtualtime]``).  A test that is not virtual never receives a fixture built on a
virtual loop (pytest-asyncio rebuilds it on a normal one), nor the other way round.

anyio shares one runner while any async fixture holds it (for instance a module-scoped async
generator fixture).  The test or fixture that creates the runner decides whether it is virtual;
a virtual test that finds a real runner already running fails with a clear error instead of
silently running in real time.

Driving time: the ``virtual_time`` fixture
------------------------------------------
A test (or a function-scoped async fixture) that wants to read or drive the clock requests
``virtual_time``, a :class:`VirtualTime`: ``now()``, ``peek()`` and the awaitable verbs
``settle()``, ``step()``, ``evolve(dt)``, ``run_until(t)``, ``fast_forward(dt)``, on asyncio and
on trio alike.  Requesting it from a test that does not run in virtual time is a setup error.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import inspect
import math
import sys
import weakref
from collections.abc import Awaitable, Callable, Generator, Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Literal, NoReturn

import pytest

if TYPE_CHECKING:
    import asyncio

    from .._engine._loop import VirtualEventLoop
    from ..trio import VirtualClock

from .._options import LoopOptions, check_names, check_option
from .._shared._errors import InvalidTypeError, InvalidValueError
from .._shared._time import NEVER, TICKS_PER_SECOND

__all__ = ["DEFAULT_MAX_TIME", "VirtualTime", "deadlock_report"]

MARKER: Final = "virtualtime"

_MARKER_HELP: Final = (
    "virtualtime(enabled=True, /, **options): run this async test (pytest-asyncio or anyio) "
    "in virtual time; options are max_time (the virtual horizon, default 1 day; None: none) "
    "and virtualtime.VirtualEventLoop options (start, autojump, history, ...); "
    "virtualtime(False) opts out of --virtualtime."
)


_HOOK_NAME: Final = "pytest_asyncio_loop_factories"
_FACTORY_NAME: Final = "virtualtime"
_FACTORIES_PLUGIN_NAME: Final = "virtualtime-asyncio-loop-factories"


# ------------------------------------------------------------------ settings of a test


DEFAULT_MAX_TIME: Final = 86400.0
"""The virtual horizon of a test when nothing sets ``max_time``: one virtual day."""

_MAX_TIME: Final = "max_time"
"""The one marker option that is the plugin's own, not a loop option."""

_NO_MAX_TIME: Final = ("none", "off", "inf", "infinity")

_HORIZON: Final = NEVER / TICKS_PER_SECOND
"""The horizon of virtual time in seconds: a test's ``max_time`` must be shorter."""


@dataclasses.dataclass(frozen=True)
class _Settings:
    """Whether a test runs in virtual time, with which loop options, and its horizon."""

    virtual: bool
    options: tuple[tuple[str, Any], ...] = ()
    max_time: float | None = DEFAULT_MAX_TIME

    def options_dict(self) -> dict[str, Any]:
        return dict(self.options)


_NOT_VIRTUAL: Final = _Settings(virtual=False)

_SETTINGS_KEY: Final = pytest.StashKey[_Settings]()
_GLOBAL_KEY: Final = pytest.StashKey[bool]()
_MAX_TIME_KEY: Final = pytest.StashKey["float | None"]()
"""The session's default virtual horizon (``--virtualtime-max-time`` / ini), read once."""


def _global_switch(config: pytest.Config) -> bool:
    """``--virtualtime`` or ``virtualtime = true`` in the ini file."""
    try:
        return config.stash[_GLOBAL_KEY]
    except KeyError:
        pass
    value = bool(config.getoption("virtualtime", False)) or bool(config.getini("virtualtime"))
    config.stash[_GLOBAL_KEY] = value
    return value


def _fail(nodeid: str, problem: str) -> NoReturn:
    # ``from None``: a problem found while handling another exception is reported once.
    raise pytest.fail.Exception(
        f"{nodeid}: @pytest.mark.{MARKER}: {problem}", pytrace=False
    ) from None


def _check_option(nodeid: str, name: str, value: Any) -> None:
    """One marker option, checked by the options catalogue (or, for max_time, here)."""
    if name == _MAX_TIME:
        try:
            _check_max_time(value)
        except (TypeError, ValueError) as exc:
            problem = f"bad option {name}={value!r}: {exc}"
        else:
            return
        _fail(nodeid, problem)
    try:
        check_names({name: value}, "asyncio")
    except InvalidTypeError as exc:
        _fail(nodeid, f"{exc}; the marker also takes {_MAX_TIME}")
    try:
        check_option(name, value)
    except (InvalidTypeError, InvalidValueError) as exc:
        problem = f"bad option {name}={value!r}: {exc}"
    else:
        return
    _fail(nodeid, problem)


def _check_max_time(value: object) -> float | None:
    """A test's virtual horizon in seconds, or None for none; a clear error otherwise."""
    if value is None:
        return None
    if isinstance(value, str):
        if value.strip().lower() in _NO_MAX_TIME:
            return None
        from .._shared._units import parse_time

        seconds = parse_time(value)
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidTypeError(
            f"max_time must be seconds (a number or a duration such as '36h'), or None for no "
            f"horizon, got {value!r}"
        )
    elif value == math.inf:
        return None
    else:
        try:
            seconds = float(value)
        except OverflowError:  # an int beyond any float
            seconds = math.inf
    if seconds != seconds or seconds <= 0:
        raise InvalidValueError(
            f"max_time must be > 0 virtual seconds (None turns the horizon off), got {value!r}"
        )
    if seconds >= _HORIZON:
        raise InvalidValueError(
            f"max_time must be shorter than the horizon of virtual time ({_HORIZON:.4g} s; "
            f"None turns the test's horizon off), got {_shown(value)}"
        )
    return seconds


def _shown(value: object) -> str:
    """``repr(value)``; a huge int (whose repr may even be refused) by its size instead."""
    if isinstance(value, int) and value.bit_length() > 200:
        return f"an int of about {value.bit_length() * 30103 // 100000 + 1} digits"
    return repr(value)


def _default_max_time(config: pytest.Config) -> float | None:
    """``--virtualtime-max-time``, else the ini option ``virtualtime_max_time``, else a day."""
    try:
        return config.stash[_MAX_TIME_KEY]
    except KeyError:
        pass
    given = config.getoption("virtualtime_max_time", None)
    where = "--virtualtime-max-time"
    if given is None:
        given = config.getini("virtualtime_max_time") or None
        where = "virtualtime_max_time (ini)"
    value = DEFAULT_MAX_TIME
    if given is not None:
        try:
            value = _check_max_time(str(given))  # type: ignore[assignment]
        except (TypeError, ValueError) as exc:
            raise pytest.UsageError(f"{where}: {exc}") from None
    config.stash[_MAX_TIME_KEY] = value
    return value


def _read_settings(node: pytest.Item) -> _Settings:
    """Apply the merge rule to ``node``'s marks (validating them) and the global switch."""
    enabled: bool | None = None
    options: dict[str, Any] = {}
    for mark in _marks_closest_first(node):
        if len(mark.args) > 1:
            _fail(
                node.nodeid,
                f"takes at most one positional argument (enabled: True or False), "
                f"got {mark.args!r}; pass loop options as keywords",
            )
        if mark.args and not isinstance(mark.args[0], bool):
            _fail(
                node.nodeid,
                f"the positional argument must be True or False (whether the test runs in "
                f"virtual time), got {mark.args[0]!r}; pass loop options as keywords",
            )
        for name, value in mark.kwargs.items():
            _check_option(node.nodeid, name, value)
            options.setdefault(name, value)
        if enabled is None:
            enabled = mark.args[0] if mark.args else True
    if enabled is None:
        enabled = _global_switch(node.config)
    if not enabled:
        return _NOT_VIRTUAL
    if _MAX_TIME in options:
        max_time = _check_max_time(options.pop(_MAX_TIME))
    else:
        max_time = _default_max_time(node.config)
    return _Settings(virtual=True, options=tuple(sorted(options.items())), max_time=max_time)


def _marks_closest_first(node: pytest.Item) -> list[pytest.Mark]:
    """The node's virtualtime marks: ``pytest.param`` marks, function, class, module.

    pytest lists a parameter's marks after the function's own; for this plugin a mark given
    to one parameter set is the most specific, so it comes first.
    """
    marks = list(node.iter_markers(MARKER))
    callspec = getattr(node, "callspec", None)
    param_marks = [m for m in getattr(callspec, "marks", ()) if m.name == MARKER]
    if not param_marks:
        return marks
    return param_marks + [m for m in marks if not any(m is p for p in param_marks)]


def _settings(item: pytest.Item) -> _Settings:
    """The (cached) settings of a collected test."""
    try:
        return item.stash[_SETTINGS_KEY]
    except KeyError:
        pass
    settings = _read_settings(item)
    item.stash[_SETTINGS_KEY] = settings
    return settings


def _own_mark(item: pytest.Item) -> bool:
    return any(mark.name == MARKER for mark in getattr(item, "own_markers", ()))


def _test_function(item: pytest.Item) -> Any:
    func = getattr(item, "obj", None)
    hypothesis = getattr(func, "hypothesis", None)
    inner = getattr(hypothesis, "inner_test", None)
    return inner if inner is not None else func


def _is_async_test(item: pytest.Item) -> bool:
    return inspect.iscoroutinefunction(_test_function(item))


def _is_pytest_asyncio_test(item: pytest.Item) -> bool:
    return (
        item.config.pluginmanager.has_plugin("asyncio")
        and item.get_closest_marker("asyncio") is not None
        and _is_async_test(item)
    )


def _is_anyio_test(item: pytest.Item) -> bool:
    return item.config.pluginmanager.has_plugin("anyio") and "anyio_backend" in getattr(
        item, "fixturenames", ()
    )


# ------------------------------------------------------------------ pytest-asyncio


def _pytest_asyncio_has_loop_factories(config: pytest.Config) -> bool:
    """Whether the installed pytest-asyncio (1.4+) offers ``pytest_asyncio_loop_factories``.

    A feature check rather than a version parse: the hook specification exists exactly when
    pytest-asyncio can take a loop factory from a plugin.
    """
    caller = getattr(config.hook, _HOOK_NAME, None)
    return caller is not None and getattr(caller, "spec", None) is not None


class _LoopFactory:
    """A zero-argument factory of virtual loops with fixed options.

    Equal options make equal factories: pytest-asyncio caches the loop of a wider
    ``loop_scope`` by factory, so tests with the same options share one loop.
    """

    __slots__ = ("loop_options", "options")

    def __init__(self, options: tuple[tuple[str, Any], ...]) -> None:
        self.options = options
        self.loop_options = LoopOptions.of(dict(options))  # checked once, passed on

    def __call__(self) -> VirtualEventLoop:
        from .._engine._loop import VirtualEventLoop

        return VirtualEventLoop(self.loop_options)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _LoopFactory):
            return NotImplemented
        return self.options == other.options

    def __hash__(self) -> int:
        try:
            return hash(self.options)
        except TypeError:
            return 0

    def __repr__(self) -> str:
        args = ", ".join(f"{name}={value!r}" for name, value in self.options)
        return f"virtualtime.new_event_loop({args})"


class _AsyncioLoopFactories:
    """Answers pytest-asyncio's loop-factory hook (see :class:`_FactoriesState` for when).

    pytest-asyncio asks once per test *function* (``item`` is its definition, before
    parametrization), so the answer is kept in :attr:`decided` for the set-up check.
    """

    def __init__(self) -> None:
        self.decided: dict[str, _Settings] = {}

    @pytest.hookimpl(wrapper=True)
    def pytest_asyncio_loop_factories(
        self, config: pytest.Config, item: pytest.Item
    ) -> Generator[None, Any, Mapping[str, Callable[[], asyncio.AbstractEventLoop]]]:
        others: Mapping[str, Callable[[], asyncio.AbstractEventLoop]] | None = yield
        settings = _settings(item)
        self.decided[item.nodeid] = settings
        if settings.virtual:
            return {_FACTORY_NAME: _LoopFactory(settings.options)}
        if others is not None:
            return others
        # pytest-asyncio demands a mapping from every implementation it calls; this is the
        # loop it makes itself without one (Runner() calls asyncio.new_event_loop()).
        import asyncio

        return {"asyncio": asyncio.new_event_loop}


_FACTORIES_KEY: Final = pytest.StashKey["_FactoriesState"]()


class _FactoriesState:
    """When this session's :class:`_AsyncioLoopFactories` is registered with pytest.

    Once any plugin implements ``pytest_asyncio_loop_factories``, pytest-asyncio parametrizes
    *every* test it collects with a loop factory at the test's loop scope -- so a fixture of a
    wider loop scope is then rebuilt for each test.  To leave tests that are not virtual exactly
    as they were, the implementation is registered only while it is needed: while a virtual
    test is collected, and while a test is set up that is virtual or follows one (pytest-asyncio
    then re-checks its cached loop factory, so fixtures of the virtual loop are rebuilt rather
    than handed to a test on another loop).  With ``--virtualtime`` it stays registered.
    """

    __slots__ = ("after_virtual", "permanent", "plugin", "usable")

    def __init__(self, config: pytest.Config) -> None:
        manager = config.pluginmanager
        self.usable = manager.has_plugin("asyncio") and _pytest_asyncio_has_loop_factories(config)
        self.plugin = _AsyncioLoopFactories()
        self.permanent = False
        self.after_virtual = False

    @contextlib.contextmanager
    def registered(self, config: pytest.Config) -> Iterator[None]:
        manager = config.pluginmanager
        if not self.usable or self.permanent or manager.is_registered(self.plugin):
            yield
            return
        manager.register(self.plugin, name=_FACTORIES_PLUGIN_NAME)
        try:
            yield
        finally:
            manager.unregister(self.plugin)


def _factories(config: pytest.Config) -> _FactoriesState:
    try:
        return config.stash[_FACTORIES_KEY]
    except KeyError:
        state = config.stash[_FACTORIES_KEY] = _FactoriesState(config)
        return state


# ------------------------------------------------------------------ anyio


@dataclasses.dataclass(frozen=True)
class _AnyioPlan:
    """What a virtual anyio test needs from the runner anyio builds for it."""

    nodeid: str
    options: tuple[tuple[str, Any], ...]

    def backend_options(self, backend: str, given: Mapping[str, Any]) -> dict[str, Any]:
        """``given`` (from ``anyio_backend``) plus this test's virtual loop or clock."""
        options = dict(given)
        if backend == "asyncio":
            clash = [name for name in ("loop_factory", "use_uvloop") if options.get(name)]
            if clash:
                _fail(
                    self.nodeid,
                    f"its anyio_backend already sets {', '.join(clash)}; virtual time needs "
                    "its own loop (drop those backend options for this test)",
                )
            options["loop_factory"] = _LoopFactory(self.options)
            return options
        if backend == "trio":
            if options.get("clock") is not None:
                _fail(
                    self.nodeid,
                    "its anyio_backend already sets a trio clock; virtual time needs its own "
                    "(drop the 'clock' backend option for this test)",
                )
            given = dict(self.options)
            try:
                check_names(given, "trio")
            except InvalidTypeError as exc:
                _fail(
                    self.nodeid,
                    f"this test runs on trio, and {exc} (restrict the test to asyncio with "
                    "anyio_backend, or drop the option)",
                )
            try:
                from ..trio import VirtualClock
            except ImportError as exc:  # pragma: no cover - trio is selected, so importable
                _fail(self.nodeid, f"virtual time on trio needs virtualtime.trio: {exc}")
            options["clock"] = VirtualClock(LoopOptions.of(given, backend="trio"))
            return options
        _fail(
            self.nodeid,
            f"anyio backend {backend!r} has no virtual time; virtualtime supports 'asyncio' "
            "and 'trio'",
        )


_ANYIO_PLAN: Final = contextvars.ContextVar[_AnyioPlan | None](
    "virtualtime_anyio_plan", default=None
)
"""The plan of the virtual anyio test being set up, run or torn down (None otherwise)."""


class _AnyioPatch:
    """Wraps ``anyio.pytest_plugin.get_runner`` while any pytest session needs it.

    anyio builds its test runner in exactly one place, ``get_runner(backend_name,
    backend_options)``; the wrapper adds the virtual loop or clock to ``backend_options`` while
    a virtual test is active, and is a pass-through otherwise.  Counted, so nested sessions
    (pytester) install it once and the last one out restores anyio.
    """

    users = 0
    original: Callable[[str, dict[str, Any]], Any] | None = None

    @classmethod
    def acquire(cls) -> bool:
        """Install (or count one more user of) the wrapper; False if anyio has no seam."""
        import anyio.pytest_plugin as anyio_plugin

        if cls.users == 0:
            original = getattr(anyio_plugin, "get_runner", None)
            if not callable(original):
                return False
            cls.original = original
            anyio_plugin.get_runner = _virtual_get_runner
        cls.users += 1
        return True

    @classmethod
    def release(cls) -> None:
        if cls.users == 0:
            return
        cls.users -= 1
        if cls.users == 0 and cls.original is not None:
            import anyio.pytest_plugin as anyio_plugin

            if anyio_plugin.get_runner is _virtual_get_runner:
                anyio_plugin.get_runner = cls.original  # type: ignore[assignment]
            cls.original = None


_ANYIO_PATCHED_KEY: Final = pytest.StashKey[bool]()


def _virtual_get_runner(backend_name: str, backend_options: dict[str, Any]) -> Any:
    original = _AnyioPatch.original
    assert original is not None
    plan = _ANYIO_PLAN.get()
    if plan is None:
        return original(backend_name, backend_options)
    return _virtual_runner(original, plan, backend_name, backend_options)


@contextlib.contextmanager
def _virtual_runner(
    original: Callable[[str, dict[str, Any]], Any],
    plan: _AnyioPlan,
    backend_name: str,
    backend_options: dict[str, Any],
) -> Iterator[Any]:
    options = plan.backend_options(backend_name, backend_options or {})
    with original(backend_name, options) as runner:
        # anyio hands back the runner a wider-scoped async fixture keeps alive, whatever
        # options were asked for: a test whose marks differ must not silently run on it.
        built = _RUNNER_BUILT_FOR.setdefault(runner, (plan.nodeid, plan.options))
        if built[1] != plan.options:
            _fail(
                plan.nodeid,
                f"anyio reuses the runner built for {built[0]} with virtualtime options "
                f"{dict(built[1])}, but this test asks for {dict(plan.options)}; give the "
                "tests that share a module- or session-scoped async fixture the same marks",
            )
        yield _CheckedRunner(runner, plan.nodeid, backend_name)


_RUNNER_BUILT_FOR: Final[
    weakref.WeakKeyDictionary[Any, tuple[str, tuple[tuple[str, Any], ...]]]
] = weakref.WeakKeyDictionary()
"""Each live anyio test runner: the test it was built for and that test's options."""


class _CheckedRunner:
    """An anyio test runner (public ``anyio.abc.TestRunner`` API) that checks virtual time.

    Tests check that they really run on a virtual loop or clock (a runner kept alive by a
    fixture may have been built without one); on trio, tests and async fixtures run guarded
    so that a deadlock raises DeadlockError rather than hanging.
    """

    def __init__(self, runner: Any, nodeid: str, backend: str) -> None:
        self._runner = runner
        self._nodeid = nodeid
        self._trio = backend == "trio"

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runner, name)

    def is_running(self) -> bool:
        return bool(self._runner.is_running())

    def run_test(self, test_func: Callable[..., Awaitable[Any]], kwargs: dict[str, Any]) -> None:
        nodeid, guard = self._nodeid, self._trio

        async def checked(**kw: Any) -> Any:
            _require_virtual(f"{nodeid} (marked {MARKER})")
            watch = _WATCHES.get(nodeid)
            call: Callable[[], Awaitable[Any]]
            if guard:
                call = functools.partial(_trio_guarded, _named_call(test_func, kw))
            else:
                call = functools.partial(test_func, **kw)
            if watch is None:
                return await call()
            return await watch.run(call)

        self._runner.run_test(checked, kwargs)

    def run_fixture(
        self, fixture_func: Callable[..., Awaitable[Any]], kwargs: dict[str, Any]
    ) -> Any:
        if not self._trio:
            return self._runner.run_fixture(fixture_func, kwargs)

        async def guarded(**kw: Any) -> Any:
            return await _trio_guarded(_named_call(fixture_func, kw))

        return self._runner.run_fixture(guarded, kwargs)

    def run_asyncgen_fixture(
        self, fixture_func: Callable[..., Any], kwargs: dict[str, Any]
    ) -> Iterable[Any]:
        if not self._trio:
            return self._runner.run_asyncgen_fixture(fixture_func, kwargs)  # type: ignore[no-any-return]

        def guarded(**kw: Any) -> _GuardedAsyncGen:
            return _GuardedAsyncGen(fixture_func(**kw), fixture_func)

        return self._runner.run_asyncgen_fixture(guarded, kwargs)  # type: ignore[no-any-return]


def _named_call(func: Callable[..., Any], kwargs: Mapping[str, Any]) -> Callable[[], Any]:
    """``func(**kwargs)`` as a call without arguments that keeps ``func``'s name."""
    call = functools.partial(func, **kwargs)
    functools.update_wrapper(call, func)
    return call


class _GuardedAsyncGen:
    """An async generator whose every step runs guarded (one step never spans a yield)."""

    def __init__(self, agen: Any, func: Callable[..., Any]) -> None:
        self._agen = agen
        self._func = func

    def asend(self, value: Any) -> Awaitable[Any]:
        call = functools.partial(self._agen.asend, value)
        functools.update_wrapper(call, self._func)
        return _trio_guarded(call)

    def aclose(self) -> Awaitable[Any]:
        call = functools.partial(self._agen.aclose)
        functools.update_wrapper(call, self._func)
        return _trio_guarded(call)


async def _trio_guarded(call: Callable[[], Awaitable[Any]]) -> Any:
    """Await ``call()`` so that a deadlock under a VirtualClock raises DeadlockError."""
    import trio.lowlevel

    from .. import trio as virtual_trio

    clock = trio.lowlevel.current_clock()
    if not isinstance(clock, virtual_trio.VirtualClock) or virtual_trio.RunGuard.active(clock):
        return await call()
    return await virtual_trio.RunGuard(clock, call).guarded_main()


# ------------------------------------------------------------------ pytest-trio


_PYTEST_TRIO_KEY: Final = pytest.StashKey[Callable[[], None]]()
"""On a pytest-trio test that runs on a VirtualClock: how to undo what guards its run."""


def _pytest_trio_clock(item: pytest.Item) -> VirtualClock | None:
    """The VirtualClock pytest-trio will run ``item`` with, if it is such a test.

    pytest-trio passes ``trio.run`` any ``trio.abc.Clock`` among a test's fixture values (the
    documented way is a fixture named ``clock``); called once the fixtures are set up.
    """
    pytest_trio = sys.modules.get("pytest_trio.plugin")
    virtual_trio = sys.modules.get("virtualtime.trio")
    if (
        pytest_trio is None
        or virtual_trio is None  # no VirtualClock was ever made, so the test has none
        or item.get_closest_marker("trio") is None
        or not item.config.pluginmanager.is_registered(pytest_trio)
    ):
        return None
    values = getattr(item, "funcargs", {}).values()
    clocks = [value for value in values if isinstance(value, virtual_trio.VirtualClock)]
    return clocks[0] if len(clocks) == 1 else None  # several: pytest-trio refuses them


def _guard_pytest_trio(item: pytest.Item) -> None:
    """Make pytest-trio run ``item`` guarded when its clock is a VirtualClock.

    pytest-trio calls ``trio.run`` itself, so a deadlock would leave the clock with no way
    to end the run (see "Deadlocks" in :mod:`virtualtime.trio`).  Its ``trio`` mark takes
    the function that runs the test (``run=``, documented for qtrio); a mark put first for
    the duration of the test hands it a runner that starts the run through
    :class:`virtualtime.trio.RunGuard` -- around pytest-trio's own main function, so that a
    deadlock in a fixture is caught too -- and otherwise calls the runner the test would
    have had.  Under Hypothesis pytest-trio ignores ``run=``; there the test body is
    guarded instead.
    """
    if _pytest_trio_clock(item) is None:
        return
    obj: Any = getattr(item, "obj", None)
    hypothesis: Any = getattr(obj, "hypothesis", None)
    inner = getattr(hypothesis, "inner_test", None)
    if inner is not None:
        if not inspect.iscoroutinefunction(inner):  # pragma: no cover - already wrapped
            return

        @functools.wraps(inner)
        async def guarded(**kwargs: Any) -> Any:
            return await _trio_guarded(_named_call(inner, kwargs))

        hypothesis.inner_test = guarded
        item.stash[_PYTEST_TRIO_KEY] = lambda: setattr(hypothesis, "inner_test", inner)
        return
    mark = pytest.mark.trio(run=_GuardedTrioRun(_pytest_trio_runner(item))).mark
    # Closest first, as item.add_marker(mark, append=False) would put it, but kept out of the
    # test's keywords: -k and -m selection happened long ago, and nothing else should see it.
    item.own_markers.insert(0, mark)

    def undo() -> None:
        with contextlib.suppress(ValueError):
            item.own_markers.remove(mark)

    item.stash[_PYTEST_TRIO_KEY] = undo


def _pytest_trio_runner(item: pytest.Item) -> Callable[..., Any]:
    """The function pytest-trio would run ``item`` with: a ``trio`` mark's ``run=``, else
    the ini option ``trio_run`` (pytest-trio's own rule)."""
    for mark in item.iter_markers("trio"):
        run = mark.kwargs.get("run")
        if run is not None:
            return run  # type: ignore[no-any-return]
    choose = getattr(sys.modules.get("pytest_trio.plugin"), "choose_run", None)
    if callable(choose):
        return choose(config=item.config)  # type: ignore[no-any-return]
    import trio  # pragma: no cover - pytest-trio without choose_run

    return trio.run  # pragma: no cover


class _GuardedTrioRun:
    """A pytest-trio runner that guards a run on a VirtualClock (see :func:`_guard_pytest_trio`)."""

    __slots__ = ("run",)

    def __init__(self, run: Callable[..., Any]) -> None:
        self.run = run

    def __call__(self, async_fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
        from .. import trio as virtual_trio

        clock = kwargs.get("clock")
        if isinstance(clock, virtual_trio.VirtualClock) and not virtual_trio.RunGuard.active(clock):
            async_fn = virtual_trio.RunGuard(clock, async_fn).guarded_main
        return self.run(async_fn, *args, **kwargs)

    def __repr__(self) -> str:
        return f"<virtualtime guard around {self.run!r}>"


def pytest_runtest_teardown(item: pytest.Item) -> None:
    undo = item.stash.get(_PYTEST_TRIO_KEY, None)
    if undo is not None:
        undo()


# ------------------------------------------------------------------ the virtual horizon


_TIMEOUT_MESSAGE: Final = "from pytest-timeout"
"""What pytest-timeout's failure says (its signal method raises it inside the test)."""

_EXPIRED: Final = "virtualtime: the test ran past its max_time"


class _Watch:
    """The clock of one running virtual test: its horizon (``max_time``), and what it did.

    The horizon needs no timer of its own (a timer would change ``peek()``, ``step()`` and
    deadlock detection).  On asyncio, while the test runs, the loop tells the watch whenever
    virtual time moves past the horizon -- for a timer of any kind, ``virtualtime.sleep``,
    anyio's sleep and the sim kit's jumps included -- before that instant's timers fire (a
    timeout past the horizon that is cancelled in time changes nothing).  On trio, the
    clock is asked for its sleep time whenever every task is blocked; the first time it is
    asked after virtual time has passed the horizon ends the test.  Either way the test's task
    is cancelled and the test fails with :meth:`failure`.
    """

    def __init__(self, nodeid: str, max_time: float | None) -> None:
        self.nodeid = nodeid
        self.max_time = max_time
        self.clock: Any = None
        self.trio = False
        self.started = 0.0
        self.counted = 0
        self.reached: float | None = None
        self.dropped: BaseException | None = None
        """A pytest outcome (pytest-timeout's alarm, ``pytest.fail()``) that a loop callback
        raised: asyncio's callback runner would log it and carry on (see :meth:`_keep_outcomes`)."""

    # ---- facts

    def now(self) -> float:
        if self.clock is None:
            return self.started
        return float(self.clock.current_time() if self.trio else self.clock.time())

    def count(self) -> int:
        if self.clock is None:
            return 0
        return int(self.clock.jumps if self.trio else self.clock.timers_fired) - self.counted

    def facts(self) -> str:
        from .._shared._units import format_duration

        now = self.now() if self.reached is None else self.reached
        count = self.count()
        unit = "trio clock jump" if self.trio else "timer"
        verb = "" if self.trio else " fired"
        return (
            f"virtual time reached t={now:,.9g} s ({format_duration(now - self.started)} after "
            f"the test started at t={self.started:,.9g} s), {count:,} {unit}"
            f"{'s' if count != 1 else ''}{verb}"
        )

    def cause(self) -> str:
        return (
            "Likely cause: the test waits on a clock the loop does not drive, so its deadline "
            "never comes however far virtual time jumps -- time.monotonic(), time.time() or "
            "datetime.now() read without patch_time (give the mark patch_time=True: it reaches "
            "every reference to them, `from time import monotonic` and default arguments bound "
            "at import included), read in another thread (patch_time follows the test's own "
            "thread), or a clock that C code reads from the operating system itself"
        )

    def failure(self) -> BaseException:
        assert self.max_time is not None
        from .._shared._units import format_duration

        return pytest.fail.Exception(
            f"{_EXPIRED}={format_duration(self.max_time)} and was stopped: {self.facts()}.  "
            f"{self.cause()}.  If it really needs longer: max_time=... on the mark, "
            "--virtualtime-max-time or the ini option virtualtime_max_time (none: no horizon)",
            pytrace=False,
        )

    def interrupted(self) -> str:
        return f"virtualtime: {self.nodeid} was interrupted: {self.facts()}.  {self.cause()}."

    # ---- running the test function under the watch

    async def run(self, call: Callable[[], Awaitable[Any]]) -> Any:
        """Await ``call()`` inside the test's task, with the horizon armed."""
        import asyncio

        from .._engine._loop import VirtualEventLoop

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if isinstance(loop, VirtualEventLoop):
            return await self._run_asyncio(loop, call)
        trio_module = sys.modules.get("trio")
        virtual_trio = sys.modules.get("virtualtime.trio")
        if loop is None and trio_module is not None and virtual_trio is not None:
            # Only the question "is trio running?" may fail quietly here: an error of the test
            # itself (DeadlockError and many others are RuntimeErrors) must not be taken for
            # "no trio run" -- the test would run a second time.
            try:
                clock = trio_module.lowlevel.current_clock()
            except RuntimeError:
                clock = None
            if isinstance(clock, virtual_trio.VirtualClock):
                return await self._run_trio(clock, call)
        return await call()  # not virtual: the runner's own check reports it

    async def _run_asyncio(self, loop: VirtualEventLoop, call: Callable[[], Awaitable[Any]]) -> Any:
        import asyncio

        self.clock, self.trio = loop, False
        self.started, self.counted = loop.time(), loop.timers_fired
        task = asyncio.current_task()
        with self._keep_outcomes(loop, task):
            try:
                if self.max_time is None:
                    return await call()
                return await self._run_asyncio_within(loop, task, call)
            except asyncio.CancelledError:
                if self.dropped is not None:
                    raise self.dropped from None
                raise

    @contextlib.contextmanager
    def _keep_outcomes(
        self, loop: VirtualEventLoop, task: asyncio.Task[Any] | None
    ) -> Iterator[None]:
        """Let a pytest outcome raised in a loop callback end the test instead of vanishing.

        asyncio runs each callback under a guard that passes every exception but
        ``KeyboardInterrupt`` and ``SystemExit`` to the loop's exception handler and goes on.
        pytest's outcomes are ``BaseException`` too, so ``pytest.fail()`` in a callback -- or
        pytest-timeout's signal method, whose alarm raises inside whatever runs, a callback
        included -- would be logged and dropped, and a test with no horizon would run forever.
        While the test runs, the handler keeps the first such outcome and cancels the test's
        task; the test then fails with it (a wake-up the interrupted callback never delivered
        shows up as a deadlock, which the outcome replaces too).  Other errors go to the
        handler that was set before, unchanged.
        """
        outcomes = (pytest.fail.Exception, pytest.skip.Exception)
        previous = loop.get_exception_handler()

        def keep(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
            exc = context.get("exception")
            if isinstance(exc, outcomes) and self.dropped is None:
                self.dropped = exc
                if task is not None and not task.done():
                    task.cancel()
                return
            if previous is None:
                loop.default_exception_handler(context)
            else:
                previous(loop, context)

        loop.set_exception_handler(keep)
        try:
            yield
        finally:
            if loop.get_exception_handler() is keep:  # the test may have set its own since
                loop.set_exception_handler(previous)

    async def _run_asyncio_within(
        self,
        loop: VirtualEventLoop,
        task: asyncio.Task[Any] | None,
        call: Callable[[], Awaitable[Any]],
    ) -> Any:
        assert self.max_time is not None
        from .._shared._time import to_ticks

        cancels = 0

        def past() -> None:
            # Virtual time moved past the horizon: end the test, before that instant's timers.
            nonlocal cancels
            if self.reached is None:
                self.reached = loop.time()
            if task is not None and not task.done():
                cancels += 1
                if cancels > 100:  # the test swallows cancellation: stop the loop itself
                    loop.stop()
                else:
                    task.cancel(_EXPIRED)

        # The first tick past the horizon; the loop tells past() whenever time gets there,
        # however it moves (every kind of timer, the sim kit's jumps, the driving verbs).
        loop._vt_watch_horizon(loop._vt_ticks + to_ticks(self.max_time) + 1, past)
        try:
            return await call()
        finally:
            loop._vt_watch_horizon(None, None)

    async def _run_trio(self, clock: VirtualClock, call: Callable[[], Awaitable[Any]]) -> Any:
        import trio

        self.clock, self.trio = clock, True
        self.started, self.counted = clock.current_time(), clock.jumps
        if self.max_time is None:
            return await call()
        limit = self.started + self.max_time
        with trio.CancelScope() as scope:
            asked = clock.deadline_to_sleep_time

            def watched(deadline: float) -> float:
                now = clock.current_time()
                if self.reached is None and now > limit:
                    self.reached = now
                    scope.cancel()
                    return 0.0  # the cancelled tasks are runnable now
                return asked(deadline)

            # trio asks its clock through this (public trio.abc.Clock) method whenever every
            # task is blocked; the instance attribute shadows it for this test only.
            setattr(clock, "deadline_to_sleep_time", watched)  # noqa: B010
            try:
                return await call()
            finally:
                vars(clock).pop("deadline_to_sleep_time", None)
        return None


_WATCHES: Final[dict[str, _Watch]] = {}
"""The watch of each virtual test whose function is running, by node id (anyio's runner runs
the test in its own task, so the watch is found by name rather than by context)."""


def _watch_pytest_asyncio_test(item: pytest.Item, watch: _Watch) -> Callable[[], None]:
    """Make pytest-asyncio run the test function under ``watch``; return the undo."""
    obj = getattr(item, "obj", None)
    hypothesis = getattr(obj, "hypothesis", None)
    target: object = hypothesis if getattr(hypothesis, "inner_test", None) else item
    name = "inner_test" if target is hypothesis else "obj"
    original = getattr(target, name)

    @functools.wraps(original)
    async def watched(*args: Any, **kwargs: Any) -> Any:
        return await watch.run(functools.partial(original, *args, **kwargs))

    setattr(target, name, watched)
    return lambda: setattr(target, name, original)


def _say(config: pytest.Config, text: str) -> None:
    """Write a line on the terminal, past output capturing."""
    capman = config.pluginmanager.getplugin("capturemanager")
    reporter = config.pluginmanager.getplugin("terminalreporter")
    quiet = capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext()
    with quiet:
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(text, yellow=True)
        else:  # pragma: no cover - pytest always has a terminal reporter unless disabled
            print(text, file=sys.stderr, flush=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    try:
        settings = _settings(item)
    except pytest.fail.Exception:  # reported at set-up
        return (yield)
    runner = _is_pytest_asyncio_test(item) or (_is_anyio_test(item) and _is_async_test(item))
    if not settings.virtual or not runner:
        return (yield)
    watch = _WATCHES[item.nodeid] = _Watch(item.nodeid, settings.max_time)
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


def _told(watch: _Watch, outcome: BaseException) -> BaseException:
    """``outcome``, or, if it is pytest-timeout's, the same failure saying where time was."""
    if (
        isinstance(outcome, pytest.fail.Exception)
        and _TIMEOUT_MESSAGE in str(outcome.msg)
        and watch.clock is not None
    ):
        return pytest.fail.Exception(
            f"{outcome.msg}\n{watch.interrupted()}", pytrace=outcome.pytrace
        )
    return outcome


# ------------------------------------------------------------------ deadlock reports


_HARNESS: Final = (
    "/anyio/_backends/",
    "/anyio/pytest_plugin.py",
    "/pytest_asyncio/",
    "/pytest_trio/",
    "/virtualtime/pytest_plugin/__init__.py",
    "/virtualtime/trio/__init__.py",
    "/virtualtime/_engine/_loop.py",
    "/_pytest/",
    "/pluggy/",
)
"""Files of the runners, whose frames lead up to the test's own code in a task's stack."""


def _user_frames(where: str) -> str:
    """A blocked task's stack (``f() at file:line -> g() at ...``) from the first frame
    that is not the test runners' own."""
    frames = where.split(" -> ")
    index = 0
    while index < len(frames) - 1 and any(
        part in frames[index].replace("\\", "/") for part in _HARNESS
    ):
        index += 1
    return " -> ".join(frames[index:])


_LIBRARIES: Final = ("/trio/", "/anyio/", "/outcome/")
"""Libraries a blocked task's stack passes through on its way to what it waits for."""


def _runner_only(where: str) -> bool:
    """Whether a blocked task's stack is all test runners' and libraries' frames."""
    return all(
        any(part in frame.replace("\\", "/") for part in (*_HARNESS, *_LIBRARIES))
        for frame in where.split(" -> ")
    )


def _settings_or_none(item: pytest.Item) -> bool:
    """Whether ``item`` is a virtual test (False if its marks are bad: set-up says so)."""
    try:
        return _settings(item).virtual
    except pytest.fail.Exception:
        return False


def _deadlock_of(error: BaseException) -> Any:
    """The DeadlockError ``error`` is, or the only one an exception group holds."""
    from .._shared._errors import DeadlockError

    if isinstance(error, DeadlockError):
        return error
    if isinstance(error, BaseExceptionGroup):
        found = [_deadlock_of(inner) for inner in error.exceptions]
        found = [e for e in found if e is not None]
        if len(found) == 1 and len(error.exceptions) == 1:
            return found[0]
    return None


def deadlock_report(error: Any) -> str:
    """The short report of a test that deadlocked: what happened, then each blocked task.

    The same shape on asyncio and trio: the first sentence of the loop's or clock's message,
    then one line per blocked task with its stack from the test's own code on (the frames of
    pytest, pytest-asyncio, anyio and virtualtime that lead up to it are left out).
    """
    message = str(error)
    head = message.split("\n", 1)[0]
    for end in ("Blocked tasks:", ".  "):
        cut = head.find(end)
        if cut > 0:
            head = head[:cut].rstrip()
    head = head.rstrip(".") + "."
    lines = [f"DeadlockError: {head}"]
    blocked = tuple(getattr(error, "blocked", ()) or ())
    # A runner's own tasks (pytest-trio's, waiting for the test) say nothing about the test.
    own = tuple((name, where) for name, where in blocked if not _runner_only(where)) or blocked
    if own:
        lines.append("Blocked tasks:")
        lines.extend(f"  - {name}: {_user_frames(where)}" for name, where in own)
    else:
        lines.append(message)
    lines.append("(run with --tb=long for the full traceback)")
    return "\n".join(lines)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    excinfo = call.excinfo
    if excinfo is None or not report.failed:
        return report
    if not (_settings_or_none(item) or item.stash.get(_PYTEST_TRIO_KEY, None) is not None):
        return report
    if item.config.getoption("tbstyle", "auto") in ("long", "native"):
        return report
    error = _deadlock_of(excinfo.value)
    if error is None:
        return report
    report.longrepr = deadlock_report(error)
    return report


# ------------------------------------------------------------------ the running clock


def _running_backend(what: str) -> Literal["asyncio", "trio"]:
    """Which virtual clock runs the current task; a VirtualTimeError if none does."""
    import asyncio

    from .._engine._loop import VirtualEventLoop
    from .._shared._errors import UsageError

    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is not None:
        if isinstance(loop, VirtualEventLoop):
            return "asyncio"
        raise UsageError(
            f"{what} needs virtual time, but it runs on a real event loop "
            f"({type(loop).__name__}).  With anyio, a runner kept alive by an async fixture of "
            "a wider scope was built before this test: give that fixture's tests the same "
            "virtualtime mark (e.g. mark the whole module)"
        )
    trio_module = sys.modules.get("trio")
    if trio_module is not None:
        try:
            clock = trio_module.lowlevel.current_clock()
        except RuntimeError:
            clock = None
        if clock is not None:
            virtual_trio = sys.modules.get("virtualtime.trio")
            if virtual_trio is not None and isinstance(clock, virtual_trio.VirtualClock):
                return "trio"
            raise UsageError(
                f"{what} needs virtual time, but trio runs with {type(clock).__name__}.  With "
                "anyio, a runner kept alive by an async fixture of a wider scope was built "
                "before this test: give that fixture's tests the same virtualtime mark"
            )
    raise UsageError(
        f"{what} needs a running virtual event loop or trio VirtualClock; call it from the "
        "async test (or an async fixture of it)"
    )


def _require_virtual(what: str) -> None:
    _running_backend(what)


class VirtualTime:
    """The ``virtual_time`` fixture: read and drive the clock of a test in virtual time.

    Request it in a test marked ``@pytest.mark.virtualtime`` (or run with ``--virtualtime``)
    when the test needs more than instant sleeps: to assert the exact virtual time something
    happened (``now()``), to see what is scheduled next (``peek()``), or to move time by hand
    -- typically with ``autojump=False``, where time moves only when the test says so::

        @pytest.mark.asyncio
        @pytest.mark.virtualtime(autojump=False)
        async def test_cache_expires(virtual_time):
            cache = TTLCache(ttl=60)
            cache["k"] = 1
            await virtual_time.evolve(59.999)
            assert "k" in cache
            await virtual_time.evolve(0.001)
            assert "k" not in cache

    The same methods work on asyncio (pytest-asyncio, or anyio on asyncio) and on trio (anyio
    on trio).  All of them act on the clock of the *running* test, so call them from the async
    test body or from its function-scoped async fixtures; they raise
    :class:`~virtualtime.VirtualTimeError` anywhere else.  The verbs mean what they mean on the
    loop (see :mod:`virtualtime`): ``settle()`` lets everything that is ready run without moving
    time; ``step()`` fires the next timer instant; ``evolve(dt)`` fires every timer due in
    ``[now, now + dt]`` at its own instant and ends at exactly ``now + dt``; ``run_until(t)``
    does the same up to ``t``; ``fast_forward(dt)`` leaps ``dt`` at once, overdue timers then
    firing late.  On trio, same-instant wake-ups keep trio's own (random) order.
    """

    __slots__ = ("_nodeid", "_options")

    def __init__(self, nodeid: str, options: Mapping[str, Any]) -> None:
        self._nodeid = nodeid
        self._options = MappingProxyType(dict(options))

    def __repr__(self) -> str:
        return f"<VirtualTime of {self._nodeid} options={dict(self._options)!r}>"

    @property
    def options(self) -> Mapping[str, Any]:
        """The loop options this test's marks resolved to (read-only)."""
        return self._options

    @property
    def backend(self) -> Literal["asyncio", "trio"]:
        """``"asyncio"`` or ``"trio"``: which virtual clock runs the test."""
        return _running_backend("virtual_time.backend")

    @property
    def loop(self) -> VirtualEventLoop:
        """The running :class:`~virtualtime.VirtualEventLoop` (asyncio only)."""
        from .._engine._loop import running_virtual_loop
        from .._shared._errors import UsageError

        if _running_backend("virtual_time.loop") != "asyncio":
            raise UsageError("virtual_time.loop exists on asyncio only; on trio use .clock")
        return running_virtual_loop("virtual_time.loop")

    @property
    def clock(self) -> VirtualClock:
        """The running :class:`virtualtime.trio.VirtualClock` (trio only)."""
        from .._shared._errors import UsageError

        if _running_backend("virtual_time.clock") != "trio":
            raise UsageError("virtual_time.clock exists on trio only; on asyncio use .loop")
        import trio.lowlevel

        clock: VirtualClock = trio.lowlevel.current_clock()  # type: ignore[assignment]
        return clock

    # The verbs are virtualtime's own backend-neutral ones (virtualtime._engine._control); checking
    # the backend first gives the fixture's own message when the running clock is not virtual.

    def now(self) -> float:
        """The virtual time now, in seconds."""
        _require_virtual("virtual_time.now()")
        from .._engine._control import now

        return now()

    def peek(self) -> float:
        """Virtual time of the next pending timer or deadline, or ``math.inf``."""
        _require_virtual("virtual_time.peek()")
        from .._engine._control import peek

        return peek()

    async def settle(self) -> float:
        """Run everything that is ready without moving time; return the time."""
        _require_virtual("virtual_time.settle()")
        from .._engine._control import settle

        return await settle()

    async def step(self) -> float | None:
        """Fire the next timer instant and let it settle; None if nothing is scheduled."""
        _require_virtual("virtual_time.step()")
        from .._engine._control import step

        return await step()

    async def evolve(self, dt: float) -> float:
        """Fire every timer due in ``[now, now + dt]`` at its own instant; return ``now + dt``."""
        from .._shared._time import check_delay

        dt = check_delay("dt", dt)
        _require_virtual("virtual_time.evolve()")
        from .._engine._control import evolve

        return await evolve(dt)

    async def run_until(self, t: float) -> float:
        """:meth:`evolve` up to the absolute virtual time ``t`` (not in the past)."""
        from .._shared._time import check_finite

        t = check_finite("t", t)
        _require_virtual("virtual_time.run_until()")
        from .._engine._control import run_until

        return await run_until(t)

    async def fast_forward(self, dt: float) -> float:
        """Leap ``dt`` at once; timers the leap made overdue then fire, seeing the new time."""
        from .._shared._time import check_delay

        dt = check_delay("dt", dt)
        _require_virtual("virtual_time.fast_forward()")
        from .._engine._control import fast_forward

        return await fast_forward(dt)


def _virtual_time_fixture(request: pytest.FixtureRequest) -> VirtualTime:
    item = request.node
    if not isinstance(item, pytest.Item):  # pragma: no cover - function scope is an item
        pytest.fail("virtual_time is a function-scoped fixture", pytrace=False)
    settings = _settings(item)
    runner = _is_pytest_asyncio_test(item) or (_is_anyio_test(item) and _is_async_test(item))
    if not settings.virtual or not runner:
        why = (
            "is not marked @pytest.mark.virtualtime (and --virtualtime is off)"
            if not settings.virtual
            else "is not an async test run by pytest-asyncio or anyio"
        )
        pytest.fail(
            f"{item.nodeid} requests the virtual_time fixture but does not run in virtual "
            f"time: it {why}",
            pytrace=False,
        )
    return VirtualTime(item.nodeid, settings.options_dict())


virtual_time = pytest.fixture(name="virtual_time")(_virtual_time_fixture)


# ------------------------------------------------------------------ pytest hooks


def pytest_addoption(parser: pytest.Parser) -> None:
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
    definition = metafunc.definition
    if definition.get_closest_marker(MARKER) is None or not _read_settings(definition).virtual:
        return (yield)
    with _factories(metafunc.config).registered(metafunc.config):
        return (yield)


def _function_id(item: pytest.Item) -> str:
    """The node id of the test function ``item`` was parametrized from."""
    parent = item.parent.nodeid if item.parent is not None else ""
    return f"{parent}::{getattr(item, 'originalname', item.name)}"


def _check_pytest_asyncio_test(item: pytest.Item, settings: _Settings) -> _FactoriesState:
    """Fail a pytest-asyncio test whose loop cannot be what its marks ask for, saying why."""
    state = _factories(item.config)
    if not state.usable:
        if settings.virtual:
            pytest.fail(
                f"{item.nodeid} is marked {MARKER}, but the installed pytest-asyncio cannot "
                "take a loop factory from a plugin (that needs pytest-asyncio 1.4 or later, "
                "with its pytest_asyncio_loop_factories hook); upgrade pytest-asyncio, or run "
                "the test body with virtualtime.run()",
                pytrace=False,
            )
        return state
    decided = state.plugin.decided.get(_function_id(item), _NOT_VIRTUAL)
    if decided != settings:
        pytest.fail(
            f"{item.nodeid}: @pytest.mark.{MARKER}: pytest-asyncio chose this test's loop "
            f"from the marks on the test function ({_describe(decided)}), but the test ends "
            f"up with {_describe(settings)}: a {MARKER} mark in pytest.param(...), or one "
            "added after collection, comes too late for pytest-asyncio.  Mark the test "
            "function, its class or its module instead (or use --virtualtime)",
            pytrace=False,
        )
    return state


def _describe(settings: _Settings) -> str:
    if not settings.virtual:
        return "no virtual time"
    options = ", ".join(f"{name}={value!r}" for name, value in settings.options)
    return f"virtual time({options})"


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
            plan = _AnyioPlan(item.nodeid, settings.options)
            if not item.config.stash.get(_ANYIO_PATCHED_KEY, False):
                # Failure leaves the flag unset; pytest_runtest_setup then fails the test.
                item.config.stash[_ANYIO_PATCHED_KEY] = _AnyioPatch.acquire()
    token = _ANYIO_PLAN.set(plan)
    try:
        return (yield)
    finally:
        _ANYIO_PLAN.reset(token)
