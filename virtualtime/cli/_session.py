"""The run session of ``virtualtime run``: the seams it sets, and what it counts.

How a script is made virtual without touching it (and without a policy)
-----------------------------------------------------------------------
Two seams, both undone when the run ends:

* :func:`virtualtime.configure` -- the engine's public seam for "options of the loops and
  clocks created in this context".  Every :class:`~virtualtime.VirtualEventLoop` and
  :class:`virtualtime.trio.VirtualClock` made during the run -- by the entry points below, or
  by the script itself (``virtualtime.run(main())``, ``virtualtime.trio.run``,
  ``EventLoopPolicy``) -- gets ``--start``, ``--rate``, ``--patch-time``, ``--wall-start``,
  ``--seed`` and ``--perturb`` (a loop's; trio's clock has no seed: trio orders same-instant
  wake-ups at random itself) and the history ``--trace`` needs on top of its own, and is
  reported to the session (counted in the summary, traced, stopped by ``--until``); a closing
  loop (or an ending trio run) hands its numbers over and is forgotten, so a script that runs
  ``asyncio.run`` thousands of times costs per run what it costs without the command.  The
  engine is not patched.
* The stdlib entry points through which a script creates a loop, replaced on the classes and
  modules themselves (so ``from asyncio import run`` sees them too):

  - ``asyncio.Runner.__init__``: a runner created without ``loop_factory`` gets the virtual
    loop factory.  ``asyncio.run`` (3.11+) and anyio's asyncio backend both go through
    ``asyncio.Runner``, so this one seam covers them.  A runner given a ``loop_factory``
    keeps it when the factory makes a virtual loop; any other loop (uvloop, a stock loop) is
    closed and replaced by a virtual one, with a note on stderr.
  - ``asyncio.Runner.run``: so that ``--until`` can end the run with its own status.
  - ``asyncio.new_event_loop``: for older code that builds its loop by hand.
  - ``asyncio.get_event_loop`` on Python 3.11--3.13, through the default policy class's
    ``new_event_loop`` method (the classic ``loop = asyncio.get_event_loop();
    loop.run_until_complete(main())`` creates its loop there).  No policy is installed, and
    asyncio's own DeprecationWarning on 3.12--3.13 is left as it is.  From 3.14 on asyncio
    raises ``RuntimeError`` there instead of creating a loop, and so it does here.
  - ``trio.run``: a run without a ``clock`` gets a :class:`virtualtime.trio.VirtualClock`
    and the deadlock report of :func:`virtualtime.trio.run` (anyio's trio backend calls
    ``trio.run`` too).  trio is never imported on the script's behalf: if it is not imported
    yet, a one-module import finder patches ``trio.run`` the moment the script imports trio.

Only the main thread's loops are made virtual.  A helper thread that runs its own
``asyncio.run`` (a background client, a rate limiter's refill thread) gets the stock loop, in
real time, as it would without the command; a virtual loop a thread asks for explicitly
(``virtualtime.run``) stays virtual but keeps its own options and is not counted (configure()
holds for the main thread's context, which ``threading.Thread`` does not inherit).
``--all-threads`` makes every thread's loops virtual (each one on its own clock), configured
and counted.  Nothing here installs or asks for an event-loop policy, so the command adds no
deprecation warning on Python 3.11 to 3.15.

``--until T`` schedules one extra timer at ``T`` on each loop (after every other timer due at
``T``): it cancels every task, as ``asyncio.run`` does on the way out, and the command then
exits with status 3 instead of letting the script continue after the interrupted run.  On trio
the main function runs inside ``trio.move_on_at(T)``.  A program that deadlocks before ``T``
is therefore stopped at ``T`` rather than reported as deadlocked; the message says so when
nothing was left scheduled.

Part of ``cli``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trio``,
``trace``, ``net``, ``api``, ``sim``, ``experiment`` (see tests/layout.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import math
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Final, TextIO

from .._engine._control import settle
from .._engine._loop import VirtualEventLoop
from .._engine._outside import wait_for_clients
from .._options import configure

__all__ = ["Clock", "Options", "Session", "Stop", "UntilReached"]

_UNTIL_PRIORITY: Final = 1 << 62
"""The ``--until`` timer runs after every other timer due at the same instant."""


class UntilReached(BaseException):
    """Raised through the script when ``--until`` stops a run (not an ``Exception``, so a
    script's ``except Exception`` does not swallow it)."""


@dataclass
class Stop:
    """What the ``--until`` timer found when it fired on one loop."""

    at: float
    cancelled: int
    idle: bool


@dataclass
class Clock:
    """One virtual clock the script ran on: a loop or a trio clock."""

    key: object
    label: str
    start: float
    now: Callable[[], float]
    timers: Callable[[], int] | None = None
    jumps: Callable[[], int] | None = None


@dataclass
class Options:
    """The command line's choices; ``None`` means "not given": the script's own choice stands."""

    until: float | None = None
    start: float | None = None
    rate: float | None = None
    deadlock_timeout: float | None = None
    history: int | None = None
    patch_time: bool = False
    wall_start: datetime.datetime | None = None
    quiet: bool = False
    all_threads: bool = False
    seed: int | None = None
    perturb: str | None = None

    def loop_options(self) -> dict[str, Any]:
        """The loop options the command line sets, for :func:`virtualtime.configure`."""
        given: dict[str, Any] = {}
        if self.start is not None:
            given["start"] = self.start
        if self.rate is not None:
            given["rate"] = self.rate
        if self.deadlock_timeout is not None:
            given["deadlock_timeout"] = self.deadlock_timeout
        if self.patch_time:
            given["patch_time"] = True
        if self.wall_start is not None:
            given["wall_start"] = self.wall_start
        if self.history:
            given["history"] = self.history  # configure() keeps the larger of two histories
        if self.seed is not None:
            given["seed"] = self.seed  # the order of same-instant timers, and so on
            given["perturb"] = self.perturb or "timers"
        return given


@dataclass
class Session:
    """The patches for one ``virtualtime run``, and what they saw.

    Nothing is kept per closed loop (or finished trio run): while a clock runs it is in
    :attr:`clocks`; when its loop closes (or its trio run returns) its numbers are added to
    the totals, its trace is handed to the recorder, and it is dropped.  So a script that calls
    ``asyncio.run`` a million times costs the same per call as without the command.
    """

    options: Options
    notes: TextIO
    recorder: Any = None
    clocks: dict[int, Clock] = field(default_factory=dict)
    """The live clocks (loops not closed yet, trio runs under way), by ``id`` of the key."""
    stops: dict[int, Stop] = field(default_factory=dict)
    first_stop: Stop | None = None
    seen: int = 0
    """How many clocks were ever adopted (also numbers their labels)."""
    runs: int = 0
    total_elapsed: float = 0.0
    total_timers: int | None = None
    total_jumps: int | None = None
    latest: Clock | None = None
    _undo: list[Callable[[], None]] = field(default_factory=list)
    _trio_depth: int = 0

    # ---- which threads

    def virtual_here(self) -> bool:
        """Whether loops made in the current thread are made virtual (see ``--all-threads``)."""
        return self.options.all_threads or threading.current_thread() is threading.main_thread()

    # ---- loops

    def new_loop(self) -> VirtualEventLoop:
        """The virtual loop factory the patched entry points use.

        Inside :meth:`installed`, :func:`virtualtime.configure` gives every new virtual loop
        the command line's options and reports it to :meth:`created` -- in the main thread's
        context, and with ``--all-threads`` in every thread -- so this only builds one.
        """
        return VirtualEventLoop()

    def created(self, obj: object) -> None:
        """:func:`virtualtime.configure`'s ``on_create``: count a new loop or clock."""
        if isinstance(obj, VirtualEventLoop):
            self.adopt(obj)
        else:
            self.adopt_clock(obj)

    def closed(self, obj: object) -> None:
        """:func:`virtualtime.configure`'s ``on_close``: a loop closed, or a trio run ended."""
        self.retire(obj)

    def _add(self, clock: Clock) -> None:
        self.seen += 1
        self.clocks[id(clock.key)] = clock
        self.latest = clock

    def adopt(self, loop: VirtualEventLoop) -> VirtualEventLoop:
        """Count ``loop`` in the summary and trace; arm ``--until`` on it.

        And let it serve: a loop that listens for connections waits for clients from outside
        instead of reporting a deadlock (see :func:`~virtualtime._engine._outside.
        wait_for_clients`) -- the program is a server, run to be used, until Ctrl-C or
        ``--until``.  trio needs nothing: its clock never counts a task waiting on a socket
        (a listener included) as deadlocked.
        """
        if id(loop) in self.clocks:
            return loop
        wait_for_clients(loop)
        stops = self.stops
        self._add(
            Clock(
                loop,
                f"asyncio loop {self.seen + 1}",
                loop.start_time,
                loop.time,
                timers=lambda: loop.timers_fired - (1 if id(loop) in stops else 0),
            )
        )
        until = self.options.until
        if until is not None:

            def stop() -> None:
                loop.create_task(self._stop(loop), name="virtualtime --until")

            stop.__qualname__ = "virtualtime --until"
            loop.call_at(until, stop, priority=_UNTIL_PRIORITY)
        return loop

    def retire(self, key: object) -> None:
        """``key``'s loop closed (or trio run ended): keep its numbers, drop the clock."""
        clock = self.clocks.pop(id(key), None)
        if clock is None:
            return
        now = clock.now()
        timers = clock.timers() if clock.timers is not None else None
        jumps = clock.jumps() if clock.jumps is not None else None
        if now != clock.start or timers or jumps:
            self.runs += 1
            self.total_elapsed += max(now - clock.start, 0.0)
            if self.recorder is not None:
                history: Sequence[Any] = ()
                tasks: Sequence[Any] = ()
                dropped = 0
                if isinstance(key, VirtualEventLoop):
                    history = key.history
                    tasks = key.task_history
                    dropped = max(key.timers_fired - len(history), 0)
                self.recorder.add_run(
                    key, clock.label, history, dropped, start=clock.start, tasks=tasks
                )
                self.recorder.forget(key)
        if timers is not None:
            self.total_timers = (self.total_timers or 0) + timers
        if jumps is not None:
            self.total_jumps = (self.total_jumps or 0) + jumps
        self.stops.pop(id(key), None)
        if self.latest is clock:
            self.latest = Clock(None, clock.label, clock.start, lambda: now)

    def close_left_open(self) -> None:
        """The script is over: close the virtual loops it left open and not running.

        python closes such a loop when it drops it at exit, while the loop's sockets are still
        open.  A script this command runs lives in a namespace that only the collector frees,
        and the collector may finalize a loop's self-pipe sockets before the loop, whose own
        close then fails on them ("Exception ignored" after the script's traceback).  Closing
        the loops here, with everything whole, is what python's exit does, in order.
        """
        for clock in list(self.clocks.values()):
            loop = clock.key
            if isinstance(loop, VirtualEventLoop) and not (loop.is_running() or loop.is_closed()):
                loop.close()  # its on_close retires it

    def retire_all(self) -> None:
        """The run is over: account for the clocks still live (loops never closed)."""
        for clock in list(self.clocks.values()):
            self.retire(clock.key)

    async def _stop(self, loop: VirtualEventLoop) -> None:
        # Let everything due at the --until instant run and settle first (like run_until),
        # then cancel what is left, as asyncio.run does on its way out.
        await settle()
        me = asyncio.current_task()
        tasks = [task for task in asyncio.all_tasks(loop) if task is not me and not task.done()]
        stop = self.stops[id(loop)] = Stop(loop.time(), len(tasks), loop.peek() == math.inf)
        self.first_stop = self.first_stop or stop
        for task in tasks:
            task.cancel(msg=f"virtualtime run --until: stopped at t={loop.time()!r}")

    def factory_for(
        self, user_factory: Callable[[], asyncio.AbstractEventLoop] | None
    ) -> Callable[[], asyncio.AbstractEventLoop] | None:
        if not self.virtual_here():
            return user_factory  # another thread's loop: left as the script made it
        if user_factory is None:
            return self.new_loop

        def factory() -> asyncio.AbstractEventLoop:
            loop = user_factory()
            if isinstance(loop, VirtualEventLoop):
                return loop
            loop.close()
            name = getattr(user_factory, "__qualname__", None) or repr(user_factory)
            self.note(f"replaced the loop from loop_factory={name} with a virtual loop")
            return self.new_loop()

        return factory

    def check_until(self, loop: asyncio.AbstractEventLoop) -> None:
        stop = self.stops.get(id(loop))
        if stop is not None:
            raise UntilReached(stop)

    # ---- trio

    def adopt_clock(self, clock: Any) -> None:
        if id(clock) in self.clocks:
            return
        label = f"trio run {self.seen + 1}"
        now = clock.current_time
        self._add(Clock(clock, label, now(), now, jumps=lambda: int(clock.jumps)))

    def trio_run(self, original: Callable[..., Any]) -> Callable[..., Any]:
        session = self

        @functools.wraps(original)
        def run(async_fn: Callable[..., Any], *args: Any, clock: Any = None, **kwargs: Any) -> Any:
            if session._trio_depth or not session.virtual_here():
                return original(async_fn, *args, clock=clock, **kwargs)
            from ..trio import VirtualClock
            from ..trio import run as virtual_run

            if clock is not None and not isinstance(clock, VirtualClock):
                # The script chose its own clock (a MockClock, say): keep it.
                return original(async_fn, *args, clock=clock, **kwargs)
            # A run without a clock gets one, and virtualtime.trio.run's deadlock report
            # (unless trio.run has options that one does not take); a run with a virtual
            # clock of its own (virtualtime.trio.run, say) is already set up: keep it so.
            guard = clock is None and not kwargs
            if clock is None:
                clock = VirtualClock()  # configure() adds the command line's options
            session.adopt_clock(clock)
            main = session._trio_traced(clock, session._trio_until(async_fn))
            session._trio_depth += 1
            try:
                if guard:
                    return virtual_run(main, *args, clock=clock)
                return original(main, *args, clock=clock, **kwargs)
            finally:
                session._trio_depth -= 1
                session.retire(clock)  # the run is over: keep its numbers, not its clock

        return run

    def _trio_until(self, async_fn: Callable[..., Any]) -> Callable[..., Any]:
        until = self.options.until
        if until is None:
            return async_fn
        import trio

        session = self

        async def main(*args: Any) -> Any:
            with trio.move_on_at(until) as scope:
                return await async_fn(*args)
            if scope.cancelled_caught:
                stop = Stop(trio.current_time(), 0, False)
                session.first_stop = session.first_stop or stop
                raise UntilReached(stop)
            return None  # pragma: no cover - the scope only cancels at the deadline

        return _named_like(main, async_fn)

    def _trio_traced(self, clock: Any, async_fn: Callable[..., Any]) -> Callable[..., Any]:
        """``async_fn``, telling the trace when each task of the run began and ended.

        Only with ``--trace``: trio keeps no timer history, so each task's life is one
        ``alive`` span on its row (asleep and waiting are not told apart), from a trio
        instrument added as the main task starts (trio's own system tasks, spawned
        before, are left out).  The main task's row is named after the script's function,
        as trio names a task, whatever wrapper runs it (``virtualtime.trio.run``'s guard).
        """
        recorder = self.recorder
        if recorder is None:
            return async_fn
        import trio

        function = async_fn.func if isinstance(async_fn, functools.partial) else async_fn
        name = f"{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', '?')}"

        async def main(*args: Any) -> Any:
            lives = _TrioLives(clock, recorder)
            lives.task_spawned(trio.lowlevel.current_task(), name)
            trio.lowlevel.add_instrument(lives)  # type: ignore[arg-type]  # duck-typed
            return await async_fn(*args)

        return _named_like(main, async_fn)

    # ---- notes and results

    def note(self, message: str) -> None:
        if not self.options.quiet:
            print(f"virtualtime: {message}", file=self.notes, flush=True)

    def current_time(self) -> float | None:
        """The time of the clock adopted last (live or not), or None before any."""
        return None if self.latest is None else self.latest.now()

    def elapsed(self) -> float:
        return self.total_elapsed + sum(
            max(clock.now() - clock.start, 0.0) for clock in self.clocks.values()
        )

    def timers(self) -> int | None:
        counts = [clock.timers() for clock in self.clocks.values() if clock.timers is not None]
        if self.total_timers is None and not counts:
            return None
        return (self.total_timers or 0) + sum(counts)

    def jumps(self) -> int | None:
        counts = [clock.jumps() for clock in self.clocks.values() if clock.jumps is not None]
        if self.total_jumps is None and not counts:
            return None
        return (self.total_jumps or 0) + sum(counts)

    # ---- patching

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """The run's seams: :func:`virtualtime.configure`, and the stdlib entry points."""
        with configure(
            on_create=self.created,
            on_close=self.closed,
            all_threads=self.options.all_threads,
            **self.options.loop_options(),
        ):
            try:
                self._install()
                yield
            finally:
                while self._undo:
                    self._undo.pop()()

    def _replace(self, owner: object, name: str, value: object) -> None:
        had = name in vars(owner)
        previous = vars(owner).get(name)

        def undo() -> None:
            if had:
                setattr(owner, name, previous)
            else:
                delattr(owner, name)

        setattr(owner, name, value)
        self._undo.append(undo)

    def _install(self) -> None:
        """Replace the entry points through which a script creates a loop (stdlib and trio).

        The engine itself is not patched: the loops and clocks these create -- and the ones
        the script creates itself -- get the command line's options from configure().
        """
        session = self
        runner_init = asyncio.Runner.__init__
        runner_run = asyncio.Runner.run

        @functools.wraps(runner_init)
        def init(
            runner: asyncio.Runner, *args: Any, loop_factory: Any = None, **kwargs: Any
        ) -> None:
            runner_init(runner, *args, loop_factory=session.factory_for(loop_factory), **kwargs)

        @functools.wraps(runner_run)
        def run(runner: asyncio.Runner, coro: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                result = runner_run(runner, coro, *args, **kwargs)
            except asyncio.CancelledError:
                session.check_until(runner.get_loop())
                raise
            session.check_until(runner.get_loop())
            return result

        self._replace(asyncio.Runner, "__init__", init)
        self._replace(asyncio.Runner, "run", run)

        stock_new_event_loop = asyncio.new_event_loop

        def new_event_loop() -> asyncio.AbstractEventLoop:
            if not session.virtual_here():
                return stock_new_event_loop()
            return session.new_loop()

        new_event_loop.__doc__ = "A new virtual event loop (patched by `virtualtime run`)."
        self._replace(asyncio, "new_event_loop", new_event_loop)
        self._replace(asyncio.events, "new_event_loop", new_event_loop)
        if sys.version_info < (3, 14):
            self._patch_default_policy()

        # trio.run is patched now if the script's process has imported trio already, else
        # the moment the script imports it: trio is never imported on the script's behalf
        # (importing it costs a quarter of a second, which an asyncio script should not pay).
        module = sys.modules.get("trio")
        if module is not None:
            self._patch_trio(module)
        else:
            hook = _OnImport("trio", self._patch_trio)
            sys.meta_path.insert(0, hook)
            self._undo.append(lambda: sys.meta_path.remove(hook))

    def _patch_default_policy(self) -> None:
        """Make the loop asyncio creates implicitly on 3.11--3.13 virtual, without a policy.

        ``loop = asyncio.get_event_loop(); loop.run_until_complete(main())`` -- and
        ``asyncio.get_event_loop_policy().get_event_loop()`` -- make a loop in the main thread
        when none is set, by calling the default policy's ``new_event_loop()``: that method
        is replaced on the default policy class for the run (no policy is installed, and
        asyncio's own DeprecationWarning on 3.12 and 3.13 is left as it is).  From 3.14 on
        both raise ``RuntimeError`` when no loop is set, under the command as without it.
        """
        policy_class = asyncio.events.BaseDefaultEventLoopPolicy
        stock = policy_class.new_event_loop
        session = self

        @functools.wraps(stock)
        def new_event_loop(policy: asyncio.events.BaseDefaultEventLoopPolicy) -> Any:
            if not session.virtual_here():
                return stock(policy)
            return session.new_loop()

        self._replace(policy_class, "new_event_loop", new_event_loop)

    def _patch_trio(self, module: ModuleType) -> None:
        original = getattr(module, "run", None)
        if original is None:  # pragma: no cover - a trio without trio.run
            return
        self._replace(module, "run", self.trio_run(original))


def _named_like(wrapper: Callable[..., Any], wrapped: Callable[..., Any]) -> Callable[..., Any]:
    """``wrapper`` named as ``wrapped``: trio names the main task after the function it gets
    (module and qualified name), and the task should keep the script's name."""
    for attribute in ("__module__", "__qualname__", "__name__"):
        value = getattr(wrapped, attribute, None)
        if isinstance(value, str):
            setattr(wrapper, attribute, value)
    return wrapper


class _TrioLives:
    """A trio instrument (``trio.abc.Instrument``'s two task hooks): each task's life, as an
    ``alive`` span on the task's row.  trio calls only the hooks an instrument defines."""

    def __init__(self, clock: Any, recorder: Any) -> None:
        self.clock = clock
        self.recorder = recorder
        self.born: dict[Any, tuple[float, str | None]] = {}

    def task_spawned(self, task: Any, name: str | None = None) -> None:
        self.born[task] = (self.clock.current_time(), name)

    def task_exited(self, task: Any) -> None:
        from ..trace import Span

        born = self.born.pop(task, None)
        ended = self.clock.current_time()
        if born is not None and ended > born[0]:
            span = Span(born[1] or task.name, "alive", born[0], ended, "alive")
            self.recorder.add_span(span, key=self.clock)


class _OnImport(importlib.abc.MetaPathFinder):
    """Calls ``patch(module)`` right after module ``name`` is first imported (trio only).

    The module is found by the rest of ``sys.meta_path`` as usual; only its loader is wrapped
    for that one import, and the module's ``__loader__`` and ``__spec__.loader`` are set back
    to the real loader afterwards.  It patches a third-party entry point (``trio.run``), never
    virtualtime's own classes.
    """

    def __init__(self, name: str, patch: Callable[[ModuleType], None]) -> None:
        self.name = name
        self.patch = patch
        self._busy = False

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name or self._busy:
            return None
        self._busy = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = _PatchingLoader(spec.loader, self.patch)
        return spec


class _PatchingLoader(importlib.abc.Loader):
    """A module's real loader, followed by a patch once the module has executed."""

    def __init__(
        self, loader: importlib.abc.Loader, on_import: Callable[[ModuleType], None]
    ) -> None:
        self.loader = loader
        self.on_import = on_import

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        try:
            self.loader.exec_module(module)
        finally:
            module.__loader__ = self.loader
            if module.__spec__ is not None:
                module.__spec__.loader = self.loader
        self.on_import(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)
