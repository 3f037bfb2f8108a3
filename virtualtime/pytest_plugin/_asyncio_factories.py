"""pytest-asyncio's side: the loop factories the plugin offers it, and when it offers them.

Owns the answer to pytest-asyncio's ``pytest_asyncio_loop_factories`` hook
(:class:`_AsyncioLoopFactories`), the virtual loop factory itself (:class:`_LoopFactory`, also
what anyio's runner is given), the bookkeeping of when that answer is registered with pytest
(:class:`_FactoriesState`: only while a virtual test is collected or set up, so tests that are
not virtual keep their loop and fixtures), and the set-up check that a pytest-asyncio test got
the loop its marks ask for.  The face's "How it plugs in" tells the whole story; this is where
it is done.

Part of ``testing``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trio``,
``net``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

import pytest

if TYPE_CHECKING:
    import asyncio

    from .._engine._loop import VirtualEventLoop

from .._options import LoopOptions
from .._shared._errors import UsageError
from ._seeds import current_seed
from ._settings import _NOT_VIRTUAL, MARKER, _Settings, _settings

_HOOK_NAME: Final = "pytest_asyncio_loop_factories"
_FACTORY_NAME: Final = "virtualtime"
_FACTORIES_PLUGIN_NAME: Final = "virtualtime-asyncio-loop-factories"


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
    ``loop_scope`` by factory, so tests with the same options share one loop.  Options
    without a ``seed`` take the seed of the test being set up, when the command line gives
    one (``--virtualtime-seeds``; see :mod:`._seeds`): pytest-asyncio picks a factory per
    test function, before the seeds parametrize it.
    """

    __slots__ = ("loop_options", "options", "seeded")

    def __init__(self, options: tuple[tuple[str, Any], ...]) -> None:
        self.options = options
        given = dict(options)
        self.seeded = given.get("seed") is not None
        if not self.seeded and given.get("perturb") == "ready":
            # perturb="ready" on the mark, the seed from the command line: checked with a
            # stand-in seed here, the test's own when the loop is built.
            given["seed"] = 0
        self.loop_options = LoopOptions.of(given)  # checked once, passed on

    def __call__(self) -> VirtualEventLoop:
        from .._engine._loop import VirtualEventLoop

        options = self.loop_options
        if not self.seeded:
            plan = current_seed()
            if plan is not None:
                perturb = dict(self.options).get("perturb", plan.perturb)
                options = options.replace(seed=plan.seed, perturb=perturb)
            elif options.seed is not None:
                raise UsageError(
                    f"{self!r} has perturb='ready' but no seed, and no test seed is set: "
                    "give the mark a seed, or run with --virtualtime-seeds N"
                )
        return VirtualEventLoop(options)

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
