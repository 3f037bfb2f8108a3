"""The ``virtualtime plot`` command: draw a trace file's timeline, one line per bad input.

:func:`_command_plot` draws the picture with :func:`virtualtime.trace.plot_trace` (imported
when the command runs, so the command line stays light) and maps what can go wrong to exit
statuses: a bad trace, option or path is a bad command line (status 2, one line), a missing
matplotlib is status 1, and anything else is a bug with its traceback.  Without ``-o`` the
picture is written next to the trace, never over it.

Part of ``cli``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trio``,
``trace``, ``net``, ``api``, ``sim``, ``experiment`` (see tests/layout.py).
"""

import argparse as _argparse
import os as _os
import sys as _sys
from pathlib import Path as _Path

from . import _args
from ._args import EXIT_ERROR, EXIT_OK, EXIT_USAGE

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
