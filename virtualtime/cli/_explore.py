"""``virtualtime explore``: run a scenario under many seeds, or replay one seed.

``virtualtime explore tests/scenarios.py:main --seeds 1000`` runs the scenario (an ``async
def`` taking no arguments, named ``file.py:function`` or ``module:function``) under seeds 0
to 999 with :func:`virtualtime.net.explore`, prints the summary and each failure's replay
line, and exits with status 1 when a seed failed.  ``--seed 17`` replays one seed with
:func:`virtualtime.net.replay` -- the line a failure printed -- and shows its traceback;
``--keep 1,5,9`` keeps only those deviations (a shrunk failure's), ``--trace out.png``
records the replay (or, with ``--seeds``, the replay of the first failure) as a timeline or,
for ``.json``, a Chrome trace.  ``--shrink`` shrinks the first failure before printing it.

:func:`add_subcommand` adds the parser (standard library only); :func:`command_explore` runs
it and returns the exit status.

Part of ``cli``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trio``,
``trace``, ``net``, ``api``, ``sim``, ``experiment`` (see tests/layout.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Callable
from typing import IO, Any, Final

from .._shared._units import count_arg
from ._args import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from ._args import error as _error

__all__ = ["add_subcommand", "command_explore"]

_DEFAULT_SEEDS: Final = 100

_EPILOG: Final = """\
SCENARIO is `file.py:function` or `module:function`: an `async def` taking no arguments that
sets up the system, drives it and asserts.  Each seed orders what the program leaves open
(same-instant timers; with --perturb ready, also the task steps ready in one round) and seeds
`random` and os.urandom; the same seed always gives the same run.

examples:
  virtualtime explore tests/scenarios.py:election --seeds 1000 --processes 2
  virtualtime explore tests/scenarios.py:election --seeds 1000 --shrink --trace failure.png
  virtualtime explore tests/scenarios.py:election --seed 17 --keep 3,8   (a replay line)
  virtualtime explore tests/scenarios.py:election --seeds 200 --check-determinism

exit status: 0 no seed failed, 1 some seed failed (each is listed with its replay line),
2 bad command line, a scenario that cannot be loaded, or a --trace that could not be
written (of a run that passed), 130 interrupted.
"""


def _keep(text: str) -> frozenset[int]:
    """``--keep 1,5,9`` (or ``none``: keep no deviation, the unseeded order)."""
    if text.strip().lower() in ("", "none"):
        return frozenset()
    try:
        indices = frozenset(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected decision indices separated by commas (1,5,9) or none, got {text!r}"
        ) from None
    if any(index < 0 for index in indices):
        raise argparse.ArgumentTypeError(f"decision indices are >= 0, got {text!r}")
    return indices


def add_subcommand(commands: Any) -> None:
    """Add ``explore`` to the ``virtualtime`` parser's subcommands."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "explore",
        help="run a scenario under many seeds, or replay one seed",
        description=(
            "Run SCENARIO under many seeds and report the seeds that fail, each with the "
            "command that replays it; or replay one seed."
        ),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("scenario", metavar="SCENARIO", help="file.py:function or module:function")
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--seeds",
        type=count_arg(1),
        metavar="N",
        help=f"run seeds 0 to N-1 (default {_DEFAULT_SEEDS})",
    )
    which.add_argument("--seed", type=count_arg(0), metavar="S", help="replay seed S only")
    parser.add_argument(
        "--keep",
        type=_keep,
        metavar="I,J,...",
        help="with --seed: keep only these deviations of the seed (a shrunk failure's replay "
        "line says which); none: the unseeded order",
    )
    parser.add_argument(
        "--perturb",
        choices=("timers", "ready"),
        default="timers",
        help="what the seed reorders: same-instant timers (default), or also the task steps "
        "made ready in one loop round",
    )
    parser.add_argument(
        "--check-determinism",
        action="store_true",
        help="run each seed twice and fail the seeds whose two runs differ",
    )
    parser.add_argument(
        "--processes",
        type=count_arg(1),
        metavar="N",
        help="run the seeds in N worker processes (their PYTHONHASHSEED is fixed)",
    )
    parser.add_argument(
        "--max-failures",
        type=count_arg(1),
        metavar="N",
        help="stop after N failures",
    )
    parser.add_argument(
        "--shrink",
        action="store_true",
        help="shrink the first failure to the fewest deviations that still fail",
    )
    parser.add_argument(
        "--trace",
        metavar="FILE",
        help="record the replay (of --seed, or of the first failure) as a timeline picture "
        "(.png, .svg, .pdf) or a Chrome trace (.json)",
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="only the summary and the replay lines"
    )


def command_explore(args: argparse.Namespace) -> int:
    """Run ``virtualtime explore`` from its parsed arguments; return the exit status."""
    from .._shared._errors import VirtualTimeError
    from ..net._targets import load_target

    if args.keep is not None and args.seed is None:
        _error("explore: --keep replays one run: give --seed S too")
        return EXIT_USAGE
    if args.keep is not None and args.check_determinism:
        _error("explore: --keep replays one run; it does not combine with --check-determinism")
        return EXIT_USAGE
    if args.seed is not None:
        clash = [
            flag
            for flag, given in (
                ("--shrink", args.shrink),
                ("--processes", args.processes is not None),
                ("--max-failures", args.max_failures is not None),
            )
            if given
        ]
        if clash:
            _error(
                f"explore: --seed S replays one seed; {', '.join(clash)} "
                f"{'is' if len(clash) == 1 else 'are'} for exploring many (--seeds N): drop "
                f"{'it' if len(clash) == 1 else 'them'}, or give --seeds"
            )
            return EXIT_USAGE
    try:
        main = load_target(args.scenario)
    except (VirtualTimeError, ImportError, SyntaxError, OSError) as exc:
        _error(f"explore: cannot load {args.scenario}: {type(exc).__name__}: {exc}")
        return EXIT_USAGE
    try:
        from ..net._scenario import scenario

        scenario(main, {}, "explore")  # main must take no arguments
        if args.trace is not None:
            from ..net._replay import check_trace

            check_trace(args.trace)  # a bad --trace is told before anything runs
        if args.seed is not None and not args.check_determinism:
            return _replay(main, args)
        return _explore(main, args)
    except KeyboardInterrupt:
        print("virtualtime: explore: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    except (VirtualTimeError, ImportError) as exc:  # no scenario; a bad --trace; no matplotlib
        _error(f"explore: {exc}")
        return EXIT_USAGE


def _replay(main: Callable[[], Any], args: argparse.Namespace) -> int:
    from ..net._replay import replay_run
    from ..net._runs import NotAScenarioError

    kept = ""
    if args.keep is not None:
        kept = f", keeping deviation{'s' if len(args.keep) != 1 else ''} "
        kept += ",".join(map(str, sorted(args.keep))) or "none"
    where = f"seed {args.seed} (perturb={args.perturb}{kept})"
    done = replay_run(main, args.seed, keep=args.keep, perturb=args.perturb, trace=args.trace)
    exc = done.error
    if exc is not None:
        if isinstance(exc, NotAScenarioError) or not isinstance(
            exc, (Exception, asyncio.CancelledError)
        ):
            raise exc  # a usage error, or an interrupt: told by the caller
        _flush(sys.stdout)
        if not args.quiet:
            from ._run import _script_traceback  # the scenario's frames, not virtualtime's

            print(_script_traceback(exc), end="", file=sys.stderr)
        print(f"{args.scenario}: {where} failed: {type(exc).__name__}: {exc}", flush=True)
        _trace_told(args.trace, done.trace_error)
        return EXIT_ERROR
    shown = repr(done.result)
    shown = shown if len(shown) <= 200 else shown[:197] + "..."
    print(f"{args.scenario}: {where} passed (returned {shown})", flush=True)
    return EXIT_OK if _trace_told(args.trace, done.trace_error) else EXIT_USAGE


def _explore(main: Callable[[], Any], args: argparse.Namespace) -> int:
    from ..net._explore import explore

    seeds = range(args.seeds or _DEFAULT_SEEDS) if args.seed is None else [args.seed]
    found = explore(
        main,
        seeds,
        perturb=args.perturb,
        check_determinism=args.check_determinism,
        processes=args.processes,
        max_failures=args.max_failures,
    )
    failures = list(found.failures)
    if failures and args.shrink:
        first = failures[0].shrink()
        if first is not failures[0]:
            print(
                f"shrunk seed {first.seed}: it needs {len(first.keep or ())} of its "
                f"{failures[0].deviations} seeded decisions",
                flush=True,
            )
        failures[0] = first
        found = _with_failures(found, failures)
    if failures and not args.quiet:
        text = failures[0].traceback
        if text:
            _flush(sys.stdout)
            print(f"first failure, seed {failures[0].seed}:", file=sys.stderr)
            print(text, end="", file=sys.stderr, flush=True)
    print(found, flush=True)
    if not failures and args.trace is not None:
        print("virtualtime: no seed failed: no trace written", file=sys.stderr, flush=True)
    if failures and args.trace is not None:
        _trace_first(main, failures[0], args.trace)
    return EXIT_ERROR if failures else EXIT_OK


def _trace_first(main: Callable[[], Any], first: Any, trace: str) -> None:
    """Run the first failure again under the trace recorder (it fails again: the trace shows
    how); say where the trace went -- and when that run passed after all."""
    from ..net._replay import replay_run

    done = replay_run(main, first.seed, keep=first.keep, perturb=first.perturb, trace=trace)
    error = done.error
    if error is not None and not isinstance(error, (Exception, asyncio.CancelledError)):
        raise error  # an interrupt: told by the caller
    if error is None:
        from ..net._entropy import hash_seed

        if first.kind == "nondeterministic":
            why = "two runs of it differ: this one passed"
        elif first.hash_seed is not None and first.hash_seed != hash_seed():
            why = f"it failed under PYTHONHASHSEED={first.hash_seed}, which this process lacks"
        else:
            why = "the run is not a function of its seed: try --check-determinism"
        print(
            f"virtualtime: seed {first.seed} passed when run again for the trace ({why}): "
            "the trace shows that passing run",
            file=sys.stderr,
            flush=True,
        )
    _trace_told(trace, done.trace_error)


def _with_failures(found: Any, failures: list[Any]) -> Any:
    import dataclasses

    return dataclasses.replace(found, failures=tuple(failures))


def _trace_told(trace: str | None, error: BaseException | None) -> bool:
    """Say whether the trace was written (to stderr); True unless writing it failed."""
    if trace is None:
        return True
    if error is not None:
        _error(f"explore: the trace was not written to {trace}: {type(error).__name__}: {error}")
        return False
    print(f"virtualtime: trace written to {trace}", file=sys.stderr, flush=True)
    return True


def _flush(stream: IO[str]) -> None:
    with contextlib.suppress(OSError, ValueError):
        stream.flush()
