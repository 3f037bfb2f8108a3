"""The ``virtualtime`` command: run an unmodified async program in virtual time.

``virtualtime run script.py`` runs ``script.py`` as ``python script.py`` would, except that
every ``asyncio.run``, ``asyncio.Runner``, ``anyio.run`` and ``trio.run`` inside it runs in
virtual time: a program that sleeps for a day finishes in a fraction of a second, and prints
the same thing every time.  ``virtualtime plot`` draws the trace a run leaves behind.

The parts: :mod:`virtualtime.cli._args` (the arguments, their parsers, the exit statuses),
:mod:`virtualtime.cli._session` (a run: the seams it sets and what it counts) and
:mod:`virtualtime.cli._progress` (the progress bar).  :func:`main` is the console script.
"""

import argparse as _argparse
import os as _os
import sys as _sys
from pathlib import Path as _Path

from . import _args
from ._args import EXIT_DEADLOCK as EXIT_DEADLOCK
from ._args import EXIT_ERROR as EXIT_ERROR
from ._args import EXIT_INTERRUPTED as EXIT_INTERRUPTED
from ._args import EXIT_OK as EXIT_OK
from ._args import EXIT_UNTIL as EXIT_UNTIL
from ._args import EXIT_USAGE as EXIT_USAGE

__all__: tuple[str, ...] = (
    "EXIT_DEADLOCK",
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_UNTIL",
    "EXIT_USAGE",
    "main",
)


_BAD_PLOT_INPUT = (ValueError, TypeError, OSError, OverflowError)
"""What ``plot_trace`` raises for bad input: a malformed trace, a bad option, a path it cannot
read or write.  Each is a bad command line (status 2, one line); only a missing matplotlib is
status 1 (the input is fine, the installation is not), and anything else is a bug: a traceback.
"""


def _command_plot(args: _argparse.Namespace) -> int:
    from ..trace import NoSuchRows, plot_trace

    if not _os.path.isfile(args.trace):
        _args.error(f"plot: no trace file {_os.path.abspath(args.trace)!r}")
        return EXIT_USAGE
    output = args.output or _default_output(args.trace)
    try:
        rows = plot_trace(
            args.trace,
            output,
            size=args.size,
            title=args.title,
            max_rows=args.max_rows,
            rows=args.rows,
            internal=args.internal,
        )
    except ImportError as exc:
        _args.error(str(exc))
        return EXIT_ERROR
    except NoSuchRows as exc:  # nothing is written: a bad --rows is a bad command line
        _args.error(f"plot: --{NoSuchRows(exc.listing, exc.internal_rows, '--internal')}")
        return EXIT_USAGE
    except _BAD_PLOT_INPUT as exc:
        _args.error(f"plot: {_one_line(exc)}")
        return EXIT_USAGE
    print(f"virtualtime: wrote {output} ({rows} row{'s' if rows != 1 else ''})", file=_sys.stderr)
    return EXIT_OK


def _default_output(trace: str) -> str:
    """The picture of ``trace`` when no ``-o`` is given: never the trace file itself.

    ``run.json`` -> ``run.png``; a trace that is itself named ``*.png`` -> ``*.timeline.png``;
    and when the first choice is the trace under another name (a link), the second.
    """
    from ..trace._plot import _same_file

    path = _Path(trace)
    if path.suffix.lower() != ".png":
        first = path.with_suffix(".png")
        if not _same_file(path, first):
            return str(first)
    return str(path.with_suffix(".timeline.png"))


def _one_line(exc: BaseException) -> str:
    """``exc`` as one line: an OSError with its path, anything else its message's first line."""
    if isinstance(exc, OSError) and exc.strerror:
        where = f" {exc.filename!r}" if exc.filename is not None else ""
        return f"cannot use{where}: {exc.strerror}"
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    """The ``virtualtime`` command; returns the exit status (``python -m virtualtime``, too)."""
    if argv is None:
        argv = _sys.argv[1:]
    parser = _args.build_parser()
    commands = ("run", "plot", *_args.SUBCOMMANDS)
    if argv and argv[0] not in commands and not argv[0].startswith("-"):
        hint = f" (did you mean: virtualtime run {argv[0]}?)" if argv[0].endswith(".py") else ""
        _args.error(f"unknown command {argv[0]!r}; commands are {', '.join(commands)}{hint}")
        return EXIT_USAGE
    script_args: list[str] = []
    if argv and argv[0] == "run":
        ours, script_args = _args.split_run(argv[1:])
        argv = ["run", *ours]
    # A misspelt option gets "did you mean", for the parsers this command owns.
    if argv and argv[0] in parser.commands:
        wrong = _args.unknown_option(parser.commands[argv[0]], argv[1:], argv[0])
    else:
        wrong = _args.unknown_option(parser, _leading_options(argv))
    if wrong is not None:
        _args.error(wrong)
        return EXIT_USAGE
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return _args.exit_code(exit_.code)
    if args.command is None:
        parser.print_help(_sys.stderr)
        return EXIT_USAGE
    if args.command == "plot":
        return _command_plot(args)
    if args.command in _args.HANDLERS:
        return _args.HANDLERS[args.command](args)
    from ._session import command_run

    return command_run(args, script_args)


def _leading_options(argv: list[str]) -> list[str]:
    """The options before the command (``virtualtime --version``)."""
    lead: list[str] = []
    for token in argv:
        if not token.startswith("-"):
            break
        lead.append(token)
    return lead
