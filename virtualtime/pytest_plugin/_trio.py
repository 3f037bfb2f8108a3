"""Trio runs guarded against deadlock: pytest-trio's tests, and the guard anyio's runner uses.

Owns how a test that runs on a :class:`virtualtime.trio.VirtualClock` but whose ``trio.run``
someone else calls gets :class:`virtualtime.trio.RunGuard` around it, so that a deadlock raises
:class:`~virtualtime.DeadlockError` instead of hanging: :func:`_trio_guarded` (one awaited
call, used for anyio's tests and fixtures on trio) and, for pytest-trio, the runner handed to
its ``trio`` mark for the length of the test (:func:`_guard_pytest_trio`, undone at teardown).

Part of ``testing``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trio``,
``net``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

import pytest

if TYPE_CHECKING:
    from ..trio import VirtualClock


def _named_call(func: Callable[..., Any], kwargs: Mapping[str, Any]) -> Callable[[], Any]:
    """``func(**kwargs)`` as a call without arguments that keeps ``func``'s name."""
    call = functools.partial(func, **kwargs)
    functools.update_wrapper(call, func)
    return call


async def _trio_guarded(call: Callable[[], Awaitable[Any]]) -> Any:
    """Await ``call()`` so that a deadlock under a VirtualClock raises DeadlockError."""
    import trio.lowlevel

    from .. import trio as virtual_trio

    clock = trio.lowlevel.current_clock()
    if not isinstance(clock, virtual_trio.VirtualClock) or virtual_trio.RunGuard.active(clock):
        return await call()
    return await virtual_trio.RunGuard(clock, call).guarded_main()


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
