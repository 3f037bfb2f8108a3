"""The command line's words: its arguments, their parsers, and its exit statuses.

Nothing here runs anything: :func:`build_parser` describes ``virtualtime run`` and
``virtualtime plot`` (and any subcommand in :data:`SUBCOMMANDS`), and the ``*_arg`` parsers
turn text into values, checking loop options with the options catalogue so that
``--start``/``--rate``/``--wall-start`` refuse what ``start=``/``rate=``/``wall_start=`` refuse,
with the same message.

Part of ``cli``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trio``,
``trace``, ``net``, ``api``, ``sim``, ``experiment`` (see tests/layout.py).
"""

from __future__ import annotations

import argparse
import datetime
import difflib
import math
import re
import sys
from collections.abc import Callable, Sequence
from typing import IO, Any, Final

from .._options import check_option
from .._shared._units import count_arg, parse_time

__all__ = [
    "EXIT_DEADLOCK",
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_UNTIL",
    "EXIT_USAGE",
    "SUBCOMMANDS",
    "build_parser",
    "error",
    "exit_code",
    "split_run",
    "unknown_option",
]

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

_DEFAULT_TRACE_LIMIT: Final = 1_000_000

_EPILOG: Final = """\
examples:
  virtualtime run examples/retry.py               a day of retries in a fraction of a second
  virtualtime run --until 6h --trace out.json sim.py --workers 4
  virtualtime run --rate 60 sim.py                watch it at a minute per second
  virtualtime run -m mypackage.service            run a module, like python -m
  virtualtime plot out.json -o timeline.png       draw the trace as a timeline
  virtualtime explore tests/scenarios.py:main --seeds 1000   hunt ordering bugs by seed

exit status: the script's own, or 1 if it raised, 2 for a bad command line,
3 when --until stopped it, 4 on a deadlock, 130 when interrupted.
`virtualtime plot` exits 2 for any bad input (a bad option, a missing or malformed trace).
"""

_RUN_EPILOG: Final = """\
Times (--until, --start) are virtual seconds, or durations such as 90s, 15m, 36h, 2d, 1h30m;
--deadlock-timeout is real seconds (or inf).  Options go before the script; everything after
the script is passed to it.  A program that listens for connections (a server) waits for
clients from outside until Ctrl-C or --until, instead of being reported as deadlocked.

examples:
  virtualtime run examples/retry.py
  virtualtime run --until 1d --seed 7 --trace day.json sim.py --vehicles 12
"""


SUBCOMMANDS: dict[str, Callable[[Any], None]] = {}
"""Further subcommands: name -> a function that adds its parser to ``parser.add_subparsers()``.

The ``virtualtime`` command dispatches ``args.command`` to :data:`HANDLERS` for these.
"""

HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {}
"""name -> the function that runs a subcommand of :data:`SUBCOMMANDS`; returns the status."""


def _add_experiment(commands: Any) -> None:
    # The parser needs only the standard library; numpy and the executors load when it runs.
    from ..experiment._cli import add_subcommand

    add_subcommand(commands)


def _run_experiment(args: argparse.Namespace) -> int:
    from ..experiment._cli import main

    return main(args)


SUBCOMMANDS["experiment"] = _add_experiment
HANDLERS["experiment"] = _run_experiment

# --------------------------------------------------------------------------- small parsers


def _time_arg(text: str) -> float:
    try:
        return parse_time(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _start_arg(text: str) -> float:
    """``--start``: a duration, then the options catalogue's own check (the horizon)."""
    seconds = _time_arg(text)
    try:
        start: float = check_option("start", seconds)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return start


def _rate_arg(text: str) -> float:
    """``--rate``: a number, checked by the options catalogue like ``rate=`` everywhere."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number (virtual seconds per real second; 0 = no pacing), got {text!r}"
        ) from None
    try:
        rate: float = check_option("rate", value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return rate


def _deadlock_timeout_arg(text: str) -> float:
    """``--deadlock-timeout``: real seconds (a duration) or ``inf``, checked like the option."""
    if text.strip().lower() in ("inf", "never"):
        return math.inf
    try:
        seconds = parse_time(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            "expected real seconds (0.25), a duration (250ms, 2s) or inf (never report a "
            f"deadlock), got {text!r}"
        ) from None
    try:
        timeout: float = check_option("deadlock_timeout", seconds)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return timeout


def _wall_start_arg(text: str) -> datetime.datetime:
    """``--wall-start``: ISO 8601; naive means local time, as the marker's ``wall_start=``."""
    try:
        value = datetime.datetime.fromisoformat(text)
        check_option("wall_start", value)
    except (TypeError, ValueError) as error:
        raise argparse.ArgumentTypeError(
            f"expected an ISO 8601 date and time (2030-01-01T00:00:00Z; without an offset it "
            f"is local time), got {text!r} ({error})"
        ) from None
    return value


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
    {
        "--until",
        "--start",
        "--rate",
        "--deadlock-timeout",
        "--trace",
        "--trace-limit",
        "--seed",
        "--perturb",
        "--wall-start",
    }
)


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that remembers its options and its own subcommands' parsers.

    The command checks the options it owns with :func:`unknown_option` before argparse sees
    them, so that a misspelt option gets "did you mean" on every Python (argparse only
    learned to suggest in 3.14, and not for options).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.takes_value: dict[str, bool] = {}
        """Every option string -> whether it takes a value (``--until T``) or not (``-q``)."""
        self.commands: dict[str, Parser] = {}
        """The subcommands whose options :func:`unknown_option` checks: ``run`` and ``plot``."""
        super().__init__(*args, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        for option in action.option_strings:
            self.takes_value[option] = action.nargs != 0
        return action


def build_parser() -> Parser:
    """The parser of every subcommand (``run``, ``plot``, and those in :data:`SUBCOMMANDS`)."""
    from .._version import __version__

    parser = Parser(
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
    parser.commands["run"] = _add_run(commands)
    parser.commands["plot"] = _add_plot(commands)
    for add in SUBCOMMANDS.values():  # further subcommands register here (see SUBCOMMANDS)
        add(commands)
    return parser


def _add_run(commands: Any) -> Parser:
    run: Parser = commands.add_parser(
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
        "--start", type=_start_arg, metavar="T", help="virtual time to start at (default 0)"
    )
    run.add_argument(
        "--rate",
        type=_rate_arg,
        metavar="R",
        help="pace virtual time at R x real time, to watch it (default 0: as fast as possible)",
    )
    run.add_argument(
        "--deadlock-timeout",
        type=_deadlock_timeout_arg,
        metavar="S",
        help="real seconds to wait, when nothing at all can happen, for something outside to "
        "wake the program before reporting a deadlock (status 4); inf: never (default 0.25)",
    )
    run.add_argument(
        "--trace",
        metavar="FILE",
        help="write what happened when as a Chrome trace (open in ui.perfetto.dev, or "
        "`virtualtime plot FILE`)",
    )
    run.add_argument(
        "--trace-limit",
        type=count_arg(1),
        default=_DEFAULT_TRACE_LIMIT,
        metavar="N",
        help=f"keep at most the latest N timers per loop for --trace ({_DEFAULT_TRACE_LIMIT:,})",
    )
    run.add_argument(
        "--seed",
        type=count_arg(0),
        metavar="N",
        help="seed `random` and the loop (the order of same-instant timers) so a run repeats",
    )
    run.add_argument(
        "--perturb",
        choices=("timers", "ready"),
        help="with --seed: what the seed reorders, same-instant timers (default) or also the "
        "task steps made ready in one loop round",
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
    return run


def _add_plot(commands: Any) -> Parser:
    plot: Parser = commands.add_parser(
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
        help="image to write; .png, .svg or .pdf, never TRACE itself (default: TRACE with "
        ".png, or with .timeline.png when TRACE ends in .png)",
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
        "--max-rows", type=count_arg(1), default=40, metavar="N", help="rows to draw (40)"
    )
    plot.add_argument(
        "--rows",
        action="append",
        metavar="PATTERN",
        help="draw only rows whose name matches (shell-style, e.g. 'vehicle *'; repeatable)",
    )
    plot.add_argument(
        "--internal",
        action="store_true",
        help="also draw virtualtime's own rows (named virtualtime...: a vehicle's stepping "
        "task, the --until task), hidden by default",
    )
    return plot


def split_run(argv: Sequence[str]) -> tuple[list[str], list[str]]:
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


_NUMBER: Final = re.compile(r"-\.?\d")


def unknown_option(parser: Parser, tokens: Sequence[str], where: str = "") -> str | None:
    """The error for the first option in ``tokens`` that ``parser`` does not have, or None.

    ``tokens`` are the options (and their values) given to ``parser``; scanning stops at
    ``--``.  A close match is suggested: ``--untill`` -> "did you mean --until?".  ``where``
    names the subcommand in the message (``"run"``).
    """
    known = parser.takes_value
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token == "--":
            return None
        if not token.startswith("-") or token == "-" or _NUMBER.match(token):
            continue
        name = token.split("=", 1)[0] if token.startswith("--") else token[:2]
        if name in known:
            if known[name] and "=" not in token and len(token) == len(name):
                i += 1  # its value, whatever it looks like
            continue
        close = difflib.get_close_matches(name, [o for o in known if o.startswith("--")], n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        command = f"virtualtime {where}".strip()
        prefix = f"{where}: " if where else ""
        return f"{prefix}unknown option {name}{hint}; see {command} --help"
    return None


def error(message: str, stream: IO[str] | None = None) -> None:
    """Print ``virtualtime: error: message`` to stderr."""
    print(f"virtualtime: error: {message}", file=stream or sys.stderr, flush=True)


def exit_code(code: object) -> int:
    """Exit status for ``SystemExit(code)``, as the interpreter computes it."""
    if code is None:
        return EXIT_OK
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return EXIT_ERROR
