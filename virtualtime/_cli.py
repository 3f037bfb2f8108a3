"""The ``virtualtime`` command: run an unmodified async program in virtual time.

``virtualtime run script.py`` runs ``script.py`` as ``python script.py`` would, except that
every ``asyncio.run``, ``asyncio.Runner``, ``anyio.run`` and ``trio.run`` inside it runs in
virtual time: a program that sleeps for a day finishes in a fraction of a second, and prints
the same thing every time.  ``virtualtime plot`` draws the trace a run leaves behind.

How a script is made virtual without touching it (and without a policy)
-----------------------------------------------------------------------
Event-loop policies would be the old way to swap the loop, but asyncio deprecates them in 3.14
and removes them in 3.16.  Instead, for the duration of the run only, the command replaces the
few entry points through which programs create loops, and puts them back afterwards:

* ``asyncio.Runner.__init__``: a runner created without ``loop_factory`` gets the virtual
  loop factory.  ``asyncio.run`` (3.11+) and anyio's asyncio backend both go through
  ``asyncio.Runner``, so this one seam covers them.  A runner given a ``loop_factory`` keeps
  it when the factory makes a virtual loop (``virtualtime.new_event_loop``,
  ``virtualtime.run``); any other loop (uvloop, a stock loop) is closed and replaced by a
  virtual one, with a note on stderr.
* ``asyncio.Runner.run``: so that ``--until`` can end the run with its own status.
* ``asyncio.new_event_loop``: for older code that builds its loop by hand.
* On Python 3.11--3.13 only, the default policy class's ``new_event_loop`` method: the classic
  ``loop = asyncio.get_event_loop(); loop.run_until_complete(main())`` (and
  ``asyncio.get_event_loop_policy().get_event_loop()``) creates its loop there when none is
  set.  No policy is installed, and asyncio's own DeprecationWarning on 3.12--3.13 is left as
  it is.  From 3.14 on asyncio raises ``RuntimeError`` there instead of creating a loop, and
  so it does under the command.
* ``trio.run``: a run without a ``clock`` gets a :class:`virtualtime.trio.VirtualClock`
  (anyio's trio backend calls ``trio.run`` too).  trio is never imported on the script's
  behalf: if it is not imported yet, an import hook patches ``trio.run`` the moment the
  script imports trio.
* ``VirtualEventLoop.__init__`` and ``VirtualClock.__init__``: so that the command line's
  ``--start``, ``--rate``, ``--patch-time``, ``--wall-start`` and the history ``--trace``
  needs also reach the loops and clocks the script makes itself (``virtualtime.run(main())``
  in an example), and so that every virtual loop is counted in the summary, traced and
  stopped by ``--until``.
* ``VirtualEventLoop.close``: a closed loop's numbers go into the summary's totals and its
  history into the trace, and the command keeps nothing else of it, so a script that runs
  ``asyncio.run`` thousands of times costs per run what it costs without the command.

Only the main thread's loops are made virtual.  A helper thread that runs its own
``asyncio.run`` (a background client, a rate limiter's refill thread) gets the stock loop, in
real time, as it would without the command; a virtual loop a thread asks for explicitly
(``virtualtime.run``) stays virtual but keeps its own options and is not counted.
``--all-threads`` makes every thread's loops virtual (each one on its own clock).

Only these public names are replaced, on the classes and modules themselves, so ``from asyncio
import run`` inside the script sees the virtual version as well.  Nothing here installs or asks
for an event-loop policy, so the command adds no deprecation warning on Python 3.11 to 3.15.

``--until T`` schedules one extra timer at ``T`` on each loop (after every other timer due at
``T``): it cancels every task, as ``asyncio.run`` does on the way out, and the command then
exits with status 3 instead of letting the script continue after the interrupted run.  On trio
the main function runs inside ``trio.move_on_at(T)``.  A program that deadlocks before ``T``
is therefore stopped at ``T`` rather than reported as deadlocked; the message says so when
nothing was left scheduled.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import math
import os
import random
import re
import runpy
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import IO, Any, Final, TextIO

from ._control import settle
from ._errors import DeadlockError
from ._loop import VirtualEventLoop
from ._patch import check_wall_start
from ._units import format_duration as format_duration
from ._units import parse_time as parse_time

__all__ = ["EXIT_DEADLOCK", "EXIT_ERROR", "EXIT_UNTIL", "EXIT_USAGE", "main", "parse_time"]

EXIT_OK: Final = 0
EXIT_ERROR: Final = 1
"""The script raised an exception (its traceback is printed), or a command failed."""
EXIT_USAGE: Final = 2
"""Bad command line: an unknown option, a bad value, a script that cannot be found."""
EXIT_UNTIL: Final = 3
"""``--until`` stopped the run before the script finished."""
EXIT_DEADLOCK: Final = 4
"""The program deadlocked: every task waited for something that could never happen."""
EXIT_INTERRUPTED: Final = 130
"""Interrupted with Ctrl-C (128 + SIGINT, as shells report it)."""

_UNTIL_PRIORITY: Final = 1 << 62
"""The ``--until`` timer runs after every other timer due at the same instant."""

_DEFAULT_TRACE_LIMIT: Final = 1_000_000

_EPILOG: Final = """\
examples:
  virtualtime run examples/retry.py               a day of retries in a fraction of a second
  virtualtime run --until 6h --trace out.json sim.py --workers 4
  virtualtime run --rate 60 sim.py                watch it at a minute per second
  virtualtime run -m mypackage.service            run a module, like python -m
  virtualtime plot out.json -o timeline.png       draw the trace as a timeline

exit status: the script's own, or 1 if it raised, 2 for a bad command line,
3 when --until stopped it, 4 on a deadlock, 130 when interrupted.
"""

_RUN_EPILOG: Final = """\
Times (--until, --start) are virtual seconds, or durations such as 90s, 15m, 36h, 2d, 1h30m.
Options go before the script; everything after the script is passed to it.

examples:
  virtualtime run examples/retry.py
  virtualtime run --until 1d --seed 7 --trace day.json sim.py --vehicles 12
"""


# --------------------------------------------------------------------------- small parsers


def _time_arg(text: str) -> float:
    try:
        return parse_time(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _rate_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(
            f"expected a finite number >= 0 (virtual seconds per real second; 0 = no pacing), "
            f"got {text!r}"
        )
    return value


def _wall_start_arg(text: str) -> datetime.datetime:
    """``--wall-start``: ISO 8601; naive means local time, as the marker's ``wall_start=``."""
    try:
        value = datetime.datetime.fromisoformat(text)
        check_wall_start(value)
    except (TypeError, ValueError) as error:
        raise argparse.ArgumentTypeError(
            f"expected an ISO 8601 date and time (2030-01-01T00:00:00Z; without an offset it "
            f"is local time), got {text!r} ({error})"
        ) from None
    return value


def _count_arg(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}")
        return value

    return parse


def _size_arg(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", text)
    if match is None:
        raise argparse.ArgumentTypeError(
            f"expected WIDTHxHEIGHT in pixels (1600x900), got {text!r}"
        )
    width, height = int(match[1]), int(match[2])
    if not (200 <= width <= 20000 and 200 <= height <= 20000):
        raise argparse.ArgumentTypeError(
            f"width and height must be 200 to 20000 pixels, got {text!r}"
        )
    return width, height


# --------------------------------------------------------------------------- the parser

# Options of ``run`` that take a value; the command line is split at the script by hand
# (options before it are ours, everything after it is the script's), so these must be known.
_RUN_VALUE_OPTIONS: Final = frozenset(
    {"--until", "--start", "--rate", "--trace", "--trace-limit", "--seed", "--wall-start"}
)


def _build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="virtualtime",
        description=(
            "Run asyncio, anyio and trio programs in virtual time: sleeps return at once, "
            "timeouts fire exactly, and a day of behaviour takes a fraction of a second."
        ),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"virtualtime {__version__} (Python {sys.version.split()[0]})",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = commands.add_parser(
        "run",
        help="run a script in virtual time",
        description=(
            "Run SCRIPT as `python SCRIPT ARGS...` would, with every asyncio.run, "
            "asyncio.Runner, anyio.run and trio.run inside it in virtual time. No edits to "
            "the script are needed."
        ),
        epilog=_RUN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    run.add_argument(
        "--until",
        type=_time_arg,
        metavar="T",
        help="stop at virtual time T: cancel every task and exit with status 3",
    )
    run.add_argument(
        "--start", type=_time_arg, metavar="T", help="virtual time to start at (default 0)"
    )
    run.add_argument(
        "--rate",
        type=_rate_arg,
        metavar="R",
        help="pace virtual time at R x real time, to watch it (default 0: as fast as possible)",
    )
    run.add_argument(
        "--trace",
        metavar="FILE",
        help="write what happened when as a Chrome trace (open in ui.perfetto.dev, or "
        "`virtualtime plot FILE`)",
    )
    run.add_argument(
        "--trace-limit",
        type=_count_arg(1),
        default=_DEFAULT_TRACE_LIMIT,
        metavar="N",
        help=f"keep at most the latest N timers per loop for --trace ({_DEFAULT_TRACE_LIMIT:,})",
    )
    run.add_argument(
        "--seed", type=_count_arg(0), metavar="N", help="seed `random` so a stochastic run repeats"
    )
    run.add_argument(
        "--patch-time",
        action="store_true",
        help="make time.time(), time.monotonic(), datetime.now() and the rest follow virtual time",
    )
    run.add_argument(
        "--wall-start",
        type=_wall_start_arg,
        metavar="ISO",
        help="the wall clock at virtual time --start, ISO 8601 (2030-01-01T00:00:00Z; "
        "no offset: local time); default: the real time now",
    )
    run.add_argument(
        "--all-threads",
        action="store_true",
        help="make loops started by other threads virtual too (default: the main thread's only)",
    )
    run.add_argument(
        "-q", "--quiet", action="store_true", help="no summary line, progress bar or notes"
    )
    run.add_argument("-m", dest="module", metavar="MODULE", help="run a module, like python -m")
    run.add_argument("script", nargs="?", metavar="SCRIPT", help="the Python file to run")
    run.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="its arguments")

    plot = commands.add_parser(
        "plot",
        help="draw a trace written by `run --trace` as a timeline",
        description="Draw a trace as a Gantt-style timeline: one row per task or vehicle.",
        epilog="example:\n  virtualtime plot out.json -o timeline.png --size 1600x900",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    plot.add_argument("trace", metavar="TRACE", help="a trace file from `virtualtime run --trace`")
    plot.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="image to write; .png, .svg or .pdf (default: TRACE with .png)",
    )
    plot.add_argument(
        "--size",
        type=_size_arg,
        default=(1600, 900),
        metavar="WxH",
        help="image size in pixels (1600x900)",
    )
    plot.add_argument("--title", help="title above the timeline")
    plot.add_argument(
        "--max-rows", type=_count_arg(1), default=40, metavar="N", help="rows to draw (40)"
    )
    plot.add_argument(
        "--rows",
        action="append",
        metavar="PATTERN",
        help="draw only rows whose name matches (shell-style, e.g. 'vehicle *'; repeatable)",
    )
    # --- experiment hook (issue 17): the sub-command lives in virtualtime/experiment/_cli.py
    from .experiment._cli import add_subcommand as _add_experiment

    _add_experiment(commands)
    # --- end of experiment hook
    return parser


def _split_run(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split ``run``'s arguments into ours (up to the script or module) and the script's."""
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            return list(argv[: i + 2]), list(argv[i + 2 :])
        if token == "-m":
            return list(argv[: i + 2]), list(argv[i + 2 :])
        if token.startswith("-m") and not token.startswith("--"):
            return list(argv[: i + 1]), list(argv[i + 1 :])
        if token in _RUN_VALUE_OPTIONS:
            i += 2
            continue
        if token.startswith("-"):
            i += 1
            continue
        return list(argv[: i + 1]), list(argv[i + 1 :])
    return list(argv), []


# --------------------------------------------------------------------------- the session


class UntilReached(BaseException):
    """Raised through the script when ``--until`` stops a run (not an ``Exception``, so a
    script's ``except Exception`` does not swallow it)."""


@dataclass
class _Stop:
    """What the ``--until`` timer found when it fired on one loop."""

    at: float
    cancelled: int
    idle: bool


@dataclass
class _Clock:
    """One virtual clock the script ran on: a loop or a trio clock."""

    key: object
    label: str
    start: float
    now: Callable[[], float]
    timers: Callable[[], int] | None = None
    jumps: Callable[[], int] | None = None


@dataclass
class _Options:
    """The command line's choices; ``None`` means "not given": the script's own choice stands."""

    until: float | None = None
    start: float | None = None
    rate: float | None = None
    history: int | None = None
    patch_time: bool = False
    wall_start: datetime.datetime | None = None
    quiet: bool = False
    all_threads: bool = False

    def merge(self, options: dict[str, Any]) -> dict[str, Any]:
        """A virtual loop's ``options`` with the command line's on top."""
        merged = dict(options)
        if self.start is not None:
            merged["start"] = self.start
        if self.rate is not None:
            merged["rate"] = self.rate
        if self.patch_time:
            merged["patch_time"] = True
        if self.wall_start is not None:
            merged["wall_start"] = self.wall_start
        if self.history:
            own = merged.get("history")
            if own is None or (isinstance(own, int) and not isinstance(own, bool)):
                merged["history"] = max(own or 0, self.history)
        return merged

    def clock_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """A trio ``VirtualClock``'s ``options`` with the command line's on top."""
        merged = dict(options)
        if self.start is not None:
            merged["start"] = self.start
        if self.rate is not None:
            merged["rate"] = self.rate
        if self.patch_time:
            merged["patch_time"] = True
        if self.wall_start is not None:
            merged["wall_start"] = self.wall_start
        return merged


@dataclass
class _Session:
    """The patches for one ``virtualtime run``, and what they saw.

    Nothing is kept per closed loop (or finished trio run): while a clock runs it is in
    :attr:`clocks`; when its loop closes (or its trio run returns) its numbers are added to
    the totals, its trace is handed to the recorder, and it is dropped.  So a script that calls
    ``asyncio.run`` a million times costs the same per call as without the command.
    """

    options: _Options
    notes: TextIO
    recorder: Any = None
    clocks: dict[int, _Clock] = field(default_factory=dict)
    """The live clocks (loops not closed yet, trio runs under way), by ``id`` of the key."""
    stops: dict[int, _Stop] = field(default_factory=dict)
    first_stop: _Stop | None = None
    seen: int = 0
    """How many clocks were ever adopted (also numbers their labels)."""
    runs: int = 0
    total_elapsed: float = 0.0
    total_timers: int | None = None
    total_jumps: int | None = None
    latest: _Clock | None = None
    _undo: list[Callable[[], None]] = field(default_factory=list)
    _trio_depth: int = 0

    # ---- which threads

    def virtual_here(self) -> bool:
        """Whether loops made in the current thread are made virtual (see ``--all-threads``)."""
        return self.options.all_threads or threading.current_thread() is threading.main_thread()

    # ---- loops

    def new_loop(self) -> VirtualEventLoop:
        """The virtual loop factory the patched entry points use."""
        return VirtualEventLoop()  # the patched __init__ adds the options and adopts it

    def _add(self, clock: _Clock) -> None:
        self.seen += 1
        self.clocks[id(clock.key)] = clock
        self.latest = clock

    def adopt(self, loop: VirtualEventLoop) -> VirtualEventLoop:
        """Count ``loop`` in the summary and trace; arm ``--until`` on it."""
        if id(loop) in self.clocks:
            return loop
        stops = self.stops
        self._add(
            _Clock(
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
                dropped = 0
                if isinstance(key, VirtualEventLoop):
                    history = key.history
                    dropped = max(key.timers_fired - len(history), 0)
                self.recorder.add_run(key, clock.label, history, dropped)
                self.recorder.forget(key)
        if timers is not None:
            self.total_timers = (self.total_timers or 0) + timers
        if jumps is not None:
            self.total_jumps = (self.total_jumps or 0) + jumps
        self.stops.pop(id(key), None)
        if self.latest is clock:
            self.latest = _Clock(None, clock.label, clock.start, lambda: now)

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
        stop = self.stops[id(loop)] = _Stop(loop.time(), len(tasks), loop.peek() == math.inf)
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
        self._add(_Clock(clock, label, now(), now, jumps=lambda: int(clock.jumps)))

    def trio_run(self, original: Callable[..., Any]) -> Callable[..., Any]:
        session = self

        @functools.wraps(original)
        def run(async_fn: Callable[..., Any], *args: Any, clock: Any = None, **kwargs: Any) -> Any:
            if session._trio_depth or not session.virtual_here():
                return original(async_fn, *args, clock=clock, **kwargs)
            from .trio import VirtualClock
            from .trio import run as virtual_run

            if clock is not None and not isinstance(clock, VirtualClock):
                # The script chose its own clock (a MockClock, say): keep it.
                return original(async_fn, *args, clock=clock, **kwargs)
            # A run without a clock gets one, and virtualtime.trio.run's deadlock report
            # (unless trio.run has options that one does not take); a run with a virtual
            # clock of its own (virtualtime.trio.run, say) is already set up: keep it so.
            guard = clock is None and not kwargs
            if clock is None:
                clock = VirtualClock()  # the patched __init__ adds the command line's options
            session.adopt_clock(clock)
            main = session._trio_until(async_fn)
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
                stop = _Stop(trio.current_time(), 0, False)
                session.first_stop = session.first_stop or stop
                raise UntilReached(stop)
            return None  # pragma: no cover - the scope only cancels at the deadline

        main.__qualname__ = getattr(async_fn, "__qualname__", main.__qualname__)
        main.__name__ = getattr(async_fn, "__name__", main.__name__)
        return main

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

        # Every virtual loop made during the run -- by the patched entry points, by
        # virtualtime.run / new_event_loop in the script, by EventLoopPolicy -- gets the
        # command line's options on top of its own, and is counted, traced and stopped.
        loop_init = VirtualEventLoop.__init__

        @functools.wraps(loop_init)
        def virtual_init(loop: VirtualEventLoop, **options: Any) -> None:
            if not session.virtual_here():  # another thread's own virtual loop: as it is
                loop_init(loop, **options)
                return
            loop_init(loop, **session.options.merge(options))
            session.adopt(loop)

        self._replace(VirtualEventLoop, "__init__", virtual_init)
        loop_close = VirtualEventLoop.close

        @functools.wraps(loop_close)
        def virtual_close(loop: VirtualEventLoop) -> None:
            loop_close(loop)
            session.retire(loop)  # nothing is kept per closed loop

        self._replace(VirtualEventLoop, "close", virtual_close)

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

        # trio is patched now if the script's process has imported it already, else the
        # moment the script imports it (never on its behalf).
        patches = {"trio": self._patch_trio, "virtualtime.trio": self._patch_clock}
        later = {}
        for name, patch in patches.items():
            module = sys.modules.get(name)
            if module is not None:
                patch(module)
            else:
                later[name] = patch
        if later:
            hook = _ImportHook(later)
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

    def _patch_clock(self, module: ModuleType) -> None:
        clock_class = module.VirtualClock
        clock_init = clock_class.__init__
        session = self

        @functools.wraps(clock_init)
        def init(clock: Any, **options: Any) -> None:
            if not session.virtual_here():
                clock_init(clock, **options)
                return
            clock_init(clock, **session.options.clock_options(options))

        self._replace(clock_class, "__init__", init)


class _ImportHook(importlib.abc.MetaPathFinder):
    """Calls ``patches[name](module)`` right after module ``name`` is first imported.

    The module is found by the rest of ``sys.meta_path`` as usual; only its loader is wrapped
    for that one import, and the module's ``__loader__`` and ``__spec__.loader`` are set back
    to the real loader afterwards.
    """

    def __init__(self, patches: Mapping[str, Callable[[ModuleType], None]]) -> None:
        self.patches = patches
        self._busy = False

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        on_import = self.patches.get(fullname)
        if on_import is None or self._busy:
            return None
        self._busy = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = _PatchingLoader(spec.loader, on_import)
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


# --------------------------------------------------------------------------- progress bar


def render_bar(fraction: float, now: float, until: float, width: int = 30) -> str:
    """One line of text progress: ``[#########.........]  30%  t=7.2 h of 24 h``."""
    fraction = min(max(fraction, 0.0), 1.0)
    filled = round(fraction * width)
    bar = "#" * filled + "." * (width - filled)
    return f"[{bar}] {fraction * 100:3.0f}%  t={format_duration(now)} of {format_duration(until)}"


class _Progress:
    """A progress bar of virtual time on stderr, from a thread that only reads the clock.

    Reading the loop's time from another thread never disturbs the run (no timer is added,
    so ``--until`` runs fire exactly the same timers as plain ones).  It stays hidden for the
    first ``show_after`` real seconds, so quick runs print nothing.  rich draws it when
    installed; otherwise a plain text line is redrawn in place.
    """

    def __init__(
        self,
        session: _Session,
        until: float,
        stream: TextIO,
        *,
        show_after: float = 0.3,
        use_rich: bool | None = None,
    ) -> None:
        self.session = session
        self.until = until
        self.stream = stream
        self.show_after = show_after
        self.began = time.monotonic()
        self.shown = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rich: Any = None
        self._rich_task: Any = None
        self._lock = threading.RLock()
        self._drawn = False
        self._at_line_start = True
        self._saved: tuple[TextIO, TextIO] | None = None
        if use_rich is None:
            use_rich = importlib.util.find_spec("rich") is not None
        if use_rich:
            self._start_rich()

    def fraction(self) -> tuple[float, float]:
        """How far the current run is from its start to ``--until``, and its time now."""
        latest = self.session.latest
        if latest is None:
            return 0.0, 0.0
        start, now = latest.start, latest.now()
        span = self.until - start
        return (1.0 if span <= 0 else (now - start) / span), now

    def _start_rich(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn

        progress = Progress(
            TextColumn("[bold]virtual time"),
            BarColumn(),
            TaskProgressColumn(),
            TextColumn("{task.fields[now]}"),
            console=Console(file=self.stream),
            transient=True,
            refresh_per_second=10,
            # The script's own output must stay where it was going (a file, a pipe), not be
            # captured and re-rendered on the progress bar's stream.
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._rich_task = progress.add_task("run", total=1000, visible=False, now="")
        progress.start()
        self._rich = progress

    def tick(self) -> None:
        """Redraw once (called ten times a second by the thread; callable directly)."""
        if not self.shown and time.monotonic() - self.began < self.show_after:
            return
        fraction, now = self.fraction()
        label = f"t={format_duration(now)} of {format_duration(self.until)}"
        if self._rich is not None:
            self._rich.update(self._rich_task, completed=fraction * 1000, now=label, visible=True)
            self.shown = True
            return
        with self._lock:
            if not self.shown:
                self._wrap_streams()
            self.shown = True
            if not self._at_line_start:
                return  # the script is half-way through a line: do not draw over it
            self.stream.write("\r" + render_bar(fraction, now, self.until) + "\x1b[K")
            self.stream.flush()
            self._drawn = True

    def clear_line(self) -> None:
        """Erase the text bar, if it is drawn, so that other output starts on a clean line."""
        if self._drawn:
            self.stream.write("\r\x1b[K")
            self._drawn = False

    def wrote(self, text: str) -> None:
        """Note output that went past the bar (whether it ended a line)."""
        if text:
            self._at_line_start = text.endswith("\n")

    def _wrap_streams(self) -> None:
        self._saved = (sys.stdout, sys.stderr)
        sys.stdout = _ClearingStream(sys.stdout, self)
        sys.stderr = _ClearingStream(sys.stderr, self)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.tick()

    def __enter__(self) -> _Progress:
        self._thread = threading.Thread(target=self._run, name="virtualtime-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._rich is not None:
            self._rich.stop()
            return
        with self._lock:
            if self._saved is not None:
                if isinstance(sys.stdout, _ClearingStream):
                    sys.stdout = self._saved[0]
                if isinstance(sys.stderr, _ClearingStream):
                    sys.stderr = self._saved[1]
            self.clear_line()
            self.stream.flush()


class _ClearingStream:
    """Wraps stdout/stderr while the text bar shows: erase the bar before other output."""

    def __init__(self, inner: TextIO, progress: _Progress) -> None:
        self._inner = inner
        self._progress = progress

    def write(self, text: str) -> int:
        with self._progress._lock:
            self._progress.clear_line()
            self._progress.stream.flush()
            written = self._inner.write(text)
            self._progress.wrote(text)
            return written

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


# --------------------------------------------------------------------------- commands


@dataclass
class _Target:
    path: str | None
    module: str | None
    args: list[str]

    @property
    def argv0(self) -> str:
        return self.path if self.path is not None else f"-m {self.module}"


def _error(message: str, stream: IO[str] | None = None) -> None:
    print(f"virtualtime: error: {message}", file=stream or sys.stderr, flush=True)


_HIDDEN_FRAMES: Final = ("<frozen runpy>", "<frozen importlib._bootstrap>")


def _script_traceback(error: BaseException) -> str:
    """The script's traceback, without the frames of this command and of runpy."""
    hidden = {os.path.abspath(__file__), os.path.abspath(runpy.__file__ or "runpy")}
    te = traceback.TracebackException.from_exception(error)
    _prune(te, hidden)
    return "".join(te.format())


def _hidden(filename: str, hidden: set[str]) -> bool:
    return filename in _HIDDEN_FRAMES or os.path.abspath(filename) in hidden


def _prune(te: traceback.TracebackException, hidden: set[str], depth: int = 0) -> None:
    if depth > 20:
        return
    te.stack = traceback.StackSummary.from_list(
        [frame for frame in te.stack if not _hidden(frame.filename, hidden)]
    )
    for chained in (te.__cause__, te.__context__):
        if chained is not None:
            _prune(chained, hidden, depth + 1)
    for inner in getattr(te, "exceptions", None) or ():
        _prune(inner, hidden, depth + 1)


def _module_exists(name: str) -> bool:
    """Whether ``python -m name`` would find the module (the current folder included)."""
    sys.path.insert(0, os.getcwd())
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
    finally:
        sys.path.pop(0)


def _resolve(args: argparse.Namespace, script_args: list[str]) -> _Target | str:
    """The script or module to run, or an error message."""
    if args.module is not None:
        if not _module_exists(args.module):
            return f"no module named {args.module!r}"
        extra = [args.script] if args.script is not None else []
        return _Target(None, args.module, extra + list(args.args) + script_args)
    if args.script is None:
        return "run: missing SCRIPT (try: virtualtime run examples/retry.py)"
    path = args.script
    if not os.path.exists(path):
        return f"can't open file {os.path.abspath(path)!r}: no such file"
    if os.path.isdir(path) and not os.path.exists(os.path.join(path, "__main__.py")):
        return f"can't find '__main__.py' in directory {os.path.abspath(path)!r}"
    return _Target(path, None, list(args.args) + script_args)


def _execute(target: _Target) -> None:
    """Run the script as ``__main__``, with ``sys.argv`` and ``sys.path`` as python sets them."""
    saved_argv = sys.argv
    saved_path = list(sys.path)
    try:
        if target.path is not None:
            sys.argv = [target.path, *target.args]
            script_dir = os.path.dirname(os.path.abspath(target.path))
            if os.path.isdir(target.path):
                script_dir = os.path.abspath(target.path)
            if sys.path:
                sys.path[0] = script_dir
            else:
                sys.path.insert(0, script_dir)
            runpy.run_path(target.path, run_name="__main__")
        else:
            assert target.module is not None
            sys.argv = [target.module, *target.args]
            if sys.path:
                sys.path[0] = os.getcwd()
            else:
                sys.path.insert(0, os.getcwd())
            runpy.run_module(target.module, run_name="__main__", alter_sys=True)
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path


def _exit_code(code: object) -> int:
    """Exit status for ``SystemExit(code)``, as the interpreter computes it."""
    if code is None:
        return EXIT_OK
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return EXIT_ERROR


def _command_run(args: argparse.Namespace, script_args: list[str]) -> int:
    target = _resolve(args, script_args)
    if isinstance(target, str):
        _error(target)
        return EXIT_USAGE
    start = 0.0 if args.start is None else args.start
    if args.until is not None and args.until <= start:
        _error(
            f"--until ({args.until:g} s) must be later than --start ({start:g} s): "
            "virtual time never goes backwards"
        )
        return EXIT_USAGE
    if args.trace is not None:
        args.trace = os.path.abspath(args.trace)  # the script may change directory
        folder = os.path.dirname(args.trace)
        if not os.path.isdir(folder):
            _error(f"--trace: cannot write {args.trace!r}: folder {folder!r} does not exist")
            return EXIT_USAGE
    options = _Options(
        until=args.until,
        start=args.start,
        rate=args.rate,
        history=args.trace_limit if args.trace is not None else None,
        patch_time=args.patch_time,
        wall_start=args.wall_start,
        quiet=args.quiet,
        all_threads=args.all_threads,
    )
    notes = sys.stderr
    from ._trace import TraceRecorder

    recorder = TraceRecorder() if args.trace is not None else None
    session = _Session(options, notes, recorder)
    random_state = random.getstate()
    if args.seed is not None:
        random.seed(args.seed)
    show_bar = args.until is not None and not args.quiet and _isatty(notes)
    began = time.perf_counter()
    status = EXIT_OK
    outcome: BaseException | None = None
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(session.installed())
            if recorder is not None:
                stack.enter_context(recorder)
            if show_bar:
                stack.enter_context(_Progress(session, args.until, notes))
            _execute(target)
    except SystemExit as error:
        status = _exit_code(error.code)
    except UntilReached as error:
        outcome = error
        status = EXIT_UNTIL
    except DeadlockError as error:
        outcome = error
        status = EXIT_DEADLOCK
    except KeyboardInterrupt:
        status = EXIT_INTERRUPTED
    except BaseException as error:  # the script's own failure: show it as python would
        if isinstance(error, asyncio.CancelledError) and session.first_stop is not None:
            outcome = UntilReached(session.first_stop)
            status = EXIT_UNTIL
        else:
            sys.stdout.flush()
            print(_script_traceback(error), end="", file=sys.stderr, flush=True)
            status = EXIT_ERROR
    finally:
        real = time.perf_counter() - began
        random.setstate(random_state)
        _flush(sys.stdout)
        session.retire_all()

    if isinstance(outcome, DeadlockError):
        print(f"virtualtime: {outcome}", file=sys.stderr, flush=True)
    elif isinstance(outcome, UntilReached):
        stop = outcome.args[0] if outcome.args else None
        print(_until_message(stop, args.until), file=sys.stderr, flush=True)
    elif status == EXIT_INTERRUPTED:
        now = session.current_time()
        where = f" at virtual time {now:g} s" if now is not None else ""
        print(f"virtualtime: interrupted{where}", file=sys.stderr, flush=True)

    if recorder is not None:
        try:
            count = recorder.write(str(args.trace), command=_command_line(target))
        except OSError as error:
            _error(f"--trace: cannot write {args.trace!r}: {error.strerror or error}")
            return status or EXIT_ERROR
        session.note(f"trace of {count:,} events written to {args.trace}")

    if not args.quiet:
        print(_summary(session, real), file=sys.stderr, flush=True)
    return status


def _command_line(target: _Target) -> str:
    return " ".join([target.argv0, *target.args])


def _until_message(stop: object, until: float) -> str:
    if not isinstance(stop, _Stop):
        return f"virtualtime: stopped at virtual time {format_duration(until)} (--until)"
    text = f"virtualtime: stopped at virtual time {format_duration(stop.at)} (--until)"
    if stop.cancelled:
        text += f"; cancelled {stop.cancelled} task{'s' if stop.cancelled != 1 else ''}"
    if stop.idle and stop.cancelled:
        text += (
            "; nothing else was scheduled, so every task was waiting for something that is "
            "not a timer (a deadlock, or real I/O): run without --until for a deadlock report"
        )
    return text


def _summary(session: _Session, real: float) -> str:
    if not session.seen:
        return (
            "virtualtime: the script never started an event loop "
            "(asyncio.run, asyncio.Runner, anyio.run or trio.run)"
        )
    virtual = session.elapsed()
    text = f"virtualtime: {format_duration(virtual)} of virtual time in {real:.3g} s"
    if virtual > 0 and real > 0:
        speed = virtual / real
        text += f" ({speed:,.0f}x real time)" if speed >= 10 else f" ({speed:.2g}x real time)"
    timers = session.timers()
    if timers is not None:
        text += f", {timers:,} timer{'s' if timers != 1 else ''} fired"
    jumps = session.jumps()
    if jumps:
        text += f", {jumps:,} trio clock jump{'s' if jumps != 1 else ''}"
    runs = session.runs
    if runs > 1:
        text += f", {runs} runs"
    return text


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _flush(stream: IO[str]) -> None:
    with contextlib.suppress(OSError, ValueError):
        stream.flush()


def _command_plot(args: argparse.Namespace) -> int:
    from ._trace import NoSuchRows, plot_trace

    if not os.path.isfile(args.trace):
        _error(f"plot: no trace file {os.path.abspath(args.trace)!r}")
        return EXIT_USAGE
    output = args.output or str(Path(args.trace).with_suffix(".png"))
    try:
        rows = plot_trace(
            args.trace,
            output,
            size=args.size,
            title=args.title,
            max_rows=args.max_rows,
            rows=args.rows,
        )
    except ImportError as error:
        _error(str(error))
        return EXIT_ERROR
    except NoSuchRows as error:  # nothing is written: a bad --rows is a bad command line
        _error(f"plot: --{error}")
        return EXIT_USAGE
    except (ValueError, OSError) as error:
        _error(f"plot: {error}")
        return EXIT_ERROR
    print(f"virtualtime: wrote {output} ({rows} row{'s' if rows != 1 else ''})", file=sys.stderr)
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """The ``virtualtime`` command; returns the exit status (``python -m virtualtime``, too)."""
    if argv is None:
        argv = sys.argv[1:]
    parser = _build_parser()
    if argv and argv[0] not in ("run", "plot", "experiment") and not argv[0].startswith("-"):
        hint = f" (did you mean: virtualtime run {argv[0]}?)" if argv[0].endswith(".py") else ""
        _error(f"unknown command {argv[0]!r}; commands are run, plot and experiment{hint}")
        return EXIT_USAGE
    script_args: list[str] = []
    if argv and argv[0] == "run":
        ours, script_args = _split_run(argv[1:])
        argv = ["run", *ours]
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return _exit_code(exit_.code)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if args.command == "plot":
        return _command_plot(args)
    if args.command == "experiment":  # experiment hook (issue 17)
        from .experiment._cli import main as _experiment_main

        return _experiment_main(args)
    return _command_run(args, script_args)
