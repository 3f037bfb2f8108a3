"""The console script ``virtualtime``: pick the command, check its options, hand it over.

:func:`main` builds the parser (:mod:`._args`), answers a misspelt command or option with
"did you mean", and runs ``run`` (:mod:`._run`, imported only then), ``plot`` (:mod:`._plot`),
``explore`` (:mod:`._explore`, registered here) or a subcommand another part plugged in
(``experiment``).  It returns the exit status;
``virtualtime`` and ``python -m virtualtime`` both call it.

Part of ``cli``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trio``,
``trace``, ``net``, ``api``, ``sim``, ``experiment`` (see tests/layout.py).
"""

import sys as _sys

from . import _args
from ._args import EXIT_USAGE
from ._explore import add_subcommand as _add_explore
from ._explore import command_explore as _command_explore
from ._plot import _command_plot

# ``virtualtime explore`` (its module imports _args, so it registers here, not in _args).
_args.SUBCOMMANDS["explore"] = _add_explore
_args.HANDLERS["explore"] = _command_explore


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
    from ._run import command_run

    return command_run(args, script_args)


def _leading_options(argv: list[str]) -> list[str]:
    """The options before the command (``virtualtime --version``)."""
    lead: list[str] = []
    for token in argv:
        if not token.startswith("-"):
            break
        lead.append(token)
    return lead
