"""The ``virtualtime run`` command: find the script, run it inside a session, then report.

:func:`command_run` checks the command line (the script or ``-m`` module, ``--until`` against
``--start``, the ``--trace`` folder), runs the script as ``__main__`` the way ``python
script.py`` would, inside a :class:`~virtualtime.cli._session.Session` (the seams that make
its loops and clocks virtual) with the progress bar and the trace recorder when asked, and
turns how it ended into the exit status and the lines on stderr: the script's own traceback
without virtualtime's frames, the ``--until`` or deadlock message, the trace written, and the
one-line summary of virtual time against real time.

Part of ``cli``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trio``,
``trace``, ``net``, ``api``, ``sim``, ``experiment`` (see tests/layout.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import os
import random
import runpy
import sys
import time
import traceback
from dataclasses import dataclass
from typing import IO, Final

from .._shared._errors import DeadlockError
from .._shared._units import format_duration
from ._args import (
    EXIT_DEADLOCK,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNTIL,
    EXIT_USAGE,
    exit_code,
)
from ._args import error as _error
from ._progress import Progress
from ._session import Options, Session, Stop, UntilReached

__all__ = ["command_run"]


@dataclass
class _Target:
    path: str | None
    module: str | None
    args: list[str]

    @property
    def argv0(self) -> str:
        return self.path if self.path is not None else f"-m {self.module}"


_HIDDEN_FRAMES: Final = ("<frozen runpy>", "<frozen importlib._bootstrap>")


def _script_traceback(error: BaseException) -> str:
    """The script's traceback as ``python script.py`` prints it.

    Left out: the frames of this command and of runpy (python runs the script itself), and
    every frame of virtualtime -- the virtual loop's ``run_until_complete``, the trio guard --
    which are there only because the command swapped the loop or clock in.
    """
    hidden = {os.path.abspath(runpy.__file__ or "runpy")}
    te = traceback.TracebackException.from_exception(error)
    _prune(te, hidden)
    return "".join(te.format())


_PACKAGE_FOLDER: Final = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _hidden(filename: str, hidden: set[str]) -> bool:
    path = os.path.abspath(filename)
    return filename in _HIDDEN_FRAMES or path in hidden or path.startswith(_PACKAGE_FOLDER)


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
            # python names the main script by its absolute path (__file__, tracebacks).
            runpy.run_path(os.path.abspath(target.path), run_name="__main__")
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


def command_run(args: argparse.Namespace, script_args: list[str]) -> int:
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
    if args.perturb is not None and args.seed is None:
        _error(
            "--perturb says what the seed reorders: give --seed N too (without a seed the "
            "loop keeps its first-in first-out order)"
        )
        return EXIT_USAGE
    if args.trace is not None:
        args.trace = os.path.abspath(args.trace)  # the script may change directory
        folder = os.path.dirname(args.trace)
        if not os.path.isdir(folder):
            _error(f"--trace: cannot write {args.trace!r}: folder {folder!r} does not exist")
            return EXIT_USAGE
    options = Options(
        until=args.until,
        start=args.start,
        rate=args.rate,
        deadlock_timeout=args.deadlock_timeout,
        history=args.trace_limit if args.trace is not None else None,
        patch_time=args.patch_time,
        wall_start=args.wall_start,
        quiet=args.quiet,
        all_threads=args.all_threads,
        seed=args.seed,
        perturb=args.perturb,
    )
    notes = sys.stderr
    from ..trace import TraceRecorder

    recorder = TraceRecorder() if args.trace is not None else None
    session = Session(options, notes, recorder)
    random_state = random.getstate()
    if args.seed is not None:
        random.seed(args.seed)
    show_bar = args.until is not None and not args.quiet and _isatty(notes)
    began = time.perf_counter()
    status = EXIT_OK
    outcome: BaseException | None = None
    raised = False
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(session.installed())
            if recorder is not None:
                stack.enter_context(recorder)
            if show_bar:
                stack.enter_context(Progress(session, args.until, notes))
                session.notes = sys.stderr  # notes during the run go above the bar too
            _execute(target)
    except SystemExit as error:
        status = exit_code(error.code)
    except UntilReached as error:
        outcome = error
        status = EXIT_UNTIL
    except DeadlockError as error:
        outcome = error
        status = EXIT_DEADLOCK
    except KeyboardInterrupt:
        status = EXIT_INTERRUPTED
    except BaseException as error:  # the script's own failure: show it as python would
        interrupted, rest = _split_interrupt(error)
        if isinstance(error, asyncio.CancelledError) and session.first_stop is not None:
            outcome = UntilReached(session.first_stop)
            status = EXIT_UNTIL
        elif interrupted:
            # Ctrl-C inside a trio nursery (or a TaskGroup) arrives wrapped in a group: it is
            # still Ctrl-C.  Whatever else the group holds, beyond the cancellations the
            # interrupt caused, is shown.
            status = EXIT_INTERRUPTED
            if rest is not None:
                _flush(sys.stdout)
                print(_script_traceback(rest), end="", file=sys.stderr, flush=True)
        else:
            _flush(sys.stdout)
            print(_script_traceback(error), end="", file=sys.stderr, flush=True)
            status = EXIT_ERROR
            raised = True
    finally:
        real = time.perf_counter() - began
        random.setstate(random_state)
        _flush(sys.stdout)
        session.close_left_open()
        session.retire_all()

    if isinstance(outcome, DeadlockError):
        print(f"virtualtime: {outcome}", file=sys.stderr, flush=True)
    elif isinstance(outcome, UntilReached):
        stop = outcome.args[0] if outcome.args else None
        print(_until_message(stop, args.until), file=sys.stderr, flush=True)
    elif status == EXIT_INTERRUPTED:
        now = session.current_time()
        where = f" at virtual time {format_duration(now)}" if now is not None else ""
        print(f"virtualtime: interrupted{where}", file=sys.stderr, flush=True)

    if recorder is not None:
        try:
            count = recorder.write(str(args.trace), command=_command_line(target))
        except OSError as error:
            _error(f"--trace: cannot write {args.trace!r}: {error.strerror or error}")
            return status or EXIT_ERROR
        session.note(f"trace of {count:,} events written to {args.trace}")

    # After the script's traceback nothing more is said, as python says nothing more; and
    # "never started an event loop" is only worth saying of a script that ran to its end.
    if not args.quiet and not raised and (session.seen or status == EXIT_OK):
        print(_summary(session, real), file=sys.stderr, flush=True)
    return status


def _split_interrupt(error: BaseException) -> tuple[bool, BaseException | None]:
    """Whether ``error`` is a group holding a Ctrl-C; and what else it holds, if anything.

    Cancellations (``asyncio.CancelledError``, ``trio.Cancelled``) are the interrupt's own
    doing and are dropped from the rest.
    """
    if not isinstance(error, BaseExceptionGroup):
        return False, None
    interrupts, rest = error.split(KeyboardInterrupt)
    if interrupts is None:
        return False, None
    if rest is not None:
        cancelled: tuple[type[BaseException], ...] = (asyncio.CancelledError,)
        trio = sys.modules.get("trio")
        if trio is not None:
            cancelled += (trio.Cancelled,)
        rest = rest.split(cancelled)[1]
    return True, rest


def _command_line(target: _Target) -> str:
    return " ".join([target.argv0, *target.args])


def _until_message(stop: object, until: float) -> str:
    if not isinstance(stop, Stop):
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


def _summary(session: Session, real: float) -> str:
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
