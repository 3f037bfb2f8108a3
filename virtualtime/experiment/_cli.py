"""``virtualtime experiment``: replications and sweeps from the command line.

Self-contained: :func:`add_subcommand` adds the sub-command to the ``virtualtime`` parser,
:func:`main` runs it from the parsed namespace and returns the exit status.  Only the
standard library is imported at parser-building time; numpy, scipy, rich and matplotlib are
imported when the command runs.

Part of ``experiment``: may import ``shared``, ``options``, ``engine``, ``trio``, ``trace``,
``api``, ``sim`` (see tests/layout.py).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["add_subcommand", "main", "run"]

EXIT_OK = 0
EXIT_FAILURES = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

_EPILOG = """\
examples:
  virtualtime experiment model.py:model --replications 200 --param servers=1,2,3 \\
      --param rate=0.8 --seed 1 --out results.parquet --plot results.png
  virtualtime experiment model.py:model -n 10 --half-width 0.05 --relative --max-n 2000
  virtualtime experiment model.py:model -n 400 --executor processes
  virtualtime experiment model.py:model -n 400 --executor dask://127.0.0.1:8786
  virtualtime experiment model.py:model -n 400 --executor ray

The model is `async def model(params, rng) -> {"output": number, ...}` (or a plain
function); params holds the --param values, rng is a numpy Generator for that replication.
Exit status: 0 all replications finished, 1 some raised (listed, with how to re-run one),
2 bad command line, 130 interrupted (what finished is still written).
"""


def _param(text: str) -> tuple[str, list[Any]]:
    name, sep, values = text.partition("=")
    name = name.strip()
    if not sep or not name.isidentifier() or not values.strip():
        raise argparse.ArgumentTypeError(
            f"a parameter is NAME=VALUE[,VALUE...] with NAME an identifier, got {text!r}"
        )
    return name, [_value(v.strip()) for v in values.split(",")]


def _value(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    if text in ("true", "false", "True", "False"):
        return text in ("true", "True")
    return text


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}")
    return value


def _width(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def add_subcommand(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``experiment`` to a ``virtualtime`` parser's sub-commands; returns its parser."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "experiment",
        help="replicate a model or sweep its parameters, with confidence intervals",
        description=(
            "Run MODEL many times on seeded random streams, in this process, on every core, "
            "or on a Dask or Ray cluster; print a summary with t-intervals."
        ),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("model", metavar="MODEL", help="file.py:function or module:function")
    parser.add_argument(
        "-n",
        "--replications",
        type=_positive,
        default=10,
        metavar="N",
        help="replications per scenario (with --half-width: the first batch); default 10",
    )
    parser.add_argument(
        "-p",
        "--param",
        action="append",
        type=_param,
        default=[],
        metavar="NAME=V[,V...]",
        help="a parameter and its values (repeatable; several values make a sweep)",
    )
    parser.add_argument(
        "--executor",
        default="serial",
        metavar="WHERE",
        help="serial (default), processes[:N], dask://HOST:PORT, ray or ray://ADDRESS",
    )
    parser.add_argument("--seed", type=_seed, metavar="N", help="root seed (default: drawn)")
    parser.add_argument(
        "--no-crn",
        action="store_true",
        help="independent streams per scenario (default: common random numbers)",
    )
    parser.add_argument(
        "--baseline",
        type=int,
        default=0,
        metavar="K",
        help="scenario index the paired differences are taken against (0)",
    )
    parser.add_argument(
        "--confidence", type=_fraction, default=0.95, metavar="C", help="interval level (0.95)"
    )
    parser.add_argument(
        "--half-width",
        type=_width,
        metavar="H",
        help="add replications until every interval's half-width is at most H",
    )
    parser.add_argument(
        "--relative", action="store_true", help="--half-width is relative to |mean|"
    )
    parser.add_argument(
        "--output",
        dest="outputs",
        action="append",
        metavar="NAME",
        help="the output(s) --half-width applies to (default: all)",
    )
    parser.add_argument(
        "--max-n",
        type=_positive,
        default=1000,
        metavar="N",
        help="most replications per scenario for --half-width (1000)",
    )
    parser.add_argument(
        "-o", "--out", metavar="FILE", help="write the replication table (.parquet or .csv)"
    )
    parser.add_argument(
        "--plot", metavar="FILE", help="draw means and intervals (.png, .svg or .pdf)"
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="no progress bar (the summary still prints)"
    )
    return parser


def main(args: argparse.Namespace) -> int:
    """Run ``virtualtime experiment`` from its parsed arguments; returns the exit status."""
    try:
        from ._requires import require_numpy_and_scipy

        require_numpy_and_scipy()
        from ._model import ModelRef
        from ._run import sweep
    except ImportError as error:
        print(f"virtualtime: experiment: {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        model = ModelRef.parse(args.model)
        model.resolve()
    except (ValueError, ImportError, AttributeError, TypeError, SyntaxError) as error:
        print(f"virtualtime: experiment: cannot load {args.model}: {error}", file=sys.stderr)
        return EXIT_USAGE
    names = [name for name, _ in args.param]
    duplicate = {n for n in names if names.count(n) > 1}
    if duplicate:
        print(
            f"virtualtime: experiment: --param {sorted(duplicate)[0]} is given more than once",
            file=sys.stderr,
        )
        return EXIT_USAGE
    for target in (args.out, args.plot):
        if target and not Path(target).resolve().parent.is_dir():
            print(f"virtualtime: experiment: no directory for {target}", file=sys.stderr)
            return EXIT_USAGE
    if args.out and Path(args.out).suffix.lower() not in (".parquet", ".pq", ".csv"):
        print(
            f"virtualtime: experiment: --out must end in .parquet or .csv, got {args.out!r}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args.plot:
        from ._plot import PICTURE_SUFFIXES

        if Path(args.plot).suffix.lower() not in PICTURE_SUFFIXES:
            print(
                f"virtualtime: experiment: --plot must end in {', '.join(PICTURE_SUFFIXES)}, "
                f"got {args.plot!r}",
                file=sys.stderr,
            )
            return EXIT_USAGE
    grid = dict(args.param)
    bar = _Bar(enabled=not args.quiet)
    try:
        results = sweep(
            model,
            grid,
            replications=args.replications,
            seed=args.seed,
            executor=args.executor,
            crn=not args.no_crn,
            baseline=args.baseline,
            confidence=args.confidence,
            half_width=args.half_width,
            relative=args.relative,
            outputs=args.outputs,
            max_n=args.max_n,
            progress=bar.update,
        )
    except (ValueError, TypeError, ImportError) as error:
        bar.stop()
        print(f"virtualtime: experiment: {error}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        bar.stop()
    _print_summary(results)
    if args.out and results.rows:
        results.write(args.out)
        print(f"virtualtime: wrote {args.out} ({len(results.rows)} rows)", file=sys.stderr)
    if args.plot and results.rows:
        results.plot(args.plot, title=str(model.name))
        print(f"virtualtime: wrote {args.plot}", file=sys.stderr)
    if results.failures:
        first = results.failures[0]
        print(
            f"virtualtime: {len(results.failures)} replication(s) raised; the first: scenario "
            f"{first.scenario} replication {first.replication}: {first.error}\n"
            f"  re-run it alone: virtualtime.experiment.run_one({str(model)!r}, "
            f"{dict(first.params)!r}, seed={first.seed}, stream={first.stream!r})",
            file=sys.stderr,
        )
    if results.interrupted:
        print("virtualtime: interrupted; the results above are what finished", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_FAILURES if results.failures else EXIT_OK


def run(argv: Sequence[str]) -> int:
    """``virtualtime experiment ARGS`` on its own (for tests and ``python -m``)."""
    parser = argparse.ArgumentParser(prog="virtualtime", allow_abbrev=False)
    add_subcommand(parser.add_subparsers(dest="command"))
    try:
        args = parser.parse_args(["experiment", *argv])
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    return main(args)


class _Bar:
    """A rich progress bar: done/total, ETA, and the widest current half-width per output."""

    def __init__(self, *, enabled: bool) -> None:
        self._progress: Any = None
        self._task: Any = None
        if not enabled or not sys.stderr.isatty():
            return
        try:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
            )
        except ImportError:
            return
        from rich.console import Console

        self._progress = Progress(
            TextColumn("replications"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[widths]}"),
            console=Console(stderr=True),
            transient=True,
        )
        self._progress.start()
        self._task = self._progress.add_task("run", total=None, widths="")

    def update(self, state: Any) -> None:
        if self._progress is None:
            return
        worst: dict[str, float] = {}
        for (_, name), width in state.half_widths.items():
            if not math.isnan(width):
                worst[name] = max(worst.get(name, 0.0), width)
        widths = "  ".join(f"{n} ±{w:.3g}" for n, w in worst.items())
        failed = f"  ({state.failed} failed)" if state.failed else ""
        self._progress.update(
            self._task, completed=state.done, total=state.total, widths=widths + failed
        )

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def _print_summary(results: Any) -> None:
    from ._labels import format_number, scenario_label

    summary = results.summary()
    differences = {(d.scenario, d.output): d for d in results.differences()}
    headers = ["scenario", "output", "n", "mean", "± half-width", "vs baseline"]
    rows = []
    for s in summary:
        d = differences.get((s.scenario, s.output))
        diff = (
            f"{format_number(d.mean)} ± {format_number(d.half_width)}"
            if d is not None
            else "(baseline)"
            if len(results.scenarios) > 1
            else ""
        )
        rows.append(
            [
                scenario_label(results, s.scenario),
                s.output,
                str(s.n),
                format_number(s.mean),
                format_number(s.half_width),
                diff,
            ]
        )
    title = (
        f"{len(results.rows)} replication(s), seed {results.seed}, "
        f"{results.confidence:.0%} t-intervals, executor {results.executor}"
    )
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(title)
        print("  ".join(headers))
        for row in rows:
            print("  ".join(row))
        return
    table = Table(title=title)
    for i, header in enumerate(headers):
        table.add_column(header, justify="right" if i >= 2 else "left")
    for row in rows:
        table.add_row(*row)
    Console(width=max(100, _columns())).print(table)
    if results.target_met is not None:
        for index, met in enumerate(results.target_met):
            state = "met" if met else "NOT met (max-n reached)"
            print(
                f"half-width target {state} for {scenario_label(results, index)} "
                f"after {results.attempted[index]} replications"
            )


def _columns() -> int:
    import shutil

    return shutil.get_terminal_size((100, 24)).columns


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run(sys.argv[1:]))
