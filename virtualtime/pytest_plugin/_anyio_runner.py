"""anyio's side: the wrapper around ``anyio.pytest_plugin.get_runner`` and the checked runner.

Owns what makes a virtual anyio test run on a virtual loop or clock: the plan of the test being
run (:class:`_AnyioPlan`, in a context variable while it is set up, run or torn down), the
counted patch of anyio's one runner-building function (:class:`_AnyioPatch`), and the runner
it hands back (:class:`_CheckedRunner`), which checks that each test really runs in virtual
time, puts the test under its horizon watch, and on trio runs tests and async fixtures guarded
against deadlocks.  anyio has no hook for its runner, hence the patch; the face's "How it plugs
in" says why it is safe.

Part of ``testing``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trio``,
``net``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import weakref
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any, Final

import pytest

from .._options import LoopOptions, check_names
from .._shared._errors import InvalidTypeError
from ._asyncio_factories import _LoopFactory
from ._running_clock import _require_virtual
from ._settings import MARKER, _fail
from ._trio import _named_call, _trio_guarded
from ._watch import _WATCHES


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
            # trio orders same-instant wake-ups at random itself: a seed does not reach it.
            given = {k: v for k, v in self.options if k not in ("seed", "perturb")}
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
