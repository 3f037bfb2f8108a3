"""The watch over a running virtual test: its horizon (``max_time``), interrupts, lost outcomes.

Owns :class:`_Watch` -- one per running virtual test, found by node id in :data:`_WATCHES` --
which arms the horizon without a timer of its own, keeps a pytest outcome raised in a loop
callback from vanishing, and states the facts (virtual time reached, timers fired, the likely
cause) when the test runs past its horizon or is interrupted; plus the helpers the
``pytest_runtest_call`` hook uses to put a pytest-asyncio test under it and to report.

Part of ``testing``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trio``,
``net``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, Final

import pytest

if TYPE_CHECKING:
    import asyncio

    from .._engine._loop import VirtualEventLoop
    from ..trio import VirtualClock


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

    def __init__(self, nodeid: str, max_time: float | None, seed: int | None = None) -> None:
        self.nodeid = nodeid
        self.max_time = max_time
        self.seed = seed
        """The seed the test runs under (None: none), checked against its loop's."""
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
        if self.seed is not None and loop.seed != self.seed:
            raise pytest.fail.Exception(
                f"{self.nodeid} should run under seed {self.seed}, but its loop was built with "
                f"seed={loop.seed}: a loop of a wider loop_scope is built once, for the first "
                "test that runs on it.  Run seeded tests on a loop of their own (the default "
                "loop_scope='function'), or pin one seed with the mark's seed=",
                pytrace=False,
            )
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
