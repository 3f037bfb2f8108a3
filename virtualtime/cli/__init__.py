"""The ``virtualtime`` command: run an unmodified async program in virtual time.

``virtualtime run script.py`` runs ``script.py`` as ``python script.py`` would, except that
every ``asyncio.run``, ``asyncio.Runner``, ``anyio.run`` and ``trio.run`` inside it runs in
virtual time: a program that sleeps for a day finishes in a fraction of a second, and prints
the same thing every time.  ``virtualtime plot`` draws the trace a run leaves behind, and
``virtualtime explore`` runs a scenario under many seeds to find the orders that break it.

The parts: :mod:`virtualtime.cli._main` (:func:`main`, the console script, which picks the
command), :mod:`virtualtime.cli._args` (the arguments, their parsers, the exit statuses),
:mod:`virtualtime.cli._run` (the ``run`` command), :mod:`virtualtime.cli._session` (a run:
the seams it sets and what it counts), :mod:`virtualtime.cli._progress` (the progress bar),
:mod:`virtualtime.cli._plot` (the ``plot`` command) and :mod:`virtualtime.cli._explore` (the
``explore`` command: a scenario under many seeds, or one seed replayed).

Part of ``cli``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trio``,
``trace``, ``net``, ``api``, ``sim``, ``experiment`` (see tests/layout.py).
"""

from ._args import EXIT_DEADLOCK as EXIT_DEADLOCK
from ._args import EXIT_ERROR as EXIT_ERROR
from ._args import EXIT_INTERRUPTED as EXIT_INTERRUPTED
from ._args import EXIT_OK as EXIT_OK
from ._args import EXIT_UNTIL as EXIT_UNTIL
from ._args import EXIT_USAGE as EXIT_USAGE
from ._main import main as main

__all__: tuple[str, ...] = (
    "EXIT_DEADLOCK",
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_UNTIL",
    "EXIT_USAGE",
    "main",
)
